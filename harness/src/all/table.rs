//! The report's building blocks: a story with its tables, ratios and chart
//! data, rendered as aligned text (stdout) or Markdown (report.md), plus the
//! number formatting every table shares.

use serde::Serialize;
use serde_json::Value;

/// One table of a story.
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    /// Caption.
    pub title: String,
    /// Column headers.
    pub columns: Vec<String>,
    /// Cells, already formatted.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these headers.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Self {
        Self {
            title: title.into(),
            columns: columns.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (padded or cut to the number of columns).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells = cells;
        cells.resize(self.columns.len(), String::new());
        self.rows.push(cells);
    }

    /// Aligned plain text: first column left, the rest right.
    pub fn to_text(&self) -> String {
        let n = self.columns.len();
        let mut w: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = w[i].saturating_sub(c.chars().count());
                if i == 0 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str("  ");
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s.trim_end().to_string()
        };
        let mut out = format!("{}\n{}\n", self.title, line(&self.columns));
        out.push_str(&format!(
            "{}\n",
            "-".repeat(w.iter().sum::<usize>() + 2 * n.saturating_sub(1))
        ));
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }

    /// A Markdown table with its caption in bold.
    pub fn to_markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        let mut out = format!("**{}**\n\n", esc(&self.title));
        out.push_str(&format!(
            "| {} |\n",
            self.columns
                .iter()
                .map(|c| esc(c))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        out.push_str(&format!(
            "|{}\n",
            (0..self.columns.len())
                .map(|i| if i == 0 { "---|" } else { "---:|" })
                .collect::<String>()
        ));
        for r in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            ));
        }
        out
    }
}

/// One series of a chart: a name and one value per category (bars) or
/// points (lines).
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// `(x, y)`; for bar panels x is the category index.
    pub points: Vec<(f64, f64)>,
    /// Draw the line dashed (a second family of the same cases).
    #[serde(skip)]
    pub dashed: bool,
    /// Palette index (default: the series' position).
    #[serde(skip)]
    pub color: Option<usize>,
}

/// One panel of a chart.
#[derive(Clone, Debug, Serialize)]
pub struct Panel {
    /// Panel caption.
    pub caption: String,
    /// Bar categories (empty: a line plot over a numeric x axis).
    pub categories: Vec<String>,
    /// X axis label with unit.
    pub x_label: String,
    /// Y axis label with unit.
    pub y_label: String,
    /// Logarithmic x axis (line plots).
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The data.
    pub series: Vec<Series>,
}

/// A chart: one SVG file, one or more panels side by side.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    /// File name under the output directory.
    pub file: String,
    /// Title drawn on top.
    pub title: String,
    /// Panels, left to right.
    pub panels: Vec<Panel>,
}

/// A story's section of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Story {
    /// Short id (`story1` …).
    pub id: &'static str,
    /// Heading.
    pub title: String,
    /// What the story itself reported (SPEC.md), one fact per line.
    pub seed: Vec<String>,
    /// Tables of this run.
    pub tables: Vec<Table>,
    /// Named ratios of this run (the figures the story is judged by).
    #[serde(serialize_with = "ratios_as_objects")]
    pub ratios: Vec<(String, Option<f64>)>,
    /// Remarks: what differs from the story's setup.
    pub notes: Vec<String>,
    /// Its charts.
    pub charts: Vec<Chart>,
}

fn ratios_as_objects<S: serde::Serializer>(
    r: &[(String, Option<f64>)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(r.len()))?;
    for (name, value) in r {
        seq.serialize_element(&serde_json::json!({"name": name, "value": value}))?;
    }
    seq.end()
}

/// `v[key]` as a number.
pub fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// A time in ns, scaled to a readable unit.
pub fn fmt_ns(ns: Option<f64>) -> String {
    match ns {
        None => "n/a".into(),
        Some(ns) if ns >= 1e9 => format!("{:.2} s", ns / 1e9),
        Some(ns) if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        Some(ns) if ns >= 1e4 => format!("{:.1} µs", ns / 1e3),
        Some(ns) if ns >= 100.0 => format!("{ns:.0} ns"),
        Some(ns) => format!("{ns:.1} ns"),
    }
}

/// A count with thousands separators.
pub fn fmt_count(n: Option<f64>) -> String {
    let Some(n) = n else { return "n/a".into() };
    if n.fract() != 0.0 {
        return format!("{n:.2}");
    }
    let s = format!("{}", n as i128);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// `a / b`, when both exist and b is not 0.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// A ratio as `12.3×`.
pub fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        None => "n/a".into(),
        Some(r) if r >= 1e4 => format!("{r:.3e}×"),
        Some(r) if r >= 100.0 => format!("{r:.0}×"),
        Some(r) if r < 0.01 => format!("{:.3} %", r * 100.0),
        Some(r) => format!("{r:.2}×"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_counts_times_and_ratios() {
        assert_eq!(fmt_count(Some(134_217_704.0)), "134,217,704");
        assert_eq!(fmt_count(Some(12.0)), "12");
        assert_eq!(fmt_count(Some(4066.85)), "4066.85");
        assert_eq!(fmt_ns(Some(24_696.0)), "24.7 µs");
        assert_eq!(fmt_ns(Some(3.39e9)), "3.39 s");
        assert_eq!(fmt_ratio(ratio(Some(10.0), Some(4.0))), "2.50×");
        assert_eq!(fmt_ratio(ratio(Some(1.0), Some(0.0))), "n/a");
        assert_eq!(fmt_ratio(ratio(Some(24.0), Some(200_000.0))), "0.012 %");
    }

    #[test]
    fn text_and_markdown_keep_every_cell() {
        let mut t = Table::new("T", &["a", "b"]);
        t.row(vec!["x|y".into(), "1".into()]);
        assert!(t.to_text().contains("x|y  1"));
        assert!(t.to_markdown().contains("| x\\|y | 1 |"));
        assert!(t.to_markdown().contains("|---|---:|"));
    }
}
