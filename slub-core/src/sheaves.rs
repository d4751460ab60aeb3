//! The sheaves front (Linux 7.0's replacement for the tid fast path): per-CPU
//! arrays ("sheaves") of object pointers, a main and a spare, pushed and
//! popped with no atomic instruction: under the CpuLocal guard, or in one
//! guard-free step where the backend has one (`CpuLocal::pop_local`, an
//! rseq section on Linux), the main sheaf's slots and count being in the
//! CPU's line (`sheaves/line.rs`). Full and empty
//! sheaves are exchanged with the node's barn (`barn.rs`) under its lock; a
//! CPU whose sheaves are both empty (full) and that finds nothing in the barn
//! refills (flushes) its main sheaf in bulk from (to) the slabs, through the
//! tid front's CPU slab as Linux's bulk allocation does.

use crate::barn::{Barn, Sheaf};
use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, FreeError};
use crate::page_source::PageSource;
use crate::slabs::{Over, Slabs};
use crate::stats::StatItem;
use crate::tid::{FastFree, TidFront};
use arch_api::sync::RawMutex;
use arch_api::{DwCas, LocalOp};
use core::marker::PhantomData;
use core::ptr::null_mut;
use line::CpuSheaves;
use lines::LINE_SHIFT;
pub(crate) use lines::{Heads, ROW_LINES, SheafArea};
use lines::{SheafLines, Stopped};

mod bulk;
mod line;
mod lines;
mod nolock;

// The backends' guard-free steps handle lines a line apart (a cache's own
// block) and a row apart (`Kmalloc`'s shared area, asserted in `lines.rs`).
const _: () = assert!(LINE_SHIFT == arch_api::LocalStacks::LINE);

/// What the leaf of a sheaves fast path did (`alloc_leaf`, `free_leaf`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Leaf {
    /// Popped `value` (or pushed it, for a free) on CPU `cpu`, not counted.
    Done { cpu: usize, value: usize },
    /// The sheaf is empty or full, or a holder of the CPU's guard has
    /// stopped the steps on it: the slow path.
    Miss,
    /// The backend has no guard-free step: the step needs the CPU's guard.
    Guard,
}

/// The sheaves front over the slab layer `Slabs<P, C, D, R>`: the per-CPU
/// sheaves and the barn.
#[repr(C)]
pub(crate) struct SheafFront<P, C, D, R: RawMutex> {
    cpu: SheafLines,
    /// The barn's sheaf capacity, beside `cpu`: the fast paths read both,
    /// and the barn's own copy sits behind its lock's padded line.
    cap: usize,
    barn: Barn<R>,
    _slabs: Over<P, C, D, R>,
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> SheafFront<P, C, D, R> {
    /// The front of a new cache with `nr_cpus` CPUs; with `enabled` false
    /// (a tid cache) no per-CPU lines are allocated and only the flushes may
    /// be called (they find nothing). The lines are `column` of a shared
    /// area if given, else a block of the cache's own. `None` if `pages` is
    /// out of memory.
    ///
    /// # Safety
    /// A `column` is as [`SheafLines::column`] requires.
    pub(crate) unsafe fn new(
        pages: &P,
        nr_cpus: usize,
        enabled: bool,
        barn: Barn<R>,
        column: Option<Heads>,
    ) -> Option<Self> {
        let cpu = match (enabled, column) {
            (false, _) => SheafLines::empty(),
            // SAFETY: the caller's contract.
            (true, Some(at)) => unsafe { SheafLines::column(at) },
            (true, None) => SheafLines::own(pages, nr_cpus)?,
        };
        for i in 0..if enabled { nr_cpus } else { 0 } {
            // SAFETY: the lines are this cache's (its own block, or its
            // column by the caller's contract) and nothing uses them yet.
            unsafe { cpu.get(i).set_cap(barn.cap()) };
        }
        Some(Self {
            cpu,
            cap: barn.cap(),
            barn,
            _slabs: PhantomData,
        })
    }

    /// Returns the per-CPU array and the sheaf pool to `pages`.
    ///
    /// # Safety
    /// Exclusive access, every CPU and the barn flushed, `pages` the source
    /// of `new`.
    pub(crate) unsafe fn release(&mut self, pages: &P) {
        // SAFETY: the caller's contract.
        unsafe {
            self.barn.release_pool(pages);
            self.cpu.release(pages);
        }
    }

    /// The barn (its sheaf pool also holds the deferred-free batches).
    pub(crate) fn barn(&self) -> &Barn<R> {
        &self.barn
    }

    /// CPU `cpu`'s line, the backend's guard-free steps on it stopped
    /// while the handle lives (`SheafLines::stopped`).
    ///
    /// # Safety
    /// The caller holds `cpu`'s guard, is pinned to it (`pinned_cpu`), or
    /// has exclusive access.
    #[inline(always)]
    unsafe fn line<'a>(&'a self, slabs: &'a Slabs<P, C, D, R>, cpu: usize) -> Stopped<'a, C> {
        // SAFETY: the caller's contract.
        unsafe { self.cpu.stopped(slabs.cpus(), cpu, self.cap) }
    }

    /// Sheaf capacity (at least 1).
    #[inline(always)]
    fn cap(&self) -> usize {
        self.cap
    }

    /// Where the per-CPU lines are: for the backend's guard-free steps
    /// ([`CpuLocal::pop_local`]), each CPU's line starting with its main
    /// sheaf's slot array and fill count (`line.rs`). A caller that can
    /// compute this without loading it (`Kmalloc`, from the class) passes
    /// its own to the fast paths.
    #[inline(always)]
    pub(crate) fn heads(&self) -> Heads {
        self.cpu.heads()
    }

    /// The sheaves fast path, one try: pop from the main sheaf. With a
    /// backend that pins for free ([`CpuLocal::HAS_PINNED_CPU`]) there is no
    /// guard at all, with a guard-free step (an rseq section) none either,
    /// and anything else is left to the caller's slow path; otherwise the
    /// guard is taken (and dropped) in one out-of-line call.
    ///
    /// # Safety
    /// `at` is [`heads`](Self::heads).
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) unsafe fn alloc_fast(&self, slabs: &Slabs<P, C, D, R>, at: Heads) -> Option<usize> {
        // SAFETY: the caller's contract.
        match unsafe { self.alloc_leaf(slabs, at) } {
            Leaf::Done { cpu, value } => {
                slabs.stat(cpu, StatItem::AllocFastpath);
                Some(value)
            }
            Leaf::Miss => None,
            Leaf::Guard => self.alloc_fast_guarded(slabs),
        }
    }

    /// [`alloc_fast`](Self::alloc_fast) without its guarded call and
    /// without counting: the part that is leaf code (no call at all).
    ///
    /// # Safety
    /// As [`alloc_fast`](Self::alloc_fast).
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) unsafe fn alloc_leaf(&self, slabs: &Slabs<P, C, D, R>, at: Heads) -> Leaf {
        debug_assert_eq!(at, self.heads());
        if C::HAS_PINNED_CPU {
            let Some(cpu) = slabs.cpus().pinned_cpu() else {
                return Leaf::Miss;
            };
            // SAFETY: the caller is pinned to `cpu` (the `pinned_cpu`
            // contract), as a guard would make it.
            match unsafe { self.sheaf_take(slabs, cpu) } {
                Some(value) => Leaf::Done { cpu, value },
                None => Leaf::Miss,
            }
        } else {
            // A backend with a guard-free step (an rseq section) pops in
            // one restartable sequence.
            // SAFETY: `at` is where this front's lines are (the caller's
            // contract), which `Heads::stacks` describes.
            match unsafe { slabs.cpus().pop_local(&at.stacks()) } {
                LocalOp::Done { cpu, value } => Leaf::Done { cpu, value },
                LocalOp::Miss => Leaf::Miss,
                LocalOp::Pin => Leaf::Guard,
            }
        }
    }

    /// [`alloc_fast`](Self::alloc_fast) under the CPU's guard, for a
    /// backend without a guard-free step: out of line, so that the inlined
    /// fast path stays a leaf that needs no stack frame.
    #[inline(never)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    fn alloc_fast_guarded(&self, slabs: &Slabs<P, C, D, R>) -> Option<usize> {
        // `local_trylock`: a held guard (its holder preempted or migrated
        // inside its section) sends us to the slow path.
        let (_g, cpu) = slabs.cpus().try_pin()?;
        // SAFETY: the guard pins us to `cpu`.
        unsafe { self.sheaf_pop(slabs, cpu) }
    }

    /// `slab_alloc` for the sheaves front (the slow path's entry: pins,
    /// pops, refills).
    pub(crate) fn alloc(
        &self,
        tid: &TidFront<P, C, D, R>,
        slabs: &Slabs<P, C, D, R>,
    ) -> Result<usize, AllocError> {
        // On contention for the CPU's sheaves (`local_trylock` failed: the
        // holder may be descheduled), take an object from the slab layer
        // through the tid front instead of waiting, as Linux does.
        let Some((_g, cpu)) = slabs.cpus().try_pin() else {
            return tid.alloc(slabs);
        };
        // SAFETY: the guard pins us to `cpu`; one stop for the pop and the
        // slow path.
        let c = unsafe { self.line(slabs, cpu) };
        // SAFETY: as above.
        if let Some(p) = unsafe { self.take(slabs, &c) } {
            slabs.stat(cpu, StatItem::AllocFastpath);
            return Ok(p);
        }
        self.alloc_slow(tid, slabs, cpu, &c)
    }

    /// Pops an object from CPU `cpu`'s main sheaf, if it has one, and
    /// counts it.
    ///
    /// # Safety
    /// The caller is pinned to `cpu` (holds its guard, or `pinned_cpu`
    /// answered `cpu`).
    #[inline(always)]
    unsafe fn sheaf_pop(&self, slabs: &Slabs<P, C, D, R>, cpu: usize) -> Option<usize> {
        // SAFETY: the caller's contract.
        let p = unsafe { self.sheaf_take(slabs, cpu) }?;
        slabs.stat(cpu, StatItem::AllocFastpath);
        Some(p)
    }

    /// [`sheaf_pop`](Self::sheaf_pop) without the counter.
    ///
    /// # Safety
    /// As [`sheaf_pop`](Self::sheaf_pop).
    #[inline(always)]
    unsafe fn sheaf_take(&self, slabs: &Slabs<P, C, D, R>, cpu: usize) -> Option<usize> {
        // SAFETY: the caller holds `cpu`'s guard (or is pinned to it, or
        // has the lines to itself).
        let c = unsafe { self.line(slabs, cpu) };
        // SAFETY: as above.
        unsafe { self.take(slabs, &c) }
    }

    /// Pops from the main sheaf of the stopped line `c`.
    ///
    /// # Safety
    /// `c` is the line of a CPU the caller is pinned to.
    #[inline(always)]
    unsafe fn take(&self, slabs: &Slabs<P, C, D, R>, c: &CpuSheaves) -> Option<usize> {
        // SAFETY: pinned to the line's CPU, so it is ours; a count below
        // `cap` means a main sheaf whose first `size` slots hold objects.
        unsafe {
            let n = c.size().wrapping_sub(1);
            #[cfg(any(kmm_loom, feature = "testing"))]
            slabs
                .cpus()
                .preempt_point(crate::testing::PreemptPoint::SheafUpdate);
            #[cfg(not(any(kmm_loom, feature = "testing")))]
            let _ = slabs;
            if n < self.cap() {
                c.set_size(n);
                return Some(*c.slot(n));
            }
        }
        None
    }

    /// The main sheaf is empty (or missing). The caller holds `cpu`'s guard
    /// and has stopped its line `c`.
    #[inline(never)]
    fn alloc_slow(
        &self,
        tid: &TidFront<P, C, D, R>,
        slabs: &Slabs<P, C, D, R>,
        cpu: usize,
        c: &CpuSheaves,
    ) -> Result<usize, AllocError> {
        slabs.stat(cpu, StatItem::AllocSlowpath);
        // SAFETY: under the guard of `cpu`, the main and spare sheaves are
        // ours; sheaves returned by the barn are ours.
        unsafe {
            let spare = c.spare.get();
            if !spare.is_null() && Sheaf::size(spare) > 0 {
                let old = c.take_main();
                c.put_main(spare);
                c.spare.set(old);
            } else {
                let empty = c.take_main();
                if let Some(full) = self.barn.exchange_empty_for_full(empty) {
                    slabs.stat(cpu, StatItem::BarnGet);
                    c.put_main(full);
                } else {
                    let main = if empty.is_null() {
                        self.barn.get_empty(slabs.pages())?
                    } else {
                        empty
                    };
                    c.put_main(main);
                    let cap = self.cap();
                    let slots = core::slice::from_raw_parts_mut(c.slot(0), cap);
                    let n = tid.alloc_bulk_pinned(slabs, cpu, slots)?;
                    c.set_size(n);
                    slabs.stat(cpu, StatItem::SheafRefill);
                    if n == 0 {
                        return Err(AllocError::OutOfMemory);
                    }
                }
            }
            let n = c.size().wrapping_sub(1);
            if n >= self.cap() {
                // An empty sheaf where a full one was promised: only the
                // broken barn variant gets here; refuse rather than read
                // outside the sheaf.
                return Err(AllocError::OutOfMemory);
            }
            c.set_size(n);
            Ok(*c.slot(n))
        }
    }

    /// The sheaves fast free, one try: push onto the main sheaf (guarded as
    /// in [`alloc_fast`](Self::alloc_fast)). `p` has passed
    /// the caller's checks.
    ///
    /// # Safety
    /// As [`alloc_fast`](Self::alloc_fast).
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) unsafe fn free_fast(
        &self,
        slabs: &Slabs<P, C, D, R>,
        p: usize,
        at: Heads,
    ) -> FastFree {
        // SAFETY: the caller's contract.
        match unsafe { self.free_leaf(slabs, p, at) } {
            Leaf::Done { cpu, .. } => {
                slabs.stat(cpu, StatItem::FreeFastpath);
                FastFree::Done
            }
            Leaf::Miss => FastFree::Slow,
            Leaf::Guard => self.free_fast_guarded(slabs, p),
        }
    }

    /// [`free_fast`](Self::free_fast) without its guarded call and without
    /// counting (as [`alloc_leaf`](Self::alloc_leaf)).
    ///
    /// # Safety
    /// As [`alloc_fast`](Self::alloc_fast).
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) unsafe fn free_leaf(&self, slabs: &Slabs<P, C, D, R>, p: usize, at: Heads) -> Leaf {
        debug_assert_eq!(at, self.heads());
        if C::HAS_PINNED_CPU {
            let Some(cpu) = slabs.cpus().pinned_cpu() else {
                return Leaf::Miss;
            };
            // SAFETY: pinned to `cpu` (the `pinned_cpu` contract).
            if unsafe { self.sheaf_put(slabs, cpu, p) } {
                Leaf::Done { cpu, value: p }
            } else {
                Leaf::Miss
            }
        } else {
            // SAFETY: as in `alloc_leaf`.
            match unsafe { slabs.cpus().push_local(&at.stacks(), p) } {
                LocalOp::Done { cpu, .. } => Leaf::Done { cpu, value: p },
                LocalOp::Miss => Leaf::Miss,
                LocalOp::Pin => Leaf::Guard,
            }
        }
    }

    /// [`free_fast`](Self::free_fast) under the CPU's guard, out of line
    /// as [`alloc_fast_guarded`](Self::alloc_fast_guarded).
    #[inline(never)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    fn free_fast_guarded(&self, slabs: &Slabs<P, C, D, R>, p: usize) -> FastFree {
        let Some((_g, cpu)) = slabs.cpus().try_pin() else {
            return FastFree::Slow;
        };
        // SAFETY: the guard pins us to `cpu`.
        if unsafe { self.sheaf_push(slabs, cpu, p) } {
            FastFree::Done
        } else {
            FastFree::Slow
        }
    }

    /// `slab_free` for the sheaves front (the slow path's entry). `p` has
    /// passed the caller's checks.
    pub(crate) fn free(
        &self,
        tid: &TidFront<P, C, D, R>,
        slabs: &Slabs<P, C, D, R>,
        p: usize,
    ) -> Result<(), FreeError> {
        // As in `alloc`: on contention, free to the slab layer.
        let Some((_g, cpu)) = slabs.cpus().try_pin() else {
            return tid.free(slabs, p);
        };
        // SAFETY: the guard pins us to `cpu`; one stop for the push and the
        // slow path.
        let c = unsafe { self.line(slabs, cpu) };
        // SAFETY: as above; `p` is being freed.
        if unsafe { self.put(slabs, &c, p) } {
            slabs.stat(cpu, StatItem::FreeFastpath);
            return Ok(());
        }
        self.free_slow(tid, slabs, cpu, &c, p)
    }

    /// Pushes `p` onto CPU `cpu`'s main sheaf if it has room, and counts it.
    ///
    /// # Safety
    /// As [`sheaf_pop`](Self::sheaf_pop); `p` is an object being freed.
    #[inline(always)]
    unsafe fn sheaf_push(&self, slabs: &Slabs<P, C, D, R>, cpu: usize, p: usize) -> bool {
        // SAFETY: the caller's contract.
        let done = unsafe { self.sheaf_put(slabs, cpu, p) };
        if done {
            slabs.stat(cpu, StatItem::FreeFastpath);
        }
        done
    }

    /// [`sheaf_push`](Self::sheaf_push) without the counter.
    ///
    /// # Safety
    /// As [`sheaf_push`](Self::sheaf_push).
    #[inline(always)]
    unsafe fn sheaf_put(&self, slabs: &Slabs<P, C, D, R>, cpu: usize, p: usize) -> bool {
        // SAFETY: the caller holds `cpu`'s guard (or is pinned to it, or
        // has the lines to itself).
        let c = unsafe { self.line(slabs, cpu) };
        // SAFETY: as above; `p` is being freed.
        unsafe { self.put(slabs, &c, p) }
    }

    /// Pushes `p` onto the main sheaf of the stopped line `c` if it has
    /// room.
    ///
    /// # Safety
    /// As [`take`](Self::take); `p` is an object being freed.
    #[inline(always)]
    unsafe fn put(&self, slabs: &Slabs<P, C, D, R>, c: &CpuSheaves, p: usize) -> bool {
        // SAFETY: pinned to the line's CPU, so it is ours; a count below
        // `cap` means a main sheaf with room.
        unsafe {
            let n = c.size();
            #[cfg(any(kmm_loom, feature = "testing"))]
            slabs
                .cpus()
                .preempt_point(crate::testing::PreemptPoint::SheafUpdate);
            #[cfg(not(any(kmm_loom, feature = "testing")))]
            let _ = slabs;
            if n < self.cap() {
                *c.slot(n) = p;
                c.set_size(n + 1);
                return true;
            }
        }
        false
    }

    /// The main sheaf is full (or missing). The caller holds `cpu`'s guard
    /// and has stopped its line `c`.
    #[inline(never)]
    fn free_slow(
        &self,
        tid: &TidFront<P, C, D, R>,
        slabs: &Slabs<P, C, D, R>,
        cpu: usize,
        c: &CpuSheaves,
        p: usize,
    ) -> Result<(), FreeError> {
        slabs.stat(cpu, StatItem::FreeSlowpath);
        // SAFETY: as in `alloc_slow`.
        unsafe {
            let spare = c.spare.get();
            if c.main().is_null() {
                match self.barn.get_empty(slabs.pages()) {
                    Ok(s) => c.put_main(s),
                    // No memory for a sheaf: free straight to the slabs.
                    Err(_) => return tid.free_pinned(slabs, cpu, p),
                }
            } else if spare.is_null() || Sheaf::size(spare) == 0 {
                // Main is full: swap it with the empty (or missing) spare.
                let e = if spare.is_null() {
                    match self.barn.get_empty(slabs.pages()) {
                        Ok(s) => s,
                        Err(_) => return tid.free_pinned(slabs, cpu, p),
                    }
                } else {
                    spare
                };
                let full = c.replace_main(e);
                c.spare.set(full);
            } else {
                let full = c.take_main();
                if let Some(e) = self.barn.exchange_full_for_empty(full, slabs.pages()) {
                    slabs.stat(cpu, StatItem::BarnPut);
                    c.put_main(e);
                } else {
                    self.flush_sheaf(tid, slabs, cpu, full);
                    slabs.stat(cpu, StatItem::SheafFlush);
                    c.put_main(full);
                }
            }
            let n = c.size();
            *c.slot(n) = p;
            c.set_size(n + 1);
            Ok(())
        }
    }

    /// Frees every object of sheaf `s` to the slabs, under the guard of `cpu`.
    ///
    /// # Safety
    /// `s` is a live sheaf owned by the caller.
    unsafe fn flush_sheaf(
        &self,
        tid: &TidFront<P, C, D, R>,
        slabs: &Slabs<P, C, D, R>,
        cpu: usize,
        s: *mut Sheaf,
    ) {
        // SAFETY: the caller owns `s`; its first `size` slots are objects.
        unsafe {
            for i in 0..Sheaf::size(s) {
                let _ = tid.free_pinned(slabs, cpu, *Sheaf::slot(s, i));
            }
            Sheaf::set_size(s, 0);
        }
    }

    /// Empties CPU `cpu`'s sheaves into the slabs and returns them to the
    /// pool. Under the guard of `cpu`, or with exclusive access.
    pub(crate) fn flush_cpu(
        &self,
        tid: &TidFront<P, C, D, R>,
        slabs: &Slabs<P, C, D, R>,
        cpu: usize,
    ) {
        // SAFETY: the caller holds `cpu`'s guard (or is pinned to it, or
        // has the lines to itself).
        let c = unsafe { self.line(slabs, cpu) };
        // SAFETY: the guard (or exclusivity) makes the sheaves ours.
        let sheaves = unsafe { [c.take_main(), c.spare.get()] };
        // SAFETY: as above.
        unsafe { c.spare.set(null_mut()) };
        for s in sheaves {
            if s.is_null() {
                continue;
            }
            // SAFETY: `s` is ours (detached above) and live.
            unsafe {
                self.flush_sheaf(tid, slabs, cpu, s);
                self.barn.put_chunk(s);
            }
        }
    }

    /// Frees the objects of every full sheaf in the barn to the slabs.
    pub(crate) fn flush_barn(&self, slabs: &Slabs<P, C, D, R>) {
        while let Some(s) = self.barn.take_full() {
            // SAFETY: `s` is ours now; its first `size` slots are objects.
            unsafe {
                for i in 0..Sheaf::size(s) {
                    slabs.free_object(*Sheaf::slot(s, i));
                }
                Sheaf::set_size(s, 0);
                self.barn.put_chunk(s);
            }
        }
    }
}
