//! `megaconn report compare A/report.json B/report.json`: two runs side by
//! side with ratios — for regressions, and for comparing machines.

use super::charts::{Axis, Chart, Line};
use super::metrics::{self, Better, Metric};
use super::{html, Report};
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub metric: String,
    pub unit: String,
    pub a: f64,
    pub b: f64,
    /// b / a (None when a is 0).
    pub ratio: Option<f64>,
    /// "better", "worse" or "same" (within 5%) for B against A.
    pub verdict: String,
}

/// Ratios within this of 1 are "same": the machine is shared and noisy.
const SAME: f64 = 0.05;

pub(crate) fn rows(a: &Report, b: &Report) -> Vec<Row> {
    let bm = metrics::of(b);
    metrics::of(a)
        .into_iter()
        .filter_map(|ma: Metric| {
            let mb = bm.iter().find(|m| m.name == ma.name)?;
            let ratio = (ma.value != 0.0).then(|| mb.value / ma.value);
            let verdict = match ratio {
                _ if ma.value == mb.value => "same",
                Some(r) if (r - 1.0).abs() <= SAME => "same",
                _ if (mb.value > ma.value) == (ma.better == Better::Higher) => "better",
                _ => "worse",
            };
            Some(Row { metric: ma.name.into(), unit: ma.unit.into(), a: ma.value, b: mb.value, ratio, verdict: verdict.into() })
        })
        .collect()
}

fn label(p: &Path) -> String {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(p);
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string())
}

fn table_rows(rows: &[Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            vec![
                r.metric.clone(),
                metrics::show(r.a, &r.unit),
                metrics::show(r.b, &r.unit),
                r.ratio.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into()),
                r.verdict.clone(),
            ]
        })
        .collect()
}

/// Two runs' lines on one chart.
fn overlay(name: &str, title: &str, y_label: &str, y_axis: Axis, runs: &[(&str, &Report)], f: fn(&crate::client::series::Sample) -> Option<f64>) -> Chart {
    let lines = runs.iter().map(|(l, r)| Line { name: l.to_string(), points: r.series.iter().filter_map(|s| Some((s.t_s, f(s)?))).collect() }).collect();
    Chart {
        name: name.into(),
        title: title.into(),
        x_label: "seconds from the start of the ramp".into(),
        y_label: y_label.into(),
        x_axis: Axis::Linear,
        y_axis,
        lines,
        bands: Vec::new(),
    }
}

pub(crate) fn page(runs: &[(&str, &Report)], rows: &[Row]) -> Result<String> {
    let title = format!("megaconn: {} vs {}", runs[0].0, runs[1].0);
    let mut body = format!("<h1>{}</h1>", html::escape(&title));
    for (l, r) in runs {
        body += &format!(
            "<p><b>{}</b>: {} — {}<br><code>{}</code></p>",
            html::escape(l),
            html::escape(&r.written),
            html::escape(&r.mode),
            html::escape(&r.command.join(" "))
        );
    }
    body += &html::table(&["", runs[0].0, runs[1].0, "ratio", "B vs A"], &table_rows(rows));
    let charts = [
        overlay("connections", "Open connections", "connections", Axis::Linear, runs, |s| Some(s.open as f64)),
        overlay("connect-rate", "Connection rate", "handshakes / s", Axis::Linear, runs, |s| Some(s.connect_rate_per_s)),
        overlay("heartbeat-p99", "Heartbeat p99 over time", "ms (log scale)", Axis::Log, runs, |s| {
            Some(s.heartbeat_ms.p99_ms).filter(|_| s.heartbeat_ms.count > 0)
        }),
        overlay("request-p99", "Request p99 over time", "ms (log scale)", Axis::Log, runs, |s| Some(s.request_ms.p99_ms).filter(|_| s.request_ms.count > 0)),
        super::distribution_chart("distribution", "Latency distributions", runs),
    ];
    for c in charts.iter().filter(|c| c.lines.iter().filter(|l| !l.points.is_empty()).count() > 0) {
        body += &format!("<figure>{}<figcaption>{}</figcaption></figure>", c.svg()?, html::escape(&c.title));
    }
    Ok(html::wrap(&title, &body))
}

pub(crate) fn run(a: &Path, b: &Path, html_out: Option<PathBuf>, json: bool) -> Result<i32> {
    let (ra, rb) = (Report::load(a)?, Report::load(b)?);
    let (la, mut lb) = (label(a), label(b));
    if lb == la {
        lb = format!("{lb} (B)");
    }
    let rows = rows(&ra, &rb);
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"a": a, "b": b, "rows": rows}))?);
    } else {
        let t = table_rows(&rows);
        let head = ["metric".to_string(), format!("A: {la}"), format!("B: {lb}"), "B/A".into(), "B vs A".into()];
        let widths: Vec<usize> = (0..head.len()).map(|i| t.iter().map(|r| r[i].len()).chain([head[i].len()]).max().unwrap_or(0)).collect();
        for r in std::iter::once(head.to_vec()).chain(t) {
            let cells: Vec<String> =
                r.iter().zip(&widths).enumerate().map(|(i, (c, w))| if i == 0 { format!("{c:<w$}") } else { format!("{c:>w$}") }).collect();
            println!("{}", cells.join("  "));
        }
        if rows.is_empty() {
            println!("(the two reports have no number in common)");
        }
    }
    if let Some(out) = html_out {
        std::fs::write(&out, page(&[(&la, &ra), (&lb, &rb)], &rows)?)?;
        eprintln!("comparison page: {}", out.display());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_direction_of_better() {
        assert_eq!(label(Path::new("runs/a/report.json")), "a");
        let mk = |rate: f64, failed: f64| Report {
            megaconn_version: String::new(),
            kind: "client".into(),
            command: Vec::new(),
            written: String::new(),
            mode: String::new(),
            target_connections: 10,
            phases: Vec::new(),
            series: Vec::new(),
            distributions: Default::default(),
            machine: serde_json::json!({}),
            plan: serde_json::json!({}),
            result: serde_json::json!({"ramp_rate_per_s": rate, "failed_total": failed as u64, "requested": 10, "established": 10}),
        };
        let r = rows(&mk(1000.0, 0.0), &mk(2000.0, 5.0));
        let get = |n: &str| r.iter().find(|x| x.metric == n).unwrap();
        assert_eq!((get("ramp rate").ratio, get("ramp rate").verdict.as_str()), (Some(2.0), "better"));
        assert_eq!((get("failed").ratio, get("failed").verdict.as_str()), (None, "worse"));
        assert_eq!(get("connections established").verdict, "same");
    }
}
