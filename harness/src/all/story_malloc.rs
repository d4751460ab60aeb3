//! Issue 18's allocator workloads in `harness all`: `malloc-bench` at 1 and
//! 2 threads (every workload; slub-core's tid and sheaves fronts through
//! the preloaded `libkmm_malloc.so`, the mimalloc crate and glibc, side by
//! side), one table of times, one of memory (peak RSS, the bytes each
//! allocator still holds once the workload freed everything, what a shrink
//! gives back), the target ratios and a chart of time and peak RSS
//! against mimalloc's. Without the library the two fronts are skipped with
//! a line saying how to build it; mimalloc and glibc still run.

use super::plan::MALLOC_THREADS as THREADS;
use super::runner::RunResult;
use super::table::{Chart, Panel, Series, Story, Table, fmt_count, fmt_ratio, num, ratio};
use serde_json::Value;
use std::path::PathBuf;

/// Allocators in table and legend order (malloc-bench's names).
const ALLOCATORS: [&str; 4] = ["slub", "sheaves", "mimalloc", "system"];

/// Workloads in table order (malloc-bench's names).
const WORKLOADS: [&str; 9] = [
    "larson",
    "xmalloc",
    "mstress",
    "cache-scratch",
    "sh6bench",
    "alloc-test",
    "glibc-simple",
    "glibc-thread",
    "rptest",
];

/// Short names for the chart's category axis (the table has the full ones).
const SHORT: [&str; 9] = [
    "larson", "xmalloc", "mstress", "scratch", "sh6", "alloc", "g-simple", "g-thread", "rptest",
];

/// The preloadable library where `malloc-bench` looks for it by default:
/// beside this binary (`cargo build --release -p kmm-malloc` puts it
/// there); `Err` says where it was looked for and how to build it.
pub fn preload() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let lib = exe
        .parent()
        .map(|d| d.join("libkmm_malloc.so"))
        .ok_or("this binary has no directory")?;
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(format!(
            "{} not found (build it: cargo build --release -p kmm-malloc, with the same target directory as this harness)",
            lib.display()
        ))
    }
}

/// Every malloc-bench row of the run.
fn rows(rs: &[RunResult]) -> Vec<Value> {
    rs.iter()
        .filter(|r| r.workload == "malloc-bench")
        .flat_map(|r| {
            r.json
                .get("results")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// `x / y` as `"0.52× (tid)"`: the better front and its ratio.
type Best = Option<(f64, &'static str)>;

fn fmt_best(b: Best) -> String {
    b.map_or("n/a".into(), |(r, f)| {
        format!("{} ({f})", fmt_ratio(Some(r)))
    })
}

fn kib(b: Option<f64>) -> String {
    fmt_count(b.map(|b| (b / 1024.0).round()))
}

fn ms(ns: Option<f64>) -> String {
    ns.map_or("n/a".into(), |ns| format!("{:.1}", ns / 1e6))
}

fn geomean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

/// The story.
pub fn story(rs: &[RunResult], preload: &Result<PathBuf, String>) -> Story {
    let rows = rows(rs);
    let cell = |w: &str, t: u32, a: &str, k: &str| {
        rows.iter()
            .find(|x| x["workload"] == w && x["threads"] == t && x["allocator"] == a)
            .and_then(|x| num(x, k))
    };
    // The better front by `k` and its ratio to mimalloc's.
    let best = |w: &str, t: u32, k: &str| -> Best {
        let mi = cell(w, t, "mimalloc", k);
        [("slub", "tid"), ("sheaves", "sheaves")]
            .into_iter()
            .filter_map(|(a, label)| Some((ratio(cell(w, t, a, k), mi)?, label)))
            .min_by(|x, y| x.0.total_cmp(&y.0))
    };
    let first = rs.iter().find(|r| r.workload == "malloc-bench");
    let flag = |f| first.and_then(|r| r.arg(f)).unwrap_or("?");
    let mut time = Table::new(
        format!(
            "malloc-bench --scale {}: ms per run (median of {}), ratios to mimalloc's; best front = the faster of tid and sheaves (target ≤ 1.25×)",
            flag("--scale"),
            flag("--repeat")
        ),
        &[
            "workload",
            "threads",
            "tid ms",
            "sheaves ms",
            "mimalloc ms",
            "system ms",
            "tid / mimalloc",
            "sheaves / mimalloc",
            "system / mimalloc",
            "best front / mimalloc",
        ],
    );
    let mut mem = Table::new(
        "malloc-bench memory, KiB (medians): peak RSS, bytes held once the workload freed everything, what a shrink gives back; best front = the smaller of tid and sheaves",
        &[
            "workload",
            "threads",
            "peak RSS: tid",
            "sheaves",
            "mimalloc",
            "system",
            "best front / mimalloc (target ≤ 1.5×)",
            "held after: tid",
            "sheaves",
            "mimalloc*",
            "system*",
            "shrink gives back: tid / sheaves",
            "all accounted",
        ],
    );
    let (mut worst_t, mut worst_r) = (None::<f64>, None::<f64>);
    let (mut met_t, mut met_r, mut n) = (0, 0, 0);
    let (mut best_times, mut held_ratio) = (Vec::new(), Vec::new());
    for w in WORKLOADS {
        for t in THREADS {
            if !ALLOCATORS
                .iter()
                .any(|a| cell(w, t, a, "wall_ns").is_some())
            {
                continue;
            }
            let wall = |a| cell(w, t, a, "wall_ns");
            let vs_mi = |a| fmt_ratio(ratio(wall(a), wall("mimalloc")));
            let bt = best(w, t, "wall_ns");
            time.row(vec![
                w.into(),
                t.to_string(),
                ms(wall("slub")),
                ms(wall("sheaves")),
                ms(wall("mimalloc")),
                ms(wall("system")),
                vs_mi("slub"),
                vs_mi("sheaves"),
                vs_mi("system"),
                fmt_best(bt),
            ]);
            let br = best(w, t, "peak_rss_bytes");
            let m = |a, k| kib(cell(w, t, a, k));
            let accounted: Vec<&str> = ALLOCATORS
                .iter()
                .filter(|a| {
                    rows.iter().any(|x| {
                        x["workload"] == w
                            && x["threads"] == t
                            && x["allocator"] == **a
                            && x["all_accounted"] != true
                    })
                })
                .copied()
                .collect();
            mem.row(vec![
                w.into(),
                t.to_string(),
                m("slub", "peak_rss_bytes"),
                m("sheaves", "peak_rss_bytes"),
                m("mimalloc", "peak_rss_bytes"),
                m("system", "peak_rss_bytes"),
                fmt_best(br),
                m("slub", "cache_bytes"),
                m("sheaves", "cache_bytes"),
                m("mimalloc", "cache_bytes"),
                m("system", "cache_bytes"),
                format!(
                    "{} / {}",
                    m("slub", "shrink_freed_bytes"),
                    m("sheaves", "shrink_freed_bytes")
                ),
                if accounted.is_empty() {
                    "yes".into()
                } else {
                    format!("NO: {}", accounted.join(", "))
                },
            ]);
            if let (Some((rt, _)), Some((rr, _))) = (bt, br) {
                n += 1;
                met_t += usize::from(rt <= 1.25);
                met_r += usize::from(rr <= 1.5);
                worst_t = Some(worst_t.map_or(rt, |x| x.max(rt)));
                worst_r = Some(worst_r.map_or(rr, |x| x.max(rr)));
                best_times.push(rt);
            }
            if let Some(r) = ratio(
                cell(w, t, "sheaves", "cache_bytes"),
                cell(w, t, "slub", "cache_bytes"),
            )
            .filter(|r| *r > 0.0)
            {
                held_ratio.push(r);
            }
        }
    }
    let ratios = vec![
        (
            "best front / mimalloc time, worst row at 1-2 threads (target ≤ 1.25×)".to_string(),
            worst_t,
        ),
        (
            "best front / mimalloc time, geometric mean of the rows".to_string(),
            geomean(&best_times),
        ),
        (
            "best front / mimalloc peak RSS, worst row (target ≤ 1.5×)".to_string(),
            worst_r,
        ),
        (
            "sheaves / tid bytes held after a workload, geometric mean (the cost of sheaves and the barn)".to_string(),
            geomean(&held_ratio),
        ),
    ];
    let mut notes = vec![
        "Each (workload, allocator, threads) runs in a child process of its own, so peak RSS is that allocator's alone; tid and sheaves are libkmm_malloc.so preloaded with KMM_SLUB_FRONT=tid|sheaves, mimalloc is the crate, system is glibc. Every object is tagged and checked at its free; allocations must equal frees.".to_string(),
        "Peak RSS is the child's VmHWM. Held after = the per-CPU caching overhead: bytes the allocator still holds once the workload freed everything (tid and sheaves: slab pages, per-CPU slabs and partial lists, sheaves and the barn, from the library's own count; * mimalloc and system: resident growth over the run). Shrink gives back = what malloc_trim(0) returns (for tid and sheaves it shrinks every cache on every CPU).".to_string(),
        "Wall times on a shared 2-core machine drift by 2× and more between runs: compare within a row, and rerun `harness malloc-bench` with a larger --repeat for figures to quote.".to_string(),
    ];
    if n > 0 {
        notes.push(format!(
            "Targets met on this run: time on {met_t} of {n} rows, peak RSS on {met_r} of {n}."
        ));
    }
    match preload {
        Err(why) => notes.insert(
            0,
            format!("skipped: slub (tid) and sheaves: {why}; mimalloc and system ran."),
        ),
        Ok(_) if rows.is_empty() => notes.insert(0, "skipped: no malloc-bench run.".to_string()),
        Ok(_) => {}
    }
    let present: Vec<(&str, &str)> = [
        ("slub", "tid"),
        ("sheaves", "sheaves"),
        ("system", "system"),
    ]
    .into_iter()
    .filter(|(a, _)| rows.iter().any(|x| x["allocator"] == *a))
    .collect();
    let panel = |t: u32, k: &str, what: &str| Panel {
        caption: format!("{what}, {t} thread{}", if t == 1 { "" } else { "s" }),
        categories: SHORT.iter().map(|s| s.to_string()).collect(),
        x_label: "workload".into(),
        y_label: format!("{what} / mimalloc's (log scale; 1 = mimalloc)"),
        log_x: false,
        log_y: true,
        series: present
            .iter()
            .map(|(a, label)| Series {
                name: (*label).into(),
                dashed: false,
                // Palette slots by allocator, so a skipped front keeps the
                // others' colours.
                color: ALLOCATORS.iter().position(|x| x == a),
                points: WORKLOADS
                    .iter()
                    .enumerate()
                    .filter_map(|(i, w)| {
                        Some((
                            i as f64,
                            ratio(cell(w, t, a, k), cell(w, t, "mimalloc", k))?,
                        ))
                    })
                    .collect(),
            })
            .collect(),
    };
    let chart = Chart {
        file: "malloc_bench.svg".into(),
        title: "malloc-bench: time and peak RSS relative to mimalloc's".into(),
        panels: vec![
            panel(1, "wall_ns", "time"),
            panel(2, "wall_ns", "time"),
            panel(2, "peak_rss_bytes", "peak RSS"),
        ],
    };
    Story {
        id: "malloc",
        title: "Issue 18: the field's allocator workloads (malloc-bench)".into(),
        seed: vec![
            "mimalloc-bench's workloads (larson, xmalloc-test, mstress, cache-scratch, sh6bench, alloc-test, glibc-simple, glibc-thread, rptest), written from their published descriptions; allocators are judged by time and memory.".into(),
            "Linux's sheaves as the default for every cache: −1 % to −11 % on some workloads; sheaves lose per-CPU partial slabs' spatial locality and raise fragmentation (Lameter, 2026).".into(),
        ],
        tables: vec![time, mem],
        ratios,
        notes,
        charts: if rows.is_empty() { vec![] } else { vec![chart] },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::all::plan::malloc_steps;
    use serde_json::json;

    fn run(rows: Vec<Value>) -> RunResult {
        RunResult {
            workload: "malloc-bench",
            args: vec![],
            command: "harness --json malloc-bench".into(),
            status: Some(0),
            wall_ns: 0,
            json: json!({ "results": rows }),
            error: None,
        }
    }

    fn row(a: &str, t: u32, wall: f64, rss: f64, held: f64) -> Value {
        json!({"workload": "larson", "allocator": a, "threads": t, "wall_ns": wall,
               "peak_rss_bytes": rss, "cache_bytes": held, "shrink_freed_bytes": held / 2.0,
               "all_accounted": true})
    }

    #[test]
    fn best_front_ratios_and_held_bytes_come_from_the_rows() {
        let rs = [run(vec![
            row("slub", 1, 30e6, 2048.0 * 1024.0, 1024.0 * 1024.0),
            row("sheaves", 1, 20e6, 4096.0 * 1024.0, 4096.0 * 1024.0),
            row("mimalloc", 1, 10e6, 1024.0 * 1024.0, 2048.0),
            row("system", 1, 40e6, 1024.0 * 1024.0, 0.0),
        ])];
        let s = story(&rs, &Ok(PathBuf::from("lib.so")));
        assert_eq!(s.tables[0].rows.len(), 1, "one (workload, threads) row");
        let t = &s.tables[0].rows[0];
        assert_eq!(t[2], "30.0");
        assert_eq!(t[9], "2.00× (sheaves)", "the faster front");
        let m = &s.tables[1].rows[0];
        assert_eq!(m[2], "2,048");
        assert_eq!(m[6], "2.00× (tid)", "the smaller front");
        assert_eq!(m[11], "512 / 2,048");
        assert_eq!(m[12], "yes");
        assert_eq!(s.ratios[0].1, Some(2.0));
        assert_eq!(s.ratios[3].1, Some(4.0), "sheaves hold 4× tid's bytes");
        assert_eq!(s.charts.len(), 1);
        assert!(!s.notes[0].starts_with("skipped"));
    }

    #[test]
    fn a_missing_library_skips_the_fronts_with_one_line_and_plans_peers_only() {
        let s = story(
            &[run(vec![row("mimalloc", 1, 10e6, 1e6, 0.0)])],
            &Err("x/libkmm_malloc.so not found".into()),
        );
        assert!(s.notes[0].starts_with("skipped: slub (tid) and sheaves"));
        assert_eq!(s.tables[0].rows[0][2], "n/a");
        let steps = malloc_steps(true, false);
        assert_eq!(steps.len(), 4);
        assert!(steps.iter().all(|s| s.args.contains(&"--allocator".into())));
        assert_eq!(malloc_steps(false, true).len(), THREADS.len());
        let none = story(&[], &Ok(PathBuf::new()));
        assert!(none.notes[0].starts_with("skipped") && none.charts.is_empty());
    }
}
