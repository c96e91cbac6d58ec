//! Thresholds that gate a release (issue 46), against a real server on
//! loopback: `--threshold` decides the exit code (99 when crossed, the
//! summary still written), per phase too; a metric the run measured
//! nothing for fails as "no data"; an unknown metric is a usage error
//! that lists the valid ones; `--threshold-abort` stops a run early;
//! `--junit` is read by junitparser (a JUnit reader nobody here wrote);
//! `merge` checks thresholds on the merged shards; the bench shows its
//! own verdict as built-in rules. Thresholds that must pass have seconds
//! of headroom over loopback's milliseconds; those that must fail are
//! impossible (more connections than were asked for).

use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// A scratch file of this test process.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("megaconn-thresholds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A small client run against `ports`: 20 connections, heartbeats every
/// 200 ms, a 1 s hold.
fn client(ports: &Ports, extra: &[&str]) -> Command {
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "20", "--rate", "1000", "--heartbeat", "200ms", "--hold", "1s", "--workers", "1"]);
    cmd.args(extra);
    cmd
}

/// (tests, failures, names of the failed cases) of a JUnit file, as
/// junitparser reads it.
fn junit(path: &std::path::Path) -> (u64, u64, Vec<String>) {
    let script = r#"
import json, sys
from junitparser import JUnitXml, Failure
xml = JUnitXml.fromfile(sys.argv[1])
tests = failures = 0
failed = []
for suite in xml:
    tests += suite.tests
    failures += suite.failures
    for case in suite:
        if any(isinstance(r, Failure) for r in case.result):
            failed.append(case.name)
print(json.dumps({"tests": tests, "failures": failures, "failed": failed}))
"#;
    let mut py = Command::new("python3");
    py.args(["-c", script]).arg(path);
    let (code, out, err) = run(py, Duration::from_secs(30));
    assert_eq!(code, 0, "junitparser (pip install junitparser==5.0.3; scripts/setup.sh does it) could not read {}: {err}", path.display());
    let v: Value = serde_json::from_str(&out).unwrap();
    let failed = v["failed"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    (v["tests"].as_u64().unwrap(), v["failures"].as_u64().unwrap(), failed)
}

/// The result of `expr` in a `thresholds` array.
fn result<'a>(thresholds: &'a Value, expr: &str) -> &'a Value {
    thresholds.as_array().unwrap().iter().find(|t| t["expr"] == expr).unwrap_or_else(|| panic!("{expr} not in {thresholds}"))
}

#[test]
fn thresholds_pass_cross_and_say_so_in_every_output() {
    let ports = free_ports(1);
    let (mut srv, _) = server(&["--ports", &ports.arg(), "--workers", "1"], None);

    // Every operator and unit, whole run and per phase, all holding.
    let passing = [
        "heartbeat_rtt.p99<5s",
        "hold:heartbeat_rtt.p99<=5000ms",
        "ramp:handshake.p99<5000000us",
        "handshake.count>=20",
        "established==20",
        "failed!=1",
        "established>0.01k",
        "established_ratio>=99.9%",
        "held_ratio>=1",
        "hold:heartbeats_answered>=1",
        "connect_rate>0/s",
        "duration<1000",
        "established<2M",
        "ramp_seconds<60s",
    ];
    let mut cmd = client(&ports, &["--json"]);
    for t in passing {
        cmd.args(["--threshold", t]);
    }
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("thresholds armed (exit 99 when one is crossed): heartbeat_rtt.p99<5s, hold:heartbeat_rtt.p99<=5000ms"),
        "the plan says what is armed: {err}"
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    let t = &v["thresholds"];
    for p in passing {
        assert_eq!(result(t, p)["pass"], true, "{p}: {t}");
    }
    let hold = result(t, "hold:heartbeat_rtt.p99<=5000ms");
    assert_eq!((hold["phase"].as_str(), hold["metric"].as_str(), hold["kind"].as_str()), (Some("hold"), Some("heartbeat_rtt.p99"), Some("threshold")));
    assert!(hold["value"].as_f64().unwrap() > 0.0, "{hold}");
    assert_eq!(result(t, "established==20")["value"], 20.0);
    // The built-in verdict is in the same table.
    assert_eq!(result(t, "held_ratio>=100%")["kind"], "built_in");
    assert_eq!(v["failure"], Value::Null);

    // Crossed: exit 99, and the summary, JSON and JUnit all written.
    let (json, xml) = (scratch("crossed.json"), scratch("crossed.xml"));
    let mut cmd = client(&ports, &["--threshold", "heartbeat_rtt.p99<5s", "--threshold", "established>1000000", "--threshold", "push_latency.p99<1s"]);
    cmd.args(["--threshold", "established!=20"]);
    cmd.arg("--summary-json").arg(&json).arg("--junit").arg(&xml);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 99, "{err}");
    assert!(err.contains("3 thresholds crossed: established>1000000 (measured 20)"), "{err}");
    assert!(out.contains("held at end of hold 20"), "the human summary is still printed: {out}");
    let table: Vec<&str> = out.lines().filter(|l| l.starts_with("threshold ") || l.starts_with("built-in ")).collect();
    assert!(table.iter().any(|l| l.contains("pass  heartbeat_rtt.p99<5s") && l.ends_with(" ms")), "{out}");
    assert!(table.iter().any(|l| l.contains("FAIL  established>1000000") && l.ends_with("  20")), "{out}");
    assert!(table.iter().any(|l| l.contains("FAIL  push_latency.p99<1s") && l.ends_with("no data")), "a metric with no samples fails: {out}");
    assert!(table.iter().any(|l| l.starts_with("built-in") && l.contains("pass  established_ratio>=100%")), "{out}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["summary"]["established"], 20, "--summary-json is written on a crossed run: {doc}");
    let push = result(&doc["thresholds"], "push_latency.p99<1s");
    assert_eq!((push["value"].clone(), push["pass"].clone()), (Value::Null, Value::Bool(false)), "{push}");
    assert_eq!(result(&doc["thresholds"], "established>1000000")["pass"], false);
    assert!(doc["failure"].as_str().unwrap().contains("established>1000000"));
    let (tests, failures, failed) = junit(&xml);
    assert_eq!((tests, failures), (5, 3), "four thresholds and the verdict; three crossed: {failed:?}");
    assert_eq!(failed, ["established>1000000", "push_latency.p99<1s", "established!=20"]);
    assert!(srv.terminate().success());
}

#[test]
fn a_typo_or_a_bad_expression_is_a_usage_error_with_the_list() {
    for (args, said) in [
        (vec!["client", "--connections", "10", "--threshold", "heartbeat_rtt.p98<5ms"], "unknown metric 'heartbeat_rtt.p98'"),
        (vec!["client", "--connections", "10", "--threshold-abort", "heartbeats_anwsered>1"], "unknown metric 'heartbeats_anwsered'"),
        (vec!["bench", "--connections", "10", "--threshold", "hold:tls_handshake.p50<5ms"], "measured for the whole run only"),
        (vec!["merge", "x.json", "--threshold", "lsot==0"], "unknown metric 'lsot'"),
    ] {
        let mut cmd = megaconn();
        cmd.args(&args);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(err.contains("heartbeat_rtt") && err.contains("established_ratio") && err.contains("tls_resumed"), "the valid names are listed: {err}");
    }
    for (expr, said) in [
        ("established=5", "not a comparison"),
        ("established<5ms", "not a unit of a count"),
        ("hodl:failed==0", "no phase 'hodl'"),
        ("failed", "no comparison"),
    ] {
        let mut cmd = megaconn();
        cmd.args(["client", "--connections", "10", "--threshold", expr]);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{expr}: {err}");
        assert!(err.contains(said), "{expr}: {err}");
    }
    // --dry-run says what would be armed, and opens nothing.
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--dry-run", "--json", "--threshold", "hold:failed==0", "--threshold-abort", "lost<5"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((plan["thresholds"][0].as_str(), plan["threshold_aborts"][0].as_str()), (Some("hold:failed==0"), Some("lost<5")), "{plan}");
    assert!(err.contains("thresholds armed (exit 99 when one is crossed): hold:failed==0; abort early on lost<5"), "{err}");
    let mut cmd = megaconn();
    cmd.args(["client", "--help"]);
    let (_, out, _) = run(cmd, Duration::from_secs(20));
    assert!(out.contains("99 a --threshold or --threshold-abort was crossed"), "--help documents the exit codes: {out}");
}

#[test]
fn threshold_abort_stops_the_run_early_and_still_reports() {
    let ports = free_ports(1);
    let (mut srv, _) = server(&["--ports", &ports.arg(), "--workers", "1"], None);
    let (json, xml, report) = (scratch("abort.json"), scratch("abort.xml"), scratch("abort-report"));
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "20", "--rate", "1000", "--heartbeat", "200ms", "--hold", "60s", "--workers", "1"]);
    cmd.args(["--threshold-abort", "established>1000000", "--threshold", "heartbeat_rtt.p99<5s"]);
    cmd.arg("--summary-json").arg(&json).arg("--junit").arg(&xml).arg("--report").arg(&report);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 99, "{err}");
    // The report is written too, its heartbeat chart with the threshold's level.
    let svg = std::fs::read_to_string(report.join("latency-heartbeat.svg")).unwrap();
    assert!(svg.contains("threshold heartbeat_rtt.p99") && svg.contains("5s (held)"), "{}", &svg[..svg.len().min(2000)]);
    let rj: Value = serde_json::from_str(&std::fs::read_to_string(report.join("report.json")).unwrap()).unwrap();
    assert_eq!(result(&rj["result"]["thresholds"], "heartbeat_rtt.p99<5s")["limit"], 5000.0);
    assert!(err.contains("--threshold-abort established>1000000 crossed (measured 20): stopping the run early"), "{err}");
    assert!(out.contains("stopped early --threshold-abort established>1000000"), "{out}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = &doc["summary"];
    assert_eq!(s["stopped_by"]["expr"], "established>1000000", "{s}");
    // Ended well before its 60 s hold, by its own account of the phases.
    let phases = s["phases"].as_array().unwrap();
    let hold: f64 = phases.iter().filter(|p| p["name"] == "hold").map(|p| p["seconds"].as_f64().unwrap()).sum();
    assert!(hold < 30.0, "the hold was cut short: {hold} s of 60 s: {phases:?}");
    assert!(phases.iter().any(|p| p["name"] == "close"), "{phases:?}");
    assert_eq!(result(&doc["thresholds"], "established>1000000")["kind"], "abort");
    assert_eq!(result(&doc["thresholds"], "heartbeat_rtt.p99<5s")["pass"], true);
    let (tests, failures, failed) = junit(&xml);
    assert_eq!((tests, failures, failed), (3, 1, vec!["established>1000000".to_string()]));
    assert!(srv.terminate().success());
}

#[test]
fn merge_checks_thresholds_on_the_merged_shards() {
    let ports = free_ports(1);
    let (mut srv, _) = server(&["--ports", &ports.arg(), "--workers", "1"], None);
    let shards: Vec<_> = (0..2)
        .map(|i| {
            let mut cmd = client(&ports, &["--shard", &format!("{i}/2")]);
            cmd.arg("--summary-json").arg(scratch(&format!("shard-{i}.json"))).arg("--hdr-log").arg(scratch(&format!("shard-{i}.hlog")));
            // Each shard alone must not pass the merged threshold.
            cmd.args(["--threshold", "established==10"]);
            std::thread::spawn(move || run(cmd, Duration::from_secs(60)))
        })
        .collect();
    for h in shards {
        let (code, _, err) = h.join().unwrap();
        assert_eq!(code, 0, "{err}");
    }
    let files: Vec<std::path::PathBuf> = (0..2).flat_map(|i| [scratch(&format!("shard-{i}.json")), scratch(&format!("shard-{i}.hlog"))]).collect();
    let mut cmd = megaconn();
    cmd.args(["merge", "--json", "--threshold", "established==20", "--threshold", "heartbeat_rtt.p99<5s", "--threshold", "heartbeats_answered>=20"]);
    cmd.args(&files);
    let (code, out, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 0, "20 established over the two shards: {err}");
    let m: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result(&m["thresholds"], "established==20")["value"], 20.0, "{m}");
    let p99 = result(&m["thresholds"], "heartbeat_rtt.p99<5s")["value"].as_f64().unwrap();
    assert_eq!(p99, m["latency_ms"]["heartbeat"]["p99_ms"].as_f64().unwrap(), "from the merged histograms");

    let xml = scratch("merge.xml");
    let mut cmd = megaconn();
    cmd.args(["merge", "--threshold", "established==10", "--threshold", "hold:heartbeat_rtt.p99<5s", "--threshold", "heartbeat_rtt.p99<5s"]);
    cmd.arg("--junit").arg(&xml).args(&files);
    let (code, out, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 99, "{out}{err}");
    assert!(out.contains("FAIL  established==10") && out.contains("20"), "{out}");
    assert!(out.lines().any(|l| l.contains("FAIL  hold:heartbeat_rtt.p99<5s") && l.ends_with("no data")), "phases are not merged: {out}");
    let (tests, failures, _) = junit(&xml);
    assert_eq!((tests, failures), (3, 2), "three thresholds (merge has no verdict of its own)");
    assert!(srv.terminate().success());
}

#[test]
fn the_bench_shows_its_verdict_as_builtin_rules() {
    let ports = free_ports(2);
    let mut cmd = megaconn();
    cmd.args(["bench", "--topology", "host", "--connections", "20", "--ports", &ports.arg(), "--hold", "1s", "--heartbeat", "200ms", "--rate", "1000"]);
    cmd.args(["--workers", "1", "--threshold", "hold:heartbeat_rtt.p99<5s", "--threshold", "established>1000000"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    assert_eq!(code, 99, "{err}");
    for rule in ["interrupted==0", "established_ratio>=100%", "heartbeats_unanswered==0", "held_ratio>=100%"] {
        assert!(out.lines().any(|l| l.starts_with("built-in") && l.contains(&format!("pass  {rule}"))), "{rule}: {out}");
    }
    assert!(out.lines().any(|l| l.starts_with("threshold") && l.contains("pass  hold:heartbeat_rtt.p99<5s")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("threshold") && l.contains("FAIL  established>1000000")), "{out}");
}
