//! Latency histograms: HdrHistogram in microseconds, shipped between
//! processes as base64 V2 blobs so workers' recordings merge losslessly.

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest value tracked: one hour in µs (anything slower is clamped).
const MAX_US: u64 = 3_600_000_000;

pub(crate) fn new() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static bounds are valid")
}

pub(crate) fn record(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us.clamp(1, MAX_US));
}

/// Serialize to base64 text; an empty histogram is an empty string.
pub(crate) fn encode(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return String::new();
    }
    let mut bytes = Vec::new();
    V2Serializer::new().serialize(h, &mut bytes).expect("in-memory serialization");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decode an encoded histogram; None when empty or garbled.
pub(crate) fn decode(text: &str) -> Option<Histogram<u64>> {
    if text.is_empty() {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).ok()?;
    Deserializer::new().deserialize(&mut bytes.as_slice()).ok()
}

/// Merge an encoded histogram into `into`; garbage is ignored (and
/// reported by the caller's counters staying short, never a panic).
#[cfg(test)]
pub(crate) fn merge_encoded(into: &mut Histogram<u64>, text: &str) -> bool {
    text.is_empty() || decode(text).is_some_and(|h| into.add(&h).is_ok())
}

/// Add a decoded histogram, if any.
pub(crate) fn add(into: &mut Histogram<u64>, h: Option<&Histogram<u64>>) {
    if let Some(h) = h {
        let _ = into.add(h);
    }
}

/// The percentile summary every report prints, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct LatencySummary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

pub(crate) fn summarize(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    LatencySummary {
        count: h.len(),
        mean_ms: h.mean() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_merge_roundtrip() {
        let mut a = new();
        for v in 1..=1000 {
            record(&mut a, v * 10);
        }
        let mut total = new();
        assert!(merge_encoded(&mut total, &encode(&a)));
        assert!(merge_encoded(&mut total, &encode(&a)));
        assert!(merge_encoded(&mut total, ""));
        assert!(!merge_encoded(&mut total, "not base64!"));
        assert_eq!(total.len(), 2000);
        let s = summarize(&total);
        assert!((s.p50_ms - 5.0).abs() < 0.05, "{s:?}");
    }
}
