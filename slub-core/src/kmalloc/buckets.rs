//! Dedicated bucket sets (Linux's `kmem_buckets_create`): a subsystem's own
//! set of kmalloc size classes, so that its objects (e.g. sizes chosen by
//! user space) never share a slab with the general kmalloc caches or with
//! another subsystem's.
//!
//! Objects are freed through the set that allocated them. Under `debug` a
//! free through another set (or through the general caches) is refused with
//! [`FreeError::ForeignPointer`], because the slab's header names another
//! cache; without `debug` it is, as a free to the wrong [`KmemCache`], the
//! caller's error and may go unnoticed.

use super::{Kmalloc, NR_KMALLOC_CLASSES};
use crate::cache::{CacheFlags, KmemCache};
use crate::deferred::GracePeriod;
use crate::error::{AllocError, CacheError, DestroyError, FreeError};
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::NonNull;

/// A dedicated set of kmalloc caches (`kmem_buckets`); every cache of the
/// set carries the set's name (its size tells them apart in `slabinfo`).
///
/// ```
/// # use arch_api::PhysArena;
/// # use core::alloc::Layout;
/// # use slub_core::{ArenaPages, CacheFlags, Kmalloc, ThreadCpus};
/// # use slub_core::testing::HostedPlatform;
/// # let arena = PhysArena::new(8 << 20, 4096).unwrap();
/// let pages = ArenaPages::new(&arena);
/// let km: Kmalloc<HostedPlatform<&ArenaPages, ThreadCpus>> =
///     Kmalloc::new(&pages, ThreadCpus, CacheFlags::empty()).unwrap();
/// let msg = km.buckets("msg_msg").unwrap();
/// let l = Layout::from_size_align(200, 8).unwrap();
/// let p = msg.alloc(l).unwrap();
/// assert_eq!(msg.caches()[5].name(), "msg_msg");
/// // SAFETY: allocated above from `msg` with `l`.
/// unsafe { msg.free(p, l) }.unwrap();
/// ```
pub struct KmemBuckets<K: Platform> {
    set: Kmalloc<K>,
    name: &'static str,
}

impl<K: Platform> core::fmt::Debug for KmemBuckets<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KmemBuckets")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<K: Platform> Kmalloc<K>
where
    K::Mem: Clone,
    K::Cpu: Clone,
{
    /// `kmem_buckets_create(name)`: a new set of the twelve size classes
    /// with this set's page source, CPUs and flags.
    pub fn buckets(&self, name: &'static str) -> Result<KmemBuckets<K>, CacheError> {
        self.buckets_with(name, self.caches[0].flags())
    }

    /// As [`buckets`](Self::buckets), with `flags` for the set's caches.
    pub fn buckets_with(
        &self,
        name: &'static str,
        flags: CacheFlags,
    ) -> Result<KmemBuckets<K>, CacheError> {
        let set = Kmalloc::with_names(
            [name; NR_KMALLOC_CLASSES],
            self.pages.get().clone(),
            self.caches[0].cpus().clone(),
            flags,
            |_| crate::CacheConfig::default(),
        )?;
        Ok(KmemBuckets { set, name })
    }
}

impl<K: Platform> KmemBuckets<K> {
    /// The set's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The set's caches, smallest first.
    pub fn caches(&self) -> &[KmemCache<K>] {
        self.set.caches()
    }

    /// Bytes of the set's large allocations outstanding.
    pub fn large_bytes(&self) -> usize {
        self.set.large_bytes()
    }

    /// `kmem_buckets_alloc`: as [`Kmalloc::alloc`], from this set.
    #[inline(always)]
    pub fn alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.set.alloc(layout)
    }

    /// `kfree` of an object of this set.
    ///
    /// # Safety
    /// `ptr` was returned by this set's [`alloc`](Self::alloc) with
    /// `layout`, as for [`Kmalloc::free`].
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>, layout: Layout) -> Result<(), FreeError> {
        // SAFETY: the caller's contract.
        unsafe { self.set.free(ptr, layout) }
    }

    /// `kfree_rcu` of an object of this set: as [`Kmalloc::free_deferred`].
    ///
    /// # Safety
    /// As [`Kmalloc::free_deferred`], for an object of this set.
    pub unsafe fn free_deferred<G: GracePeriod + ?Sized>(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        gp: &G,
    ) -> Result<(), FreeError> {
        // SAFETY: the caller's contract.
        unsafe { self.set.free_deferred(ptr, layout, gp) }
    }

    /// As [`Kmalloc::poll_deferred`], on this set.
    pub fn poll_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        self.set.poll_deferred(gp)
    }

    /// As [`Kmalloc::flush_deferred`], on this set.
    pub fn flush_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        self.set.flush_deferred(gp)
    }

    /// As [`Kmalloc::deferred_pending`], on this set.
    pub fn deferred_pending(&self) -> usize {
        self.set.deferred_pending()
    }

    /// As [`Kmalloc::large_deferred_pending`], on this set.
    pub fn large_deferred_pending(&self) -> usize {
        self.set.large_deferred_pending()
    }

    /// Destroys the set's caches (`kmem_cache_destroy` on each); the first
    /// error is returned. Refuses with deferred frees pending, as
    /// [`Kmalloc::destroy`].
    pub fn destroy(&mut self) -> Result<(), DestroyError> {
        self.set.destroy()
    }

    /// As [`Kmalloc::destroy_deferred`]: waits for the set's deferred frees,
    /// then destroys it.
    pub fn destroy_deferred<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        self.set.destroy_deferred(gp)
    }
}
