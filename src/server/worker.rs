//! A server worker process: one single-threaded epoll reactor (mio) over
//! every listening port and a slab of small connection records.
//!
//! Why mio and not a tokio task per connection: a task costs ~1 KB and a
//! per-connection read buffer several KB, while a slab entry here is 40
//! bytes; at a million connections that is the difference between ~1 GB
//! and ~40 MB of user memory. Reads go into one scratch buffer per worker.
//!
//! In an elastic server (the default) a worker that reaches its budget of
//! connections leaves the accept group and rejoins below the low-water
//! mark (see `supervise::elastic` for why).

mod accept;
mod auth;
pub(crate) mod bus;
pub(crate) mod conn;
mod deliver;
mod drain;
mod heads;
mod io;
mod keepalive;
mod linger;
mod mqtt_out;
mod mqtt_session;
mod presence;
mod ring;
pub(crate) mod seam;
mod serve;
mod spills;
mod stall;
mod tls;
mod trim;
mod upgrade;

use crate::net::Carried;
use crate::server::business::service_time::ServiceTime;
use crate::server::business::{BusinessMode, Stage};
use crate::server::close::{self, Close};
use crate::server::listener::{AcceptGroup, LISTENER_BASE};
use crate::server::session::http::{self, HttpConfig};
use crate::server::worker::conn::Conn;
use std::os::fd::AsRawFd;

use crate::proto::Protocol;
use crate::reactor::{self, Handler};
use crate::server::commands::{ServerCommand, ServerMsg};
use crate::server::snapshot::ServerSnapshot;
use crate::supervise::control::{self, Command};
use crate::supervise::elastic::{LOW_WATER_SHARE, PRESPAWN_SHARE};
use crate::supervise::Flow;
use anyhow::{Context, Result};
use mio::event::Event;
use mio::{Poll, Token, Waker};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use slab::Slab;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerWorkerConfig {
    pub worker: usize,
    pub listen: std::net::IpAddr,
    /// Each protocol on its ports; listener i is the i-th port of them all
    /// in this order (`services::all_ports`).
    pub services: Vec<crate::server::services::Service>,
    /// The listening sockets, one per port, inherited from the supervisor.
    pub listen_fds: Vec<i32>,
    pub idle_timeout_ms: Option<u64>,
    pub stats_interval_ms: u64,
    /// `Pool(n)`: n is this worker's share of the server's threads.
    pub business: BusinessMode,
    /// Depth of the pool's queue (pool mode).
    pub queue: usize,
    pub service_time: ServiceTime,
    pub http: HttpConfig,
    /// Connections this worker holds before it leaves the accept group
    /// (elastic), or at which it merely reports being full (fixed).
    pub budget: u64,
    /// Leave the accept group when full and rejoin when drained.
    pub elastic: bool,
    /// Most bytes a connection may leave unread before it is closed as a
    /// slow consumer of pushes.
    pub max_pending_bytes: usize,
    pub ws: crate::server::session::ws::WsConfig,
    /// `--protocol mqtt`'s settings.
    #[serde(default = "default_mqtt")]
    pub mqtt: crate::server::session::mqtt::MqttConfig,
    /// `--max-connections`: the shared count's memfd (inherited).
    pub cap_fd: Option<i32>,
    /// A cluster node: report topics gaining/losing their subscribers.
    #[serde(default)]
    pub track_topics: bool,
    /// Topic cap, stall timeout, socket timers, per-address cap.
    pub limits: crate::server::limits::ConnLimits,
    /// `--tls-cert`/`--tls-key`: every connection speaks TLS.
    #[serde(default)]
    pub tls: Option<crate::tls::files::ServerTls>,
    /// `--drain-period`: long-lived connections close spread over this
    /// long after SIGTERM, each with a reconnect hint.
    #[serde(default)]
    pub drain_period_ms: u64,
    /// `--auth jwt`: the key tokens are verified with.
    #[serde(default)]
    pub auth: Option<crate::server::auth::jwt::JwtKey>,
    /// `--jwt-audience` and `--jwt-issuer`.
    #[serde(default)]
    pub jwt_expected: crate::server::auth::jwt::Expected,
    /// `--admin-topics`: patterns only admin tokens may subscribe to.
    #[serde(default)]
    pub admin_topics: Vec<String>,
    /// `--upstream` with `--upstream-queue`: messages clients send go to
    /// the application, at most this many not yet taken.
    #[serde(default)]
    pub upstream_queue: Option<usize>,
    /// This worker's share of `--upstream-queue-bytes`: at most this many
    /// bytes of messages not yet taken (`upstream::worker_share`).
    #[serde(default)]
    pub upstream_bytes: u64,
    /// `--presence-events`: joins and leaves go upstream too.
    #[serde(default)]
    pub presence_events: bool,
    /// `--presence-notices`: and to the topic's WebSocket subscribers.
    #[serde(default)]
    pub presence_notices: bool,
    /// The reactor (`--io`, resolved by the supervisor: epoll or uring).
    #[serde(default)]
    pub io: crate::uring::Io,
    /// `--mqtt-password-file` and `--mqtt-acl-file`, as the supervisor
    /// read them last (`auth/mosquitto.rs`).
    #[serde(default)]
    pub mqtt_files: Option<crate::server::auth::mosquitto::Files>,
    /// `--io-batch-wait` in microseconds (`uring/batch.rs`).
    #[serde(default)]
    pub io_batch_wait_us: u64,
    /// Its sockets to the broker shards, one per shard in shard order
    /// (inherited; `broker/shard.rs`).
    #[serde(default)]
    pub bus_fds: Vec<i32>,
}

/// Pool threads wake the event loop through this token.
const WAKER: Token = Token(usize::MAX - 2);
/// How long accept() pauses after EMFILE/ENFILE instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// The per-worker read buffer every connection shares.
const SCRATCH: usize = 64 * 1024;
/// How often HTTP connections are checked for stalled request heads.
const HTTP_SWEEP: Duration = Duration::from_millis(100);
/// Slab capacity above which an emptied worker gives its memory back.
const SHRINK_ABOVE: usize = 4096;
/// How often TLS handshakes are checked against `--handshake-timeout`.
const HANDSHAKE_SWEEP: Duration = Duration::from_millis(100);
/// How often idle connections are looked for (`--idle-timeout`).
const IDLE_SWEEP: Duration = Duration::from_secs(1);

struct Worker {
    cfg: ServerWorkerConfig,
    poll: Poll,
    group: AcceptGroup,
    conns: Slab<Conn>,
    /// The MQTT state of its MQTT connections, by slab key.
    mqtt: crate::server::session::mqtt::states::MqttStates,
    stats: ServerSnapshot,
    started: Instant,
    /// Set while accepting is paused by fd exhaustion.
    accept_paused_until: Option<Instant>,
    /// Connections at which the next accept would fail with EMFILE (the
    /// fd limit less what the worker had open at start, less a spare few).
    fd_ceiling: u64,
    next_sweep: Instant,
    scratch: Vec<u8>,
    out: Vec<u8>,
    /// WebSocket payloads are unmasked into this.
    unmasked: Vec<u8>,
    /// permessage-deflate: one compressor and decompressor for every
    /// connection of the worker (a ws server with `--ws-deflate on`).
    ws_codec: Option<Box<crate::server::session::ws_deflate::WsCodec>>,
    /// `--max-connections`, shared with every worker.
    cap: Option<crate::server::limits::cap::SharedCap>,
    /// Told to close (SIGTERM at the supervisor): no accepting, no reading;
    /// in-flight requests are answered, then every connection closes.
    /// Long-lived connections are read until their turn in `drain`.
    draining: bool,
    drain: Option<drain::Drain>,
    /// Since when the worker holds no connection (memory is returned to
    /// the system after a second of that).
    empty_since: Option<Instant>,
    /// When a settled burst of connections last gave malloc's free pages back.
    trim: trim::Trim,
    stage: Stage,
    topics: crate::server::tables::topics::Topics,
    /// Subscribers waiting for the history they missed.
    recoveries: crate::server::tables::recovery::Recoveries,
    /// Broadcasts new framed connections got before their resume.
    seam: seam::Seam,
    /// When event streams are next looked at for heartbeats.
    sse_beat_at: Instant,
    rng: SmallRng,
    next_gen: u32,
    /// Connection count at which the supervisor is told at once that a
    /// successor is needed (elastic).
    prespawn_at: u64,
    /// The HTTP Date header, formatted once per second.
    date: String,
    date_sec: u64,
    /// Refused peers read from until they stop sending (lingering close).
    lingering: linger::Lingering,
    /// Topic cap, stall timeout, socket timers, per-address cap.
    limits: crate::server::limits::ConnLimits,
    /// `--max-connections-per-ip`: the table every worker shares.
    per_ip: Option<accept::PerIpCount>,
    /// Connections with input or output waiting, as the last stall sweep
    /// saw them.
    stalls: stall::Stalls,
    /// TLS state of every connection (a TLS server only).
    tls: Option<tls::TlsSide>,
    /// `--upstream`: what clients said, on its way to the application.
    upstream: Option<crate::server::tables::outbox::Outbox>,
    /// MQTT publishes read since the last hand-over to the shards.
    published: crate::server::session::mqtt::Published,
    /// `--mqtt-auth-http`: WebSocket and event-stream requests to ask about.
    upgrade_asks: Vec<crate::server::commands::UpgradeAsk>,
    /// The sockets to the broker shards (`bus.rs`).
    bus: bus::Bus,
    /// Its link to a shard ended: it stops (said once).
    stopping_for_bus: bool,
    /// Connections (`commands::conn_id`) the retained delivery being
    /// pushed is held back from (`bus/waits.rs`).
    held_back: Vec<u64>,
    /// The MQTT codec's bounds (from `cfg.mqtt`).
    mqtt_limits: crate::proto::mqtt::Limits,
    /// Connections that owe their Upgrade request or token: (deadline in
    /// 100 ms units, key, generation), oldest first (`heads.rs`).
    heads: std::collections::VecDeque<(u32, u32, u32)>,
    /// `--io uring`: operations for the next submit, sends in flight.
    ring: Option<ring::RingSide>,
    /// Most bytes of replies a connection may leave unsent before it is
    /// closed `slow_reader`: room for the largest reply this server may
    /// give (`serve::reply_cap`); whether the peer drains it is the stall
    /// timeout's to judge.
    reply_cap: usize,
    /// What the protocols of its entries need beside their connections.
    needs: crate::server::session::kind::Needs,
    /// Listener i came from `--serve` entry `listener_service[i]`.
    listener_service: Vec<u8>,
    /// Connections open now by `--serve` entry (the snapshot's
    /// `active_by_protocol`, named once per report, not per accept).
    open_by_service: [u64; crate::server::services::MAX_SERVICES],
}

/// The protocol of a connection accepted on a port of `services`' entry
/// `conn.service()`.
fn protocol_of(services: &[crate::server::services::Service], conn: &Conn) -> Protocol {
    crate::server::services::entry(services, conn.service()).0
}

/// Whether an MQTT connection speaks over WebSocket: it came in on a
/// WebSocket port (whose Upgrade chose MQTT) and is sent binary messages.
fn over_ws(services: &[crate::server::services::Service], conn: &Conn) -> bool {
    crate::server::session::kind::mqtt_over_ws(protocol_of(services, conn))
}

pub(crate) fn run(cfg: ServerWorkerConfig) -> Result<()> {
    crate::sys::raise_fd_limit();
    let worker = cfg.worker;
    let mqtt_limits = cfg.mqtt.limits();
    let poll = Poll::new()?;
    let waker = Waker::new(poll.registry(), WAKER)?;
    // A wake that fails (the loop is gone) has no one left to tell.
    let stage = Stage::new(cfg.business, cfg.queue, Arc::new(move || drop(waker.wake())))?;
    let cfg_cap_fd = cfg.cap_fd;
    let limits = cfg.limits.clone();
    let per_ip = match limits.per_ip {
        Some((cap, fd)) => Some(accept::PerIpCount::open(fd, cap).context("cannot map the --max-connections-per-ip table")?),
        None => None,
    };
    let tls = match &cfg.tls {
        Some(t) => Some(tls::TlsSide::new(t.clone()).context("cannot load the TLS certificate")?),
        None => None,
    };
    let mut gate = crate::server::auth::gate::Gate::new(cfg.auth.as_ref(), &cfg.jwt_expected, cfg.admin_topics.clone())
        .map_err(anyhow::Error::msg)
        .context("cannot load the --auth key")?;
    if let Some(files) = cfg.mqtt_files.clone() {
        gate.set_files(files);
    }
    let upstream = cfg
        .upstream_queue
        .map(|n| crate::server::tables::outbox::Limits::new(n as u64, cfg.upstream_bytes.max(crate::server::broker::upstream::MIN_WORKER_BYTES)));
    let mut group = AcceptGroup::inherit(&cfg.listen_fds);
    group.join(poll.as_raw_fd())?;
    let bus = bus::Bus::open(&cfg.bus_fds, poll.registry()).context("cannot take the sockets to the broker shards")?;
    let needs = crate::server::session::kind::Needs::of(&cfg.services);
    let mut w = Worker {
        stage,
        topics: crate::server::tables::topics::Topics::new(cfg.track_topics, limits.max_topics, limits.max_commands_per_second),
        recoveries: Default::default(),
        seam: Default::default(),
        sse_beat_at: Instant::now(),
        rng: SmallRng::from_entropy(),
        next_gen: 0,
        date: String::new(),
        date_sec: 0,
        prespawn_at: (cfg.budget as f64 * PRESPAWN_SHARE) as u64,
        stats: ServerSnapshot { worker, budget: cfg.budget, accepting: true, ..Default::default() },
        cfg,
        poll,
        group,
        conns: Slab::new(),
        mqtt: Default::default(),
        started: Instant::now(),
        accept_paused_until: None,
        fd_ceiling: fd_ceiling(),
        next_sweep: Instant::now() + IDLE_SWEEP,
        scratch: vec![0; SCRATCH],
        out: Vec::with_capacity(SCRATCH),
        unmasked: Vec::new(),
        ws_codec: None,
        cap: match cfg_cap_fd {
            Some(fd) => Some(crate::server::limits::cap::SharedCap::open(fd).context("cannot map the --max-connections count")?),
            None => None,
        },
        draining: false,
        drain: None,
        empty_since: None,
        trim: Default::default(),
        lingering: linger::Lingering::default(),
        stalls: stall::Stalls::new(limits.stall_timeout_ms),
        limits,
        per_ip,
        tls,
        upstream: upstream.map(|l| crate::server::tables::outbox::Outbox::new(worker, l)),
        published: Default::default(),
        upgrade_asks: Vec::new(),
        bus,
        stopping_for_bus: false,
        held_back: Vec::new(),
        mqtt_limits,
        heads: Default::default(),
        ring: None,
        reply_cap: 0,
        needs,
        listener_service: Vec::new(),
        open_by_service: Default::default(),
    };
    w.listener_service = w.cfg.services.iter().enumerate().flat_map(|(i, s)| s.ports.iter().map(move |_| i as u8)).collect();
    if w.needs.ws_pushes && w.cfg.ws.deflate.mode != crate::server::session::ws_deflate::DeflateMode::Off {
        w.ws_codec = Some(Default::default());
    }
    // Room for the largest reply of any entry's protocol.
    w.reply_cap =
        w.cfg.services.iter().map(|s| crate::server::session::kind::reply_cap(s.protocol, &w.cfg.ws, w.cfg.http.body.len(), s.tls)).max().unwrap_or(0);
    if w.cfg.io == crate::uring::Io::Uring {
        w.ring = Some(Default::default());
    }
    w.topics.gate = gate;
    if let Some((ttl, deadline)) = w.cfg.mqtt.authz_hook {
        w.topics.gate.authz = Some(Box::new(crate::server::auth::authz::Local::new(ttl, deadline)));
    }
    if w.cfg.presence_events || w.cfg.presence_notices {
        w.topics.gate.events = Some(Default::default());
    }
    // The ring and its buffers are the worker's fixed memory, made before
    // it says it is ready (what a bench measures as the baseline).
    let ring = match w.cfg.io {
        crate::uring::Io::Uring => Some(crate::uring::Ring::new()?.batching(Duration::from_micros(w.cfg.io_batch_wait_us))),
        _ => None,
    };
    control::emit(&ServerMsg::Ready { worker, pid: std::process::id(), fd_limit: crate::sys::fd_limit().hard });
    let interval = Duration::from_millis(w.cfg.stats_interval_ms.max(50));
    match ring {
        Some(ring) => crate::uring::run(&mut w, ring, interval),
        None => reactor::run(&mut w, interval),
    }
}

/// Descriptors kept free besides the connections: /proc reads, a
/// pool thread's file, the lingering close of a refusal.
const SPARE_FDS: u64 = 8;

/// How many connections this process can hold before accept() fails.
fn fd_ceiling() -> u64 {
    // Connection ids carry 16 bits of slab key (proto::push::MAX_KEYS).
    crate::sys::fd_limit().hard.saturating_sub(crate::sys::open_fds() + SPARE_FDS).min(crate::proto::push::MAX_KEYS)
}

impl Handler for Worker {
    fn poll_mut(&mut self) -> &mut Poll {
        &mut self.poll
    }

    fn on_ready(&mut self, ev: &Event) {
        match ev.token() {
            WAKER => {}
            Token(t) if t >= bus::BUS_BASE => self.on_bus(t - bus::BUS_BASE, ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_writable()),
            Token(t) if t >= LISTENER_BASE => {
                // One per wake-up: the listener is level-triggered, so
                // every accepting worker gets its turn at a burst.
                if self.accept_paused_until.is_none() {
                    self.accept_one(t - LISTENER_BASE);
                }
            }
            Token(key) => self.on_conn_event(key, ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_read_closed(), ev.is_writable(), None),
        }
    }

    fn on_command(&mut self, cmd: Command) -> Flow {
        match cmd {
            Command::Leave => {
                if self.group.joined() {
                    self.leave_group();
                }
                Flow::Continue
            }
            Command::Role(word, arg) => {
                match ServerCommand::parse(&word, &arg) {
                    Ok(ServerCommand::List(l)) => self.list(&l),
                    Ok(ServerCommand::Presence(p)) => self.presence(&p),
                    Ok(ServerCommand::Session(answer)) => self.mqtt_session(answer),
                    Ok(ServerCommand::Takeover(conn)) => self.mqtt_takeover(conn),
                    Ok(ServerCommand::Upgrade(answer)) => self.upgrade_decided(answer),
                    Ok(ServerCommand::Authz(answers)) => self.authz_decided(answers),
                    Ok(ServerCommand::Resuming) => self.seam.resumed(),
                    Ok(ServerCommand::Notices(n)) => self.notify(&n),
                    Ok(ServerCommand::UpstreamDone(n)) => {
                        if let Some(u) = &mut self.upstream {
                            u.done(n);
                        }
                    }
                    Ok(ServerCommand::MqttFiles(files)) => {
                        // Users no longer in the password file are closed, as mosquitto closes them.
                        for (key, gen) in self.topics.gate.set_files(files) {
                            let why = "administrative action: the user is no longer in the password file";
                            self.mqtt_close_by(key, gen, crate::server::close::Close::MqttUserRemoved, 0x98, why);
                        }
                    }
                    Ok(ServerCommand::AuthKey(key)) => {
                        // The supervisor read and checked it; tokens shown
                        // from now on are verified with it.
                        match crate::server::auth::jwt::Verifier::new(&key, &self.cfg.jwt_expected) {
                            Ok(v) => self.topics.gate.set_verifier(v),
                            Err(_) => self.stats.auth_key_failures += 1,
                        }
                    }
                    Ok(ServerCommand::TlsReload(pem)) => {
                        // The supervisor checked these bytes before sending
                        // them; a failure here keeps the certificate in force.
                        if let Some(Err(_)) = self.tls.as_mut().map(|t| t.reload(pem)) {
                            self.stats.tls_reload_failures += 1;
                        }
                    }
                    Err(why) => {
                        self.stats.commands_refused += 1;
                        eprintln!("megaconn: server worker {}: {why}", self.cfg.worker);
                    }
                }
                Flow::Continue
            }
            Command::Close => {
                self.draining = true;
                self.group.close(self.poll.as_raw_fd());
                self.begin_drain();
                Flow::Continue
            }
            Command::Stop => {
                let n = self.conns.len() as u64;
                self.conns.clear();
                self.mqtt.release();
                if let Some(t) = &mut self.tls {
                    t.clear();
                }
                if let Some(codec) = self.ws_codec.as_deref_mut() {
                    codec.contexts.clear();
                    self.stats.ws_deflate_contexts = 0;
                }
                if let Some(p) = &mut self.per_ip {
                    p.release_all();
                }
                if let Some(c) = &self.cap {
                    c.release(self.cfg.worker, n);
                }
                if n > 0 {
                    self.stats.closed += n;
                    close::count_n(&mut self.stats.close_reasons, Close::ServerStopped, n);
                }
                self.stats.active = 0;
                self.open_by_service = Default::default();
                Flow::Done
            }
        }
    }

    fn on_tick(&mut self) -> Flow {
        let now = Instant::now();
        if self.sweeps_idle() && now >= self.next_sweep {
            self.sweep_idle();
            // A ws port's MQTT-over-WebSocket clients keep alive too.
            if self.needs.keepalive {
                self.sweep_keepalive();
            }
            self.next_sweep = now + if self.heads_timed() { HTTP_SWEEP } else { IDLE_SWEEP };
        }
        if self.needs.http {
            self.refresh_date();
        }
        if let Some(t) = self.accept_paused_until {
            if now >= t {
                self.accept_paused_until = None;
                if let Err(e) = self.group.resume(self.poll.as_raw_fd()) {
                    *self.stats.accept_errors.entry(format!("resume_failed: {e}")).or_insert(0) += 1;
                    self.accept_paused_until = Some(now + ACCEPT_BACKOFF);
                }
            }
        }
        self.deliver_done();
        self.expire_heads();
        self.expire_handshakes();
        self.expire_authz(now);
        if self.stalls.due(now) {
            self.sweep_stalls(now);
        }
        if !self.lingering.is_empty() {
            self.lingering.sweep();
        }
        if now >= self.sse_beat_at {
            self.sse_heartbeats();
            self.release_held();
            self.expire_tokens();
            // Joins and leaves, netted over the second (see gate::PendingPresence).
            self.presence_out();
            self.topics.rate.tick();
            self.sse_beat_at = now + Duration::from_secs(1);
        }
        if let Some(u) = self.upstream.as_mut().filter(|u| !u.out.is_empty()) {
            control::emit(&ServerMsg::Upstream { worker: self.cfg.worker, messages: std::mem::take(&mut u.out) });
        }
        if !self.recoveries.is_empty() {
            // Behind the interest their subscriptions gained.
            self.bus.take_interest(&mut self.topics);
            for (topic, after) in self.recoveries.take_wanted() {
                self.bus.send_topic(&topic, &crate::proto::bus::Frame::HistoryWant { topic: &topic, after });
            }
        }
        if self.topics.following.track {
            let changes = self.topics.take_changes();
            if !changes.is_empty() {
                control::emit(&ServerMsg::Topics { worker: self.cfg.worker, changes });
            }
        }
        self.give_back_memory(now);
        self.drain_step();
        if self.draining && self.drained() {
            let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
            for key in keys {
                self.close(key, Close::ServerDrained);
            }
            return Flow::Done;
        }
        Flow::Continue
    }

    fn next_wake(&self) -> Duration {
        let now = Instant::now();
        let mut wake = now + Duration::from_secs(1);
        if let Some(t) = self.stage.next_due() {
            wake = wake.min(t);
        }
        if self.sweeps_idle() {
            wake = wake.min(self.next_sweep);
        }
        if let Some(t) = self.accept_paused_until {
            wake = wake.min(t);
        }
        if let Some(d) = self.next_head_due() {
            wake = wake.min(now + d);
        }
        if let Some(t) = self.stalls.next_sweep() {
            wake = wake.min(t);
        }
        if !self.lingering.is_empty() {
            wake = wake.min(now + linger::LINGER_TICK);
        }
        if self.drain.as_ref().is_some_and(|d| !d.finished()) {
            wake = wake.min(now + drain::DRAIN_TICK);
        }
        if self.tls.as_ref().is_some_and(|t| t.has_pending()) {
            wake = wake.min(now + HANDSHAKE_SWEEP);
        }
        if let Some(t) = self.bus.due() {
            wake = wake.min(t);
        }
        wake.saturating_duration_since(now)
    }

    fn flush(&mut self) -> Flow {
        // Interest framed now goes at once (`Bus::flush_due`).
        self.bus.take_interest(&mut self.topics);
        match self.bus.flush_due(Instant::now()) {
            Ok(()) => Flow::Continue,
            Err(e) => self.bus_lost(e),
        }
    }

    fn report(&mut self, last: bool) {
        self.stats.rss_bytes = crate::sys::self_rss_bytes();
        self.stats.cpu_us = crate::sys::self_cpu_us();
        self.stats.threads = crate::sys::self_threads();
        self.stats.accepting = self.group.accepting();
        (self.stats.topics, self.stats.subscriptions) = self.topics.counts();
        self.stats.active_by_protocol = crate::server::services::by_protocol(&self.cfg.services, &self.open_by_service);
        self.stats.authenticated = self.topics.gate.len() as u64;
        self.stats.bytes_sent = io::sent();
        self.stats.mqtt_authz_waiting = self.topics.gate.authz.as_ref().map_or(0, |a| a.waiting() as u64);
        self.stats.backlog_bytes = self.conns.iter().filter_map(|(_, c)| c.spills.held_backlog()).map(|b| b.len() as u64).sum();
        (self.stats.bus_frames_out, self.stats.bus_frames_in) = (self.bus.frames_out, self.bus.frames_in);
        self.stats.retained_not_held = self.bus.waits.not_held;
        self.stats.last = last;
        control::emit(&ServerMsg::Server(Box::new(self.stats.clone())));
    }
}

impl Worker {
    fn now_s(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }

    /// Worker-relative time in 100 ms units.
    fn now_ds(&self) -> u32 {
        (self.started.elapsed().as_millis() / 100) as u32
    }

    /// A worker that held many connections and now holds none returns
    /// their memory: the slab's array and what malloc keeps in its free
    /// lists (a churn soak must end where it started).
    fn give_back_memory(&mut self, now: Instant) {
        if self.trim.due(self.stats.accepted + self.stats.closed, now) {
            trim::trim();
        }
        if !self.conns.is_empty() || self.conns.capacity() < SHRINK_ABOVE {
            self.empty_since = None;
            return;
        }
        let since = *self.empty_since.get_or_insert(now);
        if now.duration_since(since) >= Duration::from_secs(1) {
            self.conns = Slab::new();
            self.mqtt.release();
            self.out = Vec::with_capacity(SCRATCH);
            if let Some(p) = &mut self.per_ip {
                p.shrink();
            }
            trim::trim();
            self.empty_since = None;
        }
    }

    /// Draining is over when no request is still with the business stage
    /// and no answer is still waiting for its socket.
    fn drained(&self) -> bool {
        // Every turn came, or nobody is left to take one (its peers left first).
        let turns = self.drain.as_ref().is_none_or(|d| d.finished() || self.conns.is_empty());
        turns && self.stage.in_flight() == 0 && self.conns.iter().all(|(_, c)| !c.spills.has_backlog())
    }

    /// Whether HTTP request heads are swept for --header-timeout (a
    /// keep-alive connection may start a request at any time; WebSocket
    /// upgrades and tokens are timed from a queue, `heads.rs`).
    /// Whether the idle sweep runs: `--idle-timeout`, HTTP heads, MQTT
    /// keep-alive (on MQTT ports and, MQTT over WebSocket, ws ports).
    fn sweeps_idle(&self) -> bool {
        self.cfg.idle_timeout_ms.is_some() || self.heads_timed() || self.needs.keepalive
    }

    fn heads_timed(&self) -> bool {
        self.needs.http
    }

    fn refresh_date(&mut self) {
        let now = std::time::SystemTime::now();
        let sec = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if sec != self.date_sec {
            self.date_sec = sec;
            self.date = httpdate::fmt_http_date(now);
        }
    }

    /// Told by the supervisor (which has seen a sibling with room): stop
    /// accepting. The listeners stay open and shared, so whatever is
    /// queued on them goes to the workers still accepting. A worker never
    /// leaves on its own: if every worker left before a successor
    /// accepted, new connections would wait in the queue.
    fn leave_group(&mut self) {
        self.group.leave(self.poll.as_raw_fd());
        self.report(false);
    }

    /// Rejoin the accept group once drained below the low-water mark.
    fn maybe_rejoin(&mut self) {
        let low_water = (self.cfg.budget as f64 * LOW_WATER_SHARE) as u64;
        if !self.cfg.elastic || self.group.joined() || self.stats.active > low_water {
            return;
        }
        if self.draining || self.accept_paused_until.is_some() {
            return;
        }
        match self.group.join(self.poll.as_raw_fd()) {
            Ok(()) => self.report(false),
            Err(e) => *self.stats.accept_errors.entry(format!("rejoin_failed: {e}")).or_insert(0) += 1,
        }
    }

    fn close(&mut self, key: usize, reason: Close) {
        if let Some(mut conn) = self.conns.try_remove(key) {
            // Its MQTT state leaves the table with it (the key may be reused).
            let mut mqtt = self.mqtt.take(key);
            // Before its subscriptions are forgotten: a kept session takes them.
            if let Some(m) = &mut mqtt {
                self.mqtt_session_end(key, &conn, m);
                self.mqtt_will(key, &conn, m);
            }
            if let Some(r) = &mut self.ring {
                r.next.ops.push(crate::uring::Op::Cancel { tag: crate::uring::recv_tag(key, conn.gen) });
                // What waited behind its send in flight (a goaway, a
                // refusal's answer) still goes, right behind it.
                let sending = conn.sending();
                if let Some(b) = conn.spills.backlog().take().filter(|_| sending) {
                    r.send_last(&conn, &b);
                }
            }
            if let Some(n) = self.open_by_service.get_mut(conn.service()) {
                *n = n.saturating_sub(1);
            }
            let tls = self.tls.as_mut().and_then(|t| t.remove(key));
            if tls.as_ref().is_some_and(|t| t.handshaking()) {
                close::count(&mut self.stats.tls_handshake_failures, reason.handshake_failure());
            } else if let (Some(mut t), Some(side)) = (tls, self.tls.as_mut()) {
                // A TLS peer tells a clean end from a cut one by this:
                // behind the send in flight on the ring, else at once.
                match &mut self.ring {
                    Some(r) if conn.sending() => {
                        t.close_notify_onto(&mut side.bufs.wire);
                        r.send_last(&conn, &side.bufs.wire);
                        side.bufs.wire.clear();
                    }
                    _ => t.close_notify(&mut conn.stream, &mut side.bufs.wire),
                }
            }
            if reason.lingers() && !conn.spills.has_backlog() && (!conn.watched() || self.poll.registry().deregister(&mut conn.stream).is_ok()) {
                match &mut self.ring {
                    // Its answer goes with the next submit; the lingering after.
                    Some(r) if conn.sending() => r.linger_after_submit.push(conn.stream),
                    _ => {
                        self.lingering.start(conn.stream);
                    }
                }
            } else if let Some(r) = &mut self.ring {
                r.next.close_after_submit(conn.stream);
            }
            if let Some(c) = &self.cap {
                c.release(self.cfg.worker, 1);
            }
            if let Some(p) = &mut self.per_ip {
                p.closed(key);
            }
            if !self.recoveries.is_empty() {
                for t in self.topics.names_of(&conn.subs).iter().map(String::as_str).chain([crate::proto::push::BROADCAST_TOPIC]) {
                    self.recoveries.forget(t, key);
                }
            }
            if let Some(codec) = self.ws_codec.as_deref_mut() {
                codec.forget(&mut self.stats, key);
            }
            if let Some(m) = &mut mqtt {
                self.mqtt_shared_leave(key, conn.gen, m);
            }
            self.topics.forget(&conn.subs, key);
            self.topics.rate.forget(key);
            if !self.topics.gate.is_empty() {
                self.topics.gate.forget(key);
            }
            if let Some(a) = &mut self.topics.gate.authz {
                a.forget(key);
            }
            self.stats.closed += 1;
            self.stats.active -= 1;
            close::count(&mut self.stats.close_reasons, reason);
            self.maybe_rejoin();
        }
    }

    /// Close every TLS connection whose handshake outlived
    /// `--handshake-timeout` (counted as `tls_timeout`).
    fn expire_handshakes(&mut self) {
        let now = self.now_ds();
        let conns = &self.conns;
        let Some(t) = &mut self.tls else { return };
        for key in t.expired(now, |k, gen| conns.get(k).is_some_and(|c| c.gen == gen)) {
            self.close(key, Close::TlsTimeout);
        }
    }

    fn sweep_idle(&mut self) {
        if self.heads_timed() {
            let now = self.now_ds();
            let limit = (self.cfg.http.header_timeout_ms / 100).max(1) as u32;
            let stuck: Vec<usize> = self.conns.iter().filter(|(_, c)| http::stalled(&c.ext, now, limit)).map(|(k, _)| k).collect();
            for key in stuck {
                self.close(key, Close::HeaderTimeout);
            }
        }
        let Some(ms) = self.cfg.idle_timeout_ms else { return };
        let limit = (ms / 1000).max(1) as u32;
        let now = self.now_s();
        // Seconds are whole: strictly more than the limit, so a peer seen
        // 0.9 s ago in the previous second is not "1 s silent".
        // An event stream's client never sends: its writes tell a dead peer.
        let stale: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| now.saturating_sub(c.last_seen_s) > limit && !matches!(c.ext.as_deref(), Some(crate::server::session::ext::ConnExt::Sse(_))))
            .map(|(k, _)| k)
            .collect();
        for key in stale {
            self.close(key, Close::IdleTimeout);
        }
    }
}

/// A worker config from before `--protocol mqtt` existed.
fn default_mqtt() -> crate::server::session::mqtt::MqttConfig {
    crate::server::session::mqtt::MqttConfig {
        max_push: crate::proto::push::DEFAULT_MAX_PUSH,
        flight: Default::default(),
        max_keep_alive: 0,
        auth_hook: false,
        authz_hook: None,
    }
}
