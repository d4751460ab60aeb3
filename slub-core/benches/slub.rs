//! Criterion benches: one alloc/free pair and an N-pattern of 256 on a
//! 256-byte cache, tid front against sheaves front.
//! `cargo bench -p slub-core --bench slub`.

use criterion::{Criterion, criterion_group, criterion_main};
use slub_core::testing::HostedPlatform;
use slub_core::{CacheFlags, KmemCache, SystemPages, ThreadCpus};
use std::hint::black_box;

fn fronts(c: &mut Criterion) {
    let pages = SystemPages::new();
    for (name, flags) in [
        ("tid", CacheFlags::empty()),
        ("sheaves", CacheFlags::SHEAVES),
    ] {
        let cache: KmemCache<HostedPlatform<&SystemPages, ThreadCpus>> =
            KmemCache::new("bench-256", 256, 8, flags, &pages, ThreadCpus).unwrap();
        c.bench_function(&format!("{name}/fastpath_reuse_256"), |b| {
            b.iter(|| {
                let p = cache.alloc().unwrap();
                // SAFETY: allocated just above, freed once.
                unsafe { cache.free(black_box(p)) }.unwrap();
            })
        });
        let mut ptrs = Vec::with_capacity(256);
        c.bench_function(&format!("{name}/n_pattern_256"), |b| {
            b.iter(|| {
                for _ in 0..256 {
                    ptrs.push(cache.alloc().unwrap());
                }
                for p in ptrs.drain(..) {
                    // SAFETY: allocated above, freed once.
                    unsafe { cache.free(p) }.unwrap();
                }
            })
        });
    }
}

criterion_group!(benches, fronts);
criterion_main!(benches);
