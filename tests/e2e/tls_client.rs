//! `megaconn client` over TLS (`--tls`, `wss://`, `https://`): against
//! megaconn's own TLS server on every client protocol (with each
//! handshake stage timed apart, and sessions resumed on reopen), against
//! servers nobody here wrote (nginx with `ssl`, a Python `websockets` wss
//! server that checks a header, the Origin and the subprotocol), and
//! against certificates that must be refused, each failure named.
use crate::common::pki::Pki;
use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

fn tls_server(pki: &Pki, protocol: &str, extra: &[&str]) -> (Running, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--ports", &p, "--protocol", protocol, "--tls-cert", &pki.cert, "--tls-key", &pki.key];
    args.extend_from_slice(extra);
    let (s, _, _) = server_ready(&args, None);
    (s, port)
}

/// Run `megaconn client ARGS --json`; (exit code, summary, stderr).
fn client(args: &[&str]) -> (i32, Value, String) {
    let mut cmd = megaconn();
    cmd.arg("client").args(args).args(["--json", "--workers", "1"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v["summary"].clone(), err)
}

#[test]
fn the_client_speaks_tls_on_every_protocol_and_times_each_stage() {
    let pki = Pki::new("ec");
    // framed --tls: heartbeats through TLS both ways.
    let (mut s, port) = tls_server(&pki, "framed", &[]);
    let p = port.to_string();
    let (code, sum, err) = client(&[
        "--ports",
        &p,
        "--connections",
        "200",
        "--rate",
        "2000",
        "--heartbeat",
        "300ms",
        "--hold",
        "1500ms",
        "--tls-ca",
        &pki.ca,
        "--tls-server-name",
        "localhost",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum["established"], 200, "{sum}");
    assert_eq!(sum["tls_handshakes"], 200, "{sum}");
    assert_eq!(sum["tls"]["handshakes"], 200, "{sum}");
    assert_eq!(sum["tls"]["handshake_ms"]["count"], 200, "{sum}");
    assert_eq!(sum["stages_ms"]["tcp"]["count"], 200, "{sum}");
    assert!(sum["stages_ms"].get("upgrade").is_none(), "framed has no upgrade stage: {sum}");
    let beats = sum["heartbeats_sent"].as_u64().unwrap();
    assert!(beats >= 200 * 3, "{sum}");
    assert_eq!(sum["heartbeats_answered"].as_u64(), Some(beats), "{sum}");
    let t = s.wait_for(Duration::from_secs(10), "the server counted the handshakes", |v| v["event"] == "stats" && v["tls_handshakes"] == 200);
    assert!(t["tls_handshake_failures"].as_object().unwrap().is_empty(), "{t}");
    assert!(s.terminate().success());

    // wss://: TCP, TLS and the upgrade timed apart; churn reopens resume.
    let (mut s, port) = tls_server(&pki, "ws", &[]);
    let url = format!("wss://localhost:{port}/chat");
    let (code, sum, err) =
        client(&["--url", &url, "--tls-ca", &pki.ca, "--connections", "100", "--rate", "1000", "--heartbeat", "300ms", "--hold", "2s", "--churn", "50/s"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum["established"], 100, "{sum}");
    for stage in ["tcp", "tls", "upgrade"] {
        assert!(sum["stages_ms"][stage]["count"].as_u64() >= Some(100), "{stage}: {sum}");
    }
    let reopened = sum["churn_reopened"].as_u64().unwrap();
    assert!(reopened >= 20, "{sum}");
    // A reopen the end of the run cut short may have finished its TLS
    // handshake but not its upgrade: counted as a handshake, not a reopen.
    let handshakes = sum["tls_handshakes"].as_u64().unwrap();
    assert!(handshakes >= 100 + reopened && handshakes <= sum["attempted"].as_u64().unwrap(), "{sum}");
    let resumed = sum["tls_resumed"].as_u64().unwrap();
    assert!(resumed >= reopened / 2 && resumed <= handshakes - 100, "first connections never resume, reopens do: {resumed} of {reopened}: {sum}");
    // Every connection established (and reopen) finished its handshake on
    // the server too; one the end cut short may not have.
    let t = s.wait_for(Duration::from_secs(10), "the server counted the handshakes", |v| {
        v["event"] == "stats" && v["tls_handshakes"].as_u64() >= Some(100 + reopened)
    });
    assert!(t["tls_handshakes"].as_u64() <= Some(handshakes), "{t}");
    let server_resumed = t["tls_resumed"].as_u64().unwrap();
    assert!(server_resumed >= reopened / 2 && server_resumed <= resumed, "the server saw the resumptions: {t}");
    assert!(s.terminate().success());

    // https:// with requests, and --tls-resume never.
    let (mut s, port) = tls_server(&pki, "http", &[]);
    let url = format!("https://localhost:{port}/");
    let (code, sum, err) = client(&[
        "--url",
        &url,
        "--tls-ca",
        &pki.ca,
        "--connections",
        "50",
        "--rate",
        "1000",
        "--request-rate",
        "20/s",
        "--hold",
        "1s",
        "--tls-resume",
        "never",
        "--tls-versions",
        "1.2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum["established"], 50, "{sum}");
    let r = &sum["requests"];
    assert!(r["replies"].as_u64() >= Some(50 * 10), "{sum}");
    assert_eq!(r["http_status"]["2xx"], r["replies"], "{sum}");
    assert_eq!(sum["tls_resumed"], 0, "{sum}");
    assert!(s.terminate().success());
}

#[test]
fn certificate_problems_and_cleartext_are_named() {
    let pki = Pki::new("ec");
    pki.issue_for_days("ec", "localhost", "expired.pem", "expired.key", "-1");
    let (mut good, port) = tls_server(&pki, "framed", &[]);
    let p = port.to_string();
    let failures = |extra: &[&str], port: &str| {
        let mut args = vec!["--ports", port, "--connections", "20", "--rate", "1000", "--hold", "0s", "--tls"];
        args.extend_from_slice(extra);
        let (code, sum, err) = client(&args);
        assert_ne!(code, 0, "a run where every connection failed is a failure: {sum}");
        assert_eq!(sum["established"], 0, "{sum}\n{err}");
        sum["failed"].clone()
    };
    // Our test CA is not in the system's trust store.
    assert_eq!(failures(&["--tls-server-name", "localhost"], &p)["tls_certificate_unknown_ca"], 20);
    assert_eq!(failures(&["--tls-ca", &pki.ca, "--tls-server-name", "example.com"], &p)["tls_certificate_name_mismatch"], 20);
    let (mut expired, eport) = {
        let port = free_port();
        let ps = port.to_string();
        let cert = pki.dir.join("expired.pem").display().to_string();
        let key = pki.dir.join("expired.key").display().to_string();
        let (s, _, _) = server_ready(&["--ports", &ps, "--tls-cert", &cert, "--tls-key", &key], None);
        (s, port)
    };
    assert_eq!(failures(&["--tls-ca", &pki.ca, "--tls-server-name", "localhost"], &eport.to_string())["tls_certificate_expired"], 20);
    // The server saw the client's alerts, named.
    let t = good.wait_for(Duration::from_secs(10), "the server counted refused handshakes", |v| {
        v["event"] == "stats" && v["tls_handshake_failures"].as_object().is_some_and(|m| m.values().filter_map(Value::as_u64).sum::<u64>() >= 40)
    });
    let f = &t["tls_handshake_failures"];
    assert_eq!(f["tls_alert_unknown_ca"], 20, "{t}");
    assert_eq!(f["tls_alert_bad_certificate"].as_u64().unwrap_or(0) + f["tls_alert_certificate_unknown"].as_u64().unwrap_or(0), 20, "name mismatch: {t}");
    assert!(expired.terminate().success());
    assert!(good.terminate().success());
    // TLS to a cleartext server, and cleartext to a TLS one.
    let (mut plain, pport) = {
        let port = free_port();
        let (s, _, _) = server_ready(&["--ports", &port.to_string(), "--protocol", "ws"], None);
        (s, port)
    };
    let (code, sum, _) = client(&["--url", &format!("wss://127.0.0.1:{pport}/"), "--insecure", "--connections", "5", "--hold", "0s"]);
    assert_ne!(code, 0);
    assert_eq!(sum["failed"]["tls_plaintext"], 5, "{sum}");
    assert!(plain.terminate().success());
    let (mut tls_ws, tport) = tls_server(&pki, "ws", &[]);
    let (code, sum, _) = client(&["--url", &format!("ws://127.0.0.1:{tport}/"), "--connections", "5", "--hold", "0s"]);
    assert_ne!(code, 0);
    assert_eq!(sum["failed"]["http_400"], 5, "the server's 'this port speaks TLS': {sum}");
    assert!(tls_ws.terminate().success());
    // Flags that cannot work are refused before anything starts.
    let mut cmd = megaconn();
    cmd.args(["client", "--tls-ca", "/nonexistent/ca.pem", "--connections", "1"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tls-ca") && err.contains("/nonexistent/ca.pem"), "{err}");
    let mut cmd = megaconn();
    cmd.args(["client", "--tls", "--tls-versions", "1.1", "--connections", "1"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("1.2, 1.3"), "{err}");
}

#[test]
fn the_client_loads_nginx_over_https_with_keep_alive() {
    let pki = Pki::new("rsa");
    let port = free_port();
    let work = pki.dir.join("nginx");
    std::fs::create_dir_all(&work).unwrap();
    let conf = format!(
        "worker_processes 1; daemon off; pid {w}/nginx.pid; error_log {w}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 65;\n\
           server {{ listen 127.0.0.1:{port} ssl; ssl_protocols TLSv1.2 TLSv1.3; ssl_certificate {c}; ssl_certificate_key {k};\n\
             location / {{ default_type text/plain; return 200 \"Hello world!\"; }} }} }}\n",
        w = work.display(),
        c = pki.cert,
        k = pki.key
    );
    std::fs::write(work.join("nginx.conf"), conf).unwrap();
    let mut cmd = Command::new("nginx");
    cmd.args(["-p", &work.display().to_string(), "-c", &work.join("nginx.conf").display().to_string(), "-e", &work.join("error.log").display().to_string()]);
    let nginx = Peer::spawn("nginx", cmd);
    wait_until("nginx listening", Duration::from_secs(20), || listeners_on(port) > 0);
    let url = format!("https://localhost:{port}/");
    let (code, sum, err) = client(&["--url", &url, "--tls-ca", &pki.ca, "--connections", "100", "--rate", "1000", "--request-rate", "20/s", "--hold", "2s"]);
    drop(nginx);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum["established"], 100, "{sum}");
    assert_eq!(sum["tls_handshakes"], 100, "{sum}");
    let r = &sum["requests"];
    assert!(r["replies"].as_u64() >= Some(100 * 20), "{sum}");
    assert_eq!(r["http_status"]["2xx"], r["replies"], "{sum}");
    assert_eq!(sum["lost_total"], 0, "keep-alive held every connection: {sum}");
}

#[test]
fn the_client_passes_a_python_wss_server_that_checks_header_origin_and_subprotocol() {
    raise_fd_limit();
    let pki = Pki::new("ec");
    let port = free_port();
    let mut py = Command::new("python3");
    py.args([&peer("wss_header_server.py"), &port.to_string(), &pki.cert, &pki.key, "20"]);
    let mut server = Peer::spawn("python websockets wss server", py);
    assert_eq!(server.line(Duration::from_secs(30), "listening"), "ready");
    let url = format!("wss://localhost:{port}/feed");
    let ok = ["--url", &url, "--tls-ca", &pki.ca, "-H", "X-Api-Key: secret", "--origin", "https://app.example", "--ws-subprotocol", "chat.v2"];
    let mut args = ok.to_vec();
    args.extend(["--connections", "300", "--rate", "1000", "--heartbeat", "500ms", "--request-rate", "1/s", "--hold", "3s"]);
    let (code, sum, err) = client(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum["established"], 300, "{sum}");
    let beats = sum["heartbeats_sent"].as_u64().unwrap();
    assert!(beats >= 300 * 4, "{sum}");
    assert_eq!(sum["heartbeats_answered"].as_u64(), Some(beats), "every ping answered by the peer: {sum}");
    assert_eq!(sum["requests"]["replies"], sum["requests"]["sent"], "{sum}");
    assert!(sum["raw_bytes_in"].as_u64() >= Some(300 * 12), "each connection got its text hello: {sum}");
    // Without the header: the peer's 401, named; from another origin its
    // 403; a subprotocol it does not speak: its 400.
    let (_, sum, _) = client(&["--url", &url, "--tls-ca", &pki.ca, "--origin", "https://app.example", "--connections", "5", "--hold", "0s"]);
    assert_eq!(sum["failed"]["http_401"], 5, "{sum}");
    let (_, sum, _) =
        client(&["--url", &url, "--tls-ca", &pki.ca, "-H", "X-Api-Key: secret", "--origin", "https://evil.example", "--connections", "5", "--hold", "0s"]);
    assert_eq!(sum["failed"]["http_403"], 5, "{sum}");
    let (_, sum, _) = client(&[
        "--url",
        &url,
        "--tls-ca",
        &pki.ca,
        "-H",
        "X-Api-Key: secret",
        "--origin",
        "https://app.example",
        "--ws-subprotocol",
        "chat.v9",
        "--connections",
        "5",
        "--hold",
        "0s",
    ]);
    assert_eq!(sum["failed"]["http_400"], 5, "{sum}");
    drop(server);
    // A server that ignores the subprotocol offered (megaconn's own) is
    // refused by the client: the application would not know what it speaks.
    let port = free_port();
    let (mut s, _, _) = server_ready(&["--ports", &port.to_string(), "--protocol", "ws"], None);
    let (_, sum, _) = client(&["--url", &format!("ws://127.0.0.1:{port}/"), "--ws-subprotocol", "chat.v2", "--connections", "5", "--hold", "0s"]);
    assert_eq!(sum["failed"]["ws_handshake_no_subprotocol"], 5, "{sum}");
    assert!(s.terminate().success());
}
