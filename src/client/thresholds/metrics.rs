//! The names a threshold may use, in one table read from the summary's own
//! numbers: latency families (each with `.count .mean .p50 .p90 .p99
//! .p999 .max`), the summary's scalars, and every client counter as the
//! `counters!` block declares it (`ClientCounters::DECLARED`, read through
//! the summary's JSON so no counter is listed here a second time). A name
//! that is not in this table is refused before anything starts; a name
//! the run measured nothing for (push latency without pushes) has no
//! value, which fails a threshold instead of passing it.

use crate::client::phases::{PhaseResult, NAMES as PHASES};
use crate::client::run::ClientSummary;
use crate::client::snapshot::ClientCounters;
use crate::stats::histogram::LatencySummary;

/// What a metric's number is, which decides the units its value may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Unit {
    /// Milliseconds (latencies): `us`, `ms`, `s`; a bare number is ms.
    Millis,
    /// Seconds (durations): `us`, `ms`, `s`; a bare number is s.
    Seconds,
    /// A count: a bare number, `k` or `M`.
    Count,
    /// Per second: as a count, or with `/s`.
    PerSecond,
    /// A fraction: `%` (99.9%) or a bare fraction (0.999).
    Ratio,
}

type Latency = fn(&ClientSummary) -> Option<&LatencySummary>;
type PhaseLatency = fn(&PhaseResult) -> Option<&LatencySummary>;

/// A latency distribution of the summary, and of each phase if the phases
/// keep it.
struct Family {
    name: &'static str,
    whole: Latency,
    phase: Option<PhaseLatency>,
}

const FAMILIES: &[Family] = &[
    Family { name: "handshake", whole: |s| Some(&s.connect_ms), phase: Some(|p| Some(&p.handshake_ms)) },
    Family { name: "tls_handshake", whole: |s| s.tls.as_ref().map(|t| &t.handshake_ms), phase: None },
    Family { name: "heartbeat_rtt", whole: |s| Some(&s.heartbeat_rtt_ms), phase: Some(|p| Some(&p.heartbeat_rtt_ms)) },
    Family { name: "request_latency", whole: |s| s.requests.as_ref().map(|r| &r.latency_ms), phase: Some(|p| Some(&p.request_ms)) },
    Family { name: "push_latency", whole: |s| s.push.as_ref().map(|p| &p.latency_ms), phase: Some(|p| Some(&p.push_ms)) },
    Family { name: "rehome", whole: |s| s.rehome_ms.as_ref(), phase: None },
];

/// The statistics of a latency family, as `FAMILY.STAT`.
const STATS: [&str; 7] = ["count", "mean", "p50", "p90", "p99", "p999", "max"];

fn stat(l: &LatencySummary, name: &str) -> Option<f64> {
    if name == "count" {
        return Some(l.count as f64);
    }
    if l.count == 0 {
        return None;
    }
    Some(match name {
        "mean" => l.mean_ms,
        "p50" => l.p50_ms,
        "p90" => l.p90_ms,
        "p99" => l.p99_ms,
        "p999" => l.p999_ms,
        _ => l.max_ms,
    })
}

type Whole = fn(&ClientSummary) -> Option<f64>;
type InPhase = fn(&PhaseResult) -> Option<f64>;

/// One number of the summary (and of each phase, where it has one).
struct Scalar {
    name: &'static str,
    unit: Unit,
    whole: Whole,
    phase: Option<InPhase>,
}

/// `part / whole`, where 0 of 0 is all of them (nothing was asked for).
fn all_of(part: u64, whole: u64) -> Option<f64> {
    Some(if whole == 0 { 1.0 } else { part as f64 / whole as f64 })
}

/// `part / whole`, with no value when nothing was sent.
fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

const SCALARS: &[Scalar] = &[
    Scalar { name: "requested", unit: Unit::Count, whole: |s| Some(s.requested as f64), phase: None },
    Scalar { name: "established", unit: Unit::Count, whole: |s| Some(s.established as f64), phase: Some(|p| Some(p.established as f64)) },
    Scalar { name: "held", unit: Unit::Count, whole: |s| Some(s.held as f64), phase: Some(|p| Some(p.open_at_end as f64)) },
    Scalar { name: "failed", unit: Unit::Count, whole: |s| Some(s.failed_total as f64), phase: Some(|p| Some(p.failed_total as f64)) },
    Scalar { name: "lost", unit: Unit::Count, whole: |s| Some(s.lost_total as f64), phase: Some(|p| Some(p.lost_total as f64)) },
    Scalar { name: "not_attempted", unit: Unit::Count, whole: |s| Some(s.not_attempted as f64), phase: Some(|p| Some(p.not_attempted_total as f64)) },
    Scalar { name: "established_ratio", unit: Unit::Ratio, whole: |s| all_of(s.established, s.requested), phase: None },
    Scalar { name: "held_ratio", unit: Unit::Ratio, whole: |s| all_of(s.held, s.established), phase: None },
    Scalar {
        name: "heartbeats_answered_ratio",
        unit: Unit::Ratio,
        whole: |s| share(s.heartbeats_answered, s.heartbeats_sent),
        phase: Some(|p| share(p.heartbeats_answered, p.heartbeats_sent)),
    },
    Scalar { name: "interrupted", unit: Unit::Count, whole: |s| Some(s.interrupted as u8 as f64), phase: None },
    Scalar { name: "duration", unit: Unit::Seconds, whole: |s| Some(s.phases.iter().map(|p| p.seconds).sum()), phase: Some(|p| Some(p.seconds)) },
    Scalar { name: "ramp_seconds", unit: Unit::Seconds, whole: |s| s.ramp_seconds, phase: None },
    Scalar { name: "hold_seconds", unit: Unit::Seconds, whole: |s| Some(s.hold_seconds), phase: None },
    Scalar { name: "cpu_seconds", unit: Unit::Seconds, whole: |s| Some(s.cpu_seconds), phase: None },
    Scalar { name: "connect_rate", unit: Unit::PerSecond, whole: |s| s.ramp_rate_per_s, phase: Some(|p| Some(p.connect_rate_per_s)) },
    Scalar {
        name: "requests.qps",
        unit: Unit::PerSecond,
        whole: |s| s.requests.as_ref().map(|r| r.qps),
        phase: Some(|p| (p.requests_sent > 0).then_some(p.qps)),
    },
    Scalar { name: "requests.offered_qps", unit: Unit::PerSecond, whole: |s| s.requests.as_ref().map(|r| r.offered_qps), phase: None },
    Scalar { name: "requests.timeouts", unit: Unit::Count, whole: |s| s.requests.as_ref().map(|r| r.timeouts as f64), phase: None },
    Scalar {
        name: "requests.reply_ratio",
        unit: Unit::Ratio,
        whole: |s| s.requests.as_ref().and_then(|r| share(r.replies, r.sent)),
        phase: Some(|p| share(p.replies, p.requests_sent)),
    },
];

/// The counters a phase keeps its own share of (the rest are whole-run).
const PHASE_COUNTERS: &[(&str, InPhase)] = &[
    ("heartbeats_sent", |p| Some(p.heartbeats_sent as f64)),
    ("heartbeats_answered", |p| Some(p.heartbeats_answered as f64)),
    ("requests_sent", |p| Some(p.requests_sent as f64)),
    ("replies", |p| Some(p.replies as f64)),
    ("rejected", |p| Some(p.rejected as f64)),
    ("push_received", |p| Some(p.pushes_received as f64)),
    ("churn_reopened", |p| Some(p.churn_reopened as f64)),
];

/// A name of the table, resolved: where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Metric {
    /// `FAMILIES[family]`, statistic `STATS[stat]`.
    Latency { family: usize, stat: usize },
    /// `SCALARS[i]`.
    Scalar(usize),
    /// `ClientCounters::DECLARED[i]` (a by-kind counter sums its kinds).
    Counter(usize),
}

impl Metric {
    /// The metric called `name`, if the table has it.
    pub(crate) fn find(name: &str) -> Option<Metric> {
        if let Some((fam, st)) = name.split_once('.') {
            if let (Some(family), Some(stat)) = (FAMILIES.iter().position(|f| f.name == fam), STATS.iter().position(|s| *s == st)) {
                return Some(Metric::Latency { family, stat });
            }
        }
        if let Some(i) = SCALARS.iter().position(|s| s.name == name) {
            return Some(Metric::Scalar(i));
        }
        ClientCounters::DECLARED.iter().position(|d| d.field == name).map(Metric::Counter)
    }

    pub(crate) fn unit(self) -> Unit {
        match self {
            Metric::Latency { stat: 0, .. } => Unit::Count,
            Metric::Latency { .. } => Unit::Millis,
            Metric::Scalar(i) => SCALARS[i].unit,
            Metric::Counter(_) => Unit::Count,
        }
    }

    /// Whether each phase has its own value of this metric.
    pub(crate) fn per_phase(self) -> bool {
        match self {
            Metric::Latency { family, .. } => FAMILIES[family].phase.is_some(),
            Metric::Scalar(i) => SCALARS[i].phase.is_some(),
            Metric::Counter(i) => PHASE_COUNTERS.iter().any(|(n, _)| *n == ClientCounters::DECLARED[i].field),
        }
    }

    /// Its value in `s` (the whole run, or phase `phase`); None: the run
    /// measured nothing it could be computed from.
    pub(crate) fn value(self, s: &ClientSummary, phase: Option<&str>) -> Option<f64> {
        if let Some(name) = phase {
            let p = s.phases.iter().find(|p| p.name == name)?;
            return match self {
                Metric::Latency { family, stat: st } => stat((FAMILIES[family].phase?)(p)?, STATS[st]),
                Metric::Scalar(i) => (SCALARS[i].phase?)(p),
                Metric::Counter(i) => (PHASE_COUNTERS.iter().find(|(n, _)| *n == ClientCounters::DECLARED[i].field)?.1)(p),
            };
        }
        match self {
            Metric::Latency { family, stat: st } => stat((FAMILIES[family].whole)(s)?, STATS[st]),
            Metric::Scalar(i) => (SCALARS[i].whole)(s),
            Metric::Counter(i) => counter(&s.counters, ClientCounters::DECLARED[i].field),
        }
    }
}

/// A counter's value by its field name, from the JSON the `counters!`
/// block derives (a by-kind counter: the sum of its kinds).
fn counter(c: &ClientCounters, field: &str) -> Option<f64> {
    let v = serde_json::to_value(c).ok()?;
    match v.get(field)? {
        serde_json::Value::Object(kinds) => Some(kinds.values().filter_map(|n| n.as_u64()).sum::<u64>() as f64),
        n => n.as_f64(),
    }
}

/// Every valid name, for the error that refuses an unknown one.
pub(crate) fn catalogue() -> String {
    let families: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
    let scalars: Vec<&str> = SCALARS.iter().map(|s| s.name).collect();
    let counters: Vec<&str> = ClientCounters::DECLARED.iter().map(|d| d.field).filter(|f| !scalars.contains(f)).collect();
    let per_phase: Vec<String> = names().into_iter().filter(|n| Metric::find(n).is_some_and(|m| m.per_phase())).collect();
    format!(
        "latencies (ms) {} each as NAME.{}; numbers {}; counters {}. Per phase (PHASE:METRIC, PHASE one of {}): {}",
        families.join(", "),
        STATS.join("|"),
        scalars.join(", "),
        counters.join(", "),
        PHASES.join(", "),
        compact(&per_phase)
    )
}

/// Names of the table in full (latency families expanded).
pub(crate) fn names() -> Vec<String> {
    let mut out: Vec<String> = FAMILIES.iter().flat_map(|f| STATS.iter().map(move |s| format!("{}.{s}", f.name))).collect();
    out.extend(SCALARS.iter().map(|s| s.name.to_string()));
    out.extend(ClientCounters::DECLARED.iter().map(|d| d.field.to_string()).filter(|f| !SCALARS.iter().any(|s| s.name == f)));
    out
}

/// `handshake.*` for a family whose every statistic is listed.
fn compact(names: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        match n.split_once('.') {
            Some((fam, _)) if FAMILIES.iter().any(|f| f.name == fam) => {
                let star = format!("{fam}.*");
                if !out.contains(&star) {
                    out.push(star);
                }
            }
            _ => out.push(n.clone()),
        }
    }
    out.join(", ")
}
