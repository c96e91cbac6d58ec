//! Pushed messages and subscriptions in the framed protocol.
//!
//! A push frame (kind 8) carries, after the frame header:
//! ```text
//! stream:u8 | topic_len:u8 | topic | seq:u64 BE | publish_us:u64 BE | epoch:u32 BE | data
//! ```
//! `stream` is 0 broadcast, 1 topic, 2 unicast. `seq` is the message's
//! offset in its stream's history (per topic for topics, `*` for
//! broadcasts; 0 for unicast): it goes up by one per message, so a
//! receiver can tell duplicates and gaps. `epoch` names the history the
//! offset counts in (it changes when the server lost that history, e.g.
//! after a restart); 0 for unicast. `publish_us` is CLOCK_REALTIME µs when
//! the server accepted the publish, so delivery latency can be measured by
//! a receiver on another host. Subscribe (6) and unsubscribe (7) carry the
//! topic name alone.
//!
//! Resume (9) subscribes and asks for what was missed:
//! ```text
//! replay:u8 | epoch:u32 BE | offset:u64 BE | topic
//! ```
//! (topic `*`: the broadcasts, which need no subscription). With replay 1
//! the server answers with every message after (epoch, offset), as push
//! frames, when it can give all of them; with replay 0 (a first
//! subscription) only with the position. Then comes a subscribed frame
//! (10):
//! ```text
//! recovered:u8 | epoch:u32 BE | offset:u64 BE | topic
//! ```
//! where `offset` is the last message of the topic now delivered: the
//! next push of the topic is offset + 1. Recovered 0 means nothing was
//! replayed: the history no longer reaches back to the offset asked, its
//! epoch is gone, or the missed messages are more than one recovery
//! answer carries (4 MiB of payload); the application reloads up to
//! `offset` from its own store. Epoch 0 offset 0 means "I have seen
//! nothing of this topic".

use super::frame::{self, Kind, HEADER_LEN, MAX_PAYLOAD};

/// Most topics one connection may subscribe to; more is a protocol error
/// (the subscription list is per-connection memory in the server, and the
/// client refuses a plan that asks for more).
/// Slab keys a server connection id can carry (16 bits, beside 16 of
/// worker and 32 of generation): a server worker holds at most this many
/// connections at once (it stops accepting there, as at its fd limit),
/// and the server's plan never asks more of one.
pub(crate) const MAX_KEYS: u64 = 1 << 16;

pub(crate) const MAX_SUBSCRIPTIONS: usize = 64;
/// Longest topic name (it travels in one length byte).
pub(crate) const MAX_TOPIC: usize = 255;
/// Bytes of a push payload before the data, besides the topic.
pub(crate) const PUSH_OVERHEAD: usize = 1 + 1 + 8 + 8 + 4;

/// Which subscribers a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Stream {
    Broadcast = 0,
    Topic = 1,
    Unicast = 2,
}

/// A decoded push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Push<'a> {
    pub stream: Stream,
    pub topic: &'a [u8],
    pub seq: u64,
    pub publish_us: u64,
    pub epoch: u32,
    pub data: &'a [u8],
}

/// Where a subscriber stopped in a topic's history: the epoch and offset
/// of the last message it has (0, 0: none yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Position {
    pub epoch: u32,
    pub offset: u64,
}

/// The broadcasts' name in history and resume requests.
pub(crate) const BROADCAST_TOPIC: &str = "*";

/// A connection with a user joined or left a topic (`--presence-notices`):
/// told to the topic's subscribers on every worker and node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Notice {
    pub topic: String,
    pub user: String,
    pub join: bool,
}

/// Check a topic name: 1..=255 bytes of `[A-Za-z0-9._:-/$]` (`/` and `$`
/// for MQTT topics such as `a/b` or `$SYS/x`).
pub(crate) fn check_topic(t: &[u8]) -> Result<(), String> {
    if t.is_empty() || t.len() > MAX_TOPIC {
        return Err(format!("a topic is 1 to {MAX_TOPIC} bytes long, not {}", t.len()));
    }
    if let Some(b) = t.iter().find(|b| !(b.is_ascii_alphanumeric() || b"._:-/$".contains(b))) {
        return Err(format!("topic contains {:?}; use letters, digits and . _ : - / $", *b as char));
    }
    Ok(())
}

/// Largest data a push may carry at all (`--max-push-bytes` at most).
pub(crate) const MAX_PUSH: usize = 1 << 20;
/// Default `--max-push-bytes`.
pub(crate) const DEFAULT_MAX_PUSH: usize = 64 << 10;
/// Set in a push frame's stream byte: the data goes on in push-part
/// frames (kind 11), the last of which says so.
pub(crate) const CONTINUED: u8 = 0x80;

/// Largest data a push carries in one frame with this topic (more goes
/// on in push-part frames).
pub(crate) fn max_data(topic_len: usize) -> usize {
    MAX_PAYLOAD - PUSH_OVERHEAD - topic_len
}

/// Append one push to `out`: one push frame, or (data over one frame) a
/// push frame marked [`CONTINUED`] with the first of the data, then
/// push-part frames `last:u8 | data` (the caller checked the total
/// against [`MAX_PUSH`]).
pub(crate) fn encode(out: &mut Vec<u8>, p: &Push<'_>) {
    let room = max_data(p.topic.len());
    let (first, mut rest) = p.data.split_at(p.data.len().min(room));
    let len = PUSH_OVERHEAD + p.topic.len() + first.len();
    out.reserve(HEADER_LEN + len + rest.len() + (rest.len() / (MAX_PAYLOAD - 1) + 1) * (HEADER_LEN + 1));
    out.extend_from_slice(&((len + 1) as u16).to_be_bytes());
    out.push(Kind::Push as u8);
    encode_fields(out, p, first, !rest.is_empty());
    while !rest.is_empty() {
        let (chunk, more) = rest.split_at(rest.len().min(MAX_PAYLOAD - 1));
        out.extend_from_slice(&((chunk.len() + 2) as u16).to_be_bytes());
        out.push(Kind::PushPart as u8);
        out.push(more.is_empty() as u8);
        out.extend_from_slice(chunk);
        rest = more;
    }
}

/// A push frame's payload with `data` (all of it: a WebSocket binary
/// push carries any size in one message).
pub(crate) fn encode_fields(out: &mut Vec<u8>, p: &Push<'_>, data: &[u8], continued: bool) {
    out.push(p.stream as u8 | if continued { CONTINUED } else { 0 });
    out.push(p.topic.len() as u8);
    out.extend_from_slice(p.topic);
    out.extend_from_slice(&p.seq.to_be_bytes());
    out.extend_from_slice(&p.publish_us.to_be_bytes());
    out.extend_from_slice(&p.epoch.to_be_bytes());
    out.extend_from_slice(data);
}

/// Whether a push frame's data goes on in push-part frames.
pub(crate) fn is_continued(payload: &[u8]) -> bool {
    payload.first().is_some_and(|s| s & CONTINUED != 0)
}

/// A push arriving in parts, put back together.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    /// The push frame's payload (continued flag cleared), then each
    /// part's data.
    payload: Vec<u8>,
}

impl Assembly {
    /// A push frame marked continued: start over with it.
    pub(crate) fn start(payload: &[u8]) -> Assembly {
        let mut v = payload.to_vec();
        v[0] &= !CONTINUED;
        Assembly { payload: v }
    }

    /// A push-part frame: Ok(true) when it was the last (the push is
    /// then [`Assembly::push`]).
    pub(crate) fn add(&mut self, part: &[u8]) -> Result<bool, &'static str> {
        let (&last, data) = part.split_first().ok_or("bad_frame_push_part")?;
        if last > 1 {
            return Err("bad_frame_push_part");
        }
        if self.payload.len() + data.len() > MAX_PUSH + MAX_PAYLOAD {
            return Err("push_too_large");
        }
        self.payload.extend_from_slice(data);
        Ok(last == 1)
    }

    pub(crate) fn push(&self) -> Result<Push<'_>, &'static str> {
        decode(&self.payload)
    }
}

/// Decode the payload of a push frame.
pub(crate) fn decode(payload: &[u8]) -> Result<Push<'_>, &'static str> {
    let bad = "bad_frame_push";
    let (&stream, rest) = payload.split_first().ok_or(bad)?;
    let stream = match stream & !CONTINUED {
        0 => Stream::Broadcast,
        1 => Stream::Topic,
        2 => Stream::Unicast,
        _ => return Err(bad),
    };
    let (&tlen, rest) = rest.split_first().ok_or(bad)?;
    let tlen = tlen as usize;
    if rest.len() < tlen + 20 {
        return Err(bad);
    }
    let (topic, rest) = rest.split_at(tlen);
    let seq = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
    let publish_us = u64::from_be_bytes(rest[8..16].try_into().expect("8 bytes"));
    let epoch = u32::from_be_bytes(rest[16..20].try_into().expect("4 bytes"));
    Ok(Push { stream, topic, seq, publish_us, epoch, data: &rest[20..] })
}

/// A topic name that may be resumed: a topic, or `*` (the broadcasts).
pub(crate) fn check_resumable(t: &[u8]) -> Result<(), String> {
    if t == BROADCAST_TOPIC.as_bytes() {
        return Ok(());
    }
    check_topic(t)
}

/// Append a resume frame: subscribe to `topic` (`*`: broadcasts) and get
/// what came after `at` (None: only the topic's position).
pub(crate) fn encode_resume(out: &mut Vec<u8>, topic: &str, at: Option<Position>) {
    let mut payload = Vec::with_capacity(13 + topic.len());
    payload.push(at.is_some() as u8);
    let at = at.unwrap_or_default();
    payload.extend_from_slice(&at.epoch.to_be_bytes());
    payload.extend_from_slice(&at.offset.to_be_bytes());
    payload.extend_from_slice(topic.as_bytes());
    frame::encode(out, Kind::Resume, &payload);
}

/// Decode a resume frame's payload: (topic, position to replay after).
pub(crate) fn decode_resume(payload: &[u8]) -> Result<(&[u8], Option<Position>), &'static str> {
    if payload.len() < 13 || payload[0] > 1 {
        return Err("bad_frame_resume");
    }
    let epoch = u32::from_be_bytes(payload[1..5].try_into().expect("4 bytes"));
    let offset = u64::from_be_bytes(payload[5..13].try_into().expect("8 bytes"));
    Ok((&payload[13..], (payload[0] == 1).then_some(Position { epoch, offset })))
}

/// A resume token, `TOPIC:EPOCH:OFFSET` (`*` for broadcasts): what a
/// WebSocket `?since=` and an SSE event id carry.
pub(crate) fn resume_token(topic: &str, at: Position) -> String {
    format!("{topic}:{}:{}", at.epoch, at.offset)
}

/// Parse a resume token; a bare `TOPIC` asks for the position only.
pub(crate) fn parse_resume_token(t: &str) -> Result<(&str, Option<Position>), String> {
    let bad = || format!("'{t}' is not a resume token; expected TOPIC:EPOCH:OFFSET as the server sent it (or a bare TOPIC for its position)");
    let mut parts = t.rsplitn(3, ':');
    let (a, b, c) = (parts.next(), parts.next(), parts.next());
    let (topic, at) = match (a, b, c) {
        (Some(offset), Some(epoch), Some(topic)) if offset.bytes().all(|b| b.is_ascii_digit()) && epoch.bytes().all(|b| b.is_ascii_digit()) => {
            (topic, Some(Position { epoch: epoch.parse().map_err(|_| bad())?, offset: offset.parse().map_err(|_| bad())? }))
        }
        _ => (t, None),
    };
    check_resumable(topic.as_bytes()).map_err(|e| format!("{}: {e}", bad()))?;
    Ok((topic, at))
}

/// Append a subscribed frame: the answer to a resume.
pub(crate) fn encode_subscribed(out: &mut Vec<u8>, topic: &str, recovered: bool, at: Position) {
    let mut payload = Vec::with_capacity(13 + topic.len());
    payload.push(recovered as u8);
    payload.extend_from_slice(&at.epoch.to_be_bytes());
    payload.extend_from_slice(&at.offset.to_be_bytes());
    payload.extend_from_slice(topic.as_bytes());
    frame::encode(out, Kind::Subscribed, &payload);
}

/// Decode a subscribed frame's payload: (topic, recovered, position).
pub(crate) fn decode_subscribed(payload: &[u8]) -> Result<(&[u8], bool, Position), &'static str> {
    if payload.len() < 13 || payload[0] > 1 {
        return Err("bad_frame_subscribed");
    }
    let epoch = u32::from_be_bytes(payload[1..5].try_into().expect("4 bytes"));
    let offset = u64::from_be_bytes(payload[5..13].try_into().expect("8 bytes"));
    Ok((&payload[13..], payload[0] == 1, Position { epoch, offset }))
}

/// Append a subscribe or unsubscribe frame.
pub(crate) fn encode_subscription(out: &mut Vec<u8>, kind: Kind, topic: &str) {
    frame::encode(out, kind, topic.as_bytes());
}

/// CLOCK_REALTIME in µs (publish stamps are compared across hosts).
pub(crate) fn wall_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn resume_tokens() {
        assert_eq!(parse_resume_token("*:7:9").unwrap(), ("*", Some(Position { epoch: 7, offset: 9 })));
        assert_eq!(parse_resume_token("a:b:7:9").unwrap(), ("a:b", Some(Position { epoch: 7, offset: 9 })));
        assert_eq!(parse_resume_token("news").unwrap(), ("news", None));
        assert!(parse_resume_token("news:99999999999:1").unwrap_err().contains("not a resume token"));
        assert!(parse_resume_token("bad topic:1:2").is_err());
        assert!(parse_resume_token("").is_err());
    }

    #[test]
    fn topics_are_checked() {
        assert!(check_topic(b"room-7").is_ok());
        assert!(check_topic(b"").is_err());
        assert!(check_topic(b"a b").unwrap_err().contains("' '"));
        assert!(check_topic(&[b'a'; 256]).is_err());
    }

    proptest! {
        #[test]
        fn push_roundtrips(topic in "[a-z0-9]{0,40}", seq: u64, at: u64, epoch: u32, data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let p = Push { stream: Stream::Topic, topic: topic.as_bytes(), seq, publish_us: at, epoch, data: &data };
            let mut out = Vec::new();
            encode(&mut out, &p);
            let (f, used) = frame::decode(&out).unwrap().unwrap();
            prop_assert_eq!(used, out.len());
            prop_assert_eq!(f.kind, Kind::Push);
            prop_assert_eq!(decode(f.payload).unwrap(), p);
        }

        #[test]
        fn a_large_push_goes_in_parts_and_comes_back_whole(size in 0usize..20_000, topic in "[a-z]{1,30}") {
            let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
            let p = Push { stream: Stream::Topic, topic: topic.as_bytes(), seq: 9, publish_us: 1, epoch: 3, data: &data };
            let mut out = Vec::new();
            encode(&mut out, &p);
            let (f, mut pos) = frame::decode(&out).unwrap().unwrap();
            prop_assert_eq!(f.kind, Kind::Push);
            if !is_continued(f.payload) {
                prop_assert_eq!(pos, out.len());
                prop_assert_eq!(decode(f.payload).unwrap(), p);
            } else {
                let mut a = Assembly::start(f.payload);
                loop {
                    let (g, used) = frame::decode(&out[pos..]).unwrap().unwrap();
                    prop_assert_eq!(g.kind, Kind::PushPart);
                    pos += used;
                    if a.add(g.payload).unwrap() {
                        break;
                    }
                }
                prop_assert_eq!(pos, out.len());
                prop_assert_eq!(a.push().unwrap(), p);
            }
        }

        #[test]
        fn resume_and_subscribed_roundtrip(topic in "[a-z0-9:]{1,40}", epoch: u32, offset: u64, recovered: bool, replay: bool) {
            let at = Position { epoch, offset };
            let mut out = Vec::new();
            encode_resume(&mut out, &topic, replay.then_some(at));
            encode_subscribed(&mut out, &topic, recovered, at);
            let (f, used) = frame::decode(&out).unwrap().unwrap();
            prop_assert_eq!((f.kind, decode_resume(f.payload).unwrap()), (Kind::Resume, (topic.as_bytes(), replay.then_some(at))));
            let token = resume_token(&topic, at);
            prop_assert_eq!(parse_resume_token(&token).unwrap(), (topic.as_str(), Some(at)));
            let (g, _) = frame::decode(&out[used..]).unwrap().unwrap();
            prop_assert_eq!((g.kind, decode_subscribed(g.payload).unwrap()), (Kind::Subscribed, (topic.as_bytes(), recovered, at)));
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
            let _ = decode_resume(&bytes);
            let _ = decode_subscribed(&bytes);
        }
    }
}
