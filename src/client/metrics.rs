//! The load generator's `/metrics`: every declared counter
//! ([`ClientCounters`]) and the latency histograms of the run.
//!
//! [`ClientCounters`]: super::snapshot::ClientCounters

use super::view::ClientTotals;
use crate::stats::exposition::{encode, BucketedHistogram};
use hdrhistogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The prefix of every client metric.
pub(crate) const PREFIX: &str = "megaconn_client";

/// The run's latency histograms, as `/metrics` exports them.
pub(crate) struct Latencies<'a> {
    pub connect: &'a Histogram<u64>,
    pub heartbeat: &'a Histogram<u64>,
    pub request: &'a Histogram<u64>,
    pub push: &'a Histogram<u64>,
}

/// Render a load generator's totals and latency histograms.
pub(crate) fn render(t: &ClientTotals, h: &Latencies<'_>) -> String {
    let mut r = Registry::with_prefix(PREFIX);
    t.counters.register(&mut r);
    for (name, help, h) in [
        ("handshake", "Handshake time", h.connect),
        ("heartbeat_rtt", "Heartbeat round trip from the intended send time", h.heartbeat),
        ("request_latency", "Request latency from the intended send time", h.request),
        ("push_delivery_latency", "Push delivery latency from the publish stamp", h.push),
    ] {
        r.register_with_unit(name, help, Unit::Seconds, BucketedHistogram::from_hdr(h));
    }
    encode(&r)
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::ClientCounters;
    use super::*;

    #[test]
    fn renders_every_declared_counter() {
        let mut t = ClientTotals { counters: ClientCounters::example(), ..Default::default() };
        t.counters.heartbeats_answered = 5;
        t.counters.failed.insert("ECONNREFUSED".into(), 2);
        let e = crate::stats::histogram::new();
        let text = render(&t, &Latencies { connect: &e, heartbeat: &e, request: &e, push: &e });
        for d in ClientCounters::DECLARED {
            assert!(text.contains(&format!("# HELP {} ", d.kind.family_name(PREFIX, d.metric))), "{} missing from {text}", d.field);
        }
        assert!(text.contains("megaconn_client_heartbeats_answered_total 5"), "{text}");
        assert!(text.contains("megaconn_client_failed_total{kind=\"ECONNREFUSED\"} 2"), "{text}");
    }
}
