//! The NATS link of one node: the `async-nats` client on its own thread,
//! driven by commands from the supervisor loop and reporting back on the
//! supervisor's channel.

use super::sign::{self, ClusterKey, Refusal, Signed, H_SIGNATURE, H_TIME};
use super::{
    ClusterConfig, ClusterEvent, Inbound, LinkStatus, PublishFailure, RemoteAnswer, BROADCAST, H_ORIGIN, H_PUBLISH_US, H_TARGET, NODE_PREFIX, TOPIC_PREFIX,
};
use crate::proto::push::Stream;
use crate::supervise::Sink;
use anyhow::{anyhow, Context, Result};
use futures_util::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// A subject nobody subscribes to: a request to it is answered by the
/// NATS server itself ("no responders"), after everything sent before it.
/// (A subscriber of `>` that never replies makes confirms time out: 504.)
const CONFIRM: &str = "megaconn.confirm";
/// How long a starting node waits for another node with its id to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a publish waits for NATS to take it (and a unicast for its
/// owner's answer) before it is answered 503/504.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnect back-off: 100 ms doubling to at most 2 s, for ever.
fn reconnect_delay(attempt: usize) -> Duration {
    Duration::from_millis((100u64 << attempt.min(5)).min(2000))
}

/// One message for NATS.
#[derive(Debug, Clone)]
pub struct Out {
    pub stream: Stream,
    pub topic: String,
    /// Unicast: (owner node, its local id).
    pub target: Option<(String, u64)>,
    pub publish_us: u64,
    pub data: Vec<u8>,
}

enum Cmd {
    Publish { request: u64, out: Vec<Out> },
    Reply { subject: String, body: Vec<u8> },
    Subscribe(String),
    Unsubscribe(String),
}

#[derive(Default)]
struct Shared {
    up: AtomicBool,
    ever_up: AtomicBool,
    changed: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
    reconnects: AtomicU64,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
    publish_failures: AtomicU64,
    /// Messages dropped, by [`Refusal::label`].
    refused: Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl Shared {
    fn on_event(&self, ev: async_nats::Event) {
        match ev {
            async_nats::Event::Connected => {
                if self.ever_up.swap(true, Ordering::SeqCst) {
                    self.reconnects.fetch_add(1, Ordering::SeqCst);
                }
                self.up.store(true, Ordering::SeqCst);
                *self.changed.lock().expect("link state") = Some(Instant::now());
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
            async_nats::Event::SlowConsumer(sid) => self.error(format!("slow consumer on subscription {sid}: NATS dropped messages")),
            async_nats::Event::LameDuckMode => self.error("the NATS server is entering lame duck mode".into()),
            _ => {}
        }
    }

    fn error(&self, e: String) {
        *self.last_error.lock().expect("link state") = Some(e);
    }

    /// Drop a message: count it by reason and say why.
    fn refuse(&self, r: Refusal, why: String) {
        *self.refused.lock().expect("link state").entry(r.label()).or_default() += 1;
        self.error(why);
    }
}

/// What to do when NATS refuses this node's credentials.
const AUTH_HINT: &str = "NATS refused this node's credentials; give what the NATS server requires: --cluster-user with --cluster-password-file, --cluster-token-file, --cluster-nkey-file or --cluster-creds (or nats://USER:PASS@HOST:PORT)";

/// A node's link, owned by the server supervisor.
pub struct Link {
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
    pub fn start(cfg: ClusterConfig, tx: Sink<ClusterEvent>) -> Result<Link> {
        super::check_node_id(&cfg.node).map_err(|e| anyhow!(e))?;
        cfg.check().map_err(|e| anyhow!(e))?;
        let (cmds, rx) = unbounded_channel();
        let shared = Arc::new(Shared::default());
        let (c, s) = (cfg.clone(), shared.clone());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the NATS link's runtime")?;
        std::thread::Builder::new().name("nats-link".into()).spawn(move || rt.block_on(run(c, s, rx, tx))).context("starting the NATS link thread")?;
        Ok(Link { cfg, cmds, shared, started: Instant::now(), topics: HashMap::new() })
    }

    pub fn up(&self) -> bool {
        self.shared.up.load(Ordering::SeqCst)
    }

    pub fn status(&self) -> LinkStatus {
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
            refused: self.shared.refused.lock().expect("link state").iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    /// Why a publish cannot go out now (the 503's reason).
    pub fn down_reason(&self) -> String {
        let s = self.status();
        let ever = self.shared.ever_up.load(Ordering::SeqCst);
        format!(
            "the cluster link to {} is down ({} for {:.1} s{}): the publish was not sent to any node; the link reconnects by itself, retry",
            s.url,
            if ever { "lost" } else { "not connected yet" },
            s.for_s,
            s.last_error.map(|e| format!("; last error: {e}")).unwrap_or_default()
        )
    }

    pub fn failed(&self) {
        self.shared.publish_failures.fetch_add(1, Ordering::SeqCst);
    }

    /// Send `out` through NATS; the answer comes back as
    /// `ClusterEvent::Published { request, .. }`.
    pub fn publish(&self, request: u64, out: Vec<Out>) {
        let _ = self.cmds.send(Cmd::Publish { request, out });
    }

    /// Answer a unicast another node routed here.
    pub fn reply(&self, subject: String, body: Vec<u8>) {
        let _ = self.cmds.send(Cmd::Reply { subject, body });
    }

    /// A worker's topics gained their first or lost their last subscriber.
    pub fn topics_changed(&mut self, worker: usize, changes: &[(String, bool)]) {
        for (topic, on) in changes {
            if !super::topic_fits_subject(topic) {
                continue;
            }
            if *on {
                let set = self.topics.entry(topic.clone()).or_default();
                if set.is_empty() {
                    let _ = self.cmds.send(Cmd::Subscribe(topic.clone()));
                }
                set.insert(worker);
            } else {
                self.drop_worker_topic(topic, worker);
            }
        }
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
    pub fn worker_gone(&mut self, worker: usize) {
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
struct Me {
    node: String,
    key: ClusterKey,
    /// `--max-push-bytes`.
    max_push: usize,
    /// Signatures already taken (replays are refused).
    replays: Arc<Mutex<sign::Replays>>,
}

impl Me {
    /// Headers that carry and sign a message to `subject`.
    fn headers(&self, subject: &str, target: &str, publish_us: &str, data: &[u8]) -> async_nats::HeaderMap {
        let time_ms = sign::now_ms().to_string();
        let s = Signed { subject, origin: &self.node, target, publish_us, time_ms: &time_ms };
        let mut h = async_nats::HeaderMap::new();
        h.insert(H_ORIGIN, self.node.as_str());
        if !target.is_empty() {
            h.insert(H_TARGET, target);
        }
        if !publish_us.is_empty() {
            h.insert(H_PUBLISH_US, publish_us);
        }
        h.insert(H_TIME, time_ms.as_str());
        h.insert(H_SIGNATURE, sign::sign(&self.key, &s, data).as_str());
        h
    }

    /// Publish a signed answer to `reply`.
    async fn answer(&self, client: &async_nats::Client, reply: String, body: Vec<u8>) {
        let h = self.headers(&reply, "", "", &body);
        let _ = client.publish_with_headers(reply, h, body.into()).await;
    }

    /// Check a message's signature, age and reply subject: Ok(origin).
    fn check(&self, m: &async_nats::Message) -> Result<String, (Refusal, String)> {
        let get = |name: &str| m.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str()).unwrap_or("");
        let signed = Signed { subject: m.subject.as_str(), origin: get(H_ORIGIN), target: get(H_TARGET), publish_us: get(H_PUBLISH_US), time_ms: get(H_TIME) };
        let signature = m.headers.as_ref().and_then(|h| h.get(H_SIGNATURE)).map(|v| v.as_str());
        let on = &m.subject;
        let now = sign::now_ms();
        sign::verify(&self.key, &signed, &m.payload, signature, now).map_err(|r| {
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
        if !self.replays.lock().expect("replays").first(signature.unwrap_or_default(), now) {
            return Err((Refusal::Replay, format!("refused a replayed message on {on}: this node already took that signed message")));
        }
        let origin = signed.origin.to_string();
        if let Some(reply) = &m.reply {
            let mine = format!("{}.", super::inbox_prefix(&origin));
            if origin.is_empty() || !reply.starts_with(&mine) {
                return Err((Refusal::Reply, format!("refused a message on {on}: it asks for an answer on {reply}, outside its origin's inbox {mine}>")));
            }
        }
        Ok(origin)
    }
}

async fn run(cfg: ClusterConfig, shared: Arc<Shared>, mut rx: UnboundedReceiver<Cmd>, tx: Sink<ClusterEvent>) {
    let s = shared.clone();
    let me = Me { node: cfg.node.clone(), key: cfg.key.clone().expect("checked by Link::start"), max_push: cfg.max_push, replays: Default::default() };
    let opts = async_nats::ConnectOptions::new()
        .name(format!("megaconn-{}", cfg.node))
        // Answers to this node's requests come only under its own inbox.
        .custom_inbox_prefix(super::inbox_prefix(&cfg.node))
        // A node delivers its own publishes itself: exactly once.
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
    let mut subs: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    for subject in [BROADCAST.to_string(), super::node_subject(&cfg.node)] {
        subs.insert(subject.clone(), forward(&client, subject, &me, &shared, &tx).await);
    }
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Subscribe(topic) => {
                let subject = super::topic_subject(&topic);
                let h = forward(&client, subject.clone(), &me, &shared, &tx).await;
                // Never two subscriptions of one subject: each would deliver.
                if let Some(old) = subs.insert(subject, h) {
                    old.abort();
                }
            }
            Cmd::Unsubscribe(topic) => {
                if let Some(h) = subs.remove(&super::topic_subject(&topic)) {
                    h.abort();
                }
            }
            Cmd::Reply { subject, body } => me.answer(&client, subject, body).await,
            Cmd::Publish { request, out } => {
                let (client, tx, shared, me) = (client.clone(), tx.clone(), shared.clone(), me.clone());
                tokio::spawn(async move {
                    let result = publish(&client, &me, out, &shared).await;
                    send(&tx, ClusterEvent::Published { request, result });
                });
            }
        }
    }
}

/// Subscribe to `subject` and hand every message to the supervisor.
/// Another live node already answers on this node's subject: two nodes
/// with one id would each take the other's unicasts.
/// Only an answer signed by a node with this id counts: anybody else
/// subscribed to the subject (a squatter) cannot keep this node out.
async fn id_taken(client: &async_nats::Client, cfg: &ClusterConfig, me: &Me, shared: &Shared) -> Option<String> {
    let subject = super::node_subject(&cfg.node);
    let inbox = client.new_inbox();
    let mut answers = client.subscribe(inbox.clone()).await.ok()?;
    let h = me.headers(&subject, "", "", b"");
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

async fn forward(client: &async_nats::Client, subject: String, me: &Me, shared: &Arc<Shared>, tx: &Sink<ClusterEvent>) -> tokio::task::AbortHandle {
    let (client, shared, tx, me) = (client.clone(), shared.clone(), tx.clone(), me.clone());
    tokio::spawn(async move {
        let mut sub = match client.subscribe(subject.clone()).await {
            Ok(s) => s,
            Err(e) => return shared.error(format!("cannot subscribe to {subject}: {e}")),
        };
        while let Some(m) = sub.next().await {
            // Unsigned, forged, stale or answer-elsewhere: dropped unanswered.
            if let Err((r, why)) = me.check(&m) {
                shared.refuse(r, why);
                continue;
            }
            shared.messages_in.fetch_add(1, Ordering::Relaxed);
            let probe = super::node_of(&m.subject) == Some(me.node.as_str()) && header(&m, H_TARGET).is_err() && m.payload.is_empty();
            match decode(&m, me.max_push) {
                Ok(inbound) => send(&tx, ClusterEvent::Message(inbound)),
                Err(_) if probe => {
                    // A node starting with this node's id asks whether it is taken.
                    if let Some(reply) = &m.reply {
                        me.answer(&client, reply.to_string(), serde_json::json!({ "node": me.node }).to_string().into_bytes()).await;
                    }
                }
                Err(e) => {
                    let e = format!("refused a message on {}: {e}", m.subject);
                    if let Some(reply) = &m.reply {
                        let body = serde_json::json!({ "error": e, "node": super::node_of(&m.subject) });
                        me.answer(&client, reply.to_string(), body.to_string().into_bytes()).await;
                    }
                    shared.refuse(Refusal::Malformed, e);
                }
            }
        }
    })
    .abort_handle()
}

fn header<'a>(m: &'a async_nats::Message, name: &str) -> Result<&'a str, String> {
    m.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str()).ok_or_else(|| format!("no {name} header (not from a megaconn node)"))
}

/// A message from another node, checked like an admin publish: a
/// malformed one must not reach the workers' framing.
fn decode(m: &async_nats::Message, max_push: usize) -> Result<Inbound, String> {
    let subject = m.subject.as_str();
    let (stream, topic) = if subject == BROADCAST {
        (Stream::Broadcast, String::new())
    } else if let Some(t) = subject.strip_prefix(TOPIC_PREFIX) {
        crate::proto::push::check_topic(t.as_bytes())?;
        (Stream::Topic, t.to_string())
    } else if subject.starts_with(NODE_PREFIX) {
        (Stream::Unicast, String::new())
    } else {
        return Err("not a megaconn subject".into());
    };
    if m.payload.len() > max_push {
        return Err(format!("{} bytes of data, more than a push carries here (--max-push-bytes {max_push})", m.payload.len()));
    }
    let target = match stream {
        Stream::Unicast => {
            let t = header(m, H_TARGET)?;
            Some(t.parse().map_err(|_| format!("{H_TARGET} '{t}' is not a connection id"))?)
        }
        _ => None,
    };
    let stamp = header(m, H_PUBLISH_US)?;
    Ok(Inbound {
        stream,
        topic,
        target,
        publish_us: stamp.parse().map_err(|_| format!("{H_PUBLISH_US} '{stamp}' is not a number"))?,
        origin: header(m, H_ORIGIN).unwrap_or("").to_string(),
        data: m.payload.to_vec(),
        reply: m.reply.as_ref().map(|r| r.to_string()),
    })
}

/// Send every message and have NATS confirm it routed them.
async fn publish(client: &async_nats::Client, me: &Me, out: Vec<Out>, shared: &Shared) -> Result<Vec<RemoteAnswer>, PublishFailure> {
    if client.connection_state() != async_nats::connection::State::Connected {
        return Err(PublishFailure { maybe_sent: false, reason: "the cluster link is down".into() });
    }
    // A reconnect discards what was still in the write buffer: if one
    // happens before the confirm, the outcome is unknown.
    let connects = client.statistics().connects.load(Ordering::SeqCst);
    let mut maybe_sent = false;
    let fail = |maybe_sent: bool, reason: String| PublishFailure { maybe_sent, reason };
    let mut answers = Vec::new();
    for o in out {
        let publish_us = o.publish_us.to_string();
        let sent_before = std::mem::replace(&mut maybe_sent, true);
        match &o.target {
            Some((owner, id)) => {
                let subject = super::node_subject(owner);
                let h = me.headers(&subject, &id.to_string(), &publish_us, &o.data);
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
                answers.push(answer);
            }
            None => {
                let subject = if o.stream == Stream::Topic { super::topic_subject(&o.topic) } else { BROADCAST.to_string() };
                let h = me.headers(&subject, "", &publish_us, &o.data);
                client.publish_with_headers(subject, h, o.data.into()).await.map_err(|e| fail(sent_before, format!("NATS did not take the publish: {e}")))?;
            }
        }
        shared.messages_out.fetch_add(1, Ordering::Relaxed);
    }
    // flush() only means "written to our socket". NATS handles a
    // connection's commands in order, so its answer to a request nobody
    // listens to ("no responders") proves it has routed every message
    // above to its subscribers.
    let confirmed = match tokio::time::timeout(CONFIRM_TIMEOUT, client.request(CONFIRM, Default::default())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
        Ok(Err(e)) => Err(format!("NATS did not confirm the publish: {e}")),
        Err(_) => Err(format!("NATS did not confirm the publish within {} s", CONFIRM_TIMEOUT.as_secs())),
    };
    let reconnected = client.statistics().connects.load(Ordering::SeqCst) != connects;
    match confirmed {
        Ok(()) if !reconnected => Ok(answers),
        Ok(()) => Err(fail(maybe_sent, "the cluster link reconnected while the publish was in flight, so part of it may be lost".into())),
        Err(e) => Err(fail(maybe_sent, e)),
    }
}
