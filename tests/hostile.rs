//! Hostile and excessive peers cost only themselves: the connection cap,
//! garbage next to good traffic, and graceful drain on SIGTERM.
mod common;
use common::*;
use std::time::Duration;

#[test]
fn max_connections_holds_exactly_the_cap_and_counts_the_rest() {
    let (mut s, _) = server(&["--ports", "21900-21903", "--workers", "2", "--max-connections", "500"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21900-21903", "--connections", "1000", "--rate", "2000", "--heartbeat", "200ms", "--hold", "2s", "--allow-loss", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    // Refused connections are reset: some before the client saw its
    // handshake complete (failed), the rest right after (lost).
    assert_eq!(code, 1, "{err}");
    let c = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    assert_eq!(c["held"], 500, "{c}");
    assert_eq!(c["failed_total"].as_u64().unwrap() + c["lost_total"].as_u64().unwrap(), 500, "{c}");
    let v = s.wait_for(Duration::from_secs(10), "refusals counted", |v| v["event"] == "stats" && v["refused_over_cap"] == 500);
    assert_eq!(v["accepted"], 500, "{v}");
    // Once the client is gone the places are free again.
    let v = s.wait_for(Duration::from_secs(10), "closed", |v| v["event"] == "stats" && v["active"] == 0);
    assert_eq!(v["refused_over_cap"], 500, "{v}");
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21900-21903", "--connections", "500", "--hold", "1s", "--json"]);
    let (code, _, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "all 500 places free again: {err}");
    assert!(s.terminate().success());
}
