//! The supervisor's picture of all server workers: the latest snapshot of
//! each, summed on demand, and rates between two readings.

use crate::workers::control::{merge_counts, ServerSnapshot};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerTotals {
    pub workers: usize,
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
}

pub struct ServerView {
    latest: Vec<Option<ServerSnapshot>>,
}

impl ServerView {
    pub fn new(workers: usize) -> ServerView {
        ServerView { latest: vec![None; workers] }
    }

    pub fn update(&mut self, s: ServerSnapshot) {
        let i = s.worker;
        if i < self.latest.len() {
            self.latest[i] = Some(s);
        }
    }

    pub fn totals(&self) -> ServerTotals {
        let s: Vec<&ServerSnapshot> = self.latest.iter().flatten().collect();
        ServerTotals {
            workers: self.latest.len(),
            active: s.iter().map(|x| x.active).sum(),
            accepted: s.iter().map(|x| x.accepted).sum(),
            closed: s.iter().map(|x| x.closed).sum(),
            close_reasons: merge_counts(s.iter().map(|x| &x.close_reasons)),
            accept_errors: merge_counts(s.iter().map(|x| &x.accept_errors)),
            frames_in: s.iter().map(|x| x.frames_in).sum(),
            frames_out: s.iter().map(|x| x.frames_out).sum(),
            requests: s.iter().map(|x| x.requests).sum(),
            replies: s.iter().map(|x| x.replies).sum(),
            rejected: s.iter().map(|x| x.rejected).sum(),
            applied_service_ms: {
                let replies: u64 = s.iter().map(|x| x.replies).sum();
                let us: u64 = s.iter().map(|x| x.applied_service_us).sum();
                if replies > 0 { us as f64 / replies as f64 / 1000.0 } else { 0.0 }
            },
            threads: s.iter().map(|x| x.threads).sum(),
            rss_bytes: s.iter().map(|x| x.rss_bytes).sum(),
            cpu_seconds: s.iter().map(|x| x.cpu_us).sum::<u64>() as f64 / 1e6,
        }
    }
}
