//! Who a connection is (`server --auth jwt`): a JSON Web Token checked
//! with the `jsonwebtoken` crate against the key the operator gave, its
//! claims (`sub`, `exp`, `topics`, `info`, `admin`) and why a token was
//! refused, as a counter name.
//!
//! The key decides the algorithms: a secret verifies HS256/384/512 only, a
//! public key (PEM) or a JWKS verifies only its own family (RS*/PS*, ES*,
//! EdDSA). A token whose header names another algorithm is refused before
//! its signature is looked at, so `alg: none` and the HS/RS confusion
//! (an RSA public key used as an HMAC secret) cannot pass. `exp` and `sub`
//! are required; `exp` and `nbf` are checked with no leeway, because the
//! connection is closed at `exp` too.

use crate::server::close::Close;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Longest token accepted (a WebSocket handshake head is bounded anyway).
pub(crate) const MAX_TOKEN: usize = 8 * 1024;
/// Shortest HMAC secret accepted: 256 bits, as RFC 7518 §3.2 asks for HS256.
pub(crate) const MIN_SECRET: usize = 32;

/// The key material, as read from the operator's file (it travels to the
/// workers inside their configuration, on their stdin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum JwtKey {
    /// `--jwt-secret-file`: the HMAC secret (the file's bytes, without a
    /// trailing newline).
    Secret(Vec<u8>),
    /// `--jwt-public-key-file`: an RSA, EC or Ed25519 public key (PEM).
    PublicPem(String),
    /// `--jwt-jwks-file`: a JSON Web Key Set; a token's `kid` picks its key.
    Jwks(String),
}

impl JwtKey {
    /// Read `--jwt-secret-file`.
    pub(crate) fn read_secret(path: &str) -> Result<JwtKey, String> {
        let make = format!("head -c 48 /dev/urandom | base64 > {path}; HS256 needs at least {MIN_SECRET} bytes");
        crate::values::secret_file("--jwt-secret-file", path, MIN_SECRET, &make).map(JwtKey::Secret)
    }

    /// Read `--jwt-public-key-file` and check it is a key we can use.
    pub(crate) fn read_public(path: &str) -> Result<JwtKey, String> {
        let pem = String::from_utf8(read(path, "--jwt-public-key-file")?).map_err(|_| format!("--jwt-public-key-file {path} is not PEM text"))?;
        let key = JwtKey::PublicPem(pem);
        Verifier::new(&key, &Expected::default()).map_err(|e| format!("--jwt-public-key-file {path}: {e}"))?;
        Ok(key)
    }

    /// Read `--jwt-jwks-file` and check every key in it.
    pub(crate) fn read_jwks(path: &str) -> Result<JwtKey, String> {
        let text = String::from_utf8(read(path, "--jwt-jwks-file")?).map_err(|_| format!("--jwt-jwks-file {path} is not JSON text"))?;
        let key = JwtKey::Jwks(text);
        Verifier::new(&key, &Expected::default()).map_err(|e| format!("--jwt-jwks-file {path}: {e}"))?;
        Ok(key)
    }
}

fn read(path: &str, flag: &str) -> Result<Vec<u8>, String> {
    std::fs::read(Path::new(path)).map_err(|e| format!("{flag} {path}: cannot read it ({e})"))
}

/// `--jwt-audience` and `--jwt-issuer`: the `aud` and `iss` a token must
/// carry. With a key shared by many services (a JWKS from one identity
/// provider), they are what tells this server's tokens from the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Expected {
    pub audience: Option<String>,
    pub issuer: Option<String>,
}

/// What a valid token says about its bearer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Claims {
    /// The user.
    pub sub: String,
    /// Unix seconds after which the token (and the connection) ends.
    pub exp: u64,
    /// Patterns of the topics the bearer may subscribe and publish to: a
    /// name, a prefix ending in `*` (`chat.*`), or `*` for every topic
    /// (what an MQTT filter may match: `auth/scope.rs`).
    #[serde(default)]
    pub topics: Vec<String>,
    /// Free-form data kept with the connection (shown with presence).
    #[serde(default)]
    pub info: Option<serde_json::Value>,
    /// May subscribe to `--admin-topics` too.
    #[serde(default)]
    pub admin: bool,
}

/// One verification key and the algorithms it verifies.
struct Key {
    kid: Option<String>,
    key: DecodingKey,
    validation: Validation,
}

pub(crate) struct Verifier {
    keys: Vec<Key>,
}

fn validation(algorithms: &[Algorithm], expected: &Expected) -> Validation {
    let mut v = Validation::new(algorithms[0]);
    v.algorithms = algorithms.to_vec();
    v.leeway = 0;
    v.validate_nbf = true;
    let mut required = vec!["exp", "sub"];
    match &expected.audience {
        Some(aud) => {
            v.set_audience(&[aud]);
            required.push("aud");
        }
        None => v.validate_aud = false,
    }
    if let Some(iss) = &expected.issuer {
        v.set_issuer(&[iss]);
        required.push("iss");
    }
    v.set_required_spec_claims(&required);
    v
}

const HMAC: [Algorithm; 3] = [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];
const RSA: [Algorithm; 6] = [Algorithm::RS256, Algorithm::RS384, Algorithm::RS512, Algorithm::PS256, Algorithm::PS384, Algorithm::PS512];
const EC: [Algorithm; 2] = [Algorithm::ES256, Algorithm::ES384];
const ED: [Algorithm; 1] = [Algorithm::EdDSA];

/// A public key from PEM, whichever family it is.
fn from_pem(pem: &str) -> Result<(DecodingKey, &'static [Algorithm]), String> {
    let b = pem.as_bytes();
    if let Ok(k) = DecodingKey::from_rsa_pem(b) {
        return Ok((k, &RSA));
    }
    if let Ok(k) = DecodingKey::from_ec_pem(b) {
        return Ok((k, &EC));
    }
    if let Ok(k) = DecodingKey::from_ed_pem(b) {
        return Ok((k, &ED));
    }
    Err("not an RSA, EC or Ed25519 public key in PEM (-----BEGIN PUBLIC KEY-----); for a shared secret use --jwt-secret-file".into())
}

impl Verifier {
    pub(crate) fn new(key: &JwtKey, expected: &Expected) -> Result<Verifier, String> {
        let keys = match key {
            JwtKey::Secret(s) => vec![Key { kid: None, key: DecodingKey::from_secret(s), validation: validation(&HMAC, expected) }],
            JwtKey::PublicPem(pem) => {
                let (key, algs) = from_pem(pem)?;
                vec![Key { kid: None, key, validation: validation(algs, expected) }]
            }
            JwtKey::Jwks(text) => {
                let set: JwkSet = serde_json::from_str(text).map_err(|e| format!("not a JWKS ({e}); expected {{\"keys\":[{{\"kty\":..}}]}}"))?;
                if set.keys.is_empty() {
                    return Err("the JWKS has no keys".into());
                }
                let mut keys = Vec::new();
                for jwk in &set.keys {
                    use jsonwebtoken::jwk::AlgorithmParameters as P;
                    let algs: &[Algorithm] = match &jwk.algorithm {
                        P::RSA(_) => &RSA,
                        P::EllipticCurve(_) => &EC,
                        P::OctetKeyPair(_) => &ED,
                        P::OctetKey(_) => &HMAC,
                    };
                    let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("key {:?}: {e}", jwk.common.key_id))?;
                    keys.push(Key { kid: jwk.common.key_id.clone(), key, validation: validation(algs, expected) });
                }
                keys
            }
        };
        Ok(Verifier { keys })
    }

    /// The claims of a valid token, or why it is refused ([`Close`]: its name is the counter's).
    pub(crate) fn verify(&self, token: &str) -> Result<Claims, Close> {
        if token.is_empty() {
            return Err(Close::AuthMissing);
        }
        if token.len() > MAX_TOKEN {
            return Err(Close::AuthMalformed);
        }
        // One key: no need to read the header twice (decode reads it).
        let key = match self.keys.as_slice() {
            [one] => one,
            keys => {
                let header = jsonwebtoken::decode_header(token).map_err(|_| header_refusal(token))?;
                let kid = header.kid.ok_or(Close::AuthUnknownKey)?;
                keys.iter().find(|k| k.kid.as_deref() == Some(kid.as_str())).ok_or(Close::AuthUnknownKey)?
            }
        };
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &key.validation).map_err(|e| {
            // A header that does not decode: an algorithm never accepted
            // (none) or not a JWT at all.
            if jsonwebtoken::decode_header(token).is_err() {
                header_refusal(token)
            } else {
                refusal(e.kind())
            }
        })?;
        if data.claims.sub.is_empty() || data.claims.sub.len() > 255 {
            return Err(Close::AuthBadClaims);
        }
        Ok(data.claims)
    }
}

/// No token came.
#[cfg(test)]
pub(crate) const MISSING: &str = "auth_missing";
/// The token's `exp` passed (at connect, or later while connected).
#[cfg(test)]
pub(crate) const EXPIRED: &str = "auth_expired";

/// What a refused token's client should do, by reason.
pub(crate) fn explain(reason: Close) -> &'static str {
    match reason {
        Close::AuthMissing => {
            "no token: send Authorization: Bearer TOKEN, the subprotocols megaconn and bearer.TOKEN, or ?token=TOKEN (framed: an auth frame first)"
        }
        Close::AuthExpired => "the token's exp has passed: get a fresh token",
        Close::AuthNotYetValid => "the token's nbf is still in the future",
        Close::AuthWrongAudience => "the token's aud is not this server's --jwt-audience",
        Close::AuthWrongIssuer => "the token's iss is not this server's --jwt-issuer",
        Close::AuthBadSignature => "the token's signature does not match this server's key",
        Close::AuthBadAlgorithm => {
            "the token's alg is not one this server's key verifies (HS* for --jwt-secret-file, the key's own family for a public key or JWKS; never none)"
        }
        Close::AuthBadClaims => "the token needs sub (a string, 1-255 bytes) and exp (unix seconds); topics is a list of strings",
        Close::AuthUnknownKey => "no key in the server's JWKS has the token's kid",
        Close::AuthOtherUser => "a refresh token must be for the connection's own user (sub)",
        _ => "not a JWT (header.payload.signature, base64url, at most 8 KiB)",
    }
}

/// The token's `nbf` is still to come.
#[cfg(test)]
pub(crate) const NOT_YET_VALID: &str = "auth_not_yet_valid";
/// The token lacks the `aud` of `--jwt-audience`, or names another.
#[cfg(test)]
pub(crate) const WRONG_AUDIENCE: &str = "auth_wrong_audience";
/// The token lacks the `iss` of `--jwt-issuer`, or names another.
#[cfg(test)]
pub(crate) const WRONG_ISSUER: &str = "auth_wrong_issuer";

/// WebSocket close code when a connection's token expires (private range).
pub(crate) const EXPIRED_CLOSE: u16 = 4001;

/// Why a header did not decode: an algorithm we never accept (`none`,
/// an unknown name) or not a JWT at all.
fn header_refusal(token: &str) -> Close {
    use base64::Engine;
    let head = token.split('.').next().unwrap_or("");
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head.trim_end_matches('=')).ok();
    let alg = json.and_then(|j| serde_json::from_slice::<serde_json::Value>(&j).ok()).is_some_and(|v| v["alg"].is_string());
    if alg {
        Close::AuthBadAlgorithm
    } else {
        Close::AuthMalformed
    }
}

fn refusal(kind: &ErrorKind) -> Close {
    match kind {
        ErrorKind::ExpiredSignature => Close::AuthExpired,
        ErrorKind::ImmatureSignature => Close::AuthNotYetValid,
        ErrorKind::InvalidAudience | ErrorKind::MissingRequiredClaim(_) if missing_or(kind, "aud") => Close::AuthWrongAudience,
        ErrorKind::InvalidIssuer | ErrorKind::MissingRequiredClaim(_) if missing_or(kind, "iss") => Close::AuthWrongIssuer,
        ErrorKind::InvalidSignature => Close::AuthBadSignature,
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName | ErrorKind::MissingAlgorithm | ErrorKind::InvalidKeyFormat => Close::AuthBadAlgorithm,
        ErrorKind::MissingRequiredClaim(_) | ErrorKind::Json(_) => Close::AuthBadClaims,
        _ => Close::AuthMalformed,
    }
}

/// Whether `kind` is about claim `claim`: its check failed, or it is missing.
fn missing_or(kind: &ErrorKind, claim: &str) -> bool {
    match kind {
        ErrorKind::MissingRequiredClaim(c) => c == claim,
        ErrorKind::InvalidAudience => claim == "aud",
        ErrorKind::InvalidIssuer => claim == "iss",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    fn now() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
    }

    #[test]
    fn a_secret_verifies_hmac_tokens_only() {
        let secret = b"0123456789abcdef0123456789abcdef".to_vec();
        let v = Verifier::new(&JwtKey::Secret(secret.clone()), &Expected::default()).unwrap();
        let claims = serde_json::json!({"sub": "alice", "exp": now() + 60, "topics": ["chat.*"]});
        let good = encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(&secret)).unwrap();
        assert_eq!(v.verify(&good).unwrap().sub, "alice");
        let other = encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(b"another secret, just as long...!")).unwrap();
        assert_eq!(v.verify(&other), Err(Close::AuthBadSignature));
        let old = serde_json::json!({"sub": "alice", "exp": now() - 1});
        let expired = encode(&Header::new(Algorithm::HS256), &old, &EncodingKey::from_secret(&secret)).unwrap();
        assert_eq!(v.verify(&expired), Err(Close::AuthExpired));
        let no_sub = encode(&Header::new(Algorithm::HS256), &serde_json::json!({"exp": now() + 60}), &EncodingKey::from_secret(&secret)).unwrap();
        assert_eq!(v.verify(&no_sub), Err(Close::AuthBadClaims));
        // alg none: header {"alg":"none"}, no signature.
        let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6OTk5OTk5OTk5OX0.";
        assert_eq!(v.verify(none), Err(Close::AuthBadAlgorithm));
        assert_eq!(v.verify(""), Err(Close::AuthMissing));
        assert_eq!(v.verify("a.b"), Err(Close::AuthMalformed));
    }

    /// `nbf` is checked; `aud` and `iss` when the server names them
    /// (issue 42, finding 11).
    #[test]
    fn nbf_audience_and_issuer_are_checked() {
        let secret = b"0123456789abcdef0123456789abcdef".to_vec();
        let mint = |c: serde_json::Value| encode(&Header::new(Algorithm::HS256), &c, &EncodingKey::from_secret(&secret)).unwrap();
        let any = Verifier::new(&JwtKey::Secret(secret.clone()), &Expected::default()).unwrap();
        let tomorrow = mint(serde_json::json!({"sub": "a", "exp": now() + 172_800, "nbf": now() + 86_400}));
        assert_eq!(any.verify(&tomorrow), Err(Close::AuthNotYetValid));
        let started = mint(serde_json::json!({"sub": "a", "exp": now() + 60, "nbf": now() - 1}));
        assert_eq!(any.verify(&started).unwrap().sub, "a");
        let foreign = mint(serde_json::json!({"sub": "a", "exp": now() + 60, "aud": "billing", "iss": "idp"}));
        assert_eq!(any.verify(&foreign).unwrap().sub, "a", "no --jwt-audience: aud not checked");
        let ours = Expected { audience: Some("megaconn".into()), issuer: Some("idp".into()) };
        let strict = Verifier::new(&JwtKey::Secret(secret.clone()), &ours).unwrap();
        assert_eq!(strict.verify(&foreign), Err(Close::AuthWrongAudience));
        let no_aud = mint(serde_json::json!({"sub": "a", "exp": now() + 60, "iss": "idp"}));
        assert_eq!(strict.verify(&no_aud), Err(Close::AuthWrongAudience));
        let other_iss = mint(serde_json::json!({"sub": "a", "exp": now() + 60, "aud": "megaconn", "iss": "evil"}));
        assert_eq!(strict.verify(&other_iss), Err(Close::AuthWrongIssuer));
        let no_iss = mint(serde_json::json!({"sub": "a", "exp": now() + 60, "aud": "megaconn"}));
        assert_eq!(strict.verify(&no_iss), Err(Close::AuthWrongIssuer));
        let good = mint(serde_json::json!({"sub": "a", "exp": now() + 60, "aud": ["x", "megaconn"], "iss": "idp"}));
        assert_eq!(strict.verify(&good).unwrap().sub, "a");
    }
}
