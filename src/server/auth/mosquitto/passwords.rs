//! mosquitto's `password_file`, as `mosquitto_passwd` writes it: one
//! `user:HASH` per line, HASH `$7$ITERATIONS$SALT$HASH` (PBKDF2 with
//! HMAC-SHA512, the default since mosquitto 2.0) or `$6$SALT$HASH` (one
//! SHA-512 of the password and the salt, 1.x files), salt (12 bytes) and
//! hash (64 bytes) in base64; `#` starts a comment line.
//!
//! Where mosquitto drops a line it cannot read with a warning in its log
//! (and so locks that user out without a word to the operator), this
//! parser refuses the whole file, naming the line and the fix: at start
//! the server does not start, on SIGHUP the users in force stay.
//!
//! A password is checked as mosquitto checks it (`security_default.c`):
//! the hash of what the client sent, compared in constant time.

use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::num::NonZeroU32;

/// Bytes of salt and of hash a `mosquitto_passwd` line carries.
const SALT_BYTES: usize = 12;
const HASH_BYTES: usize = 64;
/// Most PBKDF2 iterations a line may ask (mosquitto_passwd's default is
/// 101): every CONNECT of that user costs them on a worker's thread.
pub(crate) const MAX_ITERATIONS: u32 = 1_000_000;

/// One user's stored hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Hash {
    /// `$6$`: SHA-512(password ‖ salt).
    Sha512 { salt: Vec<u8>, hash: Vec<u8> },
    /// `$7$`: PBKDF2-HMAC-SHA512(password, salt, iterations), 64 bytes.
    Pbkdf2 { iterations: u32, salt: Vec<u8>, hash: Vec<u8> },
}

impl Hash {
    /// Whether `password` is the one this hash was made of.
    pub(crate) fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Sha512 { salt, hash } => {
                let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
                ctx.update(password);
                ctx.update(salt);
                same(ctx.finish().as_ref(), hash)
            }
            Hash::Pbkdf2 { iterations, salt, hash } => {
                let Some(n) = NonZeroU32::new(*iterations) else { return false };
                ring::pbkdf2::verify(ring::pbkdf2::PBKDF2_HMAC_SHA512, n, salt, password, hash).is_ok()
            }
        }
    }
}

/// Equal bytes, in time that depends on their length only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The users of a password file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Passwords {
    users: HashMap<String, Hash>,
}

/// Why a user was not let in (the label of the refusal counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No such user in the file.
    UnknownUser,
    /// The user is there; no password came, or another one.
    BadPassword,
}

impl Passwords {
    /// Parse a password file's text; Err: "line N: what is wrong; the fix".
    pub(crate) fn parse(text: &str) -> Result<Passwords, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                return Err(format!("line {n}: not 'user:hash'; make each line with mosquitto_passwd"));
            };
            let user = user.trim();
            if user.is_empty() {
                return Err(format!("line {n}: an empty user name; make each line with mosquitto_passwd"));
            }
            let hash = parse_hash(hash.trim()).map_err(|e| format!("line {n} (user '{user}'): {e}; set the password again with mosquitto_passwd"))?;
            if users.insert(user.to_string(), hash).is_some() {
                return Err(format!("line {n}: user '{user}' is in the file twice; keep one line per user"));
            }
        }
        Ok(Passwords { users })
    }

    pub(crate) fn len(&self) -> usize {
        self.users.len()
    }

    /// Let `user` in with `password`, as mosquitto does.
    pub(crate) fn check(&self, user: &str, password: Option<&[u8]>) -> Result<(), Refusal> {
        let hash = self.users.get(user).ok_or(Refusal::UnknownUser)?;
        match password {
            Some(p) if hash.verify(p) => Ok(()),
            _ => Err(Refusal::BadPassword),
        }
    }
}

/// `$7$ITERATIONS$SALT$HASH` or `$6$SALT$HASH`.
fn parse_hash(s: &str) -> Result<Hash, String> {
    let b64 = |what: &str, part: &str, len: usize| -> Result<Vec<u8>, String> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(part).map_err(|e| format!("its {what} is not base64 ({e})"))?;
        if bytes.len() != len {
            return Err(format!("its {what} has {} bytes where mosquitto_passwd writes {len}", bytes.len()));
        }
        Ok(bytes)
    };
    let parts: Vec<&str> = s.split('$').collect();
    match parts.as_slice() {
        ["", "7", iterations, salt, hash] => {
            let iterations: u32 = iterations.parse().map_err(|_| format!("'{iterations}' is not a number of iterations"))?;
            if !(1..=MAX_ITERATIONS).contains(&iterations) {
                return Err(format!("{iterations} iterations is outside 1..={MAX_ITERATIONS}"));
            }
            Ok(Hash::Pbkdf2 { iterations, salt: b64("salt", salt, SALT_BYTES)?, hash: b64("hash", hash, HASH_BYTES)? })
        }
        ["", "6", salt, hash] => Ok(Hash::Sha512 { salt: b64("salt", salt, SALT_BYTES)?, hash: b64("hash", hash, HASH_BYTES)? }),
        ["", kind, ..] => Err(format!("hash type ${kind}$ is not one mosquitto writes ($6$ or $7$)")),
        _ => Err("not a mosquitto hash ($7$... or $6$...): a plain password is not accepted".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    /// A `$7$` line as mosquitto_passwd makes it: PBKDF2 of the password.
    fn pbkdf2_line(user: &str, password: &str, iterations: u32) -> String {
        let salt = [7u8; SALT_BYTES];
        let mut hash = [0u8; HASH_BYTES];
        ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA512, NonZeroU32::new(iterations).unwrap(), &salt, password.as_bytes(), &mut hash);
        format!("{user}:$7${iterations}${}${}", b64(&salt), b64(&hash))
    }

    /// Both hash kinds let the right password in and no other; a user
    /// not in the file and a CONNECT without a password are refused.
    #[test]
    fn passwords_are_checked_against_both_hash_kinds() {
        let salt = [3u8; SALT_BYTES];
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
        ctx.update(b"old secret");
        ctx.update(&salt);
        let six = format!("legacy:$6${}${}", b64(&salt), b64(ctx.finish().as_ref()));
        let text = format!("# users\n{}\n\n{six}\n", pbkdf2_line("alice", "s3cret", 101));
        let p = Passwords::parse(&text).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p.check("alice", Some(b"s3cret")), Ok(()));
        assert_eq!(p.check("alice", Some(b"S3cret")), Err(Refusal::BadPassword));
        assert_eq!(p.check("alice", None), Err(Refusal::BadPassword));
        assert_eq!(p.check("legacy", Some(b"old secret")), Ok(()));
        assert_eq!(p.check("legacy", Some(b"old secre")), Err(Refusal::BadPassword));
        assert_eq!(p.check("bob", Some(b"s3cret")), Err(Refusal::UnknownUser));
    }

    /// A line that is not what mosquitto_passwd writes refuses the file,
    /// naming the line and the fix.
    #[test]
    fn a_bad_line_is_named() {
        let good = pbkdf2_line("alice", "x", 101);
        for (text, says) in [
            ("alice".to_string(), "line 1: not 'user:hash'"),
            ("alice:plain".to_string(), "a plain password is not accepted"),
            ("alice:$5$abc$def".to_string(), "hash type $5$"),
            ("alice:$7$0$AAAA$BBBB".to_string(), "0 iterations"),
            ("alice:$7$101$!!!$BBBB".to_string(), "salt is not base64"),
            ("alice:$6$AAAA$BBBB".to_string(), "salt has 3 bytes"),
            (format!("{good}\n{good}"), "line 2: user 'alice' is in the file twice"),
            (":$6$x$y".to_string(), "an empty user name"),
        ] {
            let e = Passwords::parse(&text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
