//! The broker's shards: threads in the supervisor's process (one per two cores by default),
//! each owning the topics whose name hashes to it ([`shard_of`]) with
//! their history, retained messages, interest and shared groups
//! (`core.rs`), and a Unix socket pair to every worker (`proto/bus.rs`).
//! A client's message goes from its worker to its topic's shard and from
//! there to the workers with a subscriber, each hop a binary frame whose
//! payload is the client's bytes: no stage that every message crosses,
//! so the node routes as many messages as it has cores for shards.
//!
//! The supervisor's own thread stays the control plane: it makes each
//! worker's socket pairs before it starts it ([`Shards::pairs_for`]),
//! hands the shards the admin API's and the cluster's messages
//! ([`Shards::send`]), and hears what a shard says for it
//! ([`ToMain`]) on its event sink. Reading a core (stats, the retained
//! file, `GET /history`) locks it for that moment ([`Shards::core`]).
//!
//! **Bounds.** A worker's frames are read at most [`READ_BUDGET`] bytes
//! per readiness event (then the others are served). What waits for a
//! worker is at most [`MAX_QUEUED`] bytes; past it a delivery to that
//! worker is dropped and counted (`broker_dropped{reason="worker_full"}`:
//! a worker stopped or far behind), and every other worker is served as
//! before. A frame a shard cannot read ends that worker's link (counted
//! `broker_refused`, the worker then exits and is replaced): a worker is
//! the supervisor's own process, so such a frame is a bug, not a peer.

use crate::proto::bus::{COALESCE, COALESCE_BYTES};
use crate::server::broker::core::{Core, CoreConfig, Input, Message, Output, ToMain};
use crate::server::broker::history::History;
use crate::server::broker::retained::Retained;
use anyhow::{Context, Result};
use mio::net::UnixStream;
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod link;
use link::Link;

/// Bytes a shard reads from one worker per readiness event.
pub(crate) const READ_BUDGET: usize = 1 << 20;
/// Bytes of frames waiting for one worker at most (a stopped worker's
/// share of the supervisor's memory).
pub(crate) const MAX_QUEUED: usize = 32 << 20;
/// How often a shard ticks (history expiry).
const TICK: Duration = Duration::from_secs(1);
/// A shard's waker: its inbox has something.
const WAKER: Token = Token(usize::MAX);

/// The shard that owns `topic` among `n`: FNV-1a of its bytes, the same
/// in every process (workers and the supervisor agree without asking).
pub(crate) fn shard_of(topic: &str, n: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % n.max(1) as u64) as usize
}

/// A retained message copied out of a shard: topic, data, metadata,
/// publish stamp (`cluster::retained::chunks` writes it).
pub(crate) type RetainedCopy = (String, Vec<u8>, crate::cluster::MqttMeta, u64);

/// What the supervisor tells a shard.
pub(crate) enum Cmd {
    /// Worker `w`'s end of its socket pair with this shard.
    Worker(u32, std::os::unix::net::UnixStream),
    /// A message into the topic space.
    Message(Message),
    /// A kept session's filter followed or let go.
    Offline {
        add: bool,
        filter: Box<str>,
    },
    /// The cluster's stream filled a topic's history.
    Merged {
        topic: String,
        messages: Vec<Message>,
        waiting: Vec<(u32, u64)>,
    },
    /// Answer a worker's recovery from the history here.
    History {
        worker: u32,
        topic: String,
        after: u64,
    },
    /// Another node's retained message or clear (`sync`: from a sync).
    Retained {
        topic: String,
        kept: crate::server::broker::retained::Kept,
        sync: bool,
    },
    Stop,
}

struct Shard {
    core: Arc<Mutex<Core>>,
    /// Each command with its stamp (`sys::mono_ns`) from when it was sent.
    tx: mpsc::Sender<(u64, Cmd)>,
    waker: Arc<Waker>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The shards of one server.
pub(crate) struct Shards {
    shards: Vec<Shard>,
}

impl Shards {
    /// Start `n` shards; what they say for the supervisor goes to
    /// `to_main`. The history's and retained set's node-wide bounds are
    /// divided among them.
    pub(crate) fn start(
        n: usize,
        history: crate::server::broker::history::HistoryConfig,
        retained: crate::server::broker::retained::RetainedConfig,
        cfg: CoreConfig,
        to_main: Arc<dyn Fn(ToMain) + Send + Sync>,
    ) -> Result<Shards> {
        let n = n.max(1);
        let mut shards = Vec::with_capacity(n);
        for i in 0..n {
            let h = crate::server::broker::history::HistoryConfig { max_bytes: (history.max_bytes / n as u64).max(1 << 20), ..history };
            let r = crate::server::broker::retained::RetainedConfig {
                max_messages: retained.max_messages.div_ceil(n),
                max_bytes: retained.max_bytes.div_ceil(n as u64),
                per_identity: retained.identity_quota().div_ceil(n),
            };
            let core = Arc::new(Mutex::new(Core::new(History::new(h), Retained::new(r), cfg)));
            let poll = Poll::new().context("cannot start a broker shard (epoll)")?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER).context("cannot start a broker shard (eventfd)")?);
            let (tx, rx) = mpsc::channel();
            let (c, main) = (core.clone(), to_main.clone());
            let thread = std::thread::Builder::new()
                .name(format!("broker-shard-{i}"))
                .spawn(move || run(c, poll, rx, main))
                .context("cannot start a broker shard thread")?;
            shards.push(Shard { core, tx, waker, thread: Some(thread) });
        }
        Ok(Shards { shards })
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.len()
    }

    /// The shard owning `topic`.
    pub(crate) fn of(&self, topic: &str) -> usize {
        shard_of(topic, self.shards.len())
    }

    /// Tell shard `i`.
    pub(crate) fn send(&self, i: usize, cmd: Cmd) {
        let s = &self.shards[i];
        if s.tx.send((crate::sys::mono_ns(), cmd)).is_ok() {
            let _ = s.waker.wake();
        }
    }

    /// Tell the shard owning `topic`.
    pub(crate) fn send_for(&self, topic: &str, cmd: Cmd) {
        self.send(self.of(topic), cmd);
    }

    /// A copy of the retained messages not expired at `now_us` whose
    /// topic `wanted` accepts, and (`clears`) the clears remembered, taken
    /// a shard at a time: (topic, data, metadata, publish stamp).
    pub(crate) fn retained_copy(&self, now_us: u64, clears: bool, mut wanted: impl FnMut(&str) -> bool) -> Vec<RetainedCopy> {
        let mut all = Vec::new();
        for i in 0..self.len() {
            let core = self.core(i);
            let r = &core.retained;
            all.extend(r.all(now_us).filter(|(t, ..)| wanted(t)).map(|(t, d, m, us)| (t.to_string(), d.to_vec(), m, us)));
            if clears {
                let clear = || crate::cluster::MqttMeta { qos: 0, retain: true, props: None, shared: Vec::new() };
                all.extend(r.cleared().map(|(t, us)| (t.to_string(), Vec::new(), clear(), us)));
            }
        }
        all
    }

    /// `n` retained messages not kept or not sent, for `reason` (counted
    /// on the first shard).
    pub(crate) fn retained_refused(&self, reason: &str, n: u64) {
        self.core(0).retained.refused(reason, n);
    }

    /// A message into the topic space, to the shard of its stream.
    pub(crate) fn publish(&self, m: Message) {
        let name = match m.stream {
            crate::proto::push::Stream::Broadcast => crate::proto::push::BROADCAST_TOPIC,
            // Unicasts have no history: any shard routes them.
            crate::proto::push::Stream::Unicast => "",
            crate::proto::push::Stream::Topic => m.topic.as_str(),
        };
        let i = self.of(name);
        self.send(i, Cmd::Message(m));
    }

    /// A kept session's filter followed (or let go): an exact topic at
    /// its shard, a wildcard filter at every shard.
    pub(crate) fn offline(&self, add: bool, filter: &str) {
        match crate::proto::mqtt::topic::is_filter(filter) {
            true => (0..self.len()).for_each(|i| self.send(i, Cmd::Offline { add, filter: filter.into() })),
            false => self.send(self.of(filter), Cmd::Offline { add, filter: filter.into() }),
        }
    }

    /// Lock shard `i`'s core for a moment (stats, a snapshot).
    pub(crate) fn core(&self, i: usize) -> MutexGuard<'_, Core> {
        self.shards[i].core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make worker `w`'s socket pairs, one per shard: the shards get
    /// their ends now, the worker inherits the others (returned; the
    /// caller closes them once the worker started).
    pub(crate) fn pairs_for(&self, w: u32) -> Result<Vec<OwnedFd>> {
        let mut ends = Vec::with_capacity(self.len());
        for i in 0..self.len() {
            let (mine, theirs) = std::os::unix::net::UnixStream::pair().context("cannot make a worker's bus socket pair")?;
            // Room in the kernel for bursts both ways (best effort: the
            // bounds above hold whatever the kernel grants).
            for s in [&mine, &theirs] {
                let _ = socket2::SockRef::from(s).set_send_buffer_size(4 << 20);
                let _ = socket2::SockRef::from(s).set_recv_buffer_size(4 << 20);
            }
            mine.set_nonblocking(true).context("cannot make a bus socket non-blocking")?;
            self.send(i, Cmd::Worker(w, mine));
            ends.push(OwnedFd::from(theirs));
        }
        Ok(ends)
    }

    /// Stop every shard and wait for it.
    pub(crate) fn stop(&mut self) {
        for i in 0..self.len() {
            self.send(i, Cmd::Stop);
        }
        for s in &mut self.shards {
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Rounds of "anything more meanwhile?" before a shard handles what it took.
const ROUNDS: usize = 4;

/// A shard's loop: its workers' frames into the core, the core's frames
/// out to the workers, the supervisor's commands, a tick a second.
///
/// **Cause before effect.** What one worker sent may have caused what
/// another sent, or what the supervisor hands in (a client is told it is
/// subscribed and its peer publishes; a retained message is acknowledged
/// and a new subscriber asks for it), and epoll says nothing of which
/// came first. Every run of a worker's frames and every command carries
/// its stamp on the machine's monotonic clock (`proto/bus.rs`), so a
/// turn takes everything waiting, asks epoll again (at most [`ROUNDS`]
/// times) whether more came meanwhile, and applies it in stamp order
/// ([`route`]) up to the moment of its last ask: whatever caused a frame
/// stamped before that moment had been written before it, so it is in
/// hand. What is stamped later waits for the next turn, which comes at
/// once.
fn run(core: Arc<Mutex<Core>>, mut poll: Poll, rx: mpsc::Receiver<(u64, Cmd)>, to_main: Arc<dyn Fn(ToMain) + Send + Sync>) {
    let mut links: slab::Slab<Link> = slab::Slab::new();
    let mut by_worker: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut next_tick = Instant::now() + TICK;
    let mut scratch = vec![0u8; 64 << 10];
    let mut outs: Vec<Output> = Vec::new();
    let mut dropped = crate::stats::counters::Kinds::new();
    // The supervisor's commands not yet applied, and workers just linked.
    let mut inbox: VecDeque<(u64, Cmd)> = VecDeque::new();
    let mut linked: Vec<u32> = Vec::new();
    // Something waits for a later turn's stamp bound: that turn is now.
    let mut held = false;
    // Frames for the workers wait up to COALESCE for others (as the
    // workers' own do, `worker/bus.rs`): one wake-up of a worker for many.
    let (mut hold_until, mut fresh): (Option<Instant>, usize) = (None, 0);
    loop {
        let wait = match held {
            true => Duration::ZERO,
            false => hold_until.map_or(next_tick, |h| h.min(next_tick)).saturating_duration_since(Instant::now()),
        };
        let mut asked = crate::sys::mono_ns();
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
        // What the supervisor hands in (an admin request waiting for its
        // answer, the cluster) goes out without waiting for company.
        let mut urgent = false;
        for round in 0..ROUNDS {
            // Drained every round: what was sent before the last ask is in.
            for (at, cmd) in rx.try_iter() {
                urgent = true;
                match cmd {
                    Cmd::Stop => return,
                    Cmd::Worker(w, s) => {
                        let mut stream = UnixStream::from_std(s);
                        let key = links.vacant_key();
                        if poll.registry().register(&mut stream, Token(key), Interest::READABLE | Interest::WRITABLE).is_ok() {
                            links.insert(Link::new(w, stream));
                            by_worker.insert(w, key);
                            linked.push(w);
                        }
                    }
                    other => inbox.push_back((at, other)),
                }
            }
            for ev in events.iter() {
                if let Some(link) = links.get_mut(ev.token().0) {
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        link.take(&mut scratch, poll.registry(), ev.token());
                    }
                }
            }
            if round + 1 == ROUNDS {
                break;
            }
            let now = crate::sys::mono_ns();
            match poll.poll(&mut events, Some(Duration::ZERO)) {
                Ok(()) => asked = now,
                Err(_) => break,
            }
            if events.is_empty() {
                break;
            }
        }
        let now_us = crate::proto::push::wall_us();
        let mut c = core.lock().unwrap_or_else(|e| e.into_inner());
        for w in linked.drain(..) {
            c.handle(Input::WorkerUp(w), now_us, &mut outs);
        }
        held = route(&mut c, &mut links, &mut inbox, asked, now_us, &mut outs);
        if Instant::now() >= next_tick {
            c.handle(Input::Tick, now_us, &mut outs);
            next_tick = Instant::now() + TICK;
        }
        let gone: Vec<usize> = links.iter().filter(|(_, l)| l.gone()).map(|(k, _)| k).collect();
        for key in gone {
            let link = links.remove(key);
            by_worker.remove(&link.w);
            let _ = poll.registry().deregister(&mut { link.stream });
            c.handle(Input::WorkerGone(link.w), now_us, &mut outs);
        }
        for (_, link) in links.iter_mut() {
            link.inbuf.tidy();
        }
        for (reason, n) in std::mem::take(&mut dropped) {
            *c.counters.dropped.entry(reason).or_insert(0) += n;
        }
        drop(c);
        for o in outs.drain(..) {
            match o {
                Output::Send { to, bytes } => {
                    for w in to {
                        if let Some(link) = by_worker.get(&w).and_then(|k| links.get_mut(*k)) {
                            link.queue(&bytes, &mut dropped);
                            fresh += bytes.len();
                        }
                    }
                }
                Output::Main(m) => to_main(m),
            }
        }
        if fresh > 0 && hold_until.is_none() {
            hold_until = Some(Instant::now() + COALESCE);
        }
        match hold_until {
            Some(h) if !urgent && fresh < COALESCE_BYTES && Instant::now() < h => continue,
            _ => (hold_until, fresh) = (None, 0),
        }
        let mut broken = Vec::new();
        for (key, link) in links.iter_mut().filter(|(_, l)| l.pending() > 0) {
            if link.flush().is_err() {
                broken.push(key);
            }
        }
        if !broken.is_empty() {
            let mut c = core.lock().unwrap_or_else(|e| e.into_inner());
            for key in broken {
                let link = links.remove(key);
                by_worker.remove(&link.w);
                c.handle(Input::WorkerGone(link.w), now_us, &mut outs);
            }
        }
    }
}

/// Apply what the links and the supervisor sent, run by run in stamp
/// order, up to `bound` (the moment epoll was last asked; lower for a
/// link whose read stopped at its budget: what waits unread in it is
/// stamped no earlier than what was read). True: something waits for a
/// later turn.
fn route(c: &mut Core, links: &mut slab::Slab<Link>, inbox: &mut VecDeque<(u64, Cmd)>, bound: u64, now_us: u64, outs: &mut Vec<Output>) -> bool {
    loop {
        let mut limit = bound;
        // The earliest run waiting: (stamp, link key; None: the supervisor's).
        let mut first: Option<(u64, Option<usize>)> = inbox.front().map(|(at, _)| (*at, None));
        for (key, link) in links.iter_mut() {
            while let Some(at) = link.inbuf.take_stamp() {
                link.stamp = at;
            }
            if link.inbuf.whole() {
                if first.is_none_or(|(at, _)| link.stamp < at) {
                    first = Some((link.stamp, Some(key)));
                }
            } else if link.cut {
                limit = limit.min(link.stamp);
            }
        }
        let Some((at, from)) = first else { return false };
        if at > limit {
            return true;
        }
        let Some(key) = from else {
            let (_, cmd) = inbox.pop_front().expect("its front was seen");
            let input = match cmd {
                Cmd::Message(m) => Input::Message(m),
                Cmd::Offline { add, filter } => Input::Offline { add, filter },
                Cmd::Merged { topic, messages, waiting } => Input::Merged { topic, messages, waiting },
                Cmd::History { worker, topic, after } => Input::History { worker, topic, after },
                Cmd::Retained { topic, kept, sync } => Input::RetainedEntry { topic, kept, sync },
                Cmd::Stop | Cmd::Worker(..) => continue,
            };
            c.handle(input, now_us, outs);
            continue;
        };
        let link = &mut links[key];
        loop {
            if let Some(at) = link.inbuf.take_stamp() {
                link.stamp = at;
                break;
            }
            match link.inbuf.next() {
                Ok(Some(frame)) => c.handle(Input::Worker(link.w, frame), now_us, outs),
                Ok(None) => break,
                Err(e) => {
                    crate::stats::counters::bump(&mut c.counters.refused, e.kind());
                    link.fail();
                    break;
                }
            }
        }
    }
}
