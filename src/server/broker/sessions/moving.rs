//! Sessions moving between cluster nodes (`cluster/sessions.rs` carries
//! the questions and answers): both ends in the registry.
//!
//! - **Asking.** A CONNECT that asks for its session (Clean Session /
//!   Clean Start 0) whose id this node neither holds nor keeps a session
//!   of waits, unanswered, while the node asks the others. Their answers
//!   (or none within the window) come back through [`Sessions::handed`]:
//!   a session handed over is kept here as if its client had left this
//!   node, and the claim admitted as any other, so it resumes it (session
//!   present 1, its queued messages in order). A second CONNECT of the id
//!   meanwhile displaces the first (refused as on one node); a claim
//!   never waits past [`MAX_WAIT`].
//! - **Handing over.** Asked for ids it keeps sessions of, a node gives
//!   them up (their waiting wills cancelled: the client is back), each
//!   with at most `MAX_ANSWER` bytes of JSON (the newest queued messages
//!   past it dropped, counted `queue_dropped{reason="move"}`). An id
//!   connected here is taken over as on one node (a will without a delay
//!   published, MQTT-3.1.4-3; a delayed one dropped); its session is kept
//!   at its end and handed over when the asker asks again.

use super::{Action, Sessions};
use crate::server::commands::{IdKey, SessionClaim};
use std::time::{Duration, Instant};

/// Longest a claim waits for the other nodes: every round of questions
/// (`cluster/sessions.rs`: 3 of at most 500 ms, 200 ms apart), and slack.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(3);

/// A claim waiting for the other nodes' answers.
#[derive(Debug)]
pub(super) struct Asking {
    worker: usize,
    claim: SessionClaim,
    since: Instant,
}

impl Sessions {
    /// Whether a claim of a free id must first ask the other nodes: in a
    /// cluster, for a session it wants and this node does not keep.
    pub(super) fn must_ask(&self, key: &IdKey, c: &SessionClaim) -> bool {
        self.cluster && !c.clean && !self.kept.contains_key(key)
    }

    /// Park a claim until the other nodes answered; one already waiting
    /// for the same id is displaced (and the question already asked
    /// serves the new one).
    pub(super) fn ask(&mut self, worker: usize, key: IdKey, c: SessionClaim, now: Instant) -> Option<Action> {
        let id = c.client_id.clone();
        let old = self.asking.insert(key, Asking { worker, claim: c, since: now });
        match old {
            Some(old) => Some(self.displaced(old.worker, old.claim)),
            None => {
                self.to_ask.push(id);
                None
            }
        }
    }

    /// A claim waiting for the other nodes that a newer one of the id
    /// (here) overtook: refused, as a claim displaced on one node is.
    pub(super) fn displaced_asking(&mut self, key: &IdKey) -> Option<Action> {
        let old = self.asking.remove(key)?;
        Some(self.displaced(old.worker, old.claim))
    }

    /// The ids to ask the other nodes about, since the last call.
    pub(crate) fn take_asks(&mut self) -> Vec<String> {
        std::mem::take(&mut self.to_ask)
    }

    /// The other nodes' answers to a question about `asked`: the sessions
    /// they handed over (each as `--mqtt-sessions-file` writes it) are
    /// kept here, then each claim waiting for them is admitted. The
    /// answers, and the ids admitted (to announce to the other nodes).
    pub(crate) fn handed(&mut self, asked: &[String], sessions: Vec<super::saved::SavedSession>, now: Instant, wall: u64) -> (Vec<Action>, Vec<String>) {
        for s in sessions {
            let key = self.keyer.key(&s.id);
            // Its claim may have been answered already (it waited past
            // MAX_WAIT): kept for the client's next CONNECT, unless the id
            // is connected here now or has a session here.
            if self.online.get(&key).is_some() || self.kept.contains_key(&key) {
                crate::stats::counters::bump(&mut self.counters.expired, "moved_late");
                continue;
            }
            let s = super::saved::SavedSession { will: None, ..s };
            if self.restore_one(s, now, wall) {
                self.counters.moved_in += 1;
            }
        }
        let keys = asked.iter().map(|id| self.keyer.key(id)).collect();
        self.admit_waiting(keys, now)
    }

    /// Admit the claims of these ids that wait: the answers, and the ids
    /// admitted.
    fn admit_waiting(&mut self, keys: Vec<IdKey>, now: Instant) -> (Vec<Action>, Vec<String>) {
        let (mut out, mut admitted) = (Vec::new(), Vec::new());
        for key in keys {
            let Some(a) = self.asking.remove(&key) else { continue };
            let id = a.claim.client_id.clone();
            let answer = self.admit(a.worker, key, a.claim, now);
            if matches!(&answer, Action::Answer(_, ans) if ans.code == 0) {
                admitted.push(id);
            }
            out.push(answer);
        }
        (out, admitted)
    }

    /// Claims that waited [`MAX_WAIT`] (no answer came back at all):
    /// admitted with what this node has.
    pub(crate) fn overdue(&mut self, now: Instant) -> (Vec<Action>, Vec<String>) {
        let late: Vec<IdKey> = self.asking.iter().filter(|(_, a)| now.duration_since(a.since) >= MAX_WAIT).map(|(k, _)| *k).collect();
        self.admit_waiting(late, now)
    }

    /// Another node asks for the sessions of `ids`: those kept here,
    /// given up (each one's JSON), and the ids connected here, whose
    /// connections are taken over (busy: asked again later).
    pub(crate) fn hand_over(&mut self, ids: &[String], now: Instant, wall: u64) -> (Vec<String>, Vec<String>, Vec<Action>) {
        let (mut sessions, mut busy, mut out) = (Vec::new(), Vec::new(), Vec::new());
        for id in ids {
            let key = self.keyer.key(id);
            if let Some(o) = self.online.get(&key) {
                // Once: a second question while it ends finds it busy still.
                if self.handing.insert(key) {
                    out.push(Action::Takeover(crate::server::commands::split_id(o.conn).0, o.conn));
                    self.counters.taken_over += 1;
                }
                busy.push(id.clone());
                continue;
            }
            // Moved out of the store, not copied.
            let Some(k) = self.take(&key) else { continue };
            let expires_us = k.expires.map(|t| super::saved::wall_at(t, now, wall));
            let s = super::saved::SavedSession { id: id.clone(), expires_us, subs: k.subs, messages: k.messages.into(), will: None };
            // Its client is back: a will waiting for its delay goes.
            if self.wills.cancel(&key) {
                self.counters.wills_cancelled += 1;
                self.counters.wills_waiting = self.wills.len() as u64;
            }
            let (json, dropped) = answer(s);
            if dropped > 0 {
                *self.counters.queue_dropped.entry("move".into()).or_insert(0) += dropped;
            }
            self.counters.handed_over += 1;
            sessions.push(json);
        }
        (sessions, busy, out)
    }

    /// Drop the claims of a worker that died while they waited.
    pub(super) fn forget_asking(&mut self, worker: usize) {
        self.asking.retain(|_, a| a.worker != worker);
    }
}

/// A session's answer, within `MAX_ANSWER` bytes of JSON: the newest
/// queued messages past it are left out (how many is the second value).
/// Each message's size is measured once.
fn answer(mut s: super::saved::SavedSession) -> (String, u64) {
    let max = crate::cluster::sessions::MAX_ANSWER;
    let json = serde_json::to_string(&s).expect("serializes");
    if json.len() <= max {
        return (json, 0);
    }
    let mut size = json.len();
    let mut dropped = 0;
    while size > max {
        let Some(m) = s.messages.pop() else { break };
        // The message and the comma before it.
        size -= serde_json::to_string(&m).expect("serializes").len() + 1;
        dropped += 1;
    }
    (serde_json::to_string(&s).expect("serializes"), dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::commands::SessionMessage;

    #[test]
    fn an_answer_keeps_the_oldest_messages_within_its_bytes() {
        let big = "A".repeat(100 << 10);
        let m =
            |i: usize| SessionMessage { topic: format!("t/{i}"), data: big.clone(), qos: 1, retain: false, id: 0, released: false, mqtt: None, publish_us: 0 };
        let s = super::super::saved::SavedSession { id: "d".into(), expires_us: None, subs: Vec::new(), messages: (0..10).map(m).collect(), will: None };
        let (json, dropped) = answer(s.clone());
        assert!(json.len() <= crate::cluster::sessions::MAX_ANSWER, "{} bytes", json.len());
        let back: super::super::saved::SavedSession = serde_json::from_str(&json).unwrap();
        assert_eq!(back.messages.len() as u64 + dropped, 10);
        assert_eq!(back.messages.iter().map(|m| m.topic.as_str()).collect::<Vec<_>>(), (0..7).map(|i| format!("t/{i}")).collect::<Vec<_>>(), "the oldest kept");
        let small = super::super::saved::SavedSession { messages: vec![m(0)], ..s };
        assert_eq!(answer(small).1, 0);
    }
}
