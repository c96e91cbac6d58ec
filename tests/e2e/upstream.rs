//! `server --upstream`: what Python `websockets` clients send reaches a
//! webhook backend (Python's http.server) exactly once, in order, through
//! a failing and a stalled backend; a full queue closes the client with
//! 1013 and loses nothing it accepted; a backend that refuses large
//! bodies with 413 gets every message in smaller batches, each POST
//! signed; the backend answers through the push API.
use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The webhook peer up (it prints READY), then the server pointed at it;
/// the peer drives the clients and says OK.
fn run_peer(mode: &str, extra: &[&str]) -> (Running, Peer, String) {
    run_peer_with(mode, "1000", extra)
}

fn run_peer_with(mode: &str, arg: &str, extra: &[&str]) -> (Running, Peer, String) {
    run_peer_args(mode, &[arg], extra)
}

/// `peer_args`: the peer's N and, to check signatures, the secret file.
fn run_peer_args(mode: &str, peer_args: &[&str], extra: &[&str]) -> (Running, Peer, String) {
    let (port, admin_port, hook) = (free_port(), free_port(), free_port());
    let admin = format!("127.0.0.1:{admin_port}");
    let mut py = Command::new("python3");
    py.arg(peer("upstream_ws.py")).args([&port.to_string(), &admin, &hook.to_string(), mode]).args(peer_args);
    let mut p = Peer::spawn(&format!("upstream_ws.py {mode}"), py);
    assert_eq!(p.line(Duration::from_secs(30), "the webhook listening"), "READY");
    let (url, port) = (format!("http://127.0.0.1:{hook}/hook"), port.to_string());
    let mut args = vec!["--protocol", "ws", "--ports", &port, "--admin", &admin, "--workers", "2", "--upstream", &url];
    args.extend_from_slice(extra);
    let (s, _, _) = server_ready(&args, None);
    (s, p, admin)
}

fn stats(admin: &str) -> Value {
    let (status, body) = http(admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn the_webhook_gets_exactly_what_a_thousand_clients_sent() {
    let (mut s, mut p, admin) = run_peer("all", &[]);
    assert_eq!(p.finish_ok(Duration::from_secs(120)), ["OK"]);
    let mut v = Value::Null;
    wait_until("the workers' counts reported", Duration::from_secs(10), || {
        v = stats(&admin);
        v["upstream_sent"] == 6000
    });
    assert_eq!(v["upstream"]["delivered"], 6000, "{v}");
    assert_eq!(v["upstream"]["refused"], serde_json::json!({}), "{v}");
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert_eq!(sample(&metrics, "megaconn_upstream_delivered_total"), Some(6000.0), "{metrics}");
    assert!(s.terminate().success());
}

#[test]
fn a_failing_then_stalled_backend_loses_nothing() {
    let (mut s, mut p, admin) = run_peer("stall", &[]);
    assert_eq!(p.finish_ok(Duration::from_secs(120)), ["OK"]);
    let v = stats(&admin);
    assert_eq!(v["upstream"]["retries"]["http_5xx"], 2, "two 503s, each sent again: {v}");
    assert_eq!(v["upstream"]["delivered"], 1000, "{v}");
    assert!(s.terminate().success());
}

#[test]
fn a_full_queue_closes_the_client_with_1013_and_keeps_what_it_took() {
    let (mut s, mut p, admin) = run_peer("full", &["--upstream-queue", "20"]);
    let delivered = p.line(Duration::from_secs(60), "what the webhook got");
    assert_eq!(p.finish_ok(Duration::from_secs(60)), ["OK"]);
    let mut v = Value::Null;
    wait_until("the close counted", Duration::from_secs(10), || {
        v = stats(&admin);
        v["close_reasons"]["upstream_full"] == 1
    });
    // Every message a worker took reached the backend: the queue's 20.
    assert_eq!(delivered, "DELIVERED 20");
    assert_eq!((v["upstream_sent"].as_u64(), v["upstream"]["delivered"].as_u64()), (Some(20), Some(20)), "{v}");
    assert!(s.terminate().success());
}

/// The backend answers 413 to any body over 100,000 bytes and holds its
/// first batch, so ~1.1 MB of messages wait: the sender halves the batch
/// until it fits instead of dropping it, and learns the limit. Every POST
/// carries an HMAC the peer checks as docs/upstream.md says.
#[test]
fn a_backend_that_refuses_large_bodies_gets_every_message_in_smaller_signed_batches() {
    let dir = std::env::temp_dir().join(format!("megaconn-upstream-413-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("upstream.secret");
    std::fs::write(&secret, "upstream webhook secret, well over 32 bytes\n").unwrap();
    let secret = secret.display().to_string();
    let (mut s, mut p, admin) = run_peer_args("limit", &["100000", &secret], &["--upstream-secret-file", &secret]);
    let refused = p.line(Duration::from_secs(90), "how many 413s the webhook answered");
    let largest = p.line(Duration::from_secs(10), "the largest body it took");
    assert_eq!(p.finish_ok(Duration::from_secs(30)), ["OK"]);
    let refused: u64 = refused.strip_prefix("REFUSED ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{refused}"));
    let largest: u64 = largest.strip_prefix("LARGEST ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{largest}"));
    assert!(refused > 0 && largest <= 100_000, "{refused} 413s, largest body {largest}");
    let v = stats(&admin);
    assert_eq!(v["upstream"]["delivered"], 1000, "{v}");
    assert_eq!(v["upstream"]["refused"], serde_json::json!({}), "nothing dropped: {v}");
    assert_eq!(v["upstream"]["retries"]["http_413"], refused, "each 413 split its batch: {v}");
    assert_eq!(v["upstream"]["queued_bytes"], 0, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

#[test]
fn presence_lists_users_and_the_app_hears_joins_and_leaves() {
    let dir = std::env::temp_dir().join(format!("megaconn-presence-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "presence test secret, at least 32 bytes long\n").unwrap();
    let secret = secret.display().to_string();
    let (mut s, mut p, admin) = run_peer_with("presence", &secret, &["--auth", "jwt", "--jwt-secret-file", &secret, "--presence-events"]);
    assert_eq!(p.finish_ok(Duration::from_secs(60)), ["OK"]);
    let (status, body) = http(&admin, "GET", "/presence?topic=room.1", b"", None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"connections\":0"), "everyone left: {body}");
    let (status, body) = http(&admin, "GET", "/presence", b"", None);
    assert_eq!(status, 400, "{body}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

#[test]
fn upstream_urls_are_checked() {
    for (url, says) in [("https://x/hook", "https is not supported"), ("ftp://x", "or nats://HOST:PORT/SUBJECT.PREFIX"), ("http://x:99999/", "not a port")] {
        let mut cmd = megaconn();
        cmd.args(["server", "--admin", "off", "--duration", "2s", "--upstream", url]);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{url}: {err}");
        assert!(err.contains(says), "{url}: {err}");
    }
}
