//! The aged-space comparison inside story 5 (`vmap-bench --pattern aged`
//! at several `--live` sizes): one table of ns per step and high-water
//! marks, the ratios the targets are stated in, and a log-log chart
//! of ns per step against the number of live areas, one line per allocator.

use super::runner::RunResult;
use super::table::{Chart, Panel, Series, Table, fmt_count, fmt_ns, fmt_ratio, num, ratio};
use serde_json::Value;

/// Allocators in table and legend order.
const ALLOCATORS: [&str; 9] = [
    "vmap-core",
    "vmap-core-augmented",
    "vmap-core-btree",
    "vmap-core-sharded",
    "vmap-core-blocktree",
    "offset-allocator",
    "range-alloc",
    "vm-allocator",
    "vmem",
];

/// Every aged row of the run: (live areas, the row).
fn rows(rs: &[RunResult]) -> Vec<(u64, Value)> {
    let mut out: Vec<(u64, Value)> = rs
        .iter()
        .filter(|r| r.workload == "vmap-bench" && r.arg("--pattern") == Some("aged"))
        .flat_map(|r| {
            let live = r.arg("--live").and_then(|l| l.parse().ok()).unwrap_or(0);
            r.json
                .get("results")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |x| (live, x))
        })
        .collect();
    out.sort_by_key(|(l, _)| *l);
    out
}

/// Named ratios, as a story lists them.
pub type Ratios = Vec<(String, Option<f64>)>;

/// The table, the target ratios and the chart; `None` when no aged run.
pub fn section(rs: &[RunResult]) -> Option<(Table, Ratios, Chart)> {
    let rows = rows(rs);
    if rows.is_empty() {
        return None;
    }
    let cell = |live: u64, a: &str, k: &str| {
        rows.iter()
            .find(|(l, x)| *l == live && x["allocator"] == a)
            .and_then(|(_, x)| num(x, k))
    };
    let mut lives: Vec<u64> = rows.iter().map(|(l, _)| *l).collect();
    lives.dedup();
    let present: Vec<&str> = ALLOCATORS
        .into_iter()
        .filter(|a| rows.iter().any(|(_, x)| x["allocator"] == *a))
        .collect();
    let mut cols = vec!["live areas".to_string()];
    for a in &present {
        cols.push(format!("{a} ns/step"));
    }
    cols.push("vmap-core / offset-allocator".into());
    cols.push("high water, MiB (vmap-core / offset-allocator / range-alloc)".into());
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    let steps = rows.first().and_then(|(_, x)| num(x, "ops"));
    let mut t = Table::new(
        format!(
            "vmap-bench --pattern aged: live areas of 1-16 pages, {} steps of (alloc one, free a random live one), median of 5",
            fmt_count(steps)
        ),
        &cols,
    );
    let mut ratios = Vec::new();
    for &live in &lives {
        let mut row = vec![live.to_string()];
        row.extend(present.iter().map(|a| fmt_ns(cell(live, a, "ns_per_op"))));
        let vs_offset = ratio(
            cell(live, "vmap-core", "ns_per_op"),
            cell(live, "offset-allocator", "ns_per_op"),
        );
        row.push(fmt_ratio(vs_offset));
        let mib = |a: &str| {
            cell(live, a, "high_water_bytes").map_or("n/a".to_string(), |b| {
                format!("{:.1}", b / (1u64 << 20) as f64)
            })
        };
        row.push(format!(
            "{} / {} / {}",
            mib("vmap-core"),
            mib("offset-allocator"),
            mib("range-alloc")
        ));
        t.row(row);
        ratios.push((
            format!("aged, {live} live: vmap-core / offset-allocator, ns (target ≤ 1.5)"),
            vs_offset,
        ));
        if live == 10_000 {
            for peer in ["range-alloc", "vm-allocator"] {
                ratios.push((
                    format!("aged, 10000 live: {peer} / vmap-core, ns (target ≥ 10)"),
                    ratio(
                        cell(live, peer, "ns_per_op"),
                        cell(live, "vmap-core", "ns_per_op"),
                    ),
                ));
            }
        }
    }
    let series = present
        .iter()
        .map(|a| Series {
            name: a.to_string(),
            dashed: a.starts_with("vmap-core-"),
            color: None,
            points: lives
                .iter()
                .filter_map(|&l| Some((l as f64, cell(l, a, "ns_per_op")?)))
                .collect(),
        })
        .collect();
    let chart = Chart {
        file: "story5_vmap_aged.svg".into(),
        title: "vmap-bench aged: ns per step against live areas".into(),
        panels: vec![Panel {
            caption: "alloc 1-16 pages + free a random live area, per step".into(),
            categories: vec![],
            x_label: "live areas (log scale)".into(),
            y_label: "ns per step (log scale)".into(),
            log_x: true,
            log_y: true,
            series,
        }],
    };
    Some((t, ratios, chart))
}
