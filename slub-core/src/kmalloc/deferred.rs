//! `kfree_rcu` for kmalloc objects: [`Kmalloc::free_deferred`] and the
//! calls that poll, flush and wait for what is pending.
//!
//! A class-size object goes to its size class's cache
//! ([`KmemCache::free_deferred`](crate::KmemCache::free_deferred): per-CPU
//! batches, one grace period per batch, a bound on what may be pending).
//! A large block (over [`KMALLOC_MAX_CACHE_SIZE`](super::KMALLOC_MAX_CACHE_SIZE),
//! straight from the page source) is deferred too, as Linux's
//! `kvfree_rcu` defers a `vmalloc`ed block: it cannot carry its own link
//! (readers may still be reading it, so nothing is written into it), so a
//! small record from the kmalloc caches holds its address, layout and grace
//! period cookie on a lock-free list. If no record can be allocated, the
//! caller waits for a grace period of its own (`gp.wait`, as Linux's
//! `kvfree_rcu` falls back to `synchronize_rcu` when it has no page for
//! its batch) or gets [`FreeError::DeferredBacklog`] if it cannot wait.
//!
//! The list holds [`MAX_LARGE_PENDING`] records at most; a free that finds
//! it full polls, then waits for the oldest record's grace period if `gp`
//! can wait, else is refused with [`FreeError::DeferredBacklog`] (the
//! block stays the caller's). A free asks `gp.elapsed` once, for the
//! oldest record's cookie, and walks the list only when that has elapsed:
//! under a long grace period `n` frees cost `n` calls, not `n²/2`.

use super::{Kmalloc, kmalloc_index};
use crate::deferred::{GracePeriod, MAX_LARGE_PENDING};
use crate::error::{DestroyError, FreeError};
use arch_api::Platform;
use core::alloc::Layout;
use core::ptr::{NonNull, null_mut};

/// A large block waiting for its grace period (a kmalloc object of its own).
pub(crate) struct LargeRecord {
    ptr: NonNull<u8>,
    layout: Layout,
    cookie: u64,
    next: *mut LargeRecord,
}

impl super::large_list::Linked for LargeRecord {
    unsafe fn set_next(this: *mut Self, next: *mut Self) {
        // SAFETY: the caller owns the live record.
        unsafe { (*this).next = next };
    }
}

const RECORD: Layout = Layout::new::<LargeRecord>();

impl<K: Platform> Kmalloc<K> {
    /// `kfree_rcu`: frees `ptr` (allocated with `layout`, as
    /// [`free`](Self::free) takes it) once a grace period of `gp` that
    /// starts after this call has elapsed, so readers that found the object
    /// before it was unpublished may keep reading it until they leave.
    ///
    /// A class-size object is deferred on its size class's cache (see
    /// [`KmemCache::free_deferred`](crate::KmemCache::free_deferred) for
    /// the batching and the pending bound, and when
    /// [`FreeError::DeferredBacklog`] is returned); a large block is
    /// deferred as well, through a small record allocated from these
    /// caches, at most [`MAX_LARGE_PENDING`] at once (module docs).
    /// Deferred frees complete when [`poll_deferred`](Self::poll_deferred) or
    /// [`flush_deferred`](Self::flush_deferred) (or a later deferred free)
    /// finds their grace period over; [`destroy`](Self::destroy) refuses
    /// while any are pending and [`destroy_deferred`](Self::destroy_deferred)
    /// waits for them.
    ///
    /// ```
    /// # use arch_api::PhysArena;
    /// # use core::alloc::Layout;
    /// # use slub_core::{ArenaPages, CacheFlags, Kmalloc, ThreadCpus};
    /// # use slub_core::testing::HostedPlatform;
    /// use slub_core::testing::EpochGracePeriod;
    ///
    /// let arena = PhysArena::new(8 << 20, 4096).unwrap();
    /// let pages = ArenaPages::new(&arena);
    /// let mut km: Kmalloc<HostedPlatform<&ArenaPages, ThreadCpus>> =
    ///     Kmalloc::new(&pages, ThreadCpus, CacheFlags::empty()).unwrap();
    /// let rcu = EpochGracePeriod::new();
    /// let small = Layout::from_size_align(100, 8).unwrap();
    /// let large = Layout::from_size_align(64 << 10, 8).unwrap();
    /// let (a, b) = (km.alloc(small).unwrap(), km.alloc(large).unwrap());
    /// let reader = rcu.read(); // may still see both
    /// // SAFETY: allocated above with these layouts, unpublished, freed once.
    /// unsafe { km.free_deferred(a, small, &rcu) }.unwrap();
    /// unsafe { km.free_deferred(b, large, &rcu) }.unwrap();
    /// assert_eq!(km.flush_deferred(&rcu), 2); // the reader holds them up
    /// drop(reader);
    /// assert_eq!(km.flush_deferred(&rcu), 0);
    /// km.destroy().unwrap();
    /// assert_eq!(arena.frames_in_use(), 0);
    /// ```
    ///
    /// # Safety
    /// As [`free`](Self::free); moreover no reader may find `ptr` after
    /// this call except those already inside a read-side section of `gp`,
    /// and every deferred free on this `Kmalloc` uses the same grace
    /// periods.
    pub unsafe fn free_deferred<G: GracePeriod + ?Sized>(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        gp: &G,
    ) -> Result<(), FreeError> {
        match kmalloc_index(layout.size(), layout.align()) {
            // SAFETY: the caller's contract.
            Some(i) => unsafe { self.caches[i].free_deferred(ptr, gp) },
            // SAFETY: the caller's contract.
            None => unsafe { self.free_large_deferred(ptr, layout, gp) },
        }
    }

    /// # Safety
    /// As [`free_deferred`](Self::free_deferred), for a large block.
    unsafe fn free_large_deferred<G: GracePeriod + ?Sized>(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        gp: &G,
    ) -> Result<(), FreeError> {
        let p = ptr.as_ptr() as usize;
        // The checks `free_large` makes, made now: an error later would
        // have nobody to go to.
        let Some((_, align)) = self.large_layout(layout) else {
            return Err(FreeError::ForeignPointer { ptr: p });
        };
        if p % align != 0 {
            return Err(FreeError::Misaligned { ptr: p });
        }
        let list = &self.large_deferred;
        // A place on the list first (bounded, as a cache's ring): poll when
        // it is full, then wait for the oldest record's grace period (a new
        // one's if that freed nothing), else refuse, freeing nothing early.
        let mut fresh = false;
        let before = loop {
            match list.try_reserve(MAX_LARGE_PENDING) {
                Ok(before) => break before,
                Err(pending) => {
                    if self.poll_large(gp) != 0 {
                        continue;
                    }
                    let c = if fresh { gp.start() } else { list.oldest() };
                    if !gp.wait(c) {
                        return Err(FreeError::DeferredBacklog {
                            pending: self.deferred_pending().max(pending),
                        });
                    }
                    // A new grace period ends no earlier than every record's.
                    fresh = self.poll_large(gp) == 0;
                }
            }
        };
        let Ok(rec) = self.alloc(RECORD) else {
            list.unreserve();
            // No record: a grace period of its own.
            let c = gp.start();
            if gp.wait(c) {
                // SAFETY: the caller's contract; the grace period is over.
                return unsafe { self.free_large(ptr, layout) };
            }
            return Err(FreeError::DeferredBacklog {
                pending: self.deferred_pending(),
            });
        };
        let rec = rec.cast::<LargeRecord>().as_ptr();
        // Started after the block was unpublished (contract).
        let cookie = gp.start();
        // SAFETY: a fresh kmalloc object of `RECORD`'s size and alignment.
        unsafe {
            rec.write(LargeRecord {
                ptr,
                layout,
                cookie,
                next: null_mut(),
            })
        };
        if before == 0 {
            // Nothing else pending: this record is the oldest.
            list.set_oldest(cookie);
        }
        // SAFETY: initialised above, ours, its place reserved; the list
        // owns it from now on.
        unsafe { list.push(rec) };
        // One `elapsed` per free, not one per pending record: while the
        // oldest record's grace period runs, no other's is over.
        if gp.elapsed(list.oldest()) {
            self.poll_large(gp);
        }
        Ok(())
    }

    /// Frees the deferred large blocks whose grace period has elapsed and
    /// puts the others back (in their order, in one exchange, with the
    /// oldest one's cookie as the list's hint); returns how many were
    /// freed. The whole list is taken at once, so concurrent callers never
    /// see a record twice.
    fn poll_large<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        let mut list = self.large_deferred.take_all();
        let mut freed = 0;
        // The records kept, as a chain in list order (newest first).
        let (mut first, mut last) = (null_mut::<LargeRecord>(), null_mut::<LargeRecord>());
        let mut oldest = 0;
        while let Some(rec) = NonNull::new(list) {
            // SAFETY: taken off the list (its Acquire pairs with the push's
            // Release): ours, initialised.
            let r = unsafe { rec.as_ptr().read() };
            list = r.next;
            if gp.elapsed(r.cookie) {
                // SAFETY: checked when deferred; the grace period is over,
                // so no reader can see the block. Its errors were ruled out
                // in `free_large_deferred`.
                let _ = unsafe { self.free_large(r.ptr, r.layout) };
                // SAFETY: the record came from `alloc(RECORD)` and is no
                // longer on the list.
                let _ = unsafe { self.free(rec.cast(), RECORD) };
                self.large_deferred.done();
                freed += 1;
            } else {
                if last.is_null() {
                    first = rec.as_ptr();
                } else {
                    // SAFETY: `last` is a record of ours (kept above).
                    unsafe { (*last).next = rec.as_ptr() };
                }
                last = rec.as_ptr();
                oldest = r.cookie;
            }
        }
        if !last.is_null() {
            self.large_deferred.set_oldest(oldest);
            // SAFETY: the chain `first`..`last` is ours, taken above.
            unsafe { self.large_deferred.push_chain(first, last) };
        }
        freed
    }

    /// Frees every deferred object (class sizes and large blocks) whose
    /// grace period has elapsed; returns how many went back. The OS calls
    /// it from its grace-period callback or a periodic work item.
    pub fn poll_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        let slab: usize = self.caches.iter().map(|c| c.poll_deferred(gp)).sum();
        slab + self.poll_large(gp)
    }

    /// Hands every CPU's partial batches over (one per size class and CPU;
    /// see [`KmemCache::flush_deferred`](crate::KmemCache::flush_deferred)),
    /// then frees what has elapsed, large blocks included. Returns the
    /// deferred frees still pending.
    pub fn flush_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        for c in &self.caches {
            c.flush_deferred(gp);
        }
        self.poll_large(gp);
        self.deferred_pending()
    }

    /// Deferred frees given and not yet done (class sizes and large blocks).
    pub fn deferred_pending(&self) -> usize {
        let slab: usize = self.caches.iter().map(|c| c.deferred_pending()).sum();
        slab + self.large_deferred_pending()
    }

    /// Deferred frees of large blocks not yet done.
    pub fn large_deferred_pending(&self) -> usize {
        self.large_deferred.count()
    }

    /// `kvfree_rcu_barrier`: waits (with `gp.wait`) until every deferred
    /// free is done, every CPU's batch included. If `gp` cannot wait,
    /// returns [`DestroyError::DeferredPending`] as soon as a grace period
    /// has not elapsed (frees nothing early).
    pub fn deferred_barrier<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        for c in &mut self.caches {
            if c.deferred_barrier(gp).is_err() {
                return Err(DestroyError::DeferredPending {
                    objects: self.deferred_pending(),
                });
            }
        }
        self.poll_large(gp);
        if self.large_deferred_pending() != 0 {
            // Exclusive access: nothing is added while we wait. A grace
            // period started now ends no earlier than every cookie on the
            // list.
            let c = gp.start();
            if gp.wait(c) {
                self.poll_large(gp);
            }
        }
        match self.deferred_pending() {
            0 => Ok(()),
            objects => Err(DestroyError::DeferredPending { objects }),
        }
    }

    /// `kmem_cache_destroy` of every class after
    /// [`deferred_barrier`](Self::deferred_barrier): waits for the deferred
    /// frees (or returns [`DestroyError::DeferredPending`] having destroyed
    /// nothing), then [`destroy`](Self::destroy).
    pub fn destroy_deferred<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        self.deferred_barrier(gp)?;
        self.destroy()
    }
}
