//! MQTT shared subscriptions (`$share/{group}/{filter}`, §4.8.2), in the
//! supervisor: each message a group's filter matches goes to **one**
//! member of the group, round-robin among the members connected now.
//!
//! Why the choice is made here and not in the workers: a topic message
//! reaches every worker once (`publish.rs` fans it out), and each worker
//! matches its own subscribers. A worker choosing among its own members
//! would deliver once per worker holding a member, not once per group.
//! The supervisor is the one place every publish passes through (an MQTT
//! client's, the admin API's, the cluster's) and that hears every
//! worker's members (`SharedChanged`), so it picks the member and names
//! it in the push command every worker already receives
//! (`PushCommand::shared`): the worker owning that connection delivers,
//! the others skip it. No extra line per message, and the fan-out stays
//! one command per worker.
//!
//! A member is a connection id and its granted QoS. Members join on their
//! SUBSCRIBE and leave on UNSUBSCRIBE, on the connection's end and with
//! their worker. A message picked for a member whose connection ended in
//! the instant before the supervisor heard of it is lost for that group
//! (as a QoS 0 message to a closing connection would be).
//!
//! Bounded: at most [`MAX_GROUPS`] groups in all and [`MAX_GROUPS_PER_FILTER`]
//! groups per filter; a join past either is refused and counted (the
//! client had its SUBACK from its worker, which bounds its own share:
//! `session/mqtt/shared.rs`). Matching a publish costs one pass over the
//! distinct filters that have groups.

use crate::proto::mqtt::topic::matches;
use crate::server::commands::{split_id, SharedChange};
use std::collections::HashMap;

/// Most groups (distinct `$share/{group}/{filter}`) on a node.
pub(crate) const MAX_GROUPS: usize = 16_384;
/// Most groups sharing one filter: a peer inventing group names for a
/// popular filter multiplies every matching message by this at most.
pub(crate) const MAX_GROUPS_PER_FILTER: usize = 64;

crate::counters! {
    /// The supervisor's shared subscription groups (`/stats` "mqtt_shared", `/metrics`).
    pub(crate) struct SharedCounters {
        groups: gauge "mqtt_shared_groups" "MQTT shared subscription groups with a member connected now",
        members: gauge "mqtt_shared_members" "Members of MQTT shared subscription groups connected now",
        picked: counter "mqtt_shared_picked" "Messages handed to one member of a shared subscription group",
        refused: by("reason") "mqtt_shared_refused" "Joins of MQTT shared subscription groups refused, by reason (groups: too many groups; groups_per_filter: too many groups of one filter)",
    }
}

/// One group: its members in join order and whose turn is next.
#[derive(Debug, Default)]
struct Group {
    /// (connection id, granted QoS).
    members: Vec<(u64, u8)>,
    next: usize,
}

/// Every group, by filter then group name.
#[derive(Debug, Default)]
pub(crate) struct SharedGroups {
    by_filter: HashMap<Box<str>, HashMap<Box<str>, Group>>,
    pub counters: SharedCounters,
}

impl SharedGroups {
    /// A worker's members joined or left.
    pub(crate) fn changed(&mut self, changes: Vec<SharedChange>) {
        for c in changes {
            let Some(s) = crate::proto::mqtt::topic::shared(&c.name) else { continue };
            if c.join {
                self.join(s.filter, s.group, c.conn, c.qos);
            } else {
                self.leave(s.filter, s.group, c.conn);
            }
        }
        self.count();
    }

    fn join(&mut self, filter: &str, group: &str, conn: u64, qos: u8) {
        let groups = self.groups();
        let refused = match self.by_filter.get(filter) {
            Some(g) if g.contains_key(group) => None,
            Some(g) if g.len() >= MAX_GROUPS_PER_FILTER => Some("groups_per_filter"),
            _ if groups >= MAX_GROUPS => Some("groups"),
            _ => None,
        };
        if let Some(reason) = refused {
            crate::stats::counters::bump(&mut self.counters.refused, reason);
            return;
        }
        let g = self.by_filter.entry(filter.into()).or_default().entry(group.into()).or_default();
        match g.members.iter_mut().find(|m| m.0 == conn) {
            Some(m) => m.1 = qos,
            None => g.members.push((conn, qos)),
        }
    }

    fn leave(&mut self, filter: &str, group: &str, conn: u64) {
        let Some(groups) = self.by_filter.get_mut(filter) else { return };
        if let Some(g) = groups.get_mut(group) {
            g.members.retain(|m| m.0 != conn);
            if g.members.is_empty() {
                groups.remove(group);
            }
        }
        if groups.is_empty() {
            self.by_filter.remove(filter);
        }
    }

    /// A worker died: its members are gone.
    pub(crate) fn worker_gone(&mut self, worker: usize) {
        for groups in self.by_filter.values_mut() {
            for g in groups.values_mut() {
                g.members.retain(|m| split_id(m.0).0 != worker);
            }
            groups.retain(|_, g| !g.members.is_empty());
        }
        self.by_filter.retain(|_, g| !g.is_empty());
        self.count();
    }

    /// The member of each group whose filter matches `topic` that gets
    /// this message (connection id, granted QoS), and the turn moved on.
    pub(crate) fn pick(&mut self, topic: &str) -> Vec<(u64, u8)> {
        let mut out = Vec::new();
        for (filter, groups) in self.by_filter.iter_mut() {
            if !matches(filter, topic) {
                continue;
            }
            for g in groups.values_mut() {
                let i = g.next % g.members.len();
                g.next = i + 1;
                out.push(g.members[i]);
            }
        }
        self.counters.picked += out.len() as u64;
        out
    }

    fn groups(&self) -> usize {
        self.by_filter.values().map(HashMap::len).sum()
    }

    fn count(&mut self) {
        self.counters.groups = self.groups() as u64;
        self.counters.members = self.by_filter.values().flat_map(HashMap::values).map(|g| g.members.len() as u64).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::commands::conn_id;

    fn change(conn: u64, name: &str, join: bool) -> SharedChange {
        SharedChange { conn, name: name.into(), qos: 1, join }
    }

    #[test]
    fn each_message_goes_to_one_member_in_turn_across_workers() {
        let mut s = SharedGroups::default();
        let (a, b, c) = (conn_id(0, 1, 1), conn_id(1, 1, 1), conn_id(2, 5, 1));
        s.changed(vec![change(a, "$share/g/t/+", true), change(b, "$share/g/t/+", true), change(c, "$share/h/t/#", true)]);
        let got: Vec<Vec<u64>> = (0..4).map(|_| s.pick("t/x").into_iter().map(|m| m.0).collect()).collect();
        for (i, picks) in got.iter().enumerate() {
            // One of g's two members in turn, and h's only one.
            assert_eq!(picks.len(), 2, "{got:?}");
            assert!(picks.contains(&c));
            let (turn, other) = if i % 2 == 0 { (a, b) } else { (b, a) };
            assert!(picks.contains(&turn) && !picks.contains(&other), "{got:?}");
        }
        assert!(s.pick("u/x").is_empty());
        assert_eq!((s.counters.groups, s.counters.members), (2, 3));
        s.changed(vec![change(a, "$share/g/t/+", false)]);
        assert!((0..3).all(|_| s.pick("t/x").contains(&(b, 1))));
        s.worker_gone(1);
        s.worker_gone(2);
        assert!(s.pick("t/x").is_empty());
        assert_eq!((s.counters.groups, s.counters.members), (0, 0));
    }

    #[test]
    fn groups_per_filter_are_bounded_and_counted() {
        let mut s = SharedGroups::default();
        let joins = (0..=MAX_GROUPS_PER_FILTER).map(|i| change(conn_id(0, i, 1), &format!("$share/g{i}/t"), true)).collect();
        s.changed(joins);
        assert_eq!(s.counters.groups, MAX_GROUPS_PER_FILTER as u64);
        assert_eq!(s.counters.refused["groups_per_filter"], 1);
        assert_eq!(s.pick("t").len(), MAX_GROUPS_PER_FILTER);
        // A second member of an existing group is not a new group.
        s.changed(vec![change(conn_id(1, 0, 1), "$share/g0/t", true)]);
        assert_eq!(s.counters.refused["groups_per_filter"], 1);
    }
}
