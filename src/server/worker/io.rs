//! The send path every reply and push of a server worker goes through:
//! sealed when the connection speaks TLS (`tls.rs` holds its state; the
//! sealing is [`crate::tls::conn::send`], the client's too), then through
//! the ring (`--io uring`) or written at once. What the socket does not
//! take waits in the connection's backlog (as sent: ciphertext), up to a
//! cap, beyond which the connection must close.

use super::ring::RingSide;
use super::tls::TlsSide;
use crate::net;
use crate::server::close::Close;
use crate::server::worker::conn::Conn;
use std::cell::Cell;
use std::rc::Rc;

thread_local! {
    /// Bytes handed to connections to send, by this worker's reactor
    /// (the only thread that sends): `$SYS/broker/bytes/sent`.
    static SENT: Cell<u64> = const { Cell::new(0) };
}

/// Bytes this worker handed its connections to send, so far.
pub(super) fn sent() -> u64 {
    SENT.with(Cell::get)
}

fn count(n: usize) {
    SENT.with(|s| s.set(s.get() + n as u64));
}

/// Send `data` on the connection at `key`: encrypted when it speaks TLS
/// (after what its handshake has to say), through the ring or written at
/// once; past `cap` bytes waiting the connection must close as `full`.
pub(super) fn send(
    tls: Option<&mut TlsSide>,
    ring: Option<&mut RingSide>,
    key: usize,
    conn: &mut Conn,
    data: &[u8],
    cap: usize,
    full: Close,
) -> Result<(), Close> {
    count(data.len());
    let Some((t, wire)) = tls.map(|side| side.sealing(key)) else {
        return send_plain(ring, key, conn, data, cap, full);
    };
    crate::tls::conn::send_as(t, wire, data, |bytes| send_plain(ring, key, conn, bytes, cap, full), Close::tls)
}

/// Send a push's `frame` on the connection at `key`: on the ring, one
/// buffer shared by every plaintext connection it goes to (see
/// [`RingSide::send_shared`]); otherwise as [`send`] does.
pub(super) fn send_frame(
    tls: Option<&mut TlsSide>,
    ring: Option<&mut RingSide>,
    key: usize,
    conn: &mut Conn,
    frame: &Rc<[u8]>,
    cap: usize,
    full: Close,
) -> Result<(), Close> {
    match ring {
        Some(r) if tls.as_ref().is_none_or(|t| !t.speaks_tls(key)) => {
            count(frame.len());
            r.send_shared(key, conn, frame, cap, full)
        }
        ring => send(tls, ring, key, conn, frame, cap, full),
    }
}

/// Bytes as they go on the wire: through the ring, or written at once.
fn send_plain(ring: Option<&mut RingSide>, key: usize, conn: &mut Conn, data: &[u8], cap: usize, full: Close) -> Result<(), Close> {
    match ring {
        Some(r) => r.send(key, conn, data, cap, full),
        None => net::try_send_capped(&mut conn.stream, &mut conn.spills.backlog(), data, cap).map_err(|e| Close::send(e, full)),
    }
}
