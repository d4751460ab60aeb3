//! The sheaves front (Linux 7.0's replacement for the tid fast path): per-CPU
//! arrays ("sheaves") of object pointers, a main and a spare, pushed and
//! popped under the CpuLocal guard with no atomic instruction. Full and empty
//! sheaves are exchanged with the node's **barn** under its lock; a CPU
//! whose sheaves are both empty (full) and that finds nothing in the barn
//! refills (flushes) its main sheaf in bulk from (to) the slabs.
//!
//! Sheaves themselves are carved from pages of the page source (a small
//! pool under the barn lock), so the front needs no other allocator.

use crate::cache::KmemCache;
use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, FreeError};
use crate::fast_tid::FastFree;
use crate::page_source::PageSource;
use crate::slab::Slab;
use crate::stat;
use arch_api::DwCas;
use arch_api::sync::{Mutex, RawMutex};
use core::ptr::{NonNull, null_mut};

/// A sheaf: `size` object pointers followed by room for `capacity`.
#[repr(C)]
pub(crate) struct Sheaf {
    size: SheafSize,
    next: *mut Sheaf,
    // `capacity` usize slots follow.
}

/// A sheaf's fill count: plain memory (only its CPU touches it, under the
/// guard). Under loom it is a relaxed loom atomic so the model checker can
/// interleave at its reads and writes (a plain load/store, no RMW).
#[cfg(not(kmm_loom))]
#[repr(transparent)]
struct SheafSize(usize);
#[cfg(not(kmm_loom))]
impl SheafSize {
    fn new() -> Self {
        Self(0)
    }
    fn full_stop() -> Self {
        Self(NO_SHEAF_SIZE)
    }
    #[inline(always)]
    fn get(&self) -> usize {
        self.0
    }
    #[inline(always)]
    fn set(&mut self, v: usize) {
        self.0 = v;
    }
}
#[cfg(kmm_loom)]
struct SheafSize(loom::sync::atomic::AtomicUsize);
#[cfg(kmm_loom)]
impl SheafSize {
    fn new() -> Self {
        Self(loom::sync::atomic::AtomicUsize::new(0))
    }
    fn full_stop() -> Self {
        Self(loom::sync::atomic::AtomicUsize::new(NO_SHEAF_SIZE))
    }
    fn get(&self) -> usize {
        self.0.load(core::sync::atomic::Ordering::Relaxed)
    }
    fn set(&mut self, v: usize) {
        self.0.store(v, core::sync::atomic::Ordering::Relaxed)
    }
}

/// The fill count of a CPU's "no sheaf" stand-in: above every capacity, so
/// the fast paths' one bounds check (`size - 1 < cap` to pop, `size < cap`
/// to push) fails on it and they need no separate null test.
const NO_SHEAF_SIZE: usize = usize::MAX;

impl Sheaf {
    /// The stand-in a CPU's `main` points at while it has no sheaf (kept in
    /// its `CpuSlab`): a header with no slots whose size makes both fast
    /// paths miss. Never written.
    pub(crate) fn no_sheaf() -> Self {
        Self {
            size: SheafSize::full_stop(),
            next: null_mut(),
        }
    }

    /// # Safety
    /// `s` is a live sheaf of a cache whose capacity exceeds `i`.
    #[inline(always)]
    unsafe fn slot(s: *mut Sheaf, i: usize) -> *mut usize {
        // SAFETY: the chunk holds the header and `capacity` slots after it.
        unsafe { s.add(1).cast::<usize>().add(i) }
    }
}

pub(crate) struct BarnInner {
    full: *mut Sheaf,
    nr_full: usize,
    empty: *mut Sheaf,
    nr_empty: usize,
    /// Unused sheaf chunks.
    chunks: *mut Sheaf,
    /// Pool pages, linked through their first word.
    pages: *mut usize,
}

// SAFETY: only pointers to memory the cache owns, reached under the mutex.
unsafe impl Send for BarnInner {}

/// The per-node barn.
pub(crate) struct Barn<R: RawMutex> {
    inner: Mutex<R, BarnInner>,
}

impl<R: RawMutex> Barn<R> {
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(BarnInner {
                full: null_mut(),
                nr_full: 0,
                empty: null_mut(),
                nr_empty: 0,
                chunks: null_mut(),
                pages: null_mut(),
            }),
        }
    }
}

/// Pops the head of a sheaf list.
///
/// # Safety
/// The list is protected by the barn lock the caller holds.
unsafe fn pop(list: &mut *mut Sheaf) -> *mut Sheaf {
    let s = *list;
    if !s.is_null() {
        // SAFETY: `s` is a live sheaf on the caller's locked list.
        *list = unsafe { (*s).next };
    }
    s
}

/// # Safety
/// As [`pop`]; `s` is a live sheaf on no list.
unsafe fn push(list: &mut *mut Sheaf, s: *mut Sheaf) {
    // SAFETY: as documented.
    unsafe { (*s).next = *list };
    *list = s;
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> KmemCache<P, C, D, R> {
    fn sheaf_bytes(&self) -> usize {
        (core::mem::size_of::<Sheaf>() + self.cap() * 8).next_multiple_of(64)
    }

    /// Sheaf capacity (at least 1: normalised in `with_config`).
    #[inline(always)]
    fn cap(&self) -> usize {
        self.config.sheaf_capacity
    }

    /// An empty sheaf: from the barn's empty list, the chunk pool, or a new
    /// pool page.
    fn get_empty_sheaf(&self) -> Result<*mut Sheaf, AllocError> {
        let mut b = self.barn.inner.lock();
        // SAFETY: barn lock held.
        let mut s = unsafe { pop(&mut b.empty) };
        if !s.is_null() {
            b.nr_empty -= 1;
        } else {
            // SAFETY: barn lock held.
            s = unsafe { pop(&mut b.chunks) };
            if s.is_null() {
                let page = self.pages.page_size();
                let mem = self
                    .pages
                    .alloc_pages(page, page)
                    .ok_or(AllocError::OutOfMemory)?
                    .as_ptr();
                let sz = self.sheaf_bytes();
                // SAFETY: a fresh page we own: link it into the pool list
                // through its first word, carve the rest into chunks.
                unsafe {
                    mem.cast::<*mut usize>().write(b.pages);
                    b.pages = mem.cast();
                    let mut off = 64;
                    while off + sz <= page {
                        let chunk = mem.add(off).cast::<Sheaf>();
                        chunk.write(Sheaf {
                            size: SheafSize::new(),
                            next: null_mut(),
                        });
                        push(&mut b.chunks, chunk);
                        off += sz;
                    }
                    s = pop(&mut b.chunks);
                }
            }
        }
        // SAFETY: `s` is a chunk we now own.
        unsafe { (*s).size.set(0) };
        Ok(s)
    }

    /// `barn_get_full_sheaf` / `barn_put_empty_sheaf` in one lock hold.
    fn barn_exchange_empty_for_full(&self, empty: *mut Sheaf) -> Option<*mut Sheaf> {
        let mut b = self.barn.inner.lock();
        // SAFETY: barn lock held.
        let full = unsafe { pop(&mut b.full) };
        if full.is_null() {
            return None;
        }
        if crate::loom_hooks::barn_two_phase() {
            // Broken variant: the sheaf is unlinked in a second critical
            // section, so two CPUs can both take the same full sheaf.
            // SAFETY: barn lock held; undo the pop, unlink later.
            unsafe { push(&mut b.full, full) };
            drop(b);
            let mut b = self.barn.inner.lock();
            // SAFETY: barn lock held.
            unsafe {
                if b.full == full {
                    pop(&mut b.full);
                }
            }
            b.nr_full -= 1;
            if !empty.is_null() {
                // SAFETY: barn lock held; `empty` is ours.
                unsafe { push(&mut b.empty, empty) };
                b.nr_empty += 1;
            }
            return Some(full);
        }
        b.nr_full -= 1;
        if !empty.is_null() {
            if b.nr_empty < self.config.barn_max_empty {
                // SAFETY: barn lock held; `empty` is ours.
                unsafe { push(&mut b.empty, empty) };
                b.nr_empty += 1;
            } else {
                // SAFETY: as above.
                unsafe { push(&mut b.chunks, empty) };
            }
        }
        Some(full)
    }

    /// `barn_put_full_sheaf` + get an empty one, if the barn has room.
    fn barn_exchange_full_for_empty(&self, full: *mut Sheaf) -> Option<*mut Sheaf> {
        let mut b = self.barn.inner.lock();
        if b.nr_full >= self.config.barn_max_full {
            return None;
        }
        // SAFETY: barn lock held; `full` is ours.
        unsafe { push(&mut b.full, full) };
        b.nr_full += 1;
        // SAFETY: barn lock held.
        let mut e = unsafe { pop(&mut b.empty) };
        if e.is_null() {
            // SAFETY: barn lock held.
            e = unsafe { pop(&mut b.chunks) };
        } else {
            b.nr_empty -= 1;
        }
        drop(b);
        if e.is_null() {
            e = self.get_empty_sheaf().ok()?;
        }
        // SAFETY: `e` is ours.
        unsafe { (*e).size.set(0) };
        Some(e)
    }

    /// The sheaves fast path, one try: pop from the main sheaf. With a
    /// backend that pins for free ([`CpuLocal::HAS_PINNED_CPU`]) there is no
    /// guard at all and anything else is left to the caller's slow path;
    /// otherwise the guard is taken (and dropped) here.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn alloc_sheaves_fast(&self) -> Option<usize> {
        if C::HAS_PINNED_CPU {
            let cpu = self.cpus.pinned_cpu()?;
            // SAFETY: the caller is pinned to `cpu` (the `pinned_cpu`
            // contract), as a guard would make it.
            unsafe { self.sheaf_pop(cpu) }
        } else {
            let (_g, cpu) = self.cpus.pin();
            // SAFETY: the guard pins us to `cpu`.
            unsafe { self.sheaf_pop(cpu) }
        }
    }

    /// `slab_alloc` for the sheaves front (the slow path's entry: pins,
    /// pops, refills).
    pub(crate) fn alloc_sheaves(&self) -> Result<usize, AllocError> {
        let (_g, cpu) = self.cpus.pin();
        // SAFETY: the guard pins us to `cpu`.
        if let Some(p) = unsafe { self.sheaf_pop(cpu) } {
            return Ok(p);
        }
        self.alloc_sheaves_slow(cpu)
    }

    /// Pops an object from CPU `cpu`'s main sheaf, if it has one.
    ///
    /// # Safety
    /// The caller is pinned to `cpu` (holds its guard, or `pinned_cpu`
    /// answered `cpu`).
    #[inline(always)]
    unsafe fn sheaf_pop(&self, cpu: usize) -> Option<usize> {
        let c = self.cpu_slab(cpu);
        // SAFETY: pinned to `cpu`, so the CPU's sheaves are ours; `main` is
        // a live sheaf whose first `size` slots hold objects, or the CPU's
        // stand-in, whose size fails the check (so it is never written).
        unsafe {
            let main = c.main.get();
            let n = (*main).size.get().wrapping_sub(1);
            if n < self.cap() {
                (*main).size.set(n);
                stat!(self, cpu, AllocFastpath);
                return Some(*Sheaf::slot(main, n));
            }
        }
        None
    }

    /// The main sheaf is empty (or missing). The caller holds `cpu`'s guard.
    #[inline(never)]
    fn alloc_sheaves_slow(&self, cpu: usize) -> Result<usize, AllocError> {
        let c = self.cpu_slab(cpu);
        stat!(self, cpu, AllocSlowpath);
        // SAFETY: under the guard of `cpu`, the main and spare sheaves are
        // ours; sheaves returned by the barn are ours.
        unsafe {
            let mut main = c.main_sheaf();
            let spare = c.spare.get();
            if !spare.is_null() && (*spare).size.get() > 0 {
                c.main.set(spare);
                c.spare.set(main);
                main = spare;
            } else if let Some(full) = self.barn_exchange_empty_for_full(main) {
                stat!(self, cpu, BarnGet);
                c.main.set(full);
                main = full;
            } else {
                if main.is_null() {
                    main = self.get_empty_sheaf()?;
                    c.main.set(main);
                }
                let cap = self.cap();
                let slots = core::slice::from_raw_parts_mut(Sheaf::slot(main, 0), cap);
                let n = self.alloc_bulk_pinned(cpu, slots)?;
                (*main).size.set(n);
                stat!(self, cpu, SheafRefill);
                if n == 0 {
                    return Err(AllocError::OutOfMemory);
                }
            }
            let n = (*main).size.get().wrapping_sub(1);
            if n >= self.cap() {
                // An empty sheaf where a full one was promised: only the
                // broken barn variant gets here; refuse rather than read
                // outside the sheaf.
                return Err(AllocError::OutOfMemory);
            }
            (*main).size.set(n);
            Ok(*Sheaf::slot(main, n))
        }
    }

    /// The sheaves fast free, one try: push onto the main sheaf (guarded as
    /// in [`alloc_sheaves_fast`](Self::alloc_sheaves_fast)). `p` has passed
    /// the caller's checks.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn free_sheaves_fast(&self, p: usize) -> FastFree {
        let done = if C::HAS_PINNED_CPU {
            let Some(cpu) = self.cpus.pinned_cpu() else {
                return FastFree::Slow;
            };
            // SAFETY: pinned to `cpu` (the `pinned_cpu` contract).
            unsafe { self.sheaf_push(cpu, p) }
        } else {
            let (_g, cpu) = self.cpus.pin();
            // SAFETY: the guard pins us to `cpu`.
            unsafe { self.sheaf_push(cpu, p) }
        };
        if done { FastFree::Done } else { FastFree::Slow }
    }

    /// `slab_free` for the sheaves front (the slow path's entry). `p` has
    /// passed the caller's checks.
    pub(crate) fn free_sheaves(&self, p: usize) -> Result<(), FreeError> {
        let (_g, cpu) = self.cpus.pin();
        // SAFETY: the guard pins us to `cpu`.
        if unsafe { self.sheaf_push(cpu, p) } {
            return Ok(());
        }
        self.free_sheaves_slow(cpu, p)
    }

    /// Pushes `p` onto CPU `cpu`'s main sheaf if it has room.
    ///
    /// # Safety
    /// As [`sheaf_pop`](Self::sheaf_pop); `p` is an object being freed.
    #[inline(always)]
    unsafe fn sheaf_push(&self, cpu: usize, p: usize) -> bool {
        let c = self.cpu_slab(cpu);
        // SAFETY: pinned to `cpu`, so the CPU's sheaves are ours; `main` is
        // a live sheaf with `cap` slots, or the stand-in, whose size fails
        // the check.
        unsafe {
            let main = c.main.get();
            let n = (*main).size.get();
            if n < self.cap() {
                *Sheaf::slot(main, n) = p;
                (*main).size.set(n + 1);
                stat!(self, cpu, FreeFastpath);
                return true;
            }
        }
        false
    }

    /// The main sheaf is full (or missing). The caller holds `cpu`'s guard.
    #[inline(never)]
    fn free_sheaves_slow(&self, cpu: usize, p: usize) -> Result<(), FreeError> {
        let c = self.cpu_slab(cpu);
        stat!(self, cpu, FreeSlowpath);
        // SAFETY: as in `alloc_sheaves_slow`.
        unsafe {
            let mut main = c.main_sheaf();
            let spare = c.spare.get();
            if main.is_null() {
                match self.get_empty_sheaf() {
                    Ok(s) => {
                        main = s;
                        c.main.set(s);
                    }
                    // No memory for a sheaf: free straight to the slabs.
                    Err(_) => return self.free_pinned(cpu, p),
                }
            } else if spare.is_null() || (*spare).size.get() == 0 {
                // Main is full: swap it with the empty (or missing) spare.
                let e = if spare.is_null() {
                    match self.get_empty_sheaf() {
                        Ok(s) => s,
                        Err(_) => return self.free_pinned(cpu, p),
                    }
                } else {
                    spare
                };
                c.spare.set(main);
                c.main.set(e);
                main = e;
            } else if let Some(e) = self.barn_exchange_full_for_empty(main) {
                stat!(self, cpu, BarnPut);
                c.main.set(e);
                main = e;
            } else {
                self.flush_sheaf(cpu, main);
                stat!(self, cpu, SheafFlush);
            }
            let n = (*main).size.get();
            *Sheaf::slot(main, n) = p;
            (*main).size.set(n + 1);
            Ok(())
        }
    }

    /// Frees every object of sheaf `s` to the slabs, under the guard of `cpu`.
    ///
    /// # Safety
    /// `s` is a live sheaf owned by the caller.
    unsafe fn flush_sheaf(&self, cpu: usize, s: *mut Sheaf) {
        // SAFETY: the caller owns `s`; its first `size` slots are objects.
        unsafe {
            for i in 0..(*s).size.get() {
                let _ = self.free_pinned(cpu, *Sheaf::slot(s, i));
            }
            (*s).size.set(0);
        }
    }

    /// Empties CPU `cpu`'s sheaves into the slabs and returns them to the
    /// pool. Under the guard of `cpu`, or with exclusive access.
    pub(crate) fn flush_cpu_sheaves(&self, cpu: usize) {
        let c = self.cpu_slab(cpu);
        // SAFETY: the guard (or exclusivity) makes the sheaves ours.
        let sheaves = unsafe { [c.main_sheaf(), c.spare.get()] };
        // SAFETY: as above.
        unsafe {
            c.set_no_main_sheaf();
            c.spare.set(null_mut());
        }
        for s in sheaves {
            if s.is_null() {
                continue;
            }
            // SAFETY: `s` is ours (detached above) and live.
            unsafe {
                self.flush_sheaf(cpu, s);
                let mut b = self.barn.inner.lock();
                push(&mut b.chunks, s);
            }
        }
    }

    /// Frees the objects of every full sheaf in the barn to the slabs.
    pub(crate) fn flush_barn(&self) {
        loop {
            let s = {
                let mut b = self.barn.inner.lock();
                // SAFETY: barn lock held.
                let s = unsafe { pop(&mut b.full) };
                if s.is_null() {
                    return;
                }
                b.nr_full -= 1;
                s
            };
            // SAFETY: `s` is ours now; its first `size` slots are objects.
            unsafe {
                for i in 0..(*s).size.get() {
                    let o = *Sheaf::slot(s, i);
                    let _ = self.slab_free_chain(self.geo.base_of(o) as *mut Slab, o, o, 1, false);
                }
                (*s).size.set(0);
                let mut b = self.barn.inner.lock();
                push(&mut b.chunks, s);
            }
        }
    }

    /// Returns the sheaf pool's pages (destroy, after every flush).
    pub(crate) fn release_sheaf_pool(&self) {
        let mut b = self.barn.inner.lock();
        b.empty = null_mut();
        b.nr_empty = 0;
        b.chunks = null_mut();
        let mut p = core::mem::replace(&mut b.pages, null_mut());
        let page = self.pages.page_size();
        while !p.is_null() {
            // SAFETY: `p` is a pool page (its first word links the next); no
            // sheaf in it is in use after the flushes.
            unsafe {
                let next = p.cast::<*mut usize>().read();
                self.pages
                    .free_pages(NonNull::new_unchecked(p.cast()), page, page);
                p = next;
            }
        }
    }
}
