//! `--report DIR`: a run written down for a team. report.json holds every
//! number (plan, phases, time series, latency distributions, the
//! machine); index.html is one self-contained page with the charts inline;
//! each chart is also an SVG and a PNG file.

pub(crate) mod charts;
pub(crate) mod compare;
pub(crate) mod hdrlog;
pub(crate) mod html;
pub(crate) mod metrics;

use crate::client::phases::PhaseResult;
use crate::client::run::{ClientRun, ClientSummary};
use crate::client::series::{self, Sample};
use anyhow::{Context, Result};
use charts::{Axis, Band, Chart, Line};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Report {
    pub megaconn_version: String,
    /// "bench" or "client".
    pub kind: String,
    pub command: Vec<String>,
    /// When the report was written (RFC 3339, UTC).
    pub written: String,
    /// What the connections spoke and sent.
    pub mode: String,
    pub target_connections: u64,
    pub phases: Vec<PhaseResult>,
    pub series: Vec<Sample>,
    /// Final latency distributions: name -> (quantile, ms) points.
    pub distributions: BTreeMap<String, Vec<(f64, f64)>>,
    pub machine: serde_json::Value,
    pub plan: serde_json::Value,
    /// Everything the run's `--json` prints.
    pub result: serde_json::Value,
}

/// Picks one value of a sample for a chart line (None: no point).
type Pick = Box<dyn Fn(&Sample) -> Option<f64>>;

/// Check before a run that DIR can take the report (created if missing).
pub(crate) fn prepare(dir: &Path) -> Result<(), crate::UsageError> {
    let bad = |e: std::io::Error| crate::UsageError(format!("--report {}: {e}; give a directory this user can write", dir.display()));
    std::fs::create_dir_all(dir).map_err(bad)?;
    let probe = dir.join(".megaconn-write-check");
    std::fs::write(&probe, b"").map_err(bad)?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Percentile points of a histogram, for the distribution chart.
fn quantiles(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_quantiles(2).filter(|v| v.quantile_iterated_to() > 0.0).map(|v| (v.quantile_iterated_to(), v.value_iterated_to() as f64 / 1000.0)).collect()
}

/// The machine the run was on: cores, memory, kernel, and every limit
/// `tune` reads (sysctls as seen from the run's network namespace).
pub(crate) fn machine(topology: serde_json::Value) -> serde_json::Value {
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    serde_json::json!({
        "cores": crate::sys::online_cpus(),
        "memory_bytes": crate::stats::memory::meminfo_kib(&mem, "MemTotal:").map(|k| k * 1024),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "limits": crate::tune::limits_here(),
        "topology": topology,
    })
}

impl Report {
    pub(crate) fn new(
        kind: &str,
        run: &ClientRun,
        summary: &ClientSummary,
        plan: serde_json::Value,
        result: serde_json::Value,
        machine: serde_json::Value,
    ) -> Report {
        let v = &run.view;
        let distributions = [("handshake", &v.connect_hist), ("heartbeat", &v.rtt_hist), ("request", &v.request_hist), ("push", &v.push_hist)]
            .into_iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(n, h)| (n.to_string(), quantiles(h)))
            .collect();
        Report {
            megaconn_version: env!("CARGO_PKG_VERSION").into(),
            kind: kind.into(),
            command: std::env::args().collect(),
            written: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            mode: summary.mode.clone(),
            target_connections: summary.requested,
            phases: summary.phases.clone(),
            series: run.series.samples.clone(),
            distributions,
            machine,
            plan,
            result,
        }
    }

    pub(crate) fn load(path: &Path) -> Result<Report> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a megaconn report.json", path.display()))
    }

    fn bands(&self) -> Vec<Band> {
        self.phases.iter().map(|p| Band { label: p.name.clone(), from: p.start_s, to: p.start_s + p.seconds }).collect()
    }

    fn over_time(&self, name: &str, title: &str, y_label: &str, y_axis: Axis, lines: Vec<(&str, Pick)>) -> Chart {
        Chart {
            name: name.into(),
            title: title.into(),
            x_label: "seconds from the start of the ramp".into(),
            y_label: y_label.into(),
            x_axis: Axis::Linear,
            y_axis,
            lines: lines
                .into_iter()
                .map(|(n, f)| Line { name: n.into(), points: self.series.iter().filter_map(|s| Some((s.t_s, f(s)?))).collect() })
                .filter(|l| !l.points.is_empty())
                .collect(),
            bands: self.bands(),
        }
    }

    /// The run's thresholds on latency family `metric` (`heartbeat_rtt`,
    /// ...) as level lines over the phase they name (the whole run when
    /// none), each named with its result so a crossed one stands out.
    fn threshold_lines(&self, metric: &str) -> Vec<Line> {
        let checked: Vec<crate::client::thresholds::Checked> = serde_json::from_value(self.result["thresholds"].clone()).unwrap_or_default();
        let end = self.series.last().map_or(0.0, |s| s.t_s);
        checked
            .iter()
            .filter(|c| c.metric.split_once('.').is_some_and(|(m, stat)| m == metric && stat != "count"))
            .map(|c| {
                let (from, to) = match self.phases.iter().find(|p| Some(&p.name) == c.phase.as_ref()) {
                    Some(p) => (p.start_s, p.start_s + p.seconds),
                    None => (0.0, end),
                };
                let result = if c.pass { "held" } else { "CROSSED" };
                Line { name: format!("threshold {} ({result})", c.expr), points: vec![(from, c.limit), (to, c.limit)] }
            })
            .collect()
    }

    /// Every chart this run has data for.
    pub(crate) fn charts(&self) -> Vec<Chart> {
        let n = |v: u64| Some(v as f64);
        let server = |f: fn(&series::ServerSample) -> f64| -> Pick { Box::new(move |s: &Sample| s.server.as_ref().map(f)) };
        // Per-connection memory is noise over the first few connections.
        let floor = (self.target_connections / 100).max(100);
        let per_conn =
            move |f: fn(&series::ServerSample) -> f64| -> Pick { Box::new(move |s: &Sample| s.server.as_ref().filter(|v| v.active >= floor).map(f)) };
        let lat = |f: fn(&Sample) -> &crate::stats::histogram::LatencySummary, q: fn(&crate::stats::histogram::LatencySummary) -> f64| -> Pick {
            Box::new(move |s: &Sample| Some(f(s)).filter(|l| l.count > 0).map(q))
        };
        let mut out = vec![
            self.over_time(
                "connections",
                "Connections",
                "connections",
                Axis::Linear,
                vec![
                    ("open (client)", Box::new(move |s: &Sample| n(s.open))),
                    ("server active", server(|v| v.active as f64)),
                    ("failed", Box::new(move |s: &Sample| n(s.failed))),
                    ("lost", Box::new(move |s: &Sample| n(s.lost))),
                ],
            ),
            self.over_time(
                "connect-rate",
                "Connection rate",
                "handshakes completed / s",
                Axis::Linear,
                vec![("connect rate", Box::new(|s: &Sample| Some(s.connect_rate_per_s)))],
            ),
            self.over_time(
                "memory",
                "Memory per connection",
                "bytes / connection (log scale)",
                Axis::Log,
                vec![("server user (heap)", per_conn(|v| v.user_bytes_per_conn)), ("kernel (Slab, both ends)", per_conn(|v| v.kernel_bytes_per_conn))],
            ),
            self.over_time(
                "cpu",
                "CPU",
                "cores busy",
                Axis::Linear,
                vec![("server", server(|v| v.cpu_cores)), ("client", Box::new(|s: &Sample| Some(s.client_cpu_cores)))],
            ),
        ];
        for (kind, metric, f) in [
            ("heartbeat", "heartbeat_rtt", (|s: &Sample| &s.heartbeat_ms) as fn(&Sample) -> &crate::stats::histogram::LatencySummary),
            ("request", "request_latency", |s: &Sample| &s.request_ms),
            ("push", "push_latency", |s: &Sample| &s.push_ms),
        ] {
            let mut chart = self.over_time(
                &format!("latency-{kind}"),
                &format!("{} latency over time", capitalized(kind)),
                "ms (log scale)",
                Axis::Log,
                vec![("p50", lat(f, |l| l.p50_ms)), ("p99", lat(f, |l| l.p99_ms)), ("max", lat(f, |l| l.max_ms))],
            );
            if chart.has_data() {
                chart.lines.extend(self.threshold_lines(metric));
            }
            out.push(chart);
        }
        out.push(distribution_chart("latency-distribution", "Latency distribution (whole run)", &[("", self)]));
        out.retain(Chart::has_data);
        out
    }

    /// [`Report::write`], then say where the report is.
    pub(crate) fn save(&self, dir: &Path, progress: &mut crate::stats::progress::Progress) -> Result<()> {
        let files = self.write(dir)?;
        progress.note(&format!("report: {} files in {} (open {})", files.len(), dir.display(), dir.join("index.html").display()));
        Ok(())
    }

    /// Write report.json, each chart as SVG and PNG, and index.html.
    pub(crate) fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating report directory {}", dir.display()))?;
        let mut written = Vec::new();
        let json = dir.join("report.json");
        std::fs::write(&json, serde_json::to_string_pretty(self)?).with_context(|| format!("writing {}", json.display()))?;
        written.push(json);
        let mut svgs = Vec::new();
        for c in self.charts() {
            let svg = c.svg()?;
            let path = dir.join(format!("{}.svg", c.name));
            std::fs::write(&path, &svg)?;
            written.push(path);
            let png = dir.join(format!("{}.png", c.name));
            c.png(&png)?;
            written.push(png);
            svgs.push((c.title.clone(), svg));
        }
        let page = dir.join("index.html");
        std::fs::write(&page, html::page(self, &svgs))?;
        written.push(page);
        Ok(written)
    }
}

/// Percentile plots of every distribution of each labelled report.
pub(crate) fn distribution_chart(name: &str, title: &str, reports: &[(&str, &Report)]) -> Chart {
    let mut lines = Vec::new();
    for (label, r) in reports {
        for (kind, points) in &r.distributions {
            // x = 1/(1-q): 10 is p90, 100 is p99; the max sits at 10^6.
            let pts = points.iter().map(|(q, ms)| (1.0 / (1.0 - q.min(0.999_999)), *ms)).collect();
            let name = if label.is_empty() { kind.clone() } else { format!("{label} {kind}") };
            lines.push(Line { name, points: pts });
        }
    }
    Chart {
        name: name.into(),
        title: title.into(),
        x_label: "percentile".into(),
        y_label: "ms (log scale)".into(),
        x_axis: Axis::Percentile,
        y_axis: Axis::Log,
        lines,
        bands: Vec::new(),
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}
