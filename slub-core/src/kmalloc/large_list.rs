//! The lock-free list of large blocks waiting for their grace period
//! (`deferred.rs`): a push-only stack (compare-exchange on the head) that
//! the poller empties in one swap, so no record is ever popped alone and
//! there is no ABA: a record is on the list, or owned by exactly one
//! caller. Its atomics are loom's under `--cfg kmm_loom`, so the model
//! `tests/loom_large_deferred.rs` runs this code (through `testing`, the
//! only place the type is reachable from outside the crate).
//!
//! The count is bounded ([`try_reserve`](LargeList::try_reserve) before a
//! record is made), and the list keeps a hint of its oldest record's grace
//! period cookie, so that a deferred free asks `elapsed` once instead of
//! walking the list: cookies of later `start` calls end no earlier, so
//! while the oldest has not elapsed, none has. The hint is only a hint
//! (records pushed concurrently may be older than it, a poll that puts
//! records back resets it); a wrong hint delays a poll, it never frees
//! anything early, since the poll checks each record's own cookie.

use core::ptr::null_mut;
#[cfg(not(kmm_loom))]
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(kmm_loom)]
use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

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
    /// The cookie of the oldest record (a hint, see the module docs).
    oldest: AtomicU64,
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
            oldest: AtomicU64::new(0),
        }
    }

    /// Counts a record about to be made if fewer than `max` are counted;
    /// returns the count before (0: the list was empty, the new record is
    /// the oldest), or `Err` with the count if `max` are.
    pub fn try_reserve(&self, max: usize) -> Result<usize, usize> {
        self.count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                (c < max).then_some(c + 1)
            })
    }

    /// Gives back a [`try_reserve`](Self::try_reserve) whose record was
    /// not made.
    pub fn unreserve(&self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }

    /// The oldest record's cookie (a hint).
    pub fn oldest(&self) -> u64 {
        self.oldest.load(Ordering::Relaxed)
    }

    /// Records `cookie` as the oldest record's.
    pub fn set_oldest(&self, cookie: u64) {
        self.oldest.store(cookie, Ordering::Relaxed);
    }

    /// Records given and not yet [`done`](Self::done).
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Pushes a record counted by [`try_reserve`](Self::try_reserve), or
    /// puts back one taken with [`take_all`](Self::take_all).
    ///
    /// # Safety
    /// `rec` is a live, initialised record the caller owns (reserved, or
    /// from `take_all`); it belongs to the list from now on.
    pub unsafe fn push(&self, rec: *mut T) {
        // SAFETY: a chain of one.
        unsafe { self.push_chain(rec, rec) };
    }

    /// Puts back a chain of records taken with [`take_all`](Self::take_all),
    /// `first` to `last` linked in this order, in one exchange (their order
    /// is kept, and the oldest stay at the bottom).
    ///
    /// # Safety
    /// The caller owns the chain; `first` reaches `last` through the links.
    pub unsafe fn push_chain(&self, first: *mut T, last: *mut T) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: the caller owns `last` until the exchange publishes it.
            unsafe { T::set_next(last, head) };
            // Release: the records' contents (and links) before they can be
            // taken; pairs with `take_all`'s Acquire.
            match self
                .head
                .compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed)
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
