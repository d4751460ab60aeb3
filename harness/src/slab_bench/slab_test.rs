//! `harness slab-test`: per size, allocs then frees, alloc/free pairs and (slub-core) bulk
//! pairs, in cycles per operation.

use super::{BULK, REPEAT, Which, cycles, emit, list, make, median, name};
use crate::cli::Common;
use clap::Args;
use serde_json::json;
use std::alloc::Layout;
use std::ptr::NonNull;

/// `slab-test` flags.
#[derive(Args, Debug, Clone)]
pub struct SlabTestArgs {
    /// Allocator.
    #[arg(long, value_enum, default_value = "all")]
    pub allocator: Which,
    /// Objects per size (allocs, then frees; and as many alloc/free pairs).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub count: u64,
}

/// `slab-test`: per size 8..16384, `count` allocs then `count` frees, and
/// `count` alloc/free pairs; cycles per operation.
pub fn slab_test(common: &Common, a: &SlabTestArgs) -> i32 {
    let n = a.count as usize;
    let mut results = Vec::new();
    for w in list(a.allocator) {
        let b = make(w);
        let mut sizes = Vec::new();
        for shift in 3..=14 {
            let size = 1usize << shift;
            let l = Layout::from_size_align(size, 8).unwrap();
            let mut ptrs = vec![std::ptr::null_mut(); n];
            let (mut al, mut fr, mut pr, mut bu) = (vec![], vec![], vec![], vec![]);
            let cache = b.cache(l);
            let mut chunk = [NonNull::<u8>::dangling(); BULK];
            for _ in 0..REPEAT {
                let t = cycles();
                for p in ptrs.iter_mut() {
                    *p = b.alloc(l);
                }
                al.push((cycles() - t) as f64 / n as f64);
                let t = cycles();
                for &p in &ptrs {
                    // SAFETY: allocated above with `l`.
                    unsafe { b.free(p, l) };
                }
                fr.push((cycles() - t) as f64 / n as f64);
                let t = cycles();
                for _ in 0..n {
                    let p = b.alloc(l);
                    // SAFETY: allocated just above.
                    unsafe { b.free(std::hint::black_box(p), l) };
                }
                pr.push((cycles() - t) as f64 / n as f64);
                // Bulk rows (slub-core): alloc_bulk + free_bulk of 64.
                if let Some(c) = cache {
                    let rounds = n.div_ceil(BULK);
                    let t = cycles();
                    for _ in 0..rounds {
                        c.alloc_bulk(&mut chunk).unwrap();
                        // SAFETY: allocated just above, freed once.
                        unsafe { c.free_bulk(std::hint::black_box(&chunk)) }.unwrap();
                    }
                    bu.push((cycles() - t) as f64 / (rounds * BULK) as f64);
                }
            }
            let bulk = (!bu.is_empty()).then(|| median(bu).round() as u64);
            sizes.push(
                json!({"size": size, "alloc_cycles": median(al).round() as u64,
                "free_cycles": median(fr).round() as u64, "pair_cycles": median(pr).round() as u64,
                "bulk64_pair_cycles": bulk}),
            );
        }
        results.push(json!({"allocator": name(w), "sizes": sizes}));
    }
    let v = json!({"count": n, "results": results});
    emit(common, v.clone(), || {
        println!(
            "{:<11} {:>6} {:>12} {:>11} {:>11} {:>14}",
            "allocator", "size", "alloc_cyc", "free_cyc", "pair_cyc", "bulk64_pair_cyc"
        );
        for r in v["results"].as_array().unwrap() {
            for s in r["sizes"].as_array().unwrap() {
                println!(
                    "{:<11} {:>6} {:>12} {:>11} {:>11} {:>14}",
                    r["allocator"].as_str().unwrap(),
                    s["size"],
                    s["alloc_cycles"],
                    s["free_cycles"],
                    s["pair_cycles"],
                    s["bulk64_pair_cycles"]
                );
            }
        }
    })
}
