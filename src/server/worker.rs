//! A server worker process: one single-threaded epoll reactor (mio) over
//! every listening port and a slab of small connection records.
//!
//! Why mio and not a tokio task per connection: a task costs ~1 KB and a
//! per-connection read buffer several KB, while a slab entry here is 32
//! bytes; at a million connections that is the difference between ~1 GB
//! and ~32 MB of user memory. Reads go into one scratch buffer per worker.

use super::conn::Conn;
use crate::net::{self, ReadEnd};
use super::business::{BusinessMode, Stage};
use super::http::{self, HttpConfig};
use super::requests::Requests;
use super::service_time::ServiceTime;
use crate::proto::frame::{self, Kind};
use crate::proto::{Protocol, ECHO8_LEN};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;
use crate::workers::control::{self, Command, CommandReader, ServerSnapshot, WorkerMsg};
use anyhow::Result;
use mio::{Events, Interest, Poll, Token, Waker};
use serde::{Deserialize, Serialize};
use slab::Slab;
use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerWorkerConfig {
    pub worker: usize,
    pub listen: Ipv4Addr,
    pub ports: Vec<u16>,
    pub idle_timeout_ms: Option<u64>,
    pub stats_interval_ms: u64,
    pub protocol: Protocol,
    pub business: BusinessMode,
    /// Depth of the pool's queue (pool mode).
    pub queue: usize,
    pub service_time: ServiceTime,
    pub http: HttpConfig,
}

const STDIN: Token = Token(usize::MAX - 1);
/// Pool threads wake the event loop through this token.
const WAKER: Token = Token(usize::MAX - 2);
/// Listener tokens count down from here; connection tokens are slab keys.
const LISTENER_BASE: usize = usize::MAX / 2;
/// How long accept() pauses after EMFILE/ENFILE instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
const SCRATCH: usize = 64 * 1024;

struct Worker {
    cfg: ServerWorkerConfig,
    poll: Poll,
    listeners: Vec<mio::net::TcpListener>,
    conns: Slab<Conn>,
    stats: ServerSnapshot,
    started: Instant,
    /// Set while accepting is paused by fd exhaustion.
    accept_paused_until: Option<Instant>,
    scratch: Vec<u8>,
    out: Vec<u8>,
    stage: Stage,
    rng: SmallRng,
    next_gen: u32,
    /// The HTTP Date header, formatted once per second.
    date: String,
    date_sec: u64,
}

pub fn run(cfg: ServerWorkerConfig) -> Result<()> {
    crate::sys::raise_fd_limit();
    let worker = cfg.worker;
    let listeners = match cfg.ports.iter().map(|p| super::listener::bind(cfg.listen, *p)).collect::<Result<Vec<_>>>() {
        Ok(l) => l,
        Err(e) => {
            control::emit(&WorkerMsg::Fatal { worker, message: format!("{e:#}") });
            std::process::exit(1);
        }
    };
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let stage = Stage::new(cfg.business, cfg.queue, waker)?;
    let mut w = Worker {
        stage,
        rng: SmallRng::from_entropy(),
        next_gen: 0,
        date: String::new(),
        date_sec: 0,
        stats: ServerSnapshot { worker, ..Default::default() },
        cfg,
        poll,
        listeners,
        conns: Slab::new(),
        started: Instant::now(),
        accept_paused_until: None,
        scratch: vec![0; SCRATCH],
        out: Vec::with_capacity(SCRATCH),
    };
    for (i, l) in w.listeners.iter_mut().enumerate() {
        w.poll.registry().register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
    }
    let mut commands = CommandReader::register(w.poll.registry(), STDIN)?;
    control::emit(&WorkerMsg::Ready { worker, pid: std::process::id(), fd_limit: crate::sys::fd_limit().hard });
    w.event_loop(&mut commands)
}

impl Worker {
    fn now_s(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }

    /// Worker-relative time in 100 ms units.
    fn now_ds(&self) -> u32 {
        (self.started.elapsed().as_millis() / 100) as u32
    }

    fn refresh_date(&mut self) {
        let now = std::time::SystemTime::now();
        let sec = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if sec != self.date_sec {
            self.date_sec = sec;
            self.date = httpdate::fmt_http_date(now);
        }
    }

    fn event_loop(&mut self, commands: &mut CommandReader) -> Result<()> {
        let mut events = Events::with_capacity(1024);
        let interval = Duration::from_millis(self.cfg.stats_interval_ms.max(50));
        let mut next_stats = Instant::now();
        let mut next_sweep = Instant::now() + Duration::from_secs(1);
        loop {
            let now = Instant::now();
            if now >= next_stats {
                self.report(false);
                next_stats = now + interval;
            }
            let sweeping = self.cfg.idle_timeout_ms.is_some() || self.cfg.protocol == Protocol::Http;
            if sweeping && now >= next_sweep {
                self.sweep_idle();
                next_sweep = now + if self.cfg.protocol == Protocol::Http { Duration::from_millis(100) } else { Duration::from_secs(1) };
            }
            if self.cfg.protocol == Protocol::Http {
                self.refresh_date();
            }
            if let Some(t) = self.accept_paused_until {
                if now >= t {
                    self.accept_paused_until = None;
                    for i in 0..self.listeners.len() {
                        self.accept_all(i);
                    }
                }
            }
            self.deliver_done();
            let mut wake = next_stats;
            if let Some(t) = self.stage.next_due() {
                wake = wake.min(t);
            }
            if sweeping {
                wake = wake.min(next_sweep);
            }
            if let Some(t) = self.accept_paused_until {
                wake = wake.min(t);
            }
            crate::timer::wait(&self.poll, wake.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    STDIN => {
                        for cmd in commands.poll() {
                            if matches!(cmd, Command::Stop | Command::Close) {
                                let n = self.conns.len() as u64;
                                self.conns.clear();
                                if n > 0 {
                                    self.stats.closed += n;
                                    *self.stats.close_reasons.entry("server_stopped".into()).or_insert(0) += n;
                                }
                                self.stats.active = 0;
                                self.report(true);
                                return Ok(());
                            }
                        }
                    }
                    Token(t) if t >= LISTENER_BASE => {
                        if self.accept_paused_until.is_none() {
                            self.accept_all(t - LISTENER_BASE);
                        }
                    }
                    Token(key) => self.on_conn_event(key, ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_read_closed(), ev.is_writable()),
                }
            }
        }
    }

    fn accept_all(&mut self, i: usize) {
        loop {
            match self.listeners[i].accept() {
                Ok((mut stream, _)) => {
                    // Replies are small writes; Nagle would hold one back
                    // behind an unacknowledged one (up to a delayed-ACK
                    // timeout, ~40 ms).
                    let _ = stream.set_nodelay(true);
                    let entry = self.conns.vacant_entry();
                    let key = entry.key();
                    if self.poll.registry().register(&mut stream, Token(key), Interest::READABLE | Interest::WRITABLE).is_err() {
                        *self.stats.accept_errors.entry("register_failed".into()).or_insert(0) += 1;
                        continue;
                    }
                    self.next_gen = self.next_gen.wrapping_add(1);
                    entry.insert(Conn::new(stream, self.started.elapsed().as_secs() as u32, self.next_gen));
                    self.stats.accepted += 1;
                    self.stats.active += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let name = crate::sys::error_kind_name(&e);
                    *self.stats.accept_errors.entry(name).or_insert(0) += 1;
                    match e.raw_os_error() {
                        // Out of descriptors: retrying now would spin at
                        // 100% CPU on the same full queue. Back off.
                        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                            self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                            return;
                        }
                        // The peer gave up before we accepted: next one.
                        _ => continue,
                    }
                }
            }
        }
    }

    fn on_conn_event(&mut self, key: usize, readable: bool, read_closed: bool, writable: bool) {
        let now_s = self.now_s();
        let now_ds = self.now_ds();
        let Some(conn) = self.conns.get_mut(key) else { return };
        let mut end: Option<String> = None;
        if writable && conn.backlog.is_some() {
            if let Err(reason) = net::flush(&mut conn.stream, &mut conn.backlog) {
                end = Some(reason);
            }
        }
        if readable && end.is_none() {
            conn.last_seen_s = now_s;
            self.out.clear();
            let gen = conn.gen;
            let mut req = Requests { out: &mut self.out, stats: &mut self.stats, stage: &mut self.stage, rng: &mut self.rng, service: &self.cfg.service_time, key, gen };
            let r = match self.cfg.protocol {
                Protocol::Framed => net::read_frames(&mut conn.stream, &mut conn.partial, &mut self.scratch, read_closed, |f| {
                    req.stats.frames_in += 1;
                    match f.kind {
                        Kind::Heartbeat => {
                            frame::encode(req.out, Kind::HeartbeatAck, f.payload);
                            req.stats.frames_out += 1;
                        }
                        Kind::Request => {
                            let mut reply = Vec::with_capacity(frame::HEADER_LEN + f.payload.len());
                            frame::encode(&mut reply, Kind::Reply, f.payload);
                            req.handle(reply, true);
                        }
                        _ => return Err("bad_frame_unexpected_kind"),
                    }
                    Ok(())
                }),
                Protocol::Http => {
                    let http = &mut conn.http;
                    let mut ctx = http::Ctx { req, cfg: &self.cfg.http, date: &self.date };
                    let r = net::read_chunks(&mut conn.stream, &mut conn.partial, &mut self.scratch, read_closed, |buf| http::consume(&mut ctx, http, buf));
                    http::track_partial(&mut conn.http, conn.partial.is_some(), now_ds);
                    r
                }
                Protocol::Echo8 => net::read_fixed(&mut conn.stream, &mut conn.partial, &mut self.scratch, read_closed, ECHO8_LEN, |u| {
                    req.handle(u.to_vec(), false);
                    Ok(())
                }),
            };
            // Answer what was decoded even when the stream then ended.
            if let Err(reason) = net::send(&mut conn.stream, &mut conn.backlog, &self.out) {
                end.get_or_insert(reason);
            }
            match r {
                ReadEnd::Open => {}
                ReadEnd::Eof => end = end.or(Some("peer_closed".into())),
                ReadEnd::Error(reason) => end = end.or(Some(reason)),
            }
        }
        if let Some(reason) = end {
            self.close(key, reason);
        }
    }

    /// Send the replies of jobs the business stage finished since last time.
    fn deliver_done(&mut self) {
        for done in self.stage.take_done(Instant::now()) {
            self.stats.count_reply(done.applied);
            let Some(conn) = self.conns.get_mut(done.job.key) else { continue };
            if conn.gen != done.job.gen {
                continue;
            }
            if let Err(reason) = net::send(&mut conn.stream, &mut conn.backlog, &done.job.reply) {
                self.close(done.job.key, reason);
                continue;
            }
            if self.cfg.protocol == Protocol::Http {
                self.resume_http(done.job.key);
            }
        }
    }

    /// After an HTTP reply left the business stage: close if the request
    /// asked to, else parse what was pipelined behind it.
    fn resume_http(&mut self, key: usize) {
        let now_ds = self.now_ds();
        let Some(conn) = self.conns.get_mut(key) else { return };
        let Some(h) = conn.http.as_mut() else { return };
        h.awaiting = false;
        if h.close_after {
            return self.close(key, "http_connection_close".into());
        }
        let Some(buf) = conn.partial.take() else {
            http::track_partial(&mut conn.http, false, now_ds);
            return;
        };
        self.out.clear();
        let req = Requests {
            out: &mut self.out,
            stats: &mut self.stats,
            stage: &mut self.stage,
            rng: &mut self.rng,
            service: &self.cfg.service_time,
            key,
            gen: conn.gen,
        };
        let mut ctx = http::Ctx { req, cfg: &self.cfg.http, date: &self.date };
        let r = http::consume(&mut ctx, &mut conn.http, &buf);
        let mut end = r.as_ref().err().map(|e| e.to_string());
        if let Ok(used) = r {
            if used < buf.len() {
                conn.partial = Some(Box::new(buf[used..].to_vec()));
            }
        }
        http::track_partial(&mut conn.http, conn.partial.is_some(), now_ds);
        if let Err(reason) = net::send(&mut conn.stream, &mut conn.backlog, &self.out) {
            end.get_or_insert(reason);
        }
        if let Some(reason) = end {
            self.close(key, reason);
        }
    }

    fn close(&mut self, key: usize, reason: String) {
        if self.conns.try_remove(key).is_some() {
            self.stats.closed += 1;
            self.stats.active -= 1;
            *self.stats.close_reasons.entry(reason).or_insert(0) += 1;
        }
    }

    fn sweep_idle(&mut self) {
        if self.cfg.protocol == Protocol::Http {
            let now = self.now_ds();
            let limit = (self.cfg.http.header_timeout_ms / 100).max(1) as u32;
            let stuck: Vec<usize> = self.conns.iter().filter(|(_, c)| http::stalled(&c.http, now, limit)).map(|(k, _)| k).collect();
            for key in stuck {
                self.close(key, "header_timeout".into());
            }
        }
        let Some(ms) = self.cfg.idle_timeout_ms else { return };
        let limit = (ms / 1000).max(1) as u32;
        let now = self.now_s();
        let stale: Vec<usize> = self.conns.iter().filter(|(_, c)| now.saturating_sub(c.last_seen_s) >= limit).map(|(k, _)| k).collect();
        for key in stale {
            self.close(key, "idle_timeout".into());
        }
    }

    fn report(&mut self, last: bool) {
        self.stats.rss_bytes = crate::sys::self_rss_bytes();
        self.stats.cpu_us = crate::sys::self_cpu_us();
        self.stats.threads = crate::sys::self_threads();
        self.stats.last = last;
        control::emit(&WorkerMsg::Server(self.stats.clone()));
    }
}
