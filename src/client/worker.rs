//! A client worker process: one single-threaded epoll reactor (mio) that
//! opens its share of the plan at a paced rate, heartbeats on an open-loop
//! schedule, and closes everything when told (or at its own deadline).
//!
//! Connections live in a flat `Vec` indexed by their local plan index
//! (which is also their mio token), so the schedules below need no
//! per-connection timers:
//! - ramp: connection k is due at `start + k / rate`;
//! - heartbeats: send number j goes to connection `j % count` and is due at
//!   `start + j * interval / count`, so every connection beats once per
//!   interval and the beats are spread evenly. The due time travels in the
//!   payload and the round trip is measured from it (open loop: a slow
//!   server shows up as latency, not as fewer beats).

use super::plan::{address_of, expand};
use crate::cli::CloseMode;
use crate::net::{self, ReadEnd, Spill};
use crate::proto::Protocol;
use super::replies;
use crate::stats::histogram;
use crate::sys::mono_us;
use crate::workers::control::{self, ClientSnapshot, Command, CommandReader, WorkerMsg};
use anyhow::Result;
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use serde::{Deserialize, Serialize};
use socket2::{Domain, SockRef, Socket, Type};
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientWorkerConfig {
    pub worker: usize,
    pub target: Ipv4Addr,
    pub ports: Vec<u16>,
    pub source_ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
    /// Global index of this worker's first connection, and how many.
    pub first: u64,
    pub count: u64,
    /// Connections per second for this worker.
    pub rate: f64,
    /// CLOCK_MONOTONIC µs at which every worker starts its ramp.
    pub start_at_us: u64,
    pub connect_timeout_ms: u64,
    pub heartbeat_us: Option<u64>,
    pub payload: usize,
    /// Interval between requests on one connection (µs), if any.
    pub request_us: Option<u64>,
    pub request_timeout_us: u64,
    pub protocol: Protocol,
    pub stats_interval_ms: u64,
    pub close: CloseMode,
    /// CLOCK_MONOTONIC µs at which the worker closes by itself, whatever
    /// its supervisor says: every load loop is bounded in time.
    pub deadline_us: u64,
}

mod schedule;

const STDIN: Token = Token(usize::MAX - 1);
/// What `--protocol http` sends: a keep-alive GET.
const HTTP_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: megaconn\r\n\r\n";
const SCRATCH: usize = 64 * 1024;
/// Fewest µs between ramp wake-ups: batching a few connects per wake-up
/// keeps 100 processes from spending the CPU on epoll_wait. Heartbeats and
/// requests have no such floor: they leave at their intended time.
const RAMP_TICK_US: u64 = 1_000;
/// Tick on which heartbeats are batched (see `next_wake`).
const BEAT_TICK_US: u64 = 10_000;
/// Fewest handshakes a worker may have in flight (see `ramp`).
const MIN_INFLIGHT: f64 = 128.0;
/// Longest wait for outstanding heartbeats before closing.
const DRAIN_US: u64 = 3_000_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    Established,
    Done,
}

struct Slot {
    stream: Option<mio::net::TcpStream>,
    state: State,
    /// Low 32 bits of mono µs when connect() was called.
    started_us: u32,
    partial: Spill,
    backlog: Spill,
    /// HTTP: intended send times of requests awaiting responses, in order
    /// (HTTP responses carry no timestamp).
    inflight: Option<Box<VecDeque<u64>>>,
}

#[derive(PartialEq, Eq)]
enum Phase {
    Running,
    Draining { until_us: u64 },
}

struct Worker {
    cfg: ClientWorkerConfig,
    sources: Vec<Ipv4Addr>,
    poll: Poll,
    slots: Vec<Slot>,
    /// Connecting slots in the order they were started (deadline order).
    pending: VecDeque<u32>,
    created: u64,
    beat_cursor: u64,
    request_cursor: u64,
    /// Wall-clock minus monotonic µs, for echo8's epoch-ms stamps.
    wall_offset_us: i64,
    stats: ClientSnapshot,
    connect_hist: Histogram<u64>,
    rtt_hist: Histogram<u64>,
    request_hist: Histogram<u64>,
    last_resolved_us: u64,
    phase: Phase,
    scratch: Vec<u8>,
    out: Vec<u8>,
}

pub fn run(cfg: ClientWorkerConfig) -> Result<()> {
    crate::sys::raise_fd_limit();
    let poll = Poll::new()?;
    let mut commands = CommandReader::register(poll.registry(), STDIN)?;
    let n = cfg.count as usize;
    let mut w = Worker {
        sources: expand(&cfg.source_ranges),
        stats: ClientSnapshot { worker: cfg.worker, planned: cfg.count, ..Default::default() },
        cfg,
        poll,
        slots: (0..n).map(|_| Slot { stream: None, state: State::Idle, started_us: 0, partial: None, backlog: None, inflight: None }).collect(),
        pending: VecDeque::new(),
        created: 0,
        beat_cursor: 0,
        request_cursor: 0,
        wall_offset_us: wall_us() as i64 - mono_us() as i64,
        connect_hist: histogram::new(),
        rtt_hist: histogram::new(),
        request_hist: histogram::new(),
        last_resolved_us: 0,
        phase: Phase::Running,
        scratch: vec![0; SCRATCH],
        out: Vec::with_capacity(1024),
    };
    control::emit(&WorkerMsg::Ready { worker: w.cfg.worker, pid: std::process::id(), fd_limit: crate::sys::fd_limit().hard });
    w.event_loop(&mut commands)
}

impl Worker {
    fn event_loop(&mut self, commands: &mut CommandReader) -> Result<()> {
        let mut events = Events::with_capacity(1024);
        let interval_us = self.cfg.stats_interval_ms.max(50) * 1000;
        let mut next_stats = mono_us();
        loop {
            let now = mono_us();
            if now >= self.cfg.deadline_us && self.phase == Phase::Running {
                self.begin_drain(now);
            }
            if self.phase == Phase::Running {
                self.ramp(now);
                self.beat(now);
                self.request(now);
            }
            self.expire_connects(now);
            if let Phase::Draining { until_us } = self.phase {
                let s = &self.stats;
                let settled = s.heartbeats_answered >= s.heartbeats_sent && s.replies + s.rejected >= s.requests_sent;
                if now >= until_us || settled {
                    self.close_all();
                    self.report(true);
                    return Ok(());
                }
            }
            if now >= next_stats {
                self.report(false);
                next_stats = now + interval_us;
            }
            let wake = self.next_wake(now).min(next_stats);
            crate::timer::wait(&self.poll, Duration::from_micros(wake.saturating_sub(mono_us())));
            if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            for ev in events.iter() {
                if ev.token() == STDIN {
                    for cmd in commands.poll() {
                        match cmd {
                            Command::Close => self.begin_drain(mono_us()),
                            Command::Stop => {
                                self.close_all();
                                self.report(true);
                                return Ok(());
                            }
                        }
                    }
                    continue;
                }
                self.on_event(ev.token().0, ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_read_closed(), ev.is_writable() || ev.is_error());
            }
        }
    }

    fn next_wake(&self, now: u64) -> u64 {
        let mut wake = now + 100_000;
        if self.phase != Phase::Running {
            return now + 10_000;
        }
        if self.created < self.cfg.count {
            let due = self.cfg.start_at_us + (self.created as f64 * 1e6 / self.cfg.rate) as u64;
            wake = wake.min(due.max(now + RAMP_TICK_US));
        }
        // Heartbeats are keep-alives: batching them on a short tick saves
        // most wake-ups (costly on VMs) at the price of up to BEAT_TICK_US
        // of send delay, which their round trip honestly includes.
        // Requests leave at their exact intended time.
        if let Some(p) = self.heartbeat_period() {
            wake = wake.min(self.due_at(self.beat_cursor, p).max(now + BEAT_TICK_US));
        }
        if let Some(p) = self.cfg.request_us {
            wake = wake.min(self.due_at(self.request_cursor, p));
        }
        if let Some(&first) = self.pending.front() {
            let started = self.slots[first as usize].started_us;
            let age = (now as u32).wrapping_sub(started) as u64;
            wake = wake.min(now + (self.cfg.connect_timeout_ms * 1000).saturating_sub(age).max(1000));
        }
        wake.min(self.cfg.deadline_us.max(now))
    }

    /// Open every connection whose ramp time has come.
    fn ramp(&mut self, now: u64) {
        if self.created >= self.cfg.count || now < self.cfg.start_at_us {
            return;
        }
        let due = ((((now - self.cfg.start_at_us) as f64) * self.cfg.rate / 1e6) as u64 + 1).min(self.cfg.count);
        // Never offer handshakes faster than this process completes them:
        // beyond the cap the CPU would go to connect() while finished
        // handshakes wait unprocessed (and falsely time out).
        let cap = (self.cfg.rate / 10.0).max(MIN_INFLIGHT) as u64;
        while self.created < due && self.stats.connecting < cap {
            let k = self.created as usize;
            self.created += 1;
            self.open(k, now);
        }
    }

    fn open(&mut self, k: usize, now: u64) {
        let (src, port) = address_of(self.cfg.first + k as u64, &self.sources, &self.cfg.ports);
        let dst = SocketAddr::from((self.cfg.target, port));
        self.stats.attempted += 1;
        let opened = (|| -> io::Result<mio::net::TcpStream> {
            let s = Socket::new(Domain::IPV4, Type::STREAM.nonblocking(), None)?;
            if !src.is_unspecified() {
                // Defer the source port choice to connect(), where the
                // kernel only needs the full 4-tuple to be unique.
                let one: libc::c_int = 1;
                // SAFETY: setsockopt on a socket we own with an int option.
                let rc = unsafe {
                    libc::setsockopt(s_fd(&s), libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, (&one as *const libc::c_int).cast(), 4)
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
                s.bind(&SocketAddr::from((src, 0)).into())?;
            }
            s.set_nodelay(true)?;
            match s.connect(&dst.into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(e),
            }
            Ok(mio::net::TcpStream::from_std(std::net::TcpStream::from(s)))
        })();
        match opened {
            Ok(mut stream) => {
                if let Err(e) = self.poll.registry().register(&mut stream, Token(k), Interest::READABLE | Interest::WRITABLE) {
                    self.fail(k, crate::sys::error_kind_name(&e), now);
                    return;
                }
                let slot = &mut self.slots[k];
                slot.stream = Some(stream);
                slot.state = State::Connecting;
                slot.started_us = now as u32;
                self.stats.connecting += 1;
                self.pending.push_back(k as u32);
            }
            Err(e) => self.fail(k, crate::sys::error_kind_name(&e), now),
        }
    }

    fn fail(&mut self, k: usize, kind: String, now: u64) {
        let slot = &mut self.slots[k];
        if slot.state == State::Connecting {
            self.stats.connecting -= 1;
        }
        slot.stream = None;
        slot.state = State::Done;
        *self.stats.failed.entry(kind).or_insert(0) += 1;
        self.resolved(now);
    }

    fn resolved(&mut self, now: u64) {
        self.last_resolved_us = now;
        let s = &self.stats;
        if self.created == self.cfg.count && s.connecting == 0 && s.ramp_done_at_us.is_none() {
            self.stats.ramp_done_at_us = Some(now);
        }
    }

    fn expire_connects(&mut self, now: u64) {
        let timeout = self.cfg.connect_timeout_ms * 1000;
        while let Some(&k) = self.pending.front() {
            let slot = &self.slots[k as usize];
            if slot.state != State::Connecting {
                self.pending.pop_front();
                continue;
            }
            if ((now as u32).wrapping_sub(slot.started_us) as u64) < timeout {
                break;
            }
            self.pending.pop_front();
            self.fail(k as usize, "timeout".into(), now);
        }
    }

    fn on_event(&mut self, k: usize, readable: bool, read_closed: bool, writable: bool) {
        let now = mono_us();
        let Some(slot) = self.slots.get_mut(k) else { return };
        let Some(stream) = slot.stream.as_mut() else { return };
        if slot.state == State::Connecting {
            if !writable {
                return;
            }
            match stream.take_error() {
                Ok(Some(e)) | Err(e) => return self.fail(k, crate::sys::error_kind_name(&e), now),
                Ok(None) => {}
            }
            // SO_ERROR is 0 and the socket is writable: the handshake is
            // complete (a hang-up without an error is "not connected").
            let done = if read_closed { stream.peer_addr().map(|_| ()) } else { Ok(()) };
            match done {
                Ok(()) => {
                    let took = (now as u32).wrapping_sub(slot.started_us) as u64;
                    slot.state = State::Established;
                    histogram::record(&mut self.connect_hist, took);
                    self.stats.connecting -= 1;
                    self.stats.established += 1;
                    self.stats.established_total += 1;
                    self.resolved(now);
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => return self.fail(k, crate::sys::error_kind_name(&e), now),
            }
        }
        let slot = &mut self.slots[k];
        let stream = slot.stream.as_mut().expect("checked above");
        if writable && slot.backlog.is_some() {
            if let Err(reason) = net::flush(stream, &mut slot.backlog) {
                return self.lose(k, reason);
            }
        }
        if !readable {
            return;
        }
        let mut replies = replies::Replies {
            stats: &mut self.stats,
            rtt: &mut self.rtt_hist,
            latency: &mut self.request_hist,
            now,
            timeout_us: self.cfg.request_timeout_us,
        };
        let r = replies::read(self.cfg.protocol, stream, &mut slot.partial, &mut slot.inflight, &mut self.scratch, read_closed, self.wall_offset_us, &mut replies);
        match r {
            ReadEnd::Open => {}
            ReadEnd::Eof => self.lose(k, "peer_closed".into()),
            ReadEnd::Error(reason) => self.lose(k, reason),
        }
    }

    /// An established connection ended before we closed it.
    fn lose(&mut self, k: usize, reason: String) {
        let slot = &mut self.slots[k];
        if slot.state == State::Established {
            self.stats.established -= 1;
        }
        slot.stream = None;
        slot.partial = None;
        slot.backlog = None;
        slot.inflight = None;
        slot.state = State::Done;
        *self.stats.lost.entry(reason).or_insert(0) += 1;
    }

    fn begin_drain(&mut self, now: u64) {
        if self.phase == Phase::Running {
            let wait = if self.cfg.request_us.is_some() { DRAIN_US.max(self.cfg.request_timeout_us) } else { DRAIN_US };
            self.phase = Phase::Draining { until_us: now + wait };
        }
    }

    fn close_all(&mut self) {
        for slot in self.slots.iter_mut() {
            if let Some(stream) = slot.stream.take() {
                if self.cfg.close == CloseMode::Reset {
                    let _ = SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                }
                if slot.state == State::Connecting {
                    *self.stats.failed.entry("cancelled".into()).or_insert(0) += 1;
                    self.stats.connecting -= 1;
                }
                drop(stream);
            }
            slot.state = State::Done;
        }
        self.stats.established = 0;
    }

    fn report(&mut self, last: bool) {
        self.stats.connect_hist = histogram::encode(&self.connect_hist);
        self.stats.rtt_hist = histogram::encode(&self.rtt_hist);
        self.stats.request_hist = histogram::encode(&self.request_hist);
        self.request_hist.reset();
        self.connect_hist.reset();
        self.rtt_hist.reset();
        self.stats.rss_bytes = crate::sys::self_rss_bytes();
        self.stats.cpu_us = crate::sys::self_cpu_us();
        self.stats.at_us = mono_us();
        self.stats.last = last;
        control::emit(&WorkerMsg::Client(self.stats.clone()));
    }
}

fn wall_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

fn s_fd(s: &Socket) -> libc::c_int {
    use std::os::fd::AsRawFd;
    s.as_raw_fd()
}
