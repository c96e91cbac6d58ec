//! permessage-deflate (RFC 7692) against peers nobody here wrote: Python
//! `websockets` (compression on by default) over ws and wss, Node `ws`
//! (`perMessageDeflate`) as a client and as the server megaconn's client
//! loads, and frames written by hand with Python's zlib (a zip bomb, RSV1
//! misuse, fragments around a ping, the bytes every subscriber gets).
use crate::common::pki::Pki;
use crate::common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// Python websockets reads the parameters the server answered, gets a
/// compressed push and its compressed messages (whole and in fragments)
/// echoed; over plain ws and over TLS.
#[test]
fn python_websockets_negotiates_and_exchanges_compressed_messages() {
    for tls in [false, true] {
        let pki = tls.then(|| Pki::new("ec"));
        let port = free_port().to_string();
        let mut args = vec!["--ports", &port, "--workers", "1", "--protocol", "ws"];
        if let Some(p) = &pki {
            args.extend(["--tls-cert", &p.cert, "--tls-key", &p.key]);
        }
        let (mut s, _, ready) = server_ready(&args, None);
        let admin = ready["admin"].as_str().unwrap().to_string();
        let mut py = Command::new("python3");
        py.arg(peer("ws_deflate.py")).arg(&port);
        if let Some(p) = &pki {
            py.arg(&p.ca);
        }
        let mut client = Peer::spawn("ws_deflate.py", py);
        assert_eq!(
            client.line(T, "the answer"),
            "negotiated permessage-deflate; server_no_context_takeover; client_no_context_takeover",
            "websockets offers permessage-deflate; client_max_window_bits"
        );
        assert_eq!(client.line(T, "parameters"), "remote_no_context_takeover True local_no_context_takeover True");
        assert_eq!(client.line(T, "ready"), "ready");
        let data = format!("{{\"price\":1.0843,\"pad\":\"{}\"}}", "EURUSD ".repeat(140));
        let (status, r) = http(&admin, "POST", "/publish?topic=room", data.as_bytes(), None);
        assert_eq!(status, 200, "{r}");
        assert_eq!(client.line(T, "the push"), format!("push {data}"));
        assert_eq!(client.finish_ok(T), ["OK"]);
        let v = s.wait_for(T, "the counters", |v| v["event"] == "stats" && v["ws_inflated_messages"] == 4 && v["ws_deflate_calls"] == 5);
        assert_eq!(v["ws_deflate_negotiated"], 1, "{v}");
        assert_eq!(v["ws_compressed_out"], 5, "the push and four echoes: {v}");
        let (before, after) = (v["ws_deflate_bytes_before"].as_u64().unwrap(), v["ws_deflate_bytes_after"].as_u64().unwrap());
        assert!(after * 2 < before, "JSON compresses to under half: {before} -> {after}");
        assert!(v["ws_inflate_bytes_after"].as_u64().unwrap() > v["ws_inflate_bytes_before"].as_u64().unwrap(), "{v}");
        assert!(s.terminate().success());
    }
}

/// Python `websockets` offering `server_max_window_bits=9` gets that
/// window (said back in the answer) instead of no compression, and
/// inflates every push and echo with a 2^9 window: the echoed body
/// repeats a 700-byte random block, which a larger window would have
/// referred back to (websockets fails such a message).
#[test]
fn python_websockets_asking_a_smaller_server_window_gets_it() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--protocol", "ws"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut py = Command::new("python3");
    py.arg(peer("ws_deflate.py")).args([&port, "window", "9"]);
    let mut client = Peer::spawn("ws_deflate.py window 9", py);
    assert_eq!(client.line(T, "the answer"), "negotiated permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9");
    assert_eq!(client.line(T, "parameters"), "remote_no_context_takeover True local_no_context_takeover True");
    assert_eq!(client.line(T, "ready"), "ready");
    let block: String = (0..700).map(|i| char::from(b'a' + ((i * 7919 + i / 3) % 26) as u8)).collect();
    let data = format!("{block}|{block}");
    let (status, r) = http(&admin, "POST", "/publish?topic=room", data.as_bytes(), None);
    assert_eq!(status, 200, "{r}");
    assert_eq!(client.line(T, "the push"), format!("push {data}"));
    assert_eq!(client.finish_ok(T), ["OK"]);
    let v = s.wait_for(T, "the counters", |v| v["event"] == "stats" && v["ws_inflated_messages"] == 4 && v["ws_deflate_calls"] == 5);
    assert_eq!(
        (v["ws_deflate_negotiated"].as_u64(), v["ws_deflate_small_window"].as_u64(), v["ws_deflate_takeover"].as_u64()),
        (Some(1), Some(1), Some(0)),
        "{v}"
    );
    assert!(s.terminate().success());
}

fn raw_case(port: &str, case: &str) -> Vec<String> {
    let mut py = Command::new("python3");
    py.args([&peer("ws_deflate_raw.py"), port, case]);
    Peer::spawn(&format!("ws_deflate_raw.py {case}"), py).finish_ok(T)
}

/// A 16 KB message that would inflate to 16 MB is closed with 1009
/// (counted as too_big), RSV1 on a ping or a continuation with 1002, and
/// a compressed message in fragments with a ping between them is
/// answered: the pong first, then the echo.
#[test]
fn bombs_and_rsv1_misuse_are_refused_and_fragments_around_a_ping_work() {
    let port = free_port().to_string();
    let (mut s, _) = server(&["--ports", &port, "--workers", "1", "--protocol", "ws"], None);
    assert_eq!(raw_case(&port, "bomb"), ["close 1009", "OK"]);
    assert_eq!(raw_case(&port, "rsv1-ping"), ["close 1002", "OK"]);
    assert_eq!(raw_case(&port, "rsv1-cont"), ["close 1002", "OK"]);
    let frags = raw_case(&port, "fragments");
    assert!(frags[0].starts_with("echo 1100 in ") && frags[1] == "OK", "{frags:?}");
    let v = s.wait_for(T, "refusals counted", |v| {
        v["event"] == "stats" && v["ws_inflate_refused"]["too_big"] == 1 && v["close_reasons"]["ws_rsv1_continuation"] == 1 && v["ws_inflated_messages"] == 1
    });
    assert_eq!(v["close_reasons"]["ws_inflate_too_big"], 1, "{v}");
    assert_eq!(v["close_reasons"]["ws_rsv1_control"], 1, "{v}");
    assert_eq!(v["ws_inflated_messages"], 1, "{v}");
    assert!(s.terminate().success());
}

/// Subscribers that negotiated deflate get a push compressed once per
/// worker: the deflate calls grow by the number of workers holding them,
/// and every subscriber reads the same bytes.
#[test]
fn a_push_is_compressed_once_per_worker_and_every_subscriber_gets_the_same_bytes() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "2", "--protocol", "ws"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut py = Command::new("python3");
    py.args([&peer("ws_deflate_raw.py"), &port, "identical", "40"]);
    let mut subs = Peer::spawn("ws_deflate_raw.py identical", py);
    assert_eq!(subs.line(T, "40 subscribers"), "ready");
    let (status, list) = http(&admin, "GET", "/connections?topic=room", b"", None);
    assert_eq!(status, 200, "{list}");
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let conns = list["connections"].as_array().unwrap_or_else(|| panic!("{list}"));
    assert_eq!(conns.len(), 40, "{list}");
    let mut workers: Vec<u64> = conns.iter().map(|c| c["worker"].as_u64().unwrap()).collect();
    workers.sort();
    workers.dedup();
    let before = s.wait_for(T, "40 negotiated", |v| v["event"] == "stats" && v["ws_deflate_negotiated"] == 40)["ws_deflate_calls"].as_u64().unwrap();
    // A 1 KB JSON push.
    let data = format!("{{\"symbol\":\"EURUSD\",\"bids\":[{}]}}", (0..60).map(|i| format!("[1.08{i:02},{}]", 1000 + i)).collect::<Vec<_>>().join(","));
    assert!((800..1200).contains(&data.len()), "{}", data.len());
    let (status, r) = http(&admin, "POST", "/publish?topic=room", data.as_bytes(), None);
    assert_eq!(status, 200, "{r}");
    let out = subs.finish_ok(T);
    assert!(out[0].starts_with("identical "), "{out:?}");
    let v = s.wait_for(T, "40 compressed pushes", |v| v["event"] == "stats" && v["ws_compressed_out"] == 40);
    assert_eq!(v["ws_deflate_calls"].as_u64().unwrap() - before, workers.len() as u64, "one deflate per worker ({workers:?}): {v}");
    eprintln!("{} ({} workers)", out[0], workers.len());
    assert!(s.terminate().success());
}

/// A resuming subscriber that negotiated deflate gets the history it
/// missed compressed: each replayed message compressed once.
#[test]
fn history_replays_go_compressed() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--protocol", "ws", "--history", "10"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let messages: Vec<String> = (1..=3).map(|i| format!("message {i}: {}", "the same words again and again ".repeat(8))).collect();
    for m in &messages {
        let (status, r) = http(&admin, "POST", "/publish?topic=room", m.as_bytes(), None);
        assert_eq!(status, 200, "{r}");
    }
    let (status, h) = http(&admin, "GET", "/history?topic=room", b"", None);
    assert_eq!(status, 200, "{h}");
    let epoch = serde_json::from_str::<serde_json::Value>(&h).unwrap()["epoch"].as_u64().unwrap().to_string();
    let mut py = Command::new("python3");
    py.args([&peer("ws_deflate.py"), &port, "resume", &epoch]);
    let out = Peer::spawn("ws_deflate.py resume", py).finish_ok(T);
    let want: Vec<String> = messages.iter().map(|m| format!("replayed {m}")).chain(["recovered True".into(), "OK".into()]).collect();
    assert_eq!(out, want);
    let v = s.wait_for(T, "the replays counted", |v| v["event"] == "stats" && v["recovered_messages"] == 3);
    assert_eq!(v["ws_compressed_out"], 3, "{v}");
    assert_eq!(v["ws_deflate_calls"], 3, "{v}");
    assert!(s.terminate().success());
}

/// Node ws as a client: its default offer accepted, a compressed push
/// read, a compressed message echoed.
#[test]
fn node_ws_client_negotiates_and_exchanges_compressed_messages() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--protocol", "ws"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut node = Command::new("node");
    node.args([&peer("ws_deflate_node.js"), "client", &port]);
    let mut client = Peer::spawn("ws_deflate_node.js client", node);
    assert_eq!(client.line(T, "the answer"), "negotiated permessage-deflate; server_no_context_takeover; client_no_context_takeover");
    assert_eq!(client.line(T, "open"), "ready");
    let data = "tick ".repeat(100);
    let (status, r) = http(&admin, "POST", "/publish?topic=room", data.as_bytes(), None);
    assert_eq!(status, 200, "{r}");
    assert_eq!(client.line(T, "the push"), format!("push {data}"));
    assert_eq!(client.finish_ok(T), ["OK"]);
    let v = s.wait_for(T, "the echo", |v| v["event"] == "stats" && v["ws_inflated_messages"] == 1 && v["ws_compressed_out"] == 2);
    assert_eq!(v["ws_deflate_negotiated"], 1, "{v}");
    assert!(s.terminate().success());
}

/// megaconn's client with --ws-deflate against a Node ws server that
/// requires client_no_context_takeover and compresses everything: every
/// message goes compressed, every echo comes back compressed and is
/// inflated and timed; wire and message bytes are counted.
#[test]
fn the_client_with_ws_deflate_loads_a_node_ws_server_that_requires_no_client_context() {
    let port = free_port();
    let mut node = Command::new("node");
    node.args([&peer("ws_deflate_node.js"), "server", &port.to_string(), "30"]);
    let mut server = Peer::spawn("ws_deflate_node.js server", node);
    assert_eq!(server.line(T, "listening"), "ready");
    let mut cmd = megaconn();
    let url = format!("ws://127.0.0.1:{port}/echo");
    let message =
        r#"{"op":"quote","conn":{conn},"n":{seq},"ts":{ts},"pad":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#;
    cmd.args([
        "client",
        "--url",
        &url,
        "--connections",
        "20",
        "--rate",
        "200",
        "--ws-deflate",
        "--message",
        message,
        "--request-rate",
        "2/s",
        "--hold",
        "3s",
        "--json",
    ]);
    let (code, out, err) = run(cmd, T);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["summary"];
    assert_eq!(s["held"], 20, "{s}");
    let sent = s["ws_deflate_sent"].as_u64().unwrap();
    assert!(sent >= 20 * 4, "{s}");
    assert_eq!(s["requests"]["replies"], s["requests"]["sent"], "{s}");
    assert!(s["ws_inflated"].as_u64().unwrap() >= sent - 20, "every echo came compressed: {s}");
    let (wire, msg) = (s["ws_deflate_sent_wire_bytes"].as_u64().unwrap(), s["ws_deflate_sent_message_bytes"].as_u64().unwrap());
    assert!(wire < msg, "{s}");
    assert!(s["ws_inflated_message_bytes"].as_u64().unwrap() > s["ws_inflated_wire_bytes"].as_u64().unwrap(), "{s}");
    let rest = server.finish_ok(T);
    let n: u64 = rest.last().and_then(|l| l.strip_prefix("compressed-in ")).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{rest:?}"));
    assert!(n >= sent - 20, "the server saw RSV1 on our messages: {n} of {sent}");
}

/// A client offering deflate to a server started with --ws-deflate off
/// is answered without it, and the client that requires it says so.
#[test]
fn with_ws_deflate_off_nothing_is_negotiated() {
    let port = free_port().to_string();
    let (mut s, _) = server(&["--ports", &port, "--workers", "1", "--protocol", "ws", "--ws-deflate", "off"], None);
    let mut cmd = megaconn();
    let url = format!("ws://127.0.0.1:{port}/");
    cmd.args(["client", "--url", &url, "--connections", "1", "--ws-deflate", "--hold", "1s", "--json"]);
    let (_, out, err) = run(cmd, T);
    assert!(out.contains("ws_deflate_declined") || err.contains("ws_deflate_declined"), "{out}{err}");
    assert!(s.terminate().success());
}

/// The push bench with --ws-deflate reports its broadcasts on their own:
/// one deflate call per push per worker holding connections, the JSON
/// pushes smaller on the wire than their messages, and the server's CPU
/// over the broadcasts alone; without --ws-deflate nothing is compressed
/// and the phase's CPU is still there.
#[test]
fn the_push_bench_reports_deflate_calls_per_broadcast_the_ratio_and_the_broadcast_cpu() {
    for deflate in [true, false] {
        let mut cmd = megaconn();
        cmd.args(["bench", "--protocol", "ws", "--scenario", "push", "--connections", "300", "--server-workers", "2"]);
        let ports = free_ports(2);
        cmd.args(["--ports", &ports.arg(), "--broadcasts", "3", "--broadcast-interval", "300ms", "--push-bytes", "1000", "--hold", "6s", "--json"]);
        if deflate {
            cmd.arg("--ws-deflate");
        }
        let (code, out, err) = run(cmd, Duration::from_secs(90));
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let p = &v["push"];
        assert_eq!(p["deliveries"], 900, "{p}");
        let b = &p["broadcast_phase"];
        assert_eq!(b["all_delivered"], true, "{b}");
        assert_eq!(b["pushes"], 3, "{b}");
        let holding = b["workers_holding"].as_u64().unwrap();
        assert!((1..=2).contains(&holding), "{b}");
        let cpu = b["cpu_seconds"].as_f64().unwrap();
        assert!(cpu >= 0.0 && cpu <= p["server_cpu_seconds"].as_f64().unwrap() + 0.01, "the phase is part of the run: {p}");
        let client_cpu = b["client_cpu_seconds"].as_f64().unwrap();
        assert!(client_cpu >= 0.0 && client_cpu <= p["client_cpu_seconds"].as_f64().unwrap() + 0.01, "the phase is part of the client's run: {p}");
        let d = &b["deflate"];
        if !deflate {
            assert!(d.is_null(), "{b}");
            continue;
        }
        assert_eq!(d["calls_per_push"].as_f64().unwrap(), holding as f64, "one deflate per worker per broadcast: {b}");
        assert_eq!(d["calls"].as_u64().unwrap(), 3 * holding, "{b}");
        assert_eq!(d["compressed_out"], 900, "every push went compressed: {b}");
        let ratio = d["ratio"].as_f64().unwrap();
        assert!(ratio > 0.0 && ratio < 1.0, "JSON shrinks: {b}");
        assert!(
            d["message_bytes"].as_u64().unwrap() / d["calls"].as_u64().unwrap() > 1000,
            "each compressed message carries the 1 KB push in its envelope: {b}"
        );
    }
}

/// `--ws-deflate takeover` against Python websockets and Node ws, which
/// both keep context by default: the answer keeps it both ways in a
/// 2^12 window, pushes of the same content shrink on the wire after the
/// first (each compressed for the connection alone), the client's
/// context-compressed messages inflate and echo correctly, and the
/// connection's context is freed at its close.
#[test]
fn takeover_keeps_context_both_ways_with_python_websockets_and_node_ws() {
    for kind in ["python", "node"] {
        let port = free_port().to_string();
        let args = ["--ports", &port, "--workers", "1", "--protocol", "ws", "--ws-deflate", "takeover", "--ws-deflate-window-bits", "12"];
        let (mut s, _, ready) = server_ready(&args, None);
        let admin = ready["admin"].as_str().unwrap().to_string();
        let mut client = match kind {
            "python" => {
                let mut py = Command::new("python3");
                py.args([&peer("ws_deflate_takeover.py"), &port, "4"]);
                Peer::spawn("ws_deflate_takeover.py", py)
            }
            _ => {
                let mut node = Command::new("node");
                node.args([&peer("ws_deflate_node.js"), "takeover", &port, "4"]);
                Peer::spawn("ws_deflate_node.js takeover", node)
            }
        };
        assert_eq!(client.line(T, "the answer"), "negotiated permessage-deflate; server_max_window_bits=12; client_max_window_bits=12", "{kind}");
        if kind == "python" {
            assert_eq!(
                client.line(T, "parameters"),
                "remote_no_context_takeover False local_no_context_takeover False remote_max_window_bits 12 local_max_window_bits 12"
            );
        }
        assert_eq!(client.line(T, "ready"), "ready");
        let v = s.wait_for(T, "the context", |v| v["event"] == "stats" && v["ws_deflate_contexts"] == 1);
        assert_eq!(v["ws_deflate_takeover"], 1, "{v}");
        let data = format!("{{\"symbol\":\"EURUSD\",\"bids\":[{}]}}", (0..60).map(|i| format!("[1.08{i:02},{}]", 1000 + i)).collect::<Vec<_>>().join(","));
        let mut sizes = Vec::new();
        let mut after = 0;
        // Four pushes: the peer starts its echoes after the fourth, so the
        // deflate counters move with the first three alone.
        for k in 1..=4u64 {
            let (status, r) = http(&admin, "POST", "/publish?topic=room", data.as_bytes(), None);
            assert_eq!(status, 200, "{r}");
            assert_eq!(client.line(T, "a push"), format!("push {data}"), "{kind} push {k}");
            if k < 4 {
                let v = s.wait_for(T, "the push compressed", |v| v["event"] == "stats" && v["ws_deflate_calls"] == k);
                let now = v["ws_deflate_bytes_after"].as_u64().unwrap();
                sizes.push(now - after);
                after = now;
            }
        }
        assert!(sizes[1] * 3 < sizes[0] && sizes[2] * 3 < sizes[0], "{kind}: the same push again costs a few back-references: {sizes:?}");
        assert_eq!(client.finish_ok(T), ["OK"], "{kind}: the echoes of its context-compressed messages");
        let v = s.wait_for(T, "the close", |v| v["event"] == "stats" && v["ws_inflated_messages"] == 3 && v["active"] == 0);
        assert_eq!(v["ws_deflate_contexts"], 0, "freed at the close: {v}");
        assert!(v["ws_inflate_refused"].as_object().is_none_or(|m| m.is_empty()), "{v}");
        eprintln!("{kind}: push bytes on the wire {sizes:?} for {} bytes of data", data.len());
        assert!(s.terminate().success());
    }
}
