//! The link's task: connect to NATS as this node (its id checked free),
//! make sure of the JetStream log, subscribe to the cluster's subjects,
//! then serve the supervisor's commands until it hangs up.

use super::asks::{ask_presence, ask_retained};
use super::forward::Forwarder;
use super::publish::publish;
use super::{reconnect_delay, send, Cmd, Me, Shared, CONFIRM_TIMEOUT, PROBE_TIMEOUT};
use crate::cluster::log::{self as jslog, Log};
use crate::cluster::retained::{RETAINED, RETAINED_ASK};
use crate::cluster::sign::Refusal;
use crate::cluster::{ClusterConfig, ClusterEvent, BROADCAST};
use crate::supervise::Sink;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// The subscriptions of the link, by subject.
type Subs = HashMap<String, tokio::task::AbortHandle>;

pub(super) async fn run(cfg: ClusterConfig, shared: Arc<Shared>, mut rx: UnboundedReceiver<Cmd>, tx: Sink<ClusterEvent>) {
    let me = Me {
        node: cfg.node.clone(),
        key: cfg.key.clone().expect("checked by Link::start"),
        max_push: cfg.max_push,
        replays: Default::default(),
        boot: rand::random(),
        sent: Default::default(),
    };
    let Some(client) = connect(&cfg, &me, &shared, &tx).await else { return };
    let log = match cfg.log {
        Some(lc) => match open_log(Log::new(client.clone(), lc), &shared, &tx).await {
            Some(log) => Some(log),
            None => return,
        },
        None => None,
    };
    let f = Forwarder { client, me, shared, tx, log };
    let mut subs = subscribe_all(&f, &cfg.node).await;
    // Up (healthy, publishing) once NATS has them: a notice or unicast
    // another node sends before would reach no one here.
    f.confirm_subscription().await;
    f.shared.subscribed.store(true, Ordering::SeqCst);
    *f.shared.changed.lock().expect("link state") = Some(Instant::now());
    while let Some(cmd) = rx.recv().await {
        handle(&f, &mut subs, cmd).await;
    }
}

/// Connected to NATS as this node, its id checked free; None (reported)
/// when it cannot be.
async fn connect(cfg: &ClusterConfig, me: &Me, shared: &Arc<Shared>, tx: &Sink<ClusterEvent>) -> Option<async_nats::Client> {
    let s = shared.clone();
    let opts = async_nats::ConnectOptions::new()
        .name(format!("megaconn-{}", cfg.node))
        // Answers to this node's requests come only under its own inbox.
        .custom_inbox_prefix(crate::cluster::inbox_prefix(&cfg.node))
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
        Err(e) => {
            send(tx, ClusterEvent::Fatal(e));
            return None;
        }
    };
    let servers = match crate::cluster::check_url(&cfg.url) {
        Ok(s) => s,
        Err(e) => {
            send(tx, ClusterEvent::Fatal(crate::cluster::auth::redact(&e)));
            return None;
        }
    };
    let client = match opts.connect(servers).await {
        Ok(c) => c,
        Err(e) => {
            shared.error(format!("cannot connect to {}: {e}", cfg.shown_url()));
            return None;
        }
    };
    if let Some(e) = id_taken(&client, cfg, me, shared).await {
        shared.error(e.clone());
        send(tx, ClusterEvent::Fatal(e));
        return None;
    }
    Some(client)
}

/// The JetStream log's stream made sure of, before any subscription
/// (what nodes subscribe to is what it republishes): tried again every
/// second while NATS cannot say; None (reported, fatal) when it refuses.
async fn open_log(log: Log, shared: &Shared, tx: &Sink<ClusterEvent>) -> Option<Arc<Log>> {
    let log = Arc::new(log);
    loop {
        match log.ensure().await {
            Ok(()) => break,
            Err((true, why)) => {
                shared.error(why.clone());
                send(tx, ClusterEvent::Fatal(why));
                return None;
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

/// What a node subscribes to for a topic subject: with JetStream, what
/// the stream republishes of it (only what it stored, in its order).
fn sub_of(f: &Forwarder, subject: &str) -> String {
    match f.log.is_some() {
        true => jslog::live_subject(subject),
        false => subject.to_string(),
    }
}

/// The subjects every node follows: broadcasts, its own, the users',
/// presence, notices, retained messages and their asks, client ids,
/// shared groups, session moves.
async fn subscribe_all(f: &Forwarder, node: &str) -> Subs {
    let mut subs = Subs::new();
    for subject in [
        sub_of(f, BROADCAST),
        crate::cluster::node_subject(node),
        crate::cluster::USERS.to_string(),
        crate::cluster::PRESENCE.to_string(),
        crate::cluster::NOTICES.to_string(),
        RETAINED.to_string(),
        RETAINED_ASK.to_string(),
        crate::cluster::CLIENT_IDS.to_string(),
        crate::cluster::groups::SHARED_GROUPS.to_string(),
        crate::cluster::sessions::SESSIONS_TAKE.to_string(),
        crate::cluster::sessions::SESSIONS_TAKEN.to_string(),
    ] {
        let h = f.forward(subject.clone(), || f.shared.follow(&subject, true)).await;
        subs.insert(subject, h);
    }
    subs
}

/// One of the supervisor's commands: subscriptions changed here; what
/// may take long (a publish confirmed, an ask answered by the other
/// nodes, a fetch from the log) on a task of its own, its outcome sent
/// back as an event.
async fn handle(f: &Forwarder, subs: &mut Subs, cmd: Cmd) {
    let (client, me, shared) = (&f.client, &f.me, &f.shared);
    match cmd {
        Cmd::Subscribe(topic) => {
            let subject = sub_of(f, &crate::cluster::topic_subject(&topic));
            let h = match topic == crate::cluster::ANY_TOPIC {
                true => f.forward_any(subject.clone()).await,
                false => f.forward(subject.clone(), || shared.follow(&subject, true)).await,
            };
            // Never two subscriptions of one subject: each would deliver.
            if let Some(old) = subs.insert(subject, h) {
                old.abort();
            }
        }
        Cmd::Unsubscribe(topic) => {
            let subject = sub_of(f, &crate::cluster::topic_subject(&topic));
            shared.follow(&subject, false);
            if let Some(h) = subs.remove(&subject) {
                h.abort();
            }
        }
        Cmd::Reply { subject, body } => me.answer(client, subject, body).await,
        Cmd::Publish { request, out } => {
            let (client, tx, shared, me, log) = (client.clone(), f.tx.clone(), shared.clone(), me.clone(), f.log.clone());
            tokio::spawn(async move {
                let result = publish(&client, &me, request, out, &shared, log.as_deref()).await;
                send(&tx, ClusterEvent::Published { request, result });
            });
        }
        Cmd::ClientIds(bodies) => {
            for body in bodies {
                tell(f, crate::cluster::CLIENT_IDS, body, "tell the other nodes which MQTT client ids connected here").await;
            }
        }
        Cmd::SharedGroups(body) => {
            tell(f, crate::cluster::groups::SHARED_GROUPS, body, "tell the other nodes this node's MQTT shared subscription groups").await
        }
        Cmd::Notices(body) => tell(f, crate::cluster::NOTICES, body, "send presence notices").await,
        Cmd::AskRetained { max_entries, max_bytes } => {
            let (client, tx, me, shared) = (client.clone(), f.tx.clone(), me.clone(), shared.clone());
            tokio::spawn(async move {
                let answers = ask_retained(&client, &me, &shared, max_entries, max_bytes).await;
                send(&tx, ClusterEvent::Retained(answers));
            });
        }
        Cmd::AskSessions { ids, at_us } => {
            let (client, tx, me, shared) = (client.clone(), f.tx.clone(), me.clone(), shared.clone());
            tokio::spawn(async move {
                let handed = crate::cluster::sessions::ask(&client, &me, &shared, ids, at_us).await;
                send(&tx, ClusterEvent::SessionsHanded(handed));
            });
        }
        Cmd::HandSessions { reply, answer } => {
            for (lend, session) in answer.sessions {
                me.answer(client, reply.clone(), format!("{{\"session\":{session},\"lend\":{lend}}}").into_bytes()).await;
            }
            let done = crate::cluster::sessions::Answer { done: true, busy: answer.busy, newer: answer.newer, owned: answer.owned, ..Default::default() };
            me.answer(client, reply, serde_json::to_vec(&done).expect("serializes")).await;
        }
        Cmd::Presence { request, topic } => {
            let (client, tx, me, shared) = (client.clone(), f.tx.clone(), me.clone(), shared.clone());
            tokio::spawn(async move {
                let answers = ask_presence(&client, &me, &shared, &topic).await;
                send(&tx, ClusterEvent::Presence { request, answers });
            });
        }
        Cmd::Fetch { topic, after } => {
            let f = f.clone();
            tokio::spawn(async move {
                let result = match &f.log {
                    Some(log) => f.recover(log, &topic, after).await,
                    None => Err(crate::cluster::error::LogError::Off),
                };
                send(&f.tx, ClusterEvent::Fetched { topic, result });
            });
        }
    }
}

/// `body` signed and published on `subject` to every node; `what` names
/// it in the error when NATS refuses.
async fn tell(f: &Forwarder, subject: &'static str, body: Vec<u8>, what: &str) {
    let h = f.me.headers(subject, "", "", "", &body);
    if let Err(e) = f.client.publish_with_headers(subject, h, body.into()).await {
        f.shared.error(format!("cannot {what}: {e}"));
    }
}

async fn id_taken(client: &async_nats::Client, cfg: &ClusterConfig, me: &Me, shared: &Shared) -> Option<String> {
    let subject = crate::cluster::node_subject(&cfg.node);
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
