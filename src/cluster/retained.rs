//! MQTT retained messages between nodes. Every node keeps the cluster's
//! whole retained set, also for topics it does not follow:
//!
//! - a retained publish (or clear) also goes, signed, to [`RETAINED`],
//!   which every node subscribes to (core NATS: a node that misses one
//!   while its link is down gets it from the next sync);
//! - a node whose link comes up (at start, and after every reconnect)
//!   asks the others on [`RETAINED_ASK`]; each answers (at most
//!   [`MAX_ANSWERS`] questions every [`ANSWER_EVERY`]) with its whole set and the clears it
//!   remembers, in signed chunks of at most [`CHUNK_BYTES`] of JSON, and
//!   the asker keeps the newest of each topic among what arrives until
//!   the answers stop for [`QUIET`] (at most [`ANSWER_WINDOW`] in all).
//!
//! Whatever the path, the newest message or clear of a topic wins (by its
//! publish stamp, so by the nodes' clocks), so a copy that comes twice,
//! late or out of order changes nothing, and a message older than a clear
//! does not come back. Nodes remember their last `--mqtt-retained` clears;
//! a clear older than those is forgotten, and a node that missed it may
//! keep the message.

use super::malformed::Malformed;
use super::MqttMeta;
use base64::Engine;
use std::time::Duration;

/// Retained publishes and clears, to every node (target: the topic).
pub(crate) const RETAINED: &str = "megaconn.retained";
/// A node that just linked asks the others for their retained sets.
pub(crate) const RETAINED_ASK: &str = "megaconn.retained.ask";
/// Most bytes of JSON in one answer chunk (a NATS message; the server's
/// default limit is 1 MiB).
pub(crate) const CHUNK_BYTES: usize = 512 << 10;
/// A message whose entry is larger than this cannot cross (skipped).
pub(crate) const MAX_ENTRY_BYTES: usize = 768 << 10;
/// A node answers at most [`MAX_ANSWERS`] questions in this long (nodes
/// that keep asking cost the others that much and no more).
pub(crate) const ANSWER_EVERY: Duration = Duration::from_secs(10);
pub(crate) const MAX_ANSWERS: usize = 16;
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

/// A node's set (a clear: empty data) as answer chunks (JSON arrays),
/// each at most [`CHUNK_BYTES`] long (one larger entry goes alone);
/// entries over [`MAX_ENTRY_BYTES`] are left out, counted in the second.
pub(crate) fn chunks<'a>(entries: impl Iterator<Item = (&'a str, &'a [u8], MqttMeta, u64)>) -> (Vec<Vec<u8>>, u64) {
    let (mut out, mut chunk, mut skipped) = (Vec::new(), Vec::<u8>::new(), 0);
    for (topic, data, mqtt, publish_us) in entries {
        let data = base64::engine::general_purpose::STANDARD.encode(data);
        let one = serde_json::to_vec(&Wire { topic: topic.to_string(), data, mqtt, publish_us }).expect("serializes");
        if one.len() > MAX_ENTRY_BYTES {
            skipped += 1;
            continue;
        }
        if !chunk.is_empty() && chunk.len() + one.len() + 2 > CHUNK_BYTES {
            chunk.push(b']');
            out.push(std::mem::take(&mut chunk));
        }
        chunk.push(if chunk.is_empty() { b'[' } else { b',' });
        chunk.extend_from_slice(&one);
    }
    if !chunk.is_empty() {
        chunk.push(b']');
        out.push(chunk);
    }
    (out, skipped)
}

/// Keep the newest entry of each topic among `answers` (every node
/// answers with the same set), at most `max_entries` topics and
/// `max_bytes` of data; the rest counted in `dropped`.
pub(crate) fn newest(answers: impl Iterator<Item = Entry>, max_entries: usize, max_bytes: u64, dropped: &mut u64) -> Vec<Entry> {
    let mut by_topic: std::collections::HashMap<String, Entry> = Default::default();
    let mut bytes = 0u64;
    for e in answers {
        let full = by_topic.len() >= max_entries || bytes + e.data.len() as u64 > max_bytes;
        match by_topic.get_mut(&e.topic) {
            Some(old) if old.publish_us >= e.publish_us => {}
            Some(old) => {
                bytes = bytes - old.data.len() as u64 + e.data.len() as u64;
                *old = e;
            }
            None if full => *dropped += 1,
            None => {
                bytes += e.data.len() as u64;
                by_topic.insert(e.topic.clone(), e);
            }
        }
    }
    by_topic.into_values().collect()
}

/// One chunk another node sent, every entry checked as a message from
/// another node is (`max_push`: this node's `--max-push-bytes`); the
/// refused are counted in `dropped`.
pub(crate) fn decode_chunk(body: &[u8], max_push: usize, dropped: &mut u64) -> Result<Vec<Entry>, Malformed> {
    let wire: Vec<Wire> = serde_json::from_slice(body).map_err(|e| Malformed::RetainedJson(e.to_string()))?;
    let mut out = Vec::with_capacity(wire.len());
    for w in wire {
        match entry(w, max_push) {
            Ok(e) => out.push(e),
            Err(_) => *dropped += 1,
        }
    }
    Ok(out)
}

/// A retained set from `topic` (the signed target), `data` and the
/// signed metadata: checked as any message between nodes is.
pub(crate) fn checked(topic: &str, data: Vec<u8>, mqtt: MqttMeta, publish_us: u64, max_push: usize) -> Result<Entry, Malformed> {
    crate::proto::push::check_topic(topic.as_bytes()).map_err(Malformed::Topic)?;
    if topic.contains(['+', '#']) || !super::topic_fits_subject(topic) {
        return Err(Malformed::RetainedTopic(topic.to_string()));
    }
    if data.len() > max_push {
        return Err(Malformed::TooLarge { len: data.len(), max: max_push });
    }
    if !mqtt.retain {
        return Err(Malformed::NotRetained);
    }
    Ok(Entry { topic: topic.to_string(), data, mqtt, publish_us })
}

fn entry(w: Wire, max_push: usize) -> Result<Entry, Malformed> {
    let data = base64::engine::general_purpose::STANDARD.decode(w.data.as_bytes()).map_err(|e| Malformed::Base64(e.to_string()))?;
    let mqtt = w.mqtt.checked()?;
    checked(&w.topic, data, mqtt, w.publish_us, max_push)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> MqttMeta {
        MqttMeta { qos: 1, retain: true, props: None, shared: Vec::new() }
    }

    /// A set crosses in chunks of at most CHUNK_BYTES of JSON and comes
    /// back whole; an entry too large to cross is left out and counted.
    #[test]
    fn a_set_crosses_in_bounded_chunks_and_comes_back_whole() {
        let big = vec![7u8; MAX_ENTRY_BYTES];
        let small = vec![1u8; CHUNK_BYTES / 2];
        let set: Vec<(String, Vec<u8>)> =
            vec![("a/1".into(), small.clone()), ("a/2".into(), small.clone()), ("a/3".into(), big.clone()), ("a/4".into(), b"x".to_vec())];
        let (out, skipped) = chunks(set.iter().map(|(t, d)| (t.as_str(), d.as_slice(), meta(), 5)));
        assert_eq!(skipped, 1, "a/3 in base64 is over MAX_ENTRY_BYTES");
        assert!(out.iter().all(|c| c.len() <= CHUNK_BYTES), "every chunk within the bound");
        let mut dropped = 0;
        let back: Vec<Vec<Entry>> = out.iter().map(|c| decode_chunk(c, 2 * CHUNK_BYTES, &mut dropped).unwrap()).collect();
        let topics: Vec<Vec<&str>> = back.iter().map(|c| c.iter().map(|e| e.topic.as_str()).collect()).collect();
        assert_eq!(topics, vec![vec!["a/1"], vec!["a/2", "a/4"]], "two thirds of a chunk in base64 each: one per chunk, the tiny one beside");
        assert_eq!(back[1][0], Entry { topic: "a/2".into(), data: small, mqtt: meta(), publish_us: 5 });
        assert_eq!(dropped, 0);
    }

    /// Of several nodes' answers the newest entry of each topic is kept
    /// (a clear too), within the asker's bounds counted once per topic.
    #[test]
    fn of_the_answers_the_newest_of_each_topic_is_kept_within_bounds() {
        let e = |t: &str, d: &[u8], us| Entry { topic: t.into(), data: d.to_vec(), mqtt: meta(), publish_us: us };
        let answers = vec![e("a", b"old", 1), e("b", b"x", 1), e("a", b"new", 2), e("b", b"", 3), e("a", b"older", 0), e("c", b"y", 1), e("d", b"z", 1)];
        let mut dropped = 0;
        let mut got = newest(answers.into_iter(), 3, 100, &mut dropped);
        got.sort_by(|x, y| x.topic.cmp(&y.topic));
        assert_eq!(got, vec![e("a", b"new", 2), e("b", b"", 3), e("c", b"y", 1)]);
        assert_eq!(dropped, 1, "d: a fourth topic");
        let mut dropped = 0;
        assert_eq!(newest(vec![e("a", b"12345", 1), e("b", b"12345", 1)].into_iter(), 10, 8, &mut dropped).len(), 1);
        assert_eq!(dropped, 1, "past the bytes");
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
        assert_eq!(got.iter().map(|e| e.topic.as_str()).collect::<Vec<_>>(), ["ok/1", "empty"], "a clear crosses too");
        assert_eq!(dropped, 6);
        assert!(decode_chunk(b"{not json", 8, &mut dropped).unwrap_err().to_string().contains("not a retained set"));
    }
}
