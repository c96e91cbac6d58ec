//! Sharded load generation: four shards (as a Kubernetes Indexed Job
//! names them, JOB_COMPLETION_INDEX of JOB_COMPLETIONS), each in its own
//! network namespace ("host") against a server in another, starting their
//! ramps at one wall-clock instant, add up to one unsharded run; their
//! HdrHistogram logs merge exactly (checked with HdrHistogram's own Python
//! implementation). It needs network namespaces: where they cannot be
//! made it fails, saying why (or is skipped with MEGACONN_SKIP_NETNS=1).

use crate::common::lab::Lab;
use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_megaconn");

/// The server's ports, inside its own namespace (nothing else listens there).
const PORTS: &str = "8000-8001";

#[test]
fn four_shards_in_four_namespaces_start_together_and_merge_exactly() {
    if !needs_netns() {
        return;
    }
    raise_fd_limit();
    // Member 0 is the server's host, members 1-4 the shards' hosts.
    let lab = Lab::make("sh", 205, 5).unwrap_or_else(|why| panic!("the shards' namespaces: {why}"));
    let target = lab.addr(0).to_string();
    let mut cmd = lab.command(0, BIN);
    cmd.args(["server", "--listen", &target, "--ports", PORTS, "--workers", "2", "--json", "--stats-interval", "200ms", "--duration", "120s"]);
    cmd.args(["--admin", "off"]);
    let mut srv = Running::spawn(cmd);
    srv.wait_for(Duration::from_secs(20), "server ready", |v| v["event"] == "ready");
    let start = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() + 3.0;
    let dir = std::env::temp_dir().join(format!("megaconn-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let began = Instant::now();
    let shards: Vec<_> = (0..4)
        .map(|i| {
            let mut cmd = lab.command(i + 1, BIN);
            cmd.args(["client", "--target", &target, "--source-ips", &lab.addr(i + 1).to_string()]);
            cmd.args(["--ports", PORTS, "--connections", "1000", "--hold", "2s", "--heartbeat", "500ms", "--start-at", &format!("@{start:.3}")]);
            cmd.arg("--summary-json").arg(dir.join(format!("shard-{i}.json")));
            cmd.arg("--hdr-log").arg(dir.join(format!("shard-{i}.hlog")));
            cmd.env("JOB_COMPLETION_INDEX", i.to_string()).env("JOB_COMPLETIONS", "4");
            std::thread::spawn(move || run(cmd, Duration::from_secs(60)))
        })
        .collect();
    let all = srv.wait_for(Duration::from_secs(30), "the server holds every shard's connections", |v| v["event"] == "stats" && v["active"] == 1000);
    assert!(began.elapsed() >= Duration::from_millis(2500), "nobody ramped before --start-at: {all}");
    let mut owned = Vec::new();
    for (i, h) in shards.into_iter().enumerate() {
        let (code, _, err) = h.join().unwrap();
        assert_eq!(code, 0, "shard {i}: {err}");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(format!("shard-{i}.json"))).unwrap()).unwrap();
        assert_eq!(v["summary"]["established"], 250, "shard {i}: {}", v["summary"]);
        assert_eq!(v["summary"]["heartbeats_answered"], v["summary"]["heartbeats_sent"]);
        owned.push((v["plan"]["first"].as_u64().unwrap(), v["plan"]["count"].as_u64().unwrap()));
    }
    owned.sort();
    assert_eq!(owned, vec![(0, 250), (250, 250), (500, 250), (750, 250)], "the shards partition the plan");

    // Merged exactly: counts add, percentiles from the merged histograms
    // of the interval logs (standard HdrHistogram log format).
    let mut cmd = megaconn();
    cmd.args(["merge", "--json"]);
    for i in 0..4 {
        cmd.arg(dir.join(format!("shard-{i}.json"))).arg(dir.join(format!("shard-{i}.hlog")));
    }
    let (code, out, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let m: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(m["total"]["established"], 1000, "{m}");
    // The server's own count of what it accepted in the whole run: the
    // merge neither lost a shard nor counted one twice.
    let after = srv.wait_for(Duration::from_secs(20), "every shard's connections closed", |v| v["event"] == "stats" && v["active"] == 0);
    assert_eq!(m["total"]["established"], after["accepted"], "merged count = the server's accepted count: {after}");
    let answered = m["total"]["heartbeats_answered"].as_u64().unwrap();
    assert!(answered >= 4000, "{m}");
    assert_eq!(m["latency_ms"]["heartbeat"]["count"].as_u64().unwrap(), answered, "every answered heartbeat is in the logs once: {m}");
    assert_eq!(m["latency_ms"]["handshake"]["count"], 1000);
    let shard_p99: Vec<f64> = m["shards"].as_array().unwrap().iter().map(|s| s["summary"]["heartbeat_rtt_ms"]["p99_ms"].as_f64().unwrap()).collect();
    let p99 = m["latency_ms"]["heartbeat"]["p99_ms"].as_f64().unwrap();
    let (lo, hi) = shard_p99.iter().fold((f64::MAX, 0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    assert!(p99 >= lo && p99 <= hi, "the merged p99 {p99} lies within the shards' {shard_p99:?}");
    // The same union computed by HdrHistogram's own implementation.
    let mut py = Command::new("python3");
    py.arg(peer("hdr_union.py")).arg("heartbeat");
    for i in 0..4 {
        py.arg(dir.join(format!("shard-{i}.hlog")));
    }
    let (code, out, err) = run(py, Duration::from_secs(60));
    assert_eq!(code, 0, "hdr_union.py (pip install hdrhistogram; scripts/setup.sh does it): {err}");
    let union: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(union["count"].as_u64(), Some(answered), "hdrh counts the same samples: {union}");
    // The same sample as theirs, up to how each rounds the p99's rank (a
    // sparse tail puts neighbouring samples many buckets apart): between
    // their p98.9 and p99.1, give or take a bucket (1/1024 of the value).
    let (ours, lo, hi) = (p99 * 1000.0, union["p98_9_us"].as_f64().unwrap(), union["p99_1_us"].as_f64().unwrap());
    assert!(
        ours >= lo * (1.0 - 1.0 / 1024.0) - 1.0 && ours <= hi * (1.0 + 1.0 / 1024.0) + 1.0,
        "merged p99 {ours} us is the union's p99 (HdrHistogram's p98.9..p99.1: {lo}..{hi} us; p99 {})",
        union["p99_us"]
    );
    let text = std::fs::read_to_string(dir.join("shard-0.hlog")).unwrap();
    assert!(text.contains("#[StartTime: ") && text.contains("Tag=heartbeat,"), "HdrHistogram log format: {}", &text[..text.len().min(300)]);

    let mut cmd = megaconn();
    cmd.arg("merge").arg(dir.join("shard-0.json").with_extension("txt"));
    std::fs::write(dir.join("shard-0.txt"), "not a log\n").unwrap();
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("shard-0.txt is not an HdrHistogram interval log"), "{err}");
    assert!(srv.terminate().success());
    drop(lab);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_start_times_and_job_env_are_refused() {
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--start-at", "2020-01-01T00:00:00Z"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--start-at is not at least 0.5 s in the future"), "{err}");
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--start-at", "tomorrow-ish"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RFC 3339"), "{err}");
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10"]).env("JOB_COMPLETION_INDEX", "1").env_remove("JOB_COMPLETIONS");
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("JOB_COMPLETIONS is not"), "{err}");
}
