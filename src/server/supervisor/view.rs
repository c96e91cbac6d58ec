//! The supervisor's picture of all server workers: the latest snapshot of
//! each (live or dead), summed on demand. A dead worker keeps its
//! counters, with its open connections moved to closed as
//! `worker_crashed`, so totals stay exact across crashes.

use crate::server::close::{self, Close};
use crate::server::snapshot::{ServerCounters, ServerSnapshot};
use serde::Serialize;

/// The server as a whole: every counter summed over its workers, and what
/// only the whole can say (worker states, means).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ServerTotals {
    /// Worker processes alive.
    pub workers: usize,
    /// Of those, in the accept group.
    pub accepting: usize,
    /// Of those, at their connection budget (left the accept group).
    pub full: usize,
    /// Connections open now in each live worker, by its index (the
    /// dashboard's connections by worker).
    pub active_by_worker: std::collections::BTreeMap<usize, u64>,
    #[serde(flatten)]
    pub counters: ServerCounters,
    /// Mean business service time actually applied per reply, ms.
    pub applied_service_ms: f64,
    pub cpu_seconds: f64,
    /// Publish-to-write latency per bucket (`server::tables::topics::LATENCY_BUCKETS_MS`, +Inf last).
    pub push_latency_buckets: Vec<u64>,
    pub push_latency_sum_us: u64,
}

crate::counters_deref!(ServerTotals => ServerCounters);

#[derive(Default)]
struct Entry {
    latest: Option<ServerSnapshot>,
    alive: bool,
}

#[derive(Default)]
pub(crate) struct ServerView {
    workers: Vec<Entry>,
}

/// Close reason of connections that died with their worker process.
pub(crate) const WORKER_CRASHED: &str = "worker_crashed";

impl ServerView {
    /// A worker with this index was started.
    pub(crate) fn add(&mut self, i: usize) {
        if self.workers.len() <= i {
            self.workers.resize_with(i + 1, Entry::default);
        }
        self.workers[i].alive = true;
    }

    pub(crate) fn update(&mut self, s: ServerSnapshot) {
        if let Some(e) = self.workers.get_mut(s.worker) {
            e.latest = Some(s);
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&ServerSnapshot> {
        self.workers.get(i).and_then(|e| e.latest.as_ref())
    }

    /// Worker `i` is gone; returns the connections it still held (now
    /// counted closed as `reason`).
    pub(crate) fn retire(&mut self, i: usize, reason: Close) -> u64 {
        let Some(e) = self.workers.get_mut(i) else { return 0 };
        e.alive = false;
        let Some(s) = e.latest.as_mut() else { return 0 };
        let lost = s.active;
        if lost > 0 {
            s.closed += lost;
            close::count_n(&mut s.close_reasons, reason, lost);
        }
        s.counters.zero_levels();
        s.accepting = false;
        lost
    }

    pub(crate) fn totals(&self) -> ServerTotals {
        let live = || self.workers.iter().filter(|e| e.alive).filter_map(|e| e.latest.as_ref());
        let mut t = ServerTotals { workers: self.workers.iter().filter(|e| e.alive).count(), ..Default::default() };
        t.accepting = live().filter(|x| x.accepting).count();
        t.full = live().filter(|x| !x.accepting && x.active >= x.budget).count();
        t.active_by_worker = live().map(|x| (x.worker, x.active)).collect();
        for x in self.workers.iter().filter_map(|e| e.latest.as_ref()) {
            t.counters.add(&x.counters);
            t.push_latency_buckets.resize(t.push_latency_buckets.len().max(x.push_latency_buckets.len()), 0);
            for (a, b) in t.push_latency_buckets.iter_mut().zip(&x.push_latency_buckets) {
                *a += b;
            }
            t.push_latency_sum_us += x.push_latency_sum_us;
        }
        t.applied_service_ms = if t.replies > 0 { t.applied_service_us as f64 / t.replies as f64 / 1000.0 } else { 0.0 };
        t.cpu_seconds = t.cpu_us as f64 / 1e6;
        t
    }
}
