//! `kfree_rcu` on kmalloc (`Kmalloc::free_deferred`) and on bucket sets,
//! both fronts, with the hosted epoch grace period: class-size objects and
//! large blocks are never reused or unmapped while a reader is inside,
//! are freed after, are counted while pending; destroy refuses or waits;
//! bad pointers are refused.
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use core::alloc::Layout;
use slub_core::testing::{EpochGracePeriod, HostedPlatform, NoWait};
use slub_core::{
    ArenaPages, CacheFlags, DestroyError, FreeError, GracePeriod, KMALLOC_MAX_CACHE_SIZE, Kmalloc,
    MAX_LARGE_PENDING, ThreadCpus,
};
use std::cell::Cell;
use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

type Km<'a> = Kmalloc<HostedPlatform<&'a ArenaPages<'a>, ThreadCpus>>;

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];
const MARK: u8 = 0x5a;

fn small() -> Layout {
    Layout::from_size_align(100, 8).unwrap()
}

fn large() -> Layout {
    Layout::from_size_align(40 << 10, 8).unwrap()
}

/// Small under Miri (an arena's every byte is tracked there).
fn arena() -> PhysArena {
    PhysArena::new(if cfg!(miri) { 2 << 20 } else { 8 << 20 }, 4096).unwrap()
}

fn km<'a>(pages: &'a ArenaPages<'a>, flags: CacheFlags) -> Km<'a> {
    Kmalloc::new(pages, ThreadCpus, flags).unwrap()
}

fn marked(k: &Km<'_>, l: Layout) -> NonNull<u8> {
    let p = k.alloc(l).unwrap();
    // SAFETY: a fresh object of `l.size()` bytes.
    unsafe { p.as_ptr().write_bytes(MARK, l.size()) };
    p
}

fn intact(p: NonNull<u8>, l: Layout) -> bool {
    // Every byte; under Miri (every read interpreted) one in 61 and the last.
    let step = if cfg!(miri) { 61 } else { 1 };
    let mut at = (0..l.size()).step_by(step).chain([l.size() - 1]);
    // SAFETY: `p` is an object not yet given back: readable memory.
    at.all(|i| unsafe { p.as_ptr().add(i).read_volatile() } == MARK)
}

#[test]
fn class_objects_not_reused_under_a_reader_and_freed_after() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let l = small();
        let reader = gp.read();
        let objs: Vec<_> = (0..5).map(|_| marked(&k, l)).collect();
        for &p in &objs {
            // SAFETY: allocated above with `l`, unpublished, freed once.
            unsafe { k.free_deferred(p, l, &gp) }.unwrap();
        }
        assert_eq!(k.deferred_pending(), 5, "{flags:?}");
        assert_eq!(k.flush_deferred(&gp), 5, "{flags:?}: freed under a reader");
        let per_slab = k.caches()[4].objects_per_slab();
        let deferred: HashSet<_> = objs.iter().collect();
        let others: Vec<_> = (0..3 * per_slab).map(|_| k.alloc(l).unwrap()).collect();
        assert!(
            others.iter().all(|p| !deferred.contains(p)),
            "{flags:?}: reused under a reader"
        );
        assert!(objs.iter().all(|&p| intact(p, l)), "{flags:?}: overwritten");
        drop(reader);
        assert_eq!(k.poll_deferred(&gp), 5, "{flags:?}: not freed after");
        assert_eq!(k.deferred_pending(), 0);
        for &p in &others {
            // SAFETY: allocated above with `l`, freed once.
            unsafe { k.free(p, l) }.unwrap();
        }
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn large_blocks_are_deferred_too() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let l = large();
        let bytes = l.size().next_multiple_of(4096);
        let reader = gp.read();
        let objs: Vec<_> = (0..3).map(|_| marked(&k, l)).collect();
        for &p in &objs {
            // SAFETY: allocated above with `l`, unpublished, freed once.
            unsafe { k.free_deferred(p, l, &gp) }.unwrap();
        }
        assert_eq!(k.large_deferred_pending(), 3, "{flags:?}");
        assert_eq!(k.flush_deferred(&gp), 3, "{flags:?}: freed under a reader");
        assert_eq!(k.large_bytes(), 3 * bytes, "{flags:?}: unmapped early");
        assert!(objs.iter().all(|&p| intact(p, l)), "{flags:?}: overwritten");
        // A reader that enters now cannot see them and holds nothing up.
        let late = gp.read();
        drop(reader);
        assert_eq!(k.poll_deferred(&gp), 3, "{flags:?}: not freed after");
        drop(late);
        assert_eq!(k.deferred_pending(), 0);
        assert_eq!(k.large_bytes(), 0);
        // The records went back to their cache too.
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn pending_counts_each_deferred_free() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let reader = gp.read();
        let sizes = [8usize, 24, 100, 700, 5000, 16384, 20000];
        let mut objs = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let l = Layout::from_size_align(s, 8).unwrap();
            let p = marked(&k, l);
            // SAFETY: allocated above with `l`, unpublished, freed once.
            unsafe { k.free_deferred(p, l, &gp) }.unwrap();
            objs.push((p, l));
            assert_eq!(k.deferred_pending(), i + 1, "{flags:?} size {s}");
        }
        assert_eq!(k.large_deferred_pending(), 1);
        let class_pending: usize = k.caches().iter().map(|c| c.deferred_pending()).sum();
        assert_eq!(
            class_pending,
            sizes.len() - 1,
            "{flags:?}: not on its class"
        );
        assert!(objs.iter().all(|&(p, l)| intact(p, l)), "{flags:?}");
        drop(reader);
        assert_eq!(k.flush_deferred(&gp), 0, "{flags:?}");
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

/// `test_kfree_rcu_wq_destroy` on kmalloc: destroy with deferred frees
/// pending refuses (and destroys nothing) or waits for the grace period.
#[test]
fn destroy_refuses_or_waits() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let (enter_tx, enter_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            // Dropped if an assertion fails below, so the reader leaves and
            // the scope can end.
            let leave_tx = leave_tx;
            let gp = &gp;
            s.spawn(move || {
                let reader = gp.read();
                enter_tx.send(()).unwrap();
                let _ = leave_rx.recv();
                std::thread::yield_now();
                drop(reader);
            });
            enter_rx.recv().unwrap();
            let objs = [
                (marked(&k, small()), small()),
                (marked(&k, large()), large()),
            ];
            for &(p, l) in &objs {
                // SAFETY: allocated above with `l`, freed once.
                unsafe { k.free_deferred(p, l, gp) }.unwrap();
            }
            assert_eq!(
                k.destroy(),
                Err(DestroyError::DeferredPending { objects: 2 })
            );
            assert_eq!(
                k.destroy_deferred(&NoWait(gp)),
                Err(DestroyError::DeferredPending { objects: 2 })
            );
            assert!(objs.iter().all(|&(p, l)| intact(p, l)), "{flags:?}");
            // Still usable: nothing was destroyed.
            let q = k.alloc(small()).unwrap();
            // SAFETY: allocated above, freed once.
            unsafe { k.free(q, small()) }.unwrap();
            leave_tx.send(()).unwrap();
            k.destroy_deferred(gp).unwrap();
            assert_eq!(gp.readers(), 0, "{flags:?}: did not wait for the reader");
        });
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn misaligned_and_foreign_pointers_are_refused() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let mut k = km(&pages, CacheFlags::empty());
    let gp = EpochGracePeriod::new();
    for l in [small(), large()] {
        let p = k.alloc(l).unwrap();
        // SAFETY: inside the object, not its start.
        let bad = unsafe { NonNull::new_unchecked(p.as_ptr().add(8)) };
        // SAFETY: refused before any use.
        let r = unsafe { k.free_deferred(bad, l, &gp) };
        assert_eq!(
            r,
            Err(FreeError::Misaligned {
                ptr: bad.as_ptr() as usize
            }),
            "{l:?}"
        );
        assert_eq!(k.deferred_pending(), 0);
        // SAFETY: allocated above with `l`, freed once.
        unsafe { k.free(p, l) }.unwrap();
    }
    // Under `debug` the slab header names the cache: an object of another
    // set (or class) is refused and nothing is deferred.
    #[cfg(feature = "debug")]
    {
        let mut set = k.buckets("foreign").unwrap();
        let l = small();
        let p = set.alloc(l).unwrap();
        // SAFETY: refused before any use (debug's ownership check).
        let r = unsafe { k.free_deferred(p, l, &gp) };
        assert_eq!(
            r,
            Err(FreeError::ForeignPointer {
                ptr: p.as_ptr() as usize
            })
        );
        assert_eq!(k.deferred_pending(), 0);
        // SAFETY: allocated above from `set` with `l`, freed once.
        unsafe { set.free(p, l) }.unwrap();
        set.destroy().unwrap();
    }
    k.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
}

#[test]
fn bucket_sets_defer_on_their_own_caches() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let mut set = k.buckets("msg_msg").unwrap();
        let gp = EpochGracePeriod::new();
        let reader = gp.read();
        let objs = [
            (set.alloc(small()).unwrap(), small()),
            (set.alloc(large()).unwrap(), large()),
        ];
        for &(p, l) in &objs {
            // SAFETY: allocated above from `set` with `l`, freed once.
            unsafe { set.free_deferred(p, l, &gp) }.unwrap();
        }
        assert_eq!(set.deferred_pending(), 2, "{flags:?}");
        assert_eq!(set.large_deferred_pending(), 1);
        assert_eq!(k.deferred_pending(), 0, "{flags:?}: on the general caches");
        assert_eq!(
            set.flush_deferred(&gp),
            2,
            "{flags:?}: freed under a reader"
        );
        assert_eq!(
            set.destroy(),
            Err(DestroyError::DeferredPending { objects: 2 })
        );
        drop(reader);
        assert_eq!(set.poll_deferred(&gp), 2, "{flags:?}");
        set.destroy_deferred(&gp).unwrap();
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn threads_defer_and_read_concurrently() {
    // Under Miri a few rounds on one front (each thread defers a large
    // block too) keep it short.
    let (per, fronts) = if cfg!(miri) {
        (3, &FRONTS[..1])
    } else {
        (300, &FRONTS[..])
    };
    let sizes = [16usize, 100, 1000, 20000];
    for &flags in fronts {
        let a = PhysArena::new(if cfg!(miri) { 4 << 20 } else { 32 << 20 }, 4096).unwrap();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        std::thread::scope(|s| {
            for t in 0..3 {
                let (k, gp) = (&k, &gp);
                s.spawn(move || {
                    for i in 0..per {
                        let l = Layout::from_size_align(sizes[(i + t) % sizes.len()], 8).unwrap();
                        let g = gp.read();
                        let p = marked(k, l);
                        // SAFETY: allocated above with `l`, freed once.
                        match unsafe { k.free_deferred(p, l, gp) } {
                            Ok(()) => {
                                assert!(intact(p, l), "freed under its reader");
                                drop(g);
                            }
                            // At the pending bound inside a section: the
                            // cache cannot wait for this thread itself.
                            Err(FreeError::DeferredBacklog { .. }) => {
                                assert!(intact(p, l), "refused but freed");
                                drop(g);
                                // SAFETY: refused above, so still ours.
                                unsafe { k.free_deferred(p, l, gp) }.unwrap();
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                        if i % 5 == 0 {
                            k.flush_deferred(gp);
                        }
                    }
                });
            }
        });
        k.destroy_deferred(&gp).unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

/// Under `stats`, every object put in a CPU's batch is counted
/// (`free_rcu_sheaf`) on its class's cache; large blocks are not (no sheaf).
#[cfg(feature = "stats")]
#[test]
fn stats_count_deferred_frees() {
    let a = arena();
    let pages = ArenaPages::new(&a);
    let mut k = km(&pages, CacheFlags::empty());
    let gp = EpochGracePeriod::new();
    for l in [small(), small(), large()] {
        let p = k.alloc(l).unwrap();
        // SAFETY: allocated above with `l`, freed once.
        unsafe { k.free_deferred(p, l, &gp) }.unwrap();
    }
    let st = k.caches()[4].stats();
    assert_eq!(st.get(slub_core::StatItem::FreeRcuSheaf), 2);
    k.destroy_deferred(&gp).unwrap();
}

/// The smallest large block (five pages): the bound's worth fits the arena.
fn smallest_large() -> Layout {
    Layout::from_size_align(KMALLOC_MAX_CACHE_SIZE + 1, 8).unwrap()
}

/// The epoch grace period, counting `elapsed` calls.
struct Counting<'a> {
    gp: &'a EpochGracePeriod,
    elapsed: Cell<usize>,
}

impl GracePeriod for Counting<'_> {
    fn start(&self) -> u64 {
        self.gp.start()
    }
    fn elapsed(&self, cookie: u64) -> bool {
        self.elapsed.set(self.elapsed.get() + 1);
        self.gp.elapsed(cookie)
    }
    fn wait(&self, cookie: u64) -> bool {
        self.gp.wait(cookie)
    }
}

#[test]
fn large_frees_under_a_long_grace_period_cost_one_elapsed_each() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let counting = Counting {
            gp: &gp,
            elapsed: Cell::new(0),
        };
        let l = smallest_large();
        let n = MAX_LARGE_PENDING;
        let blocks: Vec<_> = (0..n).map(|_| k.alloc(l).unwrap()).collect();
        let reader = gp.read();
        for &p in &blocks {
            // SAFETY: allocated above with `l`, unpublished, freed once.
            unsafe { k.free_deferred(p, l, &counting) }.unwrap();
        }
        let asked = counting.elapsed.get();
        // Walking the list on every free asks n(n+1)/2 = 2080 times.
        assert!(
            asked <= 2 * n,
            "{flags:?}: {asked} `elapsed` calls for {n} frees"
        );
        assert_eq!(k.large_deferred_pending(), n, "{flags:?}");
        drop(reader);
        assert_eq!(k.poll_deferred(&gp), n, "{flags:?}");
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn the_large_bound_refuses_a_caller_that_cannot_wait() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let nowait = NoWait(&gp);
        let l = smallest_large();
        let blocks: Vec<_> = (0..MAX_LARGE_PENDING)
            .map(|_| k.alloc(l).unwrap())
            .collect();
        let extra = k.alloc(l).unwrap();
        let reader = gp.read();
        for &p in &blocks {
            // SAFETY: allocated above with `l`, unpublished, freed once.
            unsafe { k.free_deferred(p, l, &nowait) }.unwrap();
        }
        let used = a.frames_in_use();
        // SAFETY: allocated above with `l`; refused below, so still ours.
        let r = unsafe { k.free_deferred(extra, l, &nowait) };
        assert_eq!(
            r,
            Err(FreeError::DeferredBacklog {
                pending: MAX_LARGE_PENDING
            }),
            "{flags:?}"
        );
        assert_eq!(a.frames_in_use(), used, "{flags:?}: freed early");
        assert_eq!(k.large_deferred_pending(), MAX_LARGE_PENDING, "{flags:?}");
        // Still the caller's: writable.
        // SAFETY: `extra` is a live block of `l.size()` bytes.
        unsafe { extra.as_ptr().write_bytes(MARK, l.size()) };
        drop(reader);
        // SAFETY: as above; the grace period of the others is over now.
        unsafe { k.free_deferred(extra, l, &nowait) }.unwrap();
        assert_eq!(k.flush_deferred(&gp), 0, "{flags:?}");
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

/// The epoch grace period; its first `wait` lets the reader thread leave.
struct LetsReaderLeave<'a> {
    gp: &'a EpochGracePeriod,
    leave: Mutex<Option<mpsc::Sender<()>>>,
    waits: AtomicUsize,
}

impl GracePeriod for LetsReaderLeave<'_> {
    fn start(&self) -> u64 {
        self.gp.start()
    }
    fn elapsed(&self, cookie: u64) -> bool {
        self.gp.elapsed(cookie)
    }
    fn wait(&self, cookie: u64) -> bool {
        self.waits.fetch_add(1, Ordering::Relaxed);
        if let Some(tx) = self.leave.lock().unwrap().take() {
            tx.send(()).unwrap();
        }
        self.gp.wait(cookie)
    }
}

#[test]
fn the_large_bound_waits_for_a_grace_period_when_it_may() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let (leave_tx, leave_rx) = mpsc::channel();
        let (inside_tx, inside_rx) = mpsc::channel();
        let waiting = LetsReaderLeave {
            gp: &gp,
            leave: Mutex::new(Some(leave_tx)),
            waits: AtomicUsize::new(0),
        };
        let l = smallest_large();
        let blocks: Vec<_> = (0..=MAX_LARGE_PENDING)
            .map(|_| k.alloc(l).unwrap())
            .collect();
        std::thread::scope(|s| {
            let gp = &gp;
            s.spawn(move || {
                let reader = gp.read();
                inside_tx.send(()).unwrap();
                leave_rx.recv().unwrap();
                drop(reader);
            });
            inside_rx.recv().unwrap();
            for &p in &blocks[..MAX_LARGE_PENDING] {
                // SAFETY: allocated above with `l`, unpublished, freed once.
                unsafe { k.free_deferred(p, l, &waiting) }.unwrap();
            }
            assert_eq!(waiting.waits.load(Ordering::Relaxed), 0, "{flags:?}");
            let full = a.frames_in_use();
            // At the bound: waits for the reader, then frees the others.
            // SAFETY: as above.
            unsafe { k.free_deferred(blocks[MAX_LARGE_PENDING], l, &waiting) }.unwrap();
            assert_eq!(waiting.waits.load(Ordering::Relaxed), 1, "{flags:?}");
            assert!(k.large_deferred_pending() <= 1, "{flags:?}");
            assert!(a.frames_in_use() < full, "{flags:?}: nothing freed");
        });
        k.destroy_deferred(&gp).unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}

#[test]
fn flush_hands_over_every_cpus_batch() {
    for flags in FRONTS {
        let a = arena();
        let pages = ArenaPages::new(&a);
        let mut k = km(&pages, flags);
        let gp = EpochGracePeriod::new();
        let l = small();
        // This thread holds its CPU slot from here on; the other thread
        // below gets another one.
        let mine: Vec<_> = (0..3).map(|_| marked(&k, l)).collect();
        let reader = gp.read();
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..3 {
                    let p = marked(&k, l);
                    // SAFETY: allocated above with `l`, unpublished, freed once.
                    unsafe { k.free_deferred(p, l, &gp) }.unwrap();
                }
            });
        });
        for &p in &mine {
            // SAFETY: allocated above with `l`, unpublished, freed once.
            unsafe { k.free_deferred(p, l, &gp) }.unwrap();
        }
        assert_eq!(k.flush_deferred(&gp), 6, "{flags:?}: freed under a reader");
        drop(reader);
        // Handed over above (both CPUs' partial batches): freed now.
        assert_eq!(k.poll_deferred(&gp), 6, "{flags:?}");
        assert_eq!(k.deferred_pending(), 0, "{flags:?}");
        k.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0, "{flags:?}");
    }
}
