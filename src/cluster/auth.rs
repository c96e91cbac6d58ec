//! How a node proves itself to NATS: user and password, a token, an nkey
//! seed or a creds file (JWT + nkey), and TLS with a custom CA and a
//! client certificate. Every secret comes from a file (never only from the
//! command line, where `ps` shows it); credentials written in the URL
//! (`nats://user:pass@host:4222`, or `nats://token@host:4222`) are honoured
//! too, and every URL this node shows is stripped of them ([`redact`]).

use std::fmt;
use std::path::PathBuf;

/// The NATS credentials of a node. Debug never shows a secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct NatsAuth {
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// An nkey seed (`SU...`).
    pub nkey_seed: Option<String>,
    /// A creds file's contents (user JWT and nkey seed).
    pub creds: Option<String>,
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and its key.
    pub tls_cert: Option<(PathBuf, PathBuf)>,
}

impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |o: bool| if o { "set" } else { "-" };
        f.debug_struct("NatsAuth")
            .field("user", &self.user)
            .field("password", &set(self.password.is_some()))
            .field("token", &set(self.token.is_some()))
            .field("nkey_seed", &set(self.nkey_seed.is_some()))
            .field("creds", &set(self.creds.is_some()))
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .finish()
    }
}

/// A secret read from a file, as the command line holds it: its Debug
/// never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// [`read_secret`], kept as a [`Secret`].
pub(crate) fn secret_file(flag: &'static str) -> impl Fn(&str) -> Result<Secret, String> + Clone + Send + Sync + 'static {
    move |path| read_secret(flag, path).map(Secret)
}

/// Read a secret file for `flag`: its contents, trimmed (a trailing newline
/// from `echo` or a Secret is not part of the secret).
pub(crate) fn read_secret(flag: &str, path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{flag} '{path}': {e}; give a readable file holding the secret (e.g. a mounted Kubernetes Secret)"))?;
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(format!("{flag} '{path}' is empty; write the secret into it"));
    }
    Ok(text)
}

/// A file that must exist and be readable (a certificate or key).
pub(crate) fn readable(flag: &str, path: &str) -> Result<PathBuf, String> {
    std::fs::File::open(path).map_err(|e| format!("{flag} '{path}': {e}; give a readable PEM file"))?;
    Ok(PathBuf::from(path))
}

/// An nkey seed file: one user seed (`SU...`).
pub(crate) fn read_nkey(flag: &str, path: &str) -> Result<String, String> {
    let seed = read_secret(flag, path)?;
    if !seed.starts_with("SU") {
        return Err(format!("{flag} '{path}' does not hold a user nkey seed (it starts with SU); make one with `nk -gen user > node.nk`"));
    }
    Ok(seed)
}

/// A creds file (as `nsc` writes it): a user JWT and its nkey seed.
pub(crate) fn read_creds(flag: &str, path: &str) -> Result<String, String> {
    let text = read_secret(flag, path)?;
    if !text.contains("BEGIN NATS USER JWT") || !text.contains("BEGIN USER NKEY SEED") {
        return Err(format!("{flag} '{path}' is not a NATS creds file (a user JWT and an nkey seed); make one with `nsc generate creds`"));
    }
    Ok(text)
}

impl NatsAuth {
    /// Credentials the URL carries, for what the flags leave unset:
    /// `user:pass@` is a user and password, a lone `token@` a token.
    pub(crate) fn with_url_credentials(mut self, url: &str) -> NatsAuth {
        let Some(addr) = url.split(',').filter_map(|u| u.trim().parse::<async_nats::ServerAddr>().ok()).find(|a| a.has_user_pass()) else { return self };
        match (addr.username(), addr.password()) {
            (Some(u), Some(p)) if self.user.is_none() && self.password.is_none() => {
                self.user = Some(u.to_string());
                self.password = Some(p.to_string());
            }
            (Some(t), None) if self.token.is_none() && self.user.is_none() => self.token = Some(t.to_string()),
            _ => {}
        }
        self
    }

    /// Check the combination: one way to authenticate, a password with a
    /// user, TLS files with a tls:// or TLS-requiring server.
    pub(crate) fn check(&self) -> Result<(), String> {
        let ways = [self.password.is_some() || self.user.is_some(), self.token.is_some(), self.nkey_seed.is_some(), self.creds.is_some()];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err("give one way to authenticate to NATS: --cluster-user with --cluster-password-file, --cluster-token-file, --cluster-nkey-file or --cluster-creds".into());
        }
        if self.user.is_some() != self.password.is_some() {
            return Err("--cluster-user and --cluster-password-file go together (or write nats://USER:PASS@HOST:PORT)".into());
        }
        Ok(())
    }

    /// The options that carry these credentials.
    pub(crate) fn apply(&self, mut opts: async_nats::ConnectOptions) -> Result<async_nats::ConnectOptions, String> {
        if let (Some(u), Some(p)) = (&self.user, &self.password) {
            opts = opts.user_and_password(u.clone(), p.clone());
        }
        if let Some(t) = &self.token {
            opts = opts.token(t.clone());
        }
        if let Some(s) = &self.nkey_seed {
            opts = opts.nkey(s.clone());
        }
        if let Some(c) = &self.creds {
            opts = opts.credentials(c).map_err(|e| format!("--cluster-creds: {e}"))?;
        }
        if let Some(ca) = &self.tls_ca {
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.tls_cert {
            opts = opts.add_client_certificate(cert.clone(), key.clone()).require_tls(true);
        }
        Ok(opts)
    }
}

/// `url` (one or a comma-separated list) without credentials: what this
/// node shows in /healthz, logs, events and errors.
pub(crate) fn redact(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            // Everything before the last `@` is credentials, whatever it
            // holds (a password may contain `/`, `?` or `@`; a NATS URL
            // has no path).
            match one.split_once("://") {
                Some((scheme, rest)) => match rest.rsplit_once('@') {
                    Some((_, host)) => format!("{scheme}://***@{host}"),
                    None => one.to_string(),
                },
                None => match one.rsplit_once('@') {
                    Some((_, host)) => format!("***@{host}"),
                    None => one.to_string(),
                },
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_and_lend_them_to_the_link() {
        assert_eq!(redact("nats://u:secret@h:4222"), "nats://***@h:4222");
        assert_eq!(redact("nats://tok@h:4222, tls://h2:4222"), "nats://***@h:4222,tls://h2:4222");
        assert_eq!(redact("nats://h:4222"), "nats://h:4222");
        assert_eq!(redact("nats://u:pa/ss?w@rd@h:4222"), "nats://***@h:4222", "a password with / ? @");
        assert_eq!(redact("u:secret@h:4222"), "***@h:4222", "no scheme");
        let a = NatsAuth::default().with_url_credentials("nats://h:1,nats://u:p@h:4222");
        assert_eq!((a.user.as_deref(), a.password.as_deref()), (Some("u"), Some("p")));
        let a = NatsAuth::default().with_url_credentials("nats://tok@h:4222");
        assert_eq!(a.token.as_deref(), Some("tok"));
        let flags = NatsAuth { token: Some("t".into()), ..Default::default() };
        assert!(flags.with_url_credentials("nats://u:p@h:4222").check().is_err(), "two ways at once");
        let a = NatsAuth { password: Some("p".into()), ..Default::default() };
        assert!(a.check().unwrap_err().contains("--cluster-user"));
        assert!(!format!("{:?}", NatsAuth { password: Some("hunter2".into()), ..Default::default() }).contains("hunter2"));
    }
}
