//! The client's TLS: what the flags ask for ([`ClientTls`], sent to every
//! worker), the rustls configs a worker builds from it, and session
//! resumption modelled on real clients: a device's first connection is a
//! full handshake, its reconnects resume with a ticket from an earlier one.

use super::conn::TlsConn;
use anyhow::{anyhow, bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue, UnbufferedClientConnection};
use rustls::{DigitallySignedStruct, NamedGroup, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// One client connection's TLS state.
pub(crate) type ClientConn = TlsConn<UnbufferedClientConnection>;

/// Which handshakes may resume a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub(crate) enum Resume {
    /// Reconnects and churn reopens resume; first connections do full
    /// handshakes (as many distinct devices would).
    Reconnect,
    /// Every connection resumes when a ticket is at hand.
    Always,
    /// Full handshakes only (measures the handshake CPU ceiling).
    Never,
}

/// `--tls-versions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Version {
    Tls12,
    Tls13,
}

/// What `--tls`, `wss://` and `https://` ask of the client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClientTls {
    /// PEM file of the CAs to trust; None: the system's.
    pub ca: Option<PathBuf>,
    /// Accept any certificate (the handshake still authenticates the key).
    pub insecure: bool,
    /// Name sent in SNI and checked against the certificate.
    pub server_name: String,
    pub versions: Vec<Version>,
    /// ALPN protocols offered (`http/1.1` for http and ws).
    pub alpn: Vec<String>,
    pub resume: Resume,
}

impl Default for ClientTls {
    fn default() -> ClientTls {
        ClientTls {
            ca: None,
            insecure: false,
            server_name: String::new(),
            versions: vec![Version::Tls12, Version::Tls13],
            alpn: Vec::new(),
            resume: Resume::Reconnect,
        }
    }
}

/// ALPN a protocol offers: `http/1.1` for HTTP and WebSocket (what
/// browsers offer), nothing for the others.
pub(crate) fn alpn_for(protocol: crate::proto::Protocol) -> Vec<String> {
    match protocol {
        crate::proto::Protocol::Http | crate::proto::Protocol::Ws => vec!["http/1.1".into()],
        _ => Vec::new(),
    }
}

/// Parse `--tls-versions 1.2,1.3`.
pub(crate) fn parse_versions(s: &str) -> Result<Vec<Version>, String> {
    let mut out = Vec::new();
    for v in s.split(',').map(str::trim) {
        let v = match v {
            "1.2" => Version::Tls12,
            "1.3" => Version::Tls13,
            other => return Err(format!("unknown TLS version {other:?}: use 1.2, 1.3 or 1.2,1.3")),
        };
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Most TLS 1.3 tickets a worker keeps for reconnects (each ~0.3-1 KB).
const MAX_TICKETS: usize = 16_384;

/// The rustls configs of one client worker: `first` for a connection's
/// first handshake, `again` for reconnects (they differ in whether they
/// may resume), and the server name.
pub(crate) struct Configs {
    pub first: Arc<rustls::ClientConfig>,
    pub again: Arc<rustls::ClientConfig>,
    pub name: ServerName<'static>,
}

impl Configs {
    pub(crate) fn new(t: &ClientTls) -> Result<Configs> {
        let name = ServerName::try_from(t.server_name.clone())
            .map_err(|_| anyhow!("--tls-server-name {:?} is neither a DNS name nor an IP address", t.server_name))?;
        let pool = Arc::new(TicketPool::default());
        let (first_store, again_store): (Store, Store) = match t.resume {
            Resume::Never => (None, None),
            Resume::Always => (Some(pool.clone()), Some(pool)),
            Resume::Reconnect => (Some(Arc::new(FillOnly(pool.clone()))), Some(pool)),
        };
        Ok(Configs { first: Arc::new(config(t, first_store)?), again: Arc::new(config(t, again_store)?), name })
    }

    /// A new connection's TLS state (its ClientHello not yet written).
    pub(crate) fn connect(&self, again: bool) -> Result<Box<ClientConn>, String> {
        let config = if again { &self.again } else { &self.first };
        UnbufferedClientConnection::new(config.clone(), self.name.clone()).map(TlsConn::new).map_err(|e| super::reason_of(&e))
    }
}

/// Where a config keeps and finds tickets (None: it never resumes).
type Store = Option<Arc<dyn ClientSessionStore>>;

fn config(t: &ClientTls, store: Store) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = t
        .versions
        .iter()
        .map(|v| match v {
            Version::Tls12 => &rustls::version::TLS12,
            Version::Tls13 => &rustls::version::TLS13,
        })
        .collect();
    if versions.is_empty() {
        bail!("--tls-versions names no version: use 1.2, 1.3 or 1.2,1.3");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let mut cfg = if t.insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))).with_no_client_auth()
    } else {
        builder.with_root_certificates(roots(t.ca.as_ref())?).with_no_client_auth()
    };
    cfg.alpn_protocols = t.alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    cfg.resumption = match store {
        Some(s) => rustls::client::Resumption::store(s),
        None => rustls::client::Resumption::disabled(),
    };
    Ok(cfg)
}

/// The CAs in `--tls-ca`, else the system's trust store.
fn roots(ca: Option<&PathBuf>) -> Result<rustls::RootCertStore> {
    let mut store = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for c in super::files::read_chain(path).context("--tls-ca")? {
                store.add(c).with_context(|| format!("--tls-ca {}: a certificate rustls cannot use as a trust anchor", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = store.add(c);
            }
            if store.is_empty() {
                bail!("no CA certificates found on this system: give the server's CA with --tls-ca FILE (or --insecure to skip verification)");
            }
        }
    }
    Ok(store)
}

/// `--insecure`: any certificate is accepted; the server still proves it
/// holds the key of the one it sent.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Tickets a worker's handshakes received, for later handshakes to
/// resume with: many per server (rustls's own cache keeps 8, too few for
/// thousands of reconnects at once), bounded.
#[derive(Debug, Default)]
struct TicketPool {
    by_name: Mutex<HashMap<ServerName<'static>, Tickets>>,
}

#[derive(Debug, Default)]
struct Tickets {
    kx: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    tls13: VecDeque<Tls13ClientSessionValue>,
}

impl TicketPool {
    fn with<R>(&self, name: &ServerName<'_>, f: impl FnOnce(&mut Tickets) -> R) -> R {
        let mut map = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(name) && map.len() >= 16 {
            map.clear();
        }
        f(map.entry(name.to_owned()).or_default())
    }
}

impl ClientSessionStore for TicketPool {
    fn set_kx_hint(&self, name: ServerName<'static>, group: NamedGroup) {
        self.with(&name, |t| t.kx = Some(group));
    }
    fn kx_hint(&self, name: &ServerName<'_>) -> Option<NamedGroup> {
        self.with(name, |t| t.kx)
    }
    fn set_tls12_session(&self, name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.with(&name, |t| t.tls12 = Some(value));
    }
    fn tls12_session(&self, name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.with(name, |t| t.tls12.clone())
    }
    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.with(name, |t| t.tls12 = None);
    }
    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: Tls13ClientSessionValue) {
        self.with(&name, |t| {
            if t.tls13.len() >= MAX_TICKETS {
                t.tls13.pop_front();
            }
            t.tls13.push_back(value);
        });
    }
    fn take_tls13_ticket(&self, name: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.with(name, |t| t.tls13.pop_back())
    }
}

/// A first handshake's store: it fills the pool, never resumes from it.
#[derive(Debug)]
struct FillOnly(Arc<TicketPool>);

impl ClientSessionStore for FillOnly {
    fn set_kx_hint(&self, name: ServerName<'static>, group: NamedGroup) {
        self.0.set_kx_hint(name, group)
    }
    fn kx_hint(&self, name: &ServerName<'_>) -> Option<NamedGroup> {
        self.0.kx_hint(name)
    }
    fn set_tls12_session(&self, name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.0.set_tls12_session(name, value)
    }
    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        None
    }
    fn remove_tls12_session(&self, _: &ServerName<'static>) {}
    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: Tls13ClientSessionValue) {
        self.0.insert_tls13_ticket(name, value)
    }
    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_or_say_why_not() {
        assert_eq!(parse_versions("1.3").unwrap(), vec![Version::Tls13]);
        assert_eq!(parse_versions("1.2, 1.3,1.2").unwrap(), vec![Version::Tls12, Version::Tls13]);
        assert!(parse_versions("1.1").unwrap_err().contains("1.2, 1.3"));
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let t = ClientTls { ca: Some("/nonexistent/ca.pem".into()), server_name: "localhost".into(), ..Default::default() };
        assert!(format!("{:#}", Configs::new(&t).err().unwrap()).contains("cannot read"));
        let dir = std::env::temp_dir().join(format!("megaconn-ca-{}", std::process::id()));
        std::fs::write(&dir, "not a certificate").unwrap();
        let t = ClientTls { ca: Some(dir.clone()), server_name: "localhost".into(), ..Default::default() };
        let e = format!("{:#}", Configs::new(&t).err().unwrap());
        std::fs::remove_file(&dir).unwrap();
        assert!(e.contains("--tls-ca") && e.contains("no certificate in"), "{e}");
        let t = ClientTls { server_name: "bad name!".into(), insecure: true, ..Default::default() };
        assert!(format!("{:#}", Configs::new(&t).err().unwrap()).contains("--tls-server-name"));
    }
}
