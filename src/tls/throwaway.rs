//! A throwaway CA and a certificate it signed, for `bench --tls`: the
//! main job runs end to end over TLS with nothing to set up. Written to a
//! private directory that goes when the value is dropped.

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::path::PathBuf;

/// The name the certificate is for (and the client checks).
pub(crate) const SERVER_NAME: &str = "localhost";

#[derive(Debug)]
pub(crate) struct Throwaway {
    dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Throwaway {
    /// A CA, and a certificate for `localhost` and `ip` signed by it
    /// (ECDSA P-256, the cheapest handshake); it lives as long as the run.
    pub(crate) fn new(ip: std::net::Ipv4Addr) -> Result<Throwaway> {
        // One directory per value: two in one process (the unit tests run
        // in parallel) must not remove each other's files when dropped.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("megaconn-tls-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "megaconn throwaway CA");
        let ca_key = KeyPair::generate()?;
        let ca = ca_params.self_signed(&ca_key)?;
        let mut leaf_params = CertificateParams::new(vec![SERVER_NAME.to_string(), ip.to_string()])?;
        leaf_params.distinguished_name.push(DnType::CommonName, SERVER_NAME);
        let leaf_key = KeyPair::generate()?;
        let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key)?;
        let t = Throwaway { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem"), dir };
        std::fs::write(&t.ca, ca.pem())?;
        std::fs::write(&t.cert, leaf.pem())?;
        std::fs::write(&t.key, leaf_key.serialize_pem())?;
        Ok(t)
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
