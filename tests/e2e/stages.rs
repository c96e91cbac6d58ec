//! `--stages` (issue 46), against a real server on loopback: the open
//! connections follow each stage's target up and down (read from the
//! per-sample series of the report, two client workers splitting every
//! target); each stage sends at its own request rate (its requests counted
//! in its own phase, by the workers that sent them); a per-stage threshold
//! is evaluated on its stage; malformed stages and flags that contradict
//! them are usage errors (exit 2) that name the problem.

use crate::common::*;
use serde_json::Value;
use std::time::Duration;

/// A scratch directory of this test process.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("megaconn-stages-{}", std::process::id())).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The target of `stages` ((seconds, target) pairs) `t` seconds after
/// the start: linear from the previous target (0 first) to each one's.
fn target_at(stages: &[(f64, f64)], t: f64) -> f64 {
    let (mut from, mut start) = (0.0, 0.0);
    for &(d, to) in stages {
        if t < start + d {
            return from + (to - from) * ((t - start).max(0.0) / d);
        }
        start += d;
        from = to;
    }
    from
}

/// The phase named `name` of a summary.
fn phase<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["phases"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no phase {name} in {}", summary["phases"]))
}

#[test]
fn open_connections_follow_each_stage_up_and_down() {
    let ports = free_ports(1);
    let (_srv, _) = server(&["--ports", &ports.arg(), "--workers", "1"], None);
    let dir = scratch("follow");
    let stages = [(2.0, 400.0), (2.0, 400.0), (2.0, 100.0), (1.0, 0.0)];
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--stages", "2s:400,2s:400,2s:100,1s:0", "--workers", "2"]);
    cmd.args(["--heartbeat", "500ms", "--stats-interval", "200ms", "--json", "--report"]).arg(&dir);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}\n{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let s = &doc["summary"];
    assert_eq!(s["workers"], 2, "two workers split every target: {s}");
    let names: Vec<&str> = s["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(&names[..4], ["stage1", "stage2", "stage3", "stage4"], "{names:?}");
    assert_eq!(s["requested"], 400, "the plan holds the highest target: {s}");
    // Every connection a step down closed was closed on purpose: held, none lost.
    assert_eq!((s["stage_closed"].as_u64(), s["lost_total"].as_u64()), (Some(s["established"].as_u64().unwrap()), Some(0)), "{s}");
    assert_eq!(s["held"], s["established"], "{s}");

    let report: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let samples = report["series"].as_array().unwrap();
    let mut seen_full = false;
    let mut checked = 0;
    for x in samples {
        let (t, open) = (x["t_s"].as_f64().unwrap(), x["open"].as_f64().unwrap());
        if !(1.0..=7.0).contains(&t) {
            continue;
        }
        // Followed within one second: the count is what the target was
        // at some moment of the last second (the target moves linearly
        // and monotonically within a stage, so between its extremes over
        // that second; the extremes are at the ends or a stage boundary).
        let mut points: Vec<f64> = vec![t - 1.0, t];
        let mut edge = 0.0;
        for &(d, _) in &stages {
            edge += d;
            if edge > t - 1.0 && edge < t {
                points.push(edge);
            }
        }
        let values: Vec<f64> = points.iter().map(|p| target_at(&stages, *p)).collect();
        let (lo, hi) = (values.iter().cloned().fold(f64::MAX, f64::min), values.iter().cloned().fold(0.0, f64::max));
        assert!(open >= lo.floor() && open <= hi.ceil(), "at {t:.2} s {open} open, but the target was {lo:.0}..{hi:.0} over the second before: {samples:?}");
        seen_full |= (2.0..=4.0).contains(&t) && open == 400.0;
        checked += 1;
    }
    assert!(checked >= 10, "{checked} samples in the stages: {samples:?}");
    assert!(seen_full, "stage 2 never showed its 400 connections: {samples:?}");
    // Each stage's phase ends with its target: open, or (going up) its
    // last handshakes still under way at the boundary the workers
    // reported from.
    for (i, &(_, target)) in stages.iter().enumerate() {
        let p = phase(s, &format!("stage{}", i + 1));
        let at_end = p["open_at_end"].as_f64().unwrap() + p["connecting_at_end"].as_f64().unwrap();
        assert_eq!(at_end, target, "stage{} ended with {at_end} connections, not {target}: {p}", i + 1);
    }
}

#[test]
fn each_stage_sends_at_its_own_rate_and_is_judged_on_its_own() {
    let ports = free_ports(1);
    let (_srv, _) = server(&["--ports", &ports.arg(), "--workers", "1"], None);
    let mut cmd = megaconn();
    // 200 connections; stage 2 at 20 requests/s each for 2 s, stage 3 at 5/s.
    cmd.args(["client", "--ports", &ports.arg(), "--stages", "1s:200,2s:200@20/s,2s:200@5/s,1s:0", "--workers", "2", "--heartbeat", "off"]);
    cmd.args([
        "--threshold",
        "stage2:requests_sent>=7000",
        "--threshold",
        "stage3:requests_sent>=7000",
        "--threshold",
        "stage2:request_latency.p99<5s",
        "--json",
    ]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 99, "stage3 cannot send 7,000 requests at 5/s: {err}\n{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let s = &doc["summary"];
    // Each connection sends once per period of its stage's rate, from the
    // stage's start: conns x rate x seconds, give or take one send per
    // connection at either edge of the stage.
    for (name, rate) in [("stage1", 0.0), ("stage2", 20.0), ("stage3", 5.0), ("stage4", 0.0)] {
        let p = phase(s, name);
        let sent = p["requests_sent"].as_f64().unwrap();
        let want = 200.0 * rate * 2.0;
        let tolerance = if rate > 0.0 { 200.0 } else { 0.0 };
        assert!((sent - want).abs() <= tolerance, "{name}: {sent} requests, want {want} +- {tolerance}: {p}");
    }
    let results = doc["thresholds"].as_array().unwrap();
    let result = |expr: &str| results.iter().find(|r| r["expr"] == expr).unwrap_or_else(|| panic!("{expr} not in {results:?}")).clone();
    assert_eq!(result("stage2:requests_sent>=7000")["pass"], true, "{results:?}");
    assert_eq!(result("stage2:request_latency.p99<5s")["pass"], true, "{results:?}");
    let crossed = result("stage3:requests_sent>=7000");
    assert_eq!(crossed["pass"], false, "{crossed}");
    // Measured on stage 3 alone (~2,000), not the run (~10,000).
    let measured = phase(s, "stage3")["requests_sent"].as_f64().unwrap();
    assert_eq!(crossed["value"].as_f64(), Some(measured), "{crossed}");
}

#[test]
fn malformed_stages_and_contradicting_flags_are_usage_errors() {
    let long = vec!["1s:1"; 101].join(",");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["client", "--stages", ""], "no stages"),
        (vec!["client", "--stages", "2s:10,xs:5"], "not a duration"),
        (vec!["client", "--stages", "1s:-5"], "negative"),
        (vec!["client", "--stages", "1s:99999999999999999999999"], "above the cap"),
        (vec!["client", "--stages", "1s:999999999999999999999999999999999999999999"], "not a whole number"),
        (vec!["client", "--stages", "1s:10@fast"], "rate"),
        (vec!["client", "--stages", &long], "more than the 100"),
        (vec!["client", "--stages", "1s:10", "--connections", "10"], "--stages cannot be used with --connections"),
        (vec!["client", "--stages", "1s:10", "--rate", "100/s"], "drop --rate"),
        (vec!["client", "--stages", "1s:10", "--hold", "5s"], "drop --hold"),
        (vec!["client", "--stages", "1s:10000000", "--source-ips", "127.0.0.2", "--ports", "23999", "--dry-run"], "cannot fit"),
        (vec!["client", "--threshold", "stage0:failed==0", "--connections", "1", "--dry-run"], "no phase 'stage0'"),
        (vec!["bench", "--stages", "1s:10", "--scenario", "push"], "--scenario connections"),
        (vec!["bench", "--stages", "1s:10", "--connections", "10"], "drop --connections"),
    ];
    for (args, says) in cases {
        let mut cmd = megaconn();
        cmd.args(&args);
        let (code, out, err) = run(cmd, Duration::from_secs(30));
        assert_eq!(code, 2, "{args:?}: exit {code}\n{err}\n{out}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // A malformed list is answered with the accepted syntax.
        let malformed = ["no stages", "not a duration", "negative", "above the cap", "not a whole number", "rate", "more than the 100"].contains(&says);
        if malformed {
            assert!(err.contains("DURATION:TARGET"), "{args:?}: the error shows the syntax: {err}");
        }
    }
}
