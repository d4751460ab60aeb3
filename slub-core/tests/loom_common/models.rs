//! The four loom models; each `tests/loom_*.rs` runs one, correct or with a
//! broken variant selected.

use super::*;
use loom::sync::Arc;
use slub_core::CacheFlags;
use std::ptr::NonNull;

fn free<D: arch_api::DwCas, const O: bool>(c: &Cache<D, O>, x: usize) {
    // SAFETY: every caller frees an object it allocated, once.
    unsafe { c.free(NonNull::new(x as *mut u8).unwrap()) }.unwrap();
}

/// (1) Alloc/free on one CPU slot while a task is preempted in its window,
/// then migrated to another slot in a later window. ia64-sim's
/// `cmp8xchg16` (compares the tid only) is the DW-CAS: the weakest one.
pub fn migration() {
    loom::model(|| {
        // Tasks 0 and 1 both on slot 0; task 0 moves to slot 1 at its
        // second window.
        let cpus = LoomCpus::new(2, &[0, 0]);
        cpus.bind(0);
        let c = Arc::new(cache::<arch_ia64_sim::Cmp8xchg16>(
            cpus,
            4,
            CacheFlags::empty(),
        ));
        let p = c.alloc().unwrap().as_ptr() as usize;
        free(&c, p);
        c.cpus().migrate_at_window(0, 2, 1);
        let t1 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                c.alloc().unwrap().as_ptr() as usize
            })
        };
        let b = c.alloc().unwrap().as_ptr() as usize;
        let d = c.alloc().unwrap().as_ptr() as usize;
        let a = t1.join().unwrap();
        assert!(a != b && a != d && b != d, "object handed out twice");
        for x in [a, b, d] {
            free(&c, x);
        }
        destroy_all(c);
    });
}

/// (2) A remote free racing the owner's allocation (slow path) and the
/// deactivation of the slab it frees into.
pub fn remote_vs_deactivate() {
    loom::model(|| {
        let cpus = LoomCpus::new(2, &[0, 1]);
        cpus.bind(0);
        let c = Arc::new(cache::<slub_core::DefaultDwCas>(
            cpus,
            2,
            CacheFlags::empty(),
        ));
        // Exhaust slab X on slot 0: its CPU freelist is X's end token.
        let o1 = c.alloc().unwrap().as_ptr() as usize;
        let o2 = c.alloc().unwrap().as_ptr() as usize;
        let t1 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                free(&c, o1); // remote: X is frozen by slot 0 (or just deactivated)
            })
        };
        // Slow path: takes X's remote frees, or switches to a new slab and
        // deactivates X, racing the remote free.
        let o3 = c.alloc().unwrap().as_ptr() as usize;
        t1.join().unwrap();
        assert!(o3 != o2, "object handed out twice");
        free(&c, o2);
        free(&c, o3);
        destroy_all(c);
    });
}

/// Two CPUs, CPU 0 current; slabs of 2 objects, 1 frozen slab per CPU
/// partial list.
fn partial_cache() -> Arc<Cache<slub_core::DefaultDwCas>> {
    let cpus = LoomCpus::new(2, &[0, 1]);
    cpus.bind(0);
    Arc::new(cache_partial(cpus, 2, CacheFlags::empty(), 1))
}

/// `put_cpu_partial`: two CPUs free into the same full slab X at once. The
/// first free makes X partial and freezes it onto its CPU's partial list
/// without the node lock; the other lands on X's freelist (X frozen by
/// then) or freezes it itself. The remote CPU then allocates (from X, via
/// its partial list, or a new slab), frees, and destroy must find every
/// object free and every page back.
pub fn put_cpu_partial() {
    loom::model(|| {
        let c = partial_cache();
        let o1 = c.alloc().unwrap().as_ptr() as usize;
        let o2 = c.alloc().unwrap().as_ptr() as usize; // X exhausted
        // New slab Y: X unfrozen, full, on no list. (o2 may be freed, and
        // handed out again, before t1 allocates; o3 may not.)
        let o3 = c.alloc().unwrap().as_ptr() as usize;
        let t1 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                free(&c, o1);
                let p = c.alloc().unwrap().as_ptr() as usize;
                assert!(p != o3, "object handed out twice");
                free(&c, p);
            })
        };
        free(&c, o2);
        t1.join().unwrap();
        free(&c, o3);
        destroy_all(c);
    });
}

/// `put_cpu_partial` with the list full: CPU 1 frees into two full slabs
/// X and Y, so its second freeze drains X to the node list
/// (`__put_partials`), while CPU 0 frees the other objects of X and Y,
/// each into a frozen slab or freezing it for itself.
pub fn put_cpu_partial_drain() {
    loom::model(|| {
        let c = partial_cache();
        let x: Vec<usize> = (0..4)
            .map(|_| c.alloc().unwrap().as_ptr() as usize)
            .collect();
        let o5 = c.alloc().unwrap().as_ptr() as usize; // X and Y full, on no list
        let t1 = {
            let c = c.clone();
            let (a, b) = (x[0], x[2]);
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                free(&c, a);
                free(&c, b);
            })
        };
        free(&c, x[1]);
        free(&c, x[3]);
        t1.join().unwrap();
        free(&c, o5);
        destroy_all(c);
    });
}

/// (3) The 2014 leak: mixed alloc/free across threads over exhausted CPU
/// slabs, then destroy must find every object free and return every page.
pub fn destroy_leak() {
    loom::model(|| {
        let cpus = LoomCpus::new(2, &[0, 1]);
        cpus.bind(0);
        let c = Arc::new(cache::<slub_core::DefaultDwCas>(
            cpus,
            2,
            CacheFlags::empty(),
        ));
        let o1 = c.alloc().unwrap().as_ptr() as usize;
        let o2 = c.alloc().unwrap().as_ptr() as usize; // X exhausted
        let o3 = c.alloc().unwrap().as_ptr() as usize; // new slab Y
        let t1 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                free(&c, o1);
                let p = c.alloc().unwrap().as_ptr() as usize;
                free(&c, p);
            })
        };
        free(&c, o2);
        free(&c, o3);
        t1.join().unwrap();
        destroy_all(c);
    });
}

/// (4) The sheaves barn: one full sheaf in the barn, two CPUs with empty
/// sheaves allocate at once; one gets the barn's sheaf, the other refills
/// from the slabs. No object may be handed out twice, every page returns.
pub fn barn_exchange() {
    loom::model(|| {
        let cpus = LoomCpus::new(3, &[0, 1, 2]);
        cpus.bind(2);
        let c = Arc::new(cache::<slub_core::DefaultDwCas>(
            cpus,
            4,
            CacheFlags::SHEAVES,
        ));
        // On slot 2 (sheaf capacity 1): main [o1], spare [o2]; the third free
        // puts the full main into the barn.
        let objs: Vec<usize> = (0..3)
            .map(|_| c.alloc().unwrap().as_ptr() as usize)
            .collect();
        for &o in &objs {
            free(&c, o);
        }
        let t1 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                c.alloc().unwrap().as_ptr() as usize
            })
        };
        c.cpus().bind(0);
        let a = c.alloc().unwrap().as_ptr() as usize;
        let b = t1.join().unwrap();
        assert!(a != b, "object handed out twice");
        free(&c, a);
        free(&c, b);
        destroy_all(c);
    });
}

/// The detached-freelist models' shared part, on an owner-only backend
/// with DW-CAS `D`: slot 0 fills a full slab X (o1, o2) that is no CPU's
/// slab and takes o3 from a new slab Y; task 1 on slot 1 frees o1 and o2
/// (onto slot 1's detached freelist) while task 2 on slot 1 (an interrupt
/// of task 1) runs `interrupt(cache, o3)`. Then destroy must find every
/// object free and every page back.
fn detached_model<D: arch_api::DwCas>(interrupt: fn(&Cache<D, true>, usize)) {
    loom::model(move || {
        let cpus = LoomCpus::<true>::new(2, &[0, 1, 1]);
        cpus.bind(0);
        let c = Arc::new(cache_owner_only::<D>(cpus, 2, CacheFlags::empty()));
        let o1 = c.alloc().unwrap().as_ptr() as usize;
        let o2 = c.alloc().unwrap().as_ptr() as usize; // X exhausted
        let o3 = c.alloc().unwrap().as_ptr() as usize; // new slab Y; X full, on no list
        let t1 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(1);
                free(&c, o1);
                free(&c, o2);
            })
        };
        let t2 = {
            let c = c.clone();
            loom::thread::spawn(move || {
                c.cpus().bind(2);
                interrupt(&c, o3);
            })
        };
        t1.join().unwrap();
        t2.join().unwrap();
        destroy_all(c);
    });
}

/// (5) The detached freelist, on a backend where only a slot's owner
/// writes its cells (the only one that detaches): the interrupt allocates
/// on slot 1, and its slow path takes the chain over and gives it back to
/// X (which it may then take as its CPU slab, so task 1's second free may
/// land on the CPU freelist instead). No object may be handed out twice.
pub fn detached_take() {
    detached_model::<slub_core::DefaultDwCas>(|c, o3| {
        let p = c.alloc().unwrap().as_ptr() as usize;
        assert!(p != o3, "object handed out twice");
        free(c, p);
        free(c, o3);
    });
}

/// (6) The detached freelist with ia64's `cmp8xchg16`, which compares the
/// cell's hi (the chain's length and sequence number) only: the interrupt
/// allocates (its slow path takes the chain over and gives it back), then
/// frees an object of another slab (a new chain, as long as the one it
/// took). A push of task 1 preempted across both must fail its CAS. No
/// object may be handed out twice.
pub fn detached_cmp8xchg16() {
    detached_model::<arch_ia64_sim::Cmp8xchg16>(|c, o3| {
        let p = c.alloc().unwrap().as_ptr() as usize;
        assert!(p != o3, "object handed out twice");
        free(c, o3);
        let q = c.alloc().unwrap().as_ptr() as usize;
        assert!(q != p, "object handed out twice");
        free(c, p);
        free(c, q);
    });
}
