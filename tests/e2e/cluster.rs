//! Two server nodes in two network namespaces, joined through a real
//! nats-server (Debian's package): a publish on node A reaches the
//! subscribers on A and B exactly once, a unicast through A reaches a
//! connection on B, stopping nats-server makes publishes fail with 503 and
//! /healthz say why, and restarting it restores delivery.
//!
//! On one loopback, with nats-server on a free port: what is not signed
//! with the cluster key reaches no connection, a squatter on a node's
//! subject cannot keep it from starting, and a node authenticates to a
//! NATS server that requires it (and never shows the password).
use crate::common::framed::{resume, In, Reader};
use crate::common::lab::Lab;
use crate::common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

// Every port below is inside a namespace this test made for itself:
// nothing else listens there, so they cannot collide with anything.
const NATS_PORT: &str = "4222";
/// nats-server's monitoring API: who subscribes to what, as the broker sees it.
const NATS_MONITOR: &str = "8222";
const NODE_PORTS: [u16; 2] = [8000, 8001];
const NODE_ADMIN: &str = "127.0.0.1:9100";

/// Node A's namespace (which also runs nats-server) and node B's.
const A: usize = 0;
const B: usize = 1;

/// The subject a topic's messages travel on between nodes.
const NEWS: &str = "megaconn.topic.news";

/// An admin request to a node (its API on the namespace's loopback).
fn admin(lab: &Lab, node: usize, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let (m, p, b) = (method.to_string(), path.to_string(), body.to_vec());
    // Not listening yet (start-up) reads as status 0.
    let (status, text) = lab.within(node, move || match TcpStream::connect(NODE_ADMIN) {
        Ok(_) => http(NODE_ADMIN, &m, &p, &b, None),
        Err(e) => (0, e.to_string()),
    });
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A cluster key file for one test, removed when it drops.
struct KeyFile(std::path::PathBuf);

impl KeyFile {
    fn new(tag: &str) -> KeyFile {
        let p = std::env::temp_dir().join(format!("megaconn-test-{}-{tag}.key", std::process::id()));
        std::fs::write(&p, (0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(tag.len() as u8)).collect::<Vec<_>>()).unwrap();
        KeyFile(p)
    }

    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn key(&self) -> megaconn::cluster::ClusterKey {
        megaconn::cluster::ClusterKey::read(self.arg()).unwrap()
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn nats_server(lab: &Lab) -> Running {
    let mut cmd = lab.command(A, "nats-server");
    cmd.args(["-a", &lab.addr(A).to_string(), "-p", NATS_PORT, "-m", NATS_MONITOR]);
    Running::spawn(cmd)
}

/// Whether nats-server (if up) has a subscription to `subject` from the
/// link of `node` (its connection comes from the node's address).
fn broker_has(lab: &Lab, node: usize, subject: &str) -> bool {
    let url = format!("{}:{NATS_MONITOR}", lab.addr(A));
    let (status, text) = lab.within(A, move || match TcpStream::connect(&url) {
        Ok(_) => http(&url, "GET", "/connz?subs=1", b"", None),
        Err(e) => (0, e.to_string()),
    });
    if status != 200 {
        return false;
    }
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("/connz: {e}: {text}"));
    let ip = lab.addr(node).to_string();
    v["connections"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["ip"] == ip.as_str() && c["subscriptions_list"].as_array().is_some_and(|l| l.iter().any(|s| s == subject)))
}

/// Node B is given a list of NATS servers whose first does not exist: it
/// finds the one that does.
fn node(lab: &Lab, k: usize, id: &str, key: &KeyFile) -> Running {
    let mut cmd = lab.command(k, env!("CARGO_BIN_EXE_megaconn"));
    let ports = format!("{}-{}", NODE_PORTS[0], NODE_PORTS[1]);
    cmd.args(["server", "--ports", &ports, "--workers", "2", "--admin", NODE_ADMIN]);
    let url = format!("nats://{}:{NATS_PORT}", lab.addr(A));
    let urls = if k == B { format!("nats://{}:{NATS_PORT},{url}", lab.addr(7)) } else { url };
    // The core NATS path: what this test checks travels on plain subjects.
    cmd.args(["--cluster", &urls, "--node-id", id, "--cluster-key-file", key.arg(), "--cluster-history", "off"]);
    cmd.args(["--json", "--stats-interval", "200ms", "--duration", "120s"]);
    Running::spawn(cmd)
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u16).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// Connections to one node, and every push each has received so far.
struct Conns {
    socks: Vec<TcpStream>,
    bufs: Vec<Vec<u8>>,
}

impl Conns {
    /// Open `n` connections to the node; the first `subscribed` subscribe
    /// to topic "news".
    fn open(lab: &Lab, node: usize, n: usize, subscribed: usize) -> Conns {
        let socks = lab.within(node, move || {
            (0..n)
                .map(|i| {
                    let mut s = TcpStream::connect(("127.0.0.1", NODE_PORTS[i % 2])).expect("connect to the node");
                    if i < subscribed {
                        s.write_all(&frame(6, b"news")).unwrap();
                    }
                    s.set_nonblocking(true).unwrap();
                    s
                })
                .collect::<Vec<_>>()
        });
        Conns { bufs: vec![Vec::new(); socks.len()], socks }
    }

    /// Push payloads received on each connection since it opened.
    fn pushes(&mut self) -> Vec<Vec<String>> {
        let mut chunk = [0u8; 65536];
        for (s, b) in self.socks.iter_mut().zip(self.bufs.iter_mut()) {
            while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.extend_from_slice(&chunk[..n]);
            }
        }
        self.bufs
            .iter()
            .map(|buf| {
                let (mut out, mut pos) = (Vec::new(), 0);
                while buf.len() >= pos + 3 && buf.len() >= pos + 2 + u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize {
                    let len = u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize;
                    let (kind, payload) = (buf[pos + 2], &buf[pos + 3..pos + 2 + len]);
                    if kind == 8 {
                        let tlen = payload[1] as usize;
                        out.push(String::from_utf8_lossy(&payload[2 + tlen + 20..]).to_string());
                    }
                    pos += 2 + len;
                }
                out
            })
            .collect()
    }

    /// Wait until every connection has received as many pushes as `want`
    /// lists for it (all since it opened), then they must be exactly
    /// those: a push that went where it should not shows up in the lists,
    /// since every check ends with one that reaches everyone after it.
    fn expect(&mut self, what: &str, want: &[&[&str]]) {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.pushes();
            if got.iter().zip(want).all(|(g, w)| g.len() >= w.len()) {
                assert_eq!(got, want, "{what}");
                return;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}: got {got:?}, want {want:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Talk to nats-server as a bare NATS client (its text protocol, not our
/// link): send `ops` after CONNECT and SUB _r, then PING; return what came
/// back once it holds the PONG (every op processed) and `until`.
fn nats_raw(lab: &Lab, ops: Vec<u8>, until: &'static str) -> String {
    let addr = format!("{}:{NATS_PORT}", lab.addr(A));
    lab.within(A, move || nats_raw_at(&addr, ops, until))
}

fn nats_raw_at(addr: &str, ops: Vec<u8>, until: &str) -> String {
    {
        let mut s = TcpStream::connect(addr).expect("connect to nats-server");
        s.write_all(b"CONNECT {\"verbose\":false,\"headers\":true,\"no_responders\":true}\r\nSUB _r 1\r\n").unwrap();
        s.write_all(&ops).unwrap();
        s.write_all(b"PING\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let (mut got, mut chunk, end) = (Vec::new(), [0u8; 4096], Instant::now() + Duration::from_secs(10));
        loop {
            let text = String::from_utf8_lossy(&got).to_string();
            if text.contains("PONG") && text.contains(until) {
                return text;
            }
            assert!(Instant::now() < end, "nats-server did not send {until:?} (and PONG) within 10 s: {text}");
            if let Ok(n) = s.read(&mut chunk) {
                got.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// `HPUB`: a message with headers, as any NATS client can send it.
fn hpub(subject: &str, reply: Option<&str>, headers: &[(&str, &str)], data: &[u8]) -> Vec<u8> {
    let mut h = String::from("NATS/1.0\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    let reply = reply.map(|r| format!(" {r}")).unwrap_or_default();
    let mut op = format!("HPUB {subject}{reply} {} {}\r\n{h}", h.len(), h.len() + data.len()).into_bytes();
    op.extend_from_slice(data);
    op.extend_from_slice(b"\r\n");
    op
}

fn healthy(lab: &Lab, node: usize) -> bool {
    admin(lab, node, "GET", "/healthz", b"").0 == 200
}

fn last_error(lab: &Lab, node: usize) -> String {
    admin(lab, node, "GET", "/stats", b"").1["cluster"]["last_error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn two_nodes_through_nats_deliver_once_route_unicasts_and_survive_an_outage() {
    if !needs_netns() {
        return;
    }
    let lab = Lab::make("cl", 203, 2).unwrap_or_else(|why| panic!("the nodes' namespaces: {why}"));
    assert!(Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success()), "nats-server is not installed: run scripts/setup.sh");
    let mut nats = nats_server(&lab);
    let key = KeyFile::new("two-nodes");
    let (na, _nb) = (node(&lab, A, "A", &key), node(&lab, B, "B", &key));
    wait_until("both nodes healthy with the link up", Duration::from_secs(20), || healthy(&lab, A) && healthy(&lab, B));
    // A second node with A's id is refused at start: it would take A's unicasts.
    let mut twin = lab.command(B, env!("CARGO_BIN_EXE_megaconn"));
    twin.args(["server", "--ports", "8002", "--workers", "1", "--admin", "127.0.0.1:9101", "--node-id", "A"]);
    twin.args(["--cluster", &format!("nats://{}:{NATS_PORT}", lab.addr(A)), "--cluster-key-file", key.arg()]);
    let (code, _, err) = run(twin, Duration::from_secs(30));
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("already has node id 'A'") && err.contains("unique --node-id"), "{err}");
    assert!(healthy(&lab, A), "A is untouched by the refused twin");

    let (mut on_a, mut on_b) = (Conns::open(&lab, A, 4, 2), Conns::open(&lab, B, 4, 2));
    // B subscribes to the topic's subject once it has a subscriber: its
    // stats say so, and so does the broker.
    wait_until("B subscribed to megaconn.topic.news", Duration::from_secs(10), || {
        admin(&lab, B, "GET", "/stats", b"").1["cluster"]["topics"] == 1 && broker_has(&lab, B, NEWS)
    });

    // A topic published on A: its subscribers on A and B, once each.
    let (status, r) = admin(&lab, A, "POST", "/publish?topic=news", b"hello");
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["queued"], 2, "A's own subscribers: {r}");
    let hello: [&[&str]; 4] = [&["hello"], &["hello"], &[], &[]];
    on_a.expect("the topic on A's subscribers", &hello);
    on_b.expect("the topic on B's subscribers", &hello);

    // A broadcast on A: every connection on both nodes, once (and so no
    // connection got the topic that was not subscribed to it).
    let (status, r) = admin(&lab, A, "POST", "/broadcast", b"all");
    assert_eq!(status, 200, "{r}");
    let all: [&[&str]; 4] = [&["hello", "all"], &["hello", "all"], &["all"], &["all"]];
    on_a.expect("the broadcast on A", &all);
    on_b.expect("the broadcast on B", &all);

    // Unicast through A to a connection on B, by its NODE.ID id.
    let (status, list) = admin(&lab, B, "GET", "/connections?limit=10", b"");
    assert_eq!(status, 200, "{list}");
    let ids: HashMap<String, String> =
        list["connections"].as_array().unwrap().iter().map(|c| (c["peer"].as_str().unwrap().to_string(), c["id"].as_str().unwrap().to_string())).collect();
    let id = &ids[&on_b.socks[3].local_addr().unwrap().to_string()];
    assert!(id.starts_with("B."), "{id}");
    let (status, r) = admin(&lab, A, "POST", &format!("/push/{id}"), b"direct");
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["remote"][0]["status"], 200, "{r}");
    on_b.expect("the unicast on B's fourth connection", &[&["hello", "all"], &["hello", "all"], &["all"], &["all", "direct"]]);
    let (status, r) = admin(&lab, A, "POST", "/push/C.1", b"nobody");
    assert_eq!(status, 404, "{r}");
    assert!(r["remote"][0]["detail"]["error"].as_str().unwrap().contains("no node 'C'"), "{r}");

    // Messages from something that is not a megaconn node are refused
    // unanswered; a signed unicast without a target is answered with the
    // reason (on its origin's inbox), a signed topic message too large for
    // a push is dropped (the last check below shows that nothing reached a
    // connection).
    let ops = b"PUB megaconn.node.B _r 2\r\nhi\r\nPUB megaconn.topic.news 4\r\nbare\r\n".to_vec();
    let got = nats_raw(&lab, ops, "PONG");
    assert!(!got.contains("MSG _r"), "an unsigned request is not answered: {got}");
    wait_until("B refuses the bare topic message", Duration::from_secs(5), || {
        last_error(&lab, B).contains("refused an unsigned message on megaconn.topic.news")
    });
    let big = vec![b'x'; 70_000];
    let time = megaconn::cluster::sign::now_ms().to_string();
    let signed =
        megaconn::cluster::sign::Signed { subject: NEWS, origin: "X", target: "", publish_us: "1", time_ms: &time, position: "", follows: "", mqtt: "" };
    let sig = megaconn::cluster::sign::sign(&key.key(), &signed, &big);
    let ops = hpub(NEWS, None, &[("Megaconn-Publish-Us", "1"), ("Megaconn-Origin", "X"), ("Megaconn-Time", &time), ("Megaconn-Signature", &sig)], &big);
    nats_raw(&lab, ops, "PONG");
    wait_until("B refuses the oversized push", Duration::from_secs(5), || last_error(&lab, B).contains("more than a push carries"));
    assert!(healthy(&lab, B), "B is still up");

    // NATS goes away: publishes fail with 503, /healthz says why, nothing
    // is delivered anywhere.
    nats.child.kill().unwrap();
    nats.child.wait().unwrap();
    wait_until("A unhealthy", Duration::from_secs(10), || !healthy(&lab, A));
    let said = na.wait_for(Duration::from_secs(5), "A tells the operator", |v| v["event"] == "cluster_link_down");
    assert!(said["message"].as_str().unwrap().contains("publishes answer 503"), "{said}");
    let (status, h) = admin(&lab, A, "GET", "/healthz", b"");
    assert_eq!((status, h["status"].as_str()), (503, Some("degraded")), "{h}");
    assert!(h["reason"].as_str().unwrap().contains("nats://10.203.0.1:4222"), "{h}");
    let (status, r) = admin(&lab, A, "POST", "/broadcast", b"lost?");
    assert_eq!(status, 503, "{r}");
    assert!(r["error"].as_str().unwrap().contains("down"), "{r}");
    let (_, metrics) = lab.within(A, || http(NODE_ADMIN, "GET", "/metrics", b"", None));
    assert_eq!(sample(&metrics, "megaconn_cluster_link_up"), Some(0.0), "{metrics}");
    assert_eq!(sample(&metrics, "megaconn_cluster_publish_failures_total"), Some(1.0), "{metrics}");

    // NATS back: both links reconnect by themselves, B's subscription is
    // restored at the broker, and delivery resumes. What each connection
    // has now also shows that nothing refused or failed above (the bare
    // and oversized messages, the 503 broadcast) reached any of them, and
    // that the unicast reached only its target.
    let _nats = nats_server(&lab);
    wait_until("both nodes reconnected", Duration::from_secs(20), || healthy(&lab, A) && healthy(&lab, B));
    let (_, s) = admin(&lab, B, "GET", "/stats", b"");
    assert!(s["cluster"]["reconnects"].as_u64() >= Some(1), "{s}");
    wait_until("B's subscription restored at the broker", Duration::from_secs(10), || broker_has(&lab, B, NEWS));
    let (status, r) = admin(&lab, A, "POST", "/publish?topic=news", b"back");
    assert_eq!(status, 200, "{r}");
    let (status, r) = admin(&lab, A, "POST", "/broadcast", b"end");
    assert_eq!(status, 200, "{r}");
    on_a.expect("the last topic and broadcast on A", &[&["hello", "all", "back", "end"], &["hello", "all", "back", "end"], &["all", "end"], &["all", "end"]]);
    on_b.expect(
        "the last topic and broadcast on B",
        &[&["hello", "all", "back", "end"], &["hello", "all", "back", "end"], &["all", "end"], &["all", "direct", "end"]],
    );
    // B's last subscribers leave: B drops the topic's subject.
    drop(on_b);
    wait_until("B unsubscribed from megaconn.topic.news", Duration::from_secs(10), || {
        admin(&lab, B, "GET", "/stats", b"").1["cluster"]["topics"] == 0 && !broker_has(&lab, B, NEWS)
    });
    drop(lab);
}

#[test]
fn a_two_node_push_bench_delivers_every_broadcast_once_and_leaves_nothing() {
    if !needs_netns() {
        return;
    }
    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "push", "--nodes", "2", "--cluster", "nats", "--connections", "2000", "--rate", "5000"]);
    let dir = std::env::temp_dir().join(format!("megaconn-cluster-report-{}", std::process::id()));
    // The nodes run in namespaces the bench makes: their ports are private.
    cmd.args(["--broadcasts", "3", "--broadcast-interval", "500ms", "--hold", "6s", "--ports", "8000-8003", "--json", "--report"]).arg(&dir);
    let mut bench = Peer::spawn("megaconn bench --nodes 2", cmd);
    let pid = bench.child.id();
    let out = bench.finish_ok(Duration::from_secs(180)).join("\n");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let p = &v["push"];
    assert_eq!((p["connections"].as_u64(), p["broadcasts"].as_u64()), (Some(2000), Some(3)), "{p}");
    assert_eq!(p["deliveries"], 6000, "every connection on both nodes got every broadcast: {p}");
    assert_eq!((p["duplicates"].as_u64(), p["gaps"].as_u64()), (Some(0), Some(0)), "{p}");
    let nodes = v["cluster"]["node_stats"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for n in nodes {
        assert_eq!(n["push_delivered"], 3000, "half the connections on each node: {n}");
    }
    assert_eq!(nodes[1]["cluster"]["messages_in"], 3, "n1 got the 3 broadcasts from n0 over NATS: {}", nodes[1]);
    assert_eq!(v["topology"]["nodes"].as_array().unwrap().len(), 2);
    let left = String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).to_string();
    assert!(!left.contains(&format!("megaconn-{pid}-")), "namespaces left: {left}");
    // The nodes' and nats-server's logs, secrets and store went with them.
    let files: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("megaconn-{pid}-")))
        .collect();
    assert!(files.is_empty(), "files left in the temporary directory: {files:?}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["result"]["push"]["deliveries"], 6000, "the report holds the run");
    assert!(std::fs::metadata(dir.join("index.html")).unwrap().len() > 1000);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rolling restart at small scale: node n0 drains over 3 s while a
/// broadcast goes out every second; its clients move to n1 and resume.
#[test]
fn a_rollout_bench_moves_every_client_of_the_drained_node_and_loses_nothing() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "rollout", "--nodes", "2", "--connections", "1000", "--rate", "5000", "--drain-period", "3s"]);
    cmd.args(["--protocol", "ws", "--ports", "8000-8003", "--json"]);
    let mut bench = Peer::spawn("megaconn bench --scenario rollout", cmd);
    let out = bench.finish_ok(Duration::from_secs(180)).join("\n");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let r = &v["rollout"];
    let moved = r["connections_on_node"].as_u64().unwrap();
    assert!(moved > 0 && moved <= 1000, "n0 held a share when it was stopped: {r}");
    assert_eq!((r["lost"].as_u64(), r["duplicates"].as_u64()), (Some(0), Some(0)), "{r}");
    assert_eq!(r["goaways"].as_u64(), Some(moved), "every client of n0 was told to move: {r}");
    assert_eq!(r["reconnected"].as_u64(), Some(moved), "{r}");
    assert_eq!(r["recovered"].as_u64(), Some(moved), "each resumed the broadcasts with nothing missing: {r}");
    assert_eq!((r["not_recovered"].as_u64(), r["killed"].as_bool()), (Some(0), Some(false)), "{r}");
    assert_eq!(r["rehome_ms"]["count"].as_u64(), Some(moved), "{r}");
    assert!(r["restart_s"].as_f64().unwrap() > 0.0 && r["error"].is_null(), "n0 came back: {r}");
    let p = &v["push"];
    assert_eq!(p["connections"], 1000, "{p}");
    assert_eq!(p["deliveries"], p["expected_deliveries"], "every connection got every broadcast: {p}");
}

#[test]
fn cluster_flags_that_cannot_work_are_refused() {
    for (args, says) in [
        (&["--cluster", "http://127.0.0.1:4222"][..], "give nats://HOST:PORT"),
        (&["--cluster", "nats://127.0.0.1:4222", "--node-id", "a.b"][..], "use letters, digits, _ and -"),
        (&["--node-id", "A"][..], "--cluster"),
    ] {
        let mut cmd = megaconn();
        cmd.args(["server", "--ports", &free_port().to_string()]).args(args);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    for (args, says) in [
        (&["--scenario", "push", "--nodes", "2"][..], "add --cluster nats"),
        (&["--nodes", "2", "--cluster", "nats"][..], "add --scenario push"),
        (&["--scenario", "push", "--nodes", "2", "--cluster", "nats", "--topology", "host"][..], "--topology netns"),
        (&["--scenario", "rollout"][..], "add --nodes 2"),
        (&["--scenario", "rollout", "--nodes", "2", "--cluster-history", "off"][..], "drop --cluster-history off"),
    ] {
        let mut cmd = megaconn();
        cmd.arg("bench").args(args);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// nats-server on a free loopback port, with JetStream: its process,
/// client address, monitoring address and store directory.
struct Nats {
    proc: Running,
    addr: String,
    monitor: String,
    store: std::path::PathBuf,
}

/// nats-server on a free loopback port, with `auth` flags (e.g. `--auth T`).
fn loopback_nats(auth: &[&str]) -> Nats {
    let (port, monitor) = (free_port(), free_port());
    let store = std::env::temp_dir().join(format!("megaconn-test-js-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    Nats::start(port, monitor, store, auth)
}

impl Nats {
    fn start(port: u16, monitor: u16, store: std::path::PathBuf, auth: &[&str]) -> Nats {
        let mut cmd = Command::new("nats-server");
        cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-m", &monitor.to_string(), "-js", "-sd"]).arg(&store).args(auth);
        let nats = Running::spawn(cmd);
        let addr = format!("127.0.0.1:{port}");
        let monitor = format!("127.0.0.1:{monitor}");
        wait_until("nats-server listening", Duration::from_secs(10), || TcpStream::connect(&addr).is_ok() && TcpStream::connect(&monitor).is_ok());
        Nats { proc: nats, addr, monitor, store }
    }

    fn port(&self, addr: &str) -> u16 {
        addr.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// Stop it (as a crash would) and start it again on the same ports
    /// and store, after `down`.
    fn restart(self, down: Duration) -> Nats {
        self.restart_with(down, || {})
    }

    /// [`Nats::restart`], running `during` once it is down (its time
    /// counts in `down`).
    fn restart_with(mut self, down: Duration, during: impl FnOnce()) -> Nats {
        let (port, monitor) = (self.port(&self.addr), self.port(&self.monitor));
        self.proc.child.kill().unwrap();
        self.proc.child.wait().unwrap();
        let t0 = Instant::now();
        during();
        std::thread::sleep(down.saturating_sub(t0.elapsed())); // the outage itself, not a wait for a condition
        let store = std::mem::take(&mut self.store);
        Nats::start(port, monitor, store, &[])
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        if !self.store.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.store);
        }
    }
}

/// Whether some client of nats-server subscribes to `subject` (its
/// monitoring API says).
fn routed(monitor: &str, subject: &str) -> bool {
    let (status, text) = http(monitor, "GET", "/connz?subs=1", b"", None);
    status == 200
        && serde_json::from_str::<Value>(&text).is_ok_and(|v| {
            v["connections"].as_array().is_some_and(|cs| cs.iter().any(|c| c["subscriptions_list"].as_array().is_some_and(|l| l.iter().any(|s| s == subject))))
        })
}

/// A node on loopback: (process, its admin address, its first port).
fn loopback_node(url: &str, id: &str, key: &KeyFile, extra: &[&str]) -> (Running, String, u16) {
    let (ports, admin) = (free_ports(1), format!("127.0.0.1:{}", free_port()));
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &ports.arg(), "--workers", "1", "--admin", &admin, "--json", "--stats-interval", "200ms", "--duration", "120s"]);
    cmd.args(["--cluster", url, "--node-id", id, "--cluster-key-file", key.arg()]).args(extra);
    (Running::spawn(cmd), admin, ports.nth(0))
}

fn get(admin: &str, path: &str) -> (u16, Value) {
    let (status, text) = match TcpStream::connect(admin) {
        Ok(_) => http(admin, "GET", path, b"", None),
        Err(e) => (0, e.to_string()),
    };
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn refused(admin: &str, reason: &str) -> u64 {
    get(admin, "/stats").1["cluster"]["refused"][reason].as_u64().unwrap_or(0)
}

#[test]
fn a_bare_nats_client_with_unsigned_forged_or_stale_headers_reaches_no_connection() {
    assert!(Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success()), "nats-server is not installed: run scripts/setup.sh");
    let nats = loopback_nats(&[]);
    let nats_addr = nats.addr.clone();
    let key = KeyFile::new("forged");
    let (_node, admin, port) = loopback_node(&format!("nats://{nats_addr}"), "N", &key, &["--cluster-history", "off"]);
    wait_until("the node healthy with its link up", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(&frame(6, b"news")).unwrap();
    conn.set_nonblocking(true).unwrap();
    let mut conns = Conns { socks: vec![conn], bufs: vec![Vec::new()] };
    wait_until("the node subscribed to the broadcast and the topic", Duration::from_secs(10), || {
        routed(&nats.monitor, "megaconn.broadcast") && routed(&nats.monitor, NEWS) && routed(&nats.monitor, "megaconn.node.N")
    });

    // What finding 4 showed reaching every connection: the header alone.
    let now = megaconn::cluster::sign::now_ms();
    let mut ops = hpub("megaconn.broadcast", None, &[("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2")], b"unsigned");
    // A made-up signature, and a real one over other data.
    let (t, zeros) = (now.to_string(), "0".repeat(64));
    ops.extend(hpub(NEWS, None, &[("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2"), ("Megaconn-Time", &t), ("Megaconn-Signature", &zeros)], b"forged"));
    let sign = |subject: &str, origin: &str, target: &str, time: &str, data: &[u8]| {
        let s = megaconn::cluster::sign::Signed { subject, origin, target, publish_us: "0", time_ms: time, position: "", follows: "", mqtt: "" };
        megaconn::cluster::sign::sign(&key.key(), &s, data)
    };
    let other = sign("megaconn.broadcast", "N2", "", &t, b"other");
    ops.extend(hpub(
        "megaconn.broadcast",
        None,
        &[("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2"), ("Megaconn-Time", &t), ("Megaconn-Signature", &other)],
        b"tampered",
    ));
    // Correctly signed two minutes ago: a replay.
    let old = (now - 120_000).to_string();
    let stale = sign("megaconn.broadcast", "N2", "", &old, b"stale");
    ops.extend(hpub(
        "megaconn.broadcast",
        None,
        &[("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2"), ("Megaconn-Time", &old), ("Megaconn-Signature", &stale)],
        b"stale",
    ));
    // Correctly signed, but it wants the answer on a subject of the
    // sender's choosing instead of its origin's inbox.
    let unicast = sign("megaconn.node.N", "N2", "1", &t, b"elsewhere");
    let h = [("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2"), ("Megaconn-Target", "1"), ("Megaconn-Time", &t), ("Megaconn-Signature", &unicast)];
    ops.extend(hpub("megaconn.node.N", Some("_r"), &h, b"elsewhere"));
    // A node's message captured on the wire and sent again: taken once.
    let captured = sign("megaconn.broadcast", "N2", "", &t, b"captured");
    let h = [("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2"), ("Megaconn-Time", t.as_str()), ("Megaconn-Signature", captured.as_str())];
    ops.extend(hpub("megaconn.broadcast", None, &h, b"captured"));
    ops.extend(hpub("megaconn.broadcast", None, &h, b"captured"));
    // The same signature in other letter cases is the same signature.
    let upper = captured.to_ascii_uppercase();
    let mixed: String = captured.chars().enumerate().map(|(i, c)| if i % 2 == 1 { c.to_ascii_uppercase() } else { c }).collect();
    for flipped in [&upper, &mixed] {
        let h = [("Megaconn-Publish-Us", "0"), ("Megaconn-Origin", "N2"), ("Megaconn-Time", t.as_str()), ("Megaconn-Signature", flipped.as_str())];
        ops.extend(hpub("megaconn.broadcast", None, &h, b"captured"));
    }
    let got = nats_raw_at(&nats_addr, ops, "PONG");
    assert!(!got.contains("MSG _r"), "the node answered on a subject the sender chose: {got}");
    wait_until("the node counts every refusal by reason", Duration::from_secs(10), || {
        refused(&admin, "unsigned") == 1
            && refused(&admin, "forged") == 2
            && refused(&admin, "stale") == 1
            && refused(&admin, "reply") == 1
            && refused(&admin, "replay") == 3
    });
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert_eq!(sample(&metrics, "megaconn_cluster_refused_total{reason=\"forged\"}"), Some(2.0), "{metrics}");
    // A genuine publish through the admin API afterwards arrives; with the
    // captured one (once), it is all the connection ever received.
    let (status, r) = get_post(&admin, "/broadcast", b"genuine");
    assert_eq!(status, 200, "{r}");
    conns.expect("the captured message once, then the genuine broadcast", &[&["captured", "genuine"]]);
}

fn get_post(admin: &str, path: &str, body: &[u8]) -> (u16, String) {
    http(admin, "POST", path, body, None)
}

#[test]
fn a_squatter_on_a_node_subject_cannot_keep_the_node_from_starting() {
    let nats = loopback_nats(&[]);
    let nats_addr = nats.addr.clone();
    // A bare client that answers every request on megaconn.node.S.
    let addr = nats_addr.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let squatter = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"CONNECT {\"verbose\":false,\"headers\":true}\r\nSUB megaconn.node.S 1\r\nPING\r\n").unwrap();
        let (mut got, mut chunk, mut answered) = (Vec::new(), [0u8; 4096], 0);
        let mut ready = Some(ready_tx);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        while let Ok(n) = s.read(&mut chunk) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if text.contains("PONG") {
                if let Some(r) = ready.take() {
                    r.send(()).unwrap();
                }
            }
            // HMSG megaconn.node.S 1 <reply> <hlen> <len>
            let asks: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("HMSG megaconn.node.S ") || l.starts_with("MSG megaconn.node.S "))
                .map(|l| l.split(' ').nth(3).unwrap().to_string())
                .collect();
            for reply in asks.iter().skip(answered) {
                s.write_all(format!("PUB {reply} 5\r\ntaken\r\n").as_bytes()).unwrap();
            }
            answered = asks.len().max(answered);
            if answered > 0 && text.contains("stop") {
                break;
            }
        }
        answered
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).expect("the squatter subscribed");
    let key = KeyFile::new("squat");
    let (node, admin, _) = loopback_node(&format!("nats://{nats_addr}"), "S", &key, &[]);
    // It subscribes to the broadcast only once its id probe is over.
    wait_until("the node started in spite of the squatter", Duration::from_secs(20), || {
        get(&admin, "/healthz").0 == 200 && routed(&nats.monitor, "megaconn.live.broadcast")
    });
    let (status, h) = get(&admin, "/healthz");
    assert_eq!(status, 200, "{h}");
    assert!(refused(&admin, "unsigned") >= 1, "the squatter's answer was counted and ignored");
    drop(node);
    nats_raw_at(&nats_addr, b"PUB megaconn.node.S 4\r\nstop\r\n".to_vec(), "PONG");
    assert!(squatter.join().unwrap() >= 1, "the squatter saw the probe and answered it");
}

#[test]
fn a_node_authenticates_to_nats_and_never_shows_the_password() {
    let key = KeyFile::new("auth");
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-auth", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "tok-9f3e\n").unwrap();
    let (pw_file, secret) = (dir.join("password"), "pw-77c1d0e5");
    std::fs::write(&pw_file, secret).unwrap();

    // A token: refused with a clear reason without it, linked with it.
    let nats = loopback_nats(&["--auth", "tok-9f3e"]);
    let url = format!("nats://{}", nats.addr);
    let (_without, admin, _) = loopback_node(&url, "T1", &key, &[]);
    wait_until("the node without the token says why it is not linked", Duration::from_secs(20), || {
        let (status, h) = get(&admin, "/healthz");
        status == 503 && h["reason"].as_str().is_some_and(|r| r.contains("authorization violation") && r.contains("--cluster-token-file"))
    });
    let (_with, admin, _) = loopback_node(&url, "T2", &key, &["--cluster-token-file", token_file.to_str().unwrap()]);
    wait_until("the node with the token linked", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);

    // User and password: in the URL (which async-nats alone ignores), or
    // from a file; neither shows the password anywhere.
    let nats = loopback_nats(&["--user", "node", "--pass", secret]);
    let addr = nats.addr.clone();
    let (node, admin, _) = loopback_node(&format!("nats://node:{secret}@{addr}"), "U1", &key, &[]);
    wait_until("the node with the password in the URL linked", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let (_, health) = http(&admin, "GET", "/healthz", b"", None);
    assert!(health.contains(&addr) && !health.contains(secret), "{health}");
    let (_, stats) = http(&admin, "GET", "/stats", b"", None);
    assert!(!stats.contains(secret), "{stats}");
    let said = node.wait_for(Duration::from_secs(5), "the cluster event", |v| v["event"] == "cluster");
    assert!(!said.to_string().contains(secret) && said["url"].as_str().unwrap().contains("***@"), "{said}");
    let (_user, admin, _) =
        loopback_node(&format!("nats://{addr}"), "U2", &key, &["--cluster-user", "node", "--cluster-password-file", pw_file.to_str().unwrap()]);
    wait_until("the node with the password file linked", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let (_wrong, admin, _) = loopback_node(&format!("nats://node:wrong@{addr}"), "U3", &key, &[]);
    wait_until("the node with a wrong password is refused", Duration::from_secs(20), || {
        let (status, h) = get(&admin, "/healthz");
        status == 503 && h["reason"].as_str().is_some_and(|r| r.contains("authorization violation"))
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cluster_secrets_that_cannot_work_are_refused_with_the_fix() {
    let key = KeyFile::new("flags");
    let short = std::env::temp_dir().join(format!("megaconn-test-{}-short.key", std::process::id()));
    std::fs::write(&short, b"short").unwrap();
    let text = short.to_str().unwrap();
    for (args, says) in [
        (vec!["--cluster", "nats://127.0.0.1:4222"], "head -c 32 /dev/urandom > cluster.key"),
        (vec!["--cluster", "nats://127.0.0.1:4222", "--cluster-key-file", "/nonexistent/cluster.key"], "--cluster-key-file"),
        (vec!["--cluster", "nats://127.0.0.1:4222", "--cluster-key-file", short.to_str().unwrap()], "fewer than 16"),
        (vec!["--cluster", "nats://127.0.0.1:4222", "--cluster-key-file", key.arg(), "--cluster-token-file", "/nonexistent/t"], "--cluster-token-file"),
        (vec!["--cluster", "nats://127.0.0.1:4222", "--cluster-key-file", key.arg(), "--cluster-nkey-file", text], "nkey seed"),
        (vec!["--cluster", "nats://127.0.0.1:4222", "--cluster-key-file", key.arg(), "--cluster-tls-ca", "/nonexistent/ca.pem"], "--cluster-tls-ca"),
    ] {
        let mut cmd = megaconn();
        cmd.args(["server", "--ports", &free_port().to_string(), "--admin", "off"]).args(&args);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A bad URL is refused without showing its credentials, whatever they hold.
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &free_port().to_string(), "--admin", "off", "--cluster", "nats://u:s3/cr?et@", "--cluster-key-file", key.arg()]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nats://HOST:PORT") && !err.contains("s3/cr"), "{err}");
    let _ = std::fs::remove_file(&short);
}

/// Run openssl (the CLI) in `dir`; panic with its error.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl is installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA, a certificate for 127.0.0.1 and a client certificate, signed by it.
fn pki(dir: &std::path::Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(dir, &[&["req", "-x509", "-days", "2", "-subj", "/CN=test ca", "-keyout", "ca.key", "-out", "ca.pem"][..], &ec].concat());
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    std::fs::write(dir.join("client.ext"), "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n").unwrap();
    for who in ["server", "client"] {
        let (key, csr, pem, ext) = (format!("{who}.key"), format!("{who}.csr"), format!("{who}.pem"), format!("{who}.ext"));
        openssl(dir, &[&["req", "-subj", &format!("/CN={who}"), "-keyout", &key, "-out", &csr][..], &ec].concat());
        openssl(dir, &["x509", "-req", "-days", "2", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-extfile", &ext, "-out", &pem]);
    }
}

#[test]
fn a_node_links_over_tls_with_a_custom_ca_and_a_client_certificate() {
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-tls", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    pki(&dir);
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let nats = loopback_nats(&["--tlsverify", "--tlscert", &file("server.pem"), "--tlskey", &file("server.key"), "--tlscacert", &file("ca.pem")]);
    let key = KeyFile::new("tls");
    let url = format!("nats://{}", nats.addr);
    // No client certificate: NATS refuses the link, and /healthz says so.
    let (_no_cert, admin, _) = loopback_node(&url, "T0", &key, &["--cluster-tls-ca", &file("ca.pem")]);
    wait_until("the node without a client certificate reports an error", Duration::from_secs(20), || {
        let (status, h) = get(&admin, "/healthz");
        status == 503 && h["cluster"]["last_error"].is_string()
    });
    let (_tls, admin, _) = loopback_node(
        &url,
        "T1",
        &key,
        &["--cluster-tls-ca", &file("ca.pem"), "--cluster-tls-cert", &file("client.pem"), "--cluster-tls-key", &file("client.key")],
    );
    wait_until("the node with the CA and its certificate linked", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_authenticates_with_an_nkey_seed_file() {
    let user = nkeys::KeyPair::new_user();
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-nkey", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (seed, conf) = (dir.join("node.nk"), dir.join("nats.conf"));
    std::fs::write(&seed, format!("{}\n", user.seed().unwrap())).unwrap();
    std::fs::write(&conf, format!("authorization {{ users: [ {{ nkey: {} }} ] }}\n", user.public_key())).unwrap();
    let nats = loopback_nats(&["-c", conf.to_str().unwrap()]);
    let (key, url) = (KeyFile::new("nkey"), format!("nats://{}", nats.addr));
    let (_without, admin, _) = loopback_node(&url, "K0", &key, &[]);
    wait_until("the node without the seed is refused", Duration::from_secs(20), || {
        let (status, h) = get(&admin, "/healthz");
        status == 503 && h["reason"].as_str().is_some_and(|r| r.contains("authorization violation"))
    });
    let (_with, admin, _) = loopback_node(&url, "K1", &key, &["--cluster-nkey-file", seed.to_str().unwrap()]);
    wait_until("the node with the seed linked", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The offsets a node's admin API answered for a publish.
fn publish_on(admin: &str, topic: &str, data: &str) -> (u16, Value) {
    let (status, text) = http(admin, "POST", &format!("/publish?topic={topic}"), data.as_bytes(), None);
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A node that comes back to NATS after another (its supervisor, which
/// holds the link, stopped across a NATS restart) gets from the stream
/// what was published while it was away, though its subscriber had heard
/// nothing of the topic before (issue 42, finding 4: it waited for a first
/// live message to know where it was, and so never filled the gap).
#[test]
fn a_node_that_reconnects_late_fills_what_was_published_without_it() {
    assert!(Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success()), "nats-server is not installed: run scripts/setup.sh");
    let nats = loopback_nats(&[]);
    let url = format!("nats://{}", nats.addr);
    let key = KeyFile::new("late");
    let (_a, admin_a, _) = loopback_node(&url, "A", &key, &[]);
    let (b, admin_b, port_b) = loopback_node(&url, "B", &key, &[]);
    wait_until("both nodes healthy with the stream ready", Duration::from_secs(20), || {
        get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200
    });
    let mut on_b = Reader::connect(port_b);
    on_b.s.write_all(&resume("news", None)).unwrap();
    assert_eq!(on_b.until_subscribed(), vec![In::Subscribed(true, 0, 0)]);
    wait_until("B follows the topic", Duration::from_secs(10), || routed(&nats.monitor, "megaconn.live.topic.news"));
    let reconnects = |admin: &str| get(admin, "/stats").1["cluster"]["reconnects"].as_u64().unwrap_or(0);
    // SAFETY: signalling the server process this test started.
    unsafe { libc::kill(b.child.id() as i32, libc::SIGSTOP) };
    let _nats = nats.restart_with(Duration::from_secs(1), || {});
    wait_until("A reconnected", Duration::from_secs(20), || get(&admin_a, "/healthz").0 == 200 && reconnects(&admin_a) >= 1);
    let (status, r) = publish_on(&admin_a, "news", "while-b-was-away");
    assert_eq!(status, 200, "{r}");
    // SAFETY: as above.
    unsafe { libc::kill(b.child.id() as i32, libc::SIGCONT) };
    wait_until("B reconnected", Duration::from_secs(20), || get(&admin_b, "/healthz").0 == 200 && reconnects(&admin_b) >= 1);
    let (status, r) = publish_on(&admin_a, "news", "after");
    assert_eq!(status, 200, "{r}");
    let got = pushes_until(&mut on_b, "after");
    let data: Vec<&str> = got.iter().map(|m| m.2.as_str()).collect();
    assert_eq!(data, ["while-b-was-away", "after"], "B's subscriber, every message once: {got:?}");
    assert_eq!(got[1].0, got[0].0 + 1, "consecutive offsets: {got:?}");
}

/// Pushes on `r` up to and including the one carrying `last`.
fn pushes_until(r: &mut Reader, last: &str) -> Vec<(u64, u32, String)> {
    let mut got = Vec::new();
    loop {
        match r.next() {
            In::Push(offset, epoch, data) => {
                let done = data == last;
                got.push((offset, epoch, data));
                if done {
                    return got;
                }
            }
            other => panic!("a push expected, got {other:?}"),
        }
    }
}

#[test]
fn with_jetstream_a_client_resumes_on_another_node_and_a_nats_restart_loses_nothing() {
    assert!(Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success()), "nats-server is not installed: run scripts/setup.sh");
    let nats = loopback_nats(&[]);
    let url = format!("nats://{}", nats.addr);
    let key = KeyFile::new("jetstream");
    // The stream keeps every message of the run (--history): a node that
    // comes back later than the other would otherwise find the oldest of
    // what it missed trimmed (counted as gap_lost).
    let (_a, admin_a, port_a) = loopback_node(&url, "A", &key, &["--history", "10000"]);
    let (_b, admin_b, port_b) = loopback_node(&url, "B", &key, &["--history", "10000"]);
    wait_until("both nodes healthy with the stream ready", Duration::from_secs(20), || {
        get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200
    });

    // A subscriber on A; B has none of the topic, so it follows nothing of it.
    let mut on_a = Reader::connect(port_a);
    on_a.s.write_all(&resume("news", None)).unwrap();
    assert_eq!(on_a.until_subscribed(), vec![In::Subscribed(true, 0, 0)]);
    wait_until("A follows what the stream republishes of the topic", Duration::from_secs(10), || routed(&nats.monitor, "megaconn.live.topic.news"));
    // Offsets are the cluster's: a publish on B continues A's.
    let mut offsets = Vec::new();
    for (admin, data) in [(&admin_a, "m1"), (&admin_a, "m2"), (&admin_a, "m3"), (&admin_b, "m4")] {
        let (status, r) = publish_on(admin, "news", data);
        assert_eq!(status, 200, "{r}");
        offsets.push(r["seq"][0].as_u64().unwrap());
    }
    assert_eq!(offsets, [1, 2, 3, 4]);
    let got = pushes_until(&mut on_a, "m4");
    let epoch = got[0].1;
    assert_eq!(got, (1..=4).map(|i| (i, epoch, format!("m{i}"))).collect::<Vec<_>>(), "A's subscriber, in the stream's order");
    drop(on_a);
    for (admin, data) in [(&admin_b, "m5"), (&admin_b, "m6"), (&admin_a, "m7")] {
        let (status, r) = publish_on(admin, "news", data);
        assert_eq!(status, 200, "{r}");
    }
    // It comes back on B with A's position: exactly what it missed, read
    // from the stream (B's own history never had the topic).
    let mut on_b = Reader::connect(port_b);
    on_b.s.write_all(&resume("news", Some((epoch, 4)))).unwrap();
    let mut want: Vec<In> = (5..=7).map(|i| In::Push(i, epoch, format!("m{i}"))).collect();
    want.push(In::Subscribed(true, epoch, 7));
    assert_eq!(on_b.until_subscribed(), want, "exactly the missed ones, then the answer");
    assert!(get(&admin_b, "/stats").1["cluster"]["history"]["fetches"].as_u64() >= Some(1));
    // And one on A again, from the same position.
    let mut on_a = Reader::connect(port_a);
    on_a.s.write_all(&resume("news", Some((epoch, 7)))).unwrap();
    assert_eq!(on_a.until_subscribed(), vec![In::Subscribed(true, epoch, 7)]);
    wait_until("B follows the topic", Duration::from_secs(10), || get(&admin_b, "/stats").1["cluster"]["topics"] == 1);

    // Publishes on both nodes while NATS is killed and, 3 s later,
    // started again on the same store: every publish answered 200 reaches
    // both subscribers exactly once, in one order, with no offset skipped.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // One publisher per node, at once: the two contend for the next offset.
    let publishers: Vec<_> = [admin_a.clone(), admin_b.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, admin)| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                for i in 0..1000 {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let data = format!("p{n}-{i}");
                    answers.push((data.clone(), publish_on(&admin, "news", &data).0));
                    std::thread::sleep(Duration::from_millis(10)); // pacing of the load, not a wait
                }
                answers
            })
        })
        .collect();
    wait_until("some publishes before the outage", Duration::from_secs(10), || get(&admin_b, "/stats").1["cluster"]["messages_in"].as_u64() >= Some(20));
    // While NATS is down, a publish is refused, never taken and lost:
    // checked once the node has seen the link go (the publishers' own
    // timing may or may not fall in the outage).
    let mut refused_in_outage = None;
    let nats = nats.restart_with(Duration::from_secs(3), || {
        wait_until("A sees the link down", Duration::from_secs(10), || get(&admin_a, "/healthz").0 == 503);
        refused_in_outage = Some(publish_on(&admin_a, "news", "in-the-outage").0);
    });
    wait_until("both nodes reconnected", Duration::from_secs(20), || get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200);
    wait_until("some publishes after the outage", Duration::from_secs(20), || get(&admin_b, "/stats").1["cluster"]["reconnects"].as_u64() >= Some(1));
    std::thread::sleep(Duration::from_secs(1)); // a second more of load after the reconnect
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers: Vec<(String, u16)> = publishers.into_iter().flat_map(|p| p.join().unwrap()).collect();
    let (status, r) = publish_on(&admin_a, "news", "end");
    assert_eq!(status, 200, "{r}");
    let (on_a_got, on_b_got) = (pushes_until(&mut on_a, "end"), pushes_until(&mut on_b, "end"));
    let status_of = |d: &str| answers.iter().find(|a| a.0 == d).map(|a| a.1);
    let only = |x: &[(u64, u32, String)], y: &[(u64, u32, String)]| -> Vec<(u64, String, Option<u16>)> {
        x.iter().filter(|m| !y.contains(m)).map(|m| (m.0, m.2.clone(), status_of(&m.2))).collect()
    };
    let (only_a, only_b) = (only(&on_a_got, &on_b_got), only(&on_b_got, &on_a_got));
    if !(only_a.is_empty() && only_b.is_empty()) {
        let (a, b) = (get(&admin_a, "/stats").1, get(&admin_b, "/stats").1);
        panic!(
            "both subscribers get the same messages at the same offsets; only A's: {only_a:?}, only B's: {only_b:?}; A's cluster: {}; B's: {}",
            a["cluster"], b["cluster"]
        );
    }
    let offsets: Vec<u64> = on_a_got.iter().map(|m| m.0).collect();
    assert_eq!(offsets, (8..8 + offsets.len() as u64).collect::<Vec<_>>(), "no offset skipped, none twice");
    assert!(on_a_got.iter().all(|m| m.1 == epoch), "the file store kept the epoch through the restart");
    let delivered: std::collections::HashSet<&str> = on_a_got.iter().map(|m| m.2.as_str()).collect();
    let ok: Vec<&str> = answers.iter().filter(|a| a.1 == 200).map(|a| a.0.as_str()).collect();
    assert!(matches!(refused_in_outage, Some(503 | 504)), "a publish during the outage is refused: {refused_in_outage:?}");
    assert!(!delivered.contains("in-the-outage"), "a refused publish is not delivered");
    let missing: Vec<&&str> = ok.iter().filter(|d| !delivered.contains(**d)).collect();
    assert!(missing.is_empty(), "answered 200 but never delivered: {missing:?}");
    let (_, stats) = get(&admin_b, "/stats");
    let h = &stats["cluster"]["history"];
    // B itself stored every publish it answered 200 (m4, m5, m6 and its
    // publisher's), in the stream.
    let ok_on_b = ok.iter().filter(|d| d.starts_with("p1-")).count() as u64 + 3;
    assert!(h["stored"].as_u64() >= Some(ok_on_b), "B stored each of the {ok_on_b} publishes it answered 200: {h}");
    for admin in [&admin_a, &admin_b] {
        let h = &get(admin, "/stats").1["cluster"]["history"];
        assert_eq!(h["gap_lost"], 0, "the stream had all a node missed: {h}");
    }
    drop(nats);
}

#[test]
fn a_nats_server_without_jetstream_is_named_with_the_fix() {
    let (port, monitor) = (free_port(), free_port());
    let mut cmd = Command::new("nats-server");
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-m", &monitor.to_string()]);
    let _nats = Running::spawn(cmd);
    wait_until("nats-server listening", Duration::from_secs(10), || TcpStream::connect(("127.0.0.1", port)).is_ok());
    let key = KeyFile::new("nojs");
    let (ports, admin) = (free_ports(1), format!("127.0.0.1:{}", free_port()));
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &ports.arg(), "--workers", "1", "--admin", &admin, "--duration", "60s"]);
    cmd.args(["--cluster", &format!("nats://127.0.0.1:{port}"), "--node-id", "A", "--cluster-key-file", key.arg()]);
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("no JetStream") && err.contains("nats-server -js") && err.contains("--cluster-history off"), "{err}");
}

#[test]
fn with_memory_storage_a_nats_restart_starts_a_new_epoch_and_old_positions_are_not_recovered() {
    let nats = loopback_nats(&[]);
    let url = format!("nats://{}", nats.addr);
    let key = KeyFile::new("memory");
    let (_a, admin, port) = loopback_node(&url, "A", &key, &["--cluster-storage", "memory"]);
    wait_until("the node healthy with the stream ready", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let (status, r) = publish_on(&admin, "news", "before");
    assert_eq!((status, r["seq"][0].as_u64()), (200, Some(1)), "{r}");
    let (_, h) = get(&admin, "/history?topic=news&since=0");
    let old_epoch = h["epoch"].as_u64().unwrap() as u32;
    let nats = nats.restart(Duration::ZERO);
    wait_until("the node reconnected", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    // The stream is gone with NATS's memory: the node makes it again and
    // the topic starts over, in a new epoch.
    let (status, r) = publish_on(&admin, "news", "after");
    assert_eq!((status, r["seq"][0].as_u64()), (200, Some(1)), "{r}");
    let mut c = Reader::connect(port);
    c.s.write_all(&resume("news", Some((old_epoch, 1)))).unwrap();
    let got = c.until_subscribed();
    let In::Subscribed(false, epoch, 1) = got[got.len() - 1] else { panic!("not recovered, in the new epoch: {got:?}") };
    assert_ne!(epoch, old_epoch);
    drop(nats);
}

#[test]
fn a_message_written_into_the_stream_by_a_stranger_is_refused_and_blocks_no_publish() {
    let nats = loopback_nats(&[]);
    let key = KeyFile::new("stranger");
    let (_a, admin, port) = loopback_node(&format!("nats://{}", nats.addr), "A", &key, &[]);
    wait_until("the node healthy with the stream ready", Duration::from_secs(20), || get(&admin, "/healthz").0 == 200);
    let mut c = Reader::connect(port);
    c.s.write_all(&resume("news", None)).unwrap();
    assert_eq!(c.until_subscribed(), vec![In::Subscribed(true, 0, 0)]);
    wait_until("the node follows the topic", Duration::from_secs(10), || routed(&nats.monitor, "megaconn.live.topic.news"));
    // Anyone allowed to publish on the stream's subjects can store a message there.
    let got = nats_raw_at(&nats.addr, b"PUB megaconn.log.topic.news 6\r\nforged\r\n".to_vec(), "PONG");
    assert!(!got.contains("-ERR"), "{got}");
    // Refused where the node sees it: live, and also from the stream when
    // the follower's first catch-up read runs after the message was stored
    // (then it is counted twice).
    wait_until("the node refuses the stranger's message", Duration::from_secs(10), || refused(&admin, "unsigned") >= 1);
    let (status, r) = publish_on(&admin, "news", "genuine");
    assert_eq!(status, 200, "the topic goes on after it: {r}");
    let In::Push(1, epoch, data) = c.next() else { panic!("the genuine message, at offset 1 of a new epoch") };
    assert_eq!((data.as_str(), epoch != 0), ("genuine", true));
}

/// The raw bytes of the stream's first message of `subject` as any NATS
/// client reads them (JetStream's direct get): its headers and payload.
fn stored_first(nats_addr: &str, subject: &str, payload: &str) -> (Vec<(String, String)>, String) {
    let ask = format!("{{\"next_by_subj\":\"{subject}\",\"seq\":1}}");
    let mut op = format!("PUB $JS.API.DIRECT.GET.MEGACONN _r {}\r\n", ask.len()).into_bytes();
    op.extend_from_slice(ask.as_bytes());
    op.extend_from_slice(b"\r\n");
    let got = nats_raw_at(nats_addr, op, payload);
    let msg = &got[got.find("HMSG _r").unwrap_or_else(|| panic!("no answer from the direct get: {got}"))..];
    let mut lines = msg.split("\r\n").skip(1);
    assert_eq!(lines.next(), Some("NATS/1.0"), "{msg}");
    let headers = lines.by_ref().take_while(|l| !l.is_empty()).filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    (headers, lines.next().unwrap_or_default().to_string())
}

/// A co-tenant allowed to publish on the stream's subjects stores a copy
/// of an old signed message again (issue 42, finding 9): the copy keeps
/// its signature but not its place, so every node skips it and counts it;
/// later publishes through either node are answered 200 at the next
/// offsets and reach subscribers, and a resume from the start gets each
/// offset's own payload. Before the fix the publishing node took the copy
/// as the topic's head, gave the next message an offset already used,
/// its own follower dropped that as already seen and the publish was
/// answered 504.
#[test]
fn an_old_signed_message_stored_again_by_a_co_tenant_poisons_nothing() {
    let nats = loopback_nats(&[]);
    let url = format!("nats://{}", nats.addr);
    let key = KeyFile::new("poison");
    let (_a, admin_a, port_a) = loopback_node(&url, "A", &key, &[]);
    let (_b, admin_b, port_b) = loopback_node(&url, "B", &key, &[]);
    wait_until("both nodes healthy with the stream ready", Duration::from_secs(20), || {
        get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200
    });
    // A subscriber on each node: both follow the topic (a publishing node
    // that follows it answers once its own copy came back in order).
    let (mut on_a, mut on_b) = (Reader::connect(port_a), Reader::connect(port_b));
    for (r, admin) in [(&mut on_a, &admin_a), (&mut on_b, &admin_b)] {
        r.s.write_all(&resume("news", None)).unwrap();
        assert_eq!(r.until_subscribed(), vec![In::Subscribed(true, 0, 0)]);
        wait_until("the node follows the topic", Duration::from_secs(10), || get(admin, "/stats").1["cluster"]["topics"] == 1);
    }
    for (i, data) in ["m1", "m2", "m3"].iter().enumerate() {
        let (status, r) = publish_on(&admin_a, "news", data);
        assert_eq!((status, r["seq"][0].as_u64()), (200, Some(i as u64 + 1)), "{r}");
    }
    // The first message, as stored, written back with its signed headers
    // (the stream's own Nats-* ones dropped, so it is not a duplicate).
    let (headers, payload) = stored_first(&nats.addr, "megaconn.log.topic.news", "m1");
    assert_eq!(payload, "m1");
    let signed: Vec<(&str, &str)> = headers.iter().filter(|(k, _)| k.starts_with("Megaconn-")).map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert!(signed.iter().any(|(k, _)| *k == "Megaconn-Signature"), "{headers:?}");
    let got = nats_raw_at(&nats.addr, hpub("megaconn.log.topic.news", None, &signed, b"m1"), "PONG");
    assert!(!got.contains("-ERR"), "{got}");
    let stored = |admin: &str| get(admin, "/stats").1["cluster"]["history"]["stored"].as_u64().unwrap_or(0);
    // Later publishes through both nodes continue where the topic is.
    for (admin, data, offset) in [(&admin_a, "m4", 4), (&admin_b, "m5", 5), (&admin_a, "m6", 6)] {
        let (status, r) = publish_on(admin, "news", data);
        assert_eq!((status, r["seq"][0].as_u64()), (200, Some(offset)), "{data}: {r}");
    }
    assert_eq!((stored(&admin_a), stored(&admin_b)), (5, 1));
    let got = pushes_until(&mut on_b, "m6");
    let epoch = got[0].1;
    assert_eq!(got, (1..=6).map(|i| (i, epoch, format!("m{i}"))).collect::<Vec<_>>(), "B's subscriber: every message once, at its offset");
    assert_eq!(pushes_until(&mut on_a, "m6"), got, "A's subscriber: the same");
    // A node that never followed the topic answers a resume from the
    // stream: each offset with its own payload, the copy nowhere.
    let (_c, admin_c, port_c) = loopback_node(&url, "C", &key, &[]);
    wait_until("C healthy", Duration::from_secs(20), || get(&admin_c, "/healthz").0 == 200);
    let mut on_c = Reader::connect(port_c);
    on_c.s.write_all(&resume("news", Some((epoch, 0)))).unwrap();
    let mut want: Vec<In> = (1..=6).map(|i| In::Push(i, epoch, format!("m{i}"))).collect();
    want.push(In::Subscribed(true, epoch, 6));
    assert_eq!(on_c.until_subscribed(), want, "a resume from the start on C");
    // The copy was seen out of place, counted in /stats and /metrics.
    let poisoned = |admin: &str| get(admin, "/stats").1["cluster"]["history"]["poisoned"].as_u64().unwrap_or(0);
    assert!(poisoned(&admin_a) >= 1, "A skipped the copy: {}", get(&admin_a, "/stats").1["cluster"]);
    assert!(poisoned(&admin_c) >= 1, "C skipped the copy: {}", get(&admin_c, "/stats").1["cluster"]);
    let (_, metrics) = http(&admin_a, "GET", "/metrics", b"", None);
    let line = metrics.lines().find(|l| l.starts_with("megaconn_cluster_history_poisoned_total ")).unwrap_or_default();
    assert!(line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) >= Some(1.0), "/metrics: {line:?}");
    drop(nats);
}

/// An HS256 token for `sub` (PyJWT, by tests/peers/jwt_keys.py).
fn pyjwt_token(secret_dir: &std::path::Path, sub: &str) -> String {
    let out = Command::new("python3").arg(peer("jwt_keys.py")).arg("mint").arg(secret_dir).args([sub, "60", "news"]).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_push_to_a_user_reaches_its_connections_on_every_node_once() {
    let nats = loopback_nats(&[]);
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-users", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret"), "the cluster's users test secret, 32+ bytes\n").unwrap();
    let secret = dir.join("secret").display().to_string();
    let (key, url) = (KeyFile::new("users"), format!("nats://{}", nats.addr));
    let auth = ["--auth", "jwt", "--jwt-secret-file", &secret];
    let (_a, admin_a, port_a) = loopback_node(&url, "UA", &key, &auth);
    let (_b, admin_b, port_b) = loopback_node(&url, "UB", &key, &auth);
    wait_until("both nodes linked", Duration::from_secs(20), || get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200);
    wait_until("both nodes hear per-user pushes", Duration::from_secs(10), || routed(&nats.monitor, "megaconn.users"));
    // alice: two connections on A, one on B; bob: one on B.
    let conn = |port: u16, sub: &str| {
        let mut r = Reader::connect(port);
        r.s.write_all(&frame(13, pyjwt_token(&dir, sub).as_bytes())).unwrap();
        r.s.write_all(&resume("news", None)).unwrap();
        assert!(matches!(r.until_subscribed()[..], [In::Subscribed(..)]), "{sub} authenticated and subscribed");
        r
    };
    let mut alice = vec![conn(port_a, "alice"), conn(port_a, "alice"), conn(port_b, "alice")];
    let mut bob = conn(port_b, "bob");
    let (status, body) = get_post(&admin_a, "/push/user/alice", b"for alice");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"queued\":2"), "A's own two: {body}");
    for r in &mut alice {
        assert!(matches!(r.next(), In::Push(0, 0, ref d) if d == "for alice"));
    }
    // Bob heard nothing: the next thing he gets is a topic message after it.
    let (status, _) = publish_on(&admin_b, "news", "news for all");
    assert_eq!(status, 200);
    assert!(matches!(bob.next(), In::Push(_, _, ref d) if d == "news for all"), "nothing for alice reached bob");
    for r in &mut alice {
        assert!(matches!(r.next(), In::Push(_, _, ref d) if d == "news for all"), "alice's pushes each came once");
    }
    // Disconnect on B: alice's three go, on both nodes.
    let (status, body) = get_post(&admin_b, "/disconnect/user/alice", b"");
    assert_eq!(status, 200, "{body}");
    for r in &mut alice {
        let mut rest = Vec::new();
        let _ = r.s.read_to_end(&mut rest);
    }
    wait_until("alice's connections closed on both nodes", Duration::from_secs(10), || {
        let closed = |admin: &str| get(admin, "/stats").1["close_reasons"]["disconnected"].as_u64().unwrap_or(0);
        closed(&admin_a) == 2 && closed(&admin_b) == 1
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn presence_in_a_cluster_counts_every_nodes_subscribers() {
    let nats = loopback_nats(&[]);
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-presence", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret"), "the cluster's presence test secret, 32+ bytes\n").unwrap();
    let secret = dir.join("secret").display().to_string();
    let (key, url) = (KeyFile::new("presence"), format!("nats://{}", nats.addr));
    let auth = ["--auth", "jwt", "--jwt-secret-file", &secret];
    let (_a, admin_a, port_a) = loopback_node(&url, "PA", &key, &auth);
    let (_b, admin_b, port_b) = loopback_node(&url, "PB", &key, &auth);
    wait_until("both nodes linked", Duration::from_secs(20), || get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200);
    wait_until("both nodes answer presence questions", Duration::from_secs(10), || routed(&nats.monitor, "megaconn.presence"));
    let conn = |port: u16, sub: &str| {
        let mut r = Reader::connect(port);
        r.s.write_all(&frame(13, pyjwt_token(&dir, sub).as_bytes())).unwrap();
        r.s.write_all(&resume("news", None)).unwrap();
        assert!(matches!(r.until_subscribed()[..], [In::Subscribed(..)]));
        r
    };
    let _held = [conn(port_a, "alice"), conn(port_a, "alice"), conn(port_b, "alice"), conn(port_b, "bob")];
    for (admin, other) in [(&admin_a, "PB"), (&admin_b, "PA")] {
        let (status, p) = get(admin, "/presence?topic=news");
        assert_eq!(status, 200, "{p}");
        assert_eq!(p["connections"], 4, "{p}");
        assert_eq!(p["users"], serde_json::json!([{"user": "alice", "connections": 3}, {"user": "bob", "connections": 1}]), "{p}");
        assert_eq!(p["other_nodes"], serde_json::json!([other]), "{p}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WebSocket by hand to 127.0.0.1:`port` with a bearer token, subscribed
/// to "news"; reads its text messages.
fn ws_with_token(port: u16, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /?subscribe=news HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "the upgrade answered");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s
}

/// The next text message on a WebSocket (short, unfragmented: the server's).
fn ws_text(s: &mut TcpStream) -> String {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[0], 0x81, "a final text frame");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).unwrap();
            u16::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    String::from_utf8(p).unwrap()
}

#[test]
fn presence_notices_reach_subscribers_on_every_node() {
    let nats = loopback_nats(&[]);
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-notices", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret"), "the cluster's notices test secret, 32+ bytes\n").unwrap();
    let secret = dir.join("secret").display().to_string();
    let (key, url) = (KeyFile::new("notices"), format!("nats://{}", nats.addr));
    let flags = ["--protocol", "ws", "--auth", "jwt", "--jwt-secret-file", &secret, "--presence-notices"];
    let (_a, admin_a, port_a) = loopback_node(&url, "NA", &key, &flags);
    let (_b, admin_b, port_b) = loopback_node(&url, "NB", &key, &flags);
    wait_until("both nodes linked", Duration::from_secs(20), || get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200);
    wait_until("both nodes hear notices", Duration::from_secs(10), || routed(&nats.monitor, "megaconn.notices"));
    let mut alice = ws_with_token(port_a, &pyjwt_token(&dir, "alice"));
    // alice hears her own join first (her node's supervisor tells every worker).
    let first: Value = serde_json::from_str(&ws_text(&mut alice)).unwrap();
    assert_eq!(first, serde_json::json!({"type": "join", "topic": "news", "user": "alice"}));
    let bob = ws_with_token(port_b, &pyjwt_token(&dir, "bob"));
    let m: Value = serde_json::from_str(&ws_text(&mut alice)).unwrap();
    assert_eq!(m, serde_json::json!({"type": "join", "topic": "news", "user": "bob"}), "bob joined on the other node");
    drop(bob);
    let m: Value = serde_json::from_str(&ws_text(&mut alice)).unwrap();
    assert_eq!(m, serde_json::json!({"type": "leave", "topic": "news", "user": "bob"}));
    let _ = std::fs::remove_dir_all(&dir);
}

/// nats-server and two MQTT nodes, `{tag}A` and `{tag}B`, linked and
/// both subscribed to `subject`: (NATS, the key, its URL, the nodes).
fn two_mqtt_nodes(tag: &str, subject: &str) -> (Nats, KeyFile, String, [(Running, String, u16); 2]) {
    two_mqtt_nodes_with(tag, subject, &[])
}

/// [`two_mqtt_nodes`] with `extra` flags on both nodes.
fn two_mqtt_nodes_with(tag: &str, subject: &str, extra: &[&str]) -> (Nats, KeyFile, String, [(Running, String, u16); 2]) {
    let nats = loopback_nats(&[]);
    let (key, url) = (KeyFile::new(&format!("mqtt-{tag}")), format!("nats://{}", nats.addr));
    let mut args = vec!["--protocol", "mqtt"];
    args.extend_from_slice(extra);
    let nodes = [loopback_node(&url, &format!("{tag}A"), &key, &args), loopback_node(&url, &format!("{tag}B"), &key, &args)];
    wait_until("both nodes linked", Duration::from_secs(20), || nodes.iter().all(|(_, admin, _)| get(admin, "/healthz").0 == 200));
    wait_until(&format!("both nodes take {subject}"), Duration::from_secs(10), || {
        let (status, text) = http(&nats.monitor, "GET", "/connz?subs=1", b"", None);
        status == 200 && text.matches(&format!("\"{subject}\"")).count() == 2
    });
    (nats, key, url, nodes)
}

/// Issue 62, finding 1, across the cluster: alice's session kept on node A is not
/// handed to mallory on node B (refused 0x87 / 5 there); alice on B gets it.
#[test]
fn another_user_on_another_node_gets_nothing_of_a_session() {
    let (dir, secret) = crate::mqtt_owners::secret("hijack-cluster");
    let auth = ["--auth", "jwt", "--jwt-secret-file", &secret];
    let (_nats, _key, _url, [(_a, admin_a, port_a), (_b, admin_b, port_b)]) = two_mqtt_nodes_with("O", "megaconn.sessions.take", &auth);
    wait_until("each node heard the other", Duration::from_secs(10), || [&admin_a, &admin_b].iter().all(|a| get(a, "/stats").1["cluster"]["peers"] == 1));
    crate::mqtt_owners::owners("hijack", &[port_a.to_string(), admin_a.clone(), secret.clone(), port_b.to_string(), admin_b.clone()]);
    let a = get(&admin_a, "/stats").1;
    let b = get(&admin_b, "/stats").1;
    assert_eq!((b["mqtt_sessions"]["moved_in"].as_u64(), a["mqtt_sessions"]["handed_over"].as_u64()), (Some(1), Some(1)), "alice's session moved once");
    let _ = std::fs::remove_dir_all(&dir);
}

fn retained_stats(admin: &str) -> Value {
    get(admin, "/stats").1["mqtt_retained"].clone()
}

/// Every node keeps the cluster's whole retained set. A message retained
/// on A while no node follows its topic reaches a later subscriber on B
/// (it came on megaconn.retained); C, started after it, takes it from
/// the others' sets when its link comes up; a clear on A empties every
/// node's set. C, stopped before that clear and started again from its
/// --mqtt-retained-file (which still holds the message), hears the clear
/// in its sync and drops it. A stranger on NATS can put nothing in it:
/// unsigned, or signed for a wildcard topic, it is refused and counted.
#[test]
fn every_node_keeps_the_clusters_retained_messages_also_one_started_later() {
    use crate::mqtt::mosquitto_sub_first;
    let (nats, key, url, [(_a, admin_a, _), (_b, admin_b, port_b)]) = two_mqtt_nodes("R", "megaconn.retained");
    assert_eq!(get_post(&admin_a, "/publish?topic=r/one&retain=1&qos=1", b"v1").0, 200);
    wait_until("B keeps A's retained message", Duration::from_secs(10), || retained_stats(&admin_b)["messages"] == 1);
    assert_eq!(mosquitto_sub_first(port_b, "r/+", 1), ["1 r/one v1"], "a subscriber on B gets it retained");

    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-retained-c", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.json").display().to_string();
    let c_args = ["--protocol", "mqtt", "--mqtt-retained-file", file.as_str()];
    let (mut node_c, admin_c, port_c) = loopback_node(&url, "RC", &key, &c_args);
    wait_until("C linked and synced", Duration::from_secs(20), || retained_stats(&admin_c)["synced"] == 1);
    let c = retained_stats(&admin_c);
    assert_eq!((c["messages"].as_u64(), c["stored"].as_u64()), (Some(1), Some(1)), "A's and B's copies of one message: kept once: {c}");
    assert_eq!(mosquitto_sub_first(port_c, "r/one", 1), ["1 r/one v1"], "a subscriber on C gets it retained");

    // A stranger on NATS: unsigned, then signed with the cluster's key
    // but for a wildcard topic.
    let now = megaconn::cluster::sign::now_ms().to_string();
    let mqtt = r#"{"qos":0,"retain":true}"#;
    let mut ops = hpub("megaconn.retained", None, &[("Megaconn-Target", "r/two"), ("Megaconn-Publish-Us", "9"), ("Megaconn-Mqtt", mqtt)], b"stranger");
    let signed = megaconn::cluster::sign::Signed {
        subject: "megaconn.retained",
        origin: "RX",
        target: "r/+",
        publish_us: "9",
        time_ms: &now,
        position: "",
        follows: "",
        mqtt,
    };
    let signature = megaconn::cluster::sign::sign(&key.key(), &signed, b"wild");
    let h = [
        ("Megaconn-Target", "r/+"),
        ("Megaconn-Publish-Us", "9"),
        ("Megaconn-Mqtt", mqtt),
        ("Megaconn-Origin", "RX"),
        ("Megaconn-Time", &now),
        ("Megaconn-Signature", &signature),
    ];
    ops.extend(hpub("megaconn.retained", None, &h, b"wild"));
    nats_raw_at(&nats.addr, ops, "PONG");
    wait_until("B refused both", Duration::from_secs(10), || refused(&admin_b, "unsigned") == 1 && refused(&admin_b, "malformed") == 1);
    assert_eq!(retained_stats(&admin_b)["messages"], 1, "nothing of the stranger's kept");

    assert!(node_c.terminate().success(), "C stops, writing its file");
    assert_eq!(get_post(&admin_a, "/publish?topic=r/one&retain=1", b"").0, 200);
    wait_until("A and B cleared it", Duration::from_secs(10), || [&admin_a, &admin_b].iter().all(|a| retained_stats(a)["messages"] == 0));
    let (_c, admin_c, _) = loopback_node(&url, "RC", &key, &c_args);
    wait_until("C read its file, then the clear came in its sync", Duration::from_secs(20), || {
        let c = retained_stats(&admin_c);
        c["messages"] == 0 && c["cleared"] == 1
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// One client id, one connection in the whole cluster (MQTT-3.1.4-2): a
/// v5 client connecting to B with an id connected on A takes it over (A's
/// connection gets DISCONNECT 0x8E and is closed, its session not kept),
/// and the session A kept for a 3.1.1 client gone goes with it when that
/// client comes back to B asking for it (session present), and is
/// dropped when it comes back clean. The new connections stay.
#[test]
fn a_client_id_that_connects_to_another_node_leaves_the_first() {
    use crate::mqtt_sessions::{connected, rest};
    let (_nats, _key, _url, [(_a, admin_a, port_a), (_b, admin_b, port_b)]) = two_mqtt_nodes("I", "megaconn.clientids");
    // B asks the nodes it heard from for sessions.
    wait_until("each node heard the other", Duration::from_secs(10), || [&admin_a, &admin_b].iter().all(|a| get(a, "/stats").1["cluster"]["peers"] == 1));
    let sessions = |admin: &str| get(admin, "/stats").1["mqtt_sessions"].clone();
    let (gone, _, code) = connected(port_a, 4, "keeper", false);
    assert_eq!(code, 0);
    drop(gone);
    wait_until("A keeps keeper's session", Duration::from_secs(10), || sessions(&admin_a)["kept"] == 1);

    let (old, _, code) = connected(port_a, 5, "device", true);
    assert_eq!(code, 0);
    let (new, present, code) = connected(port_b, 5, "device", true);
    assert_eq!((present, code), (false, 0), "B accepts it");
    let said = rest(old);
    assert!(said.len() >= 3 && said[0] == 0xE0 && said[2] == 0x8E, "A: DISCONNECT 0x8E (Session taken over), then closed, not {said:?}");
    let (back, present, code) = connected(port_b, 4, "keeper", false);
    assert_eq!((present, code), (true, 0), "keeper's session moved to B");
    let (gone, _, code) = connected(port_a, 4, "cleaner", false);
    assert_eq!(code, 0);
    drop(gone);
    wait_until("A keeps cleaner's session", Duration::from_secs(10), || sessions(&admin_a)["kept"] == 1);
    let (clean, present, code) = connected(port_b, 4, "cleaner", true);
    assert_eq!((present, code), (false, 0), "a clean session on B");
    wait_until("A let every id go", Duration::from_secs(10), || {
        let a = sessions(&admin_a);
        a["moved"] == 2 && a["handed_over"] == 1 && a["kept"] == 0 && a["online"] == 0
    });
    let b = sessions(&admin_b);
    assert_eq!((b["online"].as_u64(), b["moved_in"].as_u64()), (Some(3), Some(1)), "B holds all three: {b}");
    drop((new, back, clean));
}

/// A draining node's MQTT clients come back to another node and find
/// their sessions there: once its workers are gone the drained node stays
/// (at most 5 s) for its kept sessions to be asked for, and stops by
/// itself when the last one was.
#[test]
fn a_draining_node_hands_its_clients_sessions_to_the_node_they_come_back_to() {
    use crate::mqtt_sessions::{connected, rest};
    let nats = loopback_nats(&[]);
    let (key, url) = (KeyFile::new("mqtt-drain"), format!("nats://{}", nats.addr));
    let (mut a, admin_a, port_a) = loopback_node(&url, "DA", &key, &["--protocol", "mqtt", "--drain-period", "500ms"]);
    let (_b, admin_b, port_b) = loopback_node(&url, "DB", &key, &["--protocol", "mqtt"]);
    wait_until("each node heard the other", Duration::from_secs(20), || {
        [&admin_a, &admin_b].iter().all(|a| get(a, "/healthz").0 == 200 && get(a, "/stats").1["cluster"]["peers"] == 1)
    });
    let (k, present, code) = connected(port_a, 4, "drained", false);
    assert_eq!((present, code), (false, 0));
    // SAFETY: signalling our own child by PID.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGTERM) };
    rest(k); // A closes it in its drain and keeps its session.
             // The client comes back only once A closed every connection (a slow
             // reconnect): A stays for the session.
    wait_until("A waits for its kept session", Duration::from_secs(10), || a.log.text().contains("MQTT sessions kept here wait"));
    let (back, present, code) = connected(port_b, 4, "drained", false);
    assert_eq!((present, code), (true, 0), "the session came from the draining node");
    wait_until("A stops by itself once it was asked for", Duration::from_secs(10), || a.child.try_wait().unwrap().is_some());
    assert!(a.child.wait().unwrap().success());
    assert_eq!(get(&admin_b, "/stats").1["mqtt_sessions"]["moved_in"], 1);
    drop(back);
}

/// MQTT sessions move with their clients (tests/peers/mqtt_move.py,
/// paho): a 3.1.1 client gone from A comes back to B and gets what A
/// queued for it, session present; a 5.0 client still connected to A
/// connects to B asking for its session: A takes its connection over and
/// hands the session to B, which follows its topic.
#[test]
fn a_session_kept_or_connected_on_one_node_moves_to_the_node_its_client_comes_back_to() {
    let (_nats, _key, _url, [(_a, admin_a, port_a), (_b, admin_b, port_b)]) = two_mqtt_nodes("M", "megaconn.sessions.take");
    // Each node knows the other from its shared group announcements.
    wait_until("each node heard the other", Duration::from_secs(10), || [&admin_a, &admin_b].iter().all(|a| get(a, "/stats").1["cluster"]["peers"] == 1));
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_move.py")).args([&port_a.to_string(), &admin_a, &port_b.to_string(), &admin_b]);
    assert_eq!(Peer::spawn("mqtt_move.py", py).finish_ok(Duration::from_secs(120)), ["OK"]);
    assert_eq!(refused(&admin_a, "malformed") + refused(&admin_b, "malformed"), 0, "no answer refused");
}

/// MQTT across two nodes, with the cluster's history in JetStream and
/// without: a paho publisher on A reaches paho subscribers on B at its
/// QoS with its v5 properties (by topic and through a wildcard), B keeps
/// it retained, and B's kept session of a client gone gets what A
/// published meanwhile (tests/peers/mqtt_cluster.py).
#[test]
fn mqtt_publishes_cross_the_cluster_with_their_qos_retain_flag_and_properties() {
    for history in ["jetstream", "off"] {
        let nats = loopback_nats(&[]);
        let (key, url) = (KeyFile::new(&format!("mqtt-{history}")), format!("nats://{}", nats.addr));
        let args = ["--protocol", "mqtt", "--cluster-history", history];
        let (_a, admin_a, port_a) = loopback_node(&url, "MA", &key, &args);
        let (_b, admin_b, port_b) = loopback_node(&url, "MB", &key, &args);
        wait_until("both nodes linked", Duration::from_secs(20), || get(&admin_a, "/healthz").0 == 200 && get(&admin_b, "/healthz").0 == 200);
        let mut py = Command::new("python3");
        py.arg(peer("mqtt_cluster.py")).args([&port_a.to_string(), &admin_a, &port_b.to_string(), &admin_b]);
        assert_eq!(Peer::spawn(&format!("mqtt_cluster.py ({history})"), py).finish_ok(Duration::from_secs(120)), ["OK"], "{history}");
        assert_eq!(refused(&admin_b, "malformed") + refused(&admin_b, "forged"), 0, "{history}: B refused none of A's messages");
    }
}

/// MQTT shared subscriptions across the cluster: a group with a member on
/// each node (Debian's mosquitto_sub) gets each message once in the whole
/// cluster, whichever node it was published on, and both members get
/// some: the node a message enters names the one node that delivers each
/// group's copy. A plain subscriber of `end` on each node tells when all
/// went by (published after the jobs, by the same nodes).
#[test]
fn a_shared_group_with_members_on_two_nodes_gets_each_message_once() {
    let (nats, _key, _url, [(_a, admin_a, port_a), (_b, admin_b, port_b)]) = two_mqtt_nodes("S", "megaconn.shared");
    let member = |port: u16| {
        let mut cmd = Command::new("mosquitto_sub");
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", "5", "-q", "1", "-t", "$share/workers/jobs/#", "-t", "end", "-v", "-W", "60"]);
        crate::common::proc::Peer::spawn(&format!("mosquitto_sub on {port}"), cmd)
    };
    let mut members = [member(port_a), member(port_b)];
    let shared = |admin: &str| get(admin, "/stats").1["mqtt_shared"].clone();
    wait_until("each node heard the other's group", Duration::from_secs(20), || {
        [&admin_a, &admin_b].iter().all(|a| shared(a)["nodes"] == 1 && shared(a)["members"] == 1)
    });
    wait_until("both nodes follow every topic (the groups' wildcard) and end", Duration::from_secs(10), || {
        let (status, text) = http(&nats.monitor, "GET", "/connz?subs=1", b"", None);
        // Go's JSON writes '>' as \u003e.
        status == 200 && ["\"megaconn.live.topic.\\u003e\"", "\"megaconn.live.topic.end\""].iter().all(|s| text.matches(s).count() == 2)
    });
    for (i, admin) in [&admin_a, &admin_b].iter().enumerate().flat_map(|(n, a)| (0..10).map(move |i| (n * 10 + i, a))) {
        assert_eq!(get_post(admin, &format!("/publish?topic=jobs/{i}&qos=1"), format!("job{i}").as_bytes()).0, 200);
    }
    for admin in [&admin_a, &admin_b] {
        assert_eq!(get_post(admin, "/publish?topic=end&qos=1", b"end").0, 200);
    }
    let mut got: Vec<Vec<String>> = Vec::new();
    for m in members.iter_mut() {
        let (mut jobs, mut ends) = (Vec::new(), 0);
        while ends < 2 {
            let line = m.line(Duration::from_secs(20), "a job or the end");
            match line.strip_prefix("end ") {
                Some(_) => ends += 1,
                None => jobs.push(line),
            }
        }
        got.push(jobs);
    }
    let mut all: Vec<&String> = got.iter().flatten().collect();
    all.sort();
    let want: Vec<String> = (0..20).map(|i| format!("jobs/{i} job{i}")).collect();
    let mut want_sorted: Vec<&String> = want.iter().collect();
    want_sorted.sort();
    assert_eq!(all, want_sorted, "each job once in the cluster: A's member {:?}, B's {:?}", got[0], got[1]);
    assert!(got.iter().all(|g| !g.is_empty()), "both members get some: {got:?}");
    let elsewhere: u64 = [&admin_a, &admin_b].iter().map(|a| shared(a)["elsewhere"].as_u64().unwrap_or(0)).sum();
    assert_eq!(elsewhere, 20, "each job's copy left by one node to the other: {} / {}", shared(&admin_a), shared(&admin_b));

    // B's member leaves: B announces no group, and every job goes to A's
    // member, also those published on B.
    let [mut on_a, on_b] = members;
    drop(on_b);
    wait_until("A forgot B's group", Duration::from_secs(20), || shared(&admin_a)["nodes"] == 0 && shared(&admin_b)["groups"] == 0);
    for (i, admin) in [(20, &admin_a), (21, &admin_b), (22, &admin_a), (23, &admin_b)] {
        assert_eq!(get_post(admin, &format!("/publish?topic=jobs/{i}&qos=1"), format!("job{i}").as_bytes()).0, 200);
    }
    for admin in [&admin_a, &admin_b] {
        assert_eq!(get_post(admin, "/publish?topic=end&qos=1", b"end").0, 200);
    }
    let mut rest = Vec::new();
    let mut ends = 0;
    while ends < 2 {
        let line = on_a.line(Duration::from_secs(20), "a job or the end");
        match line.strip_prefix("end ") {
            Some(_) => ends += 1,
            None => rest.push(line),
        }
    }
    rest.sort();
    assert_eq!(rest, ["jobs/20 job20", "jobs/21 job21", "jobs/22 job22", "jobs/23 job23"], "all to the member left");
}

/// One MQTT node on loopback named `node`, linked once NATS routes
/// `subject` to it: the NATS server, the cluster key (for a fake node to
/// sign with) and the node.
fn one_mqtt_node(node: &str, subject: &str) -> (Nats, KeyFile, (Running, String, u16)) {
    let nats = loopback_nats(&[]);
    let key = KeyFile::new(&format!("mqtt-one-{}", node.to_lowercase()));
    let n = loopback_node(&format!("nats://{}", nats.addr), node, &key, &["--protocol", "mqtt"]);
    wait_until(&format!("the node takes {subject}"), Duration::from_secs(20), || get(&n.1, "/healthz").0 == 200 && routed(&nats.monitor, subject));
    (nats, key, n)
}

/// Headers signed with the cluster's key for a message of `origin` to
/// `subject`: what a node of this cluster sends (here, a fake one).
fn signed_by(key: &KeyFile, subject: &str, origin: &str, data: &[u8]) -> Vec<(String, String)> {
    let now = megaconn::cluster::sign::now_ms().to_string();
    let s = megaconn::cluster::sign::Signed { subject, origin, target: "", publish_us: "", time_ms: &now, position: "", follows: "", mqtt: "" };
    let signature = megaconn::cluster::sign::sign(&key.key(), &s, data);
    vec![("Megaconn-Origin".into(), origin.into()), ("Megaconn-Time".into(), now), ("Megaconn-Signature".into(), signature)]
}

fn hpub_signed(key: &KeyFile, subject: &str, reply: Option<&str>, origin: &str, data: &[u8]) -> Vec<u8> {
    let h = signed_by(key, subject, origin, data);
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    hpub(subject, reply, &h, data)
}

/// A fake node asks the nodes for the session of `id` (signed, on
/// megaconn.sessions.take) for a CONNECT `ago_us` before now: the
/// answers, as nats-server sent them.
fn ask_as_fake_node_at(nats: &Nats, key: &KeyFile, id: &str, ago_us: i64) -> String {
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_micros() as i64;
    let body = format!(r#"{{"ids":["{id}"],"at_us":{}}}"#, now_us - ago_us);
    // A node's answers go to its own inbox (any other reply subject is refused).
    let mut ops = b"SUB megaconn.inbox.FAKE.r 2\r\n".to_vec();
    ops.extend(hpub_signed(key, "megaconn.sessions.take", Some("megaconn.inbox.FAKE.r"), "FAKE", body.as_bytes()));
    nats_raw_at(&nats.addr, ops, "\"done\":true")
}

/// A fake node asks for the session of `id` as of now: the lend number
/// of the session it got.
fn ask_as_fake_node(nats: &Nats, key: &KeyFile, id: &str) -> u64 {
    let got = ask_as_fake_node_at(nats, key, id, 0);
    let at = got.find("\"lend\":").unwrap_or_else(|| panic!("no session lent in the answer: {got}"));
    assert!(got.contains(&format!("\"id\":\"{id}\"")), "{got}");
    got[at + 7..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().expect("a lend number")
}

/// Sessions move in two phases: a node that hands a session over keeps
/// it (lent) until the asker confirms it came. A fake node (a bare NATS
/// client signing with the cluster's key) asks for a 3.1.1 client's
/// session with a QoS 1 message queued and never confirms, as an asker
/// that went away: the session stays kept and queues a second message,
/// after 5 s the lend ends, and the client resumes it on the node with
/// both (before, it was lost in transit). A second session the fake node
/// confirms is gone from the node; an unsigned confirmation is refused
/// and ends no lend.
#[test]
fn a_session_handed_over_and_never_confirmed_is_kept_again_not_lost() {
    use crate::mqtt_sessions::connected;
    let (nats, key, (_a, admin, port)) = one_mqtt_node("LA", "megaconn.sessions.taken");
    let sessions = || get(&admin, "/stats").1["mqtt_sessions"].clone();
    for id in ["unconfirmed", "confirmed"] {
        let (mut s, _, code) = connected(port, 4, id, false);
        assert_eq!(code, 0);
        // SUBSCRIBE t/# at QoS 1, then its SUBACK.
        s.write_all(&[0x82, 8, 0, 1, 0, 3, b't', b'/', b'#', 1]).unwrap();
        let mut suback = [0u8; 5];
        s.read_exact(&mut suback).unwrap();
        assert_eq!(suback, [0x90, 3, 0, 1, 1]);
    }
    wait_until("both sessions kept", Duration::from_secs(10), || sessions()["kept"] == 2);
    assert_eq!(get_post(&admin, "/publish?topic=t/1&qos=1", b"queued").0, 200);
    wait_until("the message queued for both", Duration::from_secs(10), || sessions()["queued"] == 2);

    let lend = ask_as_fake_node(&nats, &key, "unconfirmed");
    let s = sessions();
    assert_eq!((s["kept"].as_u64(), s["lent"].as_u64(), s["handed_over"].as_u64()), (Some(2), Some(1), Some(0)), "lent, still kept: {s}");
    // Still kept, it still queues what is published meanwhile.
    assert_eq!(get_post(&admin, "/publish?topic=t/2&qos=1", b"during").0, 200);
    wait_until("the second message queued for both", Duration::from_secs(10), || sessions()["queued"] == 4);
    // An unsigned confirmation (a stranger on NATS) is refused.
    let forged = format!(r#"{{"to":"LA","lend":{lend}}}"#);
    let mut op = format!("PUB megaconn.sessions.taken {}\r\n", forged.len()).into_bytes();
    op.extend_from_slice(forged.as_bytes());
    op.extend_from_slice(b"\r\n");
    nats_raw_at(&nats.addr, op, "PONG");
    wait_until("the stranger's confirmation refused", Duration::from_secs(10), || refused(&admin, "unsigned") == 1);
    wait_until("kept again after 5 s without a confirmation", Duration::from_secs(15), || {
        let s = sessions();
        s["returned"] == 1 && s["lent"] == 0 && s["kept"] == 2
    });
    let (mut back, present, code) = connected(port, 4, "unconfirmed", false);
    assert_eq!((present, code), (true, 0), "its client resumes it on the node");
    let mut got = Vec::new();
    let mut chunk = [0u8; 256];
    while !got.windows(6).any(|w| w == b"during") {
        let n = back.read(&mut chunk).expect("the queued messages within 20 s");
        assert!(n > 0, "closed before the queued message came: {got:?}");
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got[0] & 0xF0, 0x30, "a PUBLISH: {got:?}");
    assert!(got.windows(6).any(|w| w == b"queued"), "the message queued before the lend too: {got:?}");

    let lend = ask_as_fake_node(&nats, &key, "confirmed");
    let taken = format!(r#"{{"to":"LA","lend":{lend}}}"#);
    nats_raw_at(&nats.addr, hpub_signed(&key, "megaconn.sessions.taken", None, "FAKE", taken.as_bytes()), "PONG");
    wait_until("confirmed: handed over", Duration::from_secs(10), || {
        let s = sessions();
        s["handed_over"] == 1 && s["lent"] == 0 && s["kept"] == 0
    });
    let (_again, present, code) = connected(port, 4, "confirmed", false);
    assert_eq!((present, code), (false, 0), "its session went to the node that confirmed it");
    assert_eq!(sessions()["returned"], 1);
    drop(nats);
}

/// Of two CONNECTs of one client id on two nodes, the newer stays: a node
/// asked for the session of an id connected there by a newer CONNECT
/// than the asker's says so (`newer`) and keeps the connection (before,
/// it took it over); asked for an older one's, it takes it over (the
/// client gets DISCONNECT 0x8E) and says it is busy.
#[test]
fn a_question_about_an_older_connect_leaves_the_newer_connection_alone() {
    use crate::mqtt_sessions::{connected, rest};
    let (nats, key, (_a, admin, port)) = one_mqtt_node("NA", "megaconn.sessions.take");
    let (mut dev, _, code) = connected(port, 5, "dev", true);
    assert_eq!(code, 0);
    let got = ask_as_fake_node_at(&nats, &key, "dev", 10_000_000);
    assert!(got.contains(r#""busy":[],"newer":["dev"]"#), "the node holds dev by a newer CONNECT: {got}");
    // Still connected: PINGREQ, PINGRESP.
    dev.write_all(&[0xC0, 0]).unwrap();
    let mut pong = [0u8; 2];
    dev.read_exact(&mut pong).unwrap();
    assert_eq!(pong, [0xD0, 0], "dev's connection stays");
    let got = ask_as_fake_node_at(&nats, &key, "dev", -1_000_000);
    assert!(got.contains(r#""busy":["dev"]"#) && !got.contains("newer"), "an older CONNECT is taken over: {got}");
    let said = rest(dev);
    assert!(said.len() >= 3 && said[0] == 0xE0 && said[2] == 0x8E, "DISCONNECT 0x8E (Session taken over), then closed, not {said:?}");
    assert_eq!(get(&admin, "/stats").1["mqtt_sessions"]["taken_over"], 1);
    drop(nats);
}
