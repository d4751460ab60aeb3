//! `harness all --quick` and `harness soak`, run as a user runs them: the
//! real binary, its report files, its JSON and its charts.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn harness(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .expect("harness runs")
}

/// A fresh directory under the target dir (removed first if left over).
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Balanced tags, enough to tell a complete SVG document from a cut one:
/// every `<x ...>` opened without `/>` is closed by `</x>` in order.
fn assert_well_formed(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("unterminated tag");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap_or("");
            stack.push(name.to_string());
        }
    }
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "runs every workload (minutes in a debug build); run with --release"
)]
fn all_quick_writes_the_report_json_and_one_titled_svg_per_chart() {
    let dir = scratch("all-quick");
    let out = harness(&["--json", "all", "--quick", "--out", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object on stdout");
    let inv = &v["invariants"];
    assert_eq!(
        out.status.code(),
        Some(if inv["total"] == 0 { 0 } else { 1 }),
        "exit status follows the invariants: {inv}\n{stderr}"
    );
    assert_eq!(inv["total"], 0, "every invariant holds: {inv}");

    for f in ["report.md", "report.json", "report.html"] {
        assert!(dir.join(f).is_file(), "{f} written");
    }
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    for key in [
        "machine",
        "runs",
        "stories",
        "invariants",
        "files",
        "wall_ns",
    ] {
        assert!(file.get(key).is_some(), "report.json has {key}");
    }
    for key in ["cpu_model", "cores", "rustc", "git_commit"] {
        assert!(file["machine"].get(key).is_some(), "machine has {key}");
    }
    assert!(file["machine"]["cores"].as_u64().unwrap() >= 1);
    let runs = file["runs"].as_array().unwrap();
    for w in [
        "vmalloc-loop",
        "vmalloc-huge",
        "test-vmalloc",
        "vfree-search",
        "vmap-bench",
        "munmap",
        "unmap-dense",
        "slab-test",
        "kmem-bench",
        "soak",
    ] {
        let r = runs.iter().find(|r| r["workload"] == w);
        let r = r.unwrap_or_else(|| panic!("{w} ran"));
        assert!(r["result"].is_object(), "{w} gave its JSON: {r}");
    }
    let ids: Vec<&str> = file["stories"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "story1", "story2", "story3", "story4", "story5", "malloc", "soak"
        ]
    );
    // Our figures beside the seed's: story 1's table has both.
    let s1 = &file["stories"][0];
    assert!(!s1["seed"].as_array().unwrap().is_empty());
    assert_eq!(
        s1["tables"][0]["rows"].as_array().unwrap().len(),
        5,
        "five policies"
    );
    assert_eq!(
        s1["tables"][1]["rows"].as_array().unwrap().len(),
        2,
        "huge-vmalloc: base pages and huge"
    );

    // (file, title, axis labels with their units, legend entries)
    let charts: [(&str, &str, [&str; 2], &str); 5] = [
        (
            "story1_vmalloc_loop.svg",
            "vmalloc-loop time and TLB flush events per policy",
            ["ns per iteration", "flush events (count)"],
            "IPIs",
        ),
        (
            "story2_munmap.svg",
            "munmap entries visited per budget",
            ["range size", "entries visited (count, log scale)"],
            "address budget",
        ),
        (
            "story3_slab_test.svg",
            "slab-test alloc/free pair cycles per size",
            [
                "object size (bytes, log scale)",
                "cycles per pair (rdtsc, log scale)",
            ],
            "mimalloc",
        ),
        (
            "story3_kmem_bench.svg",
            "kmem-bench (256-byte objects) per allocator",
            ["allocator", "ns per object"],
            "remote free",
        ),
        (
            "story4_test_vmalloc.svg",
            "test-vmalloc per-case time, global lock vs sharded",
            ["threads (log scale)", "ns per iteration (log scale)"],
            "fix_size (sharded)",
        ),
    ];
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for (file, title, axes, legend) in charts {
        let svg = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(svg.starts_with("<svg"), "{file} is an SVG document");
        assert!(svg.trim_end().ends_with("</svg>"), "{file} is complete");
        assert_well_formed(&svg);
        assert!(svg.contains(title), "{file} titled {title:?}");
        for label in axes.iter().chain([&legend]) {
            assert!(svg.contains(label), "{file} shows {label:?}");
        }
        assert!(html.contains(title), "report.html embeds {file}");
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Story 2 (2005)") && md.contains("| budget |"));

    // malloc-bench (issue 18): every workload at 1 and 2 threads, time and
    // memory tables; the two fronts and the chart unless the preloadable
    // library was not built (then one "skipped" line says so).
    let m = &file["stories"][5];
    for key in ["title", "seed", "tables", "ratios", "notes", "charts"] {
        assert!(m.get(key).is_some(), "malloc story has {key}: {m}");
    }
    let (time, mem) = (&m["tables"][0], &m["tables"][1]);
    assert_eq!(time["rows"].as_array().unwrap().len(), 18, "{time}");
    assert_eq!(mem["rows"].as_array().unwrap().len(), 18, "{mem}");
    assert!(time["columns"][4] == "mimalloc ms" && mem["columns"][2] == "peak RSS: tid");
    assert!(
        mem["rows"][0][12] == "yes",
        "every object accounted for: {mem}"
    );
    let skipped = m["notes"][0].as_str().unwrap().starts_with("skipped");
    assert!(md.contains("## Issue 18: the field's allocator workloads"));
    if skipped {
        assert_eq!(time["rows"][0][2], "n/a");
    } else {
        assert_ne!(time["rows"][0][2], "n/a", "tid ran: {time}");
        assert!(m["ratios"][0]["value"].is_number(), "{m}");
        let svg = std::fs::read_to_string(dir.join("malloc_bench.svg")).unwrap();
        assert_well_formed(&svg);
        for text in [
            "time and peak RSS relative to mimalloc",
            "larson",
            "sheaves",
        ] {
            assert!(svg.contains(text), "malloc_bench.svg shows {text:?}");
        }
        assert!(html.contains("malloc-bench: time and peak RSS"));
        assert!(md.contains("![malloc-bench: time and peak RSS"));
    }
}

#[test]
fn all_rejects_bad_flags_with_one_line_and_status_2() {
    let out = harness(&["all", "--quick=maybe"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
    let help = harness(&["all", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--quick") && text.contains("--out"), "{text}");
}

fn soak(seconds: &str, threads: &str) -> (Value, Option<i32>) {
    let out = harness(&["--json", "soak", "--seconds", seconds, "--threads", threads]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    (v, out.status.code())
}

fn bad(v: &Value) -> u64 {
    [
        "violations",
        "leaked_pages",
        "leaked_objects",
        "leaked_tables",
        "leaked_ranges",
    ]
    .iter()
    .map(|k| v[k].as_u64().expect("a count"))
    .sum()
}

#[test]
fn soak_reports_the_contract_keys_and_its_exit_status_follows_them() {
    let (v, status) = soak("2", "2");
    for key in ["ops", "violations", "leaked_pages", "leaked_objects"] {
        assert!(v[key].is_u64(), "soak reports {key}: {v}");
    }
    assert!(v["ops"].as_u64().unwrap() > 100, "it did work: {v}");
    for c in ["vmalloc", "kmalloc", "page_tables"] {
        assert!(
            v["components"][c]["ops"].as_u64().unwrap() > 0,
            "{c} ran: {v}"
        );
    }
    assert_eq!(status, Some(i32::from(bad(&v) != 0)), "{v}");
    // Every component accounts for everything.
    for c in ["vmalloc", "kmalloc", "page_tables"] {
        assert_eq!(bad(&v["components"][c]), 0, "{c}: {v}");
    }
    assert_eq!(status, Some(0), "{v}");
}

#[test]
fn soak_accounts_for_every_frame_at_4_threads() {
    let (v, status) = soak("15", "4");
    assert_eq!(bad(&v), 0, "{v}");
    assert_eq!(status, Some(0));
}

#[test]
fn soak_rejects_zero_seconds() {
    let out = harness(&["soak", "--seconds", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seconds"));
}
