//! What a connection carries between events, both ways, behind one
//! pointer of its record: the start of a request cut by the network
//! (partial input) and the output its socket did not take (the backlog).
//!
//! Each was an `Option<Box<Vec<u8>>>` of its own, 16 bytes of an idle
//! connection's record that held nothing; one pointer for the two keeps
//! the record at 40 bytes (every protocol: a million connections, 8 MB
//! less). They are rare and short-lived, so sharing a box costs nothing
//! that matters: while either holds bytes it is one 64-byte chunk (two
//! `Vec`s) besides the bytes, freed when both are empty again. Either half
//! is handed to the shared I/O code (`net.rs`) as a [`Carried`] slot.

use crate::net::Carried;

/// A connection's partial input and backlog: nothing allocated while
/// both are empty (every idle connection).
#[derive(Default)]
pub(crate) struct Spills(Option<Box<Pair>>);

#[derive(Default)]
struct Pair {
    partial: Vec<u8>,
    backlog: Vec<u8>,
}

impl Pair {
    fn half(&mut self, out: bool) -> &mut Vec<u8> {
        if out {
            &mut self.backlog
        } else {
            &mut self.partial
        }
    }
}

/// One half of a [`Spills`], as the I/O code takes it.
pub(crate) struct Half<'a> {
    spills: &'a mut Spills,
    /// The backlog (else the partial input).
    out: bool,
}

impl Spills {
    /// The partial input, as a slot to read into.
    pub(crate) fn partial(&mut self) -> Half<'_> {
        Half { spills: self, out: false }
    }

    /// The backlog, as a slot to send through.
    pub(crate) fn backlog(&mut self) -> Half<'_> {
        Half { spills: self, out: true }
    }

    /// The partial input held, if any.
    pub(crate) fn held_partial(&self) -> Option<&Vec<u8>> {
        self.0.as_deref().map(|p| &p.partial).filter(|b| !b.is_empty())
    }

    /// The backlog held, if any.
    pub(crate) fn held_backlog(&self) -> Option<&Vec<u8>> {
        self.0.as_deref().map(|p| &p.backlog).filter(|b| !b.is_empty())
    }

    /// Held input read again (`buf`, taken from the partial input) was
    /// consumed as `r` says: what it left unused is held again; Err is
    /// the close it asked for.
    pub(crate) fn keep_unused(&mut self, buf: &[u8], r: Result<usize, crate::server::close::Close>) -> Option<crate::server::close::Close> {
        match r {
            Ok(used) if used < buf.len() => {
                self.partial().hold(buf[used..].to_vec());
                None
            }
            Ok(_) => None,
            Err(reason) => Some(reason),
        }
    }

    pub(crate) fn has_partial(&self) -> bool {
        self.held_partial().is_some()
    }

    pub(crate) fn has_backlog(&self) -> bool {
        self.held_backlog().is_some()
    }
}

impl Carried for Half<'_> {
    fn held(&self) -> Option<&Vec<u8>> {
        if self.out {
            self.spills.held_backlog()
        } else {
            self.spills.held_partial()
        }
    }

    fn held_mut(&mut self) -> Option<&mut Vec<u8>> {
        let out = self.out;
        self.spills.0.as_deref_mut().map(|p| p.half(out)).filter(|b| !b.is_empty())
    }

    fn hold(&mut self, bytes: Vec<u8>) {
        debug_assert!(!bytes.is_empty());
        *self.spills.0.get_or_insert_with(Default::default).half(self.out) = bytes;
    }

    fn take(&mut self) -> Option<Vec<u8>> {
        let pair = self.spills.0.as_deref_mut()?;
        let taken = std::mem::take(pair.half(self.out));
        if pair.partial.is_empty() && pair.backlog.is_empty() {
            self.spills.0 = None;
        }
        (!taken.is_empty()).then_some(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_share_one_box_freed_when_both_are_empty() {
        assert_eq!(std::mem::size_of::<Spills>(), 8);
        let mut s = Spills::default();
        assert!(!s.has_partial() && !s.has_backlog());
        s.partial().hold(b"GET /".to_vec());
        s.backlog().hold(b"HTTP/1.1 200".to_vec());
        assert_eq!(s.held_partial().map(Vec::as_slice), Some(&b"GET /"[..]));
        assert_eq!(s.backlog().held_len(), 12);
        s.backlog().consume(5);
        assert_eq!(s.held_backlog().map(Vec::as_slice), Some(&b"1.1 200"[..]));
        assert_eq!(s.partial().take(), Some(b"GET /".to_vec()));
        assert!(s.0.is_some(), "the backlog still holds bytes");
        assert_eq!(s.partial().take(), None);
        s.backlog().consume(7);
        assert!(s.0.is_none() && !s.has_backlog(), "both empty: the box is freed");
        let ((), held) = crate::test_alloc::held(|| {
            s.backlog().hold(vec![1; 10]);
            s.backlog().take();
        });
        assert_eq!(held, 0, "nothing kept once empty");
    }
}
