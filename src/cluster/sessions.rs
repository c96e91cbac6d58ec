//! MQTT sessions moving between nodes: a client that comes back to
//! another node of the cluster resumes the session the first node kept
//! for it (`server/broker/sessions/moving.rs` holds both ends).
//!
//! A node about to answer a CONNECT that asks for its session (3.1.1
//! Clean Session 0, v5 Clean Start 0) and keeps none of the id asks the
//! others, signed, on [`SESSIONS_TAKE`]: client ids in the batches of a
//! client id announcement ([`super::ClientIds`], `at_us` the time of the
//! CONNECTs). Every node answers on the asker's inbox: first each session
//! it kept of those ids (one message each, the `--mqtt-sessions-file`
//! JSON, with the number of its lend), then one last message per batch,
//! `{"done":true,"busy":[...],"newer":[...],"owned":[...]}`. With
//! `--auth` each id goes with its owner, and a node hands over a session
//! and lets go of a connection only to the same owner: `owned` names the
//! ids another identity owns there, and the asker refuses its CONNECT
//! (v5 0x87, 3.1.1 5) as a node refuses it alone. `busy` names the ids
//! connected there now whose CONNECT was older than the question: that
//! node takes their connections over and keeps their sessions, and the
//! asker asks again for those after [`BUSY_WAIT`], at most [`ROUNDS`]
//! times in all. `newer` names the ids connected there by a CONNECT newer
//! than the asker's: the asker refuses its own (as a CONNECT displaced on
//! one node is). A round ends when every node the asker heard lately (on
//! `megaconn.shared`, which each node announces every 5 s; a stopping
//! node too, until 15 s without a word) said done, or after [`WINDOW`].
//!
//! **Two phases.** A session's answer only lends it: the node that sent
//! a copy keeps the session in its store until the asker confirms,
//! signed, on [`SESSIONS_TAKEN`] (`{"to":node,"lend":n}`, sent as each
//! session arrives within its round). A session that came after its
//! round ended (the asker no longer listens) is never confirmed, and
//! after `LEND_FOR` the lend ends: the session is still the lender's, for
//! the client's next CONNECT, instead of being lost in transit. A
//! confirmation lost on the way leaves the session on both nodes until
//! the asker's client id announcement reaches the lender (which drops
//! its copy then).

use super::malformed::Malformed;
use super::sign::Refusal;
use futures_util::StreamExt;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Questions and answers about kept sessions.
pub(crate) const SESSIONS_TAKE: &str = "megaconn.sessions.take";
/// An asker's confirmations of the sessions it got ([`Taken`]).
pub(crate) const SESSIONS_TAKEN: &str = "megaconn.sessions.taken";
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

/// One answer message: a session (its JSON, parsed by the server, and
/// the number of its lend), or the node's last word (`done`, with the
/// ids connected there).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<Box<serde_json::value::RawValue>>,
    /// With a session: what the asker's [`Taken`] names (0: an answer that
    /// wants no confirmation).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) lend: u64,
    #[serde(default)]
    pub(crate) done: bool,
    #[serde(default)]
    pub(crate) busy: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) newer: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) owned: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An asker's confirmation, on [`SESSIONS_TAKEN`], that the session lent
/// as `lend` by node `to` reached it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Taken {
    pub(crate) to: String,
    pub(crate) lend: u64,
}

impl Taken {
    /// Another node's confirmation.
    pub(crate) fn parse(body: &[u8]) -> Result<Taken, Malformed> {
        let t: Taken = serde_json::from_slice(body).map_err(|e| Malformed::TakenJson(e.to_string()))?;
        if t.lend == 0 || t.to.len() > super::MAX_ID_BYTES {
            return Err(Malformed::Taken { lend: t.lend, bytes: t.to.len() });
        }
        Ok(t)
    }
}

/// What the nodes answered to one question.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Handed {
    /// The ids asked about.
    pub(crate) asked: Vec<String>,
    /// The time of the CONNECTs the question was for (a claim made since,
    /// of the same id, is not refused by its `newer`).
    pub(crate) at_us: u64,
    /// Each session handed over, as its JSON.
    pub(crate) sessions: Vec<String>,
    /// Ids still connected on another node at the last question.
    pub(crate) busy: Vec<String>,
    /// Ids another node holds by a CONNECT newer than this node's.
    pub(crate) newer: Vec<String>,
    /// Ids another identity owns on another node.
    pub(crate) owned: Vec<String>,
}

/// A node's answer to one question, from its registry: each session
/// lent (its lend and JSON), the ids connected there by an older CONNECT
/// (being taken over) and those connected by a newer one.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Handing {
    pub(crate) sessions: Vec<(u64, String)>,
    pub(crate) busy: Vec<String>,
    pub(crate) newer: Vec<String>,
    pub(crate) owned: Vec<String>,
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

/// Ask the other nodes for the sessions of `ids`, whose CONNECTs came at
/// wall-clock `at_us`: the answers within [`WINDOW`], and again after
/// [`BUSY_WAIT`] for ids another node was taking over (at most [`ROUNDS`]
/// questions).
pub(super) async fn ask(client: &async_nats::Client, me: &super::link::Me, shared: &super::link::Shared, ids: Vec<super::OwnedId>, at_us: u64) -> Handed {
    let mut got = Handed { asked: ids.iter().map(|(id, _)| id.clone()).collect(), at_us, ..Handed::default() };
    let mut want = ids;
    for round in 0..ROUNDS {
        if round > 0 {
            tokio::time::sleep(BUSY_WAIT).await;
        }
        let known = shared.peers.lock().expect("peers").names(Instant::now());
        let once = ask_once(client, me, shared, &want, at_us, &known).await;
        got.sessions.extend(once.sessions);
        got.newer.extend(once.newer);
        got.owned.extend(once.owned);
        got.busy.clone_from(&once.busy);
        want.retain(|(id, _)| once.busy.contains(id));
        if want.is_empty() {
            break;
        }
    }
    got.newer.sort();
    got.newer.dedup();
    got.owned.sort();
    got.owned.dedup();
    got
}

/// One question: each session got (each confirmed to its lender as it
/// comes), the ids busy and newer elsewhere.
async fn ask_once(
    client: &async_nats::Client,
    me: &super::link::Me,
    shared: &super::link::Shared,
    ids: &[super::OwnedId],
    at_us: u64,
    known: &HashSet<String>,
) -> Handed {
    let (mut got, mut done) = (Handed::default(), HashSet::new());
    if known.is_empty() || client.connection_state() != async_nats::connection::State::Connected {
        return got;
    }
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return got };
    let bodies = super::ClientIds::batches(ids.to_vec(), at_us);
    let batches = bodies.len();
    for body in bodies {
        let h = me.headers(SESSIONS_TAKE, "", "", "", &body);
        if let Err(e) = client.publish_with_reply_and_headers(SESSIONS_TAKE, inbox.clone(), h, body.into()).await {
            shared.error(format!("cannot ask the other nodes for MQTT sessions: {e}"));
            return got;
        }
    }
    let asked: HashSet<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
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
            Ok(Answer { session: Some(session), lend, .. }) => {
                got.sessions.push(session.get().to_string());
                if lend != 0 {
                    confirm(client, me, shared, Taken { to: node, lend }).await;
                }
            }
            Ok(Answer { done: true, busy: b, newer, owned, .. }) => {
                got.busy.extend(b.into_iter().filter(|i| asked.contains(i.as_str())));
                got.newer.extend(newer.into_iter().filter(|i| asked.contains(i.as_str())));
                got.owned.extend(owned.into_iter().filter(|i| asked.contains(i.as_str())));
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
    got.busy.sort();
    got.busy.dedup();
    got
}

/// Tell the node that lent a session that it came.
async fn confirm(client: &async_nats::Client, me: &super::link::Me, shared: &super::link::Shared, taken: Taken) {
    let body = serde_json::to_vec(&taken).expect("serializes");
    let h = me.headers(SESSIONS_TAKEN, "", "", "", &body);
    if let Err(e) = client.publish_with_headers(SESSIONS_TAKEN, h, body.into()).await {
        shared.error(format!("cannot confirm to node '{}' the MQTT session it handed over (it keeps it again after a while): {e}", taken.to));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_both_ways() {
        let s: Answer = serde_json::from_slice(br#"{"session":{"id":"a","subs":[],"messages":[]}}"#).unwrap();
        assert!(s.session.is_some_and(|s| s.get().contains("\"id\":\"a\"")));
        let d: Answer = serde_json::from_slice(br#"{"done":true,"busy":["a"]}"#).unwrap();
        assert!(d.done && d.busy == ["a"] && d.session.is_none() && d.newer.is_empty());
        let bye = serde_json::to_string(&Answer { done: true, ..Answer::default() }).unwrap();
        assert_eq!(bye, r#"{"done":true,"busy":[]}"#);
        let lent: Answer = serde_json::from_slice(br#"{"session":{"id":"a"},"lend":7}"#).unwrap();
        assert_eq!(lent.lend, 7);
        let newer = serde_json::to_string(&Answer { done: true, newer: vec!["b".into()], ..Answer::default() }).unwrap();
        assert_eq!(newer, r#"{"done":true,"busy":[],"newer":["b"]}"#);
    }

    #[test]
    fn confirmations_are_checked() {
        assert_eq!(Taken::parse(br#"{"to":"A","lend":3}"#), Ok(Taken { to: "A".into(), lend: 3 }));
        assert_eq!(Taken::parse(br#"{"to":"A","lend":0}"#), Err(Malformed::Taken { lend: 0, bytes: 1 }));
        assert!(matches!(Taken::parse(br#"{"to":"A"}"#), Err(Malformed::TakenJson(_))));
        let long = format!(r#"{{"to":"{}","lend":1}}"#, "n".repeat(4096));
        assert!(matches!(Taken::parse(long.as_bytes()), Err(Malformed::Taken { lend: 1, bytes: 4096 })));
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
