//! TLB invalidation.
//!
//! Kernel mappings are global, so an invalidation must reach every CPU: x86
//! sends IPIs and runs `invlpg` on each, arm64 broadcasts `tlbi …is` in the
//! inner-shareable domain, ia64 broadcasts `ptc.ga`. Past some number of pages
//! a full flush is cheaper than page-by-page invalidation; Linux x86 puts that
//! ceiling at 33 pages (`tlb_single_page_flush_ceiling`, chosen in 2014 as
//! "~100 ns per single-page flush, so about 3 µs at most").

use crate::VirtAddr;

/// Linux x86's `tlb_single_page_flush_ceiling`: ranges of more pages than this
/// are flushed whole.
pub const DEFAULT_FLUSH_CEILING_PAGES: u64 = 33;

/// Invalidates translations on every CPU that may hold them.
pub trait TlbFlush {
    /// Invalidates the translation of the page containing `va`.
    fn flush_page(&self, va: VirtAddr);

    /// Invalidates every (including global) translation.
    fn flush_all(&self);

    /// Makes valid entries just written over invalid ones visible to the
    /// table walker before their addresses are used (Linux arm64's
    /// `dsb(ishst); isb()` after setting a kernel PTE: the walk is not
    /// ordered with earlier stores otherwise). No invalidation is needed:
    /// invalid entries are not cached. The default does nothing, which is
    /// right where page-table stores are ordered with later walks (x86).
    fn sync_new_entries(&self) {}

    /// Above this many pages, [`flush_range`](Self::flush_range) flushes everything.
    fn flush_ceiling_pages(&self) -> u64 {
        DEFAULT_FLUSH_CEILING_PAGES
    }

    /// Invalidates `[start, end)` in pages of `page_size` bytes: page by page up
    /// to the ceiling, a full flush beyond. Backends override this to put
    /// barriers once around the loop or to count the range as one event.
    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        if end <= start {
            return;
        }
        let first = start.align_down(page_size);
        let pages = (end.as_u64() - first.as_u64()).div_ceil(page_size);
        if pages > self.flush_ceiling_pages() {
            self.flush_all();
            return;
        }
        let mut va = first;
        while va < end {
            self.flush_page(va);
            va = VirtAddr::new(va.as_u64() + page_size);
        }
    }

    /// Invalidates several disjoint `[start, end)` ranges as one event (a
    /// flush list, as Windows' `KeFlushMultipleTb`; Linux flushes one range
    /// per `mmu_gather`): page by page if together they cover at most
    /// [`flush_ceiling_pages`](Self::flush_ceiling_pages) pages, a full
    /// flush beyond. A gather whose pages lie far apart then invalidates
    /// just those pages instead of everything between them. Backends that
    /// pay per shootdown override this to interrupt the other CPUs once.
    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
        if range_list_pages(ranges, page_size) > self.flush_ceiling_pages() {
            self.flush_all();
            return;
        }
        for &(start, end) in ranges {
            self.flush_range(start, end, page_size);
        }
    }
}

/// Pages of `page_size` bytes touched by the `[start, end)` ranges, counted
/// per range (empty ranges count 0); saturates instead of overflowing.
pub fn range_list_pages(ranges: &[(VirtAddr, VirtAddr)], page_size: u64) -> u64 {
    ranges
        .iter()
        .filter(|(s, e)| e > s)
        .map(|&(s, e)| (e.as_u64() - s.align_down(page_size).as_u64()).div_ceil(page_size))
        .fold(0u64, u64::saturating_add)
}

impl<T: TlbFlush + ?Sized> TlbFlush for &T {
    fn flush_page(&self, va: VirtAddr) {
        (**self).flush_page(va)
    }
    fn flush_all(&self) {
        (**self).flush_all()
    }
    fn flush_ceiling_pages(&self) -> u64 {
        (**self).flush_ceiling_pages()
    }
    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        (**self).flush_range(start, end, page_size)
    }
    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
        (**self).flush_ranges(ranges, page_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;
    use std::vec::Vec;

    #[derive(Default)]
    struct Recorder {
        pages: RefCell<Vec<u64>>,
        full: RefCell<u32>,
    }

    impl TlbFlush for Recorder {
        fn flush_page(&self, va: VirtAddr) {
            self.pages.borrow_mut().push(va.as_u64());
        }
        fn flush_all(&self) {
            *self.full.borrow_mut() += 1;
        }
    }

    #[test]
    fn default_range_flush_counts_the_pages_it_touches() {
        let r = Recorder::default();
        // 33 pages touched when the range starts mid-page: still page by page.
        r.flush_range(VirtAddr::new(0x800), VirtAddr::new(33 * 0x1000), 0x1000);
        assert_eq!(r.pages.borrow().len(), 33);
        assert_eq!(r.pages.borrow()[0], 0);
        assert_eq!(*r.full.borrow(), 0);
        // 34 pages touched (start mid-page, end mid-page): a full flush.
        r.flush_range(VirtAddr::new(0x800), VirtAddr::new(33 * 0x1000 + 1), 0x1000);
        assert_eq!(*r.full.borrow(), 1);
        assert_eq!(r.pages.borrow().len(), 33);
        r.flush_range(VirtAddr::new(0x5000), VirtAddr::new(0x5000), 0x1000);
        assert_eq!(r.pages.borrow().len(), 33, "an empty range flushes nothing");
    }

    #[test]
    fn range_list_flushes_its_pages_or_everything_past_the_ceiling() {
        let r = Recorder::default();
        let v = VirtAddr::new;
        // Three pages a terabyte apart: three page flushes, no full flush.
        let far = [
            (v(0x1000), v(0x2000)),
            (v(1 << 40), v((1 << 40) + 0x1000)),
            (v(1 << 41), v((1 << 41) + 0x800)),
        ];
        assert_eq!(range_list_pages(&far, 0x1000), 3);
        r.flush_ranges(&far, 0x1000);
        assert_eq!(*r.pages.borrow(), [0x1000, 1 << 40, 1 << 41]);
        assert_eq!(*r.full.borrow(), 0);
        // 20 + 14 pages: above the ceiling of 33 together, one full flush.
        let big = [
            (v(0), v(20 * 0x1000)),
            (v(1 << 40), v((1 << 40) + 14 * 0x1000)),
        ];
        r.flush_ranges(&big, 0x1000);
        assert_eq!(*r.full.borrow(), 1);
        assert_eq!(r.pages.borrow().len(), 3);
        // Empty ranges and an empty list flush nothing.
        r.flush_ranges(&[(v(0x5000), v(0x5000))], 0x1000);
        r.flush_ranges(&[], 0x1000);
        assert_eq!((r.pages.borrow().len(), *r.full.borrow()), (3, 1));
        assert_eq!(range_list_pages(&[(v(0), v(u64::MAX))], 1), u64::MAX);
    }
}
