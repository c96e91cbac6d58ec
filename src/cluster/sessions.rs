//! MQTT sessions moving between nodes: a client that comes back to
//! another node of the cluster resumes the session the first node kept
//! for it (`server/broker/sessions/moving.rs` holds both ends).
//!
//! A node about to answer a CONNECT that asks for its session (3.1.1
//! Clean Session 0, v5 Clean Start 0) and keeps none of the id asks the
//! others, signed, on [`SESSIONS_TAKE`]: client ids in the batches of a
//! client id announcement ([`super::ClientIds`]). Every node answers on
//! the asker's inbox: first each session it kept of those ids (one
//! message each, the `--mqtt-sessions-file` JSON, given up there), then
//! one last message per batch, `{"done":true,"busy":[...]}`, `busy` naming
//! the ids connected there now: that node takes their connections over
//! and keeps their sessions, and the asker asks again for those after
//! [`BUSY_WAIT`], at most [`ROUNDS`] times in all. A round ends when every
//! node the asker heard lately (on `megaconn.shared`, which each node
//! announces every 5 s; a stopping node too, until 15 s without a word)
//! said done, or after [`WINDOW`]. A session that comes after its round
//! ended is lost: the node that sent it gave it up (counted there).

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
/// Questions about one batch of ids at most: the first, and again while
/// some are busy. The rounds and pauses stay under the registry's
/// `MAX_WAIT` for a claim.
pub(crate) const ROUNDS: usize = 3;
/// Most bytes of one session's answer: the oldest queued messages go with
/// it, the newest past this are left (NATS's default payload limit is 1 MiB).
pub(crate) const MAX_ANSWER: usize = 768 << 10;
/// Most nodes remembered as peers, and how long one stays without a word.
const MAX_PEERS: usize = 64;
const FORGET_AFTER: Duration = Duration::from_secs(15);

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
    /// Ids still connected on another node at the last question.
    pub(crate) busy: Vec<String>,
}

/// The nodes heard lately (their `megaconn.shared` announcements): whose
/// answers a question waits for. A node that says it stops (its groups
/// empty) is still counted: while it drains, its clients come back to the
/// others and it hands their sessions over.
#[derive(Debug, Default)]
pub(crate) struct Peers(HashMap<String, Instant>);

impl Peers {
    pub(crate) fn heard(&mut self, node: &str, now: Instant) {
        self.0.retain(|_, t| now.duration_since(*t) < FORGET_AFTER);
        if self.0.len() < MAX_PEERS || self.0.contains_key(node) {
            self.0.insert(node.to_string(), now);
        }
    }

    /// The nodes heard within [`FORGET_AFTER`] of `now`.
    pub(crate) fn names(&self, now: Instant) -> HashSet<String> {
        self.0.iter().filter(|(_, t)| now.duration_since(**t) < FORGET_AFTER).map(|(n, _)| n.clone()).collect()
    }

    pub(crate) fn count(&self, now: Instant) -> usize {
        self.names(now).len()
    }
}

/// Ask the other nodes for the sessions of `ids`: the answers within
/// [`WINDOW`], and again after [`BUSY_WAIT`] for ids another node was
/// taking over (at most [`ROUNDS`] questions).
pub(super) async fn ask(client: &async_nats::Client, me: &super::link::Me, shared: &super::link::Shared, ids: Vec<String>) -> Handed {
    let mut got = Handed { asked: ids.clone(), ..Handed::default() };
    let mut want = ids;
    for round in 0..ROUNDS {
        if round > 0 {
            tokio::time::sleep(BUSY_WAIT).await;
        }
        let known = shared.peers.lock().expect("peers").names(Instant::now());
        let (sessions, busy) = ask_once(client, me, shared, &want, &known).await;
        got.sessions.extend(sessions);
        got.busy.clone_from(&busy);
        want = busy;
        if want.is_empty() {
            break;
        }
    }
    got
}

/// One question: (sessions, busy ids).
async fn ask_once(
    client: &async_nats::Client,
    me: &super::link::Me,
    shared: &super::link::Shared,
    ids: &[String],
    known: &HashSet<String>,
) -> (Vec<String>, Vec<String>) {
    let (mut sessions, mut busy, mut done) = (Vec::new(), Vec::new(), HashSet::new());
    if known.is_empty() || client.connection_state() != async_nats::connection::State::Connected {
        return (sessions, busy);
    }
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return (sessions, busy) };
    let bodies = super::ClientIds::batches(ids.to_vec(), crate::proto::push::wall_us());
    let batches = bodies.len();
    for body in bodies {
        let h = me.headers(SESSIONS_TAKE, "", "", "", &body);
        if let Err(e) = client.publish_with_reply_and_headers(SESSIONS_TAKE, inbox.clone(), h, body.into()).await {
            shared.error(format!("cannot ask the other nodes for MQTT sessions: {e}"));
            return (sessions, busy);
        }
    }
    let asked: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = tokio::time::Instant::now() + WINDOW;
    // Each node says done once per batch; a node not known when asking
    // is not waited for (its sessions are taken all the same).
    let mut dones: HashMap<String, usize> = HashMap::new();
    while done.len() < known.len() {
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
                if *n >= batches && known.contains(&node) {
                    done.insert(node);
                }
            }
            Ok(_) => shared.refuse(Refusal::Malformed, format!("refused an answer about MQTT sessions from node '{node}': neither a session nor done")),
            Err(e) => shared.refuse(Refusal::Malformed, format!("refused an answer about MQTT sessions from node '{node}': {e}")),
        }
    }
    busy.sort();
    busy.dedup();
    (sessions, busy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_both_ways() {
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
        p.heard("a", t + Duration::from_secs(5));
        assert_eq!(p.names(t + Duration::from_secs(5)), HashSet::from(["a".to_string(), "b".to_string()]));
        assert_eq!(p.count(t + FORGET_AFTER), 1, "b not heard for 15 s: gone");
        for i in 0..MAX_PEERS + 5 {
            p.heard(&format!("n{i}"), t);
        }
        assert_eq!(p.count(t), MAX_PEERS);
    }
}
