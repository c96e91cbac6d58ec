//! The chat example (examples/chat) in two headless Chromium pages: its
//! Python backend mints the tokens and relays what megaconn's upstream
//! webhook hears; what alice types, bob reads, and both see the other
//! online.
use crate::common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn two_browsers_chat_through_megaconn_and_the_example_backend() {
    let dir = std::env::temp_dir().join(format!("megaconn-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "the chat example's secret, 32 bytes or more\n").unwrap();
    let secret = secret.display().to_string();
    let (ws, admin, backend) = (free_port().to_string(), format!("127.0.0.1:{}", free_port()), free_port().to_string());
    let hook = format!("http://127.0.0.1:{backend}/hook");
    let (mut s, _, _) = server_ready(
        &[
            "--protocol",
            "ws",
            "--ports",
            &ws,
            "--admin",
            &admin,
            "--workers",
            "2",
            "--auth",
            "jwt",
            "--jwt-secret-file",
            &secret,
            "--upstream",
            &hook,
            "--presence-events",
        ],
        None,
    );
    let mut py = Command::new("python3");
    py.arg(format!("{}/examples/chat/backend.py", env!("CARGO_MANIFEST_DIR"))).args([&backend, &admin, &ws, &secret]);
    let _backend = Peer::spawn("examples/chat/backend.py", py);
    wait_until("the backend listening", Duration::from_secs(20), || std::net::TcpStream::connect(format!("127.0.0.1:{backend}")).is_ok());
    let mut node = Command::new("node");
    node.arg(peer("chromium_chat.js")).arg(format!("http://127.0.0.1:{backend}"));
    let mut browsers = Peer::spawn("node chromium_chat.js (chromium)", node);
    let rest = browsers.finish_ok(Duration::from_secs(120));
    let out: serde_json::Value = serde_json::from_str(rest.last().unwrap_or_else(|| panic!("the pages' result: {rest:?}"))).unwrap();
    for (who, said, other) in [("alice", "bob: hi alice", "bob"), ("bob", "alice: hello bob", "alice")] {
        let log = out[who]["log"].as_str().unwrap();
        assert!(log.contains(said), "{who}'s page: {log}");
        assert!(out[who]["online"].as_str().unwrap().contains(other), "{who}'s online list: {out}");
    }
    // Each message reached each page once.
    assert_eq!(out["bob"]["log"].as_str().unwrap().matches("alice: hello bob").count(), 1, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}
