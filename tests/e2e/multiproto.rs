//! One server process serving several protocols at once (`--serve`):
//! MQTT, MQTT over TLS, WebSocket and framed, each on its own port, two
//! workers, one topic space. Peers nobody here wrote hear it: Debian's
//! mosquitto_sub (plain and over TLS, checking the test CA), a Python
//! `websockets` subscriber, and mosquitto_pub publishing; a framed
//! subscriber is written by hand. And the mistakes `--serve` refuses,
//! each with exit code 2 and the fix. `scripts/test.sh` runs this suite
//! again with MEGACONN_IO=epoll; one test names `--io epoll` itself.
use crate::common::framed::{resume, In, Reader};
use crate::common::pki::Pki;
use crate::common::*;
use crate::mqtt::{count, stats_when};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Subscribers of topic `news` on every port; an admin publish and an
/// MQTT publish reach each of them.
fn every_protocol_hears_both_publishes(io: &[&str]) {
    let pki = Pki::new("ec");
    let ports = free_ports(4);
    let (mqtt, mqtts, ws, framed) = (ports.nth(0), ports.nth(1), ports.nth(2), ports.nth(3));
    let serve = [format!("mqtt={mqtt}"), format!("mqtt+tls={mqtts}"), format!("ws={ws}"), format!("framed={framed}")];
    let mut args = vec!["--workers", "2", "--tls-cert", &pki.cert, "--tls-key", &pki.key];
    for s in &serve {
        args.extend(["--serve", s.as_str()]);
    }
    args.extend_from_slice(io);
    let (mut s, plan, ready) = server_ready(&args, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let listed: Vec<String> = plan["serve"].as_array().unwrap().iter().map(|e| format!("{}={}", e["protocol"].as_str().unwrap(), e["ports"][0])).collect();
    assert_eq!(listed, serve, "the plan lists each protocol with its ports: {plan}");

    let sub = |port: u16, tls: &[&str]| {
        let mut cmd = Command::new("mosquitto_sub");
        cmd.args(["-p", &port.to_string(), "-t", "news", "-v", "-C", "2", "-W", "30"]).args(tls).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().expect("mosquitto_sub (scripts/setup.sh installs mosquitto-clients)")
    };
    let plain = sub(mqtt, &["-h", "127.0.0.1"]);
    let over_tls = sub(mqtts, &["-h", "localhost", "--cafile", &pki.ca]);
    let mut py = Command::new("python3");
    py.arg(peer("ws_topic.py")).args([&ws.to_string(), "news", "2"]);
    let mut browser_like = Peer::spawn("ws_topic.py", py);
    assert_eq!(browser_like.line(Duration::from_secs(30), "the ws subscriber open"), "ready");
    let mut f = Reader::connect(framed);
    f.s.write_all(&resume("news", None)).unwrap();
    assert!(matches!(f.until_subscribed().last(), Some(In::Subscribed(..))));
    stats_when(&admin, "four subscribers, one per port", |v| v["subscriptions"].as_u64().unwrap_or(0) >= 4);
    // Open connections by the protocol of their port (TLS ones apart).
    stats_when(&admin, "one connection open per protocol", |v| v["active_by_protocol"] == serde_json::json!({"mqtt": 1, "mqtt+tls": 1, "ws": 1, "framed": 1}));

    let (status, body) = http(&admin, "POST", "/publish?topic=news", b"from the admin API", None);
    assert_eq!(status, 200, "{body}");
    let mut publish = Command::new("mosquitto_pub");
    publish.args(["-h", "127.0.0.1", "-p", &mqtt.to_string(), "-t", "news", "-q", "1", "-m", "from mosquitto_pub"]);
    let (code, _, err) = run(publish, Duration::from_secs(30));
    assert_eq!(code, 0, "mosquitto_pub: {err}");

    let both = ["news from the admin API", "news from mosquitto_pub"];
    for (what, child) in [("mosquitto_sub", plain), ("mosquitto_sub over TLS", over_tls)] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(), both, "{what}");
    }
    assert_eq!(browser_like.finish_ok(Duration::from_secs(60)), [both[0], both[1], "OK"]);
    let got: Vec<String> = (0..2)
        .map(|_| match f.next() {
            In::Push(_, _, data) => data,
            other => panic!("a push expected on the framed port, got {other:?}"),
        })
        .collect();
    assert_eq!(got, ["from the admin API", "from mosquitto_pub"]);
    // Each worker's counts reach the stats on its own beat: wait for all three.
    let connects = |v: &serde_json::Value| count(v, "mqtt_connects", "3.1.1") + count(v, "mqtt_connects", "5.0");
    stats_when(&admin, "the deliveries and connects counted", |v| {
        v["tls_handshakes"].as_u64().unwrap_or(0) >= 1 && v["push_delivered"].as_u64().unwrap_or(0) >= 8 && connects(v) >= 3
    });
    s.terminate();
}

#[test]
fn mqtt_mqtt_tls_ws_and_framed_ports_share_one_topic_space() {
    every_protocol_hears_both_publishes(&[]);
}

#[test]
fn the_same_on_the_epoll_reactor() {
    every_protocol_hears_both_publishes(&["--io", "epoll"]);
}

/// `megaconn server ARGS` refused before anything starts: exit 2, and
/// stderr says `problem` and `fix`.
fn refused(args: &[&str], problem: &str, fix: &str, fd_limit: Option<u64>) {
    let mut cmd = megaconn();
    cmd.arg("server").args(args).args(["--admin", "off", "--duration", "5s"]);
    if let Some(n) = fd_limit {
        with_fd_limit(&mut cmd, n);
    }
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.contains(problem) && err.contains(fix), "{args:?} should say '{problem}' and '{fix}': {err}");
}

#[test]
fn bad_serve_entries_are_refused_with_the_fix() {
    let pki = Pki::new("ec");
    refused(&["--serve", "ws=24000-24009", "--serve", "mqtt=24005"], "port 24005 is in both", "give it to one entry", None);
    refused(&["--serve", "gopher=24000"], "unknown protocol 'gopher'", "mqtt", None);
    refused(&["--serve", "mqtt+tls=24000"], "needs --tls-cert FILE --tls-key FILE", "--tls-cert", None);
    refused(&["--serve", "mqtt=24000", "--protocol", "ws"], "--protocol with --serve is ambiguous", "write every protocol as a --serve entry", None);
    refused(&["--serve", "mqtt=24000", "--ports", "24001"], "--ports with --serve is ambiguous", "--protocol P --ports R alone", None);
    refused(&["--serve", "mqtt=24000", "--tls-cert", &pki.cert, "--tls-key", &pki.key], "none is", "mqtt+tls=8883", None);
    refused(&["--serve", "framed=24000-24599", "--serve", "ws=24600-24999", "--workers", "1"], "leaves no descriptors", "use fewer ports", Some(1024));
}
