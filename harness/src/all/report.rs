//! The report in its three forms: `report.md`, `report.json` (every number
//! and the machine) and `report.html` (the tables with one inline SVG chart
//! per story), plus the SVG files themselves and the text for stdout.

use super::invariants::Invariants;
use super::machine::Machine;
use super::runner::RunResult;
use super::table::{Story, fmt_ns, fmt_ratio};
use serde_json::{Value, json};
use std::path::Path;

/// Everything one `harness all` run found.
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// `--quick`?
    pub quick: bool,
    /// Wall time of the whole run, ns.
    pub wall_ns: u64,
    /// The child runs.
    pub runs: Vec<RunResult>,
    /// The stories, in order.
    pub stories: Vec<Story>,
    /// The invariants.
    pub invariants: Invariants,
}

impl Report {
    /// `report.json`'s content.
    pub fn to_json(&self, out_dir: &Path, charts: &[String]) -> Value {
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                json!({
                    "workload": r.workload,
                    "command": r.command,
                    "exit_status": r.status,
                    "wall_ns": r.wall_ns,
                    "error": r.error,
                    "result": r.json,
                })
            })
            .collect();
        json!({
            "machine": self.machine,
            "quick": self.quick,
            "wall_ns": self.wall_ns,
            "runs": runs,
            "stories": self.stories,
            "invariants": self.invariants,
            "files": {
                "dir": out_dir.display().to_string(),
                "markdown": "report.md",
                "json": "report.json",
                "html": "report.html",
                "charts": charts,
            },
        })
    }

    fn invariant_lines(&self) -> Vec<String> {
        let inv = &self.invariants;
        let mut l: Vec<String> = inv
            .counters
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        l.push(format!("failed test cases: {}", inv.failed_cases));
        l.push(format!("inconsistent structures: {}", inv.inconsistent));
        l.push(format!("failed runs: {}", inv.failed_runs.len()));
        l.extend(inv.failed_runs.iter().map(|f| format!("  {f}")));
        l.push(format!(
            "TOTAL: {} ({})",
            inv.total,
            if inv.total == 0 { "clean" } else { "NOT CLEAN" }
        ));
        l
    }

    fn header(&self) -> String {
        format!(
            "harness all{}: {} workload runs in {}",
            if self.quick { " --quick" } else { "" },
            self.runs.len(),
            fmt_ns(Some(self.wall_ns as f64))
        )
    }

    /// The readable tables for stdout.
    pub fn to_text(&self) -> String {
        let mut s = format!("{}\nmachine: {}\n", self.header(), self.machine.one_line());
        for st in &self.stories {
            s.push_str(&format!("\n== {} ==\n", st.title));
            for f in &st.seed {
                s.push_str(&format!("  seed: {f}\n"));
            }
            for t in &st.tables {
                s.push('\n');
                s.push_str(&t.to_text());
            }
            if !st.ratios.is_empty() {
                s.push_str("\nratios (this run):\n");
                for (n, r) in &st.ratios {
                    s.push_str(&format!("  {n}: {}\n", fmt_ratio(*r)));
                }
            }
            let shown = |n: &&String| n.starts_with("first problem") || n.starts_with("skipped");
            for n in st.notes.iter().filter(shown) {
                s.push_str(&format!("  {n}\n"));
            }
        }
        s.push_str("\n== invariants ==\n");
        for l in self.invariant_lines() {
            s.push_str(&format!("  {l}\n"));
        }
        s
    }

    /// `report.md`.
    pub fn to_markdown(&self) -> String {
        let m = &self.machine;
        let mut s = format!(
            "# Harness report\n\n{}.\n\nMachine: {}.\n\n",
            self.header(),
            m.one_line()
        );
        for st in &self.stories {
            s.push_str(&format!("## {}\n\n", st.title));
            if !st.seed.is_empty() {
                s.push_str("What the story reported:\n\n");
            }
            for f in &st.seed {
                s.push_str(&format!("- {f}\n"));
            }
            for t in &st.tables {
                s.push('\n');
                s.push_str(&t.to_markdown());
            }
            if !st.ratios.is_empty() {
                s.push_str("\nRatios of this run:\n\n");
                for (n, r) in &st.ratios {
                    s.push_str(&format!("- {n}: **{}**\n", fmt_ratio(*r)));
                }
            }
            if !st.notes.is_empty() {
                s.push('\n');
                for n in &st.notes {
                    s.push_str(&format!("> {n}\n>\n"));
                }
            }
            for c in &st.charts {
                s.push_str(&format!("\n![{}]({})\n", c.title, c.file));
            }
            s.push('\n');
        }
        s.push_str("## Invariants\n\n");
        for l in self.invariant_lines() {
            s.push_str(&format!("- {}\n", l.trim()));
        }
        s.push_str("\n## Commands\n\nEach row above comes from one of these runs (with the common flags of this run):\n\n");
        for r in &self.runs {
            s.push_str(&format!(
                "- `{}` ({}, {})\n",
                r.command,
                fmt_ns(Some(r.wall_ns as f64)),
                match r.status {
                    Some(code) => format!("exit {code}"),
                    None => "no exit status (not started or killed by a signal)".to_string(),
                }
            ));
        }
        s
    }

    /// `report.html`, with the SVGs inline (`svgs`: file name → document).
    pub fn to_html(&self, svgs: &[(String, String)]) -> String {
        let mut s = String::from(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Harness report</title>\n<style>body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:2px 8px}td{text-align:right}td:first-child{text-align:left}th{background:#eee}.bad{color:#b00;font-weight:bold}</style></head><body>\n",
        );
        s.push_str(&format!(
            "<h1>Harness report</h1>\n<p>{}.</p>\n<p>Machine: {}.</p>\n",
            esc(&self.header()),
            esc(&self.machine.one_line())
        ));
        for st in &self.stories {
            s.push_str(&format!("<h2>{}</h2>\n", esc(&st.title)));
            if !st.seed.is_empty() {
                s.push_str("<p>What the story reported:</p>");
            }
            s.push_str("<ul>");
            for f in &st.seed {
                s.push_str(&format!("<li>{}</li>", esc(f)));
            }
            s.push_str("</ul>\n");
            for t in &st.tables {
                s.push_str(&format!("<table><caption>{}</caption><tr>", esc(&t.title)));
                for c in &t.columns {
                    s.push_str(&format!("<th>{}</th>", esc(c)));
                }
                s.push_str("</tr>\n");
                for r in &t.rows {
                    s.push_str("<tr>");
                    for c in r {
                        s.push_str(&format!("<td>{}</td>", esc(c)));
                    }
                    s.push_str("</tr>\n");
                }
                s.push_str("</table>\n");
            }
            if !st.ratios.is_empty() {
                s.push_str("<p>Ratios of this run:</p><ul>");
                for (n, r) in &st.ratios {
                    s.push_str(&format!("<li>{}: <b>{}</b></li>", esc(n), fmt_ratio(*r)));
                }
                s.push_str("</ul>\n");
            }
            for n in &st.notes {
                s.push_str(&format!("<p><i>{}</i></p>\n", esc(n)));
            }
            for c in &st.charts {
                if let Some((_, svg)) = svgs.iter().find(|(f, _)| *f == c.file) {
                    s.push_str(&format!("<figure>{svg}</figure>\n"));
                }
            }
        }
        let class = if self.invariants.total == 0 {
            ""
        } else {
            " class=\"bad\""
        };
        s.push_str("<h2>Invariants</h2><ul>");
        for l in self.invariant_lines() {
            s.push_str(&format!("<li{class}>{}</li>", esc(l.trim())));
        }
        s.push_str("</ul>\n</body></html>\n");
        s
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The default output directory: `target/harness` under the workspace root
/// (the nearest ancestor whose Cargo.toml has `[workspace]`), else under
/// the current directory.
pub fn default_out_dir() -> std::path::PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let root = cwd
        .ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|s| s.contains("[workspace]"))
        })
        .unwrap_or(&cwd)
        .to_path_buf();
    root.join("target").join("harness")
}
