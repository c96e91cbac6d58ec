//! MQTT topic filters with `+` and `#` inside one server worker: each
//! distinct filter is interned once with its subscribers, and a push's
//! topic is matched against every filter of the worker (the codec's
//! `proto::mqtt::topic::matches`, which keeps `$` topics out of
//! top-level wildcards). Exact topics stay in `topics.rs`'s map; only
//! filters that need matching live here.
//!
//! Bounded: at most [`MAX_FILTERS`] distinct filters per worker (a
//! subscription that would add one more is refused `too_many_topics`),
//! a quarter of them created by one identity (`limits/identity.rs`; past
//! it refused `identity_quota`),
//! each at most `push::MAX_TOPIC` bytes, and a connection's filters count
//! against its `topics::MAX_SUBSCRIPTIONS`. Matching walks a filter trie
//! (`topic_index::FilterTrie`): a push costs what can match its topic,
//! not the number of filters the worker holds.

use crate::server::close::Close;
use crate::server::limits::identity::Charges;
use crate::server::topic_index::FilterTrie;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Most distinct wildcard filters one worker holds (each costs its name,
/// map and trie entries and a subscriber set).
pub(crate) const MAX_FILTERS: usize = 4096;
/// Set in a subscription id (`topics::Subs`) that names a filter here
/// rather than an exact topic.
pub(crate) const WILD: u32 = 1 << 31;

pub(crate) use crate::proto::mqtt::topic::is_filter;

/// One live filter, who subscribed to it, and whom it is charged to.
struct Filter {
    name: Box<str>,
    subscribers: HashSet<usize>,
    creator: Rc<str>,
}

/// The worker's wildcard filters, refcounted by their subscribers.
pub(crate) struct Wildcards {
    ids: HashMap<Box<str>, u32>,
    /// The same filters by level, for matching a push's topic.
    trie: FilterTrie<u32>,
    /// Indexed by id; `None` for a free id (listed in `free`).
    slots: Vec<Option<Filter>>,
    free: Vec<u32>,
    charges: Charges,
}

impl Default for Wildcards {
    fn default() -> Wildcards {
        Wildcards { ids: HashMap::new(), trie: FilterTrie::default(), slots: Vec::new(), free: Vec::new(), charges: Charges::of(MAX_FILTERS) }
    }
}

impl Wildcards {
    /// The id of a live filter.
    pub(crate) fn id(&self, filter: &str) -> Option<u32> {
        self.ids.get(filter).copied()
    }

    /// A live filter's name.
    pub(crate) fn name(&self, id: u32) -> Option<&str> {
        self.slots.get(id as usize).and_then(Option::as_ref).map(|f| &*f.name)
    }

    /// Add subscriber `key` to `filter` (interned if new, charged to
    /// `who()`, its identity); its id. Err: the worker holds
    /// [`MAX_FILTERS`] already, or that identity its share of them.
    pub(crate) fn add(&mut self, filter: &str, key: usize, who: impl FnOnce() -> String) -> Result<u32, Close> {
        let id = match self.ids.get(filter) {
            Some(id) => *id,
            None => {
                if self.ids.len() >= MAX_FILTERS {
                    return Err(Close::TooManyTopics);
                }
                let creator = self.charges.charge(&who()).ok_or(Close::IdentityQuota)?;
                let f = Filter { name: filter.into(), subscribers: HashSet::new(), creator };
                let id = match self.free.pop() {
                    Some(id) => {
                        self.slots[id as usize] = Some(f);
                        id
                    }
                    None => {
                        self.slots.push(Some(f));
                        (self.slots.len() - 1) as u32
                    }
                };
                self.ids.insert(filter.into(), id);
                *self.trie.entry(filter, || id) = id;
                id
            }
        };
        self.slots[id as usize].as_mut().expect("a known id is live").subscribers.insert(key);
        Ok(id)
    }

    /// Drop subscriber `key` from filter `id`; the filter goes with its
    /// last subscriber.
    pub(crate) fn remove(&mut self, id: u32, key: usize) {
        let Some(f) = self.slots.get_mut(id as usize).and_then(Option::as_mut) else { return };
        if !f.subscribers.remove(&key) || !f.subscribers.is_empty() {
            return;
        }
        let f = self.slots[id as usize].take().expect("checked above");
        self.ids.remove(&f.name);
        self.trie.remove(&f.name);
        self.charges.release(&f.creator);
        self.free.push(id);
        if self.ids.is_empty() {
            (self.ids, self.trie, self.slots, self.free) = Default::default();
        }
    }

    /// Append the subscribers of every filter matching `topic` to `out`
    /// (a subscriber of several matching filters appears once per filter:
    /// the caller dedups).
    pub(crate) fn matching(&self, topic: &str, out: &mut Vec<usize>) {
        self.trie.matching(topic, |id| {
            if let Some(f) = self.slots.get(*id as usize).and_then(Option::as_ref) {
                out.extend(f.subscribers.iter().copied());
            }
        });
    }

    /// Whether no filter is live (asked on every push: one lookup).
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// (live filters, subscriptions to them).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.ids.len() as u64, self.slots.iter().flatten().map(|f| f.subscribers.len() as u64).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Filters are shared by their subscribers, matched with MQTT's rules
    /// (`$` topics not under top-level wildcards), and forgotten with the
    /// last subscriber; the table refuses a filter past its bound.
    #[test]
    fn filters_match_are_refcounted_and_bounded() {
        let mut w = Wildcards::default();
        let who = || "peer".to_string();
        let a = w.add("a/+", 1, who).unwrap();
        assert_eq!(w.add("a/+", 2, who), Ok(a));
        let all = w.add("#", 3, who).unwrap();
        let mut out = Vec::new();
        w.matching("a/b", &mut out);
        out.sort();
        assert_eq!(out, vec![1, 2, 3]);
        out.clear();
        w.matching("$SYS/x", &mut out);
        assert!(out.is_empty(), "# does not match a $ topic");
        w.matching("a/b/c", &mut out);
        assert_eq!(out, vec![3]);
        w.remove(a, 1);
        assert_eq!(w.name(a), Some("a/+"));
        w.remove(a, 2);
        assert_eq!((w.name(a), w.id("a/+")), (None, None));
        w.remove(all, 3);
        assert_eq!(w.counts(), (0, 0));
        for (i, name) in (0..MAX_FILTERS).map(|i| (i, format!("user{}", i / (MAX_FILTERS / 4)))) {
            w.add(&format!("x/{i}/#"), 9, || name).unwrap();
        }
        assert_eq!(w.add("y/#", 9, who), Err(Close::TooManyTopics));
        assert!(w.add("x/0/#", 10, who).is_ok(), "an existing filter is not a new one");
    }

    /// Issue 62, finding 5: one identity creates at most a quarter of the
    /// table; another still gets new filters, and a filter's end gives its
    /// creator room again.
    #[test]
    fn one_identity_cannot_fill_the_table() {
        let mut w = Wildcards::default();
        let mallory = || "mallory".to_string();
        let ids: Vec<u32> = (0..MAX_FILTERS / 4).map(|i| w.add(&format!("m/{i}/#"), 1, mallory).unwrap()).collect();
        assert_eq!(w.add("m/more/#", 1, mallory), Err(Close::IdentityQuota));
        assert!(w.add("alice/#", 2, || "alice".to_string()).is_ok());
        assert!(w.add("m/0/#", 3, || "alice".to_string()).is_ok(), "joining mallory's filter charges nobody");
        w.remove(ids[1], 1);
        assert!(w.add("m/more/#", 1, mallory).is_ok());
    }
}
