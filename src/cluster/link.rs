//! The NATS link of one node: the `async-nats` client on its own thread,
//! driven by commands from the supervisor loop and reporting back on the
//! supervisor's channel.

use super::log::{self as jslog, Head, Log, Place, Stored, H_FOLLOWS, H_POSITION};
use super::malformed::Malformed;
use super::retained::{self, RETAINED, RETAINED_ASK};
use super::sign::{self, ClusterKey, Refusal, Signed, H_SIGNATURE, H_TIME};
use super::{
    ClusterConfig, ClusterEvent, Inbound, LinkStatus, LogStatus, PublishFailure, RemoteAnswer, Sent, BROADCAST, H_ORIGIN, H_PUBLISH_US, H_TARGET, NODE_PREFIX,
    TOPIC_PREFIX,
};
use crate::proto::push::{Position, Stream};
use crate::supervise::Sink;
use anyhow::{anyhow, Context, Result};
use futures_util::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

mod asks;
mod forward;
mod publish;
mod run;
use forward::decode;
use publish::confirmed;
use run::run;

/// The target header of a per-user push (`u:USER`) and disconnect (`x:USER`).
const USER_PUSH: &str = "u:";
const USER_CLOSE: &str = "x:";

/// A subject nobody subscribes to: a request to it is answered by the
/// NATS server itself ("no responders"), after everything sent before it.
/// (A subscriber of `>` that never replies makes confirms time out: 504.)
const CONFIRM: &str = "megaconn.confirm";
/// How long a starting node waits for another node with its id to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a follower waits for NATS to confirm its subscription (a
/// request answered after the SUB, [`confirmed`]) before it reads the
/// stream anyway.
const SUB_CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// A follower whose catch-up read of the stream failed tries again after.
const CATCH_UP_RETRY: Duration = Duration::from_secs(1);
/// How long a publish waits for NATS to take it (and a unicast for its
/// owner's answer) before it is answered 503/504.
pub(super) const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnect back-off: 100 ms doubling to at most 2 s, for ever.
fn reconnect_delay(attempt: usize) -> Duration {
    Duration::from_millis((100u64 << attempt.min(5)).min(2000))
}

/// One message for NATS.
#[derive(Debug, Clone)]
pub(crate) struct Out {
    pub stream: Stream,
    pub topic: String,
    /// Unicast: (owner node, its local id).
    pub target: Option<(String, u64)>,
    /// To every connection of a user on every node (and whether to close
    /// them instead).
    pub user: Option<(String, bool)>,
    pub publish_us: u64,
    pub data: Vec<u8>,
    /// An MQTT publish's QoS, retain flag and properties.
    pub mqtt: Option<super::MqttMeta>,
}

enum Cmd {
    Publish {
        request: u64,
        out: Vec<Out>,
    },
    Reply {
        subject: String,
        body: Vec<u8>,
    },
    Subscribe(String),
    Unsubscribe(String),
    /// Read a topic's messages after a position from JetStream.
    Fetch {
        topic: String,
        after: Position,
    },
    /// Joins and leaves, for the other nodes' subscribers.
    Notices(Vec<u8>),
    /// MQTT client ids that connected here, for the other nodes.
    ClientIds(Vec<Vec<u8>>),
    /// This node's MQTT shared subscription groups (`groups.rs`).
    SharedGroups(Vec<u8>),
    /// Ask every other node for its retained set, keeping at most this
    /// many messages and bytes of the answers.
    AskRetained {
        max_entries: usize,
        max_bytes: u64,
    },
    /// Ask the other nodes for the MQTT sessions they kept of these
    /// client ids, whose CONNECTs came at `at_us` (`sessions.rs`).
    AskSessions {
        ids: Vec<super::OwnedId>,
        at_us: u64,
    },
    /// Answer a question about sessions on `reply`: each session's JSON
    /// with its lend, then the ids connected here (being taken over) and
    /// those connected here by a newer CONNECT.
    HandSessions {
        reply: String,
        answer: super::sessions::Handing,
    },
    /// Ask every other node who is subscribed to `topic`.
    Presence {
        request: u64,
        topic: String,
    },
}

/// This node's publish waiting for the stream's copy of one message.
struct Own {
    /// The subject followed for it: unfollowed, the copy never comes.
    subject: String,
    request: u64,
    /// Its place in the publish.
    index: usize,
    seen: tokio::sync::oneshot::Sender<Position>,
}

#[derive(Default)]
pub(super) struct Shared {
    up: AtomicBool,
    ever_up: AtomicBool,
    /// The node's standing subscriptions (broadcasts, its own subject,
    /// users, presence, notices) are in force at NATS: until then the
    /// link is not up, or what other nodes send in between is missed.
    subscribed: AtomicBool,
    changed: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
    reconnects: AtomicU64,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
    publish_failures: AtomicU64,
    /// Messages dropped, by [`Refusal::label`].
    refused: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Bumped on every (re)connect and every message NATS dropped: each
    /// topic then asks JetStream what it missed.
    catch_up: tokio::sync::watch::Sender<u64>,
    /// The JetStream history, once connected.
    log: std::sync::OnceLock<Arc<Log>>,
    /// Stream subjects this node follows (a forward task runs for each).
    followed: Mutex<std::collections::HashSet<String>>,
    /// This node's publishes to followed subjects, by `Nats-Msg-Id`: the
    /// forward task tells the publish when the stream's copy went by, so
    /// the supervisor hears of every message before it first.
    own: Mutex<HashMap<String, Own>>,
    /// The other nodes heard lately: how many answers a question about
    /// MQTT sessions waits for (`sessions.rs`).
    pub(super) peers: Mutex<super::sessions::Peers>,
}

impl Shared {
    /// Mark a stream subject followed here (a forward task runs for it)
    /// or no longer.
    fn follow(&self, subject: &str, on: bool) {
        let mut set = self.followed.lock().expect("followed");
        if on {
            set.insert(subject.to_string());
        } else {
            set.remove(subject);
            // A publish waiting for its copy on the subject would wait in
            // vain (issue 43: a 504 after 10 s when a topic's last
            // subscriber left during its publish): it is answered at once.
            // Nobody here follows the topic; a subscriber that comes
            // back reads the stream in order, and this node's history
            // takes each offset once.
            self.own.lock().expect("own").retain(|_, own| own.subject != subject);
        }
    }

    /// For this node's publish `msg_id` to `subject`, followed here: what
    /// tells it the stream's copy went by (or that it never will, the
    /// subject unfollowed: the sender dropped). None when not followed.
    /// Under the `followed` lock, so an unfollow cannot fall in between.
    fn await_copy(&self, subject: &str, msg_id: &str, request: u64, index: usize) -> Option<tokio::sync::oneshot::Receiver<Position>> {
        let set = self.followed.lock().expect("followed");
        set.contains(subject).then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.own.lock().expect("own").insert(msg_id.to_string(), Own { subject: subject.to_string(), request, index, seen: tx });
            rx
        })
    }

    fn on_event(&self, ev: async_nats::Event) {
        match ev {
            async_nats::Event::Connected => {
                if self.ever_up.swap(true, Ordering::SeqCst) {
                    self.reconnects.fetch_add(1, Ordering::SeqCst);
                }
                self.up.store(true, Ordering::SeqCst);
                *self.changed.lock().expect("link state") = Some(Instant::now());
                self.catch_up.send_modify(|n| *n += 1);
            }
            async_nats::Event::Disconnected => {
                self.up.store(false, Ordering::SeqCst);
                *self.changed.lock().expect("link state") = Some(Instant::now());
                self.error("disconnected from the NATS server".into());
            }
            async_nats::Event::ClientError(e) if e.to_string().contains("authorization violation") => self.error(format!("{e}: {AUTH_HINT}")),
            async_nats::Event::ClientError(e) => self.error(format!("{e}")),
            async_nats::Event::ServerError(async_nats::ServerError::AuthorizationViolation) => {
                self.error(format!("NATS server error: authorization violation: {AUTH_HINT}"))
            }
            async_nats::Event::ServerError(e) => self.error(format!("NATS server error: {e}")),
            async_nats::Event::SlowConsumer(sid) => {
                self.error(format!("slow consumer on subscription {sid}: NATS dropped messages"));
                self.catch_up.send_modify(|n| *n += 1);
            }
            async_nats::Event::LameDuckMode => self.error("the NATS server is entering lame duck mode".into()),
            _ => {}
        }
    }

    pub(super) fn error(&self, e: String) {
        *self.last_error.lock().expect("link state") = Some(e);
    }

    /// Drop a message: count it by reason and say why.
    pub(super) fn refuse(&self, r: Refusal, why: String) {
        *self.refused.lock().expect("link state").entry(r.label()).or_default() += 1;
        self.error(why);
    }
}

/// What to do when NATS refuses this node's credentials.
const AUTH_HINT: &str = "NATS refused this node's credentials; give what the NATS server requires: --cluster-user with --cluster-password-file, --cluster-token-file, --cluster-nkey-file or --cluster-creds (or nats://USER:PASS@HOST:PORT)";

/// A node's link, owned by the server supervisor.
pub(crate) struct Link {
    pub cfg: ClusterConfig,
    cmds: UnboundedSender<Cmd>,
    shared: Arc<Shared>,
    started: Instant,
    /// Topic -> workers with at least one subscriber of it.
    topics: HashMap<String, BTreeSet<usize>>,
}

impl Link {
    /// Start the link thread; it connects (and reconnects) by itself, so
    /// a NATS server that is not up yet is not an error.
    pub(crate) fn start(cfg: ClusterConfig, tx: Sink<ClusterEvent>) -> Result<Link> {
        super::check_node_id(&cfg.node).map_err(|e| anyhow!(e))?;
        cfg.check().map_err(|e| anyhow!(e))?;
        let (cmds, rx) = unbounded_channel();
        let shared = Arc::new(Shared::default());
        let (c, s) = (cfg.clone(), shared.clone());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the NATS link's runtime")?;
        std::thread::Builder::new().name("nats-link".into()).spawn(move || rt.block_on(run(c, s, rx, tx))).context("starting the NATS link thread")?;
        Ok(Link { cfg, cmds, shared, started: Instant::now(), topics: HashMap::new() })
    }

    pub(crate) fn up(&self) -> bool {
        self.shared.up.load(Ordering::SeqCst) && self.shared.subscribed.load(Ordering::SeqCst)
    }

    pub(crate) fn status(&self) -> LinkStatus {
        let since = self.shared.changed.lock().expect("link state").unwrap_or(self.started);
        LinkStatus {
            url: self.cfg.shown_url(),
            node: self.cfg.node.clone(),
            up: self.up(),
            for_s: since.elapsed().as_secs_f64(),
            last_error: self.shared.last_error.lock().expect("link state").clone(),
            reconnects: self.shared.reconnects.load(Ordering::SeqCst),
            messages_in: self.shared.messages_in.load(Ordering::SeqCst),
            messages_out: self.shared.messages_out.load(Ordering::SeqCst),
            publish_failures: self.shared.publish_failures.load(Ordering::SeqCst),
            topics: self.topics.len() as u64,
            peers: self.shared.peers.lock().expect("peers").count(Instant::now()) as u64,
            refused: self.shared.refused.lock().expect("link state").iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            history: self.cfg.log.map(|cfg| LogStatus {
                stream: jslog::STREAM.into(),
                storage: cfg.storage,
                counters: self.shared.log.get().map(|l| l.counters.lock().expect("log counters").clone()).unwrap_or_default(),
            }),
        }
    }

    /// Whether the history lives in JetStream (offsets the same on every node).
    pub(crate) fn logged(&self) -> bool {
        self.cfg.log.is_some()
    }

    /// Whether this node follows `topic` (`*`: the broadcasts, always):
    /// its history of a topic it does not follow may be behind.
    pub(crate) fn follows(&self, topic: &str) -> bool {
        topic == crate::proto::push::BROADCAST_TOPIC || self.topics.contains_key(topic)
    }

    /// Read what JetStream has of `topic` (`*`: broadcasts) after `after`
    /// (offset u64::MAX: only its last message); the answer comes back as
    /// `ClusterEvent::Fetched`.
    pub(crate) fn fetch(&self, topic: &str, after: Position) {
        let _ = self.cmds.send(Cmd::Fetch { topic: topic.to_string(), after });
    }

    /// Why a publish cannot go out now (the 503's reason).
    pub(crate) fn down_reason(&self) -> String {
        let s = self.status();
        let ever = self.shared.ever_up.load(Ordering::SeqCst);
        format!(
            "the cluster link to {} is down ({} for {:.1} s{}): the publish was not sent to any node; the link reconnects by itself, retry",
            s.url,
            match (ever, self.shared.subscribed.load(Ordering::SeqCst)) {
                (true, true) => "lost",
                (true, false) => "connected, its subscriptions not confirmed yet",
                (false, _) => "not connected yet",
            },
            s.for_s,
            s.last_error.map(|e| format!("; last error: {e}")).unwrap_or_default()
        )
    }

    /// Say what went wrong (the status's `last_error`).
    pub(crate) fn note_error(&self, e: String) {
        self.shared.error(e);
    }

    pub(crate) fn failed(&self) {
        self.shared.publish_failures.fetch_add(1, Ordering::SeqCst);
    }

    /// Send `out` through NATS; the answer comes back as
    /// `ClusterEvent::Published { request, .. }`.
    pub(crate) fn publish(&self, request: u64, out: Vec<Out>) {
        let _ = self.cmds.send(Cmd::Publish { request, out });
    }

    /// Ask the other nodes who is subscribed to `topic`; their answers
    /// come as `ClusterEvent::Presence` after [`super::PRESENCE_WINDOW`].
    pub(crate) fn ask_presence(&self, request: u64, topic: &str) {
        let _ = self.cmds.send(Cmd::Presence { request, topic: topic.to_string() });
    }

    /// Ask the other nodes for their retained sets (the answers come as
    /// `ClusterEvent::Retained`), keeping at most `max_entries` messages
    /// and `max_bytes` of data.
    pub(crate) fn ask_retained(&self, max_entries: usize, max_bytes: u64) {
        let _ = self.cmds.send(Cmd::AskRetained { max_entries, max_bytes });
    }

    /// Tell the other nodes which MQTT client ids connected here at
    /// `at_us` (each lets go of its own connection or kept session of them).
    pub(crate) fn connected_here(&self, ids: Vec<super::OwnedId>, at_us: u64) {
        let _ = self.cmds.send(Cmd::ClientIds(super::ClientIds::batches(ids, at_us)));
    }

    /// Tell the other nodes this node's MQTT shared subscription groups
    /// (an [`super::groups::Announce`] body).
    pub(crate) fn announce_groups(&self, body: Vec<u8>) {
        let _ = self.cmds.send(Cmd::SharedGroups(body));
    }

    /// Ask the other nodes for the MQTT sessions of these client ids,
    /// whose CONNECTs came at `at_us`: answered by
    /// `ClusterEvent::SessionsHanded`.
    pub(crate) fn ask_sessions(&self, ids: Vec<super::OwnedId>, at_us: u64) {
        let _ = self.cmds.send(Cmd::AskSessions { ids, at_us });
    }

    /// Answer another node's question about sessions.
    pub(crate) fn hand_sessions(&self, reply: String, answer: super::sessions::Handing) {
        let _ = self.cmds.send(Cmd::HandSessions { reply, answer });
    }

    /// Tell the other nodes' subscribers who joined or left.
    pub(crate) fn notices(&self, notices: Vec<crate::proto::push::Notice>) {
        let _ = self.cmds.send(Cmd::Notices(serde_json::to_vec(&notices).expect("serializes")));
    }

    /// Answer a unicast another node routed here.
    pub(crate) fn reply(&self, subject: String, body: Vec<u8>) {
        let _ = self.cmds.send(Cmd::Reply { subject, body });
    }

    /// A worker's topics gained their first or lost their last subscriber.
    /// Returns the topics this node starts following.
    pub(crate) fn topics_changed(&mut self, worker: usize, changes: &[(String, bool)]) -> Vec<String> {
        let mut started = Vec::new();
        for (topic, on) in changes {
            if !super::topic_fits_subject(topic) {
                continue;
            }
            if *on {
                let set = self.topics.entry(topic.clone()).or_default();
                if set.is_empty() {
                    let _ = self.cmds.send(Cmd::Subscribe(topic.clone()));
                    started.push(topic.clone());
                }
                set.insert(worker);
            } else {
                self.drop_worker_topic(topic, worker);
            }
        }
        started
    }

    fn drop_worker_topic(&mut self, topic: &str, worker: usize) {
        if let Some(set) = self.topics.get_mut(topic) {
            set.remove(&worker);
            if set.is_empty() {
                self.topics.remove(topic);
                let _ = self.cmds.send(Cmd::Unsubscribe(topic.to_string()));
            }
        }
    }

    /// A worker exited: its subscribers are gone.
    pub(crate) fn worker_gone(&mut self, worker: usize) {
        let theirs: Vec<String> = self.topics.iter().filter(|(_, s)| s.contains(&worker)).map(|(t, _)| t.clone()).collect();
        for t in theirs {
            self.drop_worker_topic(&t, worker);
        }
    }
}

fn send(tx: &Sink<ClusterEvent>, ev: ClusterEvent) {
    tx(ev);
}

/// This node's identity on the link: its id and the key it signs with.
#[derive(Clone)]
pub(super) struct Me {
    node: String,
    key: ClusterKey,
    /// `--max-push-bytes`.
    max_push: usize,
    /// Signatures already taken (replays are refused).
    replays: Arc<Mutex<sign::Replays>>,
    /// Random per start, with `sent`: the `Nats-Msg-Id` of each publish
    /// to the stream (a retried one is stored once).
    boot: u64,
    sent: Arc<AtomicU64>,
}

/// A message as the link checks it, live or read back from the stream.
struct Parts<'a> {
    /// The plain subject it was signed for.
    subject: &'a str,
    headers: Option<&'a async_nats::HeaderMap>,
    payload: &'a [u8],
    reply: Option<&'a str>,
    /// Live: its signing time must be recent and its signature new. Read
    /// back from the stream: it is as old as it is.
    fresh: bool,
}

impl<'a> Parts<'a> {
    fn live(m: &'a async_nats::Message, subject: &'a str) -> Parts<'a> {
        Parts { subject, headers: m.headers.as_ref(), payload: &m.payload, reply: m.reply.as_deref(), fresh: true }
    }

    fn stored(s: &'a Stored, subject: &'a str) -> Parts<'a> {
        Parts { subject, headers: Some(&s.headers), payload: &s.data, reply: None, fresh: false }
    }

    fn get(&self, name: &str) -> &'a str {
        self.headers.and_then(|h| h.get(name)).map(|v| v.as_str()).unwrap_or("")
    }

    fn header(&self, name: &'static str) -> Result<&'a str, Malformed> {
        self.headers.and_then(|h| h.get(name)).map(|v| v.as_str()).ok_or(Malformed::NoHeader(name))
    }
}

impl Me {
    fn msg_id(&self) -> String {
        format!("{}-{:x}-{}", self.node, self.boot, self.sent.fetch_add(1, Ordering::Relaxed))
    }

    /// Headers that carry and sign a core message to `subject` (`position`
    /// is always empty: only [`Me::stored_headers`] place a message).
    pub(super) fn headers(&self, subject: &str, target: &str, publish_us: &str, position: &str, data: &[u8]) -> async_nats::HeaderMap {
        self.signed_headers(subject, target, publish_us, (position, ""), "", data)
    }

    /// Headers that carry and sign a core topic or broadcast message, with
    /// its MQTT metadata (`mqtt`, or empty).
    fn topic_headers(&self, subject: &str, publish_us: &str, mqtt: &str, data: &[u8]) -> async_nats::HeaderMap {
        self.signed_headers(subject, "", publish_us, ("", ""), mqtt, data)
    }

    /// Headers that carry and sign a message of the stream: at `at` in the
    /// cluster's history, after the topic's message at stream sequence
    /// `follows` (0: none).
    fn stored_headers(&self, subject: &str, publish_us: &str, at: Position, follows: u64, mqtt: &str, data: &[u8]) -> async_nats::HeaderMap {
        self.signed_headers(subject, "", publish_us, (&jslog::position_value(at), &follows.to_string()), mqtt, data)
    }

    fn signed_headers(
        &self,
        subject: &str,
        target: &str,
        publish_us: &str,
        (position, follows): (&str, &str),
        mqtt: &str,
        data: &[u8],
    ) -> async_nats::HeaderMap {
        let time_ms = sign::now_ms().to_string();
        let s = Signed { subject, origin: &self.node, target, publish_us, time_ms: &time_ms, position, follows, mqtt };
        let mut h = async_nats::HeaderMap::new();
        h.insert(H_ORIGIN, self.node.as_str());
        if !target.is_empty() {
            h.insert(H_TARGET, target);
        }
        if !publish_us.is_empty() {
            h.insert(H_PUBLISH_US, publish_us);
        }
        if !position.is_empty() {
            h.insert(H_POSITION, position);
        }
        if !follows.is_empty() {
            h.insert(H_FOLLOWS, follows);
        }
        if !mqtt.is_empty() {
            h.insert(super::H_MQTT, mqtt);
        }
        h.insert(H_TIME, time_ms.as_str());
        let signature = sign::sign(&self.key, &s, data);
        // A core message (no position) is not echoed back to this node, so
        // only a replay could bring it here: remember it as taken. A
        // stream's copy of its own publish does come back, once, from the
        // stream (and is placed by its position).
        if position.is_empty() {
            self.replays.lock().expect("replays").first(&signature, sign::now_ms());
        }
        h.insert(H_SIGNATURE, signature.as_str());
        h
    }

    /// Publish a signed answer to `reply`.
    async fn answer(&self, client: &async_nats::Client, reply: String, body: Vec<u8>) {
        let h = self.headers(&reply, "", "", "", &body);
        let _ = client.publish_with_headers(reply, h, body.into()).await;
    }

    /// Check a live message's signature, age and reply subject: Ok(origin).
    pub(super) fn check(&self, m: &async_nats::Message) -> Result<String, (Refusal, String)> {
        self.check_parts(&Parts::live(m, m.subject.as_str()))
    }

    fn check_parts(&self, m: &Parts) -> Result<String, (Refusal, String)> {
        let signed = Signed {
            subject: m.subject,
            origin: m.get(H_ORIGIN),
            target: m.get(H_TARGET),
            publish_us: m.get(H_PUBLISH_US),
            time_ms: m.get(H_TIME),
            position: m.get(H_POSITION),
            follows: m.get(H_FOLLOWS),
            mqtt: m.get(super::H_MQTT),
        };
        let signature = m.headers.and_then(|h| h.get(H_SIGNATURE)).map(|v| v.as_str());
        let on = m.subject;
        // A stored message is checked at its own signing time: it is as
        // old as the history keeps, and the stream stored it once.
        let now = if m.fresh { sign::now_ms() } else { signed.time_ms.parse().unwrap_or(0) };
        sign::verify(&self.key, &signed, m.payload, signature, now).map_err(|r| {
            let why = match r {
                Refusal::Unsigned => format!("refused an unsigned message on {on}: not from a node of this cluster"),
                Refusal::Stale => format!(
                    "refused a stale message on {on} (signed at {} ms, more than {} s from this node's clock: a replay, or clocks out of step)",
                    signed.time_ms,
                    sign::WINDOW.as_secs()
                ),
                _ => format!("refused a forged message on {on}: its signature does not match (a sender without this cluster's key, or a node with another --cluster-key-file)"),
            };
            (r, why)
        })?;
        if m.fresh && !self.replays.lock().expect("replays").first(signature.unwrap_or_default(), now) {
            return Err((Refusal::Replay, format!("refused a replayed message on {on}: this node already took that signed message")));
        }
        let origin = signed.origin.to_string();
        if let Some(reply) = m.reply {
            let mine = format!("{}.", super::inbox_prefix(&origin));
            if origin.is_empty() || !reply.starts_with(&mine) {
                return Err((Refusal::Reply, format!("refused a message on {on}: it asks for an answer on {reply}, outside its origin's inbox {mine}>")));
            }
        }
        Ok(origin)
    }

    /// Where a genuine message of the stream says it belongs (refusals
    /// counted).
    fn place(&self, s: &Stored, shared: &Shared) -> Option<Place> {
        let at = self.read_stored(s, shared)?.at?;
        let (follows, signed_ms) = (s.headers.get(H_FOLLOWS).and_then(|v| v.as_str().parse().ok())?, s.headers.get(H_TIME)?.as_str().parse().ok()?);
        Some(Place { at, follows, signed_ms })
    }

    /// A message of the stream, checked and read (refusals counted).
    fn read_stored(&self, s: &Stored, shared: &Shared) -> Option<Inbound> {
        let plain = jslog::plain_subject(&s.subject)?;
        let parts = Parts::stored(s, &plain);
        if let Err((r, why)) = self.check_parts(&parts) {
            shared.refuse(r, why);
            return None;
        }
        match decode(&parts, self.max_push) {
            Ok(m) if m.at.is_some() && parts.get(H_FOLLOWS).parse::<u64>().is_ok() => Some(m),
            Ok(_) => {
                shared.refuse(Refusal::Malformed, format!("refused a message of {}: no {H_POSITION} or {H_FOLLOWS} header", s.subject));
                None
            }
            Err(e) => {
                shared.refuse(Refusal::Malformed, format!("refused a message of {}: {e}", s.subject));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_waiting_for_its_copy_is_released_when_its_subject_is_unfollowed() {
        let shared = Shared::default();
        assert!(shared.await_copy("live.a", "m0", 1, 0).is_none(), "not followed: nothing to wait for");
        shared.follow("live.a", true);
        shared.follow("live.b", true);
        let mut a = shared.await_copy("live.a", "m1", 1, 0).expect("followed");
        let mut b = shared.await_copy("live.b", "m2", 2, 0).expect("followed");
        assert_eq!(a.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty));
        shared.follow("live.a", false);
        assert_eq!(a.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Closed), "released");
        assert_eq!(b.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty), "another subject's publish still waits");
        let own = shared.own.lock().unwrap();
        assert!(!own.contains_key("m1") && own.contains_key("m2"));
        drop(own);
        assert!(shared.await_copy("live.a", "m3", 3, 0).is_none(), "unfollowed");
    }

    /// Another node's message is read only when every part checks out;
    /// each refusal says which (the malformed kind a log line names).
    #[test]
    fn a_message_from_another_node_is_decoded_or_refused_by_kind() {
        let mut h = async_nats::HeaderMap::new();
        h.insert(H_PUBLISH_US, "1700000000000000");
        let parts = |subject: &'static str, h: &'static async_nats::HeaderMap, payload: &'static [u8]| Parts {
            subject,
            headers: Some(h),
            payload,
            reply: None,
            fresh: true,
        };
        let h: &'static async_nats::HeaderMap = Box::leak(Box::new(h));
        let m = decode(&parts("megaconn.topic.room/1", h, b"hi"), 16).expect("a topic message");
        assert_eq!((m.stream, m.topic.as_str(), m.data.as_slice(), m.publish_us), (Stream::Topic, "room/1", &b"hi"[..], 1_700_000_000_000_000));
        assert_eq!(decode(&parts("elsewhere.x", h, b""), 16).err(), Some(Malformed::Subject));
        assert_eq!(decode(&parts("megaconn.topic.room/1", h, &[0; 17]), 16).err(), Some(Malformed::TooLarge { len: 17, max: 16 }));
        assert!(matches!(decode(&parts("megaconn.topic.", h, b""), 16), Err(Malformed::Topic(_))), "an empty topic");
        assert_eq!(decode(&parts("megaconn.node.A", h, b""), 16).err(), Some(Malformed::NoHeader(H_TARGET)), "a unicast without its target");
        let mut bad = async_nats::HeaderMap::new();
        bad.insert(H_PUBLISH_US, "soon");
        bad.insert(H_TARGET, "not-an-id");
        bad.insert(H_POSITION, "3");
        let bad: &'static async_nats::HeaderMap = Box::leak(Box::new(bad));
        assert_eq!(decode(&parts("megaconn.node.A", bad, b""), 16).err(), Some(Malformed::Target("not-an-id".into())));
        assert_eq!(decode(&parts("megaconn.topic.t", bad, b""), 16).err(), Some(Malformed::Position("3".into())));
        let mut late = async_nats::HeaderMap::new();
        late.insert(H_PUBLISH_US, "soon");
        let late: &'static async_nats::HeaderMap = Box::leak(Box::new(late));
        assert_eq!(decode(&parts("megaconn.topic.t", late, b""), 16).err(), Some(Malformed::Stamp("soon".into())));
        let refused = decode(&parts(super::super::USERS, bad, b""), 16).unwrap_err();
        assert_eq!(refused, Malformed::NoUser("not-an-id".into()));
        assert!(refused.to_string().contains("Megaconn-Target 'not-an-id' names no user"), "{refused}");
    }
}
