//! `alloc_nolock` / `free_nolock`: never waiting for a lock, checked by
//! calling them while the node lock is held and from "interrupt context"
//! (a CPU backend whose preemption points, inside the allocator's own
//! operations, call back into the allocator).
#![cfg(not(kmm_loom))]

use arch_api::PhysArena;
use arch_api::testing::PreemptPoint;
use slub_core::testing::HostedPlatform;
use slub_core::{AllocError, ArenaPages, CacheConfig, CacheFlags, CpuLocal, KmemCache, ThreadCpus};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ptr::NonNull;
use std::rc::Rc;

type Cache<'a, C = ThreadCpus> = KmemCache<HostedPlatform<ArenaPages<'a>, C>>;

const FRONTS: [CacheFlags; 2] = [CacheFlags::empty(), CacheFlags::SHEAVES];

fn scale(n: usize) -> usize {
    if cfg!(miri) { n.min(60) } else { n }
}

fn config() -> CacheConfig {
    CacheConfig {
        min_partial: 100,
        ..CacheConfig::default()
    }
}

#[test]
fn nolock_without_a_slab_is_a_clear_error() {
    for flags in FRONTS {
        let a = PhysArena::new(4 << 20, 4096).unwrap();
        let c: Cache = KmemCache::new("n", 64, 8, flags, ArenaPages::new(&a), ThreadCpus).unwrap();
        // No CPU slab, no partial slab, and the page source is not called.
        assert_eq!(c.alloc_nolock(), Err(AllocError::WouldBlock));
        assert_eq!(c.nr_slabs(), 0);
    }
}

#[test]
fn nolock_never_waits_for_the_node_lock() {
    for flags in FRONTS {
        let a = PhysArena::new(8 << 20, 4096).unwrap();
        let mut c: Cache =
            KmemCache::with_config("n", 64, 8, flags, ArenaPages::new(&a), ThreadCpus, config())
                .unwrap();
        let per = c.objects_per_slab();
        // Three slabs' worth, then drain the CPU's caches so that the CPU
        // slab is exhausted: the earlier slabs are full and on no list.
        let mut objs: Vec<NonNull<u8>> = (0..3 * per).map(|_| c.alloc().unwrap()).collect();
        // Make the first slab partial: one free through the ordinary path.
        let first = objs.remove(0);
        // SAFETY: allocated above, freed once.
        unsafe { c.free(first) }.unwrap();
        c.shrink();
        // With the node lock held (an interrupt inside a slow path), the
        // nolock calls neither wait (the test would hang) nor fail to free.
        let (got, deferred) = c.with_node_lock_held(|| {
            let got = c.alloc_nolock();
            // An object of a full slab: its free needs the node lock.
            let victim = objs.pop().unwrap();
            // SAFETY: allocated above, freed once.
            let r = unsafe { c.free_nolock(victim) };
            (got, r)
        });
        assert!(
            matches!(got, Err(AllocError::WouldBlock)) || got.is_ok(),
            "{got:?}"
        );
        if let Ok(p) = got {
            objs.push(p);
        }
        deferred.unwrap();
        // Without the lock: the partial slab serves nolock allocations.
        let p = c.alloc_nolock().unwrap();
        objs.push(p);
        let set: HashSet<_> = objs.iter().collect();
        assert_eq!(set.len(), objs.len(), "an object handed out twice");
        for p in objs {
            // SAFETY: allocated above, freed once.
            unsafe { c.free_nolock(p) }.unwrap();
        }
        // The deferred free was drained: nothing is left allocated.
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}

thread_local! {
    /// The "interrupt handler": run at every preemption point of this
    /// thread's allocator calls, not nested.
    static IRQ: RefCell<Option<Box<dyn FnMut()>>> = const { RefCell::new(None) };
    static IN_IRQ: Cell<bool> = const { Cell::new(false) };
    static TICK: Cell<u64> = const { Cell::new(0) };
}

/// `ThreadCpus` whose preemption points (inside the allocator's operations,
/// between reading the CPU state and committing it) run the thread's
/// interrupt handler.
struct IrqCpus;

// SAFETY: every call is `ThreadCpus`'s; the handler runs on the same thread
// at a point where a real interrupt could arrive.
unsafe impl CpuLocal for IrqCpus {
    const OWNER_ONLY_WRITES: bool = <ThreadCpus as CpuLocal>::OWNER_ONLY_WRITES;
    const HAS_PINNED_CPU: bool = <ThreadCpus as CpuLocal>::HAS_PINNED_CPU;
    type Guard<'a> = <ThreadCpus as CpuLocal>::Guard<'a>;

    fn nr_cpus(&self) -> usize {
        ThreadCpus.nr_cpus()
    }
    fn current_cpu(&self) -> Option<usize> {
        ThreadCpus.current_cpu()
    }
    fn pin(&self) -> (Self::Guard<'_>, usize) {
        ThreadCpus.pin()
    }
    fn pinned_cpu(&self) -> Option<usize> {
        ThreadCpus.pinned_cpu()
    }
    fn preempt_point(&self, _at: PreemptPoint) {
        // Every other point: an interrupt at *every* retry of the
        // interrupted operation would be a storm that starves it (each
        // handler run moves the tid on, so the retry's CAS fails again).
        if IN_IRQ.get() {
            return;
        }
        TICK.set(TICK.get() + 1);
        if TICK.get() % 2 == 0 {
            return;
        }
        IN_IRQ.set(true);
        let h = IRQ.with(|h| h.borrow_mut().take());
        if let Some(mut h) = h {
            h();
            IRQ.with(|slot| *slot.borrow_mut() = Some(h));
        }
        IN_IRQ.set(false);
    }
}

#[test]
fn nolock_from_interrupt_context_at_every_preemption_point() {
    for flags in FRONTS {
        let a = PhysArena::new(16 << 20, 4096).unwrap();
        let mut c: Cache<IrqCpus> =
            KmemCache::with_config("irq", 48, 8, flags, ArenaPages::new(&a), IrqCpus, config())
                .unwrap();
        // The handler alternates: allocate (and stash) or free a stashed
        // object, nolock, checking what it got against the live set.
        let live: Rc<RefCell<HashSet<usize>>> = Rc::default();
        let stash: Rc<RefCell<Vec<NonNull<u8>>>> = Rc::default();
        let calls: Rc<Cell<(usize, usize)>> = Rc::default();
        let cache = &c as *const Cache<IrqCpus> as usize;
        let (live2, stash2, calls2) = (live.clone(), stash.clone(), calls.clone());
        IRQ.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                let (live, stash, calls) = (&live2, &stash2, &calls2);
                // SAFETY: the handler is removed before the cache is
                // destroyed, and runs on this thread while it is borrowed.
                let c = unsafe { &*(cache as *const Cache<IrqCpus>) };
                let (n, ok) = calls.get();
                if n % 2 == 0 {
                    if let Ok(p) = c.alloc_nolock() {
                        assert!(live.borrow_mut().insert(p.as_ptr() as usize), "twice");
                        // SAFETY: 48 fresh bytes.
                        unsafe { p.as_ptr().write_bytes(0xee, 48) };
                        stash.borrow_mut().push(p);
                        calls.set((n + 1, ok + 1));
                        return;
                    }
                } else if let Some(p) = stash.borrow_mut().pop() {
                    live.borrow_mut().remove(&(p.as_ptr() as usize));
                    // SAFETY: allocated by the handler, freed once.
                    unsafe { c.free_nolock(p) }.unwrap();
                }
                calls.set((n + 1, ok));
            }));
        });
        let mut mine = Vec::new();
        let rounds = scale(3000);
        for round in 0..rounds {
            if round % 3 != 2 {
                let p = c.alloc().unwrap();
                assert!(live.borrow_mut().insert(p.as_ptr() as usize), "twice");
                mine.push(p);
            } else if let Some(p) = mine.pop() {
                live.borrow_mut().remove(&(p.as_ptr() as usize));
                // SAFETY: allocated above, freed once.
                unsafe { c.free(p) }.unwrap();
            }
        }
        IRQ.with(|h| *h.borrow_mut() = None);
        let (n, ok) = calls.get();
        if flags.is_empty() {
            assert!(
                n > rounds / 4 && ok > 5,
                "the handler ran ({n} calls, {ok} allocations)"
            );
        }
        for p in mine.drain(..).chain(stash.borrow_mut().drain(..)) {
            // SAFETY: allocated above, freed once.
            unsafe { c.free(p) }.unwrap();
        }
        c.destroy().unwrap();
        assert_eq!(a.frames_in_use(), 0);
    }
}
