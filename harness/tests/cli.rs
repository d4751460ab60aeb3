//! The command-line contract of HARNESS.md, checked on the built binary.

use std::process::Command;

fn harness(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .expect("harness runs")
}

#[test]
fn bad_value_is_one_line_naming_flag_and_values_with_status_2() {
    let out = harness(&["info", "--arch", "sparc"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains("--arch"), "{err}");
    assert!(
        err.contains("aarch64-16k") && err.contains("ia64-sim"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn unknown_flag_and_bad_number_are_status_2() {
    assert_eq!(harness(&["info", "--frobnicate"]).status.code(), Some(2));
    let out = harness(&["info", "--cpus", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("--cpus"));
}

#[test]
fn json_is_exactly_one_object_on_stdout() {
    let out = harness(&["info", "--json", "--cpus", "4", "--ipi-cost-ns", "0"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v.is_object());
    assert_eq!(v["layouts"].as_array().unwrap().len(), 6);
    assert_eq!(v["tlb_model"]["cpus"], 4);
    let example = &v["tlb_model"]["example_range_flush_8_pages"];
    assert_eq!(example["ipis"], 3);
    assert_eq!(example["tlb_pages_flushed"], 8);
    assert_eq!(
        example["tlb_cost_ns"],
        8 * 100,
        "IPIs charged nothing at --ipi-cost-ns 0"
    );
}

#[test]
fn arch_selects_one_layout_with_its_geometry() {
    let out = harness(&["info", "--json", "--arch", "aarch64-64k"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = &v["layouts"][0];
    assert_eq!(l["name"], "aarch64-64k");
    assert_eq!(l["levels"], 3);
    assert_eq!(l["page_size"], 65536);
    assert_eq!(l["index_bits"], serde_json::json!([6, 13, 13]));
}

#[test]
fn malloc_bench_rptest_reports_one_accounted_row_and_checks_its_cross_rate() {
    let out = harness(&[
        "malloc-bench",
        "--json",
        "--workload",
        "rptest",
        "--allocator",
        "system",
        "--threads",
        "2",
        "--repeat",
        "1",
        "--cross-per-mille",
        "500",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let r = &v["results"][0];
    assert_eq!(r["workload"], "rptest");
    assert_eq!(r["threads"], 2);
    assert_eq!(r["all_accounted"], true, "{r}");
    assert_eq!(r["allocs"], r["frees"]);
    assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
    let bad = harness(&[
        "malloc-bench",
        "--workload",
        "rptest",
        "--cross-per-mille",
        "1001",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8(bad.stderr)
            .unwrap()
            .contains("--cross-per-mille")
    );
}
