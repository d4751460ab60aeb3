//! kmem-bench's remote-free row: one thread allocates batches of `n`
//! objects, `threads` others free them (every free is a remote free).
//!
//! The batches travel through a spinning ring per consumer, not a blocking
//! channel. With `std::sync::mpsc::sync_channel` the row measured the
//! hand-off more than the allocator: whichever side was faster slept on a
//! futex once per batch, and the other paid the wake-up. The figure then
//! depended on which allocator ran first in the process (session 18,
//! BENCHMARKS.md): in one build the tid front measured 32 ns run first and
//! 71-85 ns run third, mimalloc 22 ns run third and 34-47 ns run first.
//! Here neither side enters the kernel while the other is running (after
//! `SPIN` polls a waiting side yields, so more threads than CPUs still make
//! progress), the batch buffers are allocated before the clock starts, each
//! thread is held on a CPU of its own when there are enough (two threads
//! the scheduler put on one CPU took turns, a time slice each), and
//! [`remote_free_rounds`] runs the allocators in turn, round after round,
//! in orders where each runs right after each other equally often.
//!
//! Besides the wall time per object, each side's own time is reported: the
//! consumers' time inside their batches of frees (the remote free itself)
//! and the producer's inside its batches of allocations.

use super::percpu_nolock::HoldCpu;
use super::{Bench, median};
use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

/// Batches in flight per consumer.
const SLOTS: usize = 4;
/// Polls before a waiting side yields its CPU.
const SPIN: u32 = 1 << 10;

/// A counter on a cache line of its own (the producer writes one, the
/// consumer the other).
#[repr(align(128))]
struct Line(AtomicUsize);

/// One consumer's ring: `SLOTS` batch buffers, batches produced and
/// consumed. The producer fills slot `k % SLOTS` only once batch
/// `k - SLOTS` is consumed, and the consumer reads it only once batch `k`
/// is produced, so each slot's lock is never contended: it is there so the
/// hand-over needs no `unsafe`.
struct Ring {
    produced: Line,
    consumed: Line,
    slots: [Mutex<Vec<usize>>; SLOTS],
}

impl Ring {
    fn new(n: usize) -> Self {
        Self {
            produced: Line(AtomicUsize::new(0)),
            consumed: Line(AtomicUsize::new(0)),
            slots: std::array::from_fn(|_| Mutex::new(Vec::with_capacity(n))),
        }
    }
}

/// Polls `ready` until it holds: spinning first, then yielding.
fn wait_for(ready: impl Fn() -> bool) {
    let mut polls = 0;
    while !ready() {
        if polls < SPIN {
            polls += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Frees `batch`. Out of line so that callgrind can count a remote free's
/// instructions: `--toggle-collect='*free_batch*'` (BENCHMARKS.md, session
/// 18).
///
/// # Safety
/// Every pointer came from `b.alloc(l)` and is freed only here.
#[inline(never)]
unsafe fn free_batch(b: &dyn Bench, batch: &[usize], l: Layout) {
    for &p in batch {
        // SAFETY: the caller's contract.
        unsafe { b.free(p as *mut u8, l) };
    }
}

/// One run's figures, ns per object.
#[derive(Clone, Copy, Debug)]
pub(super) struct RemoteFree {
    /// From the producer's first allocation to the last consumer's last free.
    pub wall: f64,
    /// The producer's time filling batches.
    pub producer: f64,
    /// The consumers' time emptying batches (summed over consumers).
    pub consumer: f64,
}

/// One run.
pub(super) fn remote_free(
    b: &dyn Bench,
    l: Layout,
    n: usize,
    loops: usize,
    threads: usize,
) -> RemoteFree {
    let batches = (loops / n).max(threads);
    let rings: Vec<Ring> = (0..threads).map(|_| Ring::new(n)).collect();
    let start = Barrier::new(threads + 1);
    let consumer_ns = AtomicUsize::new(0);
    // A CPU each, if there are enough of them.
    let cpus = HoldCpu::allowed();
    let cpu_of = |k: usize| (cpus.len() > threads).then(|| cpus[k]);
    let mut t = Instant::now();
    let mut producer_ns = 0;
    std::thread::scope(|s| {
        for (j, ring) in rings.iter().enumerate() {
            let (start, consumer_ns) = (&start, &consumer_ns);
            let cpu = cpu_of(1 + j);
            // Batch i goes to consumer i % threads: this one gets these.
            let mine = (batches - j).div_ceil(threads);
            s.spawn(move || {
                let _held = cpu.map(HoldCpu::on);
                let mut busy = 0;
                start.wait();
                for k in 0..mine {
                    wait_for(|| ring.produced.0.load(Ordering::Acquire) > k);
                    let t0 = Instant::now();
                    let mut batch = ring.slots[k % SLOTS].lock().unwrap();
                    // SAFETY: allocated by the producer with `l` and handed
                    // to this consumer only.
                    unsafe { free_batch(b, &batch, l) };
                    batch.clear();
                    drop(batch);
                    ring.consumed.0.store(k + 1, Ordering::Release);
                    busy += t0.elapsed().as_nanos() as usize;
                }
                consumer_ns.fetch_add(busy, Ordering::Relaxed);
            });
        }
        let _held = cpu_of(0).map(HoldCpu::on);
        start.wait();
        t = Instant::now();
        for i in 0..batches {
            let ring = &rings[i % threads];
            let k = i / threads;
            wait_for(|| k - ring.consumed.0.load(Ordering::Acquire) < SLOTS);
            let t0 = Instant::now();
            let mut batch = ring.slots[k % SLOTS].lock().unwrap();
            batch.extend((0..n).map(|_| b.alloc(l) as usize));
            drop(batch);
            ring.produced.0.store(k + 1, Ordering::Release);
            producer_ns += t0.elapsed().as_nanos() as usize;
        }
    });
    let objects = (batches * n) as f64;
    RemoteFree {
        wall: t.elapsed().as_nanos() as f64 / objects,
        producer: producer_ns as f64 / objects,
        consumer: consumer_ns.load(Ordering::Relaxed) as f64 / objects,
    }
}

/// Round `r`'s order of `m` allocators: row `r` of a Williams square
/// (for odd `m`, each row followed by its reverse), in which every
/// allocator runs right after every other equally often over [`rows`]
/// rounds. A fixed rotation (round `r` starts at allocator `r`) keeps the
/// cycle: with slub, sheaves, mimalloc and glibc, slub ran right after
/// glibc (whose remote frees take 110-300 ns) in three rounds of five,
/// mimalloc in none (BENCHMARKS.md, session 28). No predecessor effect
/// was seen in the runs logged since, but the orders no longer allow one.
fn round_order(m: usize, r: usize) -> Vec<usize> {
    if m == 0 {
        return Vec::new();
    }
    // 0, 1, m-1, 2, m-2, …: consecutive differences are all distinct mod m.
    let first = (0..m).map(|j| {
        if j % 2 == 1 {
            j.div_ceil(2)
        } else {
            (m - j / 2) % m
        }
    });
    let row = (r / (rows(m) / m)) % m;
    let mut order: Vec<usize> = first.map(|x| (x + row) % m).collect();
    if m % 2 == 1 && r % 2 == 1 {
        order.reverse();
    }
    order
}

/// Rounds in a full Williams square of `m` allocators.
fn rows(m: usize) -> usize {
    if m % 2 == 0 { m } else { 2 * m }
}

/// One allocator's rounds: the medians, and every run's wall time in the
/// order run (JSON `remote_free_runs_ns`, so that a reader sees the spread
/// the median hides).
#[derive(Clone, Debug)]
pub(super) struct Rounds {
    pub median: RemoteFree,
    pub walls: Vec<f64>,
}

/// The medians of at least `repeat` runs of each allocator that can free
/// remotely, a whole number of Williams squares ([`round_order`]), so that
/// which allocator ran before favours none. `None` where an allocator
/// cannot.
pub(super) fn remote_free_rounds(
    benches: &[&dyn Bench],
    l: Layout,
    n: usize,
    loops: usize,
    threads: usize,
    repeat: usize,
) -> Vec<Option<Rounds>> {
    let mut runs: Vec<Vec<RemoteFree>> = vec![Vec::new(); benches.len()];
    let able: Vec<usize> = (0..benches.len())
        .filter(|&i| benches[i].remote_ok())
        .collect();
    let m = able.len().max(1);
    for r in 0..repeat.div_ceil(rows(m)) * rows(m) {
        for k in round_order(able.len(), r) {
            let i = able[k];
            runs[i].push(remote_free(benches[i], l, n, loops, threads));
        }
    }
    runs.into_iter()
        .map(|v| {
            let m = |f: fn(&RemoteFree) -> f64| median(v.iter().map(f).collect());
            (!v.is_empty()).then(|| Rounds {
                median: RemoteFree {
                    wall: m(|r| r.wall),
                    producer: m(|r| r.producer),
                    consumer: m(|r| r.consumer),
                },
                walls: v.iter().map(|r| r.wall).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicIsize;

    /// Counts live objects: every allocation is freed exactly once, by
    /// some consumer, whatever the number of threads.
    struct Counting(AtomicIsize, AtomicUsize);
    impl Bench for Counting {
        fn alloc(&self, l: Layout) -> *mut u8 {
            self.0.fetch_add(1, Ordering::Relaxed);
            self.1.fetch_add(1, Ordering::Relaxed);
            // SAFETY: non-zero size.
            unsafe { std::alloc::alloc(l) }
        }
        unsafe fn free(&self, p: *mut u8, l: Layout) {
            self.0.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: from `alloc(l)` above, freed once (the caller's
            // contract).
            unsafe { std::alloc::dealloc(p, l) }
        }
    }

    #[test]
    fn every_object_is_freed_once() {
        let l = Layout::from_size_align(64, 8).unwrap();
        for threads in [1, 3] {
            let c = Counting(AtomicIsize::new(0), AtomicUsize::new(0));
            let r = remote_free(&c, l, 16, 1000, threads);
            assert!(r.wall > 0.0 && r.producer > 0.0 && r.consumer > 0.0);
            assert_eq!(c.0.load(Ordering::Relaxed), 0, "{threads} consumers");
            // 1000 / 16 = 62 batches of 16.
            assert_eq!(c.1.load(Ordering::Relaxed), 62 * 16);
        }
    }

    #[test]
    fn each_allocator_follows_each_other_equally_often() {
        for m in 1..=6 {
            let mut after = vec![vec![0; m]; m];
            for r in 0..rows(m) {
                let o = round_order(m, r);
                let mut seen = o.clone();
                seen.sort();
                assert_eq!(seen, (0..m).collect::<Vec<_>>(), "m {m} round {r}");
                for w in o.windows(2) {
                    after[w[1]][w[0]] += 1;
                }
            }
            let per = if m % 2 == 0 { 1 } else { 2 };
            for (a, row) in after.iter().enumerate() {
                for (b, &c) in row.iter().enumerate() {
                    assert_eq!(c, if a == b { 0 } else { per }, "m {m}: {a} after {b}");
                }
            }
        }
    }

    #[test]
    fn rounds_give_one_median_per_allocator() {
        let l = Layout::from_size_align(64, 8).unwrap();
        let a = Counting(AtomicIsize::new(0), AtomicUsize::new(0));
        let b = Counting(AtomicIsize::new(0), AtomicUsize::new(0));
        let m = remote_free_rounds(&[&a, &b], l, 8, 64, 2, 3);
        assert!(m.iter().all(|x| {
            x.as_ref()
                .is_some_and(|x| x.median.wall > 0.0 && x.walls.len() == 4)
        }));
        // 3 rounds rounded up to a whole square of two (4), of 8 batches
        // of 8, each.
        assert_eq!(a.1.load(Ordering::Relaxed), 4 * 64);
        assert_eq!(b.1.load(Ordering::Relaxed), 4 * 64);
        assert_eq!(a.0.load(Ordering::Relaxed) + b.0.load(Ordering::Relaxed), 0);
    }
}
