//! Every counter declared once reaches every output: the server's `--json`
//! stats and `/metrics`, the client's `--json` summary. A counter added to
//! a `counters!` block and missing from an output fails here.

use crate::common::*;
use megaconn::client::snapshot::ClientCounters;
use megaconn::server::snapshot::ServerCounters;
use megaconn::stats::counters::Kind;
use serde_json::Value;
use std::time::Duration;

#[test]
fn every_declared_counter_reaches_json_and_metrics() {
    let port = free_port().to_string();
    let (mut srv, _, ready) = server_ready(&["--ports", &port, "--workers", "1"], None);
    let admin = ready["admin"].as_str().expect("admin address").to_string();
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port, "--connections", "20", "--heartbeat", "200ms", "--hold", "1s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "client failed: {err}");
    let doc: Value = serde_json::from_str(&out).expect("client --json is one document");
    let summary = &doc["summary"];
    for d in ClientCounters::DECLARED {
        assert!(summary.get(d.field).is_some(), "client counter {} missing from --json: {summary}", d.field);
    }
    assert_eq!(summary["established_total"], 20, "{summary}");
    assert!(summary["heartbeats_answered"].as_u64().unwrap() > 0, "{summary}");

    let stats = srv.wait_for(Duration::from_secs(10), "stats after the client closed", |v| v["event"] == "stats" && v["closed"] == 20);
    for d in ServerCounters::DECLARED {
        assert!(stats.get(d.field).is_some(), "server counter {} missing from --json stats: {stats}", d.field);
    }
    let (status, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert_eq!(status, 200, "{metrics}");
    for d in ServerCounters::DECLARED {
        let family = d.kind.family_name("megaconn", d.metric);
        // A by-kind family has series only once a kind was counted.
        let expected = !matches!(d.kind, Kind::By(_)) || stats[d.field].as_object().is_some_and(|m| !m.is_empty());
        assert_eq!(metrics.contains(&format!("# HELP {family} ")), expected, "{} ({family}) in /metrics: {metrics}", d.field);
    }
    assert_eq!(sample(&metrics, "megaconn_accepted_total"), Some(20.0), "{metrics}");
    assert_eq!(sample(&metrics, "megaconn_connections_closed_total"), Some(20.0), "{metrics}");
    assert_eq!(stats["close_reasons"].as_object().unwrap().values().filter_map(Value::as_u64).sum::<u64>(), 20, "{stats}");
    srv.terminate();
}
