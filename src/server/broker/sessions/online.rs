//! The registry of connected client ids: one entry per MQTT connection
//! that named itself, a million of them at a million devices.
//!
//! A `HashMap<IdKey, Online>` keeps its 24-byte entries in the hash
//! table itself, whose bucket count doubles: right after a doubling half
//! of it is empty, 25 bytes a bucket (52 B per connection at 1,000,000,
//! 55 B at 15,000). Here the table holds 4-byte places into a dense list
//! of entries (which grows by doubling too, but its slack is entries, not
//! buckets): 5 bytes a bucket and 24 an entry, ~36 B per connection at
//! both counts. An [`IdKey`] is already a keyed hash of the id, so its
//! first two words are the table's hash (no hashing again). Beside the
//! key each entry holds a 32-bit tag of the identity that owns the id
//! (`Keyer::tag`), in what would otherwise be the entry's padding: still
//! 24 bytes.

use crate::server::commands::{id_hash, IdKey};
use hashbrown::HashTable;

#[derive(Debug)]
pub(crate) struct OnlineIds<V> {
    /// Places in `entries`, hashed by the key's first half.
    index: HashTable<u32>,
    /// (key, owner tag, value): 24 bytes with an 8-byte value.
    entries: Vec<(IdKey, u32, V)>,
}

impl<V> Default for OnlineIds<V> {
    fn default() -> Self {
        OnlineIds { index: HashTable::new(), entries: Vec::new() }
    }
}

impl<V> OnlineIds<V> {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// `key`'s owner tag and value.
    pub(crate) fn get(&self, key: &IdKey) -> Option<(u32, &V)> {
        let entries = &self.entries;
        self.index.find(id_hash(key), |&i| entries[i as usize].0 == *key).map(|&i| (entries[i as usize].1, &entries[i as usize].2))
    }

    /// Add `key` owned by `tag`, or replace its tag and value (returning
    /// the old value).
    pub(crate) fn insert(&mut self, key: IdKey, tag: u32, value: V) -> Option<V> {
        let entries = &mut self.entries;
        if let Some(&i) = self.index.find(id_hash(&key), |&i| entries[i as usize].0 == key) {
            entries[i as usize].1 = tag;
            return Some(std::mem::replace(&mut entries[i as usize].2, value));
        }
        // The registry's own bound (--mqtt-max-ids) is far below this.
        let place = u32::try_from(entries.len()).expect("fewer than 2^32 client ids");
        entries.push((key, tag, value));
        self.index.insert_unique(id_hash(&key), place, |&i| id_hash(&entries[i as usize].0));
        None
    }

    pub(crate) fn remove(&mut self, key: &IdKey) -> Option<V> {
        let entries = &mut self.entries;
        let (place, _) = self.index.find_entry(id_hash(key), |&i| entries[i as usize].0 == *key).ok()?.remove();
        let place = place as usize;
        let (_, _, value) = entries.swap_remove(place);
        // The last entry moved into the freed place: point its slot there.
        if let Some((moved, _, _)) = entries.get(place) {
            let last = entries.len() as u32;
            let slot = self.index.find_mut(id_hash(moved), |&i| i == last).expect("every entry has its place in the index");
            *slot = place as u32;
        }
        // After a disconnect storm, give the memory back (not on every
        // removal: a quarter full before shrinking to half).
        if entries.capacity() > 1024 && entries.len() < entries.capacity() / 4 {
            entries.shrink_to(entries.len() * 2);
            self.index.shrink_to(entries.len() * 2, |&i| id_hash(&entries[i as usize].0));
        }
        Some(value)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&IdKey, &V)> {
        self.entries.iter().map(|(k, _, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> IdKey {
        // Spread like a hash: the table uses the first half.
        let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        [h as u32, (h >> 32) as u32, i as u32]
    }

    #[test]
    fn inserts_replacements_and_removals_in_any_order_agree_with_a_map() {
        let mut ids = OnlineIds::default();
        let mut model = std::collections::HashMap::new();
        // A fixed pseudo-random walk over 2,000 keys, 20,000 steps.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = key(x % 2000);
            match x % 3 {
                0 => assert_eq!(ids.remove(&k), model.remove(&k)),
                _ => assert_eq!(ids.insert(k, x as u32, x), model.insert(k, x)),
            }
            assert_eq!(ids.len(), model.len());
        }
        for (k, v) in &model {
            assert_eq!(ids.get(k), Some((*v as u32, v)));
        }
        assert_eq!(ids.iter().count(), model.len());
        // Two keys whose hashes (first two words) are equal are still two ids.
        let (a, b) = ([7, 0, 1], [7, 0, 2]);
        ids.insert(a, 0, 1);
        ids.insert(b, 0, 2);
        assert_eq!((ids.get(&a), ids.get(&b)), (Some((0, &1)), Some((0, &2))));
        assert_eq!(ids.remove(&a), Some(1));
        assert_eq!(ids.get(&b), Some((0, &2)));
        // The owner's tag sits in the entry's padding.
        assert_eq!(std::mem::size_of::<(IdKey, u32, u64)>(), 24);
    }

    /// The point of it: ~36 B per id where the map took ~52-55 (15,000
    /// ids: 32,768 buckets of 5 B and 16,384 entries of 24 B, against
    /// 32,768 buckets of 25 B).
    #[test]
    fn an_id_costs_about_36_bytes_and_a_storm_of_ends_gives_them_back() {
        const N: u64 = 15_000;
        let (mut ids, bytes) = crate::test_alloc::held(|| {
            let mut ids = OnlineIds::default();
            for i in 0..N {
                ids.insert(key(i), 7, i);
            }
            ids
        });
        let per_id = bytes as f64 / N as f64;
        assert!(per_id < 40.0, "{per_id} B per id");
        let (map, map_bytes) = crate::test_alloc::held(|| (0..N).map(|i| (key(i), i)).collect::<std::collections::HashMap<_, _>>());
        assert_eq!(map.len(), ids.len());
        assert!((map_bytes as f64) > 1.4 * bytes as f64, "the map: {map_bytes} B, here: {bytes} B");
        let ((), freed) = crate::test_alloc::held(|| {
            for i in 0..N - 100 {
                assert_eq!(ids.remove(&key(i)), Some(i));
            }
        });
        assert!(freed < -bytes / 2, "{freed} B after removing all but 100 of {bytes} B");
        for i in N - 100..N {
            assert_eq!(ids.get(&key(i)), Some((7, &i)));
        }
    }
}
