//! The report's charts, drawn with plotters' SVG backend (no system fonts:
//! text is emitted as SVG `<text>` and laid out by the viewer). Each chart
//! has a title, axes labelled with units and a legend; a panel is either
//! grouped bars over categories or lines over a numeric x axis, each axis
//! linear or logarithmic.

use super::table::{Chart, Panel};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("chart: {e:?}")
}

/// The value range of a panel's axis; log axes need positive bounds.
/// `from_zero`: a bar axis (starts at 0, or a decade below the smallest bar);
/// `room`: decades (log) or fraction of the span (linear) left free on top
/// for the legend.
fn bounds(values: impl Iterator<Item = f64>, log: bool, from_zero: bool, room: f64) -> (f64, f64) {
    let v: Vec<f64> = values
        .filter(|x| x.is_finite() && (!log || *x > 0.0))
        .collect();
    let (mut lo, mut hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    if v.is_empty() {
        (lo, hi) = (1.0, 10.0);
    }
    if log {
        // A decade below the smallest value, so a value of 1 still shows as
        // a bar; bars get a decade on top for the legend and value labels.
        let below = if from_zero { 0.999 } else { 1.0 };
        lo = 10f64.powf((lo * below).log10().floor());
        hi = 10f64.powf((hi.log10() - 1e-9).ceil()).max(lo * 10.0);
        hi *= 10f64.powf(room.round());
    } else {
        if from_zero {
            lo = lo.min(0.0);
        }
        let pad = ((hi - lo) * room.max(0.08)).max(hi.abs() * 0.05).max(1e-9);
        hi += pad;
        if !from_zero {
            lo -= pad;
        }
    }
    (lo, hi)
}

/// Draws one panel with x coordinate `$x` and y coordinate `$y` (each a
/// linear or log range): the same body for the four combinations.
macro_rules! draw_panel {
    ($area:expr, $p:expr, $x:expr, $y:expr, $ylo:expr) => {{
        let p: &Panel = $p;
        let cats = &p.categories;
        let mut chart = ChartBuilder::on($area)
            .caption(&p.caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(if cats.is_empty() { 42 } else { 56 })
            .y_label_area_size(72)
            .build_cartesian_2d($x, $y)
            .map_err(err)?;
        let cat_label = |v: &f64| {
            let i = v - 0.5;
            if (i - i.round()).abs() < 1e-6 && i >= 0.0 {
                cats.get(i.round() as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&p.x_label)
            .y_desc(&p.y_label)
            .axis_desc_style(("sans-serif", 14))
            .label_style(("sans-serif", 12));
        if cats.is_empty() {
            mesh.x_label_formatter(&|v| short(*v));
        } else {
            mesh.disable_x_mesh()
                .x_labels(2 * cats.len() + 1)
                .x_label_formatter(&cat_label);
        }
        mesh.y_label_formatter(&|v| short(*v));
        mesh.draw().map_err(err)?;
        let k = p.series.len().max(1) as f64;
        for (si, s) in p.series.iter().enumerate() {
            let c = color(s.color.unwrap_or(si));
            if cats.is_empty() {
                let pts: Vec<(f64, f64)> = s.points.clone();
                if s.dashed {
                    chart
                        .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, c.stroke_width(2)))
                        .map_err(err)?
                        .label(&s.name)
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 7, y)], c.stroke_width(2))
                        });
                    chart
                        .draw_series(
                            pts.into_iter()
                                .map(|pt| TriangleMarker::new(pt, 4, c.filled())),
                        )
                        .map_err(err)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                        .map_err(err)?
                        .label(&s.name)
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                        });
                    chart
                        .draw_series(pts.into_iter().map(|pt| Circle::new(pt, 3, c.filled())))
                        .map_err(err)?;
                }
            } else {
                let w = 0.8 / k;
                chart
                    .draw_series(s.points.iter().map(|&(i, v)| {
                        let x0 = i + 0.1 + w * si as f64;
                        Rectangle::new([(x0, $ylo), (x0 + w * 0.92, v)], c.filled())
                    }))
                    .map_err(err)?
                    .label(&s.name)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
                    });
                let label_style = TextStyle::from(("sans-serif", 10).into_font())
                    .pos(Pos::new(HPos::Center, VPos::Bottom));
                chart
                    .draw_series(s.points.iter().map(|&(i, v)| {
                        let x = i + 0.1 + w * (si as f64 + 0.46);
                        Text::new(short(v), (x, v), label_style.clone())
                    }))
                    .map_err(err)?;
            }
        }
        chart
            .configure_series_labels()
            .position(if cats.is_empty() {
                SeriesLabelPosition::UpperLeft
            } else {
                SeriesLabelPosition::UpperRight
            })
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;
    }};
}

/// A compact tick label: 1.5k, 2M, 3e9, 0.25.
fn short(v: f64) -> String {
    let a = v.abs();
    let (d, suffix) = if a >= 1e12 {
        return format!("{v:.0e}");
    } else if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / d;
    if (x - x.round()).abs() < 1e-9 {
        format!("{}{suffix}", x.round())
    } else {
        format!("{x:.1}{suffix}")
    }
}

fn panel(area: &Area<'_>, p: &Panel) -> Result<(), String> {
    let ys = p.series.iter().flat_map(|s| s.points.iter().map(|pt| pt.1));
    let bars = !p.categories.is_empty();
    let room = match (bars, p.log_y) {
        (true, true) => 2.0,
        (false, true) => 1.0,
        (_, false) => 0.35,
    };
    let (ylo, yhi) = bounds(ys, p.log_y, bars || !p.log_y, room);
    let (xlo, xhi) = if !bars {
        let xs = p.series.iter().flat_map(|s| s.points.iter().map(|pt| pt.0));
        bounds(xs, p.log_x, false, 0.0)
    } else {
        (0.0, p.categories.len().max(1) as f64)
    };
    let log_x = p.log_x && p.categories.is_empty();
    match (log_x, p.log_y) {
        (false, false) => draw_panel!(area, p, xlo..xhi, ylo..yhi, ylo),
        (true, false) => draw_panel!(area, p, (xlo..xhi).log_scale(), ylo..yhi, ylo),
        (false, true) => draw_panel!(area, p, xlo..xhi, (ylo..yhi).log_scale(), ylo),
        (true, true) => draw_panel!(area, p, (xlo..xhi).log_scale(), (ylo..yhi).log_scale(), ylo),
    }
    Ok(())
}

/// Renders `chart` as an SVG document.
pub fn render(chart: &Chart) -> Result<String, String> {
    let mut svg = String::new();
    {
        let n = chart.panels.len().max(1);
        let size = ((560 * n as u32).max(760), 480);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&chart.title, ("sans-serif", 20)).map_err(err)?;
        for (area, p) in root.split_evenly((1, n)).iter().zip(&chart.panels) {
            panel(area, p)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::all::table::Series;

    fn panel(cats: &[&str], log_y: bool) -> Panel {
        Panel {
            caption: "cap".into(),
            categories: cats.iter().map(|s| s.to_string()).collect(),
            x_label: "x (unit)".into(),
            y_label: "y (unit)".into(),
            log_x: cats.is_empty(),
            log_y,
            series: vec![Series {
                name: "series one".into(),
                dashed: false,
                color: None,
                points: vec![(1.0, 10.0), (2.0, 1e6)],
            }],
        }
    }

    #[test]
    fn renders_titled_svg_with_axis_labels_and_legend() {
        let c = Chart {
            file: "t.svg".into(),
            title: "The Title".into(),
            panels: vec![panel(&["a", "b", "c"], true), panel(&[], true)],
        };
        let svg = render(&c).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in ["The Title", "x (unit)", "y (unit)", "series one", "\nb\n"] {
            assert!(svg.contains(text), "missing {text}");
        }
    }

    #[test]
    fn log_bounds_are_decades_and_empty_data_still_draws() {
        assert_eq!(
            bounds([3.0, 4500.0].into_iter(), true, false, 0.0),
            (1.0, 10000.0)
        );
        assert_eq!(
            bounds([1.0, 100.0].into_iter(), true, true, 2.0),
            (0.1, 10000.0)
        );
        let c = Chart {
            file: "e.svg".into(),
            title: "Empty".into(),
            panels: vec![Panel {
                series: vec![],
                ..panel(&[], true)
            }],
        };
        assert!(render(&c).unwrap().contains("Empty"));
    }

    #[test]
    fn short_labels() {
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(2e6), "2M");
        assert_eq!(short(0.5), "0.5");
    }
}
