//! A topic's name as its slot keeps it: 20 bytes, with up to [`INLINE`]
//! bytes inside (a device's `dev/123456`, `devices/0123456789`), longer
//! names in a box of their own whose pointer and length sit in the same
//! 20 bytes.
//!
//! With the slot's 4-byte subscriber beside it a topic costs 24 bytes
//! (an `enum` of inline bytes and a `Box<str>` is 24 bytes on its own, the
//! box's 8-byte alignment forcing the slot to 32): a million devices on a
//! topic each, 8 MB less. Names come from peers, so a long one is
//! bounded by the topic cap (`push::MAX_TOPIC`) before it gets here.

/// Most bytes kept inline: 20 bytes less the length byte.
pub(super) const INLINE: usize = 19;
/// The first byte of a boxed name (an inline length is at most INLINE).
const BOXED: u8 = u8::MAX;
/// Where a boxed name's length (u32) and pointer (usize) sit.
const LEN_AT: usize = 4;
const PTR_AT: usize = 8;

// A pointer's bytes fit after the length.
const _: () = assert!(PTR_AT + std::mem::size_of::<usize>() <= 20);

/// Byte 0: the inline length, or [`BOXED`]. Inline: the bytes from 1.
/// Boxed: the length at [`LEN_AT`], the box's address at [`PTR_AT`]
/// (native-endian; the box is owned: freed on drop).
pub(super) struct Name([u8; 20]);

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        let mut raw = [0u8; 20];
        if s.len() <= INLINE {
            raw[0] = s.len() as u8;
            raw[1..=s.len()].copy_from_slice(s.as_bytes());
        } else {
            let len = u32::try_from(s.len()).expect("topic names are bounded by push::MAX_TOPIC");
            let boxed: Box<[u8]> = s.as_bytes().into();
            let addr = Box::into_raw(boxed).cast::<u8>().expose_provenance();
            raw[0] = BOXED;
            raw[LEN_AT..LEN_AT + 4].copy_from_slice(&len.to_ne_bytes());
            raw[PTR_AT..PTR_AT + std::mem::size_of::<usize>()].copy_from_slice(&addr.to_ne_bytes());
        }
        Name(raw)
    }
}

impl Name {
    /// A boxed name's pointer and length.
    fn boxed(&self) -> Option<(*mut u8, usize)> {
        if self.0[0] != BOXED {
            return None;
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&self.0[LEN_AT..LEN_AT + 4]);
        let mut addr = [0u8; std::mem::size_of::<usize>()];
        addr.copy_from_slice(&self.0[PTR_AT..PTR_AT + std::mem::size_of::<usize>()]);
        Some((std::ptr::with_exposed_provenance_mut(usize::from_ne_bytes(addr)), u32::from_ne_bytes(len) as usize))
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        match self.boxed() {
            // SAFETY: the pointer and length are those of the `Box<[u8]>`
            // made from a whole `&str` in `From<&str>`, owned by this
            // name until its drop and never changed: valid UTF-8, alive.
            Some((ptr, len)) => unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr, len)) },
            // SAFETY: the first byte is the length of the bytes copied
            // from a whole `&str` (`From<&str>`), never changed.
            None => unsafe { std::str::from_utf8_unchecked(&self.0[1..=self.0[0] as usize]) },
        }
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if let Some((ptr, len)) = self.boxed() {
            // SAFETY: `Box::into_raw` of a `Box<[u8]>` of this length
            // (`From<&str>`), given back once: the name owns it and is
            // dropped once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stay_inline_long_ones_are_boxed_and_both_read_back_whole() {
        assert_eq!(std::mem::size_of::<Name>(), 20);
        for s in ["", "a", "dev/123456", "é/ü/日本/x", &"x".repeat(INLINE), &"y".repeat(INLINE + 1), &"z".repeat(255)] {
            let (name, held) = crate::test_alloc::held(|| Name::from(s));
            assert_eq!(&*name, s);
            assert_eq!(name.boxed().is_none(), s.len() <= INLINE, "{s}");
            assert_eq!(held > 0, s.len() > INLINE, "{s}: {held} B allocated");
            let ((), freed) = crate::test_alloc::held(|| drop(name));
            assert_eq!(freed, -held, "{s}: dropping gives back what was taken");
        }
    }
}
