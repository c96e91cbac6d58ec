//! v5 Will Delay Intervals (§3.1.3.2.2), in the supervisor: the will of a
//! connection that ended (no DISCONNECT, or DISCONNECT 0x04) whose
//! session outlives it and whose will asked for a delay waits here, keyed
//! by its client id, until the earlier of its delay and its session's
//! expiry; a CONNECT of the same client id before then cancels it
//! ([MQTT-3.1.3-9]; also a takeover's: the new connection is already
//! there). It lives beside the registry of client ids because that is
//! where a reconnect of the id, on whichever worker, is first seen.
//!
//! Bounded: at most as many waiting wills as kept sessions
//! (`--mqtt-sessions`), and as many of one identity as it may keep
//! sessions (`--mqtt-sessions-per-identity`); past either the arriving
//! will is published at once, counted, and none waiting is touched. A
//! waiting will is its owner's (`--auth`): only the owner's CONNECT of
//! the id cancels it.
//! A server restart loses the waiting wills, as it loses kept sessions,
//! unless `--mqtt-sessions-file` keeps both (`saved.rs`).

use super::Who;
use crate::server::commands::DelayedWill;
use crate::server::commands::{ClientPublish, IdKey};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The wills waiting for their delay, by client id (its registry key),
/// and how many of each identity wait.
#[derive(Debug, Default)]
pub(crate) struct Wills {
    waiting: HashMap<IdKey, (Instant, ClientPublish, Who)>,
    by_identity: HashMap<Box<str>, usize>,
}

/// What became of a will handed to [`Wills::hold`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// It waits.
    Waiting,
    /// Publish it now: a bound is reached (`full`: the node's; `identity`:
    /// its identity's share), counted under that reason.
    Now(ClientPublish, &'static str),
}

impl Wills {
    /// Hold `w` of client `id` (of `who`) until `delay_s` (at most
    /// `expiry_s`, the session's) passed; past `max` waiting, or `quota`
    /// of its identity, it is to be published now.
    pub(crate) fn hold(&mut self, id: IdKey, who: Who, w: DelayedWill, expiry_s: u32, (max, quota): (usize, usize), now: Instant) -> Held {
        let due = now + Duration::from_secs(w.delay_s.min(expiry_s).into());
        match self.admit(id, due, w.will, who, (max, quota)) {
            Ok(()) => Held::Waiting,
            Err((will, reason)) => Held::Now(will, reason),
        }
    }

    /// Wait with `will` unless a bound is reached (Err gives it back,
    /// with the bound's name).
    fn admit(&mut self, id: IdKey, due: Instant, will: ClientPublish, who: Who, (max, quota): (usize, usize)) -> Result<(), (ClientPublish, &'static str)> {
        self.cancel(&id);
        if self.waiting.len() >= max {
            return Err((will, "full"));
        }
        if self.by_identity.get(&who.identity).copied().unwrap_or(0) >= quota {
            return Err((will, "identity"));
        }
        *self.by_identity.entry(who.identity.clone()).or_insert(0) += 1;
        self.waiting.insert(id, (due, will, who));
        Ok(())
    }

    /// Client `id`'s waiting will and when it is due.
    pub(crate) fn waiting(&self, id: &IdKey) -> Option<(&Instant, &ClientPublish)> {
        self.waiting.get(id).map(|(t, w, _)| (t, w))
    }

    /// The owner of client `id`'s waiting will, if one waits.
    pub(crate) fn owner(&self, id: &IdKey) -> Option<Option<&str>> {
        self.waiting.get(id).map(|(_, _, who)| who.owner.as_deref())
    }

    /// A will read back from `--mqtt-sessions-file`, due at `due`; false
    /// past the bounds.
    pub(crate) fn restore(&mut self, id: IdKey, who: Who, due: Instant, will: ClientPublish, bounds: (usize, usize)) -> bool {
        self.admit(id, due, will, who, bounds).is_ok()
    }

    /// Client `id` connected again: its waiting will is cancelled
    /// (whether there was one).
    pub(crate) fn cancel(&mut self, id: &IdKey) -> bool {
        self.take(id).is_some()
    }

    fn take(&mut self, id: &IdKey) -> Option<ClientPublish> {
        let (_, will, who) = self.waiting.remove(id)?;
        if let Some(n) = self.by_identity.get_mut(&who.identity) {
            *n -= 1;
            if *n == 0 {
                self.by_identity.remove(&who.identity);
            }
        }
        Some(will)
    }

    /// The wills whose time came, taken, but those `held` names (their
    /// sessions lent to another node: they wait for the lend's end).
    pub(crate) fn due(&mut self, now: Instant, held: impl Fn(&IdKey) -> bool) -> Vec<(IdKey, ClientPublish)> {
        let ids: Vec<IdKey> = self.waiting.iter().filter(|(id, (t, _, _))| *t <= now && !held(id)).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| Some((id, self.take(&id)?))).collect()
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client id's key (as the registry makes it).
    fn k(id: &str) -> IdKey {
        thread_local!(static KEYER: crate::server::broker::sessions::Keyer = Default::default());
        KEYER.with(|kr| kr.key(id))
    }

    fn who(identity: &str) -> Who {
        Who::new(Some(identity), identity)
    }

    fn will(topic: &str, delay_s: u32) -> DelayedWill {
        DelayedWill { will: ClientPublish { topic: topic.into(), data: Vec::new(), qos: 1, retain: false, mqtt: None, identity: None }, delay_s }
    }

    #[test]
    fn a_will_waits_its_delay_bounded_by_the_session_and_a_reconnect_cancels_it() {
        let (mut w, t0) = (Wills::default(), Instant::now());
        assert_eq!(w.hold(k("a"), who("x"), will("w/a", 10), 60, (10, 10), t0), Held::Waiting);
        // The session expires first: the will goes then.
        assert_eq!(w.hold(k("b"), who("x"), will("w/b", 3600), 5, (10, 10), t0), Held::Waiting);
        assert_eq!(w.hold(k("c"), who("x"), will("w/c", 10), 60, (10, 10), t0), Held::Waiting);
        let none = |_: &IdKey| false;
        assert!(w.due(t0 + Duration::from_secs(4), none).is_empty());
        assert_eq!(w.due(t0 + Duration::from_secs(5), none).iter().map(|p| p.1.topic.as_str()).collect::<Vec<_>>(), ["w/b"]);
        assert!(w.cancel(&k("c")));
        assert!(!w.cancel(&k("c")));
        let lent = k("a");
        assert!(w.due(t0 + Duration::from_secs(10), |id| *id == lent).is_empty(), "held while its session is lent");
        assert_eq!(w.due(t0 + Duration::from_secs(10), none).iter().map(|p| p.1.topic.as_str()).collect::<Vec<_>>(), ["w/a"]);
        assert!(w.is_empty());
    }

    #[test]
    fn past_the_bound_a_will_goes_at_once() {
        let (mut w, t0) = (Wills::default(), Instant::now());
        assert_eq!(w.hold(k("a"), who("x"), will("w/a", 10), 60, (1, 1), t0), Held::Waiting);
        assert!(matches!(w.hold(k("b"), who("y"), will("w/b", 10), 60, (1, 1), t0), Held::Now(p, "full") if p.topic == "w/b"));
        // The same id again replaces its own.
        assert_eq!(w.hold(k("a"), who("x"), will("w/a2", 10), 60, (1, 1), t0), Held::Waiting);
        assert_eq!(w.len(), 1);
    }

    /// Issue 62, finding 5: one identity's wills fill its quota, not the
    /// table: another's still waits, and none waiting is pushed out.
    #[test]
    fn one_identity_cannot_fill_the_table_for_another() {
        let (mut w, t0) = (Wills::default(), Instant::now());
        for i in 0..5 {
            let held = w.hold(k(&format!("m{i}")), who("mallory"), will("w/m", 10), 60, (10, 2), t0);
            assert_eq!(held == Held::Waiting, i < 2, "mallory's will {i}");
        }
        assert_eq!(w.hold(k("alice"), who("alice"), will("w/a", 10), 60, (10, 2), t0), Held::Waiting);
        assert_eq!(w.owner(&k("alice")), Some(Some("alice")));
        assert!(w.cancel(&k("m0")));
        assert_eq!(w.hold(k("m9"), who("mallory"), will("w/m", 10), 60, (10, 2), t0), Held::Waiting, "room in its quota again");
    }
}
