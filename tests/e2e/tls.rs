//! `--tls-cert`/`--tls-key` on the server, against TLS stacks nobody here
//! wrote: curl, `openssl s_client` (both versions, ALPN, resumption on
//! another worker), Python `ssl` and `websockets` over wss; and against
//! peers that misbehave: cleartext to a TLS port, handshakes that never
//! finish, noise after a handshake. Certificates are reloaded on SIGHUP and
//! when their files change, without dropping a connection.
use crate::common::pki::Pki;
use crate::common::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

fn tls_server(pki: &Pki, protocol: &str, extra: &[&str]) -> (Running, Value, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--ports", &p, "--protocol", protocol, "--tls-cert", &pki.cert, "--tls-key", &pki.key];
    args.extend_from_slice(extra);
    let (s, _, ready) = server_ready(&args, None);
    (s, ready, port)
}

use serde_json::Value;

/// `openssl s_client` sending one HTTP request; its full output.
fn s_client(port: u16, ca: &str, extra: &[&str]) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args([
        "s_client",
        "-connect",
        &format!("127.0.0.1:{port}"),
        "-servername",
        "localhost",
        "-CAfile",
        ca,
        "-verify_return_error",
        "-alpn",
        "http/1.1",
        "-ign_eof",
    ]);
    cmd.args(extra).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("openssl is installed");
    child.stdin.take().unwrap().write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx.recv_timeout(Duration::from_secs(30)).expect("s_client finished within 30 s").unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn admin(ready: &Value) -> String {
    ready["admin"].as_str().unwrap().to_string()
}

fn stats(ready: &Value) -> Value {
    let (status, body) = http(&admin(ready), "GET", "/stats", b"", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn https_answers_curl_and_openssl_on_both_versions_with_alpn_and_resumption() {
    let pki = Pki::new("rsa");
    let (mut s, ready, port) = tls_server(&pki, "http", &["--workers", "2"]);
    let curl = Command::new("curl").args(["-sS", "--cacert", &pki.ca, &format!("https://localhost:{port}/")]).output().expect("curl is installed");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "Hello world!", "{}", String::from_utf8_lossy(&curl.stderr));
    for (flag, version) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let out = s_client(port, &pki.ca, &[flag]);
        assert!(out.contains(&format!("Protocol  : {version}")), "{flag}: {out}");
        assert!(out.contains("ALPN protocol: http/1.1"), "{flag}: {out}");
        assert!(out.contains("Verify return code: 0 (ok)"), "{flag}: the chain verifies: {out}");
        assert!(out.contains("Hello world!"), "{flag}: {out}");
    }
    // A session from one connection resumes on later ones, whichever of
    // the two workers the kernel hands them to.
    let sess = pki.dir.join("session.pem").display().to_string();
    let first = s_client(port, &pki.ca, &["-tls1_3", "-sess_out", &sess]);
    assert!(first.contains("New, TLSv1.3"), "{first}");
    let mut reused = 0;
    for _ in 0..6 {
        let out = s_client(port, &pki.ca, &["-tls1_3", "-sess_in", &sess]);
        assert!(out.contains("Hello world!"), "{out}");
        reused += out.contains("Reused, TLSv1.3") as u32;
    }
    assert_eq!(reused, 6, "every later connection resumed");
    let t = s.wait_for(Duration::from_secs(10), "handshakes counted", |v| v["event"] == "stats" && v["tls_handshakes"].as_u64() >= Some(10));
    assert_eq!(t["tls_handshakes"], 10, "{t}");
    assert_eq!(t["tls_resumed"], 6, "{t}");
    assert!(t["tls_handshake_failures"].as_object().unwrap().is_empty(), "{t}");
    let (status, metrics) = http(&admin(&ready), "GET", "/metrics", b"", None);
    assert_eq!(status, 200);
    assert_eq!(sample(&metrics, "megaconn_tls_handshakes_total"), Some(10.0), "{metrics}");
    assert_eq!(sample(&metrics, "megaconn_tls_resumed_total"), Some(6.0), "{metrics}");
    assert!(s.terminate().success());
}

#[test]
fn cleartext_stalled_handshakes_and_noise_are_refused_and_counted() {
    let pki = Pki::new("ec");
    let (mut s, _, port) = tls_server(&pki, "http", &["--workers", "1", "--handshake-timeout", "1s"]);
    // Cleartext HTTP to the TLS port: a 400 that says why, then the close.
    let (status, body) = http(&format!("127.0.0.1:{port}"), "GET", "/", b"", None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("speaks TLS"), "{body}");
    // 1,000 connections that never start, 100 that stop half-way through
    // their ClientHello: every one is closed at the timeout.
    for (n, mode) in [(1000, "silent"), (100, "truncated")] {
        let mut py = Command::new("python3");
        py.args([&peer("tls_probe.py"), "stall", &port.to_string(), &n.to_string(), mode]);
        let mut p = Peer::spawn(&format!("tls_probe stall {mode}"), py);
        assert_eq!(p.line(Duration::from_secs(60), "connections open"), format!("holding {n}"));
        assert_eq!(p.line(Duration::from_secs(60), "connections closed by the server"), format!("closed {n}"));
    }
    // Noise after a finished handshake: closed, not a hang or a crash.
    let mut py = Command::new("python3");
    py.args([&peer("tls_probe.py"), "garbage", &port.to_string()]);
    let (code, out, err) = run(py, Duration::from_secs(30));
    assert_eq!((code, out.as_str()), (0, "closed\n"), "{err}");
    let t = s.wait_for(Duration::from_secs(10), "failures counted", |v| {
        v["event"] == "stats" && v["tls_handshake_failures"]["tls_timeout"] == 1100 && v["tls_handshakes"] == 1 && v["active"] == 0
    });
    assert_eq!(t["tls_handshake_failures"]["tls_plaintext"], 1, "{t}");
    assert_eq!(t["tls_handshakes"], 1, "only the noisy peer finished one: {t}");
    assert_eq!(t["active"], 0, "{t}");
    let noise: u64 = t["close_reasons"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("tls_") && *k != "tls_timeout" && *k != "tls_plaintext")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert_eq!(noise, 1, "the noise closed its connection with a TLS reason: {t}");
    // Still serving.
    let curl = Command::new("curl").args(["-sS", "--cacert", &pki.ca, &format!("https://localhost:{port}/")]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "Hello world!");
    s.wait_for(Duration::from_secs(10), "the next handshake counted", |v| v["event"] == "stats" && v["tls_handshakes"] == 2);
    assert!(s.terminate().success());
}

#[test]
fn wss_passes_python_websockets_conformance() {
    let pki = Pki::new("ec");
    let (mut s, _, port) = tls_server(&pki, "ws", &["--workers", "1"]);
    let mut py = Command::new("python3");
    py.args([&peer("ws_conformance.py"), &port.to_string(), &pki.ca]);
    let (code, out, err) = run(py, Duration::from_secs(60));
    assert!(code == 0 && out.ends_with("ALL OK\n"), "ws_conformance.py over wss exited {code}: {out}{err}");
    let v = s.wait_for(Duration::from_secs(10), "closes counted", |v| {
        v["event"] == "stats" && v["ws_upgrades"] == 5 && v["close_reasons"]["ws_message_too_big"] == 2
    });
    assert_eq!(v["close_reasons"]["ws_bad_utf8"], 1, "{v}");
    assert_eq!(v["tls_handshakes"], 5, "{v}");
    assert!(s.terminate().success());
}

#[test]
fn a_new_certificate_is_used_after_sighup_or_a_file_change_without_dropping_connections() {
    let pki = Pki::new("ec");
    let (mut s, ready, port) = tls_server(&pki, "http", &["--workers", "1"]);
    let mut py = Command::new("python3");
    py.args([&peer("tls_probe.py"), "keepalive", &port.to_string(), &pki.ca]).stdin(Stdio::piped());
    let mut held = Peer::spawn("tls_probe keepalive", py);
    let mut held_in = held.stdin();
    assert_eq!(held.line(Duration::from_secs(20), "first request"), "ok1 localhost");
    // The files change (a renewal): new handshakes get the new certificate.
    pki.issue("ec", "renewed.localhost", "cert.pem", "key.pem");
    s.wait_for(Duration::from_secs(10), "reloaded on the change", |v| v["event"] == "tls_reloaded");
    let out = s_client(port, &pki.ca, &[]);
    assert!(out.contains("CN = renewed.localhost"), "{out}");
    // The connection made before the change still works.
    writeln!(held_in, "go").unwrap();
    assert_eq!(held.line(Duration::from_secs(20), "second request on the old connection"), "ok2");
    // A broken key on SIGHUP: refused, said, and the last good one stays.
    std::fs::write(&pki.key, "not a key").unwrap();
    // SAFETY: signalling the server process this test started.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
    let failed = s.wait_for(Duration::from_secs(10), "bad reload refused", |v| v["event"] == "tls_reload_failed");
    assert!(failed["message"].as_str().unwrap().contains("no private key"), "{failed}");
    let out = s_client(port, &pki.ca, &[]);
    assert!(out.contains("CN = renewed.localhost") && out.contains("Hello world!"), "{out}");
    assert_eq!(stats(&ready)["active"].as_u64(), Some(1), "the held connection is still open");
    assert!(s.terminate().success());
}

/// With a broken key on disk (refused at reload), a worker killed with
/// SIGKILL is replaced by one serving the certificate in force: the
/// server stays up, the other worker's connection stays open, and new
/// handshakes get the certificate that was loaded (issue 42, finding 5).
#[test]
fn a_worker_replaced_while_the_key_on_disk_is_broken_serves_the_certificate_in_force() {
    let pki = Pki::new("ec");
    let (mut s, ready, port) = tls_server(&pki, "http", &["--workers", "2"]);
    let mut py = Command::new("python3");
    py.args([&peer("tls_probe.py"), "keepalive", &port.to_string(), &pki.ca]).stdin(Stdio::piped());
    let mut held = Peer::spawn("tls_probe keepalive", py);
    let mut held_in = held.stdin();
    assert_eq!(held.line(Duration::from_secs(20), "first request"), "ok1 localhost");
    std::fs::write(&pki.key, "not a key").unwrap();
    // SAFETY: signalling the server process this test started.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
    s.wait_for(Duration::from_secs(10), "bad reload refused", |v| v["event"] == "tls_reload_failed");
    // Kill the worker that does not hold the probe's connection.
    let listed = s.wait_for(Duration::from_secs(10), "the held connection's worker in stats", |v| v["event"] == "stats" && v["active"] == 1);
    let workers = pids(&ready);
    let holder = connections_worker(&ready);
    let victim = workers.iter().enumerate().find(|(i, _)| *i != holder).map(|(_, p)| *p).expect("a second worker");
    kill9(victim);
    s.wait_for(Duration::from_secs(20), "the worker replaced", |v| v["event"] == "worker_replaced");
    for _ in 0..4 {
        let out = s_client(port, &pki.ca, &[]);
        assert!(out.contains("CN = localhost") && out.contains("Hello world!"), "a handshake after the replacement: {out}");
    }
    writeln!(held_in, "go").unwrap();
    assert_eq!(held.line(Duration::from_secs(20), "second request on the held connection"), "ok2");
    assert!(!crate::common::proc::exited(&s.child), "the server stopped: {listed}");
    assert!(s.terminate().success());
}

/// Which worker (index into the ready event's pids) holds the one open
/// connection, from the admin API's /connections.
fn connections_worker(ready: &Value) -> usize {
    let admin = ready["admin"].as_str().expect("admin address");
    let (status, body) = http(admin, "GET", "/connections", b"", None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["connections"][0]["worker"].as_u64().unwrap_or_else(|| panic!("one connection listed: {v}")) as usize
}

/// The most `k` commands `openssl s_client` is given for a peer that only
/// spins keys: the server closes after 32 KeyUpdates without data in
/// between, and s_client, gone, refuses the next command. s_client acts on
/// the first letter of each read of its input, so commands that arrive
/// together make one KeyUpdate (CI, busy, merged more than 8 of 40): it
/// is given commands until it is gone, 400 at most.
const KEY_UPDATES_SENT: usize = 400;
/// The pause between two commands, for each to arrive on its own.
const COMMAND_GAP: Duration = Duration::from_millis(25);

/// A peer that sends KeyUpdates and nothing else (`openssl s_client`'s
/// `k` command: a KeyUpdate not asking for one back) is closed at rustls's
/// limit and the close is counted; data first does not save it, since the
/// count starts again after data.
#[test]
fn key_updates_without_data_close_the_connection_and_are_counted() {
    let pki = Pki::new("ec");
    let (mut s, _, port) = tls_server(&pki, "echo", &["--workers", "1"]);
    let mut cmd = Command::new("openssl");
    let connect = format!("127.0.0.1:{port}");
    cmd.args(["s_client", "-connect", &connect, "-servername", "localhost", "-CAfile", &pki.ca, "-tls1_3"]).stdin(Stdio::piped());
    let mut p = Peer::spawn("s_client key updates", cmd);
    let mut input = p.stdin();
    // The echo says the handshake is done and s_client reads its input.
    writeln!(input, "hello").unwrap();
    while p.line(Duration::from_secs(20), "the echo of hello") != "hello" {}
    let mut gone = false;
    for _ in 0..KEY_UPDATES_SENT {
        // A failed write: s_client is gone, the server closed.
        if writeln!(input, "k").and_then(|_| input.flush()).is_err() {
            gone = true;
            break;
        }
        std::thread::sleep(COMMAND_GAP);
    }
    assert!(gone, "s_client still took commands after {KEY_UPDATES_SENT} key updates");
    let v = s.wait_for(Duration::from_secs(10), "the close counted", |v| v["event"] == "stats" && v["close_reasons"]["tls_key_update_limit"] == 1);
    assert_eq!(v["active"], 0, "{v}");
    drop(input);
    p.finish(Duration::from_secs(10));
    assert!(s.terminate().success());
}

/// A headless Chromium page opens 100 wss:// sockets (the certificate
/// trusted by its key, as a pinned one) and receives one publish on each.
#[test]
fn chromium_receives_a_publish_over_wss() {
    let pki = Pki::new("ec");
    let spki = crate::common::browser::spki_sha256(&pki.cert);
    crate::common::browser::chromium_receives_a_publish(&["--tls-cert", &pki.cert, "--tls-key", &pki.key], 100, Some(&spki));
}
