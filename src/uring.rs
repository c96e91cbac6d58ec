//! The io_uring side of a worker (`--io uring`): connections' bytes arrive
//! as completions of one multishot receive each, into a ring of buffers the
//! whole worker shares, and one `io_uring_enter` per loop turn both submits
//! and waits. Everything else (listeners, supervisor commands, writability
//! of connections with a backlog) stays on the worker's epoll, which the
//! ring watches as one more file.
//!
//! Why this shape: with epoll every heartbeat costs a readiness event, a
//! `read` and the loop's `epoll_wait`/`ppoll` share; here the receive is
//! already done when the loop hears of it. No connection owns a buffer:
//! 16 buffers of 4 KiB per worker, consumed a receive's bytes at a time
//! (incremental provided buffers, Linux 6.12+), serve every connection;
//! each goes back to the ring once the kernel has filled it and its bytes
//! were handled.

use crate::reactor::{self, Handler};
use crate::supervise::Flow;
use anyhow::{Context, Result};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

mod batch;
use batch::Batching;

/// Buffers in the shared ring (a power of two).
const BUFS: u16 = 16;
/// Bytes per buffer. The ring is incremental (IOU_PBUF_RING_INC): a
/// receive takes only the bytes it got, so one buffer holds hundreds of
/// heartbeats, and 64 KiB serve a worker's every connection.
const BUF_LEN: usize = 4096;
/// The buffer group every receive picks from.
const GROUP: u16 = 0;
/// Submission queue entries; more waiting submissions are kept in order.
const SQ_ENTRIES: u32 = 2048;
/// Completion queue entries (the kernel keeps any overflow, FEAT_NODROP).
const CQ_ENTRIES: u32 = 8192;
/// Completions copied out and handled at a time.
const CQE_BATCH: usize = 256;
/// Most submissions between two looks at the completion queue: their
/// completions, with the receives', fit in it (past it the kernel keeps
/// completions on a slower overflow list).
const SUBMIT_BUDGET: usize = CQ_ENTRIES as usize / 2;

/// The tag of the completions that say the worker's epoll has events.
const EPOLL_TAG: u64 = u64::MAX;
/// The tag of cancellations' own completions.
const CANCEL_TAG: u64 = u64::MAX - 1;

/// `--io`: which reactor a server's workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Io {
    /// io_uring where this kernel and this process allow it, else epoll.
    #[default]
    Auto,
    /// io_uring, or an error naming what refuses it.
    Uring,
    /// The epoll reactor (mio).
    Epoll,
}

impl Io {
    /// The reactor `--io` gives on this host with this configuration, and
    /// why when `auto` fell back to epoll. An explicit `uring` that cannot
    /// be had is an error naming the cause and the fix.
    pub(crate) fn resolve(self) -> Result<(Io, Option<String>), String> {
        match (self, probe()) {
            (Io::Epoll, _) => Ok((Io::Epoll, None)),
            (_, Ok(())) => Ok((Io::Uring, None)),
            (Io::Auto, Err(why)) => Ok((Io::Epoll, Some(why))),
            (_, Err(why)) => Err(format!("--io uring: {why}; use --io epoll (or auto, which falls back to it)")),
        }
    }

    /// As `--io` takes it.
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Io::Auto => "auto",
            Io::Uring => "uring",
            Io::Epoll => "epoll",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Io::Auto => "auto",
            Io::Uring => "io_uring",
            Io::Epoll => "epoll",
        }
    }
}

/// `--io-batch-wait`'s default: a quarter of a millisecond more latency
/// at most, for a third of a worker's CPU at 60,000 messages a second
/// from 2,000 devices (BENCHMARKS.md).
pub(crate) const DEFAULT_BATCH_WAIT: Duration = Duration::from_micros(250);

/// Tags with this bit are sends' (the rest of the tag is the worker's).
pub(crate) const SEND_TAG: u64 = 1 << 62;
/// Receive tags stay below this (the worker's key and generation).
pub(crate) const RECV_TAGS: u64 = 1 << 62;

/// A connection's receive tag: its key (slot) and generation (30 bits of
/// it), so a late completion for a closed connection never reaches the
/// next one there.
pub(crate) fn recv_tag(key: usize, gen: u32) -> u64 {
    ((gen as u64 & 0x3FFF_FFFF) << 32 | key as u64) & (RECV_TAGS - 1)
}

/// The key of a receive tag.
pub(crate) fn recv_key(tag: u64) -> usize {
    (tag & u32::MAX as u64) as usize
}

/// What a worker asks the ring to do, queued during its handlers and
/// submitted with the next wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// Receive on `fd` until cancelled; completions carry `tag` (below
    /// [`RECV_TAGS`]).
    Recv { fd: RawFd, tag: u64 },
    /// Stop the receive tagged `tag` (its connection closed).
    Cancel { tag: u64 },
    /// Send `len` bytes at `ptr` on `fd`; the memory stays valid and
    /// unchanged until the completion tagged `tag` (with [`SEND_TAG`]).
    Send { fd: RawFd, ptr: *const u8, len: u32, tag: u64 },
}

/// What one receive completion brought.
#[derive(Debug)]
pub(crate) enum Received<'a> {
    /// Bytes, and whether they filled what was left of their buffer: a
    /// receive takes at most that, so what the peer sent with them may
    /// come in the next completion (a client's opening cut in two: see
    /// `server/worker/seam.rs`).
    Data(&'a [u8], bool),
    /// The peer closed its side.
    Eof,
    /// The receive failed (a negative errno); the connection is done.
    Error(i32),
    /// The receive stopped without an end (no buffer was free): arm a new one.
    Stopped,
}

/// Lists that give their memory back once emptied above this capacity.
const SHRINK_ABOVE: usize = 1024;

/// What a worker has for the ring's next submit: operations, and sockets
/// an operation still names by descriptor number. Those close once it was
/// submitted: closed before, the number could go to a new socket and the
/// operation (a receive's cancellation) would act on that one.
#[derive(Default)]
pub(crate) struct Pending {
    pub ops: Vec<Op>,
    closing: Vec<mio::net::TcpStream>,
}

impl Pending {
    /// Stop the receive tagged `tag` and close `stream`, its socket, once
    /// the cancellation is submitted.
    pub(crate) fn cancel_and_close(&mut self, tag: u64, stream: mio::net::TcpStream) {
        self.ops.push(Op::Cancel { tag });
        self.close_after_submit(stream);
    }

    /// Close `stream` once what is queued so far is submitted.
    pub(crate) fn close_after_submit(&mut self, stream: mio::net::TcpStream) {
        self.closing.push(stream);
    }

    /// Everything queued reached the kernel: close what waited for it; a
    /// burst's long lists give their memory back.
    fn submitted(&mut self) {
        self.closing.clear();
        if self.closing.capacity() > SHRINK_ABOVE {
            self.closing = Vec::new();
        }
        if self.ops.is_empty() && self.ops.capacity() > SHRINK_ABOVE {
            self.ops = Vec::new();
        }
    }
}

/// A worker that can run on the ring.
pub(crate) trait RingHandler: Handler {
    /// Bytes (or the end) of the connection whose receive carries `tag`.
    fn on_received(&mut self, tag: u64, r: Received<'_>);
    /// A send finished: `res` bytes went, or it failed (a negative errno).
    fn on_sent(&mut self, tag: u64, res: i32);
    /// What waits for the next submit.
    fn pending(&mut self) -> &mut Pending;
    /// Everything queued so far reached the kernel (the sockets waiting
    /// for it are closed already): the worker's own follow-ups.
    fn submitted(&mut self) {}
    /// Sends submitted or queued and not completed yet.
    fn sends_in_flight(&self) -> usize;
    /// Connections open (whether they are many and quiet decides
    /// batching, `uring/batch.rs`).
    fn connections(&self) -> usize {
        0
    }
    /// Deliveries held behind a client's flow-control window so far (a
    /// running count): while it moves, round trips set the pace, and the
    /// batching wait is not stretched.
    fn held_behind_windows(&self) -> u64 {
        0
    }
}

/// Whether this kernel and this process may use io_uring the way the
/// worker does (a ring, a registered buffer ring, multishot receive);
/// `Err` names what refused it and the fix.
pub(crate) fn probe() -> Result<(), String> {
    match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").map(|s| s.trim().to_string()).as_deref() {
        Ok("2") => return Err("kernel.io_uring_disabled = 2: io_uring is off on this host (sysctl -w kernel.io_uring_disabled=0)".into()),
        // SAFETY: geteuid cannot fail.
        Ok("1") if unsafe { libc::geteuid() } != 0 => {
            return Err("kernel.io_uring_disabled = 1: only root and kernel.io_uring_group may use io_uring (sysctl -w kernel.io_uring_disabled=0)".into())
        }
        _ => {}
    }
    let ring = Ring::new().map_err(|e| format!("{e:#}"))?;
    let mut p = io_uring::Probe::new();
    ring.ring.submitter().register_probe(&mut p).map_err(|e| format!("cannot probe io_uring opcodes: {e}"))?;
    if !p.is_supported(opcode::RecvMulti::CODE) || !p.is_supported(opcode::PollAdd::CODE) {
        return Err("this kernel's io_uring has no multishot receive (Linux 6.0 or later has)".into());
    }
    Ok(())
}

/// A ring and the buffers its receives fill.
pub(crate) struct Ring {
    ring: IoUring,
    bufs: Bufs,
    /// Submissions that did not fit in the queue yet, in order.
    waiting: Vec<squeue::Entry>,
    /// Completions copied out of the queue before they are handled.
    cqes: Vec<(u64, i32, u32)>,
    /// Waiting for company while the connections are quiet (off unless
    /// [`Ring::batching`] turned it on).
    batching: Batching,
}

impl Ring {
    pub(crate) fn new() -> Result<Ring> {
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(SQ_ENTRIES)
            .map_err(refused)
            .context("cannot create an io_uring")?;
        let bufs = Bufs::new()?;
        // SAFETY: the ring of entries lives in `bufs`, which lives as long
        // as the ring (both fields of this struct; the ring drops first).
        unsafe { ring.submitter().register_buf_ring_with_flags(bufs.entries as u64, BUFS, GROUP, types::IOU_PBUF_RING_INC as u16) }
            .context("cannot register incremental io_uring provided buffers (Linux 6.12 or later)")?;
        Ok(Ring { ring, bufs, waiting: Vec::new(), cqes: Vec::with_capacity(CQE_BATCH), batching: Batching::new(Duration::ZERO) })
    }

    /// Wait up to `wait` for more completions while the connections are
    /// quiet (`uring/batch.rs`); a kernel without the minimum wait
    /// (before Linux 6.13) keeps waking at the first completion.
    pub(crate) fn batching(mut self, wait: Duration) -> Ring {
        let wait = if self.ring.params().is_feature_min_timeout() { wait } else { Duration::ZERO };
        self.batching = Batching::new(wait);
        self
    }

    fn push(&mut self, e: squeue::Entry) {
        if self.waiting.is_empty() {
            // SAFETY: receives point at the registered buffer group only;
            // polls and cancellations carry no memory; a send's memory is
            // kept by the worker until its completion (Op::Send).
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                return;
            }
        }
        self.waiting.push(e);
    }

    fn queue(&mut self, op: Op) {
        let e = match op {
            Op::Recv { fd, tag } => opcode::RecvMulti::new(types::Fd(fd), GROUP).build().user_data(tag),
            Op::Cancel { tag } => opcode::AsyncCancel::new(tag).build().user_data(CANCEL_TAG),
            Op::Send { fd, ptr, len, tag } => opcode::Send::new(types::Fd(fd), ptr, len).flags(libc::MSG_NOSIGNAL).build().user_data(tag),
        };
        self.push(e);
    }

    fn watch(&mut self, fd: RawFd) {
        self.push(opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).multi(true).build().user_data(EPOLL_TAG));
    }

    /// Submit what is queued and post the completions the kernel holds,
    /// without waiting. The ring defers its task work (DEFER_TASKRUN):
    /// completions (a receive's bytes, the readiness of the epoll file,
    /// hence commands and connects' outcomes) are posted only by an enter
    /// that carries GETEVENTS, which `submit()` leaves out when it waits
    /// for nothing. A loop whose every turn had work due (a wait of 0)
    /// never heard of anything: a refused connect stayed "connecting"
    /// until its timeout and the supervisor's close was never read (issue
    /// 42, finding 14).
    fn submit_and_reap(&mut self) -> io::Result<usize> {
        let to_submit = self.ring.submission().len() as u32;
        // SAFETY: io_uring_enter with no argument (a null pointer; the
        // size is ignored without EXT_ARG) and min_complete 0 (it returns
        // at once); the entries submitted were checked when pushed.
        unsafe { self.ring.submitter().enter::<libc::sigset_t>(to_submit, 0, io_uring::EnterFlags::GETEVENTS.bits(), None) }
    }

    /// Submit what is queued and wait up to `wait` for a completion
    /// (only when nothing waits for room); with a `batch` wait, for
    /// [`batch::BATCH`] of them until `batch` has passed and one came.
    /// True when everything queued was submitted; false when
    /// [`SUBMIT_BUDGET`] was reached first: the caller takes the
    /// completions, then enters again.
    fn enter(&mut self, wait: Duration, batch: Duration) -> io::Result<bool> {
        let mut budget = SUBMIT_BUDGET;
        loop {
            let queued = self.ring.submission().len();
            let r = if wait.is_zero() || !self.waiting.is_empty() {
                self.submit_and_reap()
            } else if batch.is_zero() {
                let ts = types::Timespec::from(wait);
                self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts))
            } else {
                let ts = types::Timespec::from(wait);
                let min_wait = u32::try_from(batch.as_micros()).unwrap_or(u32::MAX);
                self.ring.submitter().submit_with_args(batch::BATCH as usize, &types::SubmitArgs::new().timespec(&ts).min_wait_usec(min_wait))
            };
            match r {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
            if self.waiting.is_empty() {
                return Ok(true);
            }
            budget = budget.saturating_sub(queued);
            // Move what waited into the room the submit made.
            let mut sq = self.ring.submission();
            let mut moved = 0;
            for e in &self.waiting {
                // SAFETY: as in `push`.
                if unsafe { sq.push(e) }.is_err() {
                    break;
                }
                moved += 1;
            }
            drop(sq);
            self.waiting.drain(..moved);
            if budget == 0 {
                return Ok(false);
            }
        }
    }
}

/// An io_uring setup refused by seccomp or the kernel, named with the fix.
fn refused(e: io::Error) -> anyhow::Error {
    match e.raw_os_error() {
        Some(libc::EPERM) => anyhow::anyhow!("{e}: io_uring is refused here (a container's seccomp profile, or kernel.io_uring_disabled); use --io epoll"),
        Some(libc::ENOSYS) => anyhow::anyhow!("{e}: this kernel has no io_uring; use --io epoll"),
        _ => e.into(),
    }
}

/// The provided-buffer ring: entries the kernel takes buffers from, and
/// the buffers, in one mapping made resident at once (the kernel takes
/// buffers in ring order, so over time every one is touched: the worker's
/// memory is flat from the start instead of creeping up to it).
struct Bufs {
    /// Page-aligned ring of BUFS entries, followed by the buffers.
    entries: *mut types::BufRingEntry,
    data: *mut u8,
    tail: u16,
    /// Where the next bytes of each buffer are (the kernel fills it on
    /// from there, completion after completion).
    pos: [usize; BUFS as usize],
}

const ENTRIES_LEN: usize = BUFS as usize * std::mem::size_of::<types::BufRingEntry>();
const MAPPED: usize = ENTRIES_LEN + BUFS as usize * BUF_LEN;

impl Bufs {
    fn new() -> Result<Bufs> {
        // SAFETY: an anonymous private mapping, checked below.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), MAPPED, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error()).context("cannot map the io_uring buffer ring");
        }
        // SAFETY: ENTRIES_LEN is within the mapping.
        let mut b = Bufs { entries: p.cast(), data: unsafe { p.cast::<u8>().add(ENTRIES_LEN) }, tail: 0, pos: [0; BUFS as usize] };
        for bid in 0..BUFS {
            b.give_back(bid);
        }
        Ok(b)
    }

    /// The next `len` bytes of buffer `bid` (a completion's).
    fn take(&mut self, bid: u16, len: usize) -> &[u8] {
        let b = (bid % BUFS) as usize;
        let at = self.pos[b].min(BUF_LEN);
        let len = len.min(BUF_LEN - at);
        self.pos[b] = at + len;
        // SAFETY: buffer `bid` lies in the mapping; the kernel wrote these
        // `len` bytes of it, after those of its earlier completions.
        unsafe { std::slice::from_raw_parts(self.data.add(b * BUF_LEN + at), len) }
    }

    /// The kernel is done with buffer `bid` (a completion without
    /// BUF_MORE): back to the ring, to be filled from its start.
    fn finished(&mut self, bid: u16) {
        self.pos[(bid % BUFS) as usize] = 0;
        self.give_back(bid);
    }

    /// Put buffer `bid` back at the ring's tail.
    fn give_back(&mut self, bid: u16) {
        // SAFETY: `tail & (BUFS - 1)` indexes the mapped ring; only this
        // thread writes entries; the kernel reads them after the tail moves.
        unsafe {
            let e = &mut *self.entries.add((self.tail & (BUFS - 1)) as usize);
            e.set_addr(self.data.add((bid % BUFS) as usize * BUF_LEN) as u64);
            e.set_len(BUF_LEN as u32);
            e.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for Bufs {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer registered (the ring dropped first).
        unsafe { libc::munmap(self.entries.cast(), MAPPED) };
    }
}

/// How long a worker that is done waits for its last sends (a drain's
/// goaways, answers in flight) before it exits anyway.
const LAST_SENDS: Duration = Duration::from_secs(2);

/// Run `h` on a ring until it is done, like [`reactor::run`]: the same
/// stats, ticks and commands; connections' reads come from the ring.
pub(crate) fn run(h: &mut impl RingHandler, mut ring: Ring, stats_interval: Duration) -> Result<()> {
    let mut events = reactor::Events::new(h)?;
    ring.watch(h.poll_mut().as_raw_fd());
    let mut turns = reactor::Turns::new(stats_interval);
    let mut epoll_ready = true;
    loop {
        if turns.start(h) == Flow::Done {
            return finish(&mut ring, h);
        }
        let wait = if epoll_ready { Duration::ZERO } else { turns.wait(h) };
        if h.flush() == Flow::Done {
            return finish(&mut ring, h);
        }
        crate::supervise::control::flush();
        epoll_ready |= turn(&mut ring, h, wait)?;
        if epoll_ready {
            // Look again next turn while anything was there: a level-
            // triggered listener still ready after its one accept raises
            // no new wake-up of the epoll file the ring watches.
            epoll_ready = match events.dispatch(h)? {
                reactor::Polled::Done => return finish(&mut ring, h),
                reactor::Polled::Events(n) => n > 0,
            };
        }
    }
}

/// Submit what is queued, wait up to `wait`, handle the completions;
/// true when the epoll file has events.
fn turn(ring: &mut Ring, h: &mut impl RingHandler, wait: Duration) -> Result<bool> {
    for op in h.pending().ops.drain(..) {
        ring.queue(op);
    }
    let mut epoll_ready = false;
    let mut wait = wait;
    let mut batch = ring.batching.wait(Instant::now(), h.connections(), h.held_behind_windows());
    loop {
        // A broadcast's tens of thousands of sends go in rounds, their
        // completions taken between them.
        let all = ring.enter(wait, batch)?;
        if all {
            h.pending().submitted();
            h.submitted();
        }
        loop {
            // A bounded batch at a time: memory that does not grow with a burst.
            ring.cqes.clear();
            ring.cqes.extend(ring.ring.completion().take(CQE_BATCH).map(|c| (c.user_data(), c.result(), c.flags())));
            if ring.cqes.is_empty() {
                break;
            }
            // Receives only: a broadcast's send completions say nothing of
            // how often the connections speak.
            ring.batching.note(ring.cqes.iter().map(|(tag, ..)| *tag).filter(|tag| *tag < RECV_TAGS));
            epoll_ready |= handle(ring, h);
        }
        if all {
            break;
        }
        (wait, batch) = (Duration::ZERO, Duration::ZERO);
    }
    if ring.waiting.is_empty() && ring.waiting.capacity() > SQ_ENTRIES as usize {
        ring.waiting = Vec::new();
    }
    Ok(epoll_ready)
}

/// The completions copied into `ring.cqes`; true when the epoll file has
/// events.
fn handle(ring: &mut Ring, h: &mut impl RingHandler) -> bool {
    let mut epoll_ready = false;
    for i in 0..ring.cqes.len() {
        let (tag, res, flags) = ring.cqes[i];
        match tag {
            EPOLL_TAG => {
                epoll_ready = true;
                if !cqueue::more(flags) {
                    ring.watch(h.poll_mut().as_raw_fd());
                }
            }
            CANCEL_TAG => {}
            _ if tag & SEND_TAG != 0 => h.on_sent(tag, res),
            _ => {
                let more = cqueue::more(flags);
                match (res, cqueue::buffer_select(flags)) {
                    (n, Some(bid)) if n > 0 => {
                        h.on_received(tag, Received::Data(ring.bufs.take(bid, n as usize), !cqueue::buffer_more(flags)));
                        if !cqueue::buffer_more(flags) {
                            ring.bufs.finished(bid);
                        }
                        if !more {
                            h.on_received(tag, Received::Stopped);
                        }
                    }
                    (0, bid) => {
                        if let Some(b) = bid.filter(|_| !cqueue::buffer_more(flags)) {
                            ring.bufs.finished(b);
                        }
                        h.on_received(tag, Received::Eof);
                    }
                    (e, _) if e == -libc::ENOBUFS => h.on_received(tag, Received::Stopped),
                    (e, _) if e == -libc::ECANCELED => {}
                    (e, bid) => {
                        if let Some(b) = bid.filter(|_| !cqueue::buffer_more(flags)) {
                            ring.bufs.finished(b);
                        }
                        h.on_received(tag, Received::Error(-e));
                    }
                }
            }
        }
        for op in h.pending().ops.drain(..) {
            ring.queue(op);
        }
    }
    epoll_ready
}

/// The worker is done: what it queued last is submitted and its sends in
/// flight finish (up to [`LAST_SENDS`]) before the final snapshot.
fn finish(ring: &mut Ring, h: &mut impl RingHandler) -> Result<()> {
    let deadline = Instant::now() + LAST_SENDS;
    loop {
        turn(ring, h, Duration::from_millis(10))?;
        if h.sends_in_flight() == 0 || Instant::now() >= deadline {
            break;
        }
    }
    h.report(true);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Op, Pending, Ring, EPOLL_TAG};
    use std::io::{ErrorKind, Read, Write};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// A loop whose every turn has work due enters the ring with a wait of
    /// 0; it must still hear of completions (under DEFER_TASKRUN they are
    /// posted only by an enter with GETEVENTS). Here a watched socket
    /// becomes readable after its poll was submitted, and only waits of 0
    /// follow.
    #[test]
    fn turns_that_never_wait_still_hear_completions() {
        /// Zero-wait turns tried, a millisecond apart, before giving up.
        const TURNS: usize = 1_000;
        if let Err(why) = super::probe() {
            eprintln!("skipped: no io_uring here ({why})");
            return;
        }
        let mut ring = Ring::new().expect("ring");
        let (watched, mut peer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        ring.watch(watched.as_raw_fd());
        assert!(ring.enter(Duration::ZERO, Duration::ZERO).expect("submit"));
        assert!(ring.ring.completion().next().is_none(), "readable before anything was written");
        peer.write_all(b"x").expect("write");
        let heard = (0..TURNS).any(|_| {
            assert!(ring.enter(Duration::ZERO, Duration::ZERO).expect("enter"));
            let seen = ring.ring.completion().any(|c| c.user_data() == EPOLL_TAG);
            if !seen {
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        assert!(heard, "{TURNS} turns without a wait never heard that the socket became readable");
    }

    /// A socket whose receive's cancellation waits to be submitted keeps
    /// its descriptor (a new socket cannot take the number) until the
    /// submit; then it closes and the peer reads the end.
    #[test]
    fn a_socket_a_queued_cancellation_names_closes_only_after_the_submit() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let ours = mio::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut peer, _) = listener.accept().expect("accept");
        peer.set_nonblocking(true).expect("nonblocking");
        let fd = ours.as_raw_fd();
        let mut pending = Pending::default();
        pending.cancel_and_close(7, ours);
        assert!(matches!(pending.ops[..], [Op::Cancel { tag: 7 }]), "{:?}", pending.ops);
        // SAFETY: F_GETFD only reads the descriptor's flags.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0, "closed before the submit");
        let mut b = [0u8; 1];
        assert_eq!(peer.read(&mut b).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock), "the peer saw an end before the submit");
        pending.ops.clear(); // the loop moved them into the ring and submitted
        pending.submitted();
        peer.set_nonblocking(false).expect("blocking");
        peer.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
        assert_eq!(peer.read(&mut b).expect("the end"), 0, "the socket did not close after the submit");
    }
}
