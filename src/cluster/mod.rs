//! A server node in a cluster: its link to NATS, which carries publishes
//! between nodes (`server --cluster nats://HOST:PORT --node-id ID`).
//!
//! Subjects: `megaconn.broadcast` (every node), `megaconn.topic.<name>`
//! (subscribed only while this node has a subscriber of the topic) and
//! `megaconn.node.<id>` (unicast to a connection this node owns; a
//! request, so the owner answers whether it found the connection and NATS
//! answers "no responders" when no such node exists). Every node also
//! takes the core subjects of per-user pushes, presence, MQTT retained
//! messages ([`retained`]), the MQTT client ids connecting to each
//! node ([`CLIENT_IDS`]) and each node's MQTT shared subscription groups
//! ([`groups`]).
//!
//! A publish through a node's admin API goes to NATS first, and is
//! delivered to the node's own connections only once NATS has taken it
//! (the link does not echo a node's own messages back, so each node
//! delivers a message exactly once). While the link is down, publishes
//! that need it fail with 503 and nothing is delivered anywhere; the
//! client library reconnects by itself and restores the subscriptions.
//!
//! The link runs on its own thread (a single-threaded tokio runtime for
//! the `async-nats` client) and talks to the supervisor loop over the same
//! channel the workers report on.
//!
//! Trust: the link authenticates to NATS ([`auth`]), and every message
//! between nodes is signed with the cluster key ([`sign`]); a node answers
//! a request only on a subject under its signed origin's own inbox
//! (`megaconn.inbox.<node>.`), so nobody can make nodes publish where
//! they choose.
pub(crate) mod auth;
pub(crate) mod error;
pub(crate) mod groups;
pub(crate) mod link;
pub(crate) mod log;
pub(crate) mod malformed;
pub(crate) mod retained;
pub(crate) mod sessions;
pub mod sign;

pub(crate) use auth::NatsAuth;
pub(crate) use link::Link;
pub use sign::ClusterKey;

use crate::proto::push::{Position, Stream};
use malformed::Malformed;
use serde::Serialize;

pub(crate) const BROADCAST: &str = "megaconn.broadcast";
/// Per-user pushes and disconnects (`--auth jwt`): every node delivers to
/// its own connections of that user. Core NATS, not kept in the history.
pub(crate) const USERS: &str = "megaconn.users";
/// Presence questions: every node answers with its own subscribers of the
/// topic (`GET /presence` in a cluster).
pub(crate) const PRESENCE: &str = "megaconn.presence";
/// Joins and leaves for every node's subscribers (`--presence-notices`).
pub(crate) const NOTICES: &str = "megaconn.notices";
/// MQTT client ids that connected to a node: any other node holding one
/// lets it go (`server/broker/sessions/elsewhere.rs`).
pub(crate) const CLIENT_IDS: &str = "megaconn.clientids";
/// Most client ids in one [`CLIENT_IDS`] message, and most bytes of one id.
pub(crate) const MAX_IDS_PER_MESSAGE: usize = 4096;
pub(crate) const MAX_ID_BYTES: usize = 1024;
/// What a cluster node must start or stop following, net, since it was
/// last asked: a topic gaining its first holder (true) or losing its last
/// (false); a change and its opposite before the next ask cancel out.
/// Kept only while `track` (a node in a cluster): a worker's topics and
/// the kept MQTT sessions each hold one.
#[derive(Debug, Default)]
pub(crate) struct Following {
    pub(crate) track: bool,
    changes: std::collections::HashMap<Box<str>, bool>,
}

impl Following {
    pub(crate) fn new(track: bool) -> Following {
        Following { track, changes: Default::default() }
    }

    /// `name` gained its first holder (true) or lost its last (false).
    pub(crate) fn note(&mut self, name: &str, first: bool) {
        if !self.track {
            return;
        }
        match self.changes.get(name) {
            Some(pending) if *pending != first => {
                self.changes.remove(name);
            }
            _ => {
                self.changes.insert(name.into(), first);
            }
        }
    }

    /// The net changes since the last call, sorted by name.
    pub(crate) fn take(&mut self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = self.changes.drain().map(|(k, v)| (k.into(), v)).collect();
        v.sort();
        if self.changes.capacity() > 64 {
            self.changes = Default::default();
        }
        v
    }
}

/// The "topic" a node follows while it has MQTT wildcard filters: its
/// subject (`megaconn.topic.>`) takes every topic's messages, and the
/// node's supervisor delivers what matches. Not a topic name.
pub(crate) const ANY_TOPIC: &str = ">";
/// How long a node collects the other nodes' presence answers: the bound
/// of `GET /presence`'s eventual consistency in a cluster.
pub(crate) const PRESENCE_WINDOW: std::time::Duration = std::time::Duration::from_millis(250);

/// One node's answer to a presence question: (user, connections, info
/// JSON) and connections without a user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodePresence {
    pub(crate) node: String,
    pub(crate) users: Vec<(String, u64, Option<String>)>,
    pub(crate) anonymous: u64,
}
const TOPIC_PREFIX: &str = "megaconn.topic.";
const NODE_PREFIX: &str = "megaconn.node.";
/// Each node's replies arrive under `megaconn.inbox.<node>.`.
const INBOX_PREFIX: &str = "megaconn.inbox.";
/// Headers of a message between nodes.
pub(crate) const H_PUBLISH_US: &str = "Megaconn-Publish-Us";
pub(crate) const H_ORIGIN: &str = "Megaconn-Origin";
pub(crate) const H_TARGET: &str = "Megaconn-Target";
/// An MQTT publish's QoS, retain flag and v5 properties ([`MqttMeta`]).
pub(crate) const H_MQTT: &str = "Megaconn-Mqtt";
/// Longest node id (it is a subject token and part of connection ids).
pub(crate) const MAX_NODE_ID: usize = 64;

/// `--cluster`, `--node-id`, `--cluster-key-file` and the NATS
/// credentials. Debug shows no secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ClusterConfig {
    /// As given: it may hold credentials; show [`ClusterConfig::shown_url`].
    pub(crate) url: String,
    pub(crate) node: String,
    /// Signs and checks every message between nodes; required to start.
    pub(crate) key: Option<ClusterKey>,
    pub(crate) auth: NatsAuth,
    /// This node's `--max-push-bytes`: larger messages from others are refused.
    pub(crate) max_push: usize,
    /// `--cluster-history jetstream` (the default): the history and its
    /// offsets live in NATS JetStream; None (`off`): each node's own.
    pub(crate) log: Option<log::LogConfig>,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("url", &self.shown_url())
            .field("node", &self.node)
            .field("key", &self.key)
            .field("auth", &self.auth)
            .field("log", &self.log)
            .finish()
    }
}

impl ClusterConfig {
    /// The URL without credentials: the only form ever shown.
    pub(crate) fn shown_url(&self) -> String {
        auth::redact(&self.url)
    }

    /// What a node cannot start without, as a usage error.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.key.is_none() {
            return Err(format!("--cluster needs --cluster-key-file FILE: every message between nodes is signed with it; {}", sign::HOW_TO_MAKE_KEY));
        }
        self.auth.clone().with_url_credentials(&self.url).check()
    }
}

/// The subject prefix under which `node` receives answers.
pub(crate) fn inbox_prefix(node: &str) -> String {
    format!("{INBOX_PREFIX}{node}")
}

pub(crate) fn topic_subject(topic: &str) -> String {
    format!("{TOPIC_PREFIX}{topic}")
}

pub(crate) fn node_subject(node: &str) -> String {
    format!("{NODE_PREFIX}{node}")
}

/// The node a `megaconn.node.<id>` subject addresses.
pub(crate) fn node_of(subject: &str) -> Option<&str> {
    subject.strip_prefix(NODE_PREFIX)
}

/// Check a node id: letters, digits, `_` and `-` (a NATS subject token,
/// and a prefix of connection ids, split at the first `.`).
pub(crate) fn check_node_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_NODE_ID {
        return Err(format!("a node id is 1 to {MAX_NODE_ID} characters, not {}", id.len()));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("node id '{id}' contains {c:?}; use letters, digits, _ and -"));
    }
    Ok(())
}

/// Check a `--cluster` value: `nats://HOST:PORT` (or `tls://`), or a
/// comma-separated list of them (the seeds of a NATS cluster; the client
/// learns the other servers from them).
pub(crate) fn check_url(url: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            let bad = |why: String| {
                format!(
                    "--cluster '{}' is not a NATS URL ({why}); give nats://HOST:PORT (e.g. nats://127.0.0.1:4222), or several separated by commas",
                    auth::redact(one)
                )
            };
            if !(one.starts_with("nats://") || one.starts_with("tls://")) {
                return Err(bad("it must start with nats:// or tls://".into()));
            }
            let addr: async_nats::ServerAddr = one.parse().map_err(|e: std::io::Error| bad(e.to_string()))?;
            if addr.host().is_empty() {
                return Err(bad("no host".into()));
            }
            Ok(addr)
        })
        .collect()
}

/// Whether a topic name can travel as a subject (no empty token).
pub(crate) fn topic_fits_subject(topic: &str) -> bool {
    !topic.split('.').any(str::is_empty)
}

/// The default node id: the host name (a pod's name in Kubernetes),
/// with characters a node id may not hold replaced by `-`.
pub(crate) fn default_node_id() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok());
    let id: String = host.unwrap_or_else(|| "node".into()).trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
    id.chars().take(MAX_NODE_ID).collect()
}

/// A connection id as the admin API shows it in a cluster: `NODE.ID`.
pub(crate) fn global_id(node: &str, id: u64) -> String {
    format!("{node}.{id}")
}

/// `NODE.ID` or a bare `ID` (this node): (node, local id).
pub(crate) fn parse_id(s: &str) -> Option<(Option<String>, u64)> {
    match s.split_once('.') {
        Some((node, id)) => {
            check_node_id(node).ok()?;
            Some((Some(node.to_string()), id.parse().ok()?))
        }
        None => Some((None, s.parse().ok()?)),
    }
}

/// A message another node published, as this node received it.
#[derive(Debug, Clone)]
pub(crate) struct Inbound {
    pub(crate) stream: Stream,
    pub(crate) topic: String,
    pub(crate) target: Option<u64>,
    pub(crate) publish_us: u64,
    pub(crate) data: Vec<u8>,
    /// Unicast: where the owner's answer goes.
    pub(crate) reply: Option<String>,
    /// Its place in the cluster's history (JetStream; topic and broadcast).
    pub(crate) at: Option<Position>,
    /// A per-user push (or disconnect): the user.
    pub(crate) user: Option<String>,
    /// Close that user's connections instead.
    pub(crate) close: bool,
    /// An MQTT publish's QoS, retain flag and properties.
    pub(crate) mqtt: Option<MqttMeta>,
}

/// What of an MQTT publish travels between nodes, in the signed header
/// [`H_MQTT`]: its QoS and retain flag (so another node's subscribers get
/// it at that QoS, and keep it retained and in kept sessions' queues) and
/// its v5 properties, without the publisher (a connection id means
/// nothing on another node).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct MqttMeta {
    #[serde(default)]
    pub(crate) qos: u8,
    #[serde(default)]
    pub(crate) retain: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) props: Option<Box<crate::proto::mqtt::forward::Forwarded>>,
    /// Per MQTT shared subscription group the message matches, the node
    /// that delivers its copy (`server/broker/shared.rs`); a group not
    /// named is delivered by every node with members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shared: Vec<(String, String)>,
}

impl MqttMeta {
    /// What travels of a publish; `None` for a plain one (QoS 0, not
    /// retained, no properties: what every protocol publishes).
    pub(crate) fn of(qos: u8, retain: bool, props: Option<&crate::proto::mqtt::forward::Forwarded>) -> Option<MqttMeta> {
        let props = crate::proto::mqtt::forward::Forwarded::stored(props);
        (qos > 0 || retain || props.is_some()).then_some(MqttMeta { qos, retain, props, shared: Vec::new() })
    }

    /// The header's value.
    pub(crate) fn header(&self) -> String {
        serde_json::to_string(self).expect("serializes")
    }

    /// A header's value, checked as a client's publish would be.
    pub(crate) fn parse(v: &str) -> Result<MqttMeta, Malformed> {
        let m: MqttMeta = serde_json::from_str(v).map_err(|e| Malformed::MqttJson(e.to_string()))?;
        m.checked()
    }

    /// Metadata from another node, checked as a client's publish would be.
    pub(crate) fn checked(self) -> Result<MqttMeta, Malformed> {
        let m = self;
        if m.qos > 2 {
            return Err(Malformed::Qos(m.qos));
        }
        if let Some(f) = &m.props {
            let max = crate::proto::mqtt::forward::MAX_FORWARDED_BYTES;
            if f.cost() > max || f.origin.is_some() {
                return Err(Malformed::Properties { cost: f.cost(), max });
            }
        }
        let max = groups::MAX_PICKS;
        if m.shared.len() > max || m.shared.iter().any(|(g, n)| crate::proto::mqtt::topic::shared(g).is_none() || check_node_id(n).is_err()) {
            return Err(Malformed::Shared(max));
        }
        Ok(m)
    }

    /// The shared subscription groups another node than `me` delivers.
    pub(crate) fn elsewhere(&self, me: &str) -> Vec<Box<str>> {
        self.shared.iter().filter(|(_, node)| node != me).map(|(g, _)| g.as_str().into()).collect()
    }
}

impl Inbound {
    /// The history's name of its topic (`*`: broadcasts).
    pub(crate) fn history_topic(&self) -> String {
        match self.stream {
            Stream::Broadcast => crate::proto::push::BROADCAST_TOPIC.to_string(),
            _ => self.topic.clone(),
        }
    }
}

/// What a publish through NATS did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sent {
    /// What other nodes answered for unicasts.
    pub(crate) remote: Vec<RemoteAnswer>,
    /// Per message sent, its place in the cluster's history (topic and
    /// broadcast messages, with JetStream).
    pub(crate) positions: Vec<Option<Position>>,
}

/// What a remote node answered for a unicast.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RemoteAnswer {
    pub(crate) node: String,
    pub(crate) id: String,
    /// 200 delivered (queued), 404 no such connection or node, 400 the
    /// owner refused the request, 504 no answer in time (outcome unknown).
    pub(crate) status: u16,
    pub(crate) detail: serde_json::Value,
}

/// Why a publish through NATS failed.
#[derive(Debug)]
pub(crate) struct PublishFailure {
    /// Some of it may have reached NATS (and other nodes) before the
    /// failure: the outcome is unknown (504), not "nothing sent" (503).
    pub(crate) maybe_sent: bool,
    pub(crate) reason: error::PublishError,
}

/// The link's news for the supervisor loop.
#[derive(Debug)]
pub(crate) enum ClusterEvent {
    Message(Inbound),
    /// Publish `request` went out (with remote answers), or failed.
    Published {
        request: u64,
        result: Result<Sent, PublishFailure>,
    },
    /// The stream's copy of message `index` of this node's publish
    /// `request` went by at `at`: the publish delivers it here, and what
    /// follows it in `topic` waits for that.
    Mine {
        request: u64,
        index: usize,
        /// The history's name of the topic (`*`: broadcasts).
        topic: String,
        at: Position,
    },
    /// What the stream has of a topic after a position (`Link::fetch`):
    /// the messages in order, or why it could not be read.
    Fetched {
        /// The history's name of the topic (`*`: broadcasts).
        topic: String,
        result: Result<Vec<Inbound>, error::LogError>,
    },
    /// The node cannot be part of the cluster (e.g. its id is taken): the
    /// server stops with this reason.
    Fatal(String),
    /// Another node asks who is subscribed to `topic` here: answer on `reply`.
    PresenceAsked {
        topic: String,
        reply: String,
    },
    /// Another node's joins and leaves, for this node's subscribers.
    Notices(Vec<crate::proto::push::Notice>),
    /// What the other nodes answered to this node's presence question
    /// `request` within [`PRESENCE_WINDOW`].
    Presence {
        request: u64,
        answers: Vec<NodePresence>,
    },
    /// Another node's retained publish or clear (empty data), for this
    /// node's retained set ([`retained`]).
    RetainedSet(retained::Entry),
    /// Another node asks for the MQTT sessions this node kept of `ids`:
    /// answer on `reply` (`sessions.rs`).
    SessionsAsked {
        node: String,
        ids: Vec<OwnedId>,
        /// When the asker's CONNECTs of them came (wall-clock µs).
        at_us: u64,
        reply: String,
    },
    /// What the other nodes handed over to this node's question.
    SessionsHanded(sessions::Handed),
    /// Node `node` confirmed it got the session this node lent it as
    /// `lend` (`sessions.rs`).
    SessionsTaken {
        node: String,
        lend: u64,
    },
    /// Another node asks for this node's retained set: answer on `reply`.
    RetainedAsked {
        reply: String,
    },
    /// The other nodes' retained sets, asked when this node's link came up.
    Retained(retained::Answers),
    /// Another node's MQTT shared subscription groups ([`groups`]).
    SharedGroups {
        node: String,
        announce: groups::Announce,
    },
    /// MQTT client ids that connected to another node (`node`) at `at_us`.
    ClientIds {
        node: String,
        ids: Vec<OwnedId>,
        at_us: u64,
    },
}

/// An MQTT client id and the identity that owns it (`--auth`: a token's
/// `sub`; None without): a node lets go of a connection or a session of
/// the id only for its owner.
pub(crate) type OwnedId = (String, Option<String>);

/// What a [`CLIENT_IDS`] message carries: the ids, and beside them their
/// owners (`""`: none; absent altogether when none has one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ClientIds {
    pub(crate) ids: Vec<String>,
    pub(crate) at_us: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) owners: Vec<String>,
}

impl ClientIds {
    /// Another node's message, within the bounds a sender keeps.
    pub(crate) fn parse(body: &[u8]) -> Result<ClientIds, Malformed> {
        let c: ClientIds = serde_json::from_slice(body).map_err(|e| Malformed::IdsJson(e.to_string()))?;
        if c.ids.len() > MAX_IDS_PER_MESSAGE || c.ids.iter().any(|id| id.len() > MAX_ID_BYTES) {
            return Err(Malformed::TooManyIds { max: MAX_IDS_PER_MESSAGE, bytes: MAX_ID_BYTES });
        }
        if !(c.owners.is_empty() || c.owners.len() == c.ids.len()) || c.owners.iter().any(|o| o.len() > MAX_ID_BYTES) {
            return Err(Malformed::Owners { owners: c.owners.len(), ids: c.ids.len(), bytes: MAX_ID_BYTES });
        }
        Ok(c)
    }

    /// Each id with its owner.
    pub(crate) fn owned(self) -> Vec<OwnedId> {
        let mut owners = self.owners.into_iter().map(|o| Some(o).filter(|o| !o.is_empty()));
        self.ids.into_iter().map(|id| (id, owners.next().flatten())).collect()
    }

    /// `ids` as messages within those bounds, each under 256 KiB.
    pub(crate) fn batches(ids: Vec<OwnedId>, at_us: u64) -> Vec<Vec<u8>> {
        let (mut out, mut batch, mut bytes) = (Vec::new(), Vec::<OwnedId>::new(), 0);
        let body = |batch: Vec<OwnedId>| {
            let any = batch.iter().any(|(_, o)| o.is_some());
            let (ids, owners): (Vec<String>, Vec<String>) = batch.into_iter().map(|(id, o)| (id, o.unwrap_or_default())).unzip();
            serde_json::to_vec(&ClientIds { ids, at_us, owners: if any { owners } else { Vec::new() } }).expect("serializes")
        };
        let fits = |(id, o): &OwnedId| id.len() <= MAX_ID_BYTES && o.as_ref().is_none_or(|o| !o.is_empty() && o.len() <= MAX_ID_BYTES);
        for id in ids.into_iter().filter(fits) {
            // JSON may write a byte as \u00XX: six.
            let cost = 6 * (id.0.len() + id.1.as_ref().map_or(0, String::len)) + 6;
            if !batch.is_empty() && (batch.len() >= MAX_IDS_PER_MESSAGE || bytes + cost > 256 << 10) {
                out.push(body(std::mem::take(&mut batch)));
                bytes = 0;
            }
            bytes += cost;
            batch.push(id);
        }
        if !batch.is_empty() {
            out.push(body(batch));
        }
        out
    }
}

/// Link counters and state for /healthz, /stats and /metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct LinkStatus {
    pub(crate) url: String,
    pub(crate) node: String,
    pub(crate) up: bool,
    /// Seconds in the current state.
    pub(crate) for_s: f64,
    pub(crate) last_error: Option<String>,
    /// Times the link came up after being down.
    pub(crate) reconnects: u64,
    pub(crate) messages_in: u64,
    pub(crate) messages_out: u64,
    /// Publishes refused (503) because the link was down or NATS did not
    /// confirm them.
    pub(crate) publish_failures: u64,
    /// Topic subjects this node subscribes to now.
    pub(crate) topics: u64,
    /// Other nodes heard in the last 15 s (their `megaconn.shared`
    /// announcements): the answers a question about MQTT sessions waits for.
    pub(crate) peers: u64,
    /// Messages dropped, by reason (`unsigned`, `forged`, `stale`,
    /// `reply`, `malformed`): `cluster_refused{reason}`.
    pub(crate) refused: std::collections::BTreeMap<String, u64>,
    /// The cluster's history in JetStream (None: `--cluster-history off`).
    pub(crate) history: Option<LogStatus>,
}

/// The link's work with the JetStream history.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LogStatus {
    pub(crate) stream: String,
    pub(crate) storage: log::Storage,
    #[serde(flatten)]
    pub(crate) counters: log::LogCounters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names() {
        assert_eq!(parse_id("A.42"), Some((Some("A".into()), 42)));
        assert_eq!(parse_id("42"), Some((None, 42)));
        assert_eq!(parse_id("A.x"), None);
        assert_eq!(parse_id("a b.1"), None);
        assert!(check_node_id("node-1_a").is_ok());
        assert!(check_node_id("a.b").unwrap_err().contains("'.'"));
        assert!(check_node_id("").is_err());
        assert!(check_url("nats://127.0.0.1:4222").is_ok());
        assert!(check_url("http://x").unwrap_err().contains("nats://HOST:PORT"));
        assert_eq!(check_url("nats://a:4222, nats://b:4223").unwrap().len(), 2);
        assert!(check_url("nats://a:4222,x").unwrap_err().contains("'x'"));
        assert!(check_url("nats://").is_err());
        assert!(!check_url("nats://u:secret@").unwrap_err().contains("secret"));
        assert!(topic_fits_subject("a.b") && !topic_fits_subject("a..b") && !topic_fits_subject(".a"));
        assert!(check_node_id(&default_node_id()).is_ok());
    }

    /// Client ids cross in batches of at most 4,096 ids and 256 KiB; an
    /// id or a batch over the bounds is refused.
    #[test]
    fn client_ids_cross_in_bounded_batches_and_are_checked() {
        let ids: Vec<OwnedId> = (0..5000).map(|i| (format!("{i:0>1000}"), (i % 3 == 0).then(|| format!("user{i}")))).collect();
        let out = ClientIds::batches(ids.clone(), 7);
        assert!(out.len() > 1 && out.iter().all(|b| b.len() <= 256 << 10), "{} batches", out.len());
        let back: Vec<OwnedId> = out.iter().flat_map(|b| ClientIds::parse(b).unwrap().owned()).collect();
        assert_eq!(back, ids, "each id with its owner");
        let plain = ClientIds::batches(vec![("a".into(), None)], 7);
        assert_eq!(String::from_utf8_lossy(&plain[0]), r#"{"ids":["a"],"at_us":7}"#, "no owners, none written");
        assert_eq!(ClientIds::batches(vec![("x".repeat(MAX_ID_BYTES + 1), None)], 7).len(), 0, "an id over the bound is not sent");
        let odd = serde_json::json!({"ids": ["a", "b"], "at_us": 1, "owners": ["u"]}).to_string();
        assert!(ClientIds::parse(odd.as_bytes()).is_err(), "an owner for each id or none");
        let long = serde_json::json!({"ids": ["y".repeat(MAX_ID_BYTES + 1)], "at_us": 1}).to_string();
        assert!(ClientIds::parse(long.as_bytes()).is_err());
        let many = serde_json::json!({"ids": vec!["z"; MAX_IDS_PER_MESSAGE + 1], "at_us": 1}).to_string();
        assert!(ClientIds::parse(many.as_bytes()).is_err());
    }

    /// What crosses of an MQTT publish: nothing for a plain one; QoS,
    /// flag and properties without the publisher otherwise; a header with
    /// a QoS past 2, a publisher or too many bytes of properties is refused.
    #[test]
    fn mqtt_metadata_crosses_without_the_publisher_and_is_checked() {
        use crate::proto::mqtt::forward::{Forwarded, MAX_FORWARDED_BYTES};
        let with_origin = Forwarded { origin: Some(9), content_type: Some("text/plain".into()), ..Forwarded::default() };
        assert_eq!(MqttMeta::of(0, false, None), None);
        assert_eq!(MqttMeta::of(0, false, Some(&Forwarded { origin: Some(9), ..Forwarded::default() })), None, "a publisher alone is nothing");
        let m = MqttMeta::of(1, true, Some(&with_origin)).unwrap();
        assert_eq!((m.qos, m.retain, m.props.as_ref().unwrap().origin), (1, true, None));
        assert_eq!(MqttMeta::parse(&m.header()), Ok(m));
        assert_eq!(MqttMeta::parse(r#"{"qos":3}"#), Err(Malformed::Qos(3)));
        assert!(Malformed::Qos(3).to_string().contains("Megaconn-Mqtt has QoS 3"), "the log names the header");
        let origin = MqttMeta::parse(r#"{"qos":1,"props":{"origin":9}}"#);
        assert!(matches!(origin, Err(Malformed::Properties { .. })), "a publisher is not taken from another node: {origin:?}");
        let big = format!(r#"{{"props":{{"content_type":"{}"}}}}"#, "x".repeat(MAX_FORWARDED_BYTES + 1));
        assert!(matches!(MqttMeta::parse(&big), Err(Malformed::Properties { .. })));
        let json = MqttMeta::parse("not json").unwrap_err();
        assert!(matches!(json, Malformed::MqttJson(_)) && json.to_string().contains("Megaconn-Mqtt"), "{json}");
        let named = MqttMeta { shared: vec![("$share/g/t".into(), "A".into()), ("$share/h/t".into(), "B".into())], ..MqttMeta::default() };
        assert_eq!(MqttMeta::parse(&named.header()), Ok(named.clone()));
        assert_eq!(named.elsewhere("A"), vec!["$share/h/t".into()]);
        assert_eq!(MqttMeta::parse(r#"{"shared":[["t","A"]]}"#), Err(Malformed::Shared(groups::MAX_PICKS)), "not a shared subscription");
        assert_eq!(MqttMeta::parse(r#"{"shared":[["$share/g/t","a.b"]]}"#), Err(Malformed::Shared(groups::MAX_PICKS)), "not a node id");
        let many: Vec<(String, String)> = (0..=groups::MAX_PICKS).map(|i| (format!("$share/g{i}/t"), "A".into())).collect();
        assert!(MqttMeta::parse(&MqttMeta { shared: many, ..MqttMeta::default() }.header()).is_err());
    }
}
