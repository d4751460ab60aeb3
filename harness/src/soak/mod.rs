//! `harness soak`: randomised mixes of every component at once, for
//! `--seconds S` on `--threads T` real threads.
//!
//! Each thread loops until the deadline, picking at random among
//! * vmalloc / vfree / vmap / vunmap / vm_map_ram / vm_unmap_ram on one
//!   shared `Vmalloc` over the sharded vmap nodes, with cross-thread
//!   vfrees, CPU migration and purges forced at random points (`vm.rs`);
//! * map / translate / zap on every page-table layout, under every
//!   `ZapBudget` (`zap.rs`), each thread with its own page tables (its own
//!   mm) over one shared frame arena;
//! * kmalloc / kfree of every size class and large sizes, on the tid and
//!   the sheaves fronts, with cross-thread frees and random migration of
//!   the task between CPU slots at the fast-path window (`slab.rs`).
//!
//! Invariants are checked as it runs (stale TLB entries on every vmalloc,
//! translations after every map and zap, an object's contents from kmalloc
//! to kfree); at the end every frame, table page, slab page, object and
//! virtual range must be accounted for. The JSON has HARNESS.md's `ops`,
//! `violations`, `leaked_pages`, `leaked_objects`, and the details per
//! component; exit status 1 when any of them is not 0.

mod slab;
mod vm;
mod zap;

use crate::cli::Common;
use clap::Args;
use serde_json::json;
use std::time::{Duration, Instant};

/// Flags of `soak`.
#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// How long to run, seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub seconds: u64,
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
}

/// The soak's random numbers (xorshift64*, seeded per thread).
pub struct Rng(u64);

impl Rng {
    /// A generator for thread `t` of a run seeded with `seed`.
    pub fn new(seed: u64, t: u64) -> Self {
        Self((seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(t * 2 + 1) | 1)
    }

    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// What a component counted: operations, broken invariants found while
/// running, and what was not returned at the end.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Tally {
    /// Operations done.
    pub ops: u64,
    /// Invariants broken while running.
    pub violations: u64,
    /// Frames (pages) not returned at the end.
    pub leaked_pages: u64,
    /// Page-table pages left below the roots after everything was unmapped.
    pub leaked_tables: u64,
    /// Slab objects the allocator still counts after every free.
    pub leaked_objects: u64,
    /// Virtual ranges still reserved (or lazy) after the final purge.
    pub leaked_ranges: u64,
    /// The first problem seen, for the report.
    pub first_problem: Option<String>,
}

impl Tally {
    /// Records a broken invariant.
    pub fn violation(&mut self, what: impl FnOnce() -> String) {
        self.violations += 1;
        if self.first_problem.is_none() {
            self.first_problem = Some(what());
        }
    }

    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Tally) {
        self.ops += o.ops;
        self.violations += o.violations;
        self.leaked_pages += o.leaked_pages;
        self.leaked_tables += o.leaked_tables;
        self.leaked_objects += o.leaked_objects;
        self.leaked_ranges += o.leaked_ranges;
        if self.first_problem.is_none() {
            self.first_problem.clone_from(&o.first_problem);
        }
    }

    fn bad(&self) -> u64 {
        self.violations
            + self.leaked_pages
            + self.leaked_tables
            + self.leaked_objects
            + self.leaked_ranges
    }
}

/// Runs the soak; returns the exit status.
pub fn run(common: &Common, a: &SoakArgs) -> i32 {
    let threads = a.threads as usize;
    let cpus = (common.cpus as usize).max(threads);
    let t0 = Instant::now();
    let out = (|| -> Result<[(&'static str, Tally); 3], String> {
        let vm = vm::VmSoak::setup(cpus)?;
        let slab = slab::SlabSoak::setup(cpus, threads)?;
        let zap_arena = zap::arena()?;
        // The clock starts once everything is set up.
        let deadline = Instant::now() + Duration::from_secs(a.seconds);
        let zap_tallies: Vec<Tally> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (vm, slab, zap_arena) = (&vm, &slab, &zap_arena);
                    s.spawn(move || {
                        let mut rng = Rng::new(common.seed, t as u64);
                        let mut zt = zap::ThreadZap::new(zap_arena, t);
                        let mut vt = vm.thread(t);
                        let mut st = slab.thread(t);
                        while Instant::now() < deadline {
                            // A burst per pick keeps the deadline check cheap.
                            for _ in 0..32 {
                                match rng.below(10) {
                                    0..=3 => vm.step(&mut vt, &mut rng),
                                    4..=7 => slab.step(&mut st, &mut rng),
                                    _ => zt.step(&mut rng),
                                }
                            }
                        }
                        vm.park(vt);
                        slab.park(st);
                        zt.finish()
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| Tally {
                        violations: 1,
                        first_problem: Some("a soak thread panicked".into()),
                        ..Tally::default()
                    })
                })
                .collect()
        });
        let mut z = Tally::default();
        zap_tallies.iter().for_each(|t| z.add(t));
        z.leaked_pages += zap_arena.frames_in_use();
        Ok([
            ("vmalloc", vm.finish()),
            ("kmalloc", slab.finish()),
            ("page_tables", z),
        ])
    })();
    let parts = match out {
        Ok(p) => p,
        Err(e) => {
            eprintln!("soak: {e}");
            return 1;
        }
    };
    let mut total = Tally::default();
    parts.iter().for_each(|(_, t)| total.add(t));
    let wall_ns = t0.elapsed().as_nanos() as u64;
    if common.json {
        let comps: serde_json::Map<String, serde_json::Value> = parts
            .iter()
            .map(|(n, t)| ((*n).to_string(), json!(t)))
            .collect();
        println!(
            "{}",
            json!({
                "seconds": a.seconds,
                "threads": a.threads,
                "cpus": cpus,
                "wall_ns": wall_ns,
                "ops": total.ops,
                "violations": total.violations,
                "leaked_pages": total.leaked_pages,
                "leaked_objects": total.leaked_objects,
                "leaked_tables": total.leaked_tables,
                "leaked_ranges": total.leaked_ranges,
                "first_problem": total.first_problem,
                "components": comps,
            })
        );
    } else {
        println!(
            "soak: {} s on {} threads ({} simulated CPUs)",
            a.seconds, a.threads, cpus
        );
        println!(
            "{:<12} {:>12} {:>10} {:>12} {:>13} {:>14} {:>13}",
            "component",
            "ops",
            "violations",
            "leaked_pages",
            "leaked_tables",
            "leaked_objects",
            "leaked_ranges"
        );
        for (n, t) in parts.iter().chain([("total", total.clone())].iter()) {
            println!(
                "{:<12} {:>12} {:>10} {:>12} {:>13} {:>14} {:>13}",
                n,
                t.ops,
                t.violations,
                t.leaked_pages,
                t.leaked_tables,
                t.leaked_objects,
                t.leaked_ranges
            );
        }
        if let Some(p) = &total.first_problem {
            println!("first problem: {p}");
        }
    }
    i32::from(total.bad() != 0)
}
