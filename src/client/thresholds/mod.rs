//! Thresholds: rules on a run's numbers that decide its exit code, so a
//! load test can gate a release. `--threshold EXPR` is checked on the
//! summary at the end (exit [`EXIT_CROSSED`] when one does not hold);
//! `--threshold-abort EXPR` is also checked on the live numbers during
//! the run and stops it early when crossed; the client's own verdict
//! (every connection established and held, every heartbeat answered) is
//! the same kind of rule, [`builtin`], shown in the same table. Every
//! rule names a metric of one table ([`metrics`]); one the run measured
//! nothing for fails ("no data"), never passes.

pub(crate) mod expr;
pub(crate) mod junit;
pub(crate) mod metrics;

pub(crate) use expr::{parse, Threshold};

use crate::client::run::ClientSummary;
use crate::stats::format;
use metrics::Unit;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Exit code of a run that crossed a `--threshold` or `--threshold-abort`
/// (k6's, so CI scripts written for it read it the same way).
pub(crate) const EXIT_CROSSED: i32 = 99;
/// `--threshold-abort` is first checked this long after the ramp began:
/// the first handshakes and heartbeats are too few for a percentile.
pub(crate) const ABORT_GRACE: Duration = Duration::from_secs(3);
/// And then this often (a summary of every histogram each time).
pub(crate) const ABORT_EVERY: Duration = Duration::from_secs(1);

/// The thresholds a run is asked to keep.
#[derive(Debug, Clone, Default)]
pub(crate) struct Thresholds {
    /// `--threshold`: checked on the summary at the end.
    pub check: Vec<Threshold>,
    /// `--threshold-abort`: checked live (after [`ABORT_GRACE`]) and at the end.
    pub abort: Vec<Threshold>,
    /// `--junit FILE`: the results as JUnit XML.
    pub junit: Option<std::path::PathBuf>,
}

impl Thresholds {
    /// The plan's line on what is armed; None when nothing is.
    pub(crate) fn armed(&self) -> Option<String> {
        if self.check.is_empty() && self.abort.is_empty() {
            return None;
        }
        let list = |t: &[Threshold]| t.iter().map(|t| t.text.as_str()).collect::<Vec<_>>().join(", ");
        let mut line = format!("thresholds armed (exit {EXIT_CROSSED} when one is crossed):");
        if !self.check.is_empty() {
            line += &format!(" {}", list(&self.check));
        }
        if !self.abort.is_empty() {
            line += &format!(
                "{}abort early on {} (checked every {} s from {} s after the ramp began)",
                if self.check.is_empty() { " " } else { "; " },
                list(&self.abort),
                ABORT_EVERY.as_secs(),
                ABORT_GRACE.as_secs()
            );
        }
        Some(line)
    }
}

/// Which rule a result is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// `--threshold`.
    Threshold,
    /// `--threshold-abort`.
    Abort,
    /// The client's own verdict.
    BuiltIn,
}

/// One rule checked: what `--summary-json`, `--json` and `--junit` carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Checked {
    pub expr: String,
    pub phase: Option<String>,
    pub metric: String,
    /// In the metric's unit (ms, s, a count, a fraction); null: no data.
    pub value: Option<f64>,
    /// The threshold's own value, in the same unit.
    #[serde(default)]
    pub limit: f64,
    /// The value for people, with its unit ("no data" when none).
    pub measured: String,
    pub pass: bool,
    pub kind: Kind,
}

impl Checked {
    pub(crate) fn of(t: &Threshold, s: &ClientSummary, kind: Kind) -> Checked {
        let (value, pass) = t.check(s);
        Checked {
            expr: t.text.clone(),
            phase: t.phase.map(str::to_string),
            metric: t.name.clone(),
            value,
            limit: t.limit,
            measured: show(value, t.metric.unit()),
            pass,
            kind,
        }
    }
}

/// A value with its unit, for people.
fn show(v: Option<f64>, unit: Unit) -> String {
    let Some(v) = v else { return "no data".into() };
    match unit {
        Unit::Millis => format!("{v:.2} ms"),
        Unit::Seconds => format!("{v:.2} s"),
        Unit::Count if v.fract() == 0.0 && v >= 0.0 => format::count(v as u64),
        Unit::Count => format!("{v:.2}"),
        Unit::PerSecond => format!("{v:.1}/s"),
        Unit::Ratio => format!("{}%", format!("{:.3}", v * 100.0).trim_end_matches('0').trim_end_matches('.')),
    }
}

/// The client's own verdict as rules, in the order its reasons are given:
/// not interrupted, every connection established, every heartbeat
/// answered, and (unless `--allow-loss`) every established one held.
pub(crate) fn builtin(allow_loss: bool) -> Vec<Threshold> {
    let mut rules = vec!["interrupted==0", "established_ratio>=100%", "heartbeats_unanswered==0"];
    if !allow_loss {
        rules.push("held_ratio>=100%");
    }
    rules.into_iter().map(|r| parse(r).expect("the built-in rules are valid")).collect()
}

/// Every rule checked and the exit code they make.
#[derive(Debug, Clone)]
pub(crate) struct Judgement {
    /// The `--threshold`s, the `--threshold-abort`s, then the built-ins.
    pub results: Vec<Checked>,
    /// 0; 1 when the built-in verdict failed; [`EXIT_CROSSED`] when a
    /// threshold was crossed (or stopped the run), whatever the verdict.
    pub code: i32,
    /// Why, in one sentence, when not 0.
    pub why: Option<String>,
}

/// Check `t` and the built-in verdict on `s`.
pub(crate) fn judge(s: &ClientSummary, t: &Thresholds, allow_loss: bool) -> Judgement {
    let mut results: Vec<Checked> = t.check.iter().map(|t| Checked::of(t, s, Kind::Threshold)).collect();
    for a in &t.abort {
        // The one that stopped the run is shown as it was then.
        results.push(match &s.stopped_by {
            Some(live) if live.expr == a.text => live.clone(),
            _ => Checked::of(a, s, Kind::Abort),
        });
    }
    let (verdict_code, verdict_why) = crate::client::verdict(s, allow_loss);
    results.extend(builtin(allow_loss).iter().map(|b| Checked::of(b, s, Kind::BuiltIn)));
    let crossed: Vec<&Checked> = results.iter().filter(|r| !r.pass && r.kind != Kind::BuiltIn).collect();
    if let Some(live) = &s.stopped_by {
        let why = format!("--threshold-abort {} was crossed during the run (measured {}): stopped early", live.expr, live.measured);
        return Judgement { results, code: EXIT_CROSSED, why: Some(why) };
    }
    if !crossed.is_empty() {
        let list: Vec<String> = crossed.iter().map(|c| format!("{} (measured {})", c.expr, c.measured)).collect();
        let why = format!("{} threshold{} crossed: {}", crossed.len(), if crossed.len() == 1 { "" } else { "s" }, list.join(", "));
        return Judgement { results, code: EXIT_CROSSED, why: Some(why) };
    }
    Judgement { results, code: verdict_code, why: verdict_why }
}

/// The table of rules under the summary: each with its value and result.
pub(crate) fn print(results: &[Checked], out: &mut impl std::io::Write) -> std::io::Result<()> {
    let width = results.iter().map(|r| r.expr.len()).max().unwrap_or(0);
    for r in results {
        let label = match r.kind {
            Kind::Threshold => "threshold",
            Kind::Abort => "abort if",
            Kind::BuiltIn => "built-in",
        };
        writeln!(out, "{label:<13} {}  {:<width$}  {}", if r.pass { "pass" } else { "FAIL" }, r.expr, r.measured)?;
    }
    Ok(())
}

/// The live check of `--threshold-abort`: the first rule crossed on
/// numbers measured so far (a rule with no data yet is not crossed).
pub(crate) fn crossed_live(abort: &[Threshold], live: &ClientSummary) -> Option<Checked> {
    abort.iter().map(|a| Checked::of(a, live, Kind::Abort)).find(|c| c.value.is_some() && !c.pass)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::phases::PhaseResult;
    use crate::stats::histogram::LatencySummary;

    fn summary() -> ClientSummary {
        let mut s = ClientSummary { requested: 100, established: 100, held: 100, ..Default::default() };
        s.counters.heartbeats_sent = 50;
        s.counters.heartbeats_answered = 50;
        s.counters.http_status.insert("2xx".into(), 2);
        s.counters.http_status.insert("5xx".into(), 1);
        s.heartbeat_rtt_ms = LatencySummary { count: 50, p99_ms: 4.0, ..Default::default() };
        s.phases = vec![
            PhaseResult {
                name: "ramp".into(),
                seconds: 1.0,
                handshake_ms: LatencySummary { count: 100, p99_ms: 30.0, ..Default::default() },
                ..Default::default()
            },
            PhaseResult {
                name: "hold".into(),
                seconds: 2.0,
                heartbeat_rtt_ms: LatencySummary { count: 50, p99_ms: 4.0, ..Default::default() },
                ..Default::default()
            },
        ];
        s
    }

    fn check(text: &str, s: &ClientSummary) -> Checked {
        Checked::of(&parse(text).unwrap(), s, Kind::Threshold)
    }

    #[test]
    fn values_come_from_the_summary_and_its_phases() {
        let s = summary();
        assert!(check("heartbeat_rtt.p99<5ms", &s).pass);
        assert!(!check("heartbeat_rtt.p99<3ms", &s).pass);
        assert_eq!(check("ramp:handshake.p99<=30ms", &s).value, Some(30.0));
        assert!(check("ramp:handshake.p99<=30ms", &s).pass);
        assert!(!check("hold:handshake.p99<=30ms", &s).pass, "no handshakes in the hold: no data");
        assert_eq!(check("hold:handshake.p99<=30ms", &s).measured, "no data");
        assert_eq!(check("close:heartbeat_rtt.p99<1s", &s).value, None, "a phase never entered has no data");
        assert_eq!(check("http_status==3", &s).value, Some(3.0), "a by-kind counter sums its kinds");
        assert_eq!(check("heartbeats_sent>=50", &s).measured, "50");
        assert_eq!(check("duration<4s", &s).value, Some(3.0));
        assert_eq!(check("hold:duration<4s", &s).value, Some(2.0));
        assert_eq!(check("established_ratio>=99.9%", &s).measured, "100%");
    }

    #[test]
    fn a_metric_the_run_did_not_measure_fails() {
        let s = summary();
        for t in ["push_latency.p99<1s", "push_latency.p99>=0", "requests.qps>=0", "tls_handshake.p50<1s", "request_latency.p99<1s"] {
            let c = check(t, &s);
            assert_eq!((c.value, c.pass, c.measured.as_str()), (None, false, "no data"), "{t}");
        }
    }

    #[test]
    fn exit_codes_crossed_beats_the_verdict() {
        let s = summary();
        let t = |exprs: &[&str]| Thresholds { check: exprs.iter().map(|e| parse(e).unwrap()).collect(), ..Default::default() };
        let j = judge(&s, &t(&["heartbeat_rtt.p99<5s"]), false);
        assert_eq!((j.code, j.why.as_deref()), (0, None));
        assert_eq!(j.results.iter().filter(|r| r.kind == Kind::BuiltIn).count(), 4);
        let j = judge(&s, &t(&["heartbeat_rtt.p99<5s", "established>1000000"]), false);
        assert_eq!(j.code, EXIT_CROSSED);
        assert!(j.why.unwrap().contains("established>1000000 (measured 100)"));
        let mut lost = summary();
        lost.held = 90;
        assert_eq!(judge(&lost, &t(&[]), false).code, 1);
        assert_eq!(judge(&lost, &t(&[]), true).code, 0, "--allow-loss drops the held rule");
        assert_eq!(judge(&lost, &t(&["established>1000000"]), false).code, EXIT_CROSSED);
        let mut stopped = summary();
        stopped.stopped_by = Some(check("heartbeat_rtt.p99<1ms", &s));
        let j = judge(&stopped, &Thresholds { abort: vec![parse("heartbeat_rtt.p99<1ms").unwrap()], ..Default::default() }, false);
        assert_eq!(j.code, EXIT_CROSSED);
        assert!(j.why.unwrap().contains("stopped early"));
    }

    /// The verdict is the first built-in rule that fails, in a sentence.
    #[test]
    fn the_verdict_names_the_first_builtin_rule_that_fails() {
        let why = |s: &ClientSummary, allow: bool| crate::client::verdict(s, allow).1.unwrap_or_default();
        assert_eq!(crate::client::verdict(&summary(), false), (0, None));
        let mut s = summary();
        s.established = 90;
        s.held = 90;
        assert_eq!(why(&s, false), "90 of 100 connections were established");
        let mut s = summary();
        s.counters.heartbeats_unanswered = 1;
        assert!(why(&s, true).starts_with("1 of 50 heartbeats were not answered"));
        let mut s = summary();
        s.held = 99;
        assert!(why(&s, false).starts_with("99 connections held at the end of the hold of 100"));
        assert_eq!(crate::client::verdict(&s, true), (0, None));
        s.interrupted = true;
        assert_eq!(why(&s, true), "interrupted before the end of the hold");
    }

    #[test]
    fn live_checks_skip_what_has_no_data_yet() {
        let s = summary();
        let abort = vec![parse("push_latency.p99<1ms").unwrap(), parse("heartbeat_rtt.p99<1ms").unwrap()];
        assert_eq!(crossed_live(&abort, &s).map(|c| c.expr), Some("heartbeat_rtt.p99<1ms".into()));
        assert_eq!(crossed_live(&abort[..1], &s), None);
    }
}
