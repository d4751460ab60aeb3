//! `kmem_cache_alloc` and `kmem_cache_free`: the inlined fast paths (the
//! sheaves front's step, or one call to the tid front's) and the one
//! out-of-line call that does everything else (guards, refills, checks,
//! errors, retries).

#[cfg(not(feature = "debug"))]
use super::LEAF_ON;
use super::{KmemCache, MODE_DESTROYED, MODE_SHEAVES, MODE_TID};
use crate::error::{AllocError, FreeError};
use crate::sheaves::Heads;
#[cfg(not(feature = "debug"))]
use crate::sheaves::Leaf;
use crate::tid::{Detach, FastFree};
use arch_api::Platform;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

/// Where [`KmemCache::free_at`] goes after the inlined checks.
#[cfg_attr(feature = "debug", allow(dead_code))]
enum Route {
    /// Freed inline (the sheaves front's leaf).
    Done,
    /// The tid front's free, out of line: it answers, falling back itself.
    Tid,
    /// The checked slow path.
    Slow,
}

impl<K: Platform> KmemCache<K> {
    /// `kmem_cache_alloc`: one object, or an error (out of memory, a detected
    /// freelist corruption, a destroyed cache). Never panics.
    #[inline(always)]
    pub fn alloc(&self) -> Result<NonNull<u8>, AllocError> {
        // The inlined part is leaf code that only succeeds: the sheaves
        // front's step, or one call to the tid front's. Everything else
        // (guards, refills, errors, retries) is one out-of-line call, so
        // the fast path needs (almost) no stack frame.
        // SAFETY: the cache's own lines.
        unsafe { self.alloc_at(|| self.sheaves.heads()) }
    }

    /// [`alloc`](Self::alloc), the sheaves front's lines at `at()` (computed
    /// by a caller that knows where they are without loading it; called
    /// only on the sheaves front, so a tid cache pays nothing for it).
    ///
    /// # Safety
    /// `at()` is where this cache's sheaves lines are (`SheafFront::heads`).
    #[inline(always)]
    pub(crate) unsafe fn alloc_at(
        &self,
        at: impl FnOnce() -> Heads,
    ) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: the caller's contract.
        if let Some(p) = unsafe { self.alloc_fast(at) } {
            return Ok(p);
        }
        let mut err = AllocError::OutOfMemory;
        match self.alloc_slow_into(&mut err) {
            Some(p) => Ok(p),
            None => Err(err),
        }
    }

    /// One try of the front's fast path; `None` sends the caller to the slow
    /// path, which starts over.
    ///
    /// # Safety
    /// As [`alloc_at`](Self::alloc_at).
    #[cfg(not(feature = "debug"))]
    #[inline(always)]
    unsafe fn alloc_fast(&self, at: impl FnOnce() -> Heads) -> Option<NonNull<u8>> {
        // One byte decides the front and "destroyed".
        let mode = self.mode.load(Ordering::Relaxed);
        let p = if mode == MODE_SHEAVES {
            // SAFETY: the caller's contract.
            unsafe { self.sheaves.alloc_fast(&self.slabs, at())? }
        } else if mode == MODE_TID {
            self.tid_alloc_fast()?
        } else {
            return None;
        };
        // SAFETY: objects are inside slab memory, never at address 0.
        Some(unsafe { NonNull::new_unchecked(p as *mut u8) })
    }

    /// The part of [`alloc_fast`](Self::alloc_fast) that is leaf code: the
    /// sheaves front's step without a guard and without a counter; `None`
    /// for anything else (the tid front, the fast-path counters on, a
    /// backend that needs the guard, a miss).
    ///
    /// # Safety
    /// As [`alloc_at`](Self::alloc_at).
    #[cfg(not(feature = "debug"))]
    #[inline(always)]
    pub(crate) unsafe fn alloc_leaf(&self, at: impl FnOnce() -> Heads) -> Option<NonNull<u8>> {
        if self.leaf.load(Ordering::Relaxed) != LEAF_ON {
            return None;
        }
        // SAFETY: the caller's contract.
        match unsafe { self.sheaves.alloc_leaf(&self.slabs, at()) } {
            // SAFETY: objects are inside slab memory, never at address 0.
            Leaf::Done { value, .. } => Some(unsafe { NonNull::new_unchecked(value as *mut u8) }),
            Leaf::Miss | Leaf::Guard => None,
        }
    }

    /// Under `debug` there is no leaf (every allocation is checked).
    #[cfg(feature = "debug")]
    #[inline(always)]
    pub(crate) unsafe fn alloc_leaf(&self, at: impl FnOnce() -> Heads) -> Option<NonNull<u8>> {
        let _ = at;
        None
    }

    /// The tid front's fast path, out of line: its DW-CAS and the live
    /// values around it need callee-saved registers, and inlined beside the
    /// sheaves front's step it made every `malloc` and `free` of kmm-malloc
    /// save five of them, whichever front ran (BENCHMARKS.md, session 15).
    #[inline(never)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    fn tid_alloc_fast(&self) -> Option<usize> {
        self.tid.alloc_fast(&self.slabs)
    }

    /// Under `debug` every allocation takes the slow path (which checks the
    /// poison).
    #[cfg(feature = "debug")]
    #[inline(always)]
    unsafe fn alloc_fast(&self, at: impl FnOnce() -> Heads) -> Option<NonNull<u8>> {
        let _ = at;
        None
    }

    /// [`alloc_slow`](Self::alloc_slow) with the error stored in `err`: the
    /// object comes back in a register and the caller's fast path never
    /// shares a stack slot with this call's result.
    #[inline(never)]
    fn alloc_slow_into(&self, err: &mut AllocError) -> Option<NonNull<u8>> {
        self.alloc_slow().map_err(|e| *err = e).ok()
    }

    /// The whole allocation: fast path (again), slow path and errors.
    #[inline]
    fn alloc_slow(&self) -> Result<NonNull<u8>, AllocError> {
        self.drain_nolock_frees();
        let p = match self.mode.load(Ordering::Relaxed) {
            MODE_SHEAVES => self.sheaves.alloc(&self.tid, &self.slabs)?,
            MODE_TID => self.tid.alloc(&self.slabs)?,
            _ => return Err(AllocError::Destroyed),
        };
        #[cfg(feature = "debug")]
        crate::hardening::on_alloc(self.slabs.geo(), p)?;
        // SAFETY: objects are inside slab memory, never at address 0.
        Ok(unsafe { NonNull::new_unchecked(p as *mut u8) })
    }

    /// `kmem_cache_free`, checked: refuses (with an error, leaving the object
    /// alone) a pointer that is not at an object boundary of this cache, a
    /// double free of the object at the head of the CPU freelist, and, under
    /// `debug`, any foreign pointer, double free or red-zone overwrite.
    ///
    /// # Safety
    /// `ptr` must not be used after a successful free. Without `debug`, `ptr`
    /// must point into mapped memory, because the header of the naturally
    /// aligned block containing it may be read to check ownership (with
    /// `debug`, and a `K::Mem` whose direct map tells its own pointers
    /// from others ([`PhysMap::ptr_to_phys`](arch_api::PhysMap::ptr_to_phys)
    /// answers `None` outside it), foreign pointers are refused before any
    /// read).
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        // As `alloc`: an inlined leaf that only succeeds, then one call (on
        // the tid front, to its whole free, which falls back itself).
        // SAFETY: the caller's contract; the cache's own lines.
        unsafe { self.free_at(ptr, || self.sheaves.heads()) }
    }

    /// [`free`](Self::free), the sheaves front's lines at `at` (as
    /// [`alloc_at`](Self::alloc_at)).
    ///
    /// # Safety
    /// As [`free`](Self::free) and [`alloc_at`](Self::alloc_at).
    #[inline(always)]
    pub(crate) unsafe fn free_at(
        &self,
        ptr: NonNull<u8>,
        at: impl FnOnce() -> Heads,
    ) -> Result<(), FreeError> {
        let p = ptr.as_ptr() as usize;
        // SAFETY: the caller's contract.
        match unsafe { self.free_fast(p, at) } {
            Route::Done => Ok(()),
            // SAFETY: the caller's contract.
            Route::Tid => unsafe { self.tid_free(ptr) },
            // SAFETY: the caller's contract.
            Route::Slow => unsafe { self.free_slow_call(ptr) },
        }
    }

    /// One try of the front's fast free, with every check of
    /// [`free_slow`](Self::free_slow) before it frees: `Slow` (destroyed,
    /// not an object boundary, a suspected double free, a full sheaf, a
    /// lost CAS, …) sends the caller there, which starts over and reports
    /// the error if any; `Tid` sends it to [`tid_free`](Self::tid_free),
    /// the tid front's whole free out of line.
    ///
    /// # Safety
    /// As [`alloc_at`](Self::alloc_at).
    #[cfg(not(feature = "debug"))]
    #[inline(always)]
    unsafe fn free_fast(&self, p: usize, at: impl FnOnce() -> Heads) -> Route {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED || !self.slabs.geo().is_object_in_own_slab(p) {
            return Route::Slow;
        }
        if mode != MODE_SHEAVES {
            return Route::Tid;
        }
        // SAFETY: the caller's contract.
        match unsafe { self.sheaves.free_fast(&self.slabs, p, at()) } {
            FastFree::Done => Route::Done,
            _ => Route::Slow,
        }
    }

    /// The part of [`free_fast`](Self::free_fast) that is leaf code, with
    /// its checks (as [`alloc_leaf`](Self::alloc_leaf)): `true` if `p` was
    /// freed.
    ///
    /// # Safety
    /// As [`free`](Self::free) and [`alloc_at`](Self::alloc_at).
    #[cfg(not(feature = "debug"))]
    #[inline(always)]
    pub(crate) unsafe fn free_leaf(&self, p: usize, at: impl FnOnce() -> Heads) -> bool {
        if self.leaf.load(Ordering::Relaxed) != LEAF_ON
            || !self.slabs.geo().is_object_in_own_slab(p)
        {
            return false;
        }
        // SAFETY: the caller's contract.
        let done = unsafe { self.sheaves.free_leaf(&self.slabs, p, at()) };
        matches!(done, Leaf::Done { .. })
    }

    /// Under `debug` there is no leaf (every free is checked).
    #[cfg(feature = "debug")]
    #[inline(always)]
    pub(crate) unsafe fn free_leaf(&self, p: usize, at: impl FnOnce() -> Heads) -> bool {
        let _ = (p, at);
        false
    }

    /// The tid front's free, out of line as
    /// [`tid_alloc_fast`](Self::tid_alloc_fast): the fast try and, when it
    /// does not answer, the slow path, so that every call here is in tail
    /// position and neither this function nor the inlined caller keeps
    /// anything across a call. A remote free is then one call deep and
    /// saves no registers: each store besides the object's free pointer
    /// delays the frees in flight behind that miss (BENCHMARKS.md, sessions
    /// 27-28). An object of another slab than the CPU's joins the CPU's
    /// detached freelist, or, on a backend whose per-CPU CAS is the SMP
    /// one, goes straight to its slab.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    unsafe fn tid_free(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let p = ptr.as_ptr() as usize;
        match self.tid.free_fast(&self.slabs, p) {
            FastFree::Done => Ok(()),
            FastFree::ToSlab(_) if !self.tid.detaches() => {
                if self.slabs.try_free_to_slab(p) {
                    Ok(())
                } else {
                    self.tid_free_to_slab(p)
                }
            }
            FastFree::ToSlab(cpu) => match self.tid.detach_fast(&self.slabs, cpu, p) {
                Detach::Done => Ok(()),
                // `p` is freed; the chain it ended is given back out of
                // line. A chain a double free corrupted stays in use, and
                // the error is this free's to report (the object was
                // freed twice, if not this one).
                Detach::Flush(head, n) => self.tid.give_back_detached(&self.slabs, head, n, None),
                // SAFETY: the caller's contract.
                Detach::Slow => unsafe { self.free_slow_call(ptr) },
            },
            // SAFETY: the caller's contract.
            FastFree::Slow => unsafe { self.free_slow_call(ptr) },
        }
    }

    /// The rest of a free to another slab straight to it (the slab changes
    /// lists, is frozen for this CPU, or the CAS lost), out of line.
    #[cold]
    #[inline(never)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    fn tid_free_to_slab(&self, p: usize) -> Result<(), FreeError> {
        self.tid.free_to_slab(&self.slabs, p, None)
    }

    /// Under `debug` every free takes the slow path (ownership, red zones,
    /// poison).
    #[cfg(feature = "debug")]
    #[inline(always)]
    unsafe fn free_fast(&self, p: usize, at: impl FnOnce() -> Heads) -> Route {
        let _ = (p, at);
        Route::Slow
    }

    /// Out-of-line [`free_slow`](Self::free_slow).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_slow_call(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        // SAFETY: the caller's contract.
        unsafe { self.free_slow(ptr) }
    }

    /// The whole free: checks, fast path (again), slow path and errors.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline]
    unsafe fn free_slow(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let p = ptr.as_ptr() as usize;
        let geo = self.slabs.geo();
        let base = geo.base_of(p);
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED {
            return Err(FreeError::Destroyed);
        }
        self.drain_nolock_frees();
        #[cfg(feature = "debug")]
        {
            // SAFETY: the caller's contract; the direct map is consulted first.
            unsafe { self.slabs.check_owner(p)? };
        }
        if !geo.is_object(base, p) {
            return Err(FreeError::Misaligned { ptr: p });
        }
        #[cfg(feature = "debug")]
        crate::hardening::on_free(geo, p)?;
        if mode == MODE_SHEAVES {
            self.sheaves.free(&self.tid, &self.slabs, p)
        } else {
            self.tid.free(&self.slabs, p)
        }
    }
}
