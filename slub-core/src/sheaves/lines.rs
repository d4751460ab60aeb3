//! Where a cache's per-CPU sheaves lines live.
//!
//! A standalone cache allocates its own block, CPU `i`'s line `i` lines
//! from CPU 0's. The kmalloc caches share one area instead ([`SheafArea`],
//! owned by `Kmalloc`): a row per CPU holding that CPU's line of every
//! class, so the line of class `c` on CPU `i` is at
//! `base + (i << ROW_SHIFT) + (c << LINE_SHIFT)`. That address needs no
//! load that depends on the class: the fast path of `malloc` / `free`
//! computes it from the size class and the CPU id, where a per-cache block
//! puts a load of the cache's block pointer between the class and the
//! sheaf (+1 ns per malloc + free pair for each load on that chain;
//! BENCHMARKS.md, session 16). Linux's per-CPU areas have the same shape (a
//! CPU's variables together, one offset per CPU).

use super::line::CpuSheaves;
use crate::page_source::{PageSource, SlabPages};
use arch_api::LocalStacks;
use core::ptr::NonNull;

/// log2 of a line: CPU `i`'s line in a cache's own block is `i << LINE_SHIFT`
/// bytes from CPU 0's.
pub(crate) const LINE_SHIFT: u32 = core::mem::size_of::<CpuSheaves>().trailing_zeros();
const _: () = assert!(core::mem::size_of::<CpuSheaves>().is_power_of_two());

/// log2 of a row of `columns` lines, rounded up to a power of two.
pub(crate) const fn row_shift(columns: usize) -> u32 {
    (columns.next_power_of_two() << LINE_SHIFT).trailing_zeros()
}

/// Where CPU 0's line of one cache is and how far apart the CPUs' lines are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Heads {
    base: *const CpuSheaves,
    shift: u32,
}

impl Heads {
    /// The lines as the backend's guard-free steps see them, with `cap`
    /// slots per sheaf.
    #[inline(always)]
    pub(crate) fn stacks(self, cap: usize) -> LocalStacks {
        // SAFETY: every CPU's line starts with the two words (asserted in
        // `line.rs`), `1 << shift` bytes apart (`SheafLines`); the slots are
        // a live sheaf's `cap` slots whenever the count is at most `cap`;
        // they are written only under the CPU's guard or by the backend's
        // steps.
        unsafe { LocalStacks::new(self.base.cast::<usize>(), self.shift, cap) }
    }
}

/// One cache's per-CPU lines: its own block, or a column of a
/// [`SheafArea`].
pub(crate) struct SheafLines {
    base: NonNull<CpuSheaves>,
    shift: u32,
    nr: usize,
    /// Bytes to give back to the page source: 0 for a column of an area
    /// (the area's owner frees it) and for no lines at all.
    bytes: usize,
}

impl SheafLines {
    /// No lines (a tid cache).
    pub(crate) const fn empty() -> Self {
        Self {
            base: NonNull::dangling(),
            shift: LINE_SHIFT,
            nr: 0,
            bytes: 0,
        }
    }

    /// A block of `nr` adjacent lines from `pages`, each without sheaves.
    pub(crate) fn own<P: PageSource>(pages: &P, nr: usize) -> Option<Self> {
        let page = pages.page_size();
        let bytes = (nr.max(1) << LINE_SHIFT).next_multiple_of(page);
        let base = pages.alloc_pages(bytes, page)?.cast::<CpuSheaves>();
        let lines = Self {
            base,
            shift: LINE_SHIFT,
            nr,
            bytes,
        };
        // SAFETY: the block is fresh, holds `nr` lines and is ours.
        unsafe { lines.init() };
        Some(lines)
    }

    /// The column `at` of an area, for `nr` CPUs, each line without
    /// sheaves.
    ///
    /// # Safety
    /// `at` is [`SheafArea::heads`] of a live area of at least `nr` CPUs,
    /// for a column no other `SheafLines` uses, and the area outlives the
    /// result.
    pub(crate) unsafe fn column(at: Heads, nr: usize) -> Self {
        let lines = Self {
            // SAFETY: an area's base is not null, nor any column in it.
            base: unsafe { NonNull::new_unchecked(at.base.cast_mut()) },
            shift: at.shift,
            nr,
            bytes: 0,
        };
        // SAFETY: the caller's contract: the lines are ours.
        unsafe { lines.init() };
        lines
    }

    /// # Safety
    /// The `nr` lines are valid memory that nothing else uses.
    unsafe fn init(&self) {
        for i in 0..self.nr {
            // SAFETY: the caller's contract.
            unsafe { self.line_ptr(i).write(CpuSheaves::new()) };
        }
    }

    #[inline(always)]
    fn line_ptr(&self, cpu: usize) -> *mut CpuSheaves {
        self.base
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(cpu << self.shift)
            .cast()
    }

    /// CPU `cpu`'s line.
    #[inline(always)]
    pub(crate) fn get(&self, cpu: usize) -> &CpuSheaves {
        debug_assert!(cpu < self.nr);
        // SAFETY: `cpu` is one of the `nr` CPUs whose lines were written by
        // `init` and live as long as `self` (own block) or the area.
        unsafe { &*self.line_ptr(cpu) }
    }

    /// Where the lines are, for [`Heads::stacks`].
    #[inline(always)]
    pub(crate) fn heads(&self) -> Heads {
        Heads {
            base: self.base.as_ptr(),
            shift: self.shift,
        }
    }

    /// Gives the cache's own block back to `pages` (a column stays with its
    /// area); no lines after.
    ///
    /// # Safety
    /// Nothing uses the lines any more; `pages` is the source of
    /// [`own`](Self::own).
    pub(crate) unsafe fn release<P: PageSource>(&mut self, pages: &P) {
        if self.bytes != 0 {
            // SAFETY: the caller's contract: the block `own` allocated.
            unsafe { pages.free_pages(self.base.cast(), self.bytes) };
        }
        *self = Self::empty();
    }
}

/// The lines of a set of `COLUMNS` caches for every CPU: a row of
/// `COLUMNS` lines per CPU (`Kmalloc`'s caches share one). Given back to
/// its page source when dropped, so it must be dropped after the caches
/// whose columns it holds.
pub(crate) struct SheafArea<M: PageSource, const COLUMNS: usize> {
    base: NonNull<u8>,
    bytes: usize,
    pages: M,
}

impl<M: PageSource, const COLUMNS: usize> SheafArea<M, COLUMNS> {
    /// log2 of a row: CPU `i`'s row is `i << ROW_SHIFT` bytes from CPU 0's.
    pub(crate) const ROW_SHIFT: u32 = row_shift(COLUMNS);

    /// An area for `nr` CPUs from `pages` (its lines are written by
    /// [`SheafLines::column`]); `None` if `pages` is out of memory.
    pub(crate) fn new(pages: M, nr: usize) -> Option<Self> {
        let page = pages.page_size();
        let bytes = (nr.max(1) << Self::ROW_SHIFT).next_multiple_of(page);
        let base = pages.alloc_pages(bytes, page)?;
        Some(Self { base, bytes, pages })
    }

    /// No area (caches with the tid front).
    pub(crate) fn none(pages: M) -> Self {
        Self {
            base: NonNull::dangling(),
            bytes: 0,
            pages,
        }
    }

    /// Whether there is an area.
    pub(crate) fn is_some(&self) -> bool {
        self.bytes != 0
    }

    /// Column `col`'s lines. Computed, not loaded: this is what the kmalloc
    /// fast paths call with the class.
    #[inline(always)]
    pub(crate) fn heads(&self, col: usize) -> Heads {
        debug_assert!(col < COLUMNS);
        Heads {
            base: self
                .base
                .as_ptr()
                .wrapping_add(col << LINE_SHIFT)
                .cast_const()
                .cast(),
            shift: Self::ROW_SHIFT,
        }
    }
}

impl<M: PageSource, const COLUMNS: usize> SheafArea<M, COLUMNS> {
    /// Gives the area back to its page source now; no area after.
    ///
    /// # Safety
    /// No cache uses a column of it any more (each destroyed, its lines
    /// released).
    pub(crate) unsafe fn release(&mut self) {
        if self.bytes != 0 {
            // SAFETY: allocated by `new` from `pages`, given back once (the
            // size is cleared); unused (the caller's contract).
            unsafe { self.pages.free_pages(self.base, self.bytes) };
            self.base = NonNull::dangling();
            self.bytes = 0;
        }
    }
}

impl<M: PageSource, const COLUMNS: usize> Drop for SheafArea<M, COLUMNS> {
    fn drop(&mut self) {
        // SAFETY: the owner drops the area after the caches using its
        // columns (a field after theirs).
        unsafe { self.release() }
    }
}

// SAFETY: the area is memory its owner allocated and frees once; its lines
// are read and written only by the caches whose columns they are, under the
// CPU's guard or in the backend's guard-free steps, as a cache's own block.
unsafe impl<M: PageSource + Send, const COLUMNS: usize> Send for SheafArea<M, COLUMNS> {}
// SAFETY: as above.
unsafe impl<M: PageSource + Sync, const COLUMNS: usize> Sync for SheafArea<M, COLUMNS> {}
