//! Client ids across a cluster (MQTT-3.1.4-2 on every node, not just one):
//! each node tells the others the client ids that connect to it
//! (`megaconn.clientids`, signed), and a node that holds one of them
//! lets it go. A connection of the id here is taken over (v5 DISCONNECT
//! 0x8E, then closed, as a takeover on one node), its will dropped (the
//! client is alive elsewhere) and its state not kept; a kept session of
//! the id is dropped (the client's session lives on the other node now:
//! the sessions do not move between nodes). Counted `moved`.
//!
//! Two CONNECTs of one id on two nodes at once would each close the
//! other's: so the ids this node admitted within [`RECENT_US`] keep their
//! admission time, and the later CONNECT (by the nodes' clocks; at the
//! same microsecond, the greater node id) is the one that stays.

use super::{Action, Sessions};
use crate::server::commands::{split_id, IdKey};
use std::collections::{HashMap, VecDeque};

/// How long an admission's time is kept for the tie-break: longer than
/// an announcement takes between nodes.
pub(crate) const RECENT_US: u64 = 30_000_000;
/// Most admissions remembered (a ramp of 30,000/s fills it in 35 s); the
/// oldest are forgotten first.
pub(crate) const MAX_RECENT: usize = 1 << 20;

/// The ids this node admitted lately, with the wall-clock µs of each.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    pub(super) at: HashMap<IdKey, u64>,
    pub(super) order: VecDeque<(u64, IdKey)>,
}

impl Recent {
    pub(crate) fn note(&mut self, key: IdKey, now_us: u64) {
        self.forget(now_us);
        if self.order.len() >= MAX_RECENT {
            self.pop();
        }
        self.at.insert(key, now_us);
        self.order.push_back((now_us, key));
    }

    fn forget(&mut self, now_us: u64) {
        while self.order.front().is_some_and(|(t, _)| t + RECENT_US < now_us) {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some((t, key)) = self.order.pop_front() {
            if self.at.get(&key) == Some(&t) {
                self.at.remove(&key);
            }
        }
    }

    pub(super) fn since(&self, key: &IdKey) -> Option<u64> {
        self.at.get(key).copied()
    }
}

/// Whether our CONNECT at `ours_us` is the later of two of one id, the
/// other's at `theirs_us` (`theirs_wins` a tie: their node id is greater).
pub(super) fn ours_later(ours_us: u64, theirs_us: u64, theirs_wins: bool) -> bool {
    ours_us > theirs_us || (ours_us == theirs_us && !theirs_wins)
}

impl Sessions {
    /// Whether this node admitted `key` lately by a CONNECT later than
    /// another node's at `at_us`.
    pub(super) fn admitted_later(&self, key: &IdKey, at_us: u64, theirs_wins: bool) -> bool {
        self.recent.since(key).is_some_and(|t| ours_later(t, at_us, theirs_wins))
    }

    /// Client ids that connected to another node at `at_us`; `theirs_wins`
    /// breaks a tie of the same microsecond (their node id is greater).
    /// The takeovers and refusals to send; the rest is done here.
    /// An id another identity owns here is left alone (counted
    /// `refused{owner_elsewhere}`): its owner's connection, session and
    /// will stay.
    pub(crate) fn connected_elsewhere(&mut self, ids: &[crate::cluster::OwnedId], at_us: u64, theirs_wins: bool) -> Vec<Action> {
        let mut out = Vec::new();
        for (id, owner) in ids {
            let key = self.keyer.key(id);
            if self.owned_by_another(&key, owner.as_deref()) {
                crate::stats::counters::bump(&mut self.counters.refused, "owner_elsewhere");
                continue;
            }
            out.extend(self.displaced_elsewhere(&key, at_us, theirs_wins));
            self.cancel_will(&key);
            if let Some((_, o)) = self.online.get(&key) {
                if !self.admitted_later(&key, at_us, theirs_wins) && self.moved.insert(key) {
                    self.counters.moved += 1;
                    out.push(Action::Takeover(split_id(o.conn).0, o.conn));
                }
            } else if self.take(&key).is_some() {
                self.counters.moved += 1;
            }
        }
        out
    }
}
