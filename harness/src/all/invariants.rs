//! Every invariant the workloads check, summed over the run: stale-TLB
//! violations, leaked pages / objects / tables, failed cases, inconsistent
//! structures, differential mismatches, and children that failed. Keys are
//! found anywhere in a child's JSON, so an invariant a workload adds later
//! is counted without touching this file as long as its name says what it is.

use super::runner::RunResult;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Counters that must be zero.
const ZERO_KEYS: [&str; 9] = [
    "violations",
    "stale_tlb_violations",
    "leaked_pages",
    "leaked_objects",
    "leaked_tables",
    "leaked_ranges",
    "leaked_frames",
    "mismatches",
    "differential_mismatches",
];

/// The end-of-run summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Invariants {
    /// Sum of each must-be-zero counter over every run.
    pub counters: BTreeMap<String, u64>,
    /// `"pass": false` entries (test-vmalloc cases).
    pub failed_cases: u64,
    /// `"consistent": false` entries.
    pub inconsistent: u64,
    /// Runs that exited non-zero, printed no JSON, or could not start.
    pub failed_runs: Vec<String>,
    /// Everything above added up: the run is clean when this is 0.
    pub total: u64,
}

fn walk(v: &Value, inv: &mut Invariants) {
    match v {
        Value::Object(m) => {
            // soak's per-component counts repeat its totals.
            for (k, x) in m.iter().filter(|(k, _)| k.as_str() != "components") {
                if ZERO_KEYS.contains(&k.as_str())
                    && let Some(n) = x.as_u64()
                {
                    *inv.counters.entry(k.clone()).or_default() += n;
                } else if k == "pass" && *x == Value::Bool(false) {
                    inv.failed_cases += 1;
                } else if k == "consistent" && *x == Value::Bool(false) {
                    inv.inconsistent += 1;
                } else {
                    walk(x, inv);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| walk(x, inv)),
        _ => {}
    }
}

/// Sums the invariants of every run.
pub fn summarise(rs: &[RunResult]) -> Invariants {
    let mut inv = Invariants::default();
    for k in ZERO_KEYS.iter().take(5) {
        inv.counters.insert((*k).to_string(), 0);
    }
    for r in rs {
        walk(&r.json, &mut inv);
        if let Some(e) = &r.error {
            inv.failed_runs.push(format!("{}: {e}", r.command));
        }
    }
    inv.total = inv.counters.values().sum::<u64>()
        + inv.failed_cases
        + inv.inconsistent
        + inv.failed_runs.len() as u64;
    inv
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(json: Value, error: Option<&str>) -> RunResult {
        RunResult {
            workload: "w",
            args: vec![],
            command: "harness w".into(),
            status: Some(0),
            wall_ns: 0,
            json,
            error: error.map(String::from),
        }
    }

    #[test]
    fn counts_nested_counters_failed_cases_and_failed_runs() {
        let rs = [
            run(
                json!({"runs": [{"stale_tlb_violations": 2, "consistent": true}]}),
                None,
            ),
            run(
                json!({"tests": [{"pass": false}, {"pass": true}], "leaked_pages": 0}),
                None,
            ),
            run(Value::Null, Some("exit status Some(1)")),
        ];
        let inv = summarise(&rs);
        assert_eq!(inv.counters["stale_tlb_violations"], 2);
        assert_eq!(inv.failed_cases, 1);
        assert_eq!(inv.failed_runs.len(), 1);
        assert_eq!(inv.total, 4);
    }

    #[test]
    fn soak_components_are_not_counted_twice() {
        let rs = [run(
            json!({"leaked_pages": 3, "components": {"vmalloc": {"leaked_pages": 3}}}),
            None,
        )];
        assert_eq!(summarise(&rs).counters["leaked_pages"], 3);
    }

    #[test]
    fn clean_runs_sum_to_zero() {
        let rs = [run(json!({"leaked_tables": 0, "violations": 0}), None)];
        assert_eq!(summarise(&rs).total, 0);
    }
}
