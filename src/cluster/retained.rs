//! MQTT retained messages between nodes. Every node keeps the cluster's
//! whole retained set, also for topics it does not follow:
//!
//! - a retained publish (or clear) also goes, signed, to [`RETAINED`],
//!   which every node subscribes to (core NATS: a node that misses one
//!   while its link is down gets it from the next sync);
//! - a node whose link comes up (at start, and after every reconnect)
//!   asks the others on [`RETAINED_ASK`]; each answers with its whole set
//!   in signed chunks of at most [`CHUNK_BYTES`], and the asker merges
//!   what arrives until the answers stop for [`QUIET`] (at most
//!   [`ANSWER_WINDOW`] in all).
//!
//! Whatever the path, the newest message of a topic wins (by its publish
//! stamp), so a copy that comes twice, late or out of order changes
//! nothing. A clear is not kept: a sync can bring back a message that was
//! cleared while this node's link was down and some other node missed the
//! clear too.

use super::MqttMeta;
use base64::Engine;
use std::time::Duration;

/// Retained publishes and clears, to every node (target: the topic).
pub(crate) const RETAINED: &str = "megaconn.retained";
/// A node that just linked asks the others for their retained sets.
pub(crate) const RETAINED_ASK: &str = "megaconn.retained.ask";
/// Most bytes of data in one answer chunk (a NATS message; the server's
/// default limit is 1 MiB, and the data travels in base64).
pub(crate) const CHUNK_BYTES: usize = 256 << 10;
/// The asker stops listening once no chunk came for this long...
pub(crate) const QUIET: Duration = Duration::from_secs(1);
/// ...or after this long in all.
pub(crate) const ANSWER_WINDOW: Duration = Duration::from_secs(10);

/// One retained message as it crosses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) topic: String,
    /// Empty: the topic's retained message was cleared.
    pub(crate) data: Vec<u8>,
    /// Its QoS and v5 properties (`retain` is always true).
    pub(crate) mqtt: MqttMeta,
    pub(crate) publish_us: u64,
}

/// What the asker collected.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Answers {
    pub(crate) entries: Vec<Entry>,
    /// Nodes that answered (signed chunks from them).
    pub(crate) nodes: usize,
    /// Entries refused (malformed) or past the asker's bounds.
    pub(crate) dropped: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Wire {
    topic: String,
    /// Base64.
    data: String,
    mqtt: MqttMeta,
    publish_us: u64,
}

/// A node's set as answer chunks (JSON arrays), each holding at most
/// [`CHUNK_BYTES`] of data (one larger message goes alone).
pub(crate) fn chunks<'a>(entries: impl Iterator<Item = (&'a str, &'a [u8], MqttMeta, u64)>) -> Vec<Vec<u8>> {
    let (mut out, mut chunk, mut bytes) = (Vec::new(), Vec::new(), 0);
    for (topic, data, mqtt, publish_us) in entries {
        if !chunk.is_empty() && bytes + data.len() > CHUNK_BYTES {
            out.push(serde_json::to_vec(&std::mem::take(&mut chunk)).expect("serializes"));
            bytes = 0;
        }
        bytes += data.len() + topic.len();
        let data = base64::engine::general_purpose::STANDARD.encode(data);
        chunk.push(Wire { topic: topic.to_string(), data, mqtt, publish_us });
    }
    if !chunk.is_empty() {
        out.push(serde_json::to_vec(&chunk).expect("serializes"));
    }
    out
}

/// One chunk another node sent, every entry checked as a message from
/// another node is (`max_push`: this node's `--max-push-bytes`); the
/// refused are counted in `dropped`.
pub(crate) fn decode_chunk(body: &[u8], max_push: usize, dropped: &mut u64) -> Result<Vec<Entry>, String> {
    let wire: Vec<Wire> = serde_json::from_slice(body).map_err(|e| format!("not a retained set: {e}"))?;
    let mut out = Vec::with_capacity(wire.len());
    for w in wire {
        match entry(w, max_push) {
            Ok(e) if !e.data.is_empty() => out.push(e),
            _ => *dropped += 1,
        }
    }
    Ok(out)
}

/// A retained set from `topic` (the signed target), `data` and the
/// signed metadata: checked as any message between nodes is.
pub(crate) fn checked(topic: &str, data: Vec<u8>, mqtt: MqttMeta, publish_us: u64, max_push: usize) -> Result<Entry, String> {
    crate::proto::push::check_topic(topic.as_bytes())?;
    if topic.contains(['+', '#']) || !super::topic_fits_subject(topic) {
        return Err(format!("'{topic}' is not a topic a message is retained under"));
    }
    if data.len() > max_push {
        return Err(format!("{} bytes of data, more than a push carries here (--max-push-bytes {max_push})", data.len()));
    }
    if !mqtt.retain {
        return Err("a retained message without the retain flag".into());
    }
    Ok(Entry { topic: topic.to_string(), data, mqtt, publish_us })
}

fn entry(w: Wire, max_push: usize) -> Result<Entry, String> {
    let data = base64::engine::general_purpose::STANDARD.decode(w.data.as_bytes()).map_err(|e| e.to_string())?;
    let mqtt = w.mqtt.checked()?;
    checked(&w.topic, data, mqtt, w.publish_us, max_push)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> MqttMeta {
        MqttMeta { qos: 1, retain: true, props: None }
    }

    /// A set crosses in chunks of at most CHUNK_BYTES of data and comes
    /// back whole; one message larger than a chunk goes alone.
    #[test]
    fn a_set_crosses_in_bounded_chunks_and_comes_back_whole() {
        let big = vec![7u8; CHUNK_BYTES + 1];
        let small = vec![1u8; CHUNK_BYTES / 3];
        let set: Vec<(String, Vec<u8>)> =
            vec![("a/1".into(), small.clone()), ("a/2".into(), small.clone()), ("a/3".into(), big.clone()), ("a/4".into(), b"x".to_vec())];
        let out = chunks(set.iter().map(|(t, d)| (t.as_str(), d.as_slice(), meta(), 5)));
        let mut dropped = 0;
        let back: Vec<Vec<Entry>> = out.iter().map(|c| decode_chunk(c, 2 * CHUNK_BYTES, &mut dropped).unwrap()).collect();
        let topics: Vec<Vec<&str>> = back.iter().map(|c| c.iter().map(|e| e.topic.as_str()).collect()).collect();
        assert_eq!(topics, vec![vec!["a/1", "a/2"], vec!["a/3"], vec!["a/4"]]);
        assert_eq!(back[1][0], Entry { topic: "a/3".into(), data: big, mqtt: meta(), publish_us: 5 });
        assert_eq!(dropped, 0);
    }

    /// Entries a node would not accept from a client are refused one by
    /// one (counted), the rest of the chunk kept; a chunk that is not
    /// JSON is refused whole.
    #[test]
    fn bad_entries_are_refused_and_counted() {
        let d = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let body = serde_json::json!([
            {"topic": "ok/1", "data": d("v"), "mqtt": {"qos": 1, "retain": true}, "publish_us": 1},
            {"topic": "wild/+", "data": d("v"), "mqtt": {"qos": 0, "retain": true}, "publish_us": 1},
            {"topic": "a..b", "data": d("v"), "mqtt": {"qos": 0, "retain": true}, "publish_us": 1},
            {"topic": "big", "data": d("0123456789"), "mqtt": {"qos": 0, "retain": true}, "publish_us": 1},
            {"topic": "qos", "data": d("v"), "mqtt": {"qos": 3, "retain": true}, "publish_us": 1},
            {"topic": "flag", "data": d("v"), "mqtt": {"qos": 0, "retain": false}, "publish_us": 1},
            {"topic": "empty", "data": "", "mqtt": {"qos": 0, "retain": true}, "publish_us": 1},
            {"topic": "b64", "data": "!!", "mqtt": {"qos": 0, "retain": true}, "publish_us": 1}
        ]);
        let mut dropped = 0;
        let got = decode_chunk(body.to_string().as_bytes(), 8, &mut dropped).unwrap();
        assert_eq!(got.iter().map(|e| e.topic.as_str()).collect::<Vec<_>>(), ["ok/1"]);
        assert_eq!(dropped, 7);
        assert!(decode_chunk(b"{not json", 8, &mut dropped).unwrap_err().contains("not a retained set"));
    }
}
