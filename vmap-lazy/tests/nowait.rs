//! `VmFlags::NOWAIT` (GFP_NOWAIT): with a front lock held by another thread
//! a non-blocking vmalloc does not wait: the global front says
//! `WouldBlock` (nothing changed), the sharded one serves it from another
//! node; and it never purges.

mod common;

use arch_api::{HostedCpus, VirtAddr};
use common::*;
use std::sync::mpsc;
use vmap_core::VmapNodes;
use vmap_lazy::{
    LazyMaxPages, NodeLazy, OneSpace, Sharded, VmFlags, Vmalloc, VmallocError, VmallocMem,
};

/// Runs `f` while another thread holds node `node`'s lock.
fn with_node_held<N: VmapNodes<Lazy = NodeLazy>, T>(
    nodes: &N,
    node: usize,
    f: impl FnOnce() -> T,
) -> T {
    std::thread::scope(|s| {
        let (held_tx, held_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        s.spawn(move || {
            nodes.with_lazy(node, |_| {
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
fn nowait_on_a_held_global_lock_would_block_and_changes_nothing() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let v: Vmalloc<'_, K<'_>> =
        Vmalloc::new(&mem, space(1 << 16), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc(PAGE).unwrap();
    let out = mem.bytes_out();
    let r = with_node_held(v.nodes(), 0, || {
        v.vmalloc_with(PAGE, PAGE, VmFlags::NOWAIT, "atomic")
    });
    assert_eq!(r, Err(VmallocError::WouldBlock));
    assert_eq!(v.areas().len(), 1);
    assert_eq!(mem.bytes_out(), out);
    // Uncontended it works, and is freed as any area.
    let b = v
        .vmalloc_with(PAGE, PAGE, VmFlags::NOWAIT, "atomic")
        .unwrap();
    v.write_byte(b, 1).unwrap();
    assert_eq!(v.areas()[1].caller, "atomic");
    v.vfree(b).unwrap();
    v.vfree(a).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(mem.bytes_out(), v.pagetable_bytes(), "nothing leaked");
}

#[test]
fn nowait_on_a_held_node_uses_another_node() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let nodes = Sharded::<K<'_>>::new(
        VirtAddr::new(VSTART),
        VirtAddr::new(VSTART + (PAGE << 16)),
        PAGE,
        CPUS,
    )
    .unwrap();
    let v: Vmalloc<'_, K<'_>, LazyMaxPages, Sharded<K<'_>>> =
        Vmalloc::new(&mem, nodes, tlb.on(0), cpus(), LazyMaxPages).unwrap();
    // Node 1 gets a slice (a vmalloc from CPU 1).
    let on1 = std::thread::scope(|s| {
        s.spawn(|| {
            HostedCpus::run_on(1);
            v.vmalloc(PAGE).unwrap()
        })
        .join()
        .unwrap()
    });
    let r = with_node_held(v.nodes(), 0, || {
        v.vmalloc_with(2 * PAGE, PAGE, VmFlags::NOWAIT, "atomic")
    });
    let b = r.expect("served by node 1");
    assert_eq!(v.nodes().owner(b), Some(1));
    v.write_byte(va(b, 1), 1).unwrap();
    v.check_consistency().unwrap();
    v.vfree(b).unwrap();
    v.vfree(on1).unwrap();
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert_eq!(mem.bytes_out(), v.pagetable_bytes(), "nothing leaked");
}

#[test]
fn nowait_never_purges() {
    let arena = arena(4 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    // Room for two 4-page areas with their guards.
    let v: Vmalloc<'_, K<'_>, LazyMaxPages, OneSpace<K<'_>>> =
        Vmalloc::new(&mem, space(10), tlb.on(0), cpus(), LazyMaxPages).unwrap();
    let a = v.vmalloc(4 * PAGE).unwrap();
    let b = v.vmalloc(4 * PAGE).unwrap();
    v.vfree(a).unwrap();
    let r = v.vmalloc_with(4 * PAGE, PAGE, VmFlags::NOWAIT, "atomic");
    assert!(matches!(r, Err(VmallocError::NoVirtualSpace(_))), "{r:?}");
    assert_eq!((v.stats().purges, v.vmap_lazy_nr()), (0, 4), "no purge");
    // A blocking call purges and retries.
    let c = v.vmalloc(4 * PAGE).unwrap();
    assert_eq!(c, a);
    for x in [b, c] {
        v.vfree(x).unwrap();
    }
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
}

/// NOWAIT areas go through the stale-TLB checker as any other: no range is
/// handed out while a CPU may still translate it, on either front.
#[test]
#[cfg_attr(
    miri,
    ignore = "2 fronts x 3000 rounds: too slow under miri; covered natively"
)]
fn nowait_hands_out_no_stale_range() {
    fn churn<N: VmapNodes<Lazy = NodeLazy>>(nodes: N) {
        let arena = arena(8 << 20);
        let mem = VmallocMem::new(&arena);
        let tlb = tlb();
        let checker = vmap_lazy::StaleTlbChecker::new(&tlb);
        let mut v: Vmalloc<'_, K<'_>, LazyMaxPages, N> =
            Vmalloc::new(&mem, nodes, tlb.on(0), cpus(), LazyMaxPages).unwrap();
        v.set_alloc_check(&checker);
        for i in 0..3000u64 {
            let flags = if i % 2 == 0 {
                VmFlags::NOWAIT
            } else {
                VmFlags::empty()
            };
            let a = v.vmalloc_with(3 * PAGE, PAGE, flags, "churn").unwrap();
            for p in 0..3 {
                v.write_byte(va(a, p), i as u8).unwrap();
                tlb.touch((i + p) as usize % CPUS, va(a, p));
            }
            v.vfree(a).unwrap();
        }
        v.purge_vmap_area_lazy();
        v.check_consistency().unwrap();
        assert_eq!(checker.violations(), 0, "{:?}", checker.first_violation());
        assert!(checker.checks() >= 3000);
        assert_eq!(mem.bytes_out(), v.pagetable_bytes(), "nothing leaked");
    }
    churn(space::<vmap_core::Augmented>(1 << 20));
    churn(
        Sharded::<K<'_>>::new(
            VirtAddr::new(VSTART),
            VirtAddr::new(VSTART + (PAGE << 20)),
            PAGE,
            CPUS,
        )
        .unwrap(),
    );
}
