//! The vmalloc stories: 1 (lazy purge made vmalloc 10x slower, 2010),
//! 4 (the global vmap lock, 2024), 5 (one search on vfree, 2022), and the
//! vmap-core allocator against its peers. Each builds its tables, ratios
//! and chart from the children's JSON; the story's own figures are SPEC.md's.

use super::plan;
use super::runner::RunResult;
use super::table::{Chart, Panel, Series, Story, Table, fmt_count, fmt_ns, fmt_ratio, num, ratio};
use serde_json::Value;

fn of<'r>(rs: &'r [RunResult], w: &str) -> impl Iterator<Item = &'r RunResult> {
    rs.iter().filter(move |r| r.workload == w)
}

/// Story 1's figures for a policy: (seconds for 1M loops on 8 cores, nodes
/// visited per lookup), where the story gives them.
fn story1_seed(policy: &str) -> (&'static str, &'static str) {
    match policy {
        "vanilla" => ("~150 s (150 µs/iter)", "≈5535"),
        "eager" => ("~15 s (15 µs/iter)", "62"),
        "free-area-cache" => ("5.1–5.4 s (≈5.2 µs/iter)", "8"),
        "lookup-cost" => ("6.1 / 7.8 s (N=100 / 200)", "≤ N"),
        _ => ("— (later Linux; not in the story)", "—"),
    }
}

/// Story 1: `vmalloc-loop`, every policy in one run.
pub fn story1(rs: &[RunResult]) -> Story {
    let runs: Vec<Value> = of(rs, "vmalloc-loop")
        .filter_map(|r| r.json.get("runs").and_then(Value::as_array).cloned())
        .flatten()
        .collect();
    let get = |p: &str, k: &str| {
        runs.iter()
            .find(|r| r["policy"] == p)
            .and_then(|r| num(r, k))
    };
    let iters = runs.first().and_then(|r| num(r, "iterations"));
    let mut t = Table::new(
        format!(
            "vmalloc-loop: {} × (vmalloc 4 pages, touch, vfree) per policy, x86_64, 8 simulated CPUs",
            fmt_count(iters)
        ),
        &[
            "policy",
            "ns/iter",
            "vs augmented",
            "nodes avg",
            "nodes max",
            "TLB flushes",
            "IPIs",
            "purges",
            "stale TLB",
            "seed: 1M loops",
            "seed: nodes",
        ],
    );
    for r in &runs {
        let p = r["policy"].as_str().unwrap_or("?");
        let (s_time, s_nodes) = story1_seed(p);
        t.row(vec![
            p.to_string(),
            fmt_ns(num(r, "ns_per_iter")),
            fmt_ratio(ratio(
                num(r, "ns_per_iter"),
                get("augmented", "ns_per_iter"),
            )),
            fmt_count(num(r, "nodes_visited_avg")),
            fmt_count(num(r, "nodes_visited_max")),
            fmt_count(num(r, "tlb_flush_events")),
            fmt_count(num(r, "ipis")),
            fmt_count(num(r, "purges")),
            fmt_count(num(r, "stale_tlb_violations")),
            s_time.into(),
            s_nodes.into(),
        ]);
    }
    let ns = |p| get(p, "ns_per_iter");
    let (huge_table, huge_ratios) = huge_rows(rs);
    let mut ratios = vec![
        (
            "vanilla / eager (story: 10×)".into(),
            ratio(ns("vanilla"), ns("eager")),
        ),
        (
            "eager / free-area-cache (story: ≈3×)".into(),
            ratio(ns("eager"), ns("free-area-cache")),
        ),
        (
            "vanilla / free-area-cache (story: ≈30×)".into(),
            ratio(ns("vanilla"), ns("free-area-cache")),
        ),
        (
            "vanilla / augmented (target ≥ 50×)".into(),
            ratio(ns("vanilla"), ns("augmented")),
        ),
        (
            "eager / augmented (target ≥ 3×)".into(),
            ratio(ns("eager"), ns("augmented")),
        ),
        (
            "augmented / eager TLB flush events (target ≤ 1 %)".into(),
            ratio(
                get("augmented", "tlb_flush_events"),
                get("eager", "tlb_flush_events"),
            ),
        ),
    ];
    ratios.extend(huge_ratios);
    let cats: Vec<String> = runs
        .iter()
        .map(|r| r["policy"].as_str().unwrap_or("?").to_string())
        .collect();
    let bars = |key: &str| Series {
        name: key.to_string(),
        dashed: false,
        color: None,
        points: runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| num(r, key).map(|v| (i as f64, v)))
            .collect(),
    };
    let chart = Chart {
        file: "story1_vmalloc_loop.svg".into(),
        title: "Story 1: vmalloc-loop time and TLB flush events per policy".into(),
        panels: vec![
            Panel {
                caption: "time per vmalloc+touch+vfree".into(),
                categories: cats.clone(),
                x_label: "policy".into(),
                y_label: "ns per iteration".into(),
                log_x: false,
                log_y: false,
                series: vec![Series {
                    name: "ns/iter (this run)".into(),
                    ..bars("ns_per_iter")
                }],
            },
            Panel {
                caption: "TLB flush events (log scale)".into(),
                categories: cats,
                x_label: "policy".into(),
                y_label: "flush events (count)".into(),
                log_x: false,
                log_y: true,
                series: vec![
                    Series {
                        name: "TLB flush events".into(),
                        ..bars("tlb_flush_events")
                    },
                    Series {
                        name: "IPIs".into(),
                        ..bars("ipis")
                    },
                ],
            },
        ],
    };
    Story {
        id: "story1",
        title: "Story 1 (2010): vmalloc got 10x slower because of lazy TLB flushing".into(),
        seed: vec![
            "1M × vmalloc/touch/vfree on 8-core x86_64: ~150 s lazy, ~15 s eager (10×); 2 cores: 50.3 s vs 11.6 s".into(),
            "≈5535 nodes visited per allocation (lazy) vs 62 (eager); free area cache: 5.1–5.4 s, 8 nodes".into(),
            "purge when a lookup visits > N nodes: 6.1 s / 7.8 s (N = 100–200)".into(),
        ],
        tables: vec![t, huge_table],
        ratios,
        notes: vec![
            "The story's machine ran real page tables and IPIs; here the MMU and TLB are simulated (flush and IPI costs charged as busy waits), so compare ratios, not seconds.".into(),
        ],
        charts: vec![chart],
    }
}

/// Story 1's huge-vmalloc rows (`vmalloc-huge`): one 64 MiB area with
/// base pages and with large leaves, and the ratios between them.
fn huge_rows(rs: &[RunResult]) -> (Table, Vec<(String, Option<f64>)>) {
    let runs: Vec<Value> = of(rs, "vmalloc-huge")
        .filter_map(|r| r.json.get("runs").and_then(Value::as_array).cloned())
        .flatten()
        .collect();
    let size = runs.first().and_then(|r| num(r, "size"));
    let mut t = Table::new(
        format!(
            "huge-vmalloc: one {} MiB area vmalloc'd, touched, vfreed and purged (median), base pages vs vmalloc_huge, x86_64",
            fmt_count(size.map(|s| s / (1 << 20) as f64))
        ),
        &[
            "mapping",
            "large leaves",
            "base pages",
            "vmalloc",
            "touch",
            "vfree",
            "purge",
            "total",
            "page-table bytes",
            "stale TLB",
        ],
    );
    for r in &runs {
        t.row(vec![
            r["mode"].as_str().unwrap_or("?").to_string(),
            fmt_count(num(r, "large_leaves")),
            fmt_count(num(r, "base_pages")),
            fmt_ns(num(r, "vmalloc_ns")),
            fmt_ns(num(r, "touch_ns")),
            fmt_ns(num(r, "vfree_ns")),
            fmt_ns(num(r, "purge_ns")),
            fmt_ns(num(r, "ns_per_iter")),
            fmt_count(num(r, "pagetable_bytes")),
            fmt_count(num(r, "stale_tlb_violations")),
        ]);
    }
    let get = |m: &str, k: &str| runs.iter().find(|r| r["mode"] == m).and_then(|r| num(r, k));
    let ratios = vec![
        (
            "huge-vmalloc: base / huge vmalloc time".into(),
            ratio(get("base", "vmalloc_ns"), get("huge", "vmalloc_ns")),
        ),
        (
            "huge-vmalloc: base / huge vfree time".into(),
            ratio(get("base", "vfree_ns"), get("huge", "vfree_ns")),
        ),
        (
            "huge-vmalloc: base / huge page-table bytes".into(),
            ratio(
                get("base", "pagetable_bytes"),
                get("huge", "pagetable_bytes"),
            ),
        ),
    ];
    (t, ratios)
}

/// Story 4: `test-vmalloc`, global lock vs sharded nodes over thread counts.
pub fn story4(rs: &[RunResult]) -> Story {
    let sweep: Vec<&RunResult> = of(rs, "test-vmalloc")
        .filter(|r| r.arg("--run-test-mask") == Some(&plan::SWEEP_MASK.to_string()))
        .collect();
    let loops = sweep
        .first()
        .and_then(|r| r.arg("--test-loop-count"))
        .unwrap_or("?");
    let per_op = |r: &RunResult, name: &str| -> Option<f64> {
        let l = r.arg("--test-loop-count")?.parse::<f64>().ok()?;
        let t = r
            .json
            .get("tests")?
            .as_array()?
            .iter()
            .find(|t| t["name"] == name)?;
        num(t, "avg_ns").map(|ns| ns / l)
    };
    let threads = |r: &RunResult| r.arg("--nr-threads").and_then(|t| t.parse::<f64>().ok());
    let names = [
        "fix_size_alloc_test",
        "random_size_alloc_test",
        "fix_align_alloc_test",
        "vm_map_ram_test",
    ];
    let mut t = Table::new(
        format!(
            "test-vmalloc: ns per case iteration per thread ({loops} loops), global lock vs sharded nodes"
        ),
        &[
            "threads",
            "nodes",
            "fix_size",
            "random_size",
            "fix_align",
            "vm_map_ram",
            "wall",
            "all pass",
        ],
    );
    for r in &sweep {
        let mut row = vec![
            r.arg("--nr-threads").unwrap_or("?").to_string(),
            r.arg("--nodes").unwrap_or("?").to_string(),
        ];
        row.extend(names.iter().map(|n| fmt_ns(per_op(r, n))));
        row.push(fmt_ns(num(&r.json, "wall_ns")));
        row.push(pass_all(r).to_string());
        t.row(row);
    }
    let mut full = Table::new(
        "test-vmalloc: every case (mask 7295), 2 threads: pass/fail and avg ns per case",
        &[
            "case",
            "bit",
            "global avg",
            "global pass",
            "sharded avg",
            "sharded pass",
        ],
    );
    let full_runs: Vec<&RunResult> = of(rs, "test-vmalloc")
        .filter(|r| r.arg("--run-test-mask") == Some(&plan::FULL_MASK.to_string()))
        .collect();
    let case = |nodes: &str, name: &str| {
        full_runs
            .iter()
            .find(|r| r.arg("--nodes") == Some(nodes))
            .and_then(|r| {
                r.json
                    .get("tests")?
                    .as_array()?
                    .iter()
                    .find(|t| t["name"] == name)
                    .cloned()
            })
    };
    if let Some(first) = full_runs.first()
        && let Some(tests) = first.json.get("tests").and_then(Value::as_array)
    {
        for c in tests {
            let name = c["name"].as_str().unwrap_or("?");
            let (g, s) = (case("global", name), case("sharded", name));
            full.row(vec![
                name.to_string(),
                c["mask_bit"].to_string(),
                fmt_ns(g.as_ref().and_then(|g| num(g, "avg_ns"))),
                g.map_or("n/a".into(), |g| g["pass"].to_string()),
                fmt_ns(s.as_ref().and_then(|s| num(s, "avg_ns"))),
                s.map_or("n/a".into(), |s| s["pass"].to_string()),
            ]);
        }
    }
    let at = |n: f64, nodes: &str| {
        sweep
            .iter()
            .find(|r| threads(r) == Some(n) && r.arg("--nodes") == Some(nodes))
            .and_then(|r| per_op(r, "fix_size_alloc_test"))
    };
    let maxt = sweep.iter().filter_map(|r| threads(r)).fold(0.0, f64::max);
    let ratios = vec![
        (
            "sharded fix_size: 2 threads / 1 thread per-op (target ≤ 1.2×)".into(),
            ratio(at(2.0, "sharded"), at(1.0, "sharded")),
        ),
        (
            format!("fix_size at {maxt} threads: global / sharded (target ≥ 3× at 64)"),
            ratio(at(maxt, "global"), at(maxt, "sharded")),
        ),
    ];
    let mut series = Vec::new();
    for nodes in ["global", "sharded"] {
        let cases = names
            .iter()
            .zip(["fix_size", "random_size", "fix_align", "vm_map_ram"]);
        for (i, (n, short)) in cases.enumerate() {
            series.push(Series {
                name: format!("{short} ({nodes})"),
                dashed: nodes == "sharded",
                color: Some(i),
                points: sweep
                    .iter()
                    .filter(|r| r.arg("--nodes") == Some(nodes))
                    .filter_map(|r| Some((threads(r)?, per_op(r, n)?)))
                    .collect(),
            });
        }
    }
    let chart = Chart {
        file: "story4_test_vmalloc.svg".into(),
        title: "Story 4: test-vmalloc per-case time, global lock vs sharded nodes".into(),
        panels: vec![Panel {
            caption: "time per case iteration per thread (waiting included)".into(),
            categories: vec![],
            x_label: "threads (log scale)".into(),
            y_label: "ns per iteration (log scale)".into(),
            log_x: true,
            log_y: true,
            series,
        }],
    };
    Story {
        id: "story4",
        title: "Story 4 (2024): lock contention on the global vmap lock".into(),
        seed: vec![
            "test_vmalloc.sh run_test_mask=127 on 128 CPUs, global lock: nr_threads 64 / 128 / 256 took 4m28s / 6m19s / 19m10s".into(),
            "fix: per-node busy and lazy trees; freed areas go back to their node".into(),
        ],
        tables: vec![t, full],
        ratios,
        notes: vec![
            "This machine has few cores shared with other work: threads beyond the core count are time-sliced, so the scaling the story is about cannot show here; the per-thread cost includes waiting.".into(),
        ],
        charts: vec![chart],
    }
}

fn pass_all(r: &RunResult) -> bool {
    r.status == Some(0)
        && r.json
            .get("tests")
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().all(|c| c["pass"] == true))
}

/// Story 5 (`vfree-search`) and vmap-core against its peers (`vmap-bench`).
pub fn story5(rs: &[RunResult]) -> Story {
    let mut t = Table::new(
        "vfree-search: one search (find_unlink) vs two (find + unlink), 15000 busy areas",
        &["variant", "ns/vfree", "searches/vfree", "seed"],
    );
    let v = of(rs, "vfree-search")
        .next()
        .map(|r| r.json.clone())
        .unwrap_or_default();
    t.row(vec![
        "find_unlink (one)".into(),
        fmt_ns(num(&v, "one_search_ns")),
        fmt_count(num(&v, "searches_per_vfree_one")),
        "~20 % fewer __vunmap cycles".into(),
    ]);
    t.row(vec![
        "find + unlink (two)".into(),
        fmt_ns(num(&v, "two_search_ns")),
        fmt_count(num(&v, "searches_per_vfree_two")),
        "(32 threads, 64 CPUs)".into(),
    ]);
    let peers = [
        "vmap-core",
        "vmap-core-sharded",
        "vm-allocator",
        "range-alloc",
        "range-alloc-locked",
        "offset-allocator",
    ];
    let mut cols = vec!["pattern"];
    cols.extend(peers);
    cols.push("vmap-core / best peer");
    cols.push("sharded / range-alloc-locked");
    let mut b = Table::new(
        "vmap-bench: ns per alloc+free pair (median of 5 runs)",
        &cols,
    );
    for r in of(rs, "vmap-bench").filter(|r| r.arg("--pattern") != Some("aged")) {
        let results = r
            .json
            .get("results")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pattern = r.arg("--pattern").unwrap_or("?");
        let cell = |a: &str| {
            results
                .iter()
                .find(|x| x["allocator"] == a)
                .and_then(|x| num(x, "ns_per_op"))
        };
        let best_peer = peers[2..]
            .iter()
            .filter_map(|a| cell(a))
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        let mut row = vec![format!("{pattern} ({} ops)", r.arg("--ops").unwrap_or("?"))];
        row.extend(peers.iter().map(|a| match cell(a) {
            Some(ns) => fmt_ns(Some(ns)),
            None => "cannot express".into(),
        }));
        row.push(fmt_ratio(ratio(cell("vmap-core"), best_peer)));
        row.push(fmt_ratio(ratio(
            cell("vmap-core-sharded"),
            cell("range-alloc-locked"),
        )));
        b.row(row);
    }
    let mut tables = vec![t, b];
    let mut ratios = vec![(
        "one / two searches, ns (story: ≈0.8)".into(),
        ratio(num(&v, "one_search_ns"), num(&v, "two_search_ns")),
    )];
    let mut charts = vec![];
    if let Some((aged, aged_ratios, chart)) = super::story_aged::section(rs) {
        tables.push(aged);
        ratios.extend(aged_ratios);
        charts.push(chart);
    }
    Story {
        id: "story5",
        title: "Story 5 (2022): one search instead of two on vfree; vmap-core vs peers".into(),
        seed: vec![
            "find-and-unlink under one lock: ~20 % fewer cycles in __vunmap (32 threads, 64 CPUs); lock time 17.7 %+11.2 % → 8.3 %+0.6 %".into(),
        ],
        tables,
        ratios,
        notes: vec![
            "Single-threaded here: the story's saving was mostly lock hold time under 32 threads.".into(),
            "vmap-bench: a peer that cannot express alignment is shown as such; below 1× vmap-core is faster. vmap-core-sharded is the per-node front with its size-class pools (what vmalloc users get); it locks its node on every operation, so range-alloc-locked (range-alloc behind the same spinlock) is its like-for-like peer.".into(),
            "aged: offset-allocator has no alignment and is not lowest-fit; range-alloc is best-fit without alignment; vmap-core places exactly lowest-fit with alignment.".into(),
        ],
        charts,
    }
}
