//! Story 3 (SLUB fast path without preemption toggling, 2014): slab-test
//! cycles per size and kmem-bench's 256-byte loops, the tid and sheaves
//! fronts beside glibc, mimalloc and slabmalloc.

use super::runner::RunResult;
use super::table::{Chart, Panel, Series, Story, Table, fmt_count, fmt_ratio, num, ratio};
use serde_json::Value;

fn results<'a>(rs: &'a [RunResult], w: &str) -> (Vec<Value>, Option<&'a Value>) {
    let r = rs.iter().find(|r| r.workload == w);
    (
        r.and_then(|r| r.json.get("results")?.as_array().cloned())
            .unwrap_or_default(),
        r.map(|r| &r.json),
    )
}

fn name(v: &Value) -> String {
    v["allocator"].as_str().unwrap_or("?").to_string()
}

/// Story 3.
pub fn story3(rs: &[RunResult]) -> Story {
    let (slab, slab_json) = results(rs, "slab-test");
    let count = slab_json.and_then(|v| num(v, "count"));
    let allocs: Vec<String> = slab.iter().map(name).collect();
    let cell = |a: &Value, size: f64, key: &str| {
        a["sizes"]
            .as_array()?
            .iter()
            .find(|s| num(s, "size") == Some(size))
            .and_then(|s| num(s, key))
    };
    let mut cols: Vec<String> = vec!["size (bytes)".into()];
    cols.extend(allocs.iter().map(|a| format!("{a} alloc/free/pair")));
    cols.push("seed pair".into());
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut t = Table::new(
        format!(
            "slab-test: cycles per operation (rdtsc, median of 5): {} allocs, then frees; and alloc/free pairs",
            fmt_count(count)
        ),
        &col_refs,
    );
    let sizes: Vec<f64> = (3..=14).map(|s| (1u64 << s) as f64).collect();
    for &size in &sizes {
        let mut row = vec![fmt_count(Some(size))];
        for a in &slab {
            let c = |k| fmt_count(cell(a, size, k));
            row.push(format!(
                "{}/{}/{}",
                c("alloc_cycles"),
                c("free_cycles"),
                c("pair_cycles")
            ));
        }
        row.push(
            match size as u64 {
                8 => "~60 (alloc 41→68, free 81–107)",
                16384 => "~690 (page-allocator cliff)",
                _ => "~60–125",
            }
            .into(),
        );
        t.row(row);
    }
    let (kmem, kmem_json) = results(rs, "kmem-bench");
    let get = |a: &str, k: &str| {
        kmem.iter()
            .find(|x| x["allocator"] == a)
            .and_then(|x| num(x, k))
    };
    let mut k = Table::new(
        format!(
            "kmem-bench: 256-byte objects, ns per object, {} loops (median of 5; remote free: of {}, in balanced orders)",
            fmt_count(kmem_json.and_then(|v| num(v, "loops"))),
            remote_runs(kmem_json)
        ),
        &[
            "allocator",
            "fastpath reuse",
            "vs mimalloc",
            "N-pattern (N=256)",
            "vs mimalloc",
            "remote free",
            "vs mimalloc",
            "remote free, freeing thread's time",
            "vs mimalloc",
        ],
    );
    let f2 = |x: Option<f64>| x.map_or("n/a".into(), |x| format!("{x:.1}"));
    for x in &kmem {
        let a = name(x);
        let r = |key| fmt_ratio(ratio(num(x, key), get("mimalloc", key)));
        k.row(vec![
            a.clone(),
            f2(num(x, "fastpath_reuse_ns")),
            r("fastpath_reuse_ns"),
            f2(num(x, "n_pattern_ns")),
            r("n_pattern_ns"),
            f2(num(x, "remote_free_ns")),
            r("remote_free_ns"),
            f2(num(x, "remote_free_consumer_ns")),
            r("remote_free_consumer_ns"),
        ]);
    }
    k.row(vec![
        "seed (2014 SLUB)".into(),
        "19 ns (47 cycles)".into(),
        String::new(),
        "40 ns (100 cycles)".into(),
        String::new(),
        "—".into(),
        String::new(),
        "—".into(),
        String::new(),
    ]);
    let floor = kmem_json.and_then(|v| v.get("dwcas_floor"));
    let pair = |a: &str, s: f64| {
        slab.iter()
            .find(|x| x["allocator"] == a)
            .and_then(|x| cell(x, s, "pair_cycles"))
    };
    let mut ratios = Vec::new();
    for front in ["slub", "sheaves"] {
        for key in ["fastpath_reuse_ns", "n_pattern_ns"] {
            let target = if front == "slub" { "1.5" } else { "1.0" };
            ratios.push((
                format!("{front} / mimalloc {key} (target ≤ {target}×)"),
                ratio(get(front, key), get("mimalloc", key)),
            ));
        }
        ratios.push((
            format!("{front}: pair cycles 16384 / 8 (target ≤ 2×)"),
            ratio(pair(front, 16384.0), pair(front, 8.0)),
        ));
    }
    ratios.push((
        "slub fastpath reuse / two cmpxchg16b (its floor)".into(),
        ratio(
            get("slub", "fastpath_reuse_ns"),
            floor.and_then(|f| num(f, "two_cmpxchg16b_ns")),
        ),
    ));
    let slab_series = slab
        .iter()
        .map(|a| Series {
            name: name(a),
            dashed: false,
            color: None,
            points: sizes
                .iter()
                .filter_map(|&s| Some((s, cell(a, s, "pair_cycles")?)))
                .collect(),
        })
        .collect();
    let slab_chart = Chart {
        file: "story3_slab_test.svg".into(),
        title: "Story 3: slab-test alloc/free pair cycles per size per allocator".into(),
        panels: vec![Panel {
            caption: "one kmalloc+kfree pair".into(),
            categories: vec![],
            x_label: "object size (bytes, log scale)".into(),
            y_label: "cycles per pair (rdtsc, log scale)".into(),
            log_x: true,
            log_y: true,
            series: slab_series,
        }],
    };
    let cats: Vec<String> = kmem.iter().map(name).collect();
    let kmem_series = [
        ("fastpath reuse", "fastpath_reuse_ns"),
        ("N-pattern (N=256)", "n_pattern_ns"),
        ("remote free", "remote_free_ns"),
        ("remote free, freeing thread", "remote_free_consumer_ns"),
    ]
    .iter()
    .map(|(label, key)| Series {
        name: (*label).into(),
        dashed: false,
        color: None,
        points: kmem
            .iter()
            .enumerate()
            .filter_map(|(i, x)| Some((i as f64, num(x, key)?)))
            .collect(),
    })
    .collect();
    let kmem_chart = Chart {
        file: "story3_kmem_bench.svg".into(),
        title: "Story 3: kmem-bench (256-byte objects) per allocator".into(),
        panels: vec![Panel {
            caption: "ns per object (alloc + free)".into(),
            categories: cats,
            x_label: "allocator".into(),
            y_label: "ns per object".into(),
            log_x: false,
            log_y: false,
            series: kmem_series,
        }],
    };
    Story {
        id: "story3",
        title: "Story 3 (2014): SLUB fast path without preemption toggling".into(),
        seed: vec![
            "x86_64, CONFIG_PREEMPT: alloc/free pairs 8..8192 bytes ~60–125 cycles; 16384 bytes ~690 (page-allocator cliff)".into(),
            "10000 allocs then frees: kmalloc(8) 41→68 cycles, kfree 81–107".into(),
            "256-byte fastpath reuse: 47 cycles / 19 ns; N-pattern (256): 100 cycles / 40 ns; preempt_disable+enable alone 4.3 ns".into(),
        ],
        tables: vec![t, k],
        ratios,
        notes: vec![
            "slub = the tid front (one cmpxchg16b per operation), sheaves = Linux 7.0's per-CPU arrays; system = glibc malloc.".into(),
            "Hosted: cycles come from rdtsc on whatever core the thread runs on, with other processes sharing the machine.".into(),
        ],
        charts: vec![slab_chart, kmem_chart],
    }
}

/// How many runs each remote-free median is of (the rounds are whole
/// Williams squares, so it depends on how many allocators free remotely).
fn remote_runs(kmem: Option<&Value>) -> String {
    kmem.and_then(|v| v["results"].as_array())
        .and_then(|rs| rs.iter().find_map(|r| r["remote_free_runs_ns"].as_array()))
        .map_or("?".into(), |runs| runs.len().to_string())
}
