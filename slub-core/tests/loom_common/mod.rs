//! Shared pieces of the loom models: a CpuLocal backend built from loom
//! primitives (tasks on CPU slots, a per-slot lock as the guard, one-shot
//! migration at a task's n-th fast-path window) and small caches.
#![allow(dead_code)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Mutex, MutexGuard};
use slub_core::testing::HostedPlatform;
use slub_core::testing::PreemptPoint;
use slub_core::{CacheConfig, CacheFlags, CpuLocal, KmemCache, SystemPages};
use std::cell::Cell;

loom::thread_local! {
    static TASK: Cell<usize> = Cell::new(0);
}

/// Tasks on CPU slots, modelled with loom primitives. With `OWNER_ONLY`,
/// the backend declares that only a slot's owner writes its cells (the
/// CPU-local CAS, as a kernel with preemption off has): two tasks on one
/// slot then model an interrupt on that CPU, and no task may migrate.
pub struct LoomCpus<const OWNER_ONLY: bool = false> {
    slots: Vec<Mutex<()>>,
    task_slot: Vec<AtomicUsize>,
    /// Per task: `(window number, slot)` encoded as `n << 8 | slot`, + 1.
    migrate: Vec<AtomicUsize>,
    windows: Vec<AtomicUsize>,
}

impl<const OWNER_ONLY: bool> LoomCpus<OWNER_ONLY> {
    /// `slots` slots; task `t` starts on `start[t]`.
    pub fn new(slots: usize, start: &[usize]) -> Self {
        Self {
            slots: (0..slots).map(|_| Mutex::new(())).collect(),
            task_slot: start.iter().map(|&s| AtomicUsize::new(s)).collect(),
            migrate: start.iter().map(|_| AtomicUsize::new(0)).collect(),
            windows: start.iter().map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// The calling thread is task `t`.
    pub fn bind(&self, t: usize) {
        TASK.with(|c| c.set(t));
    }

    /// Move task `t` to `slot` at its `nth` fast-path window (0-based).
    pub fn migrate_at_window(&self, t: usize, nth: usize, slot: usize) {
        assert!(!OWNER_ONLY, "an owner-only backend never migrates a task");
        self.migrate[t].store((nth << 8 | slot) + 1, Ordering::Relaxed);
    }

    fn task(&self) -> usize {
        TASK.with(|c| c.get())
    }
}

// SAFETY: without OWNER_ONLY, slots are shared by tasks, so
// OWNER_ONLY_WRITES is false (SMP CAS). With it, tasks never migrate and two
// tasks on one slot stand for an interrupt on that CPU, against which the
// CPU-local CAS is atomic (under loom every DW-CAS is). The guard is the
// slot's lock.
unsafe impl<const OWNER_ONLY: bool> CpuLocal for LoomCpus<OWNER_ONLY> {
    const OWNER_ONLY_WRITES: bool = OWNER_ONLY;
    type Guard<'a> = MutexGuard<'a, ()>;

    fn nr_cpus(&self) -> usize {
        self.slots.len()
    }

    fn current_cpu(&self) -> Option<usize> {
        Some(self.task_slot[self.task()].load(Ordering::Relaxed))
    }

    fn pin(&self) -> (MutexGuard<'_, ()>, usize) {
        let t = self.task();
        loop {
            let s = self.task_slot[t].load(Ordering::Relaxed);
            let g = self.slots[s].lock().unwrap();
            if self.task_slot[t].load(Ordering::Relaxed) == s {
                return (g, s);
            }
        }
    }

    fn preempt_point(&self, at: PreemptPoint) {
        // The tid windows only (the models count them).
        if at == PreemptPoint::SheafUpdate {
            return;
        }
        let t = self.task();
        let n = self.windows[t].fetch_add(1, Ordering::Relaxed);
        let m = self.migrate[t].load(Ordering::Relaxed);
        if m != 0 && (m - 1) >> 8 == n {
            self.task_slot[t].store((m - 1) & 0xff, Ordering::Relaxed);
        }
    }
}

/// The cache the models use.
pub type Cache<D, const O: bool = false> = KmemCache<HostedPlatform<SystemPages, LoomCpus<O>, D>>;

/// A cache of 32-byte objects, `objects` per slab.
pub fn cache<D: arch_api::DwCas>(cpus: LoomCpus, objects: usize, flags: CacheFlags) -> Cache<D> {
    cache_partial(cpus, objects, flags, 0)
}

/// [`cache`] on a backend where only a slot's owner writes its cells, its
/// CPUs keeping one frozen slab each (so a chain given back to a full slab
/// freezes it, as with the default configuration).
pub fn cache_owner_only<D: arch_api::DwCas>(
    cpus: LoomCpus<true>,
    objects: usize,
    flags: CacheFlags,
) -> Cache<D, true> {
    cache_partial(cpus, objects, flags, 1)
}

/// [`cache`] whose CPUs keep up to `cpu_partial` frozen slabs each.
pub fn cache_partial<D: arch_api::DwCas, const O: bool>(
    cpus: LoomCpus<O>,
    objects: usize,
    flags: CacheFlags,
    cpu_partial: usize,
) -> Cache<D, O> {
    KmemCache::with_config(
        "loom",
        32,
        8,
        flags,
        SystemPages::new(),
        cpus,
        CacheConfig {
            max_objects: objects,
            min_partial: 0,
            cpu_partial,
            sheaf_capacity: 1,
            barn_max_full: 4,
            barn_max_empty: 4,
            seed: 1,
            new_slab: None,
            fast_path_stats: true,
        },
    )
    .unwrap()
}

/// Destroys the cache and checks every page came back.
pub fn destroy_all<D: arch_api::DwCas, const O: bool>(c: loom::sync::Arc<Cache<D, O>>) {
    let mut c = match loom::sync::Arc::try_unwrap(c) {
        Ok(c) => c,
        Err(_) => panic!("cache still shared"),
    };
    c.destroy()
        .expect("destroy must find every object free and every slab");
    assert_eq!(c.mem().blocks_in_use(), 0, "every page returned");
}

pub mod deferred;
pub mod large_list;
pub mod models;
