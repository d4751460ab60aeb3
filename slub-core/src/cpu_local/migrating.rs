//! Hosted migrating-task backend: `T` tasks (threads) share `C` CPU slots
//! and can be migrated between slots at chosen points, in particular between
//! reading the tid and the CAS: the CONFIG_PREEMPT situation for which the
//! 2014 series removed preempt_disable from the fast path.
//!
//! Several tasks may run on one slot at the same time, so a slot's cell can
//! be written by more than one thread: this backend reports
//! `OWNER_ONLY_WRITES = false` and the fast path uses the SMP DW-CAS. The
//! guard is a per-slot lock: while it is held no other task's slow path runs
//! on that slot (what preempt_disable gives a kernel).
//!
//! Tasks move between slots with [`MigratingCpus::migrate`] (the
//! scheduler's decision). The workspace's own tests (feature `testing`, not
//! part of the API) add two kinds of migration inside the fast path's
//! window: a one-shot, deterministic preemption (a closure runs "while the
//! task is preempted", then the task resumes on a chosen slot) and random
//! migration at a rate, for multi-threaded stress.

use super::CpuLocal;
use core::cell::Cell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;
#[cfg(feature = "testing")]
use {core::sync::atomic::AtomicU32, std::boxed::Box};

std::thread_local! {
    static TASK: Cell<usize> = const { Cell::new(0) };
}
#[cfg(feature = "testing")]
std::thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

#[cfg(feature = "testing")]
type Preemption = (Box<dyn FnOnce() + Send>, usize);

/// `T` tasks on `C` CPU slots with test-controlled migration.
pub struct MigratingCpus {
    slot_locks: Vec<Mutex<()>>,
    task_slot: Vec<AtomicUsize>,
    #[cfg(feature = "testing")]
    pending: Vec<Mutex<Option<Preemption>>>,
    #[cfg(feature = "testing")]
    one_in: AtomicU32,
    #[cfg(feature = "testing")]
    windows: AtomicU64,
    migrations: AtomicU64,
}

impl core::fmt::Debug for MigratingCpus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MigratingCpus")
            .field("slots", &self.slot_locks.len())
            .field("tasks", &self.task_slot.len())
            .field("migrations", &self.migrations())
            .finish()
    }
}

impl MigratingCpus {
    /// `tasks` tasks on `slots` slots; task `t` starts on slot `t % slots`.
    pub fn new(slots: usize, tasks: usize) -> Self {
        let slots = slots.max(1);
        let tasks = tasks.max(1);
        Self {
            slot_locks: (0..slots).map(|_| Mutex::new(())).collect(),
            task_slot: (0..tasks).map(|t| AtomicUsize::new(t % slots)).collect(),
            #[cfg(feature = "testing")]
            pending: (0..tasks).map(|_| Mutex::new(None)).collect(),
            #[cfg(feature = "testing")]
            one_in: AtomicU32::new(0),
            #[cfg(feature = "testing")]
            windows: AtomicU64::new(0),
            migrations: AtomicU64::new(0),
        }
    }

    /// Makes the calling thread run as task `task`.
    pub fn bind(&self, task: usize) {
        TASK.with(|t| t.set(task % self.task_slot.len()));
    }

    /// Runs `f` as task `task` (restoring the caller's task after).
    pub fn with_task<R>(&self, task: usize, f: impl FnOnce() -> R) -> R {
        let old = TASK.with(|t| t.replace(task % self.task_slot.len()));
        let r = f();
        TASK.with(|t| t.set(old));
        r
    }

    /// The slot task `task` runs on.
    pub fn slot_of(&self, task: usize) -> usize {
        self.task_slot[task].load(Ordering::Acquire)
    }

    /// Moves task `task` to `slot` now.
    pub fn migrate(&self, task: usize, slot: usize) {
        self.task_slot[task].store(slot % self.slot_locks.len(), Ordering::Release);
        self.migrations.fetch_add(1, Ordering::Relaxed);
    }

    /// At `task`'s next fast-path window (feature `testing`) (between reading the tid and the
    /// CAS), run `while_preempted` and then resume the task on `resume_on`.
    #[cfg(feature = "testing")]
    pub fn preempt_next_window(
        &self,
        task: usize,
        resume_on: usize,
        while_preempted: impl FnOnce() + Send + 'static,
    ) {
        *self.pending[task].lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Box::new(while_preempted), resume_on));
    }

    /// Migrate the task at a window with probability `1 / one_in` (0:
    /// never; feature `testing`).
    #[cfg(feature = "testing")]
    pub fn set_random_migration(&self, one_in: u32) {
        self.one_in.store(one_in, Ordering::Relaxed);
    }

    /// Fast-path windows passed so far (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn windows(&self) -> u64 {
        self.windows.load(Ordering::Relaxed)
    }

    /// Migrations performed so far.
    pub fn migrations(&self) -> u64 {
        self.migrations.load(Ordering::Relaxed)
    }

    fn task(&self) -> usize {
        TASK.with(|t| t.get()) % self.task_slot.len()
    }
}

// SAFETY: the guard is the slot's lock, so at most one slow path runs per
// slot; fast paths on a shared slot race, which is why OWNER_ONLY_WRITES is
// false and the SMP DW-CAS is used.
unsafe impl CpuLocal for MigratingCpus {
    const OWNER_ONLY_WRITES: bool = false;
    type Guard<'a> = MutexGuard<'a, ()>;

    fn nr_cpus(&self) -> usize {
        self.slot_locks.len()
    }

    fn current_cpu(&self) -> Option<usize> {
        Some(self.slot_of(self.task()))
    }

    fn pin(&self) -> (MutexGuard<'_, ()>, usize) {
        loop {
            let slot = self.slot_of(self.task());
            let g = self.slot_locks[slot]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // Migrated while waiting for the lock: pin the new slot instead.
            if self.slot_of(self.task()) == slot {
                return (g, slot);
            }
        }
    }

    fn on_each_cpu(&self, f: &(dyn Fn(usize) + Sync)) -> usize {
        for (slot, lock) in self.slot_locks.iter().enumerate() {
            let _g = lock.lock().unwrap_or_else(|e| e.into_inner());
            f(slot);
        }
        self.slot_locks.len()
    }

    #[cfg(feature = "testing")]
    fn preempt_point(&self, at: crate::testing::PreemptPoint) {
        // Only the tid windows: inside a pinned sheaves section a migration
        // changes nothing (the section keeps the slot it pinned).
        if at == crate::testing::PreemptPoint::SheafUpdate {
            return;
        }
        self.windows.fetch_add(1, Ordering::Relaxed);
        let task = self.task();
        let pending = self.pending[task]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((f, slot)) = pending {
            f();
            self.migrate(task, slot);
            return;
        }
        let n = self.one_in.load(Ordering::Relaxed);
        if n == 0 {
            return;
        }
        let r = RNG.with(|c| {
            let mut x = c.get() ^ (task as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.set(x);
            x
        });
        if r % u64::from(n) == 0 {
            let slots = self.slot_locks.len();
            self.migrate(task, (r >> 32) as usize % slots);
        }
    }
}
