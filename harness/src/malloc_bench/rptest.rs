//! rptest, written from the published description of rpmalloc's
//! benchmark: threads allocate and free blocks of random sizes within a
//! size range over several loops, and a configurable fraction of the blocks
//! each thread allocated is handed to another thread through a shared
//! array and freed there (cross-thread frees); the figure is operations per
//! second.
//!
//! Here each loop of a thread: free the blocks other threads handed it
//! (their cross-thread frees), allocate a batch, replace random blocks of
//! the batch (free + allocate), then hand [`Params::cross_per_mille`] of
//! the batch to the next thread's inbox and free the rest in allocation
//! order (`--cross-per-mille`, default 125 = 1/8). Sizes are log-uniform
//! in `min..=max` (small blocks favoured, as in programs); blocks left in
//! the inboxes when every thread is done are freed by the main thread.

use super::alloc::{A, Blk, Rng, count};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// `--cross-per-mille` of the child's command line.
pub(super) static CROSS_PER_MILLE: AtomicU64 = AtomicU64::new(125);

/// The knobs of one run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    /// Loops per thread.
    pub loops: usize,
    /// Blocks allocated at the start of each loop.
    pub batch: usize,
    /// Random replacements (a free and an allocation) per loop.
    pub replace: usize,
    /// Of each batch, the blocks (per mille) handed to another thread.
    pub cross_per_mille: u64,
    /// Smallest block, bytes.
    pub min: usize,
    /// Largest block, bytes.
    pub max: usize,
}

impl Params {
    /// `harness malloc-bench`'s run at `--scale scale` and
    /// `--cross-per-mille`.
    pub fn at_scale(scale: u64) -> Self {
        Self {
            loops: 20 * scale as usize,
            batch: 2000,
            replace: 4000,
            cross_per_mille: CROSS_PER_MILLE.load(Ordering::Relaxed),
            min: 16,
            max: 16000,
        }
    }
}

/// What a run did.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Outcome {
    /// Allocations plus frees.
    pub ops: u64,
    /// Blocks freed by a thread other than the one that allocated them.
    pub handed: u64,
}

/// A log-uniform size in `min..=max`.
fn size(r: &mut Rng, min: usize, max: usize) -> usize {
    let (lo, hi) = ((min as f64).ln(), (max as f64 + 1.0).ln());
    let u = r.below(1 << 20) as f64 / (1u64 << 20) as f64;
    ((lo + u * (hi - lo)).exp() as usize).clamp(min, max)
}

/// `harness malloc-bench --workload rptest`.
pub(super) fn rptest(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    run(a, t, seed, Params::at_scale(scale)).ops
}

/// One run of `t` threads.
pub(super) fn run(a: &A, t: usize, seed: u64, p: Params) -> Outcome {
    // Thread i hands its blocks to inbox (i + 1) % t.
    let inbox: Vec<Mutex<Vec<Blk>>> = (0..t).map(|_| Mutex::new(Vec::new())).collect();
    let handed: u64 = std::thread::scope(|s| {
        let threads: Vec<_> = (0..t)
            .map(|i| {
                let inbox = &inbox;
                s.spawn(move || {
                    let mut r = Rng::new(seed ^ (0x5151 + i as u64));
                    let mut live: Vec<Blk> = Vec::with_capacity(p.batch);
                    let mut out: Vec<Blk> = Vec::new();
                    let (mut al, mut fr, mut handed) = (0u64, 0u64, 0u64);
                    for _ in 0..p.loops {
                        // Blocks other threads allocated: freed here.
                        let got = std::mem::take(&mut *inbox[i].lock().unwrap());
                        for Blk(q, sz) in &got {
                            a.free(*q as *mut u8, *sz);
                        }
                        fr += got.len() as u64;
                        handed += got.len() as u64;
                        for _ in 0..p.batch {
                            let sz = size(&mut r, p.min, p.max);
                            live.push(Blk(a.alloc(sz) as usize, sz));
                        }
                        for _ in 0..p.replace {
                            let k = r.below(p.batch as u64) as usize;
                            let Blk(q, sz) = live[k];
                            a.free(q as *mut u8, sz);
                            let sz = size(&mut r, p.min, p.max);
                            live[k] = Blk(a.alloc(sz) as usize, sz);
                        }
                        al += (p.batch + p.replace) as u64;
                        fr += p.replace as u64;
                        for b in live.drain(..) {
                            if r.below(1000) < p.cross_per_mille {
                                out.push(b);
                            } else {
                                a.free(b.0 as *mut u8, b.1);
                                fr += 1;
                            }
                        }
                        inbox[(i + 1) % t].lock().unwrap().append(&mut out);
                    }
                    count(a, al, fr);
                    handed
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // What the last loops handed over after their receivers finished.
    let mut left = 0u64;
    for m in inbox {
        for Blk(q, sz) in m.into_inner().unwrap() {
            a.free(q as *mut u8, sz);
            left += 1;
        }
    }
    count(a, 0, left);
    let allocs = (t * p.loops * (p.batch + p.replace)) as u64;
    Outcome {
        ops: 2 * allocs,
        handed: handed + left,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn small(cross_per_mille: u64) -> Params {
        Params {
            loops: 6,
            batch: 200,
            replace: 300,
            cross_per_mille,
            min: 16,
            max: 16000,
        }
    }

    #[test]
    fn every_block_is_freed_once_and_the_cross_fraction_changes_hands() {
        static AL: AtomicU64 = AtomicU64::new(0);
        static FR: AtomicU64 = AtomicU64::new(0);
        let a = A {
            mi: false,
            allocs: &AL,
            frees: &FR,
        };
        let o = run(&a, 3, 7, small(250));
        let allocs = 3 * 6 * (200 + 300);
        assert_eq!(AL.load(Ordering::Relaxed), allocs);
        assert_eq!(FR.load(Ordering::Relaxed), allocs, "every block freed");
        assert_eq!(o.ops, 2 * allocs);
        // A quarter of each batch (3 × 6 × 200 blocks) changes hands.
        let expect = 3 * 6 * 200 / 4;
        assert!(
            o.handed > expect * 3 / 4 && o.handed < expect * 5 / 4,
            "{} handed, about {expect} expected",
            o.handed
        );
    }

    #[test]
    fn no_cross_rate_keeps_every_free_on_its_thread() {
        static AL: AtomicU64 = AtomicU64::new(0);
        static FR: AtomicU64 = AtomicU64::new(0);
        let a = A {
            mi: true,
            allocs: &AL,
            frees: &FR,
        };
        let o = run(&a, 2, 1, small(0));
        assert_eq!(o.handed, 0);
        assert_eq!(AL.load(Ordering::Relaxed), FR.load(Ordering::Relaxed));
    }

    #[test]
    fn sizes_stay_in_range_and_favour_small_blocks() {
        let mut r = Rng::new(3);
        let v: Vec<usize> = (0..10_000).map(|_| size(&mut r, 16, 16000)).collect();
        assert!(v.iter().all(|s| (16..=16000).contains(s)));
        let small = v.iter().filter(|&&s| s <= 1000).count();
        // log-uniform: ln(1000/16) / ln(16001/16) ≈ 60 % at or under 1000.
        assert!((5_000..7_000).contains(&small), "{small} of 10000");
    }
}
