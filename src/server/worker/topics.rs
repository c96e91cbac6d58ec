//! Topics and pushes inside one server worker.
//!
//! Topic names are interned per worker and reference-counted by their
//! subscribers: a topic whose last subscriber leaves is forgotten (its
//! name and subscriber set freed, its id reused), so subscribing to
//! random names in a loop costs nothing that stays. At most
//! `--max-topics` topics exist per worker; a subscription that would
//! create one more is refused (`too_many_topics`). Each connection keeps
//! the ids of its topics in one allocation behind one pointer
//! ([`Subs`]): a connection without subscriptions pays the pointer.
//! A push arrives once per worker as a command; its frame is encoded once
//! and written to every target from that one buffer. Only a socket that
//! does not take it all gets the rest spilled, bounded by
//! `--max-pending-bytes`; a reader that falls further behind is closed as
//! `slow_consumer`.

use crate::proto::push;
use crate::server::close::Close;
use crate::server::worker::wildcards::{self, Wildcards, WILD};
use std::collections::{HashMap, HashSet};

pub(crate) use push::MAX_SUBSCRIPTIONS;
/// Default `--max-topics`: distinct topics with subscribers in one
/// worker (each costs its name, ~100 bytes of map entries and a
/// subscriber set).
pub(crate) const DEFAULT_MAX_TOPICS: usize = 100_000;
/// A subscription refused because the worker holds `--max-topics` topics.
#[cfg(test)]
pub(crate) const TOO_MANY_TOPICS: &str = "too_many_topics";
pub(crate) use crate::stats::exposition::LATENCY_BUCKETS_MS;

/// Subscriptions of one connection (topic ids; with [`WILD`] set, an
/// MQTT wildcard filter's id in [`Topics::wild`]). A `ThinVec` is one
/// pointer in the connection record, a shared empty header (nothing
/// allocated) until the first subscription, then ONE allocation holding
/// length, capacity and ids: 32 bytes of heap for one or two
/// subscriptions where a boxed `Vec` took two allocations, 64 bytes (a
/// million devices each subscribed to its own topic: 32 MB less).
pub(crate) type Subs = thin_vec::ThinVec<u32>;

/// A connection's slab key as a topic keeps it.
fn slot(key: usize) -> u32 {
    u32::try_from(key).expect("a slab key stays below the worker's connection cap")
}

/// Add `id` to a connection's subscriptions: the first one allocates room
/// for exactly one (most connections keep one), more grow as a `Vec` does.
fn add(subs: &mut Subs, id: u32) {
    if subs.capacity() == 0 {
        subs.reserve_exact(1);
    }
    subs.push(id);
}

/// One live topic: its name and who subscribed.
struct Topic {
    name: Box<str>,
    /// Slab keys, as u32 (a worker holds fewer connections than its
    /// open-file limit): 5 bytes a bucket instead of 9, 9 bytes per
    /// subscriber of a topic with thousands.
    subscribers: HashSet<u32>,
}

pub(crate) struct Topics {
    ids: HashMap<Box<str>, u32>,
    /// Indexed by id; `None` for a free id (listed in `free`).
    slots: Vec<Option<Topic>>,
    free: Vec<u32>,
    /// `--max-topics`.
    max: usize,
    /// Record topics gaining their first / losing their last subscriber
    /// (a cluster node's supervisor subscribes to exactly those).
    pub track: bool,
    /// Net first/last-subscriber changes since the last `take_changes`:
    /// a topic that came and went within one tick is not in it.
    changes: HashMap<Box<str>, bool>,
    /// Who each connection is and what it may subscribe to (`--auth`,
    /// `--admin-topics`): every subscription passes it.
    pub gate: crate::server::auth::gate::Gate,
    /// Subscribe, unsubscribe, resume and refresh commands per connection
    /// this second (the framed and WebSocket command paths charge it).
    pub rate: crate::server::limits::command_rate::CommandRate,
    /// MQTT filters with `+` or `#`, matched on every push.
    pub wild: Wildcards,
}

impl Default for Topics {
    fn default() -> Topics {
        Topics::new(false, DEFAULT_MAX_TOPICS, crate::server::limits::command_rate::DEFAULT_PER_SECOND)
    }
}

impl Topics {
    pub(crate) fn new(track: bool, max: usize, commands_per_second: u32) -> Topics {
        Topics {
            ids: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            max,
            track,
            changes: HashMap::new(),
            gate: Default::default(),
            rate: crate::server::limits::command_rate::CommandRate::new(commands_per_second),
            wild: Wildcards::default(),
        }
    }

    /// Subscribe connection `key` to `topic`.
    pub(crate) fn subscribe(&mut self, subs: &mut Subs, key: usize, topic: &[u8]) -> Result<(), Close> {
        push::check_topic(topic).map_err(|_| Close::BadTopic)?;
        let name = std::str::from_utf8(topic).map_err(|_| Close::BadTopic)?;
        self.gate.permits(key, name)?;
        let known = self.ids.get(name).copied();
        if known.is_some_and(|id| subs.contains(&id)) {
            return Ok(());
        }
        if subs.len() >= MAX_SUBSCRIPTIONS {
            return Err(Close::TooManySubscriptions);
        }
        let id = match known {
            Some(id) => id,
            None => self.create(name)?,
        };
        add(subs, id);
        let t = self.slots[id as usize].as_mut().expect("a known id is live");
        t.subscribers.insert(slot(key));
        self.gate.joined(key, name, true);
        if t.subscribers.len() == 1 {
            self.note(name, true);
        }
        Ok(())
    }

    /// Subscribe connection `key` to an MQTT filter with `+` or `#`: its
    /// levels are topic characters or wildcards, the token (`--auth jwt`)
    /// must cover the filter as written, and it counts against the
    /// connection's [`MAX_SUBSCRIPTIONS`].
    pub(crate) fn subscribe_filter(&mut self, subs: &mut Subs, key: usize, filter: &str) -> Result<(), Close> {
        let plain: String = filter.chars().filter(|c| !matches!(c, '+' | '#')).collect();
        if filter.len() > push::MAX_TOPIC || plain.split('/').any(|l| !l.is_empty() && push::check_topic(l.as_bytes()).is_err()) {
            return Err(Close::BadTopic);
        }
        self.gate.permits(key, filter)?;
        if self.wild.id(filter).is_some_and(|id| subs.contains(&(id | WILD))) {
            return Ok(());
        }
        if subs.len() >= MAX_SUBSCRIPTIONS {
            return Err(Close::TooManySubscriptions);
        }
        let id = self.wild.add(filter, key)?;
        add(subs, id | WILD);
        Ok(())
    }

    /// Every connection a push of `topic` goes to: its exact subscribers
    /// and those of matching wildcard filters, each once.
    pub(crate) fn audience(&self, topic: &str) -> Vec<usize> {
        let mut v = self.subscribers(topic);
        if self.wild.counts().0 > 0 {
            self.wild.matching(topic, &mut v);
            v.sort_unstable();
            v.dedup();
        }
        v
    }

    /// A new topic with no subscriber yet (the caller adds one at once).
    fn create(&mut self, name: &str) -> Result<u32, Close> {
        if self.ids.len() >= self.max {
            return Err(Close::TooManyTopics);
        }
        let topic = Topic { name: name.into(), subscribers: HashSet::new() };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(topic);
                id
            }
            None => {
                self.slots.push(Some(topic));
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(name.into(), id);
        Ok(id)
    }

    /// After a token refresh: the topics connection `key` follows that its
    /// new token no longer permits, unsubscribed; their names.
    pub(crate) fn revoke(&mut self, subs: &mut Subs, key: usize) -> Vec<Box<str>> {
        let names: Vec<Box<str>> = subs.iter().filter_map(|id| self.sub_name(*id)).map(Box::from).collect();
        let revoked: Vec<Box<str>> = names.into_iter().filter(|n| self.gate.permits(key, n).is_err()).collect();
        for name in &revoked {
            self.unsubscribe(subs, key, name.as_bytes());
        }
        revoked
    }

    pub(crate) fn unsubscribe(&mut self, subs: &mut Subs, key: usize, topic: &[u8]) {
        let Some(id) =
            std::str::from_utf8(topic).ok().and_then(|t| if wildcards::is_filter(t) { self.wild.id(t).map(|id| id | WILD) } else { self.ids.get(t).copied() })
        else {
            return;
        };
        let before = subs.len();
        subs.retain(|t| *t != id);
        let had = subs.len() != before;
        if subs.is_empty() {
            // Give the allocation back (a ThinVec keeps it when emptied).
            *subs = Subs::new();
        }
        if had {
            self.remove(id, key);
        }
    }

    fn remove(&mut self, id: u32, key: usize) {
        if id & WILD != 0 {
            return self.wild.remove(id & !WILD, key);
        }
        let Some(t) = self.slots.get_mut(id as usize).and_then(Option::as_mut) else { return };
        if !t.subscribers.remove(&slot(key)) {
            return;
        }
        self.gate.joined(key, &t.name, false);
        if !t.subscribers.is_empty() {
            return;
        }
        // The last subscriber left: forget the topic, reuse its id.
        let t = self.slots[id as usize].take().expect("checked above");
        self.ids.remove(&t.name);
        self.free.push(id);
        self.note(&t.name, false);
        if self.ids.is_empty() {
            // Nothing live: give the tables' memory back too.
            (self.ids, self.slots, self.free) = Default::default();
        }
    }

    /// Record a first (true) or last (false) subscriber; the opposite of
    /// a change not yet reported cancels it.
    fn note(&mut self, name: &str, first: bool) {
        if !self.track {
            return;
        }
        match self.changes.get(name) {
            Some(pending) if *pending != first => {
                self.changes.remove(name);
            }
            _ => {
                self.changes.insert(name.into(), first);
            }
        }
    }

    /// A connection closed: drop it from every topic it had.
    pub(crate) fn forget(&mut self, subs: &Subs, key: usize) {
        for id in subs.iter() {
            self.remove(*id, key);
        }
    }

    /// Net first/last-subscriber changes since the last call (when
    /// tracked), sorted by topic.
    pub(crate) fn take_changes(&mut self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = self.changes.drain().map(|(k, v)| (k.into(), v)).collect();
        v.sort();
        if self.changes.capacity() > 64 {
            self.changes = HashMap::new();
        }
        v
    }

    fn topic(&self, name: &str) -> Option<&Topic> {
        self.ids.get(name).and_then(|id| self.slots[*id as usize].as_ref())
    }

    /// A live topic's id.
    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// A live topic's name.
    pub(crate) fn name(&self, id: u32) -> Option<&str> {
        self.slots.get(id as usize).and_then(Option::as_ref).map(|t| &*t.name)
    }

    pub(crate) fn subscribers(&self, topic: &str) -> Vec<usize> {
        self.topic(topic).map(|t| t.subscribers.iter().map(|k| *k as usize).collect()).unwrap_or_default()
    }

    pub(crate) fn has(&self, subs: &Subs, topic: &str) -> bool {
        self.sub_id(topic).is_some_and(|id| subs.contains(&id))
    }

    /// The subscription id (as in [`Subs`]) of a live topic or filter.
    pub(crate) fn sub_id(&self, name: &str) -> Option<u32> {
        if wildcards::is_filter(name) {
            self.wild.id(name).map(|id| id | WILD)
        } else {
            self.ids.get(name).copied()
        }
    }

    /// Whether subscription `id` (an exact topic or a filter) takes a
    /// message of `topic` (MQTT's matching rules for a filter).
    pub(crate) fn sub_matches(&self, id: u32, topic: &str) -> bool {
        if id & WILD != 0 {
            self.wild.name(id & !WILD).is_some_and(|f| crate::proto::mqtt::topic::matches(f, topic))
        } else {
            self.name(id) == Some(topic)
        }
    }

    /// The topic or filter a connection's subscription id names.
    pub(crate) fn sub_name(&self, id: u32) -> Option<&str> {
        if id & WILD != 0 {
            self.wild.name(id & !WILD)
        } else {
            self.name(id)
        }
    }

    pub(crate) fn names_of(&self, subs: &Subs) -> Vec<String> {
        subs.iter().filter_map(|id| self.sub_name(*id)).map(str::to_string).collect()
    }

    /// (topics with at least one subscriber, subscriptions in all).
    pub(crate) fn counts(&self) -> (u64, u64) {
        let live = self.slots.iter().flatten();
        let (filters, to_filters) = self.wild.counts();
        (self.ids.len() as u64 + filters, live.map(|t| t.subscribers.len() as u64).sum::<u64>() + to_filters)
    }
}

/// Index of the latency bucket `ms` falls in (LATENCY_BUCKETS_MS.len() is +Inf).
pub(crate) fn bucket(ms: f64) -> usize {
    LATENCY_BUCKETS_MS.iter().position(|b| ms <= *b).unwrap_or(LATENCY_BUCKETS_MS.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's subscriptions: nothing on the heap without any, one
    /// 32-byte malloc chunk for one (a boxed Vec held two, 64 bytes), and
    /// nothing again once it left them.
    #[test]
    fn one_subscription_is_one_small_allocation() {
        let mut t = Topics::default();
        t.subscribe(&mut Subs::new(), 9, b"warm").unwrap();
        let (mut subs, held) = crate::test_alloc::held(Subs::new);
        assert_eq!(held, 0);
        let ((), held) = crate::test_alloc::held(|| {
            let mut warm = Subs::new();
            t.subscribe(&mut warm, 1, b"warm").unwrap();
            std::mem::swap(&mut subs, &mut warm);
        });
        assert_eq!(held, 32, "one subscription to a known topic");
        assert_eq!(std::mem::size_of::<Subs>(), 8);
        let ((), held) = crate::test_alloc::held(|| t.unsubscribe(&mut subs, 1, b"warm"));
        assert_eq!(held, -32, "left: given back");
        assert_eq!(subs.capacity(), 0);
    }

    #[test]
    fn subscriptions_are_tracked_both_ways() {
        let mut t = Topics::default();
        let (mut a, mut b): (Subs, Subs) = (Subs::new(), Subs::new());
        t.subscribe(&mut a, 1, b"news").unwrap();
        t.subscribe(&mut b, 2, b"news").unwrap();
        t.subscribe(&mut b, 2, b"sport").unwrap();
        let mut s = t.subscribers("news");
        s.sort();
        assert_eq!(s, vec![1, 2]);
        assert_eq!(t.counts(), (2, 3));
        t.unsubscribe(&mut b, 2, b"news");
        assert_eq!(t.subscribers("news"), vec![1]);
        t.forget(&a, 1);
        assert!(t.subscribers("news").is_empty());
        assert!(t.take_changes().is_empty(), "untracked");
        t.track = true;
        t.subscribe(&mut a, 1, b"news").unwrap();
        t.subscribe(&mut b, 2, b"news").unwrap();
        t.forget(&a, 1);
        t.unsubscribe(&mut b, 2, b"news");
        assert!(t.take_changes().is_empty(), "came and went within one tick: nothing to tell");
        t.subscribe(&mut a, 1, b"news").unwrap();
        assert_eq!(t.take_changes(), vec![("news".to_string(), true)]);
        t.forget(&a, 1);
        assert_eq!(t.take_changes(), vec![("news".to_string(), false)]);
        assert_eq!(t.names_of(&b), vec!["sport".to_string()]);
        assert_eq!(t.subscribe(&mut a, 1, b"bad topic"), Err(Close::BadTopic));
    }

    #[test]
    fn a_topic_without_subscribers_is_forgotten_and_its_id_reused() {
        let mut t = Topics::new(false, 2, crate::server::limits::command_rate::DEFAULT_PER_SECOND);
        let (mut a, mut b): (Subs, Subs) = (Subs::new(), Subs::new());
        t.subscribe(&mut a, 1, b"keep").unwrap();
        for i in 0..1000 {
            let name = format!("t{i}");
            t.subscribe(&mut b, 2, name.as_bytes()).unwrap();
            t.unsubscribe(&mut b, 2, name.as_bytes());
        }
        assert_eq!((t.ids.len(), t.slots.len(), t.free.len()), (1, 2, 1), "one live topic, one free id");
        t.subscribe(&mut b, 2, b"x").unwrap();
        assert_eq!(t.subscribe(&mut b, 2, b"y"), Err(Close::TooManyTopics));
        assert_eq!(t.subscribe(&mut a, 1, b"x"), Ok(()), "an existing topic is not a new one");
        assert_eq!(t.counts(), (2, 3));
        // Unsubscribing from a topic one never had leaves its subscribers.
        t.unsubscribe(&mut b, 2, b"keep");
        assert_eq!(t.subscribers("keep"), vec![1]);
        t.forget(&a, 1);
        t.forget(&b, 2);
        assert_eq!(t.counts(), (0, 0));
        assert!(t.slots.is_empty() && t.free.is_empty(), "an empty worker keeps no table");
    }
}
