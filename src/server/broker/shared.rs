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
//!
//! In a cluster a group may have members on several nodes, and a message
//! reaches each of them. So the node where a message enters the cluster
//! (a client's or the admin API's publish) names, per group its filter
//! matches, the one node that delivers it, in turn among the nodes
//! weighted by their members ([`SharedGroups::place`]; the names travel in
//! the message's signed MQTT header); each node delivers only the groups
//! named for it, and a group the message does not name (its publisher
//! had not heard of it yet) to its own members. What the others have
//! comes from their announcements (`cluster/groups.rs`), at most
//! [`MAX_NODES`] nodes; a node not heard for `FORGET_AFTER` is forgotten.
//! A message named for a node whose last member left in the instant
//! before is lost for that group, as on one node.

use crate::cluster::groups::{Announce, ANNOUNCE_EVERY, ANNOUNCE_GAP, FORGET_AFTER, MAX_PICKS};
use crate::proto::mqtt::topic::{matches, shared};
use crate::server::commands::{split_id, SharedChange};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Most groups (distinct `$share/{group}/{filter}`) on a node.
pub(crate) use crate::cluster::groups::MAX_GROUPS;
/// Most groups sharing one filter: a peer inventing group names for a
/// popular filter multiplies every matching message by this at most.
pub(crate) const MAX_GROUPS_PER_FILTER: usize = 64;
/// Most other cluster nodes whose groups a node keeps.
pub(crate) const MAX_NODES: usize = 64;

crate::counters! {
    /// The supervisor's shared subscription groups (`/stats` "mqtt_shared", `/metrics`).
    pub(crate) struct SharedCounters {
        groups: gauge "mqtt_shared_groups" "MQTT shared subscription groups with a member connected now",
        members: gauge "mqtt_shared_members" "Members of MQTT shared subscription groups connected now",
        picked: counter "mqtt_shared_picked" "Messages handed to one member of a shared subscription group",
        nodes: gauge "mqtt_shared_nodes" "Other cluster nodes with MQTT shared subscription groups, as they announced them",
        elsewhere: counter "mqtt_shared_elsewhere" "Group copies of messages another cluster node was named to deliver",
        unannounced: gauge "mqtt_shared_unannounced" "MQTT shared subscription groups left out of this node's last announcement to the cluster (past its 512 KiB)",
        refused: by("reason") "mqtt_shared_refused" "Joins of MQTT shared subscription groups refused, by reason (groups: too many groups; groups_per_filter: too many groups of one filter; nodes: another cluster node's groups past the 64 nodes kept)",
    }
}

/// One group: its members in join order and whose turn is next.
#[derive(Debug, Default)]
struct Group {
    /// (connection id, granted QoS).
    members: Vec<(u64, u8)>,
    next: usize,
}

impl Group {
    /// Members leave: the turn stays with the member that had it (one
    /// that left before it moves the turn back one), so a departure
    /// neither skips a member nor gives one two messages in a row.
    fn drop_members(&mut self, gone: impl Fn(&(u64, u8)) -> bool) {
        let before = self.members.iter().take(self.next).filter(|m| gone(m)).count();
        self.next -= before;
        self.members.retain(|m| !gone(m));
    }
}

/// Every group, by filter then group name.
#[derive(Debug, Default)]
pub(crate) struct SharedGroups {
    by_filter: HashMap<Box<str>, HashMap<Box<str>, Group>>,
    /// `by_filter`'s filters by level: what a message's topic matches is
    /// found without a pass over every group (`topic_index.rs`).
    index: crate::server::topic_index::FilterTrie<Box<str>>,
    cluster: Cluster,
    pub counters: SharedCounters,
}

/// Group names (`$share/{group}/{filter}`) and their members on one node.
type Members = HashMap<Box<str>, u32>;
/// Per group (its name in a filter), then node: members.
type ByGroup = HashMap<Box<str>, BTreeMap<Box<str>, u32>>;

/// The other nodes' groups, and this node's announcements of its own.
#[derive(Debug, Default)]
struct Cluster {
    /// Per node, its groups' names and members, and when it was heard.
    remote: HashMap<Box<str>, (Members, Instant)>,
    /// The same by filter, then group, then node: what a message matches.
    index: HashMap<Box<str>, ByGroup>,
    /// Per group name (`$share/{group}/{filter}`), whose turn is next.
    turns: HashMap<Box<str>, u64>,
    /// What the node follows for its groups' filters: a plain filter's
    /// topic, or every topic (`cluster::ANY_TOPIC`) for a wildcard one.
    followed: std::collections::BTreeSet<Box<str>>,
    announced: Option<Instant>,
    /// This node's groups changed since its last announcement.
    changed: bool,
    /// Another node asked; this node's next announcement asks.
    owed: bool,
    asking: bool,
}

/// Where a message's group copies go in a cluster ([`SharedGroups::place`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    /// (`$share/{group}/{filter}`, the node that delivers it): what the
    /// message's header names.
    pub picks: Vec<(String, String)>,
    /// The groups another node delivers: not this node's to deliver.
    pub elsewhere: Vec<Box<str>>,
}

/// A shared subscription's name.
fn name(group: &str, filter: &str) -> String {
    format!("{}{group}/{filter}", crate::proto::mqtt::topic::SHARE_PREFIX)
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
        self.cluster.changed = true;
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
        if !self.by_filter.contains_key(filter) {
            *self.index.entry(filter, || filter.into()) = filter.into();
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
            g.drop_members(|m| m.0 == conn);
            if g.members.is_empty() {
                groups.remove(group);
            }
        }
        if groups.is_empty() {
            self.by_filter.remove(filter);
            self.index.remove(filter);
        }
    }

    /// A worker died: its members are gone.
    pub(crate) fn worker_gone(&mut self, worker: usize) {
        for groups in self.by_filter.values_mut() {
            for g in groups.values_mut() {
                g.drop_members(|m| split_id(m.0).0 == worker);
            }
            groups.retain(|_, g| !g.members.is_empty());
        }
        let index = &mut self.index;
        self.by_filter.retain(|f, g| {
            if g.is_empty() {
                index.remove(f);
            }
            !g.is_empty()
        });
        self.cluster.changed = true;
        self.count();
    }

    /// The member of each group whose filter matches `topic` that gets
    /// this message (connection id, granted QoS), and the turn moved on;
    /// not for the groups `elsewhere` (another cluster node delivers those).
    pub(crate) fn pick(&mut self, topic: &str, elsewhere: &[Box<str>]) -> Vec<(u64, u8)> {
        let mut out = Vec::new();
        let mut filters = Vec::new();
        self.index.matching(topic, |f| filters.push(f.clone()));
        for filter in filters {
            let Some(groups) = self.by_filter.get_mut(&filter) else { continue };
            for (group, g) in groups.iter_mut() {
                if elsewhere.iter().any(|e| shared(e).is_some_and(|s| s.group == &**group && s.filter == &*filter)) {
                    self.counters.elsewhere += 1;
                    continue;
                }
                let i = g.next % g.members.len();
                g.next = i + 1;
                out.push(g.members[i]);
            }
        }
        self.counters.picked += out.len() as u64;
        out
    }

    /// In a cluster: which node delivers each group's copy of a message
    /// on `topic` (this node is `me`), in turn among the nodes with
    /// members, weighted by them. Nothing while no other node announced
    /// a group: each node then delivers to its own members.
    pub(crate) fn place(&mut self, topic: &str, me: &str) -> Placed {
        let mut placed = Placed::default();
        let c = &mut self.cluster;
        if c.index.is_empty() {
            return placed;
        }
        // Per group name: the nodes with members, this one first.
        let mut nodes: BTreeMap<String, Vec<(&str, u32)>> = BTreeMap::new();
        for (filter, groups) in self.by_filter.iter().filter(|(f, _)| matches(f, topic)) {
            for (group, g) in groups {
                nodes.entry(name(group, filter)).or_default().push((me, g.members.len() as u32));
            }
        }
        for (filter, groups) in c.index.iter().filter(|(f, _)| matches(f, topic)) {
            for (group, on) in groups {
                nodes.entry(name(group, filter)).or_default().extend(on.iter().filter(|(n, _)| &***n != me).map(|(n, m)| (&**n, *m)));
            }
        }
        for (group, on) in nodes.into_iter().take(MAX_PICKS) {
            let total: u64 = on.iter().map(|(_, m)| u64::from(*m)).sum();
            if total == 0 {
                continue;
            }
            let turn = c.turns.entry(group.as_str().into()).or_default();
            let mut at = *turn % total;
            *turn = turn.wrapping_add(1);
            let node = on.iter().find(|(_, m)| {
                let here = at < u64::from(*m);
                at = at.saturating_sub(u64::from(*m));
                here
            });
            let node = node.map_or(me, |(n, _)| n);
            if node != me {
                placed.elsewhere.push(group.as_str().into());
            }
            placed.picks.push((group, node.to_string()));
        }
        placed
    }

    /// Another node's announcement (`cluster/groups.rs`); an empty one
    /// forgets the node.
    pub(crate) fn heard(&mut self, node: &str, a: Announce, now: Instant) {
        let c = &mut self.cluster;
        c.owed |= a.ask;
        if a.groups.is_empty() {
            c.remote.remove(node);
        } else if !c.remote.contains_key(node) && c.remote.len() >= MAX_NODES {
            crate::stats::counters::bump(&mut self.counters.refused, "nodes");
            return;
        } else {
            c.remote.insert(node.into(), (a.groups.into_iter().map(|(n, m)| (n.into(), m)).collect(), now));
        }
        self.reindex();
    }

    /// Forget the nodes not heard for `FORGET_AFTER` (a node stopped
    /// without a word, or lost its link).
    pub(crate) fn expire(&mut self, now: Instant) {
        let before = self.cluster.remote.len();
        self.cluster.remote.retain(|_, (_, heard)| now.duration_since(*heard) < FORGET_AFTER);
        if self.cluster.remote.len() != before {
            self.reindex();
        }
    }

    /// In a cluster the node follows its groups' topics, as it does its
    /// subscribers' (a member's filter is not in its worker's topics):
    /// what to start (true) or stop following since the last call.
    pub(crate) fn take_followed(&mut self) -> Vec<(String, bool)> {
        let now: std::collections::BTreeSet<Box<str>> =
            self.by_filter.keys().map(|f| if f.contains(['+', '#']) { crate::cluster::ANY_TOPIC.into() } else { f.clone() }).collect();
        let before = std::mem::replace(&mut self.cluster.followed, now);
        let after = &self.cluster.followed;
        let started = after.difference(&before).map(|t| (t.to_string(), true));
        started.chain(before.difference(after).map(|t| (t.to_string(), false))).collect()
    }

    /// This node's link came up: its next announcement goes at once and
    /// asks the others for theirs.
    pub(crate) fn linked(&mut self) {
        self.cluster.announced = None;
        self.cluster.asking = true;
    }

    /// What this node announces now, if due: its groups and their
    /// members (none when `leaving`: it stops).
    pub(crate) fn announce(&mut self, now: Instant, leaving: bool) -> Option<Vec<u8>> {
        let c = &mut self.cluster;
        let since = c.announced.map(|t| now.duration_since(t));
        let due = since.is_none_or(|s| s >= ANNOUNCE_EVERY || ((c.changed || c.owed) && s >= ANNOUNCE_GAP));
        if !due && !leaving {
            return None;
        }
        let mut groups: Vec<(String, u32)> = match leaving {
            true => Vec::new(),
            false => self.by_filter.iter().flat_map(|(f, gs)| gs.iter().map(move |(g, grp)| (name(g, f), grp.members.len() as u32))).collect(),
        };
        // By name: past 512 KiB the same groups are left out each time.
        groups.sort_unstable();
        let (body, left_out) = Announce::body(groups, std::mem::take(&mut c.asking));
        (c.announced, c.changed, c.owed) = (Some(now), false, false);
        self.counters.unannounced = left_out as u64;
        // Turns of groups gone everywhere are forgotten.
        let by_filter = &self.by_filter;
        let index = &c.index;
        c.turns.retain(|n, _| {
            shared(n).is_some_and(|s| {
                by_filter.get(s.filter).is_some_and(|g| g.contains_key(s.group)) || index.get(s.filter).is_some_and(|g| g.contains_key(s.group))
            })
        });
        Some(body)
    }

    fn reindex(&mut self) {
        let c = &mut self.cluster;
        c.index.clear();
        for (node, (groups, _)) in &c.remote {
            for (n, members) in groups {
                let Some(s) = shared(n) else { continue };
                c.index.entry(s.filter.into()).or_default().entry(s.group.into()).or_default().insert(node.clone(), *members);
            }
        }
        self.counters.nodes = c.remote.len() as u64;
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
        let got: Vec<Vec<u64>> = (0..4).map(|_| s.pick("t/x", &[]).into_iter().map(|m| m.0).collect()).collect();
        for (i, picks) in got.iter().enumerate() {
            // One of g's two members in turn, and h's only one.
            assert_eq!(picks.len(), 2, "{got:?}");
            assert!(picks.contains(&c));
            let (turn, other) = if i % 2 == 0 { (a, b) } else { (b, a) };
            assert!(picks.contains(&turn) && !picks.contains(&other), "{got:?}");
        }
        assert!(s.pick("u/x", &[]).is_empty());
        assert_eq!((s.counters.groups, s.counters.members), (2, 3));
        s.changed(vec![change(a, "$share/g/t/+", false)]);
        assert!((0..3).all(|_| s.pick("t/x", &[]).contains(&(b, 1))));
        s.worker_gone(1);
        s.worker_gone(2);
        assert!(s.pick("t/x", &[]).is_empty());
        assert_eq!((s.counters.groups, s.counters.members), (0, 0));
    }

    /// A member leaving mid-round neither gives the next one two messages
    /// in a row nor skips one (found by a review: the turn was taken
    /// modulo the new size).
    #[test]
    fn a_member_leaving_mid_round_keeps_the_turn_fair() {
        let mut s = SharedGroups::default();
        let ids: Vec<u64> = (0..3).map(|i| conn_id(0, i, 1)).collect();
        s.changed(ids.iter().map(|c| change(*c, "$share/g/t", true)).collect());
        let pick = |s: &mut SharedGroups| s.pick("t", &[])[0].0;
        assert_eq!([pick(&mut s), pick(&mut s), pick(&mut s)], [ids[0], ids[1], ids[2]]);
        // The first leaves after the last had its turn: the second is next, not the last again.
        s.changed(vec![change(ids[0], "$share/g/t", false)]);
        assert_eq!([pick(&mut s), pick(&mut s), pick(&mut s)], [ids[1], ids[2], ids[1]]);
        // The one whose turn it is leaves: the one after it is next.
        s.changed(vec![change(ids[0], "$share/g/t", true)]);
        assert_eq!(pick(&mut s), ids[2]);
        s.changed(vec![change(ids[0], "$share/g/t", false)]);
        assert_eq!([pick(&mut s), pick(&mut s)], [ids[1], ids[2]]);
        // A worker's members gone at once, the turn moved back by those before it.
        let more: Vec<u64> = (0..3).map(|i| conn_id(1, i, 1)).collect();
        s.changed(more.iter().map(|c| change(*c, "$share/g/t", true)).collect());
        assert_eq!([pick(&mut s), pick(&mut s)], [more[0], more[1]]);
        // Members [ids1, ids2, m0, m1, m2], m2's turn; worker 0's two leave.
        s.worker_gone(0);
        assert_eq!([pick(&mut s), pick(&mut s), pick(&mut s)], [more[2], more[0], more[1]]);
    }

    #[test]
    fn groups_per_filter_are_bounded_and_counted() {
        let mut s = SharedGroups::default();
        let joins = (0..=MAX_GROUPS_PER_FILTER).map(|i| change(conn_id(0, i, 1), &format!("$share/g{i}/t"), true)).collect();
        s.changed(joins);
        assert_eq!(s.counters.groups, MAX_GROUPS_PER_FILTER as u64);
        assert_eq!(s.counters.refused["groups_per_filter"], 1);
        assert_eq!(s.pick("t", &[]).len(), MAX_GROUPS_PER_FILTER);
        // A second member of an existing group is not a new group.
        s.changed(vec![change(conn_id(1, 0, 1), "$share/g0/t", true)]);
        assert_eq!(s.counters.refused["groups_per_filter"], 1);
    }

    /// A member joining again (a new SUBSCRIBE of the same share) is one
    /// member at its new QoS, not a second turn in the round.
    #[test]
    fn a_member_joining_again_takes_its_new_qos_not_a_second_turn() {
        let mut s = SharedGroups::default();
        let (a, b) = (conn_id(0, 1, 1), conn_id(1, 1, 1));
        s.changed(vec![change(a, "$share/g/t", true), change(b, "$share/g/t", true)]);
        s.changed(vec![SharedChange { conn: a, name: "$share/g/t".into(), qos: 2, join: true }]);
        assert_eq!((s.counters.groups, s.counters.members), (1, 2));
        let picks: Vec<(u64, u8)> = (0..4).flat_map(|_| s.pick("t", &[])).collect();
        assert_eq!(picks.iter().filter(|p| **p == (a, 2)).count(), 2, "{picks:?}");
        assert_eq!(picks.iter().filter(|p| **p == (b, 1)).count(), 2, "{picks:?}");
    }

    /// The last member leaving frees its group, and the filter's index
    /// entry with the last group: nothing is picked, and a new join
    /// starts afresh.
    #[test]
    fn the_last_member_leaving_frees_its_group_and_filter() {
        let mut s = SharedGroups::default();
        let (a, b) = (conn_id(0, 1, 1), conn_id(1, 1, 1));
        s.changed(vec![change(a, "$share/g/t/+", true), change(b, "$share/h/t/+", true)]);
        s.changed(vec![change(a, "$share/g/t/+", false)]);
        assert_eq!(s.pick("t/x", &[]), vec![(b, 1)], "h keeps the filter");
        assert_eq!(s.index.len(), 1);
        s.changed(vec![change(b, "$share/h/t/+", false)]);
        assert!(s.pick("t/x", &[]).is_empty());
        assert!(s.by_filter.is_empty() && s.index.is_empty(), "no group, no filter left");
        assert_eq!((s.counters.groups, s.counters.members), (0, 0));
        s.changed(vec![change(a, "$share/g/t/+", true)]);
        assert_eq!(s.pick("t/x", &[]), vec![(a, 1)]);
    }

    /// Leaving a group one never joined, or one that does not exist,
    /// changes nobody's membership.
    #[test]
    fn leaving_what_one_never_joined_changes_nothing() {
        let mut s = SharedGroups::default();
        let (a, b) = (conn_id(0, 1, 1), conn_id(1, 1, 1));
        s.changed(vec![change(a, "$share/g/t", true)]);
        s.changed(vec![change(b, "$share/g/t", false), change(a, "$share/other/t", false), change(a, "$share/g/u", false)]);
        assert_eq!((s.counters.groups, s.counters.members), (1, 1));
        assert_eq!(s.pick("t", &[]), vec![(a, 1)]);
    }

    /// A group's filter matches as MQTT says: `+` one level, `#` not a
    /// `$` topic at the first level, a filter naming `$SYS` does.
    #[test]
    fn a_groups_filter_matches_by_mqtt_rules() {
        let mut s = SharedGroups::default();
        let (a, b, c) = (conn_id(0, 1, 1), conn_id(0, 2, 1), conn_id(0, 3, 1));
        s.changed(vec![change(a, "$share/g/#", true), change(b, "$share/g/$SYS/#", true), change(c, "$share/g/a/+", true)]);
        let members = |s: &mut SharedGroups, t: &str| {
            let mut v: Vec<u64> = s.pick(t, &[]).into_iter().map(|m| m.0).collect();
            v.sort();
            v
        };
        assert_eq!(members(&mut s, "$SYS/load"), vec![b]);
        assert_eq!(members(&mut s, "a/b"), vec![a, c]);
        assert_eq!(members(&mut s, "a/b/c"), vec![a], "a/+ is one level");
        assert_eq!(members(&mut s, "a"), vec![a]);
    }

    /// A name that is not a well-formed `$share/{group}/{filter}` joins
    /// nothing and is not counted as a refusal.
    #[test]
    fn malformed_share_names_join_nothing() {
        let mut s = SharedGroups::default();
        let a = conn_id(0, 1, 1);
        let names = ["plain/topic", "$share//t", "$share/g+/t", "$share/g#/t", "$share/g/", "$share/g"];
        s.changed(names.iter().map(|n| change(a, n, true)).collect());
        assert_eq!((s.counters.groups, s.counters.members), (0, 0));
        assert!(s.counters.refused.is_empty());
        assert!(s.pick("t", &[]).is_empty() && s.pick("plain/topic", &[]).is_empty());
    }

    /// Past MAX_GROUPS on the node a new group is refused and counted
    /// (under `groups`, whatever its filter); a new member of a group
    /// already kept is still taken.
    #[test]
    fn the_groups_of_a_node_are_bounded_and_counted() {
        let mut s = SharedGroups::default();
        let per = MAX_GROUPS_PER_FILTER;
        let joins = (0..MAX_GROUPS).map(|i| change(conn_id(0, i, 1), &format!("$share/g{}/f{}", i % per, i / per), true)).collect();
        s.changed(joins);
        assert_eq!(s.counters.groups, MAX_GROUPS as u64);
        assert!(s.counters.refused.is_empty());
        s.changed(vec![change(conn_id(1, 0, 1), "$share/new/elsewhere", true)]);
        assert_eq!(s.counters.refused["groups"], 1);
        assert!(s.pick("elsewhere", &[]).is_empty(), "the refused group has no member");
        s.changed(vec![change(conn_id(1, 1, 1), "$share/g0/f0", true)]);
        assert_eq!((s.counters.groups, s.counters.members, s.counters.refused["groups"]), (MAX_GROUPS as u64, MAX_GROUPS as u64 + 1, 1));
    }

    fn announce_of(groups: &[(&str, u32)]) -> Announce {
        Announce { groups: groups.iter().map(|(n, m)| (n.to_string(), *m)).collect(), ask: false }
    }

    /// In a cluster each message's copy for a group goes to one node, in
    /// turn weighted by the members each announced: here 1 on A (this
    /// node), 3 on B; a group only B has goes to B; a message this node
    /// is told B delivers is not picked here. Nothing is named while no
    /// other node announced; a node not heard for FORGET_AFTER, or that
    /// announced an empty set, is forgotten.
    #[test]
    fn in_a_cluster_one_node_delivers_each_groups_copy_weighted_by_members() {
        let mut s = SharedGroups::default();
        let a1 = conn_id(0, 1, 1);
        s.changed(vec![change(a1, "$share/g/t/+", true)]);
        assert_eq!(s.place("t/x", "A"), Placed::default(), "alone: nothing named");
        let now = Instant::now();
        s.heard("B", announce_of(&[("$share/g/t/+", 3), ("$share/h/t/#", 2)]), now);
        assert_eq!(s.counters.nodes, 1);
        let mut on = HashMap::new();
        for _ in 0..8 {
            let p = s.place("t/x", "A");
            assert_eq!(p.picks.len(), 2, "{p:?}");
            for (group, node) in &p.picks {
                *on.entry((group.clone(), node.clone())).or_insert(0) += 1;
                assert_eq!(p.elsewhere.contains(&group.as_str().into()), node != "A");
            }
        }
        let got = |g: &str, n: &str| on.get(&(g.to_string(), n.to_string())).copied().unwrap_or(0);
        assert_eq!((got("$share/g/t/+", "A"), got("$share/g/t/+", "B")), (2, 6), "1 member here, 3 there: {on:?}");
        assert_eq!(got("$share/h/t/#", "B"), 8, "only B has h");
        assert!(s.place("u/x", "A").picks.is_empty());

        // Named for B: not picked here; named for A (or not named): picked.
        assert!(s.pick("t/x", &["$share/g/t/+".into()]).is_empty());
        assert_eq!(s.counters.elsewhere, 1);
        assert_eq!(s.pick("t/x", &["$share/h/t/#".into()]), vec![(a1, 1)]);

        // Announcements: at once when linked (asking), then when changed
        // (after the gap) or every ANNOUNCE_EVERY; an empty one when leaving.
        s.linked();
        let first = Announce::parse(&s.announce(now, false).unwrap(), MAX_GROUPS).unwrap();
        assert_eq!((first.groups, first.ask), (vec![("$share/g/t/+".to_string(), 1)], true));
        assert!(s.announce(now + ANNOUNCE_GAP, false).is_none(), "nothing changed");
        s.changed(vec![change(conn_id(1, 1, 1), "$share/g/t/+", true)]);
        assert!(s.announce(now, false).is_none(), "within the gap");
        let next = Announce::parse(&s.announce(now + ANNOUNCE_GAP, false).unwrap(), MAX_GROUPS).unwrap();
        assert_eq!((next.groups, next.ask), (vec![("$share/g/t/+".to_string(), 2)], false));
        assert!(s.announce(now + ANNOUNCE_GAP + ANNOUNCE_EVERY, false).is_some(), "every ANNOUNCE_EVERY");
        assert!(Announce::parse(&s.announce(now, true).unwrap(), MAX_GROUPS).unwrap().groups.is_empty());

        assert_eq!(s.take_followed(), vec![(">".to_string(), true)], "a wildcard group: every topic");
        s.changed(vec![change(a1, "$share/p/plain", true)]);
        assert_eq!(s.take_followed(), vec![("plain".to_string(), true)]);
        s.changed(vec![change(a1, "$share/p/plain", false)]);
        s.worker_gone(0);
        s.worker_gone(1);
        assert_eq!(s.take_followed(), vec![(">".to_string(), false), ("plain".to_string(), false)]);

        s.expire(now + FORGET_AFTER);
        assert_eq!((s.counters.nodes, s.place("t/x", "A")), (0, Placed::default()), "B forgotten");
        s.heard("C", announce_of(&[("$share/g/t/+", 1)]), now);
        s.heard("C", announce_of(&[]), now);
        assert_eq!(s.counters.nodes, 0, "an empty announcement forgets C");
    }

    #[test]
    fn other_nodes_are_bounded_and_counted() {
        let mut s = SharedGroups::default();
        let now = Instant::now();
        for i in 0..=MAX_NODES {
            s.heard(&format!("n{i}"), announce_of(&[("$share/g/t", 1)]), now);
        }
        assert_eq!(s.counters.nodes, MAX_NODES as u64);
        assert_eq!(s.counters.refused["nodes"], 1);
        s.heard("n0", announce_of(&[("$share/g/t", 2)]), now);
        assert_eq!(s.counters.refused["nodes"], 1, "a node already kept is heard again");
    }
}
