//! The run as a time series: one sample every [`EVERY_US`], with latency
//! percentiles of that interval alone (workers' interval histograms
//! merged as they arrive) and, in a bench, the server beside the client.

use crate::client::view::Intervals;
use crate::stats::histogram::{self, LatencySummary};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub(crate) const EVERY_US: u64 = 500_000;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Sample {
    /// Seconds from the planned start of the ramp.
    pub t_s: f64,
    pub phase: String,
    /// Client connections open now.
    pub open: u64,
    pub connecting: u64,
    pub established_total: u64,
    pub failed: u64,
    pub lost: u64,
    /// Handshakes completed per second over this interval.
    pub connect_rate_per_s: f64,
    /// Lost or moved connections opened again per second (--reconnect).
    #[serde(default)]
    pub reconnect_rate_per_s: f64,
    pub qps: f64,
    pub heartbeat_ms: LatencySummary,
    pub request_ms: LatencySummary,
    pub push_ms: LatencySummary,
    /// CPU of all client workers, in cores (1.0 = one core busy).
    pub client_cpu_cores: f64,
    pub client_rss_bytes: u64,
    pub server: Option<ServerSample>,
}

/// The server side of a bench sample.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ServerSample {
    pub active: u64,
    pub workers: usize,
    pub cpu_cores: f64,
    /// Anonymous PSS above the workers' idle baseline, per connection.
    pub user_bytes_per_conn: f64,
    /// Growth of the kernel's Slab since the start, per connection (both
    /// ends on this machine).
    pub kernel_bytes_per_conn: f64,
}

/// The counters a sample needs from the client's totals.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub open: u64,
    pub connecting: u64,
    pub established_total: u64,
    pub failed: u64,
    pub lost: u64,
    pub reconnects: u64,
    pub replies: u64,
    pub cpu_seconds: f64,
    pub rss_bytes: u64,
}

/// One interval's histograms, kept for `--hdr-log`.
pub(crate) struct Interval {
    pub start_us: u64,
    pub end_us: u64,
    /// (tag, histogram) of every kind recorded in the interval.
    pub hists: Vec<(&'static str, Histogram<u64>)>,
}

pub(crate) struct Series {
    pub samples: Vec<Sample>,
    /// Interval histograms, when kept (`keep_intervals`).
    pub intervals: Vec<Interval>,
    pub keep_intervals: bool,
    connect: Histogram<u64>,
    origin_us: u64,
    next_us: u64,
    /// (µs, counters) of the last two samples: rates are taken over ~1 s
    /// (workers report every 500 ms, not in step with the sampler, so a
    /// half-second holds 0, 1 or 2 of a worker's reports).
    window: std::collections::VecDeque<(u64, Counters)>,
    heartbeat: Histogram<u64>,
    request: Histogram<u64>,
    push: Histogram<u64>,
    /// A sample was taken and the caller has not looked at it yet.
    fresh: bool,
}

impl Series {
    pub(crate) fn new(origin_us: u64) -> Series {
        Series {
            samples: Vec::new(),
            intervals: Vec::new(),
            keep_intervals: false,
            connect: histogram::new(),
            origin_us,
            next_us: origin_us,
            window: std::collections::VecDeque::new(),
            heartbeat: histogram::new(),
            request: histogram::new(),
            push: histogram::new(),
            fresh: false,
        }
    }

    pub(crate) fn record(&mut self, d: &Intervals) {
        histogram::add(&mut self.connect, d.connect.as_ref());
        histogram::add(&mut self.heartbeat, d.rtt.as_ref());
        histogram::add(&mut self.request, d.request.as_ref());
        histogram::add(&mut self.push, d.push.as_ref());
    }

    pub(crate) fn due(&self, now_us: u64) -> bool {
        now_us >= self.next_us
    }

    /// Take a sample now (call when [`Series::due`]).
    pub(crate) fn sample(&mut self, now_us: u64, phase: &str, c: Counters) {
        let (base_us, base) = self.window.front().copied().unwrap_or((self.origin_us, Counters::default()));
        let dt = now_us.saturating_sub(base_us) as f64 / 1e6;
        let per_s = |a: u64, b: u64| if dt > 0.0 { b.saturating_sub(a) as f64 / dt } else { 0.0 };
        self.keep_interval(now_us);
        self.connect.reset();
        let take = |h: &mut Histogram<u64>| {
            let s = histogram::summarize(h);
            h.reset();
            s
        };
        self.samples.push(Sample {
            t_s: now_us.saturating_sub(self.origin_us) as f64 / 1e6,
            phase: phase.into(),
            open: c.open,
            connecting: c.connecting,
            established_total: c.established_total,
            failed: c.failed,
            lost: c.lost,
            connect_rate_per_s: per_s(base.established_total, c.established_total),
            reconnect_rate_per_s: per_s(base.reconnects, c.reconnects),
            qps: per_s(base.replies, c.replies),
            heartbeat_ms: take(&mut self.heartbeat),
            request_ms: take(&mut self.request),
            push_ms: take(&mut self.push),
            // The first sample has no interval of its own to price.
            client_cpu_cores: if dt > 0.0 && !self.samples.is_empty() { (c.cpu_seconds - base.cpu_seconds).max(0.0) / dt } else { 0.0 },
            client_rss_bytes: c.rss_bytes,
            server: None,
        });
        self.window.push_back((now_us, c));
        if self.window.len() > 2 {
            self.window.pop_front();
        }
        self.next_us = now_us.max(self.next_us) + EVERY_US;
        self.fresh = true;
    }

    /// Keep what was recorded since the last sample as an interval.
    fn keep_interval(&mut self, now_us: u64) {
        if !self.keep_intervals {
            return;
        }
        let start_us = self.samples.last().map_or(self.origin_us, |s| self.origin_us + (s.t_s * 1e6) as u64);
        let hists: Vec<(&'static str, Histogram<u64>)> =
            [("handshake", &self.connect), ("heartbeat", &self.heartbeat), ("request", &self.request), ("push", &self.push)]
                .into_iter()
                .filter(|(_, h)| !h.is_empty())
                .map(|(t, h)| (t, h.clone()))
                .collect();
        if !hists.is_empty() {
            self.intervals.push(Interval { start_us, end_us: now_us.max(start_us + 1), hists });
        }
    }

    /// The run is over: what arrived after the last sample (workers' final
    /// reports) becomes the last interval.
    pub(crate) fn flush(&mut self, now_us: u64) {
        self.keep_interval(now_us);
        for h in [&mut self.connect, &mut self.heartbeat, &mut self.request, &mut self.push] {
            h.reset();
        }
    }

    /// The sample taken since the last call, to add the server's side.
    pub(crate) fn fresh(&mut self) -> Option<&mut Sample> {
        if std::mem::take(&mut self.fresh) {
            self.samples.last_mut()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_rates_and_interval_latency() {
        let mut s = Series::new(0);
        assert!(s.due(0));
        let mut h = histogram::new();
        histogram::record(&mut h, 3_000);
        s.record(&Intervals { rtt: Some(h), ..Default::default() });
        s.sample(500_000, "ramp", Counters { established_total: 100, open: 100, cpu_seconds: 0.25, ..Default::default() });
        assert!(!s.due(600_000));
        assert!(s.fresh().is_some() && s.fresh().is_none());
        s.sample(1_000_000, "ramp", Counters { established_total: 300, open: 290, cpu_seconds: 0.75, ..Default::default() });
        let a = &s.samples[0];
        assert_eq!((a.connect_rate_per_s, a.client_cpu_cores, a.heartbeat_ms.count), (200.0, 0.0, 1), "no interval before the first sample to price");
        let b = &s.samples[1];
        assert_eq!((b.t_s, b.connect_rate_per_s, b.client_cpu_cores, b.heartbeat_ms.count), (1.0, 400.0, 1.0, 0));
        // From the third on, rates span the last second (two samples).
        s.sample(1_500_000, "hold", Counters { established_total: 500, open: 490, cpu_seconds: 1.25, ..Default::default() });
        let c = &s.samples[2];
        assert_eq!((c.connect_rate_per_s, c.client_cpu_cores), (400.0, 1.0));
    }
}
