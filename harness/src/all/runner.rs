//! Runs the plan: each step is this binary re-executed with `--json`, one
//! at a time (so no step's timing competes with another), under one
//! `indicatif` progress bar per workload on stderr.

use super::plan::Step;
use crate::cli::Common;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one step produced.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The subcommand.
    pub workload: &'static str,
    /// Its flags.
    pub args: Vec<String>,
    /// The command line, for the report.
    pub command: String,
    /// Exit status (`None`: killed by a signal or not started).
    pub status: Option<i32>,
    /// Wall time of the child, ns.
    pub wall_ns: u64,
    /// Its JSON object (`Null` when it printed none).
    pub json: Value,
    /// Why it failed, if it did (start error, bad JSON, stderr tail).
    pub error: Option<String>,
}

impl RunResult {
    /// The value of `--flag` in this run's arguments.
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let i = self.args.iter().position(|a| a == flag)?;
        self.args.get(i + 1).map(String::as_str)
    }

    /// Whether `--flag` (without value) was given.
    pub fn has(&self, flag: &str) -> bool {
        self.args.iter().any(|a| a == flag)
    }
}

/// The common flags a child must share with this run.
fn common_args(c: &Common) -> Vec<String> {
    vec![
        "--seed".into(),
        c.seed.to_string(),
        "--cpus".into(),
        c.cpus.to_string(),
        "--flush-cost-ns".into(),
        c.flush_cost_ns.to_string(),
        "--full-flush-cost-ns".into(),
        c.full_flush_cost_ns.to_string(),
        "--ipi-cost-ns".into(),
        c.ipi_cost_ns.to_string(),
    ]
}

fn run_one(exe: &std::path::Path, common: &Common, step: &Step) -> RunResult {
    let mut cmd = Command::new(exe);
    cmd.arg("--json")
        .args(common_args(common))
        .arg(step.workload)
        .args(&step.args)
        .stdin(Stdio::null());
    let t0 = Instant::now();
    let out = cmd.output();
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let mut r = RunResult {
        workload: step.workload,
        args: step.args.clone(),
        command: step.command_line(),
        status: None,
        wall_ns,
        json: Value::Null,
        error: None,
    };
    match out {
        Err(e) => r.error = Some(format!("could not start {}: {e}", exe.display())),
        Ok(o) => {
            r.status = o.status.code();
            let stdout = String::from_utf8_lossy(&o.stdout);
            match serde_json::from_str::<Value>(stdout.trim()) {
                Ok(v) => r.json = v,
                Err(e) => r.error = Some(format!("no JSON object on stdout: {e}")),
            }
            if !o.status.success() {
                let err = String::from_utf8_lossy(&o.stderr);
                let tail: Vec<_> = err.lines().rev().take(3).collect();
                let tail: Vec<_> = tail.into_iter().rev().collect();
                let why = format!("exit status {:?}: {}", o.status.code(), tail.join(" | "));
                r.error = Some(match r.error.take() {
                    Some(prev) => format!("{why}; {prev}"),
                    None => why,
                });
            }
        }
    }
    r
}

/// Runs every step; one progress bar per workload (hidden when `quiet`).
pub fn run_all(common: &Common, steps: &[Step], quiet: bool) -> Vec<RunResult> {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            return steps
                .iter()
                .map(|s| RunResult {
                    workload: s.workload,
                    args: s.args.clone(),
                    command: s.command_line(),
                    status: None,
                    wall_ns: 0,
                    json: Value::Null,
                    error: Some(format!("cannot find the harness binary: {e}")),
                })
                .collect();
        }
    };
    let multi = MultiProgress::with_draw_target(if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let style = ProgressStyle::with_template(
        "{spinner:.green} {prefix:<13.bold} [{bar:24.cyan/blue}] {pos}/{len} {elapsed:>4} {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    // One bar per workload, in plan order.
    let mut bars: Vec<(&'static str, ProgressBar)> = Vec::new();
    for s in steps {
        if let Some((_, b)) = bars.iter().find(|(w, _)| *w == s.workload) {
            b.inc_length(1);
        } else {
            let b = multi.add(ProgressBar::new(1));
            b.set_style(style.clone());
            b.set_prefix(s.workload);
            b.set_message("waiting");
            bars.push((s.workload, b));
        }
    }
    let mut results: Vec<RunResult> = Vec::with_capacity(steps.len());
    for s in steps {
        let Some((_, bar)) = bars.iter().find(|(w, _)| *w == s.workload) else {
            continue;
        };
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.set_message(s.args.join(" "));
        let r = run_one(&exe, common, s);
        bar.inc(1);
        results.push(r);
        if bar.position() == bar.length().unwrap_or(0) {
            let failed = results
                .iter()
                .filter(|r| r.workload == s.workload && r.error.is_some())
                .count();
            if failed == 0 {
                bar.finish_with_message("done");
            } else {
                bar.set_message(format!("{failed} run(s) FAILED"));
                bar.abandon();
            }
        }
    }
    results
}
