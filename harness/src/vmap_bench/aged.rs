//! `vmap-bench --pattern aged`: an aged, fragmented space, as a kernel's
//! vmalloc space looks after hours of use rather than the empty space the
//! test_vmalloc loops run in. `--live N` areas of 1-16 pages are allocated
//! (not timed); then each step allocates one more (1-16 pages) and frees a
//! random live one (`--ops` steps). Every allocator gets the same sizes and
//! the same victims (the same seed), five runs on a fresh instance each,
//! median reported.
//!
//! Besides ns per step, each row has `high_water_bytes`: the highest end
//! address any area reached (from the allocator's base), a measure of
//! fragmentation (a lowest-fit allocator keeps it near the live bytes;
//! one that does not reuse holes early lets it climb).

use super::{Allocator, PAGE, Peer, REPEAT, Rng, Visit, build, median, name};
use serde_json::{Value, json};
use std::time::Instant;

/// Most live areas vm-allocator is run with under `--allocator all`.
pub const VM_ALLOCATOR_MAX: u64 = 20_000;

/// Steps per run when `--ops` is not given.
pub const DEFAULT_STEPS: u64 = 20_000;

/// The pre-generated workload: fill sizes, then per step a size and the
/// index of the live area to free (among the `live + 1` after the step's
/// allocation).
pub struct Plan {
    fill: Vec<u64>,
    steps: Vec<(u64, usize)>,
}

impl Plan {
    pub fn new(live: u64, steps: u64, seed: u64) -> Self {
        let mut r = Rng(seed ^ 0xa9ed);
        let mut size = || (r.next() % 16 + 1) * PAGE;
        let fill = (0..live).map(|_| size()).collect();
        let mut r2 = Rng(seed ^ 0x51c7);
        let steps = (0..steps)
            .map(|_| {
                let s = (r2.next() % 16 + 1) * PAGE;
                (s, (r2.next() % (live + 1)) as usize)
            })
            .collect();
        Self { fill, steps }
    }
}

/// One timed run: (ns for all steps, high-water mark in bytes).
struct Once<'a>(&'a Plan);
impl Visit for Once<'_> {
    type Out = (u64, u64);
    fn visit<P: Peer + 'static>(self, mut p: P) -> Result<(u64, u64), String> {
        let plan = self.0;
        let mut live: Vec<(P::H, u64)> = Vec::with_capacity(plan.fill.len() + 1);
        let mut high = 0;
        for &size in &plan.fill {
            let h = p.alloc(size, PAGE).ok_or("fill: allocation failed")?;
            high = high.max(P::offset(&h) + size);
            live.push((h, size));
        }
        let t = Instant::now();
        for &(size, victim) in &plan.steps {
            let h = p.alloc(size, PAGE).ok_or("allocation failed")?;
            high = high.max(P::offset(&h) + size);
            live.push((h, size));
            let (v, _) = live.swap_remove(victim);
            p.free(v);
        }
        let ns = t.elapsed().as_nanos() as u64;
        for (h, _) in live {
            p.free(h);
        }
        Ok((ns, high))
    }
}

/// Runs the aged pattern for every allocator in `allocators`: one JSON row
/// each (`pattern`, `allocator`, `ops`, `ns_per_op`, `live`,
/// `high_water_bytes`, `live_bytes_end`, `runs_ns_per_op`). With `every`
/// (`--allocator all`), vm-allocator is left out above [`VM_ALLOCATOR_MAX`]
/// live areas (null row with a note): its fill alone takes minutes there.
pub fn run(allocators: &[Allocator], live: u64, steps: u64, seed: u64, every: bool) -> Vec<Value> {
    let plan = Plan::new(live, steps, seed);
    let mut live_bytes: u64 = plan.fill.iter().sum();
    let mut sizes = plan.fill.clone();
    for &(s, v) in &plan.steps {
        sizes.push(s);
        live_bytes = live_bytes + s - sizes.swap_remove(v);
    }
    let mut rows = Vec::new();
    for &a in allocators {
        let mut row = json!({
            "pattern": "aged",
            "allocator": name(a),
            "ops": steps,
            "live": live,
            "live_bytes_end": live_bytes,
        });
        if every && a == Allocator::VmAllocator && live > VM_ALLOCATOR_MAX {
            row["ns_per_op"] = Value::Null;
            row["note"] = json!(format!(
                "left out above {VM_ALLOCATOR_MAX} live areas (filling them takes minutes); ask for it with --allocator vm-allocator"
            ));
            rows.push(row);
            continue;
        }
        let outcome = (0..REPEAT)
            .map(|_| build(a, live + 1, Once(&plan)))
            .collect::<Result<Vec<_>, String>>();
        match outcome {
            Ok(runs) => {
                let per: Vec<u64> = runs.iter().map(|r| r.0 / steps).collect();
                row["ns_per_op"] = json!(median(per.clone()));
                row["runs_ns_per_op"] = json!(per);
                row["high_water_bytes"] = json!(runs.iter().map(|r| r.1).max());
            }
            Err(e) => {
                row["ns_per_op"] = Value::Null;
                row["note"] = json!(e);
            }
        }
        eprintln!("vmap-bench: aged live={live} {} done", name(a));
        rows.push(row);
    }
    rows
}
