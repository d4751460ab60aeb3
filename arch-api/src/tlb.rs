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
        let pages = (end.as_u64() - start.as_u64()).div_ceil(page_size);
        if pages > self.flush_ceiling_pages() {
            self.flush_all();
            return;
        }
        let mut va = start.align_down(page_size);
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
