//! Charts of a run, drawn once as data and rendered to SVG (inline in the
//! page) and PNG (bundled font: no system font library needed). Log axes
//! are drawn as log10 of the values on a linear axis with labels put back.

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

pub(crate) const WIDTH: u32 = 900;
pub(crate) const HEIGHT: u32 = 420;
const FONT: &[u8] = include_bytes!("../../assets/fonts/LiberationSans-Regular.ttf");

/// One line of a chart.
pub(crate) struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A shaded stretch of the x axis (a phase).
pub(crate) struct Band {
    pub label: String,
    pub from: f64,
    pub to: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Axis {
    Linear,
    Log,
    /// Percentiles: x is 1/(1-q), labelled as "99%", "99.9%".
    Percentile,
}

pub(crate) struct Chart {
    /// File stem: `<name>.svg`, `<name>.png`.
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: Axis,
    pub y_axis: Axis,
    pub lines: Vec<Line>,
    pub bands: Vec<Band>,
}

const COLORS: [RGBColor; 6] =
    [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(255, 127, 14), RGBColor(148, 103, 189), RGBColor(23, 190, 207)];
const BAND_COLORS: [RGBColor; 3] = [RGBColor(255, 221, 153), RGBColor(187, 238, 187), RGBColor(204, 204, 238)];

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

fn to_axis(a: Axis, v: f64) -> Option<f64> {
    match a {
        Axis::Linear => v.is_finite().then_some(v),
        Axis::Log | Axis::Percentile => (v > 0.0 && v.is_finite()).then(|| v.log10()),
    }
}

fn label(a: Axis, v: f64) -> String {
    match a {
        Axis::Linear => crate::stats::format::short(v),
        Axis::Log => crate::stats::format::short(10f64.powf(v)),
        Axis::Percentile => {
            // 1/(1-q) = 10^v  ->  q = 1 - 10^-v
            let q = (1.0 - 10f64.powf(-v)) * 100.0;
            let s = format!("{q:.4}");
            format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
        }
    }
}

impl Chart {
    /// Whether any line has a point to draw.
    pub(crate) fn has_data(&self) -> bool {
        self.lines.iter().any(|l| !l.points.is_empty())
    }

    fn range(&self, x: bool) -> (f64, f64) {
        let axis = if x { self.x_axis } else { self.y_axis };
        let vals = self.lines.iter().flat_map(|l| l.points.iter()).filter_map(|p| to_axis(axis, if x { p.0 } else { p.1 }));
        let (mut lo, mut hi) = vals.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        if lo > hi {
            return (0.0, 1.0);
        }
        if axis == Axis::Linear && !x {
            lo = lo.min(0.0);
            hi *= 1.08;
        }
        if axis != Axis::Linear && !x {
            lo = lo.floor();
            hi = hi.ceil();
        }
        if axis == Axis::Percentile {
            lo = 0.0;
            hi = hi.ceil().max(1.0);
        }
        if hi - lo < 1e-9 {
            hi = lo + 1.0;
        }
        (lo, hi)
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing chart: {e:?}");
        root.fill(&WHITE).map_err(err)?;
        let (x0, x1) = self.range(true);
        let (y0, y1) = self.range(false);
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let (xa, ya) = (self.x_axis, self.y_axis);
        let xf = move |v: &f64| label(xa, *v);
        let yf = move |v: &f64| label(ya, *v);
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&xf)
            .y_label_formatter(&yf)
            .label_style(("sans-serif", 13))
            .light_line_style(BLACK.mix(0.03));
        // Log axes are labelled at whole powers of ten only.
        if xa != Axis::Linear {
            mesh.x_labels((x1 - x0).round() as usize + 1);
        }
        if ya != Axis::Linear {
            mesh.y_labels((y1 - y0).round() as usize + 1);
        }
        mesh.draw().map_err(err)?;
        for (i, b) in self.bands.iter().enumerate().filter(|(_, b)| b.to > x0 && b.from < x1) {
            let c = BAND_COLORS[i % BAND_COLORS.len()];
            chart.draw_series(std::iter::once(Rectangle::new([(b.from.max(x0), y0), (b.to.min(x1), y1)], c.mix(0.35).filled()))).map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(b.label.clone(), (b.from.max(x0), y1), ("sans-serif", 13).into_font().color(&BLACK.mix(0.6)))))
                .map_err(err)?;
        }
        for (i, l) in self.lines.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = l.points.iter().filter_map(|(x, y)| Some((to_axis(xa, *x)?, to_axis(ya, *y)?))).collect();
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(err)?
                .label(l.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 13))
            .position(match (xa, ya) {
                // Percentile curves rise to the right; counts grow from
                // the lower left; latency over time spikes anywhere.
                (Axis::Percentile, _) => SeriesLabelPosition::UpperLeft,
                (_, Axis::Linear) => SeriesLabelPosition::LowerRight,
                _ => SeriesLabelPosition::UpperRight,
            })
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }

    /// The chart as an SVG document.
    pub(crate) fn svg(&self) -> Result<String> {
        fonts();
        let mut out = String::new();
        self.draw(SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area())?;
        Ok(out)
    }

    pub(crate) fn png(&self, path: &Path) -> Result<()> {
        fonts();
        self.draw(BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(x_axis: Axis, y_axis: Axis) -> Chart {
        Chart {
            name: "t".into(),
            title: "Connections".into(),
            x_label: "seconds".into(),
            y_label: "open".into(),
            x_axis,
            y_axis,
            lines: vec![Line { name: "open".into(), points: vec![(2.0, 10.0), (100.0, 1000.0)] }],
            bands: vec![Band { label: "ramp".into(), from: 0.0, to: 50.0 }],
        }
    }

    #[test]
    fn svg_has_the_title_legend_and_a_path() {
        let svg = chart(Axis::Linear, Axis::Log).svg().unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("Connections") && svg.contains("ramp") && svg.contains("<polyline"), "{svg}");
    }

    #[test]
    fn percentile_labels() {
        assert_eq!(label(Axis::Percentile, 0.0), "0%");
        assert_eq!(label(Axis::Percentile, 2.0), "99%");
        assert_eq!(label(Axis::Percentile, 3.0), "99.9%");
        assert_eq!(label(Axis::Log, 3.0), "1K");
    }
}
