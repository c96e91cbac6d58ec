//! MQTT topic filters with `+` and `#` inside one server worker: each
//! distinct filter is interned once with its subscribers, and a push's
//! topic is matched against every filter of the worker (the codec's
//! `proto::mqtt::topic::matches`, which keeps `$` topics out of
//! top-level wildcards). Exact topics stay in `topics.rs`'s map; only
//! filters that need matching live here.
//!
//! Bounded: at most [`MAX_FILTERS`] distinct filters per worker (a
//! subscription that would add one more is refused `too_many_topics`),
//! each at most `push::MAX_TOPIC` bytes, and a connection's filters count
//! against its `topics::MAX_SUBSCRIPTIONS`. Matching costs one pass over
//! the filters per push: a first version; a trie is the next step when
//! workers hold many distinct filters.

use crate::server::close::Close;
use std::collections::{HashMap, HashSet};

/// Most distinct wildcard filters one worker holds (each costs its name,
/// map entries and a subscriber set; every push walks them all).
pub(crate) const MAX_FILTERS: usize = 4096;
/// Set in a subscription id (`topics::Subs`) that names a filter here
/// rather than an exact topic.
pub(crate) const WILD: u32 = 1 << 31;

pub(crate) use crate::proto::mqtt::topic::is_filter;

/// One live filter and who subscribed to it.
struct Filter {
    name: Box<str>,
    subscribers: HashSet<usize>,
}

/// The worker's wildcard filters, refcounted by their subscribers.
#[derive(Default)]
pub(crate) struct Wildcards {
    ids: HashMap<Box<str>, u32>,
    /// Indexed by id; `None` for a free id (listed in `free`).
    slots: Vec<Option<Filter>>,
    free: Vec<u32>,
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

    /// Add subscriber `key` to `filter` (interned if new); its id. Err:
    /// the worker holds [`MAX_FILTERS`] already.
    pub(crate) fn add(&mut self, filter: &str, key: usize) -> Result<u32, Close> {
        let id = match self.ids.get(filter) {
            Some(id) => *id,
            None => {
                if self.ids.len() >= MAX_FILTERS {
                    return Err(Close::TooManyTopics);
                }
                let f = Filter { name: filter.into(), subscribers: HashSet::new() };
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
        self.free.push(id);
        if self.ids.is_empty() {
            (self.ids, self.slots, self.free) = Default::default();
        }
    }

    /// Append the subscribers of every filter matching `topic` to `out`
    /// (a subscriber of several matching filters appears once per filter:
    /// the caller dedups).
    pub(crate) fn matching(&self, topic: &str, out: &mut Vec<usize>) {
        for f in self.slots.iter().flatten() {
            if crate::proto::mqtt::topic::matches(&f.name, topic) {
                out.extend(f.subscribers.iter().copied());
            }
        }
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
        let a = w.add("a/+", 1).unwrap();
        assert_eq!(w.add("a/+", 2), Ok(a));
        let all = w.add("#", 3).unwrap();
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
        for i in 0..MAX_FILTERS {
            w.add(&format!("x/{i}/#"), 9).unwrap();
        }
        assert_eq!(w.add("y/#", 9), Err(Close::TooManyTopics));
        assert!(w.add("x/0/#", 10).is_ok(), "an existing filter is not a new one");
    }
}
