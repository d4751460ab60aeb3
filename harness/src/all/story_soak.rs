//! The soak run of `harness all`: every component at once, the operations
//! done and every invariant it checks (not a story: the safety net under
//! all of them).

use super::runner::RunResult;
use super::table::{Story, Table, fmt_count, num};
use serde_json::Value;

/// The soak section.
pub fn soak(rs: &[RunResult]) -> Story {
    let r = rs.iter().find(|r| r.workload == "soak");
    let v = r.map(|r| r.json.clone()).unwrap_or(Value::Null);
    let mut t = Table::new(
        format!(
            "soak: {} s on {} threads, every component at once",
            fmt_count(num(&v, "seconds")),
            fmt_count(num(&v, "threads"))
        ),
        &[
            "component",
            "ops",
            "violations",
            "leaked pages",
            "leaked tables",
            "leaked objects",
            "leaked ranges",
        ],
    );
    let mut row = |name: &str, c: &Value| {
        t.row(vec![
            name.to_string(),
            fmt_count(num(c, "ops")),
            fmt_count(num(c, "violations")),
            fmt_count(num(c, "leaked_pages")),
            fmt_count(num(c, "leaked_tables")),
            fmt_count(num(c, "leaked_objects")),
            fmt_count(num(c, "leaked_ranges")),
        ]);
    };
    if let Some(comps) = v.get("components").and_then(Value::as_object) {
        for (name, c) in comps {
            row(name, c);
        }
    }
    row("total", &v);
    let mut notes = vec![
        "vmalloc/vfree/vmap/vm_map_ram with cross-thread frees, CPU migration and forced purges (stale-TLB checker on every allocation); map/translate/zap on all six layouts under every budget; kmalloc/kfree of every size on both slub fronts with cross-thread frees and random migration at the fast-path window.".to_string(),
    ];
    if let Some(p) = v.get("first_problem").and_then(Value::as_str) {
        notes.push(format!("first problem: {p}"));
    }
    Story {
        id: "soak",
        title: "Soak: every component at once".into(),
        seed: vec![],
        tables: vec![t],
        ratios: vec![],
        notes,
        charts: vec![],
    }
}
