//! `--upstream nats://`: what MQTT clients publish, into NATS JetStream
//! (issue 65), read back by NATS's own Python client (nats-py) from a
//! real `nats-server -js`: every message once, in order, its bytes as
//! sent, its subject from its topic, its identity in headers; held while
//! NATS is down and stored once when it returns.
use crate::common::*;
use crate::mqtt::mqtt_server;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A nats-server with JetStream on a free port, its store in `dir`.
fn nats(port: u16, dir: &std::path::Path) -> Running {
    nats_with(port, dir, &[])
}

/// [`nats`], with more of its own flags.
fn nats_with(port: u16, dir: &std::path::Path, extra: &[&str]) -> Running {
    let mut cmd = Command::new("nats-server");
    cmd.args(["-js", "-sd"]).arg(dir).args(["-a", "127.0.0.1", "-p", &port.to_string()]).args(extra);
    let n = Running::spawn(cmd);
    wait_until("nats-server listening", Duration::from_secs(20), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    n
}

/// A temporary directory, removed when it drops.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("megaconn-upstream-nats-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What nats_consume.py read of `filter` (`count` messages), and the
/// stream's total.
fn consume(nats_port: u16, filter: &str, count: usize) -> (Vec<Value>, u64) {
    let mut py = Command::new("python3");
    py.arg(peer("nats_consume.py")).arg(format!("nats://127.0.0.1:{nats_port}")).args([filter, &count.to_string(), "30"]);
    let lines = Peer::spawn("nats_consume.py", py).finish_ok(Duration::from_secs(60));
    let mut v: Vec<Value> = lines.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let total = v.pop().expect("the stream line")["messages"].as_u64().expect("messages");
    (v, total)
}

/// `mosquitto_pub` as `user`, each line of `lines` one QoS 1 message to `topic`.
fn publish_lines(port: u16, user: &str, topic: &str, lines: &str) {
    let mut cmd = Command::new("mosquitto_pub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-u", user, "-P", "pw", "-q", "1", "-t", topic, "-l"]);
    cmd.stdin(Stdio::piped());
    let mut p = Peer::spawn("mosquitto_pub -l", cmd);
    use std::io::Write;
    p.stdin().write_all(lines.as_bytes()).unwrap();
    p.finish_ok(Duration::from_secs(30));
}

/// A password file with one user, `pw` its password (Debian's mosquitto_passwd).
fn passwd(dir: &Dir, user: &str) -> String {
    let f = dir.0.join("passwd");
    let mut cmd = Command::new("mosquitto_passwd");
    cmd.arg("-c").arg("-b").arg(&f).args([user, "pw"]);
    Peer::spawn("mosquitto_passwd", cmd).finish_ok(Duration::from_secs(30));
    f.to_str().unwrap().to_string()
}

fn upstream_stats(admin: &str) -> Value {
    let (status, body) = http(admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["upstream"].clone()
}

#[test]
fn mqtt_publishes_reach_jetstream_once_each_with_their_bytes_and_identity() {
    let dir = Dir::new("once");
    let np = free_port();
    let _nats = nats(np, &dir.0.join("js"));
    let pw = passwd(&dir, "alice");
    let url = format!("nats://127.0.0.1:{np}/devices.in");
    let (_s, admin, port) = mqtt_server(&["--upstream", &url, "--mqtt-password-file", &pw]);
    let lines: String = (0..200).map(|i| format!("reading {i}\n")).collect();
    publish_lines(port, "alice", "tele/dev-1/temp", &lines);
    // A payload that is not text: its bytes, not base64.
    let bin = dir.0.join("bin");
    std::fs::write(&bin, (0..=255u8).collect::<Vec<_>>()).unwrap();
    let mut cmd = Command::new("mosquitto_pub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-u", "alice", "-P", "pw", "-q", "1", "-t", "raw", "-f"]).arg(&bin);
    Peer::spawn("mosquitto_pub -f", cmd).finish_ok(Duration::from_secs(30));

    let (got, total) = consume(np, "devices.in.>", 201);
    assert_eq!(total, 201, "the stream holds each message once");
    for (i, m) in got[..200].iter().enumerate() {
        assert_eq!(m["subject"], "devices.in.tele.dev-1.temp", "{m}");
        assert_eq!(m["data"], format!("reading {i}"), "in the order published: {m}");
        assert_eq!(m["headers"]["Megaconn-User"], "alice", "{m}");
        assert_eq!(m["headers"]["Megaconn-Topic"], "tele/dev-1/temp", "{m}");
        assert_eq!(m["headers"]["Megaconn-Type"], "message", "{m}");
        assert!(m["headers"]["Megaconn-Conn"].as_str().is_some_and(|c| c.parse::<u64>().is_ok()), "{m}");
    }
    let raw = &got[200];
    assert_eq!(raw["subject"], "devices.in.raw");
    let bytes: Vec<u32> = raw["data"].as_str().unwrap().chars().map(|c| c as u32).collect();
    assert_eq!(bytes, (0..=255u32).collect::<Vec<_>>(), "the bytes as sent");
    let up = upstream_stats(&admin);
    assert_eq!((up["delivered"].as_u64(), up["duplicates"].as_u64(), up["queued"].as_u64()), (Some(201), Some(0), Some(0)), "{up}");
}

#[test]
fn messages_wait_while_nats_is_down_and_are_stored_once_when_it_returns() {
    let dir = Dir::new("outage");
    let np = free_port();
    let store = dir.0.join("js");
    let mut nats1 = nats(np, &store);
    let pw = passwd(&dir, "dev");
    let url = format!("nats://127.0.0.1:{np}");
    let (_s, admin, port) = mqtt_server(&["--upstream", &url, "--mqtt-password-file", &pw]);
    publish_lines(port, "dev", "before", "b0\n");
    wait_until("the first message stored", Duration::from_secs(20), || upstream_stats(&admin)["delivered"] == 1);
    nats1.terminate();
    drop(nats1);
    let lines: String = (0..50).map(|i| format!("m{i}\n")).collect();
    publish_lines(port, "dev", "during", &lines);
    wait_until("50 messages held, sent again and again", Duration::from_secs(20), || {
        let up = upstream_stats(&admin);
        up["queued"] == 50 && up["retries"].as_object().is_some_and(|r| !r.is_empty())
    });
    let _nats2 = nats(np, &store);
    let (got, total) = consume(np, "megaconn.up.during", 50);
    let data: Vec<&str> = got.iter().map(|m| m["data"].as_str().unwrap()).collect();
    assert_eq!(data, (0..50).map(|i| format!("m{i}")).collect::<Vec<_>>(), "all 50, in order");
    assert_eq!(total, 51, "each stored once (with the one from before)");
    wait_until("the held messages finished", Duration::from_secs(20), || {
        let up = upstream_stats(&admin);
        up["delivered"] == 51 && up["queued"] == 0
    });
}

#[test]
fn a_bad_nats_upstream_is_refused_naming_the_fix() {
    let dir = Dir::new("bad");
    let secret = dir.0.join("secret");
    std::fs::write(&secret, [b'k'; 48]).unwrap();
    let secret = secret.to_str().unwrap();
    for (args, says) in [
        (vec!["--upstream", "nats://127.0.0.1:4222/a..b"], "empty token"),
        (vec!["--upstream", "nats://127.0.0.1:4222/up.*"], "wildcard"),
        (vec!["--upstream", "nats://127.0.0.1:4222", "--upstream-secret-file", secret], "--upstream-nats-creds"),
    ] {
        let mut cmd = megaconn();
        cmd.args(["server", "--protocol", "mqtt", "--ports", "1", "--check-config"]).args(&args);
        let (code, _, err) = run(cmd, Duration::from_secs(30));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A PUBACK's reason code (v5: absent means success).
fn puback_reason(s: &mut std::net::TcpStream, id: u16) -> u8 {
    let (first, body) = crate::common::mqtt_raw::packet(s);
    assert_eq!((first, &body[..2]), (0x40, &id.to_be_bytes()[..]), "the PUBACK of {id}");
    body.get(2).copied().unwrap_or(0)
}

#[test]
fn a_full_budget_refuses_the_publish_to_subscribers_and_nats_alike() {
    use crate::common::mqtt_raw::{frame, packet, publish_body, raw_client, subscribe};
    use std::io::{Read, Write};
    // Nobody listens there: every message waits in the worker's budget of 2.
    let url = format!("nats://127.0.0.1:{}", free_port());
    let (_s, admin, port) = mqtt_server(&["--upstream", &url, "--upstream-queue", "2"]);
    let mut sub = raw_client(port, 5, "sub", &[]);
    subscribe(&mut sub, true, "t", 1);
    let mut publ = raw_client(port, 5, "pub", &[]);
    for id in 1..=3u16 {
        publ.write_all(&frame(0x32, &publish_body(true, "t", Some(id), format!("m{id}").as_bytes()))).unwrap();
    }
    let reasons: Vec<u8> = (1..=3).map(|id| puback_reason(&mut publ, id)).collect();
    assert_eq!(reasons, [0, 0, 0x97], "the third: quota exceeded");
    // The subscriber hears the two accepted, not the refused one.
    for id in 1..=2u16 {
        let (first, body) = packet(&mut sub);
        assert_eq!(first & 0xF0, 0x30, "a PUBLISH");
        assert!(body.ends_with(format!("m{id}").as_bytes()), "{body:?}");
    }
    sub.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut more = [0u8; 1];
    assert!(sub.read(&mut more).is_err(), "nothing more: the refused message went to nobody");
    // 3.1.1 cannot refuse a publish: its client is disconnected.
    let mut old = raw_client(port, 4, "old", &[]);
    old.write_all(&frame(0x30, &publish_body(false, "t", None, b"x"))).unwrap();
    let mut rest = Vec::new();
    let _ = old.read_to_end(&mut rest);
    assert!(rest.is_empty() || rest[0] == 0xE0, "closed, or a DISCONNECT first: {rest:?}");
    wait_until("both refusals counted", Duration::from_secs(20), || {
        let (_, body) = http(&admin, "GET", "/stats", b"", None);
        serde_json::from_str::<Value>(&body).is_ok_and(|v| v["mqtt_publish_refused"]["upstream_full"] == 2)
    });
    assert_eq!(upstream_stats(&admin)["queued"], 2, "only the two accepted wait for NATS");
}

/// A message larger than the NATS server's max_payload behind others in
/// its window: those before it are stored, it is refused for good and
/// counted, and those after it are stored too (the window does not
/// retry it for ever).
#[test]
fn a_message_larger_than_max_payload_is_refused_and_the_rest_go_on() {
    let dir = Dir::new("payload");
    let np = free_port();
    let conf = dir.0.join("nats.conf");
    std::fs::write(&conf, "max_payload: 2048\n").unwrap();
    let _nats = nats_with(np, &dir.0.join("js"), &["-c", conf.to_str().unwrap()]);
    let pw = passwd(&dir, "dev");
    let url = format!("nats://127.0.0.1:{np}/big");
    let (_s, admin, port) = mqtt_server(&["--upstream", &url, "--mqtt-password-file", &pw]);
    // One connection: before, the large one, after, in order in one window.
    let big = dir.0.join("big");
    std::fs::write(&big, vec![b'x'; 4096]).unwrap();
    let mut cmd = Command::new("mosquitto_pub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-u", "dev", "-P", "pw", "-q", "1", "-t", "t", "-l"]);
    cmd.stdin(Stdio::piped());
    let mut p = Peer::spawn("mosquitto_pub -l", cmd);
    use std::io::Write;
    let mut lines = String::from("before\n");
    lines.push_str(&"x".repeat(4096));
    lines.push_str("\nafter\n");
    p.stdin().write_all(lines.as_bytes()).unwrap();
    p.finish_ok(Duration::from_secs(30));
    let (got, total) = consume(np, "big.>", 2);
    let data: Vec<&str> = got.iter().map(|m| m["data"].as_str().unwrap()).collect();
    assert_eq!(data, ["before", "after"], "the rest stored, in order");
    assert_eq!(total, 2);
    wait_until("the refusal counted and nothing left", Duration::from_secs(20), || {
        let up = upstream_stats(&admin);
        up["refused"]["max_payload"] == 1 && up["delivered"] == 2 && up["queued"] == 0
    });
}
