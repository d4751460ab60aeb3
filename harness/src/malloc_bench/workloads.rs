//! The workloads of mimalloc-bench's set (all but rptest, which has its
//! own file), written from their published descriptions.

use super::alloc::{A, Blk, Rng, TAG, count};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// larson: each thread serves an array of live blocks (8..1000 bytes),
/// replacing random ones; after each round the arrays change hands, so a
/// thread frees blocks another thread allocated (the server pattern).
pub(super) fn larson(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    const SLOTS: usize = 1000;
    let rounds = 10;
    let per_round = 20_000 * scale as usize;
    let arrays: Vec<Mutex<Vec<Blk>>> = (0..t)
        .map(|i| {
            let mut r = Rng::new(seed + i as u64);
            Mutex::new(
                (0..SLOTS)
                    .map(|_| {
                        let s = 8 + r.below(993) as usize;
                        Blk(a.alloc(s) as usize, s)
                    })
                    .collect(),
            )
        })
        .collect();
    count(a, (t * SLOTS) as u64, 0);
    for round in 0..rounds {
        std::thread::scope(|s| {
            for i in 0..t {
                let arrays = &arrays;
                s.spawn(move || {
                    let mut r = Rng::new(seed ^ (round * 131 + i) as u64);
                    let mut arr = arrays[(i + round) % t].lock().unwrap();
                    for _ in 0..per_round {
                        let k = r.below(SLOTS as u64) as usize;
                        let Blk(p, sz) = arr[k];
                        a.free(p as *mut u8, sz);
                        let s = 8 + r.below(993) as usize;
                        arr[k] = Blk(a.alloc(s) as usize, s);
                    }
                    count(a, per_round as u64, per_round as u64);
                });
            }
        });
    }
    for m in arrays {
        for Blk(p, s) in m.into_inner().unwrap() {
            a.free(p as *mut u8, s);
        }
    }
    count(a, 0, (t * SLOTS) as u64);
    2 * (rounds * t * per_round) as u64
}

/// xmalloc-test: `t` threads only allocate (batches of 8..512-byte blocks)
/// and `t` threads only free what the allocators produced.
pub(super) fn xmalloc(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    const BATCH: usize = 256;
    let batches = 400 * scale as usize;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Blk>>(64);
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for i in 0..t {
            let tx = tx.clone();
            s.spawn(move || {
                let mut r = Rng::new(seed + i as u64);
                for _ in 0..batches {
                    let b: Vec<Blk> = (0..BATCH)
                        .map(|_| {
                            let s = 8 + r.below(505) as usize;
                            Blk(a.alloc(s) as usize, s)
                        })
                        .collect();
                    count(a, BATCH as u64, 0);
                    tx.send(b).unwrap();
                }
            });
        }
        drop(tx);
        for _ in 0..t {
            let rx = &rx;
            s.spawn(move || {
                loop {
                    let got = rx.lock().unwrap().recv();
                    let Ok(b) = got else { break };
                    for Blk(p, s) in &b {
                        a.free(*p as *mut u8, *s);
                    }
                    count(a, 0, b.len() as u64);
                }
            });
        }
    });
    2 * (t * batches * BATCH) as u64
}

/// mstress: generations of short-lived threads; each frees part of the
/// blocks left by the previous generation (power-of-two sizes 8..4096),
/// allocates new ones and leaves them to the next.
pub(super) fn mstress(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    let gens = 20;
    let per = 5_000 * scale as usize;
    let pool: Vec<Mutex<Vec<Blk>>> = (0..t).map(|_| Mutex::new(Vec::new())).collect();
    let ops = AtomicU64::new(0);
    for g in 0..gens {
        std::thread::scope(|s| {
            for i in 0..t {
                let (pool, ops) = (&pool, &ops);
                s.spawn(move || {
                    let mut r = Rng::new(seed ^ (g * 977 + i) as u64);
                    // The blocks of another thread of the last generation.
                    let mut mine = std::mem::take(&mut *pool[(i + 1) % t].lock().unwrap());
                    let (mut al, mut fr) = (0u64, 0u64);
                    for _ in 0..per {
                        if !mine.is_empty() && r.below(2) == 0 {
                            let k = r.below(mine.len() as u64) as usize;
                            let Blk(p, s) = mine.swap_remove(k);
                            a.free(p as *mut u8, s);
                            fr += 1;
                        } else {
                            let s = 8usize << r.below(10);
                            mine.push(Blk(a.alloc(s) as usize, s));
                            al += 1;
                        }
                    }
                    // Keep at most a few thousand for the next generation.
                    while mine.len() > 2000 {
                        let Blk(p, s) = mine.pop().unwrap();
                        a.free(p as *mut u8, s);
                        fr += 1;
                    }
                    count(a, al, fr);
                    ops.fetch_add(al + fr, Ordering::Relaxed);
                    pool[i].lock().unwrap().extend(mine);
                });
            }
        });
    }
    for m in pool {
        let v = m.into_inner().unwrap();
        count(a, 0, v.len() as u64);
        for Blk(p, s) in v {
            a.free(p as *mut u8, s);
        }
    }
    ops.into_inner()
}

/// cache-scratch: the main thread allocates one small block per thread and
/// hands it over; each thread frees it, then allocates, writes and frees
/// small blocks: an allocator that hands back the neighbour's cache line
/// (passive false sharing) makes the writes slow.
pub(super) fn cache_scratch(a: &A, t: usize, scale: u64, _seed: u64) -> u64 {
    let iters = 100_000 * scale as usize;
    let first: Vec<Blk> = (0..t).map(|_| Blk(a.alloc(8) as usize, 8)).collect();
    count(a, t as u64, 0);
    std::thread::scope(|s| {
        for b in first {
            s.spawn(move || {
                a.free(b.0 as *mut u8, b.1);
                for _ in 0..iters {
                    let p = a.alloc(8);
                    for k in 0..20u64 {
                        // SAFETY: our 8-byte block; the tag is rewritten below.
                        unsafe { std::ptr::write_volatile(p.add(4), k as u8) };
                    }
                    // SAFETY: as above: restore the tag the free checks.
                    unsafe { (p as *mut u64).write(TAG ^ p as u64) };
                    a.free(p, 8);
                }
                count(a, iters as u64, 1 + iters as u64);
            });
        }
    });
    2 * (t * iters) as u64
}

/// sh6bench-style: each thread allocates batches of blocks of sizes
/// cycling 1..1000 and frees each batch alternately in LIFO order and in
/// allocation (reverse-of-LIFO) order, keeping half a batch across rounds.
pub(super) fn sh6bench(a: &A, t: usize, scale: u64, _seed: u64) -> u64 {
    const BATCH: usize = 2000;
    let rounds = 30 * scale as usize;
    std::thread::scope(|s| {
        for _ in 0..t {
            s.spawn(move || {
                let mut kept: Vec<Blk> = Vec::new();
                let mut sz = 1usize;
                for round in 0..rounds {
                    let mut v: Vec<Blk> = (0..BATCH)
                        .map(|_| {
                            sz = sz % 1000 + 7;
                            Blk(a.alloc(sz) as usize, sz)
                        })
                        .collect();
                    let keep = v.split_off(BATCH / 2);
                    if round % 2 == 0 {
                        v.iter().rev().for_each(|b| a.free(b.0 as *mut u8, b.1));
                    } else {
                        v.iter().for_each(|b| a.free(b.0 as *mut u8, b.1));
                    }
                    kept.drain(..).for_each(|b| a.free(b.0 as *mut u8, b.1));
                    kept = keep;
                }
                kept.drain(..).for_each(|b| a.free(b.0 as *mut u8, b.1));
                count(a, (rounds * BATCH) as u64, (rounds * BATCH) as u64);
            });
        }
    });
    2 * (t * rounds * BATCH) as u64
}

/// A Pareto-distributed size (shape about 1.2) in 8..=1024.
fn pareto(r: &mut Rng) -> usize {
    let u = (r.below(1 << 20) + 1) as f64 / (1u64 << 20) as f64;
    ((8.0 / u.powf(1.0 / 1.2)) as usize).min(1024)
}

/// alloc-test: each thread keeps a working set of 5000 blocks with
/// Pareto sizes up to 1 KiB and replaces random ones.
pub(super) fn alloc_test(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    working_set(a, t, 400_000 * scale as usize, 5000, seed, pareto)
}

/// glibc-thread (glibc's bench-malloc-thread): each thread replaces random
/// blocks of a working set, sizes drawn with a 1/x distribution up to 32 KiB.
pub(super) fn glibc_thread(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    working_set(a, t, 400_000 * scale as usize, 1000, seed, |r| {
        // 1/x on [8, 32768]: exp of a uniform log.
        let lo = 8f64.ln();
        let hi = 32768f64.ln();
        let u = r.below(1 << 20) as f64 / (1u64 << 20) as f64;
        (lo + u * (hi - lo)).exp() as usize
    })
}

fn working_set(
    a: &A,
    t: usize,
    iters: usize,
    set: usize,
    seed: u64,
    size: fn(&mut Rng) -> usize,
) -> u64 {
    std::thread::scope(|s| {
        for i in 0..t {
            s.spawn(move || {
                let mut r = Rng::new(seed + i as u64);
                let mut v: Vec<Blk> = (0..set)
                    .map(|_| {
                        let s = size(&mut r);
                        Blk(a.alloc(s) as usize, s)
                    })
                    .collect();
                for _ in 0..iters {
                    let k = r.below(set as u64) as usize;
                    a.free(v[k].0 as *mut u8, v[k].1);
                    let s = size(&mut r);
                    v[k] = Blk(a.alloc(s) as usize, s);
                }
                v.drain(..).for_each(|b| a.free(b.0 as *mut u8, b.1));
                count(a, (iters + set) as u64, (iters + set) as u64);
            });
        }
    });
    2 * (t * iters) as u64
}

/// glibc-simple (glibc's bench-malloc-simple): one thread, blocks of 16,
/// 256 and 1024 bytes, 1000 allocated then all freed, many times.
pub(super) fn glibc_simple(a: &A, _t: usize, scale: u64, _seed: u64) -> u64 {
    let loops = 300 * scale as usize;
    let mut v = Vec::with_capacity(1000);
    let mut ops = 0u64;
    for &sz in &[16usize, 256, 1024] {
        for _ in 0..loops {
            for _ in 0..1000 {
                v.push(a.alloc(sz));
            }
            for p in v.drain(..) {
                a.free(p, sz);
            }
            ops += 2000;
        }
    }
    count(a, ops / 2, ops / 2);
    ops
}
