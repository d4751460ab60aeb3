//! `kmem_cache_alloc_nolock` / `kmem_cache_free_nolock` (Linux 6.18's
//! `kmalloc_nolock`, `kfree_nolock`): allocation and free from any context
//! (an interrupt or NMI handler that interrupted the allocator itself, a
//! tracing hook) that never wait for a lock and never call the page source.
//!
//! Allocation takes, in order: on a sheaves cache, the CPU's main sheaf
//! if the backend can pin from any context
//! ([`CpuLocal::try_pin_nolock`](crate::CpuLocal::try_pin_nolock), Linux's
//! `local_trylock`: it fails when the interrupted code holds the CPU's
//! sheaves); then the current CPU's freelist (the tid front's DW-CAS,
//! which any interruption of another operation on the same cell only makes
//! retry); then one object straight off the first node partial slab under
//! a *try*-lock. If all fail it returns [`AllocError::WouldBlock`];
//! [`Kmalloc::alloc_nolock`](crate::Kmalloc::alloc_nolock) then tries the
//! next size class up, as Linux retries in another bucket. A backend that
//! cannot pin from any context (the default; e.g. `ThreadCpus`, whose
//! sheaves fast path takes no guard) leaves the sheaves alone.
//!
//! A free goes to the main sheaf under the same conditions, else to the CPU
//! freelist when the object is in the CPU slab, else
//! to its slab's freelist (a try-lock where the slab changes lists). When
//! that lock is held the object is pushed on the cache's deferred list (a
//! lock-free stack through the object's free-pointer word), which the next
//! slow path, `shrink` or `destroy` drains: no free is ever refused for
//! contention.

use super::{KmemCache, MODE_DESTROYED, MODE_SHEAVES};
use crate::error::{AllocError, FreeError};
use arch_api::Platform;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

impl<K: Platform> KmemCache<K> {
    /// `kmem_cache_alloc_nolock`: one object without waiting for any lock,
    /// or [`AllocError::WouldBlock`].
    ///
    /// ```
    /// # use arch_api::PhysArena;
    /// # use slub_core::{ArenaPages, CacheFlags, KmemCache, ThreadCpus};
    /// # use slub_core::testing::HostedPlatform;
    /// # let arena = PhysArena::new(4 << 20, 4096).unwrap();
    /// let cache: KmemCache<HostedPlatform<ArenaPages, ThreadCpus>> =
    ///     KmemCache::new("irq", 64, 8, CacheFlags::empty(), ArenaPages::new(&arena), ThreadCpus)
    ///         .unwrap();
    /// let warm = cache.alloc().unwrap(); // gives this CPU a slab
    /// let p = cache.alloc_nolock().unwrap(); // e.g. from an interrupt handler
    /// // SAFETY: allocated above, freed once each.
    /// unsafe { cache.free_nolock(p) }.unwrap();
    /// unsafe { cache.free(warm) }.unwrap();
    /// ```
    #[inline]
    pub fn alloc_nolock(&self) -> Result<NonNull<u8>, AllocError> {
        // As `alloc`: an inlined one-try leaf, then one out-of-line call
        // that reports errors through `err`.
        #[cfg(not(feature = "debug"))]
        {
            let mode = self.mode.load(Ordering::Relaxed);
            if mode == MODE_SHEAVES {
                if let Some(p) = self.sheaves.alloc_nolock(&self.slabs) {
                    // SAFETY: objects are inside slab memory, never at 0.
                    return Ok(unsafe { NonNull::new_unchecked(p as *mut u8) });
                }
            }
            if mode != MODE_DESTROYED {
                if let Some(p) = self.tid.alloc_nolock_fast(&self.slabs) {
                    // SAFETY: objects are inside slab memory, never at 0.
                    return Ok(unsafe { NonNull::new_unchecked(p as *mut u8) });
                }
            }
        }
        let mut err = AllocError::WouldBlock;
        match self.alloc_nolock_slow_into(&mut err) {
            Some(p) => Ok(p),
            None => Err(err),
        }
    }

    #[inline(never)]
    fn alloc_nolock_slow_into(&self, err: &mut AllocError) -> Option<NonNull<u8>> {
        self.alloc_nolock_slow().map_err(|e| *err = e).ok()
    }

    /// Every nolock route, with full validation and errors.
    fn alloc_nolock_slow(&self) -> Result<NonNull<u8>, AllocError> {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED {
            return Err(AllocError::Destroyed);
        }
        // Without `debug` the inlined fast path tried the sheaf already.
        let sheaf = if cfg!(feature = "debug") && mode == MODE_SHEAVES {
            self.sheaves.alloc_nolock(&self.slabs)
        } else {
            None
        };
        let p = match sheaf {
            Some(p) => p,
            None => match self.tid.alloc_nolock(&self.slabs)? {
                Some(p) => p,
                None => self
                    .slabs
                    .alloc_partial_nolock()?
                    .ok_or(AllocError::WouldBlock)?,
            },
        };
        #[cfg(feature = "debug")]
        crate::hardening::on_alloc(self.slabs.geo(), p)?;
        // SAFETY: objects are inside slab memory, never at address 0.
        Ok(unsafe { NonNull::new_unchecked(p as *mut u8) })
    }

    /// `kmem_cache_free_nolock`: frees `ptr` without waiting for any lock
    /// (deferring it when the one it needs is held), with the checks of
    /// [`free`](Self::free).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline]
    pub unsafe fn free_nolock(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED {
            return Err(FreeError::Destroyed);
        }
        let p = ptr.as_ptr() as usize;
        // SAFETY: the caller's contract.
        unsafe { self.check_free_fast(p)? };
        if mode == MODE_SHEAVES && self.sheaves.free_nolock(&self.slabs, p) {
            return Ok(());
        }
        if let Some(r) = self.tid.free_nolock(&self.slabs, p) {
            return r;
        }
        if self.slabs.slab_free_nolock(p)? {
            return Ok(());
        }
        self.defer_nolock_free(p);
        Ok(())
    }

    /// Pushes object `p` (checked, being freed) on the deferred list.
    fn defer_nolock_free(&self, p: usize) {
        let mut head = self.nolock_deferred.load(Ordering::Relaxed);
        loop {
            // SAFETY: `p` is an object of a live slab being freed by us; its
            // free-pointer word is ours to link through.
            unsafe { self.slabs.codec().set(p, head as u64) };
            match self.nolock_deferred.compare_exchange_weak(
                head,
                p,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Frees every object on the deferred list (from a context that may
    /// wait: a slow path, `shrink`, `destroy`).
    #[inline]
    pub(super) fn drain_nolock_frees(&self) {
        if self.nolock_deferred.load(Ordering::Relaxed) != 0 {
            self.drain_nolock_frees_slow();
        }
    }

    #[inline(never)]
    fn drain_nolock_frees_slow(&self) {
        // Taking the whole list with one swap: no ABA, and the objects are
        // ours alone from here.
        let mut p = self.nolock_deferred.swap(0, Ordering::Acquire);
        while p != 0 {
            // SAFETY: linked by `defer_nolock_free`; `p` is still free-pending.
            let next = unsafe { self.slabs.codec().get(p) } as usize;
            self.slabs.free_object(p);
            p = next;
        }
    }

    /// Runs `f` with this cache's node lock held, as an interrupt arriving
    /// inside a slow path would (feature `testing`; not part of the API).
    #[cfg(feature = "testing")]
    pub fn with_node_lock_held<T>(&self, f: impl FnOnce() -> T) -> T {
        self.slabs.with_node_lock_held(f)
    }
}
