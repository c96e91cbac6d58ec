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

use super::failure;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets};

/// Largest plaintext in one record (RFC 8446 5.1).
const MAX_PLAIN: usize = 16_384;
/// Largest ciphertext a peer may send in one record (RFC 8446 5.2).
const MAX_CIPHER: usize = MAX_PLAIN + 256;
const HEADER: usize = 5;
const TAG: usize = 16;
/// Records one AES-GCM key may protect before a key update (RFC 8446
/// 5.5 allows 2^24.5).
const AES_GCM_RECORDS: u64 = 1 << 24;

const APPLICATION_DATA: u8 = 0x17;
const ALERT: u8 = 0x15;
const HANDSHAKE: u8 = 0x16;
const KEY_UPDATE: u8 = 24;

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
    fn new(seq: u64, secrets: ConnectionTrafficSecrets) -> Result<(Cipher, Direction), String> {
        let (cipher, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (Cipher::ChaCha20Poly1305, key, iv),
            _ => return Err("tls_unsupported_cipher".into()),
        };
        let mut d = Direction { key: [0; 32], iv: [0; 12], seq };
        let (k, i) = (key.as_ref(), iv.as_ref());
        if k.len() != cipher.algorithm().key_len() || i.len() != 12 {
            return Err("tls_unsupported_cipher".into());
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
pub struct Opened {
    /// Bytes of input consumed (whole records; the rest is a cut record).
    pub used: usize,
    /// Plaintext written to the caller's buffer.
    pub filled: usize,
    /// The peer sent close_notify.
    pub closed: bool,
}

/// A server connection after its handshake.
pub struct Records {
    cipher: Cipher,
    tls13: bool,
    tx: Direction,
    rx: Direction,
    /// rustls's remainder: what a key update needs (None: fuzzing).
    kernel: Option<KernelConnection<ServerConnectionData>>,
}

impl Records {
    pub fn new(secrets: ExtractedSecrets, kernel: KernelConnection<ServerConnectionData>) -> Result<Records, String> {
        let (cipher, tx) = Direction::new(secrets.tx.0, secrets.tx.1)?;
        let (_, rx) = Direction::new(secrets.rx.0, secrets.rx.1)?;
        let tls13 = kernel.protocol_version() == rustls::ProtocolVersion::TLSv1_3;
        Ok(Records { cipher, tls13, tx, rx, kernel: Some(kernel) })
    }

    /// Both directions under one made-up key (a fuzz target seals and
    /// opens its own records); no key update possible.
    #[doc(hidden)]
    pub fn for_fuzzing(tls13: bool, cipher: u8) -> Records {
        let cipher = match cipher % 3 {
            0 => Cipher::Aes128Gcm,
            1 => Cipher::Aes256Gcm,
            _ => Cipher::ChaCha20Poly1305,
        };
        let d = || Direction { key: [7; 32], iv: [9; 12], seq: 0 };
        Records { cipher, tls13, tx: d(), rx: d(), kernel: None }
    }

    /// Seal one record of any content type (fuzzing: alerts, key updates).
    #[doc(hidden)]
    pub fn seal_kind(&mut self, kind: u8, chunk: &[u8], wire: &mut Vec<u8>) -> Result<(), String> {
        self.seal_unchecked(kind, &chunk[..chunk.len().min(MAX_PLAIN)], wire)
    }

    fn kernel(&mut self) -> Result<&mut KernelConnection<ServerConnectionData>, String> {
        self.kernel.as_mut().ok_or_else(|| "tls_key_update_unsupported".to_string())
    }

    /// Encrypt `plain` as application data records onto `wire`.
    pub fn seal(&mut self, plain: &[u8], wire: &mut Vec<u8>) -> Result<(), String> {
        for chunk in plain.chunks(MAX_PLAIN) {
            self.seal_record(APPLICATION_DATA, chunk, wire)?;
        }
        Ok(())
    }

    /// A close_notify alert onto `wire`.
    pub fn close_notify(&mut self, wire: &mut Vec<u8>) -> Result<(), String> {
        self.seal_record(ALERT, &[1, 0], wire)
    }

    fn seal_record(&mut self, kind: u8, chunk: &[u8], wire: &mut Vec<u8>) -> Result<(), String> {
        if self.cipher != Cipher::ChaCha20Poly1305 && self.tx.seq >= AES_GCM_RECORDS {
            if !self.tls13 {
                return Err("tls_record_limit".into());
            }
            self.update_tx(wire)?;
        }
        self.seal_unchecked(kind, chunk, wire)
    }

    /// One record, whatever the key's record count.
    fn seal_unchecked(&mut self, kind: u8, chunk: &[u8], wire: &mut Vec<u8>) -> Result<(), String> {
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
                return Err("tls_encrypt_failed".into());
            }
        }
        self.tx.seq += 1;
        Ok(())
    }

    /// TLS 1.3: send a KeyUpdate (not requesting one back) under the old
    /// key, then switch to the next.
    fn update_tx(&mut self, wire: &mut Vec<u8>) -> Result<(), String> {
        self.seal_unchecked(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], wire)?;
        let (seq, secrets) = self.kernel()?.update_tx_secret().map_err(|e| failure::reason_of(&e))?;
        let (cipher, tx) = Direction::new(seq, secrets)?;
        if cipher != self.cipher {
            return Err("tls_cipher_changed".into());
        }
        self.tx = tx;
        Ok(())
    }

    /// Decrypt the whole records at the start of `incoming` into `buf`
    /// (application data), acting on alerts and key updates; handshake
    /// messages to send (a requested key update) go onto `wire`.
    pub fn open(&mut self, incoming: &mut [u8], buf: &mut [u8], wire: &mut Vec<u8>) -> Result<Opened, String> {
        let mut out = Opened::default();
        let mut key = self.rx.cipher(self.cipher);
        while !out.closed && incoming.len() - out.used >= HEADER {
            let at = out.used;
            let kind = incoming[at];
            let len = u16::from_be_bytes([incoming[at + 3], incoming[at + 4]]) as usize;
            if incoming[at + 1] != 3 || len > MAX_CIPHER {
                return Err(if len > MAX_CIPHER { "tls_record_overflow" } else { "tls_bad_message" }.into());
            }
            if incoming.len() - at < HEADER + len {
                break;
            }
            out.used += HEADER + len;
            let (header, body) = incoming[at..at + HEADER + len].split_at_mut(HEADER);
            let (inner, plain) = if self.tls13 {
                if kind != APPLICATION_DATA {
                    return Err("tls_bad_message".into());
                }
                let header: [u8; HEADER] = (&*header).try_into().expect("5 bytes");
                let plain =
                    key.open_in_place(Nonce::assume_unique_for_key(self.rx.nonce()), Aad::from(header), body).map_err(|_| "tls_decrypt_error".to_string())?;
                // The content type is the last non-zero byte (the rest is padding).
                let end = plain.iter().rposition(|b| *b != 0).ok_or("tls_bad_message")?;
                (plain[end], &plain[..end])
            } else {
                let explicit = if self.cipher == Cipher::ChaCha20Poly1305 { 0 } else { 8 };
                if body.len() < explicit + TAG {
                    return Err("tls_bad_message".into());
                }
                let mut nonce = self.rx.nonce();
                if explicit > 0 {
                    nonce[..4].copy_from_slice(&self.rx.iv[..4]);
                    nonce[4..].copy_from_slice(&body[..8]);
                }
                let aad = tls12_aad(self.rx.seq, kind, body.len() - explicit - TAG);
                let plain = key
                    .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut body[explicit..])
                    .map_err(|_| "tls_decrypt_error".to_string())?;
                (kind, &*plain)
            };
            self.rx.seq += 1;
            match inner {
                APPLICATION_DATA => {
                    let end = out.filled + plain.len();
                    let room = buf.get_mut(out.filled..end).ok_or("tls_record_overflow")?;
                    room.copy_from_slice(plain);
                    out.filled = end;
                }
                ALERT => match plain {
                    [_, 0] => out.closed = true,
                    [_, desc] => return Err(format!("tls_alert_{}", failure::alert_name(rustls::AlertDescription::from(*desc)))),
                    _ => return Err("tls_bad_message".into()),
                },
                HANDSHAKE if self.tls13 && plain.len() == 5 && plain[..4] == [KEY_UPDATE, 0, 0, 1] => {
                    let (seq, secrets) = self.kernel()?.update_rx_secret().map_err(|e| failure::reason_of(&e))?;
                    let (cipher, rx) = Direction::new(seq, secrets)?;
                    if cipher != self.cipher {
                        return Err("tls_cipher_changed".into());
                    }
                    self.rx = rx;
                    key = self.rx.cipher(self.cipher);
                    if plain[4] == 1 {
                        self.update_tx(wire)?;
                    }
                }
                // Renegotiation (TLS 1.2) and anything else after the
                // handshake is refused.
                HANDSHAKE => return Err("tls_unexpected_handshake".into()),
                _ => return Err("tls_bad_message".into()),
            }
        }
        Ok(out)
    }
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
    //! both ways, close_notify.
    use crate::net::Source;
    use crate::tls::conn::{TlsBufs, TlsRead};
    use rustls::crypto::ring as provider;
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn server_config(pki: &crate::tls::throwaway::Throwaway) -> Arc<rustls::ServerConfig> {
        let files = crate::tls::files::ServerTls {
            cert: pki.cert.clone(),
            key: pki.key.clone(),
            handshake_timeout_ms: 10_000,
            ticket_key: crate::tls::tickets::new_key().unwrap(),
            alpn_http: false,
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
        let mut tls = crate::tls::server::accept(config, 0).map_err(|e| e.to_string())?;
        let mut bufs = TlsBufs::default();
        // Room for one whole record (as a worker's buffer has); reads of
        // at most this much still cut records, which then spill.
        let mut buf = vec![0u8; 17_000];
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
                    Ok((0, _)) => break true,
                    Ok((n, _)) => plain.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(e) => return Err(e.to_string()),
                }
            };
            if let Some(done) = tls.take_finished() {
                done?;
                handed_over = tls.stage_name() == "records";
            }
            if !plain.is_empty() {
                tls.encrypt(&plain, &mut bufs.wire)?;
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
}
