//! `shrink` flushes every CPU its backend reaches (`CpuLocal::on_each_cpu`,
//! Linux's `flush_all`), not only the caller's: the CPU slabs, partial
//! slabs, detached freelists and sheaves that other CPUs hold go back, and
//! with them every slab no object lives in.
#![cfg(not(kmm_loom))]

use arch_api::{HostedCpus, PhysArena};
use slub_core::testing::HostedPlatform;
use slub_core::{ArenaPages, CacheConfig, CacheFlags, CpuLocal, Kmalloc, KmemCache, ThreadCpus};
use std::ptr::NonNull;

/// A cache of 64-byte objects, 8 per slab, on `cpus`.
fn cache<'a, C: CpuLocal>(
    pages: &'a ArenaPages<'a>,
    cpus: C,
    flags: CacheFlags,
) -> KmemCache<HostedPlatform<&'a ArenaPages<'a>, C>> {
    let config = CacheConfig {
        max_objects: 8,
        ..Default::default()
    };
    KmemCache::with_config("shrink", 64, 8, flags, pages, cpus, config).unwrap()
}

fn alloc_n<C: CpuLocal>(c: &KmemCache<HostedPlatform<&ArenaPages, C>>, n: usize) -> Vec<usize> {
    (0..n)
        .map(|_| c.alloc().unwrap().as_ptr() as usize)
        .collect()
}

/// # Safety
/// Each of `objs` was allocated from `c` and is freed once.
unsafe fn free_all<C: CpuLocal>(c: &KmemCache<HostedPlatform<&ArenaPages, C>>, objs: &[usize]) {
    for &p in objs {
        // SAFETY: the caller's contract.
        unsafe { c.free(NonNull::new(p as *mut u8).unwrap()) }.unwrap();
    }
}

/// `ThreadCpus`' slots are the process's: a slot a test's thread gave
/// back may be taken by another test's thread, which would then hold this
/// test's state out of a shrink's reach. The tests that count on reaching
/// a slot run one at a time.
static SLOTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Threads that exited left their `ThreadCpus` slots' state behind: a CPU
/// slab and partial slabs of their own objects, and a detached freelist of
/// objects from the caller's slabs. A shrink from the caller gives all of
/// it back, its own CPU's too.
fn exited_threads_state_comes_back(flags: CacheFlags) {
    let _one = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let a = PhysArena::new(16 << 20, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let c = cache(&pages, ThreadCpus, flags);
    let n = c.objects_per_slab();
    let mine = alloc_n(&c, 3 * n);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Its own objects, allocated and freed here: a CPU slab and
            // partial slabs (or a sheaf) that nothing else will flush.
            let own = alloc_n(&c, 4 * n);
            // SAFETY: allocated just now, each freed once.
            unsafe { free_all(&c, &own) };
            // Objects of the caller's slabs, freed here: remote frees.
            // SAFETY: allocated above, each freed once (the caller frees
            // the rest).
            unsafe { free_all(&c, &mine[..2 * n]) };
        })
        // `join`, not the scope's end: the thread gives its slot back in a
        // thread-local destructor, which the scope does not wait for.
        .join()
        .unwrap();
    });
    // SAFETY: allocated above, the rest of them, each freed once.
    unsafe { free_all(&c, &mine[2 * n..]) };
    assert!(c.nr_slabs() > 0, "the thread's slabs are still held");
    c.shrink();
    assert_eq!(c.nr_slabs(), 0, "a CPU's state was not flushed");
    assert_eq!(c.slabinfo().active_objs, 0);
    drop(c);
    assert_eq!(a.frames_in_use(), 0);
}

#[test]
fn shrink_flushes_the_cpus_of_exited_threads() {
    exited_threads_state_comes_back(CacheFlags::empty());
}

#[test]
fn shrink_flushes_the_sheaves_of_exited_threads() {
    exited_threads_state_comes_back(CacheFlags::SHEAVES);
}

/// A live thread's `ThreadCpus` slot is its own: a shrink from elsewhere
/// leaves its CPU slab alone (the objects in it are still allocated
/// there), and returns everything else.
#[test]
fn shrink_leaves_a_live_threads_slot_alone() {
    let _one = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let a = PhysArena::new(16 << 20, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let c = cache(&pages, ThreadCpus, CacheFlags::empty());
    let n = c.objects_per_slab();
    let (ready, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        let live = s.spawn(|| {
            let one = alloc_n(&c, 1);
            ready.wait();
            done.wait();
            // SAFETY: allocated here, freed once.
            unsafe { free_all(&c, &one) };
        });
        ready.wait();
        let mine = alloc_n(&c, 3 * n);
        // SAFETY: allocated just now, each freed once.
        unsafe { free_all(&c, &mine) };
        c.shrink();
        assert_eq!(c.nr_slabs(), 1, "only the live thread's slab stays");
        done.wait();
        live.join().unwrap();
    });
    c.shrink();
    assert_eq!(c.nr_slabs(), 0);
}

/// Runs `f(cpu)` on `n` threads at once, thread `cpu` declared on
/// `HostedCpus` CPU `cpu`.
fn on_declared_cpus(n: usize, f: impl Fn(usize) + Sync) {
    std::thread::scope(|s| {
        for cpu in 0..n {
            let f = &f;
            s.spawn(move || {
                HostedCpus::run_on(cpu);
                f(cpu)
            });
        }
    });
}

/// `HostedCpus`: every declared CPU is reached under its lock, whichever
/// CPU the shrinking thread declared.
#[test]
fn shrink_flushes_every_declared_cpu() {
    let a = PhysArena::new(16 << 20, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let cpus = HostedCpus::new(4);
    for flags in [CacheFlags::empty(), CacheFlags::SHEAVES] {
        let c = cache(&pages, &cpus, flags);
        let n = c.objects_per_slab();
        on_declared_cpus(4, |_| {
            let objs = alloc_n(&c, 2 * n + 1);
            // SAFETY: allocated just now, each freed once.
            unsafe { free_all(&c, &objs) };
        });
        assert!(c.nr_slabs() > 0);
        std::thread::scope(|s| {
            s.spawn(|| {
                HostedCpus::run_on(3);
                c.shrink()
            });
        });
        assert_eq!(c.nr_slabs(), 0, "{flags:?}: a CPU was not flushed");
    }
    assert_eq!(a.frames_in_use(), 0);
}

/// `Kmalloc::shrink`: every class, every CPU.
#[test]
fn kmalloc_shrink_empties_every_class_on_every_cpu() {
    use std::alloc::Layout;
    let a = PhysArena::new(64 << 20, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let cpus = HostedCpus::new(2);
    for flags in [CacheFlags::empty(), CacheFlags::SHEAVES] {
        let km =
            Kmalloc::<HostedPlatform<&ArenaPages, &HostedCpus>>::new(&pages, &cpus, flags).unwrap();
        on_declared_cpus(2, |_| {
            let objs: Vec<_> = [8usize, 64, 500, 4096]
                .iter()
                .flat_map(|&size| (0..40).map(move |_| size))
                .map(|size| {
                    let l = Layout::from_size_align(size, 8).unwrap();
                    (km.alloc(l).unwrap(), l)
                })
                .collect();
            for (p, l) in objs {
                // SAFETY: allocated just now with `l`, freed once.
                unsafe { km.free(p, l) }.unwrap();
            }
        });
        let held: usize = km.caches().iter().map(|c| c.nr_slabs()).sum();
        assert!(held > 0);
        assert_eq!(km.shrink(), held, "{flags:?}");
        assert!(km.caches().iter().all(|c| c.nr_slabs() == 0), "{flags:?}");
    }
    assert_eq!(a.frames_in_use(), 0);
}
