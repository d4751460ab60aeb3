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

mod alloc;
mod rptest;
mod workloads;

use crate::cli::Common;
use alloc::{A, COUNTS};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Instant;
use workloads::*;

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
    /// rpmalloc's benchmark: random sizes, a fraction freed by another thread.
    Rptest,
    /// Every workload.
    All,
}

const WORKLOADS: [Workload; 9] = [
    Workload::Larson,
    Workload::Xmalloc,
    Workload::Mstress,
    Workload::CacheScratch,
    Workload::Sh6bench,
    Workload::AllocTest,
    Workload::GlibcSimple,
    Workload::GlibcThread,
    Workload::Rptest,
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
    /// rptest: of each batch, the blocks (per mille) handed to another
    /// thread and freed there.
    #[arg(long, default_value_t = 125, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub cross_per_mille: u64,
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
        Workload::Rptest => "rptest",
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
        Workload::Rptest => rptest::rptest,
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
        .args(["--seed", &common.seed.to_string()])
        .args(["--cross-per-mille", &a.cross_per_mille.to_string()]);
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
        rptest::CROSS_PER_MILLE.store(a.cross_per_mille, Ordering::Relaxed);
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
