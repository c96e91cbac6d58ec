//! One thing a client said or did, as the `--upstream` backend receives
//! it: what a session hands its worker's outbox (`tables/outbox.rs`), a
//! worker's command carries to the supervisor, and the supervisor's sender
//! (`broker/upstream.rs`) posts. Below all three, it names none of them.
use serde::{Deserialize, Serialize};

/// An upper bound of the JSON around a message's strings (field names, a
/// 20-digit `conn`, a 16-digit `ts`, quotes and commas: ~105 bytes).
pub(crate) const MESSAGE_OVERHEAD: usize = 128;
/// The most a string grows as JSON: a control character becomes `\u00XX`.
pub(crate) const JSON_ESCAPE_MAX: usize = 6;

/// How many bytes `s` takes as a JSON string's content.
fn json_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => JSON_ESCAPE_MAX,
            _ => 1,
        })
        .sum()
}

/// One thing a client said or did, as the backend receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UpMessage {
    /// `message`, `join` (a subscription) or `leave`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The connection's id (answer it with `POST /push/ID`).
    pub conn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// The message as text (WebSocket text, or UTF-8)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// ... or base64 when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_b64: Option<String>,
    /// When the server read it, µs since the epoch.
    pub ts: u64,
}

impl UpMessage {
    /// A message a client sent.
    pub(crate) fn message(conn: u64, user: Option<&str>, topic: Option<&str>, text: bool, data: &[u8]) -> UpMessage {
        let (data, data_b64) = match std::str::from_utf8(data) {
            Ok(s) if text || !s.contains('\0') => (Some(s.to_string()), None),
            _ => {
                use base64::Engine;
                (None, Some(base64::engine::general_purpose::STANDARD.encode(data)))
            }
        };
        UpMessage {
            kind: "message".into(),
            conn,
            user: user.map(str::to_string),
            topic: topic.map(str::to_string),
            data,
            data_b64,
            ts: crate::proto::push::wall_us(),
        }
    }

    /// What it costs queued: at least its length as JSON, so the bytes a
    /// worker counts bound what the supervisor holds and sends.
    pub(crate) fn bytes(&self) -> usize {
        let s = |f: &Option<String>| f.as_deref().map_or(0, json_len);
        MESSAGE_OVERHEAD + s(&self.user) + s(&self.topic) + s(&self.data) + s(&self.data_b64)
    }

    /// A join or leave (`--presence-events`), not something a client said.
    pub(crate) fn is_presence(&self) -> bool {
        self.kind != "message"
    }
}
