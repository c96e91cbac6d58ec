//! MQTT retained messages, in the supervisor: the last message published
//! with the retain flag to each topic (an empty one clears it), handed to
//! a new subscription whose filter matches (MQTT's wildcard rules: `$`
//! topics are not matched by a top-level `+` or `#`).
//!
//! The supervisor owns the one topic space, so it owns this set too: every
//! publish passes through it (from any worker, the admin API or the
//! cluster), and a worker asks it for a new subscription's retained
//! messages the way a resume asks for history (`RetainedWanted`, answered
//! by a `retained` command for that connection). Every worker thus sees the
//! same set, also one started later. Bounded in messages and bytes
//! (`--mqtt-retained`, `--mqtt-retained-bytes`): a retained publish over
//! either is still delivered, just not kept (counted under its reason).
//! A client's retained topics also count against its identity's quota
//! (`--mqtt-retained-per-identity`; the token's `sub`, else the peer's
//! address): one identity cannot fill the set and lock out every other
//! publisher's retained messages; past its quota its new topic is not
//! kept (`identity`), and what others set stays.
//! A message keeps its v5 properties (content type, user properties...)
//! and its Message Expiry Interval: before it a new subscription gets
//! what is left of it; past it no subscription gets it, and the first
//! whose filter meets it drops it (counted `expired`, its bytes given
//! back).
//!
//! The broker's own `$SYS/broker/` topics (`--sys-interval`) are held here too,
//! so a subscription gets them as it gets any retained message, but
//! apart: outside the bounds (they are a fixed set per node; at most
//! 8,192), the counts (`sys` instead) and the retained file (each start
//! publishes them anew).

use crate::proto::mqtt::forward::Forwarded;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Default `--mqtt-retained`: retained messages kept on a node.
pub(crate) const DEFAULT_MAX_MESSAGES: usize = 10_000;
/// Default `--mqtt-retained-bytes`: bytes of topics and payloads kept.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Most bytes of messages in one answer (the rest are not sent; an
/// answer is a line on a worker's pipe).
pub(crate) const MAX_ANSWER_BYTES: usize = 4 << 20;
/// Bytes counted per kept message on top of its topic and payload.
const PER_MESSAGE: u64 = 64;

crate::counters! {
    /// The supervisor's retained messages (`/stats` "mqtt_retained", `/metrics`).
    pub(crate) struct RetainedCounters {
        messages: gauge "mqtt_retained_messages" "MQTT retained messages kept (one per topic)",
        bytes: bytes "mqtt_retained_memory" "Bytes the retained messages hold: topics, payloads and per-message records",
        stored: counter "mqtt_retained_stored" "Retained publishes kept (set or replaced)",
        cleared: counter "mqtt_retained_cleared" "Retained messages cleared by an empty retained publish",
        expired: counter "mqtt_retained_expired" "Retained messages gone at the end of their v5 Message Expiry Interval",
        refused: by("reason") "mqtt_retained_refused" "Retained publishes delivered but not kept, by reason (count: --mqtt-retained, bytes: --mqtt-retained-bytes, identity: --mqtt-retained-per-identity, sys: past 8,192 of the broker's own $SYS topics)",
        served: counter "mqtt_retained_served" "Retained messages handed to new subscriptions",
        synced: counter "mqtt_retained_synced" "Retained messages taken from other cluster nodes' sets when this node's link came up",
        saved: counter "mqtt_retained_file_saves" "Times the retained set was written to --mqtt-retained-file",
        saved_segments: counter "mqtt_retained_file_segments" "Segments of --mqtt-retained-file written: a write rewrites only the segments (a 64th of the topics each) that changed",
        sys: gauge "mqtt_retained_sys" "The broker's own $SYS topics held (--sys-interval), apart from the bounds and every count above",
    }
}

/// `--mqtt-retained`, `--mqtt-retained-bytes`, `--mqtt-retained-per-identity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RetainedConfig {
    pub max_messages: usize,
    pub max_bytes: u64,
    /// 0: a tenth of `max_messages` ([`RetainedConfig::identity_quota`]).
    #[serde(default)]
    pub per_identity: usize,
}

impl Default for RetainedConfig {
    fn default() -> RetainedConfig {
        RetainedConfig { max_messages: DEFAULT_MAX_MESSAGES, max_bytes: DEFAULT_MAX_BYTES, per_identity: 0 }
    }
}

impl RetainedConfig {
    /// Retained topics one client identity may hold.
    pub(crate) fn identity_quota(&self) -> usize {
        match self.per_identity {
            0 => (self.max_messages / 10).max(1),
            n => n,
        }
    }
}

/// One kept message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub data: Box<[u8]>,
    /// The QoS it was published with.
    pub qos: u8,
    /// Its v5 properties, without the publisher (`Forwarded::stored`).
    pub mqtt: Option<Box<Forwarded>>,
    /// Wall-clock µs it was published (its expiry counts from there).
    pub publish_us: u64,
}

impl Kept {
    pub(crate) fn new(data: &[u8], qos: u8) -> Kept {
        Kept { data: data.into(), qos, mqtt: None, publish_us: 0 }
    }

    /// A message as another node (or the retained file) carries it.
    pub(crate) fn from_entry(e: &crate::cluster::retained::Entry) -> Kept {
        Kept::new(&e.data, e.mqtt.qos).with(e.mqtt.props.as_deref(), e.publish_us)
    }

    /// With the publish's properties, published at `publish_us`.
    pub(crate) fn with(self, mqtt: Option<&Forwarded>, publish_us: u64) -> Kept {
        Kept { mqtt: Forwarded::stored(mqtt), publish_us, ..self }
    }

    /// Its properties as a subscriber gets them at `now_us` (the expiry
    /// what is left); `Err(())`: it expired.
    pub(crate) fn forwarded(&self, now_us: u64) -> Result<Option<Box<Forwarded>>, ()> {
        Forwarded::at(self.mqtt.as_deref(), self.publish_us, now_us)
    }

    fn cost(&self, topic: &str) -> u64 {
        PER_MESSAGE + (topic.len() + self.data.len() + self.mqtt.as_ref().map_or(0, |f| f.cost())) as u64
    }
}

/// The node's retained messages, by topic.
#[derive(Debug, Default)]
pub(crate) struct Retained {
    cfg: RetainedConfig,
    by_topic: BTreeMap<Box<str>, Kept>,
    /// The same topics by level, for filters (`topic_index.rs`): a lookup
    /// visits what can match it, never every topic.
    tree: crate::server::topic_index::TopicTree<()>,
    /// In a cluster: the last clears, by topic, with their publish stamp
    /// (so a copy older than a clear cannot come back, and a node that
    /// missed a clear hears it in a sync); at most `--mqtt-retained` of
    /// them, the oldest forgotten first.
    clears: Option<Clears>,
    /// The identity of the client that set each topic held now (none for
    /// the admin API's and other nodes'), and how many each holds.
    setters: HashMap<Box<str>, Box<str>>,
    by_identity: HashMap<Box<str>, usize>,
    pub counters: RetainedCounters,
    /// With `--mqtt-retained-file`: the segments of it whose topics
    /// changed since its last write (`retained_file.rs`); none without
    /// it, so a retained publish hashes nothing more.
    dirty: Option<crate::server::broker::state_file::Dirty>,
}

/// One of the broker's own topics (`--sys-interval`, `sys_topics.rs`):
/// `$SYS/broker/...`, or `$SYS/brokers/NODE/...` in a cluster. (Other
/// `$SYS/` topics the application may publish through the admin API are
/// its own, bounded and kept like any.)
pub(crate) fn is_sys(topic: &str) -> bool {
    topic.starts_with("$SYS/broker/") || topic.starts_with("$SYS/brokers/")
}

/// The broker's own topics held at most (about 40 per node).
const MAX_SYS: u64 = 8_192;

#[derive(Debug, Default)]
struct Clears {
    at: HashMap<Box<str>, u64>,
    order: VecDeque<(Box<str>, u64)>,
}

impl Retained {
    pub(crate) fn new(cfg: RetainedConfig) -> Retained {
        Retained { cfg, ..Default::default() }
    }

    /// A cluster node: clears are remembered (see `clears`).
    pub(crate) fn keep_clears(&mut self) {
        self.clears.get_or_insert_with(Default::default);
    }

    /// `--mqtt-retained-file`: note which of its segments change.
    pub(crate) fn track_changes(&mut self) {
        self.dirty.get_or_insert_with(Default::default);
    }

    /// The segments changed since the last call (none when not tracked).
    pub(crate) fn take_changes(&mut self) -> crate::server::broker::state_file::Dirty {
        self.dirty.as_mut().map(|d| d.take()).unwrap_or_default()
    }

    fn changed(&mut self, topic: &str) {
        if let Some(d) = &mut self.dirty {
            d.mark(topic);
        }
    }

    fn cleared_at(&self, topic: &str) -> Option<u64> {
        self.clears.as_ref().and_then(|c| c.at.get(topic).copied())
    }

    fn note_clear(&mut self, topic: &str, publish_us: u64) {
        let max = self.cfg.max_messages.max(1);
        let Some(c) = &mut self.clears else { return };
        if c.at.get(topic).is_some_and(|t| *t >= publish_us) {
            return;
        }
        while c.order.len() >= max {
            let Some((t, us)) = c.order.pop_front() else { break };
            if c.at.get(&t) == Some(&us) {
                c.at.remove(&t);
            }
        }
        c.at.insert(topic.into(), publish_us);
        c.order.push_back((topic.into(), publish_us));
    }

    /// The clears remembered, with their stamps (for a sync's answer).
    pub(crate) fn cleared(&self) -> impl Iterator<Item = (&str, u64)> {
        self.clears.iter().flat_map(|c| c.at.iter().map(|(t, us)| (&**t, *us)))
    }

    /// A retained publish by `identity` (a client's; None: the admin
    /// API's or another node's): keep it as the topic's (empty: clear it).
    /// Err: over a bound, not kept (the reason, also counted).
    pub(crate) fn set(&mut self, topic: &str, k: Kept, identity: Option<&str>) -> Result<(), &'static str> {
        if is_sys(topic) {
            return self.set_sys(topic, k);
        }
        let old = self.by_topic.get(topic).map_or(0, |o| o.cost(topic));
        if k.data.is_empty() {
            self.note_clear(topic, k.publish_us);
            if self.by_topic.remove(topic).is_some() {
                self.tree.remove(topic);
                self.changed(topic);
                self.counters.cleared += 1;
                self.counters.bytes -= old;
                self.counters.messages -= 1;
                self.unset(topic);
            }
            return Ok(());
        }
        let cost = k.cost(topic);
        let theirs = identity.filter(|i| self.setters.get(topic).is_none_or(|s| **s != **i));
        let refused = if old == 0 && self.by_topic.len() >= self.cfg.max_messages {
            Some("count")
        } else if self.counters.bytes - old + cost > self.cfg.max_bytes {
            Some("bytes")
        } else if theirs.is_some_and(|i| self.by_identity.get(i).copied().unwrap_or(0) >= self.cfg.identity_quota()) {
            Some("identity")
        } else {
            None
        };
        if let Some(reason) = refused {
            crate::stats::counters::bump(&mut self.counters.refused, reason);
            return Err(reason);
        }
        self.counters.bytes = self.counters.bytes - old + cost;
        self.changed(topic);
        if self.by_topic.insert(topic.into(), k).is_none() {
            self.counters.messages += 1;
            self.tree.insert(topic, ());
        }
        if identity.is_none_or(|i| theirs == Some(i)) {
            self.unset(topic);
            if let Some(i) = identity {
                self.setters.insert(topic.into(), i.into());
                *self.by_identity.entry(i.into()).or_insert(0) += 1;
            }
        }
        self.counters.stored += 1;
        Ok(())
    }

    /// One of the broker's own `$SYS/` topics, set or cleared. Err: past
    /// [`MAX_SYS`] of them, not kept (counted `sys`).
    fn set_sys(&mut self, topic: &str, k: Kept) -> Result<(), &'static str> {
        if k.data.is_empty() {
            if self.by_topic.remove(topic).is_some() {
                self.tree.remove(topic);
                self.counters.sys -= 1;
            }
            return Ok(());
        }
        if let Some(old) = self.by_topic.get_mut(topic) {
            *old = k;
            return Ok(());
        }
        if self.counters.sys >= MAX_SYS {
            crate::stats::counters::bump(&mut self.counters.refused, "sys");
            return Err("sys");
        }
        self.by_topic.insert(topic.into(), k);
        self.tree.insert(topic, ());
        self.counters.sys += 1;
        Ok(())
    }

    /// `topic` is no longer held by the client identity that set it.
    fn unset(&mut self, topic: &str) {
        let Some(i) = self.setters.remove(topic) else { return };
        if let Some(n) = self.by_identity.get_mut(&i) {
            *n -= 1;
            if *n == 0 {
                self.by_identity.remove(&i);
            }
        }
    }

    /// Another node's retained message or clear (empty data), or one
    /// from a sync: it replaces the topic's only if it is newer (by its
    /// publish stamp), so a copy that comes twice or late changes nothing.
    /// True when it changed the set.
    pub(crate) fn newer(&mut self, topic: &str, k: Kept, identity: Option<&str>) -> bool {
        if self.by_topic.get(topic).is_some_and(|old| old.publish_us >= k.publish_us && !(k.data.is_empty() && old.publish_us == k.publish_us)) {
            return false;
        }
        // A message a clear came after stays cleared.
        if !k.data.is_empty() && self.cleared_at(topic).is_some_and(|us| us >= k.publish_us) {
            return false;
        }
        let had = self.by_topic.contains_key(topic);
        match k.data.is_empty() {
            true => self.set(topic, k, identity).is_ok() && had,
            false => self.set(topic, k, identity).is_ok(),
        }
    }

    /// Every kept message not expired at `now_us`, in topic order, as it
    /// crosses to another node or goes to the retained file (which leaves
    /// out `$SYS/`, [`is_sys`]) (topic, data,
    /// metadata, publish stamp; `cluster::retained::chunks`).
    pub(crate) fn all(&self, now_us: u64) -> impl Iterator<Item = (&str, &[u8], crate::cluster::MqttMeta, u64)> {
        self.by_topic
            .iter()
            .filter(move |(_, k)| k.forwarded(now_us).is_ok())
            .map(|(t, k)| (&**t, &*k.data, crate::cluster::MqttMeta { qos: k.qos, retain: true, props: k.mqtt.clone(), shared: Vec::new() }, k.publish_us))
    }

    /// `n` more retained messages not kept or not sent, for `reason`.
    pub(crate) fn refused(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *self.counters.refused.entry(reason.to_string()).or_default() += n;
        }
    }

    /// Changes so far (kept, cleared, expired): what a copy of the set
    /// compares to know it is stale.
    pub(crate) fn generation(&self) -> u64 {
        self.counters.stored + self.counters.cleared + self.counters.expired
    }

    /// The retained messages `filter` matches at `now_us`, in topic
    /// order, at most [`MAX_ANSWER_BYTES`] of them; those it meets
    /// expired are dropped.
    pub(crate) fn matching(&mut self, filter: &str, now_us: u64) -> Vec<(&str, &Kept)> {
        // The topics it matches, by the tree, as far as the answer's bytes go.
        let (mut names, mut expired, mut bytes) = (Vec::new(), Vec::new(), 0);
        let by_topic = &self.by_topic;
        self.tree.matching(filter, |t, _| {
            let Some(k) = by_topic.get(t) else { return true };
            if k.forwarded(now_us).is_err() {
                expired.push(Box::<str>::from(t));
                return true;
            }
            bytes += t.len() + k.data.len();
            if bytes > MAX_ANSWER_BYTES {
                return false;
            }
            names.push(Box::<str>::from(t));
            true
        });
        for t in expired.into_iter().filter(|t| !is_sys(t)) {
            if let Some(k) = self.by_topic.remove(&t) {
                self.tree.remove(&t);
                self.changed(&t);
                self.counters.bytes -= k.cost(&t);
                self.counters.messages -= 1;
                self.counters.expired += 1;
                self.unset(&t);
            }
        }
        names.sort_unstable();
        let out: Vec<(&str, &Kept)> = names.iter().filter_map(|t| self.by_topic.get_key_value(&**t)).map(|(t, k)| (&**t, k)).collect();
        self.counters.served += out.len() as u64;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(r: &mut Retained, filter: &str) -> Vec<String> {
        r.matching(filter, 0).into_iter().map(|(t, _)| t.to_string()).collect()
    }

    /// Set, replace, clear; matched with MQTT's rules, `$` topics kept
    /// out of top-level wildcards.
    /// Issue 62, finding 5: one identity fills its quota, not the set:
    /// another's retained topic is still kept, a replacement of its own
    /// costs nothing more, and a topic someone else set counts for the
    /// identity that set it last.
    #[test]
    fn one_identity_cannot_fill_the_retained_set_for_another() {
        let mut r = Retained::new(RetainedConfig { max_messages: 100, max_bytes: 1 << 20, per_identity: 3 });
        for i in 0..10 {
            let kept = r.set(&format!("m/{i}"), Kept::new(b"x", 0), Some("mallory")).is_ok();
            assert_eq!(kept, i < 3, "mallory's topic {i}");
        }
        assert_eq!(r.counters.refused["identity"], 7);
        assert_eq!(r.set("alice/state", Kept::new(b"open", 1), Some("alice")), Ok(()));
        assert_eq!(r.set("m/0", Kept::new(b"y", 0), Some("mallory")), Ok(()), "its own topic again");
        assert_eq!(r.set("m/0", Kept::new(b"z", 0), Some("alice")), Ok(()), "alice takes m/0 over");
        assert_eq!(r.set("m/9", Kept::new(b"x", 0), Some("mallory")), Ok(()), "mallory has room again");
        r.set("m/1", Kept::new(b"", 0), Some("alice")).unwrap();
        assert_eq!(r.set("m/8", Kept::new(b"x", 0), Some("mallory")), Ok(()), "a clear gives room back");
        assert_eq!(r.set("ops/x", Kept::new(b"x", 0), None), Ok(()), "the admin API has no quota");
    }

    /// The broker's own `$SYS/broker/` topics are matched like any but
    /// held apart: outside the bounds and the counts, capped on their own.
    #[test]
    fn the_brokers_own_sys_topics_are_held_apart() {
        let mut r = Retained::new(RetainedConfig { max_messages: 1, max_bytes: 1 << 20, per_identity: 0 });
        r.set("a", Kept::new(b"app", 0), None).unwrap();
        assert_eq!(r.set("b", Kept::new(b"app", 0), None), Err("count"), "the application's bound is full");
        for t in ["$SYS/broker/uptime", "$SYS/brokers/n2/uptime", "$SYS/broker/uptime"] {
            r.set(t, Kept::new(b"1 seconds", 0), None).unwrap();
        }
        assert_eq!((r.counters.messages, r.counters.sys, r.counters.stored, r.generation()), (1, 2, 1, 1), "counted apart, no change to save");
        r.set("$SYS/app", Kept::new(b"x", 0), None).unwrap_err();
        assert_eq!(r.matching("$SYS/#", 0).len(), 2);
        r.set("$SYS/broker/uptime", Kept::new(b"", 0), None).unwrap();
        assert_eq!((r.counters.sys, r.counters.cleared), (1, 0));
        for i in 0..MAX_SYS + 2 {
            let _ = r.set(&format!("$SYS/brokers/n{i}/uptime"), Kept::new(b"1", 0), None);
        }
        assert_eq!((r.counters.sys, r.counters.refused.get("sys").copied()), (MAX_SYS, Some(2)), "capped");
    }

    #[test]
    fn retained_messages_are_set_replaced_cleared_and_matched() {
        let mut r = Retained::new(RetainedConfig::default());
        r.set("a/b", Kept::new(b"1", 1), None).unwrap();
        r.set("a/b", Kept::new(b"2", 2), None).unwrap();
        r.set("a/c/d", Kept::new(b"3", 0), None).unwrap();
        r.set("$SYS/x", Kept::new(b"4", 0), None).unwrap();
        assert_eq!(r.matching("a/b", 0), vec![("a/b", &Kept::new(b"2", 2))]);
        assert_eq!(topics(&mut r, "#"), ["a/b", "a/c/d"]);
        assert_eq!(topics(&mut r, "a/+"), ["a/b"]);
        assert_eq!(topics(&mut r, "+/#"), ["a/b", "a/c/d"]);
        assert_eq!(topics(&mut r, "$SYS/#"), ["$SYS/x"]);
        r.set("a/b", Kept::new(b"", 0), None).unwrap();
        r.set("nothing/here", Kept::new(b"", 0), None).unwrap();
        assert_eq!(topics(&mut r, "a/#"), ["a/c/d"]);
        assert_eq!((r.counters.messages, r.counters.stored, r.counters.cleared), (2, 4, 1));
        r.set("a/c/d", Kept::new(b"", 0), None).unwrap();
        r.set("$SYS/x", Kept::new(b"", 0), None).unwrap();
        assert_eq!((r.counters.messages, r.counters.bytes), (0, 0), "all given back");
    }

    /// Clearing a topic keeps the topics below it; once every topic is
    /// cleared the tree holds nothing and no filter finds anything.
    #[test]
    fn a_cleared_parent_keeps_its_children_and_nothing_stays_behind() {
        let mut r = Retained::new(RetainedConfig::default());
        for t in ["a", "a/b", "a/b/c"] {
            r.set(t, Kept::new(b"x", 0), None).unwrap();
        }
        r.set("a", Kept::new(b"", 0), None).unwrap();
        assert_eq!(topics(&mut r, "a/#"), ["a/b", "a/b/c"]);
        assert!(topics(&mut r, "a").is_empty());
        assert_eq!(r.tree.get("a/b/c"), Some(&()));
        r.set("a/b/c", Kept::new(b"", 0), None).unwrap();
        assert_eq!(topics(&mut r, "#"), ["a/b"], "a/b stays, its child gone");
        r.set("a/b", Kept::new(b"", 0), None).unwrap();
        assert_eq!((r.tree.len(), r.by_topic.len()), (0, 0));
        assert!(topics(&mut r, "#").is_empty() && topics(&mut r, "+/+").is_empty());
        assert_eq!((r.counters.messages, r.counters.bytes, r.counters.cleared), (0, 0, 3));
    }

    /// Empty levels are levels: `a/` is matched by `a/+`, `/x` by `+/x`,
    /// `a//b` by `a/+/b` and `a/#`, never by `a/b`.
    #[test]
    fn empty_levels_match_as_mqtt_says() {
        let mut r = Retained::new(RetainedConfig::default());
        for t in ["a", "a/", "a//b", "/x", "a/b"] {
            r.set(t, Kept::new(t.as_bytes(), 0), None).unwrap();
        }
        assert_eq!(topics(&mut r, "a/+"), ["a/", "a/b"]);
        assert_eq!(topics(&mut r, "+/x"), ["/x"]);
        assert_eq!(topics(&mut r, "a/+/b"), ["a//b"]);
        assert_eq!(topics(&mut r, "a/#"), ["a", "a/", "a//b", "a/b"]);
        assert_eq!(topics(&mut r, "+"), ["a"]);
        assert_eq!(topics(&mut r, "a//b"), ["a//b"]);
        assert_eq!(topics(&mut r, "+/+"), ["/x", "a/", "a/b"]);
    }

    /// The generation moves with every change of the set (kept, replaced,
    /// cleared, expired) and with nothing else: a refusal, a clear of
    /// nothing, or a lookup. An expired message leaves the tree too.
    #[test]
    fn the_generation_moves_with_every_change_and_nothing_else() {
        let mut r = Retained::new(RetainedConfig { max_messages: 2, ..RetainedConfig::default() });
        let expiring = Forwarded { message_expiry: Some(1), ..Forwarded::default() };
        let mut g = r.generation();
        let mut step = |r: &Retained, by: u64, what: &str| {
            assert_eq!(r.generation(), g + by, "{what}");
            g = r.generation();
        };
        r.set("a", Kept::new(b"1", 0), None).unwrap();
        step(&r, 1, "kept");
        r.set("a", Kept::new(b"2", 0), None).unwrap();
        step(&r, 1, "replaced");
        r.set("b", Kept::new(b"1", 0).with(Some(&expiring), 0), None).unwrap();
        step(&r, 1, "kept");
        assert_eq!(r.set("c", Kept::new(b"1", 0), None), Err("count"));
        step(&r, 0, "refused");
        r.set("nothing", Kept::new(b"", 0), None).unwrap();
        step(&r, 0, "a clear of nothing");
        assert_eq!(topics(&mut r, "#"), ["a", "b"]);
        step(&r, 0, "a lookup");
        assert_eq!(r.matching("#", 2_000_000).len(), 1, "b's second passed");
        step(&r, 1, "expired");
        assert_eq!((r.tree.len(), r.tree.get("b")), (1, None), "gone from the tree");
        r.set("a", Kept::new(b"", 0), None).unwrap();
        step(&r, 1, "cleared");
    }

    /// One answer carries at most MAX_ANSWER_BYTES of topics and payloads:
    /// past it the rest is left out (and not counted as served).
    #[test]
    fn an_answer_stops_at_its_byte_bound() {
        let mut r = Retained::new(RetainedConfig::default());
        let mib = vec![7u8; 1 << 20];
        for i in 0..5 {
            r.set(&format!("big/{i}"), Kept::new(&mib, 0), None).unwrap();
        }
        let got = r.matching("big/#", 0);
        assert_eq!(got.len(), 3, "four 1 MiB messages and their topics are past 4 MiB");
        assert!(got.iter().map(|(t, k)| t.len() + k.data.len()).sum::<usize>() <= MAX_ANSWER_BYTES);
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in topic order");
        assert_eq!(r.counters.served, 3);
        assert_eq!(r.matching("big/1", 0).len(), 1, "a narrower filter gets its own");
    }

    /// `refused` adds what it is given under its reason, and nothing for
    /// nothing (no empty reason shows in the metrics).
    #[test]
    fn refusals_are_added_under_their_reason() {
        let mut r = Retained::new(RetainedConfig::default());
        r.refused("file", 0);
        assert!(r.counters.refused.is_empty());
        r.refused("file", 2);
        r.refused("file", 3);
        assert_eq!(r.counters.refused["file"], 5);
    }

    /// Over the count or the bytes a retained publish is refused and
    /// counted; replacing an existing topic's message is not a new one.
    #[test]
    fn the_store_is_bounded_in_count_and_bytes() {
        let mut r = Retained::new(RetainedConfig { max_messages: 2, max_bytes: 2 * PER_MESSAGE + 40, per_identity: 0 });
        r.set("a", Kept::new(b"1", 0), None).unwrap();
        r.set("b", Kept::new(b"1", 0), None).unwrap();
        assert_eq!(r.set("c", Kept::new(b"1", 0), None), Err("count"));
        assert_eq!(r.set("a", Kept::new(b"22", 0), None), Ok(()), "a replacement is no new message");
        assert_eq!(r.set("a", Kept::new(&[0; 64], 0), None), Err("bytes"));
        assert_eq!(r.matching("a", 0)[0].1.data.as_ref(), b"22", "the refused one did not replace it");
        assert_eq!((r.counters.refused["count"], r.counters.refused["bytes"]), (1, 1));
    }

    /// From another node the newest message of a topic wins, whatever
    /// order the copies come in; a clear removes only what is not newer.
    #[test]
    fn from_other_nodes_the_newest_wins() {
        let mut r = Retained::new(RetainedConfig::default());
        let at = |data: &[u8], us| Kept::new(data, 0).with(None, us);
        assert!(r.newer("t", at(b"2", 20), None));
        assert!(!r.newer("t", at(b"1", 10), None), "older");
        assert!(!r.newer("t", at(b"2", 20), None), "the same copy again");
        assert!(!r.newer("t", at(b"", 15), None), "a clear older than the message");
        assert_eq!(r.matching("t", 0)[0].1.data.as_ref(), b"2");
        assert!(r.newer("t", at(b"", 20), None), "a clear of the same instant");
        assert!(!r.newer("t", at(b"", 30), None), "nothing left to clear");
        assert!(r.newer("t", at(b"3", 5), None), "an empty topic takes any message");
        assert_eq!(r.all(0).map(|(t, d, _, _)| (t, d)).collect::<Vec<_>>(), vec![("t", &b"3"[..])]);
        assert_eq!((r.counters.stored, r.counters.cleared, r.counters.messages), (2, 1, 1));
    }

    /// A cluster node remembers clears (at most --mqtt-retained of them,
    /// the oldest forgotten): a copy older than one cannot come back, one
    /// newer can, and a sync's answer carries them.
    #[test]
    fn a_cluster_node_remembers_clears_so_no_older_copy_comes_back() {
        let mut r = Retained::new(RetainedConfig { max_messages: 2, ..RetainedConfig::default() });
        r.keep_clears();
        let at = |data: &[u8], us| Kept::new(data, 0).with(None, us);
        assert!(r.newer("t", at(b"1", 10), None));
        r.set("t", at(b"", 20), None).unwrap();
        assert!(!r.newer("t", at(b"1", 10), None), "the copy the clear removed");
        assert!(!r.newer("t", at(b"", 15), None), "an older clear changes nothing");
        assert!(r.newer("t", at(b"2", 30), None), "a newer message");
        r.set("a", at(b"", 1), None).unwrap();
        r.set("b", at(b"", 2), None).unwrap();
        let mut clears: Vec<(&str, u64)> = r.cleared().collect();
        clears.sort();
        assert_eq!(clears, [("a", 1), ("b", 2)], "two kept, t's the oldest forgotten");
        let mut single = Retained::new(RetainedConfig::default());
        single.set("t", at(b"", 20), None).unwrap();
        assert_eq!(single.cleared().count(), 0, "not outside a cluster");
    }

    /// A message keeps its properties (not its publisher) and its expiry:
    /// a subscription gets what is left of it, and past it the message is
    /// gone, its bytes given back.
    #[test]
    fn a_message_keeps_its_properties_and_expires() {
        let mut r = Retained::new(RetainedConfig::default());
        let f = Forwarded { origin: Some(7), message_expiry: Some(10), content_type: Some("text/plain".into()), ..Forwarded::default() };
        r.set("a", Kept::new(b"1", 1).with(Some(&f), 1_000_000), None).unwrap();
        r.set("b", Kept::new(b"2", 1).with(Some(&Forwarded { origin: Some(7), ..Forwarded::default() }), 1_000_000), None).unwrap();
        assert_eq!(r.matching("b", 0)[0].1.mqtt, None, "only a publisher: nothing kept");
        let got = r.matching("a", 4_500_000)[0].1.forwarded(4_500_000).unwrap().unwrap();
        assert_eq!((got.origin, got.message_expiry, got.content_type.as_deref()), (None, Some(7), Some("text/plain")));
        assert_eq!(r.counters.bytes, 2 * PER_MESSAGE + 4 + "text/plain".len() as u64, "its properties are counted");
        assert_eq!(topics(&mut r, "#"), ["a", "b"]);
        assert_eq!(r.matching("+", 11_000_000).len(), 1, "a's ten seconds passed");
        assert_eq!((r.counters.expired, r.counters.messages, r.counters.bytes), (1, 1, PER_MESSAGE + 2));
    }
}
