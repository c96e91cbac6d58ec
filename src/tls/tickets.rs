//! Session tickets every worker process of one server can open.
//!
//! rustls's own ticketer makes a random key per process; a server is many
//! processes sharing listeners, so a client that resumes would land on a
//! worker that cannot read its ticket. The supervisor draws one key at
//! start and hands it to every worker; a ticket is
//! `nonce (12) || ChaCha20-Poly1305(state)`. The key lives as long as the
//! server: a restart invalidates every ticket (clients do a full
//! handshake), which also bounds what a stolen key could open.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::fmt;

/// Lifetime hint sent with each ticket.
pub(crate) const LIFETIME_S: u32 = 6 * 3600;

/// A ticket key: 32 random bytes, as hex in each worker's configuration
/// (sent on its stdin, never on a command line others can read).
pub(crate) fn new_key() -> anyhow::Result<String> {
    let mut k = [0u8; 32];
    SystemRandom::new().fill(&mut k).map_err(|_| anyhow::anyhow!("the system random source failed"))?;
    Ok(k.iter().map(|b| format!("{b:02x}")).collect())
}

pub(crate) struct SharedTickets {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedTickets")
    }
}

impl SharedTickets {
    /// From the hex key [`new_key`] made.
    pub(crate) fn from_hex(hex: &str) -> anyhow::Result<SharedTickets> {
        let bytes: Vec<u8> = (0..hex.len()).step_by(2).filter_map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
        if bytes.len() != 32 || hex.len() != 64 {
            anyhow::bail!("the session ticket key must be 64 hex digits");
        }
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|_| anyhow::anyhow!("bad session ticket key"))?;
        Ok(SharedTickets { key: LessSafeKey::new(key), rng: SystemRandom::new() })
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        LIFETIME_S
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len() + CHACHA20_POLY1305.tag_len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = self.key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut out[NONCE_LEN..]).ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return None;
        }
        let nonce = Nonce::try_assume_unique_for_key(&cipher[..NONCE_LEN]).ok()?;
        let mut body = cipher[NONCE_LEN..].to_vec();
        let plain_len = self.key.open_in_place(nonce, Aad::empty(), &mut body).ok()?.len();
        body.truncate(plain_len);
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    #[test]
    fn a_ticket_opens_in_another_process_with_the_same_key_only() {
        let key = new_key().unwrap();
        let (a, b) = (SharedTickets::from_hex(&key).unwrap(), SharedTickets::from_hex(&key).unwrap());
        let t = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&t).as_deref(), Some(&b"session state"[..]));
        let other = SharedTickets::from_hex(&new_key().unwrap()).unwrap();
        assert_eq!(other.decrypt(&t), None);
        let mut forged = t.clone();
        forged[20] ^= 1;
        assert_eq!(b.decrypt(&forged), None);
        assert_eq!(b.decrypt(&t[..10]), None);
        assert!(SharedTickets::from_hex("zz").is_err());
    }
}
