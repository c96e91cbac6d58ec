//! `client --protocol mqtt` (and `bench --protocol mqtt`): megaconn's MQTT
//! load generator against megaconn's own MQTT server and against Debian's
//! mosquitto broker (nobody here wrote it; scripts/setup.sh installs it):
//! connections established and held, every PINGREQ answered, a
//! `mosquitto_pub` message reaching every subscribed connection, QoS 1
//! publishes timed by their PUBACK, and a refused CONNECT counted as
//! failed under its CONNACK code.
use crate::common::*;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A mosquitto broker on a free loopback port, from a minimal config in
/// a temp dir; killed (by PID) when dropped.
pub(crate) struct Mosquitto {
    child: Child,
    dir: std::path::PathBuf,
    pub(crate) port: u16,
}

impl Mosquitto {
    pub(crate) fn start() -> Mosquitto {
        Mosquitto::start_with("")
    }

    /// With `extra` lines in its config (password_file, acl_file, ...).
    pub(crate) fn start_with(extra: &str) -> Mosquitto {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("megaconn-mosquitto-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("mosquitto.conf");
        std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\n{extra}")).unwrap();
        let log = TestLog::new("mosquitto");
        let child = Command::new("/usr/sbin/mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(log.stdio())
            .stderr(log.stdio())
            .spawn()
            .expect("/usr/sbin/mosquitto (scripts/setup.sh installs the mosquitto package)");
        wait_until("mosquitto listens", Duration::from_secs(20), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        Mosquitto { child, dir, port }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An MQTT megaconn server on a free port; (process, admin address, port).
use crate::mqtt::mqtt_server as megaconn_broker;

/// The client's /metrics sample `name` (0 when absent, or while its
/// admin endpoint is not up yet).
fn client_metric(admin: &str, name: &str) -> u64 {
    if std::net::TcpStream::connect(admin).is_err() {
        return 0;
    }
    let (status, body) = http(admin, "GET", "/metrics", b"", None);
    if status != 200 {
        return 0;
    }
    sample(&body, name).unwrap_or(0.0) as u64
}

/// Run `megaconn client --protocol mqtt ARGS --json` against `port`; once
/// its /metrics shows `subscribed` granted subscriptions, `during` runs
/// (a publish). Returns (exit code, summary, stderr).
pub(crate) fn mqtt_client(port: u16, args: &[&str], subscribed: u64, during: impl FnOnce()) -> (i32, Value, String) {
    let admin = format!("127.0.0.1:{}", free_port());
    let mut cmd = megaconn();
    cmd.args(["client", "--protocol", "mqtt", "--ports", &port.to_string(), "--workers", "1", "--json", "--admin", &admin]).args(args);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the client");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    if subscribed > 0 {
        wait_until("every connection subscribed", Duration::from_secs(60), || {
            client_metric(&admin, "megaconn_client_mqtt_subscriptions_total{result=\"granted\"}") >= subscribed
        });
    }
    during();
    let out = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.expect("the client's output"),
        Err(_) => {
            // SAFETY: killing our own child by PID (its waiter has not reaped it).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the MQTT client did not finish");
        }
    };
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), doc["summary"].clone(), stderr)
}

/// `mosquitto_pub` one QoS 0 message to `topic`.
fn mosquitto_pub(port: u16, topic: &str) {
    let st = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", topic, "-m", "hello devices"])
        .status()
        .expect("mosquitto_pub (scripts/setup.sh installs mosquitto-clients)");
    assert!(st.success());
}

/// Every connection held, every heartbeat answered and timed.
fn assert_held_and_beating(s: &Value, n: u64) {
    assert_eq!((s["established"].as_u64(), s["held"].as_u64()), (Some(n), Some(n)), "{s}");
    assert!(s["heartbeats_sent"].as_u64().unwrap() >= n, "every connection sent heartbeats: {s}");
    assert_eq!(s["heartbeats_answered"], s["heartbeats_sent"], "{s}");
    assert_eq!(s["heartbeats_unanswered"], 0, "{s}");
    assert!(s["heartbeat_rtt_ms"]["count"].as_u64().or(s["heartbeat_rtt_ms"]["samples"].as_u64()).unwrap_or(1) > 0, "{s}");
}

#[test]
fn megaconn_mqtt_clients_hold_ping_and_receive_a_publish_from_megaconns_server() {
    let (mut srv, server_admin, port) = megaconn_broker(&[]);
    let n = 40;
    let args = ["--connections", "40", "--rate", "2000", "--heartbeat", "1s", "--hold", "6s", "--subscribe", "news"];
    let (code, s, err) = mqtt_client(port, &args, n, || mosquitto_pub(port, "news"));
    assert_eq!(code, 0, "{err}\n{s}");
    assert_held_and_beating(&s, n);
    assert_eq!(s["mqtt_subscriptions"]["granted"], n, "{s}");
    assert_eq!(s["push"]["received"], n, "the publish reached every subscriber: {s}");
    let (status, body) = http(&server_admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200);
    let st: Value = serde_json::from_str(&body).unwrap();
    assert!(st["mqtt_connects"]["3.1.1"].as_u64().unwrap_or(0) >= n, "the server saw 3.1.1 CONNECTs: {st}");
    srv.terminate();
}

/// `--mqtt-topic-alias-maximum`: megaconn's server sends each topic once
/// with an alias and then the alias alone (its server side is checked
/// against mqtt.js in mqtt_v5.rs); the client resolves them, counts them,
/// and gets every publish under its topic. With 3.1.1 the flag is refused.
#[test]
fn megaconn_mqtt_clients_resolve_the_topic_aliases_a_broker_sends() {
    let (mut srv, server_admin, port) = megaconn_broker(&[]);
    let n = 10;
    let args = ["--connections", "10", "--mqtt-version", "5", "--mqtt-topic-alias-maximum", "4", "--hold", "4s", "--mqtt-subscribe", "fleet/#"];
    let publish = || {
        for topic in ["fleet/alerts", "fleet/alerts", "fleet/firmware", "fleet/alerts"] {
            mosquitto_pub(port, topic);
        }
    };
    let (code, s, err) = mqtt_client(port, &args, n, publish);
    assert_eq!(code, 0, "{err}\n{s}");
    assert_eq!(s["push"]["received"], 4 * n, "every publish reached every subscriber: {s}");
    assert_eq!(s["push"]["topics"]["fleet/alerts"], 3 * n, "under its topic: {s}");
    assert_eq!(s["mqtt_topic_aliases_in"], 2 * n, "the second and third fleet/alerts by alias alone: {s}");
    let st = crate::mqtt::stats_when(&server_admin, "aliases counted", |v| v["mqtt_topic_aliases_out"]["used"] == 2 * n);
    assert_eq!(st["mqtt_topic_aliases_out"]["set"], 2 * n, "{st}");
    srv.terminate();
    let mut cmd = megaconn();
    cmd.args(["client", "--protocol", "mqtt", "--ports", "1", "--connections", "1", "--mqtt-topic-alias-maximum", "4"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("add --mqtt-version 5"), "{err}");
}

#[test]
fn megaconn_mqtt_clients_load_mosquitto_with_v5_wildcards_and_qos1_publishes() {
    let broker = Mosquitto::start();
    let n = 30;
    let args = [
        "--connections",
        "30",
        "--rate",
        "2000",
        "--heartbeat",
        "1s",
        "--hold",
        "6s",
        "--mqtt-version",
        "5",
        "--mqtt-subscribe",
        "fleet/+",
        "--mqtt-qos",
        "1",
        "--request-rate",
        "2/s",
        "--message",
        "reading of {conn}",
        "--mqtt-publish-topic",
        "readings/{conn}",
    ];
    let (code, s, err) = mqtt_client(broker.port, &args, n, || mosquitto_pub(broker.port, "fleet/42"));
    assert_eq!(code, 0, "{err}\n{s}");
    assert_held_and_beating(&s, n);
    assert_eq!(s["mqtt_subscriptions"]["granted"], n, "{s}");
    assert_eq!(s["push"]["received"], n, "{s}");
    assert_eq!(s["push_topics"]["fleet/42"], n, "{s}");
    let r = &s["requests"];
    assert!(r["sent"].as_u64().unwrap() >= n, "{s}");
    assert_eq!(r["replies"], r["sent"], "every QoS 1 PUBLISH got its PUBACK: {s}");
    assert_eq!(r["timeouts"], 0, "{s}");
}

#[test]
fn a_refused_connect_fails_the_connection_under_its_connack_code() {
    let dir = std::env::temp_dir().join(format!("megaconn-mqtt-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef-test-secret").unwrap();
    let wrong = dir.join("wrong");
    std::fs::write(&wrong, "another-secret-another-secret-another-secret").unwrap();
    let sec = secret.display().to_string();
    let (mut srv, _, port) = megaconn_broker(&["--auth", "jwt", "--jwt-secret-file", &sec]);
    // The right secret: every connection's minted token is its password.
    let (code, s, err) = mqtt_client(port, &["--connections", "5", "--heartbeat", "1s", "--hold", "1s", "--jwt-secret-file", &sec], 0, || {});
    assert_eq!(code, 0, "{err}\n{s}");
    assert_held_and_beating(&s, 5);
    // 3.1.1: a wrong password is CONNACK 5 (not authorized).
    let (code, s, _) = mqtt_client(port, &["--connections", "5", "--hold", "0s", "--mqtt-password", "not-a-token"], 0, || {});
    assert_ne!(code, 0, "every connection refused is a failed run: {s}");
    assert_eq!(s["established"], 0, "{s}");
    assert_eq!(s["failed"]["mqtt_connack_5"], 5, "{s}");
    // 5.0: a token signed with another secret is 0x87 (not authorized).
    let w = wrong.display().to_string();
    let (code, s, _) = mqtt_client(port, &["--connections", "5", "--hold", "0s", "--mqtt-version", "5", "--jwt-secret-file", &w], 0, || {});
    assert_ne!(code, 0, "{s}");
    assert_eq!(s["failed"]["mqtt_connack_0x87"], 5, "{s}");
    let _ = std::fs::remove_dir_all(&dir);
    srv.terminate();
}

#[test]
fn bench_runs_mqtt_on_both_ends() {
    let ports = free_ports(2);
    let mut cmd = megaconn();
    cmd.args(["bench", "--protocol", "mqtt", "--connections", "200", "--ports", &ports.arg(), "--hold", "2s", "--heartbeat", "1s", "--rate", "5000", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(120));
    assert_eq!(code, 0, "bench failed: {err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["established"], 200, "{r}");
    assert_eq!(r["server_active_at_hold"], 200, "{r}");
    assert_eq!(r["client"]["heartbeats_answered"], r["client"]["heartbeats_sent"], "{r}");
    assert_eq!(r["client"]["mqtt_subscriptions"]["granted"], 200, "each client subscribed to dev/{{conn}}: {r}");
}
