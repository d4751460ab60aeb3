//! Story 2 (munmap of an untouched huge mapping took 24 s, 2005): entries
//! visited per `ZapBudget` over range sizes, the 1 TiB map/unmap cycle, and
//! dense unmapping against the x86_64 and aarch64-paging crates.

use super::plan::STORY2_SIZE;
use super::runner::RunResult;
use super::table::{Chart, Panel, Series, Story, Table, fmt_count, fmt_ns, fmt_ratio, num, ratio};

fn size_name(s: &str) -> String {
    if s == STORY2_SIZE {
        "16 TiB (17592182882304 B)".into()
    } else {
        format!("{s}iB")
    }
}

/// Story 2.
pub fn story2(rs: &[RunResult]) -> Story {
    let sweep: Vec<&RunResult> = rs
        .iter()
        .filter(|r| r.workload == "munmap" && r.arg("--touch-pages").is_none())
        .collect();
    let mut sizes: Vec<&str> = Vec::new();
    for r in &sweep {
        if let Some(s) = r.arg("--size")
            && !sizes.contains(&s)
        {
            sizes.push(s);
        }
    }
    let find = |size: &str, budget: &str| {
        sweep
            .iter()
            .find(|r| r.arg("--size") == Some(size) && r.arg("--budget") == Some(budget))
            .map(|r| &r.json)
    };
    let mut t = Table::new(
        "munmap of an untouched range on ia64-sim (16 KiB pages), 8-page ZAP_BLOCK_SIZE",
        &[
            "size",
            "budget",
            "entries visited",
            "lock breaks",
            "unmap time",
            "leaked tables",
            "address / work entries",
        ],
    );
    for s in &sizes {
        for b in ["work", "address", "unbounded"] {
            let Some(v) = find(s, b) else { continue };
            let vs_work = if b == "address" {
                fmt_ratio(ratio(
                    num(v, "entries_visited"),
                    find(s, "work").and_then(|w| num(w, "entries_visited")),
                ))
            } else {
                String::new()
            };
            t.row(vec![
                size_name(s),
                b.into(),
                fmt_count(num(v, "entries_visited")),
                fmt_count(num(v, "lock_breaks")),
                fmt_ns(num(v, "unmap_ns").or(num(v, "wall_ns"))),
                fmt_count(num(v, "leaked_tables")),
                vs_work,
            ]);
        }
    }
    let mut c = Table::new(
        "map 4 pages inside 1 TiB, unmap the whole TiB, repeated (ia64-sim)",
        &[
            "budget / placement",
            "cycles",
            "entries visited",
            "TLB flushes",
            "unmap time (all cycles)",
            "map+unmap wall",
            "per cycle",
            "seed (ppc64)",
        ],
    );
    for r in rs
        .iter()
        .filter(|r| r.workload == "munmap" && r.arg("--touch-pages").is_some())
    {
        let v = &r.json;
        let cycles = num(v, "repeat");
        let place = if r.has("--packed") {
            "packed"
        } else {
            "spread"
        };
        c.row(vec![
            format!("{} / {place}", r.arg("--budget").unwrap_or("?")),
            fmt_count(cycles),
            fmt_count(num(v, "entries_visited")),
            fmt_count(num(v, "tlb_flush_events")),
            fmt_ns(num(v, "unmap_ns")),
            fmt_ns(num(v, "wall_ns")),
            fmt_ns(ratio(num(v, "wall_ns"), cycles)),
            "1.69 s once → 1000× in < 0.01 s".into(),
        ]);
    }
    let mut d = Table::new(
        "dense unmap of present 4 KiB pages: zap walker vs peers",
        &[
            "walker",
            "layout",
            "pages",
            "ns/page",
            "TLB flush events",
            "modelled TLB cost",
            "vs zap",
        ],
    );
    let dense: Vec<&RunResult> = rs.iter().filter(|r| r.workload == "unmap-dense").collect();
    let zap_on = |arch: &str| {
        dense
            .iter()
            .find(|r| r.arg("--arch") == Some(arch) && r.arg("--walker") == Some("zap"))
            .and_then(|r| num(&r.json, "ns_per_page"))
    };
    for r in &dense {
        let v = &r.json;
        let arch = r.arg("--arch").unwrap_or("?");
        d.row(vec![
            r.arg("--walker").unwrap_or("?").into(),
            arch.into(),
            fmt_count(num(v, "pages")),
            fmt_count(num(v, "ns_per_page").map(|x| (x * 10.0).round() / 10.0)),
            fmt_count(num(v, "tlb_flush_events")),
            fmt_ns(num(v, "tlb_cost_ns")),
            fmt_ratio(ratio(num(v, "ns_per_page"), zap_on(arch))),
        ]);
    }
    let biggest = sizes.last().copied().unwrap_or("");
    let entries = |b: &str| find(biggest, b).and_then(|v| num(v, "entries_visited"));
    let crate_vs_zap = dense
        .iter()
        .find(|r| r.arg("--walker") == Some("x86_64-crate"))
        .and_then(|r| num(&r.json, "ns_per_page"));
    let ratios = vec![
        (
            format!(
                "{}: address / work entries visited (target ≥ 10⁴)",
                size_name(biggest)
            ),
            ratio(entries("address"), entries("work")),
        ),
        (
            "dense: x86_64 crate / zap ns per page (target ≥ 10×)".into(),
            ratio(crate_vs_zap, zap_on("x86_64")),
        ),
    ];
    let series = ["work", "address", "unbounded"]
        .iter()
        .map(|b| Series {
            name: format!("{b} budget"),
            dashed: false,
            color: None,
            points: sizes
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let e = find(s, b).and_then(|v| num(v, "entries_visited"))?;
                    Some((i as f64, e))
                })
                .collect(),
        })
        .collect();
    let chart = Chart {
        file: "story2_munmap.svg".into(),
        title: "Story 2: munmap entries visited per budget (ia64-sim, untouched range)".into(),
        panels: vec![Panel {
            caption: "page-table entries visited by one munmap (log scale)".into(),
            categories: sizes.iter().map(|s| size_name(s)).collect(),
            x_label: "range size".into(),
            y_label: "entries visited (count, log scale)".into(),
            log_x: false,
            log_y: true,
            series,
        }],
    };
    Story {
        id: "story2",
        title: "Story 2 (2005): munmap of an untouched huge mapping took 24 s".into(),
        seed: vec![
            "mmap 17592182882304 bytes, never touch, munmap: 24 s on ia64 (4-level tables)".into(),
            "fixed 8-page address blocks re-descended from the top: empty pmd revisited 256×, pud 524,288×, pgd 1,073,741,824×".into(),
            "work-counted budget: ppc64 map+unmap of 1 TiB went from 1.69 s to 1000× in under 0.01 s".into(),
        ],
        tables: vec![t, c, d],
        ratios,
        notes: vec![
            "Unmap times include the modelled TLB cost (100 ns per page flush, 3.3 µs per full flush, 1 µs per IPI) as busy waits; munmap interrupts only the CPUs in the mm's cpumask (none in this one-thread workload, `--tlb-cpumask all` for every other CPU), unmap-dense every other CPU.".into(),
            "aarch64-paging has no unmap that frees frames or tables: its row clears VALID and issues one range flush (not the same work).".into(),
        ],
        charts: vec![chart],
    }
}
