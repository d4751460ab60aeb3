//! `kfree_rcu` on a cache: [`KmemCache::free_deferred`] and the calls that
//! poll, flush and wait for the batches (`deferred.rs` has the state).

use super::KmemCache;
use crate::barn::Sheaf;
use crate::deferred::{GracePeriod, MAX_PENDING};
use crate::error::{DestroyError, FreeError};
use arch_api::{CpuLocal, Platform};
use core::ptr::{NonNull, null_mut};

/// What one pinned attempt of `free_deferred` did.
enum Defer {
    /// Taken; `true` if a batch was handed over.
    Done(bool),
    /// The CPU's batch is full and the ring too: the oldest batch's cookie.
    Backlog(u64),
    /// No memory for a batch sheaf or the per-CPU lines.
    NoMemory,
}

impl<K: Platform> KmemCache<K> {
    /// `kfree_rcu`: frees `ptr` once a grace period of `gp` that starts
    /// after this call has elapsed, so readers that found the object before
    /// it was unpublished may keep reading it until they leave. Objects are
    /// batched per CPU (a sheaf of up to `sheaf_capacity` objects, one
    /// grace period per batch); at most [`MAX_PENDING`] batches wait at
    /// once, and when they are all waiting `gp.wait` is asked to wait for
    /// the oldest: if it cannot, the object is refused with
    /// [`FreeError::DeferredBacklog`] (never freed early).
    ///
    /// Every call on one cache must use the same grace periods. The batches
    /// go back when [`poll_deferred`](Self::poll_deferred) (or a later
    /// deferred free) finds their grace period over; the OS calls it from
    /// its grace-period callback or a periodic work item.
    /// [`destroy`](Self::destroy) refuses while frees are pending;
    /// [`destroy_deferred`](Self::destroy_deferred) waits for them.
    ///
    /// ```
    /// # use arch_api::PhysArena;
    /// # use slub_core::testing::HostedPlatform;
    /// # use slub_core::{ArenaPages, CacheFlags, KmemCache, ThreadCpus};
    /// use slub_core::testing::EpochGracePeriod;
    ///
    /// let arena = PhysArena::new(1 << 20, 4096).unwrap();
    /// let mut cache = KmemCache::<HostedPlatform<ArenaPages<'_>, ThreadCpus>>::new(
    ///     "dentry", 64, 8, CacheFlags::empty(), ArenaPages::new(&arena), ThreadCpus,
    /// )
    /// .unwrap();
    /// let rcu = EpochGracePeriod::new();
    /// let obj = cache.alloc().unwrap();
    /// // SAFETY: allocated above, unpublished, freed once.
    /// unsafe { cache.free_deferred(obj, &rcu) }.unwrap();
    /// assert_eq!(cache.deferred_pending(), 1);
    /// cache.destroy_deferred(&rcu).unwrap(); // waits for the grace period
    /// assert_eq!(arena.frames_in_use(), 0);
    /// ```
    ///
    /// # Safety
    /// As [`free`](Self::free); moreover no reader may find `ptr` after
    /// this call except those already inside a read-side section of `gp`.
    pub unsafe fn free_deferred<G: GracePeriod + ?Sized>(
        &self,
        ptr: NonNull<u8>,
        gp: &G,
    ) -> Result<(), FreeError> {
        let p = ptr.as_ptr() as usize;
        if self.is_destroyed() {
            return Err(FreeError::Destroyed);
        }
        #[cfg(feature = "debug")]
        {
            // SAFETY: the caller's contract; the direct map is consulted first.
            unsafe { self.slabs.check_owner(p)? };
        }
        let geo = self.slabs.geo();
        if !geo.is_object(geo.base_of(p), p) {
            return Err(FreeError::Misaligned { ptr: p });
        }
        loop {
            match self.defer_pinned(p, gp) {
                Defer::Done(handed) => {
                    if handed {
                        self.poll_deferred(gp);
                    }
                    return Ok(());
                }
                Defer::Backlog(cookie) => {
                    if self.poll_deferred(gp) == 0 {
                        if !gp.wait(cookie) {
                            return Err(FreeError::DeferredBacklog {
                                pending: self.deferred.count(),
                            });
                        }
                        self.poll_deferred(gp);
                    }
                }
                Defer::NoMemory => {
                    // No batch to put it in: a grace period of its own.
                    let c = gp.start();
                    if gp.wait(c) {
                        // SAFETY: the caller's contract; the grace period
                        // has elapsed.
                        return unsafe { self.free(ptr) };
                    }
                    return Err(FreeError::DeferredBacklog {
                        pending: self.deferred.count(),
                    });
                }
            }
        }
    }

    /// Adds `p` to the calling CPU's batch, under its guard.
    fn defer_pinned<G: GracePeriod + ?Sized>(&self, p: usize, gp: &G) -> Defer {
        let pages = self.slabs.pages();
        let barn = self.sheaves.barn();
        let cap = barn.cap();
        let (_g, cpu) = self.slabs.cpus().pin();
        let Some(line) = self.deferred.line(pages, cpu) else {
            return Defer::NoMemory;
        };
        // Ours until put back (or handed over): a flusher that comes now
        // finds the line empty and leaves it.
        let mut b = line.take();
        // SAFETY: `b`, taken out of the line, is ours alone; a batch is a
        // live sheaf of the barn with `cap` slots.
        unsafe {
            if !b.is_null() && Sheaf::size(b) >= cap {
                // Full, and not handed over earlier because the ring was.
                if let Err(c) = self.hand_over(b, gp) {
                    line.put(b);
                    return Defer::Backlog(c);
                }
                b = null_mut();
            }
            if b.is_null() {
                match barn.get_empty(pages) {
                    Ok(s) => b = s,
                    Err(_) => return Defer::NoMemory,
                }
            }
            let n = Sheaf::size(b);
            *Sheaf::slot(b, n) = p;
            crate::loom_hooks::batch_add_window();
            Sheaf::set_size(b, n + 1);
            self.deferred.add(1);
            self.slabs.stat(cpu, crate::stats::StatItem::FreeRcuSheaf);
            if n + 1 >= cap && self.hand_over(b, gp).is_ok() {
                return Defer::Done(true);
            }
        }
        line.put(b);
        Defer::Done(false)
    }

    /// Puts batch `b` on the ring with the cookie of a grace period started
    /// now, or returns the oldest batch's cookie if the ring is full.
    fn hand_over<G: GracePeriod + ?Sized>(&self, b: *mut Sheaf, gp: &G) -> Result<(), u64> {
        let mut r = self.deferred.ring.lock();
        if r.is_full() {
            return Err(r.oldest().unwrap_or(0));
        }
        // Started after the last object of the batch was unpublished.
        r.push(b, gp.start());
        Ok(())
    }

    /// Frees every batch whose grace period has elapsed (oldest first);
    /// returns how many objects went back. Call with no guard of this
    /// cache held (it frees through [`free`](Self::free)).
    pub fn poll_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        let mut out = [null_mut(); MAX_PENDING];
        let n = self.deferred.ring.lock().take_elapsed(gp, &mut out);
        let mut freed = 0;
        for &s in &out[..n] {
            // SAFETY: taken off the ring: ours, and its grace period is over.
            freed += unsafe { self.free_batch(s) };
        }
        freed
    }

    /// Frees the objects of batch `s` and returns it to the pool.
    ///
    /// # Safety
    /// `s` is a batch of this cache owned by the caller whose grace period
    /// has elapsed.
    unsafe fn free_batch(&self, s: *mut Sheaf) -> usize {
        // SAFETY: the caller's contract; the first `size` slots are objects
        // deferred through `free_deferred`, now unreachable by any reader.
        unsafe {
            let n = Sheaf::size(s);
            for i in 0..n {
                let p = *Sheaf::slot(s, i);
                // Checked as any free (`debug` reports nothing here: the
                // object was accepted before); an error leaves it as it is.
                let _ = self.free(NonNull::new_unchecked(p as *mut u8));
            }
            Sheaf::set_size(s, 0);
            self.deferred.sub(n);
            self.sheaves.barn().put_chunk(s);
            n
        }
    }

    /// Hands every CPU's partial batch over (so that none waits for more
    /// objects; Linux's `kvfree_rcu_barrier` drains every CPU's batch),
    /// then frees what has elapsed. Returns the objects still pending in
    /// the cache. A CPU adding to its batch at this very moment keeps it
    /// (its objects stay counted as pending and go with its next full
    /// batch or flush), and so do all once the ring is full.
    pub fn flush_deferred<G: GracePeriod + ?Sized>(&self, gp: &G) -> usize {
        self.poll_deferred(gp);
        for cpu in 0..self.nr_cpus {
            let Some(line) = self.deferred.line_if_any(cpu) else {
                break;
            };
            let mut r = self.deferred.ring.lock();
            if r.is_full() {
                break;
            }
            // Taken under the ring's lock, so that it has a place there.
            let b = line.steal();
            if b.is_null() {
                continue;
            }
            // SAFETY: taken out of the line: ours alone, a live batch.
            if unsafe { Sheaf::size(b) } == 0 {
                drop(r);
                // SAFETY: ours, empty.
                unsafe { self.sheaves.barn().put_chunk(b) };
                continue;
            }
            // Started after the batch's last object was unpublished.
            r.push(b, gp.start());
        }
        self.poll_deferred(gp);
        self.deferred.count()
    }

    /// Objects given to [`free_deferred`](Self::free_deferred) and not yet
    /// freed.
    pub fn deferred_pending(&self) -> usize {
        self.deferred.count()
    }

    /// `kvfree_rcu_barrier`: hands every CPU's batch over and waits (with
    /// `gp.wait`) until every deferred free of this cache is done. If `gp`
    /// cannot wait, returns [`DestroyError::DeferredPending`] as soon as a
    /// batch's grace period has not elapsed (frees nothing early).
    pub fn deferred_barrier<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        let pending = |c: &Self| DestroyError::DeferredPending {
            objects: c.deferred.count(),
        };
        // Exclusive access: every CPU's batch can be taken from here.
        for cpu in 0..self.nr_cpus {
            let Some(line) = self.deferred.line_if_any(cpu) else {
                break;
            };
            // Exclusive access: no CPU uses its batch.
            let b = line.take();
            if b.is_null() {
                continue;
            }
            // SAFETY: taken out of the line: ours, a live batch.
            if unsafe { Sheaf::size(b) } == 0 {
                // SAFETY: ours (taken out of the line), empty.
                unsafe { self.sheaves.barn().put_chunk(b) };
            } else {
                while let Err(c) = self.hand_over(b, gp) {
                    if self.poll_deferred(gp) == 0 && !gp.wait(c) {
                        line.put(b);
                        return Err(pending(self));
                    }
                }
            }
        }
        loop {
            let oldest = self.deferred.ring.lock().oldest();
            let Some(c) = oldest else {
                return Ok(());
            };
            if self.poll_deferred(gp) == 0 && !gp.wait(c) {
                return Err(pending(self));
            }
        }
    }

    /// `kmem_cache_destroy` as Linux does it since `kfree_rcu` moved to
    /// sheaves: [`deferred_barrier`](Self::deferred_barrier), then
    /// [`destroy`](Self::destroy).
    pub fn destroy_deferred<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
    ) -> Result<(), DestroyError> {
        if self.is_destroyed() {
            return Err(DestroyError::AlreadyDestroyed);
        }
        self.deferred_barrier(gp)?;
        self.destroy()
    }
}
