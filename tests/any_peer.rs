//! `--protocol echo|discard`: any TCP client can hold connections against
//! megaconn. The peer here is a plain Python socket client.
mod common;
use common::*;
use std::time::Duration;

fn python(script: &str) -> (bool, String) {
    let out = std::process::Command::new("python3").args(["-c", script]).output().expect("python3");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn echo_returns_every_byte_and_discard_keeps_the_connection() {
    let (mut echo, _) = server(&["--ports", "21700", "--workers", "1", "--protocol", "echo"], None);
    let (ok, out) = python(
        "import socket, os\n\
         conns = [socket.create_connection(('127.0.0.1', 21700)) for _ in range(50)]\n\
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
    );
    assert!(ok && out.contains("echoed 50"), "{out}");
    assert!(echo.terminate().success());

    let (mut discard, _) = server(&["--ports", "21701", "--workers", "1", "--protocol", "discard"], None);
    let (ok, out) = python(
        "import socket\n\
         s = socket.create_connection(('127.0.0.1', 21701))\n\
         s.sendall(b'x' * 1000000)\n\
         s.settimeout(0.5)\n\
         try:\n\
         \x20   got = s.recv(10)\n\
         \x20   print('unexpected', got)\n\
         except socket.timeout:\n\
         \x20   print('silent and open')\n",
    );
    assert!(ok && out.contains("silent and open"), "{out}");
    let v = discard.wait_for(Duration::from_secs(10), "discard counted reads", |v| v["event"] == "stats" && v["frames_in"].as_u64() > Some(0));
    assert_eq!(v["frames_out"], 0, "{v}");
    assert!(discard.terminate().success());
}

#[test]
fn the_client_refuses_server_only_protocols() {
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--ports", "21702", "--protocol", "echo"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("server protocol"), "{err}");
}

#[test]
fn the_raw_client_times_round_trips_against_a_python_echo_server() {
    // An asyncio echo server nobody here wrote the client for.
    let mut py = std::process::Command::new("python3");
    py.args([
        "-c",
        "import asyncio\n\
         async def echo(r, w):\n\
         \x20   while data := await r.read(65536):\n\
         \x20       w.write(data)\n\
         \x20       await w.drain()\n\
         \x20   w.close()\n\
         async def main():\n\
         \x20   s = await asyncio.start_server(echo, '127.0.0.1', 21710, backlog=1024)\n\
         \x20   print('ready', flush=True)\n\
         \x20   await asyncio.sleep(60)\n\
         asyncio.run(main())\n",
    ]);
    py.stdout(std::process::Stdio::piped());
    let mut server = py.spawn().expect("python3");
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.stdout.as_mut().unwrap()), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21710", "--connections", "200", "--protocol", "raw", "--message", "PING \\{ts}\\r\\n"]);
    cmd.args(["--heartbeat", "200ms", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["summary"];
    let sent = s["heartbeats_sent"].as_u64().unwrap();
    assert!(sent >= 200 * 5, "{s}");
    assert_eq!(s["heartbeats_answered"].as_u64(), Some(sent), "every echo matched: {s}");
    assert_eq!(s["heartbeat_rtt_ms"]["count"].as_u64(), Some(sent), "{s}");
    assert_eq!(s["raw_bytes_in"].as_u64(), Some(sent * 27), "27-byte messages: {s}");
}

/// A home-grown length-prefixed protocol (magic 0xCAFE, u16 length) as a
/// Python asyncio server speaks it: it checks every frame and echoes it.
fn python_codec_server(port: u16) -> std::process::Child {
    let script = format!(
        "import asyncio, struct\n\
         async def serve(r, w):\n\
         \x20   try:\n\
         \x20       while True:\n\
         \x20           head = await r.readexactly(4)\n\
         \x20           assert head[:2] == b'\\xca\\xfe', head\n\
         \x20           (n,) = struct.unpack('>H', head[2:])\n\
         \x20           w.write(head + await r.readexactly(n))\n\
         \x20           await w.drain()\n\
         \x20   except asyncio.IncompleteReadError:\n\
         \x20       w.close()\n\
         async def main():\n\
         \x20   s = await asyncio.start_server(serve, '127.0.0.1', {port}, backlog=1024)\n\
         \x20   print('ready', flush=True)\n\
         \x20   await asyncio.sleep(60)\n\
         asyncio.run(main())\n"
    );
    let mut py = std::process::Command::new("python3");
    py.args(["-c", &script]).stdout(std::process::Stdio::piped());
    let mut child = py.spawn().expect("python3");
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    child
}

#[test]
fn the_raw_client_frames_messages_with_a_length_codec() {
    let mut server = python_codec_server(21711);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21711", "--connections", "200", "--protocol", "raw", "--codec", "len:2,magic=cafe"]);
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
    cmd.args(["client", "--ports", "21711", "--connections", "100", "--protocol", "raw", "--codec", "len:2,magic=cafe"]);
    cmd.args(["--message", "REQ \\{ts}", "--request-rate", "5/s", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(code, 0, "{err}");
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
    // its echo as a bad frame, and the summary says so.
    let mut server = python_codec_server(21712);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21712", "--connections", "20", "--protocol", "raw", "--codec", "len:4", "--message", "x"]);
    cmd.args(["--heartbeat", "200ms", "--hold", "2s"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("does it speak this protocol?") || err.contains("does it speak this protocol?"), "{out}{err}");
}
