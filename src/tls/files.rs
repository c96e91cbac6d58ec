//! Certificates and keys from PEM files, and the rustls server config
//! built from them (TLS 1.3 and 1.2, ALPN, shared session tickets).

use super::tickets::SharedTickets;
use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Default `--handshake-timeout`.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a server worker needs to serve TLS (sent in its config).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ServerTls {
    /// PEM: the certificate, then its chain.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: PathBuf,
    /// A connection that has not finished its handshake by then is closed
    /// (`tls_timeout`).
    pub handshake_timeout_ms: u64,
    /// Session ticket key (hex), the same in every worker.
    pub ticket_key: String,
    /// Offer `http/1.1` in ALPN (the http and ws protocols).
    pub alpn_http: bool,
    /// The certificate chain and key in force, as the supervisor read and
    /// checked them last (at start, then at each reload that succeeded).
    /// A worker builds its config from these bytes, never from the files:
    /// a replacement started while the files on disk are bad serves the
    /// certificate in force instead of failing. None: read the files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pem: Option<Pem>,
}

/// A certificate chain and its private key as one PEM text. Its Debug
/// shows its size only: a key never reaches a log.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Pem(pub String);

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pem({} bytes)", self.0.len())
    }
}

/// Read `tls`'s certificate and key files into one PEM text and check
/// they make a usable certificate: what [`ServerTls::pem`] holds.
pub(crate) fn read_pem(tls: &ServerTls) -> Result<Pem> {
    let cert = std::fs::read_to_string(&tls.cert).with_context(|| format!("cannot read the certificate file {}", tls.cert.display()))?;
    let key = std::fs::read_to_string(&tls.key).with_context(|| format!("cannot read the key file {} as text", tls.key.display()))?;
    let pem = Pem(format!("{}\n{}\n", cert.trim_end(), key.trim_end()));
    server_config(&ServerTls { pem: Some(pem.clone()), ..tls.clone() })?;
    Ok(pem)
}

/// The certificate chain in `path`, with an error naming the fix.
pub(crate) fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read the certificate file {}", path.display()))?;
    chain_of(&bytes, path)
}

/// The certificates in `bytes` (read from `path`), in order.
fn chain_of(bytes: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} is not PEM: expected -----BEGIN CERTIFICATE----- blocks", path.display()))?;
    if chain.is_empty() {
        bail!("no certificate in {}: expected a PEM file with -----BEGIN CERTIFICATE----- (the server's first, then its chain)", path.display());
    }
    Ok(chain)
}

/// The private key in `path`.
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read the key file {}", path.display()))?;
    key_of(&bytes, path)
}

/// The private key in `bytes` (read from `path`).
fn key_of(bytes: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| {
        anyhow::anyhow!("no private key in {} ({e:?}): expected PEM -----BEGIN PRIVATE KEY----- (PKCS#8), RSA PRIVATE KEY or EC PRIVATE KEY", path.display())
    })
}

/// The rustls server config for `tls` (both versions, the ring provider).
pub(crate) fn server_config(tls: &ServerTls) -> Result<Arc<rustls::ServerConfig>> {
    let (chain, key) = match &tls.pem {
        Some(pem) => (chain_of(pem.0.as_bytes(), &tls.cert)?, key_of(pem.0.as_bytes(), &tls.key)?),
        None => (read_chain(&tls.cert)?, read_key(&tls.key)?),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| {
            format!("{} and {} do not make a usable certificate (does the key belong to the certificate?)", tls.cert.display(), tls.key.display())
        })?;
    if tls.alpn_http {
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    }
    cfg.ticketer = Arc::new(SharedTickets::from_hex(&tls.ticket_key)?);
    // Tickets are the only resumption state: nothing kept per session here.
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 1;
    // After the handshake the keys move to our record layer (records.rs).
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// When the certificate and key files last changed (None: unreadable).
pub(crate) fn stamp(tls: &ServerTls) -> Option<(SystemTime, SystemTime)> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((m(&tls.cert)?, m(&tls.key)?))
}
