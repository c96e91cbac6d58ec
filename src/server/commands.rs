//! What the server's processes say to each other over the worker's
//! stdin and stdout: the worker's messages to its supervisor (its
//! snapshot, readiness, a fatal error), the supervisor's commands to a
//! worker (a push, a connection listing, a topic's history, ...), the
//! connection ids both sides name connections by, and what arrives on the
//! supervisor's channel. One JSON object or command word per line.

use super::snapshot::ServerSnapshot;
use crate::proto::push::Stream;
use serde::{Deserialize, Serialize};

/// Server worker -> supervisor, one JSON object per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum ServerMsg {
    /// The worker listens.
    Ready {
        worker: usize,
        pid: u32,
        fd_limit: u64,
    },
    Server(Box<ServerSnapshot>),
    /// The worker cannot go on; the message names the cause and the fix.
    Fatal {
        worker: usize,
        message: String,
    },
    /// A push command was carried out: written or queued to `queued`
    /// connections, `dropped` closed as slow consumers.
    Pushed {
        worker: usize,
        publish_id: u64,
        queued: u64,
        dropped: u64,
    },
    /// Topics that gained their first (true) or lost their last (false)
    /// subscriber in this worker, in order (cluster nodes only: the
    /// supervisor subscribes to exactly the topics it has subscribers for).
    Topics {
        worker: usize,
        changes: Vec<(String, bool)>,
    },
    /// Joins and leaves for every worker's subscribers (`--presence-notices`).
    Notices {
        worker: usize,
        notices: Vec<crate::proto::push::Notice>,
    },
    /// WebSocket and event-stream requests waiting for the
    /// `--mqtt-auth-http` backend (answered by `upgrade`).
    UpgradeAsks {
        worker: usize,
        asks: Vec<UpgradeAsk>,
    },
    /// MQTT publishes and subscriptions waiting for the
    /// `--mqtt-authz-http` backend (answered by `authz`).
    AuthzAsks {
        worker: usize,
        asks: Vec<crate::server::auth::authz::About>,
    },
    /// MQTT CONNECTs with a client id, for the registry of ids and the
    /// kept sessions (`broker/sessions.rs`; answered by `session`).
    SessionClaims {
        worker: usize,
        claims: Vec<SessionClaim>,
    },
    /// MQTT connections joined or left shared subscription groups
    /// (`broker/shared.rs` picks one member per message).
    SharedChanged {
        worker: usize,
        changes: Vec<SharedChange>,
    },
    /// Registered MQTT connections that ended (the id is free again),
    /// with their session when it outlives them.
    SessionsEnded {
        worker: usize,
        ended: Vec<SessionEnd>,
    },
    /// What clients said, for the `--upstream` backend.
    Upstream {
        worker: usize,
        messages: Vec<crate::server::up_message::UpMessage>,
    },
    /// Answer to a `presence` command: the topic's subscribers here.
    Presence {
        worker: usize,
        request_id: u64,
        /// (user, connections, info as JSON text)
        users: Vec<(String, u64, Option<String>)>,
        /// Subscribers without a user (no --auth).
        anonymous: u64,
    },
    /// Answer to a `list` command.
    Connections {
        worker: usize,
        request_id: u64,
        list: Vec<ConnInfo>,
        /// The answer reached [`LIST_BYTES`] before the limit.
        #[serde(default)]
        truncated: bool,
    },
}

/// One message an MQTT client published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClientPublish {
    pub topic: String,
    /// The payload (base64 in the JSON of a state file).
    #[serde(with = "crate::proto::b64")]
    pub data: Vec<u8>,
    /// Its QoS (0, 1, 2): subscriptions granted more get it with this.
    #[serde(default)]
    pub qos: u8,
    /// Set (or with an empty payload clear) the topic's retained message.
    #[serde(default)]
    pub retain: bool,
    /// Its publisher and the v5 properties forwarded to subscribers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mqtt: Option<Box<crate::proto::mqtt::forward::Forwarded>>,
    /// A retained publish: its publisher's identity (the token's `sub`,
    /// else its address), which its retained topic is charged to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// One MQTT subscription that wants the retained messages its filter
/// matches (the supervisor keeps them: `broker/retained.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RetainedWant {
    /// The connection id ([`conn_id`]).
    pub conn: u64,
    pub filter: String,
    /// The QoS the subscription was granted.
    pub qos: u8,
    /// Its v5 Subscription Identifier (0: none), sent with each message.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub sid: u32,
}

/// A connection joined (or left) a shared subscription group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SharedChange {
    /// The connection id ([`conn_id`]).
    pub conn: u64,
    /// `$share/{group}/{filter}` as subscribed.
    pub name: String,
    /// The QoS the subscription was granted.
    #[serde(default)]
    pub qos: u8,
    pub join: bool,
}

/// An MQTT CONNECT's claim of its client id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionClaim {
    /// The connection id ([`conn_id`]).
    pub conn: u64,
    pub client_id: String,
    /// Clean Session (3.1.1) / Clean Start (5.0): a kept session is discarded.
    pub clean: bool,
    /// Seconds the session outlives the connection (0: not at all;
    /// `u32::MAX`: until the bounds drop it; 3.1.1 Clean Session 0).
    pub expiry_s: u32,
    /// A 5.0 client (the CONNACK code of a refusal).
    #[serde(default)]
    pub v5: bool,
    /// Who made it (`--auth`: the token's `sub`): the id and its session
    /// belong to that identity, and another's claim of them is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Whom its bounds are charged to: the owner with `--auth`, else the
    /// peer's address (`broker/sessions.rs`, per-identity quotas).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
    /// `--mqtt-auth-http`: what the backend is asked about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<Login>,
    /// The client id is one the server assigned (a CONNECT without one):
    /// a 5.0 CONNACK says it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub assigned: bool,
    /// What the `--mqtt-auth-http` backend granted (set by the supervisor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<crate::server::auth::hook_acl::Grant>,
}

/// A WebSocket Upgrade or event-stream request held until the
/// `--mqtt-auth-http` backend decides it: its headers (names in lower
/// case, the cookie among them), the user name and password of a Basic
/// `Authorization`, and the peer's address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UpgradeAsk {
    pub conn: u64,
    /// `ws` or `sse`.
    pub protocol: String,
    pub username: String,
    pub password: String,
    pub peerhost: String,
    pub headers: std::collections::BTreeMap<String, String>,
}

/// The backend's decision on an [`UpgradeAsk`] (`upgrade {json}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UpgradeAnswer {
    pub conn: u64,
    pub allow: bool,
}

/// A CONNECT's user name, password (as text: EMQX's backends read it so)
/// and peer address, for `--mqtt-auth-http`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Login {
    pub username: String,
    pub password: String,
    pub peerhost: String,
}

/// A client id as the supervisor's registry keys it (`broker/sessions.rs`:
/// a keyed 96-bit hash of its text, 12 bytes whatever its length; the
/// first two words are the registry table's hash, [`id_hash`]). 96 bits:
/// two ids of a million collide with odds of 1 in 10^17, and a peer
/// cannot aim at a collision without the process's random keys; 12 bytes
/// keep every MQTT connection's state in the worker at 24.
pub(crate) type IdKey = [u32; 3];

/// The 64-bit hash an [`IdKey`] already is (its first two words).
pub(crate) fn id_hash(key: &IdKey) -> u64 {
    u64::from(key[0]) | u64::from(key[1]) << 32
}

/// A will on its way to the topic space after its delay
/// (`broker/sessions/wills.rs` holds it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct DelayedWill {
    pub will: ClientPublish,
    /// The Will Delay Interval, seconds.
    pub delay_s: u32,
}

/// A registered MQTT connection's end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionEnd {
    pub conn: u64,
    /// Its client id's key, from the answer that registered it.
    #[serde(default)]
    pub key: IdKey,
    /// Seconds its session outlives it (as in its [`SessionClaim`]).
    #[serde(default)]
    pub expiry_s: u32,
    /// Its subscriptions and pending messages, when its session outlives it.
    #[serde(default)]
    pub state: Option<SessionState>,
    /// Its will, when it asked for a v5 Will Delay Interval and its
    /// session outlives it: published after the delay unless the client
    /// id connects again (`broker/sessions/wills.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub will: Option<DelayedWill>,
    /// Who owned it and whom its bounds are charged to (as its claim said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
}

/// One subscription of a kept MQTT session: its filter, the QoS granted
/// and its v5 options (they are part of the session, §4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeptSub {
    pub filter: String,
    pub qos: u8,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_local: bool,
    /// Retain As Published.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rap: bool,
    /// Subscription Identifier (0: none).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub sid: u32,
}

impl SessionClaim {
    /// A v5 CONNECT's claim of `id` by connection `conn`, with no owner
    /// and no login (unit tests).
    #[cfg(test)]
    pub(crate) fn v5(conn: u64, id: &str, clean: bool, expiry_s: u32) -> SessionClaim {
        SessionClaim { conn, client_id: id.into(), clean, expiry_s, v5: true, owner: None, identity: String::new(), login: None, assigned: false, grant: None }
    }
}

impl KeptSub {
    /// A plain subscription of `filter` at `qos`.
    #[cfg(test)]
    pub(crate) fn new(filter: &str, qos: u8) -> KeptSub {
        KeptSub { filter: filter.into(), qos, ..KeptSub::default() }
    }
}

/// What an MQTT session keeps when its connection ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionState {
    pub subs: Vec<KeptSub>,
    /// QoS 1 and 2 messages not acknowledged yet, in order: those sent
    /// first (with their packet ids), then those held behind the window.
    pub messages: Vec<SessionMessage>,
    /// Packet ids of the client's QoS 2 publishes forwarded whose PUBREL
    /// has not come: a resend after a reconnect is acknowledged, not
    /// forwarded again (§4.3.3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rel: Vec<u16>,
}

/// A QoS 1 or 2 message of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionMessage {
    pub topic: String,
    /// The payload (base64 in JSON: the sessions file, a move between nodes).
    #[serde(with = "crate::proto::b64")]
    pub data: Vec<u8>,
    pub qos: u8,
    #[serde(default)]
    pub retain: bool,
    /// Its packet id when it was sent (resent with DUP and this id); 0:
    /// never sent.
    #[serde(default)]
    pub id: u16,
    /// QoS 2: PUBREC came and PUBREL went (PUBREL is resent, not the message).
    #[serde(default)]
    pub released: bool,
    /// Its v5 properties, without the publisher (`Forwarded::stored`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mqtt: Option<Box<crate::proto::mqtt::forward::Forwarded>>,
    /// Wall-clock µs it was published: its Message Expiry Interval
    /// counts from there.
    #[serde(default)]
    pub publish_us: u64,
}

/// The answer to a [`SessionClaim`] (`session {json}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionAnswer {
    pub conn: u64,
    /// 0: accepted; else the CONNACK code refusing it.
    pub code: u8,
    /// A kept session resumed (CONNACK session present 1).
    pub present: bool,
    #[serde(default)]
    pub subs: Vec<KeptSub>,
    #[serde(default)]
    pub messages: Vec<SessionMessage>,
    /// The client id's key in the registry: the connection's end
    /// carries it back.
    #[serde(default)]
    pub key: IdKey,
    /// The claim's session expiry: a connection that closed while its
    /// claim waited gives a resumed session back with it, kept again.
    #[serde(default, skip_serializing_if = "no_expiry")]
    pub expiry_s: u32,
    /// A resumed session's QoS 2 ids awaiting PUBREL ([`SessionState::rel`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rel: Vec<u16>,
    /// The claim's owner and identity: a connection that closed while its
    /// claim waited gives a resumed session back under them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
    /// Refused by the `--mqtt-auth-http` backend (the CONNECT's close reason).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hook_refused: bool,
    /// The client id the server assigned, for a 5.0 CONNACK to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned: Option<String>,
    /// What the `--mqtt-auth-http` backend granted the connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<crate::server::auth::hook_acl::Grant>,
}

fn no_expiry(n: &u32) -> bool {
    *n == 0
}

/// One connection as `GET /connections` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConnInfo {
    pub id: u64,
    pub worker: usize,
    pub peer: String,
    pub age_s: u64,
    /// The first [`LIST_TOPICS`] of its topics.
    pub topics: Vec<String>,
    /// How many topics it has in all.
    #[serde(default)]
    pub topics_total: usize,
    /// Its token's `sub` (`--auth jwt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its token's `info` claim (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

/// Topics shown per connection in a listing.
pub(crate) const LIST_TOPICS: usize = 16;
/// Most bytes of connections one worker answers a listing with (clients
/// choose their topic names: without it a listing could cost a worker
/// and the supervisor gigabytes).
pub(crate) const LIST_BYTES: usize = 2 << 20;

impl ConnInfo {
    /// About what it costs as JSON.
    pub(crate) fn json_bytes(&self) -> usize {
        96 + self.peer.len()
            + self.topics.iter().map(|t| t.len() + 3).sum::<usize>()
            + self.user.as_ref().map_or(0, |u| u.len() + 10)
            + self.info.as_ref().map_or(0, |i| i.to_string().len() + 10)
    }
}

/// Arguments of a `list` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ListCommand {
    pub request_id: u64,
    pub limit: usize,
    pub topic: Option<String>,
    /// Only this user's connections.
    #[serde(default)]
    pub user: Option<String>,
}

/// Arguments of a `presence` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PresenceCommand {
    pub request_id: u64,
    pub topic: String,
}

/// `list {json}`: report some connections.
pub(crate) const CMD_LIST: &str = "list";
/// `presence {json}`: report a topic's subscribers by user.
pub(crate) const CMD_PRESENCE: &str = "presence";
/// `session {json}`: the answer to an MQTT client id's claim.
pub(crate) const CMD_SESSION: &str = "session";
/// `takeover CONN`: a CONNECT with this connection's MQTT client id came: close it.
pub(crate) const CMD_TAKEOVER: &str = "takeover";
/// `upgrade {json}`: the backend's decision on a held WebSocket or event-stream request.
pub(crate) const CMD_UPGRADE: &str = "upgrade";
/// `authz [json]`: the backend's decisions on held publishes and subscriptions.
pub(crate) const CMD_AUTHZ: &str = "authz";
/// `tls_reload "PEM"`: new handshakes use this certificate and key (the
/// supervisor read and checked them after a SIGHUP or a change of the files).
pub(crate) const CMD_TLS_RELOAD: &str = "tls_reload";
/// `mqtt_files {json}`: mosquitto's password and ACL files, read again
/// (SIGHUP) and checked by the supervisor.
pub(crate) const CMD_MQTT_FILES: &str = "mqtt_files";
/// `auth_key {json}`: `--auth jwt`'s key, read again (SIGHUP, a changed
/// `--config`) and checked by the supervisor: new tokens are verified
/// with it.
pub(crate) const CMD_AUTH_KEY: &str = "auth_key";
/// `notices [json]`: tell the topics' subscribers who joined or left.
pub(crate) const CMD_NOTICES: &str = "notices";
/// `upstream_done N`: the backend took (or refused for good) N more of
/// this worker's messages, its oldest (the worker knows their bytes).
pub(crate) const CMD_UPSTREAM_DONE: &str = "upstream_done";
/// Clients are resuming somewhere on this server: note accepts for the
/// seam (see `worker/seam.rs`), also on a worker that has read no resume yet.
pub(crate) const CMD_RESUMING: &str = "resuming";

/// What a server worker hears from its supervisor beyond the common
/// commands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ServerCommand {
    List(ListCommand),
    Presence(PresenceCommand),
    Session(SessionAnswer),
    Takeover(u64),
    Upgrade(UpgradeAnswer),
    Authz(Vec<crate::server::auth::authz::Answer>),
    TlsReload(crate::tls::files::Pem),
    MqttFiles(crate::server::auth::mosquitto::Files),
    AuthKey(crate::server::auth::jwt::JwtKey),
    Resuming,
    UpstreamDone(u64),
    Notices(Vec<crate::proto::push::Notice>),
}

impl ServerCommand {
    /// A role command's word and argument. Err names what did not parse
    /// (the worker counts and logs it: the supervisor's own commands, so
    /// a bug, never dropped unsaid).
    pub(crate) fn parse(word: &str, arg: &str) -> Result<ServerCommand, String> {
        fn json<T: serde::de::DeserializeOwned>(word: &str, arg: &str) -> Result<T, String> {
            serde_json::from_str(arg).map_err(|e| format!("command '{word}' does not parse: {e}"))
        }
        fn number(word: &str, arg: &str) -> Result<u64, String> {
            arg.trim().parse().map_err(|e| format!("command '{word}' does not parse: {e}"))
        }
        Ok(match word {
            CMD_LIST => ServerCommand::List(json(word, arg)?),
            CMD_PRESENCE => ServerCommand::Presence(json(word, arg)?),
            CMD_SESSION => ServerCommand::Session(json(word, arg)?),
            CMD_TAKEOVER => ServerCommand::Takeover(number(word, arg)?),
            CMD_UPGRADE => ServerCommand::Upgrade(json(word, arg)?),
            CMD_AUTHZ => ServerCommand::Authz(json(word, arg)?),
            CMD_TLS_RELOAD => ServerCommand::TlsReload(json(word, arg)?),
            CMD_MQTT_FILES => ServerCommand::MqttFiles(json(word, arg)?),
            CMD_AUTH_KEY => ServerCommand::AuthKey(json(word, arg)?),
            CMD_RESUMING => ServerCommand::Resuming,
            CMD_UPSTREAM_DONE => ServerCommand::UpstreamDone(number(word, arg)?),
            CMD_NOTICES => ServerCommand::Notices(json(word, arg)?),
            other => return Err(format!("an unknown command '{other}'")),
        })
    }
}

/// One message as a worker delivers it to its connections (what a
/// shard's `bus::Deliver` frame said, owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PushCommand {
    /// Matches the worker's acknowledgement to the admin request; 0: a
    /// quiet publish nobody waits for, not acknowledged.
    pub publish_id: u64,
    pub stream: Stream,
    pub topic: String,
    /// The message's offset in its topic's history (0: unicast).
    pub seq: u64,
    /// The epoch of that history (0: unicast).
    pub epoch: u32,
    pub publish_us: u64,
    /// Unicast: the connection id.
    pub target: Option<u64>,
    /// Unicast: every connection of this user.
    pub user: Option<String>,
    /// Close the targets instead of writing to them.
    pub close: bool,
    /// MQTT: the QoS it was published with (0: the admin API).
    pub qos: u8,
    /// MQTT: it was published retained (Retain As Published keeps the flag).
    pub retain: bool,
    /// MQTT shared subscriptions: the one member of each matching group
    /// that gets this message (connection id, granted QoS), chosen by the
    /// supervisor (`broker/shared.rs`); the worker owning it delivers.
    pub shared: Vec<(u64, u8)>,
    /// MQTT: its publisher (No Local) and its v5 properties forwarded to
    /// subscribers (an MQTT client's publish only).
    pub mqtt: Option<Box<crate::proto::mqtt::forward::Forwarded>>,
    pub data: Vec<u8>,
}

impl PushCommand {
    /// A shard's delivery, owned.
    pub(crate) fn from_bus(d: crate::proto::bus::Deliver<'_>) -> PushCommand {
        PushCommand {
            publish_id: d.publish_id,
            stream: d.stream,
            topic: d.topic.to_string(),
            seq: d.seq,
            epoch: d.epoch,
            publish_us: d.publish_us,
            target: d.target,
            user: d.user.map(str::to_string),
            close: d.close,
            qos: d.qos,
            retain: d.retain,
            shared: d.shared,
            mqtt: d.props.map(Box::new),
            data: d.payload.to_vec(),
        }
    }
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

use crate::proto::push::MAX_KEYS;

/// A connection id: stable for the connection's life and unique within
/// the server: the worker's index (a replaced worker gets a new one), the
/// slab key, and the whole 32-bit generation (one per accept; a worker
/// stops accepting before it would reuse one), so an id an application
/// kept can never reach a later connection (issue 42, finding 12: with 24
/// bits it could after 2^24 accepts).
pub(crate) fn conn_id(worker: usize, key: usize, gen: u32) -> u64 {
    ((worker as u64 & 0xFFFF) << 48) | ((key as u64 & (MAX_KEYS - 1)) << 32) | gen as u64
}

/// (worker, slab key, generation) of a connection id.
pub(crate) fn split_id(id: u64) -> (usize, usize, u32) {
    ((id >> 48) as usize, ((id >> 32) & (MAX_KEYS - 1)) as usize, id as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_survive_the_pipe() {
        let mut s = ServerSnapshot { worker: 3, budget: 7, ..Default::default() };
        s.accepted = 9;
        s.close_reasons.insert("peer_closed".into(), 2);
        let line = serde_json::to_string(&ServerMsg::Server(Box::new(s))).unwrap();
        let ServerMsg::Server(back) = serde_json::from_str::<ServerMsg>(&line).unwrap() else { panic!("{line}") };
        assert_eq!((back.worker, back.budget, back.accepted, back.close_reasons["peer_closed"]), (3, 7, 9, 2));
        let fatal: ServerMsg = serde_json::from_str(r#"{"event":"fatal","worker":18446744073709551615,"message":"m"}"#).unwrap();
        assert!(matches!(fatal, ServerMsg::Fatal { message, .. } if message == "m"));
    }

    #[test]
    fn ids_round_trip() {
        let id = conn_id(55, 17_000, 0x1234567);
        assert_eq!(split_id(id), (55, 17_000, 0x1234567));
        // Every generation bit counts: a connection 2^24 accepts later on
        // the same key has another id (it had the same with 24 bits).
        assert_ne!(conn_id(3, 9, 5), conn_id(3, 9, 5 + (1 << 24)));
        assert_eq!(split_id(conn_id(65_535, 65_535, u32::MAX)), (65_535, 65_535, u32::MAX));
    }
}
