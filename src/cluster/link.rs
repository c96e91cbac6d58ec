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
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

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

async fn run(cfg: ClusterConfig, shared: Arc<Shared>, mut rx: UnboundedReceiver<Cmd>, tx: Sink<ClusterEvent>) {
    let s = shared.clone();
    let me = Me {
        node: cfg.node.clone(),
        key: cfg.key.clone().expect("checked by Link::start"),
        max_push: cfg.max_push,
        replays: Default::default(),
        boot: rand::random(),
        sent: Default::default(),
    };
    let opts = async_nats::ConnectOptions::new()
        .name(format!("megaconn-{}", cfg.node))
        // Answers to this node's requests come only under its own inbox.
        .custom_inbox_prefix(super::inbox_prefix(&cfg.node))
        // A node delivers its own core publishes itself: exactly once.
        // (What the stream republishes comes from the NATS server, so
        // with JetStream a node gets its own topic messages back.)
        .no_echo()
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(reconnect_delay)
        .connection_timeout(Duration::from_secs(2))
        .request_timeout(Some(CONFIRM_TIMEOUT))
        .event_callback(move |ev| {
            let s = s.clone();
            async move { s.on_event(ev) }
        });
    let opts = match cfg.auth.clone().with_url_credentials(&cfg.url).apply(opts) {
        Ok(o) => o,
        Err(e) => return send(&tx, ClusterEvent::Fatal(e)),
    };
    let servers = match super::check_url(&cfg.url) {
        Ok(s) => s,
        Err(e) => return send(&tx, ClusterEvent::Fatal(super::auth::redact(&e))),
    };
    let client = match opts.connect(servers).await {
        Ok(c) => c,
        Err(e) => {
            shared.error(format!("cannot connect to {}: {e}", cfg.shown_url()));
            return;
        }
    };
    if let Some(e) = id_taken(&client, &cfg, &me, &shared).await {
        shared.error(e.clone());
        send(&tx, ClusterEvent::Fatal(e));
        return;
    }
    let log = match cfg.log {
        Some(lc) => {
            let log = Arc::new(Log::new(client.clone(), lc));
            // The stream first: what nodes subscribe to is what it republishes.
            loop {
                match log.ensure().await {
                    Ok(()) => break,
                    Err((true, why)) => {
                        shared.error(why.clone());
                        return send(&tx, ClusterEvent::Fatal(why));
                    }
                    Err((false, why)) => {
                        shared.error(why);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            let _ = shared.log.set(log.clone());
            Some(log)
        }
        None => None,
    };
    let f = Forwarder { client: client.clone(), me: me.clone(), shared: shared.clone(), tx: tx.clone(), log: log.clone() };
    // What a node subscribes to for a topic subject: with JetStream, what
    // the stream republishes of it (only what it stored, in its order).
    let sub_of = |subject: &str| if log.is_some() { jslog::live_subject(subject) } else { subject.to_string() };
    let mut subs: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    for subject in [
        sub_of(BROADCAST),
        super::node_subject(&cfg.node),
        super::USERS.to_string(),
        super::PRESENCE.to_string(),
        super::NOTICES.to_string(),
        RETAINED.to_string(),
        RETAINED_ASK.to_string(),
        super::CLIENT_IDS.to_string(),
        super::groups::SHARED_GROUPS.to_string(),
        super::sessions::SESSIONS_TAKE.to_string(),
        super::sessions::SESSIONS_TAKEN.to_string(),
    ] {
        let h = f.forward(subject.clone(), || shared.follow(&subject, true)).await;
        subs.insert(subject, h);
    }
    // Up (healthy, publishing) once NATS has them: a notice or unicast
    // another node sends before would reach no one here.
    f.confirm_subscription().await;
    shared.subscribed.store(true, Ordering::SeqCst);
    *shared.changed.lock().expect("link state") = Some(Instant::now());
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Subscribe(topic) => {
                let subject = sub_of(&super::topic_subject(&topic));
                let h = match topic == super::ANY_TOPIC {
                    true => f.forward_any(subject.clone()).await,
                    false => f.forward(subject.clone(), || shared.follow(&subject, true)).await,
                };
                // Never two subscriptions of one subject: each would deliver.
                if let Some(old) = subs.insert(subject, h) {
                    old.abort();
                }
            }
            Cmd::Unsubscribe(topic) => {
                let subject = sub_of(&super::topic_subject(&topic));
                shared.follow(&subject, false);
                if let Some(h) = subs.remove(&subject) {
                    h.abort();
                }
            }
            Cmd::Reply { subject, body } => me.answer(&client, subject, body).await,
            Cmd::Publish { request, out } => {
                let (client, tx, shared, me, log) = (client.clone(), tx.clone(), shared.clone(), me.clone(), log.clone());
                tokio::spawn(async move {
                    let result = publish(&client, &me, request, out, &shared, log.as_deref()).await;
                    send(&tx, ClusterEvent::Published { request, result });
                });
            }
            Cmd::ClientIds(bodies) => {
                for body in bodies {
                    let h = me.headers(super::CLIENT_IDS, "", "", "", &body);
                    if let Err(e) = client.publish_with_headers(super::CLIENT_IDS, h, body.into()).await {
                        shared.error(format!("cannot tell the other nodes which MQTT client ids connected here: {e}"));
                    }
                }
            }
            Cmd::SharedGroups(body) => {
                let h = me.headers(super::groups::SHARED_GROUPS, "", "", "", &body);
                if let Err(e) = client.publish_with_headers(super::groups::SHARED_GROUPS, h, body.into()).await {
                    shared.error(format!("cannot tell the other nodes this node's MQTT shared subscription groups: {e}"));
                }
            }
            Cmd::Notices(body) => {
                let h = me.headers(super::NOTICES, "", "", "", &body);
                if let Err(e) = client.publish_with_headers(super::NOTICES, h, body.into()).await {
                    shared.error(format!("cannot send presence notices: {e}"));
                }
            }
            Cmd::AskRetained { max_entries, max_bytes } => {
                let (client, tx, me, shared) = (client.clone(), tx.clone(), me.clone(), shared.clone());
                tokio::spawn(async move {
                    let answers = ask_retained(&client, &me, &shared, max_entries, max_bytes).await;
                    send(&tx, ClusterEvent::Retained(answers));
                });
            }
            Cmd::AskSessions { ids, at_us } => {
                let (client, tx, me, shared) = (client.clone(), tx.clone(), me.clone(), shared.clone());
                tokio::spawn(async move {
                    let handed = super::sessions::ask(&client, &me, &shared, ids, at_us).await;
                    send(&tx, ClusterEvent::SessionsHanded(handed));
                });
            }
            Cmd::HandSessions { reply, answer } => {
                for (lend, session) in answer.sessions {
                    me.answer(&client, reply.clone(), format!("{{\"session\":{session},\"lend\":{lend}}}").into_bytes()).await;
                }
                let done = super::sessions::Answer { done: true, busy: answer.busy, newer: answer.newer, owned: answer.owned, ..Default::default() };
                me.answer(&client, reply, serde_json::to_vec(&done).expect("serializes")).await;
            }
            Cmd::Presence { request, topic } => {
                let (client, tx, me, shared) = (client.clone(), tx.clone(), me.clone(), shared.clone());
                tokio::spawn(async move {
                    let answers = ask_presence(&client, &me, &shared, &topic).await;
                    send(&tx, ClusterEvent::Presence { request, answers });
                });
            }
            Cmd::Fetch { topic, after } => {
                let (f, log) = (f.clone(), log.clone());
                tokio::spawn(async move {
                    let result = match log {
                        Some(log) => f.recover(&log, &topic, after).await,
                        None => Err("the cluster's history is not in JetStream (--cluster-history off)".into()),
                    };
                    send(&f.tx, ClusterEvent::Fetched { topic, result });
                });
            }
        }
    }
}

async fn id_taken(client: &async_nats::Client, cfg: &ClusterConfig, me: &Me, shared: &Shared) -> Option<String> {
    let subject = super::node_subject(&cfg.node);
    let inbox = client.new_inbox();
    let mut answers = client.subscribe(inbox.clone()).await.ok()?;
    let h = me.headers(&subject, "", "", "", b"");
    client.publish_with_reply_and_headers(subject.clone(), inbox, h, Default::default()).await.ok()?;
    let end = tokio::time::Instant::now() + PROBE_TIMEOUT;
    // No responders, or NATS not reachable yet: the id is free as far as we can tell.
    while let Ok(Some(m)) = tokio::time::timeout_at(end, answers.next()).await {
        if m.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return None;
        }
        match me.check(&m) {
            Ok(origin) if origin == cfg.node => {
                return Some(format!(
                    "another server in the cluster at {} already has node id '{}' (it answered on {subject}); give every node a unique --node-id",
                    cfg.shown_url(),
                    cfg.node
                ))
            }
            Ok(origin) => shared.refuse(Refusal::Forged, format!("ignored an answer to the node id probe signed by node '{origin}', not '{}'", cfg.node)),
            Err((r, why)) => shared.refuse(r, format!("ignored an answer to the node id probe: {why}")),
        }
    }
    None
}

/// What hands messages from NATS to the supervisor.
#[derive(Clone)]
struct Forwarder {
    client: async_nats::Client,
    me: Me,
    shared: Arc<Shared>,
    tx: Sink<ClusterEvent>,
    log: Option<Arc<Log>>,
}

impl Forwarder {
    /// Subscribe to `subject` and hand every message to the supervisor.
    /// A stream's subject (JetStream) is followed without a gap: a jump
    /// in offsets, a reconnect or a message NATS dropped is filled from
    /// the stream.
    ///
    /// `followed` marks the subject as followed (this node's publishes to
    /// it then wait for their copy to come by): it is called once the
    /// stream's position is read and before the subscription, so every
    /// copy of such a publish comes after that position, live or filled.
    async fn forward(&self, subject: String, followed: impl FnOnce()) -> tokio::task::AbortHandle {
        let plain = jslog::plain_subject(&subject);
        let start = match &plain {
            Some(plain) => self.stream_head(plain).await,
            None => None,
        };
        followed();
        // Sent before this returns, so that a confirmation asked after it
        // covers it.
        let sub = self.client.subscribe(subject.clone()).await;
        let f = self.clone();
        tokio::spawn(async move {
            let Some(mut sub) = f.opened(&subject, sub) else { return };
            let mut catch_up = f.shared.catch_up.subscribe();
            catch_up.mark_unchanged();
            let mut last: Option<Head> = None;
            // A catch-up read that failed (the stream not answering yet
            // after a reconnect) is tried again, or what was stored while
            // away would be lost for this node's subscribers.
            let mut retry: Option<tokio::time::Instant> = None;
            // Any instant will do for the retry branch while it is off (no
            // clock read per message).
            let off = tokio::time::Instant::now();
            if let (Some(plain), Some(head)) = (&plain, start) {
                // What was stored between reading the position and the
                // subscription coming into force comes from the stream.
                last = Some(head);
                retry = f.catch_up(plain, &mut last).await;
            }
            loop {
                let retry_at = retry.unwrap_or(off);
                tokio::select! {
                    m = sub.next() => match (m, &plain) {
                        (None, _) => break,
                        (Some(m), Some(plain)) => f.live(&m, plain, &mut last).await,
                        (Some(m), None) => f.core(&m).await,
                    },
                    Ok(()) = catch_up.changed() => {
                        if let Some(plain) = &plain {
                            // After a reconnect the subscription is sent
                            // again: read the stream once it is in force, or
                            // what is stored in between would come neither
                            // live nor from the read.
                            retry = f.catch_up(plain, &mut last).await;
                        }
                    }
                    () = tokio::time::sleep_until(retry_at), if retry.is_some() => {
                        if let Some(plain) = &plain {
                            retry = f.catch_up(plain, &mut last).await;
                        }
                    }
                }
            }
        })
        .abort_handle()
    }

    /// Every topic's messages, for this node's MQTT wildcard filters
    /// (`super::ANY_TOPIC`): handed on as they come, with no gap filling
    /// (a wildcard follows no one topic's order). A topic also followed
    /// by name is left to that topic's forwarder.
    async fn forward_any(&self, subject: String) -> tokio::task::AbortHandle {
        let sub = self.client.subscribe(subject.clone()).await;
        let f = self.clone();
        tokio::spawn(async move {
            let Some(mut sub) = f.opened(&subject, sub) else { return };
            while let Some(m) = sub.next().await {
                f.any(&m);
            }
        })
        .abort_handle()
    }

    /// The subscription to `subject`, or None with the error said.
    fn opened(&self, subject: &str, sub: Result<async_nats::Subscriber, async_nats::SubscribeError>) -> Option<async_nats::Subscriber> {
        sub.map_err(|e| self.shared.error(format!("cannot subscribe to {subject}: {e}"))).ok()
    }

    /// One message of [`forward_any`](Self::forward_any).
    fn any(&self, m: &async_nats::Message) {
        if self.shared.followed.lock().expect("followed").contains(m.subject.as_str()) {
            return;
        }
        // Signed for its plain subject (JetStream republishes it under another).
        let plain = jslog::plain_subject(&m.subject).unwrap_or_else(|| m.subject.to_string());
        let parts = Parts::live(m, &plain);
        if let Err((r, why)) = self.me.check_parts(&parts) {
            return self.shared.refuse(r, why);
        }
        match decode(&parts, self.me.max_push) {
            Ok(inbound) if inbound.stream == Stream::Topic => {
                self.shared.messages_in.fetch_add(1, Ordering::Relaxed);
                send(&self.tx, ClusterEvent::Message(inbound));
            }
            Ok(_) => self.shared.refuse(Refusal::Malformed, format!("refused a message on {}: not a topic message", m.subject)),
            Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused a message on {}: {e}", m.subject)),
        }
    }

    /// Where a new follower of `plain` starts: the stream's last message
    /// of it (or its beginning when it has none). A follower that starts
    /// where the stream is, instead of at its first live message, fills
    /// what it missed across a reconnect even if no message came before it
    /// (issue 42, finding 4). None: not read (the follower then starts at
    /// its first live message, as it did before).
    async fn stream_head(&self, plain: &str) -> Option<Head> {
        let log = self.log.as_ref()?;
        let check = |s: &Stored| self.me.place(s, &self.shared);
        match tokio::time::timeout(jslog::FETCH_TIMEOUT, log.last(plain, &check)).await {
            Ok(Ok(head)) => Some(head.unwrap_or(Head { at: Position { epoch: 0, offset: 0 }, seq: 0 })),
            Ok(Err(e)) => {
                self.shared.error(format!("cannot read where {plain} is in the stream: {e}"));
                None
            }
            Err(_) => {
                self.shared.error(format!("reading where {plain} is in the stream took over {} s", jslog::FETCH_TIMEOUT.as_secs()));
                None
            }
        }
    }

    /// Wait (bounded) until NATS has taken this client's subscriptions:
    /// [`confirmed`] is answered after every SUB sent before it.
    async fn confirm_subscription(&self) {
        if let Err(e) = confirmed(&self.client, SUB_CONFIRM_TIMEOUT).await {
            self.shared.error(format!("{e} (a subscription sent before it may not be in force yet)"));
        }
    }

    /// Read what the stream stored of `plain` after `last`, once the
    /// subscription is in force. When to try again if the read failed.
    async fn catch_up(&self, plain: &str, last: &mut Option<Head>) -> Option<tokio::time::Instant> {
        let from = (*last)?;
        self.confirm_subscription().await;
        match self.fill(plain, from, None, last).await {
            true => None,
            false => Some(tokio::time::Instant::now() + CATCH_UP_RETRY),
        }
    }

    /// A message on a core subject (unicasts, and everything with
    /// `--cluster-history off`).
    async fn core(&self, m: &async_nats::Message) {
        let me = &self.me;
        // Unsigned, forged, stale or answer-elsewhere: dropped unanswered.
        let origin = match me.check(m) {
            Ok(origin) => origin,
            Err((r, why)) => return self.shared.refuse(r, why),
        };
        let parts = Parts::live(m, m.subject.as_str());
        // MQTT's retained sets and client ids: not messages for connections.
        if m.subject.as_str() == RETAINED {
            let entry = parts.header(H_TARGET).and_then(|topic| {
                let mqtt = super::MqttMeta::parse(parts.get(super::H_MQTT))?;
                let stamp = parts.header(H_PUBLISH_US)?;
                let publish_us = stamp.parse().map_err(|_| Malformed::Stamp(stamp.to_string()))?;
                retained::checked(topic, m.payload.to_vec(), mqtt, publish_us, me.max_push)
            });
            match entry {
                Ok(e) => send(&self.tx, ClusterEvent::RetainedSet(e)),
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused a retained message: {e}")),
            }
            return;
        }
        if m.subject.as_str() == super::CLIENT_IDS {
            match super::ClientIds::parse(&m.payload) {
                Ok(c) => {
                    let at_us = c.at_us;
                    send(&self.tx, ClusterEvent::ClientIds { node: origin, ids: c.owned(), at_us })
                }
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused MQTT client ids from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == super::sessions::SESSIONS_TAKE {
            match (super::ClientIds::parse(&m.payload), &m.reply) {
                (Ok(a), Some(reply)) => {
                    let at_us = a.at_us;
                    send(&self.tx, ClusterEvent::SessionsAsked { node: origin, ids: a.owned(), at_us, reply: reply.to_string() })
                }
                (Ok(_), None) => {
                    self.shared.refuse(Refusal::Malformed, format!("refused a question about MQTT sessions from node '{origin}' without a reply subject"))
                }
                (Err(e), _) => self.shared.refuse(Refusal::Malformed, format!("refused a question about MQTT sessions from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == super::sessions::SESSIONS_TAKEN {
            match super::sessions::Taken::parse(&m.payload) {
                Ok(t) if t.to == self.me.node => send(&self.tx, ClusterEvent::SessionsTaken { node: origin, lend: t.lend }),
                Ok(_) => {}
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused a confirmation of an MQTT session from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == super::groups::SHARED_GROUPS {
            match super::groups::Announce::parse(&m.payload, super::groups::MAX_GROUPS) {
                Ok(announce) => {
                    self.shared.peers.lock().expect("peers").heard(&origin, Instant::now());
                    send(&self.tx, ClusterEvent::SharedGroups { node: origin, announce })
                }
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused MQTT shared subscription groups from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == RETAINED_ASK {
            match &m.reply {
                Some(reply) => send(&self.tx, ClusterEvent::RetainedAsked { reply: reply.to_string() }),
                None => self.shared.refuse(Refusal::Malformed, "refused a retained set question without a reply subject".into()),
            }
            return;
        }
        self.shared.messages_in.fetch_add(1, Ordering::Relaxed);
        if m.subject.as_str() == super::NOTICES {
            match serde_json::from_slice(&m.payload) {
                Ok(n) => send(&self.tx, ClusterEvent::Notices(n)),
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused presence notices: {e}")),
            }
            return;
        }
        if m.subject.as_str() == super::PRESENCE {
            match (parts.header(H_TARGET), &m.reply) {
                (Ok(topic), Some(reply)) => send(&self.tx, ClusterEvent::PresenceAsked { topic: topic.to_string(), reply: reply.to_string() }),
                _ => self.shared.refuse(Refusal::Malformed, "refused a presence question without a topic or a reply subject".into()),
            }
            return;
        }
        let probe = super::node_of(&m.subject) == Some(me.node.as_str()) && parts.header(H_TARGET).is_err() && m.payload.is_empty();
        match decode(&parts, me.max_push) {
            Ok(inbound) => send(&self.tx, ClusterEvent::Message(inbound)),
            Err(_) if probe => {
                // A node starting with this node's id asks whether it is taken.
                if let Some(reply) = &m.reply {
                    me.answer(&self.client, reply.to_string(), serde_json::json!({ "node": me.node }).to_string().into_bytes()).await;
                }
            }
            Err(e) => {
                let e = format!("refused a message on {}: {e}", m.subject);
                if let Some(reply) = &m.reply {
                    let body = serde_json::json!({ "error": e, "node": super::node_of(&m.subject) });
                    me.answer(&self.client, reply.to_string(), body.to_string().into_bytes()).await;
                }
                self.shared.refuse(Refusal::Malformed, e);
            }
        }
    }

    /// A message the stream republished: in order after `last`, or the
    /// gap before it is filled from the stream first.
    async fn live(&self, m: &async_nats::Message, plain: &str, last: &mut Option<Head>) {
        let parts = Parts::live(m, plain);
        if let Err((r, why)) = self.me.check_parts(&parts) {
            return self.shared.refuse(r, why);
        }
        let seq = parts.get("Nats-Sequence").parse::<u64>().unwrap_or(0);
        let inbound = match decode(&parts, self.me.max_push) {
            Ok(i) if i.at.is_some() && seq > 0 && parts.get(H_FOLLOWS).parse::<u64>().is_ok() => i,
            Ok(_) => {
                return self
                    .shared
                    .refuse(Refusal::Malformed, format!("refused a message on {}: no {H_POSITION}, {H_FOLLOWS} or Nats-Sequence header", m.subject))
            }
            Err(e) => return self.shared.refuse(Refusal::Malformed, format!("refused a message on {}: {e}", m.subject)),
        };
        let at = inbound.at.expect("checked");
        if let Some(l) = *last {
            if l.at.epoch == at.epoch && at.offset <= l.at.offset {
                return;
            }
            // Checked live (signed within the window of now): stored now.
            // A sequence not after the head's: NATS lost the stream (memory
            // storage) and this is a new one, with nothing known before it.
            let (follows, now) = (parts.get(H_FOLLOWS).parse().unwrap_or(u64::MAX), sign::now_ms());
            let place = Place { at, follows, signed_ms: now };
            let mut chain = if seq > l.seq { l.chain() } else { jslog::Chain::default() };
            if !chain.admit(seq, place, now) {
                if let Some(log) = &self.log {
                    log.poisoned(&Stored { seq, subject: m.subject.to_string(), headers: Default::default(), data: Default::default(), stored_ms: now }, place);
                }
                return;
            }
            // Epoch 0: the stream had nothing of the topic when this node
            // began to follow it, so a first message after offset 1 says
            // some came by unseen (across a reconnect whose catch-up read
            // failed, say).
            if (l.at.epoch == at.epoch || l.at.epoch == 0) && at.offset > l.at.offset + 1 {
                self.fill(plain, l, Some(at.offset), last).await;
                if last.is_some_and(|l| l.at.epoch == at.epoch && l.at.offset >= at.offset) {
                    return;
                }
            }
        }
        self.pass(inbound, parts.get("Nats-Msg-Id"), Head { at, seq }, plain, last);
    }

    /// Hand a message on in order. This node's own publish delivers its
    /// message itself: the supervisor is told where it goes in the order
    /// (`Mine`), and the publish that it may answer now.
    fn pass(&self, inbound: Inbound, msg_id: &str, head: Head, plain: &str, last: &mut Option<Head>) {
        if let Some(log) = &self.log {
            log.saw(&jslog::log_subject(plain), head);
        }
        *last = Some(head);
        let own = self.shared.own.lock().expect("own").remove(msg_id);
        if let Some(own) = own {
            send(&self.tx, ClusterEvent::Mine { request: own.request, index: own.index, topic: inbound.history_topic(), at: head.at });
            let _ = own.seen.send(head.at);
            return;
        }
        self.shared.messages_in.fetch_add(1, Ordering::Relaxed);
        send(&self.tx, ClusterEvent::Message(inbound));
    }

    /// Hand on what the stream has of `plain` after `from` (a gap before
    /// offset `upto`, or a catch-up after a reconnect).
    /// False when the stream could not be read.
    async fn fill(&self, plain: &str, from: Head, upto: Option<u64>, last: &mut Option<Head>) -> bool {
        let Some(log) = &self.log else { return true };
        let check = |s: &Stored| self.me.place(s, &self.shared);
        let keep = |at: Position| at.epoch != from.at.epoch || at.offset > from.at.offset;
        // Epoch 0: the stream had nothing of `plain` when this node began
        // to follow it; all it has is after that, and none of it counts
        // as lost.
        let known = from.at.epoch != 0;
        let got = match log.fetch(plain, from, &keep, &check, jslog::MAX_FILL_BYTES).await {
            Ok(got) => got,
            Err(e) => {
                if let Some(upto) = upto.filter(|_| known) {
                    log.count(|c| {
                        c.gaps += 1;
                        c.gap_lost += upto - from.at.offset - 1;
                    });
                }
                self.shared.error(format!("cannot fill a gap in {plain}: {e}"));
                return false;
            }
        };
        // A gap seen live ends at `upto`; after a reconnect, at the first
        // message the stream still has when it no longer has those before
        // (over --history, or older than --history-ttl): those are lost.
        let first = got.iter().find(|(at, _)| at.epoch == from.at.epoch).map(|(at, _)| at.offset);
        if let Some(end) = upto.or(first.filter(|o| *o > from.at.offset + 1)).filter(|_| known) {
            let found = got.iter().filter(|(at, _)| at.epoch == from.at.epoch && at.offset < end).count() as u64;
            let lost = (end - from.at.offset - 1).saturating_sub(found);
            log.count(|c| {
                c.gaps += 1;
                c.gap_lost += lost;
            });
            if lost > 0 {
                self.shared.error(format!(
                    "{lost} messages of {plain} before offset {end} were no longer in the stream when this node read them (it keeps --history per topic, for --history-ttl): this node's subscribers miss them"
                ));
            }
        }
        for (at, s) in got {
            if let Some(inbound) = self.me.read_stored(&s, &self.shared) {
                log.count(|c| c.gap_messages += 1);
                let msg_id = s.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string()).unwrap_or_default();
                self.pass(inbound, &msg_id, Head { at, seq: s.seq }, plain, last);
            }
        }
        true
    }

    /// What the stream has of `topic` (`*`: broadcasts) after `after`,
    /// for a subscriber this node's history cannot answer.
    /// `after` u64::MAX: only the last message (where the topic is).
    async fn recover(&self, log: &Log, topic: &str, after: Position) -> Result<Vec<Inbound>, String> {
        log.count(|c| c.fetches += 1);
        let plain = if topic == crate::proto::push::BROADCAST_TOPIC { BROADCAST.to_string() } else { super::topic_subject(topic) };
        let check = |s: &Stored| self.me.place(s, &self.shared);
        if after.offset == u64::MAX {
            let last = log.tip(&plain, &check).await?.and_then(|(_, s)| s);
            return Ok(last.and_then(|s| self.me.read_stored(&s, &self.shared)).into_iter().collect());
        }
        let keep = |at: Position| after.epoch == 0 || at.epoch != after.epoch || at.offset > after.offset;
        let start = Head { at: Position { epoch: 0, offset: 0 }, seq: 0 };
        let got = log.fetch(&plain, start, &keep, &check, jslog::MAX_RECOVER_BYTES).await?;
        Ok(got.iter().filter_map(|(_, s)| self.me.read_stored(s, &self.shared)).collect())
    }
}

/// A message from another node, checked like an admin publish: a
/// malformed one must not reach the workers' framing.
fn decode(m: &Parts, max_push: usize) -> Result<Inbound, Malformed> {
    let subject = m.subject;
    let (stream, topic) = if subject == BROADCAST {
        (Stream::Broadcast, String::new())
    } else if let Some(t) = subject.strip_prefix(TOPIC_PREFIX) {
        crate::proto::push::check_topic(t.as_bytes()).map_err(Malformed::Topic)?;
        (Stream::Topic, t.to_string())
    } else if subject.starts_with(NODE_PREFIX) || subject == super::USERS {
        (Stream::Unicast, String::new())
    } else {
        return Err(Malformed::Subject);
    };
    if m.payload.len() > max_push {
        return Err(Malformed::TooLarge { len: m.payload.len(), max: max_push });
    }
    let mut user = None;
    let mut close = false;
    let target = match stream {
        Stream::Unicast if subject == super::USERS => {
            let t = m.header(H_TARGET)?;
            let (name, shut) = match (t.strip_prefix(USER_PUSH), t.strip_prefix(USER_CLOSE)) {
                (Some(n), _) => (n, false),
                (_, Some(n)) => (n, true),
                _ => return Err(Malformed::NoUser(t.to_string())),
            };
            user = Some(name.to_string());
            close = shut;
            None
        }
        Stream::Unicast => {
            let t = m.header(H_TARGET)?;
            Some(t.parse().map_err(|_| Malformed::Target(t.to_string()))?)
        }
        _ => None,
    };
    let stamp = m.header(H_PUBLISH_US)?;
    let at = match m.get(H_POSITION) {
        "" => None,
        v => Some(jslog::parse_position(v).ok_or_else(|| Malformed::Position(v.to_string()))?),
    };
    Ok(Inbound {
        stream,
        topic,
        target,
        publish_us: stamp.parse().map_err(|_| Malformed::Stamp(stamp.to_string()))?,
        data: m.payload.to_vec(),
        reply: m.reply.map(|r| r.to_string()),
        at,
        user,
        close,
        mqtt: match m.get(super::H_MQTT) {
            "" => None,
            v => Some(super::MqttMeta::parse(v)?),
        },
    })
}

/// Ask every node for its retained set and collect the signed chunks
/// until none came for [`retained::QUIET`] (at most
/// [`retained::ANSWER_WINDOW`]), keeping at most `max_entries` messages
/// and `max_bytes` of data (the rest counted dropped).
async fn ask_retained(client: &async_nats::Client, me: &Me, shared: &Shared, max_entries: usize, max_bytes: u64) -> retained::Answers {
    let mut got = retained::Answers::default();
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return got };
    let h = me.headers(RETAINED_ASK, "", "", "", b"");
    if let Err(e) = client.publish_with_reply_and_headers(RETAINED_ASK, inbox, h, Default::default()).await {
        shared.error(format!("cannot ask the other nodes for their retained messages: {e}"));
        return got;
    }
    let (mut nodes, mut all) = (std::collections::HashSet::new(), Vec::new());
    // What a chunk may add before the merge (every node sends the same
    // set): the asker's bounds, for each of a few nodes.
    let most = max_entries.saturating_mul(4).max(1024);
    let end = tokio::time::Instant::now() + retained::ANSWER_WINDOW;
    loop {
        let until = end.min(tokio::time::Instant::now() + retained::QUIET);
        let Ok(Some(chunk)) = tokio::time::timeout_at(until, sub.next()).await else { break };
        // NATS's own "no responders" (no other node yet): nobody answers.
        if chunk.status.is_some() {
            break;
        }
        let node = match me.check(&chunk) {
            Ok(n) => n,
            Err((r, why)) => {
                shared.refuse(r, why);
                continue;
            }
        };
        match retained::decode_chunk(&chunk.payload, me.max_push, &mut got.dropped) {
            Ok(entries) => {
                nodes.insert(node);
                if all.len() + entries.len() > most {
                    // Keep the newest of each topic so far, then go on.
                    all = retained::newest(all.into_iter(), max_entries, max_bytes, &mut got.dropped);
                }
                all.extend(entries);
            }
            Err(e) => shared.refuse(Refusal::Malformed, format!("refused a retained set from node '{node}': {e}")),
        }
    }
    got.entries = retained::newest(all.into_iter(), max_entries, max_bytes, &mut got.dropped);
    got.nodes = nodes.len();
    got
}

/// Ask every node who is subscribed to `topic` and collect what they
/// answer within [`super::PRESENCE_WINDOW`] (signed answers only).
async fn ask_presence(client: &async_nats::Client, me: &Me, shared: &Shared, topic: &str) -> Vec<super::NodePresence> {
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return Vec::new() };
    let h = me.headers(super::PRESENCE, topic, "", "", b"");
    if client.publish_with_reply_and_headers(super::PRESENCE, inbox, h, Default::default()).await.is_err() {
        return Vec::new();
    }
    let mut answers = Vec::new();
    let deadline = tokio::time::Instant::now() + super::PRESENCE_WINDOW;
    while let Ok(Some(reply)) = tokio::time::timeout_at(deadline, sub.next()).await {
        let node = match me.check(&reply) {
            Ok(n) => n,
            Err((r, why)) => {
                shared.refuse(r, why);
                continue;
            }
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&reply.payload) else { continue };
        let users = v["users"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| Some((u["user"].as_str()?.to_string(), u["connections"].as_u64()?, u.get("info").map(|i| i.to_string()))))
            .collect();
        answers.push(super::NodePresence { node, users, anonymous: v["anonymous"].as_u64().unwrap_or(0) });
    }
    answers
}

/// Send every message; have NATS confirm it routed them (core) or the
/// stream that it stored them (topics and broadcasts with JetStream).
async fn publish(client: &async_nats::Client, me: &Me, request: u64, out: Vec<Out>, shared: &Shared, log: Option<&Log>) -> Result<Sent, PublishFailure> {
    if client.connection_state() != async_nats::connection::State::Connected {
        return Err(PublishFailure { maybe_sent: false, reason: "the cluster link is down".into() });
    }
    // A reconnect discards what was still in the write buffer: if one
    // happens before the confirm, the outcome is unknown.
    let connects = client.statistics().connects.load(Ordering::SeqCst);
    let mut maybe_sent = false;
    let mut core_sent = false;
    let fail = |maybe_sent: bool, reason: String| PublishFailure { maybe_sent, reason };
    let mut sent = Sent::default();
    for (index, o) in out.into_iter().enumerate() {
        let publish_us = o.publish_us.to_string();
        let mqtt = o.mqtt.as_ref().map(super::MqttMeta::header).unwrap_or_default();
        let sent_before = std::mem::replace(&mut maybe_sent, true);
        let mut at = None;
        if let Some((user, close)) = &o.user {
            // Every node takes it; not kept (a per-user push has no offset).
            let target = format!("{}{user}", if *close { USER_CLOSE } else { USER_PUSH });
            let h = me.headers(super::USERS, &target, &publish_us, "", &o.data);
            client.publish_with_headers(super::USERS, h, o.data.into()).await.map_err(|e| fail(sent_before, format!("NATS did not take the publish: {e}")))?;
            core_sent = true;
            sent.positions.push(None);
            shared.messages_out.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match &o.target {
            Some((owner, id)) => {
                let subject = super::node_subject(owner);
                let h = me.headers(&subject, &id.to_string(), &publish_us, "", &o.data);
                let gid = super::global_id(owner, *id);
                let answer = |status: u16, detail: serde_json::Value| RemoteAnswer { node: owner.clone(), id: gid.clone(), status, detail };
                let answer = match client.request_with_headers(subject, h, o.data.into()).await {
                    Ok(reply) if !me.check(&reply).is_ok_and(|origin| origin == *owner) => {
                        let (r, why) = me.check(&reply).err().unwrap_or((Refusal::Forged, "signed by another node".to_string()));
                        shared.refuse(r, format!("dropped an answer from {owner} not signed by it: {why}"));
                        answer(
                            504,
                            serde_json::json!({"error": format!("the answer for node '{owner}' was not signed by it ({why}); the message may or may not have been delivered")}),
                        )
                    }
                    Ok(reply) => {
                        let detail: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap_or_default();
                        let status = if detail.get("error").is_some() {
                            400
                        } else if detail["not_found"].as_u64() == Some(0) {
                            200
                        } else {
                            404
                        };
                        answer(status, detail)
                    }
                    Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => answer(
                        404,
                        serde_json::json!({"error": format!("no node '{owner}' in the cluster (nobody subscribes to {})", super::node_subject(owner))}),
                    ),
                    Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => answer(
                        504,
                        serde_json::json!({"error": format!("node '{owner}' did not answer within {} s; the message may or may not have been delivered", CONFIRM_TIMEOUT.as_secs())}),
                    ),
                    Err(e) => return Err(fail(true, format!("unicast to {gid}: {e}"))),
                };
                sent.remote.push(answer);
            }
            None => {
                // A retained publish (or clear) also goes to every node's
                // retained set, followed there or not: once it went out.
                let retained_copy = (o.stream == Stream::Topic && o.mqtt.as_ref().is_some_and(|m| m.retain))
                    .then(|| (o.topic.clone(), me.signed_headers(RETAINED, &o.topic, &publish_us, ("", ""), &mqtt, &o.data), o.data.clone()));
                let subject = if o.stream == Stream::Topic { super::topic_subject(&o.topic) } else { BROADCAST.to_string() };
                match log {
                    Some(log) => {
                        let check = |s: &Stored| me.place(s, shared);
                        let sign = |at: Position, follows: u64| me.stored_headers(&subject, &publish_us, at, follows, &mqtt, &o.data);
                        let msg_id = me.msg_id();
                        // Followed here: wait for the stream's copy to go
                        // by, so every message before it reached the
                        // supervisor first and this one is next there.
                        let seen = shared.await_copy(&jslog::live_subject(&subject), &msg_id, request, index);
                        let stored = log.publish(&subject, &msg_id, o.data.clone().into(), sign, &check).await;
                        let stored = match (stored, seen) {
                            (r, None) => r,
                            (Ok(at), Some(seen)) => {
                                // The follower may be filling a gap from the
                                // stream first (at most FETCH_TIMEOUT).
                                let waited = tokio::time::timeout(CONFIRM_TIMEOUT + jslog::FETCH_TIMEOUT, seen).await;
                                let taken = shared.own.lock().expect("own").remove(&msg_id).is_none();
                                match waited {
                                    Ok(Ok(at)) => Ok(at),
                                    _ if taken => Ok(at),
                                    // Not seen: delivering it now could put it
                                    // before messages still on their way here;
                                    // it is delivered when its copy arrives.
                                    _ => Err(jslog::Failed {
                                        maybe: true,
                                        reason: format!(
                                            "stored in the cluster's history at {}, but this node's link did not see it come back within {} s (it delivers it here when it does)",
                                            jslog::position_value(at),
                                            (CONFIRM_TIMEOUT + jslog::FETCH_TIMEOUT).as_secs()
                                        ),
                                    }),
                                }
                            }
                            (Err(failed), Some(seen)) => {
                                // The stream's copy went by: it was stored
                                // (and is this node's to deliver).
                                let taken = shared.own.lock().expect("own").remove(&msg_id).is_none();
                                match (taken, seen.await) {
                                    (true, Ok(at)) => Ok(at),
                                    _ => Err(failed),
                                }
                            }
                        };
                        at = Some(stored.map_err(|f| fail(sent_before || f.maybe, f.reason))?);
                    }
                    None => {
                        let h = me.topic_headers(&subject, &publish_us, &mqtt, &o.data);
                        client
                            .publish_with_headers(subject, h, o.data.into())
                            .await
                            .map_err(|e| fail(sent_before, format!("NATS did not take the publish: {e}")))?;
                        core_sent = true;
                    }
                }
                if let Some((topic, h, data)) = retained_copy {
                    if let Err(e) = client.publish_with_headers(RETAINED, h, data.into()).await {
                        shared.error(format!("cannot send the retained message of {topic} to the other nodes: {e}"));
                    }
                    core_sent = true;
                }
            }
        }
        sent.positions.push(at);
        shared.messages_out.fetch_add(1, Ordering::Relaxed);
    }
    if !core_sent {
        // Unicasts were answered and the stream acknowledged what it stored.
        return Ok(sent);
    }
    // Every message above routed to its subscribers ([`confirmed`]).
    let confirmed = confirmed(client, CONFIRM_TIMEOUT).await;
    let reconnected = client.statistics().connects.load(Ordering::SeqCst) != connects;
    match confirmed {
        Ok(()) if !reconnected => Ok(sent),
        Ok(()) => Err(fail(maybe_sent, "the cluster link reconnected while the publish was in flight, so part of it may be lost".into())),
        Err(e) => Err(fail(maybe_sent, e)),
    }
}

/// Whether NATS has handled everything this client sent before the call.
/// flush() only means "written to our socket"; NATS handles a
/// connection's commands in order, so its answer to a request nobody
/// listens to ("no responders") proves it has taken every subscription
/// and routed every message sent before it.
async fn confirmed(client: &async_nats::Client, within: Duration) -> Result<(), String> {
    match tokio::time::timeout(within, client.request(CONFIRM, Default::default())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
        Ok(Err(e)) => Err(format!("NATS did not confirm what this node sent: {e}")),
        Err(_) => Err(format!("NATS did not confirm what this node sent within {} s", within.as_secs())),
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
