//! `--jwt-secret-file`: every connection shows its own token to a
//! `server --auth jwt` (framed: an auth frame first; WebSocket: an
//! Authorization header), minted here with the `jsonwebtoken` crate: HS256,
//! `sub` = `c<connection index>`, every topic, valid a day.

use jsonwebtoken::{encode, EncodingKey, Header};

/// How long a minted token is valid.
const VALID_S: u64 = 24 * 3600;

/// A token for connection `conn`.
pub fn mint(secret: &[u8], conn: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let claims = serde_json::json!({ "sub": format!("c{conn}"), "exp": now + VALID_S, "topics": ["*"] });
    encode(&Header::default(), &claims, &EncodingKey::from_secret(secret)).expect("HS256 signs any claims")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_minted_token_verifies() {
        use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
        let secret = vec![9u8; 32];
        let t = decode::<serde_json::Value>(&super::mint(&secret, 41), &DecodingKey::from_secret(&secret), &Validation::new(Algorithm::HS256)).unwrap();
        assert_eq!((t.claims["sub"].as_str(), t.claims["topics"][0].as_str()), (Some("c41"), Some("*")));
    }
}
