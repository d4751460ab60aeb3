//! Deferred frees (`kfree_rcu`) on both fronts, with the hosted epoch
//! grace period: never reused under a reader, all freed after the grace
//! period, batches handed over whole, the pending bound, and destroy.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use slub_core::testing::{EpochGracePeriod, HostedPlatform, NoWait};
use slub_core::{
    ArenaPages, CacheConfig, CacheFlags, DestroyError, FreeError, KmemCache, MAX_PENDING,
    ThreadCpus,
};
use std::collections::HashSet;
use std::ptr::NonNull;

type Cache<'a> = KmemCache<HostedPlatform<ArenaPages<'a>, ThreadCpus>>;

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];
const CAP: usize = 4;
const MARK: u8 = 0xa5;

fn cache(a: &PhysArena, flags: CacheFlags) -> Cache<'_> {
    KmemCache::with_config(
        "rcu",
        64,
        8,
        flags,
        ArenaPages::new(a),
        ThreadCpus,
        CacheConfig {
            sheaf_capacity: CAP,
            ..CacheConfig::default()
        },
    )
    .unwrap()
}

fn arena() -> PhysArena {
    PhysArena::new(4 << 20, 4096).unwrap()
}

fn intact(p: NonNull<u8>) -> bool {
    // SAFETY: `p` is an object not yet given back: readable slab memory.
    (0..64).all(|i| unsafe { p.as_ptr().add(i).read_volatile() } == MARK)
}

fn marked(c: &Cache<'_>) -> NonNull<u8> {
    let p = c.alloc().unwrap();
    // SAFETY: a fresh 64-byte object.
    unsafe { p.as_ptr().write_bytes(MARK, 64) };
    p
}

#[test]
fn not_reused_while_a_reader_is_inside_and_freed_after() {
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let reader = gp.read();
        let objs: Vec<_> = (0..CAP).map(|_| marked(&c)).collect();
        for &p in &objs {
            // SAFETY: allocated above, unpublished, freed once.
            unsafe { c.free_deferred(p, &gp) }.unwrap();
        }
        // A reader that enters now cannot see them and holds nothing up.
        let late = gp.read();
        assert_eq!(
            c.flush_deferred(&gp),
            CAP,
            "{flags:?}: freed under a reader"
        );
        // Allocation goes on and never hands one of them out.
        let deferred: HashSet<_> = objs.iter().collect();
        let others: Vec<_> = (0..3 * c.objects_per_slab())
            .map(|_| c.alloc().unwrap())
            .collect();
        assert!(others.iter().all(|p| !deferred.contains(p)), "{flags:?}");
        assert!(objs.iter().all(|&p| intact(p)), "{flags:?}: overwritten");
        drop(reader);
        assert_eq!(c.poll_deferred(&gp), CAP, "{flags:?}: not freed after");
        assert_eq!(c.deferred_pending(), 0);
        drop(late);
        for &p in &others {
            // SAFETY: allocated above, freed once.
            unsafe { c.free(p) }.unwrap();
        }
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn a_batch_is_handed_over_whole() {
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let objs: Vec<_> = (0..2 * CAP).map(|_| marked(&c)).collect();
        for (i, &p) in objs.iter().enumerate() {
            // SAFETY: allocated above, freed once.
            unsafe { c.free_deferred(p, &gp) }.unwrap();
            // No reader: a handed-over batch goes back at once, a partial
            // one waits on its CPU.
            assert_eq!(c.deferred_pending(), (i + 1) % CAP, "{flags:?} {i}");
        }
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

#[test]
fn the_pending_bound_is_kept() {
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let no_wait = NoWait(&gp);
        // A reader on another thread holds every batch up until told to leave.
        let (enter_tx, enter_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let gp = &gp;
            s.spawn(move || {
                let reader = gp.read();
                enter_tx.send(()).unwrap();
                leave_rx.recv().unwrap();
                std::thread::yield_now();
                drop(reader);
            });
            enter_rx.recv().unwrap();
            // One CPU: MAX_PENDING batches on the ring and one full on the CPU.
            let bound = (MAX_PENDING + 1) * CAP;
            let objs: Vec<_> = (0..bound + 1).map(|_| marked(&c)).collect();
            for &p in &objs[..bound] {
                // SAFETY: allocated above, freed once.
                unsafe { c.free_deferred(p, &no_wait) }.unwrap();
            }
            assert_eq!(c.deferred_pending(), bound);
            let extra = objs[bound];
            // SAFETY: allocated above; refused, so still ours.
            let r = unsafe { c.free_deferred(extra, &no_wait) };
            assert_eq!(r, Err(FreeError::DeferredBacklog { pending: bound }));
            assert!(objs.iter().all(|&p| intact(p)), "{flags:?}: freed early");
            // A caller that may wait gets in once the oldest batch is over.
            leave_tx.send(()).unwrap();
            // SAFETY: still ours (refused above), freed once.
            unsafe { c.free_deferred(extra, &gp) }.unwrap();
            assert_eq!(gp.readers(), 0, "{flags:?}: did not wait for the reader");
        });
        c.destroy_deferred(&gp).unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

/// The pending bound hit by a caller inside a read-side section, with a
/// grace period that can wait: waiting would wait for the caller itself
/// (the hang CI once met in `threads_defer_and_read_concurrently`), so it is
/// refused with `DeferredBacklog` and the object is still the caller's.
#[test]
fn a_reader_at_the_bound_is_refused_not_hung() {
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let reader = gp.read();
        let bound = (MAX_PENDING + 1) * CAP;
        let objs: Vec<_> = (0..bound + 1).map(|_| marked(&c)).collect();
        for &p in &objs[..bound] {
            // SAFETY: allocated above, freed once.
            unsafe { c.free_deferred(p, &gp) }.unwrap();
        }
        // SAFETY: allocated above; refused, so still ours.
        let r = unsafe { c.free_deferred(objs[bound], &gp) };
        assert_eq!(r, Err(FreeError::DeferredBacklog { pending: bound }));
        assert!(objs.iter().all(|&p| intact(p)), "{flags:?}: freed early");
        drop(reader);
        // SAFETY: refused above, so still ours; freed once.
        unsafe { c.free_deferred(objs[bound], &gp) }.unwrap();
        c.destroy_deferred(&gp).unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn destroy_refuses_or_waits() {
    for flags in FRONTS {
        let a = arena();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        let reader = gp.read();
        let objs: Vec<_> = (0..CAP + 1).map(|_| marked(&c)).collect();
        for &p in &objs {
            // SAFETY: allocated above, freed once.
            unsafe { c.free_deferred(p, &gp) }.unwrap();
        }
        let n = CAP + 1;
        assert_eq!(
            c.destroy(),
            Err(DestroyError::DeferredPending { objects: n })
        );
        assert_eq!(
            c.destroy_deferred(&NoWait(&gp)),
            Err(DestroyError::DeferredPending { objects: n })
        );
        assert!(objs.iter().all(|&p| intact(p)), "{flags:?}: freed early");
        // Still usable.
        let q = c.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { c.free(q) }.unwrap();
        drop(reader);
        c.destroy_deferred(&NoWait(&gp)).unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn threads_defer_and_read_concurrently() {
    let per = if cfg!(miri) { 12 } else { 400 };
    for flags in FRONTS {
        let a = PhysArena::new(16 << 20, 4096).unwrap();
        let mut c = cache(&a, flags);
        let gp = EpochGracePeriod::new();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for i in 0..per {
                        let g = gp.read();
                        let p = marked(&c);
                        // Another reader's object stays intact while we
                        // are inside (checked on our own: unpublished
                        // after this point, read inside the section).
                        assert!(intact(p));
                        // SAFETY: allocated above, freed once.
                        match unsafe { c.free_deferred(p, &gp) } {
                            Ok(()) => {
                                assert!(intact(p), "freed under its reader");
                                drop(g);
                            }
                            // Every batch waits and this thread is a reader:
                            // waiting here would wait for itself, so the
                            // cache refused; outside the section it waits.
                            Err(FreeError::DeferredBacklog { .. }) => {
                                assert!(intact(p), "refused but freed");
                                drop(g);
                                // SAFETY: refused above, so still ours.
                                unsafe { c.free_deferred(p, &gp) }.unwrap();
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                        if i % 7 == 0 {
                            c.flush_deferred(&gp);
                        }
                    }
                });
            }
        });
        c.destroy_deferred(&gp).unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn misaligned_and_destroyed_are_refused() {
    let a = arena();
    let mut c = cache(&a, CacheFlags::empty());
    let gp = EpochGracePeriod::new();
    let p = c.alloc().unwrap();
    // SAFETY: inside the object, not its start.
    let bad = unsafe { NonNull::new_unchecked(p.as_ptr().add(8)) };
    // SAFETY: refused before any use.
    let r = unsafe { c.free_deferred(bad, &gp) };
    assert_eq!(
        r,
        Err(FreeError::Misaligned {
            ptr: bad.as_ptr() as usize
        })
    );
    // SAFETY: allocated above, freed once.
    unsafe { c.free(p) }.unwrap();
    c.destroy().unwrap();
    // SAFETY: refused before any use: the cache is destroyed.
    let r = unsafe { c.free_deferred(p, &gp) };
    assert_eq!(r, Err(FreeError::Destroyed));
}
