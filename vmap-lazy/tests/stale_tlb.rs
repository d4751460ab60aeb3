//! The stale-TLB checker: every shipped policy hands out no range a CPU may
//! still translate; the deliberately broken order (the range released at
//! vfree, before any flush: `set_release_before_flush`) is caught.

mod common;

use arch_api::SoftTlb;
use common::*;
use vmap_core::{Augmented, FreeAreaSearch, FreeVmapCache, Linear};
use vmap_lazy::{
    Eager, LazyMaxPages, LookupCost, OneSpace, PurgeCtx, PurgePolicy, StaleTlbChecker, Vmalloc,
    VmallocMem,
};

/// Purges past 64 lazy pages (the broken order's test).
#[derive(Default)]
struct Past64;

impl PurgePolicy for Past64 {
    const NAME: &'static str = "past-64";
    fn after_free(&self, ctx: &PurgeCtx) -> bool {
        ctx.lazy_pages > 64
    }
}

/// The vmalloc-loop: vmalloc k pages, touch every page from a rotating
/// CPU, vfree. Returns (violations, checks).
fn run<P: PurgePolicy, F: FreeAreaSearch>(policy: P, iterations: u64, pages: u64) -> (u64, u64) {
    run_order::<P, F>(policy, iterations, pages, false)
}

/// [`run`], with the range released before the flush when `broken`.
fn run_order<P: PurgePolicy, F: FreeAreaSearch>(
    policy: P,
    iterations: u64,
    pages: u64,
    broken: bool,
) -> (u64, u64) {
    let arena = arena(8 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = SoftTlb::new(CPUS, PAGE, arch_api::CostModel::FREE);
    let checker = StaleTlbChecker::new(&tlb);
    let mut v: Vmalloc<'_, K<'_>, P, OneSpace<K<'_>, F>> =
        Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), policy).unwrap();
    v.set_alloc_check(&checker);
    v.set_release_before_flush(broken);
    for i in 0..iterations {
        let a = v.vmalloc(pages * PAGE).unwrap();
        for p in 0..pages {
            v.write_byte(va(a, p), i as u8).unwrap();
            tlb.touch((i as usize + p as usize) % CPUS, va(a, p));
        }
        v.vfree(a).unwrap();
    }
    v.purge_vmap_area_lazy();
    assert_eq!(v.vmap_lazy_nr(), 0);
    assert_eq!(v.stats().lazy_underflows, 0);
    (checker.violations(), checker.checks())
}

#[test]
#[cfg_attr(
    miri,
    ignore = "15000 loop iterations: too slow under miri; covered natively"
)]
fn shipped_policies_report_no_stale_tlb_violation() {
    assert_eq!(
        run::<LazyMaxPages, Linear>(LazyMaxPages, 3000, 4),
        (0, 3000)
    );
    assert_eq!(run::<Eager, Linear>(Eager, 500, 4), (0, 500));
    assert_eq!(
        run::<LazyMaxPages, FreeVmapCache>(LazyMaxPages, 3000, 4),
        (0, 3000)
    );
    assert_eq!(
        run::<LazyMaxPages, Augmented>(LazyMaxPages, 3000, 4),
        (0, 3000)
    );
    assert_eq!(
        run::<LookupCost, Linear>(LookupCost { max_nodes: 100 }, 3000, 4),
        (0, 3000)
    );
}

#[test]
fn checker_catches_a_policy_that_releases_before_flushing() {
    let (violations, checks) = run_order::<Past64, Augmented>(Past64, 200, 4, true);
    assert_eq!(checks, 200);
    // Every allocation after the first reuses the range just freed, whose
    // translations no flush has dropped yet (the lowest fit is that range).
    assert!(violations >= 150, "violations {violations}");
}

/// Real threads: vmalloc / touch / vfree on every CPU, vm_map_ram on some,
/// purges from the policy and from a purging thread; no stale TLB, nothing
/// leaked, the accounting balanced.
#[test]
#[cfg_attr(
    miri,
    ignore = "threads x 400 allocations: too slow under miri; covered natively"
)]
fn threads_racing_vfree_and_purge_stay_consistent() {
    #[derive(Default)]
    struct Small;
    impl PurgePolicy for Small {
        const NAME: &'static str = "small";
        fn after_free(&self, ctx: &PurgeCtx) -> bool {
            ctx.lazy_pages > 32
        }
    }
    let arena = arena(16 << 20);
    let mem = VmallocMem::new(&arena);
    let tlb = SoftTlb::new(CPUS, PAGE, arch_api::CostModel::FREE);
    let checker = StaleTlbChecker::new(&tlb);
    let mut v: Vmalloc<'_, K<'_>, Small> =
        Vmalloc::new(&mem, space(1 << 20), tlb.on(0), cpus(), Small).unwrap();
    v.set_alloc_check(&checker);
    let frames: Vec<_> = (0..4)
        .map(|_| arch_api::FrameSource::alloc(&arena, PAGE, PAGE).unwrap())
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (v, tlb, stop) = (&v, &tlb, &stop);
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                v.purge_vmap_area_lazy();
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..CPUS)
            .map(|cpu| {
                let frames = &frames;
                s.spawn(move || {
                    arch_api::HostedCpus::run_on(cpu);
                    for i in 0..400u64 {
                        let pages = 1 + (i % 3);
                        let a = v.vmalloc(pages * PAGE).unwrap();
                        for p in 0..pages {
                            v.write_byte(va(a, p), 1).unwrap();
                            tlb.touch(cpu, va(a, p));
                        }
                        v.vfree(a).unwrap();
                        if i % 8 == 0 {
                            let flags = arch_api::MapFlags::WRITE | arch_api::MapFlags::GLOBAL;
                            let m = v.vm_map_ram(&frames[..2], flags).unwrap();
                            tlb.touch(cpu, m);
                            v.vm_unmap_ram(m, 2).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    v.vm_unmap_aliases();
    assert_eq!(checker.violations(), 0, "{:?}", checker.first_violation());
    assert_eq!(v.vmap_lazy_nr(), 0);
    assert_eq!(v.stats().lazy_underflows, 0);
    v.check_consistency().unwrap();
    assert!(
        v.areas()
            .iter()
            .all(|a| a.kind == vmap_lazy::AreaKind::VmapBlock),
        "only the per-CPU blocks remain"
    );
    for f in frames {
        arch_api::FrameSource::free(&arena, f, PAGE).unwrap();
    }
}
