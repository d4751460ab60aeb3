//! The tid front's detached freelist through the public API: frees of
//! objects outside the freeing CPU's slab are linked per CPU and reach
//! their slab a chain at a time; nothing is lost when the CPU needs a new
//! slab, is shrunk or the cache destroyed; a double free of the chain's
//! head (or of its slab's freelist head) is refused. One deeper in the
//! chain is not seen without `debug`, as in Linux, whose `kfree_bulk`
//! chains check no more.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use slub_core::testing::HostedPlatform;
use slub_core::{ArenaPages, CacheConfig, CacheFlags, FreeError, KmemCache, ThreadCpus};
use std::ptr::NonNull;

type Cache<'a> = KmemCache<HostedPlatform<&'a ArenaPages<'a>, ThreadCpus>>;

/// A tid cache of 64-byte objects, 8 per slab.
fn cache<'a>(pages: &'a ArenaPages<'a>) -> Cache<'a> {
    KmemCache::with_config(
        "detached",
        64,
        8,
        CacheFlags::empty(),
        pages,
        ThreadCpus,
        CacheConfig {
            max_objects: 8,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Two full slabs' worth and one more object from the calling CPU: the
/// first two slabs are full and no CPU's; the last object is in its CPU
/// slab.
fn fill(c: &Cache) -> Vec<usize> {
    (0..2 * c.objects_per_slab() + 1)
        .map(|_| c.alloc().unwrap().as_ptr() as usize)
        .collect()
}

/// # Safety
/// `p` was allocated from `c` and is freed once.
unsafe fn free(c: &Cache, p: usize) -> Result<(), FreeError> {
    // SAFETY: the caller's contract.
    unsafe { c.free(NonNull::new(p as *mut u8).unwrap()) }
}

/// Runs `f` on a fresh cache filled by [`fill`] (its objects, and the
/// objects per slab), then returns the arena frames still in use.
fn with_filled(f: impl FnOnce(&mut Cache, Vec<usize>, usize)) -> u64 {
    let a = PhysArena::new(16 << 20, 4096).unwrap();
    let pages = ArenaPages::new(&a);
    let mut c = cache(&pages);
    let objs = fill(&c);
    let n = c.objects_per_slab();
    f(&mut c, objs, n);
    drop(c);
    a.frames_in_use()
}

/// Frees every object of `objs`.
///
/// # Safety
/// Each was allocated from `c` and is freed once.
unsafe fn free_all<'x>(c: &Cache, objs: impl IntoIterator<Item = &'x usize>) {
    for &p in objs {
        // SAFETY: the caller's contract.
        unsafe { free(c, p) }.unwrap();
    }
}

/// On another thread (another CPU of `ThreadCpus`), registered there
/// first (a thread's first call takes the slow path, which gives it its
/// CPU): one allocation, freed onto its CPU freelist.
fn on_other_cpu<T: Send>(c: &Cache, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let w = c.alloc().unwrap().as_ptr() as usize;
            // SAFETY: allocated just now, freed once.
            unsafe { free(c, w) }.unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

// Under `debug` every free takes the slow path, which never detaches.
#[cfg(all(feature = "stats", not(feature = "debug")))]
#[test]
fn a_run_of_frees_into_one_slab_reaches_it_as_one_chain() {
    use slub_core::StatItem::*;
    let left = with_filled(|c, objs, n| {
        on_other_cpu(c, || {
            let before = c.stats();
            // SAFETY: allocated above, each freed once.
            unsafe { free_all(c, &objs[..n]) };
            let mid = c.stats();
            assert_eq!(
                mid.get(FreeSlowpath),
                before.get(FreeSlowpath),
                "a run of frees into one slab stays on the CPU"
            );
            assert_eq!(mid.get(FreeFastpath), before.get(FreeFastpath) + n as u64);
            // A free into the second slab starts a new chain: the first goes
            // back to its slab with one push, which makes it partial (frozen
            // for this CPU) from full.
            // SAFETY: allocated above, freed once.
            unsafe { free(c, objs[n]) }.unwrap();
            let after = c.stats();
            assert_eq!(after.get(FreeSlowpath), before.get(FreeSlowpath) + 1);
            assert_eq!(after.get(CpuPartialFree), before.get(CpuPartialFree) + 1);
        });
        // SAFETY: allocated above, each freed once.
        unsafe { free_all(c, &objs[n + 1..]) };
        c.destroy().unwrap();
    });
    assert_eq!(left, 0);
}

#[test]
fn a_cpu_takes_its_detached_objects_back_before_a_new_slab() {
    let left = with_filled(|c, objs, n| {
        let first = &objs[..n];
        on_other_cpu(c, || {
            // Exhaust this CPU's slab.
            let mine: Vec<usize> = (0..n)
                .map(|_| c.alloc().unwrap().as_ptr() as usize)
                .collect();
            // SAFETY: allocated above, each freed once.
            unsafe { free_all(c, first) };
            // The slow path gives the chain back, which makes the first slab
            // partial (frozen for this CPU), and takes it as the CPU slab.
            let slabs = c.nr_slabs();
            let q = c.alloc().unwrap().as_ptr() as usize;
            assert!(first.contains(&q), "allocated from the freed slab");
            assert_eq!(c.nr_slabs(), slabs, "no new slab");
            // SAFETY: allocated above, each freed once.
            unsafe { free_all(c, mine.iter().chain([&q])) };
        });
        // SAFETY: allocated above, each freed once.
        unsafe { free_all(c, &objs[n..]) };
        c.destroy().unwrap();
    });
    assert_eq!(left, 0);
}

#[test]
fn shrink_and_destroy_give_detached_objects_back() {
    let left = with_filled(|c, objs, n| {
        on_other_cpu(c, || {
            // SAFETY: allocated above, each freed once.
            unsafe { free_all(c, &objs[..n]) };
            // Still on this CPU's chain: the slab is in use, as it would be
            // with the objects on a CPU freelist.
            let slabs = c.nr_slabs();
            c.shrink();
            assert_eq!(
                c.nr_slabs(),
                slabs - 2,
                "the emptied slab and the CPU slab went back"
            );
            // SAFETY: allocated above, freed once (joins a new chain).
            unsafe { free(c, objs[n]) }.unwrap();
        });
        // SAFETY: allocated above, each freed once.
        unsafe { free_all(c, &objs[n + 1..]) };
        // The other CPU's chain (one object) is still there: destroy flushes
        // every CPU, so it finds the object free.
        c.destroy().unwrap();
    });
    assert_eq!(left, 0);
}

#[cfg(not(feature = "debug"))]
#[test]
fn a_double_free_of_a_chain_or_slab_freelist_head_is_refused() {
    let left = with_filled(|c, objs, n| {
        on_other_cpu(c, || {
            let x = objs[0];
            // SAFETY: allocated above, freed once.
            unsafe { free(c, x) }.unwrap();
            // SAFETY: deliberately a double free; `x` heads the chain.
            let r = unsafe { free(c, x) };
            assert_eq!(r, Err(FreeError::DoubleFree { ptr: x }));
            // A free into the second slab gives the chain back: `x` now heads
            // its slab's own freelist.
            // SAFETY: allocated above, freed once.
            unsafe { free(c, objs[n]) }.unwrap();
            // SAFETY: deliberately a double free; `x` heads its slab's freelist.
            let r = unsafe { free(c, x) };
            assert_eq!(r, Err(FreeError::DoubleFree { ptr: x }));
        });
        // SAFETY: allocated above, each freed once.
        unsafe { free_all(c, objs[1..n].iter().chain(&objs[n + 1..])) };
        c.destroy().unwrap();
    });
    assert_eq!(left, 0, "nothing freed twice, nothing lost");
}

/// Frees `objs[0]` on the calling CPU and gives its chain back (a free
/// into the second slab starts the next chain): the first slab then has a
/// free object, so a chain given back to it later needs its tail.
fn one_free_on_the_first_slab(c: &Cache, objs: &[usize]) {
    let n = c.objects_per_slab();
    // SAFETY: allocated by the caller, freed once.
    unsafe { free(c, objs[0]) }.unwrap();
    // SAFETY: allocated by the caller, freed once.
    unsafe { free(c, objs[n]) }.unwrap();
}

#[test]
fn a_chain_into_a_slab_with_free_objects_is_linked_at_its_tail() {
    let left = with_filled(|c, objs, n| {
        one_free_on_the_first_slab(c, &objs);
        on_other_cpu(c, || {
            // SAFETY: allocated above, each freed once.
            unsafe { free_all(c, &objs[1..n]) };
            // Given back now: walked for its tail, linked before the object
            // already free; the slab is empty and shrink returns it.
            let slabs = c.nr_slabs();
            c.shrink();
            assert!(c.nr_slabs() < slabs, "the emptied slab went back");
        });
        // SAFETY: allocated above, each freed once.
        unsafe { free_all(c, &objs[n + 1..]) };
        c.destroy().unwrap();
    });
    assert_eq!(left, 0);
}

#[cfg(not(feature = "debug"))]
#[test]
fn a_loop_found_by_the_walk_is_reported_and_its_slab_kept() {
    with_filled(|c, objs, n| {
        one_free_on_the_first_slab(c, &objs);
        on_other_cpu(c, || {
            let (x, y) = (objs[1], objs[2]);
            // SAFETY: allocated above, each freed once.
            unsafe { free_all(c, [&x, &y]) };
            // SAFETY: deliberately a double free deeper in the chain: not
            // seen now; it makes the chain a loop.
            unsafe { free(c, x) }.unwrap();
            // The next chain's start gives this one back; its slab has a free
            // object, so the chain is walked, and the walk finds the loop.
            // SAFETY: allocated above, freed once.
            let r = unsafe { free(c, objs[n + 1]) };
            assert_eq!(r, Err(FreeError::DoubleFree { ptr: x }));
        });
        // SAFETY: allocated above, each freed once.
        unsafe { free_all(c, objs[3..n].iter().chain(&objs[n + 2..])) };
        // The looped chain's objects were never given back: their slab stays
        // in use rather than hand one out twice.
        assert!(matches!(
            c.destroy(),
            Err(slub_core::DestroyError::LiveObjects { remaining: 2 })
        ));
    });
}
