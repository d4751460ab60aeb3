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
use crate::cpu_local::CpuLocal;
use crate::page_source::PageSource;
use crate::percpu::PerCpu;
use arch_api::LocalStacks;
use core::ptr::NonNull;

/// log2 of a line: CPU `i`'s line in a cache's own block is `i << LINE_SHIFT`
/// bytes from CPU 0's.
pub(crate) const LINE_SHIFT: u32 = core::mem::size_of::<CpuSheaves>().trailing_zeros();
const _: () = assert!(core::mem::size_of::<CpuSheaves>().is_power_of_two());

/// Lines in a CPU's row of a [`SheafArea`]: the caches that can share one.
pub(crate) const ROW_LINES: usize = 16;

/// One CPU's row of a [`SheafArea`]: its line of each cache, column `c`
/// for the `c`-th.
#[repr(C)]
struct Row([CpuSheaves; ROW_LINES]);

/// log2 of a row: CPU `i`'s row is `i << ROW_SHIFT` bytes from CPU 0's.
const ROW_SHIFT: u32 = core::mem::size_of::<Row>().trailing_zeros();
// A stride the backends' guard-free steps handle.
const _: () =
    assert!(core::mem::size_of::<Row>().is_power_of_two() && ROW_SHIFT == LocalStacks::ROW);

/// Where CPU 0's line of one cache is and how far apart the CPUs' lines are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Heads {
    base: *const CpuSheaves,
    shift: u32,
}

impl Heads {
    /// No lines (a placeholder that nothing follows).
    pub(crate) const NONE: Heads = Heads {
        base: core::ptr::null(),
        shift: ROW_SHIFT,
    };

    /// Column `col` of an area whose column 0 is `self`
    /// ([`SheafArea::heads`]).
    #[inline(always)]
    pub(crate) fn column(self, col: usize) -> Heads {
        debug_assert!(col < ROW_LINES && self.shift == ROW_SHIFT);
        Heads {
            base: self.base.wrapping_add(col),
            // The constant, not `self.shift`: the guard-free steps then
            // know the stride when they are compiled.
            shift: ROW_SHIFT,
        }
    }

    /// The lines as the backend's guard-free steps see them.
    #[inline(always)]
    pub(crate) fn stacks(self) -> LocalStacks {
        // SAFETY: every CPU's line starts with the three words (asserted in
        // `line.rs`), `1 << shift` bytes apart (`SheafLines`); the slots are
        // a live sheaf's `cap` slots whenever the count is at most `cap`;
        // the slots and count are written only by the backend's steps or
        // under the CPU's guard with the steps stopped (`stopped`), the
        // capacity only while the cache is built and by the stop and restart.
        unsafe { LocalStacks::new(self.base.cast::<usize>(), self.shift) }
    }
}

/// One cache's per-CPU lines: its own block, or a column of a
/// [`SheafArea`].
pub(crate) struct SheafLines {
    base: NonNull<CpuSheaves>,
    shift: u32,
    /// The cache's own block; empty for a column (the area's owner frees
    /// that) and for no lines at all.
    own: PerCpu<CpuSheaves>,
}

impl SheafLines {
    /// No lines (a tid cache).
    pub(crate) const fn empty() -> Self {
        Self {
            base: NonNull::dangling(),
            shift: LINE_SHIFT,
            own: PerCpu::empty(),
        }
    }

    /// A block of `nr` adjacent lines from `pages`, each without sheaves.
    pub(crate) fn own<P: PageSource>(pages: &P, nr: usize) -> Option<Self> {
        // SAFETY: `PerCpu::new` hands out valid, aligned, unused lines.
        let own = PerCpu::new(pages, nr, |at: *mut CpuSheaves, _| unsafe {
            at.write(CpuSheaves::new())
        })?;
        Some(Self {
            base: own.base(),
            shift: LINE_SHIFT,
            own,
        })
    }

    /// The column `at` of an area.
    ///
    /// # Safety
    /// `at` is [`SheafArea::heads`] of a live area for at least the CPUs
    /// the lines are used for, for a column no other `SheafLines` uses,
    /// and the area outlives the result.
    pub(crate) unsafe fn column(at: Heads) -> Self {
        Self {
            // SAFETY: an area's lines are not at address 0.
            base: unsafe { NonNull::new_unchecked(at.base.cast_mut()) },
            shift: at.shift,
            own: PerCpu::empty(),
        }
    }

    /// CPU `cpu`'s line with the backend's guard-free steps on it stopped
    /// until the handle drops, when they restart with capacity `cap`
    /// ([`CpuLocal::stop_local`]): what a holder of `cpu`'s guard uses
    /// before it reads or changes the line's sheaf. Whatever the holder
    /// decides from the line it must do under the same handle: between two
    /// handles the steps run, and the sheaf it looked at may have been
    /// emptied or filled (the guard no longer keeps them out).
    ///
    /// # Safety
    /// The caller holds `cpu`'s guard of `cpus` (the backend the lines'
    /// steps run on), or has exclusive use of the lines (no step runs);
    /// `cap` is the lines' capacity.
    #[inline(always)]
    pub(super) unsafe fn stopped<'a, C: CpuLocal>(
        &'a self,
        cpus: &'a C,
        cpu: usize,
        cap: usize,
    ) -> Stopped<'a, C> {
        let stacks = self.heads().stacks();
        // SAFETY: the caller's contract; `stacks` is what the steps get.
        unsafe { cpus.stop_local(&stacks, cpu) };
        Stopped {
            line: self.get(cpu),
            cpus,
            stacks,
            cpu,
            cap,
        }
    }

    /// CPU `cpu`'s line.
    #[inline(always)]
    pub(crate) fn get(&self, cpu: usize) -> &CpuSheaves {
        let at = self
            .base
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(cpu << self.shift)
            .cast::<CpuSheaves>();
        // SAFETY: the CpuLocal contract gives ids of CPUs the block or the
        // area was made for; their lines were initialised there and live
        // as long as `self` (own block) or the area.
        unsafe { &*at }
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
        // SAFETY: the caller's contract.
        unsafe { self.own.release(pages) };
        *self = Self::empty();
    }
}

/// A CPU's line whose guard-free steps are stopped
/// ([`SheafLines::stopped`]); restarts them when dropped.
pub(super) struct Stopped<'a, C: CpuLocal> {
    line: &'a CpuSheaves,
    cpus: &'a C,
    stacks: LocalStacks,
    cpu: usize,
    cap: usize,
}

impl<C: CpuLocal> core::ops::Deref for Stopped<'_, C> {
    type Target = CpuSheaves;
    #[inline(always)]
    fn deref(&self) -> &CpuSheaves {
        self.line
    }
}

impl<C: CpuLocal> Drop for Stopped<'_, C> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: `stopped`'s contract: we still hold the guard (the handle
        // borrows what the caller holds it for) and stopped this stack.
        unsafe { self.cpus.restart_local(&self.stacks, self.cpu, self.cap) };
    }
}

/// A row of [`ROW_LINES`] lines per CPU, shared by up to that many caches
/// (`Kmalloc`'s). Given back to its page source when dropped, so it must be
/// dropped after the caches whose columns it holds.
pub(crate) struct SheafArea<M: PageSource> {
    rows: PerCpu<Row>,
    pages: M,
}

impl<M: PageSource> SheafArea<M> {
    /// An area for `nr` CPUs from `pages`, every line without sheaves;
    /// `None` if `pages` is out of memory.
    pub(crate) fn new(pages: M, nr: usize) -> Option<Self> {
        let rows = PerCpu::new(&pages, nr, |at: *mut Row, _| {
            for c in 0..ROW_LINES {
                // SAFETY: `PerCpu::new` hands out a valid, aligned, unused
                // row; written line by line (no row-sized temporary).
                unsafe { at.cast::<CpuSheaves>().add(c).write(CpuSheaves::new()) };
            }
        })?;
        Some(Self { rows, pages })
    }

    /// No area (caches with the tid front).
    pub(crate) fn none(pages: M) -> Self {
        Self {
            rows: PerCpu::empty(),
            pages,
        }
    }

    /// Whether there is an area.
    pub(crate) fn is_some(&self) -> bool {
        !self.rows.is_empty()
    }

    /// Column `col`'s lines. Computed, not loaded: this is what the kmalloc
    /// fast paths call with the class.
    #[inline(always)]
    pub(crate) fn heads(&self, col: usize) -> Heads {
        Heads {
            base: self.rows.base().as_ptr().cast::<CpuSheaves>().cast_const(),
            shift: ROW_SHIFT,
        }
        .column(col)
    }

    /// Gives the area back to its page source now; no area after.
    ///
    /// # Safety
    /// No cache uses a column of it any more (each destroyed, its lines
    /// released).
    pub(crate) unsafe fn release(&mut self) {
        // SAFETY: allocated from `pages`; unused (the caller's contract).
        unsafe { self.rows.release(&self.pages) };
    }
}

impl<M: PageSource> Drop for SheafArea<M> {
    fn drop(&mut self) {
        // SAFETY: the owner drops the area after the caches using its
        // columns (a field after theirs).
        unsafe { self.release() }
    }
}

// SAFETY: the area is memory its owner allocated and frees once; its lines
// are read and written only by the caches whose columns they are, under the
// CPU's guard or in the backend's guard-free steps, as a cache's own block.
unsafe impl<M: PageSource + Send> Send for SheafArea<M> {}
// SAFETY: as above.
unsafe impl<M: PageSource + Sync> Sync for SheafArea<M> {}
