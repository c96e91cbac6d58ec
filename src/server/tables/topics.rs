//! Topics and pushes inside one server worker.
//!
//! Topic names are interned per worker and reference-counted by their
//! subscribers: a topic whose last subscriber leaves is forgotten (its
//! name and subscriber set freed, its id reused), so subscribing to
//! random names in a loop costs nothing that stays. At most
//! `--max-topics` topics exist per worker; a subscription that would
//! create one more is refused (`too_many_topics`). Each connection keeps
//! the ids of its topics in one word of its record ([`Subs`]): one
//! subscription inline, two or more in one allocation behind it.
//!
//! A topic's name is stored once, in its slot (24 bytes: the name,
//! inline up to 19 bytes, else boxed ([`name`]), and [`Subscribers`]);
//! the name index is a table of bare ids hashed and
//! compared through the slots' names (5 bytes a bucket), with the keyed
//! SipHash of std's `RandomState` because names come from peers. A topic
//! with one subscriber keeps it inline; only two or more get a set
//! ([`subscribers`]). A million devices each on a topic of its own
//! measured 368 bytes of server heap per connection before this layout
//! (a name twice, a 64-byte `Option<Topic>` per slot, a `HashSet` per
//! topic); `one_topic_with_one_subscriber_is_small` counts it now.
//!
//! A push arrives once per worker as a command; its frame is encoded once
//! and written to every target from that one buffer. Only a socket that
//! does not take it all gets the rest spilled, bounded by
//! `--max-pending-bytes`; a reader that falls further behind is closed as
//! `slow_consumer`.

mod name;
mod subs;
mod subscribers;
#[cfg(test)]
mod tests;

use crate::proto::push;
use crate::server::close::Close;
use crate::server::tables::wildcards::{self, Wildcards, WILD};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
pub(crate) use subs::Subs;
use subscribers::{Many, Subscribers, Who};

pub(crate) use push::MAX_SUBSCRIPTIONS;
/// Default `--max-topics`: distinct topics with subscribers in one
/// worker (each costs a 24-byte slot with its name and a 5-byte index
/// bucket, with the tables' slack; a set only with two subscribers).
pub(crate) const DEFAULT_MAX_TOPICS: usize = 100_000;
/// A subscription refused because the worker holds `--max-topics` topics.
#[cfg(test)]
pub(crate) const TOO_MANY_TOPICS: &str = "too_many_topics";
pub(crate) use crate::stats::exposition::LATENCY_BUCKETS_MS;

/// The change a worker reports when it gains its first MQTT wildcard
/// filter (or loses its last): a cluster node then takes every topic's
/// messages (`cluster::ANY_TOPIC`). Not a topic name (`>` is no topic
/// character).
pub(crate) use crate::cluster::ANY_TOPIC;

/// A connection's slab key as a topic keeps it.
fn slot(key: usize) -> u32 {
    u32::try_from(key).expect("a slab key stays below the worker's connection cap")
}

/// Slots grow by a quarter (at least this many), not by doubling: with a
/// slot per topic, doubling leaves up to half the table unused.
const MIN_SLOT_GROWTH: usize = 64;

/// One live topic: its name (the only copy) and who subscribed, in 24
/// bytes (20 and 4; `Option<Slot>` too, `Who` is never zero).
struct Slot {
    name: name::Name,
    who: Who,
}

impl Slot {
    fn subscribers(&self) -> Subscribers {
        self.who.get()
    }
}

pub(crate) struct Topics {
    /// Live topics' ids, hashed by name (`hasher`) and compared through
    /// `slots`: the name is not stored here.
    names: hashbrown::HashTable<u32>,
    /// Keyed per worker: names come from peers.
    hasher: RandomState,
    /// Indexed by id; `None` for a free id (listed in `free`).
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// The subscribers of topics with two or more, by topic id.
    many: HashMap<u32, Many>,
    /// `--max-topics`.
    max: usize,
    /// Topics gaining their first / losing their last subscriber, while
    /// tracked (a cluster node's supervisor subscribes to exactly those);
    /// a topic that came and went within one tick is not in it.
    pub following: crate::cluster::Following,
    /// Who each connection is and what it may subscribe to (`--auth`,
    /// `--admin-topics`): every subscription passes it.
    pub gate: crate::server::auth::gate::Gate,
    /// Subscribe, unsubscribe, resume and refresh commands per connection
    /// this second (the framed and WebSocket command paths charge it).
    pub rate: crate::server::limits::command_rate::CommandRate,
    /// MQTT filters with `+` or `#`, matched on every push.
    pub wild: Wildcards,
    /// Topics and filters that gained their first subscriber here (true)
    /// or lost their last, in order since the last take: the broker
    /// shards' interest (`worker/bus.rs`).
    interest: Vec<(bool, Box<str>)>,
}

impl Default for Topics {
    fn default() -> Topics {
        Topics::new(false, DEFAULT_MAX_TOPICS, crate::server::limits::command_rate::DEFAULT_PER_SECOND)
    }
}

/// The name of live topic `id` (the names table holds only live ids).
fn name_in(slots: &[Option<Slot>], id: u32) -> &str {
    slots[id as usize].as_ref().map_or("", |s| &s.name)
}

impl Topics {
    pub(crate) fn new(track: bool, max: usize, commands_per_second: u32) -> Topics {
        Topics {
            names: hashbrown::HashTable::new(),
            hasher: RandomState::new(),
            slots: Vec::new(),
            free: Vec::new(),
            many: HashMap::new(),
            max,
            following: crate::cluster::Following::new(track),
            gate: Default::default(),
            rate: crate::server::limits::command_rate::CommandRate::new(commands_per_second),
            wild: Wildcards::default(),
            interest: Vec::new(),
        }
    }

    /// Subscribe connection `key` to `topic`.
    pub(crate) fn subscribe(&mut self, subs: &mut Subs, key: usize, topic: &[u8]) -> Result<(), Close> {
        push::check_topic(topic).map_err(|_| Close::BadTopic)?;
        let name = std::str::from_utf8(topic).map_err(|_| Close::BadTopic)?;
        self.gate.permits(key, name)?;
        let known = self.id(name);
        if known.is_some_and(|id| subs.contains(&id)) {
            return Ok(());
        }
        if subs.len() >= MAX_SUBSCRIPTIONS {
            return Err(Close::TooManySubscriptions);
        }
        let id = match known {
            Some(id) => {
                self.join(id, slot(key));
                id
            }
            None => {
                let id = self.create(name, slot(key))?;
                self.following.note(name, true);
                self.interest.push((true, name.into()));
                id
            }
        };
        subs.push(id);
        self.gate.joined(key, name, true);
        Ok(())
    }

    /// Add subscriber `key` to live topic `id` (it is not one yet).
    fn join(&mut self, id: u32, key: u32) {
        let Some(t) = self.slots[id as usize].as_mut() else { return };
        match t.subscribers() {
            Subscribers::One(first) => {
                self.many.insert(id, Many::pair(first, key));
                t.who = Subscribers::Many.into();
            }
            Subscribers::Many => {
                self.many.entry(id).or_default().insert(key);
            }
        }
    }

    /// Subscribe connection `key` (of identity `who()`) to an MQTT filter
    /// with `+` or `#`: its levels are topic characters or wildcards, the
    /// token (`--auth jwt`) must permit every topic it can match, and it
    /// counts against the connection's [`MAX_SUBSCRIPTIONS`] (a new
    /// filter against `who`'s share of the worker's, `wildcards.rs`).
    pub(crate) fn subscribe_filter(&mut self, subs: &mut Subs, key: usize, filter: &str, who: impl FnOnce() -> String) -> Result<(), Close> {
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
        let had = !self.wild.is_empty();
        let new = self.wild.id(filter).is_none();
        let id = self.wild.add(filter, key, who)?;
        if new {
            self.interest.push((true, filter.into()));
        }
        if !had {
            self.following.note(ANY_TOPIC, true);
        }
        subs.push(id | WILD);
        Ok(())
    }

    /// Every connection a push of `topic` goes to: its exact subscribers
    /// and those of matching wildcard filters, each once.
    pub(crate) fn audience(&self, topic: &str) -> Vec<usize> {
        let mut v = self.subscribers(topic);
        if !self.wild.is_empty() {
            self.wild.matching(topic, &mut v);
        }
        // In slab order, as a broadcast walks the slab: a subscriber set's
        // own order is its hash's, and writing to 17,000 sockets in it
        // wanders over the kernel's socket memory.
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A new topic whose one subscriber is `key`.
    fn create(&mut self, name: &str, key: u32) -> Result<u32, Close> {
        if self.names.len() >= self.max {
            return Err(Close::TooManyTopics);
        }
        let topic = Slot { name: name.into(), who: Subscribers::One(key).into() };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(topic);
                id
            }
            None => {
                if self.slots.len() == self.slots.capacity() {
                    self.slots.reserve_exact((self.slots.len() / 4).max(MIN_SLOT_GROWTH));
                }
                self.slots.push(Some(topic));
                (self.slots.len() - 1) as u32
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.names.insert_unique(hasher.hash_one(name), id, |id| hasher.hash_one(name_in(slots, *id)));
        Ok(id)
    }

    /// After a token refresh: the topics connection `key` follows that its
    /// new token no longer permits, unsubscribed; their names.
    pub(crate) fn revoke(&mut self, subs: &mut Subs, key: usize) -> Vec<Box<str>> {
        let names: Vec<Box<str>> = subs.iter().filter_map(|id| self.sub_name(id)).map(Box::from).collect();
        let revoked: Vec<Box<str>> = names.into_iter().filter(|n| self.gate.permits(key, n).is_err()).collect();
        for name in &revoked {
            self.unsubscribe(subs, key, name.as_bytes());
        }
        revoked
    }

    pub(crate) fn unsubscribe(&mut self, subs: &mut Subs, key: usize, topic: &[u8]) {
        let Some(id) = std::str::from_utf8(topic).ok().and_then(|t| if wildcards::is_filter(t) { self.wild.id(t).map(|id| id | WILD) } else { self.id(t) })
        else {
            return;
        };
        if subs.remove(id) {
            self.remove(id, key);
        }
    }

    fn remove(&mut self, id: u32, key: usize) {
        if id & WILD != 0 {
            let had = !self.wild.is_empty();
            let name: Option<Box<str>> = self.wild.name(id & !WILD).map(Into::into);
            self.wild.remove(id & !WILD, key);
            if let Some(name) = name.filter(|_| self.wild.name(id & !WILD).is_none()) {
                self.interest.push((false, name));
            }
            if had && self.wild.is_empty() {
                self.following.note(ANY_TOPIC, false);
            }
            return;
        }
        let key32 = slot(key);
        let Some(t) = self.slots.get_mut(id as usize).and_then(Option::as_mut) else { return };
        match t.subscribers() {
            Subscribers::One(k) if k == key32 => {}
            Subscribers::One(_) => return,
            Subscribers::Many => {
                let Some(set) = self.many.get_mut(&id) else { return };
                if !set.remove(key32) {
                    return;
                }
                if set.len() == 1 {
                    // Back to one: inline again, the set's memory given back.
                    let last = set.iter().next().expect("one left");
                    self.many.remove(&id);
                    t.who = Subscribers::One(last).into();
                }
                self.gate.joined(key, &t.name, false);
                return;
            }
        }
        self.gate.joined(key, &t.name, false);
        // The last subscriber left: forget the topic, reuse its id.
        let (slots, hasher) = (&self.slots, &self.hasher);
        let hash = hasher.hash_one(name_in(slots, id));
        if let Ok(e) = self.names.find_entry(hash, |i| *i == id) {
            e.remove();
        }
        let t = self.slots[id as usize].take().expect("checked above");
        self.free.push(id);
        self.following.note(&t.name, false);
        self.interest.push((false, Box::from(&*t.name)));
        if self.names.is_empty() {
            // Nothing live: give the tables' memory back too.
            (self.names, self.slots, self.free, self.many) = Default::default();
        }
    }

    /// A connection closed: drop it from every topic it had.
    pub(crate) fn forget(&mut self, subs: &Subs, key: usize) {
        for id in subs.iter() {
            self.remove(id, key);
        }
    }

    /// The interest gained and lost since the last call, in order.
    pub(crate) fn take_interest(&mut self) -> Vec<(bool, Box<str>)> {
        std::mem::take(&mut self.interest)
    }

    /// Net first/last-subscriber changes since the last call (when
    /// tracked), sorted by topic.
    pub(crate) fn take_changes(&mut self) -> Vec<(String, bool)> {
        self.following.take()
    }

    /// A live topic's id.
    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        let slots = &self.slots;
        self.names.find(self.hasher.hash_one(name), |id| name_in(slots, *id) == name).copied()
    }

    /// A live topic's name.
    pub(crate) fn name(&self, id: u32) -> Option<&str> {
        self.slots.get(id as usize).and_then(Option::as_ref).map(|t| &*t.name)
    }

    /// The connections subscribed to `topic` itself (no wildcard filter).
    pub(crate) fn subscribers(&self, topic: &str) -> Vec<usize> {
        let Some(id) = self.id(topic) else { return Vec::new() };
        match self.slots[id as usize].as_ref().map(Slot::subscribers) {
            Some(Subscribers::One(k)) => vec![k as usize],
            Some(Subscribers::Many) => self.many.get(&id).map(|m| m.iter().map(|k| k as usize).collect()).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    pub(crate) fn has(&self, subs: &Subs, topic: &str) -> bool {
        self.sub_id(topic).is_some_and(|id| subs.contains(&id))
    }

    /// The subscription id (as in [`Subs`]) of a live topic or filter.
    pub(crate) fn sub_id(&self, name: &str) -> Option<u32> {
        if wildcards::is_filter(name) {
            self.wild.id(name).map(|id| id | WILD)
        } else {
            self.id(name)
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
        subs.iter().filter_map(|id| self.sub_name(id)).map(str::to_string).collect()
    }

    /// (topics with at least one subscriber, subscriptions in all).
    pub(crate) fn counts(&self) -> (u64, u64) {
        let ones = self.slots.iter().flatten().filter(|t| matches!(t.subscribers(), Subscribers::One(_))).count();
        let in_sets: usize = self.many.values().map(Many::len).sum();
        let (filters, to_filters) = self.wild.counts();
        (self.names.len() as u64 + filters, (ones + in_sets) as u64 + to_filters)
    }
}

/// Index of the latency bucket `ms` falls in (LATENCY_BUCKETS_MS.len() is +Inf).
pub(crate) fn bucket(ms: f64) -> usize {
    LATENCY_BUCKETS_MS.iter().position(|b| ms <= *b).unwrap_or(LATENCY_BUCKETS_MS.len())
}
