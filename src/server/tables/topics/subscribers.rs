//! Who subscribed to one topic, sized for the common case.
//!
//! A million devices each subscribed to a topic of their own make a
//! million topics with ONE subscriber each, while a broadcast topic may
//! have every connection of the worker. So a topic keeps its one
//! subscriber inline in its slot ([`Subscribers::One`], nothing
//! allocated; a `HashSet` took 16 bytes of keys and a heap table even for
//! one), and only a topic with two or more has a [`Many`] set, kept by the
//! registry beside the slots. The set hashes with a fixed multiplier
//! instead of a keyed hasher per set: its keys are the worker's own slab
//! keys, never chosen by a peer, so there is nothing to attack, and
//! Fibonacci hashing (rustc's FxHash for one word) spreads sequential keys
//! over both the bucket bits and the tag bits hashbrown compares. Insert
//! and remove stay O(1) and iteration is a hashbrown table's, as before.

/// The subscribers of a live topic, as its slot keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Subscribers {
    /// Exactly one: its slab key.
    One(u32),
    /// Two or more: the registry's [`Many`] set under the topic's id.
    Many,
}

/// [`Subscribers`] as a slot keeps them: 4 bytes, never zero (the one
/// subscriber's key + 1, or `u32::MAX` for a set), so an empty slot
/// (`Option<Slot>`'s `None`) costs no tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Who(std::num::NonZeroU32);

/// What `Who` holds for [`Subscribers::Many`].
const MANY: u32 = u32::MAX;

impl From<Subscribers> for Who {
    fn from(s: Subscribers) -> Who {
        let v = match s {
            Subscribers::One(key) => key.checked_add(1).filter(|v| *v != MANY).expect("a slab key stays below the worker's connection cap"),
            Subscribers::Many => MANY,
        };
        Who(std::num::NonZeroU32::new(v).expect("key + 1 and MANY are not zero"))
    }
}

impl Who {
    pub(super) fn get(self) -> Subscribers {
        match self.0.get() {
            MANY => Subscribers::Many,
            v => Subscribers::One(v - 1),
        }
    }
}

/// Slab keys of a topic with two or more subscribers (4 bytes a bucket
/// and 1 of control; no hasher state).
#[derive(Default)]
pub(super) struct Many(hashbrown::HashTable<u32>);

/// Fibonacci hashing of a slab key: the multiplier is 2^64 over the
/// golden ratio, odd, so distinct low bits stay distinct.
fn spread(key: u32) -> u64 {
    u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Many {
    /// A set of the two subscribers a topic has when it stops being `One`.
    pub(super) fn pair(a: u32, b: u32) -> Many {
        let mut m = Many::default();
        m.insert(a);
        m.insert(b);
        m
    }

    /// Add `key`; false if it was there.
    pub(super) fn insert(&mut self, key: u32) -> bool {
        match self.0.entry(spread(key), |k| *k == key, |k| spread(*k)) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(key);
                true
            }
        }
    }

    /// Remove `key`; false if it was not there.
    pub(super) fn remove(&mut self, key: u32) -> bool {
        self.0.find_entry(spread(key), |k| *k == key).map(|e| e.remove()).is_ok()
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_holds_one_key_or_many_in_four_bytes() {
        assert_eq!(std::mem::size_of::<Option<Who>>(), 4);
        for s in [Subscribers::One(0), Subscribers::One(19_999), Subscribers::One(u32::MAX - 2), Subscribers::Many] {
            assert_eq!(Who::from(s).get(), s);
        }
    }

    #[test]
    fn a_set_inserts_removes_and_iterates_each_key_once() {
        let mut m = Many::pair(7, 9);
        assert!(!m.insert(7), "already there");
        for k in 0..10_000 {
            m.insert(k);
        }
        assert_eq!(m.len(), 10_000);
        for k in (0..10_000).step_by(2) {
            assert!(m.remove(k));
        }
        assert!(!m.remove(0), "gone already");
        let mut left: Vec<u32> = m.iter().collect();
        left.sort_unstable();
        assert_eq!(left, (1..10_000).step_by(2).collect::<Vec<u32>>());
    }

    #[test]
    fn sequential_keys_spread_over_buckets_and_tags() {
        let low: std::collections::HashSet<u64> = (0..1024u32).map(|k| spread(k) & 1023).collect();
        assert_eq!(low.len(), 1024, "1024 sequential keys, 1024 distinct buckets of 1024");
        let tags: std::collections::HashSet<u64> = (0..1024u32).map(|k| spread(k) >> 57).collect();
        assert!(tags.len() > 100, "hashbrown's 7-bit tags vary: {}", tags.len());
    }
}
