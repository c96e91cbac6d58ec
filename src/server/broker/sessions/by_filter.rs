//! The kept sessions by the filters they subscribed, so that a topic
//! publish finds the sessions to queue it for without a pass over every
//! kept session: its exact topic is one lookup, then one walk of a trie
//! of the wildcard filters (`+`, `#`; `topic_index.rs`) that visits only
//! those that can match it, however many sessions and filters there are.
//! A fleet of devices each subscribed to its own topic costs one lookup
//! per publish, not one match per device.
//!
//! The broker shards route a message here only when a kept session's
//! filter matches it: each filter's first holder and last are noted
//! ([`ByFilter::take_interest`]) for the supervisor to tell the shards.

use super::IdKey;
use crate::proto::mqtt::topic::is_filter;
use crate::server::commands::KeptSub;
use crate::server::topic_index::FilterTrie;
use std::collections::HashMap;

/// Sessions (and the QoS each was granted) under one filter.
type Holders = HashMap<IdKey, u8>;

#[derive(Debug, Default)]
pub(super) struct ByFilter {
    /// Filters without a wildcard: the one topic each matches.
    exact: HashMap<Box<str>, Holders>,
    /// Filters with one, by level.
    wild: FilterTrie<Holders>,
    /// Filters gaining their first holder (true) or losing their last,
    /// since the last take: the shards' interest in them.
    interest: Vec<(bool, Box<str>)>,
    /// What a cluster node must follow for the kept sessions (a topic at
    /// its first holder and its last; any topic while a wildcard filter
    /// is held: `cluster::ANY_TOPIC`), while tracked.
    pub(super) following: crate::cluster::Following,
}

impl ByFilter {
    /// Index session `key`'s subscriptions.
    pub(super) fn add(&mut self, key: IdKey, subs: &[KeptSub]) {
        for KeptSub { filter, qos, .. } in subs {
            let wild = is_filter(filter);
            let had_wild = !self.wild.is_empty();
            let first = match wild {
                true => self.wild.get_mut(filter).is_none(),
                false => !self.exact.contains_key(filter.as_str()),
            };
            let holders = match wild {
                true => self.wild.entry(filter, HashMap::new),
                false => self.exact.entry(filter.as_str().into()).or_default(),
            };
            let q = holders.entry(key).or_insert(*qos);
            *q = (*q).max(*qos);
            if first {
                self.interest.push((true, filter.as_str().into()));
            }
            match wild {
                true if !had_wild => self.following.note(crate::cluster::ANY_TOPIC, true),
                false if first => self.following.note(filter, true),
                _ => {}
            }
        }
    }

    /// Forget session `key`'s subscriptions (a filter nobody holds goes).
    pub(super) fn remove(&mut self, key: &IdKey, subs: &[KeptSub]) {
        for KeptSub { filter, .. } in subs {
            let wild = is_filter(filter);
            let holders = match wild {
                true => self.wild.get_mut(filter),
                false => self.exact.get_mut(filter.as_str()),
            };
            let Some(holders) = holders else { continue };
            holders.remove(key);
            if !holders.is_empty() {
                continue;
            }
            match wild {
                true => _ = self.wild.remove(filter),
                false => _ = self.exact.remove(filter.as_str()),
            }
            self.interest.push((false, filter.as_str().into()));
            match wild {
                true if self.wild.is_empty() => self.following.note(crate::cluster::ANY_TOPIC, false),
                false => self.following.note(filter, false),
                _ => {}
            }
        }
    }

    /// The sessions a publish to `topic` reaches, each once, with the
    /// highest QoS any of its matching filters was granted.
    pub(super) fn matching(&self, topic: &str) -> HashMap<IdKey, u8> {
        let mut out: HashMap<IdKey, u8> = HashMap::new();
        let mut take = |holders: &Holders| {
            for (key, qos) in holders {
                let q = out.entry(*key).or_insert(*qos);
                *q = (*q).max(*qos);
            }
        };
        if let Some(h) = self.exact.get(topic) {
            take(h);
        }
        self.wild.matching(topic, take);
        out
    }

    /// The filters gained and lost since the last call (in order).
    pub(super) fn take_interest(&mut self) -> Vec<(bool, Box<str>)> {
        std::mem::take(&mut self.interest)
    }

    /// Distinct filters indexed (exact, wildcard).
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        (self.exact.len(), self.wild.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(list: &[(&str, u8)]) -> Vec<KeptSub> {
        list.iter().map(|(f, q)| KeptSub::new(f, *q)).collect()
    }

    #[test]
    fn exact_and_wildcard_filters_reach_each_session_once_at_its_highest_qos() {
        let mut by = ByFilter::default();
        let (a, b, c) = ([1, 1, 1], [2, 2, 2], [3, 3, 3]);
        by.add(a, &subs(&[("dev/1", 1), ("dev/+", 2)]));
        by.add(b, &subs(&[("dev/#", 1)]));
        by.add(c, &subs(&[("other", 2), ("+/x", 1)]));
        let got = by.matching("dev/1");
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[&a], got[&b]), (2, 1));
        assert_eq!(by.matching("other").into_iter().collect::<Vec<_>>(), vec![(c, 2)]);
        assert!(by.matching("nothing/here").is_empty());
        // `$` topics stay out of top-level wildcards, as in the worker.
        by.add(c, &subs(&[("#", 1)]));
        assert!(by.matching("$SYS/x").is_empty());
        assert_eq!(by.len(), (2, 4));
    }

    #[test]
    fn a_removed_session_is_gone_and_its_last_filters_with_it() {
        let mut by = ByFilter::default();
        let (a, b) = ([1, 0, 0], [2, 0, 0]);
        let sa = subs(&[("t", 1), ("w/+", 1)]);
        let sb = subs(&[("t", 2)]);
        by.add(a, &sa);
        by.add(b, &sb);
        by.remove(&a, &sa);
        assert_eq!(by.matching("t").into_iter().collect::<Vec<_>>(), vec![(b, 2)]);
        assert!(by.matching("w/1").is_empty());
        assert_eq!(by.len(), (1, 0), "w/+ had no other holder");
        by.remove(&b, &sb);
        assert_eq!(by.len(), (0, 0));
    }

    /// The shards hear of a filter at its first holder and its last only,
    /// in order; a second holder or one of several leaving says nothing.
    #[test]
    fn interest_is_told_at_a_filters_first_holder_and_its_last() {
        let mut by = ByFilter::default();
        let (a, b) = ([1, 1, 1], [2, 2, 2]);
        let sa = subs(&[("t", 1), ("w/+", 1)]);
        by.add(a, &sa);
        by.add(b, &subs(&[("t", 2)]));
        let told = |by: &mut ByFilter| by.take_interest().into_iter().map(|(add, f)| (add, f.to_string())).collect::<Vec<_>>();
        assert_eq!(told(&mut by), [(true, "t".to_string()), (true, "w/+".to_string())]);
        assert!(told(&mut by).is_empty(), "taken once");
        by.remove(&a, &sa);
        assert_eq!(told(&mut by), [(false, "w/+".to_string())], "b still holds t");
        by.remove(&b, &subs(&[("t", 2)]));
        assert_eq!(told(&mut by), [(false, "t".to_string())]);
    }

    /// A `$` topic reaches only the filters that name its first level:
    /// not `#`, not `+/x`.
    #[test]
    fn dollar_topics_reach_only_filters_that_name_them() {
        let mut by = ByFilter::default();
        let (a, b, c, d) = ([1, 0, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0]);
        by.add(a, &subs(&[("#", 1)]));
        by.add(b, &subs(&[("+/x", 1)]));
        by.add(c, &subs(&[("$SYS/#", 1)]));
        by.add(d, &subs(&[("$SYS/x", 2)]));
        let mut got: Vec<(IdKey, u8)> = by.matching("$SYS/x").into_iter().collect();
        got.sort();
        assert_eq!(got, vec![(c, 1), (d, 2)]);
        let mut got: Vec<IdKey> = by.matching("q/x").into_keys().collect();
        got.sort();
        assert_eq!(got, vec![a, b]);
    }

    /// Removing subscriptions a session does not hold changes nobody's,
    /// and tells the shards nothing.
    #[test]
    fn removing_what_a_session_does_not_hold_changes_nothing() {
        let mut by = ByFilter::default();
        let (a, b) = ([1, 0, 0], [2, 0, 0]);
        by.add(a, &subs(&[("t", 1), ("w/#", 1)]));
        by.take_interest();
        by.remove(&b, &subs(&[("t", 1), ("w/#", 1), ("never/+", 1), ("never", 1)]));
        assert!(by.take_interest().is_empty());
        assert_eq!(by.len(), (1, 1));
        assert_eq!(by.matching("t").into_iter().collect::<Vec<_>>(), vec![(a, 1)]);
        assert_eq!(by.matching("w/1/2").into_iter().collect::<Vec<_>>(), vec![(a, 1)]);
    }

    /// Tracked, the filters held come out as what to follow: a topic at
    /// its first holder and its last, any topic while a wildcard is held.
    #[test]
    fn what_the_kept_sessions_hold_comes_out_as_what_to_follow() {
        let mut by = ByFilter { following: crate::cluster::Following::new(true), ..ByFilter::default() };
        let (a, b) = ([1, 1, 1], [2, 2, 2]);
        by.add(a, &subs(&[("dev/1", 1), ("dev/+", 1)]));
        by.add(b, &subs(&[("dev/1", 1), ("x/#", 1)]));
        assert_eq!(by.following.take(), [(">".to_string(), true), ("dev/1".to_string(), true)]);
        by.remove(&a, &subs(&[("dev/1", 1), ("dev/+", 1)]));
        assert_eq!(by.following.take(), [], "b still holds dev/1 and a wildcard");
        by.remove(&b, &subs(&[("dev/1", 1), ("x/#", 1)]));
        assert_eq!(by.following.take(), [(">".to_string(), false), ("dev/1".to_string(), false)]);
        by.add(a, &subs(&[("t", 1)]));
        by.remove(&a, &subs(&[("t", 1)]));
        assert_eq!(by.following.take(), [], "came and went");
    }
}
