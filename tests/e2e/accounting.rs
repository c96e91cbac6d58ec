//! The load generator accounts for every connection it was asked for
//! (issue 42, finding 16): requested = established + failed + not
//! attempted, in the summary and summed over the phases, each with its
//! reason; the ramp says why it ended; heartbeats a peer never answers
//! are part of the verdict. The peers are plain sockets of this test
//! process: a listener that never accepts, one that accepts and stays
//! silent.
use crate::common::*;
use serde_json::Value;
use std::net::TcpListener;
use std::time::Duration;

/// Longest a client run here may take (each ends in a few seconds).
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// requested = established + failed + not attempted, in the summary, in
/// its reasons, and summed over the phases.
fn assert_every_connection_counted(s: &Value) {
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v} in {s}"));
    let requested = n(&s["requested"]);
    let sum = |m: &Value| m.as_object().map_or(0, |o| o.values().map(n).sum::<u64>());
    assert_eq!(requested, n(&s["established"]) + n(&s["failed_total"]) + n(&s["not_attempted"]), "summary: {s}");
    assert_eq!(n(&s["failed_total"]), sum(&s["failed"]), "every failure has its kind: {s}");
    assert_eq!(n(&s["not_attempted"]), sum(&s["not_attempted_by"]), "every connection not attempted has its reason: {s}");
    let phases = s["phases"].as_array().unwrap_or_else(|| panic!("no phases: {s}"));
    let by_phase: u64 = phases.iter().map(|p| n(&p["established"]) + n(&p["failed_total"]) + n(&p["not_attempted_total"])).sum();
    assert_eq!(by_phase, requested, "the phases add up to the request: {s}");
}

/// A listener with a backlog of 1 that never accepts: the kernel
/// completes a couple of handshakes, the rest of the SYNs are dropped and
/// time out. Nothing is left in no state: each connection is established
/// or failed with its kind, and the ramp ends because every one settled.
#[test]
fn a_listener_that_never_accepts_leaves_no_connection_uncounted() {
    // Bound to a port the kernel picks: a number from free_port() could be
    // taken by another test before the bind (CI once failed here with
    // AddrInUse).
    let listener = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    listener.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind");
    listener.listen(1).expect("listen");
    let port = listener.local_addr().expect("bound").as_socket().expect("an inet address").port();
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "40", "--rate", "1000", "--workers", "2"]);
    cmd.args(["--connect-timeout", "1s", "--heartbeat", "off", "--hold", "1s", "--json"]);
    let (code, out, err) = run(cmd, RUN_LIMIT);
    drop(listener);
    assert_eq!(code, 1, "not every connection was established: {err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let s = &doc["summary"];
    assert_eq!(s["requested"], 40, "{s}");
    assert!(s["failed_total"].as_u64() > Some(0), "a listener that never accepts refuses most: {s}");
    assert_every_connection_counted(s);
    let ramp = &s["phases"][0];
    assert_eq!(ramp["name"], "ramp", "{s}");
    assert!(ramp["end"].as_str().is_some_and(|e| e.starts_with("every connection settled")), "the ramp ended when the last one settled: {ramp}");
    assert_eq!((ramp["connecting_at_end"].as_u64(), ramp["queued_at_end"].as_u64()), (Some(0), Some(0)), "{ramp}");
}

/// Ctrl-C during a slow ramp: what never got its turn is counted as not
/// attempted (`run_closed`) in the close phase, nothing is opened after
/// it, and the sum is exact.
#[test]
fn an_interrupted_ramp_counts_what_never_got_its_turn() {
    // The kernel picks the port (see the first test).
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("its port").port();
    let mut cmd = megaconn();
    // One connection a second: the run is interrupted long before the last.
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "60", "--rate", "1", "--workers", "1"]);
    cmd.args(["--heartbeat", "off", "--hold", "1s", "--json"]);
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("start the client");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    // The first connection arrived: the ramp is under way.
    let (first, _) = listener.accept().expect("the first connection");
    // SAFETY: signalling our own child by PID (not reaped: its waiter is still waiting).
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let out = match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.expect("the client's output"),
        Err(_) => {
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the interrupted client did not end within {RUN_LIMIT:?}");
        }
    };
    drop(first);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "interrupted: {stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let s = &doc["summary"];
    assert_eq!(s["interrupted"], true, "{s}");
    assert_every_connection_counted(s);
    let closed = s["not_attempted_by"]["run_closed"].as_u64().unwrap_or(0);
    assert!(closed > 0, "the connections whose turn never came are not attempted, run_closed: {s}");
    let close = s["phases"].as_array().and_then(|p| p.iter().find(|p| p["name"] == "close")).unwrap_or_else(|| panic!("no close phase: {s}"));
    assert_eq!(close["not_attempted"]["run_closed"].as_u64(), Some(closed), "given up when the run closed: {close}");
    assert!(s["established"].as_u64() >= Some(1), "{s}");
}

/// A peer that accepts and never answers: every heartbeat sent is
/// unanswered, counted so, and the run fails on it with a sentence that
/// says so (before, 4,259 answered of 200,198 sent passed without a word).
#[test]
fn heartbeats_a_peer_never_answers_fail_the_run() {
    // The kernel picks the port (see the first test).
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("its port").port();
    // Accept and hold, reading nothing and writing nothing.
    let holder = std::thread::spawn(move || (0..2).map(|_| listener.accept().expect("accept").0).collect::<Vec<_>>());
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "2", "--workers", "1"]);
    cmd.args(["--heartbeat", "200ms", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, RUN_LIMIT);
    drop(holder.join().expect("the holder"));
    assert_eq!(code, 1, "unanswered heartbeats fail the run: {err}");
    assert!(err.contains("heartbeats were not answered"), "the verdict names them: {err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let s = &doc["summary"];
    assert_eq!(s["established"], 2, "{s}");
    let sent = s["heartbeats_sent"].as_u64().unwrap_or(0);
    assert!(sent > 0, "heartbeats went out over the 2 s hold: {s}");
    assert_eq!(s["heartbeats_answered"], 0, "{s}");
    assert_eq!(s["heartbeats_unanswered"].as_u64(), Some(sent), "every one unanswered: {s}");
    assert_every_connection_counted(s);
}
