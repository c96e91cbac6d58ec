//! Kept sessions as `--mqtt-sessions-file` holds them
//! (`broker/sessions_file.rs`): each with its client id, its expiry as a
//! wall-clock time (so it keeps counting down while the server is
//! stopped), its subscriptions and its queued messages, oldest session
//! first. The registry knows a connected id only by its key, which a
//! restart changes, so with the file the supervisor also keeps the ids of
//! connections whose session may outlive them (those with a session
//! expiry), and a kept session its id. A v5 will waiting for its delay
//! goes with its session, due at a wall-clock time: one whose time passed
//! while the server was stopped is published at the first tick.

use super::{Sessions, Who, NEVER};
use crate::server::broker::state_file::{segment_of, Dirty, SEGMENTS};
use crate::server::commands::{ClientPublish, KeptSub, SessionMessage, SessionState};
use std::time::{Duration, Instant};

/// The longest client id a CONNECT may carry (`proto/mqtt`).
const MAX_ID: usize = 128;
/// The longest owner: a token's `sub` (1 to 255 bytes), or an address.
const MAX_OWNER: usize = 255;

/// One kept session in the file (a JSON line).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedSession {
    pub(crate) id: String,
    /// Wall-clock µs it expires at; none: never (3.1.1, or v5's 0xFFFFFFFF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_us: Option<u64>,
    pub(crate) subs: Vec<KeptSub>,
    pub(crate) messages: Vec<SessionMessage>,
    /// The client's QoS 2 ids awaiting PUBREL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) rel: Vec<u16>,
    /// Its owner (`--auth`; absent: none) and the identity its bounds are
    /// charged to: only the owner's CONNECT resumes it, here or on the
    /// node it moves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) identity: String,
    /// Its will waiting for its Will Delay Interval, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) will: Option<SavedWill>,
    /// Its age among the sessions of the file (larger: kept later): the
    /// segments are read back oldest first (0: in the order they come).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) age: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A delayed will in the file: what to publish and when (wall-clock µs).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedWill {
    pub(crate) at_us: u64,
    pub(crate) will: ClientPublish,
}

/// µs from `now` to `t` (0 when past), added to the wall clock `wall`.
pub(super) fn wall_at(t: Instant, now: Instant, wall: u64) -> u64 {
    wall.saturating_add(t.saturating_duration_since(now).as_micros() as u64)
}

impl SavedSession {
    /// One session's JSON (a line of the file, or another node's
    /// answer), checked.
    pub(crate) fn parse(json: &[u8]) -> Result<SavedSession, String> {
        let s: SavedSession = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        s.check()?;
        Ok(s)
    }

    /// What a server writes: an id of 1 to 128 bytes, QoS 0 to 2,
    /// payloads in base64.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.id.is_empty() || self.id.len() > MAX_ID {
            return Err(format!("a client id of {} bytes (1 to {MAX_ID})", self.id.len()));
        }
        if self.owner.as_ref().is_some_and(|o| o.is_empty() || o.len() > MAX_OWNER) || self.identity.len() > MAX_OWNER {
            return Err(format!("an owner or identity of more than {MAX_OWNER} bytes"));
        }
        if self.rel.len() > usize::from(u16::MAX) || self.rel.contains(&0) {
            return Err("QoS 2 ids awaiting PUBREL that are not packet ids".into());
        }
        if let Some(s) = self.subs.iter().find(|s| s.filter.is_empty() || s.qos > 2) {
            return Err(format!("a subscription to '{}' at QoS {}", s.filter, s.qos));
        }
        // Payloads were decoded from base64 as they were read.
        let wills = self.will.iter().map(|w| (&w.will.topic, w.will.qos));
        if let Some((topic, qos)) = self.messages.iter().map(|m| (&m.topic, m.qos)).chain(wills).find(|(_, qos)| *qos > 2) {
            return Err(format!("a message of '{topic}' at QoS {qos}"));
        }
        let max = crate::proto::mqtt::forward::MAX_FORWARDED_BYTES;
        if self.messages.iter().filter_map(|m| m.mqtt.as_deref()).chain(self.will.iter().filter_map(|w| w.will.mqtt.as_deref())).any(|f| f.cost() > max) {
            return Err(format!("a message with more than {max} bytes of properties"));
        }
        Ok(())
    }
}

impl Sessions {
    /// `--mqtt-sessions-file`: keep the client ids the file needs.
    pub(crate) fn keep_names(&mut self) {
        self.names.get_or_insert_with(Default::default);
    }

    /// Changes whenever the kept sessions or the waiting wills do (a
    /// session kept, resumed, discarded, dropped or moved; a message
    /// queued; a will held, cancelled or published): a sum of counters
    /// that only grow, each change growing one. (A gauge in it, such as
    /// the sessions kept, would let a resume's +1 and -1 cancel out and
    /// leave the file stale.)
    pub(crate) fn generation(&self) -> u64 {
        let c = &self.counters;
        let expired: u64 = c.expired.values().sum();
        let wills: u64 = c.wills_delayed + c.wills_cancelled + c.wills_published.values().sum::<u64>();
        c.stored + c.resumed + c.discarded + c.queued + expired + c.moved + c.moved_in + c.handed_over + c.returned + c.loaded + wills
    }

    /// The kept sessions with their ids in the file's segments `wanted`
    /// (by client id, `state_file.rs`), each segment's oldest first, as
    /// of `now` (wall-clock µs `wall`); those lent to another node and
    /// not confirmed yet among them.
    pub(crate) fn saved(&self, now: Instant, wall: u64, wanted: Dirty) -> Vec<(usize, Vec<SavedSession>)> {
        let mut parts: Vec<(usize, Vec<SavedSession>)> = (0..SEGMENTS).filter(|i| wanted.has(*i)).map(|i| (i, Vec::new())).collect();
        let mut at = [usize::MAX; SEGMENTS];
        for (n, (i, _)) in parts.iter().enumerate() {
            at[*i] = n;
        }
        for key in self.order.values() {
            let Some((k, id)) = self.kept.get(key).and_then(|k| Some((k, k.id.as_deref()?))) else { continue };
            let Some(part) = parts.get_mut(at[segment_of(id)]) else { continue };
            part.1.push(SavedSession {
                will: self.wills.waiting(key).map(|(due, will)| SavedWill { at_us: wall_at(*due, now, wall), will: will.clone() }),
                age: k.seq,
                ..self.copy(k, id, now, wall)
            });
        }
        parts
    }

    /// Kept session `k` of client id `id` as it is saved (without its will).
    pub(super) fn copy(&self, k: &super::Kept, id: &str, now: Instant, wall: u64) -> SavedSession {
        SavedSession {
            id: id.to_string(),
            expires_us: k.expires.map(|t| wall_at(t, now, wall)),
            subs: k.subs.clone(),
            messages: k.messages.iter().cloned().collect(),
            rel: k.rel.clone(),
            owner: k.who.owner.as_deref().map(str::to_string),
            identity: k.who.identity.to_string(),
            will: None,
            age: 0,
        }
    }

    /// A session read from the file, kept within this server's bounds
    /// (as a session kept at a connection's end is): whether it was. One
    /// whose expiry passed while the server was stopped is dropped
    /// (counted `expired{reason="expiry"}`).
    pub(crate) fn restore(&mut self, s: SavedSession, now: Instant, wall: u64) -> bool {
        let kept = self.restore_one(s, now, wall);
        self.counters.loaded += kept as u64;
        kept
    }

    /// A saved session kept here (from the file, or handed over by
    /// another node): whether it was.
    pub(super) fn restore_one(&mut self, s: SavedSession, now: Instant, wall: u64) -> bool {
        let expiry_s = match s.expires_us {
            None => NEVER,
            Some(us) if us <= wall => {
                crate::stats::counters::bump(&mut self.counters.expired, "expiry");
                return false;
            }
            Some(us) => (us - wall).div_ceil(1_000_000).min(u64::from(NEVER - 1)) as u32,
        };
        let key = self.keyer.key(&s.id);
        let id = self.names.is_some().then(|| s.id.into());
        let who = Who::new(s.owner.as_deref(), &s.identity);
        let kept = self.keep(key, id, who.clone(), SessionState { subs: s.subs, messages: s.messages, rel: s.rel }, expiry_s, now);
        if let Some(w) = s.will.filter(|_| kept) {
            // The connection it named is gone with the old process.
            let will = ClientPublish { mqtt: crate::proto::mqtt::forward::Forwarded::stored(w.will.mqtt.as_deref()), ..w.will };
            let due = now + Duration::from_micros(w.at_us.saturating_sub(wall));
            if self.wills.restore(key, who, due, will, (self.cfg.max_kept, self.cfg.identity_quota())) {
                self.counters.wills_waiting = self.wills.len() as u64;
            }
        }
        kept
    }
}
