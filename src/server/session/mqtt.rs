//! The server side of `--protocol mqtt` (MQTT 3.1.1 and 5.0, codec in
//! `proto/mqtt`): CONNECT answered with CONNACK (`--auth jwt`: the
//! password is the token), PINGREQ with PINGRESP, SUBSCRIBE and
//! UNSUBSCRIBE into the worker's topics (exact topics in `topics.rs`,
//! `+`/`#` filters in `wildcards.rs`), and PUBLISH at QoS 0, 1 and 2 into
//! the one topic space: each goes to the supervisor as an admin publish
//! would (`broker/publish.rs`), so WebSocket, SSE, framed and MQTT
//! subscribers of the topic all get it. Bytes in ([`consume`]), packets
//! in `req.out`.
//!
//! QoS 1 and 2 deliveries to the client and the client's QoS 2 publishes
//! awaiting PUBREL are in `mqtt/flight.rs` (acknowledgements in
//! `mqtt/acks.rs`); subscription options, the will and the flight live in
//! a box (`mqtt/extra.rs`) that exists only while there is any. Retained
//! messages are the supervisor's (`broker/retained.rs`): a new
//! subscription asks for its filter's (`Published::wants`).
//!
//! A CONNECT with a client id is not answered at once: the id is claimed
//! from the supervisor (`Published::claims`; the registry of every
//! worker's ids and the kept sessions are `broker/sessions.rs`), and what
//! the client sends meanwhile waits unread (at most one packet's worth).
//! The answer (`worker/mqtt_session.rs`) brings the CONNACK, session
//! present or not, and a resumed session's subscriptions and messages.
//!
//! Shared subscriptions (`$share/{group}/{filter}`) are `mqtt/shared.rs`:
//! the supervisor picks one member of a group per message.
//!
//! A v5 client's topic aliases are resolved by `mqtt/alias.rs`.
//!
//! v5 subscription options No Local and Subscription Identifier are kept
//! with the subscription (`mqtt/extra.rs`); a v5 PUBLISH's properties
//! that subscribers get (`proto/mqtt/forward.rs`) travel with it,
//! bounded (past the bound refused 0x95).
//!
//! Not supported yet, and refused with a reason code rather than half
//! done: extended authentication (CONNACK 0x8C).
//!
//! Every refusal after the CONNECT is answered in 5.0 with a DISCONNECT
//! carrying its reason code, in 3.1.1 by closing (3.1.1 §4.8); the close
//! reason is the codec's counter name (`mqtt_...`).

use crate::proto::mqtt::decode::{self, FixedHeader};
use crate::proto::mqtt::forward::Forwarded;
use crate::proto::mqtt::{encode, kind, Ack, ConnAck, Disconnect, Error, Limits, Packet, Properties, Publish, QoS, Role, Version};
use crate::server::auth::authz::Action as AuthzAction;
use crate::server::close::{self, Close};
use crate::server::commands::{ClientPublish, RetainedWant, SessionClaim};
use crate::server::session::requests::Requests;
use crate::server::tables::topics::{Subs, Topics};

/// The close reason of a client's own DISCONNECT.
#[cfg(test)]
pub(crate) const PEER_DISCONNECT: &str = "mqtt_disconnect";
/// The close reason of a client silent past 1.5 times its keep-alive.
#[cfg(test)]
pub(crate) const KEEPALIVE: &str = "mqtt_keepalive_timeout";
/// Most bytes of client publishes a worker holds before handing them to
/// the supervisor (it hands them on after every read, so this bounds one
/// read's worth); a publish past it is refused (v5 0x97 quota exceeded).
pub(crate) const MAX_PENDING_PUBLISH_BYTES: usize = 4 << 20;
/// Receive Maximum the server announces (v5): every QoS 1 PUBLISH is
/// acknowledged in the read that brought it, so the window bounds what a
/// client may send ahead and how many of its QoS 2 publishes may await
/// their PUBREL (each costs 2 bytes while it does).
pub(crate) const RECEIVE_MAXIMUM: u16 = 1024;
/// MQTT 5.0 reason code 0x80, "unspecified error".
const UNSPECIFIED_ERROR: u8 = 0x80;

mod acks;
pub(crate) mod alias;
mod authz;
pub(crate) mod connect;
pub(crate) mod extra;
pub(crate) mod flight;
pub(crate) mod shared;
pub(crate) mod states;
mod subscribe;

/// MQTT settings of a server worker.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct MqttConfig {
    /// `--max-push-bytes`: the largest payload a client may publish (the
    /// largest push the topic space carries).
    pub max_push: usize,
    /// `--mqtt-inflight`, `--mqtt-queue`, `--mqtt-queue-bytes`.
    #[serde(default)]
    pub flight: flight::Bounds,
    /// `--mqtt-max-keep-alive`: the longest keep-alive a client may ask
    /// for (0: any); a v5 client asking more, or none, is given this one
    /// (CONNACK Server Keep Alive), a 3.1.1 one refused.
    #[serde(default)]
    pub max_keep_alive: u16,
    /// `--mqtt-auth-http`: every CONNECT's login goes with its claim to
    /// the supervisor, which asks the backend.
    #[serde(default)]
    pub auth_hook: bool,
    /// `--mqtt-authz-http`: publishes, subscriptions and wills are asked
    /// of the backend through the supervisor; its answers kept this long
    /// in the worker, a packet waiting at most the second.
    #[serde(default)]
    pub authz_hook: Option<(std::time::Duration, std::time::Duration)>,
}

impl MqttConfig {
    /// What the codec refuses: packets up to a push's largest payload
    /// with its topic and headers, topics no longer than a megaconn topic.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_packet_size: (self.max_push + crate::proto::push::MAX_TOPIC + 64).min(crate::proto::mqtt::MAX_VARINT as usize) as u32,
            max_topic_len: crate::proto::push::MAX_TOPIC,
            ..Limits::default()
        }
    }
}

/// A connection's MQTT state, for as long as it is open (in the worker's
/// dense table, `session/mqtt/states.rs`).
#[derive(Debug, Default)]
pub(crate) struct MqttConn {
    /// Set by an accepted CONNECT; `None` while the CONNECT is still due.
    pub version: Option<Version>,
    /// Seconds of keep-alive the CONNECT asked for (0: off).
    pub keep_alive_s: u16,
    /// Where its client id is in the supervisor's registry.
    pub claim: Claim,
    /// Its client id's key there (from the answer; its end carries it
    /// back).
    pub key: crate::server::commands::IdKey,
    /// Subscription options, deliveries in flight, the will, a v5
    /// Maximum Packet Size or Receive Maximum, a session that outlives
    /// the connection: boxed, and only while there is any
    /// (`mqtt/extra.rs`), so that this record stays 24 bytes in the
    /// worker's table (a million devices: 24 MB; whether it speaks over
    /// WebSocket is its port's protocol, not a field here).
    pub extra: Option<Box<extra::Extra>>,
}

/// A connection's client id in the supervisor's registry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Not there: no CONNECT yet, or an empty client id (unique by
    /// construction), or refused.
    #[default]
    None,
    /// Claimed, the answer (and so the CONNACK) due.
    Waiting,
    /// Registered: its end is reported (the id is freed, the session kept).
    Registered,
}

impl MqttConn {
    /// State of a connection just accepted (or upgraded to MQTT on a
    /// WebSocket port): its CONNECT is due.
    pub(crate) fn fresh() -> MqttConn {
        MqttConn { version: None, keep_alive_s: 0, claim: Claim::None, key: [0; 3], extra: None }
    }

    /// Whether it still owes its CONNECT, or its CONNACK waits for the
    /// supervisor (`--header-timeout`).
    pub(crate) fn connecting(&self) -> bool {
        self.version.is_none() || self.claim == Claim::Waiting
    }
}

/// Whether a connection (its MQTT state, if it speaks MQTT) still owes
/// its CONNECT or waits for its CONNACK.
pub(crate) fn connecting(m: Option<&MqttConn>) -> bool {
    m.is_some_and(MqttConn::connecting)
}

/// Client publishes (and wills) a worker holds until it hands them to
/// its supervisor, and new subscriptions that want retained messages.
#[derive(Debug, Default)]
pub(crate) struct Published {
    pub messages: Vec<ClientPublish>,
    /// Payload and topic bytes in `messages`.
    pub bytes: usize,
    /// Handed on after `messages`, so a retained publish of the same read
    /// is in the answer. At most one per subscription of the read.
    pub wants: Vec<RetainedWant>,
    /// CONNECTs' client ids to claim: at most one per connection read.
    pub claims: Vec<SessionClaim>,
    /// Shared subscription groups joined or left, for the supervisor: at
    /// most one per subscription of the read.
    pub shared_changes: Vec<crate::server::commands::SharedChange>,
    /// The worker's shared subscription names (not handed on: it bounds them).
    pub shared: shared::Local,
}

/// What one read of an MQTT connection works on.
pub(crate) struct Ctx<'a> {
    pub req: Requests<'a>,
    pub cfg: &'a MqttConfig,
    pub limits: &'a Limits,
    pub topics: &'a mut Topics,
    pub subs: &'a mut Subs,
    pub published: &'a mut Published,
    /// This worker's index (assigned client ids name it).
    pub worker: usize,
    /// `--upstream`: every accepted PUBLISH goes to the application too.
    pub upstream: Option<&'a mut crate::server::tables::outbox::Outbox>,
    /// The connection's socket, only to tell who the peer is (without
    /// `--auth` its address is whom bounds charge); never read or written.
    pub peer_fd: std::os::fd::RawFd,
}

impl Ctx<'_> {
    /// Whom this connection's share of a bound is charged to: its token's
    /// `sub`, else its address.
    pub(crate) fn identity(&self) -> String {
        match self.topics.gate.user_of(self.req.key) {
            Some(user) => user.to_string(),
            None => crate::sys::peer_ip(self.peer_fd),
        }
    }
}

/// Take the bytes read so far: every whole packet is carried out; returns
/// how many bytes were used (a cut packet waits for more). Err closes the
/// connection with that reason, after what `req.out` holds (a CONNACK or
/// DISCONNECT with the refusal's code).
pub(crate) fn consume(ctx: &mut Ctx<'_>, m: &mut MqttConn, buf: &[u8]) -> Result<usize, Close> {
    let mut pos = 0;
    loop {
        if m.claim == Claim::Waiting {
            // Unread until the CONNACK: what a client may send ahead is
            // one packet's worth.
            if buf.len() - pos > ctx.limits.max_packet_size as usize {
                return Err(Close::MqttConnectUnansweredOverflow);
            }
            return Ok(pos);
        }
        if authz::waits(ctx) {
            // Its packet waits for the authorization backend, the
            // connection unread: what a receive brought meanwhile is kept.
            if buf.len() - pos > 2 * ctx.limits.max_packet_size as usize {
                return Err(Close::MqttAuthzUnanswered);
            }
            return Ok(pos);
        }
        let h = match decode::fixed_header(&buf[pos..], m.version, ctx.limits.max_packet_size) {
            Ok(Some(h)) if buf.len() - pos >= h.total() => h,
            Ok(_) => return Ok(pos),
            Err(e) => return Err(refuse(ctx, m.version, e)),
        };
        let body = &buf[pos + h.len..pos + h.total()];
        if on_packet(ctx, m, &h, body)? == Step::Held {
            // Read again from this packet once the answers are in.
            return Ok(pos);
        }
        ctx.req.stats.frames_in += 1;
        pos += h.total();
    }
}

/// Whether a packet was carried out, or waits unread for the
/// authorization backend's answers (`--mqtt-authz-http`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Done,
    Held,
}

/// One whole packet. Err closes the connection.
fn on_packet(ctx: &mut Ctx<'_>, m: &mut MqttConn, h: &FixedHeader, body: &[u8]) -> Result<Step, Close> {
    let Some(version) = m.version else {
        if h.kind != kind::CONNECT {
            return Err(refuse(ctx, None, Error::UnexpectedPacket));
        }
        let version = decode::connect_version(body).map_err(|e| refuse(ctx, None, e))?;
        return match decode::packet(h, body, Role::Server, version, ctx.limits) {
            Ok(Packet::Connect(c)) => {
                let mut c = *c;
                let (user, client_id) = (c.username.unwrap_or_default(), c.client_id);
                if let Some(w) = &c.will {
                    // A will its client may not publish is dropped (the CONNECT stands).
                    match authz::decide(ctx, &[(w.topic, AuthzAction::Publish, w.qos as u8, w.retain)], Some((user, client_id))) {
                        authz::Decision::Held => return Ok(Step::Held),
                        authz::Decision::Decided(denied) if !denied.is_empty() => {
                            close::count(&mut ctx.req.stats.mqtt_publish_refused, Close::MqttAuthzHttpDenied);
                            c.will = None;
                        }
                        _ => {}
                    }
                }
                connect::connect(ctx, m, c)?;
                let assigned;
                let client_id = match (client_id, m.version) {
                    ("", Some(Version::V5)) => {
                        assigned = connect::assigned_id(ctx);
                        assigned.as_str()
                    }
                    (id, _) => id,
                };
                authz::connected(ctx, user, client_id);
                Ok(Step::Done)
            }
            Ok(_) => Err(refuse(ctx, None, Error::UnexpectedPacket)),
            Err(e) => Err(refuse_connect(ctx, version, e.reason_code(), e.v3_connack(), Close::Mqtt(e))),
        };
    };
    if h.kind == kind::CONNECT {
        return Err(refuse(ctx, Some(version), Error::UnexpectedPacket));
    }
    let p = decode::packet(h, body, Role::Server, version, ctx.limits).map_err(|e| refuse(ctx, Some(version), e))?;
    match p {
        Packet::PingReq => send(ctx, version, &Packet::PingResp),
        Packet::Disconnect(d) => {
            // v5 may change the session's expiry here, but not from 0
            // (§3.14.2.2.2).
            if let Some(expiry) = d.properties.session_expiry {
                if m.expiry_s() == 0 && expiry > 0 {
                    m.tidy();
                    return Err(disconnect(ctx, version, Close::MqttSessionExpiryAfterZero));
                }
                m.set_expiry(expiry);
            }
            // A clean end deletes the will; v5 0x04 asks for it (§3.14.2.1).
            if d.reason != 0x04 {
                m.take_will();
                m.tidy();
            }
            return Err(Close::MqttDisconnect);
        }
        Packet::Subscribe(s) => {
            let items: Vec<authz::Item<'_>> = s
                .subscriptions
                .iter()
                .map(|sub| {
                    let filter = crate::proto::mqtt::topic::shared(sub.filter).map_or(sub.filter, |sh| sh.filter);
                    (filter, AuthzAction::Subscribe, sub.qos as u8, false)
                })
                .collect();
            let denied = match authz::decide(ctx, &items, None) {
                authz::Decision::Held => return Ok(Step::Held),
                authz::Decision::Off => Vec::new(),
                authz::Decision::Decided(denied) => denied,
            };
            subscribe::subscribe(ctx, m, version, s, &denied)?
        }
        Packet::Unsubscribe(u) => subscribe::unsubscribe(ctx, m, version, u)?,
        Packet::Publish(p) => return publish(ctx, m, version, p),
        Packet::PubAck(a) => acks::outbound(ctx, m, version, flight::Stage::Ack, &a),
        Packet::PubRec(a) => acks::outbound(ctx, m, version, flight::Stage::Rec, &a),
        Packet::PubComp(a) => acks::outbound(ctx, m, version, flight::Stage::Comp, &a),
        Packet::PubRel(a) => acks::pubrel(ctx, m, version, &a),
        // AUTH without an authentication method (§4.12).
        _ => return Err(disconnect(ctx, version, Close::Mqtt(Error::UnexpectedPacket))),
    }
    Ok(Step::Done)
}

/// Append one packet to the output.
fn send(ctx: &mut Ctx<'_>, version: Version, p: &Packet<'_>) {
    // Nothing the server sends is over the codec's field limits: client
    // ids, topics and payloads were bounded when they came in.
    if encode::packet(p, version, ctx.req.out).is_ok() {
        ctx.req.stats.frames_out += 1;
    }
}

/// A codec refusal: CONNACK before the CONNECT was accepted, else (5.0)
/// DISCONNECT, with its reason code; the close it is.
fn refuse(ctx: &mut Ctx<'_>, version: Option<Version>, e: Error) -> Close {
    match version {
        None => refuse_connect(ctx, Version::V311, e.reason_code(), e.v3_connack(), Close::Mqtt(e)),
        Some(v) => disconnect(ctx, v, Close::Mqtt(e)),
    }
}

/// A CONNECT refused: CONNACK with the 5.0 reason code or the 3.1.1
/// return code (none: close without one, 3.1.1 §4.8).
fn refuse_connect(ctx: &mut Ctx<'_>, version: Version, v5: u8, v3: Option<u8>, reason: Close) -> Close {
    let code = match version {
        Version::V5 => Some(v5),
        Version::V311 => v3,
    };
    if let Some(code) = code {
        send(ctx, version, &Packet::ConnAck(ConnAck { session_present: false, code, properties: Properties::default() }));
    }
    reason
}

/// 5.0: a DISCONNECT with the reason's code ([`Close::mqtt_code`])
/// before the close; 3.1.1: just the close.
fn disconnect(ctx: &mut Ctx<'_>, version: Version, reason: Close) -> Close {
    if let Some(code) = reason.mqtt_code().filter(|_| version == Version::V5) {
        send(ctx, version, &Packet::Disconnect(Disconnect { reason: code, properties: Properties::default() }));
    }
    reason
}

/// Whether `topic` is `$SYS` or below it: the server's own topics, which
/// clients read and never write.
pub(crate) fn is_sys(topic: &str) -> bool {
    topic.strip_prefix("$SYS").is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The acknowledgement a PUBLISH of `qos` gets: PUBACK, PUBREC, or none.
fn publish_ack(qos: QoS, packet_id: u16, reason: u8) -> Option<Packet<'static>> {
    let a = Ack { packet_id, reason, properties: Properties::default() };
    match qos {
        QoS::AtMostOnce => None,
        QoS::AtLeastOnce => Some(Packet::PubAck(a)),
        QoS::ExactlyOnce => Some(Packet::PubRec(a)),
    }
}

/// PUBLISH from a client: into the topic space, then PUBACK (QoS 1) or
/// PUBREC (QoS 2: once per packet id until its PUBREL; a resend while
/// it is due is acknowledged again, not forwarded again).
fn publish(ctx: &mut Ctx<'_>, m: &mut MqttConn, v: Version, p: Publish<'_>) -> Result<Step, Close> {
    let aliased = match alias::resolve(m, p.topic, p.properties.topic_alias) {
        Ok(t) => t,
        Err(reason) => {
            m.tidy();
            return Err(disconnect(ctx, v, reason));
        }
    };
    let topic: &str = aliased.as_deref().unwrap_or(p.topic);
    if is_sys(topic) {
        // The server's (MQTT-4.7.2-1).
        dropped(ctx, v, &p, Close::MqttSysTopic);
        return Ok(Step::Done);
    }
    if ctx.topics.gate.authz.is_some() && crate::proto::push::check_topic(topic.as_bytes()).is_ok() {
        // The backend's word first: nothing else is done for a publish it refuses.
        match authz::decide(ctx, &[(topic, AuthzAction::Publish, p.qos as u8, p.retain)], None) {
            authz::Decision::Held => return Ok(Step::Held),
            authz::Decision::Decided(denied) if !denied.is_empty() => {
                dropped(ctx, v, &p, Close::MqttAuthzHttpDenied);
                return Ok(Step::Done);
            }
            _ => {}
        }
    }
    let origin = crate::server::commands::conn_id(ctx.worker, ctx.req.key, ctx.req.gen);
    let forwarded = Forwarded::from_publish(&p.properties, Some(origin));
    let refused = if crate::proto::push::check_topic(topic.as_bytes()).is_err() {
        Some(Close::BadTopic)
    } else if let Err(reason) = ctx.topics.gate.may_publish(ctx.req.key, topic) {
        Some(reason)
    } else if p.payload.len() > ctx.cfg.max_push {
        Some(Close::MqttPayloadTooLarge)
    } else if forwarded.is_err() {
        Some(Close::MqttPropertiesTooLarge)
    } else if ctx.published.bytes + p.payload.len() > MAX_PENDING_PUBLISH_BYTES {
        Some(Close::MqttPublishQueueFull)
    } else {
        None
    };
    if refused == Some(Close::MqttAclDenied) {
        dropped(ctx, v, &p, Close::MqttAclDenied);
        return Ok(Step::Done);
    }
    if let Some(reason) = refused {
        close::count(&mut ctx.req.stats.mqtt_publish_refused, reason);
        // Only a QoS 1 or 2 publish of 5.0 can be refused and the connection kept.
        let code = reason.mqtt_code().unwrap_or(UNSPECIFIED_ERROR);
        match publish_ack(p.qos, p.packet_id, code).filter(|_| v == Version::V5) {
            Some(ack) => send(ctx, v, &ack),
            None => return Err(disconnect(ctx, v, reason)),
        }
        return Ok(Step::Done);
    }
    if p.qos == QoS::ExactlyOnce {
        match m.extra_mut().flight.received(p.packet_id, usize::from(RECEIVE_MAXIMUM)) {
            flight::Incoming::New => {}
            flight::Incoming::Resent => {
                ctx.req.stats.mqtt_qos2_resent += 1;
                send(ctx, v, &Packet::PubRec(Ack { packet_id: p.packet_id, reason: 0, properties: Properties::default() }));
                return Ok(Step::Done);
            }
            flight::Incoming::TooMany => {
                m.tidy();
                return Err(disconnect(ctx, v, Close::MqttReceiveMaximumExceeded));
            }
        }
    }
    if let Some(up) = ctx.upstream.as_deref_mut() {
        // To the application as well as to subscribers, or to neither: a
        // full budget refuses the publish (v5 QoS 1 and 2: quota
        // exceeded), never drops it unsaid.
        let user = ctx.topics.gate.user_of(ctx.req.key);
        if let Err(reason) =
            up.offer((ctx.req.key, ctx.req.gen), |conn| crate::server::up_message::UpMessage::message(conn, user, Some(topic), false, p.payload))
        {
            if p.qos == QoS::ExactlyOnce {
                m.extra_mut().flight.released(p.packet_id);
            }
            close::count(&mut ctx.req.stats.mqtt_publish_refused, reason);
            match publish_ack(p.qos, p.packet_id, reason.mqtt_code().unwrap_or(UNSPECIFIED_ERROR)).filter(|_| v == Version::V5) {
                Some(ack) => send(ctx, v, &ack),
                None => return Err(disconnect(ctx, v, reason)),
            }
            return Ok(Step::Done);
        }
        ctx.req.stats.upstream_sent += 1;
    }
    let forwarded = forwarded.ok().map(Box::new);
    ctx.published.bytes += p.payload.len() + topic.len() + forwarded.as_ref().map_or(0, |f| f.cost());
    let data = p.payload.to_vec();
    // A retained one is charged to its publisher (the address filled in
    // by the worker without `--auth`).
    let identity = p.retain.then(|| ctx.topics.gate.user_of(ctx.req.key).unwrap_or_default().to_string());
    ctx.published.messages.push(ClientPublish { topic: topic.into(), data, qos: p.qos as u8, retain: p.retain, mqtt: forwarded, identity });
    crate::stats::counters::bump(&mut ctx.req.stats.mqtt_publishes_in, p.qos.label());
    ctx.req.stats.mqtt_publish_bytes_in += p.payload.len() as u64;
    if let Some(ack) = publish_ack(p.qos, p.packet_id, 0) {
        send(ctx, v, &ack);
    }
    Ok(Step::Done)
}

/// A publish dropped as mosquitto drops it (a `$SYS` topic, one the ACL
/// does not let its client write), the connection kept: counted, and
/// acknowledged (5.0 QoS 1 and 2 with 0x87, not authorized; 3.1.1 as if
/// it went).
fn dropped(ctx: &mut Ctx<'_>, v: Version, p: &Publish<'_>, reason: Close) {
    close::count(&mut ctx.req.stats.mqtt_publish_refused, reason);
    let code = if v == Version::V5 { 0x87 } else { 0 };
    if let Some(ack) = publish_ack(p.qos, p.packet_id, code) {
        send(ctx, v, &ack);
    }
}

/// A push as the PUBLISH MQTT subscribers of `version` receive with
/// `qos`, `retain` and (v5) `properties`: encoded once per worker per form (see
/// `worker/mqtt_out.rs`); for QoS 1 and 2, where each copy gets its packet
/// id (`flight::Delivery`). Empty when the codec refuses it (a push's
/// topic and data are within its field limits: 255 bytes, at most 1 MiB).
pub(crate) fn encode_push(version: Version, topic: &str, data: &[u8], qos: QoS, retain: bool, properties: Properties<'_>) -> (Vec<u8>, usize) {
    let p = Publish { dup: false, qos, retain, topic, packet_id: 0, properties, payload: data };
    match encode::PublishPrefix::new(&p, version) {
        Ok(prefix) => {
            let mut out = Vec::with_capacity(prefix.bytes().len() + data.len());
            out.extend_from_slice(prefix.bytes());
            out.extend_from_slice(data);
            (out, prefix.packet_id_at().unwrap_or(0))
        }
        Err(_) => (Vec::new(), 0),
    }
}

#[cfg(test)]
mod tests;
