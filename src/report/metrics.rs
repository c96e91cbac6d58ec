//! The headline numbers of a report: what the page's summary table shows
//! and what `report compare` puts side by side.

use super::Report;
use crate::client::run::ClientSummary;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
}

#[derive(Debug, Clone)]
pub(crate) struct Metric {
    pub name: &'static str,
    pub value: f64,
    pub unit: &'static str,
    pub better: Better,
}

fn at(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

/// Every headline number the report has (absent ones are skipped).
pub(crate) fn of(r: &Report) -> Vec<Metric> {
    use Better::*;
    let res = &r.result;
    // A bench nests the client's summary under "client".
    let client: ClientSummary = serde_json::from_value(res.get("client").unwrap_or(res).clone()).unwrap_or_default();
    let some = |v: f64| Some(v).filter(|_| client.requested > 0);
    let phase = |name: &str| r.phases.iter().find(|p| p.name == name);
    let mut out = Vec::new();
    let mut push = |name, value: Option<f64>, unit, better| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            out.push(Metric { name, value, unit, better });
        }
    };
    push("connections established", some(client.established as f64), "", Higher);
    push("connections held", some(client.held as f64), "", Higher);
    push("failed", some(client.failed_total as f64), "", Lower);
    push("lost", some(client.lost_total as f64), "", Lower);
    push("ramp rate", client.ramp_rate_per_s, "conn/s", Higher);
    push("ramp seconds", client.ramp_seconds, "s", Lower);
    let lat = |p: Option<&crate::client::phases::PhaseResult>,
               f: fn(&crate::client::phases::PhaseResult) -> &crate::stats::histogram::LatencySummary,
               q: fn(&crate::stats::histogram::LatencySummary) -> f64| { p.map(f).filter(|l| l.count > 0).map(q) };
    push("handshake p99 (ramp)", lat(phase("ramp"), |p| &p.handshake_ms, |l| l.p99_ms), "ms", Lower);
    push("heartbeat p50 (hold)", lat(phase("hold"), |p| &p.heartbeat_rtt_ms, |l| l.p50_ms), "ms", Lower);
    push("heartbeat p99 (hold)", lat(phase("hold"), |p| &p.heartbeat_rtt_ms, |l| l.p99_ms), "ms", Lower);
    push("requests qps (hold)", phase("hold").filter(|p| p.request_ms.count > 0).map(|p| p.qps), "/s", Higher);
    push("request p50 (hold)", lat(phase("hold"), |p| &p.request_ms, |l| l.p50_ms), "ms", Lower);
    push("request p99 (hold)", lat(phase("hold"), |p| &p.request_ms, |l| l.p99_ms), "ms", Lower);
    push("push p99 (hold)", lat(phase("hold"), |p| &p.push_ms, |l| l.p99_ms), "ms", Lower);
    push("push time to all (median round)", at(res, "/push/time_to_all_ms/median"), "ms", Lower);
    push("push delivery p99", at(res, "/push/delivery_ms/p99_ms"), "ms", Lower);
    push("push dropped", at(res, "/push/dropped"), "", Lower);
    push("server user memory", at(res, "/server_user_bytes_per_conn"), "B/conn", Lower);
    push("kernel memory (Slab)", at(res, "/kernel_slab_bytes_per_conn"), "B/conn", Lower);
    push("server cpu", at(res, "/server_cpu_seconds"), "s", Lower);
    push("client cpu", some(client.cpu_seconds), "s", Lower);
    out
}

/// A value for people: counts with separators, small numbers with decimals.
pub(crate) fn show(value: f64, unit: &str) -> String {
    let v = if value.abs() >= 1000.0 || value.fract() == 0.0 { crate::stats::format::count(value.round().max(0.0) as u64) } else { format!("{value:.2}") };
    if unit.is_empty() {
        v
    } else {
        format!("{v} {unit}")
    }
}
