//! Per-CPU arrays: one `T` per CPU id, in pages of the cache's page source.
//!
//! Each front keeps its own per-CPU line type (the tid front its
//! `(freelist, tid)` cell and partial list, the sheaves front its main and
//! spare sheaf, the slab layer its counters) and owns a [`PerCpu`] of it, so
//! no line's fields are visible outside the module that defines them. The
//! array lives in page-source memory rather than a `Vec` because the crate
//! has no other allocator (it may *be* the global allocator).

use crate::page_source::{PageSource, SlabPages};
use core::ptr::NonNull;

/// `nr` initialised `T`s, one per CPU id, page aligned (so a line type with
/// `align(64)` gets a cache line of its own per CPU).
pub(crate) struct PerCpu<T> {
    base: NonNull<T>,
    nr: usize,
    bytes: usize,
}

impl<T> PerCpu<T> {
    /// No array (a front a cache does not use); `get` must not be called.
    pub(crate) const fn empty() -> Self {
        Self {
            base: NonNull::dangling(),
            nr: 0,
            bytes: 0,
        }
    }

    /// Allocates `nr` lines from `pages` and initialises line `i` with
    /// `init(at, i)`, which must write a valid `T` at `at` (in place, so a
    /// line may point into itself). `None` if the page source is out of
    /// memory.
    pub(crate) fn new<P: PageSource>(
        pages: &P,
        nr: usize,
        mut init: impl FnMut(*mut T, usize),
    ) -> Option<Self> {
        let page = pages.page_size();
        debug_assert!(core::mem::align_of::<T>() <= page);
        let bytes = (nr.max(1) * core::mem::size_of::<T>()).next_multiple_of(page);
        let base = pages.alloc_pages(bytes, page)?.cast::<T>();
        for i in 0..nr {
            // SAFETY: the block holds `nr` Ts (size computed above) and is
            // page aligned, so aligned for `T`; it is ours and unused.
            init(unsafe { base.as_ptr().add(i) }, i);
        }
        Some(Self { base, nr, bytes })
    }

    /// The line of CPU `cpu`.
    #[inline(always)]
    pub(crate) fn get(&self, cpu: usize) -> &T {
        debug_assert!(cpu < self.nr);
        // SAFETY: the CpuLocal contract gives ids below `nr_cpus`, which is
        // `nr`, and the array holds `nr` initialised lines until `release`.
        unsafe { &*self.base.as_ptr().add(cpu) }
    }

    /// CPU 0's line (the others follow, `size_of::<T>()` apart).
    #[inline(always)]
    pub(crate) fn base(&self) -> NonNull<T> {
        self.base
    }

    /// Whether there is no array.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The address of the array (entropy for the cache's secret).
    pub(crate) fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Drops every line and returns the pages; the array is empty after.
    ///
    /// # Safety
    /// `pages` is the source the array came from, and no reference to a
    /// line is in use or used again.
    pub(crate) unsafe fn release<P: PageSource>(&mut self, pages: &P) {
        if self.bytes == 0 {
            return;
        }
        for i in 0..self.nr {
            // SAFETY: initialised in `new`, dropped once, here.
            unsafe { core::ptr::drop_in_place(self.base.as_ptr().add(i)) };
        }
        // SAFETY: allocated in `new` with exactly this size and alignment;
        // the caller guarantees nothing refers to it any more.
        unsafe { pages.free_pages(self.base.cast(), self.bytes) };
        *self = Self::empty();
    }
}
