//! `/metrics`: the server's totals in the OpenMetrics text format (which
//! Prometheus scrapes), encoded by the `prometheus-client` crate. Names
//! follow Prometheus conventions: `megaconn_` prefix, `_total` counters
//! (appended by the encoder), `_seconds` and `_bytes` units.

use crate::client::view::ClientTotals;
use crate::server::push::LATENCY_BUCKETS_MS;
use crate::server::view::ServerTotals;
use hdrhistogram::Histogram;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A histogram whose buckets were counted elsewhere (in the workers).
#[derive(Debug)]
struct BucketedHistogram {
    sum: f64,
    count: u64,
    /// (upper bound, count in this bucket), +Inf last.
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for BucketedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl BucketedHistogram {
    /// Prometheus buckets (seconds) from an HdrHistogram of µs.
    fn from_hdr(h: &Histogram<u64>) -> BucketedHistogram {
        let mut below = 0;
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_MS
            .iter()
            .map(|ms| {
                let upto = if h.is_empty() { 0 } else { h.count_between(0, (ms * 1000.0) as u64) };
                let n = upto.saturating_sub(below);
                below = upto;
                (ms / 1000.0, n)
            })
            .collect();
        buckets.push((f64::INFINITY, h.len().saturating_sub(below)));
        BucketedHistogram { sum: h.mean() * h.len() as f64 / 1e6, count: h.len(), buckets }
    }
}

type Labeled = Family<Vec<(String, String)>, Counter>;

fn labeled(label: &str, values: &std::collections::BTreeMap<String, u64>) -> Labeled {
    let f = Labeled::default();
    for (k, v) in values {
        f.get_or_create(&vec![(label.to_string(), k.clone())]).inc_by(*v);
    }
    f
}

/// Add the worker processes' memory and CPU, and encode.
fn finish(mut r: Registry, rss_bytes: u64, cpu_seconds: f64) -> String {
    r.register_with_unit("resident_memory", "Resident memory of the worker processes", Unit::Bytes, ConstGauge::new(rss_bytes as i64));
    r.register_with_unit("cpu", "CPU time of the worker processes", Unit::Seconds, ConstCounter::new(cpu_seconds));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).expect("encoding into a String cannot fail");
    out
}

/// Render a load generator's totals and latency histograms.
pub fn render_client(t: &ClientTotals, connect: &Histogram<u64>, heartbeat: &Histogram<u64>, request: &Histogram<u64>, push: &Histogram<u64>) -> String {
    let mut r = Registry::with_prefix("megaconn_client");
    let g = |v: u64| ConstGauge::new(v as i64);
    let c = ConstCounter::new;
    r.register("connections", "Connections open now", g(t.established));
    r.register("connecting", "Handshakes in flight", g(t.connecting));
    r.register("planned", "Connections this client is to open", g(t.planned));
    r.register("established", "Connections that completed the handshake", c(t.established_total));
    r.register("failed", "Connection attempts that failed, by kind", labeled("kind", &t.failed));
    r.register("lost", "Established connections lost, by reason", labeled("reason", &t.lost));
    r.register("reconnects", "Lost connections opened again", c(t.reconnects));
    r.register("heartbeats_sent", "Heartbeats sent", c(t.heartbeats_sent));
    r.register("heartbeats_answered", "Heartbeats answered", c(t.heartbeats_answered));
    r.register("requests_sent", "Requests sent", c(t.requests_sent));
    r.register("replies", "Replies received", c(t.replies));
    r.register("pushes", "Pushes received", c(t.push_received));
    for (name, help, h) in [
        ("handshake", "Handshake time", connect),
        ("heartbeat_rtt", "Heartbeat round trip from the intended send time", heartbeat),
        ("request_latency", "Request latency from the intended send time", request),
        ("push_delivery_latency", "Push delivery latency from the publish stamp", push),
    ] {
        r.register_with_unit(name, help, Unit::Seconds, BucketedHistogram::from_hdr(h));
    }
    finish(r, t.rss_bytes, t.cpu_seconds)
}

/// Render the totals (with the supervisor's own counters and, in a
/// cluster, its NATS link).
pub fn render(t: &ServerTotals, published: u64, link: Option<&crate::cluster::LinkStatus>) -> String {
    let mut r = Registry::with_prefix("megaconn");
    let g = |v: u64| ConstGauge::new(v as i64);
    let c = ConstCounter::new;
    r.register("connections", "Connections open now", g(t.active));
    r.register("accepted", "Connections accepted", c(t.accepted));
    r.register("closed", "Connections closed, by reason", labeled("reason", &t.close_reasons));
    r.register("accept_errors", "accept() failures, by errno", labeled("errno", &t.accept_errors));
    r.register("refused_over_cap", "Connections closed at accept: the server was at --max-connections", c(t.refused_over_cap));
    r.register("ws_upgrades", "WebSocket handshakes completed", c(t.ws_upgrades));
    r.register("frames_in", "Frames received", c(t.frames_in));
    r.register("frames_out", "Frames sent", c(t.frames_out));
    r.register("requests", "Requests received", c(t.requests));
    r.register("replies", "Requests answered", c(t.replies));
    r.register("rejections", "Requests refused by a full business queue", c(t.rejected));
    let service = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    service.set(t.applied_service_ms / 1000.0);
    r.register_with_unit("business_service_mean", "Mean business service time applied per reply", Unit::Seconds, service);
    r.register("push_published", "Messages published through the admin API", c(published));
    r.register("push_delivered", "Pushes written or queued to a connection", c(t.push_delivered));
    r.register("push_dropped", "Connections closed as slow consumers of pushes", c(t.push_dropped));
    r.register("topics", "Topics with at least one subscriber", g(t.topics));
    r.register("subscriptions", "Topic subscriptions", g(t.subscriptions));
    let mut buckets: Vec<(f64, u64)> =
        LATENCY_BUCKETS_MS.iter().map(|ms| ms / 1000.0).chain([f64::MAX]).zip(t.push_latency_buckets.iter().copied().chain(std::iter::repeat(0))).collect();
    if let Some(last) = buckets.last_mut() {
        last.0 = f64::INFINITY;
    }
    let count = t.push_latency_buckets.iter().sum();
    r.register_with_unit(
        "push_delivery_latency",
        "Time from publish to the write to the socket",
        Unit::Seconds,
        BucketedHistogram { sum: t.push_latency_sum_us as f64 / 1e6, count, buckets },
    );
    let workers = Family::<Vec<(String, String)>, Gauge>::default();
    workers.get_or_create(&vec![("state".into(), "accepting".into())]).set(t.accepting as i64);
    workers.get_or_create(&vec![("state".into(), "full".into())]).set(t.full as i64);
    workers.get_or_create(&vec![("state".into(), "total".into())]).set(t.workers as i64);
    r.register("workers", "Worker processes", workers);
    r.register("threads", "Threads in the worker processes", g(t.threads));
    if let Some(l) = link {
        let c = r.sub_registry_with_prefix("cluster");
        c.register("link_up", "1 while the NATS link is connected, 0 while it is down", g(l.up as u64));
        c.register("reconnects", "Times the NATS link came back after being lost", ConstCounter::new(l.reconnects));
        c.register("messages_in", "Messages received from other nodes", ConstCounter::new(l.messages_in));
        c.register("messages_out", "Messages sent to other nodes", ConstCounter::new(l.messages_out));
        c.register("publish_failures", "Publishes refused (503): the link was down or NATS did not confirm", ConstCounter::new(l.publish_failures));
        c.register("topics", "Topic subjects this node subscribes to", g(l.topics));
    }
    finish(r, t.rss_bytes, t.cpu_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_conventional_names() {
        let mut t = ServerTotals { active: 7, accepted: 9, ..Default::default() };
        t.close_reasons.insert("peer_closed".into(), 2);
        t.push_latency_buckets = vec![1, 2];
        let text = render(&t, 3, None);
        assert!(text.contains("megaconn_connections 7"), "{text}");
        assert!(text.contains("megaconn_accepted_total 9"), "{text}");
        assert!(text.contains("megaconn_closed_total{reason=\"peer_closed\"} 2"), "{text}");
        assert!(text.contains("megaconn_push_delivery_latency_seconds_bucket{le=\"0.001\"} 1"), "{text}");
        assert!(text.contains("megaconn_push_delivery_latency_seconds_count 3"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let link = crate::cluster::LinkStatus { up: true, reconnects: 2, ..Default::default() };
        let text = render(&t, 3, Some(&link));
        assert!(text.contains("megaconn_cluster_link_up 1"), "{text}");
        assert!(text.contains("megaconn_cluster_reconnects_total 2"), "{text}");
    }
}
