//! A worker's side of the bus (`proto/bus.rs`): one Unix socket to each
//! broker shard, inherited from the supervisor. What the worker's
//! connections publish, subscribe to and ask for goes to the shard that
//! owns the topic (a filter's interest and a shared subscription to
//! every shard), framed into that shard's buffer as it happens and
//! written at the end of the loop's turn (one `write` for many frames);
//! what the shards deliver comes back as frames read on readiness.
//! Each run of frames opens with a stamp filled in as it is written
//! (`bus::open_run`): shards order what many workers sent by it.
//!
//! **Coalescing.** At a low rate every frame written at once would wake
//! its shard for one message (a thread switch costs more than routing
//! it): frames wait up to [`COALESCE`] after the first of them, or until
//! [`COALESCE_BYTES`] wait, and go in one write. Under load the buffer
//! fills within a loop turn and goes at once, as before.
//!
//! **Back-pressure.** What waits for one shard is bounded: past
//! [`HIGH_WATER`] the worker stops reading its publishing connections
//! (they wait in [`Bus::paused`], TCP then holds their clients back) and
//! reads them again once every shard took it below [`LOW_WATER`]. A
//! publish is never dropped on the way to a shard: its PUBACK went out
//! only once it was in the shard's buffer here.

use crate::proto::bus::{self, Frame, FrameBuf, COALESCE, COALESCE_BYTES};
use crate::server::broker::history::{Message, Slice};
use crate::server::broker::shard::shard_of;
use crate::server::commands::{PushCommand, ServerMsg};
use crate::supervise::control;
use crate::supervise::Flow;
use mio::net::UnixStream;
use mio::{Interest, Registry, Token};
use std::io::{Read, Write};

mod waits;
use waits::Waits;

/// Token of shard i's link: `BUS_BASE + i`.
pub(crate) const BUS_BASE: usize = usize::MAX - 1024;
/// Bytes waiting for one shard above which publishers are not read.
pub(crate) const HIGH_WATER: usize = 8 << 20;
/// ... and below which (every shard) they are read again.
pub(crate) const LOW_WATER: usize = 2 << 20;
/// Bytes read from one shard per readiness event.
const READ_BUDGET: usize = 4 << 20;

struct Link {
    stream: UnixStream,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    sent: usize,
    /// Where the stamp of the run not yet written is.
    run: Option<usize>,
    inbuf: FrameBuf,
}

impl Link {
    fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Frames' bytes, into the run waiting to be written.
    fn append(&mut self, bytes: &[u8]) {
        if self.run.is_none() {
            self.run = Some(bus::open_run(&mut self.out));
        }
        self.out.extend_from_slice(bytes);
    }

    /// One frame, into the run waiting to be written.
    fn frame(&mut self, f: &Frame<'_>) {
        if self.run.is_none() {
            self.run = Some(bus::open_run(&mut self.out));
        }
        bus::encode(&mut self.out, f);
    }

    /// Write what waits (its run stamped now); Err: the shard is gone.
    fn flush(&mut self) -> std::io::Result<()> {
        if let Some(run) = self.run.take() {
            bus::seal(&mut self.out, run, crate::sys::mono_ns());
        }
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // What was written goes once it is most of the buffer: a shard
        // that always lags a little never lets it grow.
        if self.sent < self.out.len() && self.sent > self.out.len() / 2 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            if self.out.capacity() > 1 << 20 {
                self.out = Vec::new();
            }
        }
        Ok(())
    }
}

/// The worker's links to the shards.
#[derive(Default)]
pub(crate) struct Bus {
    links: Vec<Link>,
    /// Connections (key, generation) not read while the bus is full.
    pub paused: Vec<(usize, u32)>,
    /// Frames written, and what the shards sent this worker (stats).
    pub frames_out: u64,
    pub frames_in: u64,
    /// When the oldest frame not yet written was framed.
    waiting_since: Option<std::time::Instant>,
    /// Bytes framed since the last write.
    waiting: usize,
    /// Interest or a group's membership waits: written before the next reply.
    urgent: bool,
    /// New subscriptions waiting for the shards' retained answers.
    pub waits: Waits,
}

impl Bus {
    /// The links on `fds` (one per shard, in shard order), watched by
    /// `registry`.
    pub(crate) fn open(fds: &[i32], registry: &Registry) -> std::io::Result<Bus> {
        let mut links = Vec::with_capacity(fds.len());
        for (i, fd) in fds.iter().enumerate() {
            // SAFETY: the supervisor made this socket for this worker
            // alone and it is inherited open; nothing else owns it here.
            let std = unsafe { <std::os::unix::net::UnixStream as std::os::fd::FromRawFd>::from_raw_fd(*fd) };
            std.set_nonblocking(true)?;
            let mut stream = UnixStream::from_std(std);
            registry.register(&mut stream, Token(BUS_BASE + i), Interest::READABLE | Interest::WRITABLE)?;
            links.push(Link { stream, out: Vec::new(), sent: 0, run: None, inbuf: FrameBuf::default() });
        }
        Ok(Bus { links, ..Bus::default() })
    }

    /// The shard of `topic`.
    pub(crate) fn shard(&self, topic: &str) -> usize {
        shard_of(topic, self.links.len())
    }

    /// One frame for shard `i`.
    pub(crate) fn to(&mut self, i: usize, f: &Frame<'_>) {
        if let Some(l) = self.links.get_mut(i) {
            let before = l.out.len();
            l.frame(f);
            self.frames_out += 1;
            self.waiting += l.out.len() - before;
            self.waiting_since.get_or_insert_with(std::time::Instant::now);
        }
    }

    /// One frame for the shard of `topic`.
    pub(crate) fn send_topic(&mut self, topic: &str, f: &Frame<'_>) {
        let i = self.shard(topic);
        self.to(i, f);
    }

    /// One frame for every shard.
    pub(crate) fn send_all(&mut self, f: &Frame<'_>) {
        let mut one = Vec::new();
        bus::encode(&mut one, f);
        for l in &mut self.links {
            l.append(&one);
            self.frames_out += 1;
            self.waiting += one.len();
        }
        self.waiting_since.get_or_insert_with(std::time::Instant::now);
    }

    /// A subscription's interest or a filter's: a topic to its shard, a
    /// wildcard filter to every shard (its topics may be anyone's).
    pub(crate) fn interest(&mut self, add: bool, name: &str) {
        self.urgent = true;
        let filter = crate::proto::mqtt::topic::is_filter(name);
        let f = Frame::Interest { add, filter, name };
        match filter {
            true => self.send_all(&f),
            false => self.send_topic(name, &f),
        }
    }

    /// A new subscription's ask for the retained messages its filter
    /// matches: to its topic's shard, or every shard for a wildcard; its
    /// connection waits for each answer ([`Waits`]).
    pub(crate) fn want_retained(&mut self, conn: u64, qos: u8, sid: u32, filter: &str) {
        let f = Frame::RetainedWant { conn, qos, sid, filter };
        if crate::proto::mqtt::topic::is_filter(filter) {
            self.send_all(&f);
            self.waits.asked(conn, filter, 0..self.links.len());
        } else {
            let i = self.shard(filter);
            self.to(i, &f);
            self.waits.asked(conn, filter, std::iter::once(i));
        }
    }

    /// A shared group's membership, to every shard.
    pub(crate) fn share(&mut self, f: &Frame<'_>) {
        self.urgent = true;
        self.send_all(f);
    }

    /// The interest the connections' subscriptions gained or lost since
    /// last asked ([`crate::server::tables::topics::Topics::take_interest`]), framed.
    pub(crate) fn take_interest(&mut self, topics: &mut crate::server::tables::topics::Topics) {
        for (add, name) in topics.take_interest() {
            self.interest(add, &name);
        }
    }

    /// Before a reply to a client goes out: the interest its read gained
    /// or lost is framed and, with any group membership, written now
    /// (a failed write is the next flush's to report).
    pub(crate) fn before_reply(&mut self, topics: &mut crate::server::tables::topics::Topics) {
        self.take_interest(topics);
        if self.urgent {
            let _ = self.flush();
        }
    }

    /// When what waits is to be written ([`COALESCE`] after its first
    /// frame); None: nothing waits.
    pub(crate) fn due(&self) -> Option<std::time::Instant> {
        self.waiting_since.map(|t| t + COALESCE)
    }

    /// Write what waits if it is due: interest, [`COALESCE_BYTES`], or
    /// the first of them waited [`COALESCE`]. Err: as [`Bus::flush`].
    pub(crate) fn flush_due(&mut self, now: std::time::Instant) -> std::io::Result<()> {
        match self.waiting_since {
            Some(t) if !self.urgent && self.waiting < COALESCE_BYTES && now < t + COALESCE => Ok(()),
            _ => self.flush(),
        }
    }

    /// Write what waits for every shard. Err: a shard is gone (the
    /// supervisor stopped, or a shard failed): the worker cannot route.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        (self.waiting_since, self.waiting, self.urgent) = (None, 0, false);
        for l in &mut self.links {
            if l.pending() > 0 {
                l.flush()?;
            }
        }
        Ok(())
    }

    /// Whether some shard has more than [`HIGH_WATER`] waiting.
    pub(crate) fn congested(&self) -> bool {
        self.links.iter().any(|l| l.pending() > HIGH_WATER)
    }

    /// Whether every shard is below [`LOW_WATER`].
    pub(crate) fn drained(&self) -> bool {
        self.links.iter().all(|l| l.pending() <= LOW_WATER)
    }

    /// Read what shard `i` sent; the frames to take are in the returned
    /// buffer (give it back with [`Bus::give_back`]), and whether the read
    /// stopped at its budget. Err: the shard is gone.
    pub(crate) fn read(&mut self, i: usize, scratch: &mut [u8]) -> std::io::Result<(FrameBuf, bool)> {
        let Some(l) = self.links.get_mut(i) else { return Ok((FrameBuf::default(), false)) };
        let mut read = 0;
        while read < READ_BUDGET {
            match l.stream.read(scratch) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    read += n;
                    l.inbuf.extend(&scratch[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok((std::mem::take(&mut l.inbuf), read >= READ_BUDGET))
    }

    /// Shard `i`'s read buffer back; `full`: its read stopped at the
    /// budget, so a new edge is asked for (more may wait).
    pub(crate) fn give_back(&mut self, i: usize, mut buf: FrameBuf, registry: &Registry, full: bool) {
        let Some(l) = self.links.get_mut(i) else { return };
        buf.tidy();
        l.inbuf = buf;
        if full {
            let _ = registry.reregister(&mut l.stream, Token(BUS_BASE + i), Interest::READABLE | Interest::WRITABLE);
        }
    }
}

impl super::Worker {
    /// A shard's link is readable or writable.
    pub(super) fn on_bus(&mut self, i: usize, readable: bool, writable: bool) {
        if writable {
            if let Err(e) = self.bus.flush() {
                self.bus_lost(e);
                return;
            }
            self.resume_paused();
        }
        if !readable {
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let read = self.bus.read(i, &mut scratch);
        self.scratch = scratch;
        let (mut buf, full) = match read {
            Ok(r) => r,
            Err(e) => {
                self.bus_lost(e);
                return;
            }
        };
        loop {
            match buf.next() {
                Ok(Some(frame)) => {
                    self.bus.frames_in += 1;
                    self.on_frame(i, frame);
                }
                Ok(None) => break,
                Err(e) => {
                    // The supervisor's own frames: a bug, said once and the link ended.
                    control::emit(&ServerMsg::Fatal { worker: self.cfg.worker, message: format!("a broker shard sent {e}") });
                    self.bus_lost(std::io::Error::other(e));
                    return;
                }
            }
        }
        self.bus.give_back(i, buf, self.poll.registry(), full);
    }

    /// One frame shard `i` sent.
    fn on_frame(&mut self, i: usize, frame: Frame<'_>) {
        match frame {
            Frame::Deliver(d) if d.retain && !self.bus.waits.is_empty() => {
                // Held back from subscriptions whose retained answer from
                // this shard is still to come: they get it there.
                self.held_back = self.bus.waits.held(i, d.topic);
                self.push(PushCommand::from_bus(d));
                self.held_back.clear();
            }
            Frame::Deliver(d) => self.push(PushCommand::from_bus(d)),
            Frame::Retained { conn, qos, sid, messages } => {
                self.bus.waits.answered(i, conn);
                self.retained(conn, qos, sid, &messages);
            }
            Frame::History { topic, after, epoch, head, oldest, messages } => {
                let messages = messages.iter().map(|m| Message { offset: m.offset, publish_us: m.publish_us, data: m.payload.to_vec() }).collect();
                let slice = Slice { topic: topic.to_string(), after, epoch, head, messages, oldest };
                self.recovered(&slice);
            }
            // A worker's own kinds are not a shard's to send.
            Frame::Publish(_) | Frame::Interest { .. } | Frame::Share { .. } | Frame::RetainedWant { .. } | Frame::HistoryWant { .. } | Frame::Stamp { .. } => {
            }
        }
    }

    /// The link to a shard failed: the supervisor is gone (or a shard
    /// is), so nothing can be routed: the worker ends (an alive
    /// supervisor replaces it).
    pub(super) fn bus_lost(&mut self, e: std::io::Error) -> Flow {
        if !self.stopping_for_bus {
            self.stopping_for_bus = true;
            eprintln!("megaconn: server worker {}: its link to the broker ended ({e}); stopping", self.cfg.worker);
        }
        Flow::Done
    }

    /// Publishers paused while the bus was full are read again once it
    /// drained.
    pub(super) fn resume_paused(&mut self) {
        if self.bus.paused.is_empty() || !self.bus.drained() {
            return;
        }
        for (key, gen) in std::mem::take(&mut self.bus.paused) {
            if self.conns.get(key).is_some_and(|c| c.gen == gen) {
                self.resume_reading(key);
            }
        }
    }
}
