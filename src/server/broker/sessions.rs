//! MQTT client ids and persistent sessions, in the supervisor: the one
//! place that sees every worker (each a separate process), so a client id
//! is unique across the server and a session kept by one worker is
//! resumed by whichever worker the client reconnects to.
//!
//! - **The registry of connected client ids** (MQTT-3.1.4-2): a worker
//!   that reads a CONNECT with a client id claims it (`SessionClaims`) and
//!   answers the CONNACK only once the supervisor answered (`session`). An
//!   id connected elsewhere is taken over: its worker is told to close it
//!   (`takeover`; v5 DISCONNECT 0x8E, its will published), and the new
//!   claim is answered once the old connection's end (`SessionsEnded`)
//!   brought its session. Bounded in ids (`--mqtt-client-ids`; an id is
//!   at most 128 bytes and costs the registry 24 whatever its length):
//!   past it a claim is refused (v5 CONNACK 0x97, 3.1.1 3) and counted.
//! - **Kept sessions** of clients gone (3.1.1 Clean Session 0; v5 a
//!   Session Expiry Interval above 0): their subscriptions (filter, QoS
//!   and v5 options) and the QoS 1 and 2 messages they had not acknowledged, then
//!   the QoS 1 and 2 messages their subscriptions matched while they were
//!   away, in order, each with its v5 properties and publish time (its
//!   Message Expiry Interval counts down while it waits). At most `--mqtt-session-queue` messages and
//!   `--mqtt-session-queue-bytes` per session: past them the **newest**
//!   message is dropped (the arriving one, as mosquitto does) and counted.
//!   At most `--mqtt-sessions` sessions and `--mqtt-sessions-bytes` in all,
//!   and `--mqtt-sessions-per-identity` of one identity (the token's `sub`
//!   with `--auth`, else the peer's address): one more of an identity at
//!   its quota **expires that identity's oldest** (reason `identity`); one
//!   more past the node's bounds is **not kept** (reason `full`), so no
//!   identity's sessions push out another's, and a peer inventing client
//!   ids costs only its own quota. A v5 session goes at its expiry
//!   (reason `expiry`); a 3.1.1 one only by the bounds.
//! - **Owners.** With `--auth`, a client id and everything kept under it
//!   (subscriptions, queued and in-flight messages, the client's QoS 2
//!   ids awaiting PUBREL, a delayed will) belong to the identity whose
//!   CONNECT made it. Another identity's CONNECT of that id is refused
//!   (v5 CONNACK 0x87, 3.1.1 5) and touches nothing: not the owner's
//!   connection, not its session, not its will. A connected id's owner is
//!   a 32-bit keyed tag in the registry's entry (no memory added); a kept
//!   session, a waiting claim and a waiting will hold the owner's name,
//!   compared exactly before anything is handed out.
//!
//! **Memory.** The registry holds every connected client id of the node
//! (1,000,000 at a million devices), so an id is kept as a fixed 12-byte
//! key, not its text: 96 bits of SipHash-1-3 under two random keys of
//! this process ([`Keyer`]). Two ids share a key by chance once in 2^96
//! pairs (at a million ids, odds of 1 in 10^17), and a client cannot aim
//! at another's key without the process's secret keys. The key is handed to the connection's worker in the
//! answer and comes back with its end, so the registry needs no second
//! map from connections to ids: one entry of 24 bytes per connected id
//! (15,000 ids: 305 B each before, with the text twice and a map per
//! direction). The session's expiry and the id's length, which the
//! worker has anyway, come back with the end too.
//!
//! An offline publish finds the kept sessions it reaches through an index
//! of their filters (`sessions/by_filter.rs`): one lookup of its topic,
//! then one match per distinct wildcard filter, not one pass over every
//! kept session per publish.

use crate::proto::mqtt::forward::Forwarded;
use crate::server::commands::{split_id, ClientPublish, IdKey, KeptSub, SessionAnswer, SessionClaim, SessionEnd, SessionMessage, SessionState};
use std::collections::hash_map::RandomState;

mod by_filter;
mod elsewhere;
mod moving;
mod online;
pub(crate) mod saved;
pub(crate) mod wills;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// Default `--mqtt-client-ids`: client ids connected at once on a node.
pub(crate) const DEFAULT_MAX_IDS: usize = 4_000_000;
/// Default `--mqtt-sessions`: sessions kept for clients gone.
pub(crate) const DEFAULT_MAX_KEPT: usize = 10_000;
/// Default `--mqtt-sessions-bytes`: bytes of every kept session.
pub(crate) const DEFAULT_MAX_KEPT_BYTES: usize = 256 << 20;
/// Default `--mqtt-session-queue`: messages kept per session.
pub(crate) const DEFAULT_QUEUE: usize = 1000;
/// Default `--mqtt-session-queue-bytes`: bytes of those.
pub(crate) const DEFAULT_QUEUE_BYTES: usize = 1 << 20;
/// Bytes counted per kept session, subscription and message on top of
/// their names and payloads (the records and maps holding them).
const RECORD: usize = 64;
/// v5: a Session Expiry Interval of this never expires (§3.1.2.11.2).
pub(crate) const NEVER: u32 = u32::MAX;
/// v5 CONNACK: Quota exceeded; 3.1.1: Server unavailable.
const REFUSED: (u8, u8) = (0x97, 3);
/// v5 CONNACK: Server busy (a claim displaced by a newer one before it
/// was answered); 3.1.1: Server unavailable.
const DISPLACED: (u8, u8) = (0x89, 3);
/// v5 CONNACK: Not authorized; 3.1.1: Not authorized (a client id that
/// another identity owns).
pub(crate) const NOT_OWNER: (u8, u8) = (0x87, 5);
/// A node's kept sessions one identity may hold by default: a tenth of
/// `--mqtt-sessions` (at least one), so that ten identities, not one,
/// are needed to fill the node.
const DEFAULT_IDENTITY_SHARE: usize = 10;

crate::counters! {
    /// The supervisor's client ids and kept sessions (`/stats` "mqtt_sessions", `/metrics`).
    pub(crate) struct SessionCounters {
        online: gauge "mqtt_client_ids" "MQTT client ids connected now (the registry across every worker)",
        kept: gauge "mqtt_sessions_kept" "MQTT sessions kept for clients gone",
        bytes: bytes "mqtt_sessions_memory" "Bytes the kept sessions hold: filters, queued messages and records",
        stored: counter "mqtt_sessions_stored" "MQTT sessions kept when their connection ended",
        resumed: counter "mqtt_sessions_resumed" "MQTT sessions resumed by a CONNECT (session present 1)",
        discarded: counter "mqtt_sessions_discarded" "Kept MQTT sessions a clean CONNECT discarded",
        expired: by("reason") "mqtt_sessions_expired" "Kept MQTT sessions dropped, by reason (expiry: v5 Session Expiry Interval; full: not kept, --mqtt-sessions or --mqtt-sessions-bytes reached; identity: the oldest of an identity at --mqtt-sessions-per-identity; moved_late: handed over by another node after its client was answered without it)",
        taken_over: counter "mqtt_sessions_taken_over" "MQTT connections closed because a CONNECT with their client id came (session takeover)",
        moved: counter "mqtt_sessions_moved" "MQTT client ids that connected to another cluster node: their connection here taken over, or their kept session here dropped",
        moved_in: counter "mqtt_sessions_moved_in" "MQTT sessions another cluster node handed over to a client that came back here",
        handed_over: counter "mqtt_sessions_handed_over" "MQTT sessions kept here handed over to another cluster node the client came back to (once that node confirmed it got them)",
        lent: gauge "mqtt_sessions_lent" "Kept MQTT sessions sent to another cluster node that has not confirmed it got them yet (still kept here until it does, at most 5 s)",
        returned: counter "mqtt_sessions_returned" "Kept MQTT sessions sent to another cluster node that never confirmed it got them: this node's again for their client's next CONNECT",
        queued: counter "mqtt_session_queued" "Messages queued for MQTT sessions whose client was gone",
        queue_dropped: by("reason") "mqtt_session_queue_dropped" "Messages for gone clients not queued, by reason (queue: --mqtt-session-queue, queue_bytes: --mqtt-session-queue-bytes, sessions_bytes: --mqtt-sessions-bytes); the newest is dropped",
        wills_delayed: counter "mqtt_wills_delayed" "MQTT wills held for their v5 Will Delay Interval",
        wills_cancelled: counter "mqtt_wills_cancelled" "Delayed MQTT wills cancelled by a CONNECT of their client id before the delay passed",
        wills_published: by("reason") "mqtt_wills_delayed_published" "Delayed MQTT wills published, by reason (delay: the delay or the session expiry passed; full: more waiting than --mqtt-sessions; identity: more of one identity than --mqtt-sessions-per-identity)",
        wills_waiting: gauge "mqtt_wills_waiting" "MQTT wills waiting for their delay now",
        loaded: counter "mqtt_sessions_loaded" "MQTT sessions read from --mqtt-sessions-file at start",
        saved: counter "mqtt_sessions_saved" "Times the kept MQTT sessions were written to --mqtt-sessions-file",
        saved_segments: counter "mqtt_sessions_file_segments" "Segments of --mqtt-sessions-file written: a write rewrites only the segments (a 64th of the sessions each, by client id) that changed",
        refused: by("reason") "mqtt_client_ids_refused" "CONNECTs refused by the client id registry, by reason (ids: --mqtt-client-ids, displaced: a newer CONNECT of the id came first, owner: another identity owns the id)",
        files_reloaded: counter "mqtt_files_reloaded" "Times SIGHUP read --mqtt-password-file and --mqtt-acl-file again and every worker took them",
        files_refused: counter "mqtt_files_reload_refused" "Times SIGHUP found --mqtt-password-file or --mqtt-acl-file unreadable or malformed: the files read before stayed in force",
        control_full: by("kind") "mqtt_session_commands_refused" "Session answers and takeovers a worker's command lane could not take, by kind (answer, takeover): 64 MiB of commands left unread, a stopped worker; its watchdog replaces it and the ids it held are given back",
    }
}

/// `--mqtt-client-ids`, `--mqtt-sessions`, `--mqtt-sessions-per-identity`,
/// `--mqtt-sessions-bytes`, `--mqtt-session-queue`, `--mqtt-session-queue-bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SessionsConfig {
    pub max_ids: usize,
    pub max_kept: usize,
    /// 0: a tenth of `max_kept` ([`SessionsConfig::identity_quota`]).
    #[serde(default)]
    pub per_identity: usize,
    pub max_kept_bytes: usize,
    pub queue: usize,
    pub queue_bytes: usize,
}

impl SessionsConfig {
    /// Kept sessions one identity may hold.
    pub(crate) fn identity_quota(&self) -> usize {
        match self.per_identity {
            0 => (self.max_kept / DEFAULT_IDENTITY_SHARE).max(1),
            n => n,
        }
    }
}

impl Default for SessionsConfig {
    fn default() -> SessionsConfig {
        SessionsConfig {
            max_ids: DEFAULT_MAX_IDS,
            max_kept: DEFAULT_MAX_KEPT,
            per_identity: 0,
            max_kept_bytes: DEFAULT_MAX_KEPT_BYTES,
            queue: DEFAULT_QUEUE,
            queue_bytes: DEFAULT_QUEUE_BYTES,
        }
    }
}

/// What the supervisor sends its workers for a claim or an end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// `session {answer}` to this worker.
    Answer(usize, SessionAnswer),
    /// `takeover {conn}` to this worker.
    Takeover(usize, u64),
    /// Publish this will now (its delay passed, or no room to wait).
    Will(ClientPublish),
}

/// A client id connected now: its connection (8 bytes beside the key;
/// the session's expiry and the id's length come back with its end).
#[derive(Debug, Clone, Copy)]
struct Online {
    conn: u64,
}

/// A client id's [`IdKey`]: SipHash-1-3 under two random keys of this
/// process (a fresh `RandomState` each), 64 bits of one and 32 of the other.
#[derive(Debug, Default)]
pub(crate) struct Keyer(RandomState, RandomState);

impl Keyer {
    pub(crate) fn key(&self, id: &str) -> IdKey {
        let (a, b) = (self.0.hash_one(id), self.1.hash_one(id));
        [a as u32, (a >> 32) as u32, b as u32]
    }

    /// The registry's tag of an owner (0: none, without `--auth`): 32
    /// bits of the first key's hash, never 0 for an owner. Two owners
    /// share a tag once in 2^32 pairs and no peer can aim at one without
    /// the process's keys; a shared tag lets a CONNECT take the live
    /// connection over, never the session: that is handed out only to
    /// its owner's exact name.
    pub(crate) fn tag(&self, owner: Option<&str>) -> u32 {
        owner.map_or(0, |o| (self.0.hash_one(("owner", o)) as u32) | 1)
    }
}

/// Who a kept session, a will or a claim is of: its owner (`--auth`) and
/// the identity its bounds are charged to (the owner, else the peer's
/// address).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Who {
    pub owner: Option<Box<str>>,
    pub identity: Box<str>,
}

impl Who {
    pub(crate) fn new(owner: Option<&str>, identity: &str) -> Who {
        Who { owner: owner.map(Into::into), identity: identity.into() }
    }
}

/// A session kept for a client gone.
#[derive(Debug)]
struct Kept {
    /// Its place in `order` (oldest first).
    seq: u64,
    /// Its client id, kept only for `--mqtt-sessions-file` (the registry
    /// knows an id by its key, which a restart changes).
    id: Option<Box<str>>,
    expires: Option<Instant>,
    who: Who,
    subs: Vec<KeptSub>,
    messages: VecDeque<SessionMessage>,
    /// The client's QoS 2 ids awaiting PUBREL.
    rel: Vec<u16>,
    /// Bytes of `messages`.
    queued_bytes: usize,
    /// Bytes of the record and `subs`.
    base: usize,
}

fn message_cost(m: &SessionMessage) -> usize {
    RECORD + m.topic.len() + m.data.len() + m.mqtt.as_ref().map_or(0, |f| f.cost())
}

/// The registry of connected client ids and the kept sessions.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    cfg: SessionsConfig,
    keyer: Keyer,
    online: online::OnlineIds<Online>,
    /// A CONNECT of an id connected now, answered once that one ended
    /// (one per id: a newer one displaces it).
    next: HashMap<IdKey, (usize, SessionClaim)>,
    kept: HashMap<IdKey, Kept>,
    /// `kept`'s subscriptions, by filter.
    by_filter: by_filter::ByFilter,
    /// Kept sessions by age, and each identity's (its oldest goes when it
    /// keeps one more past its quota).
    order: BTreeMap<u64, IdKey>,
    by_identity: HashMap<Box<str>, BTreeSet<u64>>,
    next_seq: u64,
    pub counters: SessionCounters,
    /// v5 wills waiting for their Will Delay Interval (`wills.rs`).
    wills: wills::Wills,
    /// In a cluster: the ids admitted lately, with when (`elsewhere.rs`),
    /// by the clock the claims' announcement carries ([`Sessions::clock`]).
    cluster: bool,
    clock_us: u64,
    recent: elsewhere::Recent,
    /// Connections taken over because their id connected to another
    /// node, until they end: their state is not kept, their will dropped.
    moved: HashSet<IdKey>,
    /// With `--mqtt-sessions-file`: the client ids of connections whose
    /// session may outlive them, for the file (`saved.rs`).
    names: Option<HashMap<IdKey, Box<str>>>,
    /// With the file: the segments of it whose sessions changed since its
    /// last write (`saved.rs`).
    pub(crate) dirty: crate::server::broker::state_file::Dirty,
    /// In a cluster: CONNECTs that want a session this node does not
    /// keep, waiting for the other nodes' answers (`moving.rs`).
    asking: HashMap<IdKey, moving::Asking>,
    /// Client ids (with their owners) to ask the other nodes about.
    to_ask: Vec<crate::cluster::OwnedId>,
    /// Connections taken over because another node asked for their
    /// session: their state is kept (to hand over), their will dropped.
    handing: HashSet<IdKey>,
    /// Kept sessions lent to other nodes, until confirmed (`moving.rs`),
    /// and the key each lend names.
    lending: HashMap<IdKey, moving::Lent>,
    lends: HashMap<u64, IdKey>,
    next_lend: u64,
}

impl Sessions {
    pub(crate) fn new(cfg: SessionsConfig) -> Sessions {
        Sessions { cfg, ..Default::default() }
    }

    /// A worker's CONNECT with a client id: answered now, or (the id is
    /// connected elsewhere) once that connection was closed.
    pub(crate) fn claim(&mut self, worker: usize, c: SessionClaim, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        let key = self.keyer.key(&c.client_id);
        if self.owned_by_another(&key, c.owner.as_deref()) {
            return vec![self.not_owner(worker, &c)];
        }
        match self.online.get(&key).map(|(_, o)| *o) {
            Some(o) => {
                self.counters.taken_over += 1;
                out.push(Action::Takeover(split_id(o.conn).0, o.conn));
                if let Some((w, old)) = self.next.insert(key, (worker, c)) {
                    out.push(self.displaced(w, old));
                }
            }
            None => {
                if self.must_ask(&key, &c) {
                    out.extend(self.ask(worker, key, c, now));
                } else {
                    out.extend(self.displaced_asking(&key));
                    out.push(self.admit(worker, key, c, now, self.clock_us));
                }
            }
        }
        out
    }

    /// Whether client id `key` is another identity's than `owner`: its
    /// connection here, a claim of it waiting, its kept session or its
    /// waiting will.
    pub(super) fn owned_by_another(&self, key: &IdKey, owner: Option<&str>) -> bool {
        if self.online.get(key).is_some_and(|(tag, _)| tag != self.keyer.tag(owner)) {
            return true;
        }
        let other = |o: Option<&str>| o != owner;
        self.next.get(key).is_some_and(|(_, c)| other(c.owner.as_deref()))
            || self.asking.get(key).is_some_and(|a| other(a.claim.owner.as_deref()))
            || self.kept.get(key).is_some_and(|k| other(k.who.owner.as_deref()))
            || self.wills.owner(key).is_some_and(other)
    }

    /// A claim of a client id another identity owns: refused, counted.
    pub(super) fn not_owner(&mut self, worker: usize, c: &SessionClaim) -> Action {
        crate::stats::counters::bump(&mut self.counters.refused, "owner");
        Action::Answer(worker, refusal(c.conn, NOT_OWNER, c.v5))
    }

    /// A claim a newer one of its id overtook before it was answered.
    fn displaced(&mut self, worker: usize, old: SessionClaim) -> Action {
        crate::stats::counters::bump(&mut self.counters.refused, "displaced");
        Action::Answer(worker, refusal(old.conn, DISPLACED, old.v5))
    }

    /// The key a client id has in this registry (what its answer carries).
    #[cfg(test)]
    pub(crate) fn key(&self, id: &str) -> IdKey {
        self.keyer.key(id)
    }

    /// Register a claim whose id is free and answer it with its session;
    /// in a cluster its admission is noted at `at_us`, its CONNECT's time.
    fn admit(&mut self, worker: usize, key: IdKey, c: SessionClaim, now: Instant, at_us: u64) -> Action {
        if self.online.len() >= self.cfg.max_ids {
            crate::stats::counters::bump(&mut self.counters.refused, "ids");
            return Action::Answer(worker, refusal(c.conn, REFUSED, c.v5));
        }
        // Checked again by name (a claim that waited was let in by its
        // tag, or came from another node).
        let owner = c.owner.as_deref();
        if self.kept.get(&key).is_some_and(|k| k.who.owner.as_deref() != owner) || self.wills.owner(&key).is_some_and(|o| o != owner) {
            return self.not_owner(worker, &c);
        }
        self.cancel_will(&key);
        self.online.insert(key, self.keyer.tag(owner), Online { conn: c.conn });
        self.counters.online = self.online.len() as u64;
        if let Some(names) = self.names.as_mut().filter(|_| c.expiry_s > 0) {
            names.insert(key, c.client_id.as_str().into());
        }
        if self.cluster {
            self.recent.note(key, if at_us > 0 { at_us } else { crate::proto::push::wall_us() });
        }
        let mut kept = self.take(&key);
        if kept.as_ref().is_some_and(|k| k.expires.is_some_and(|t| t <= now)) {
            kept = None;
            crate::stats::counters::bump(&mut self.counters.expired, "expiry");
        }
        let mut answer = SessionAnswer {
            conn: c.conn,
            code: 0,
            key,
            expiry_s: c.expiry_s,
            owner: c.owner,
            identity: c.identity,
            grant: c.grant,
            ..refusal(c.conn, (0, 0), false)
        };
        match kept {
            Some(_) if c.clean => self.counters.discarded += 1,
            Some(k) => {
                self.counters.resumed += 1;
                answer.present = true;
                answer.subs = k.subs;
                answer.messages = k.messages.into();
                answer.rel = k.rel;
            }
            None => {}
        }
        Action::Answer(worker, answer)
    }

    /// A delayed will of `key` waiting, cancelled (its client is back, or
    /// alive elsewhere), and counted.
    fn cancel_will(&mut self, key: &IdKey) {
        if self.wills.cancel(key) {
            self.touch(key);
            self.counters.wills_cancelled += 1;
            self.counters.wills_waiting = self.wills.len() as u64;
        }
    }

    /// A kept session out of the store, its bytes given back.
    fn take(&mut self, key: &IdKey) -> Option<Kept> {
        self.touch(key);
        let k = self.kept.remove(key)?;
        self.end_lend(key);
        self.by_filter.remove(key, &k.subs);
        self.order.remove(&k.seq);
        if let Some(seqs) = self.by_identity.get_mut(&k.who.identity) {
            seqs.remove(&k.seq);
            if seqs.is_empty() {
                self.by_identity.remove(&k.who.identity);
            }
        }
        self.counters.bytes -= (k.base + k.queued_bytes) as u64;
        self.counters.kept = self.kept.len() as u64;
        Some(k)
    }

    /// A registered connection ended (its state when its session
    /// outlives it): the id is free, the session kept, and a CONNECT that
    /// waited for the id answered.
    pub(crate) fn ended(&mut self, e: SessionEnd, now: Instant) -> Vec<Action> {
        // Only the registered connection's own end frees its id (a
        // connection taken over ends after its successor claimed it).
        if self.online.get(&e.key).is_none_or(|(_, o)| o.conn != e.conn) {
            return Vec::new();
        }
        self.online.remove(&e.key);
        self.counters.online = self.online.len() as u64;
        let id = self.names.as_mut().and_then(|n| n.remove(&e.key));
        // Its id connected to another node: its session lives there now
        // (or goes there: another node asked for it).
        let moved = self.moved.remove(&e.key);
        let handing = self.handing.remove(&e.key);
        let who = Who::new(e.owner.as_deref(), &e.identity);
        if let Some(state) = e.state.filter(|_| e.expiry_s > 0 && !moved) {
            self.counters.stored += self.keep(e.key, id, who.clone(), state, e.expiry_s, now) as u64;
        }
        let next = self.next.remove(&e.key);
        let mut out = Vec::new();
        match e.will {
            // A CONNECT of the id is already here (a takeover), or it came
            // to another node: cancelled.
            Some(_) if next.is_some() || moved || handing => self.counters.wills_cancelled += 1,
            Some(w) => {
                self.counters.wills_delayed += 1;
                self.touch(&e.key);
                if let wills::Held::Now(p, reason) = self.wills.hold(e.key, who, w, e.expiry_s, (self.cfg.max_kept, self.cfg.identity_quota()), now) {
                    crate::stats::counters::bump(&mut self.counters.wills_published, reason);
                    out.push(Action::Will(p));
                }
                self.counters.wills_waiting = self.wills.len() as u64;
            }
            None => {}
        }
        if let Some((w, c)) = next {
            out.push(self.admit(w, e.key, c, now, self.clock_us));
        }
        out
    }

    /// Every connection of a worker that died ended, without its state
    /// (one pass over the registry: a worker dies rarely).
    pub(crate) fn worker_gone(&mut self, worker: usize, now: Instant) -> Vec<Action> {
        let ends: Vec<SessionEnd> = self
            .online
            .iter()
            .filter(|(_, o)| split_id(o.conn).0 == worker)
            .map(|(key, o)| SessionEnd { conn: o.conn, key: *key, ..SessionEnd::default() })
            .collect();
        self.forget_asking(worker);
        ends.into_iter().flat_map(|e| self.ended(e, now)).collect()
    }

    /// Keep a session within the bounds: its identity's oldest expired
    /// when that identity is at its quota; not kept (counted `full`) past
    /// the node's bounds, which push nobody else's out. Whether it was kept.
    fn keep(&mut self, key: IdKey, id: Option<Box<str>>, who: Who, state: SessionState, expiry_s: u32, now: Instant) -> bool {
        let SessionState { subs, messages, rel } = state;
        let names = id.as_ref().map_or(0, |i| i.len()) + who.owner.as_ref().map_or(0, |o| o.len()) + who.identity.len();
        let base = RECORD + std::mem::size_of::<IdKey>() + names + 2 * rel.len() + subs.iter().map(|s| RECORD + s.filter.len()).sum::<usize>();
        let mut kept = Kept { seq: 0, id, expires: None, who, subs, messages: VecDeque::new(), rel, queued_bytes: 0, base };
        if expiry_s != NEVER {
            kept.expires = Some(now + Duration::from_secs(expiry_s.into()));
        }
        // Unacknowledged ones first (they were sent), within the same bounds.
        for m in messages {
            if self.fits(&kept, &m).is_ok() {
                kept.queued_bytes += message_cost(&m);
                kept.messages.push_back(m);
            } else {
                crate::stats::counters::bump(&mut self.counters.queue_dropped, "queue");
            }
        }
        self.take(&key);
        let cost = kept.base + kept.queued_bytes;
        let quota = self.cfg.identity_quota();
        while let Some(oldest) = self.by_identity.get(&kept.who.identity).filter(|s| s.len() >= quota).and_then(|s| s.first().copied()) {
            let Some(k) = self.order.get(&oldest).copied() else { break };
            self.take(&k);
            crate::stats::counters::bump(&mut self.counters.expired, "identity");
        }
        if self.kept.len() >= self.cfg.max_kept || self.counters.bytes as usize + cost > self.cfg.max_kept_bytes {
            crate::stats::counters::bump(&mut self.counters.expired, "full");
            return false;
        }
        self.next_seq += 1;
        kept.seq = self.next_seq;
        self.order.insert(kept.seq, key);
        self.by_identity.entry(kept.who.identity.clone()).or_default().insert(kept.seq);
        self.counters.bytes += cost as u64;
        self.by_filter.add(key, &kept.subs);
        self.kept.insert(key, kept);
        self.touch(&key);
        self.counters.kept = self.kept.len() as u64;
        true
    }

    /// Whether `m` may join `k`'s queue: Err names the bound it passes.
    fn fits(&self, k: &Kept, m: &SessionMessage) -> Result<(), &'static str> {
        if k.messages.len() >= self.cfg.queue {
            Err("queue")
        } else if k.queued_bytes + message_cost(m) > self.cfg.queue_bytes {
            Err("queue_bytes")
        } else {
            Ok(())
        }
    }

    /// The wall-clock µs the claims that follow are announced to the
    /// other nodes with: their admissions are noted at it, so both nodes
    /// of a tie compare the same two instants.
    pub(crate) fn clock(&mut self, now_us: u64) {
        self.clock_us = now_us;
    }

    /// Record what a cluster node must follow for the kept sessions
    /// (their topics; any topic while one holds a wildcard filter), so a
    /// publish on another node reaches their queues.
    pub(crate) fn follow(&mut self) {
        self.by_filter.following.track = true;
        self.cluster = true;
    }

    /// What to follow or stop following since the last call.
    pub(crate) fn take_followed(&mut self) -> Vec<(String, bool)> {
        self.by_filter.following.take()
    }

    /// The kept sessions' filters that gained their first holder (true)
    /// or lost their last since the last call: what the shards route here.
    pub(crate) fn take_interest(&mut self) -> Vec<(bool, Box<str>)> {
        self.by_filter.take_interest()
    }

    /// A topic publish: queued for every kept session whose filters
    /// match it, at the lower of its QoS and the highest granted (QoS 0
    /// is not queued), within the bounds (the newest dropped past them).
    pub(crate) fn offline(&mut self, topic: &str, data: &[u8], qos: u8, retain: bool, mqtt: Option<&Forwarded>, publish_us: u64) {
        if qos == 0 || self.kept.is_empty() {
            return;
        }
        let ids = self.by_filter.matching(topic);
        for (id, granted) in ids {
            let q = granted.min(qos);
            if q == 0 {
                continue;
            }
            let m =
                SessionMessage { topic: topic.into(), data: data.into(), qos: q, retain, id: 0, released: false, mqtt: Forwarded::stored(mqtt), publish_us };
            let Some(k) = self.kept.get(&id) else { continue };
            let fit = self.fits(k, &m).and_then(|()| {
                if self.counters.bytes as usize + message_cost(&m) > self.cfg.max_kept_bytes {
                    Err("sessions_bytes")
                } else {
                    Ok(())
                }
            });
            if let Err(reason) = fit {
                crate::stats::counters::bump(&mut self.counters.queue_dropped, reason);
                continue;
            }
            let cost = message_cost(&m);
            if let Some(k) = self.kept.get_mut(&id) {
                if let Some(i) = &k.id {
                    self.dirty.mark(i);
                }
                k.queued_bytes += cost;
                k.messages.push_back(m);
                self.counters.bytes += cost as u64;
                self.counters.queued += 1;
            }
        }
    }

    /// Drop the kept sessions whose expiry passed; the delayed wills
    /// whose time came, to publish, unless `hold_wills` (a cluster node
    /// whose link is down: they would be refused, so they wait for it).
    pub(crate) fn expire(&mut self, now: Instant, hold_wills: bool) -> Vec<Action> {
        // A lent session's will waits for its lend's end: confirmed, its
        // client is back on the other node (cancelled then).
        let lending = &self.lending;
        let wills = if hold_wills { Vec::new() } else { self.wills.due(now, |k| lending.contains_key(k)) };
        if !wills.is_empty() {
            *self.counters.wills_published.entry("delay".into()).or_insert(0) += wills.len() as u64;
            self.counters.wills_waiting = self.wills.len() as u64;
            for (key, _) in &wills {
                self.touch(key);
            }
        }
        let due: Vec<IdKey> = self.kept.iter().filter(|(_, k)| k.expires.is_some_and(|t| t <= now)).map(|(key, _)| *key).collect();
        for key in due {
            self.take(&key);
            crate::stats::counters::bump(&mut self.counters.expired, "expiry");
        }
        wills.into_iter().map(|(_, w)| Action::Will(w)).collect()
    }

    /// Kept session `key`'s segment of the file changed (its id is kept
    /// only with the file).
    fn touch(&mut self, key: &IdKey) {
        if let Some(id) = self.kept.get(key).and_then(|k| k.id.as_deref()) {
            self.dirty.mark(id);
        }
    }
}

/// A claim the `--mqtt-auth-http` backend refused: not authorized.
pub(crate) fn hook_refusal(conn: u64, is_v5: bool) -> SessionAnswer {
    SessionAnswer { hook_refused: true, ..refusal(conn, NOT_OWNER, is_v5) }
}

/// A refused claim's answer with the CONNACK code of its version.
fn refusal(conn: u64, (v5, v3): (u8, u8), is_v5: bool) -> SessionAnswer {
    SessionAnswer {
        conn,
        code: if is_v5 { v5 } else { v3 },
        present: false,
        subs: Vec::new(),
        messages: Vec::new(),
        key: IdKey::default(),
        expiry_s: 0,
        rel: Vec::new(),
        owner: None,
        identity: String::new(),
        hook_refused: false,
        assigned: None,
        grant: None,
    }
}

#[cfg(test)]
mod tests;
