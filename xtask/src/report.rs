//! Reporting the rows: a plain-text table, or one JSON object `{"rows":[…]}`.

use serde::Serialize;

/// How a row ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The command succeeded.
    Pass,
    /// The command failed, could not start, or timed out.
    Fail,
    /// Not run (`--quick`, `--only`, or nothing to run).
    Skipped,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skipped => "skipped",
        }
    }
}

/// One reported row.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Target triple, or `host`.
    pub target: String,
    /// Configuration.
    pub config: String,
    /// Step name.
    pub step: String,
    /// The loom test (`crate/loom_name`) where a step has one row per test file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    /// pass / fail / skipped.
    pub status: Status,
    /// Wall-clock seconds (0 when skipped).
    #[serde(serialize_with = "two_decimals")]
    pub seconds: f64,
    /// Why it was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The command line (or the setup summary).
    pub command: String,
    /// What a failed row printed that says why (see `excerpt.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

impl Row {
    /// The step, with its test where it has one (`loom crate/loom_x`).
    fn step_label(&self) -> String {
        match &self.test {
            Some(test) => format!("{} {test}", self.step),
            None => self.step.clone(),
        }
    }
}

fn two_decimals<S: serde::Serializer>(seconds: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((seconds * 100.0).round() / 100.0)
}

/// Whether any row failed (the exit status is 1 then).
pub fn any_failed(rows: &[Row]) -> bool {
    rows.iter().any(|r| r.status == Status::Fail)
}

/// `{"rows":[…]}`, pretty-printed.
pub fn json(rows: &[Row]) -> String {
    #[derive(Serialize)]
    struct Report<'a> {
        rows: &'a [Row],
    }
    serde_json::to_string_pretty(&Report { rows }).expect("rows serialize")
}

/// Each failed row's excerpt under a header naming the row, for the end
/// of the log (the table follows it).
pub fn excerpts(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows.iter().filter(|r| r.status == Status::Fail) {
        out.push_str(&format!(
            "==> why [{}/{}] {} failed: {}\n",
            r.target,
            r.config,
            r.step_label(),
            r.command
        ));
        out.push_str(r.excerpt.as_deref().unwrap_or("(nothing kept)\n"));
    }
    out
}

/// An aligned table with a summary line.
pub fn table(rows: &[Row]) -> String {
    let header = ["TARGET", "CONFIG", "STEP", "STATUS", "SECONDS", "NOTE"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let step = r.step_label();
            let seconds = if r.status == Status::Skipped {
                "-".to_string()
            } else {
                format!("{:.1}", r.seconds)
            };
            [
                r.target.clone(),
                r.config.clone(),
                step,
                r.status.as_str().to_string(),
                seconds,
                r.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &cells {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |row: [&str; 6]| {
        let mut out = String::new();
        for (i, cell) in row.iter().enumerate() {
            match i {
                4 => out.push_str(&format!("{cell:>w$}  ", w = width[i])),
                5 => out.push_str(cell),
                _ => out.push_str(&format!("{cell:<w$}  ", w = width[i])),
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header);
    for row in &cells {
        out.push_str(&line(row.each_ref().map(String::as_str)));
    }
    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let total: f64 = rows.iter().map(|r| r.seconds).sum();
    out.push_str(&format!(
        "{} passed, {} failed, {} skipped; rows' seconds add up to {:.1}\n",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skipped),
        total
    ));
    out
}
