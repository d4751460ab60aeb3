//! `kfree_rcu` on random kmalloc caches (`RandomKmalloc::free_deferred_caller`
//! and friends), both fronts: objects of the copies, of the general caches
//! and large blocks are not reused while a reader is inside, are freed
//! after (by poll, flush or the barrier), are counted while pending;
//! `destroy` refuses (destroying nothing) while any is pending.
#![cfg(not(kmm_loom))]

use arch_api::{HostedCpus, PhysArena};
use core::alloc::Layout;
use slub_core::testing::{EpochGracePeriod, HostedPlatform, NoWait};
use slub_core::{ArenaPages, CacheFlags, DestroyError, RandomKmalloc};
use std::collections::HashSet;
use std::ptr::NonNull;

/// Four declared CPUs (this thread is CPU 0): small per-CPU arrays in each
/// of the 204 caches.
type P<'a> = HostedPlatform<&'a ArenaPages<'a>, &'a HostedCpus>;

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];
const ARENA: u64 = 24 << 20;
const MARK: u8 = 0xa5;
/// Two call sites (served by different copies, checked below).
const SITE_A: usize = 0xffff_ffff_8100_1234;

fn site_b(km: &RandomKmalloc<P<'_>>) -> usize {
    (1..)
        .map(|k| SITE_A + 64 * k)
        .find(|&b| km.copy_index(b) != km.copy_index(SITE_A))
        .unwrap()
}

fn small() -> Layout {
    Layout::from_size_align(100, 8).unwrap()
}

fn large() -> Layout {
    Layout::from_size_align(40 << 10, 8).unwrap()
}

fn marked(p: NonNull<u8>, l: Layout) -> NonNull<u8> {
    // SAFETY: a fresh object of `l.size()` bytes.
    unsafe { p.as_ptr().write_bytes(MARK, l.size()) };
    p
}

fn intact(p: NonNull<u8>, l: Layout) -> bool {
    let step = if cfg!(miri) { 61 } else { 1 };
    let mut at = (0..l.size()).step_by(step).chain([l.size() - 1]);
    // SAFETY: `p` is an object not yet given back: readable memory.
    at.all(|i| unsafe { p.as_ptr().add(i).read_volatile() } == MARK)
}

#[test]
fn copies_general_and_large_deferred_then_freed() {
    for flags in FRONTS {
        let arena = PhysArena::new(ARENA, 4096).unwrap();
        let pages = ArenaPages::new(&arena);
        let cpus = HostedCpus::new(4);
        let mut km: RandomKmalloc<P> = RandomKmalloc::new(&pages, &cpus, flags, 0x5eed).unwrap();
        let gp = EpochGracePeriod::new();
        let (s, l, big) = (small(), small(), large());
        let b = site_b(&km);
        let a_objs: Vec<_> = (0..3)
            .map(|_| marked(km.alloc_caller(s, SITE_A).unwrap(), s))
            .collect();
        let b_objs: Vec<_> = (0..3)
            .map(|_| marked(km.alloc_caller(s, b).unwrap(), s))
            .collect();
        let general = marked(km.alloc(l).unwrap(), l);
        let block = marked(km.alloc_caller(big, SITE_A).unwrap(), big);
        let reader = gp.read();
        for &p in &a_objs {
            // SAFETY: allocated above with `s` and `SITE_A`, unpublished,
            // freed once.
            unsafe { km.free_deferred_caller(p, s, SITE_A, &gp) }.unwrap();
        }
        for &p in &b_objs {
            // SAFETY: as above, with `b`.
            unsafe { km.free_deferred_caller(p, s, b, &gp) }.unwrap();
        }
        // SAFETY: allocated above with `l` (no caller), freed once.
        unsafe { km.free_deferred(general, l, &gp) }.unwrap();
        // SAFETY: a large block of `alloc_caller`, freed once.
        unsafe { km.free_deferred_caller(block, big, SITE_A, &gp) }.unwrap();
        assert_eq!(km.deferred_pending(), 8, "{flags:?}");
        assert_eq!(km.flush_deferred(&gp), 8, "{flags:?}: freed under a reader");
        assert_eq!(km.poll_deferred(&gp), 0, "{flags:?}: freed under a reader");
        // Not reused: fresh objects of both sites and the general caches
        // are other objects.
        let deferred: HashSet<_> = a_objs.iter().chain(&b_objs).chain([&general]).collect();
        let fresh: Vec<_> = [SITE_A, b]
            .iter()
            .flat_map(|&c| (0..8).map(move |_| (c, ())))
            .map(|(c, ())| (c, km.alloc_caller(s, c).unwrap()))
            .collect();
        let g2 = km.alloc(l).unwrap();
        assert!(
            fresh.iter().all(|(_, p)| !deferred.contains(p)) && !deferred.contains(&g2),
            "{flags:?}: reused under a reader"
        );
        assert!(
            deferred.iter().all(|&&p| intact(p, s)) && intact(block, big),
            "{flags:?}: overwritten under a reader"
        );
        // `destroy` refuses and destroys nothing.
        assert_eq!(
            km.destroy(),
            Err(DestroyError::DeferredPending { objects: 8 }),
            "{flags:?}"
        );
        for &(c, p) in &fresh {
            // SAFETY: allocated above with `s` and `c`; the caches live on.
            unsafe { km.free_caller(p, s, c) }.unwrap();
        }
        // SAFETY: allocated above with `l`.
        unsafe { km.free(g2, l) }.unwrap();
        drop(reader);
        assert_eq!(km.poll_deferred(&gp), 8, "{flags:?}: not freed after");
        assert_eq!(km.deferred_pending(), 0, "{flags:?}");
        km.destroy().unwrap();
        drop(km);
        assert_eq!(arena.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn barrier_waits_or_refuses_and_destroy_deferred_frees_all() {
    for flags in FRONTS {
        let arena = PhysArena::new(ARENA, 4096).unwrap();
        let pages = ArenaPages::new(&arena);
        let cpus = HostedCpus::new(4);
        let mut km: RandomKmalloc<P> = RandomKmalloc::new(&pages, &cpus, flags, 0x5eed).unwrap();
        let gp = EpochGracePeriod::new();
        let s = small();
        let b = site_b(&km);
        let reader = gp.read();
        for c in [SITE_A, b] {
            let p = km.alloc_caller(s, c).unwrap();
            // SAFETY: allocated above with `s` and `c`, unpublished, freed once.
            unsafe { km.free_deferred_caller(p, s, c, &gp) }.unwrap();
        }
        // This thread is inside: it cannot wait (nor could `NoWait`).
        assert_eq!(
            km.deferred_barrier(&NoWait(&gp)),
            Err(DestroyError::DeferredPending { objects: 2 }),
            "{flags:?}"
        );
        assert_eq!(
            km.destroy_deferred(&gp),
            Err(DestroyError::DeferredPending { objects: 2 }),
            "{flags:?}"
        );
        drop(reader);
        km.destroy_deferred(&gp).unwrap();
        assert_eq!(km.deferred_pending(), 0, "{flags:?}");
        drop(km);
        assert_eq!(arena.frames_in_use(), 0, "{flags:?}");
    }
}

/// Under `debug`, a deferred free keyed by another call site (another
/// copy) is refused at once, as `free_caller` refuses it.
#[cfg(feature = "debug")]
#[test]
fn another_callers_copy_is_refused() {
    let arena = PhysArena::new(ARENA, 4096).unwrap();
    let pages = ArenaPages::new(&arena);
    let cpus = HostedCpus::new(4);
    let mut km: RandomKmalloc<P> =
        RandomKmalloc::new(&pages, &cpus, CacheFlags::empty(), 0x5eed).unwrap();
    let gp = EpochGracePeriod::new();
    let s = small();
    let b = site_b(&km);
    let p = km.alloc_caller(s, SITE_A).unwrap();
    // SAFETY: refused before anything is done with `p`.
    let r = unsafe { km.free_deferred_caller(p, s, b, &gp) };
    assert!(
        matches!(r, Err(slub_core::FreeError::ForeignPointer { .. })),
        "{r:?}"
    );
    assert_eq!(km.deferred_pending(), 0);
    // SAFETY: allocated above with `s` and `SITE_A`, freed once.
    unsafe { km.free_caller(p, s, SITE_A) }.unwrap();
    km.destroy().unwrap();
}
