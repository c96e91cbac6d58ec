//! Shares of a worker-wide table charged to the identities that fill it:
//! the distinct MQTT wildcard filters and shared subscription names a
//! worker holds are bounded (every publish is matched against them), and
//! without a share per identity one client could take the whole table and
//! leave every other client's new filter refused. An entry is charged to
//! the identity whose subscription created it (the token's `sub` with
//! `--auth`, else the peer's address) for as long as it lives; an
//! identity at its share may still join entries others created.

use std::collections::HashMap;
use std::rc::Rc;

/// The share of a table one identity may create: a quarter, so that at
/// least four identities are needed to fill it.
pub(crate) const SHARE_DIVISOR: usize = 4;

/// Entries charged per identity, each at most `quota`.
#[derive(Debug)]
pub(crate) struct Charges {
    by_identity: HashMap<Rc<str>, usize>,
    quota: usize,
}

impl Charges {
    /// Charges of a table of `capacity` entries: each identity a quarter.
    pub(crate) fn of(capacity: usize) -> Charges {
        Charges { by_identity: HashMap::new(), quota: (capacity / SHARE_DIVISOR).max(1) }
    }

    /// `who` creates one more entry: the handle it is charged under, or
    /// None when it holds its share already.
    pub(crate) fn charge(&mut self, who: &str) -> Option<Rc<str>> {
        if let Some((id, n)) = self.by_identity.get_key_value(who).map(|(k, n)| (k.clone(), *n)) {
            if n >= self.quota {
                return None;
            }
            self.by_identity.insert(id.clone(), n + 1);
            return Some(id);
        }
        let id: Rc<str> = who.into();
        self.by_identity.insert(id.clone(), 1);
        Some(id)
    }

    /// An entry charged to `who` is gone.
    pub(crate) fn release(&mut self, who: &Rc<str>) {
        if let Some(n) = self.by_identity.get_mut(who) {
            *n -= 1;
            if *n == 0 {
                self.by_identity.remove(who);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identity_holds_at_most_its_share() {
        let mut c = Charges::of(8);
        let held: Vec<Rc<str>> = (0..2).map(|_| c.charge("mallory").unwrap()).collect();
        assert!(c.charge("mallory").is_none(), "a quarter of 8");
        assert!(c.charge("alice").is_some(), "another identity has its own share");
        c.release(&held[0]);
        assert!(c.charge("mallory").is_some(), "room again once one is gone");
        c.release(&held[1]);
        assert_eq!(c.by_identity.get("mallory"), Some(&1));
    }
}
