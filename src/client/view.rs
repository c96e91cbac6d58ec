//! The supervisor's picture of all client workers: latest counters per
//! worker, and histograms merged from every interval they report.

use super::snapshot::{ClientCounters, ClientSnapshot};
use crate::stats::histogram::{self, LatencySummary};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// The client as a whole: every counter summed over its workers, and what
/// only the whole can say.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ClientTotals {
    #[serde(flatten)]
    pub counters: ClientCounters,
    pub cpu_seconds: f64,
    /// Per push sequence number: (arrivals, latest arrival µs, realtime).
    pub push_by_seq: BTreeMap<u64, (u64, u64)>,
    /// Reconnects by second from the start of the ramp, every worker's.
    pub reconnects_by_s: BTreeMap<u64, u64>,
    /// Latest ramp completion over all workers, once all are done.
    pub ramp_done_at_us: Option<u64>,
}

crate::counters_deref!(ClientTotals => ClientCounters);

/// A snapshot's interval histograms, decoded once for every place that
/// adds them up (the run, its phases, its time series).
#[derive(Default)]
pub(crate) struct Intervals {
    pub connect: Option<Histogram<u64>>,
    pub rtt: Option<Histogram<u64>>,
    pub request: Option<Histogram<u64>>,
    pub push: Option<Histogram<u64>>,
    pub rehome: Option<Histogram<u64>>,
    /// Per handshake stage ("tcp", "tls", "upgrade").
    pub stages: Vec<(String, Histogram<u64>)>,
}

impl Intervals {
    pub(crate) fn of(s: &ClientSnapshot) -> Intervals {
        Intervals {
            connect: histogram::decode(&s.connect_hist),
            rtt: histogram::decode(&s.rtt_hist),
            request: histogram::decode(&s.request_hist),
            push: histogram::decode(&s.push_hist),
            rehome: histogram::decode(&s.rehome_hist),
            stages: s.stage_hists.iter().filter_map(|(k, v)| Some((k.clone(), histogram::decode(v)?))).collect(),
        }
    }
}

/// Loss reason of connections that died with their client worker.
pub(crate) const WORKER_CRASHED: &str = "worker_crashed";
/// Why connections of a worker stopped at the end of a close that took
/// too long were not settled.
pub(crate) const WORKER_STOPPED: &str = "worker_stopped";

/// A worker ended before it settled everything: its handshakes in flight
/// failed and its queued connections were not attempted, for `reason`.
fn settle(s: &mut ClientSnapshot, reason: &str) {
    if s.connecting > 0 {
        *s.failed.entry(reason.into()).or_insert(0) += s.connecting;
    }
    if s.queued > 0 {
        *s.not_attempted_by.entry(reason.into()).or_insert(0) += s.queued;
    }
}

pub(crate) struct ClientView {
    latest: Vec<Option<ClientSnapshot>>,
    /// Workers that died before their final snapshot.
    dead: Vec<bool>,
    /// Replacements (their reopening is not the ramp).
    late: Vec<bool>,
    pub connect_hist: Histogram<u64>,
    pub rtt_hist: Histogram<u64>,
    /// Round trips since the last progress line.
    pub rtt_interval: Histogram<u64>,
    pub request_hist: Histogram<u64>,
    /// Request latencies since the last progress line.
    pub request_interval: Histogram<u64>,
    /// Push delivery latency (publish stamp to receipt).
    pub push_hist: Histogram<u64>,
    /// From a reconnect hint to established elsewhere.
    pub rehome_hist: Histogram<u64>,
    /// Handshake time per stage (TCP, TLS, WebSocket upgrade).
    pub stage_hists: BTreeMap<String, Histogram<u64>>,
}

impl ClientView {
    pub(crate) fn new(workers: usize) -> ClientView {
        ClientView {
            latest: vec![None; workers],
            dead: vec![false; workers],
            late: vec![false; workers],
            connect_hist: histogram::new(),
            rtt_hist: histogram::new(),
            rtt_interval: histogram::new(),
            request_hist: histogram::new(),
            request_interval: histogram::new(),
            push_hist: histogram::new(),
            rehome_hist: histogram::new(),
            stage_hists: BTreeMap::new(),
        }
    }

    pub(crate) fn update(&mut self, s: ClientSnapshot, h: &Intervals) {
        histogram::add(&mut self.connect_hist, h.connect.as_ref());
        histogram::add(&mut self.rtt_hist, h.rtt.as_ref());
        histogram::add(&mut self.rtt_interval, h.rtt.as_ref());
        histogram::add(&mut self.request_hist, h.request.as_ref());
        histogram::add(&mut self.request_interval, h.request.as_ref());
        histogram::add(&mut self.push_hist, h.push.as_ref());
        histogram::add(&mut self.rehome_hist, h.rehome.as_ref());
        for (stage, hist) in &h.stages {
            histogram::add(self.stage_hists.entry(stage.clone()).or_insert_with(histogram::new), Some(hist));
        }
        let i = s.worker;
        if i < self.latest.len() {
            self.latest[i] = Some(s);
        }
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.latest.len()
    }

    /// Workers done: sent their final snapshot, or died.
    pub(crate) fn finished(&self) -> usize {
        self.latest.iter().zip(&self.dead).filter(|(s, dead)| **dead || s.as_ref().is_some_and(|s| s.last)).count()
    }

    pub(crate) fn is_finished(&self, i: usize) -> bool {
        self.dead.get(i).copied().unwrap_or(true) || self.latest.get(i).and_then(|s| s.as_ref()).is_some_and(|s| s.last)
    }

    /// Worker `i` was stopped by the supervisor after the hold: nothing
    /// lost; what it had not settled is counted (handshakes in flight
    /// failed, queued connections not attempted: `worker_stopped`).
    pub(crate) fn stopped(&mut self, i: usize) {
        if let Some(d) = self.dead.get_mut(i) {
            *d = true;
        }
        if let Some(Some(s)) = self.latest.get_mut(i) {
            settle(s, WORKER_STOPPED);
            s.counters.zero_levels();
        }
    }

    /// When worker `i`'s last report was taken (CLOCK_MONOTONIC µs).
    pub(crate) fn last_report_us(&self, i: usize) -> Option<u64> {
        self.latest.get(i).and_then(|s| s.as_ref()).map(|s| s.at_us)
    }

    /// Why worker `i` has not finished closing, from its last report
    /// (`limit`: the close's time limit passed, else it fell silent).
    pub(crate) fn why_not_closed(&self, i: usize, now_us: u64, limit: bool) -> String {
        let c = crate::stats::format::count;
        let when = if limit { "the close's time limit passed".to_string() } else { "it sent no report for 20 s".to_string() };
        let Some(s) = self.latest.get(i).and_then(|s| s.as_ref()) else { return format!("{when}; it never reported") };
        let outstanding = s.heartbeats_sent.saturating_sub(s.heartbeats_answered + s.heartbeats_abandoned);
        format!(
            "{when}; its last report, {:.1} s before, had {} open, {} connecting, {} heartbeats unanswered (a worker starved of CPU by a busy machine looks like this)",
            now_us.saturating_sub(s.at_us) as f64 / 1e6,
            c(s.open),
            c(s.connecting),
            c(outstanding)
        )
    }

    /// The checkpoint of worker `i`'s last snapshot (0: none came).
    pub(crate) fn checkpoint_of(&self, i: usize) -> u64 {
        self.latest.get(i).and_then(|s| s.as_ref()).map_or(0, |s| s.checkpoint)
    }

    /// Another worker takes worker `i`'s share: what `i` reported stays
    /// counted (its last snapshot agrees with the checkpoint the
    /// replacement goes on from), its connections are not lost, and its
    /// heartbeats in flight are abandoned.
    pub(crate) fn replaced(&mut self, i: usize) {
        let Some(slot) = self.latest.get_mut(i) else { return };
        self.dead[i] = true;
        if let Some(s) = slot.as_mut() {
            s.heartbeats_abandoned = s.heartbeats_sent.saturating_sub(s.heartbeats_answered);
            s.requests_abandoned = s.requests_sent.saturating_sub(s.replies + s.rejected);
            s.counters.zero_levels();
            s.ramp_done_at_us.get_or_insert(s.at_us);
        }
    }

    /// A worker started after the others (a replacement).
    pub(crate) fn add_worker(&mut self) {
        self.latest.push(None);
        self.dead.push(false);
        self.late.push(true);
    }

    /// Worker `i` died: its open connections are lost (`worker_crashed`)
    /// and its handshakes in flight failed. Returns the connections lost.
    pub(crate) fn retire(&mut self, i: usize) -> u64 {
        let Some(slot) = self.latest.get_mut(i) else { return 0 };
        self.dead[i] = true;
        let s = slot.get_or_insert_with(|| ClientSnapshot { worker: i, ..Default::default() });
        let lost = s.open;
        if lost > 0 {
            *s.lost.entry(WORKER_CRASHED.into()).or_insert(0) += lost;
        }
        settle(s, WORKER_CRASHED);
        s.counters.zero_levels();
        s.ramp_done_at_us.get_or_insert(s.at_us);
        lost
    }

    pub(crate) fn totals(&self) -> ClientTotals {
        let s: Vec<&ClientSnapshot> = self.latest.iter().flatten().collect();
        // The ramp is the first workers' (a replacement's reopening is not).
        let first: Vec<&ClientSnapshot> = self.latest.iter().zip(&self.late).filter(|(_, late)| !**late).filter_map(|(x, _)| x.as_ref()).collect();
        let all_done = first.len() == self.late.iter().filter(|l| !**l).count() && first.iter().all(|x| x.ramp_done_at_us.is_some());
        let mut t = ClientTotals::default();
        for x in &s {
            t.counters.add(&x.counters);
            for (s, n) in &x.reconnects_by_s {
                *t.reconnects_by_s.entry(*s).or_insert(0) += n;
            }
            for (seq, (n, last)) in &x.push_by_seq {
                let e = t.push_by_seq.entry(*seq).or_insert((0, 0));
                e.0 += n;
                e.1 = e.1.max(*last);
            }
        }
        t.cpu_seconds = t.cpu_us as f64 / 1e6;
        t.ramp_done_at_us = if all_done { first.iter().filter_map(|x| x.ramp_done_at_us).max() } else { None };
        t
    }

    /// (snapshot time µs, replies so far) of every worker's latest snapshot.
    pub(crate) fn reply_marks(&self) -> Vec<Option<(u64, u64)>> {
        self.latest.iter().map(|s| s.as_ref().map(|s| (s.at_us, s.replies))).collect()
    }

    pub(crate) fn take_interval_requests(&mut self) -> LatencySummary {
        let s = histogram::summarize(&self.request_interval);
        self.request_interval.reset();
        s
    }

    pub(crate) fn take_interval_rtt(&mut self) -> LatencySummary {
        let s = histogram::summarize(&self.rtt_interval);
        self.rtt_interval.reset();
        s
    }
}
