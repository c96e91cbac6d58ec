//! `[PHASE:]METRIC OP VALUE`, e.g. `hold:heartbeat_rtt.p99<50ms`: parsed
//! once, when the flags are read, so a typo is a usage error (exit 2)
//! that lists the valid names, never a threshold that silently passes
//! (k6 #1526). The value is converted into the metric's own unit here.

use super::metrics::{catalogue, Metric, Unit};
use crate::client::phases::NAMES as PHASES;

/// A comparison a threshold makes: the measured value on the left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Op {
    /// Longest first, so `<=` is not read as `<`.
    const ALL: [(&'static str, Op); 6] = [("<=", Op::Le), (">=", Op::Ge), ("==", Op::Eq), ("!=", Op::Ne), ("<", Op::Lt), (">", Op::Gt)];

    pub(crate) fn holds(self, measured: f64, limit: f64) -> bool {
        match self {
            Op::Lt => measured < limit,
            Op::Le => measured <= limit,
            Op::Gt => measured > limit,
            Op::Ge => measured >= limit,
            Op::Eq => measured == limit,
            Op::Ne => measured != limit,
        }
    }
}

/// One parsed threshold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Threshold {
    /// As written (spaces removed): what every output shows.
    pub text: String,
    /// `ramp`, `hold` or `close`; None: the whole run.
    pub phase: Option<&'static str>,
    /// The metric's name as written, and where its value comes from.
    pub name: String,
    pub metric: Metric,
    pub op: Op,
    /// The limit in the metric's unit (ms, s, a count, a fraction).
    pub limit: f64,
}

impl Threshold {
    /// The metric's value in `s`, and whether it keeps to the limit (a
    /// metric with no value does not).
    pub(crate) fn check(&self, s: &crate::client::run::ClientSummary) -> (Option<f64>, bool) {
        let v = self.metric.value(s, self.phase);
        (v, v.is_some_and(|v| self.op.holds(v, self.limit)))
    }
}

/// Ends an error with how to write a threshold.
const EXAMPLE: &str = "write [PHASE:]METRIC OP VALUE, e.g. heartbeat_rtt.p99<50ms, hold:handshake.p99<=200ms, established_ratio>=99.9%, failed==0";

/// Parse a `--threshold` expression (also clap's value parser).
pub(crate) fn parse(text: &str) -> Result<Threshold, String> {
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let at = text.find(['<', '>', '=', '!']).ok_or_else(|| format!("'{text}' has no comparison (< <= > >= == !=); {EXAMPLE}"))?;
    let (lhs, rest) = text.split_at(at);
    let (op_text, op) = Op::ALL
        .iter()
        .find(|(s, _)| rest.starts_with(s))
        .copied()
        .ok_or_else(|| format!("'{text}': '{}' is not a comparison (use < <= > >= == !=); {EXAMPLE}", rest.chars().take(2).collect::<String>()))?;
    let value = &rest[op_text.len()..];
    let (phase, name) = match lhs.split_once(':') {
        Some((p, n)) => {
            // With --stages, the phases are stage1 .. stageN.
            let stage = crate::client::stages::index_of(p).map(crate::client::stages::name);
            let phase = PHASES
                .iter()
                .find(|x| **x == p)
                .copied()
                .or(stage)
                .ok_or_else(|| format!("'{text}': no phase '{p}'; the phases are {}, or with --stages stage1 .. stageN", PHASES.join(", ")))?;
            (Some(phase), n)
        }
        None => (None, lhs),
    };
    if name.is_empty() {
        return Err(format!("'{text}' names no metric; {EXAMPLE}"));
    }
    let metric = Metric::find(name).ok_or_else(|| format!("'{text}': unknown metric '{name}'. Valid metrics: {}", catalogue()))?;
    if phase.is_some() && !metric.per_phase() {
        return Err(format!(
            "'{text}': {name} is measured for the whole run only; drop the '{}:' prefix. Valid metrics: {}",
            phase.unwrap_or_default(),
            catalogue()
        ));
    }
    let limit = value_in(value, metric.unit()).map_err(|why| format!("'{text}': {why}"))?;
    Ok(Threshold { text: text.clone(), phase, name: name.to_string(), metric, op, limit })
}

/// `VALUE` (a number and an optional unit) in `unit`. Every unit is a
/// power of ten of the metric's own, applied to the decimal text, so
/// `99.9%` is the double nearest 0.999 (as 999 of 1,000 measures), not
/// 99.9 / 100 one bit above it.
fn value_in(value: &str, unit: Unit) -> Result<f64, String> {
    let split = value.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+')).unwrap_or(value.len());
    let (number, suffix) = value.split_at(split);
    let bad = || format!("'{value}' is not a number with an optional unit (50ms, 2s, 99.9%, 10k)");
    if number.parse::<f64>().is_err() {
        return Err(bad());
    }
    // The unit as a power of ten of the metric's unit.
    let time = |own: i32| -> Result<i32, String> {
        Ok(match suffix {
            "" => 0,
            "us" | "\u{b5}s" => -6 - own,
            "ms" => -3 - own,
            "s" => -own,
            other => return Err(format!("'{other}' is not a unit of time here (us, ms, s)")),
        })
    };
    let count = |per_second: bool| -> Result<i32, String> {
        let suffix = if per_second { suffix.strip_suffix("/s").unwrap_or(suffix) } else { suffix };
        Ok(match suffix {
            "" => 0,
            "k" => 3,
            "M" => 6,
            other => return Err(format!("'{other}' is not a unit of a count here (none, k, M{})", if per_second { ", /s" } else { "" })),
        })
    };
    let exponent = match unit {
        Unit::Millis => time(-3)?,
        Unit::Seconds => time(0)?,
        Unit::Count => count(false)?,
        Unit::PerSecond => count(true)?,
        Unit::Ratio => match suffix {
            "%" => -2,
            "" => 0,
            other => return Err(format!("'{other}' is not a unit of a ratio (write 99.9% or 0.999)")),
        },
    };
    let n: f64 = format!("{number}e{exponent}").parse().map_err(|_| bad())?;
    if !n.is_finite() {
        return Err(format!("'{value}' is not a finite number"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(text: &str) -> f64 {
        parse(text).unwrap_or_else(|e| panic!("{e}")).limit
    }

    #[test]
    fn every_operator() {
        for (text, op) in
            [("failed<1", Op::Lt), ("failed<=1", Op::Le), ("failed>1", Op::Gt), ("failed>=1", Op::Ge), ("failed==1", Op::Eq), ("failed!=1", Op::Ne)]
        {
            assert_eq!(parse(text).unwrap().op, op, "{text}");
        }
        let truth = |op: Op| [op.holds(1.0, 2.0), op.holds(2.0, 2.0), op.holds(3.0, 2.0)];
        assert_eq!(truth(Op::Lt), [true, false, false]);
        assert_eq!(truth(Op::Le), [true, true, false]);
        assert_eq!(truth(Op::Gt), [false, false, true]);
        assert_eq!(truth(Op::Ge), [false, true, true]);
        assert_eq!(truth(Op::Eq), [false, true, false]);
        assert_eq!(truth(Op::Ne), [true, false, true]);
    }

    #[test]
    fn every_unit_converts_into_the_metrics_own() {
        assert_eq!(limit("heartbeat_rtt.p99<50ms"), 50.0);
        assert_eq!(limit("heartbeat_rtt.p99<2s"), 2000.0);
        assert_eq!(limit("heartbeat_rtt.p99<500us"), 0.5);
        assert_eq!(limit("heartbeat_rtt.p99<7.5"), 7.5);
        assert_eq!(limit("ramp_seconds<1500ms"), 1.5);
        assert_eq!(limit("ramp_seconds<3"), 3.0);
        assert_eq!(limit("established>=10k"), 10_000.0);
        assert_eq!(limit("established>=2M"), 2_000_000.0);
        assert_eq!(limit("requests.qps>=1.5k/s"), 1500.0);
        assert_eq!(limit("requests.qps>=200"), 200.0);
        assert_eq!(limit("established_ratio>=99.9%"), 0.999);
        assert_eq!(limit("established_ratio>=0.5"), 0.5);
        // As the measured side computes it: 999 of 1,000 keeps >=99.9%.
        assert_eq!(limit("established_ratio>=99.9%"), 999.0 / 1000.0);
        assert!(parse("established>1e400").is_err());
        assert_eq!(limit(" hold : heartbeat_rtt.p999 < 1 s "), 1000.0);
        assert_eq!(limit("handshake.count>=1k"), 1000.0);
    }

    #[test]
    fn phases_and_counters_from_the_one_table() {
        let t = parse("hold:heartbeat_rtt.p99<20ms").unwrap();
        assert_eq!((t.phase, t.name.as_str()), (Some("hold"), "heartbeat_rtt.p99"));
        assert_eq!(parse("ramp:handshake.p99<200ms").unwrap().phase, Some("ramp"));
        // --stages phases.
        assert_eq!(parse("stage2:heartbeat_rtt.p99<20ms").unwrap().phase, Some("stage2"));
        assert_eq!(parse("stage100:requests_sent>=1").unwrap().phase, Some("stage100"));
        for bad in ["stage0:failed==0", "stage101:failed==0", "stagex:failed==0"] {
            assert!(parse(bad).unwrap_err().contains("stage1 .. stageN"), "{bad}");
        }
        // Every declared counter is a metric, under its field name.
        for d in crate::client::snapshot::ClientCounters::DECLARED {
            assert!(parse(&format!("{}>=0", d.field)).is_ok(), "{}", d.field);
        }
        assert!(parse("close:heartbeats_sent>=0").is_ok());
    }

    #[test]
    fn typos_and_nonsense_are_refused_with_the_names() {
        let e = parse("heartbeat_rtt.p98<5ms").unwrap_err();
        assert!(e.contains("unknown metric 'heartbeat_rtt.p98'") && e.contains("heartbeat_rtt") && e.contains("tls_resumed"), "{e}");
        let e = parse("hodl:heartbeat_rtt.p99<5ms").unwrap_err();
        assert!(e.contains("no phase 'hodl'") && e.contains("ramp, hold, close"), "{e}");
        assert!(parse("hold:tls_handshake.p50<5ms").unwrap_err().contains("whole run only"));
        assert!(parse("established").unwrap_err().contains("no comparison"));
        assert!(parse("established=5").unwrap_err().contains("not a comparison"));
        assert!(parse("established=<5").unwrap_err().contains("not a comparison"));
        assert!(parse("<5").unwrap_err().contains("names no metric"));
        assert!(parse("established<5ms").unwrap_err().contains("not a unit of a count"));
        assert!(parse("heartbeat_rtt.p99<5%").unwrap_err().contains("not a unit of time"));
        assert!(parse("established_ratio>5ms").unwrap_err().contains("not a unit of a ratio"));
        assert!(parse("established<five").unwrap_err().contains("not a number"));
        assert!(parse("established<").unwrap_err().contains("not a number"));
        assert!(parse("established<inf").is_err());
        // Flag values are hostile: nothing panics, whatever the bytes.
        for text in ["a=\u{e9}", "=\u{e9}\u{e9}", "\u{e9}<\u{e9}", "hold:", ":<1", "a:b:c<1", "established<1\u{e9}s", "<<<", "!"] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
