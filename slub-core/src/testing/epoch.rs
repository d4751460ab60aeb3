//! A hosted grace period for the tests: a simple epoch scheme.
//!
//! Readers enter at the current epoch and leave; [`start`](GracePeriod::start)
//! closes the current epoch (its number is the cookie) and opens the next,
//! and the grace period of a cookie has elapsed once no reader that entered
//! at or before it is still inside. Readers that enter later belong to a
//! later epoch and do not hold it up.
//!
//! [`wait`](GracePeriod::wait) from inside a read-side section would wait
//! for itself (Linux: `synchronize_rcu` under `rcu_read_lock` is a bug), so
//! a thread inside any section is told it cannot wait, and the cache reports
//! [`FreeError::DeferredBacklog`](crate::FreeError::DeferredBacklog)
//! instead of hanging.

use crate::GracePeriod;
use core::marker::PhantomData;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, PoisonError};

std::thread_local! {
    /// Read-side sections this thread is inside (of any grace period).
    static INSIDE: Cell<usize> = const { Cell::new(0) };
}

struct State {
    /// The epoch new readers join.
    epoch: u64,
    /// Readers inside, by the epoch they entered at.
    readers: BTreeMap<u64, usize>,
}

/// The hosted [`GracePeriod`]: an epoch counter and the readers inside.
pub struct EpochGracePeriod {
    state: Mutex<State>,
    left: Condvar,
}

/// A reader inside a read-side section; leaves when dropped, on the thread
/// that entered (not `Send`: a section belongs to its thread, as
/// `rcu_read_lock` / `rcu_read_unlock` to one task).
pub struct ReadGuard<'a> {
    gp: &'a EpochGracePeriod,
    epoch: u64,
    _thread: PhantomData<*const ()>,
}

impl Default for EpochGracePeriod {
    fn default() -> Self {
        Self::new()
    }
}

impl EpochGracePeriod {
    /// No readers, epoch 1.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                epoch: 1,
                readers: BTreeMap::new(),
            }),
            left: Condvar::new(),
        }
    }

    /// `rcu_read_lock`: enters a read-side section.
    pub fn read(&self) -> ReadGuard<'_> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = s.epoch;
        *s.readers.entry(epoch).or_insert(0) += 1;
        INSIDE.with(|n| n.set(n.get() + 1));
        ReadGuard {
            gp: self,
            epoch,
            _thread: PhantomData,
        }
    }

    /// Readers inside now.
    pub fn readers(&self) -> usize {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.readers.values().sum()
    }

    fn done(s: &State, cookie: u64) -> bool {
        s.readers.range(..=cookie).next().is_none()
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        INSIDE.with(|n| n.set(n.get() - 1));
        let mut s = self.gp.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = s.readers.get_mut(&self.epoch) {
            *n -= 1;
            if *n == 0 {
                s.readers.remove(&self.epoch);
            }
        }
        drop(s);
        self.gp.left.notify_all();
    }
}

impl GracePeriod for EpochGracePeriod {
    fn start(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let c = s.epoch;
        s.epoch += 1;
        c
    }

    fn elapsed(&self, cookie: u64) -> bool {
        Self::done(
            &self.state.lock().unwrap_or_else(PoisonError::into_inner),
            cookie,
        )
    }

    fn wait(&self, cookie: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if INSIDE.with(Cell::get) > 0 && !Self::done(&s, cookie) {
            return false; // it would wait for this thread's own section
        }
        while !Self::done(&s, cookie) {
            s = self.left.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        true
    }
}

/// The same grace periods for callers that cannot wait (atomic context):
/// `wait` reports that it cannot.
pub struct NoWait<'a>(pub &'a EpochGracePeriod);

impl GracePeriod for NoWait<'_> {
    fn start(&self) -> u64 {
        self.0.start()
    }
    fn elapsed(&self, cookie: u64) -> bool {
        self.0.elapsed(cookie)
    }
}
