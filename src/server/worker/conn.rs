//! One accepted connection: the socket and the little state it needs
//! between readiness events.

use crate::server::session::ext::Ext;
use crate::server::worker::spills::Spills;

/// Per-connection record kept in the worker's slab. An idle connection
/// costs the socket handle, two timestamps, a generation and three empty
/// words: 40 bytes, and 40 in the slab too (its tag hides in a niche;
/// `an_idle_connection_stays_small` counts the allocation).
pub(crate) struct Conn {
    pub stream: mio::net::TcpStream,
    /// Worker-relative second of the last byte received (idle timeout).
    pub last_seen_s: u32,
    /// An incomplete frame carried to the next read and output the socket
    /// did not take yet, behind one pointer (`spills.rs`).
    pub spills: Spills,
    /// Distinguishes this connection from a later one reusing its slab
    /// key, so a late business-stage reply never reaches the wrong peer.
    pub gen: u32,
    /// Protocol state, only while there is some: an HTTP request
    /// half-read or a reply pending, a WebSocket handshake not yet done or
    /// a message still in fragments.
    pub ext: Ext,
    /// Topics this connection subscribed to: one word, one subscription
    /// inline, two or more behind it (`topics::Subs`).
    pub subs: crate::server::tables::topics::Subs,
    /// Worker-relative second it was accepted (its age in /connections),
    /// in the top bit whether an io_uring send of it is in flight and in
    /// the next whether the worker's epoll watches it, in the third whether
    /// it negotiated permessage-deflate (which keeps an idle connection at
    /// 40 bytes: its compression state is the worker's, shared).
    since_s: u32,
}

/// The bit of `since_s` that says a send is in flight.
const SENDING: u32 = 1 << 31;
/// The bit of `since_s` that says the socket is in the worker's epoll.
const WATCHED: u32 = 1 << 30;
/// The bit of `since_s` that says the WebSocket connection negotiated
/// permessage-deflate (ages up to 2^29 s, 17 years, stay exact).
const DEFLATE: u32 = 1 << 29;
/// The bit of `since_s` that says a framed connection has not been read
/// yet (its whole opening): a broadcast then waits for that read (see
/// `seam.rs`). Ages up to 2^28 s, 8 years, stay exact.
const UNREAD: u32 = 1 << 28;
/// Where the index of the connection's `--serve` entry sits in `since_s`
/// (3 bits: `services::MAX_SERVICES`, 8 entries). Ages up to 2^25 s, a
/// year of one worker's life, stay exact.
const SERVICE_SHIFT: u32 = 25;
/// The bits of `since_s` that hold the entry's index.
const SERVICE: u32 = 0b111 << SERVICE_SHIFT;
/// Every flag bit of `since_s`.
const FLAGS: u32 = SENDING | WATCHED | DEFLATE | UNREAD | SERVICE;

impl Conn {
    pub(crate) fn new(stream: mio::net::TcpStream, now_s: u32, gen: u32) -> Conn {
        Conn {
            stream,
            last_seen_s: now_s,
            spills: Spills::default(),
            gen,
            ext: None,
            subs: crate::server::tables::topics::Subs::new(),
            since_s: now_s & !FLAGS,
        }
    }

    /// Worker-relative second it was accepted.
    pub(crate) fn since_s(&self) -> u32 {
        self.since_s & !FLAGS
    }

    /// The index of the `--serve` entry whose port it came in on: its
    /// protocol and whether it speaks TLS.
    pub(crate) fn service(&self) -> usize {
        ((self.since_s & SERVICE) >> SERVICE_SHIFT) as usize
    }

    /// Accepted on a port of entry `i` (below `services::MAX_SERVICES`).
    pub(crate) fn set_service(&mut self, i: usize) {
        debug_assert!(i < crate::server::services::MAX_SERVICES);
        self.since_s = (self.since_s & !SERVICE) | (((i as u32) << SERVICE_SHIFT) & SERVICE);
    }

    /// Whether this WebSocket connection negotiated permessage-deflate:
    /// it may be sent compressed messages and may send them.
    pub(crate) fn ws_deflate(&self) -> bool {
        self.since_s & DEFLATE != 0
    }

    pub(crate) fn set_ws_deflate(&mut self, on: bool) {
        self.since_s = if on { self.since_s | DEFLATE } else { self.since_s & !DEFLATE };
    }

    /// Whether this framed connection's opening has not been read yet: a
    /// broadcast is held for it (`seam.rs`), at no cost per connection.
    pub(crate) fn unread(&self) -> bool {
        self.since_s & UNREAD != 0
    }

    /// Accepted: broadcasts wait for its first read.
    pub(crate) fn set_unread(&mut self) {
        self.since_s |= UNREAD;
    }

    /// Read (or given what was held for it): broadcasts go to it live.
    pub(crate) fn set_read(&mut self) {
        self.since_s &= !UNREAD;
    }

    /// Whether an io_uring send of this connection is in flight: what it
    /// is sent next waits in `backlog` until that one completes.
    pub(crate) fn sending(&self) -> bool {
        self.since_s & SENDING != 0
    }

    pub(crate) fn set_sending(&mut self, on: bool) {
        self.since_s = if on { self.since_s | SENDING } else { self.since_s & !SENDING };
    }

    /// Whether the socket is registered in the worker's epoll: always on
    /// the epoll reactor; on io_uring only once it had output the socket
    /// would not take (writability is then what moves it).
    pub(crate) fn watched(&self) -> bool {
        self.since_s & WATCHED != 0
    }

    pub(crate) fn set_watched(&mut self) {
        self.since_s |= WATCHED;
    }
}

#[cfg(test)]
mod tests {
    use super::Conn;

    /// The per-connection cost the 1M benchmark depends on: what a slab
    /// of idle connections allocates per entry (the slab's tag fits in a
    /// niche of Conn), whatever protocol they speak, counted by the allocator.
    #[test]
    fn an_idle_connection_stays_small() {
        assert_eq!(std::mem::size_of::<Conn>(), 40);
        const N: usize = 10_000;
        let (slab, bytes) = crate::test_alloc::counted(|| {
            let mut slab = slab::Slab::<Conn>::with_capacity(N);
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let stream = mio::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
            slab.insert(Conn::new(stream, 0, 0));
            slab
        });
        assert_eq!(slab.capacity(), N);
        let per_entry = bytes as f64 / N as f64;
        assert!((40.0..40.5).contains(&per_entry), "a slab entry costs {per_entry:.1} B, not 40");
    }

    /// The two flag bits ride in `since_s` without changing the age
    /// /connections shows, and each is set and read on its own.
    #[test]
    fn sending_and_watched_keep_the_age() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let stream = mio::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let mut c = Conn::new(stream, 12_345, 0);
        assert!(!c.sending() && !c.watched());
        c.set_watched();
        assert!(c.watched() && !c.sending());
        c.set_sending(true);
        assert!(c.watched() && c.sending());
        c.set_sending(false);
        assert!(c.watched() && !c.sending());
        assert!(!c.ws_deflate());
        c.set_ws_deflate(true);
        assert!(c.ws_deflate() && c.watched() && !c.sending());
        assert_eq!(c.since_s(), 12_345);
        c.set_ws_deflate(false);
        assert!(!c.ws_deflate() && c.watched());
        assert_eq!(c.service(), 0);
        c.set_service(crate::server::services::MAX_SERVICES - 1);
        assert_eq!(c.service(), crate::server::services::MAX_SERVICES - 1);
        assert!(c.watched() && !c.sending() && !c.ws_deflate());
        assert_eq!(c.since_s(), 12_345);
        c.set_service(2);
        assert_eq!(c.service(), 2);
    }
}
