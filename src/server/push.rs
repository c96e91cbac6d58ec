//! Topics and pushes inside one server worker.
//!
//! Topic names are interned per worker; each topic keeps the set of its
//! subscribers' slab keys, and each connection keeps the ids of its topics
//! (boxed, so a connection without subscriptions pays one null pointer).
//! A push arrives once per worker as a command; its frame is encoded once
//! and written to every target from that one buffer. Only a socket that
//! does not take it all gets the rest spilled, bounded by
//! `--max-pending-bytes`; a reader that falls further behind is closed as
//! `slow_consumer`.

use crate::proto::push::{self, Stream};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// Most topics one connection may subscribe to; more is a protocol error
/// (the subscription list is per-connection memory).
pub const MAX_SUBSCRIPTIONS: usize = 64;
pub use crate::stats::exposition::LATENCY_BUCKETS_MS;

/// Subscriptions of one connection (topic ids).
pub type Subs = Option<Box<Vec<u32>>>;

#[derive(Default)]
pub struct Topics {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    subscribers: Vec<HashSet<usize>>,
    /// Record topics gaining their first / losing their last subscriber
    /// (a cluster node's supervisor subscribes to exactly those).
    pub track: bool,
    changes: Vec<(String, bool)>,
}

impl Topics {
    pub fn new(track: bool) -> Topics {
        Topics { track, ..Default::default() }
    }

    /// Subscribe connection `key` to `topic`.
    pub fn subscribe(&mut self, subs: &mut Subs, key: usize, topic: &[u8]) -> Result<(), &'static str> {
        push::check_topic(topic).map_err(|_| "bad_topic")?;
        let name = std::str::from_utf8(topic).map_err(|_| "bad_topic")?;
        let id = match self.ids.get(name) {
            Some(id) => *id,
            None => {
                let id = self.names.len() as u32;
                self.ids.insert(name.into(), id);
                self.names.push(name.into());
                self.subscribers.push(HashSet::new());
                id
            }
        };
        let list = subs.get_or_insert_with(Default::default);
        if list.contains(&id) {
            return Ok(());
        }
        if list.len() >= MAX_SUBSCRIPTIONS {
            return Err("too_many_subscriptions");
        }
        list.push(id);
        let set = &mut self.subscribers[id as usize];
        set.insert(key);
        if self.track && set.len() == 1 {
            self.changes.push((name.to_string(), true));
        }
        Ok(())
    }

    pub fn unsubscribe(&mut self, subs: &mut Subs, key: usize, topic: &[u8]) {
        let Some(id) = std::str::from_utf8(topic).ok().and_then(|t| self.ids.get(t)).copied() else { return };
        if let Some(list) = subs.as_mut() {
            list.retain(|t| *t != id);
            if list.is_empty() {
                *subs = None;
            }
        }
        self.remove(id, key);
    }

    fn remove(&mut self, id: u32, key: usize) {
        let set = &mut self.subscribers[id as usize];
        if set.remove(&key) && set.is_empty() && self.track {
            self.changes.push((self.names[id as usize].to_string(), false));
        }
    }

    /// A connection closed: drop it from every topic it had.
    pub fn forget(&mut self, subs: &Subs, key: usize) {
        for id in subs.iter().flat_map(|l| l.iter()) {
            self.remove(*id, key);
        }
    }

    /// First/last-subscriber changes since the last call (when tracked).
    pub fn take_changes(&mut self) -> Vec<(String, bool)> {
        std::mem::take(&mut self.changes)
    }

    pub fn subscribers(&self, topic: &str) -> Vec<usize> {
        self.ids.get(topic).map(|id| self.subscribers[*id as usize].iter().copied().collect()).unwrap_or_default()
    }

    pub fn has(&self, subs: &Subs, topic: &str) -> bool {
        self.ids.get(topic).is_some_and(|id| subs.as_ref().is_some_and(|l| l.contains(id)))
    }

    pub fn names_of(&self, subs: &Subs) -> Vec<String> {
        subs.iter().flat_map(|l| l.iter()).map(|id| self.names[*id as usize].to_string()).collect()
    }

    /// (topics with at least one subscriber, subscriptions in all).
    pub fn counts(&self) -> (u64, u64) {
        let live = self.subscribers.iter().filter(|s| !s.is_empty()).count() as u64;
        (live, self.subscribers.iter().map(|s| s.len() as u64).sum())
    }
}

/// One publish as the supervisor hands it to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushCommand {
    /// Matches the worker's acknowledgement to the admin request.
    pub publish_id: u64,
    pub stream: Stream,
    #[serde(default)]
    pub topic: String,
    pub seq: u64,
    pub publish_us: u64,
    /// Unicast: the connection id.
    #[serde(default)]
    pub target: Option<u64>,
    /// The payload, base64.
    pub data: String,
}

/// A connection id: stable for the connection's life and unique within
/// the server (worker index, slab key, generation).
pub fn conn_id(worker: usize, key: usize, gen: u32) -> u64 {
    ((worker as u64 & 0xFFFF) << 48) | ((key as u64 & 0xFF_FFFF) << 24) | (gen as u64 & 0xFF_FFFF)
}

/// (worker, slab key, generation bits) of a connection id.
pub fn split_id(id: u64) -> (usize, usize, u32) {
    ((id >> 48) as usize, ((id >> 24) & 0xFF_FFFF) as usize, (id & 0xFF_FFFF) as u32)
}

/// Index of the latency bucket `ms` falls in (LATENCY_BUCKETS_MS.len() is +Inf).
pub fn bucket(ms: f64) -> usize {
    LATENCY_BUCKETS_MS.iter().position(|b| ms <= *b).unwrap_or(LATENCY_BUCKETS_MS.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_tracked_both_ways() {
        let mut t = Topics::default();
        let (mut a, mut b): (Subs, Subs) = (None, None);
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
        assert_eq!(t.take_changes(), vec![("news".to_string(), true), ("news".to_string(), false)]);
        assert_eq!(t.names_of(&b), vec!["sport".to_string()]);
        assert_eq!(t.subscribe(&mut a, 1, b"bad topic"), Err("bad_topic"));
    }

    #[test]
    fn ids_round_trip() {
        let id = conn_id(55, 17_000, 0x1234567);
        assert_eq!(split_id(id), (55, 17_000, 0x234567));
    }
}
