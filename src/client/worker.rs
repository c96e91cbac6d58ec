//! A client worker process: one single-threaded epoll reactor (mio) that
//! opens its share of the plan at a paced rate, heartbeats on an open-loop
//! schedule, and closes everything when told (or at its own deadline).
//!
//! Connections live in a flat `Vec` indexed by their local plan index
//! (which is also their mio token), so the schedules below need no
//! per-connection timers:
//! - ramp: connection k is due at `start + k / rate`;
//! - heartbeats: send number j goes to connection `j % count` and is due at
//!   `ramp_done + j * interval / count` (they start when this worker's
//!   ramp is done, see `schedule_start`), so every connection beats once per
//!   interval and the beats are spread evenly. The due time travels in the
//!   payload and the round trip is measured from it (open loop: a slow
//!   server shows up as latency, not as fewer beats).
//!
//! Opening, failing, losing and re-opening connections (`--reconnect`)
//! live in `connect.rs`; the send schedules in `schedule.rs`.

use super::config::CloseMode;
use super::plan::expand;
use super::replies;
use super::snapshot::{ClientMsg, ClientSnapshot};
use super::speak::{speaker, Ear, Inflight, Speaker};
use crate::net::{self, ReadEnd, Spill};
use crate::reactor::{self, Handler};
use crate::stats::histogram;
use crate::supervise::control::{self, Command};
use crate::supervise::Flow;
use crate::sys::mono_us;
use anyhow::Result;
use hdrhistogram::Histogram;
use mio::event::Event;
use mio::Poll;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use socket2::SockRef;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClientWorkerConfig {
    pub worker: usize,
    pub target: IpAddr,
    /// Where a connection told to go away moves, in turn (then `target` again).
    #[serde(default)]
    pub elsewhere: Vec<IpAddr>,
    pub ports: Vec<u16>,
    pub source_ranges: Vec<(IpAddr, IpAddr)>,
    /// Global index of this worker's first connection, and how many.
    pub first: u64,
    pub count: u64,
    /// Connections per second for this worker.
    pub rate: f64,
    /// CLOCK_MONOTONIC µs at which every worker starts its ramp.
    pub start_at_us: u64,
    /// CLOCK_MONOTONIC µs after which the ramp starts no connection: one
    /// whose turn has not come by then is not attempted (`ramp_deadline`),
    /// so the hold and the close never open planned connections.
    pub ramp_deadline_us: u64,
    pub stats_interval_ms: u64,
    /// CLOCK_MONOTONIC µs at which the worker closes by itself, whatever
    /// its supervisor says: every load loop is bounded in time.
    pub deadline_us: u64,
    /// `--churn`: this worker closes and reopens one connection every
    /// this many µs once its ramp is done.
    pub churn_us: Option<u64>,
    /// This client's shard (`{shard}` in a ws message).
    pub shard: u64,
    /// What every connection does, as the load asked.
    pub traffic: super::config::Traffic,
    /// `--reconnect`: where this share's connections stand, kept for a
    /// replacement (and, in a replacement, where to go on from).
    #[serde(default)]
    pub checkpoint: Option<super::checkpoint::CheckpointRef>,
    /// The reactor for what connections receive (resolved: uring or epoll).
    #[serde(default)]
    pub io: crate::uring::Io,
    /// `--stages`: this worker's share of every stage; it then follows
    /// them (from `start_at_us`) instead of the ramp, and `count` is its
    /// share of the highest target.
    #[serde(default)]
    pub stages: Option<super::stages::Stages>,
}

mod connect;
mod keep;
pub(crate) mod outage;
mod ring;
pub(crate) mod schedule;
mod stages;
mod tls;

use crate::tls::conn::Wire;
use keep::keep;

/// The stages of opening a connection, timed apart.
#[derive(Clone, Copy)]
pub(super) enum Stage {
    Tcp = 0,
    Tls = 1,
    Upgrade = 2,
}

impl Stage {
    const ALL: [Stage; 3] = [Stage::Tcp, Stage::Tls, Stage::Upgrade];

    fn name(self) -> &'static str {
        match self {
            Stage::Tcp => "tcp",
            Stage::Tls => "tls",
            Stage::Upgrade => "upgrade",
        }
    }
}

const SCRATCH: usize = 64 * 1024;
/// Fewest µs between ramp wake-ups: batching a few connects per wake-up
/// keeps 100 processes from spending the CPU on epoll_wait. Heartbeats and
/// requests have no such floor: they leave at their intended time.
const RAMP_TICK_US: u64 = 1_000;
/// Tick on which heartbeats are batched (see `next_wake`).
const BEAT_TICK_US: u64 = 10_000;
/// Fewest handshakes a worker may have in flight (see `ramp`).
const MIN_INFLIGHT: f64 = 128.0;
/// Most handshakes a worker may have in flight, whatever `--rate` asks:
/// past a few thousand per process the server's SYN and accept queues
/// overflow and connects time out en masse instead of going faster.
const MAX_INFLIGHT: f64 = 2048.0;
/// Longest wait for outstanding heartbeats before closing.
const DRAIN_US: u64 = 3_000_000;
/// Longest wait for outstanding requests before closing, whatever
/// `--request-timeout` says (it takes up to 30 days): the run's close
/// gives its workers 120 s in all.
const MOST_DRAIN_US: u64 = 60_000_000;
/// Connections closed per loop turn at the end of a run: a worker with
/// 20,000 connections closes them in ~10 turns, reporting between them
/// (its supervisor sees the close progress instead of a silent worker),
/// and the io_uring cancellations of one turn stay within a few submits.
const CLOSE_BATCH: usize = 2048;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    /// TCP is up, the TLS handshake is under way (still connecting).
    TlsHandshaking,
    /// `--protocol ws`: TCP (and TLS) is up, the Upgrade request is out,
    /// the 101 has not come (still counted as connecting).
    Upgrading,
    Established,
    /// Lost; waiting in the reconnect queue.
    Waiting,
    /// Closed by an outage; waits for the rejoin.
    Paused,
    Done,
}

struct Slot {
    stream: Option<mio::net::TcpStream>,
    state: State,
    /// Low 32 bits of mono µs when connect() was called, and when the
    /// current handshake stage (TCP, TLS, upgrade) began.
    started_us: u32,
    stage_us: u32,
    /// TLS state, when the connection speaks TLS.
    tls: Option<Box<crate::tls::client::ClientConn>>,
    partial: Spill,
    backlog: Spill,
    /// HTTP: intended send times of requests awaiting responses, in order
    /// (HTTP responses carry no timestamp). Boxed: 8 bytes per idle slot
    /// instead of a 32-byte empty VecDeque.
    inflight: Inflight,
    /// Whether anything ever came back on this connection (a connection
    /// closed before its first answer hints at a protocol mismatch).
    answered: bool,
    /// Last push sequence number per stream (duplicates and gaps).
    seen: super::pushes::PushSeen,
    /// Reconnect attempts since it was last established (back-off).
    retries: u8,
    /// Reopened by `--churn` and not yet established again.
    churned: bool,
    /// Heartbeats sent and not answered yet (abandoned if the connection
    /// goes, so the final drain does not wait for them).
    beats_out: u8,
    /// Requests sent and not answered or refused yet (abandoned likewise;
    /// saturates: past it the drain waits out its bound instead).
    requests_out: u16,
    /// `--protocol ws`: a message still arriving in fragments.
    ws_frag: Option<Box<crate::proto::ws::frame::Fragments>>,
    /// Where it connects: 0 the worker's target, i the i-th of `elsewhere`
    /// (it moves on after a reconnect hint or a failed reconnect).
    home: u8,
    /// `--io uring`: its bytes come from a multishot receive on the ring.
    armed: bool,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            stream: None,
            state: State::Idle,
            started_us: 0,
            stage_us: 0,
            tls: None,
            partial: None,
            backlog: None,
            inflight: None,
            answered: false,
            seen: None,
            retries: 0,
            ws_frag: None,
            churned: false,
            beats_out: 0,
            requests_out: 0,
            home: 0,
            armed: false,
        }
    }
}

impl State {
    /// Still opening: TCP, TLS or the WebSocket upgrade under way.
    fn connecting(self) -> bool {
        matches!(self, State::Connecting | State::TlsHandshaking | State::Upgrading)
    }
}

#[derive(PartialEq, Eq)]
enum Phase {
    Running,
    Draining {
        until_us: u64,
    },
    /// Closing its connections, `CLOSE_BATCH` a turn, from this slot on.
    Closing {
        next: usize,
    },
}

struct Worker {
    cfg: ClientWorkerConfig,
    sources: Vec<IpAddr>,
    poll: Poll,
    slots: Vec<Slot>,
    /// Connecting slots in the order they were started (deadline order).
    pending: VecDeque<u32>,
    created: u64,
    beat_cursor: u64,
    /// `--churn`: cycles done, and when the first was due.
    churn_cursor: u64,
    churn_start_us: Option<u64>,
    request_cursor: u64,
    /// When the hold ends (the supervisor's `hold_until`): no request is
    /// due at or after it, however late this worker gets to send.
    requests_end_us: u64,
    /// `--stages`: the stage whose request schedule `request_cursor` is on,
    /// and how many stage boundaries (the end included) were reported.
    request_stage: usize,
    stage_reports: usize,
    stats: ClientSnapshot,
    connect_hist: Histogram<u64>,
    /// Time of each handshake stage (TCP, TLS, upgrade), by `Stage`.
    /// (Made on first use, and only when there is more than one stage.)
    stage_hists: [Option<Histogram<u64>>; 3],
    rtt_hist: Histogram<u64>,
    request_hist: Histogram<u64>,
    push_hist: Histogram<u64>,
    rehome_hist: Histogram<u64>,
    /// Slots a draining server told to go away, and when (µs).
    moved_at: std::collections::HashMap<u32, u64>,
    /// In an outage: nothing opens until the rejoin.
    paused: bool,
    checkpoint: Option<super::checkpoint::Checkpoint>,
    last_resolved_us: u64,
    phase: Phase,
    scratch: Vec<u8>,
    out: Vec<u8>,
    /// (due µs, slot) of lost connections to open again.
    reconnects: BinaryHeap<Reverse<(u64, u32)>>,
    /// Reconnect pacing: connects allowed so far (tokens at the ramp rate).
    reconnect_tokens: f64,
    reconnect_tokens_at: u64,
    rng: SmallRng,
    /// The protocol: what connections say and how their answers are read.
    speaker: Box<dyn Speaker>,
    /// What a read gives to send back (WebSocket pongs, close answers).
    answer: Vec<u8>,
    /// TLS configs, and the buffers every TLS connection borrows.
    tls: Option<crate::tls::client::Configs>,
    tls_bufs: crate::tls::conn::TlsBufs,
    /// `--io uring`: operations for the next submit.
    ring: Option<crate::uring::Pending>,
}

pub(crate) fn run(cfg: ClientWorkerConfig) -> Result<()> {
    crate::sys::raise_fd_limit();
    let poll = Poll::new()?;
    let n = cfg.count as usize;
    let mut w = Worker {
        sources: expand(&cfg.source_ranges),
        stats: {
            let mut s = ClientSnapshot { worker: cfg.worker, ..Default::default() };
            s.planned = cfg.count;
            // Stages open and close as they go: nothing waits in a queue.
            s.queued = if cfg.stages.is_some() { 0 } else { cfg.count };
            s
        },
        poll,
        slots: (0..n).map(|_| Slot::new()).collect(),
        pending: VecDeque::new(),
        created: 0,
        beat_cursor: 0,
        churn_cursor: 0,
        churn_start_us: None,
        request_cursor: 0,
        requests_end_us: u64::MAX,
        request_stage: 0,
        stage_reports: 0,
        connect_hist: histogram::new(),
        stage_hists: [None, None, None],
        rtt_hist: histogram::new(),
        request_hist: histogram::new(),
        push_hist: histogram::new(),
        rehome_hist: histogram::new(),
        moved_at: Default::default(),
        paused: false,
        checkpoint: None,
        last_resolved_us: 0,
        phase: Phase::Running,
        scratch: vec![0; SCRATCH],
        out: Vec::with_capacity(1024),
        reconnects: BinaryHeap::new(),
        reconnect_tokens: 0.0,
        reconnect_tokens_at: cfg.start_at_us,
        rng: SmallRng::from_entropy(),
        speaker: speaker(&cfg.traffic, &cfg.traffic.host_header(cfg.target, &cfg.ports), cfg.shard),
        answer: Vec::new(),
        tls: match &cfg.traffic.tls {
            Some(t) => Some(crate::tls::client::Configs::new(t)?),
            None => None,
        },
        tls_bufs: Default::default(),
        ring: None,
        cfg,
    };
    if let Some(c) = w.cfg.checkpoint {
        let cp = super::checkpoint::Checkpoint::open(c.fd, w.cfg.count, c.streams, c.replacing.unwrap_or(0))?;
        if let Some(n) = c.replacing {
            w.go_on_from(&cp, n);
        }
        w.checkpoint = Some(cp);
    }
    control::emit(&ClientMsg::Ready { worker: w.cfg.worker, pid: std::process::id(), fd_limit: crate::sys::fd_limit().hard });
    let interval = Duration::from_millis(w.cfg.stats_interval_ms.max(50));
    match w.cfg.io {
        crate::uring::Io::Uring => {
            let ring = crate::uring::Ring::new()?;
            w.ring = Some(Default::default());
            crate::uring::run(&mut w, ring, interval)
        }
        _ => reactor::run(&mut w, interval),
    }
}

impl Handler for Worker {
    fn poll_mut(&mut self) -> &mut Poll {
        &mut self.poll
    }

    fn on_ready(&mut self, ev: &Event) {
        self.on_event(ev.token().0, ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_read_closed(), ev.is_writable() || ev.is_error());
    }

    fn on_command(&mut self, cmd: Command) -> Flow {
        match cmd {
            Command::Close => {
                self.begin_drain(mono_us());
                Flow::Continue
            }
            Command::Stop => {
                self.give_up_queued(connect::RUN_CLOSED);
                self.close_from(0, self.slots.len());
                self.closed();
                Flow::Done
            }
            Command::Role(word, _) if word == outage::CMD_OUTAGE => {
                self.outage();
                Flow::Continue
            }
            Command::Role(word, _) if word == outage::CMD_REJOIN => {
                self.rejoin(mono_us());
                Flow::Continue
            }
            Command::Role(word, arg) if word == schedule::CMD_HOLD_UNTIL => {
                if let Ok(until) = arg.trim().parse() {
                    self.requests_end_us = until;
                }
                Flow::Continue
            }
            Command::Leave | Command::Role(..) => Flow::Continue,
        }
    }

    fn on_tick(&mut self) -> Flow {
        let now = mono_us();
        if self.cfg.count == 0 {
            // An empty share (a shard smaller than the worker count).
            self.stats.ramp_done_at_us = Some(now);
            return Flow::Done;
        }
        if now >= self.cfg.deadline_us && self.phase == Phase::Running {
            self.begin_drain(now);
        }
        if self.phase == Phase::Running {
            if !self.paused {
                match self.cfg.stages.is_some() {
                    true => self.follow_stages(now),
                    false => self.ramp(now),
                }
                self.reopen(now);
                self.churn(now);
            }
            self.beat(now);
            self.request(now);
            self.report_stage_boundaries(now);
        }
        self.expire_connects(now);
        if let Phase::Draining { until_us } = self.phase {
            let s = &self.stats;
            // The counters settle it at once in the common case; else a
            // look at the open connections (a connection's own counts
            // saturate, so the totals can stay short of settled after
            // one with thousands outstanding was lost).
            let settled = (s.heartbeats_answered + s.heartbeats_abandoned >= s.heartbeats_sent
                && s.replies + s.rejected + s.requests_abandoned >= s.requests_sent)
                || self.slots.iter().all(|slot| slot.state != State::Established || (slot.beats_out == 0 && slot.requests_out == 0));
            if now >= until_us || settled {
                self.phase = Phase::Closing { next: 0 };
            }
        }
        if let Phase::Closing { next } = self.phase {
            let end = (next + CLOSE_BATCH).min(self.slots.len());
            self.close_from(next, end);
            if end == self.slots.len() {
                self.closed();
                return Flow::Done;
            }
            self.phase = Phase::Closing { next: end };
        }
        Flow::Continue
    }

    fn next_wake(&self) -> Duration {
        let now = mono_us();
        Duration::from_micros(self.next_wake_at(now).saturating_sub(now))
    }

    fn report(&mut self, last: bool) {
        self.stats.connect_hist = histogram::encode(&self.connect_hist);
        self.stats.stage_hists = Stage::ALL
            .iter()
            .zip(self.stage_hists.iter_mut())
            .filter_map(|(s, h)| Some((s, h.as_mut().filter(|h| !h.is_empty())?)))
            .map(|(s, h)| {
                let e = histogram::encode(h);
                h.reset();
                (s.name().to_string(), e)
            })
            .collect();
        self.stats.rtt_hist = histogram::encode(&self.rtt_hist);
        self.stats.request_hist = histogram::encode(&self.request_hist);
        self.request_hist.reset();
        self.stats.push_hist = histogram::encode(&self.push_hist);
        self.push_hist.reset();
        self.stats.rehome_hist = if self.rehome_hist.is_empty() { String::new() } else { histogram::encode(&self.rehome_hist) };
        self.rehome_hist.reset();
        self.connect_hist.reset();
        self.rtt_hist.reset();
        if let Some(cp) = self.checkpoint.as_mut() {
            self.stats.checkpoint = keep(cp, &self.slots, &self.cfg);
        }
        self.stats.rss_bytes = crate::sys::self_rss_bytes();
        self.stats.cpu_us = crate::sys::self_cpu_us();
        self.stats.at_us = mono_us();
        self.stats.last = last;
        control::emit(&ClientMsg::Client(Box::new(self.stats.clone())));
    }
}

impl Worker {
    fn next_wake_at(&self, now: u64) -> u64 {
        let mut wake = now + 100_000;
        match self.phase {
            Phase::Running => {}
            Phase::Draining { .. } => return now + 10_000,
            // The next batch at once (after what the loop has ready).
            Phase::Closing { .. } => return now,
        }
        if self.cfg.stages.is_some() && !self.paused {
            wake = wake.min(self.stages_wake(now));
        } else if self.created < self.cfg.count && !self.paused {
            let due = connect::ramp_due_at(self.cfg.start_at_us, self.created, self.cfg.rate);
            wake = wake.min(due.max(now + RAMP_TICK_US));
        }
        if let Some(Reverse((due, _))) = self.reconnects.peek().filter(|_| !self.paused) {
            wake = wake.min((*due).max(now + RAMP_TICK_US));
        }
        // Heartbeats are keep-alives: batching them on a short tick saves
        // most wake-ups (costly on VMs) at the price of up to BEAT_TICK_US
        // of send delay, which their round trip honestly includes.
        // Requests leave at their exact intended time.
        if let (Some(p), Some(start)) = (self.heartbeat_period(), self.schedule_start(schedule::Schedule::Heartbeats)) {
            wake = wake.min(self.due_at(self.beat_cursor, p, start).max(now + BEAT_TICK_US));
        }
        if let Some((p, start)) = self.request_schedule(self.request_stage) {
            wake = wake.min(self.due_at(self.request_cursor, p, start));
        }
        if let Some(&first) = self.pending.front() {
            let started = self.slots[first as usize].started_us;
            let age = (now as u32).wrapping_sub(started) as u64;
            wake = wake.min(now + (self.cfg.traffic.connect_timeout_ms() * 1000).saturating_sub(age).max(1000));
        }
        wake.min(self.cfg.deadline_us.max(now))
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
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => return self.fail(k, crate::sys::error_kind_name(&e), now),
            }
            self.stage_done(k, Stage::Tcp, now);
            self.arm(k);
            let alive = if self.tls.is_some() { self.start_tls(k) } else { self.connected(k, now) };
            if !alive {
                return;
            }
        }
        let slot = &mut self.slots[k];
        let Some(stream) = slot.stream.as_mut() else { return };
        if writable && slot.backlog.is_some() {
            if let Err(reason) = net::flush(stream, &mut slot.backlog) {
                return self.lose(k, reason);
            }
        }
        // On the ring, what arrives comes as completions, not from here.
        if readable && !slot.armed {
            self.hear(k, now, read_closed, None);
        }
    }

    /// Read what connection k received (from its socket, or the bytes a
    /// ring receive brought) and act on it.
    fn hear(&mut self, k: usize, now: u64, read_closed: bool, received: Option<&[u8]>) {
        let slot = &mut self.slots[k];
        let Some(stream) = slot.stream.as_mut() else { return };
        let upgrading = slot.state == State::Upgrading;
        let mut replies = replies::Replies {
            stats: &mut self.stats,
            rtt: &mut self.rtt_hist,
            latency: &mut self.request_hist,
            now,
            timeout_us: self.cfg.traffic.request_timeout_us(),
            push: &mut self.push_hist,
            seen: &mut slot.seen,
            beats_out: &mut slot.beats_out,
            requests_out: &mut slot.requests_out,
        };
        let before = replies::answers(replies.stats);
        self.answer.clear();
        let mut rx = net::Received(received.unwrap_or_default());
        let mut wire = Wire::of(stream, received.map(|_| &mut rx), slot.tls.as_deref_mut().map(|t| (t, &mut self.tls_bufs)), None);
        let mut ear = Ear { slot: k, upgrading, inflight: &mut slot.inflight, ws_frag: &mut slot.ws_frag, answer: &mut self.answer, goaway: None };
        // The one read loop: the speaker hears bytes, the spill keeps
        // what it has not used yet.
        let speaker = &mut self.speaker;
        let end = net::read_chunks_named(&mut wire, &mut slot.partial, &mut self.scratch, read_closed, |buf| speaker.hear(buf, &mut ear, &mut replies));
        speaker.heard(&mut replies);
        let (upgraded, goaway) = (upgrading && !ear.upgrading, ear.goaway);
        if replies::answers(replies.stats) > before {
            slot.answered = true;
        }
        let sent = match self.answer.is_empty() {
            true => Ok(()),
            false => {
                let put = |bytes: &[u8]| net::send_capped(stream, &mut slot.backlog, bytes, net::MAX_BACKLOG, "slow_reader");
                crate::tls::conn::send(slot.tls.as_deref_mut(), &mut self.tls_bufs.wire, &self.answer, put)
            }
        };
        if !self.after_tls_read(k, now) {
            return;
        }
        if upgraded {
            self.stage_done(k, Stage::Upgrade, now);
            self.established(k, now);
        }
        if let Some(ms) = goaway {
            return self.moved(k, ms, now);
        }
        match (end, sent) {
            (ReadEnd::Error(reason), _) => self.lose(k, reason),
            (ReadEnd::Eof, _) => self.lose(k, "peer_closed".into()),
            (ReadEnd::Open | ReadEnd::Budget, Err(reason)) => self.lose(k, reason),
            (ReadEnd::Open, Ok(())) => {}
            (ReadEnd::Budget, Ok(())) => self.rearm(k),
        }
    }

    /// TCP (and TLS) is up: the protocol's opening goes out (an Upgrade,
    /// subscriptions, a first message) and the connection is established,
    /// or (an Upgrade) waits for its answer. False if it was lost meanwhile.
    fn connected(&mut self, k: usize, now: u64) -> bool {
        self.out.clear();
        self.speaker.open(&mut self.out, k, self.cfg.first + k as u64, &self.slots[k].seen);
        if self.speaker.upgrades() {
            self.slots[k].stage_us = now as u32;
            self.slots[k].state = State::Upgrading;
        } else {
            self.established(k, now);
        }
        self.out.is_empty() || self.write_slot(k)
    }

    /// A handshake stage of connection k ended: its time is recorded and
    /// the next stage starts now.
    fn stage_done(&mut self, k: usize, stage: Stage, now: u64) {
        let slot = &mut self.slots[k];
        let took = (now as u32).wrapping_sub(slot.stage_us) as u64;
        slot.stage_us = now as u32;
        // One stage (plain TCP) is the whole handshake: nothing apart.
        if self.tls.is_some() || self.speaker.upgrades() {
            histogram::record(self.stage_hists[stage as usize].get_or_insert_with(histogram::new), took);
        }
    }

    /// Connection k stopped at its read budget: ask epoll for a new edge.
    pub(super) fn rearm(&mut self, k: usize) {
        if self.slots[k].armed {
            return;
        }
        let Some(stream) = self.slots[k].stream.as_mut() else { return };
        if let Err(e) = self.poll.registry().reregister(stream, mio::Token(k), mio::Interest::READABLE | mio::Interest::WRITABLE) {
            self.lose(k, crate::sys::error_kind_name(&e));
        }
    }

    /// The handshake (TCP, and for WebSocket the Upgrade) is complete.
    fn established(&mut self, k: usize, now: u64) {
        let slot = &mut self.slots[k];
        let took = (now as u32).wrapping_sub(slot.started_us) as u64;
        slot.state = State::Established;
        histogram::record(&mut self.connect_hist, took);
        self.stats.connecting -= 1;
        self.stats.open += 1;
        if slot.churned {
            slot.churned = false;
            self.stats.churn_reopened += 1;
        } else if slot.retries > 0 {
            slot.retries = 0;
            self.stats.reconnects += 1;
            *self.stats.reconnects_by_s.entry(now.saturating_sub(self.cfg.start_at_us) / 1_000_000).or_insert(0) += 1;
            if let Some(at) = self.moved_at.remove(&(k as u32)) {
                histogram::record(&mut self.rehome_hist, now.saturating_sub(at));
            }
            // A replacement's ramp is mostly reconnects.
            self.resolved(now);
        } else {
            self.stats.established_total += 1;
            self.resolved(now);
        }
    }

    /// The run is over (the hold, Ctrl-C, the worker's deadline): nothing
    /// opens any more (what never got its turn is not attempted,
    /// `run_closed`); answers in flight get a short wait, then every
    /// connection closes.
    fn begin_drain(&mut self, now: u64) {
        if self.phase == Phase::Running {
            self.give_up_queued(connect::RUN_CLOSED);
            let wait = if self.cfg.traffic.request_us().is_some() { DRAIN_US.max(self.cfg.traffic.request_timeout_us()).min(MOST_DRAIN_US) } else { DRAIN_US };
            self.phase = Phase::Draining { until_us: now + wait };
        }
    }

    /// Close slots `from..to` (linger 0 with `--close reset`, the
    /// default: a plain close that sends a reset and keeps no state).
    fn close_from(&mut self, from: usize, to: usize) {
        for k in from..to {
            let slot = &mut self.slots[k];
            if slot.state == State::Established {
                // The reports between batches show the close progress.
                self.stats.open = self.stats.open.saturating_sub(1);
            }
            prepare_close(self.cfg.traffic.close, slot, &mut self.tls_bufs.wire);
            if slot.stream.is_some() {
                slot.tls = None;
                if slot.state.connecting() && slot.churned {
                    // A churn reopen cut short by the end of the run.
                    self.stats.churn_closed -= 1;
                    self.stats.connecting -= 1;
                } else if slot.state.connecting() {
                    crate::stats::counters::bump(&mut self.stats.failed, "cancelled");
                    self.stats.connecting -= 1;
                }
                self.put_down(k);
            }
            self.slots[k].state = State::Done;
        }
    }

    /// Every connection is closed: nothing is open any more, and the
    /// heartbeats still unanswered after the drain are counted so (where
    /// answers are matched to their heartbeat).
    fn closed(&mut self) {
        if self.speaker.hears_beats() {
            let s = &mut self.stats;
            s.heartbeats_unanswered += s.heartbeats_sent.saturating_sub(s.heartbeats_answered + s.heartbeats_abandoned);
        }
        self.reconnects.clear();
        self.stats.open = 0;
    }
}

/// What the run's `--close` asks of a slot's socket before it is
/// dropped: linger 0 (a reset, no TIME_WAIT) for `reset`, a TLS
/// close_notify for `graceful`.
fn prepare_close(close: CloseMode, slot: &mut Slot, wire: &mut Vec<u8>) {
    let Some(stream) = slot.stream.as_mut() else { return };
    if close == CloseMode::Reset {
        let _ = SockRef::from(&*stream).set_linger(Some(Duration::ZERO));
    }
    if let Some(tls) = slot.tls.as_deref_mut() {
        if close == CloseMode::Graceful {
            tls.close_notify(stream, wire);
        }
    }
}
