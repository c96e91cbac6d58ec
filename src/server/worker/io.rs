//! The send path every reply and push of a server worker goes through:
//! sealed when the connection speaks TLS (`tls.rs` holds its state; the
//! sealing is [`crate::tls::conn::send`], the client's too), then through
//! the ring (`--io uring`) or written at once. What the socket does not
//! take waits in the connection's backlog (as sent: ciphertext), up to a
//! cap, beyond which the connection must close.

use super::ring::RingSide;
use super::tls::TlsSide;
use crate::net;
use crate::server::worker::conn::Conn;
use std::rc::Rc;

/// Send `data` on the connection at `key`: encrypted when it speaks TLS
/// (after what its handshake has to say), through the ring or written at
/// once; past `cap` bytes waiting the connection must close as `reason`.
pub(super) fn send(
    tls: Option<&mut TlsSide>,
    ring: Option<&mut RingSide>,
    key: usize,
    conn: &mut Conn,
    data: &[u8],
    cap: usize,
    reason: &str,
) -> Result<(), String> {
    let Some((t, wire)) = tls.map(|side| side.sealing(key)) else {
        return send_plain(ring, key, conn, data, cap, reason);
    };
    crate::tls::conn::send(t, wire, data, |bytes| send_plain(ring, key, conn, bytes, cap, reason))
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
    reason: &str,
) -> Result<(), String> {
    match ring {
        Some(r) if tls.as_ref().is_none_or(|t| !t.speaks_tls(key)) => r.send_shared(key, conn, frame, cap, reason),
        ring => send(tls, ring, key, conn, frame, cap, reason),
    }
}

/// Bytes as they go on the wire: through the ring, or written at once.
fn send_plain(ring: Option<&mut RingSide>, key: usize, conn: &mut Conn, data: &[u8], cap: usize, reason: &str) -> Result<(), String> {
    match ring {
        Some(r) => r.send(key, conn, data, cap, reason),
        None => net::send_capped(&mut conn.stream, &mut conn.backlog, data, cap, reason),
    }
}
