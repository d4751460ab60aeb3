//! The machine a report was measured on: CPU model, cores, load, rustc and
//! git commit. Read at run time; anything unavailable is reported as
//! "unknown" rather than guessed.

use serde::Serialize;
use std::process::Command;

/// The machine description of `report.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// Logical CPUs the process may use.
    pub cores: usize,
    /// /proc/loadavg at the start (other work on the machine skews times).
    pub loadavg_start: String,
    /// /proc/loadavg at the end.
    pub loadavg_end: String,
    /// `rustc -V`.
    pub rustc: String,
    /// `git rev-parse HEAD` (with `-dirty` when the tree has changes).
    pub git_commit: String,
    /// Target triple parts this binary was built for.
    pub target: String,
    /// Whether this is an optimised build.
    pub release_build: bool,
    /// The host's double-word CAS.
    pub dwcas: &'static str,
}

fn command_line(cmd: &str, args: &[&str]) -> Option<String> {
    let o = Command::new(cmd).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The load average now.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn git_commit() -> String {
    let Some(head) = command_line("git", &["rev-parse", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty = command_line("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

impl Machine {
    /// Describes this machine now.
    pub fn describe() -> Self {
        Self {
            cpu_model: cpu_model(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg_start: loadavg(),
            loadavg_end: String::new(),
            rustc: command_line("rustc", &["-V"]).unwrap_or_else(|| "unknown".into()),
            git_commit: git_commit(),
            target: format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
            release_build: !cfg!(debug_assertions),
            dwcas: crate::arch::host_dwcas_name(),
        }
    }

    /// One line for tables and the README.
    pub fn one_line(&self) -> String {
        format!(
            "{} ({} cores), load {} -> {}, {}, commit {}, {} build",
            self.cpu_model,
            self.cores,
            self.loadavg_start,
            self.loadavg_end,
            self.rustc,
            self.git_commit,
            if self.release_build {
                "release"
            } else {
                "debug"
            }
        )
    }
}
