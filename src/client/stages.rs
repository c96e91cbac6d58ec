//! `--stages`: the number of open connections over time, up and down, as
//! k6's ramping executors do it. Each stage moves the target linearly
//! from where the previous one left it (0 before the first) to its own
//! target over its duration; then the next starts. A stage may also set
//! the request rate per connection for its duration (`@50/s`), as
//! `--request-rate` does for a whole run.
//!
//! The supervisor gives every worker its share of each stage's target
//! ([`Stages::share`]): worker i of w takes the connections g < target
//! with g % w == i, so the shares add up to the target exactly at every
//! stage, and a worker's share never exceeds its share of the highest
//! target (the plan sizes its slots for that).

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use std::time::Duration;

/// Most stages a run takes.
pub(crate) const MAX_STAGES: usize = 100;
/// Highest target a stage may name (the plan then checks it fits).
pub(crate) const MAX_TARGET: u64 = 100_000_000;
/// Longest the stages may last together.
const MAX_TOTAL: Duration = crate::values::MAX_DURATION;
/// The accepted syntax, for every error message.
pub(crate) const SYNTAX: &str =
    "expected DURATION:TARGET[@RATE/s] stages separated by commas, e.g. 30s:10000,2m:10000,30s:50000,1m:0 or 30s:1000@50/s,1m:1000@200/s \
     (TARGET: open connections, 0 to 100M; RATE: requests per connection, as --request-rate)";

/// One stage: reach `target` open connections, linearly, over `duration`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stage {
    pub duration: Duration,
    pub target: u64,
    /// Requests per second per connection during this stage (None: the
    /// run's `--request-rate`, if any).
    pub request_rate: Option<f64>,
}

/// The stages of a run, in order (never empty once parsed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stages(pub Vec<Stage>);

/// The phase name of stage `i` (0-based): `stage1` .. `stage100`.
pub(crate) fn name(i: usize) -> &'static str {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| (1..=MAX_STAGES).map(|n| &*Box::leak(format!("stage{n}").into_boxed_str())).collect());
    names.get(i).copied().unwrap_or("stage")
}

/// The stage index a phase name names (`stage2` -> 1), if it is one.
pub(crate) fn index_of(phase: &str) -> Option<usize> {
    let n: usize = phase.strip_prefix("stage")?.parse().ok()?;
    (1..=MAX_STAGES).contains(&n).then(|| n - 1)
}

/// Parse `--stages` (see [`SYNTAX`]).
pub(crate) fn parse(s: &str) -> Result<Stages, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(format!("no stages given; {SYNTAX}"));
    }
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() > MAX_STAGES {
        return Err(format!("{} stages is more than the {MAX_STAGES} a run takes; {SYNTAX}", parts.len()));
    }
    let mut stages = Vec::with_capacity(parts.len());
    let mut total = Duration::ZERO;
    for (i, part) in parts.iter().enumerate() {
        let at = |what: String| format!("stage {} '{part}': {what}; {SYNTAX}", i + 1);
        let (duration, rest) = part.split_once(':').ok_or_else(|| at("no ':' between duration and target".into()))?;
        let (target, rate) = match rest.split_once('@') {
            Some((t, r)) => (t, Some(r)),
            None => (rest, None),
        };
        let duration = crate::values::duration(duration).map_err(&at)?;
        if duration < Duration::from_millis(1) {
            return Err(at("a stage lasts at least 1ms".into()));
        }
        total += duration;
        if total > MAX_TOTAL {
            return Err(at(format!("the stages last longer than the cap of {} days together", MAX_TOTAL.as_secs() / 86_400)));
        }
        let target = target.trim().replace('_', "");
        let target: u64 = match target.parse::<i128>() {
            Ok(v) if v < 0 => return Err(at(format!("target {v} is negative"))),
            Ok(v) if v > MAX_TARGET as i128 => return Err(at(format!("target {v} is above the cap of {MAX_TARGET}"))),
            Ok(v) => v as u64,
            Err(_) => return Err(at(format!("'{target}' is not a whole number of connections"))),
        };
        let request_rate = match rate {
            None => None,
            Some(r) => match r.parse::<crate::values::PerSecond>().map_err(&at)?.0 {
                Some(v) => Some(v),
                None => return Err(at("a stage's request rate is above 0 (leave '@...' out for none)".into())),
            },
        };
        stages.push(Stage { duration, target, request_rate });
    }
    if stages.iter().all(|s| s.target == 0) {
        return Err(format!("every stage's target is 0: nothing would open; {SYNTAX}"));
    }
    Ok(Stages(stages))
}

/// Worker i's share of `target` over w workers: the g < target with
/// g % w == i. Monotonic in `target`; the shares add up to it.
pub(crate) fn share_of(target: u64, i: u64, w: u64) -> u64 {
    let w = w.max(1);
    if i >= w {
        return 0;
    }
    (target + w - 1 - i) / w
}

impl Stages {
    /// The highest target: what the plan is sized for.
    pub(crate) fn highest(&self) -> u64 {
        self.0.iter().map(|s| s.target).max().unwrap_or(0)
    }

    /// How long all the stages last (µs).
    pub(crate) fn total_us(&self) -> u64 {
        self.0.iter().map(|s| s.duration.as_micros() as u64).sum()
    }

    /// When stage `i` starts, µs from the start of the first.
    pub(crate) fn start_of_us(&self, i: usize) -> u64 {
        self.0.iter().take(i).map(|s| s.duration.as_micros() as u64).sum()
    }

    /// The stage under way `elapsed_us` after the start (the last one
    /// from its end on).
    pub(crate) fn index_at(&self, elapsed_us: u64) -> usize {
        let mut end = 0u64;
        for (i, s) in self.0.iter().enumerate() {
            end += s.duration.as_micros() as u64;
            if elapsed_us < end {
                return i;
            }
        }
        self.0.len().saturating_sub(1)
    }

    /// Open connections wanted `elapsed_us` after the start: linear from
    /// the previous stage's target (0 before the first) to this one's,
    /// rounded down going up and up going down (a stage's end reaches its
    /// target exactly; the last target holds after the end).
    pub(crate) fn target_at(&self, elapsed_us: u64) -> u64 {
        let mut from = 0u64;
        let mut start = 0u64;
        for s in &self.0 {
            let d = s.duration.as_micros() as u64;
            if elapsed_us < start + d {
                let into = (elapsed_us - start) as u128;
                let d = d.max(1) as u128;
                return if s.target >= from {
                    from + ((s.target - from) as u128 * into / d) as u64
                } else {
                    from - ((from - s.target) as u128 * into / d) as u64
                };
            }
            start += d;
            from = s.target;
        }
        from
    }

    /// Worker i of w's share of every stage ([`share_of`]).
    pub(crate) fn share(&self, i: u64, w: u64) -> Stages {
        Stages(self.0.iter().map(|s| Stage { target: share_of(s.target, i, w), ..s.clone() }).collect())
    }

    /// The fastest change of any stage, in connections per second (at
    /// least 1): what paces the handshakes a worker keeps in flight.
    pub(crate) fn steepest_rate(&self) -> u64 {
        let mut from = 0u64;
        let mut most = 1.0f64;
        for s in &self.0 {
            let per_s = s.target.abs_diff(from) as f64 / s.duration.as_secs_f64().max(1e-3);
            most = most.max(per_s);
            from = s.target;
        }
        most.ceil().min(u64::MAX as f64) as u64
    }

    /// The request rate per connection of stage `i`, with `default` (the
    /// run's `--request-rate`) for a stage that names none.
    #[cfg(test)]
    pub(crate) fn request_rate(&self, i: usize, default: Option<f64>) -> Option<f64> {
        self.0.get(i).and_then(|s| s.request_rate).or(default)
    }

    /// Requests the stages offer in all: each stage's rate (resolved)
    /// times its mean target times its seconds.
    pub(crate) fn offered_requests(&self) -> f64 {
        let mut from = 0u64;
        let mut sum = 0.0;
        for s in &self.0 {
            sum += s.request_rate.unwrap_or(0.0) * (from + s.target) as f64 / 2.0 * s.duration.as_secs_f64();
            from = s.target;
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_parse_with_and_without_a_request_rate() {
        let s = parse("30s:10000, 2m:10000,500ms:50k_0,1m:0").unwrap_err();
        assert!(s.contains("stage 3") && s.contains("not a whole number"), "{s}");
        let s = parse("30s:10000,2m:10_000,30s:50000,1m:0").unwrap();
        assert_eq!(s.0.len(), 4);
        assert_eq!(s.0[1], Stage { duration: Duration::from_secs(120), target: 10_000, request_rate: None });
        assert_eq!((s.highest(), s.total_us()), (50_000, 240_000_000));
        let s = parse("30s:1000@50/s,1m:1000@0.5/s,1s:0").unwrap();
        assert_eq!((s.0[0].request_rate, s.0[1].request_rate, s.0[2].request_rate), (Some(50.0), Some(0.5), None));
        assert_eq!(s.request_rate(2, Some(3.0)), Some(3.0));
        assert_eq!(s.request_rate(0, Some(3.0)), Some(50.0));
    }

    #[test]
    fn malformed_stages_name_the_problem_and_the_syntax() {
        let long: Vec<String> = (0..=MAX_STAGES).map(|_| "1s:1".to_string()).collect();
        for (bad, says) in [
            ("", "no stages"),
            ("  ", "no stages"),
            ("30s", "no ':'"),
            ("xs:10", "not a duration"),
            ("0s:10", "at least 1ms"),
            ("-1s:10", "not a duration"),
            ("1s:-5", "negative"),
            ("1s:99999999999999999999999999999999999999999", "not a whole number"),
            ("1s:100000001", "above the cap"),
            ("1s:ten", "not a whole number"),
            ("1s:10@fast", "rate"),
            ("1s:10@0/s", "above 0"),
            ("1s:0,2s:0", "nothing would open"),
            ("1s:10,", "stage 2"),
            ("29d:10,2d:10", "longer than the cap"),
            (&long.join(","), "more than the 100"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says) && e.contains("DURATION:TARGET"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_target_moves_linearly_up_and_down_and_reaches_each_stage() {
        let s = parse("2s:400,2s:400,2s:100,1s:0").unwrap();
        let at = |ms: u64| s.target_at(ms * 1000);
        assert_eq!((at(0), at(500), at(1000), at(1999), at(2000)), (0, 100, 200, 399, 400));
        assert_eq!((at(3000), at(3999), at(4000), at(5000), at(6000)), (400, 400, 400, 250, 100));
        assert_eq!((at(6500), at(6999), at(7000), at(100_000)), (50, 1, 0, 0));
        assert_eq!((s.index_at(0), s.index_at(1_999_999), s.index_at(2_000_000), s.index_at(9_000_000)), (0, 0, 1, 3));
        assert_eq!((s.start_of_us(0), s.start_of_us(2), s.steepest_rate()), (0, 4_000_000, 200));
        // Every step of a target is seen on the way (none skipped).
        for ms in 1..7000 {
            assert!(at(ms).abs_diff(at(ms - 1)) <= 1, "{ms}");
        }
    }

    #[test]
    fn shares_add_up_at_every_stage_and_never_exceed_the_highest() {
        for w in 1..=7u64 {
            for target in 0..50u64 {
                let shares: Vec<u64> = (0..w).map(|i| share_of(target, i, w)).collect();
                assert_eq!(shares.iter().sum::<u64>(), target, "{target} over {w}");
                for (i, s) in shares.iter().enumerate() {
                    assert!(*s <= share_of(target + 1, i as u64, w), "share of {target} over {w} worker {i} not monotonic");
                }
            }
        }
        let s = parse("1s:3,1s:2,1s:5").unwrap();
        let parts: Vec<Stages> = (0..5).map(|i| s.share(i, 5)).collect();
        for stage in 0..3 {
            assert_eq!(parts.iter().map(|p| p.0[stage].target).sum::<u64>(), s.0[stage].target);
        }
        for ms in (0..3000).step_by(7) {
            let sum: u64 = parts.iter().map(|p| p.target_at(ms * 1000)).sum();
            assert!(sum.abs_diff(s.target_at(ms * 1000)) < 5, "{ms}: {sum}");
        }
        assert!(parts.iter().all(|p| p.0.iter().all(|st| st.target <= p.highest())));
    }

    #[test]
    fn stage_names_round_trip() {
        assert_eq!((name(0), name(99)), ("stage1", "stage100"));
        assert_eq!(
            (index_of("stage1"), index_of("stage100"), index_of("stage0"), index_of("stage101"), index_of("hold")),
            (Some(0), Some(99), None, None, None)
        );
    }
}
