//! A topic's name as its slot keeps it: up to [`INLINE`] bytes in the
//! slot itself (a device's `dev/123456`, `room-42`), longer ones boxed.
//!
//! A boxed name of 10 bytes is a 32-byte malloc chunk besides the box's
//! 16 bytes in the slot; inline it costs the slot 8 bytes more (a 24-byte
//! name where the box took 16) and nothing else: 24 bytes less per topic
//! for short names, 8 more for long ones.

/// Most bytes kept inline (with the length and the variant, 24 bytes: a
/// box and its tag take as much).
pub(super) const INLINE: usize = 22;

pub(super) enum Name {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        match s.len() {
            n if n <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..n].copy_from_slice(s.as_bytes());
                Name::Inline { len: n as u8, bytes }
            }
            _ => Name::Boxed(s.into()),
        }
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            // SAFETY: the first `len` bytes were copied from a whole
            // `&str` (`From<&str>`) and are never changed: valid UTF-8.
            Name::Inline { len, bytes } => unsafe { std::str::from_utf8_unchecked(&bytes[..*len as usize]) },
            Name::Boxed(b) => b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stay_inline_long_ones_are_boxed_and_both_read_back_whole() {
        assert_eq!(std::mem::size_of::<Name>(), 24);
        assert_eq!(std::mem::size_of::<Option<Name>>(), 24, "the variant leaves a niche");
        for s in ["a", "dev/123456", "é/ü/日本/x", &"x".repeat(INLINE), &"y".repeat(INLINE + 1), &"z".repeat(255)] {
            let (name, held) = crate::test_alloc::held(|| Name::from(s));
            assert_eq!(&*name, s);
            assert_eq!(matches!(name, Name::Inline { .. }), s.len() <= INLINE, "{s}");
            assert_eq!(held > 0, s.len() > INLINE, "{s}: {held} B allocated");
        }
    }
}
