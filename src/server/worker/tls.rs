//! A TLS server worker's side of every connection: the TLS state per
//! slab key, the buffers all of them borrow, handshake deadlines, and the
//! encrypting send every reply and push goes through.

use crate::net;
use crate::server::close::Close;
use crate::server::worker::conn::Conn;
use crate::tls::files::{self, ServerTls};
use crate::tls::server::{TlsBufs, TlsConn, TlsRead, PLAINTEXT_REPLY};
use anyhow::Result;
use std::collections::VecDeque;
use std::sync::Arc;

pub(super) struct TlsSide {
    files: ServerTls,
    config: Arc<rustls::ServerConfig>,
    /// By slab key; None for a key not in use.
    conns: Vec<Option<Box<TlsConn>>>,
    /// How many of `conns` are Some.
    live: usize,
    pub bufs: TlsBufs,
    /// (deadline in worker deciseconds, key, generation), in accept order
    /// so deadlines only grow.
    pending: VecDeque<(u32, usize, u32)>,
    timeout_ds: u32,
    /// Cleartext HTTP on this port is answered (http and ws only).
    plaintext_reply: Option<&'static [u8]>,
}

impl TlsSide {
    pub fn new(files: ServerTls) -> Result<TlsSide> {
        let config = files::server_config(&files)?;
        let timeout_ds = (files.handshake_timeout_ms / 100).max(1) as u32;
        let plaintext_reply = files.alpn_http.then_some(PLAINTEXT_REPLY);
        Ok(TlsSide { files, config, conns: Vec::new(), live: 0, bufs: TlsBufs::default(), pending: VecDeque::new(), timeout_ds, plaintext_reply })
    }

    /// A new certificate and key: new handshakes use them, established
    /// connections keep theirs. Err keeps the one in force.
    pub fn reload(&mut self, pem: files::Pem) -> Result<()> {
        let next = ServerTls { pem: Some(pem), ..self.files.clone() };
        self.config = files::server_config(&next)?;
        self.files = next;
        Ok(())
    }

    /// A connection was accepted at slab `key`.
    pub fn open(&mut self, key: usize, gen: u32, now_ds: u32) -> Result<(), Close> {
        let conn = crate::tls::server::accept(self.config.clone(), now_ds).map_err(|e| Close::tls(crate::tls::reason_of(&e)))?;
        if self.conns.len() <= key {
            self.conns.resize_with(key + 1, || None);
        }
        if self.conns[key].replace(conn).is_none() {
            self.live += 1;
        }
        self.pending.push_back((now_ds + self.timeout_ds, key, gen));
        Ok(())
    }

    pub fn get(&mut self, key: usize) -> Option<&mut TlsConn> {
        self.conns.get_mut(key).and_then(|c| c.as_deref_mut())
    }

    /// The connection at `key` closed; its TLS state, if it had one. The
    /// table gives its memory back when the last TLS connection goes (a
    /// worker that held 100,000 and now holds none keeps no 800 KB table).
    pub fn remove(&mut self, key: usize) -> Option<Box<TlsConn>> {
        let gone = self.conns.get_mut(key).and_then(|c| c.take());
        if gone.is_some() {
            self.live -= 1;
            if self.live == 0 {
                self.conns = Vec::new();
            }
        }
        gone
    }

    /// Whether `key` may not be sent to yet.
    pub fn handshaking(&self, key: usize) -> bool {
        self.conns.get(key).and_then(|c| c.as_deref()).is_some_and(|c| c.handshaking())
    }

    /// Keys whose handshake passed its deadline; `alive(key, gen)` says
    /// whether that connection still exists.
    pub fn expired(&mut self, now_ds: u32, alive: impl Fn(usize, u32) -> bool) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(&(deadline, key, gen)) = self.pending.front() {
            if deadline > now_ds {
                break;
            }
            self.pending.pop_front();
            if alive(key, gen) && self.handshaking(key) {
                out.push(key);
            }
        }
        out
    }

    /// Whether a handshake deadline is waiting.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The plaintext reader of `key`'s socket, or (io_uring) of the
    /// records a receive brought.
    pub fn reader<'a, S>(&'a mut self, key: usize, sock: &'a mut S) -> Option<TlsRead<'a, S>> {
        let tls = self.conns.get_mut(key).and_then(|c| c.as_deref_mut())?;
        Some(TlsRead { sock, tls, bufs: &mut self.bufs, plaintext_reply: self.plaintext_reply })
    }

    /// Every connection went at once (the worker stops).
    pub fn clear(&mut self) {
        self.conns = Vec::new();
        self.live = 0;
        self.pending = VecDeque::new();
    }
}

/// Send `data` on the connection at `key`: encrypted when it speaks TLS
/// (after what its handshake has to say; see [`crate::tls::conn::send`]),
/// through the ring (`--io uring`) or written at once. What the socket
/// does not take waits in its backlog (as sent: ciphertext), up to `cap`
/// bytes, beyond which the connection must close as `full`.
pub(super) fn send(
    tls: Option<&mut TlsSide>,
    ring: Option<&mut super::ring::RingSide>,
    key: usize,
    conn: &mut Conn,
    data: &[u8],
    cap: usize,
    full: Close,
) -> Result<(), Close> {
    let Some((t, wire)) = tls.and_then(|side| Some((side.conns.get_mut(key)?.as_deref_mut()?, &mut side.bufs.wire))) else {
        return send_plain(ring, key, conn, data, cap, full);
    };
    let encrypted = if data.is_empty() { Ok(()) } else { t.encrypt(data, wire).map_err(Close::tls) };
    let sent = send_plain(ring, key, conn, wire, cap, full);
    wire.clear();
    encrypted.and(sent)
}

/// Bytes as they go on the wire: through the ring, or written at once.
fn send_plain(ring: Option<&mut super::ring::RingSide>, key: usize, conn: &mut Conn, data: &[u8], cap: usize, full: Close) -> Result<(), Close> {
    match ring {
        Some(r) => r.send(key, conn, data, cap, full),
        None => net::try_send_capped(&mut conn.stream, &mut conn.backlog, data, cap).map_err(|e| Close::send(e, full)),
    }
}

/// Send a push's `frame` on the connection at `key`: on the ring, one
/// buffer shared by every plaintext connection it goes to (see
/// [`super::ring::RingSide::send_shared`]); otherwise as [`send`] does.
pub(super) fn send_frame(
    tls: Option<&mut TlsSide>,
    ring: Option<&mut super::ring::RingSide>,
    key: usize,
    conn: &mut Conn,
    frame: &std::rc::Rc<[u8]>,
    cap: usize,
    full: Close,
) -> Result<(), Close> {
    match ring {
        Some(r) if tls.as_ref().is_none_or(|t| t.conns.get(key).is_none_or(|c| c.is_none())) => r.send_shared(key, conn, frame, cap, full),
        ring => send(tls, ring, key, conn, frame, cap, full),
    }
}
