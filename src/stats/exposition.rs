//! The OpenMetrics text format (which Prometheus scrapes), encoded by the
//! `prometheus-client` crate: the pieces every role's `/metrics` shares.
//! Names follow Prometheus conventions: `megaconn_` prefix, `_total`
//! counters (appended by the encoder), `_seconds` and `_bytes` units.

use hdrhistogram::Histogram;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The content type of the exposition.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (ms) of the latency buckets exported to Prometheus.
pub(crate) const LATENCY_BUCKETS_MS: [f64; 12] = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0];

/// A histogram whose buckets were counted elsewhere (in the workers).
#[derive(Debug)]
pub(crate) struct BucketedHistogram {
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
    pub(crate) fn from_hdr(h: &Histogram<u64>) -> BucketedHistogram {
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

    /// From counts per bucket of [`LATENCY_BUCKETS_MS`] (+Inf last) and
    /// their sum in µs.
    pub(crate) fn from_buckets(counts: &[u64], sum_us: u64) -> BucketedHistogram {
        let mut buckets: Vec<(f64, u64)> =
            LATENCY_BUCKETS_MS.iter().map(|ms| ms / 1000.0).chain([f64::INFINITY]).zip(counts.iter().copied().chain(std::iter::repeat(0))).collect();
        buckets.truncate(LATENCY_BUCKETS_MS.len() + 1);
        BucketedHistogram { sum: sum_us as f64 / 1e6, count: counts.iter().sum(), buckets }
    }
}

/// Encode a registry.
pub(crate) fn encode(r: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, r).expect("encoding into a String cannot fail");
    out
}
