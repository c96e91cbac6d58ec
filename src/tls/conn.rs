//! One TLS connection's state between readiness events, for either side
//! (rustls's unbuffered client and server connections): records are read
//! into the worker's buffer, decrypted and handed on; what is sent is
//! encrypted into the worker's buffer and written. Nothing else is kept
//! but a record cut by the network (a spill).

use super::failure::TlsError;
use super::records::Records;
use crate::net::{Source, Spill};
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use std::io::{self, Read};

/// A rustls unbuffered connection of either side.
pub(crate) trait Side: Sized {
    type Data;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn common(&self) -> &rustls::CommonState;
    /// After the handshake: hand the traffic keys to our own record layer
    /// (the server; a client keeps rustls, which also takes its tickets).
    fn into_records(self: Box<Self>) -> Converted<Self> {
        Converted::Kept(self)
    }
}

/// What became of a connection after its handshake.
pub(crate) enum Converted<C> {
    Kept(Box<C>),
    Records(Box<Records>),
    Failed(TlsError),
}

impl Side for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
    fn into_records(self: Box<Self>) -> Converted<Self> {
        match (*self).dangerous_into_kernel_connection() {
            Ok((secrets, kernel)) => match Records::new(secrets, kernel) {
                Ok(r) => Converted::Records(Box::new(r)),
                Err(reason) => Converted::Failed(reason),
            },
            Err(_) => Converted::Failed(TlsError::KeyHandover),
        }
    }
}

impl Side for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
}

/// Who runs a connection's TLS: rustls (the handshake, and a client's
/// whole connection), or our record layer (a server's, after it).
enum Stage<C> {
    Handshake(Box<C>),
    Traffic(Box<Records>),
    /// The key handover failed: the connection closes with this reason.
    Failed(TlsError),
}

/// What one TLS connection keeps between readiness events.
pub(crate) struct TlsConn<C> {
    stage: Stage<C>,
    /// Received bytes rustls has not consumed: a record cut by the network.
    spill: Spill,
    /// The handshake finished (and was counted).
    done: bool,
    /// The peer sent close_notify: the next read is the end.
    peer_closed: bool,
}

/// Buffers a worker lends every TLS connection in turn.
#[derive(Default)]
pub(crate) struct TlsBufs {
    /// Received ciphertext being processed (its length is its capacity;
    /// each read says how much of it holds bytes).
    incoming: Vec<u8>,
    /// Bytes for the socket, in order: handshake flights, alerts, records.
    pub wire: Vec<u8>,
}

impl<C: Side> TlsConn<C> {
    pub(crate) fn new(conn: C) -> Box<TlsConn<C>> {
        Box::new(TlsConn { stage: Stage::Handshake(Box::new(conn)), spill: None, done: false, peer_closed: false })
    }

    /// Who runs the connection's TLS now: "rustls", "records" or "failed".
    #[cfg(test)]
    pub(crate) fn stage_name(&self) -> &'static str {
        match self.stage {
            Stage::Handshake(_) => "rustls",
            Stage::Traffic(_) => "records",
            Stage::Failed(_) => "failed",
        }
    }

    /// The rustls connection, while rustls runs this one.
    fn rustls(&mut self) -> Result<&mut C, TlsError> {
        match &mut self.stage {
            Stage::Handshake(c) => Ok(c),
            Stage::Traffic(_) => Err(TlsError::HandedOver),
            Stage::Failed(reason) => Err(*reason),
        }
    }

    /// Still in the handshake: nothing may be sent to it yet.
    pub(crate) fn handshaking(&self) -> bool {
        !self.done
    }

    /// Once, right after the handshake finished: whether it resumed a
    /// session. The keys then move to our record layer (server side); Err
    /// if that failed (the connection must close).
    pub(crate) fn take_finished(&mut self) -> Option<Result<bool, TlsError>> {
        let Stage::Handshake(c) = &self.stage else { return None };
        if self.done || c.common().is_handshaking() {
            return None;
        }
        self.done = true;
        let resumed = matches!(c.common().handshake_kind(), Some(rustls::HandshakeKind::Resumed));
        let Stage::Handshake(c) = std::mem::replace(&mut self.stage, Stage::Failed(TlsError::Other)) else { unreachable!("matched above") };
        self.stage = match c.into_records() {
            Converted::Kept(c) => Stage::Handshake(c),
            Converted::Records(r) => Stage::Traffic(r),
            Converted::Failed(reason) => {
                self.stage = Stage::Failed(reason);
                return Some(Err(reason));
            }
        };
        Some(Ok(resumed))
    }

    /// Encrypt `plain` onto `wire`. Err names why it cannot be sent.
    pub(crate) fn encrypt(&mut self, plain: &[u8], wire: &mut Vec<u8>) -> Result<(), TlsError> {
        if plain.is_empty() {
            return Ok(());
        }
        if let Stage::Traffic(r) = &mut self.stage {
            return r.seal(plain, wire);
        }
        let mut empty: [u8; 0] = [];
        // Bounded: each turn either encrypts, or moves a pending handshake
        // message (a session ticket) onto the wire.
        for _ in 0..16 {
            let incoming: &mut [u8] = match self.spill.as_deref_mut() {
                Some(s) => &mut s[..],
                None => &mut empty,
            };
            let conn = match &mut self.stage {
                Stage::Handshake(c) => c,
                Stage::Traffic(_) => unreachable!("returned above"),
                Stage::Failed(reason) => return Err(*reason),
            };
            let UnbufferedStatus { discard, state } = conn.process(incoming);
            let result = match state {
                Ok(ConnectionState::WriteTraffic(mut w)) => Some(encrypt_into(plain, wire, |p, out| w.encrypt(p, out))),
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    encode_into(wire, |out| e.encode(out)).map_err(|_| TlsError::EncodeFailed)?;
                    None
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    t.done();
                    None
                }
                Ok(ConnectionState::BlockedHandshake) => Some(Err(TlsError::Handshaking)),
                Ok(_) => Some(Err(TlsError::Closed)),
                Err(e) => Some(Err(TlsError::from(&e))),
            };
            self.discard(discard);
            if let Some(r) = result {
                return r;
            }
        }
        Err(TlsError::EncodeLoop)
    }

    /// Run rustls with nothing received: what it has to say first (a
    /// client's ClientHello) goes onto `wire`.
    pub(crate) fn kick(&mut self, wire: &mut Vec<u8>) -> Result<(), TlsError> {
        let mut empty: [u8; 0] = [];
        let conn = self.rustls()?;
        for _ in 0..16 {
            match conn.process(&mut empty).state {
                Ok(ConnectionState::EncodeTlsData(mut e)) => encode_into(wire, |out| e.encode(out)).map_err(|_| TlsError::EncodeFailed)?,
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(_) => return Ok(()),
                Err(e) => return Err(TlsError::from(&e)),
            }
        }
        Err(TlsError::EncodeLoop)
    }

    /// Best effort: a close_notify alert written to `sock` now (the
    /// connection is closing; nothing waits for it).
    pub(crate) fn close_notify(&mut self, sock: &mut mio::net::TcpStream, wire: &mut Vec<u8>) {
        self.close_notify_onto(wire);
        if !wire.is_empty() {
            let _ = std::io::Write::write(sock, wire);
        }
        wire.clear();
    }

    /// A close_notify alert onto an emptied `wire` (nothing when it
    /// cannot be had), for the caller to send.
    pub(crate) fn close_notify_onto(&mut self, wire: &mut Vec<u8>) {
        wire.clear();
        let mut empty: [u8; 0] = [];
        match &mut self.stage {
            Stage::Traffic(r) => {
                let _ = r.close_notify(wire);
            }
            Stage::Handshake(c) => {
                if let Ok(ConnectionState::WriteTraffic(mut w)) = c.process(&mut empty).state {
                    let _ = encrypt_into(&[], wire, |_, out| w.queue_close_notify(out));
                }
            }
            Stage::Failed(_) => {}
        }
    }

    fn discard(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if let Some(s) = &mut self.spill {
            s.drain(..n.min(s.len()));
            if s.is_empty() {
                self.spill = None;
            }
        }
    }
}

fn encrypt_into(plain: &[u8], wire: &mut Vec<u8>, mut f: impl FnMut(&[u8], &mut [u8]) -> Result<usize, EncryptError>) -> Result<(), TlsError> {
    let start = wire.len();
    let mut room = plain.len() + (plain.len() / 16384 + 1) * 64;
    loop {
        wire.resize(start + room, 0);
        match f(plain, &mut wire[start..]) {
            Ok(n) => {
                wire.truncate(start + n);
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(s)) if s.required_size > room => room = s.required_size,
            Err(_) => {
                wire.truncate(start);
                return Err(TlsError::EncryptFailed);
            }
        }
    }
}

fn encode_into(wire: &mut Vec<u8>, mut f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>) -> Result<(), ()> {
    let start = wire.len();
    let mut room = 4096;
    loop {
        wire.resize(start + room, 0);
        match f(&mut wire[start..]) {
            Ok(n) => {
                wire.truncate(start + n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(s)) if s.required_size > room => room = s.required_size,
            Err(_) => {
                wire.truncate(start);
                return Err(());
            }
        }
    }
}

/// Reads plaintext from a TLS connection's socket (or from the bytes an
/// io_uring receive brought: `S` = [`crate::net::Received`]) for the
/// protocol code.
///
/// Each call reads at most `buf.len()` bytes of records (less what was
/// spilled), so the plaintext always fits; "more" is true when the socket
/// read was full, exactly as for a plaintext socket.
///
/// One socket read per call, even when its records held no plaintext (key
/// updates, empty records, a handshake flight): that read returns
/// `Ok((0, true))` and counts against the caller's
/// [`crate::net::READ_BUDGET`] like any other. Reading on until plaintext
/// came let a peer that sent nothing else hold a worker for as long as it
/// kept sending.
pub(crate) struct TlsRead<'a, C, S = mio::net::TcpStream> {
    pub sock: &'a mut S,
    pub tls: &'a mut TlsConn<C>,
    pub bufs: &'a mut TlsBufs,
    /// Cleartext on this port gets this answer (http, ws) before closing.
    pub plaintext_reply: Option<&'static [u8]>,
}

impl<C: Side, S: Read> Source for TlsRead<'_, C, S> {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        if self.tls.peer_closed {
            return Ok((0, false));
        }
        // The buffer keeps its length between reads: zeroing 64 KB
        // per read showed as 6.5% of an HTTPS server's CPU.
        let incoming = &mut self.bufs.incoming;
        let spill = self.tls.spill.take();
        let have = spill.as_ref().map_or(0, |s| s.len());
        let want = buf.len().saturating_sub(have).max(1);
        if incoming.len() < have + want {
            incoming.resize(have + want, 0);
        }
        if let Some(s) = spill {
            incoming[..have].copy_from_slice(&s);
        }
        let (n, more, eof) = loop {
            match self.sock.read(&mut incoming[have..have + want]) {
                Ok(0) => break (0, false, true),
                Ok(n) => break (n, n == want, false),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break (0, false, false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if !self.tls.done && have == 0 && n > 0 && looks_like_cleartext(incoming[0]) {
            if let Some(reply) = self.plaintext_reply {
                self.bufs.wire.extend_from_slice(reply);
            }
            return Err(TlsError::Plaintext.into());
        }
        let filled = self.process(buf, have + n)?;
        if filled > 0 {
            return Ok((filled, more || self.tls.peer_closed));
        }
        if eof || self.tls.peer_closed {
            self.tls.peer_closed = true;
            return Ok((0, false));
        }
        if !more {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // A full read that decrypted to nothing: the caller's budget says
        // whether to read again now.
        Ok((0, true))
    }
}

impl<C: Side, S> TlsRead<'_, C, S> {
    /// Run rustls over the received bytes: decrypted data into `buf`,
    /// handshake messages onto the wire, the unconsumed rest spilled.
    fn process(&mut self, buf: &mut [u8], received: usize) -> io::Result<usize> {
        let TlsBufs { incoming, wire } = &mut *self.bufs;
        let incoming = &mut incoming[..received];
        let conn = match &mut self.tls.stage {
            Stage::Handshake(c) => c,
            Stage::Traffic(r) => {
                let opened = r.open(incoming, buf, wire)?;
                if opened.closed {
                    self.tls.peer_closed = true;
                } else if opened.used < incoming.len() {
                    self.tls.spill = Some(Box::new(incoming[opened.used..].to_vec()));
                }
                return Ok(opened.filled);
            }
            Stage::Failed(reason) => return Err((*reason).into()),
        };
        let mut filled = 0;
        let mut off = 0;
        let mut failed = None;
        // Bounded: every turn consumes input or moves output.
        for _ in 0..4096 {
            let UnbufferedStatus { discard, state } = conn.process(&mut incoming[off..]);
            let mut stop = false;
            match state {
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    while let Some(rec) = r.next_record() {
                        let rec = rec.map_err(|e| TlsError::from(&e))?;
                        let end = filled + rec.payload.len();
                        if end > buf.len() {
                            return Err(TlsError::RecordOverflow.into());
                        }
                        buf[filled..end].copy_from_slice(rec.payload);
                        filled = end;
                    }
                }
                // Early data is never enabled (no 0-RTT replays).
                Ok(ConnectionState::ReadEarlyData(_)) => {
                    failed = Some(TlsError::EarlyData);
                    stop = true;
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    encode_into(wire, |out| e.encode(out)).map_err(|_| TlsError::EncodeFailed)?;
                }
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::PeerClosed) | Ok(ConnectionState::Closed) => {
                    self.tls.peer_closed = true;
                    stop = true;
                }
                Ok(_) => stop = true,
                Err(e) => {
                    failed = Some(TlsError::from(&e));
                    stop = true;
                }
            }
            off += discard;
            if let Some(reason) = failed {
                // The alert rustls queued goes out before the close.
                let _ = self.tls.encrypt_alert(wire);
                return Err(reason.into());
            }
            if stop {
                break;
            }
        }
        if off < incoming.len() {
            self.tls.spill = Some(Box::new(incoming[off..].to_vec()));
        }
        Ok(filled)
    }
}

impl<C: Side> TlsConn<C> {
    /// After an error: the alert rustls queued, onto the wire.
    fn encrypt_alert(&mut self, wire: &mut Vec<u8>) -> Result<(), ()> {
        let mut empty: [u8; 0] = [];
        let Stage::Handshake(c) = &mut self.stage else { return Ok(()) };
        if let Ok(ConnectionState::EncodeTlsData(mut e)) = c.process(&mut empty).state {
            encode_into(wire, |out| e.encode(out))?;
        }
        Ok(())
    }
}

/// A TLS connection starts with a handshake record (22); printable ASCII
/// first is someone speaking cleartext (an HTTP request, a telnet).
fn looks_like_cleartext(first: u8) -> bool {
    first != 0x16 && (first.is_ascii_graphic() || first == b' ' || first == b'\r' || first == b'\n')
}

/// A connection's bytes: straight from the socket, or through TLS.
pub(crate) enum Wire<'a, C> {
    Plain(&'a mut mio::net::TcpStream),
    Tls(TlsRead<'a, C>),
    /// Bytes an io_uring receive already brought.
    Received(crate::net::Received<'a>),
    /// Records an io_uring receive already brought.
    TlsReceived(TlsRead<'a, C, crate::net::Received<'a>>),
}

impl<'a, C> Wire<'a, C> {
    /// The reader of a connection, for either side's worker: through TLS
    /// when it has TLS state (`tls`: its connection and the worker's
    /// buffers; cleartext on the port answered `plaintext_reply`), from
    /// the socket, or (`rx`) from the bytes an io_uring receive brought.
    pub(crate) fn of(
        sock: &'a mut mio::net::TcpStream,
        rx: Option<&'a mut crate::net::Received<'a>>,
        tls: Option<(&'a mut TlsConn<C>, &'a mut TlsBufs)>,
        plaintext_reply: Option<&'static [u8]>,
    ) -> Wire<'a, C> {
        match (tls, rx) {
            (Some((tls, bufs)), Some(rx)) => Wire::TlsReceived(TlsRead { sock: rx, tls, bufs, plaintext_reply }),
            (Some((tls, bufs)), None) => Wire::Tls(TlsRead { sock, tls, bufs, plaintext_reply }),
            (None, Some(rx)) => Wire::Received(crate::net::Received(rx.0)),
            (None, None) => Wire::Plain(sock),
        }
    }
}

impl<C: Side> Source for Wire<'_, C> {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        match self {
            Wire::Plain(s) => s.read_some(buf),
            Wire::Tls(t) => t.read_some(buf),
            Wire::Received(r) => r.read_some(buf),
            Wire::TlsReceived(t) => t.read_some(buf),
        }
    }
}

/// Send `data` on a connection, for either side's worker: when it
/// speaks TLS (`tls`), encrypted after whatever the handshake left on
/// `wire` (which is emptied), as is otherwise; `put` writes the bytes as
/// they go on the wire (at once, or through a ring) and says whether the
/// connection may go on. Both are tried: the handshake's bytes go out even
/// when `data` cannot be encrypted. Errors are the client's type
/// (`String`, its failure label); [`send_as`] maps an encryption failure
/// into another.
pub(crate) fn send<C: Side>(
    tls: Option<&mut TlsConn<C>>,
    wire: &mut Vec<u8>,
    data: &[u8],
    put: impl FnOnce(&[u8]) -> Result<(), String>,
) -> Result<(), String> {
    send_as(tls, wire, data, put, |e| e.to_string())
}

/// [`send`] with the caller's error type: `tls_failed` names an
/// encryption failure in it (the server's typed close reasons).
pub(crate) fn send_as<C: Side, E>(
    tls: Option<&mut TlsConn<C>>,
    wire: &mut Vec<u8>,
    data: &[u8],
    put: impl FnOnce(&[u8]) -> Result<(), E>,
    tls_failed: impl FnOnce(TlsError) -> E,
) -> Result<(), E> {
    let Some(conn) = tls else { return put(data) };
    let encrypted = if data.is_empty() { Ok(()) } else { conn.encrypt(data, wire).map_err(tls_failed) };
    let sent = put(wire);
    wire.clear();
    encrypted.and(sent)
}
