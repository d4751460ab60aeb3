//! The four loom models of the sharded front, shared by the correct test
//! binaries (`loom_*.rs`) and the broken ones (`loom_*_broken.rs`, which
//! select a mutation in `vmap_core::loom_mutation` first).
#![allow(dead_code)]

use arch_api::sync::DefaultRawMutex;
use loom::sync::Arc;
use loom::thread;
use vmap_core::sharded::ShardedConfig;
use vmap_core::{ShardedVmap, VirtAddr, VmapNodes};

const P: u64 = 0x1000;
/// Slice-aligned; slice number 64, which Linux's `addr_to_node` hash maps to
/// node 0.
const BASE: u64 = 0x10_0000;

type V = ShardedVmap<DefaultRawMutex, ()>;

fn space(nodes: usize, pool_depth: usize) -> V {
    let cfg = ShardedConfig {
        nr_nodes: nodes,
        slice_size: Some(4 * P),
        pool_depth,
    };
    V::with_config(VirtAddr::new(BASE), VirtAddr::new(BASE + 8 * P), P, cfg).unwrap()
}

fn all() -> (VirtAddr, VirtAddr) {
    (VirtAddr::new(BASE), VirtAddr::new(BASE + 8 * P))
}

/// Final checks, returned rather than asserted: a panic while loom objects
/// are alive aborts the process instead of failing the test, so each model
/// collects its verdict, drops the allocator, then asserts.
fn settle(v: &V) -> Result<(), String> {
    v.check_invariants().map_err(|e| e.to_string())?;
    v.drain_pools();
    match v.busy_bytes() {
        0 => Ok(()),
        n => Err(format!("{n} bytes leaked")),
    }
}

fn verdict(v: Arc<V>, mut checks: Vec<Result<(), String>>) {
    checks.push(settle(&v));
    drop(v);
    for c in checks {
        if let Err(e) = c {
            panic!("model failed: {e}");
        }
    }
}

fn ok<T, E: core::fmt::Debug>(r: Result<T, E>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| format!("{e:?}"))
}

/// Model 1: an allocation on node 0 races a free on node 1. Node 1 owns
/// slice 0 (its first allocation took it); the free must go to node 1, under
/// node 1's lock, while node 0 allocates (taking a slice from the reserve).
pub fn alloc_races_remote_free() {
    loom::model(|| {
        let v = Arc::new(space(2, 1));
        let (s, e) = all();
        let x = v.alloc(1, P, P, s, e).unwrap();
        let v2 = Arc::clone(&v);
        let t = thread::spawn(move || {
            let a = v2.alloc(0, P, P, s, e).map_err(|e| format!("{e:?}"))?;
            ok(v2.free_area(&a))
        });
        let freed = ok(v.free_area(&x));
        let other = t.join().unwrap();
        verdict(v, vec![freed, other]);
    });
}

/// Model 2: an area is freed (parked in the pool) on node 0 while node 0's
/// pool is drained. Afterwards every parked area must be in the pool and,
/// after a final drain, nothing may stay busy.
pub fn free_races_pool_drain() {
    loom::model(|| {
        let v = Arc::new(space(1, 4));
        let (s, e) = all();
        let a = v.alloc(0, P, P, s, e).unwrap();
        let y = v.alloc(0, P, P, s, e).unwrap();
        v.free_area(&y).unwrap(); // parked: the drain has work
        let v2 = Arc::clone(&v);
        let t = thread::spawn(move || ok(v2.free_area(&a)));
        v.drain_pool(0);
        let freed = t.join().unwrap();
        verdict(v, vec![freed]);
    });
}

/// Model 5: node 0's pool decays while node 0 allocates, which takes the
/// parked area back. The decay must release only what is still parked:
/// the area allocated stays live (it frees through its node), and nothing
/// stays busy afterwards.
pub fn decay_races_pool_alloc() {
    loom::model(|| {
        let v = Arc::new(space(1, 4));
        let (s, e) = all();
        let y = v.alloc(0, P, P, s, e).unwrap();
        v.free_area(&y).unwrap(); // parked: the decay has work
        let v2 = Arc::clone(&v);
        let t = thread::spawn(move || {
            let a = v2.alloc(0, P, P, s, e).map_err(|e| format!("{e:?}"))?;
            v2.check_invariants().map_err(|e| e.to_string())?;
            ok(v2.free_area(&a))
        });
        v.decay(false);
        let other = t.join().unwrap();
        verdict(v, vec![other]);
    });
}

/// Model 3: node 1 steals an empty slice from node 0 while node 0 allocates
/// in its slices. The area node 0 gets must stay node 0's (freeing it through
/// its recorded node works) and the two areas must not overlap.
pub fn steal_races_owner_alloc() {
    loom::model(|| {
        let v = Arc::new(space(2, 0));
        let (s, e) = all();
        // Node 0 takes both slices and leaves them empty; the reserve is dry.
        let a = v.alloc(0, P, P, s, e).unwrap();
        let b = v.alloc(0, P, P, VirtAddr::new(BASE + 4 * P), e).unwrap();
        v.free_area(&a).unwrap();
        v.free_area(&b).unwrap();
        let v2 = Arc::clone(&v);
        let t = thread::spawn(move || v2.alloc(0, P, P, s, e));
        let y = v.alloc(1, P, P, s, e);
        let x = t.join().unwrap();
        let (Ok(x), Ok(y)) = (x, y) else {
            return verdict(v, vec![Err("an allocation failed".into())]);
        };
        let disjoint = if x.va_end <= y.va_start || y.va_end <= x.va_start {
            Ok(())
        } else {
            Err(format!("overlap {x:?} {y:?}"))
        };
        let fx = ok(v.free_area(&x));
        let fy = ok(v.free_area(&y));
        verdict(v, vec![disjoint, fx, fy]);
    });
}

/// Model 4: node 1's request for the whole window fails in the reserve
/// (node 0 holds slice 0, empty) and its retry gives node 0's empty slice
/// back, while node 0 allocates in that slice. A slice may only go back
/// while it is empty: the two areas must not overlap, both must free
/// through their recorded node, and at least one of the two requests must
/// succeed (whichever runs second finds the space the first took).
pub fn give_back_races_owner_alloc() {
    loom::model(|| {
        let v = Arc::new(space(2, 0));
        let (s, e) = all();
        // Node 0 takes slice 0 and leaves it empty; slice 1 stays in the
        // reserve.
        let a = v.alloc(0, P, P, s, e).unwrap();
        v.free_area(&a).unwrap();
        let v2 = Arc::clone(&v);
        let t = thread::spawn(move || v2.alloc(0, P, P, s, e));
        // 8 pages: more than a quarter slice, so straight to the reserve.
        let big = v.alloc(1, 8 * P, P, s, e);
        let small = t.join().unwrap();
        let mut checks = Vec::new();
        if let (Ok(x), Ok(y)) = (&small, &big) {
            if !(x.va_end <= y.va_start || y.va_end <= x.va_start) {
                checks.push(Err(format!("overlap {x:?} {y:?}")));
            }
        }
        if small.is_err() && big.is_err() {
            checks.push(Err("both requests failed".into()));
        }
        for x in [small, big].into_iter().flatten() {
            checks.push(ok(v.free_area(&x)));
        }
        verdict(v, checks);
    });
}
