//! `--jwt-secret-file`: every connection shows its own token to a
//! `server --auth jwt` (framed: an auth frame first; WebSocket: an
//! Authorization header): HS256, `sub` = `c<connection index>`, every
//! topic, valid a day.
//!
//! Minted here rather than with a JWT library: the client stands in for a
//! million devices that already hold their tokens, so minting must cost
//! the shared CPU as little as possible. The header is encoded once and
//! the HMAC key set up once; per token that leaves one short JSON, two
//! base64 encodings and one HMAC-SHA256 (the server verifies it with the
//! `jsonwebtoken` crate, and `a_minted_token_verifies` checks it there).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::hmac;

/// How long a minted token is valid.
const VALID_S: u64 = 24 * 3600;

pub(crate) struct Minter {
    key: hmac::Key,
    /// `base64url({"alg":"HS256","typ":"JWT"}).`
    head: String,
    exp: u64,
}

impl Minter {
    pub(crate) fn new(secret: &[u8]) -> Minter {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Minter { key: hmac::Key::new(hmac::HMAC_SHA256, secret), head: B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#) + ".", exp: now + VALID_S }
    }

    /// The token of connection `conn`.
    pub(crate) fn mint(&self, conn: u64) -> String {
        let claims = format!(r#"{{"sub":"c{conn}","exp":{},"topics":["*"]}}"#, self.exp);
        let mut t = String::with_capacity(self.head.len() + claims.len() * 4 / 3 + 48);
        t.push_str(&self.head);
        B64.encode_string(claims.as_bytes(), &mut t);
        let sig = hmac::sign(&self.key, t.as_bytes());
        t.push('.');
        B64.encode_string(sig.as_ref(), &mut t);
        t
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_minted_token_verifies() {
        use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
        let secret = vec![9u8; 32];
        let token = super::Minter::new(&secret).mint(41);
        let t = decode::<serde_json::Value>(&token, &DecodingKey::from_secret(&secret), &Validation::new(Algorithm::HS256)).unwrap();
        assert_eq!((t.claims["sub"].as_str(), t.claims["topics"][0].as_str()), (Some("c41"), Some("*")));
        let wrong = decode::<serde_json::Value>(&token, &DecodingKey::from_secret(b"another key"), &Validation::new(Algorithm::HS256));
        assert!(wrong.is_err());
    }
}
