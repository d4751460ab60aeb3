//! `try_alloc_on` (GFP_NOWAIT): never waits for a held lock. The global
//! front answers `WouldBlock` with nothing changed; the sharded one serves
//! the request from another node whose lock is free, recording it there.

use std::sync::mpsc;
use vmap_core::sharded::ShardedConfig;
use vmap_core::{AllocRequest, GlobalVmap, ShardedVmap, VirtAddr, VmapError, VmapNodes};

const P: u64 = 0x1000;
const BASE: u64 = 0x8000_0000;
const END: u64 = BASE + 4096 * P;

fn req(pages: u64) -> AllocRequest {
    AllocRequest::new(pages * P, P, VirtAddr::new(BASE), VirtAddr::new(END))
}

/// Runs `f` while another thread holds node `node`'s lock.
fn held<N: VmapNodes, T>(v: &N, node: usize, f: impl FnOnce() -> T) -> T {
    std::thread::scope(|s| {
        let (held_tx, held_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        s.spawn(move || {
            v.with_lazy(node, |_| {
                held_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            })
        });
        held_rx.recv().unwrap();
        let r = f();
        go_tx.send(()).unwrap();
        r
    })
}

#[test]
fn global_front_would_block_and_changes_nothing() {
    let v: GlobalVmap<arch_api::sync::DefaultRawMutex, u32> =
        GlobalVmap::new(VirtAddr::new(BASE), VirtAddr::new(END), P).unwrap();
    let r = held(&v, 0, || v.try_alloc_on(0, &req(1), |n, _| *n += 1));
    assert_eq!(r, Err(VmapError::WouldBlock));
    assert_eq!((v.busy_bytes(), v.with_lazy(0, |n| *n)), (0, 0));
    let a = v.try_alloc_on(0, &req(1), |n, _| *n += 1).unwrap();
    assert_eq!(v.with_lazy(0, |n| *n), 1, "published under the same lock");
    v.free_area(&a).unwrap();
}

#[test]
fn sharded_front_uses_a_free_node() {
    let cfg = ShardedConfig {
        nr_nodes: 2,
        slice_size: Some(256 * P),
        pool_depth: 64,
    };
    let v: ShardedVmap<arch_api::sync::DefaultRawMutex, u32> =
        ShardedVmap::with_config(VirtAddr::new(BASE), VirtAddr::new(END), P, cfg).unwrap();
    // Node 1 has a slice; node 0 none yet.
    let one = v.alloc_on(1, &req(1)).unwrap();
    let a = held(&v, 0, || v.try_alloc_on(0, &req(2), |n, _| *n += 1)).unwrap();
    assert_eq!(a.node, 1);
    assert_eq!(
        v.with_lazy(1, |n| *n),
        1,
        "recorded on the node that served it"
    );
    // Every lock held: WouldBlock; no space anywhere it may look: NoSpace.
    let r = held(&v, 1, || {
        held(&v, 0, || v.try_alloc_on(0, &req(1), |_, _| {}))
    });
    assert_eq!(r, Err(VmapError::WouldBlock));
    assert!(matches!(
        v.try_alloc_on(0, &req(4096), |_, _| {}),
        Err(VmapError::NoSpace { .. })
    ));
    for x in [a, one] {
        v.free_area(&x).unwrap();
    }
    v.check_invariants().unwrap();
}
