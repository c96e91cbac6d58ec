//! Helpers for end-to-end tests: run the real binary, read its JSON
//! lines, and make sure every process we start dies with the test.
//!
//! What keeps the tests honest lives here too: ports come from one
//! allocator ([`free_ports`]) so test files never collide; waits are on
//! conditions ([`wait_until`], [`Running::wait_for`]), each with a deadline
//! that names what it waited for; what peers and servers print goes to a
//! per-test log ([`TestLog`]) shown only when the test fails; a test that
//! needs network namespaces says so ([`needs_netns`]) and fails with the
//! reason where they cannot be made.
#![allow(dead_code)]
pub mod browser;
pub mod framed;
pub mod lab;
pub mod mqtt_raw;
pub mod pki;
pub mod ports;
pub mod proc;

// Not every test file uses every helper.
#[allow(unused_imports)]
pub use ports::{free_port, free_ports, Ports};
#[allow(unused_imports)]
pub use proc::{needs_netns, test_name, Peer, TestLog};

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Path of a peer script in tests/peers.
pub fn peer(script: &str) -> String {
    format!("{}/tests/peers/{script}", env!("CARGO_MANIFEST_DIR"))
}

pub fn megaconn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_megaconn"))
}

/// Cap RLIMIT_NOFILE (soft and hard) of the command's process.
pub fn with_fd_limit(cmd: &mut Command, n: u64) {
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit { rlim_cur: n, rlim_max: n };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A child process killed (by PID) when the guard drops, even when the
/// test panics. Its workers die with it (PR_SET_PDEATHSIG). Its stderr and
/// stdout go to a [`TestLog`] shown if the test fails; its JSON lines are
/// read by [`Running::wait_for`].
pub struct Running {
    pub child: Child,
    pub lines: Receiver<Value>,
    pub log: TestLog,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Running {
        let what: Vec<String> = std::iter::once(cmd.get_program()).chain(cmd.get_args()).take(6).map(|a| a.to_string_lossy().into_owned()).collect();
        let what = what.iter().map(|a| a.rsplit('/').next().unwrap_or(a)).collect::<Vec<_>>().join(" ");
        let log = TestLog::new(&what);
        let mut child = cmd.stdout(Stdio::piped()).stderr(log.stdio()).spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
        let out = child.stdout.take().unwrap();
        let mut copy = log.file();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Read to the end even when nobody listens any more: a closed
            // pipe would make the process fail on its next print.
            let mut listening = true;
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(copy, "[stdout] {line}");
                if let (true, Ok(v)) = (listening, serde_json::from_str::<Value>(&line)) {
                    listening = tx.send(v).is_ok();
                }
            }
        });
        Running { child, lines: rx, log }
    }

    /// Wait for a JSON line satisfying `pred`; panic after `timeout`,
    /// naming `what` and the last line seen.
    pub fn wait_for(&self, timeout: Duration, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(v) if pred(&v) => return v,
                Ok(v) => last = Some(v),
                Err(RecvTimeoutError::Timeout) => panic!("timed out after {timeout:?} waiting for {what}; last line: {last:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("the process ended while waiting for {what}; last line: {last:?}"),
            }
        }
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child by PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "process did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `ok` (every 20 ms) until it holds; panic after `timeout`, naming
/// `what`. For conditions no process announces (a socket state, a file, a
/// count read over HTTP).
pub fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < end, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run a command to completion with a time limit; returns (exit code,
/// stdout, stderr). Past the limit it is killed (by PID) and the test
/// fails with what it printed.
pub fn run(mut cmd: Command, limit: Duration) -> (i32, String, String) {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("start {:?}: {e}", cmd.get_program()));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let text = |out: std::process::Output| {
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    match rx.recv_timeout(limit) {
        Ok(out) => text(out.unwrap()),
        Err(_) => {
            // SAFETY: killing our own child by PID (not reaped: its waiter is still waiting).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let said = rx.recv_timeout(Duration::from_secs(10)).ok().and_then(Result::ok).map(text);
            panic!("{:?} did not finish within {limit:?}; it printed: {said:?}", cmd.get_args().collect::<Vec<_>>());
        }
    }
}

/// Lines `ss -tanH state STATE FILTER` prints: sockets in that state.
fn ss_count(state: &str, filter: &str) -> usize {
    let out = Command::new("ss").args(["-tanH", "state", state, filter]).output().expect("ss is installed (iproute2)");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

/// TCP sockets (any state) on loopback with a local or remote port in
/// [lo, hi], as `ss` lists them.
pub fn sockets_on(lo: u16, hi: u16) -> usize {
    ss_count("all", &format!("( sport >= :{lo} and sport <= :{hi} ) or ( dport >= :{lo} and dport <= :{hi} )"))
}

/// Listening sockets on this port, as `ss` lists them.
pub fn listeners_on(port: u16) -> usize {
    ss_count("listening", &format!("sport = :{port}"))
}

/// Run a `megaconn client ... --json` that must hold all `n` connections
/// with every heartbeat answered; returns its summary.
pub fn client_held_all(cmd: Command, n: u64) -> Value {
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let s = serde_json::from_str::<Value>(&out).unwrap()["summary"].clone();
    assert_eq!((s["established"].as_u64(), s["held"].as_u64()), (Some(n), Some(n)), "{s}");
    assert_eq!(s["heartbeats_answered"], s["heartbeats_sent"], "{s}");
    s
}

/// Start a server with JSON output and wait until it listens.
pub fn server(args: &[&str], fd_limit: Option<u64>) -> (Running, Value) {
    let (s, plan, _) = server_ready(args, fd_limit);
    (s, plan)
}

/// Established TCP sockets whose local port is in [lo, hi] (the server's
/// side of each connection), as `ss` counts them.
pub fn established_on(lo: u16, hi: u16) -> usize {
    ss_count("established", &format!("( sport >= :{lo} and sport <= :{hi} )"))
}

/// One TCP socket as `ss -tni` shows it.
#[derive(Debug, Clone)]
pub struct TcpSocket {
    pub state: String,
    /// Bytes received that the owner has not read yet.
    pub recv_q: u64,
    /// Bytes sent that the peer has not acknowledged yet.
    pub send_q: u64,
    /// Bytes the kernel received on it in all.
    pub bytes_received: u64,
}

/// The loopback TCP socket with local port `local` and remote port
/// `remote`, if it exists.
pub fn tcp_socket(local: u16, remote: u16) -> Option<TcpSocket> {
    let filter = format!("( sport = :{local} and dport = :{remote} )");
    let out = Command::new("ss").args(["-tniH", "state", "all", &filter]).output().expect("ss is installed (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut words = text.split_whitespace();
    let state = words.next()?.to_string();
    let recv_q = words.next()?.parse().ok()?;
    let send_q = words.next()?.parse().ok()?;
    let bytes_received = text.split_whitespace().find_map(|w| w.strip_prefix("bytes_received:")).and_then(|n| n.parse().ok()).unwrap_or(0);
    Some(TcpSocket { state, recv_q, send_q, bytes_received })
}

/// Established TCP sockets inside network namespace `ns` (both ends of a
/// connection inside it count).
pub fn established_in_netns(ns: &str) -> usize {
    let out = Command::new("ip").args(["netns", "exec", ns, "ss", "-tanH", "state", "established"]).output().expect("ip netns exec ss");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

/// Threads of a process (entries of /proc/PID/task).
pub fn threads_of(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0)
}

/// SIGKILL a process we started (a worker, by the PID its supervisor reported).
pub fn kill9(pid: u64) {
    // SAFETY: signalling a PID our own server reported for its worker.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

/// The worker PIDs a server reported when it became ready.
pub fn pids(ready: &Value) -> Vec<u64> {
    ready["pids"].as_array().expect("pids").iter().map(|p| p.as_u64().unwrap()).collect()
}

/// Start a server with JSON output; returns it with its plan and ready events.
pub fn server_ready(args: &[&str], fd_limit: Option<u64>) -> (Running, Value, Value) {
    let mut cmd = megaconn();
    cmd.arg("server").args(args).args(["--json", "--stats-interval", "200ms", "--duration", "120s"]);
    if !args.contains(&"--admin") {
        // Tests run in parallel: an ephemeral admin port each.
        cmd.args(["--admin", "127.0.0.1:0"]);
    }
    if !args.contains(&"--drain-period") {
        // A test's SIGTERM closes what is left at once (tests/drain.rs
        // spreads the closes over a period).
        cmd.args(["--drain-period", "0s"]);
    }
    if let Some(n) = fd_limit {
        with_fd_limit(&mut cmd, n);
    }
    let s = Running::spawn(cmd);
    let plan = s.wait_for(Duration::from_secs(20), "server plan", |v| v["event"] == "plan");
    let ready = s.wait_for(Duration::from_secs(20), "server ready", |v| v["event"] == "ready");
    (s, plan, ready)
}

/// One HTTP/1.1 request over a fresh connection; (status, body).
pub fn http(addr: &str, method: &str, path: &str, body: &[u8], token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("admin API reachable");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    // As an operator's curl would: a POST names a content type a web
    // page cannot send cross-site (the admin API refuses text/plain).
    let kind = if method == "POST" { "Content-Type: application/octet-stream\r\n" } else { "" };
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}{kind}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").map_or(out.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&out[..at]).to_ascii_lowercase();
    // nats-server's monitoring answers a long body in chunks.
    let body = if head.contains("transfer-encoding: chunked") { dechunk(&out[at..]) } else { out[at..].to_vec() };
    (status, String::from_utf8_lossy(&body).to_string())
}

/// An HTTP/1.1 chunked body, joined (what arrived of it).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&raw[..eol]);
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        let rest = &raw[eol + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        body.extend_from_slice(&rest[..n]);
        raw = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    body
}

/// Raise this test process's soft fd limit to its hard limit.
pub fn raise_fd_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on structs we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

/// A WebSocket connection to `addr` with its Upgrade answered 101 (30 s
/// read timeout), by hand: nothing of megaconn's own client in between.
#[allow(dead_code)]
pub fn ws_handshake(addr: &str) -> std::net::TcpStream {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "handshake answered");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s
}

/// The value of one sample of a Prometheus text exposition, `name` with
/// its labels as written (`megaconn_x_total{reason="y"}`); None when no
/// line has exactly that name (a prefix such as `..._total 20` of a line
/// `..._total 200` does not count).
pub fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.split(' ').next()?.parse().ok())
}

/// A masked client frame: `fin`, `opcode`, payload (all zero mask).
pub fn ws_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut f = vec![if fin { 0x80 } else { 0 } | opcode, 0x80 | payload.len() as u8, 0, 0, 0, 0];
    f.extend_from_slice(payload);
    f
}

/// Processes whose parent is `pid` (a megaconn's worker processes).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        // pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out.sort_unstable();
    out
}
