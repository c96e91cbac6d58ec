//! A server connection's TLS after the handshake: the traffic keys and
//! sequence numbers, and the record layer that uses them (TLS 1.3 and
//! 1.2; AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305).
//!
//! Why not rustls's own record layer: an idle rustls connection keeps its
//! handshake state, key schedule and two expanded AEAD keys (ring sizes
//! every key for AES's expanded schedule), ~3.4 KB in all. Once the
//! handshake is done rustls hands over the secrets (its "kernel
//! connection" API, made for kernel TLS); this keeps the raw keys (at most
//! 32 bytes each), builds the cipher for the moment it is used, and asks
//! rustls only for what follows a key update.
//!
//! A peer's KeyUpdate costs a key derivation (two when it asks for one
//! back, plus the record that answers it) for 27 bytes of input: unlimited,
//! ~43 Mbit/s of them kept a worker core busy and slowed every other
//! connection on it five-fold. So they are limited as rustls limits them
//! ([`MAX_KEY_UPDATES`] without application data in between), a malformed
//! one is answered with the alert RFC 8446 asks for, and a read of records
//! with no plaintext counts against the read budget like any other read
//! (see [`super::conn::TlsRead`]).

use super::failure::TlsError;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{AlertDescription, ConnectionTrafficSecrets, ExtractedSecrets};

/// Largest plaintext in one record (RFC 8446 5.1).
const MAX_PLAIN: usize = 16_384;
/// Largest ciphertext a peer may send in one record (RFC 8446 5.2).
const MAX_CIPHER: usize = MAX_PLAIN + 256;
const HEADER: usize = 5;
const TAG: usize = 16;
/// TLS 1.2's explicit nonce (AES-GCM); TLS 1.3 has one byte of content
/// type there instead, ChaCha20-Poly1305 in TLS 1.2 nothing.
const EXPLICIT_NONCE: usize = 8;
/// Most bytes one record adds to its plaintext.
const MAX_OVERHEAD: usize = HEADER + EXPLICIT_NONCE + TAG;
/// Records one AES-GCM key may protect before a key update (RFC 8446
/// 5.5 allows 2^24.5).
const AES_GCM_RECORDS: u64 = 1 << 24;
/// KeyUpdates a peer may send with no application data in between; the
/// next one closes the connection ([`TlsError::KeyUpdateLimit`]). 32 is
/// rustls's own limit (and BoringSSL's `kMaxKeyUpdates`), so a peer that
/// works against those works here; a peer has no need for more (keys wear
/// out after millions of records, not after none).
pub(crate) const MAX_KEY_UPDATES: u8 = 32;

const APPLICATION_DATA: u8 = 0x17;
const ALERT: u8 = 0x15;
const HANDSHAKE: u8 = 0x16;
const KEY_UPDATE: u8 = 24;
/// An alert's level byte: fatal (RFC 8446 6).
const FATAL: u8 = 2;

/// Most bytes `plain` bytes of application data take on the wire: a
/// record per [`MAX_PLAIN`] bytes, each adding at most [`MAX_OVERHEAD`],
/// and one more for a key update that may fall among them (one per 2^24
/// records at most). A connection's unsent output is ciphertext, so its
/// bound is counted in these bytes.
pub(crate) fn sealed_len_bound(plain: usize) -> usize {
    plain.saturating_add((plain.div_ceil(MAX_PLAIN) + 1).saturating_mul(MAX_OVERHEAD))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
}

impl Cipher {
    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Cipher::Aes128Gcm => &aead::AES_128_GCM,
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

/// One direction: its key, IV and next sequence number.
struct Direction {
    key: [u8; 32],
    iv: [u8; 12],
    seq: u64,
}

impl Direction {
    fn new(seq: u64, secrets: ConnectionTrafficSecrets) -> Result<(Cipher, Direction), TlsError> {
        let (cipher, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (Cipher::ChaCha20Poly1305, key, iv),
            _ => return Err(TlsError::UnsupportedCipher),
        };
        let mut d = Direction { key: [0; 32], iv: [0; 12], seq };
        let (k, i) = (key.as_ref(), iv.as_ref());
        if k.len() != cipher.algorithm().key_len() || i.len() != 12 {
            return Err(TlsError::UnsupportedCipher);
        }
        d.key[..k.len()].copy_from_slice(k);
        d.iv.copy_from_slice(i);
        Ok((cipher, d))
    }

    /// The cipher, built for the records at hand (cheap next to a system call).
    fn cipher(&self, c: Cipher) -> LessSafeKey {
        let alg = c.algorithm();
        LessSafeKey::new(UnboundKey::new(alg, &self.key[..alg.key_len()]).expect("key length checked in Direction::new"))
    }

    /// The per-record nonce: the IV with the sequence number XORed into
    /// its last 8 bytes (TLS 1.3, and TLS 1.2's ChaCha and GCM writes).
    fn nonce(&self) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

/// What one read of records produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Opened {
    /// Bytes of input consumed (whole records; the rest is a cut record).
    pub used: usize,
    /// Plaintext written to the caller's buffer.
    pub filled: usize,
    /// The peer sent close_notify.
    pub closed: bool,
}

/// A server connection after its handshake.
pub(crate) struct Records {
    cipher: Cipher,
    tls13: bool,
    tx: Direction,
    rx: Direction,
    /// rustls's remainder: what a key update needs (None: fuzzing).
    kernel: Option<KernelConnection<ServerConnectionData>>,
    /// The peer's KeyUpdates since it last sent application data (at
    /// most [`MAX_KEY_UPDATES`]).
    key_updates: u8,
}

impl Records {
    pub(crate) fn new(secrets: ExtractedSecrets, kernel: KernelConnection<ServerConnectionData>) -> Result<Records, TlsError> {
        let (cipher, tx) = Direction::new(secrets.tx.0, secrets.tx.1)?;
        let (_, rx) = Direction::new(secrets.rx.0, secrets.rx.1)?;
        let tls13 = kernel.protocol_version() == rustls::ProtocolVersion::TLSv1_3;
        Ok(Records { cipher, tls13, tx, rx, kernel: Some(kernel), key_updates: 0 })
    }

    /// Both directions under one made-up key (a fuzz target seals and
    /// opens its own records); no key update possible.
    #[doc(hidden)]
    pub(crate) fn for_fuzzing(tls13: bool, cipher: u8) -> Records {
        let cipher = match cipher % 3 {
            0 => Cipher::Aes128Gcm,
            1 => Cipher::Aes256Gcm,
            _ => Cipher::ChaCha20Poly1305,
        };
        let d = || Direction { key: [7; 32], iv: [9; 12], seq: 0 };
        Records { cipher, tls13, tx: d(), rx: d(), kernel: None, key_updates: 0 }
    }

    /// Seal one record of any content type (fuzzing: alerts, key updates).
    #[doc(hidden)]
    pub(crate) fn seal_kind(&mut self, kind: u8, chunk: &[u8], wire: &mut Vec<u8>) -> Result<(), TlsError> {
        self.seal_unchecked(kind, &chunk[..chunk.len().min(MAX_PLAIN)], wire)
    }

    fn kernel(&mut self) -> Result<&mut KernelConnection<ServerConnectionData>, TlsError> {
        self.kernel.as_mut().ok_or(TlsError::KeyUpdateUnsupported)
    }

    /// Encrypt `plain` as application data records onto `wire`.
    pub(crate) fn seal(&mut self, plain: &[u8], wire: &mut Vec<u8>) -> Result<(), TlsError> {
        for chunk in plain.chunks(MAX_PLAIN) {
            self.seal_record(APPLICATION_DATA, chunk, wire)?;
        }
        Ok(())
    }

    /// A close_notify alert onto `wire`.
    pub(crate) fn close_notify(&mut self, wire: &mut Vec<u8>) -> Result<(), TlsError> {
        self.seal_record(ALERT, &[1, 0], wire)
    }

    fn seal_record(&mut self, kind: u8, chunk: &[u8], wire: &mut Vec<u8>) -> Result<(), TlsError> {
        if self.cipher != Cipher::ChaCha20Poly1305 && self.tx.seq >= AES_GCM_RECORDS {
            if !self.tls13 {
                return Err(TlsError::RecordLimit);
            }
            self.update_tx(wire)?;
        }
        self.seal_unchecked(kind, chunk, wire)
    }

    /// One record, whatever the key's record count.
    fn seal_unchecked(&mut self, kind: u8, chunk: &[u8], wire: &mut Vec<u8>) -> Result<(), TlsError> {
        let key = self.tx.cipher(self.cipher);
        let nonce = self.tx.nonce();
        let start = wire.len();
        let tag = if self.tls13 {
            let len = chunk.len() + 1 + TAG;
            let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
            wire.extend_from_slice(&header);
            wire.extend_from_slice(chunk);
            wire.push(kind);
            key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(header), &mut wire[start + HEADER..])
        } else {
            let explicit = if self.cipher == Cipher::ChaCha20Poly1305 { 0 } else { 8 };
            let len = explicit + chunk.len() + TAG;
            wire.extend_from_slice(&[kind, 3, 3, (len >> 8) as u8, len as u8]);
            wire.extend_from_slice(&nonce[12 - explicit..]);
            let body = wire.len();
            wire.extend_from_slice(chunk);
            key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(tls12_aad(self.tx.seq, kind, chunk.len())), &mut wire[body..])
        };
        match tag {
            Ok(tag) => wire.extend_from_slice(tag.as_ref()),
            Err(_) => {
                wire.truncate(start);
                return Err(TlsError::EncryptFailed);
            }
        }
        self.tx.seq += 1;
        Ok(())
    }

    /// TLS 1.3: send a KeyUpdate (not requesting one back) under the old
    /// key, then switch to the next.
    fn update_tx(&mut self, wire: &mut Vec<u8>) -> Result<(), TlsError> {
        self.seal_unchecked(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], wire)?;
        let (seq, secrets) = self.kernel()?.update_tx_secret().map_err(|e| TlsError::from(&e))?;
        let (cipher, tx) = Direction::new(seq, secrets)?;
        if cipher != self.cipher {
            return Err(TlsError::CipherChanged);
        }
        self.tx = tx;
        Ok(())
    }

    /// TLS 1.3: the peer's KeyUpdate (RFC 8446 4.6.3): its next key for
    /// what follows, and ours too when it asked for that. The first past
    /// [`MAX_KEY_UPDATES`] without application data in between is refused.
    fn update_rx(&mut self, requested: bool, wire: &mut Vec<u8>) -> Result<(), TlsError> {
        if self.key_updates >= MAX_KEY_UPDATES {
            return Err(TlsError::KeyUpdateLimit);
        }
        self.key_updates += 1;
        let (seq, secrets) = self.kernel()?.update_rx_secret().map_err(|e| TlsError::from(&e))?;
        let (cipher, rx) = Direction::new(seq, secrets)?;
        if cipher != self.cipher {
            return Err(TlsError::CipherChanged);
        }
        self.rx = rx;
        if requested {
            self.update_tx(wire)?;
        }
        Ok(())
    }

    /// A fatal `alert` onto `wire` before the connection closes as
    /// `reason` (best effort: it closes whether or not the alert is had).
    fn fatal(&mut self, alert: AlertDescription, reason: TlsError, wire: &mut Vec<u8>) -> TlsError {
        let _ = self.seal_unchecked(ALERT, &[FATAL, u8::from(alert)], wire);
        reason
    }

    /// Decrypt the whole records at the start of `incoming` into `buf`
    /// (application data), acting on alerts and key updates; handshake
    /// messages to send (a requested key update) and the alert that ends
    /// a connection over a malformed one go onto `wire`.
    pub(crate) fn open(&mut self, incoming: &mut [u8], buf: &mut [u8], wire: &mut Vec<u8>) -> Result<Opened, TlsError> {
        let mut out = Opened::default();
        let mut key = self.rx.cipher(self.cipher);
        while !out.closed && incoming.len() - out.used >= HEADER {
            let at = out.used;
            let kind = incoming[at];
            let len = u16::from_be_bytes([incoming[at + 3], incoming[at + 4]]) as usize;
            if incoming[at + 1] != 3 || len > MAX_CIPHER {
                return Err(if len > MAX_CIPHER { TlsError::RecordOverflow } else { TlsError::BadMessage });
            }
            if incoming.len() - at < HEADER + len {
                break;
            }
            out.used += HEADER + len;
            let (header, body) = incoming[at..at + HEADER + len].split_at_mut(HEADER);
            let (inner, plain) = if self.tls13 {
                if kind != APPLICATION_DATA {
                    return Err(TlsError::BadMessage);
                }
                let header: [u8; HEADER] = (&*header).try_into().expect("5 bytes");
                let plain = key.open_in_place(Nonce::assume_unique_for_key(self.rx.nonce()), Aad::from(header), body).map_err(|_| TlsError::DecryptError)?;
                // The content type is the last non-zero byte (the rest is padding).
                let end = plain.iter().rposition(|b| *b != 0).ok_or(TlsError::BadMessage)?;
                (plain[end], &plain[..end])
            } else {
                let explicit = if self.cipher == Cipher::ChaCha20Poly1305 { 0 } else { 8 };
                if body.len() < explicit + TAG {
                    return Err(TlsError::BadMessage);
                }
                let mut nonce = self.rx.nonce();
                if explicit > 0 {
                    nonce[..4].copy_from_slice(&self.rx.iv[..4]);
                    nonce[4..].copy_from_slice(&body[..8]);
                }
                let aad = tls12_aad(self.rx.seq, kind, body.len() - explicit - TAG);
                let plain =
                    key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut body[explicit..]).map_err(|_| TlsError::DecryptError)?;
                (kind, &*plain)
            };
            self.rx.seq += 1;
            match inner {
                APPLICATION_DATA => {
                    let end = out.filled + plain.len();
                    let room = buf.get_mut(out.filled..end).ok_or(TlsError::RecordOverflow)?;
                    room.copy_from_slice(plain);
                    out.filled = end;
                    // Only data resets the count: an empty record between
                    // two KeyUpdates would otherwise make them unlimited.
                    if !plain.is_empty() {
                        self.key_updates = 0;
                    }
                }
                ALERT => match plain {
                    [_, 0] => out.closed = true,
                    [_, desc] => return Err(TlsError::Alert(AlertDescription::from(*desc))),
                    _ => return Err(TlsError::BadMessage),
                },
                HANDSHAKE if self.tls13 => match key_update_request(plain) {
                    Some(Ok(requested)) => {
                        self.update_rx(requested, wire)?;
                        key = self.rx.cipher(self.cipher);
                    }
                    Some(Err(alert)) => return Err(self.fatal(alert, TlsError::BadKeyUpdate, wire)),
                    // Any other handshake message after the handshake.
                    None => return Err(TlsError::UnexpectedHandshake),
                },
                // Renegotiation (TLS 1.2) is refused.
                HANDSHAKE => return Err(TlsError::UnexpectedHandshake),
                _ => return Err(TlsError::BadMessage),
            }
        }
        Ok(out)
    }
}

/// What one record's handshake message asks if it is a whole KeyUpdate
/// (type, 3-byte length, body): `Ok(true)` when the peer wants one back;
/// `Err` the alert RFC 8446 4.6.3 and 6.2 name for a malformed one
/// (a request byte other than 0 or 1: illegal_parameter; a body of
/// another length: decode_error). `None` for anything else, fragmented or
/// coalesced handshake messages included (refused, as before).
fn key_update_request(msg: &[u8]) -> Option<Result<bool, AlertDescription>> {
    let [KEY_UPDATE, l0, l1, l2, body @ ..] = msg else { return None };
    if u32::from_be_bytes([0, *l0, *l1, *l2]) as usize != body.len() {
        return None;
    }
    Some(match body {
        [0] => Ok(false),
        [1] => Ok(true),
        [_] => Err(AlertDescription::IllegalParameter),
        _ => Err(AlertDescription::DecodeError),
    })
}

/// TLS 1.2's additional data: sequence number, type, version, length.
fn tls12_aad(seq: u64, kind: u8, len: usize) -> [u8; 13] {
    let mut a = [0u8; 13];
    a[..8].copy_from_slice(&seq.to_be_bytes());
    a[8] = kind;
    a[9] = 3;
    a[10] = 3;
    a[11..].copy_from_slice(&(len as u16).to_be_bytes());
    a
}

#[cfg(test)]
mod tests {
    //! The record layer against rustls's own client (buffered, another
    //! implementation of the same records): every cipher of both versions,
    //! records cut by the network, messages of many records, key updates
    //! both ways, close_notify; and against peers that abuse key updates.
    use super::{Records, HANDSHAKE, KEY_UPDATE, MAX_KEY_UPDATES, MAX_PLAIN};
    use crate::net::{ReadEnd, Received, Source, READ_BUDGET};
    use crate::tls::conn::{TlsBufs, TlsRead};
    use crate::tls::failure::TlsError;
    use crate::tls::server::TlsConn;
    use rustls::crypto::ring as provider;
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Room for one whole record, as a worker's buffer has.
    const RECORD_ROOM: usize = 17_000;
    /// Flights a TLS 1.3 handshake takes in memory (two), with room to spare.
    const HANDSHAKE_FLIGHTS: usize = 8;

    fn server_config(pki: &crate::tls::throwaway::Throwaway) -> Arc<rustls::ServerConfig> {
        let files = crate::tls::files::ServerTls {
            cert: pki.cert.clone(),
            key: pki.key.clone(),
            handshake_timeout_ms: 10_000,
            ticket_key: crate::tls::tickets::new_key().unwrap(),
            alpn_http: false,
            pem: None,
        };
        crate::tls::files::server_config(&files).unwrap()
    }

    fn client_config(pki: &crate::tls::throwaway::Throwaway, suite: rustls::SupportedCipherSuite) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for c in crate::tls::files::read_chain(&pki.ca).unwrap() {
            roots.add(c).unwrap();
        }
        let provider = rustls::crypto::CryptoProvider { cipher_suites: vec![suite], ..provider::default_provider() };
        let version = if suite.version() == &rustls::version::TLS13 { &rustls::version::TLS13 } else { &rustls::version::TLS12 };
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }

    /// The client's side: echoes checked, keys updated (TLS 1.3), closed.
    fn client(config: Arc<rustls::ClientConfig>, port: u16, update_keys: bool) -> Result<(), String> {
        let sock = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let conn = rustls::ClientConnection::new(config, "localhost".try_into().unwrap()).map_err(|e| e.to_string())?;
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let echo = |msg: &[u8], tls: &mut rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>| -> Result<(), String> {
            tls.write_all(msg).map_err(|e| e.to_string())?;
            let mut back = vec![0; msg.len()];
            tls.read_exact(&mut back).map_err(|e| e.to_string())?;
            if back != msg {
                return Err(format!("echo of {} bytes differs", msg.len()));
            }
            Ok(())
        };
        echo(b"hello", &mut tls)?;
        // Several records, sent in small writes the network may cut.
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        echo(&big, &mut tls)?;
        if update_keys {
            for _ in 0..3 {
                tls.conn.refresh_traffic_keys().map_err(|e| e.to_string())?;
                echo(b"after a key update", &mut tls)?;
            }
        }
        tls.conn.send_close_notify();
        tls.flush().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// One connection served by a TlsConn (echo), until the client's
    /// close_notify; returns whether the keys moved to our record layer.
    fn serve(config: Arc<rustls::ServerConfig>, listener: &std::net::TcpListener) -> Result<bool, String> {
        let (sock, _) = listener.accept().map_err(|e| e.to_string())?;
        sock.set_nonblocking(true).unwrap();
        let mut sock = mio::net::TcpStream::from_std(sock);
        let mut poll = mio::Poll::new().unwrap();
        poll.registry().register(&mut sock, mio::Token(0), mio::Interest::READABLE).unwrap();
        let mut events = mio::Events::with_capacity(4);
        let mut tls = crate::tls::server::accept(config).map_err(|e| e.to_string())?;
        let mut bufs = TlsBufs::default();
        // Room for one whole record (as a worker's buffer has); reads of
        // at most this much still cut records, which then spill.
        let mut buf = vec![0u8; RECORD_ROOM];
        let mut handed_over = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if Instant::now() > deadline {
                return Err("no close_notify within 20 s".into());
            }
            poll.poll(&mut events, Some(Duration::from_millis(100))).unwrap();
            let mut plain = Vec::new();
            let ended = loop {
                let mut r = TlsRead { sock: &mut sock, tls: &mut tls, bufs: &mut bufs, plaintext_reply: None };
                match r.read_some(&mut buf) {
                    Ok((0, false)) => break true,
                    Ok((n, _)) => plain.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(e) => return Err(e.to_string()),
                }
            };
            if let Some(done) = tls.take_finished() {
                done.map_err(|e| e.to_string())?;
                handed_over = tls.stage_name() == "records";
            }
            if !plain.is_empty() {
                let (sealed_by_us, before) = (tls.stage_name() == "records", bufs.wire.len());
                tls.encrypt(&plain, &mut bufs.wire).map_err(|e| e.to_string())?;
                let grown = bufs.wire.len() - before;
                if sealed_by_us && grown > super::sealed_len_bound(plain.len()) {
                    return Err(format!("{} bytes sealed into {grown}, past sealed_len_bound", plain.len()));
                }
            }
            let mut at = 0;
            while at < bufs.wire.len() {
                match sock.write(&bufs.wire[at..]) {
                    Ok(n) => at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(e) => return Err(e.to_string()),
                }
            }
            bufs.wire.clear();
            if ended {
                return Ok(handed_over);
            }
        }
    }

    #[test]
    fn the_sealed_length_bound_counts_every_record_and_a_key_update() {
        use super::{sealed_len_bound, MAX_OVERHEAD, MAX_PLAIN};
        assert_eq!(sealed_len_bound(0), MAX_OVERHEAD);
        assert_eq!(sealed_len_bound(1), 1 + 2 * MAX_OVERHEAD);
        assert_eq!(sealed_len_bound(MAX_PLAIN + 1), MAX_PLAIN + 1 + 3 * MAX_OVERHEAD);
        assert_eq!(sealed_len_bound(16 << 20), (16 << 20) + 1025 * MAX_OVERHEAD);
        assert_eq!(sealed_len_bound(usize::MAX), usize::MAX);
    }

    #[test]
    fn records_interoperate_with_rustls_on_every_cipher_with_key_updates() {
        let pki = crate::tls::throwaway::Throwaway::new(std::net::Ipv4Addr::LOCALHOST).unwrap();
        let server = server_config(&pki);
        let suites = [
            (provider::cipher_suite::TLS13_AES_128_GCM_SHA256, true),
            (provider::cipher_suite::TLS13_AES_256_GCM_SHA384, true),
            (provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256, true),
            (provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, false),
            (provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, false),
            (provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, false),
        ];
        for (suite, tls13) in suites {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let cfg = client_config(&pki, suite);
            let peer = std::thread::spawn(move || client(cfg, port, tls13));
            let served = serve(server.clone(), &listener);
            let client = peer.join().unwrap();
            assert_eq!(client, Ok(()), "{:?}: the client", suite.suite());
            assert_eq!(served, Ok(true), "{:?}: the server, on our record layer", suite.suite());
        }
    }

    /// What the client sent, through the server's TLS (a receive of those
    /// bytes, read `room` at a time) until it is all read: the plaintext,
    /// or why the connection must close.
    fn feed(server: &mut TlsConn, bufs: &mut TlsBufs, bytes: &[u8], room: usize) -> Result<Vec<u8>, String> {
        let mut sock = Received(bytes);
        let mut buf = vec![0u8; room];
        let mut plain = Vec::new();
        loop {
            let mut r = TlsRead { sock: &mut sock, tls: &mut *server, bufs: &mut *bufs, plaintext_reply: None };
            match r.read_some(&mut buf) {
                Ok((0, false)) => return Err("eof".into()),
                Ok((n, _)) => plain.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(plain),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Everything the client has to send.
    fn sent_by(client: &mut rustls::ClientConnection) -> Vec<u8> {
        let mut out = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut out).unwrap();
        }
        out
    }

    /// A TLS 1.3 handshake in memory between rustls's client and our
    /// server, which is then on its record layer.
    fn handshake() -> (rustls::ClientConnection, Box<TlsConn>, TlsBufs) {
        let pki = crate::tls::throwaway::Throwaway::new(std::net::Ipv4Addr::LOCALHOST).unwrap();
        let cfg = client_config(&pki, provider::cipher_suite::TLS13_AES_128_GCM_SHA256);
        let mut client = rustls::ClientConnection::new(cfg, "localhost".try_into().unwrap()).unwrap();
        let mut server = crate::tls::server::accept(server_config(&pki)).unwrap();
        let mut bufs = TlsBufs::default();
        for _ in 0..HANDSHAKE_FLIGHTS {
            let flight = sent_by(&mut client);
            assert_eq!(feed(&mut server, &mut bufs, &flight, RECORD_ROOM), Ok(Vec::new()));
            if let Some(done) = server.take_finished() {
                done.unwrap();
            }
            let mut back = &bufs.wire[..];
            while !back.is_empty() {
                client.read_tls(&mut back).unwrap();
                client.process_new_packets().unwrap();
            }
            bufs.wire.clear();
            if !client.is_handshaking() && server.stage_name() == "records" {
                return (client, server, bufs);
            }
        }
        panic!("no handshake in {HANDSHAKE_FLIGHTS} flights");
    }

    /// rustls's limit: 32 KeyUpdates with no data in between are taken
    /// (data resets the count, and each asked-for update is answered), the
    /// 33rd closes the connection.
    #[test]
    fn key_updates_without_data_are_limited_as_rustls_limits_them() {
        let (mut client, mut server, mut bufs) = handshake();
        for _ in 0..MAX_KEY_UPDATES {
            client.refresh_traffic_keys().unwrap();
        }
        client.writer().write_all(b"x").unwrap();
        for _ in 0..MAX_KEY_UPDATES {
            client.refresh_traffic_keys().unwrap();
        }
        assert_eq!(feed(&mut server, &mut bufs, &sent_by(&mut client), RECORD_ROOM), Ok(b"x".to_vec()));
        assert!(!bufs.wire.is_empty(), "the asked-for key updates are answered");
        client.refresh_traffic_keys().unwrap();
        assert_eq!(feed(&mut server, &mut bufs, &sent_by(&mut client), RECORD_ROOM), Err(TlsError::KeyUpdateLimit.to_string()));
    }

    /// RFC 8446 4.6.3: a request byte other than 0 or 1 gets an
    /// illegal_parameter alert; a KeyUpdate whose body is not one byte, a
    /// decode_error (6.2). The alert goes out before the close.
    #[test]
    fn a_malformed_key_update_is_answered_with_its_alert() {
        let cases: [(&[u8], &str); 4] = [
            (&[KEY_UPDATE, 0, 0, 1, 2], "tls_alert_illegal_parameter"),
            (&[KEY_UPDATE, 0, 0, 1, 255], "tls_alert_illegal_parameter"),
            (&[KEY_UPDATE, 0, 0, 0], "tls_alert_decode_error"),
            (&[KEY_UPDATE, 0, 0, 2, 1, 0], "tls_alert_decode_error"),
        ];
        for (msg, alert) in cases {
            // Both ends under one key: what one seals the other opens.
            let (mut peer, mut us) = (Records::for_fuzzing(true, 0), Records::for_fuzzing(true, 0));
            let (mut wire, mut reply, mut buf) = (Vec::new(), Vec::new(), vec![0u8; MAX_PLAIN]);
            peer.seal_kind(HANDSHAKE, msg, &mut wire).unwrap();
            assert_eq!(us.open(&mut wire, &mut buf, &mut reply), Err(TlsError::BadKeyUpdate), "{msg:?}");
            assert_eq!(peer.open(&mut reply, &mut buf, &mut Vec::new()).map_err(|e| e.to_string()), Err(alert.to_string()), "{msg:?}: the alert sent");
        }
    }

    /// A read whose records decrypt to nothing (here: key updates, one per
    /// read) is a read like any other: the read loop stops at its budget
    /// and leaves the rest for the next turn, instead of reading on for as
    /// long as the peer keeps sending.
    #[test]
    fn records_without_plaintext_count_against_the_read_budget() {
        let (mut client, mut server, mut bufs) = handshake();
        let updates = READ_BUDGET + 4;
        for _ in 0..updates {
            client.refresh_traffic_keys().unwrap();
        }
        let wire = sent_by(&mut client);
        assert_eq!(wire.len() % updates, 0, "one record per key update");
        let record = wire.len() / updates;
        let mut sock = Received(&wire);
        let mut r = TlsRead { sock: &mut sock, tls: &mut *server, bufs: &mut bufs, plaintext_reply: None };
        let mut scratch = vec![0u8; record];
        let mut consumed = 0;
        let end = crate::net::read_chunks(&mut r, &mut None, &mut scratch, false, |b| {
            consumed += b.len();
            Ok(b.len())
        });
        assert_eq!(end, ReadEnd::Budget);
        assert_eq!(consumed, 0, "no plaintext");
        assert_eq!(sock.0.len(), (updates - READ_BUDGET) * record, "the rest waits for the next turn");
    }
}
