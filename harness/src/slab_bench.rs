//! `harness slab-test`, `kmem-bench` and `slabinfo` (story 3): slub-core's
//! two fronts (tid and sheaves) against glibc malloc (`System`), the
//! `mimalloc` crate and the `slabmalloc` crate, side by side in one run.
//! Cycles come from `rdtsc` (x86_64) / `cntvct_el0` (aarch64); every figure
//! is the median of `REPEAT` runs.

use crate::cli::Common;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use slabmalloc::Allocator as _;
use slub_core::testing::HostedPlatform;
use slub_core::{
    CacheFlags, Kmalloc, KmemCache, RandomKmalloc, SystemPages, ThreadCpus, kmalloc_index,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::time::Instant;

mod percpu_nolock;
mod random_site;
mod remote_free;
mod slab_test;
mod slabinfo;

pub use slab_test::{SlabTestArgs, slab_test};
pub use slabinfo::{SlabinfoArgs, slabinfo};

const REPEAT: usize = 5;

/// Allocators compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// slub-core, tid fast path.
    Slub,
    /// slub-core, sheaves front.
    Sheaves,
    /// The mimalloc crate.
    Mimalloc,
    /// glibc malloc through `std::alloc::System`.
    System,
    /// The slabmalloc crate (single-threaded; no remote free).
    Slabmalloc,
    /// Every allocator.
    All,
}

const ALL: [Which; 5] = [
    Which::Slub,
    Which::Sheaves,
    Which::Mimalloc,
    Which::System,
    Which::Slabmalloc,
];

fn name(w: Which) -> &'static str {
    match w {
        Which::Slub => "slub",
        Which::Sheaves => "sheaves",
        Which::Mimalloc => "mimalloc",
        Which::System => "system",
        Which::Slabmalloc => "slabmalloc",
        Which::All => "all",
    }
}

/// `kmem-bench` flags.
#[derive(Args, Debug, Clone)]
pub struct KmemBenchArgs {
    /// Allocator.
    #[arg(long, value_enum, default_value = "all")]
    pub allocator: Which,
    /// Object size.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub object_size: u64,
    /// N of the N-pattern.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub n: u64,
    /// Loop count.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub loops: u64,
    /// Freeing threads for the remote-free test.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
}

/// One allocator behind a uniform, thread-safe-where-possible face.
trait Bench: Sync {
    fn alloc(&self, l: Layout) -> *mut u8;
    /// # Safety
    /// `p` from `alloc(l)`.
    unsafe fn free(&self, p: *mut u8, l: Layout);
    fn remote_ok(&self) -> bool {
        true
    }
    /// The slub-core cache serving `l` (bulk rows), if this is slub-core.
    fn cache(&self, l: Layout) -> Option<&SlubCache> {
        let _ = l;
        None
    }
    /// The slub-core kmalloc (randomised kmalloc rows), if this is slub-core.
    fn kmalloc(&self) -> Option<&SlubKmalloc> {
        None
    }
}

type SlubKmalloc = Kmalloc<HostedPlatform<&'static SystemPages, ThreadCpus>>;
type SlubRandom = RandomKmalloc<HostedPlatform<&'static SystemPages, ThreadCpus>>;

type SlubCache = KmemCache<HostedPlatform<&'static SystemPages, ThreadCpus>>;

/// Objects per bulk call in the bulk rows (the 64).
const BULK: usize = 64;

struct Slub(Kmalloc<HostedPlatform<&'static SystemPages, ThreadCpus>>);
impl Bench for Slub {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> *mut u8 {
        self.0.alloc(l).map_or(std::ptr::null_mut(), |p| p.as_ptr())
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller passes back what `alloc(l)` returned.
        if unsafe { self.0.free(NonNull::new_unchecked(p), l) }.is_err() {
            std::process::abort();
        }
    }
    fn cache(&self, l: Layout) -> Option<&SlubCache> {
        kmalloc_index(l.size(), l.align()).map(|i| &self.0.caches()[i])
    }
    fn kmalloc(&self) -> Option<&SlubKmalloc> {
        Some(&self.0)
    }
}

struct Sys<A: GlobalAlloc + Sync>(A);
impl<A: GlobalAlloc + Sync> Bench for Sys<A> {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: non-zero sizes only.
        unsafe { self.0.alloc(l) }
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract.
        unsafe { self.0.dealloc(p, l) }
    }
}

/// slabmalloc's zone allocator, refilled with pages from `System`. It takes
/// `&mut self`, so it is used from one thread only (no remote-free figure).
struct SlabM(UnsafeCell<slabmalloc::ZoneAllocator<'static>>);
// SAFETY: only ever used from the thread that created it (remote_ok false).
unsafe impl Sync for SlabM {}
impl Bench for SlabM {
    fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: single-threaded use (see the type).
        let z = unsafe { &mut *self.0.get() };
        loop {
            match z.allocate(l) {
                Ok(p) => return p.as_ptr(),
                Err(slabmalloc::AllocationError::OutOfMemory) => {
                    // SAFETY: fresh, aligned, zeroed pages of the right size,
                    // leaked to slabmalloc for the rest of the run.
                    unsafe {
                        if l.size() <= slabmalloc::ZoneAllocator::MAX_BASE_ALLOC_SIZE {
                            let p =
                                System.alloc_zeroed(Layout::from_size_align(4096, 4096).unwrap());
                            z.refill(l, &mut *(p as *mut slabmalloc::ObjectPage)).ok();
                        } else {
                            let p = System
                                .alloc_zeroed(Layout::from_size_align(2 << 20, 2 << 20).unwrap());
                            z.refill_large(l, &mut *(p as *mut slabmalloc::LargeObjectPage))
                                .ok();
                        }
                    }
                }
                Err(_) => return std::ptr::null_mut(),
            }
        }
    }
    unsafe fn free(&self, p: *mut u8, l: Layout) {
        // SAFETY: single-threaded; `p` came from `allocate(l)`.
        let _ = unsafe { &mut *self.0.get() }.deallocate(NonNull::new(p).unwrap(), l);
    }
    fn remote_ok(&self) -> bool {
        false
    }
}

fn make(w: Which) -> Box<dyn Bench> {
    let pages: &'static SystemPages = Box::leak(Box::new(SystemPages::new()));
    match w {
        Which::Slub => Box::new(Slub(
            Kmalloc::new(pages, ThreadCpus, CacheFlags::empty()).unwrap(),
        )),
        Which::Sheaves => Box::new(Slub(
            Kmalloc::new(pages, ThreadCpus, CacheFlags::SHEAVES).unwrap(),
        )),
        Which::Mimalloc => Box::new(Sys(mimalloc::MiMalloc)),
        Which::System | Which::All => Box::new(Sys(System)),
        Which::Slabmalloc => Box::new(SlabM(UnsafeCell::new(slabmalloc::ZoneAllocator::new()))),
    }
}

/// A cycle counter: `rdtsc` on x86_64, `cntvct_el0` on aarch64 (a fixed-
/// frequency counter, not core cycles), nanoseconds elsewhere.
#[inline(always)]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: reading the virtual counter is allowed at EL0 on Linux.
        unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) v) };
        return v;
    }
    #[allow(unreachable_code)]
    {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn list(w: Which) -> Vec<Which> {
    if w == Which::All {
        ALL.to_vec()
    } else {
        vec![w]
    }
}

fn emit(common: &Common, v: Value, table: impl FnOnce()) -> i32 {
    if common.json {
        println!("{v}");
    } else {
        table();
    }
    0
}

// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn fastpath_reuse(b: &dyn Bench, l: Layout, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = b.alloc(l);
        // SAFETY: allocated just above.
        unsafe { b.free(std::hint::black_box(p), l) };
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn n_pattern(b: &dyn Bench, l: Layout, n: usize, loops: usize) -> f64 {
    let mut ptrs = vec![std::ptr::null_mut(); n];
    let rounds = (loops / n).max(1);
    let t = Instant::now();
    for _ in 0..rounds {
        for p in ptrs.iter_mut() {
            *p = b.alloc(l);
        }
        for &p in &ptrs {
            // SAFETY: allocated above.
            unsafe { b.free(p, l) };
        }
    }
    t.elapsed().as_nanos() as f64 / (rounds * n) as f64
}

/// `n` objects with one `alloc_bulk`, then one `free_bulk`, on one cache;
/// ns per object (alloc + free).
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn bulk_pairs(c: &SlubCache, n: usize, loops: usize) -> f64 {
    let mut ptrs = vec![NonNull::<u8>::dangling(); n];
    let rounds = (loops / n).max(1);
    let t = Instant::now();
    for _ in 0..rounds {
        if c.alloc_bulk(&mut ptrs).is_err() {
            std::process::abort();
        }
        // SAFETY: allocated just above, freed once.
        if unsafe { c.free_bulk(std::hint::black_box(&ptrs)) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / (rounds * n) as f64
}

/// The same `n` objects one `alloc` / `free` at a time on the same cache
/// (the side-by-side baseline of [`bulk_pairs`]).
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn single_pairs(c: &SlubCache, n: usize, loops: usize) -> f64 {
    let mut ptrs = vec![NonNull::<u8>::dangling(); n];
    let rounds = (loops / n).max(1);
    let t = Instant::now();
    for _ in 0..rounds {
        for p in ptrs.iter_mut() {
            *p = c.alloc().unwrap_or_else(|_| std::process::abort());
        }
        for &p in std::hint::black_box(&ptrs) {
            // SAFETY: allocated above, freed once.
            if unsafe { c.free(p) }.is_err() {
                std::process::abort();
            }
        }
    }
    t.elapsed().as_nanos() as f64 / (rounds * n) as f64
}

/// `alloc_nolock` / `free_nolock` pairs on one cache (after a warm-up that
/// gives the CPU a slab); ns per pair.
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn nolock_pairs(c: &SlubCache, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = c.alloc_nolock().unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above, freed once.
        if unsafe { c.free_nolock(std::hint::black_box(p)) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

/// `alloc` / `free` pairs on the same cache: the baseline of
/// [`nolock_pairs`].
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn cache_pairs(c: &SlubCache, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = c.alloc().unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above, freed once.
        if unsafe { c.free(std::hint::black_box(p)) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

/// Plain `kmalloc` / `kfree` pairs, called directly (no `dyn`): the
/// baseline of [`kmalloc_rnd_pairs`]; ns per pair.
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn kmalloc_pairs(km: &SlubKmalloc, l: Layout, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let p = km.alloc(l).unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above, freed once.
        if unsafe { km.free(std::hint::black_box(p), l) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

/// The same pairs with the random kmalloc copies: the copy chosen by the
/// call site (`alloc_here`, a `Location` key) and freed with that key.
// Not inlined: callgrind's --toggle-collect names it.
#[inline(never)]
fn kmalloc_rnd_pairs(km: &SlubRandom, l: Layout, loops: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..loops {
        let (p, site) = km.alloc_here(l).unwrap_or_else(|_| std::process::abort());
        // SAFETY: allocated just above with `site`, freed once.
        if unsafe { km.free_caller(std::hint::black_box(p), l, site) }.is_err() {
            std::process::abort();
        }
    }
    t.elapsed().as_nanos() as f64 / loops as f64
}

/// Two dependent `cmpxchg16b` per iteration on one cell (the tid path's
/// floor: its alloc and its free), LOCKed and not; then the same without
/// LOCK but re-reading the pair from the cell before each CAS (`hi` then
/// `lo`, as the tid fast path must: its state may have changed since its
/// last CAS), which is the floor of any `(freelist, tid)` fast path.
fn dwcas_floor(loops: usize) -> (f64, f64, f64) {
    #[cfg(target_arch = "x86_64")]
    {
        use arch_api::{DoubleWord, DwCas, DwCell};
        use arch_x86_64::Cmpxchg16b;
        let run = |local: bool, reread: bool| {
            let cell = DwCell::new(DoubleWord::new(0, 0));
            let mut cur = DoubleWord::new(0, 0);
            let t = Instant::now();
            for _ in 0..loops {
                for _ in 0..2 {
                    if reread {
                        cur = std::hint::black_box(&cell).load();
                    }
                    let new = DoubleWord::new(cur.lo + 1, cur.hi + 1);
                    let r = if local {
                        Cmpxchg16b::compare_exchange_local(&cell, cur, new)
                    } else {
                        Cmpxchg16b::compare_exchange(&cell, cur, new)
                    };
                    cur = match r {
                        Ok(_) => new,
                        Err(seen) => seen,
                    };
                }
            }
            std::hint::black_box(cur);
            t.elapsed().as_nanos() as f64 / loops as f64
        };
        let (mut l, mut u, mut r) = (vec![], vec![], vec![]);
        for _ in 0..REPEAT {
            l.push(run(false, false));
            u.push(run(true, false));
            r.push(run(true, true));
        }
        (median(l), median(u), median(r))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = loops;
        (f64::NAN, f64::NAN, f64::NAN)
    }
}

/// `kmem-bench`: fastpath reuse, N-pattern, remote free; ns per object.
pub fn kmem_bench(common: &Common, a: &KmemBenchArgs) -> i32 {
    let l = Layout::from_size_align(a.object_size as usize, 8).unwrap();
    let (n, loops, threads) = (a.n as usize, a.loops as usize, a.threads as usize);
    let mut results = Vec::new();
    let benches: Vec<(Which, Box<dyn Bench>)> = list(a.allocator)
        .into_iter()
        .map(|w| (w, make(w)))
        .collect();
    for (_, b) in &benches {
        // Warm up (slabs, sheaves, thread caches).
        n_pattern(&**b, l, n, n * 4);
    }
    // The allocators take turns here (see `remote_free.rs`).
    let all: Vec<&dyn Bench> = benches.iter().map(|(_, b)| &**b).collect();
    let rfs = remote_free::remote_free_rounds(&all, l, n, loops, threads, REPEAT);
    for ((w, b), rf) in benches.iter().zip(rfs) {
        let (w, b) = (*w, &**b);
        let fr = median((0..REPEAT).map(|_| fastpath_reuse(b, l, loops)).collect());
        let np = median((0..REPEAT).map(|_| n_pattern(b, l, n, loops)).collect());
        // Bulk (64 per call) against one at a time, same cache, same run.
        let (bulk, single) = b.cache(l).map_or((None, None), |c| {
            bulk_pairs(c, BULK, BULK * 4);
            let mut bu = vec![];
            let mut si = vec![];
            for _ in 0..REPEAT {
                bu.push(bulk_pairs(c, BULK, loops));
                si.push(single_pairs(c, BULK, loops));
            }
            (Some(median(bu)), Some(median(si)))
        });
        // nolock pairs against the ordinary pair, same cache, same run.
        // A sheaves cache may have no CPU slab or partial slab for nolock
        // calls (its sheaves hold the objects): then the row is n/a.
        let nolock_ok = |c: &SlubCache| {
            // SAFETY: allocated just before, freed once.
            c.alloc_nolock()
                .is_ok_and(|p| unsafe { c.free_nolock(p) }.is_ok())
        };
        let (nolock, fast) = b
            .cache(l)
            .filter(|&c| nolock_ok(c))
            .map_or((None, None), |c| {
                cache_pairs(c, 1024);
                let mut no = vec![];
                let mut fa = vec![];
                for _ in 0..REPEAT {
                    no.push(nolock_pairs(c, loops));
                    fa.push(cache_pairs(c, loops));
                }
                (Some(median(no)), Some(median(fa)))
            });
        // The same on a backend that pins from any context (LinuxCpus):
        // there the sheaves serve nolock calls too.
        let percpu = b
            .cache(l)
            .map(|c| percpu_nolock::nolock_vs_ordinary(c.flags(), l.size(), loops, REPEAT));
        // kmalloc pairs with the random copies against without, same
        // front, same run.
        let (rnd, plain) = b.kmalloc().map_or((None, None), |km| {
            let flags = km.caches()[0].flags();
            let pages: &'static SystemPages = Box::leak(Box::new(SystemPages::new()));
            let rk = SlubRandom::new(pages, ThreadCpus, flags, cycles()).unwrap();
            let site = rk.site_here();
            kmalloc_pairs(km, l, 1024);
            kmalloc_rnd_pairs(&rk, l, 1024);
            random_site::kmalloc_site_pairs(site, l, 1024);
            let (mut on, mut off, mut at) = (vec![], vec![], vec![]);
            for _ in 0..REPEAT {
                on.push(kmalloc_rnd_pairs(&rk, l, loops));
                off.push(kmalloc_pairs(km, l, loops));
                at.push(random_site::kmalloc_site_pairs(site, l, loops));
            }
            (Some((median(on), median(at))), Some(median(off)))
        });
        let mut r = json!({"allocator": name(w), "fastpath_reuse_ns": fr, "n_pattern_ns": np,
            "remote_free_ns": rf.as_ref().map(|r| r.median.wall),
            "remote_free_producer_ns": rf.as_ref().map(|r| r.median.producer),
            "remote_free_consumer_ns": rf.as_ref().map(|r| r.median.consumer),
            "remote_free_runs_ns": rf.as_ref().map(|r| &r.walls),
            "bulk64_ns": bulk, "single64_ns": single,
            "bulk_ratio": bulk.zip(single).map(|(b, s)| b / s),
            "nolock_pair_ns": nolock, "cache_pair_ns": fast,
            "nolock_pair_linux_cpus_ns": percpu.map(|p| p.0),
            "cache_pair_linux_cpus_ns": percpu.map(|p| p.1),
            "kmalloc_rnd_pair_ns": rnd.map(|r| r.0), "kmalloc_site_pair_ns": rnd.map(|r| r.1),
            "kmalloc_pair_ns": plain});
        if rf.is_none() {
            r["note"] = json!("single-threaded allocator (&mut self): no remote free");
        }
        results.push(r);
    }
    let (locked, local, reread) = dwcas_floor(loops);
    let v = json!({"object_size": a.object_size, "n": n, "loops": loops, "threads": threads,
        "results": results,
        "dwcas_floor": {"two_lock_cmpxchg16b_ns": locked, "two_cmpxchg16b_ns": local,
            "two_cmpxchg16b_reread_ns": reread}});
    emit(common, v.clone(), || {
        println!(
            "{:<11} {:>18} {:>14} {:>16} {:>10} {:>11} {:>15} {:>14} {:>16} {:>20}",
            "allocator",
            "fastpath_reuse_ns",
            "n_pattern_ns",
            "remote_free_ns",
            "bulk64_ns",
            "single64_ns",
            "nolock_pair_ns",
            "cache_pair_ns",
            "kmalloc_pair_ns",
            "kmalloc_rnd_pair_ns"
        );
        let opt = |x: &Value| x.as_f64().map_or("n/a".into(), |x| format!("{x:.2}"));
        for r in v["results"].as_array().unwrap() {
            println!(
                "{:<11} {:>18.2} {:>14.2} {:>16} {:>10} {:>11} {:>15} {:>14} {:>16} {:>20}",
                r["allocator"].as_str().unwrap(),
                r["fastpath_reuse_ns"].as_f64().unwrap(),
                r["n_pattern_ns"].as_f64().unwrap(),
                opt(&r["remote_free_ns"]),
                opt(&r["bulk64_ns"]),
                opt(&r["single64_ns"]),
                opt(&r["nolock_pair_ns"]),
                opt(&r["cache_pair_ns"]),
                opt(&r["kmalloc_pair_ns"]),
                opt(&r["kmalloc_rnd_pair_ns"])
            );
        }
        println!(
            "floor: two dependent lock cmpxchg16b {locked:.2} ns, two cmpxchg16b {local:.2} ns, \
             two cmpxchg16b re-reading the pair {reread:.2} ns"
        );
    })
}
