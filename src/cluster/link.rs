//! The NATS link of one node: the `async-nats` client on its own thread,
//! driven by commands from the supervisor loop and reporting back on the
//! supervisor's channel.

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
            async_nats::Event::ClientError(e) => self.error(format!("{e}")),
            async_nats::Event::ServerError(e) => self.error(format!("NATS server error: {e}")),
            async_nats::Event::SlowConsumer(sid) => self.error(format!("slow consumer on subscription {sid}: NATS dropped messages")),
            async_nats::Event::LameDuckMode => self.error("the NATS server is entering lame duck mode".into()),
            _ => {}
        }
    }

    fn error(&self, e: String) {
        *self.last_error.lock().expect("link state") = Some(e);
    }
}

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
            url: self.cfg.url.clone(),
            node: self.cfg.node.clone(),
            up: self.up(),
            for_s: since.elapsed().as_secs_f64(),
            last_error: self.shared.last_error.lock().expect("link state").clone(),
            reconnects: self.shared.reconnects.load(Ordering::SeqCst),
            messages_in: self.shared.messages_in.load(Ordering::SeqCst),
            messages_out: self.shared.messages_out.load(Ordering::SeqCst),
            publish_failures: self.shared.publish_failures.load(Ordering::SeqCst),
            topics: self.topics.len() as u64,
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

async fn run(cfg: ClusterConfig, shared: Arc<Shared>, mut rx: UnboundedReceiver<Cmd>, tx: Sink<ClusterEvent>) {
    let s = shared.clone();
    let opts = async_nats::ConnectOptions::new()
        .name(format!("megaconn-{}", cfg.node))
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
    let servers = match super::check_url(&cfg.url) {
        Ok(s) => s,
        Err(e) => return send(&tx, ClusterEvent::Fatal(e)),
    };
    let client = match opts.connect(servers).await {
        Ok(c) => c,
        Err(e) => {
            shared.error(format!("cannot connect to {}: {e}", cfg.url));
            return;
        }
    };
    if let Some(e) = id_taken(&client, &cfg).await {
        shared.error(e.clone());
        send(&tx, ClusterEvent::Fatal(e));
        return;
    }
    let mut subs: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    for subject in [BROADCAST.to_string(), super::node_subject(&cfg.node)] {
        subs.insert(subject.clone(), forward(&client, subject, &shared, &tx).await);
    }
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Subscribe(topic) => {
                let subject = super::topic_subject(&topic);
                let h = forward(&client, subject.clone(), &shared, &tx).await;
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
            Cmd::Reply { subject, body } => {
                let _ = client.publish(subject, body.into()).await;
            }
            Cmd::Publish { request, out } => {
                let (client, tx, shared, node) = (client.clone(), tx.clone(), shared.clone(), cfg.node.clone());
                tokio::spawn(async move {
                    let result = publish(&client, &node, out, &shared).await;
                    send(&tx, ClusterEvent::Published { request, result });
                });
            }
        }
    }
}

/// Subscribe to `subject` and hand every message to the supervisor.
/// Another live node already answers on this node's subject: two nodes
/// with one id would each take the other's unicasts.
async fn id_taken(client: &async_nats::Client, cfg: &ClusterConfig) -> Option<String> {
    let subject = super::node_subject(&cfg.node);
    match tokio::time::timeout(PROBE_TIMEOUT, client.request(subject.clone(), Default::default())).await {
        Ok(Ok(_)) => Some(format!(
            "another server in the cluster at {} already has node id '{}' (it answered on {subject}); give every node a unique --node-id",
            cfg.url, cfg.node
        )),
        // No responders, or NATS not reachable yet: the id is free as far as we can tell.
        _ => None,
    }
}

async fn forward(client: &async_nats::Client, subject: String, shared: &Arc<Shared>, tx: &Sink<ClusterEvent>) -> tokio::task::AbortHandle {
    let (client, shared, tx) = (client.clone(), shared.clone(), tx.clone());
    tokio::spawn(async move {
        let mut sub = match client.subscribe(subject.clone()).await {
            Ok(s) => s,
            Err(e) => return shared.error(format!("cannot subscribe to {subject}: {e}")),
        };
        while let Some(m) = sub.next().await {
            shared.messages_in.fetch_add(1, Ordering::Relaxed);
            match decode(&m) {
                Ok(inbound) => send(&tx, ClusterEvent::Message(inbound)),
                Err(e) => {
                    let e = format!("refused a message on {}: {e}", m.subject);
                    if let Some(reply) = &m.reply {
                        let body = serde_json::json!({ "error": e, "node": super::node_of(&m.subject) });
                        let _ = client.publish(reply.clone(), body.to_string().into()).await;
                    }
                    shared.error(e);
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
fn decode(m: &async_nats::Message) -> Result<Inbound, String> {
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
    let limit = crate::proto::push::max_data(topic.len());
    if m.payload.len() > limit {
        return Err(format!("{} bytes of data, more than a push carries ({limit})", m.payload.len()));
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
async fn publish(client: &async_nats::Client, node: &str, out: Vec<Out>, shared: &Shared) -> Result<Vec<RemoteAnswer>, PublishFailure> {
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
        let mut h = async_nats::HeaderMap::new();
        h.insert(H_PUBLISH_US, o.publish_us.to_string().as_str());
        h.insert(H_ORIGIN, node);
        let sent_before = std::mem::replace(&mut maybe_sent, true);
        match &o.target {
            Some((owner, id)) => {
                h.insert(H_TARGET, id.to_string().as_str());
                let gid = super::global_id(owner, *id);
                let answer = |status: u16, detail: serde_json::Value| RemoteAnswer { node: owner.clone(), id: gid.clone(), status, detail };
                let answer = match client.request_with_headers(super::node_subject(owner), h, o.data.into()).await {
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
