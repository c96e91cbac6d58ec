//! MQTT sessions moving between nodes: a client that comes back to
//! another node of the cluster resumes the session the first node kept
//! for it (`server/broker/sessions/moving.rs` holds both ends).
//!
//! A node about to answer a CONNECT that asks for its session (3.1.1
//! Clean Session 0, v5 Clean Start 0) and keeps none of the id asks the
//! others, signed, on [`SESSIONS_TAKE`]: a batch of client ids. Every
//! node answers on the asker's inbox: first each session it kept of those
//! ids (one message each, the `--mqtt-sessions-file` JSON, given up
//! there), then one last message `{"done":true,"busy":[...]}`, `busy`
//! naming the ids connected there now: that node takes their connections
//! over and keeps their sessions, and the asker asks once more for those
//! after [`BUSY_WAIT`]. The asker stops when every node it knows of (those
//! heard on `megaconn.shared`, which each node announces every 5 s) said
//! done, or after [`WINDOW`].

use super::sign::Refusal;
use futures_util::StreamExt;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Questions and answers about kept sessions.
pub(crate) const SESSIONS_TAKE: &str = "megaconn.sessions.take";
/// Longest the asker waits for the nodes' answers, each round: the most a
/// CONNACK waits for them.
pub(crate) const WINDOW: Duration = Duration::from_millis(500);
/// How long the asker waits before asking again for ids that were
/// connected on another node (its connection is being taken over there).
pub(crate) const BUSY_WAIT: Duration = Duration::from_millis(200);
/// Most bytes of one session's answer: the oldest queued messages go with
/// it, the newest past this are left (NATS's default payload limit is 1 MiB).
pub(crate) const MAX_ANSWER: usize = 768 << 10;
/// Most nodes remembered as peers, and how long one stays without a word.
const MAX_PEERS: usize = 64;
const FORGET_AFTER: Duration = Duration::from_secs(15);

/// A question: the client ids whose sessions are wanted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ask {
    pub(crate) ids: Vec<String>,
}

impl Ask {
    /// Batches of at most [`super::MAX_IDS_PER_MESSAGE`] ids.
    pub(crate) fn batches(ids: Vec<String>) -> Vec<Ask> {
        ids.chunks(super::MAX_IDS_PER_MESSAGE).map(|c| Ask { ids: c.to_vec() }).collect()
    }

    /// A question from another node, within the bounds of a client id
    /// announcement.
    pub(crate) fn parse(body: &[u8]) -> Result<Ask, String> {
        let a: Ask = serde_json::from_slice(body).map_err(|e| format!("not a session question: {e}"))?;
        if a.ids.len() > super::MAX_IDS_PER_MESSAGE {
            return Err(format!("{} client ids in one question (at most {})", a.ids.len(), super::MAX_IDS_PER_MESSAGE));
        }
        if let Some(id) = a.ids.iter().find(|i| i.is_empty() || i.len() > super::MAX_ID_BYTES) {
            return Err(format!("a client id of {} bytes", id.len()));
        }
        Ok(a)
    }
}

/// One answer message: a session (its JSON, parsed by the server), or
/// the node's last word (`done`, with the ids connected there).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    pub(crate) done: bool,
    #[serde(default)]
    pub(crate) busy: Vec<String>,
}

/// What the nodes answered to one question.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Handed {
    /// The ids asked about.
    pub(crate) asked: Vec<String>,
    /// Each session handed over, as its JSON.
    pub(crate) sessions: Vec<String>,
    /// Ids connected on another node when asked, and not handed after
    /// the second question either.
    pub(crate) busy: Vec<String>,
    /// Nodes that said done, of those known.
    pub(crate) nodes: usize,
    pub(crate) known: usize,
}

/// The nodes heard lately (their `megaconn.shared` announcements): how
/// many answers a question waits for.
#[derive(Debug, Default)]
pub(crate) struct Peers(HashMap<String, Instant>);

impl Peers {
    pub(crate) fn heard(&mut self, node: &str, now: Instant) {
        self.0.retain(|_, t| now.duration_since(*t) < FORGET_AFTER);
        if self.0.len() < MAX_PEERS || self.0.contains_key(node) {
            self.0.insert(node.to_string(), now);
        }
    }

    /// A node that said it is leaving.
    pub(crate) fn left(&mut self, node: &str) {
        self.0.remove(node);
    }

    pub(crate) fn count(&self, now: Instant) -> usize {
        self.0.values().filter(|t| now.duration_since(**t) < FORGET_AFTER).count()
    }
}

/// Ask the other nodes for the sessions of `ids`: the answers within
/// [`WINDOW`], and once more after [`BUSY_WAIT`] for ids another node was
/// taking over.
pub(super) async fn ask(client: &async_nats::Client, me: &super::link::Me, shared: &super::link::Shared, ids: Vec<String>) -> Handed {
    let mut got = Handed { asked: ids.clone(), ..Handed::default() };
    let mut want = ids;
    for round in 0..2 {
        if want.is_empty() {
            break;
        }
        let known = shared.peers.lock().expect("peers").count(Instant::now());
        let (sessions, busy, nodes) = ask_once(client, me, shared, &want, known).await;
        got.sessions.extend(sessions);
        (got.nodes, got.known) = (nodes, known);
        if round == 0 && !busy.is_empty() {
            tokio::time::sleep(BUSY_WAIT).await;
        }
        got.busy = busy.clone();
        want = busy;
    }
    got
}

/// One question: (sessions, busy ids, nodes that said done).
async fn ask_once(
    client: &async_nats::Client,
    me: &super::link::Me,
    shared: &super::link::Shared,
    ids: &[String],
    known: usize,
) -> (Vec<String>, Vec<String>, usize) {
    let (mut sessions, mut busy, mut done) = (Vec::new(), Vec::new(), HashSet::new());
    if known == 0 || client.connection_state() != async_nats::connection::State::Connected {
        return (sessions, busy, 0);
    }
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return (sessions, busy, 0) };
    for a in Ask::batches(ids.to_vec()) {
        let body = serde_json::to_vec(&a).expect("serializes");
        let h = me.headers(SESSIONS_TAKE, "", "", "", &body);
        if let Err(e) = client.publish_with_reply_and_headers(SESSIONS_TAKE, inbox.clone(), h, body.into()).await {
            shared.error(format!("cannot ask the other nodes for MQTT sessions: {e}"));
            return (sessions, busy, 0);
        }
    }
    let batches = ids.len().div_ceil(super::MAX_IDS_PER_MESSAGE);
    let asked: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = tokio::time::Instant::now() + WINDOW;
    // Each node says done once per batch.
    let mut dones: HashMap<String, usize> = HashMap::new();
    while done.len() < known {
        let Ok(Some(reply)) = tokio::time::timeout_at(deadline, sub.next()).await else { break };
        let node = match me.check(&reply) {
            Ok(n) => n,
            Err((r, why)) => {
                shared.refuse(r, why);
                continue;
            }
        };
        match serde_json::from_slice::<Answer>(&reply.payload) {
            Ok(Answer { session: Some(session), .. }) => sessions.push(session.get().to_string()),
            Ok(Answer { done: true, busy: b, .. }) => {
                busy.extend(b.into_iter().filter(|i| asked.contains(i.as_str())));
                let n = dones.entry(node.clone()).or_default();
                *n += 1;
                if *n >= batches {
                    done.insert(node);
                }
            }
            Ok(_) => shared.refuse(Refusal::Malformed, format!("refused an answer about MQTT sessions from node '{node}': neither a session nor done")),
            Err(e) => shared.refuse(Refusal::Malformed, format!("refused an answer about MQTT sessions from node '{node}': {e}")),
        }
    }
    busy.sort();
    busy.dedup();
    (sessions, busy, done.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_bounded_and_answers_read_both_ways() {
        let ids: Vec<String> = (0..super::super::MAX_IDS_PER_MESSAGE + 1).map(|i| format!("d{i}")).collect();
        let b = Ask::batches(ids);
        assert_eq!(b.iter().map(|a| a.ids.len()).collect::<Vec<_>>(), [super::super::MAX_IDS_PER_MESSAGE, 1]);
        assert!(Ask::parse(br#"{"ids":["a","b"]}"#).is_ok());
        assert!(Ask::parse(br#"{"ids":[""]}"#).unwrap_err().contains("0 bytes"));
        let many = serde_json::to_vec(&Ask { ids: vec!["x".into(); super::super::MAX_IDS_PER_MESSAGE + 1] }).unwrap();
        assert!(Ask::parse(&many).unwrap_err().contains("at most"));
        assert!(Ask::parse(b"nope").is_err());
        let s: Answer = serde_json::from_slice(br#"{"session":{"id":"a","subs":[],"messages":[]}}"#).unwrap();
        assert!(s.session.is_some_and(|s| s.get().contains("\"id\":\"a\"")));
        let d: Answer = serde_json::from_slice(br#"{"done":true,"busy":["a"]}"#).unwrap();
        assert!(d.done && d.busy == ["a"] && d.session.is_none());
        let bye = serde_json::to_string(&Answer { done: true, ..Answer::default() }).unwrap();
        assert_eq!(bye, r#"{"done":true,"busy":[]}"#);
    }

    #[test]
    fn peers_are_counted_while_heard_and_bounded() {
        let (mut p, t) = (Peers::default(), Instant::now());
        p.heard("a", t);
        p.heard("b", t);
        p.heard("a", t);
        assert_eq!(p.count(t), 2);
        p.left("b");
        assert_eq!(p.count(t), 1);
        assert_eq!(p.count(t + FORGET_AFTER), 0, "not heard for 15 s: gone");
        for i in 0..MAX_PEERS + 5 {
            p.heard(&format!("n{i}"), t);
        }
        assert_eq!(p.count(t), MAX_PEERS);
    }
}
