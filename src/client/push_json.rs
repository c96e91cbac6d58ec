//! The server's JSON text messages as the client reads them (a WebSocket
//! text message, an SSE event's data): a push's envelope (stream, topic,
//! seq, ts, epoch) or a `subscribed` answer. Read into a typed envelope
//! that borrows the topic from the message and skips the data unparsed
//! (a push's bulk), instead of a `serde_json::Value` tree that allocates
//! every key and copies the data: the client reads every push of a
//! broadcast to all of its connections.

use super::replies::Replies;
use crate::proto::push::{self, Push, Stream};
use serde::Deserialize;
use std::borrow::Cow;

/// A string field, borrowed from the message unless it has escapes
/// (serde borrows a `Cow` only as a field of its own, not inside `Option`).
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// The fields the client needs; every other field (`data`, `data_b64`,
/// `offset` of a push) is skipped without being built.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    topic: Option<Text<'a>>,
    #[serde(borrow, default)]
    stream: Option<Text<'a>>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    ts: Option<u64>,
    #[serde(default)]
    epoch: Option<u64>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    recovered: Option<bool>,
}

/// A text message from a megaconn server.
#[derive(Debug, PartialEq)]
enum JsonMessage<'a> {
    Push { stream: Stream, topic: Cow<'a, str>, seq: u64, publish_us: u64, epoch: u32 },
    Subscribed { topic: Cow<'a, str>, recovered: bool, at: push::Position },
}

/// A push or a `subscribed` answer; None for any other text (counted as
/// raw bytes by the caller).
fn json_push(data: &[u8]) -> Option<JsonMessage<'_>> {
    let e: Envelope<'_> = serde_json::from_slice(data).ok()?;
    let topic = e.topic.map_or(Cow::Borrowed(""), |t| t.0);
    let epoch = e.epoch.unwrap_or(0) as u32;
    if e.kind.is_some_and(|k| k.0 == "subscribed") {
        let at = push::Position { epoch, offset: e.offset? };
        return Some(JsonMessage::Subscribed { topic, recovered: e.recovered?, at });
    }
    let stream = match e.stream?.0.as_ref() {
        "topic" => Stream::Topic,
        "unicast" => Stream::Unicast,
        _ => Stream::Broadcast,
    };
    Some(JsonMessage::Push { stream, topic, seq: e.seq?, publish_us: e.ts?, epoch })
}

/// A text message from a megaconn server (a WebSocket text message or an
/// event's data): a push or a `subscribed` answer is accounted, anything
/// else counted as raw bytes.
pub(super) fn account_text(replies: &mut Replies<'_>, data: &[u8]) {
    match json_push(data) {
        Some(JsonMessage::Push { stream, topic, seq, publish_us, epoch }) => {
            let p = Push { stream, topic: topic.as_bytes(), seq, publish_us, epoch, data: b"" };
            super::pushes::account(replies.stats, replies.push, replies.seen, &p, push::wall_us());
        }
        Some(JsonMessage::Subscribed { topic, recovered, at }) => super::pushes::subscribed(replies.stats, replies.seen, topic.as_bytes(), recovered, at),
        None => replies.stats.raw_bytes_in += data.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_as_the_server_writes_it_is_read_with_its_data_skipped() {
        let p = Push { stream: Stream::Topic, topic: b"room-\"7\"", seq: 42, publish_us: 1_700_000_000_000_001, epoch: 3, data: br#"[{"sym":"AB","px":1.5}]"# };
        let text = crate::server::session::ws::push_json(&p).to_string();
        let m = json_push(text.as_bytes()).expect("a push");
        assert_eq!(m, JsonMessage::Push { stream: Stream::Topic, topic: "room-\"7\"".into(), seq: 42, publish_us: 1_700_000_000_000_001, epoch: 3 });
        let plain = br#"{"stream":"broadcast","topic":"","offset":1,"epoch":0,"seq":1,"ts":5,"data":"x"}"#;
        assert!(matches!(json_push(plain), Some(JsonMessage::Push { topic: Cow::Borrowed(""), seq: 1, .. })), "a topic without escapes is borrowed");
    }

    #[test]
    fn a_subscribed_answer_and_anything_else() {
        let s = br#"{"type":"subscribed","topic":"a","epoch":2,"offset":9,"recovered":true}"#;
        assert_eq!(json_push(s), Some(JsonMessage::Subscribed { topic: "a".into(), recovered: true, at: push::Position { epoch: 2, offset: 9 } }));
        for other in [&b"hello"[..], b"{}", br#"{"stream":"topic","seq":"1","ts":5}"#, br#"{"type":"subscribed","topic":"a"}"#, b"[1,2]", b"{\"stream\":"] {
            assert_eq!(json_push(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
