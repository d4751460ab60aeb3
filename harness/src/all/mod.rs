//! `harness all`: the command a newcomer runs first. Runs every workload at
//! a scale that finishes in minutes (`--quick`: under one), each as a child
//! run of this binary with `--json` (`plan.rs`, `runner.rs`), then prints
//! each story's table beside the story's own figures and the peers
//! (`story_*.rs`), writes `report.md`, `report.json`, `report.html` and one
//! SVG chart per story (`report.rs`, `charts.rs`), and sums every invariant
//! the workloads check (`invariants.rs`): any non-zero makes the exit
//! status non-zero.

mod charts;
mod invariants;
mod machine;
mod plan;
mod report;
mod runner;
mod story_aged;
mod story_malloc;
mod story_slab;
mod story_soak;
mod story_vmalloc;
mod story_zap;
mod table;

use crate::cli::Common;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;

/// Flags of `all`.
#[derive(Args, Clone, Debug)]
pub struct AllArgs {
    /// Smaller scales: finishes in under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Where the report goes [default: target/harness under the workspace
    /// root, else under the current directory].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs everything; returns the exit status (1 when an invariant is broken,
/// a run failed or the report could not be written).
pub fn run(common: &Common, args: &AllArgs) -> i32 {
    let t0 = Instant::now();
    let mut machine = machine::Machine::describe();
    let preload = story_malloc::preload();
    let mut steps = plan::steps(args.quick);
    steps.extend(plan::malloc_steps(args.quick, preload.is_ok()));
    let runs = runner::run_all(common, &steps, false);
    machine.loadavg_end = machine::loadavg();
    let stories = vec![
        story_vmalloc::story1(&runs),
        story_zap::story2(&runs),
        story_slab::story3(&runs),
        story_vmalloc::story4(&runs),
        story_vmalloc::story5(&runs),
        story_malloc::story(&runs, &preload),
        story_soak::soak(&runs),
    ];
    let invariants = invariants::summarise(&runs);
    let rep = report::Report {
        machine,
        quick: args.quick,
        wall_ns: t0.elapsed().as_nanos() as u64,
        runs,
        stories,
        invariants,
    };
    let out = args.out.clone().unwrap_or_else(report::default_out_dir);
    let written = write(&rep, &out);
    if let Err(e) = &written {
        eprintln!("all: writing the report to {}: {e}", out.display());
    }
    if common.json {
        let charts = written.clone().unwrap_or_default();
        println!("{}", rep.to_json(&out, &charts));
    } else {
        print!("{}", rep.to_text());
        println!(
            "\nreport: {} (also report.json, report.html and the charts there)",
            out.join("report.md").display()
        );
    }
    if rep.invariants.total == 0 && written.is_ok() {
        0
    } else {
        1
    }
}

/// Writes the charts and the three report files; returns the chart names.
fn write(rep: &report::Report, out: &std::path::Path) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let mut svgs = Vec::new();
    for c in rep.stories.iter().flat_map(|s| &s.charts) {
        let svg = charts::render(c)?;
        std::fs::write(out.join(&c.file), &svg).map_err(|e| format!("{}: {e}", c.file))?;
        svgs.push((c.file.clone(), svg));
    }
    let names: Vec<String> = svgs.iter().map(|(f, _)| f.clone()).collect();
    let json =
        serde_json::to_string_pretty(&rep.to_json(out, &names)).map_err(|e| e.to_string())?;
    for (file, text) in [
        ("report.md", rep.to_markdown()),
        ("report.json", json),
        ("report.html", rep.to_html(&svgs)),
    ] {
        std::fs::write(out.join(file), text).map_err(|e| format!("{file}: {e}"))?;
    }
    Ok(names)
}
