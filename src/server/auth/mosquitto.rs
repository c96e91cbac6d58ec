//! mosquitto's own files, unchanged: `--mqtt-password-file` (as
//! `mosquitto_passwd` writes it) admits MQTT clients by user name and
//! password, `--mqtt-acl-file` decides what each may publish and receive.
//! A team moving from mosquitto points megaconn at the files it has.
//!
//! Who is let in, as mosquitto 2.0 decides it:
//! - with a password file, a CONNECT with a user name needs that user's
//!   password; one without a user name is let in only with
//!   `--mqtt-allow-anonymous` (mosquitto's `allow_anonymous`, off by
//!   default in 2.0); a refusal is CONNACK "not authorized" (5.0 0x87,
//!   3.1.1 code 5), counted in `auth_refused` by reason;
//! - without one, everyone is let in and the user name a client gives is
//!   taken as it is (the ACL's user), as mosquitto does with
//!   `allow_anonymous true`: give an ACL file a password file beside it.
//!
//! A user name then owns its client ids and kept sessions as a token's
//! `sub` does (`server/broker/sessions.rs`). What the ACL decides is in
//! `mosquitto/acl.rs`. Both files are read by the supervisor at start
//! (a bad one stops the start, naming file and line) and again on
//! SIGHUP: a file that does not parse is refused and the one in force
//! stays; a good one reaches every worker, and the connections of users
//! no longer in the password file are closed (5.0: DISCONNECT 0x98,
//! administrative action), as mosquitto closes them.

mod acl;
mod passwords;

pub(crate) use acl::{Subject, Want};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `--mqtt-password-file`, `--mqtt-acl-file`, `--mqtt-allow-anonymous`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FilesConfig {
    pub password_file: Option<PathBuf>,
    pub acl_file: Option<PathBuf>,
    pub allow_anonymous: bool,
}

impl FilesConfig {
    pub(crate) fn any(&self) -> bool {
        self.password_file.is_some() || self.acl_file.is_some()
    }
}

/// What the files say, parsed (what workers are given).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Files {
    passwords: Option<passwords::Passwords>,
    acl: Option<acl::Acl>,
    allow_anonymous: bool,
}

/// Why a CONNECT was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A user name the password file does not hold.
    UnknownUser,
    /// The user's password did not match (or none came).
    BadPassword,
    /// No user name, and anonymous clients are not allowed.
    Anonymous,
}

fn read(flag: &str, path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{flag} {}: cannot read it ({e}); give a file this user can read", path.display()))
}

impl Files {
    /// Read and check the files `cfg` names. Err names the flag, the
    /// file, the line and the fix.
    pub(crate) fn load(cfg: &FilesConfig) -> Result<Files, String> {
        let passwords = match &cfg.password_file {
            Some(p) => Some(passwords::Passwords::parse(&read("--mqtt-password-file", p)?).map_err(|e| format!("--mqtt-password-file {}: {e}", p.display()))?),
            None => None,
        };
        let acl = match &cfg.acl_file {
            Some(p) => Some(acl::Acl::parse(&read("--mqtt-acl-file", p)?).map_err(|e| format!("--mqtt-acl-file {}: {e}", p.display()))?),
            None => None,
        };
        Ok(Files { passwords, acl, allow_anonymous: cfg.allow_anonymous })
    }

    /// What the files hold, for the log: "N users, M ACL rules and P patterns".
    pub(crate) fn describe(&self) -> String {
        let users = self.passwords.as_ref().map_or("no password file".to_string(), |p| format!("{} users", p.len()));
        let acl = self.acl.as_ref().map_or("no ACL file".to_string(), |a| {
            let (rules, patterns) = a.counts();
            format!("{rules} ACL rules and {patterns} patterns")
        });
        format!("{users}, {acl}")
    }

    /// Let a CONNECT in: Ok(the user it is, None for an anonymous one).
    pub(crate) fn login<'a>(&self, user: Option<&'a str>, password: Option<&[u8]>) -> Result<Option<&'a str>, Refused> {
        let Some(p) = &self.passwords else { return Ok(user) };
        match user {
            None if self.allow_anonymous => Ok(None),
            None => Err(Refused::Anonymous),
            Some(u) => match p.check(u, password) {
                Ok(()) => Ok(Some(u)),
                Err(passwords::Refusal::UnknownUser) => Err(Refused::UnknownUser),
                Err(passwords::Refusal::BadPassword) => Err(Refused::BadPassword),
            },
        }
    }

    /// Whether `user` may still be connected (it is in the password
    /// file, or there is none).
    pub(crate) fn knows(&self, user: &str) -> bool {
        self.passwords.as_ref().is_none_or(|p| p.check(user, None) != Err(passwords::Refusal::UnknownUser))
    }

    /// Whether `who` may `want` `topic` (no ACL file: everything).
    pub(crate) fn allows(&self, who: Subject<'_>, topic: &str, want: Want) -> bool {
        self.acl.as_ref().is_none_or(|a| a.allows(who, topic, want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a password file: users by password, anonymous clients only
    /// when allowed; without one, the name given is taken.
    #[test]
    fn who_is_let_in() {
        let dir = std::env::temp_dir().join(format!("megaconn-mosquitto-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("passwd");
        // PBKDF2 of "pw" as mosquitto_passwd writes it (101 iterations).
        let salt = [1u8; 12];
        let mut hash = [0u8; 64];
        ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA512, std::num::NonZeroU32::new(101).unwrap(), &salt, b"pw", &mut hash);
        use base64::Engine;
        let e = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        std::fs::write(&pw, format!("u:$7$101${}${}\n", e(&salt), e(&hash))).unwrap();
        let mut cfg = FilesConfig { password_file: Some(pw.clone()), ..Default::default() };
        let f = Files::load(&cfg).unwrap();
        assert_eq!(f.login(Some("u"), Some(b"pw")), Ok(Some("u")));
        assert_eq!(f.login(Some("u"), Some(b"no")), Err(Refused::BadPassword));
        assert_eq!(f.login(Some("v"), Some(b"pw")), Err(Refused::UnknownUser));
        assert_eq!(f.login(None, None), Err(Refused::Anonymous));
        assert!(f.knows("u") && !f.knows("v"));
        cfg.allow_anonymous = true;
        assert_eq!(Files::load(&cfg).unwrap().login(None, None), Ok(None));
        let open = Files::load(&FilesConfig::default()).unwrap();
        assert_eq!(open.login(Some("anyone"), None), Ok(Some("anyone")));
        let missing = FilesConfig { acl_file: Some(dir.join("nope")), ..Default::default() };
        let err = Files::load(&missing).unwrap_err();
        assert!(err.starts_with("--mqtt-acl-file") && err.contains("cannot read it"), "{err}");
        std::fs::write(&pw, "u:plain\n").unwrap();
        let err = Files::load(&FilesConfig { password_file: Some(pw), ..Default::default() }).unwrap_err();
        assert!(err.contains("line 1 (user 'u')") && err.contains("mosquitto_passwd"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
