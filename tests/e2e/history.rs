//! History and resume on real sockets: a subscriber that lost its
//! connection gets exactly what it missed (framed by hand-written frames,
//! WebSocket by Python `websockets`), is told when it cannot, and
//! megaconn's own client resumes through churn with no gap and no
//! duplicate while messages keep coming.
use crate::common::framed::{frame, resume, In, Reader};
use crate::common::*;
use serde_json::Value;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

fn publish(admin: &str, topic: &str, data: &str) {
    let (status, body) = http(admin, "POST", &format!("/publish?topic={topic}"), data.as_bytes(), None);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_framed_subscriber_resumes_with_exactly_what_it_missed() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "2", "--history", "5"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut a = Reader::connect(port);
    a.s.write_all(&resume("news", None)).unwrap();
    assert_eq!(a.until_subscribed(), vec![In::Subscribed(true, 0, 0)], "nothing published yet: epoch 0, offset 0");
    for i in 1..=3 {
        publish(&admin, "news", &format!("m{i}"));
    }
    let live: Vec<In> = (0..3).map(|_| a.next()).collect();
    let In::Push(3, epoch, _) = live[2] else { panic!("{live:?}") };
    assert_ne!(epoch, 0);
    assert_eq!(live, (1..=3).map(|i| In::Push(i, epoch, format!("m{i}"))).collect::<Vec<_>>());
    drop(a);
    for i in 4..=7 {
        publish(&admin, "news", &format!("m{i}"));
    }
    let mut b = Reader::connect(port);
    b.s.write_all(&resume("news", Some((epoch, 3)))).unwrap();
    let mut want: Vec<In> = (4..=7).map(|i| In::Push(i, epoch, format!("m{i}"))).collect();
    want.push(In::Subscribed(true, epoch, 7));
    assert_eq!(b.until_subscribed(), want, "exactly the missed ones, then the answer");
    publish(&admin, "news", "m8");
    assert_eq!(b.next(), In::Push(8, epoch, "m8".into()), "live again at the seam");
    // History keeps 5 (4..8): older is refused, as is another epoch.
    b.s.write_all(&resume("news", Some((epoch, 1)))).unwrap();
    assert_eq!(b.until_subscribed(), vec![In::Subscribed(false, epoch, 8)]);
    b.s.write_all(&resume("news", Some((epoch ^ 1, 7)))).unwrap();
    assert_eq!(b.until_subscribed(), vec![In::Subscribed(false, epoch, 8)]);
    let (status, body) = http(&admin, "GET", &format!("/history?topic=news&since=6&epoch={epoch}"), b"", None);
    let h: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, h["head"].as_u64(), h["oldest"].as_u64(), h["recovered"].as_bool()), (200, Some(8), Some(4), Some(true)), "{body}");
    let data: Vec<&str> = h["messages"].as_array().unwrap().iter().map(|m| m["data"].as_str().unwrap()).collect();
    assert_eq!(data, ["m7", "m8"]);
    let (_, body) = http(&admin, "GET", "/history?topic=news&since=1", b"", None);
    assert!(body.contains("\"recovered\":false"), "{body}");
    let stats = wait_stats(&admin, |v| v["recoveries"]["recovered"] == 1 && v["recoveries"]["lost"] == 2);
    assert_eq!(stats["history"]["messages"], 5, "{stats}");
    assert_eq!(stats["recovered_messages"], 4, "{stats}");
    assert!(s.terminate().success());
}

/// A frame as a failed assertion names it (a 1 MiB push by its offset
/// and size, not its text).
fn brief(f: &In) -> String {
    match f {
        In::Push(offset, epoch, data) => format!("push {epoch}:{offset} of {} bytes", data.len()),
        other => format!("{other:?}"),
    }
}

/// A resume further behind than one history answer carries (4 MiB of
/// payload) is told at once, with `recovered: false` at the head and no
/// replay, and is live from there; one exactly 4 MiB behind gets it
/// all; one that unsubscribes before its answer gets no replay. Each is
/// asked for once. (The first used to be asked for again and again:
/// no answer, ~5.6 MB of JSON per question between the processes, and
/// the topic's live pushes withheld from it.)
#[test]
fn a_resume_beyond_the_answer_bound_is_told_at_once_and_goes_live() {
    const MIB: usize = 1 << 20;
    /// Within it, a message arrives on loopback (the 4 MiB replay too).
    const PROMPT: Duration = Duration::from_secs(1);
    let big = |i: u64| {
        let mut data = format!("m{i}:");
        data.push_str(&"x".repeat(MIB - data.len()));
        data
    };
    let port = free_port();
    // 1 MiB publishes (--max-push-bytes), a 4 MiB replay (--max-pending-bytes).
    let flags = ["--ports", &port.to_string(), "--workers", "1", "--max-push-bytes", "1MiB", "--max-pending-bytes", "8MiB"];
    let (mut s, _, ready) = server_ready(&flags, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    for i in 1..=6 {
        publish(&admin, "big", &big(i));
    }
    let connect = || {
        let r = Reader::connect(port);
        r.s.set_read_timeout(Some(PROMPT)).unwrap();
        r
    };
    // A has seen nothing: 6 MiB behind.
    let mut a = connect();
    let asked = Instant::now();
    a.s.write_all(&resume("big", Some((0, 0)))).unwrap();
    let epoch = match a.next() {
        In::Subscribed(false, epoch, 6) => epoch,
        other => panic!("recovered false at the head, and no replay, expected: {}", brief(&other)),
    };
    assert!(asked.elapsed() < PROMPT, "answered in {:?}", asked.elapsed());
    assert_ne!(epoch, 0);
    // B stopped at 2: 3..=6 are exactly 4 MiB.
    let mut b = connect();
    b.s.write_all(&resume("big", Some((epoch, 2)))).unwrap();
    let got = b.until_subscribed();
    let summary: Vec<String> = got.iter().map(brief).collect();
    assert_eq!(got.len(), 5, "{summary:?}");
    for (i, f) in (3..=6).zip(&got) {
        assert!(*f == In::Push(i, epoch, big(i)), "{i}: {summary:?}");
    }
    assert_eq!(got[4], In::Subscribed(true, epoch, 6));
    // C resumes and unsubscribes in one write, so the unsubscribe cancels
    // the resume before its question goes out; it follows another topic.
    let mut c = connect();
    let mut frames = resume("big", Some((epoch, 5)));
    frames.extend(frame(7, b"big"));
    frames.extend(frame(6, b"other"));
    c.s.write_all(&frames).unwrap();
    // Every frame read (A 1, B 1, C 3): C follows "other" only.
    wait_stats(&admin, |v| v["frames_in"] == 5 && v["subscriptions"] == 3);
    publish(&admin, "other", "o1");
    let In::Push(1, other_epoch, o1) = c.next() else { panic!("C wants nothing of big") };
    assert_eq!(o1, "o1");
    // Live again: A and B get the next one, C does not.
    publish(&admin, "big", "live");
    publish(&admin, "other", "o2");
    for r in [&mut a, &mut b] {
        let f = r.next();
        assert!(f == In::Push(7, epoch, "live".into()), "{}", brief(&f));
    }
    let f = c.next();
    assert!(f == In::Push(2, other_epoch, "o2".into()), "{}", brief(&f));
    // Asked for once each (A and B; C's was cancelled), never again: the
    // live push above came after every answer.
    let stats = wait_stats(&admin, |v| v["recoveries"]["lost"] == 1 && v["recoveries"]["recovered"] == 1);
    assert_eq!((stats["history"]["served"].as_u64(), stats["recovered_messages"].as_u64()), (Some(2), Some(4)), "{stats}");
    assert!(s.terminate().success());
}

/// Run a Python peer with `args` (its port, the admin API, ...); it asserts what it
/// received itself and ends saying OK.
fn python_peer_says_ok(script: &str, args: &[&str]) {
    let mut py = Command::new("python3");
    py.arg(peer(script)).args(args);
    let mut p = Peer::spawn(script, py);
    assert_eq!(p.finish_ok(Duration::from_secs(60)), ["OK"]);
}

/// Poll /stats until `ok` (the workers report every 200 ms).
fn wait_stats(admin: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = http(admin, "GET", "/stats", b"", None);
        let v: Value = serde_json::from_str(&body).unwrap();
        if ok(&v) {
            return v;
        }
        assert!(Instant::now() < end, "stats never got there: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The seam under load: messages keep coming while a subscriber leaves
/// and resumes; it ends with every offset once, in order.
#[test]
fn a_resume_while_publishing_has_no_gap_and_no_duplicate() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "2", "--history", "1000"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut a = Reader::connect(port);
    a.s.write_all(&resume("feed", None)).unwrap();
    a.until_subscribed();
    let publisher = {
        let admin = admin.clone();
        std::thread::spawn(move || {
            for i in 1..=400 {
                publish(&admin, "feed", &format!("x{i}"));
            }
        })
    };
    let mut seen = Vec::new();
    let mut epoch = 0;
    while seen.len() < 50 {
        if let In::Push(o, e, _) = a.next() {
            (epoch, seen) = (e, [seen, vec![o]].concat());
        }
    }
    drop(a);
    let mut b = Reader::connect(port);
    b.s.write_all(&resume("feed", Some((epoch, *seen.last().unwrap())))).unwrap();
    let mut answered = false;
    while *seen.last().unwrap() < 400 {
        match b.next() {
            In::Push(o, e, _) => {
                assert_eq!(e, epoch);
                seen.push(o);
            }
            In::Subscribed(recovered, ..) => {
                assert!(recovered && !answered);
                answered = true;
            }
            In::Part(..) => panic!("a part without its push"),
        }
    }
    publisher.join().unwrap();
    assert!(answered);
    assert_eq!(seen, (1..=400).collect::<Vec<u64>>(), "every offset once, in order");
    assert!(s.terminate().success());
}

#[test]
fn python_websockets_resumes_by_url_and_by_command() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "2", "--protocol", "ws", "--history", "5"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    python_peer_says_ok("ws_resume.py", &[&port, &admin]);
    assert!(s.terminate().success());
}

/// megaconn's client with --reconnect resumes what churn closes (framed
/// resume frames, WebSocket ?since=, an event stream's Last-Event-ID):
/// while messages keep coming, every connection ends with no gap and no
/// duplicate, and the resumes say they recovered.
#[test]
fn the_client_resumes_through_churn_with_nothing_lost() {
    // sse-http: event streams on an HTTP port.
    for protocol in ["framed", "ws", "sse", "sse-http"] {
        let port = free_port();
        let server_protocol = match protocol {
            "sse" => "ws",
            "sse-http" => "http",
            p => p,
        };
        let protocol = if protocol == "sse-http" { "sse" } else { protocol };
        let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "2", "--protocol", server_protocol, "--history", "1000"], None);
        let admin = ready["admin"].as_str().unwrap().to_string();
        let mut cmd = megaconn();
        cmd.args(["client", "--protocol", protocol, "--connections", "40", "--reconnect"]);
        match protocol {
            "sse" => cmd.args(["--url", &format!("http://127.0.0.1:{port}/events?subscribe=feed")]),
            _ => cmd.args(["--ports", &port.to_string(), "--subscribe", "feed"]),
        };
        cmd.args(["--churn", "20/s", "--hold", "6s", "--heartbeat", "off", "--json"]);
        let client = std::thread::spawn(move || run(cmd, Duration::from_secs(60)));
        wait_stats(&admin, |v| v["subscriptions"] == 40);
        let mut published = 0;
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            publish(&admin, "feed", "tick");
            published += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        let (code, out, err) = client.join().unwrap();
        assert_eq!(code, 0, "{protocol}: {err}");
        let c = serde_json::from_str::<Value>(&out).unwrap()["summary"].clone();
        assert_eq!((c["push_gaps"].as_u64(), c["push_duplicates"].as_u64()), (Some(0), Some(0)), "{protocol}: {c}");
        assert_eq!(c["push_received"].as_u64(), Some(40 * published), "{protocol}: every connection got every message: {c}");
        assert!(c["resumes"]["recovered"].as_u64().unwrap_or(0) >= 20, "{protocol}: churned connections resumed: {c}");
        assert!(c["resumes"]["lost"].is_null(), "{protocol}: {c}");
        assert!(s.terminate().success());
    }
}

/// A raw-socket event stream reader resumes with Last-Event-ID on a
/// WebSocket port and on an HTTP port (where a plain request on the same
/// port is still answered as before).
#[test]
fn a_raw_socket_event_stream_resumes_with_last_event_id() {
    for protocol in ["ws", "http"] {
        let port = free_port().to_string();
        let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "2", "--protocol", protocol, "--history", "100"], None);
        let admin = ready["admin"].as_str().unwrap().to_string();
        python_peer_says_ok("sse_resume.py", &[&port, &admin, protocol]);
        let stats = wait_stats(&admin, |v| v["sse_streams"] == 2);
        assert_eq!(stats["recovered_messages"], 5, "{protocol}: {stats}");
        assert!(s.terminate().success());
    }
}

/// Chromium's own EventSource: its worker killed, the browser reconnects
/// by itself with Last-Event-ID and gets what was published meanwhile.
#[test]
fn chromium_eventsource_recovers_across_a_crashed_worker() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--protocol", "ws", "--history", "100"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut node = Command::new("node");
    node.args([&peer("chromium_sse.js"), &port]);
    let mut page = Peer::spawn("node chromium_sse.js (chromium)", node);
    assert_eq!(page.line(Duration::from_secs(60), "the page's stream open"), "ready");
    for i in 1..=3 {
        publish(&admin, "feed", &format!("m{i}"));
        assert_eq!(page.line(Duration::from_secs(20), "a message on the page"), format!("got {i}"));
    }
    // The worker dies: the stream breaks; the browser waits its retry
    // (2 s) while three more are published and the worker is replaced.
    for pid in pids(&ready) {
        kill9(pid);
    }
    for i in 4..=6 {
        publish(&admin, "feed", &format!("m{i}"));
    }
    // The page resumes (recovering what it missed) and gets the rest live,
    // in an order that depends on when its retry lands: wait for both.
    let mut lines: Vec<String> = Vec::new();
    while !(lines.iter().any(|l| l == "resumed") && lines.iter().any(|l| l == "got 6")) {
        lines.push(page.line(Duration::from_secs(30), "the page resuming with m6"));
    }
    publish(&admin, "feed", "m7");
    assert_eq!(page.line(Duration::from_secs(60), "m7 on the page"), "got 7", "{lines:?}");
    let rest = page.finish_ok(Duration::from_secs(30));
    let result: Value = serde_json::from_str(rest.last().unwrap_or_else(|| panic!("the page's result: {rest:?}"))).unwrap();
    assert_eq!(result["data"], serde_json::json!(["m1", "m2", "m3", "m4", "m5", "m6", "m7"]), "{result} {lines:?}");
    assert_eq!(result["offsets"], serde_json::json!([1, 2, 3, 4, 5, 6, 7]), "{result}");
    assert_eq!(result["resumes"][0]["recovered"], true, "{result}");
    // The retry (2 s) came after m4 at least was published: what the
    // resume recovered is counted in its offset.
    let offset = result["resumes"][0]["offset"].as_u64().unwrap_or(0);
    assert!((4..=6).contains(&offset), "the resume recovered m4 at least: {result}");
    assert!(s.terminate().success());
}

/// A push over one frame reaches a framed subscriber in parts (read here
/// by hand) and a Python websockets subscriber in one 1 MiB message; over
/// --max-push-bytes is refused with 413 naming the flag.
#[test]
fn a_large_push_arrives_whole_on_every_protocol() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "1", "--max-push-bytes", "300KiB", "--max-pending-bytes", "1MiB"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut r = Reader::connect(port);
    r.s.write_all(&resume("big", None)).unwrap();
    r.until_subscribed();
    let text: String = (0..300 * 1024).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    publish(&admin, "big", &text);
    let In::Push(1, _, got) = r.next() else { panic!("a push") };
    assert!(got == text, "{} bytes came back, {} sent", got.len(), text.len());
    let (status, body) = http(&admin, "POST", "/publish?topic=big", &vec![b'x'; 300 * 1024 + 1], None);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("--max-push-bytes is 307200"), "{body}");
    assert!(s.terminate().success());

    let port = free_port().to_string();
    let flags = ["--ports", &port, "--workers", "1", "--protocol", "ws", "--push-format", "binary", "--max-push-bytes", "1MiB", "--max-pending-bytes", "4MiB"];
    let (mut s, _, ready) = server_ready(&flags, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    python_peer_says_ok("ws_large_push.py", &[&port, &admin]);
    assert!(s.terminate().success());
}

/// A framed connection gets broadcasts from its accept on; its resume,
/// read a moment later, must not bring those again (exactly once per
/// offset on a connection).
/// The seam: broadcasts published between a framed connection's accept
/// and the read of its resume (seconds apart on a loaded worker) wait for
/// that read, so what it missed before comes first, in order, each once;
/// a connection that does not resume gets them at its first read.
#[test]
fn broadcasts_before_a_new_connections_first_read_come_after_what_it_missed_in_order() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "1", "--history", "10"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let broadcast = |data: &str| assert_eq!(http(&admin, "POST", "/broadcast", data.as_bytes(), None).0, 200);
    let mut x = Reader::connect(port);
    x.s.write_all(&resume("*", None)).unwrap();
    x.until_subscribed();
    broadcast("b1");
    let In::Push(1, epoch, _) = x.next() else { panic!("b1 first") };
    // Y (a client that missed b1) and Z (one that does not resume) are
    // accepted and send nothing yet; b2 and b3 are published meanwhile.
    let mut y = Reader::connect(port);
    let mut z = Reader::connect(port);
    wait_stats(&admin, |v| v["active"] == 3);
    broadcast("b2");
    broadcast("b3");
    assert_eq!((x.next(), x.next()), (In::Push(2, epoch, "b2".into()), In::Push(3, epoch, "b3".into())), "X, read long ago, gets them live");
    y.s.write_all(&resume("*", Some((epoch, 0)))).unwrap();
    assert_eq!(
        y.until_subscribed(),
        vec![In::Push(1, epoch, "b1".into()), In::Push(2, epoch, "b2".into()), In::Push(3, epoch, "b3".into()), In::Subscribed(true, epoch, 3)],
        "what it missed, then what came before its resume was read: in order, once each"
    );
    z.s.write_all(&crate::common::framed::frame(6, b"news")).unwrap();
    assert_eq!((z.next(), z.next()), (In::Push(2, epoch, "b2".into()), In::Push(3, epoch, "b3".into())), "held for it until its first read");
    broadcast("b4");
    for r in [&mut x, &mut y, &mut z] {
        assert_eq!(r.next(), In::Push(4, epoch, "b4".into()));
    }
    assert!(s.terminate().success());
}

#[test]
fn the_recovery_bench_drops_everyone_and_each_recovers_every_message_once() {
    let ports = free_ports(2);
    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "recovery", "--connections", "2000", "--topics", "20", "--broadcasts", "10", "--history", "10"]);
    cmd.args(["--ports", &ports.arg(), "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = &v["recovery"];
    assert_eq!(r["connections"], 2000, "{r}");
    for batch in ["live", "recovery"] {
        assert_eq!(r[batch]["expected"], 20_000, "{r}");
        assert_eq!(r[batch]["deliveries"], 20_000, "{batch}: {r}");
        assert!(r[batch]["time_to_all_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(r["outage_closed"], 2000, "{r}");
    // Each connection resumed its topic and the broadcasts.
    assert_eq!(r["resumed_recovered"], 4000, "{r}");
    assert_eq!((r["resumed_lost"].as_u64(), r["duplicates"].as_u64(), r["gaps"].as_u64()), (Some(0), Some(0), Some(0)), "{r}");
    assert_eq!(r["reconnect_ms"]["count"], 2000, "{r}");
    // 20 topics x 10 kept, plus the broadcasts' empty log.
    assert_eq!(r["history_messages"], 200, "{r}");
    assert!(r["history_bytes_per_message"].as_f64().unwrap() > 64.0, "{r}");
    assert_eq!(sockets_on(ports.first, ports.last), 0);
}

#[test]
fn a_recovery_bench_that_cannot_recover_what_it_publishes_is_refused() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "recovery", "--connections", "10", "--broadcasts", "50", "--history", "20"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--history") && err.contains("--broadcasts 50"), "{err}");
}

/// `megaconn client --reconnect`: a client worker killed mid-run is
/// replaced, and its share reconnects and resumes from the dead worker's
/// last report: every message reaches every connection exactly once
/// (framed resumes, and event streams with a Last-Event-ID made from the
/// positions the new worker was handed).
#[test]
fn a_killed_client_worker_is_replaced_and_its_connections_miss_nothing() {
    for protocol in ["framed", "sse"] {
        killed_client_worker_replaced(protocol);
    }
}

fn killed_client_worker_replaced(protocol: &str) {
    let port = free_port().to_string();
    let server_protocol = if protocol == "sse" { "ws" } else { protocol };
    let (mut srv, _, ready) = server_ready(&["--ports", &port, "--workers", "2", "--history", "100", "--protocol", server_protocol], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let client_admin = format!("127.0.0.1:{}", free_port());
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port, "--connections", "400", "--workers", "4", "--reconnect", "--protocol", protocol]);
    if protocol == "sse" {
        cmd.args(["--url", &format!("http://127.0.0.1:{port}/events?subscribe=news")]);
    } else {
        cmd.args(["--subscribe", "news"]);
    }
    cmd.args(["--hold", "120s", "--heartbeat", "1s", "--admin", &client_admin, "--json"]);
    let mut client = crate::common::proc::Peer::spawn("megaconn client", cmd);
    let pushes = || {
        let (status, m) = http(&client_admin, "GET", "/metrics", b"", None);
        assert_eq!(status, 200, "{m}");
        m.lines().find_map(|l| l.strip_prefix("megaconn_client_pushes_total ")).map_or(0, |v| v.trim().parse::<u64>().unwrap())
    };
    wait_until("the client's admin API", Duration::from_secs(30), || std::net::TcpStream::connect(&client_admin).is_ok());
    wait_until("400 connections", Duration::from_secs(30), || {
        let (_, m) = http(&client_admin, "GET", "/metrics", b"", None);
        m.lines().any(|l| l == "megaconn_client_connections 400")
    });
    for i in 1..=20 {
        publish(&admin, "news", &format!("m{i}"));
    }
    // Reported by every worker (so each has a checkpoint past them).
    wait_until("20 messages x 400 reported", Duration::from_secs(30), || pushes() == 8000);
    let workers = children_of(client.child.id());
    assert_eq!(workers.len(), 4, "{workers:?}");
    // SAFETY: SIGKILL to a worker of the client this test started, by PID.
    unsafe { libc::kill(workers[1] as i32, libc::SIGKILL) };
    for i in 21..=40 {
        publish(&admin, "news", &format!("m{i}"));
    }
    wait_until("40 messages x 400 reported", Duration::from_secs(60), || pushes() >= 16_000);
    // SAFETY: Ctrl-C to our own child, by PID.
    unsafe { libc::kill(client.child.id() as i32, libc::SIGINT) };
    let (_, out) = client.finish(Duration::from_secs(30));
    let v: Value = serde_json::from_str(&out.join("\n")).unwrap();
    let s = &v["summary"];
    assert_eq!(s["push"]["received"], 16_000, "{protocol}: each of 40 messages once on each of 400 connections: {s}");
    assert_eq!((s["push"]["gaps"].as_u64(), s["push"]["duplicates"].as_u64()), (Some(0), Some(0)), "{s}");
    assert_eq!(s["lost_total"], 0, "the dead worker's connections were taken over, not lost: {s}");
    assert_eq!(s["reconnects"], 100, "its 100 connections reopened: {s}");
    if protocol == "framed" {
        assert_eq!(s["push"]["resumes"]["recovered"], 200, "each resumed the topic and the broadcasts: {s}");
    }
    assert_eq!(s["workers"], 5, "four, and the replacement: {s}");
    assert!(srv.terminate().success());
}
