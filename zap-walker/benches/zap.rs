//! Criterion benches of the zap walker (side by side per group):
//! * `untouched`: unmapping an untouched range (ia64-sim), `work` vs
//!   `address` budget (16 GiB, so the pre-2005 policy finishes in ms);
//! * `cycle_1t`: map 4 pages inside 1 TiB (packed or spread) and unmap the
//!   whole 1 TiB, with the zeroed-table stock off and on;
//! * `dense`: unmapping 16 MiB of present 4 KiB pages (x86_64), budgets.
//!
//! The TLB model charges nothing here (`CostModel::FREE`): these measure the
//! walk. The harness (`munmap`, `unmap-dense`) adds the modelled flush costs.

use arch_api::{CostModel, FrameSource, PageTableLayout, PhysArena, SoftTlb, VirtAddr};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use zap_walker::{AddressBudget, Frames, Gather, MapFlags, Unbounded, Walker, WorkBudget};

type Ia64 = arch_ia64_sim::Ia64Sim;
type X86 = arch_x86_64::X86_64Pml4;

fn untouched(c: &mut Criterion) {
    let arena = PhysArena::new(64 << 20, 4096).unwrap();
    let tlb = SoftTlb::new(8, Ia64::PAGE_SIZE, CostModel::FREE);
    let mut g: Gather<_> = Gather::new(tlb.on(0));
    let mut w = Walker::<Ia64, _>::new(&arena).unwrap();
    let ps = Ia64::PAGE_SIZE;
    let start = (5u64 << 61) + Ia64::entry_span(1);
    let end = start + (16u64 << 30);
    let mut grp = c.benchmark_group("untouched_16g_ia64");
    grp.bench_function("work", |b| {
        b.iter(|| {
            w.zap_range(
                VirtAddr::new(start),
                VirtAddr::new(end),
                &mut WorkBudget::for_page_size(ps, true),
                &mut g,
            )
            .unwrap()
        })
    });
    grp.bench_function("address", |b| {
        b.iter(|| {
            w.zap_range(
                VirtAddr::new(start),
                VirtAddr::new(end),
                &mut AddressBudget::for_page_size(ps, true),
                &mut g,
            )
            .unwrap()
        })
    });
    grp.finish();
}

fn cycle_1t(c: &mut Criterion) {
    let arena = PhysArena::new(64 << 20, 4096).unwrap();
    let tlb = SoftTlb::new(8, Ia64::PAGE_SIZE, CostModel::FREE);
    let mut g: Gather<_> = Gather::new(tlb.on(0));
    let ps = Ia64::PAGE_SIZE;
    let start = (5u64 << 61) + Ia64::entry_span(1);
    let mut grp = c.benchmark_group("cycle_map4_unmap_1t_ia64");
    // Packed (4 contiguous pages) and spread (one page in each of 4
    // level-1 entries), with the zeroed-table stock off and on.
    for (name, stock, stride) in [
        ("packed_stock0", 0, ps),
        ("packed_stock16", 16, ps),
        ("spread_stock0", 0, 1u64 << 38),
        ("spread_stock16", 16, 1u64 << 38),
    ] {
        let mut w = Walker::<Ia64, _>::new(&arena).unwrap();
        w.set_table_stock(stock).unwrap();
        grp.bench_function(name, |b| {
            b.iter(|| {
                for i in 0..4 {
                    let f = arena.alloc(ps, ps).unwrap();
                    w.map_range(
                        VirtAddr::new(start + i * stride),
                        Frames::Contiguous { start: f, pages: 1 },
                        MapFlags::WRITE,
                    )
                    .unwrap();
                }
                w.zap_range(
                    VirtAddr::new(start),
                    VirtAddr::new(start + (1 << 40)),
                    &mut WorkBudget::for_page_size(ps, true),
                    &mut g,
                )
                .unwrap()
            })
        });
    }
    grp.finish();
}

fn dense(c: &mut Criterion) {
    let ps = X86::PAGE_SIZE;
    let pages = 4096u64;
    let start = X86::entry_span(1);
    let arena = PhysArena::new(256 << 20, 4096).unwrap();
    let tlb = SoftTlb::new(8, ps, CostModel::FREE);
    let mut grp = c.benchmark_group("dense_16m_x86_64");
    macro_rules! case {
        ($name:expr, $budget:expr) => {
            grp.bench_function($name, |b| {
                b.iter_batched_ref(
                    || {
                        let mut w = Walker::<X86, _>::new(&arena).unwrap();
                        let f = arena.alloc(pages * ps, ps).unwrap();
                        w.map_range(
                            VirtAddr::new(start),
                            Frames::Contiguous { start: f, pages },
                            MapFlags::WRITE,
                        )
                        .unwrap();
                        (w, Gather::<_>::new(tlb.on(0)))
                    },
                    |(w, g)| {
                        w.zap_range(
                            VirtAddr::new(start),
                            VirtAddr::new(start + pages * ps),
                            &mut $budget,
                            g,
                        )
                        .unwrap()
                    },
                    BatchSize::PerIteration,
                )
            });
        };
    }
    case!("work_preempt", WorkBudget::for_page_size(ps, true));
    case!("work", WorkBudget::for_page_size(ps, false));
    case!("unbounded", Unbounded::new(ps));
    grp.finish();
}

criterion_group!(benches, untouched, cycle_1t, dense);
criterion_main!(benches);
