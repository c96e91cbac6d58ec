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
//! (`--mqtt-sessions`); past that a will is published at once, counted.
//! A server restart loses the waiting wills, as it loses kept sessions,
//! unless `--mqtt-sessions-file` keeps both (`saved.rs`).

use crate::server::commands::{ClientPublish, IdKey};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A will on its way to the topic space after its delay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct DelayedWill {
    pub will: ClientPublish,
    /// The Will Delay Interval, seconds.
    pub delay_s: u32,
}

/// The wills waiting for their delay, by client id (its registry key).
#[derive(Debug, Default)]
pub(crate) struct Wills {
    waiting: HashMap<IdKey, (Instant, ClientPublish)>,
}

/// What became of a will handed to [`Wills::hold`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// It waits.
    Waiting,
    /// Publish it now: the bound is reached (counted `full`).
    Now(ClientPublish),
}

impl Wills {
    /// Hold `w` of client `id` until `delay_s` (at most `expiry_s`, the
    /// session's) passed; past `max` waiting it is to be published now.
    pub(crate) fn hold(&mut self, id: IdKey, w: DelayedWill, expiry_s: u32, max: usize, now: Instant) -> Held {
        if self.waiting.len() >= max && !self.waiting.contains_key(&id) {
            return Held::Now(w.will);
        }
        let due = now + Duration::from_secs(w.delay_s.min(expiry_s).into());
        self.waiting.insert(id, (due, w.will));
        Held::Waiting
    }

    /// Client `id`'s waiting will and when it is due.
    pub(crate) fn waiting(&self, id: &IdKey) -> Option<&(Instant, ClientPublish)> {
        self.waiting.get(id)
    }

    /// A will read back from `--mqtt-sessions-file`, due at `due`; false
    /// past `max` waiting.
    pub(crate) fn restore(&mut self, id: IdKey, due: Instant, will: ClientPublish, max: usize) -> bool {
        if self.waiting.len() >= max && !self.waiting.contains_key(&id) {
            return false;
        }
        self.waiting.insert(id, (due, will));
        true
    }

    /// Client `id` connected again: its waiting will is cancelled
    /// (whether there was one).
    pub(crate) fn cancel(&mut self, id: &IdKey) -> bool {
        self.waiting.remove(id).is_some()
    }

    /// The wills whose time came, taken, but those `held` names (their
    /// sessions lent to another node: they wait for the lend's end).
    pub(crate) fn due(&mut self, now: Instant, held: impl Fn(&IdKey) -> bool) -> Vec<ClientPublish> {
        let ids: Vec<IdKey> = self.waiting.iter().filter(|(id, (t, _))| *t <= now && !held(id)).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| self.waiting.remove(&id)).map(|(_, w)| w).collect()
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

    fn will(topic: &str, delay_s: u32) -> DelayedWill {
        DelayedWill { will: ClientPublish { topic: topic.into(), data: String::new(), qos: 1, retain: false, mqtt: None }, delay_s }
    }

    #[test]
    fn a_will_waits_its_delay_bounded_by_the_session_and_a_reconnect_cancels_it() {
        let (mut w, t0) = (Wills::default(), Instant::now());
        assert_eq!(w.hold(k("a"), will("w/a", 10), 60, 10, t0), Held::Waiting);
        // The session expires first: the will goes then.
        assert_eq!(w.hold(k("b"), will("w/b", 3600), 5, 10, t0), Held::Waiting);
        assert_eq!(w.hold(k("c"), will("w/c", 10), 60, 10, t0), Held::Waiting);
        let none = |_: &IdKey| false;
        assert!(w.due(t0 + Duration::from_secs(4), none).is_empty());
        assert_eq!(w.due(t0 + Duration::from_secs(5), none).iter().map(|p| p.topic.as_str()).collect::<Vec<_>>(), ["w/b"]);
        assert!(w.cancel(&k("c")));
        assert!(!w.cancel(&k("c")));
        let lent = k("a");
        assert!(w.due(t0 + Duration::from_secs(10), |id| *id == lent).is_empty(), "held while its session is lent");
        assert_eq!(w.due(t0 + Duration::from_secs(10), none).iter().map(|p| p.topic.as_str()).collect::<Vec<_>>(), ["w/a"]);
        assert!(w.is_empty());
    }

    #[test]
    fn past_the_bound_a_will_goes_at_once() {
        let (mut w, t0) = (Wills::default(), Instant::now());
        assert_eq!(w.hold(k("a"), will("w/a", 10), 60, 1, t0), Held::Waiting);
        assert!(matches!(w.hold(k("b"), will("w/b", 10), 60, 1, t0), Held::Now(p) if p.topic == "w/b"));
        // The same id again replaces its own.
        assert_eq!(w.hold(k("a"), will("w/a2", 10), 60, 1, t0), Held::Waiting);
        assert_eq!(w.len(), 1);
    }
}
