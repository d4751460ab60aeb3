//! Criterion benches for vmap-core: the test_vmalloc patterns per policy,
//! allocation cost against the number of busy areas (1k vs 100k), vfree
//! with one vs two tree searches, and a purge's batch of neighbours. The peers are compared in
//! `harness vmap-bench`. Run: `cargo bench -p vmap-core --bench vmap`.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use vmap_core::{
    Augmented, Blocks, FreeAreaSearch, FreeVmapCache, Linear, VecSource, VirtAddr, VmapSpace,
};

const P: u64 = 4096;
const S: u64 = 0xffff_c900_0000_0000;
const E: u64 = S + (32 << 40);

fn space<F: FreeAreaSearch>() -> VmapSpace<F, VecSource> {
    VmapSpace::new(VirtAddr::new(S), VirtAddr::new(E), P, VecSource::new()).unwrap()
}

fn pattern<F: FreeAreaSearch>(c: &mut Criterion, busy: u64) {
    let mut g = c.benchmark_group(format!("alloc_free_busy{busy}"));
    let mut s = space::<F>();
    for _ in 0..busy {
        s.alloc(P, P, VirtAddr::new(S), VirtAddr::new(E)).unwrap();
    }
    let mut x = 1u64;
    for (name, size, align) in [
        ("fix_size", 0, P),
        ("random_size", 1, P),
        ("fix_align", 5 * P, 32 << 10),
    ] {
        g.bench_function(BenchmarkId::new(name, F::NAME), |b| {
            b.iter(|| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let sz = match size {
                    0 => P,
                    1 => ((x >> 33) % 100 + 1) * P,
                    n => n,
                };
                let a = s
                    .alloc(sz, align, VirtAddr::new(S), VirtAddr::new(E))
                    .unwrap();
                s.find_unlink(black_box(a.va_start)).unwrap();
            })
        });
    }
    g.finish();
}

fn policies(c: &mut Criterion) {
    pattern::<Blocks>(c, 0);
    pattern::<Augmented>(c, 0);
    pattern::<FreeVmapCache>(c, 0);
    pattern::<Linear>(c, 0);
    // long_busy_list: only the tree and cached policies finish quickly.
    pattern::<Blocks>(c, 15_000);
    pattern::<Augmented>(c, 15_000);
    pattern::<FreeVmapCache>(c, 15_000);
}

/// Allocation cost with 1k and 100k busy areas, the busy areas spread out
/// (every other page) so the trees really hold 1k / 100k nodes each.
fn busy_scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("busy_scaling");
    for busy in [1_000u64, 100_000] {
        let mut s = space::<Augmented>();
        for k in 0..busy {
            s.alloc_exact(VirtAddr::new(S + 2 * k * P), P).unwrap();
        }
        g.bench_function(BenchmarkId::new("augmented_alloc_free", busy), |b| {
            b.iter(|| {
                let a = s.alloc(P, P, VirtAddr::new(S), VirtAddr::new(E)).unwrap();
                s.find_unlink(black_box(a.va_start)).unwrap();
            })
        });
    }
    g.finish();
}

fn vfree(c: &mut Criterion) {
    let mut g = c.benchmark_group("vfree_15000_busy");
    let busy = 15_000u64;
    let mut s = space::<Augmented>();
    for k in 0..busy {
        s.alloc_exact(VirtAddr::new(S + 2 * k * P), P).unwrap();
    }
    let mut x = 7u64;
    for two in [false, true] {
        g.bench_function(
            if two {
                "find_then_unlink"
            } else {
                "find_unlink"
            },
            |b| {
                b.iter(|| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let a = VirtAddr::new(S + 2 * ((x >> 33) % busy) * P);
                    if two {
                        s.free_two_search(black_box(a)).unwrap();
                    } else {
                        s.find_unlink(black_box(a)).unwrap();
                    }
                    s.alloc_exact(a, P).unwrap();
                })
            },
        );
    }
    g.finish();
}

/// A purge's unlink (`find_unlink_batch`): runs of 64 neighbouring areas
/// among 10 000, in address order, unlinked in one batch and put back.
fn purge_batch<F: FreeAreaSearch>(c: &mut Criterion) {
    let mut g = c.benchmark_group("purge_batch64_10000_busy");
    let busy = 10_000u64;
    let mut s = space::<F>();
    for k in 0..busy {
        // Pairs of neighbours, then a hole: runs cross both.
        s.alloc_exact(VirtAddr::new(S + (k + k / 2) * P), P)
            .unwrap();
    }
    let mut x = 3u64;
    g.bench_function(F::NAME, |b| {
        // Only the batch is timed, not putting the areas back.
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let first = (x >> 33) % (busy - 64);
                let run = (first..first + 64).map(|k| VirtAddr::new(S + (k + k / 2) * P));
                let mut n = 0;
                let t0 = Instant::now();
                s.find_unlink_batch(run.clone(), |_, r| n += usize::from(r.is_ok()));
                t += t0.elapsed();
                assert_eq!(black_box(n), 64);
                for a in run {
                    s.alloc_exact(a, P).unwrap();
                }
            }
            t
        })
    });
    g.finish();
}

fn purges(c: &mut Criterion) {
    purge_batch::<Blocks>(c);
    purge_batch::<Augmented>(c);
}

criterion_group!(benches, policies, busy_scaling, vfree, purges);
criterion_main!(benches);
