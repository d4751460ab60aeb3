//! `harness malloc-bench` (issue 18): the allocator workloads the field
//! uses (mimalloc-bench's set), written here from their published
//! descriptions, for slub-core's malloc on real CPUs (tid and sheaves
//! fronts, `libkmm_malloc.so` preloaded into a child), the `mimalloc` crate
//! and glibc (`System`), side by side in one run.
//!
//! Every (workload, allocator, threads) runs in a child process of its own
//! (this binary, one combination), so peak RSS (`VmHWM`) is that
//! allocator's alone. The child also reports the bytes the allocator still
//! holds once the workload has freed everything (its caching overhead: for
//! slub the slab pages, per-CPU arrays, sheaves and barn, from the
//! library; for the others the resident growth), and what a trim
//! (`malloc_trim`, which shrinks every cache on every CPU; `mi_collect`)
//! gives back. Every object carries a tag checked when it is freed, and
//! every workload counts its allocations against its frees: a lost,
//! duplicated or overwritten object fails the run.

use crate::cli::Common;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Server threads replacing random objects; arrays handed to other threads.
    Larson,
    /// Threads that only allocate feeding threads that only free.
    Xmalloc,
    /// Power-of-two sizes migrating between short-lived threads.
    Mstress,
    /// Passive false sharing: objects from one thread written by others.
    CacheScratch,
    /// Batches freed in LIFO and in reverse order.
    Sh6bench,
    /// Pareto sizes up to 1 KiB in a random working set.
    AllocTest,
    /// One thread: fixed-size blocks allocated then freed.
    GlibcSimple,
    /// Threads replacing random blocks of 1/x-distributed sizes.
    GlibcThread,
    /// Every workload.
    All,
}

const WORKLOADS: [Workload; 8] = [
    Workload::Larson,
    Workload::Xmalloc,
    Workload::Mstress,
    Workload::CacheScratch,
    Workload::Sh6bench,
    Workload::AllocTest,
    Workload::GlibcSimple,
    Workload::GlibcThread,
];

/// Allocators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Alloc {
    /// slub-core, tid front (libkmm_malloc.so preloaded).
    Slub,
    /// slub-core, sheaves front (libkmm_malloc.so preloaded).
    Sheaves,
    /// The mimalloc crate.
    Mimalloc,
    /// glibc malloc.
    System,
    /// Every allocator.
    All,
}

const ALLOCS: [Alloc; 4] = [Alloc::Slub, Alloc::Sheaves, Alloc::Mimalloc, Alloc::System];

/// `malloc-bench` flags.
#[derive(Args, Debug, Clone)]
pub struct MallocBenchArgs {
    /// Workload.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: Workload,
    /// Allocator.
    #[arg(long, value_enum, default_value = "all")]
    pub allocator: Alloc,
    /// Threads (default: 1, 2 and twice the CPUs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
    /// Work per thread, relative (1 = about 0.1 to 1 s a run here).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub scale: u64,
    /// Runs per combination (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub repeat: u64,
    /// The preloadable library (default: libkmm_malloc.so beside this binary).
    #[arg(long)]
    pub preload: Option<std::path::PathBuf>,
    /// Internal: run one combination in this process.
    #[arg(long, hide = true)]
    pub child: bool,
}

fn wname(w: Workload) -> &'static str {
    match w {
        Workload::Larson => "larson",
        Workload::Xmalloc => "xmalloc",
        Workload::Mstress => "mstress",
        Workload::CacheScratch => "cache-scratch",
        Workload::Sh6bench => "sh6bench",
        Workload::AllocTest => "alloc-test",
        Workload::GlibcSimple => "glibc-simple",
        Workload::GlibcThread => "glibc-thread",
        Workload::All => "all",
    }
}

fn aname(a: Alloc) -> &'static str {
    match a {
        Alloc::Slub => "slub",
        Alloc::Sheaves => "sheaves",
        Alloc::Mimalloc => "mimalloc",
        Alloc::System => "system",
        Alloc::All => "all",
    }
}

// ---- the allocator seen by the workloads --------------------------------

/// The allocator under test: glibc's (or the preloaded library's) malloc
/// through `System`, or the mimalloc crate.
#[derive(Clone, Copy)]
struct A {
    mi: bool,
    allocs: &'static AtomicU64,
    frees: &'static AtomicU64,
}

const TAG: u64 = 0x6b6d_6d5f_7461_6721;

impl A {
    #[inline(always)]
    fn alloc(&self, size: usize) -> *mut u8 {
        let l = Layout::from_size_align(size.max(8), 8).unwrap();
        // SAFETY: a non-zero size.
        let p = unsafe {
            if self.mi {
                mimalloc::MiMalloc.alloc(l)
            } else {
                System.alloc(l)
            }
        };
        assert!(!p.is_null(), "out of memory");
        // SAFETY: at least 8 bytes, 8-aligned.
        unsafe { (p as *mut u64).write(TAG ^ p as u64) };
        p
    }

    #[inline(always)]
    fn free(&self, p: *mut u8, size: usize) {
        // SAFETY: `p` came from `alloc(size)` and is live.
        unsafe {
            assert_eq!(
                (p as *const u64).read(),
                TAG ^ p as u64,
                "object {p:?} overwritten or handed out twice"
            );
            let l = Layout::from_size_align(size.max(8), 8).unwrap();
            if self.mi {
                mimalloc::MiMalloc.dealloc(p, l)
            } else {
                System.dealloc(p, l)
            }
        }
    }
}

/// Counts kept per run: allocations and frees (they must match).
struct Counts {
    allocs: AtomicU64,
    frees: AtomicU64,
}

static COUNTS: Counts = Counts {
    allocs: AtomicU64::new(0),
    frees: AtomicU64::new(0),
};

/// A small xorshift generator (one per thread).
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    #[inline(always)]
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    #[inline(always)]
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A block and its size (sent between threads).
#[derive(Clone, Copy)]
struct Blk(usize, usize);
// The pointers are plain addresses handed between threads on purpose.

fn count(a: &A, allocs: u64, frees: u64) {
    a.allocs.fetch_add(allocs, Ordering::Relaxed);
    a.frees.fetch_add(frees, Ordering::Relaxed);
}

// ---- the workloads ----------------------------------------------------------

/// larson: each thread serves an array of live blocks (8..1000 bytes),
/// replacing random ones; after each round the arrays change hands, so a
/// thread frees blocks another thread allocated (the server pattern).
fn larson(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
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
fn xmalloc(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
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
fn mstress(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
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
fn cache_scratch(a: &A, t: usize, scale: u64, _seed: u64) -> u64 {
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
fn sh6bench(a: &A, t: usize, scale: u64, _seed: u64) -> u64 {
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
fn alloc_test(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
    working_set(a, t, 400_000 * scale as usize, 5000, seed, pareto)
}

/// glibc-thread (glibc's bench-malloc-thread): each thread replaces random
/// blocks of a working set, sizes drawn with a 1/x distribution up to 32 KiB.
fn glibc_thread(a: &A, t: usize, scale: u64, seed: u64) -> u64 {
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
fn glibc_simple(a: &A, _t: usize, scale: u64, _seed: u64) -> u64 {
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

// ---- running ----------------------------------------------------------------

/// `VmHWM` and `VmRSS` of this process, bytes.
fn rss() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (get("VmHWM:"), get("VmRSS:"))
}

unsafe extern "C" {
    fn malloc_trim(pad: usize) -> i32;
    fn mi_collect(force: bool);
    fn dlsym(
        handle: *mut core::ffi::c_void,
        name: *const core::ffi::c_char,
    ) -> *mut core::ffi::c_void;
}

/// The preloaded library's held bytes, if it is loaded.
fn slub_held() -> Option<u64> {
    // SAFETY: RTLD_DEFAULT (null) lookup of a C function symbol.
    let f = unsafe { dlsym(std::ptr::null_mut(), c"kmm_malloc_held_bytes".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: the library's `extern "C" fn() -> usize`.
    let f: extern "C" fn() -> usize = unsafe { std::mem::transmute(f) };
    Some(f() as u64)
}

fn run_child(w: Workload, al: Alloc, t: usize, scale: u64, seed: u64) -> Value {
    let a = A {
        mi: al == Alloc::Mimalloc,
        allocs: &COUNTS.allocs,
        frees: &COUNTS.frees,
    };
    if matches!(al, Alloc::Slub | Alloc::Sheaves) && slub_held().is_none() {
        eprintln!("malloc-bench: libkmm_malloc.so is not preloaded in the child");
        std::process::exit(1);
    }
    let (_, rss0) = rss();
    let f = match w {
        Workload::Larson => larson,
        Workload::Xmalloc => xmalloc,
        Workload::Mstress => mstress,
        Workload::CacheScratch => cache_scratch,
        Workload::Sh6bench => sh6bench,
        Workload::AllocTest => alloc_test,
        Workload::GlibcSimple => glibc_simple,
        Workload::GlibcThread | Workload::All => glibc_thread,
    };
    let t0 = Instant::now();
    let ops = f(&a, t, scale, seed);
    let wall = t0.elapsed().as_nanos() as u64;
    let (hwm, rss1) = rss();
    let (allocs, frees) = (
        COUNTS.allocs.load(Ordering::Relaxed),
        COUNTS.frees.load(Ordering::Relaxed),
    );
    // With everything freed: what the allocator still holds, then after a
    // trim.
    let held0 = slub_held();
    // SAFETY: plain calls with no preconditions.
    unsafe {
        if a.mi {
            mi_collect(true);
        } else {
            malloc_trim(0);
        }
    }
    let held1 = slub_held();
    let (_, rss2) = rss();
    let cache = held0.unwrap_or(rss1.saturating_sub(rss0));
    let after = held1.unwrap_or(rss2.saturating_sub(rss0));
    json!({
        "workload": wname(w), "allocator": aname(al), "threads": t,
        "wall_ns": wall, "ops": ops,
        "ops_per_sec": ops as f64 * 1e9 / wall.max(1) as f64,
        "peak_rss_bytes": hwm,
        "allocs": allocs, "frees": frees, "all_accounted": allocs == frees,
        "cache_bytes": cache, "after_shrink_bytes": after,
        "shrink_freed_bytes": cache.saturating_sub(after),
    })
}

fn library(a: &MallocBenchArgs) -> Option<std::path::PathBuf> {
    let p = a.preload.clone().or_else(|| {
        let exe = std::env::current_exe().ok()?;
        Some(exe.parent()?.join("libkmm_malloc.so"))
    })?;
    p.exists().then_some(p)
}

fn spawn(
    a: &MallocBenchArgs,
    common: &Common,
    w: Workload,
    al: Alloc,
    t: usize,
) -> Result<Value, String> {
    let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.args(["malloc-bench", "--child", "--json"])
        .args(["--workload", wname(w), "--allocator", aname(al)])
        .args(["--threads", &t.to_string(), "--scale", &a.scale.to_string()])
        .args(["--seed", &common.seed.to_string()]);
    cmd.env_remove("LD_PRELOAD");
    if matches!(al, Alloc::Slub | Alloc::Sheaves) {
        let lib = library(a).ok_or(
            "libkmm_malloc.so not found: cargo build --release -p kmm-malloc, or --preload PATH",
        )?;
        cmd.env("LD_PRELOAD", lib).env(
            "KMM_SLUB_FRONT",
            if al == Alloc::Sheaves {
                "sheaves"
            } else {
                "tid"
            },
        );
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{} on {} at {t} threads failed ({}): {}",
            wname(w),
            aname(al),
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .take(3)
                .collect::<Vec<_>>()
                .join(" / ")
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

fn median_by(v: &mut [Value], key: &str) -> Value {
    v.sort_by(|a, b| {
        a[key]
            .as_f64()
            .unwrap_or(0.0)
            .partial_cmp(&b[key].as_f64().unwrap_or(0.0))
            .unwrap()
    });
    v[v.len() / 2][key].clone()
}

/// `malloc-bench`.
pub fn run(common: &Common, a: &MallocBenchArgs) -> i32 {
    let ws: Vec<Workload> = if a.workload == Workload::All {
        WORKLOADS.to_vec()
    } else {
        vec![a.workload]
    };
    let als: Vec<Alloc> = if a.allocator == Alloc::All {
        ALLOCS.to_vec()
    } else {
        vec![a.allocator]
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> = match a.threads {
        Some(t) => vec![t as usize],
        None => {
            let mut v = vec![1, 2, 2 * cpus];
            v.dedup();
            v
        }
    };
    if a.child {
        let v = run_child(ws[0], als[0], threads[0], a.scale, common.seed);
        println!("{v}");
        return 0;
    }
    let mut results = Vec::new();
    let mut failed = false;
    if !common.json {
        eprintln!(
            "{:<14} {:>3} {:<9} {:>10} {:>12} {:>11} {:>11} {:>11} {:>5}",
            "workload",
            "thr",
            "allocator",
            "wall_ms",
            "Mops/s",
            "peak_rss_kb",
            "cache_kb",
            "shrunk_kb",
            "ok"
        );
    }
    for &w in &ws {
        for &t in &threads {
            for &al in &als {
                let mut runs = Vec::new();
                for _ in 0..a.repeat {
                    match spawn(a, common, w, al, t) {
                        Ok(v) => runs.push(v),
                        Err(e) => {
                            eprintln!("malloc-bench: {e}");
                            failed = true;
                            break;
                        }
                    }
                }
                if runs.is_empty() {
                    continue;
                }
                let ok = runs.iter().all(|r| r["all_accounted"] == json!(true));
                failed |= !ok;
                let mut r = runs[0].clone();
                for k in [
                    "wall_ns",
                    "ops_per_sec",
                    "peak_rss_bytes",
                    "cache_bytes",
                    "after_shrink_bytes",
                    "shrink_freed_bytes",
                ] {
                    r[k] = median_by(&mut runs, k);
                }
                r["runs"] = json!(runs.len());
                if !common.json {
                    eprintln!(
                        "{:<14} {:>3} {:<9} {:>10.1} {:>12.2} {:>11} {:>11} {:>11} {:>5}",
                        wname(w),
                        t,
                        aname(al),
                        r["wall_ns"].as_f64().unwrap_or(0.0) / 1e6,
                        r["ops_per_sec"].as_f64().unwrap_or(0.0) / 1e6,
                        r["peak_rss_bytes"].as_u64().unwrap_or(0) / 1024,
                        r["cache_bytes"].as_u64().unwrap_or(0) / 1024,
                        r["shrink_freed_bytes"].as_u64().unwrap_or(0) / 1024,
                        if ok { "yes" } else { "NO" }
                    );
                }
                results.push(r);
            }
        }
    }
    if common.json {
        println!("{}", json!({ "results": results }));
    }
    i32::from(failed)
}
