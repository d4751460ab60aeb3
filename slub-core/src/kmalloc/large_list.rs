//! The lock-free list of large blocks waiting for their grace period
//! (`deferred.rs`): a push-only stack (compare-exchange on the head) that
//! the poller empties in one swap, so no record is ever popped alone and
//! there is no ABA: a record is on the list, or owned by exactly one
//! caller. Its atomics are loom's under `--cfg kmm_loom`, so the model
//! `tests/loom_large_deferred.rs` runs this code (through `testing`, the
//! only place the type is reachable from outside the crate).

use core::ptr::null_mut;
#[cfg(not(kmm_loom))]
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
#[cfg(kmm_loom)]
use loom::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// A record's link: the first field of every record on the list.
pub trait Linked {
    /// Sets the record's link.
    ///
    /// # Safety
    /// `this` is a live record the caller owns.
    unsafe fn set_next(this: *mut Self, next: *mut Self);
}

/// The list and how many records it (and the pollers holding its
/// contents) count.
pub struct LargeList<T> {
    head: AtomicPtr<T>,
    count: AtomicUsize,
}

impl<T: Linked> Default for LargeList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Linked> LargeList<T> {
    /// An empty list.
    pub fn new() -> Self {
        Self {
            head: AtomicPtr::new(null_mut()),
            count: AtomicUsize::new(0),
        }
    }

    /// Records given and not yet [`done`](Self::done).
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Counts a new record before it can be found (so the count never
    /// undercounts), then pushes it.
    ///
    /// # Safety
    /// `rec` is a live, initialised record the caller owns; it belongs to
    /// the list from now on.
    pub unsafe fn push_new(&self, rec: *mut T) {
        self.count.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { self.push(rec) };
    }

    /// Puts back a record taken with [`take_all`](Self::take_all).
    ///
    /// # Safety
    /// `rec` came from `take_all` and is owned by the caller.
    pub unsafe fn push(&self, rec: *mut T) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: the caller owns `rec` until the exchange publishes it.
            unsafe { T::set_next(rec, head) };
            // Release: the record's contents (and link) before it can be
            // taken; pairs with `take_all`'s Acquire.
            match self
                .head
                .compare_exchange_weak(head, rec, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Takes every record at once (they are the caller's now, chained by
    /// their links; null if none).
    pub fn take_all(&self) -> *mut T {
        if self.head.load(Ordering::Relaxed).is_null() {
            return null_mut();
        }
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::LARGE_TAKE_TWO_STEP) {
            // Broken variant: the list is read, then emptied by a plain
            // store; a push in between is lost.
            let h = self.head.load(Ordering::Acquire);
            loom::thread::yield_now();
            self.head.store(null_mut(), Ordering::Relaxed);
            return h;
        }
        self.head.swap(null_mut(), Ordering::Acquire)
    }

    /// A record taken off the list is finished with (freed).
    pub fn done(&self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}
