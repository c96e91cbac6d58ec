//! The supervisor's picture of all server workers: the latest snapshot of
//! each (live or dead), summed on demand. A dead worker keeps its
//! counters, with its open connections moved to closed as
//! `worker_crashed`, so totals stay exact across crashes.

use crate::supervise::control::{merge_counts, ServerSnapshot};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerTotals {
    /// Worker processes alive.
    pub workers: usize,
    /// Of those, in the accept group.
    pub accepting: usize,
    /// Of those, at their connection budget (left the accept group).
    pub full: usize,
    pub active: u64,
    pub accepted: u64,
    pub closed: u64,
    pub close_reasons: BTreeMap<String, u64>,
    pub accept_errors: BTreeMap<String, u64>,
    pub frames_in: u64,
    pub frames_out: u64,
    pub requests: u64,
    pub replies: u64,
    pub rejected: u64,
    /// Mean business service time actually applied per reply, ms.
    pub applied_service_ms: f64,
    pub threads: u64,
    pub rss_bytes: u64,
    pub cpu_seconds: f64,
    pub ws_upgrades: u64,
    pub refused_over_cap: u64,
    pub push_delivered: u64,
    pub push_dropped: u64,
    pub topics: u64,
    pub subscriptions: u64,
    /// Publish-to-write latency per bucket (`server::push::LATENCY_BUCKETS_MS`, +Inf last).
    pub push_latency_buckets: Vec<u64>,
    pub push_latency_sum_us: u64,
}

#[derive(Default)]
struct Entry {
    latest: Option<ServerSnapshot>,
    alive: bool,
}

#[derive(Default)]
pub struct ServerView {
    workers: Vec<Entry>,
}

/// Close reason of connections that died with their worker process.
pub const WORKER_CRASHED: &str = "worker_crashed";

impl ServerView {
    /// A worker with this index was started.
    pub fn add(&mut self, i: usize) {
        if self.workers.len() <= i {
            self.workers.resize_with(i + 1, Entry::default);
        }
        self.workers[i].alive = true;
    }

    pub fn update(&mut self, s: ServerSnapshot) {
        if let Some(e) = self.workers.get_mut(s.worker) {
            e.latest = Some(s);
        }
    }

    pub fn get(&self, i: usize) -> Option<&ServerSnapshot> {
        self.workers.get(i).and_then(|e| e.latest.as_ref())
    }

    /// Worker `i` is gone; returns the connections it still held (now
    /// counted closed as `reason`).
    pub fn retire(&mut self, i: usize, reason: &str) -> u64 {
        let Some(e) = self.workers.get_mut(i) else { return 0 };
        e.alive = false;
        let Some(s) = e.latest.as_mut() else { return 0 };
        let lost = s.active;
        if lost > 0 {
            s.closed += lost;
            *s.close_reasons.entry(reason.into()).or_insert(0) += lost;
        }
        s.active = 0;
        s.accepting = false;
        s.rss_bytes = 0;
        s.threads = 0;
        s.topics = 0;
        s.subscriptions = 0;
        lost
    }

    pub fn totals(&self) -> ServerTotals {
        let s: Vec<&ServerSnapshot> = self.workers.iter().filter_map(|e| e.latest.as_ref()).collect();
        let live: Vec<&ServerSnapshot> = self.workers.iter().filter(|e| e.alive).filter_map(|e| e.latest.as_ref()).collect();
        let replies: u64 = s.iter().map(|x| x.replies).sum();
        let service_us: u64 = s.iter().map(|x| x.applied_service_us).sum();
        ServerTotals {
            workers: self.workers.iter().filter(|e| e.alive).count(),
            accepting: live.iter().filter(|x| x.accepting).count(),
            full: live.iter().filter(|x| !x.accepting && x.active >= x.budget).count(),
            active: s.iter().map(|x| x.active).sum(),
            accepted: s.iter().map(|x| x.accepted).sum(),
            closed: s.iter().map(|x| x.closed).sum(),
            close_reasons: merge_counts(s.iter().map(|x| &x.close_reasons)),
            accept_errors: merge_counts(s.iter().map(|x| &x.accept_errors)),
            frames_in: s.iter().map(|x| x.frames_in).sum(),
            frames_out: s.iter().map(|x| x.frames_out).sum(),
            requests: s.iter().map(|x| x.requests).sum(),
            replies,
            rejected: s.iter().map(|x| x.rejected).sum(),
            applied_service_ms: if replies > 0 { service_us as f64 / replies as f64 / 1000.0 } else { 0.0 },
            threads: live.iter().map(|x| x.threads).sum(),
            rss_bytes: live.iter().map(|x| x.rss_bytes).sum(),
            cpu_seconds: s.iter().map(|x| x.cpu_us).sum::<u64>() as f64 / 1e6,
            ws_upgrades: s.iter().map(|x| x.ws_upgrades).sum(),
            refused_over_cap: s.iter().map(|x| x.refused_over_cap).sum(),
            push_delivered: s.iter().map(|x| x.push_delivered).sum(),
            push_dropped: s.iter().map(|x| x.push_dropped).sum(),
            topics: live.iter().map(|x| x.topics).sum(),
            subscriptions: live.iter().map(|x| x.subscriptions).sum(),
            push_latency_buckets: s.iter().fold(Vec::new(), |mut acc, x| {
                acc.resize(acc.len().max(x.push_latency_buckets.len()), 0);
                for (a, b) in acc.iter_mut().zip(&x.push_latency_buckets) {
                    *a += b;
                }
                acc
            }),
            push_latency_sum_us: s.iter().map(|x| x.push_latency_sum_us).sum(),
        }
    }
}
