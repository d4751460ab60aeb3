//! The kmalloc soak's deferred frees (`kfree_rcu`) and bulk calls.
//!
//! Deferred frees: objects are published in shared slots; a thread that
//! replaces one unpublishes the old object and frees it with
//! `Kmalloc::free_deferred` on the soak's `EpochGracePeriod`. Threads enter
//! short read-side sections, look objects up in the slots and check, on
//! every step while inside and when leaving, that each object they saw
//! still carries its stamp (a deferred free that came too early, or a reuse
//! under the reader, shows). A deferred free refused with
//! `DeferredBacklog` (the caller is inside a section and the pending bound
//! is reached: waiting would wait for itself) is retried after the section.
//!
//! Bulk: `KmemCache::alloc_bulk` of 2..=8 objects of one class, and
//! `free_bulk` of up to 8 held objects of one class.

use super::{MAX_HELD, Obj, SlabSoak, SlabThread, layout, write_stamp};
use crate::soak::Rng;
use slub_core::{FreeError, kmalloc_index};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

/// An object a reader found in a slot, with the stamp it must keep.
pub(super) struct Seen {
    ptr: usize,
    size: usize,
    stamp: u64,
}

/// Steps a read-side section lasts at most.
const MAX_INSIDE: u32 = 8;

impl SlabSoak {
    /// One step of the read side or of publishing.
    pub(super) fn rcu_step(&self, th: &mut SlabThread, rng: &mut Rng) {
        if th.reader.is_some() {
            for _ in 0..2 {
                let i = rng.below(self.slots.len() as u64) as usize;
                let slot = self.slots[i].lock().unwrap_or_else(|e| e.into_inner());
                if let Some(o) = slot.as_ref() {
                    th.seen.push(Seen {
                        ptr: o.ptr,
                        size: o.size,
                        stamp: o.stamp,
                    });
                }
            }
            self.check_seen(th);
            th.inside += 1;
            if th.inside >= MAX_INSIDE || rng.one_in(4) {
                self.leave(th);
            }
        } else if rng.one_in(2) {
            th.reader = Some(self.gp.read());
            th.inside = 0;
        }
        if rng.one_in(2) {
            self.publish(th, rng);
        }
    }

    /// Checks every object the thread's reader saw.
    fn check_seen(&self, th: &mut SlabThread) {
        for s in &th.seen {
            // SAFETY: found in a slot inside the current read-side section:
            // freed (if unpublished since) only after a grace period that
            // waits for this section, so still `size` readable bytes.
            let (head, tail) = unsafe { super::read_stamp(s.ptr as *const u8, s.size, s.stamp) };
            if head != s.stamp || tail != !s.stamp {
                th.tally.violation(|| {
                    format!(
                        "kfree_rcu: object {:#x} ({} bytes) changed under a reader \
                         (stamp {:#x}, found {head:#x})",
                        s.ptr, s.size, s.stamp
                    )
                });
            }
        }
    }

    /// Leaves the read-side section (after a last check), then retries the
    /// deferred frees refused inside it.
    pub(super) fn leave(&self, th: &mut SlabThread) {
        if th.reader.is_some() {
            self.check_seen(th);
        }
        th.seen.clear();
        th.reader = None;
        for o in std::mem::take(&mut th.retry) {
            self.free_deferred(th, o);
        }
    }

    /// Publishes a fresh object in a random slot; the one it replaces is
    /// unpublished and freed deferred.
    fn publish(&self, th: &mut SlabThread, rng: &mut Rng) {
        let size = if rng.one_in(32) {
            16_385 + rng.below(32 * 1024) as usize
        } else {
            8 + rng.below(2048) as usize
        };
        let front = rng.below(2) as usize;
        let Some(l) = layout(size) else { return };
        let p = match self.fronts[front].alloc(l) {
            Ok(p) => p,
            Err(e) => {
                th.tally.violation(|| format!("kmalloc({size}): {e}"));
                return;
            }
        };
        th.seq += 1;
        let stamp = (th.t as u64) << 48 | th.seq;
        // SAFETY: a fresh object of `size` >= 8 bytes, ours until published.
        unsafe { write_stamp(p.as_ptr(), size, stamp) };
        let o = Obj {
            ptr: p.as_ptr() as usize,
            size,
            front,
            stamp,
        };
        let i = rng.below(self.slots.len() as u64) as usize;
        let old = self.slots[i]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(o);
        if let Some(old) = old {
            self.free_deferred(th, old);
        }
    }

    /// `kfree_rcu` of an unpublished object; refused ones wait in the
    /// thread's retry list until it leaves its section.
    pub(super) fn free_deferred(&self, th: &mut SlabThread, o: Obj) {
        let (Some(l), Some(p)) = (layout(o.size), NonNull::new(o.ptr as *mut u8)) else {
            return;
        };
        // SAFETY: allocated from this front with `l`, unpublished (out of
        // its slot), given to one deferred free.
        match unsafe { self.fronts[o.front].free_deferred(p, l, self.gp) } {
            Ok(()) => {
                self.deferred.fetch_add(1, Ordering::Relaxed);
            }
            Err(FreeError::DeferredBacklog { .. }) if th.reader.is_some() => th.retry.push(o),
            Err(e) => th
                .tally
                .violation(|| format!("kfree_rcu of {:#x} ({} bytes): {e}", o.ptr, o.size)),
        }
    }

    /// `alloc_bulk` of a few objects of one class, stamped and held.
    pub(super) fn bulk_alloc(&self, th: &mut SlabThread, rng: &mut Rng) {
        let n = 2 + rng.below(7) as usize;
        if th.held.len() + n > MAX_HELD {
            return;
        }
        let class = rng.below(10) as usize;
        let size = slub_core::KMALLOC_MIN_SIZE << class;
        let front = rng.below(2) as usize;
        let mut out = [NonNull::dangling(); 8];
        if let Err(e) = self.fronts[front].caches()[class].alloc_bulk(&mut out[..n]) {
            th.tally
                .violation(|| format!("alloc_bulk({n}) of kmalloc-{size}: {e}"));
            return;
        }
        self.bulk.fetch_add(n as u64, Ordering::Relaxed);
        for p in &out[..n] {
            // SAFETY: a fresh object of the class's `size` bytes.
            unsafe { th.stamp_and_hold(p.as_ptr(), size, front) };
        }
    }

    /// `free_bulk` of up to 8 held objects of the class and front of a
    /// random one, each checked first.
    pub(super) fn bulk_free(&self, th: &mut SlabThread, rng: &mut Rng) {
        if th.held.is_empty() {
            return;
        }
        let pick = &th.held[rng.below(th.held.len() as u64) as usize];
        let (front, size) = (pick.front, pick.size);
        let Some(class) = kmalloc_index(size, 8) else {
            return;
        };
        let mut batch = Vec::with_capacity(8);
        let mut i = 0;
        while i < th.held.len() && batch.len() < 8 {
            let o = &th.held[i];
            if o.front == front && kmalloc_index(o.size, 8) == Some(class) {
                batch.push(th.held.swap_remove(i));
            } else {
                i += 1;
            }
        }
        let mut ptrs = Vec::with_capacity(batch.len());
        for o in &batch {
            self.check(th, o);
            if let Some(p) = NonNull::new(o.ptr as *mut u8) {
                ptrs.push(p);
            }
        }
        // SAFETY: live objects of this class of this front (allocated with
        // a layout of this class), each freed once.
        if let Err(e) = unsafe { self.fronts[front].caches()[class].free_bulk(&ptrs) } {
            th.tally
                .violation(|| format!("free_bulk of {} objects: {e}", ptrs.len()));
        }
        self.bulk.fetch_add(ptrs.len() as u64, Ordering::Relaxed);
    }

    /// Unpublishes every slot and frees the objects deferred (no reader is
    /// left: the threads have parked).
    pub(super) fn unpublish_all(&self, th: &mut SlabThread) {
        for s in &self.slots {
            let old = s.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(o) = old {
                self.free_deferred(th, o);
            }
        }
    }
}
