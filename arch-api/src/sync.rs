//! The lock an OS plugs in: [`Mutex`] over the kernel's own raw lock.
//!
//! The crates of this family lock through [`Mutex<R, T>`](Mutex), a
//! [`lock_api`] mutex over whatever raw lock the embedding OS supplies (`R`,
//! e.g. its IRQ-safe spinlock; [`DefaultRawMutex`] is `spin`'s). Only under
//! the family's own `--cfg kmm_loom` (never a kernel's `--cfg loom`) is it
//! loom's mutex, so `loom::model` explores every interleaving of the
//! unchanged code. Each crate keeps its loom atomics shim private
//! (`crate::sync`).

pub use lock_api::RawMutex;

/// The raw lock used when the OS does not supply one: a test-and-set spinlock.
pub type DefaultRawMutex = spin::mutex::SpinMutex<()>;

use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

/// A mutex over the OS's raw lock `R` (loom's mutex under `cfg(kmm_loom)`).
pub struct Mutex<R: RawMutex, T> {
    #[cfg(not(kmm_loom))]
    inner: lock_api::Mutex<R, T>,
    #[cfg(kmm_loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(kmm_loom)]
    _raw: PhantomData<R>,
}

/// Holds a [`Mutex`] locked; unlocks on drop.
pub struct MutexGuard<'a, R: RawMutex, T> {
    #[cfg(not(kmm_loom))]
    inner: lock_api::MutexGuard<'a, R, T>,
    #[cfg(kmm_loom)]
    inner: loom::sync::MutexGuard<'a, T>,
    _raw: PhantomData<&'a R>,
}

impl<R: RawMutex, T> Mutex<R, T> {
    /// A new unlocked mutex.
    #[cfg(not(kmm_loom))]
    pub const fn new(value: T) -> Self {
        Self {
            inner: lock_api::Mutex::new(value),
        }
    }

    /// A new unlocked mutex.
    #[cfg(kmm_loom)]
    pub fn new(value: T) -> Self {
        Self {
            inner: loom::sync::Mutex::new(value),
            _raw: PhantomData,
        }
    }

    /// Locks, spinning or sleeping as `R` does.
    pub fn lock(&self) -> MutexGuard<'_, R, T> {
        MutexGuard {
            #[cfg(not(kmm_loom))]
            inner: self.inner.lock(),
            #[cfg(kmm_loom)]
            inner: self.inner.lock().unwrap(),
            _raw: PhantomData,
        }
    }

    /// Locks if free.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, R, T>> {
        #[cfg(not(kmm_loom))]
        let inner = self.inner.try_lock()?;
        #[cfg(kmm_loom)]
        let inner = self.inner.try_lock().ok()?;
        Some(MutexGuard {
            inner,
            _raw: PhantomData,
        })
    }

    /// The value, through exclusive access (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        #[cfg(not(kmm_loom))]
        return self.inner.get_mut();
        #[cfg(kmm_loom)]
        return self.inner.get_mut().unwrap();
    }

    /// Locks and leaves it locked past this call, with no guard: for a
    /// hosted embedder's fork handler, which must hold every lock across
    /// `fork` (`pthread_atfork`'s prepare) so that the child finds none
    /// held by a thread it does not have. Undone by
    /// [`unlock_held`](Self::unlock_held).
    #[cfg(not(kmm_loom))]
    pub fn lock_held(&self) {
        core::mem::forget(self.inner.lock());
    }

    /// Unlocks what [`lock_held`](Self::lock_held) locked.
    ///
    /// # Safety
    /// The mutex was locked by `lock_held` and nothing has unlocked it
    /// since: on the thread that called it, or in the child process of a
    /// `fork` made while it was held.
    #[cfg(not(kmm_loom))]
    pub unsafe fn unlock_held(&self) {
        // SAFETY: the caller's contract: locked, with no guard alive.
        unsafe { self.inner.force_unlock() }
    }

    /// Consumes the mutex.
    pub fn into_inner(self) -> T {
        #[cfg(not(kmm_loom))]
        return self.inner.into_inner();
        #[cfg(kmm_loom)]
        return self.inner.into_inner().unwrap();
    }
}

impl<R: RawMutex, T: Default> Default for Mutex<R, T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<R: RawMutex, T> Deref for MutexGuard<'_, R, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<R: RawMutex, T> DerefMut for MutexGuard<'_, R, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// The switch behind a crate's deliberately broken variants, which its loom
/// models must catch (only under `--cfg kmm_loom`). A crate keeps one in a
/// static beside its variant numbers (`0` = all correct); a test binary
/// selects one variant at run time, and each broken model lives in its own
/// `tests/loom_*_broken.rs` so the switch never reaches the correct models.
/// Loom runs model threads on one OS thread, so a plain atomic is enough.
#[cfg(kmm_loom)]
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct MutationSwitch(core::sync::atomic::AtomicU8);

#[cfg(kmm_loom)]
impl MutationSwitch {
    /// All correct.
    pub const fn new() -> Self {
        Self(core::sync::atomic::AtomicU8::new(0))
    }

    /// Selects the broken variant `m` (tests only).
    pub fn set(&self, m: u8) {
        self.0.store(m, core::sync::atomic::Ordering::Relaxed);
    }

    /// Whether variant `m` is selected.
    pub fn active(&self, m: u8) -> bool {
        self.0.load(core::sync::atomic::Ordering::Relaxed) == m
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    #[test]
    fn lock_excludes_and_unlocks() {
        let m: Mutex<DefaultRawMutex, u32> = Mutex::new(1);
        {
            let mut g = m.lock();
            *g += 1;
            assert!(m.try_lock().is_none());
        }
        assert_eq!(*m.lock(), 2);
        assert_eq!(m.into_inner(), 2);
    }
}
