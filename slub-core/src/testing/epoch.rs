//! A hosted grace period for the tests: a simple epoch scheme.
//!
//! Readers enter at the current epoch and leave; [`start`](GracePeriod::start)
//! closes the current epoch (its number is the cookie) and opens the next,
//! and the grace period of a cookie has elapsed once no reader that entered
//! at or before it is still inside. Readers that enter later belong to a
//! later epoch and do not hold it up.

use crate::GracePeriod;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, PoisonError};

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

/// A reader inside a read-side section; leaves when dropped.
pub struct ReadGuard<'a> {
    gp: &'a EpochGracePeriod,
    epoch: u64,
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
        ReadGuard { gp: self, epoch }
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
