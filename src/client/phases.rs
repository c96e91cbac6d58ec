//! Results per phase — ramp, hold, close — so the ramp's queueing does not
//! hide in a whole-run average. Workers ship interval histograms stamped
//! with their CLOCK_MONOTONIC time; each interval counts in the phase its
//! stamp falls in (intervals are at most 1 s, so a boundary blurs by at
//! most that). Counters are the totals' differences at the boundaries.

use super::view::{ClientTotals, Intervals};
use crate::stats::histogram::{self, LatencySummary};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub(crate) const NAMES: [&str; 3] = ["ramp", "hold", "close"];

/// Latency histograms of one phase.
struct Hists {
    connect: Histogram<u64>,
    heartbeat: Histogram<u64>,
    request: Histogram<u64>,
    push: Histogram<u64>,
}

impl Hists {
    fn new() -> Hists {
        Hists { connect: histogram::new(), heartbeat: histogram::new(), request: histogram::new(), push: histogram::new() }
    }
}

/// The totals at a phase's boundary: a phase's counters are the
/// difference of its two boundaries' (the totals kept whole, not copied
/// field by field).
#[derive(Debug, Clone, Default)]
struct Marks {
    at_us: u64,
    t: ClientTotals,
}

impl Marks {
    fn of(t: &ClientTotals, at_us: u64) -> Marks {
        Marks { at_us, t: t.clone() }
    }
}

/// One phase's results, as the summary and the JSON report them (read
/// back too: a field an older file lacks is zero/empty).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PhaseResult {
    pub name: String,
    /// Seconds from the planned start of the ramp.
    pub start_s: f64,
    pub seconds: f64,
    pub open_at_start: u64,
    pub open_at_end: u64,
    /// Handshakes in flight, and planned connections not started yet,
    /// when the phase ended (with `open_at_end`, the failed, the lost
    /// and the not attempted so far, every planned connection).
    pub connecting_at_end: u64,
    pub queued_at_end: u64,
    /// Planned connections given up in this phase without an attempt,
    /// by reason (`ramp_deadline`, `run_closed`, ...).
    pub not_attempted_total: u64,
    pub not_attempted: BTreeMap<String, u64>,
    /// Why the phase ended, when that needs saying (the ramp: every
    /// connection settled, or its deadline passed with some unsettled).
    pub end: Option<String>,
    /// Handshakes completed in this phase (reopens included).
    pub established: u64,
    pub connect_rate_per_s: f64,
    pub failed_total: u64,
    pub failed: BTreeMap<String, u64>,
    pub lost_total: u64,
    pub lost: BTreeMap<String, u64>,
    pub churn_reopened: u64,
    pub handshake_ms: LatencySummary,
    pub heartbeats_sent: u64,
    pub heartbeats_answered: u64,
    pub heartbeat_rtt_ms: LatencySummary,
    pub requests_sent: u64,
    pub replies: u64,
    pub rejected: u64,
    pub qps: f64,
    pub request_ms: LatencySummary,
    pub pushes_received: u64,
    pub push_ms: LatencySummary,
}

/// Column heads of the phase table (terminal and report page).
pub(crate) const COLUMNS: [&str; 9] =
    ["phase", "seconds", "open at end", "established", "conn/s", "failed", "handshake p99", "heartbeat p50/p99", "requests qps p50/p99"];

impl PhaseResult {
    /// The phase's row under [`COLUMNS`]; latencies in ms, "-" when none.
    pub(crate) fn cells(&self) -> Vec<String> {
        use crate::stats::format::count;
        let lat = |l: &LatencySummary| if l.count == 0 { "-".to_string() } else { format!("{:.1}/{:.1} ms", l.p50_ms, l.p99_ms) };
        let mut failed = count(self.failed_total + self.lost_total);
        if self.lost_total > 0 {
            failed += &format!(" ({} lost)", count(self.lost_total));
        }
        vec![
            self.name.clone(),
            format!("{:.1}", self.seconds),
            count(self.open_at_end),
            count(self.established),
            count(self.connect_rate_per_s as u64),
            failed,
            if self.handshake_ms.count == 0 { "-".into() } else { format!("{:.1} ms", self.handshake_ms.p99_ms) },
            lat(&self.heartbeat_rtt_ms),
            if self.request_ms.count == 0 { "-".into() } else { format!("{} {}", count(self.qps as u64), lat(&self.request_ms)) },
        ]
    }
}

pub(crate) struct Phases {
    /// Each phase entered so far: its name and start (µs).
    names: Vec<&'static str>,
    starts: Vec<u64>,
    marks: Vec<Marks>,
    hists: Vec<Hists>,
    /// Why each phase ended (see [`PhaseResult::end`]).
    ends: Vec<Option<String>>,
    origin_us: u64,
}

fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter().filter_map(|(k, v)| Some((k.clone(), v.checked_sub(a.get(k).copied().unwrap_or(0)).filter(|d| *d > 0)?))).collect()
}

impl Phases {
    /// The ramp starts at `origin_us`, the instant every worker starts.
    pub(crate) fn new(origin_us: u64) -> Phases {
        Phases::starting(NAMES[0], origin_us)
    }

    /// Phases whose first is `first` (with `--stages`: `stage1`).
    pub(crate) fn starting(first: &'static str, origin_us: u64) -> Phases {
        Phases {
            names: vec![first],
            starts: vec![origin_us],
            marks: vec![Marks { at_us: origin_us, ..Default::default() }],
            hists: vec![Hists::new()],
            ends: vec![None],
            origin_us,
        }
    }

    /// Phase `name` (one of [`NAMES`], or a stage's) starts now; `t` are
    /// the totals at this instant. A run interrupted during the ramp goes
    /// to "close".
    pub(crate) fn enter(&mut self, name: &'static str, t: &ClientTotals, now_us: u64) {
        if !self.names.contains(&name) {
            self.names.push(name);
            self.starts.push(now_us);
            self.marks.push(Marks::of(t, now_us));
            self.hists.push(Hists::new());
            self.ends.push(None);
        }
    }

    /// The current phase ends (with the next `enter`) for this reason.
    pub(crate) fn end_with(&mut self, why: String) {
        if let Some(e) = self.ends.last_mut() {
            *e = Some(why);
        }
    }

    /// Record a worker's interval histograms in the phase of its stamp.
    pub(crate) fn record(&mut self, at_us: u64, d: &Intervals) {
        let i = self.starts.iter().rposition(|start| at_us >= *start).unwrap_or(0);
        let h = &mut self.hists[i];
        histogram::add(&mut h.connect, d.connect.as_ref());
        histogram::add(&mut h.heartbeat, d.rtt.as_ref());
        histogram::add(&mut h.request, d.request.as_ref());
        histogram::add(&mut h.push, d.push.as_ref());
    }

    /// Every phase entered, the last one ending with `t` at `now_us`.
    pub(crate) fn results(&self, t: &ClientTotals, now_us: u64) -> Vec<PhaseResult> {
        let end = Marks::of(t, now_us);
        (0..self.starts.len())
            .map(|i| {
                let (ma, mb) = (&self.marks[i], self.marks.get(i + 1).unwrap_or(&end));
                let (a, b) = (&ma.t, &mb.t);
                let seconds = mb.at_us.saturating_sub(ma.at_us) as f64 / 1e6;
                let per_s = |n: u64| if seconds > 0.0 { n as f64 / seconds } else { 0.0 };
                let failed = delta(&a.failed, &b.failed);
                let lost = delta(&a.lost, &b.lost);
                let not_attempted = delta(&a.not_attempted_by, &b.not_attempted_by);
                let established = b.established_total.saturating_sub(a.established_total);
                let replies = b.replies.saturating_sub(a.replies);
                let h = &self.hists[i];
                // A stage's requests as its workers counted them (exact at
                // its boundaries; the marks lag by up to a report).
                let requests_sent = match super::stages::index_of(self.names[i]) {
                    Some(_) => t.stage_requests.get(self.names[i]).copied().unwrap_or(0),
                    None => b.requests_sent.saturating_sub(a.requests_sent),
                };
                PhaseResult {
                    name: self.names[i].into(),
                    start_s: ma.at_us.saturating_sub(self.origin_us) as f64 / 1e6,
                    seconds,
                    open_at_start: a.open,
                    open_at_end: b.open,
                    connecting_at_end: b.connecting,
                    queued_at_end: b.queued,
                    not_attempted_total: not_attempted.values().sum(),
                    not_attempted,
                    end: self.ends[i].clone(),
                    established,
                    connect_rate_per_s: per_s(established),
                    failed_total: failed.values().sum(),
                    failed,
                    lost_total: lost.values().sum(),
                    lost,
                    churn_reopened: b.churn_reopened.saturating_sub(a.churn_reopened),
                    handshake_ms: histogram::summarize(&h.connect),
                    heartbeats_sent: b.heartbeats_sent.saturating_sub(a.heartbeats_sent),
                    heartbeats_answered: b.heartbeats_answered.saturating_sub(a.heartbeats_answered),
                    heartbeat_rtt_ms: histogram::summarize(&h.heartbeat),
                    requests_sent,
                    replies,
                    rejected: b.rejected.saturating_sub(a.rejected),
                    qps: per_s(replies),
                    request_ms: histogram::summarize(&h.request),
                    pushes_received: b.push_received.saturating_sub(a.push_received),
                    push_ms: histogram::summarize(&h.push),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::snapshot::{ClientCounters, ClientSnapshot};

    impl Phases {
        fn rec(&mut self, s: &ClientSnapshot) {
            self.record(s.at_us, &Intervals::of(s));
        }
    }

    fn snap(at_us: u64, rtt_us: u64) -> ClientSnapshot {
        let mut h = histogram::new();
        histogram::record(&mut h, rtt_us);
        ClientSnapshot { at_us, rtt_hist: histogram::encode(&h), ..Default::default() }
    }

    #[test]
    fn intervals_count_in_the_phase_of_their_stamp() {
        let mut p = Phases::new(1_000_000);
        p.rec(&snap(1_500_000, 100_000));
        let mut t =
            ClientTotals { counters: ClientCounters { open: 10, established_total: 10, heartbeats_sent: 4, ..Default::default() }, ..Default::default() };
        t.counters.failed.insert("timeout".into(), 2);
        p.enter("hold", &t, 3_000_000);
        // Arrives after the boundary but was measured before it: ramp.
        p.rec(&snap(2_900_000, 200_000));
        p.rec(&snap(3_500_000, 1_000));
        t.counters.heartbeats_sent = 24;
        t.counters.failed.insert("timeout".into(), 3);
        let r = p.results(&t, 5_000_000);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].name.as_str(), r[0].seconds, r[0].established, r[0].failed_total), ("ramp", 2.0, 10, 2));
        assert_eq!(r[0].connect_rate_per_s, 5.0);
        assert_eq!(r[0].heartbeat_rtt_ms.count, 2);
        assert!(r[0].heartbeat_rtt_ms.max_ms >= 199.0);
        assert_eq!((r[1].name.as_str(), r[1].start_s, r[1].heartbeats_sent, r[1].failed_total), ("hold", 2.0, 20, 1));
        assert_eq!(r[1].heartbeat_rtt_ms.count, 1);
        assert!(r[1].heartbeat_rtt_ms.max_ms < 2.0);
    }

    /// Connections given up without an attempt count in the phase that
    /// gave them up, with their reason; the ramp says why it ended; the
    /// states at each boundary are kept (issue 42, finding 16).
    #[test]
    fn not_attempted_and_the_ramp_end_are_per_phase() {
        let mut p = Phases::new(0);
        let mut t = ClientTotals {
            counters: ClientCounters { planned: 10, open: 4, established_total: 4, connecting: 2, queued: 3, ..Default::default() },
            ..Default::default()
        };
        t.counters.not_attempted_by.insert("ramp_deadline".into(), 1);
        p.end_with("every connection settled".into());
        p.enter("hold", &t, 1_000_000);
        t.counters.not_attempted_by.insert("ramp_deadline".into(), 4);
        t.counters.not_attempted_by.insert("run_closed".into(), 1);
        (t.counters.connecting, t.counters.queued) = (0, 0);
        let r = p.results(&t, 2_000_000);
        assert_eq!((r[0].not_attempted_total, r[0].connecting_at_end, r[0].queued_at_end), (1, 2, 3));
        assert_eq!(r[0].end.as_deref(), Some("every connection settled"));
        assert_eq!((r[1].not_attempted_total, r[1].not_attempted["ramp_deadline"], r[1].not_attempted["run_closed"]), (4, 3, 1));
        assert_eq!((r[1].connecting_at_end, r[1].queued_at_end, r[1].end.as_deref()), (0, 0, None));
    }
}
