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
//!   meanwhile displaces the first (refused as on one node), here or on
//!   another node (its announcement of the id, or its answer, says its
//!   CONNECT is the newer); a claim never waits past [`MAX_WAIT`]. An
//!   admitted claim is noted, and announced, at the time of its CONNECT.
//! - **Handing over.** Asked for ids it keeps sessions of, a node lends
//!   them (their waiting wills cancelled: the client is back), each with
//!   at most `MAX_ANSWER` bytes of JSON (the newest queued messages past
//!   it dropped, counted `queue_dropped{reason="move"}`), and keeps each
//!   aside until the asker confirms it came (counted `handed_over`) or
//!   announces the id; without either within [`LEND_FOR`] the session is
//!   kept here again (counted `returned`), not lost in transit. An id
//!   connected here by a CONNECT older than the asker's is taken over as
//!   on one node (a will without a delay published, MQTT-3.1.4-3; a
//!   delayed one dropped); its session is kept at its end and lent when
//!   the asker asks again. One connected by a newer CONNECT stays, and
//!   the asker's claim is refused.

use super::saved::SavedSession;
use super::{Action, Sessions};
use crate::cluster::sessions::Handing;
use crate::server::commands::{IdKey, SessionClaim};
use std::time::{Duration, Instant};

/// Longest a claim waits for the other nodes: every round of questions
/// (`cluster/sessions.rs`: 3 of at most 500 ms, 200 ms apart), and slack.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(3);
/// How long a session lent to another node waits for its confirmation:
/// past the asker's longest wait, so a confirmation sent in time is in.
pub(crate) const LEND_FOR: Duration = Duration::from_secs(5);

/// A claim waiting for the other nodes' answers.
#[derive(Debug)]
pub(super) struct Asking {
    worker: usize,
    claim: SessionClaim,
    since: Instant,
    /// Wall-clock µs of its CONNECT (the registry's clock when claimed).
    at_us: u64,
}

/// A session lent to another node, until it confirms it came.
#[derive(Debug)]
pub(super) struct Lent {
    key: IdKey,
    asker: String,
    until: Instant,
    session: SavedSession,
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
        let old = self.asking.insert(key, Asking { worker, claim: c, since: now, at_us: self.clock_us });
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

    /// Another node announced `key` connected there at `at_us`
    /// (`theirs_wins` a tie): a claim of it waiting here since before is
    /// refused; one of a later CONNECT waits on.
    pub(super) fn displaced_elsewhere(&mut self, key: &IdKey, at_us: u64, theirs_wins: bool) -> Option<Action> {
        let a = self.asking.get(key)?;
        match a.at_us < at_us || (a.at_us == at_us && theirs_wins) {
            true => self.displaced_asking(key),
            false => None,
        }
    }

    /// The other nodes' answers to a question about `asked`: the claims
    /// of ids another node holds by a newer CONNECT refused, the sessions
    /// they handed over (each as `--mqtt-sessions-file` writes it) kept
    /// here, then each claim waiting for them admitted. The answers, and
    /// the ids admitted with the time of their CONNECT (to announce to
    /// the other nodes).
    pub(crate) fn handed(
        &mut self,
        asked: &[String],
        newer: &[String],
        sessions: Vec<SavedSession>,
        now: Instant,
        wall: u64,
    ) -> (Vec<Action>, Vec<(String, u64)>) {
        let mut refused: Vec<Action> = newer.iter().filter_map(|id| self.displaced_asking(&self.keyer.key(id))).collect();
        for s in sessions {
            let key = self.keyer.key(&s.id);
            // Its claim may have been answered already (it waited past
            // MAX_WAIT): kept for the client's next CONNECT, unless the id
            // is connected here now or has a session here.
            if self.online.get(&key).is_some() || self.kept.contains_key(&key) {
                crate::stats::counters::bump(&mut self.counters.expired, "moved_late");
                continue;
            }
            let s = SavedSession { will: None, ..s };
            if self.restore_one(s, now, wall) {
                self.counters.moved_in += 1;
            }
        }
        let keys = asked.iter().map(|id| self.keyer.key(id)).collect();
        let (answers, admitted) = self.admit_waiting(keys, now);
        refused.extend(answers);
        (refused, admitted)
    }

    /// Admit the claims of these ids that wait: the answers, and the ids
    /// admitted with the time of their CONNECT.
    fn admit_waiting(&mut self, keys: Vec<IdKey>, now: Instant) -> (Vec<Action>, Vec<(String, u64)>) {
        let (mut out, mut admitted) = (Vec::new(), Vec::new());
        for key in keys {
            let Some(a) = self.asking.remove(&key) else { continue };
            let id = a.claim.client_id.clone();
            let answer = self.admit(a.worker, key, a.claim, now, a.at_us);
            if matches!(&answer, Action::Answer(_, ans) if ans.code == 0) {
                admitted.push((id, a.at_us));
            }
            out.push(answer);
        }
        (out, admitted)
    }

    /// Claims that waited [`MAX_WAIT`] (no answer came back at all):
    /// admitted with what this node has.
    pub(crate) fn overdue(&mut self, now: Instant) -> (Vec<Action>, Vec<(String, u64)>) {
        let late: Vec<IdKey> = self.asking.iter().filter(|(_, a)| now.duration_since(a.since) >= MAX_WAIT).map(|(k, _)| *k).collect();
        self.admit_waiting(late, now)
    }

    /// Node `asker` asks for the sessions of `ids`, whose CONNECTs came
    /// at `at_us` (`theirs_wins` a tie): those kept here lent to it (each
    /// one's JSON, kept aside until it confirms), the ids connected here
    /// by an older CONNECT, whose connections are taken over (busy: asked
    /// again later), and those connected by a newer one, which stay.
    pub(crate) fn hand_over(&mut self, asker: &str, ids: &[String], at_us: u64, theirs_wins: bool, now: Instant, wall: u64) -> (Handing, Vec<Action>) {
        let (mut answer, mut out) = (Handing::default(), Vec::new());
        for id in ids {
            let key = self.keyer.key(id);
            if let Some(o) = self.online.get(&key) {
                let ours_later = self.recent.since(&key).is_some_and(|t| t > at_us || (t == at_us && !theirs_wins));
                if ours_later && !self.handing.contains(&key) {
                    answer.newer.push(id.clone());
                    continue;
                }
                // Once: a second question while it ends finds it busy still.
                if self.handing.insert(key) {
                    out.push(Action::Takeover(crate::server::commands::split_id(o.conn).0, o.conn));
                    self.counters.taken_over += 1;
                }
                answer.busy.push(id.clone());
                continue;
            }
            // Moved out of the store, not copied.
            let Some(k) = self.take(&key) else { continue };
            let expires_us = k.expires.map(|t| super::saved::wall_at(t, now, wall));
            let s = SavedSession { id: id.clone(), expires_us, subs: k.subs, messages: k.messages.into(), will: None };
            // Its client is back: a will waiting for its delay goes.
            if self.wills.cancel(&key) {
                self.counters.wills_cancelled += 1;
                self.counters.wills_waiting = self.wills.len() as u64;
            }
            let (json, session, dropped) = answer_within(s);
            if dropped > 0 {
                *self.counters.queue_dropped.entry("move".into()).or_insert(0) += dropped;
            }
            self.next_lend += 1;
            let lend = self.next_lend;
            self.lending.insert(key, lend);
            self.lent.insert(lend, Lent { key, asker: asker.to_string(), until: now + LEND_FOR, session });
            self.counters.lent = self.lent.len() as u64;
            answer.sessions.push((lend, json));
        }
        (answer, out)
    }

    /// Node `node` confirmed it got the session lent as `lend`: gone from
    /// here. Whether one was waiting (lent to that node).
    pub(crate) fn taken(&mut self, node: &str, lend: u64) -> bool {
        if self.lent.get(&lend).is_none_or(|l| l.asker != node) {
            return false;
        }
        self.end_lend(lend);
        self.counters.handed_over += 1;
        true
    }

    /// A lent session of `key`, if any, is no longer this node's: its
    /// client connected to `node`. Counted handed over when that is the
    /// node it was lent to (whose confirmation was lost), else moved.
    pub(super) fn lent_gone(&mut self, key: &IdKey, node: &str) {
        let Some(lend) = self.lending.get(key).copied() else { return };
        match self.end_lend(lend).is_some_and(|l| l.asker == node) {
            true => self.counters.handed_over += 1,
            false => self.counters.moved += 1,
        }
    }

    fn end_lend(&mut self, lend: u64) -> Option<Lent> {
        let l = self.lent.remove(&lend)?;
        self.lending.remove(&l.key);
        self.counters.lent = self.lent.len() as u64;
        Some(l)
    }

    /// Sessions lent [`LEND_FOR`] ago and never confirmed: kept here again
    /// (counted `returned`) for their client's next CONNECT, unless the
    /// id is connected here now or has a session here again (then the
    /// lent copy is the older: dropped, counted `expired{moved_late}`).
    pub(crate) fn unconfirmed(&mut self, now: Instant, wall: u64) {
        if self.lent.is_empty() {
            return;
        }
        let due: Vec<u64> = self.lent.iter().filter(|(_, l)| l.until <= now).map(|(n, _)| *n).collect();
        for lend in due {
            let Some(l) = self.end_lend(lend) else { continue };
            if self.online.get(&l.key).is_some() || self.kept.contains_key(&l.key) {
                crate::stats::counters::bump(&mut self.counters.expired, "moved_late");
            } else if self.restore_one(l.session, now, wall) {
                self.counters.returned += 1;
            }
        }
    }

    /// The sessions lent and not yet confirmed (for `--mqtt-sessions-file`
    /// when the process stops before they are).
    pub(super) fn lent_sessions(&self) -> impl Iterator<Item = &SavedSession> {
        self.lent.values().map(|l| &l.session)
    }

    /// Drop the claims of a worker that died while they waited.
    pub(super) fn forget_asking(&mut self, worker: usize) {
        self.asking.retain(|_, a| a.worker != worker);
    }
}

/// A session's answer, within `MAX_ANSWER` bytes of JSON: the newest
/// queued messages past it are left out. The JSON, the session it holds,
/// and how many were left out. Each message's size is measured once.
fn answer_within(mut s: SavedSession) -> (String, SavedSession, u64) {
    let max = crate::cluster::sessions::MAX_ANSWER;
    let json = serde_json::to_string(&s).expect("serializes");
    if json.len() <= max {
        return (json, s, 0);
    }
    let mut size = json.len();
    let mut dropped = 0;
    while size > max {
        let Some(m) = s.messages.pop() else { break };
        // The message and the comma before it.
        size -= serde_json::to_string(&m).expect("serializes").len() + 1;
        dropped += 1;
    }
    (serde_json::to_string(&s).expect("serializes"), s, dropped)
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
        let s = SavedSession { id: "d".into(), expires_us: None, subs: Vec::new(), messages: (0..10).map(m).collect(), will: None };
        let (json, lent, dropped) = answer_within(s.clone());
        assert!(json.len() <= crate::cluster::sessions::MAX_ANSWER, "{} bytes", json.len());
        let back: SavedSession = serde_json::from_str(&json).unwrap();
        assert_eq!(back.messages.len() as u64 + dropped, 10);
        assert_eq!(back.messages.iter().map(|m| m.topic.as_str()).collect::<Vec<_>>(), (0..7).map(|i| format!("t/{i}")).collect::<Vec<_>>(), "the oldest kept");
        assert_eq!(lent, back, "what is kept aside is what was sent");
        let small = SavedSession { messages: vec![m(0)], ..s };
        assert_eq!(answer_within(small).2, 0);
    }
}
