//! The tid front: per-CPU `(freelist, tid)` updated with one DW-CAS.
//!
//! Fast path (no guard, no preempt_disable): read the CPU id, load the tid,
//! then the freelist (tid first: a freelist read after a tid is vouched for
//! by that tid), compute the new pair and CAS it into the cell of the CPU the
//! task is on *now*. Tids start at the CPU number and step by a power of two
//! at least the number of CPUs, so tids of different CPUs never meet: a CAS
//! after a migration fails (it compares another CPU's tid), and a CAS after
//! anything else touched the cell fails (the tid moved on). Either way the
//! operation retries; it never succeeds on stale state.
//!
//! When the CPU freelist is exhausted it holds the slab's end token, so the
//! slow path (`alloc_pinned`, under the CpuLocal guard) still knows which slab
//! it was: it takes the frees that arrived remotely on that slab, or switches
//! to a slab from the per-CPU partial list, the node partial list or the page
//! source, and then deactivates the old one (the 2014 leak was losing it).
//!
//! A free of an object of another slab joins the CPU's detached freelist
//! (`detached.rs`) instead of going to its slab one object at a time.

use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, FreeError};
use crate::freelist::{NO_SLAB, is_token, valid_next, walk};
use crate::page_source::PageSource;
use crate::percpu::PerCpu;
use crate::slab::Slab;
use crate::slabs::{CpuPartial, Over, Slabs};
use crate::stats::StatItem;
use arch_api::sync::RawMutex;
use arch_api::{DoubleWord, DwCas, DwCell};
use core::marker::PhantomData;
use core::sync::atomic::Ordering;

mod bulk;
mod detached;
mod nolock;

pub(crate) use detached::Detach;

/// One CPU's state (`struct kmem_cache_cpu`). The fast paths touch only
/// `cell` and `detached`; the partial list is protected by the CpuLocal
/// guard.
#[repr(C, align(64))]
struct CpuSlab {
    /// `(freelist, tid)`: lo = raw freelist head or end token, hi = tid.
    cell: DwCell,
    /// Objects of one other slab freed on this CPU and not yet given back
    /// to it (`detached.rs`): lo = the chain's head or `NO_SLAB`, hi = its
    /// length and a sequence number.
    detached: DwCell,
    /// Per-CPU partial slabs (frozen).
    partial: CpuPartial,
}

/// Which operation a [`TidFront::tid_commit`] ends (its counter, and the
/// preemption point a test backend sees).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Window {
    Alloc,
    Free,
}

/// What a fast-path free did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FastFree {
    /// Freed.
    Done,
    /// Not an object of the CPU slab, whose CPU this is: free it to its
    /// own slab, or onto that CPU's detached freelist.
    ToSlab(usize),
    /// Take the slow path (which starts over and reports any error).
    Slow,
}

/// The tid front: the per-CPU `(freelist, tid)` cells and partial lists
/// over the slab layer `Slabs<P, C, D, R>`. The sheaves front refills and
/// flushes its sheaves through the `*_pinned` operations.
pub(crate) struct TidFront<P, C, D, R: RawMutex> {
    cpu: PerCpu<CpuSlab>,
    /// A power of two at least the number of CPUs.
    tid_step: u64,
    _slabs: Over<P, C, D, R>,
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> TidFront<P, C, D, R> {
    /// The per-CPU cells of a new cache with `nr_cpus` CPUs, from `pages`:
    /// CPU `i` starts with no slab and tid `i`.
    pub(crate) fn new(pages: &P, nr_cpus: usize) -> Option<Self> {
        let cpu = PerCpu::new(pages, nr_cpus, |at: *mut CpuSlab, i| {
            let line = CpuSlab {
                cell: DwCell::new(DoubleWord::new(
                    NO_SLAB,
                    crate::loom_hooks::initial_tid(i as u64),
                )),
                detached: DwCell::new(DoubleWord::new(NO_SLAB, 0)),
                partial: CpuPartial::new(),
            };
            // SAFETY: `PerCpu::new` hands out a valid, unused line.
            unsafe { at.write(line) };
        })?;
        Some(Self {
            cpu,
            tid_step: (nr_cpus as u64).next_power_of_two(),
            _slabs: PhantomData,
        })
    }

    /// The address of the per-CPU array (entropy for the cache's secret).
    pub(crate) fn addr(&self) -> usize {
        self.cpu.addr()
    }

    /// Returns the per-CPU array to `pages`.
    ///
    /// # Safety
    /// Exclusive access, every CPU flushed, `pages` the source of `new`.
    pub(crate) unsafe fn release(&mut self, pages: &P) {
        // SAFETY: the caller's contract.
        unsafe { self.cpu.release(pages) }
    }

    /// The tid step.
    #[cfg(feature = "testing")]
    pub(crate) fn tid_step(&self) -> u64 {
        self.tid_step
    }

    /// The `(freelist, tid)` pair of CPU `cpu`.
    #[cfg(feature = "testing")]
    pub(crate) fn cpu_state(&self, cpu: usize) -> DoubleWord {
        self.cpu.get(cpu).cell.load()
    }

    #[inline(always)]
    fn cpu_slab(&self, cpu: usize) -> &CpuSlab {
        self.cpu.get(cpu)
    }

    /// The next tid of the same CPU.
    #[inline(always)]
    fn next_tid(&self, tid: u64) -> u64 {
        crate::loom_hooks::next_tid(tid, self.tid_step)
    }

    /// The per-CPU DW-CAS on the CPU freelist, in the flavour the backend
    /// allows.
    #[inline(always)]
    fn cpu_cas(&self, c: &CpuSlab, cur: DoubleWord, new: DoubleWord) -> bool {
        Self::local_cas(&c.cell, cur, new)
    }

    /// The per-CPU DW-CAS on one of a CPU's cells.
    #[inline(always)]
    fn local_cas(cell: &DwCell, cur: DoubleWord, new: DoubleWord) -> bool {
        if C::OWNER_ONLY_WRITES {
            D::compare_exchange_local(cell, cur, new).is_ok()
        } else {
            D::compare_exchange(cell, cur, new).is_ok()
        }
    }

    /// Reads and validates the next pointer of `obj`, the head of a CPU
    /// freelist read under `tid`. A bad value with the tid unchanged is
    /// corruption; with the tid changed it was a stale read (retry).
    #[inline(always)]
    fn next_of(
        &self,
        s: &Slabs<P, C, D, R>,
        c: &CpuSlab,
        obj: u64,
        tid: u64,
    ) -> Result<Option<u64>, AllocError> {
        // SAFETY: `obj` is a freelist value that is not a token, so an object
        // of a live slab of this cache.
        let next = unsafe { s.codec().get(obj as usize) };
        if valid_next(s.geo(), s.geo().base_of(obj as usize), next) {
            return Ok(Some(crate::loom_hooks::end_token_mutation(next)));
        }
        if c.cell.load_hi(Ordering::Acquire) != tid {
            return Ok(None);
        }
        Err(AllocError::FreelistCorrupted {
            object: obj as usize,
            decoded: next as usize,
            offset: s.codec().fp_off as u32,
        })
    }

    /// The CAS that ends every tid fast path, alloc or free: the preemption
    /// point of the test backends (feature `testing`), the cell of the CPU we are on now (unless only the owner ever
    /// writes it), the CAS from `(fl, tid)` to `(head, next tid)`, and its
    /// counter. `cpu` becomes the CPU the CAS was tried on, so a retry
    /// reads that CPU's cell.
    #[inline(always)]
    fn tid_commit(
        &self,
        s: &Slabs<P, C, D, R>,
        cpu: &mut usize,
        window: Window,
        fl: u64,
        tid: u64,
        head: u64,
    ) -> bool {
        #[cfg(any(kmm_loom, feature = "testing"))]
        s.cpus().preempt_point(match window {
            Window::Alloc => crate::testing::PreemptPoint::AllocWindow,
            Window::Free => crate::testing::PreemptPoint::FreeWindow,
        });
        if !C::OWNER_ONLY_WRITES {
            *cpu = s.cpus().current_cpu().unwrap_or(*cpu);
        }
        if self.cpu_cas(
            self.cpu_slab(*cpu),
            DoubleWord::new(fl, tid),
            DoubleWord::new(head, self.next_tid(tid)),
        ) {
            s.stat(
                *cpu,
                if window == Window::Alloc {
                    StatItem::AllocFastpath
                } else {
                    StatItem::FreeFastpath
                },
            );
            return true;
        }
        s.stat(*cpu, StatItem::CmpxchgDoubleCpuFail);
        false
    }

    /// The CPU id for a fast-path try: [`CpuLocal::pinned_cpu`] where the
    /// backend has it (a plain thread-local read; registering a new thread is
    /// left to the slow path), else [`CpuLocal::current_cpu`].
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    fn fast_cpu(&self, s: &Slabs<P, C, D, R>) -> Option<usize> {
        if C::HAS_PINNED_CPU {
            s.cpus().pinned_cpu()
        } else {
            s.cpus().current_cpu()
        }
    }

    /// The tid fast path, one try: pop the head of the CPU freelist with one
    /// CAS. `None` (no CPU id, exhausted freelist, a next pointer that fails
    /// validation, a lost CAS) sends the caller to the slow path, which
    /// starts over with [`alloc`](Self::alloc) and reports what
    /// needs reporting.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn alloc_fast(&self, s: &Slabs<P, C, D, R>) -> Option<usize> {
        self.alloc_fast_on(s, self.fast_cpu(s)?)
    }

    /// [`alloc_fast`](Self::alloc_fast) on CPU `cpu` (the caller's id, from
    /// whichever source its path may use).
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn alloc_fast_on(&self, s: &Slabs<P, C, D, R>, mut cpu: usize) -> Option<usize> {
        let c = self.cpu_slab(cpu);
        let tid = c.cell.load_hi(Ordering::Acquire);
        let fl = c.cell.load_lo(Ordering::Acquire);
        if is_token(fl) {
            return None;
        }
        // SAFETY: `fl` is a freelist value that is not a token, so an object
        // of a live slab of this cache.
        let next = unsafe { s.codec().get(fl as usize) };
        // Only an object boundary of the same slab here: the end token (the
        // last free object taken, once per slab's worth) and anything bad
        // are for the slow path, which validates them the full way.
        if !s
            .geo()
            .is_object(s.geo().base_of(fl as usize), next as usize)
        {
            return None;
        }
        self.tid_commit(s, &mut cpu, Window::Alloc, fl, tid, next)
            .then_some(fl as usize)
    }

    /// `slab_alloc` for the tid front (the slow path's entry: the fast path
    /// in a loop, then `alloc_pinned`).
    pub(crate) fn alloc(&self, s: &Slabs<P, C, D, R>) -> Result<usize, AllocError> {
        if let Some(mut cpu) = s.cpus().current_cpu() {
            loop {
                let c = self.cpu_slab(cpu);
                let tid = c.cell.load_hi(Ordering::Acquire);
                let fl = c.cell.load_lo(Ordering::Acquire);
                if is_token(fl) {
                    break;
                }
                let Some(next) = self.next_of(s, c, fl, tid)? else {
                    continue;
                };
                if self.tid_commit(s, &mut cpu, Window::Alloc, fl, tid, next) {
                    return Ok(fl as usize);
                }
            }
        }
        self.alloc_slow(s)
    }

    // Out of line: keeps the inlined fast path short.
    #[inline(never)]
    fn alloc_slow(&self, s: &Slabs<P, C, D, R>) -> Result<usize, AllocError> {
        let (_g, cpu) = s.cpus().pin();
        self.alloc_pinned(s, cpu)
    }

    /// The allocation slow path, under the guard of `cpu` (`___slab_alloc`).
    pub(crate) fn alloc_pinned(
        &self,
        s: &Slabs<P, C, D, R>,
        cpu: usize,
    ) -> Result<usize, AllocError> {
        let c = self.cpu_slab(cpu);
        loop {
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            if !is_token(fl) {
                // Objects are there (another task on this CPU freed some, or
                // the fast path had no CPU id): pop as the fast path does.
                let Some(next) = self.next_of(s, c, fl, tid)? else {
                    continue;
                };
                if self.cpu_cas(
                    c,
                    DoubleWord::new(fl, tid),
                    DoubleWord::new(next, self.next_tid(tid)),
                ) {
                    s.stat(cpu, StatItem::AllocFastpath);
                    return Ok(fl as usize);
                }
                s.stat(cpu, StatItem::CmpxchgDoubleCpuFail);
                continue;
            }
            s.stat(cpu, StatItem::AllocSlowpath);
            let old = (fl != NO_SLAB).then(|| s.geo().base_of(fl as usize) as *mut Slab);
            if let Some(x) = old {
                // Remote frees may have refilled the slab's own freelist.
                let chain = s.take_freelist_frozen(x);
                if !is_token(chain) {
                    match self.install(s, c, fl, tid, chain)? {
                        Some(obj) => {
                            s.stat(cpu, StatItem::AllocRefill);
                            return Ok(obj);
                        }
                        None => {
                            self.give_back(s, x, chain);
                            continue;
                        }
                    }
                }
            }
            // Objects this CPU holds detached go back first: the slab they
            // free may be the one it takes next.
            self.flush_detached(s, cpu);
            let (y, chain) = self.new_cpu_slab(s, c)?;
            match self.install(s, c, fl, tid, chain)? {
                Some(obj) => {
                    if let Some(x) = old {
                        // The CPU freelist was exactly x's end token, so none
                        // of x's objects is on it: unfreeze x as it is.
                        s.deactivate(x, None);
                    }
                    return Ok(obj);
                }
                None => {
                    self.give_back(s, y, chain);
                    // SAFETY: under the guard of `cpu`.
                    unsafe { c.partial.push(y) };
                }
            }
        }
    }

    /// Installs a freelist `chain` (owned by us) as the CPU freelist, popping
    /// its first object, if the cell still holds `(fl, tid)`.
    fn install(
        &self,
        s: &Slabs<P, C, D, R>,
        c: &CpuSlab,
        fl: u64,
        tid: u64,
        chain: u64,
    ) -> Result<Option<usize>, AllocError> {
        // SAFETY: `chain` is an object of a slab we hold frozen.
        let next = unsafe { s.codec().get(chain as usize) };
        if !valid_next(s.geo(), s.geo().base_of(chain as usize), next) {
            return Err(AllocError::FreelistCorrupted {
                object: chain as usize,
                decoded: next as usize,
                offset: s.codec().fp_off as u32,
            });
        }
        let next = crate::loom_hooks::end_token_mutation(next);
        Ok(self
            .cpu_cas(
                c,
                DoubleWord::new(fl, tid),
                DoubleWord::new(next, self.next_tid(tid)),
            )
            .then_some(chain as usize))
    }

    /// Returns a freelist chain we took from frozen slab `x` to it.
    fn give_back(&self, s: &Slabs<P, C, D, R>, x: *mut Slab, chain: u64) {
        // SAFETY: we own the chain (taken from x's freelist).
        if let Some((tail, n)) = unsafe { walk(s.codec(), s.geo(), chain) } {
            let _ = s.slab_free_chain(x, chain as usize, tail, n, false);
        }
    }

    /// A frozen slab with its freelist, for the CPU: per-CPU partial list,
    /// then the node partial list, then a new slab.
    fn new_cpu_slab(
        &self,
        s: &Slabs<P, C, D, R>,
        c: &CpuSlab,
    ) -> Result<(*mut Slab, u64), AllocError> {
        // SAFETY: the caller holds the guard of the CPU owning `c`.
        while let Some(x) = unsafe { c.partial.pop() } {
            let chain = s.take_freelist_frozen(x);
            if !is_token(chain) {
                s.stat_here(StatItem::CpuPartialAlloc);
                return Ok((x, chain));
            }
            s.deactivate(x, None);
        }
        if let Some(r) = s.get_partial_node(&c.partial) {
            s.stat_here(StatItem::AllocFromPartial);
            return Ok(r);
        }
        s.new_slab()
    }

    /// The tid fast free, one try: push `p` (an object boundary, checked by
    /// the caller) onto the CPU freelist with one CAS. `p` outside the CPU
    /// slab is the caller's to free to its slab or onto the CPU's detached
    /// freelist ([`FastFree::ToSlab`]); anything else (no CPU id, `p`
    /// already the head, a lost CAS) sends the caller to the slow path, which
    /// starts over with `free`.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn free_fast(&self, s: &Slabs<P, C, D, R>, p: usize) -> FastFree {
        let Some(mut cpu) = self.fast_cpu(s) else {
            return FastFree::Slow;
        };
        let c = self.cpu_slab(cpu);
        let tid = c.cell.load_hi(Ordering::Acquire);
        let fl = c.cell.load_lo(Ordering::Acquire);
        // `NO_SLAB` needs no test of its own: its slab base is 0, and no
        // object lies in the object area of a slab at address 0.
        if !s.geo().in_range(s.geo().base_of(fl as usize), p) {
            return FastFree::ToSlab(cpu);
        }
        if fl == p as u64 {
            return FastFree::Slow;
        }
        // SAFETY: `p` is an object of the CPU slab (range-checked here and
        // boundary-checked by the caller) and is being freed by us.
        unsafe { s.codec().set(p, fl) };
        if self.tid_commit(s, &mut cpu, Window::Free, fl, tid, p as u64) {
            FastFree::Done
        } else {
            FastFree::Slow
        }
    }

    /// `slab_free` for the tid front (the slow path's entry). `p` has passed
    /// the caller's checks.
    pub(crate) fn free(&self, s: &Slabs<P, C, D, R>, p: usize) -> Result<(), FreeError> {
        if let Some(mut cpu) = s.cpus().current_cpu() {
            loop {
                let c = self.cpu_slab(cpu);
                let tid = c.cell.load_hi(Ordering::Acquire);
                let fl = c.cell.load_lo(Ordering::Acquire);
                if fl == NO_SLAB || !s.geo().in_range(s.geo().base_of(fl as usize), p) {
                    if self.heads_detached(cpu, p) {
                        return Err(FreeError::DoubleFree { ptr: p });
                    }
                    return self.free_to_slab(s, p, None);
                }
                if fl == p as u64 {
                    return Err(FreeError::DoubleFree { ptr: p });
                }
                // SAFETY: `p` is an object of the CPU slab (range-checked and
                // boundary-checked by the caller) and is being freed by us.
                unsafe { s.codec().set(p, fl) };
                if self.tid_commit(s, &mut cpu, Window::Free, fl, tid, p as u64) {
                    return Ok(());
                }
            }
        }
        self.free_slow(s, p)
    }

    /// A free of an object outside the CPU slab (`__slab_free`). When it
    /// makes a full slab partial, the slab is frozen for this CPU and put
    /// on its partial list (`put_cpu_partial`) instead of the node list, so
    /// the common case takes no node lock: frees of old objects, scattered
    /// over full slabs, took it on nearly every call and serialised 16 CPUs
    /// (BENCHMARKS.md, session 14). `pinned` is the CPU whose guard the
    /// caller holds, if any.
    pub(crate) fn free_to_slab(
        &self,
        s: &Slabs<P, C, D, R>,
        p: usize,
        pinned: Option<usize>,
    ) -> Result<(), FreeError> {
        if let Some(x) = s.free_to_slab(p)? {
            self.put_frozen(s, x, pinned);
        }
        Ok(())
    }

    /// Puts slab `x`, which a free froze for the freeing CPU, on that CPU's
    /// partial list: `pinned`, the CPU whose guard the caller holds, or
    /// else the CPU the caller runs on, under its guard.
    fn put_frozen(&self, s: &Slabs<P, C, D, R>, x: *mut Slab, pinned: Option<usize>) {
        match pinned {
            Some(cpu) => self.put_cpu_partial(s, cpu, x),
            None => {
                let (_g, cpu) = s.cpus().pin();
                self.put_cpu_partial(s, cpu, x);
            }
        }
    }

    /// `put_cpu_partial`: frozen slab `x` onto CPU `cpu`'s partial list; a
    /// list already `cpu_partial` long is unfrozen to the node first
    /// (`__put_partials`).
    #[cold]
    fn put_cpu_partial(&self, s: &Slabs<P, C, D, R>, cpu: usize, x: *mut Slab) {
        if crate::loom_hooks::frozen_slab_dropped() {
            return;
        }
        let c = self.cpu_slab(cpu);
        // SAFETY: the caller holds the guard of `cpu`; `x` is frozen by the
        // caller's free and on no list.
        unsafe {
            if c.partial.len() >= s.cpu_partial() {
                while let Some(y) = c.partial.pop() {
                    s.deactivate(y, None);
                }
                s.stat(cpu, StatItem::CpuPartialDrain);
            }
            c.partial.push(x);
        }
        s.stat(cpu, StatItem::CpuPartialFree);
    }

    #[inline(never)]
    fn free_slow(&self, s: &Slabs<P, C, D, R>, p: usize) -> Result<(), FreeError> {
        let (_g, cpu) = s.cpus().pin();
        self.free_pinned(s, cpu, p)
    }

    /// Free under the guard of `cpu` (also used by sheaf flushes).
    pub(crate) fn free_pinned(
        &self,
        s: &Slabs<P, C, D, R>,
        cpu: usize,
        p: usize,
    ) -> Result<(), FreeError> {
        let c = self.cpu_slab(cpu);
        loop {
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            if fl == NO_SLAB || !s.geo().in_range(s.geo().base_of(fl as usize), p) {
                if self.heads_detached(cpu, p) {
                    return Err(FreeError::DoubleFree { ptr: p });
                }
                return self.free_to_slab(s, p, Some(cpu));
            }
            if fl == p as u64 {
                return Err(FreeError::DoubleFree { ptr: p });
            }
            // SAFETY: as in `free`.
            unsafe { s.codec().set(p, fl) };
            if self.cpu_cas(
                c,
                DoubleWord::new(fl, tid),
                DoubleWord::new(p as u64, self.next_tid(tid)),
            ) {
                s.stat(cpu, StatItem::FreeFastpath);
                return Ok(());
            }
            s.stat(cpu, StatItem::CmpxchgDoubleCpuFail);
        }
    }

    /// Bulk allocation into `out` under the guard of `cpu`: whole runs of the
    /// CPU freelist are detached with one CAS each (sheaf refill).
    pub(crate) fn alloc_bulk_pinned(
        &self,
        s: &Slabs<P, C, D, R>,
        cpu: usize,
        out: &mut [usize],
    ) -> Result<usize, AllocError> {
        let c = self.cpu_slab(cpu);
        let mut n = 0;
        'outer: while n < out.len() {
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            if is_token(fl) {
                match self.alloc_pinned(s, cpu) {
                    Ok(o) => {
                        out[n] = o;
                        n += 1;
                        continue;
                    }
                    Err(e) if n == 0 => return Err(e),
                    Err(_) => break,
                }
            }
            let mut cur = fl;
            let mut k = 0;
            while n + k < out.len() && !is_token(cur) {
                out[n + k] = cur as usize;
                k += 1;
                match self.next_of(s, c, cur, tid)? {
                    Some(next) => cur = next,
                    None => continue 'outer,
                }
            }
            if self.cpu_cas(
                c,
                DoubleWord::new(fl, tid),
                DoubleWord::new(cur, self.next_tid(tid)),
            ) {
                s.stat(cpu, StatItem::AllocFastpath);
                n += k;
            }
        }
        Ok(n)
    }

    /// `flush_slab` + `unfreeze_partials`: gives CPU `cpu`'s detached
    /// freelist back, detaches its slab (merging its CPU freelist back into
    /// the slab) and unfreezes its partial slabs.
    /// Under the guard of `cpu`, or with exclusive access to the cache.
    pub(crate) fn flush_cpu(&self, s: &Slabs<P, C, D, R>, cpu: usize) {
        self.flush_detached(s, cpu);
        let c = self.cpu_slab(cpu);
        loop {
            let tid = c.cell.load_hi(Ordering::Acquire);
            let fl = c.cell.load_lo(Ordering::Acquire);
            if fl == NO_SLAB {
                break;
            }
            if !self.cpu_cas(
                c,
                DoubleWord::new(fl, tid),
                DoubleWord::new(NO_SLAB, self.next_tid(tid)),
            ) {
                continue;
            }
            let x = s.geo().base_of(fl as usize) as *mut Slab;
            if is_token(fl) {
                s.deactivate(x, None);
            } else {
                // A corrupt list is not followed: the slab then stays frozen
                // (leaked rather than handed out twice).
                // SAFETY: the detached CPU freelist is ours now.
                if let Some((tail, n)) = unsafe { walk(s.codec(), s.geo(), fl) } {
                    s.deactivate(x, Some((fl as usize, tail, n)));
                }
            }
            s.stat(cpu, StatItem::CpuslabFlush);
            break;
        }
        // SAFETY: under the guard of `cpu` or exclusive.
        while let Some(x) = unsafe { c.partial.pop() } {
            s.deactivate(x, None);
        }
    }
}
