//! What one peer can hold of a server, on real sockets over loopback:
//! topics it subscribes to and leaves (freed, so churn leaves the
//! worker's memory flat), connections from one address (capped across
//! every worker), output it does not read (capped from the first spill)
//! and half a frame it never finishes (closed after the stall timeout).
mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u16).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

const HEARTBEAT: u8 = 1;
const HEARTBEAT_ACK: u8 = 2;
const SUBSCRIBE: u8 = 6;
const UNSUBSCRIBE: u8 = 7;

/// VmRSS of a process, in KiB.
fn rss_kib(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the worker is alive");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A small xorshift: random topic names without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Read frames from `s` until a heartbeat ack arrives (the server
/// answers in order, so everything sent before it was handled).
fn await_ack(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).expect("the server answers");
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let mut pos = 0;
        while buf.len() >= pos + 3 {
            let len = u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize;
            if buf.len() < pos + 2 + len {
                break;
            }
            if buf[pos + 2] == HEARTBEAT_ACK {
                return;
            }
            pos += 2 + len;
        }
        buf.drain(..pos);
    }
}

/// `cycles` subscribe+unsubscribe pairs to random topics over a few
/// connections, each batch confirmed by a heartbeat ack.
fn churn(addr: &str, rng: &mut Rng, cycles: usize) {
    const BATCH: usize = 1000;
    let mut conns: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for c in &conns {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    }
    for b in 0..cycles.div_ceil(BATCH) {
        let c = &mut conns[b % 4];
        let mut out = Vec::new();
        for _ in 0..BATCH {
            let topic = format!("t-{:016x}-{:016x}", rng.next(), rng.next());
            out.extend(frame(SUBSCRIBE, topic.as_bytes()));
            out.extend(frame(UNSUBSCRIBE, topic.as_bytes()));
        }
        out.extend(frame(HEARTBEAT, &[0; 8]));
        c.write_all(&out).unwrap();
        await_ack(c);
    }
}

#[test]
fn topic_churn_leaves_the_worker_rss_flat() {
    let ports = free_ports(1);
    let (srv, _plan, ready) = server_ready(&["--ports", &ports.arg(), "--workers", "1"], None);
    let pid = pids(&ready)[0];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    churn(&ports.addr(), &mut rng, 20_000);
    let warm = rss_kib(pid);
    churn(&ports.addr(), &mut rng, 200_000);
    let end = rss_kib(pid);
    eprintln!("worker RSS: {warm} KiB after 20,000 warm-up cycles, {end} KiB after 200,000 more");
    assert!(end * 100 <= warm * 105, "RSS grew from {warm} KiB to {end} KiB over 200,000 subscribe/unsubscribe cycles");
    // Nothing stayed: no topic, no subscription.
    srv.wait_for(Duration::from_secs(20), "no topics left", |v| v["event"] == "stats" && v["topics"] == 0 && v["subscriptions"] == 0);
}
