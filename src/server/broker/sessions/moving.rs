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
//!   them: it sends a copy of each, at most `MAX_ANSWER` bytes of JSON
//!   (the newest queued messages past it left out), and keeps the
//!   session in its store (still queuing, within the bounds, in the file;
//!   its delayed will held back) until the asker confirms it came. Then
//!   the session goes (counted `handed_over`; what the copy did not carry,
//!   left out or queued since, counted `queue_dropped{reason="move"}`) and
//!   its will is cancelled: the client is back. The asker's announcement
//!   of the id drops it too, as for any id connected elsewhere; without
//!   either within [`LEND_FOR`] the lend ends (counted `returned`): the
//!   session is this node's again, not lost in transit. An id
//!   connected here by a CONNECT older than the asker's is taken over as
//!   on one node (a will without a delay published, MQTT-3.1.4-3; a
//!   delayed one dropped); its session is kept at its end and lent when
//!   the asker asks again. One connected by a newer CONNECT stays, and
//!   the asker's claim is refused.

use super::saved::SavedSession;
use super::{Action, Sessions};
use crate::cluster::sessions::Handing;
use crate::cluster::OwnedId;
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
    pub(super) worker: usize,
    pub(super) claim: SessionClaim,
    since: Instant,
    /// Wall-clock µs of its CONNECT (the registry's clock when claimed).
    at_us: u64,
}

/// A kept session lent to another node, until it confirms it came: the
/// session itself stays in the store (queuing, bounded, in the file).
#[derive(Debug)]
pub(super) struct Lent {
    lend: u64,
    asker: String,
    until: Instant,
    /// Queued messages the answer carried: those past them (left out at
    /// `MAX_ANSWER`, or queued since) are counted dropped once the asker
    /// confirms.
    sent: usize,
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
        let id = (c.client_id.clone(), c.owner.clone());
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
    pub(crate) fn take_asks(&mut self) -> Vec<OwnedId> {
        std::mem::take(&mut self.to_ask)
    }

    /// Another node announced `key` connected there at `at_us`
    /// (`theirs_wins` a tie): a claim of it waiting here since before is
    /// refused; one of a later CONNECT waits on.
    pub(super) fn displaced_elsewhere(&mut self, key: &IdKey, at_us: u64, theirs_wins: bool) -> Option<Action> {
        let a = self.asking.get(key)?;
        match !super::elsewhere::ours_later(a.at_us, at_us, theirs_wins) {
            true => self.displaced_asking(key),
            false => None,
        }
    }

    /// The other nodes' answers to a question about `asked` (for CONNECTs
    /// at `asked_us`): the claims of ids another identity owns there
    /// refused, those of ids another node holds by a newer
    /// CONNECT refused (unless the claim waiting now came after the
    /// question: it displaced the one asked for), the sessions
    /// they handed over (each as `--mqtt-sessions-file` writes it) kept
    /// here, then each claim waiting for them admitted. The answers, and
    /// the ids admitted with the time of their CONNECT (to announce to
    /// the other nodes).
    pub(crate) fn handed(
        &mut self,
        asked: &[String],
        (newer, owned, asked_us): (&[String], &[String], u64),
        sessions: Vec<SavedSession>,
        now: Instant,
        wall: u64,
    ) -> (Vec<Action>, Vec<(OwnedId, u64)>) {
        let mut refused = Vec::new();
        for id in owned {
            let key = self.keyer.key(id);
            if let Some(a) = self.asking.remove(&key) {
                refused.push(self.not_owner(a.worker, &a.claim));
            }
        }
        for id in newer {
            let key = self.keyer.key(id);
            if self.asking.get(&key).is_some_and(|a| a.at_us <= asked_us) {
                refused.extend(self.displaced_asking(&key));
            }
        }
        for s in sessions {
            let key = self.keyer.key(&s.id);
            // Its client lives on a node with a newer CONNECT: not kept
            // here, unless a claim of a CONNECT newer still waits for it.
            if newer.contains(&s.id) && !self.asking.contains_key(&key) {
                self.counters.moved += 1;
                continue;
            }
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
    fn admit_waiting(&mut self, keys: Vec<IdKey>, now: Instant) -> (Vec<Action>, Vec<(OwnedId, u64)>) {
        let (mut out, mut admitted) = (Vec::new(), Vec::new());
        for key in keys {
            let Some(a) = self.asking.remove(&key) else { continue };
            let id = (a.claim.client_id.clone(), a.claim.owner.clone());
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
    pub(crate) fn overdue(&mut self, now: Instant) -> (Vec<Action>, Vec<(OwnedId, u64)>) {
        let late: Vec<IdKey> = self.asking.iter().filter(|(_, a)| now.duration_since(a.since) >= MAX_WAIT).map(|(k, _)| *k).collect();
        self.admit_waiting(late, now)
    }

    /// Node `asker` asks for the sessions of `ids` (with the owners of
    /// its CONNECTs), which came at `at_us` (`theirs_wins` a tie): those
    /// another identity owns here named (owned: refused there), those kept here lent to it (each
    /// one's JSON, kept aside until it confirms), the ids connected here
    /// by an older CONNECT, whose connections are taken over (busy: asked
    /// again later), and those connected by a newer one, which stay.
    pub(crate) fn hand_over(&mut self, asker: &str, ids: &[OwnedId], at_us: u64, theirs_wins: bool, now: Instant, wall: u64) -> (Handing, Vec<Action>) {
        let (mut answer, mut out) = (Handing::default(), Vec::new());
        for (id, owner) in ids {
            let key = self.keyer.key(id);
            if self.owned_by_another(&key, owner.as_deref()) {
                answer.owned.push(id.clone());
                continue;
            }
            if let Some((_, o)) = self.online.get(&key) {
                if self.admitted_later(&key, at_us, theirs_wins) && !self.handing.contains(&key) {
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
            // Copied: the session stays here, lent, until the asker confirms.
            let Some(k) = self.kept.get(&key) else { continue };
            let s = self.copy(k, id, now, wall);
            let queued = s.messages.len();
            let (json, left_out) = answer_within(s);
            let sent = queued - left_out as usize;
            // Lent again (another node asks): the last lend is the one.
            self.end_lend(&key);
            self.next_lend += 1;
            let lend = self.next_lend;
            self.lends.insert(lend, key);
            self.lending.insert(key, Lent { lend, asker: asker.to_string(), until: now + LEND_FOR, sent });
            self.counters.lent = self.lending.len() as u64;
            answer.sessions.push((lend, json));
        }
        (answer, out)
    }

    /// Node `node` confirmed it got the session lent as `lend`: gone from
    /// here (its waiting will cancelled: its client is back there).
    /// Whether it was still lent to that node.
    pub(crate) fn taken(&mut self, node: &str, lend: u64) -> bool {
        let Some(key) = self.lends.get(&lend).copied() else { return false };
        if self.lending.get(&key).is_none_or(|l| l.asker != node) {
            return false;
        }
        let sent = self.lending.get(&key).map_or(0, |l| l.sent);
        let unsent = self.take(&key).map_or(0, |k| k.messages.len().saturating_sub(sent));
        if unsent > 0 {
            *self.counters.queue_dropped.entry("move".into()).or_insert(0) += unsent as u64;
        }
        self.cancel_will(&key);
        self.counters.handed_over += 1;
        true
    }

    /// The lend of `key`'s session, if any, ends (the session taken from
    /// the store, confirmed, or lent again).
    pub(super) fn end_lend(&mut self, key: &IdKey) {
        if let Some(l) = self.lending.remove(key) {
            self.lends.remove(&l.lend);
            self.counters.lent = self.lending.len() as u64;
        }
    }

    /// Lends [`LEND_FOR`] old and never confirmed end: their sessions,
    /// never gone from the store, are this node's again (counted
    /// `returned`) for their client's next CONNECT.
    pub(crate) fn unconfirmed(&mut self, now: Instant) {
        if self.lending.is_empty() {
            return;
        }
        let due: Vec<IdKey> = self.lending.iter().filter(|(_, l)| l.until <= now).map(|(k, _)| *k).collect();
        for key in due {
            self.end_lend(&key);
            self.counters.returned += 1;
        }
    }

    /// Drop the claims of a worker that died while they waited.
    pub(super) fn forget_asking(&mut self, worker: usize) {
        self.asking.retain(|_, a| a.worker != worker);
    }
}

/// A session's answer, within `MAX_ANSWER` bytes of JSON: the newest
/// queued messages past it are left out (how many is the second value).
/// Each message's size is measured once.
fn answer_within(mut s: SavedSession) -> (String, u64) {
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
        // 100 KiB of base64 each in the answer's JSON.
        let big = "A".repeat(75 << 10);
        let m = |i: usize| SessionMessage {
            topic: format!("t/{i}"),
            data: big.clone().into_bytes(),
            qos: 1,
            retain: false,
            id: 0,
            released: false,
            mqtt: None,
            publish_us: 0,
        };
        let s = SavedSession {
            id: "d".into(),
            expires_us: None,
            subs: Vec::new(),
            messages: (0..10).map(m).collect(),
            rel: Vec::new(),
            owner: None,
            identity: String::new(),
            will: None,
            age: 0,
        };
        let (json, dropped) = answer_within(s.clone());
        assert!(json.len() <= crate::cluster::sessions::MAX_ANSWER, "{} bytes", json.len());
        let back: SavedSession = serde_json::from_str(&json).unwrap();
        assert_eq!(back.messages.len() as u64 + dropped, 10);
        assert_eq!(back.messages.iter().map(|m| m.topic.as_str()).collect::<Vec<_>>(), (0..7).map(|i| format!("t/{i}")).collect::<Vec<_>>(), "the oldest kept");
        let small = SavedSession { messages: vec![m(0)], ..s };
        assert_eq!(answer_within(small).1, 0);
    }
}
