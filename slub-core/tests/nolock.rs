//! `alloc_nolock` / `free_nolock`: never waiting for a lock, checked by
//! calling them while the node lock is held and from "interrupt context"
//! (a CPU backend whose preemption points, inside the allocator's own
//! operations, call back into the allocator).
#![cfg(not(kmm_loom))]

use arch_api::HostedCpus;
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

/// Runs the thread's interrupt handler once, marked as interrupt context.
fn run_handler() {
    IN_IRQ.set(true);
    let h = IRQ.with(|h| h.borrow_mut().take());
    if let Some(mut h) = h {
        h();
        IRQ.with(|slot| *slot.borrow_mut() = Some(h));
    }
    IN_IRQ.set(false);
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
        run_handler();
    }
}

/// `HostedCpus` (one CPU, a lock as its guard) whose preemption points run
/// the thread's interrupt handler, with a guard for nolock callers: its
/// `try_pin_nolock` is the CPU lock's one-shot try, so a handler that
/// interrupted a pinned section is refused the sheaves. `BROKEN` answers
/// `Some` without the lock (the contract broken: a handler that
/// interrupted a sheaf update may enter it).
struct IrqHosted<const BROKEN: bool>(HostedCpus);

// SAFETY: every call is `HostedCpus`'s (the broken variant's
// `try_pin_nolock` excepted, on purpose); the handler runs on the same
// thread at points where a real interrupt could arrive.
unsafe impl<const BROKEN: bool> CpuLocal for IrqHosted<BROKEN> {
    const OWNER_ONLY_WRITES: bool = false;
    type Guard<'a> = Option<<HostedCpus as CpuLocal>::Guard<'a>>;

    fn nr_cpus(&self) -> usize {
        self.0.nr_cpus()
    }
    fn current_cpu(&self) -> Option<usize> {
        self.0.current_cpu()
    }
    fn pin(&self) -> (Self::Guard<'_>, usize) {
        let (g, id) = self.0.pin();
        (Some(g), id)
    }
    fn try_pin_nolock(&self) -> Option<(Self::Guard<'_>, usize)> {
        if BROKEN {
            return Some((None, self.0.current_cpu()?));
        }
        self.0.try_pin_nolock().map(|(g, id)| (Some(g), id))
    }
    fn preempt_point(&self, at: PreemptPoint) {
        IrqCpus.preempt_point(at)
    }
}

/// What the handler did: calls, nolock allocations that succeeded.
fn irq_run<C: CpuLocal>(flags: CacheFlags, cpus: C, direct_every: usize) -> (usize, usize) {
    let a = PhysArena::new(16 << 20, 4096).unwrap();
    let mut c: Cache<C> =
        KmemCache::with_config("irq", 48, 8, flags, ArenaPages::new(&a), cpus, config()).unwrap();
    // The handler alternates: allocate (and stash) or free a stashed
    // object, nolock, checking what it got against the live set.
    let live: Rc<RefCell<HashSet<usize>>> = Rc::default();
    let stash: Rc<RefCell<Vec<NonNull<u8>>>> = Rc::default();
    let calls: Rc<Cell<(usize, usize)>> = Rc::default();
    let cache = &c as *const Cache<C> as usize;
    let (live2, stash2, calls2) = (live.clone(), stash.clone(), calls.clone());
    IRQ.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            let (live, stash, calls) = (&live2, &stash2, &calls2);
            // SAFETY: the handler is removed before the cache is
            // destroyed, and runs on this thread while it is borrowed.
            let c = unsafe { &*(cache as *const Cache<C>) };
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
        if direct_every != 0 && round % direct_every == 0 {
            // An interrupt between two calls: nothing is pinned.
            run_handler();
        }
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
    for p in mine.drain(..).chain(stash.borrow_mut().drain(..)) {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(p) }.unwrap();
    }
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
    calls.get()
}

#[test]
fn nolock_from_interrupt_context_at_every_preemption_point() {
    for flags in FRONTS {
        let rounds = scale(3000);
        let (n, ok) = irq_run(flags, IrqCpus, 0);
        if flags.is_empty() {
            assert!(
                n > rounds / 4 && ok > 5,
                "the handler ran ({n} calls, {ok} allocations)"
            );
        }
    }
}

/// A backend that can pin from any context: the handler's nolock calls use
/// the sheaves between two operations and are refused them inside a sheaf
/// update (the interrupted code holds the CPU).
#[test]
fn nolock_on_the_sheaves_from_interrupt_context() {
    let rounds = scale(3000);
    let (n, ok) = irq_run(
        CacheFlags::SHEAVES,
        IrqHosted::<false>(HostedCpus::new(1)),
        5,
    );
    // At least the direct calls (one every 5 rounds), half of them
    // allocations, most of which find an object.
    assert!(
        n >= rounds / 5 && ok > rounds / 40,
        "the handler ran ({n} calls, {ok} allocations)"
    );
}

/// The check above catches a backend that lets a handler into the sheaves
/// while the code it interrupted is updating them: an object handed out
/// twice (under `debug`, the handler's writes are found first, in the
/// poison of an object it was handed while the sheaf still held it).
#[test]
#[cfg_attr(not(feature = "debug"), should_panic(expected = "twice"))]
#[cfg_attr(feature = "debug", should_panic(expected = "PoisonOverwritten"))]
fn a_nolock_pin_that_ignores_the_holder_is_caught() {
    irq_run(
        CacheFlags::SHEAVES,
        IrqHosted::<true>(HostedCpus::new(1)),
        0,
    );
}

/// With the CPU free, a nolock allocation on a sheaves cache is the main
/// sheaf's last object (the one just freed); with the CPU held (an
/// interrupt inside a pinned section) it comes from elsewhere.
#[test]
fn nolock_uses_the_sheaf_only_when_it_can_pin() {
    let a = PhysArena::new(8 << 20, 4096).unwrap();
    let cpus = HostedCpus::new(1);
    let mut c: Cache<&HostedCpus> =
        KmemCache::new("s", 64, 8, CacheFlags::SHEAVES, ArenaPages::new(&a), &cpus).unwrap();
    let p = c.alloc().unwrap();
    // SAFETY: allocated above, freed once.
    unsafe { c.free(p) }.unwrap();
    let q = c.alloc_nolock().unwrap();
    assert_eq!(q, p, "the main sheaf's top");
    // SAFETY: allocated above, freed once; back on top of the sheaf.
    unsafe { c.free_nolock(q) }.unwrap();
    let (g, _) = cpus.pin();
    let r = c.alloc_nolock().unwrap();
    assert_ne!(r, p, "the sheaves are held: the CPU freelist's object");
    // SAFETY: allocated above, freed once (not onto the held sheaf).
    unsafe { c.free_nolock(r) }.unwrap();
    drop(g);
    assert_eq!(c.alloc_nolock().unwrap(), p, "the sheaf was left alone");
    // SAFETY: allocated above, freed once.
    unsafe { c.free(p) }.unwrap();
    c.destroy().unwrap();
    assert_eq!(a.frames_in_use(), 0);
}
