//! Pools that give space back: every purge ages the pools a quarter
//! (`decay_pools(false)`), memory pressure drains them (`decay_pools(true)`),
//! and a node that stops allocating returns its pooled areas, and the
//! slices they kept, within the documented bound. The placement and
//! no-space guarantees hold afterwards.

use vmap_core::sharded::ShardedConfig;
use vmap_core::{GlobalVmap, ShardedVmap, VirtAddr, VmapNodes};

const P: u64 = 0x1000;
const BASE: u64 = 0x8000_0000;
const PAGES: u64 = 4096;

fn va(x: u64) -> VirtAddr {
    VirtAddr::new(x)
}

fn front() -> ShardedVmap {
    let cfg = ShardedConfig {
        nr_nodes: 2,
        slice_size: Some(256 * P),
        pool_depth: 64,
    };
    ShardedVmap::with_config(va(BASE), va(BASE + PAGES * P), P, cfg).unwrap()
}

/// Node 0 allocates and frees `n` areas of each of 1..=3 pages: all parked.
fn park_on_node0(v: &ShardedVmap, n: usize) {
    let end = va(BASE + PAGES * P);
    for pages in 1..=3 {
        let areas: Vec<_> = (0..n)
            .map(|_| v.alloc(0, pages * P, P, va(BASE), end).unwrap())
            .collect();
        for a in &areas {
            v.free_area(a).unwrap();
        }
    }
}

#[test]
fn a_node_that_stops_allocating_empties_its_pools_within_the_bound() {
    let v = front();
    park_on_node0(&v, 64);
    let parked = v.busy_bytes();
    assert_eq!(parked, 64 * (1 + 2 + 3) * P, "every freed area is parked");
    let mut purges = 0;
    let mut last = parked;
    while v.busy_bytes() > 0 {
        v.decay_pools(false);
        purges += 1;
        v.check_invariants().unwrap();
        assert!(v.busy_bytes() < last, "every decay releases something");
        last = v.busy_bytes();
        assert!(purges <= 14, "the documented bound for depth 64");
    }
    assert!(
        purges >= 10,
        "a quarter at a time, not all at once: {purges}"
    );
    // The slices went back too: the whole window is one free range again.
    let all = v
        .alloc(1, PAGES * P, P, va(BASE), va(BASE + PAGES * P))
        .expect("the whole window");
    assert_eq!(all.va_start, va(BASE));
    v.free_area(&all).unwrap();
    v.check_invariants().unwrap();
}

#[test]
fn the_first_decay_releases_a_quarter_the_oldest_first() {
    let v = front();
    let end = va(BASE + PAGES * P);
    let areas: Vec<_> = (0..8)
        .map(|_| v.alloc(0, P, P, va(BASE), end).unwrap())
        .collect();
    for a in &areas {
        v.free_area(a).unwrap();
    }
    v.decay_pools(false);
    assert_eq!(v.busy_bytes(), 6 * P, "8 parked, a quarter released");
    // The pool still serves the newest ones: the last freed comes back.
    let b = v.alloc(0, P, P, va(BASE), end).unwrap();
    assert_eq!(b.va_start, areas[7].va_start);
    v.free_area(&b).unwrap();
    v.check_invariants().unwrap();
}

#[test]
fn memory_pressure_drains_everything_at_once() {
    let v = front();
    park_on_node0(&v, 10);
    assert!(v.busy_bytes() > 0);
    v.decay_pools(true);
    assert_eq!(v.busy_bytes(), 0);
    v.check_invariants().unwrap();
    // A front without pools: nothing to do.
    let g: GlobalVmap = GlobalVmap::new(va(BASE), va(BASE + PAGES * P), P).unwrap();
    let a = g.alloc(0, P, P, va(BASE), va(BASE + PAGES * P)).unwrap();
    g.decay_pools(true);
    assert_eq!(g.busy_bytes(), P, "live areas are not pooled ones");
    g.free_area(&a).unwrap();
}
