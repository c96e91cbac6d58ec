//! `--protocol echo|discard`: any TCP client can hold connections against
//! megaconn. The peer here is a plain Python socket client.
use crate::common::*;
use std::io::{Read, Write};
use std::time::Duration;

/// Run a Python snippet (a client) to completion; (exited 0, stdout + stderr).
fn python(script: &str) -> (bool, String) {
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", script]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    (code == 0, format!("{out}{err}"))
}

/// A Python asyncio server on `port` (`handler` is the body of
/// `async def serve(r, w)`, which may count into the globals `bad` and
/// `served`). A reset from the client is how megaconn closes at the end: it
/// is counted, not printed. The server prints "ready", and when its stdin
/// closes, `report <served> <bad> <resets> <errors>`, where errors are
/// exceptions nobody expected (their tracebacks go to the test's log).
fn python_server(port: u16, handler: &str) -> Peer {
    let body: String = handler.lines().map(|l| format!("            {l}\n")).collect();
    let script = format!(
        "import asyncio, struct, sys, traceback\n\
         served = bad = resets = errors = 0\n\
         async def serve(r, w):\n\
         \x20   global served, bad, resets, errors\n\
         \x20   try:\n\
         \x20       try:\n\
         {body}\
         \x20       except asyncio.IncompleteReadError:\n\
         \x20           pass\n\
         \x20       except ConnectionResetError:\n\
         \x20           resets += 1\n\
         \x20       except Exception:\n\
         \x20           errors += 1\n\
         \x20           traceback.print_exc()\n\
         \x20   finally:\n\
         \x20       w.close()\n\
         async def main():\n\
         \x20   s = await asyncio.start_server(serve, '127.0.0.1', {port}, backlog=1024)\n\
         \x20   print('ready', flush=True)\n\
         \x20   await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)\n\
         \x20   print('report', served, bad, resets, errors, flush=True)\n\
         asyncio.run(main())\n"
    );
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", &script]).stdin(std::process::Stdio::piped());
    let mut server = Peer::spawn("python asyncio server", cmd);
    assert_eq!(server.line(Duration::from_secs(20), "ready"), "ready");
    server
}

/// Close the server's stdin and read its report: (served, bad, resets, errors).
fn report(server: &mut Peer) -> (u64, u64, u64, u64) {
    drop(server.stdin());
    let line = server.line(Duration::from_secs(20), "the report");
    let n: Vec<u64> = line.strip_prefix("report ").unwrap_or_else(|| panic!("{line}")).split(' ').map(|x| x.parse().unwrap()).collect();
    server.finish_ok(Duration::from_secs(20));
    (n[0], n[1], n[2], n[3])
}

#[test]
fn echo_returns_every_byte_and_discard_keeps_the_connection() {
    let port = free_port();
    let (mut echo, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "echo"], None);
    let (ok, out) = python(&format!(
        "import socket, os\n\
         conns = [socket.create_connection(('127.0.0.1', {port})) for _ in range(50)]\n\
         for i, s in enumerate(conns):\n\
         \x20   data = os.urandom(1000 + i * 997)\n\
         \x20   s.sendall(data)\n\
         \x20   got = b''\n\
         \x20   s.settimeout(5)\n\
         \x20   while len(got) < len(data):\n\
         \x20       chunk = s.recv(65536)\n\
         \x20       assert chunk, 'closed early'\n\
         \x20       got += chunk\n\
         \x20   assert got == data, (i, len(got), len(data))\n\
         print('echoed', len(conns))\n",
    ));
    assert!(ok && out.contains("echoed 50"), "{out}");
    assert!(echo.terminate().success());

    let port = free_port();
    let (mut discard, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "discard"], None);
    // Silence is checked once the server has read all 1,000,000 bytes
    // (ss: nothing left in its receive queue) and reported twice since:
    // anything it would have answered is counted by then.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(&vec![b'x'; 1_000_000]).unwrap();
    let me = c.local_addr().unwrap().port();
    wait_until("the discard server read every byte", Duration::from_secs(10), || {
        tcp_socket(port, me).is_some_and(|s| s.bytes_received == 1_000_000 && s.recv_q == 0)
    });
    discard.wait_for(Duration::from_secs(10), "a stats line", |v| v["event"] == "stats");
    let v = discard.wait_for(Duration::from_secs(10), "the next stats line", |v| v["event"] == "stats");
    assert_eq!(v["frames_out"], 0, "{v}");
    assert!(v["frames_in"].as_u64() > Some(0), "the reads are counted: {v}");
    assert_eq!(v["active"], 1, "the connection is kept: {v}");
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    match c.read(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("discard must keep the connection open and silent: {other:?}"),
    }
    assert!(discard.terminate().success());
}

#[test]
fn the_client_refuses_server_only_protocols() {
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--ports", &free_port().to_string(), "--protocol", "echo"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid value 'echo'") && err.contains("[possible values: framed, ws, http, echo8, raw, sse, mqtt]"), "{err}");
}

#[test]
fn the_raw_client_times_round_trips_against_a_python_echo_server() {
    // An asyncio echo server nobody here wrote the client for.
    let port = free_port();
    let mut server = python_server(port, "served += 1\nwhile data := await r.read(65536):\n    w.write(data)\n    await w.drain()");
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "200", "--protocol", "raw", "--message", "PING \\{ts}\\r\\n"]);
    cmd.args(["--heartbeat", "200ms", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let (served, _, _, errors) = report(&mut server);
    assert_eq!((served, errors), (200, 0), "the echo server served every connection without an error");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["summary"];
    let sent = s["heartbeats_sent"].as_u64().unwrap();
    assert!(sent >= 200 * 5, "{s}");
    assert_eq!(s["heartbeats_answered"].as_u64(), Some(sent), "every echo matched: {s}");
    assert_eq!(s["heartbeat_rtt_ms"]["count"].as_u64(), Some(sent), "{s}");
    assert_eq!(s["raw_bytes_in"].as_u64(), Some(sent * 27), "27-byte messages: {s}");
}

/// A home-grown length-prefixed protocol (magic 0xCAFE, u16 length) as a
/// Python asyncio server speaks it: it checks every frame and echoes it;
/// a frame without the magic is counted as bad and its connection closed.
fn python_codec_server(port: u16) -> Peer {
    python_server(
        port,
        "served += 1\n\
         while True:\n\
         \x20   head = await r.readexactly(4)\n\
         \x20   if head[:2] != b'\\xca\\xfe':\n\
         \x20       bad += 1\n\
         \x20       break\n\
         \x20   (n,) = struct.unpack('>H', head[2:])\n\
         \x20   w.write(head + await r.readexactly(n))\n\
         \x20   await w.drain()",
    )
}

#[test]
fn the_raw_client_frames_messages_with_a_length_codec() {
    let port = free_port();
    let mut server = python_codec_server(port);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "200", "--protocol", "raw", "--codec", "len:2,magic=cafe"]);
    cmd.args(["--first-message", "LOGIN user-1", "--message", "PING \\{ts}", "--heartbeat", "200ms", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let s = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    let sent = s["heartbeats_sent"].as_u64().unwrap();
    assert!(sent >= 200 * 5, "{s}");
    assert_eq!(s["heartbeats_answered"].as_u64(), Some(sent), "every framed echo timed: {s}");
    assert_eq!(s["raw_messages_in"].as_u64(), Some(sent + 200), "pings and the 200 logins: {s}");
    assert_eq!(s["raw_bytes_in"].as_u64(), Some(sent * (4 + 25) + 200 * (4 + 12)), "{s}");
    assert!(s["mode"].as_str().unwrap().contains("framed len:2,magic=cafe"), "{s}");

    // The same message on the request schedule: echoes are replies.
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "100", "--protocol", "raw", "--codec", "len:2,magic=cafe"]);
    cmd.args(["--message", "REQ \\{ts}", "--request-rate", "5/s", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let (served, bad, _, errors) = report(&mut server);
    assert_eq!((served, bad, errors), (300, 0, 0), "the server saw 300 connections and no frame without its magic");
    let s = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    let r = &s["requests"];
    assert!(r["sent"].as_u64().unwrap() >= 100 * 5 * 2, "{s}");
    assert_eq!(r["replies"], r["sent"], "{s}");
    assert_eq!(r["latency_ms"]["count"], r["sent"], "{s}");
    assert_eq!(s["heartbeats_sent"], 0, "{s}");
}

#[test]
fn a_codec_mismatch_is_named() {
    // The server speaks magic 0xCAFE; a client with another magic sees
    // the server close every connection, and both its summary (stdout)
    // and its one-line error (stderr) name the likely cause.
    let port = free_port();
    let mut server = python_codec_server(port);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "20", "--protocol", "raw", "--codec", "len:4", "--message", "x"]);
    cmd.args(["--heartbeat", "200ms", "--hold", "2s"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 1, "{out}{err}");
    let (served, bad, _, errors) = report(&mut server);
    assert_eq!((served, bad, errors), (20, 20, 0), "the server refused each connection's first frame");
    let lost = out.lines().find(|l| l.starts_with("lost")).unwrap_or_else(|| panic!("a 'lost' line in the summary: {out}"));
    assert!(lost.contains("peer_closed=20") && lost.contains("does it speak this protocol?"), "{out}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("megaconn client: ") && last.contains("does it speak this protocol?"), "the error names the cause: {err}");
}
