//! The sharded front and the global-lock variant: the documented placement
//! guarantee (inside the window, aligned, phase and nocross honoured,
//! non-overlapping), areas returning to their node, pools, steals, the
//! reserve, and concurrent use from threads. No timing here.

mod common;

use common::Rng;
use std::sync::Arc;
use vmap_core::sharded::ShardedConfig;
use vmap_core::{AllocRequest, GlobalVmap, ShardedVmap, VirtAddr, VmapArea, VmapError, VmapNodes};

const P: u64 = 0x1000;
const BASE: u64 = 0x8000_0000;

fn va(x: u64) -> VirtAddr {
    VirtAddr::new(x)
}

fn check_placement(areas: &[VmapArea], reqs: &[AllocRequest]) {
    for (a, r) in areas.iter().zip(reqs) {
        let s = a.va_start.as_u64();
        assert!(s >= r.vstart.as_u64() && a.va_end.as_u64() <= r.vend.as_u64());
        assert_eq!(s % r.align, r.phase);
        assert_eq!(a.size(), r.size);
        if let (Some(x), Some(y)) = (
            s.checked_div(r.nocross),
            (a.va_end.as_u64() - 1).checked_div(r.nocross),
        ) {
            assert_eq!(x, y);
        }
    }
    let mut v: Vec<_> = areas.iter().map(|a| (a.va_start, a.va_end)).collect();
    v.sort();
    for w in v.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap {w:?}");
    }
}

fn exercise<V: VmapNodes>(v: &V, seed: u64) {
    let (start, end) = v.range();
    let (s, e) = (start.as_u64(), end.as_u64());
    let mut rng = Rng(seed);
    let mut live: Vec<(VmapArea, AllocRequest)> = Vec::new();
    for step in 0..4000 {
        if rng.chance(55) || live.is_empty() {
            let max = if rng.chance(90) { 8 } else { 200 };
            let size = (1 + rng.below(max)) * P;
            let align = P << rng.below(4);
            let phase = if rng.chance(80) {
                0
            } else {
                rng.below(align / P) * P
            };
            let nocross = if rng.chance(85) {
                0
            } else {
                size.next_power_of_two() * 2
            };
            let (vs, ve) = if rng.chance(70) {
                (s, e)
            } else {
                let a = s + rng.below((e - s) / P / 2) * P;
                (a, a + (e - s) / 2)
            };
            let r = AllocRequest::new(size, align, va(vs), va(ve))
                .phase(phase)
                .nocross(nocross);
            match v.alloc_on(rng.below(8) as usize, &r) {
                Ok(a) => live.push((a, r)),
                Err(VmapError::NoSpace { .. }) => {}
                Err(err) => panic!("step {step}: {err}"),
            }
        } else {
            let k = rng.below(live.len() as u64) as usize;
            let (a, _) = live.swap_remove(k);
            assert_eq!(v.find(a.va_start), Some(a));
            let freed = if rng.chance(50) {
                v.free_area(&a)
            } else {
                v.free(a.va_start)
            };
            assert_eq!(
                freed.map(|x| (x.va_start, x.va_end)),
                Ok((a.va_start, a.va_end))
            );
            // Double free.
            assert_eq!(
                v.free_area(&a),
                Err(VmapError::NotFound {
                    addr: a.va_start.as_u64()
                })
            );
        }
        if step % 256 == 0 {
            let (areas, reqs): (Vec<_>, Vec<_>) = live.iter().copied().unzip();
            check_placement(&areas, &reqs);
        }
    }
    for (a, _) in live {
        v.free_area(&a).unwrap();
    }
    v.drain_pools();
    assert_eq!(v.busy_bytes(), 0);
}

#[test]
fn sharded_placement_guarantee_and_no_leak() {
    for nodes in [1, 3, 8] {
        let v: ShardedVmap = ShardedVmap::new(va(BASE), va(BASE + 4096 * P), P, nodes).unwrap();
        exercise(&v, nodes as u64);
        v.check_invariants().unwrap();
    }
}

#[test]
fn global_placement_and_no_leak() {
    let v: GlobalVmap = GlobalVmap::new(va(BASE), va(BASE + 4096 * P), P).unwrap();
    exercise(&v, 11);
    assert_eq!(v.nr_nodes(), 1);
}

#[test]
fn area_returns_to_its_node_and_pool_reuses_it() {
    let cfg = ShardedConfig {
        nr_nodes: 4,
        slice_size: Some(64 * P),
        pool_depth: 4,
    };
    let v: ShardedVmap = ShardedVmap::with_config(va(BASE), va(BASE + 1024 * P), P, cfg).unwrap();
    let a = v.alloc(2, 2 * P, P, va(BASE), va(BASE + 1024 * P)).unwrap();
    assert_eq!(a.node, 2);
    let b = v.alloc(1, 2 * P, P, va(BASE), va(BASE + 1024 * P)).unwrap();
    assert_eq!(b.node, 1);
    // Each node took its own slice: different slices.
    assert_ne!(
        a.va_start.as_u64() / (64 * P),
        b.va_start.as_u64() / (64 * P)
    );
    v.free_area(&a).unwrap();
    assert_eq!(v.find(a.va_start), None);
    // Pooled: the same size on the same node gets the same area back.
    let c = v.alloc(2, 2 * P, P, va(BASE), va(BASE + 1024 * P)).unwrap();
    assert_eq!(c, a);
    v.check_invariants().unwrap();
}

#[test]
fn steal_and_reserve_fallbacks() {
    let cfg = ShardedConfig {
        nr_nodes: 2,
        slice_size: Some(4 * P),
        pool_depth: 0,
    };
    let v: ShardedVmap = ShardedVmap::with_config(va(BASE), va(BASE + 8 * P), P, cfg).unwrap();
    let end = va(BASE + 8 * P);
    // Node 0 takes both slices, then frees them: both empty, owned by 0.
    let x = v.alloc(0, 4 * P, P, va(BASE), end);
    // 4 pages > slice/4: straight from the reserve.
    assert_eq!(x.unwrap().node, 2);
    v.free_area(&x.unwrap()).unwrap();
    let a = v.alloc(0, P, P, va(BASE), end).unwrap();
    let b = v.alloc(0, P, P, va(BASE + 4 * P), end).unwrap();
    assert_eq!((a.node, b.node), (0, 0));
    v.free_area(&a).unwrap();
    // Node 1: reserve has no slice left: steals node 0's empty slice.
    let c = v.alloc(1, P, P, va(BASE), end).unwrap();
    assert_eq!(c.node, 1);
    assert_eq!(c.va_start, va(BASE));
    // Node 1 fills its slice, then carves from node 0's slice.
    let mut more = Vec::new();
    for _ in 0..3 {
        more.push(v.alloc(1, P, P, va(BASE), end).unwrap());
    }
    let d = v.alloc(1, P, P, va(BASE), end).unwrap();
    assert_eq!(
        d.node, 0,
        "carved from the neighbour's slice, belongs to it"
    );
    v.check_invariants().unwrap();
    for x in more.iter().chain([&b, &c, &d]) {
        v.free(x.va_start).unwrap();
    }
    assert_eq!(v.busy_bytes(), 0);
}

#[test]
fn exact_requests_reach_the_owner() {
    let cfg = ShardedConfig {
        nr_nodes: 2,
        slice_size: Some(16 * P),
        pool_depth: 8,
    };
    let v: ShardedVmap = ShardedVmap::with_config(va(BASE), va(BASE + 64 * P), P, cfg).unwrap();
    let a = v.alloc(1, P, P, va(BASE), va(BASE + 64 * P)).unwrap();
    let x = v
        .alloc_on(0, &AllocRequest::exact(va(BASE + 5 * P), 2 * P, P))
        .unwrap();
    assert_eq!((x.node, x.va_start), (a.node, va(BASE + 5 * P)));
    assert!(matches!(
        v.alloc_on(0, &AllocRequest::exact(va(BASE + 5 * P), P, P)),
        Err(VmapError::NoSpace { .. })
    ));
    // In the reserve.
    let y = v
        .alloc_on(0, &AllocRequest::exact(va(BASE + 40 * P), P, P))
        .unwrap();
    assert_eq!(y.node, 2);
    for z in [a, x, y] {
        v.free(z.va_start).unwrap();
    }
    v.drain_pools();
    assert_eq!(v.busy_bytes(), 0);
    v.check_invariants().unwrap();
}

#[test]
fn bad_requests_are_refused_by_both() {
    let s: ShardedVmap = ShardedVmap::new(va(BASE), va(BASE + 64 * P), P, 4).unwrap();
    let g: GlobalVmap = GlobalVmap::new(va(BASE), va(BASE + 64 * P), P).unwrap();
    for r in [
        AllocRequest::new(0, P, va(BASE), va(BASE + P)),
        AllocRequest::new(P, 3 * P, va(BASE), va(BASE + P)),
        AllocRequest::new(P, P, va(BASE), va(BASE + 65 * P)),
    ] {
        assert_eq!(s.alloc_on(0, &r).err(), g.alloc_on(0, &r).err());
        assert!(s.alloc_on(0, &r).is_err());
    }
    assert_eq!(s.free(va(BASE)), Err(VmapError::NotFound { addr: BASE }));
}

#[test]
fn lazy_slot_is_per_node() {
    let v: ShardedVmap<vmap_core_default_mutex::M, Vec<u64>> =
        ShardedVmap::new(va(BASE), va(BASE + 64 * P), P, 3).unwrap();
    v.with_lazy(1, |l| l.push(7));
    assert_eq!(v.with_lazy(1, |l| l.clone()), vec![7]);
    assert!(v.with_lazy(2, |l| l.is_empty()));
}

mod vmap_core_default_mutex {
    pub type M = arch_api::sync::DefaultRawMutex;
}

#[test]
fn threads_on_many_nodes() {
    let v: Arc<ShardedVmap> =
        Arc::new(ShardedVmap::new(va(BASE), va(BASE + (1 << 16) * P), P, 4).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let v = Arc::clone(&v);
            std::thread::spawn(move || {
                let mut rng = Rng(t);
                let mut mine = Vec::new();
                for _ in 0..if cfg!(miri) { 50 } else { 5000 } {
                    if rng.chance(55) || mine.is_empty() {
                        let size = (1 + rng.below(16)) * P;
                        mine.push(
                            v.alloc(t as usize, size, P, va(BASE), va(BASE + (1 << 16) * P))
                                .unwrap(),
                        );
                    } else {
                        let k = rng.below(mine.len() as u64) as usize;
                        v.free_area(&mine.swap_remove(k)).unwrap();
                    }
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    let reqs: Vec<_> = all
        .iter()
        .map(|a| AllocRequest::new(a.size(), P, va(BASE), va(BASE + (1 << 16) * P)))
        .collect();
    check_placement(&all, &reqs);
    v.check_invariants().unwrap();
    for a in &all {
        v.free_area(a).unwrap();
    }
    v.drain_pools();
    assert_eq!(v.busy_bytes(), 0);
}
