//! Pushed messages and subscriptions in the framed protocol.
//!
//! A push frame (kind 8) carries, after the frame header:
//! ```text
//! stream:u8 | topic_len:u8 | topic | seq:u64 BE | publish_us:u64 BE | data
//! ```
//! `stream` is 0 broadcast, 1 topic, 2 unicast. `seq` counts the messages
//! of that stream (per topic for topics; 0 for unicast), so a receiver can
//! tell duplicates and gaps. `publish_us` is CLOCK_REALTIME µs when the
//! server accepted the publish, so delivery latency can be measured by a
//! receiver on another host. Subscribe (6) and unsubscribe (7) carry the
//! topic name alone.

use super::frame::{self, Kind, HEADER_LEN, MAX_PAYLOAD};

/// Longest topic name (it travels in one length byte).
pub const MAX_TOPIC: usize = 255;
/// Bytes of a push payload before the data, besides the topic.
pub const PUSH_OVERHEAD: usize = 1 + 1 + 8 + 8;

/// Which subscribers a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Broadcast = 0,
    Topic = 1,
    Unicast = 2,
}

/// A decoded push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Push<'a> {
    pub stream: Stream,
    pub topic: &'a [u8],
    pub seq: u64,
    pub publish_us: u64,
    pub data: &'a [u8],
}

/// Check a topic name: 1..=255 bytes of `[A-Za-z0-9._:-]`.
pub fn check_topic(t: &[u8]) -> Result<(), String> {
    if t.is_empty() || t.len() > MAX_TOPIC {
        return Err(format!("a topic is 1 to {MAX_TOPIC} bytes long, not {}", t.len()));
    }
    if let Some(b) = t.iter().find(|b| !(b.is_ascii_alphanumeric() || b"._:-".contains(b))) {
        return Err(format!("topic contains {:?}; use letters, digits and . _ : -", *b as char));
    }
    Ok(())
}

/// Largest data a push may carry with this topic.
pub fn max_data(topic_len: usize) -> usize {
    MAX_PAYLOAD - PUSH_OVERHEAD - topic_len
}

/// Append one push frame to `out` (the caller checked the sizes).
pub fn encode(out: &mut Vec<u8>, p: &Push<'_>) {
    let len = PUSH_OVERHEAD + p.topic.len() + p.data.len();
    debug_assert!(len <= MAX_PAYLOAD);
    out.reserve(HEADER_LEN + len);
    out.extend_from_slice(&((len + 1) as u16).to_be_bytes());
    out.push(Kind::Push as u8);
    out.push(p.stream as u8);
    out.push(p.topic.len() as u8);
    out.extend_from_slice(p.topic);
    out.extend_from_slice(&p.seq.to_be_bytes());
    out.extend_from_slice(&p.publish_us.to_be_bytes());
    out.extend_from_slice(p.data);
}

/// Decode the payload of a push frame.
pub fn decode(payload: &[u8]) -> Result<Push<'_>, &'static str> {
    let bad = "bad_frame_push";
    let (&stream, rest) = payload.split_first().ok_or(bad)?;
    let stream = match stream {
        0 => Stream::Broadcast,
        1 => Stream::Topic,
        2 => Stream::Unicast,
        _ => return Err(bad),
    };
    let (&tlen, rest) = rest.split_first().ok_or(bad)?;
    let tlen = tlen as usize;
    if rest.len() < tlen + 16 {
        return Err(bad);
    }
    let (topic, rest) = rest.split_at(tlen);
    let seq = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
    let publish_us = u64::from_be_bytes(rest[8..16].try_into().expect("8 bytes"));
    Ok(Push { stream, topic, seq, publish_us, data: &rest[16..] })
}

/// Append a subscribe or unsubscribe frame.
pub fn encode_subscription(out: &mut Vec<u8>, kind: Kind, topic: &str) {
    frame::encode(out, kind, topic.as_bytes());
}

/// CLOCK_REALTIME in µs (publish stamps are compared across hosts).
pub fn wall_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn topics_are_checked() {
        assert!(check_topic(b"room-7").is_ok());
        assert!(check_topic(b"").is_err());
        assert!(check_topic(b"a b").unwrap_err().contains("' '"));
        assert!(check_topic(&[b'a'; 256]).is_err());
    }

    proptest! {
        #[test]
        fn push_roundtrips(topic in "[a-z0-9]{0,40}", seq: u64, at: u64, data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let p = Push { stream: Stream::Topic, topic: topic.as_bytes(), seq, publish_us: at, data: &data };
            let mut out = Vec::new();
            encode(&mut out, &p);
            let (f, used) = frame::decode(&out).unwrap().unwrap();
            prop_assert_eq!(used, out.len());
            prop_assert_eq!(f.kind, Kind::Push);
            prop_assert_eq!(decode(f.payload).unwrap(), p);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }
}
