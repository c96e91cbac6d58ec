//! Headless Chromium (Debian's, driven by tests/peers/chromium_ws.js) as
//! the WebSocket peer: a page opens N sockets subscribed to "page", the
//! test publishes once, and every socket must receive it. Chromium offers
//! permessage-deflate: every socket must have negotiated it and got the
//! push compressed.

use super::{http, peer, server_ready, Peer};
use std::process::Command;
use std::time::Duration;

/// Start a ws server with `server_args` (plus a port), open `n`
/// WebSockets from a Chromium page (wss when `spki`, the base64 SHA-256
/// of the certificate's key Chromium is told to trust, is given), publish,
/// and check every socket got the message once.
pub fn chromium_receives_a_publish(server_args: &[&str], n: usize, spki: Option<&str>) {
    let port = super::free_port().to_string();
    let mut args = vec!["--ports", &port, "--workers", "2", "--protocol", "ws"];
    args.extend_from_slice(server_args);
    let (mut s, _, ready) = server_ready(&args, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut node = Command::new("node");
    let count = n.to_string();
    node.args([&peer("chromium_ws.js"), &port, &count]);
    if let Some(k) = spki {
        node.arg(k);
    }
    let mut browser = Peer::spawn("node chromium_ws.js (chromium)", node);
    assert_eq!(browser.line(Duration::from_secs(60), "WebSockets open in the page"), "ready");
    let (status, r) = http(&admin, "POST", "/publish?topic=page", "to every tab — ✓".as_bytes(), None);
    assert_eq!(status, 200, "{r}");
    let rest = browser.finish_ok(Duration::from_secs(60));
    let result: serde_json::Value = serde_json::from_str(rest.last().unwrap_or_else(|| panic!("the page's result: {rest:?}"))).unwrap();
    assert_eq!(result["open"], n, "{result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["received"], n, "{result}");
    assert_eq!(result["texts"], serde_json::json!(["to every tab — ✓"]), "{result}");
    assert_eq!(result["extensions"], serde_json::json!(["permessage-deflate; server_no_context_takeover; client_no_context_takeover"]), "{result}");
    let v = s.wait_for(Duration::from_secs(30), "the pushes counted", |v| v["event"] == "stats" && v["push_delivered"] == n);
    assert_eq!(v["ws_deflate_negotiated"], n, "{v}");
    assert_eq!(v["ws_compressed_out"], n, "every socket got the push compressed: {v}");
    assert!(s.terminate().success());
}

/// The base64 SHA-256 of a PEM certificate's public key (what Chromium's
/// `--ignore-certificate-errors-spki-list` takes), by the openssl command.
pub fn spki_sha256(cert: &str) -> String {
    let script = format!("openssl x509 -in '{cert}' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64");
    let out = Command::new("bash").args(["-euo", "pipefail", "-c", &script]).output().expect("bash and openssl are installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
