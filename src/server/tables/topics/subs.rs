//! A connection's subscriptions in one word of its record.
//!
//! Most connections subscribe to one topic (a device to `dev/{id}`), so
//! [`Subs`] keeps one subscription inline in the 8 bytes the connection
//! record has for it, and only two or more in a `ThinVec` behind the same
//! word (one allocation holding length, capacity and ids). A `ThinVec`
//! alone took a 32-byte malloc chunk for the one subscription: a million
//! devices, 32 MB. An enum of the two would be 16 bytes and grow the
//! 40-byte record by 8; the word tells them apart by
//! its low bit instead (a `ThinVec`'s pointer is to an 8-aligned header,
//! so its low bit is 0; an inline id is stored as `id << 1 | 1`).

use std::mem::ManuallyDrop;
use thin_vec::ThinVec;

/// Subscriptions of one connection: topic ids, with
/// [`WILD`](crate::server::tables::wildcards::WILD) set for an MQTT
/// wildcard filter's. One word; nothing allocated for none or one.
pub(crate) struct Subs(Word);

/// The word: which field is live is told by the low bit of `one`.
union Word {
    /// `id << 1 | 1`: exactly one subscription.
    one: usize,
    /// None, or two or more (never exactly one): a `ThinVec`, whose
    /// pointer's low bit is 0.
    many: ManuallyDrop<ThinVec<u32>>,
}

// The word is a ThinVec's one pointer, and a u32 shifted by one fits it.
const _: () = assert!(std::mem::size_of::<ThinVec<u32>>() == std::mem::size_of::<usize>());
const _: () = assert!(std::mem::size_of::<usize>() >= 8);
const _: () = assert!(std::mem::align_of::<thin_vec::ThinVec<u32>>() >= 2);

impl Default for Subs {
    fn default() -> Subs {
        Subs::new()
    }
}

impl Subs {
    /// No subscription (nothing allocated: a `ThinVec`'s shared empty header).
    pub(crate) fn new() -> Subs {
        Subs(Word { many: ManuallyDrop::new(ThinVec::new()) })
    }

    fn inline(id: u32) -> Subs {
        Subs(Word { one: (id as usize) << 1 | 1 })
    }

    /// The inline subscription, if that is what the word holds.
    fn one(&self) -> Option<u32> {
        // SAFETY: both fields are 8 initialised bytes (asserted above);
        // reading the ThinVec's pointer as an integer only looks at its
        // low bit, which an 8-aligned pointer has clear.
        let word = unsafe { self.0.one };
        (word & 1 == 1).then_some((word >> 1) as u32)
    }

    /// The ids when there are none or several (None: one, inline).
    fn many(&self) -> Option<&ThinVec<u32>> {
        if self.one().is_some() {
            return None;
        }
        // SAFETY: the low bit is clear, so `many` is the field last
        // written (every constructor and `push`/`remove` keep that).
        Some(unsafe { &self.0.many })
    }

    fn many_mut(&mut self) -> Option<&mut ThinVec<u32>> {
        if self.one().is_some() {
            return None;
        }
        // SAFETY: as in `many`: the low bit says `many` is live.
        Some(unsafe { &mut self.0.many })
    }

    pub(crate) fn len(&self) -> usize {
        self.many().map_or(1, |v| v.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn contains(&self, id: &u32) -> bool {
        match self.many() {
            Some(v) => v.contains(id),
            None => self.one() == Some(*id),
        }
    }

    /// The ids, in the order they were added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.one().into_iter().chain(self.many().into_iter().flatten().copied())
    }

    /// Add `id` (the caller checked it is not there): the first goes
    /// inline, the second moves both into a `ThinVec` with room for
    /// exactly two, more grow as a `Vec` does.
    pub(crate) fn push(&mut self, id: u32) {
        if let Some(first) = self.one() {
            let mut v = ThinVec::with_capacity(2);
            v.push(first);
            v.push(id);
            *self = Subs(Word { many: ManuallyDrop::new(v) });
        } else if self.is_empty() {
            *self = Subs::inline(id);
        } else if let Some(v) = self.many_mut() {
            v.push(id);
        }
    }

    /// Remove `id`; whether it was there. One left goes inline again and
    /// none gives the allocation back.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        if let Some(only) = self.one() {
            if only == id {
                *self = Subs::new();
            }
            return only == id;
        }
        let Some(v) = self.many_mut() else { return false };
        let before = v.len();
        v.retain(|t| *t != id);
        let had = v.len() != before;
        if v.len() == 1 {
            let last = v[0];
            *self = Subs::inline(last);
        }
        had
    }
}

impl Drop for Subs {
    fn drop(&mut self) {
        if self.one().is_none() {
            // SAFETY: `many` is live (low bit clear) and dropped once,
            // here; nothing reads the word after drop.
            unsafe { ManuallyDrop::drop(&mut self.0.many) }
        }
    }
}

impl std::fmt::Debug for Subs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Subs;

    /// One word in the record; none and one subscription allocate
    /// nothing, two one 32-byte chunk, and going back down gives it back.
    #[test]
    fn one_subscription_is_inline() {
        assert_eq!(std::mem::size_of::<Subs>(), 8);
        let (mut s, held) = crate::test_alloc::held(|| {
            let mut s = Subs::new();
            s.push(7);
            s
        });
        assert_eq!((held, s.len(), s.iter().collect::<Vec<_>>()), (0, 1, vec![7]));
        let ((), held) = crate::test_alloc::held(|| s.push(9));
        assert_eq!((held, s.iter().collect::<Vec<_>>()), (32, vec![7, 9]));
        let ((), held) = crate::test_alloc::held(|| assert!(s.remove(7)));
        assert_eq!((held, s.iter().collect::<Vec<_>>()), (-32, vec![9]));
        assert!(!s.remove(7), "not there");
        assert!(s.remove(9) && s.is_empty() && s.iter().next().is_none());
    }

    /// Every id a connection can hold survives the shift, the WILD bit too.
    #[test]
    fn ids_keep_every_bit_and_order() {
        let ids = [0, 1, u32::MAX, 1 << 31, (1 << 31) | 5, 12345];
        let mut s = Subs::new();
        for id in ids {
            s.push(id);
            assert!(s.contains(&id));
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), ids);
        assert!(s.remove(1) && !s.contains(&1) && s.len() == ids.len() - 1);
        let mut one = Subs::new();
        one.push(u32::MAX);
        assert_eq!((one.iter().collect::<Vec<_>>(), one.contains(&u32::MAX), one.contains(&0)), (vec![u32::MAX], true, false));
        let mut zero = Subs::new();
        zero.push(0);
        assert!(zero.contains(&0) && !zero.is_empty(), "id 0 inline is not nothing");
    }
}
