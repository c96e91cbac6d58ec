//! A TLS server worker's side of every connection: the TLS state per
//! slab key, the buffers all of them borrow, and handshake deadlines.
//! What is sent goes through `io.rs`, which encrypts with it.

use crate::server::close::Close;
use crate::tls::files::{self, ServerTls};
use crate::tls::server::{TlsBufs, TlsConn, PLAINTEXT_REPLY};
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
    pub(super) fn new(files: ServerTls) -> Result<TlsSide> {
        let config = files::server_config(&files)?;
        let timeout_ds = (files.handshake_timeout_ms / 100).max(1) as u32;
        let plaintext_reply = files.alpn_http.then_some(PLAINTEXT_REPLY);
        Ok(TlsSide { files, config, conns: Vec::new(), live: 0, bufs: TlsBufs::default(), pending: VecDeque::new(), timeout_ds, plaintext_reply })
    }

    /// A new certificate and key: new handshakes use them, established
    /// connections keep theirs. Err keeps the one in force.
    pub(super) fn reload(&mut self, pem: files::Pem) -> Result<()> {
        let next = ServerTls { pem: Some(pem), ..self.files.clone() };
        self.config = files::server_config(&next)?;
        self.files = next;
        Ok(())
    }

    /// A connection was accepted at slab `key`.
    pub(super) fn open(&mut self, key: usize, gen: u32, now_ds: u32) -> Result<(), Close> {
        let conn = crate::tls::server::accept(self.config.clone()).map_err(|e| Close::tls(crate::tls::failure::TlsError::from(&e)))?;
        if self.conns.len() <= key {
            self.conns.resize_with(key + 1, || None);
        }
        if self.conns[key].replace(conn).is_none() {
            self.live += 1;
        }
        self.pending.push_back((now_ds + self.timeout_ds, key, gen));
        Ok(())
    }

    pub(super) fn get(&mut self, key: usize) -> Option<&mut TlsConn> {
        self.conns.get_mut(key).and_then(|c| c.as_deref_mut())
    }

    /// The connection at `key` closed; its TLS state, if it had one. The
    /// table gives its memory back when the last TLS connection goes (a
    /// worker that held 100,000 and now holds none keeps no 800 KB table).
    pub(super) fn remove(&mut self, key: usize) -> Option<Box<TlsConn>> {
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
    pub(super) fn handshaking(&self, key: usize) -> bool {
        self.conns.get(key).and_then(|c| c.as_deref()).is_some_and(|c| c.handshaking())
    }

    /// Keys whose handshake passed its deadline; `alive(key, gen)` says
    /// whether that connection still exists.
    pub(super) fn expired(&mut self, now_ds: u32, alive: impl Fn(usize, u32) -> bool) -> Vec<usize> {
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
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// What reading `key` through TLS takes (its state, the worker's
    /// buffers, the answer to cleartext), for [`crate::tls::conn::Wire::of`];
    /// None if it has no TLS state.
    #[allow(clippy::type_complexity)]
    pub(super) fn reading(&mut self, key: usize) -> Option<((&mut TlsConn, &mut TlsBufs), Option<&'static [u8]>)> {
        let tls = self.conns.get_mut(key).and_then(|c| c.as_deref_mut())?;
        Some(((tls, &mut self.bufs), self.plaintext_reply))
    }

    /// What sending on `key` takes: its TLS state, if it has some, and the
    /// buffer its records are sealed into.
    pub(super) fn sealing(&mut self, key: usize) -> (Option<&mut TlsConn>, &mut Vec<u8>) {
        (self.conns.get_mut(key).and_then(|c| c.as_deref_mut()), &mut self.bufs.wire)
    }

    /// Whether `key` has TLS state (what it is sent must be sealed for it alone).
    pub(super) fn speaks_tls(&self, key: usize) -> bool {
        self.conns.get(key).is_some_and(|c| c.is_some())
    }

    /// Every connection went at once (the worker stops).
    pub(super) fn clear(&mut self) {
        self.conns = Vec::new();
        self.live = 0;
        self.pending = VecDeque::new();
    }
}
