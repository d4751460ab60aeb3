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
}
