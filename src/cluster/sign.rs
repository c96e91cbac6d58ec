//! Messages between nodes are signed: HMAC-SHA256 keyed by the cluster
//! key (`--cluster-key-file`, the same file on every node) over the
//! subject, the megaconn headers (a stored message's position and the
//! stream sequence it follows among them), a signing time and the data. Anyone who
//! can reach NATS but does not hold the key cannot make a message a node
//! accepts: an unsigned, forged or stale one is dropped and counted
//! (`cluster_refused{reason}`), never delivered and never answered.
//!
//! The signing time bounds how long a captured message can be replayed
//! ([`WINDOW`]); nodes' clocks must agree within it (NTP does).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The signature, hex.
pub(crate) const H_SIGNATURE: &str = "Megaconn-Signature";
/// When the sender signed, in Unix milliseconds.
pub(crate) const H_TIME: &str = "Megaconn-Time";
/// How far a message's signing time may be from this node's clock.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Shortest key accepted: 128 bits (`head -c 32 /dev/urandom` gives 256).
pub(crate) const MIN_KEY_BYTES: usize = 16;
/// How to make a key, for error messages.
pub(crate) const HOW_TO_MAKE_KEY: &str =
    "make one with `head -c 32 /dev/urandom > cluster.key` and give every node the same file (--cluster-key-file cluster.key; in Kubernetes a Secret)";

/// The cluster key. Its Debug never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey(Vec<u8>);

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterKey({} bytes)", self.0.len())
    }
}

impl ClusterKey {
    pub(crate) fn new(bytes: Vec<u8>) -> Result<ClusterKey, String> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!("the cluster key is {} bytes, fewer than {MIN_KEY_BYTES}; {HOW_TO_MAKE_KEY}", bytes.len()));
        }
        Ok(ClusterKey(bytes))
    }

    /// Read `--cluster-key-file`.
    pub fn read(path: &str) -> Result<ClusterKey, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read the cluster key '{path}': {e}; {HOW_TO_MAKE_KEY}"))?;
        ClusterKey::new(bytes)
    }
}

/// What is signed besides the data: the fields a receiver acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signed<'a> {
    pub subject: &'a str,
    pub origin: &'a str,
    pub target: &'a str,
    pub publish_us: &'a str,
    pub time_ms: &'a str,
    /// `EPOCH:OFFSET` in the cluster's history (JetStream), or empty.
    pub position: &'a str,
    /// With a position: the stream sequence of the topic's message it was
    /// published after (where in the stream it belongs), or empty.
    pub follows: &'a str,
    /// An MQTT publish's metadata (`Megaconn-Mqtt`), or empty. Signed
    /// only when there is some, so every other message signs as before.
    pub mqtt: &'a str,
}

/// Why a message was refused: the `reason` label of `cluster_refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No signature: not from a megaconn node of this cluster.
    Unsigned,
    /// A signature that does not match (wrong key, or altered on the way).
    Forged,
    /// Signed too long ago or in the future (a replay, or a clock off by more than the window).
    Stale,
    /// Asks for an answer on a subject outside its origin node's inbox.
    Reply,
    /// Signed but not a message a node can act on.
    Malformed,
    /// A copy of a message already taken within the window.
    Replay,
}

impl Refusal {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::Forged => "forged",
            Refusal::Stale => "stale",
            Refusal::Reply => "reply",
            Refusal::Malformed => "malformed",
            Refusal::Replay => "replay",
        }
    }
}

fn mac(key: &ClusterKey, s: &Signed, data: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key.0).expect("HMAC takes a key of any length");
    // Each field with its length: no two different messages sign alike.
    for part in [
        s.subject.as_bytes(),
        s.origin.as_bytes(),
        s.target.as_bytes(),
        s.publish_us.as_bytes(),
        s.time_ms.as_bytes(),
        s.position.as_bytes(),
        s.follows.as_bytes(),
        data,
    ] {
        m.update(&(part.len() as u64).to_be_bytes());
        m.update(part);
    }
    // After the data, with its length: still no two messages alike.
    if !s.mqtt.is_empty() {
        m.update(&(s.mqtt.len() as u64).to_be_bytes());
        m.update(s.mqtt.as_bytes());
    }
    m
}

/// The signature of a message, hex.
pub fn sign(key: &ClusterKey, s: &Signed, data: &[u8]) -> String {
    mac(key, s, data).finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex signature: hex digits only (`u8::from_str_radix`
/// alone would also take a `+` sign), either case.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// What identifies a signature against replays: its bytes, not its text,
/// so the same signature written in another letter case is the same.
type SignatureBytes = [u8; 32];

fn signature_bytes(signature: &str) -> Option<SignatureBytes> {
    unhex(signature)?.try_into().ok()
}

/// Check a signature (constant time) and the signing time against `now_ms`.
pub(crate) fn verify(key: &ClusterKey, s: &Signed, data: &[u8], signature: Option<&str>, now_ms: u64) -> Result<(), Refusal> {
    let signature = signature.ok_or(Refusal::Unsigned)?;
    let bytes = unhex(signature).ok_or(Refusal::Forged)?;
    mac(key, s, data).verify_slice(&bytes).map_err(|_| Refusal::Forged)?;
    let t: u64 = s.time_ms.parse().map_err(|_| Refusal::Forged)?;
    if t.abs_diff(now_ms) > WINDOW.as_millis() as u64 {
        return Err(Refusal::Stale);
    }
    Ok(())
}

/// Most signatures remembered against replays; past it the oldest are
/// forgotten early (~90 B each with the set's and the queue's share:
/// 200,000 is ~18 MiB at most).
pub(crate) const MAX_REMEMBERED: usize = 200_000;

/// The signatures taken lately: a message signed once is taken once.
/// Kept for twice the window after arrival, which covers every time a
/// copy could still pass the age check.
#[derive(Debug, Default)]
pub(crate) struct Replays {
    seen: std::collections::HashSet<SignatureBytes>,
    order: std::collections::VecDeque<(u64, SignatureBytes)>,
}

impl Replays {
    /// Whether `signature` is new at `now_ms` (it is remembered). One that
    /// is not a signature at all is never new. A node remembers the
    /// signatures of its own messages too: a copy of one sent back to it
    /// is a replay like any other.
    pub(crate) fn first(&mut self, signature: &str, now_ms: u64) -> bool {
        let Some(signature) = signature_bytes(signature) else { return false };
        let keep = 2 * WINDOW.as_millis() as u64;
        while let Some((at, _)) = self.order.front() {
            if now_ms.saturating_sub(*at) <= keep && self.order.len() < MAX_REMEMBERED {
                break;
            }
            if let Some((_, s)) = self.order.pop_front() {
                self.seen.remove(&s);
            }
        }
        if !self.seen.insert(signature) {
            return false;
        }
        self.order.push_back((now_ms, signature));
        true
    }
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_key_holder_signs_and_every_field_counts() {
        let key = ClusterKey::new(vec![7; 32]).unwrap();
        let s = Signed { subject: "megaconn.broadcast", origin: "A", target: "", publish_us: "1", time_ms: "1000", position: "", follows: "", mqtt: "" };
        let sig = sign(&key, &s, b"hi");
        assert_eq!(verify(&key, &s, b"hi", Some(&sig), 1000), Ok(()));
        assert_eq!(verify(&key, &s, b"hi", None, 1000), Err(Refusal::Unsigned));
        assert_eq!(verify(&key, &s, b"ho", Some(&sig), 1000), Err(Refusal::Forged));
        assert_eq!(verify(&key, &Signed { origin: "B", ..s.clone() }, b"hi", Some(&sig), 1000), Err(Refusal::Forged));
        assert_eq!(verify(&key, &Signed { subject: "megaconn.node.B", ..s.clone() }, b"hi", Some(&sig), 1000), Err(Refusal::Forged));
        assert_eq!(verify(&key, &Signed { position: "1:2", ..s.clone() }, b"hi", Some(&sig), 1000), Err(Refusal::Forged));
        assert_eq!(verify(&key, &Signed { follows: "7", ..s.clone() }, b"hi", Some(&sig), 1000), Err(Refusal::Forged));
        assert_eq!(verify(&key, &Signed { mqtt: r#"{"qos":1}"#, ..s.clone() }, b"hi", Some(&sig), 1000), Err(Refusal::Forged), "MQTT metadata added");
        assert_eq!(verify(&key, &s, b"hi", Some("zz"), 1000), Err(Refusal::Forged));
        let other = ClusterKey::new(vec![8; 32]).unwrap();
        assert_eq!(verify(&other, &s, b"hi", Some(&sig), 1000), Err(Refusal::Forged));
        assert_eq!(verify(&key, &s, b"hi", Some(&sig), 1000 + 61_000), Err(Refusal::Stale));
        assert_eq!(verify(&key, &s, b"hi", Some(&sig), 1000 + 59_000), Ok(()));
        // Fields cannot be shifted into each other.
        let a = Signed { origin: "AB", target: "", ..s.clone() };
        let b = Signed { origin: "A", target: "B", ..s.clone() };
        assert_ne!(sign(&key, &a, b""), sign(&key, &b, b""));
        assert!(ClusterKey::new(vec![1; 8]).unwrap_err().contains("head -c 32 /dev/urandom"));
        // A copy of a taken message is a replay, until the window has passed twice.
        let mut r = Replays::default();
        let other = sign(&key, &Signed { origin: "B", ..s.clone() }, b"hi");
        assert!(r.first(&sig, 1000) && !r.first(&sig, 2000) && r.first(&other, 2000));
        assert!(r.first(&sig, 1000 + 121_000), "forgotten after twice the window");
        assert!(!r.first("other", 2000), "not a signature: never new");
        assert_eq!(format!("{key:?}"), "ClusterKey(32 bytes)");
    }

    /// The same signature in another letter case, or with a `+` that
    /// `from_str_radix` takes, is the same signature: verified as before
    /// and refused as a replay (issue 42, finding 8).
    #[test]
    fn a_signature_written_another_way_is_still_a_replay() {
        let key = ClusterKey::new(vec![7; 32]).unwrap();
        let s = Signed { subject: "megaconn.users", origin: "A", target: "", publish_us: "1", time_ms: "1000", position: "", follows: "", mqtt: "" };
        let sig = sign(&key, &s, b"hi");
        let upper = sig.to_ascii_uppercase();
        let mixed: String = sig.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        assert_eq!(verify(&key, &s, b"hi", Some(&upper), 1000), Ok(()));
        let mut r = Replays::default();
        assert!(r.first(&sig, 1000));
        for copy in [&upper, &mixed] {
            assert!(!r.first(copy, 1001), "{copy} taken again");
        }
        assert_eq!((unhex("0F"), unhex("0f"), unhex("+f")), (Some(vec![15]), Some(vec![15]), None), "a sign is not a hex digit");
    }
}
