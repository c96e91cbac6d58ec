//! A server worker on the io_uring reactor (`--io uring`): each
//! connection's receive completions feed the same read path epoll
//! readiness does (`serve.rs`), from the ring's buffer instead of a read;
//! what it sends is copied into a shared arena and submitted with the
//! loop's next wait, many sockets per system call. A push's frame, the
//! same bytes for every connection it goes to, is not copied: every send
//! of it points at one shared buffer, kept until its last send completes.
//!
//! Order on a connection: at most one send of it is in flight (the
//! connection's `sending` bit); what comes meanwhile waits in its
//! `backlog` and goes when that one completes. A short send leaves the
//! rest in the backlog, which epoll's writability then flushes, as on the
//! epoll reactor.

use super::Worker;
use crate::net::{self, Carried};
use crate::server::close::Close;
use crate::server::worker::conn::Conn;
use crate::uring::{recv_key, recv_tag, Op, Pending, Received, RingHandler, SEND_TAG};
use slab::Slab;
use std::os::fd::AsRawFd;
use std::rc::Rc;

/// Bytes per arena chunk; a send larger than this is written directly.
const CHUNK: usize = 16 * 1024;
/// Chunks at most (16 MiB); past them sends are written directly.
const MAX_CHUNKS: usize = 1024;

/// Bytes a connection may queue beyond its cap while a send of it is in
/// flight (about what a loopback socket takes before it is full).
const IN_FLIGHT_ALLOWANCE: usize = 256 * 1024;
/// Capacity above which an emptied queue gives its memory back.
const SHRINK_ABOVE: usize = 1024;

/// The ring's side of a worker: operations to submit, sends in flight and
/// the memory they point at.
#[derive(Default)]
pub(super) struct RingSide {
    pub next: Pending,
    arena: Arena,
    inflight: Slab<Sent>,
    /// Refused connections whose answer waits to be submitted: their
    /// lingering close starts once it was.
    pub linger_after_submit: Vec<mio::net::TcpStream>,
    /// Connections (key, generation) left with a backlog and no send in
    /// flight: the worker's epoll is to watch their writability.
    unwatched: Vec<(usize, u32)>,
}

struct Sent {
    key: usize,
    gen: u32,
    mem: Mem,
    len: usize,
}

/// Where a send's bytes are while it is in flight.
enum Mem {
    /// Copied into the arena: `chunk`, from `at`.
    Arena { chunk: usize, at: usize },
    /// A push's frame, shared by every send of it.
    Shared(Rc<[u8]>),
}

impl RingSide {
    /// Send `data` on `conn` (see the module doc for the order kept).
    pub(super) fn send(&mut self, key: usize, conn: &mut Conn, data: &[u8], cap: usize, full: Close) -> Result<(), Close> {
        if data.is_empty() {
            return Ok(());
        }
        if conn.sending() || conn.spills.has_backlog() {
            // Behind a send in flight, what the socket would have taken at
            // once on epoll is allowed too: a burst of pushes in one turn
            // is not a slow consumer.
            let cap = if conn.sending() { cap.saturating_add(IN_FLIGHT_ALLOWANCE) } else { cap };
            return net::try_queue_capped(&mut conn.spills.backlog(), data, cap).map_err(|e| Close::send(e, full));
        }
        let Some((chunk, at, ptr)) = self.arena.put(data) else {
            let r = net::try_send_capped(&mut conn.stream, &mut conn.spills.backlog(), data, cap).map_err(|e| Close::send(e, full));
            self.watch_if_stuck(key, conn);
            return r;
        };
        self.submit(key, conn, Mem::Arena { chunk, at }, ptr, data.len());
        Ok(())
    }

    /// Send `frame` on `conn` without copying it when nothing of the
    /// connection waits: the send points at the shared buffer, which
    /// lives until its last send completes. Behind a send in flight it is
    /// queued like any bytes.
    pub(super) fn send_shared(&mut self, key: usize, conn: &mut Conn, frame: &Rc<[u8]>, cap: usize, full: Close) -> Result<(), Close> {
        if frame.is_empty() || conn.sending() || conn.spills.has_backlog() || frame.len() > u32::MAX as usize {
            return self.send(key, conn, frame, cap, full);
        }
        self.submit(key, conn, Mem::Shared(frame.clone()), frame.as_ptr(), frame.len());
        Ok(())
    }

    fn submit(&mut self, key: usize, conn: &mut Conn, mem: Mem, ptr: *const u8, len: usize) {
        self.queue_send(key, conn, mem, ptr, len);
        conn.set_sending(true);
    }

    /// A send of `len` bytes at `ptr` (held by `mem`) for the next submit.
    fn queue_send(&mut self, key: usize, conn: &Conn, mem: Mem, ptr: *const u8, len: usize) {
        let idx = self.inflight.insert(Sent { key, gen: conn.gen, mem, len });
        self.next.ops.push(Op::Send { fd: conn.stream.as_raw_fd(), ptr, len: len as u32, tag: SEND_TAG | idx as u64 });
    }

    /// The bytes of a send in flight.
    fn bytes<'a>(&'a self, s: &'a Sent) -> &'a [u8] {
        match &s.mem {
            Mem::Arena { chunk, at } => self.arena.get(*chunk, *at, s.len),
            Mem::Shared(frame) => &frame[..s.len],
        }
    }
}

impl RingSide {
    /// A backlog with no send in flight moves only when the socket is
    /// writable again: have the worker's epoll watch it (an idle
    /// connection is not in the epoll at all: no epoll item of ~200 B in
    /// the kernel, no epoll_ctl per accept).
    fn watch_if_stuck(&mut self, key: usize, conn: &Conn) {
        if conn.spills.has_backlog() && !conn.sending() && !conn.watched() {
            self.unwatched.push((key, conn.gen));
        }
    }

    /// Send `data` on a connection being closed, behind its send in flight
    /// (the same submit or a later one; nothing follows it). Dropped when
    /// the arena is full, as a closed connection's backlog is on epoll.
    pub(super) fn send_last(&mut self, conn: &Conn, data: &[u8]) {
        if let Some((chunk, at, ptr)) = self.arena.put(data) {
            self.queue_send(usize::MAX, conn, Mem::Arena { chunk, at }, ptr, data.len());
        }
    }
}

/// Chunks of send memory, each kept while a send points into it.
#[derive(Default)]
struct Arena {
    chunks: Vec<Chunk>,
    current: usize,
}

struct Chunk {
    buf: Box<[u8]>,
    used: usize,
    inflight: u32,
}

impl Arena {
    /// Copy `data` in: (chunk, offset, address), or None when it does not
    /// fit (too large, or every chunk busy).
    fn put(&mut self, data: &[u8]) -> Option<(usize, usize, *const u8)> {
        if data.len() > CHUNK {
            return None;
        }
        if self.chunks.get(self.current).is_none_or(|c| c.used + data.len() > CHUNK && c.inflight > 0) {
            self.current = match self.chunks.iter().position(|c| c.inflight == 0) {
                Some(i) => i,
                None if self.chunks.len() < MAX_CHUNKS => {
                    self.chunks.push(Chunk { buf: Box::default(), used: 0, inflight: 0 });
                    self.chunks.len() - 1
                }
                None => return None,
            };
        }
        let c = &mut self.chunks[self.current];
        if c.buf.is_empty() {
            c.buf = vec![0; CHUNK].into_boxed_slice();
        }
        if c.inflight == 0 {
            c.used = 0;
        }
        let at = c.used;
        c.buf[at..at + data.len()].copy_from_slice(data);
        c.used += data.len();
        c.inflight += 1;
        Some((self.current, at, c.buf[at..].as_ptr()))
    }

    fn get(&self, chunk: usize, at: usize, len: usize) -> &[u8] {
        &self.chunks[chunk].buf[at..at + len]
    }

    fn release(&mut self, chunk: usize) {
        let c = &mut self.chunks[chunk];
        c.inflight -= 1;
    }

    /// Nothing in flight: give back every chunk but the current one (a
    /// broadcast's burst does not stay).
    fn trim(&mut self) {
        for (i, c) in self.chunks.iter_mut().enumerate() {
            if i != self.current && c.inflight == 0 && !c.buf.is_empty() {
                c.buf = Box::default();
            }
        }
    }
}

impl Worker {
    fn ring(&mut self) -> &mut RingSide {
        self.ring.get_or_insert_with(Default::default)
    }

    /// Register the connections left with a backlog in the epoll, for
    /// writability (edge-triggered: it reports one already writable too).
    fn watch_backlogs(&mut self) {
        let keys = std::mem::take(&mut self.ring().unwatched);
        for &(key, gen) in &keys {
            let Some(conn) = self.conns.get_mut(key).filter(|c| c.gen == gen && !c.watched()) else { continue };
            if self.poll.registry().register(&mut conn.stream, mio::Token(key), mio::Interest::WRITABLE).is_ok() {
                conn.set_watched();
            } else {
                self.close(key, Close::RegisterFailed);
            }
        }
        let r = self.ring();
        if r.unwatched.is_empty() {
            r.unwatched = keys;
            r.unwatched.clear();
        }
    }
}

impl RingHandler for Worker {
    fn on_received(&mut self, tag: u64, r: Received<'_>) {
        let key = recv_key(tag);
        let Some(conn) = self.conns.get(key).filter(|c| recv_tag(key, c.gen) == tag) else { return };
        match r {
            Received::Data(bytes, cut) => self.on_conn_event(key, true, false, false, Some((bytes, cut))),
            Received::Stopped => {
                let fd = conn.stream.as_raw_fd();
                self.ring().next.ops.push(Op::Recv { fd, tag });
            }
            Received::Eof => self.close(key, Close::PeerClosed),
            Received::Error(errno) => self.close(key, Close::io(&std::io::Error::from_raw_os_error(errno))),
        }
    }

    fn on_sent(&mut self, tag: u64, res: i32) {
        let Some(ring) = self.ring.as_mut() else { return };
        let Some(s) = ring.inflight.try_remove((tag & !SEND_TAG) as usize) else { return };
        let sent = res.max(0) as usize;
        let outcome = match self.conns.get_mut(s.key).filter(|c| c.gen == s.gen) {
            None => Ok(()),
            Some(conn) => {
                conn.set_sending(false);
                if res < 0 && res != -libc::EAGAIN {
                    Err(Close::io(&std::io::Error::from_raw_os_error(-res)))
                } else if sent < s.len {
                    // The rest goes first, then what queued behind it.
                    let mut rest = ring.bytes(&s)[sent..].to_vec();
                    if let Some(b) = conn.spills.backlog().take() {
                        rest.extend_from_slice(&b);
                    }
                    conn.spills.backlog().hold(rest);
                    let r = net::try_flush(&mut conn.stream, &mut conn.spills.backlog()).map_err(|e| Close::send(e, Close::SlowConsumer));
                    ring.watch_if_stuck(s.key, conn);
                    r
                } else if let Some(b) = conn.spills.backlog().take() {
                    ring.send(s.key, conn, &b, usize::MAX, Close::SlowConsumer)
                } else {
                    Ok(())
                }
            }
        };
        if let Mem::Arena { chunk, .. } = s.mem {
            ring.arena.release(chunk);
        }
        if let Err(reason) = outcome {
            self.close(s.key, reason);
        }
    }

    fn pending(&mut self) -> &mut Pending {
        if !self.ring().unwatched.is_empty() {
            self.watch_backlogs();
        }
        &mut self.ring().next
    }

    fn sends_in_flight(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.inflight.len())
    }

    fn connections(&self) -> usize {
        self.conns.len()
    }

    fn held_behind_windows(&self) -> u64 {
        self.stats.mqtt_held
    }

    fn submitted(&mut self) {
        if let Some(r) = self.ring.as_mut() {
            if r.inflight.is_empty() && r.arena.chunks.len() > 1 {
                r.arena.trim();
            }
            if r.inflight.is_empty() && r.inflight.capacity() > SHRINK_ABOVE {
                r.inflight = Slab::new();
                self.trim.freed();
            }
            for s in r.linger_after_submit.drain(..) {
                self.lingering.start(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Op, RingSide};
    use crate::server::close::Close;
    use crate::server::worker::conn::Conn;
    use std::rc::Rc;

    fn conn(listener: &std::net::TcpListener, gen: u32) -> Conn {
        Conn::new(mio::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect"), 0, gen)
    }

    /// A push to many connections is one buffer: every send points at it
    /// and nothing is copied into the arena; a connection with a send in
    /// flight queues a copy behind it instead (order kept).
    #[test]
    fn a_push_frame_is_shared_by_its_sends_not_copied() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut conns: Vec<Conn> = (0..3).map(|g| conn(&listener, g)).collect();
        let frame: Rc<[u8]> = vec![7u8; 80].into();
        let mut r = RingSide::default();
        for (k, c) in conns.iter_mut().enumerate() {
            r.send_shared(k, c, &frame, 1 << 20, Close::SlowConsumer).expect("sent");
            assert!(c.sending() && !c.spills.has_backlog());
        }
        let ptrs: Vec<*const u8> = r.next.ops.iter().map(|op| if let Op::Send { ptr, len: 80, .. } = op { *ptr } else { panic!("{op:?}") }).collect();
        assert_eq!(ptrs, vec![frame.as_ptr(); 3]);
        assert!(r.arena.chunks.is_empty(), "the frame was copied into the arena");
        assert_eq!(Rc::strong_count(&frame), 4, "each send in flight keeps the frame");
        r.send_shared(0, &mut conns[0], &frame, 1 << 20, Close::SlowConsumer).expect("queued");
        assert_eq!(conns[0].spills.held_backlog().map(Vec::len), Some(80));
        assert_eq!(r.next.ops.len(), 3);
    }
}
