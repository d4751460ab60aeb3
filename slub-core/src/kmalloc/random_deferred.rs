//! `kfree_rcu` on the random kmalloc caches: [`RandomKmalloc::free_deferred_caller`]
//! and the calls that poll, flush and wait, over the general caches and
//! every copy (each cache batches and bounds its own deferred frees, as
//! [`KmemCache::free_deferred`](crate::KmemCache::free_deferred) does;
//! large blocks go to the general path's list).

use super::{ALL, RandomKmalloc};
use crate::deferred::GracePeriod;
use crate::error::{DestroyError, FreeError};
use crate::kmalloc::kmalloc_index;
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;

impl<K: Platform> RandomKmalloc<K> {
    /// `kfree_rcu` of an object of [`alloc_caller`](Self::alloc_caller):
    /// frees it, in the copy chosen by `caller`, once a grace period of
    /// `gp` that starts after this call has elapsed (see
    /// [`Kmalloc::free_deferred`](crate::Kmalloc::free_deferred) for the
    /// batching, the bound and [`FreeError::DeferredBacklog`]).
    ///
    /// ```
    /// # use arch_api::{HostedCpus, PhysArena};
    /// # use core::alloc::Layout;
    /// # use slub_core::{ArenaPages, CacheFlags, RandomKmalloc};
    /// # use slub_core::testing::HostedPlatform;
    /// use slub_core::testing::EpochGracePeriod;
    ///
    /// # let arena = PhysArena::new(8 << 20, 4096).unwrap();
    /// let pages = ArenaPages::new(&arena);
    /// let cpus = HostedCpus::new(2);
    /// let mut km: RandomKmalloc<HostedPlatform<&ArenaPages, &HostedCpus>> =
    ///     RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), 0x1234_5678).unwrap();
    /// let rcu = EpochGracePeriod::new();
    /// let l = Layout::from_size_align(100, 8).unwrap();
    /// let (p, site) = km.alloc_here(l).unwrap();
    /// let reader = rcu.read(); // may still see `p`
    /// // SAFETY: allocated above with `l` and `site`, unpublished, freed once.
    /// unsafe { km.free_deferred_caller(p, l, site, &rcu) }.unwrap();
    /// assert_eq!(km.flush_deferred(&rcu), 1); // the reader holds it up
    /// assert!(km.destroy().is_err()); // never frees under a reader
    /// drop(reader);
    /// km.destroy_deferred(&rcu).unwrap(); // waits for the grace period
    /// ```
    ///
    /// # Safety
    /// As [`free_caller`](Self::free_caller) and
    /// [`Kmalloc::free_deferred`](crate::Kmalloc::free_deferred): `ptr`
    /// came from `alloc_caller(layout, caller)`, no reader may find it after
    /// this call except those already inside a read-side section of `gp`,
    /// and every deferred free on this value uses the same grace periods.
    pub unsafe fn free_deferred_caller<G: GracePeriod + ?Sized>(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        caller: usize,
        gp: &G,
    ) -> Result<(), FreeError> {
        match kmalloc_index(layout.size(), layout.align()) {
            // SAFETY: the caller's contract: an object of this copy's cache.
            Some(i) => unsafe { self.cache(caller, i).free_deferred(ptr, gp) },
            // SAFETY: the caller's contract: a large block of the general path.
            None => unsafe { self.general.free_deferred(ptr, layout, gp) },
        }
    }

    /// `kfree_rcu` of an object of [`alloc`](Self::alloc) (the general
    /// caches).
    ///
    /// # Safety
    /// As [`Kmalloc::free_deferred`](crate::Kmalloc::free_deferred).
    pub unsafe fn free_deferred<G: GracePeriod + ?Sized>(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        gp: &G,
    ) -> Result<(), FreeError> {
        // SAFETY: the caller's contract.
        unsafe { self.general.free_deferred(ptr, layout, gp) }
    }

    /// Frees every deferred object (general caches, copies, large blocks)
    /// whose grace period has elapsed; returns how many went back.
    pub fn poll_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        let copies: usize = self.copy_caches().iter().map(|c| c.poll_deferred(gp)).sum();
        self.general.poll_deferred(gp) + copies
    }

    /// Hands every CPU's partial batches over, in the general caches and
    /// every copy, then frees what has elapsed; returns the deferred frees
    /// still pending.
    pub fn flush_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        self.general.flush_deferred(gp);
        for c in self.copy_caches() {
            c.flush_deferred(gp);
        }
        self.deferred_pending()
    }

    /// Deferred frees given and not yet done, in all caches.
    pub fn deferred_pending(&self) -> usize {
        let copies: usize = self
            .copy_caches()
            .iter()
            .map(|c| c.deferred_pending())
            .sum();
        self.general.deferred_pending() + copies
    }

    /// `kvfree_rcu_barrier` over the general caches and every copy: waits
    /// (with `gp.wait`) until every deferred free is done. If `gp` cannot
    /// wait, returns [`DestroyError::DeferredPending`] as soon as a grace
    /// period has not elapsed (frees nothing early).
    pub fn deferred_barrier<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        let mut ok = self.general.deferred_barrier(gp).is_ok();
        if ok {
            // SAFETY: `block` holds `ALL` initialised caches owned by
            // `self`, borrowed mutably through `self`.
            let all = unsafe { core::slice::from_raw_parts_mut(self.block.as_ptr(), ALL) };
            ok = all.iter_mut().all(|c| c.deferred_barrier(gp).is_ok());
        }
        match self.deferred_pending() {
            0 if ok => Ok(()),
            objects => Err(DestroyError::DeferredPending { objects }),
        }
    }

    /// [`deferred_barrier`](Self::deferred_barrier), then
    /// [`destroy`](Self::destroy); destroys nothing if frees are still
    /// pending.
    pub fn destroy_deferred<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        self.deferred_barrier(gp)?;
        self.destroy()
    }

    /// `Err(DeferredPending)` if any deferred free is pending: `destroy`
    /// then destroys nothing (as [`Kmalloc::destroy`](crate::Kmalloc::destroy)).
    pub(super) fn refuse_deferred_pending(&self) -> Result<(), DestroyError> {
        match self.deferred_pending() {
            0 => Ok(()),
            objects => Err(DestroyError::DeferredPending { objects }),
        }
    }
}
