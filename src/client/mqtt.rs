//! The client side of `--protocol mqtt`: a load generator for MQTT
//! brokers (megaconn's own `server --protocol mqtt`, mosquitto, any
//! other), speaking 3.1.1 or 5.0 with the shared codec in
//! [`crate::proto::mqtt`] (nothing is encoded or decoded here by hand).
//!
//! A connection opens with CONNECT (clean session, a client id from a
//! `{conn}` template, the keep-alive from `--heartbeat`, a user name and
//! password, or the minted JWT as password) and counts as established
//! only once CONNACK accepts it; a refusal fails it as
//! `mqtt_connack_<code>` (3.1.1 return codes in decimal, 5.0 reason codes
//! in hex, as the two standards write them). Then its SUBSCRIBE goes out
//! (SUBACK codes counted granted or refused), heartbeats are PINGREQs
//! timed by their PINGRESP, requests are PUBLISHes carrying a
//! [`crate::proto::stamp`] (publisher, sequence, intended send time; QoS
//! 1 timed by their PUBACK, QoS 2 by their PUBCOMP after PUBREC answered
//! PUBREL; QoS 0 has no answer and is counted apart), and every PUBLISH
//! from the broker is a push, timed and checked for loss when stamped
//! ([`super::mqtt_delivery`]); QoS 1 ones are answered PUBACK, QoS 2 ones
//! PUBREC, then PUBCOMP on the PUBREL, and delivered once.
//!
//! The intended send times of PINGREQs and QoS 1 and 2 PUBLISHes wait in the
//! connection's `Inflight` queue, each tagged with its packet id (0 for a
//! ping), at most [`MAX_INFLIGHT`] of them. What the broker sends is
//! bounded by [`MAX_PACKET`]: a larger packet closes the connection
//! (`mqtt_packet_too_large`) before its body is held.

use super::config::Traffic;
use super::mqtt_delivery::{self, AwaitingRelease};
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};
use super::ws_message::WsMessage;
use crate::proto::mqtt::{self, decode, encode, Packet, QoS, Version};
use crate::proto::stamp::Stamp;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Largest packet accepted from a broker (a megaconn push is at most
/// 1 MiB of data plus its topic and header).
pub(crate) const MAX_PACKET: u32 = (1 << 20) + 1024;
/// Most PINGREQs and QoS 1 and 2 PUBLISHes awaiting their answers per
/// connection; past it the oldest is forgotten (its answer is then not
/// timed).
pub(crate) const MAX_INFLIGHT: usize = 1024;
/// Most topic aliases a connection takes from a broker
/// (`--mqtt-topic-alias-maximum`): each holds a topic of up to the
/// codec's length, so a million connections stay bounded.
pub(crate) const MAX_TOPIC_ALIASES: u16 = 1024;
/// The packet id of every connection's one SUBSCRIBE (publishes use
/// 1..=65534).
const SUBSCRIBE_ID: u16 = 0xFFFF;
/// Low bits of an `Inflight` entry: the intended send time (µs, monotonic;
/// 2^48 µs is 8.9 years); the high 16 bits hold the packet id.
const TIME_MASK: u64 = (1 << 48) - 1;

/// `--mqtt-*`: how the client speaks MQTT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MqttOptions {
    /// `--mqtt-version 5`: MQTT 5.0 (default 3.1.1).
    pub v5: bool,
    /// `--mqtt-client-id`: the client id, `{conn}` replaced by the
    /// connection's index.
    pub client_id: String,
    /// `--mqtt-username` (default, when there is a password: the client id).
    pub username: Option<String>,
    /// `--mqtt-password` (`--jwt-secret-file` mints one per connection instead).
    pub password: Option<String>,
    /// `--mqtt-qos`: the QoS (0, 1 or 2) to publish and subscribe with.
    pub qos: u8,
    /// `--mqtt-publish-topic`: where requests publish (`{conn}` replaced).
    pub publish_topic: String,
    /// `--mqtt-subscribe`: topic filters (wildcards allowed, `{conn}`
    /// replaced) every connection subscribes to, besides `--subscribe`.
    pub subscribe: Vec<String>,
    /// `--mqtt-topic-alias-maximum` (5.0): aliases each connection takes
    /// from the broker, at most [`MAX_TOPIC_ALIASES`] (0: none).
    #[serde(default)]
    pub topic_alias_maximum: u16,
    /// Seconds the ramp may take by the plan (until its deadline):
    /// heartbeats start once it is done, so the keep-alive a CONNECT
    /// announces covers it (set by the client's planner, not a flag).
    #[serde(default)]
    pub ramp_s: u32,
}

impl Default for MqttOptions {
    fn default() -> MqttOptions {
        MqttOptions {
            v5: false,
            client_id: "megaconn-{conn}".into(),
            username: None,
            password: None,
            qos: 0,
            publish_topic: "megaconn/{conn}".into(),
            subscribe: Vec::new(),
            topic_alias_maximum: 0,
            ramp_s: 0,
        }
    }
}

/// `{conn}` in `template` replaced by `conn`.
pub(crate) fn expand(template: &str, conn: u64) -> String {
    template.replace("{conn}", &conn.to_string())
}

/// The keep-alive a CONNECT announces for heartbeats every `heartbeat`
/// that start after a ramp of up to `ramp_s` seconds: twice the interval
/// plus the ramp (whole seconds, rounded up, at most 65535), so one late
/// heartbeat does not get the connection closed, nor does a long ramp
/// (a broker closes a connection silent for 1.5 keep-alives: at 12,000
/// connections/s a million took 83 s, and with 30 s heartbeats the first
/// connections went silent past 90 s); 0 (off) without heartbeats.
pub(crate) fn keep_alive(heartbeat: Option<std::time::Duration>, ramp_s: u32) -> u16 {
    heartbeat.map_or(0, |h| (h.as_micros().div_ceil(1_000_000) * 2 + u128::from(ramp_s)).clamp(1, u16::MAX as u128) as u16)
}

/// Why a CONNACK refused: its code as the version's standard writes it.
fn connack_reason(v5: bool, code: u8) -> String {
    match v5 {
        true => format!("mqtt_connack_0x{code:02x}"),
        false => format!("mqtt_connack_{code}"),
    }
}

/// A `--mqtt-subscribe` filter, checked as the codec checks a SUBSCRIBE's
/// (with a large `{conn}` standing in for the index).
pub(crate) fn check_filter(filter: &str) -> Result<(), String> {
    mqtt::topic::validate_filter(&expand(filter, u64::MAX), &mqtt::Limits::default())
        .map(|_| ())
        .map_err(|e| format!("'{filter}' is not an MQTT topic filter: {e:?}"))
}

/// `--protocol mqtt` as a worker speaks it.
pub(crate) struct MqttSpeaker {
    traffic: Traffic,
    version: Version,
    limits: mqtt::Limits,
    keep_alive: u16,
    /// `--jwt-secret-file`: a token per connection, as its password.
    tokens: Option<super::token::Minter>,
    /// `--message`: the PUBLISH payload (else a stamped `--payload`).
    message: Option<WsMessage>,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC µs: a stamp's send time is
    /// wall-clock, so subscribers in other processes and hosts can time it.
    wall_offset_us: i64,
    /// QoS 2 deliveries answered PUBREC, awaiting their PUBREL.
    awaiting: AwaitingRelease,
    /// The topic aliases brokers set, per connection (5.0).
    aliases: mqtt_delivery::AliasesIn,
    shard: u64,
    /// The plan index of slot 0 (a connection's index is this plus its
    /// slot), learnt from the first `open`.
    first: u64,
}

impl MqttSpeaker {
    pub(crate) fn new(traffic: &Traffic, shard: u64) -> MqttSpeaker {
        MqttSpeaker {
            version: if traffic.mqtt.v5 { Version::V5 } else { Version::V311 },
            limits: mqtt::Limits { max_packet_size: MAX_PACKET, ..Default::default() },
            keep_alive: keep_alive(traffic.heartbeat, traffic.mqtt.ramp_s),
            tokens: traffic.jwt_secret.as_deref().map(super::token::Minter::new),
            message: traffic.raw_message.as_ref().map(|m| WsMessage::new(m, true)),
            wall_offset_us: crate::proto::push::wall_us() as i64 - crate::sys::mono_us() as i64,
            awaiting: AwaitingRelease::default(),
            aliases: mqtt_delivery::AliasesIn::new(traffic.mqtt.topic_alias_maximum),
            traffic: traffic.clone(),
            shard,
            first: 0,
        }
    }

    fn qos(&self) -> QoS {
        QoS::from_bits(self.traffic.mqtt.qos).unwrap_or(QoS::AtMostOnce)
    }

    /// The SUBSCRIBE of connection `conn`, if it subscribes to anything.
    fn subscribe(&self, out: &mut Vec<u8>, conn: u64) -> Result<(), &'static str> {
        let filters: Vec<String> = self.traffic.topics_of(conn).iter().cloned().chain(self.traffic.mqtt.subscribe.iter().map(|t| expand(t, conn))).collect();
        if filters.is_empty() {
            return Ok(());
        }
        let subscriptions = filters.iter().map(|f| mqtt::Subscription { filter: f, qos: self.qos(), ..Default::default() }).collect();
        let p = Packet::Subscribe(mqtt::Subscribe { packet_id: SUBSCRIBE_ID, properties: Default::default(), subscriptions });
        encode::packet(&p, self.version, out).map_err(|_| "mqtt_subscribe_too_large")
    }
}

/// Remember `intended` under packet id `id` (0: a ping).
fn track(inflight: &mut Inflight, id: u16, intended: u64) {
    let q = inflight.get_or_insert_with(Default::default);
    if q.len() >= MAX_INFLIGHT {
        q.pop_front();
    }
    q.push_back((id as u64) << 48 | (intended & TIME_MASK));
}

/// The intended time sent under packet id `id`, forgotten once answered.
fn answered(inflight: &mut Inflight, id: u16) -> Option<u64> {
    let q: &mut VecDeque<u64> = inflight.as_mut()?;
    let i = q.iter().position(|e| (e >> 48) as u16 == id)?;
    q.remove(i).map(|e| e & TIME_MASK)
}

impl Speaker for MqttSpeaker {
    /// CONNECT must be accepted (CONNACK 0) before the connection counts.
    fn upgrades(&self) -> bool {
        true
    }

    fn open(&mut self, out: &mut Vec<u8>, slot: usize, conn: u64, _: &super::pushes::PushSeen) {
        self.first = conn - slot as u64;
        self.awaiting.reset(slot);
        self.aliases.reset(slot);
        let o = &self.traffic.mqtt;
        let client_id = expand(&o.client_id, conn);
        let token = self.tokens.as_ref().map(|m| m.mint(conn));
        let password = token.as_deref().or(o.password.as_deref()).map(str::as_bytes);
        let c = mqtt::Connect {
            version: self.version,
            clean_start: true,
            keep_alive: self.keep_alive,
            properties: match self.version {
                Version::V5 => mqtt::Properties {
                    maximum_packet_size: Some(MAX_PACKET),
                    receive_maximum: Some(mqtt_delivery::MAX_AWAITING_RELEASE as u16),
                    topic_alias_maximum: (o.topic_alias_maximum > 0).then_some(o.topic_alias_maximum),
                    ..Default::default()
                },
                _ => Default::default(),
            },
            client_id: &client_id,
            will: None,
            // 3.1.1 allows no password without a user name (§3.1.2.9):
            // the client id stands in.
            username: o.username.as_deref().or(password.map(|_| client_id.as_str())),
            password,
        };
        // A client id or password over 65535 bytes cannot be encoded: the
        // connection then opens with nothing and times out as connecting.
        let _ = encode::packet(&Packet::Connect(Box::new(c)), self.version, out);
    }

    fn beats(&self) -> bool {
        true
    }

    /// A PINGREQ; its intended time waits for the PINGRESP.
    fn beat(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) {
        // PINGREQ is two bytes and cannot fail to encode.
        if encode::packet(&Packet::PingReq, self.version, out).is_ok() {
            track(inflight, 0, due.intended);
        }
    }

    /// A PUBLISH to `--mqtt-publish-topic` of `--message` (else
    /// `--payload` bytes beginning with a stamp: this connection, the
    /// publish's sequence number from 1, its intended send time); QoS 1
    /// and 2 ones wait for their PUBACK or PUBCOMP.
    fn request(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) -> bool {
        let seq = due.intended.saturating_sub(due.start) / due.period_us.max(1);
        let mut payload = Vec::new();
        match &self.message {
            Some(m) => m.render(&mut payload, due.conn, self.shard, seq, due.intended),
            None => {
                let sent_us = (due.intended as i64 + self.wall_offset_us).max(0) as u64;
                Stamp { publisher: due.conn, seq: seq + 1, sent_us }.encode(&mut payload, self.traffic.payload, b"");
            }
        }
        let topic = expand(&self.traffic.mqtt.publish_topic, due.conn);
        let packet_id = (seq % 65534) as u16 + 1;
        let qos = self.qos();
        let p = mqtt::Publish { dup: false, qos, retain: false, topic: &topic, packet_id, properties: Default::default(), payload: &payload };
        if encode::packet(&Packet::Publish(p), self.version, out).is_ok() && qos != QoS::AtMostOnce {
            track(inflight, packet_id, due.intended);
        }
        true
    }

    fn acknowledges_requests(&self) -> bool {
        self.qos() != QoS::AtMostOnce
    }

    /// Per QoS, in `mqtt_published`.
    fn count_request(&self, stats: &mut super::snapshot::ClientSnapshot) {
        mqtt_delivery::bump(&mut stats.mqtt_published, mqtt_delivery::qos_label(self.qos()), 1);
    }

    /// The CONNACK (while connecting; then the subscriptions go out),
    /// then SUBACKs, PINGRESPs, PUBACKs, PUBRECs (answered PUBREL) and
    /// PUBCOMPs, PUBLISHes (QoS 1 answered PUBACK, QoS 2 PUBREC), PUBRELs
    /// (answered PUBCOMP) and the broker's DISCONNECT.
    fn hear(&mut self, buf: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let (version, v5) = (self.version, self.version == Version::V5);
        let mut pos = 0;
        while let Some(h) = decode::fixed_header(&buf[pos..], Some(version), self.limits.max_packet_size).map_err(|e| e.as_str())? {
            if buf.len() - pos < h.total() {
                break;
            }
            let body = &buf[pos + h.len..pos + h.total()];
            pos += h.total();
            let p = decode::packet(&h, body, mqtt::Role::Client, version, &self.limits).map_err(|e| e.as_str())?;
            match p {
                Packet::ConnAck(c) if ear.upgrading => {
                    if c.code != 0 {
                        return Err(connack_reason(v5, c.code).into());
                    }
                    ear.upgrading = false;
                    self.subscribe(ear.answer, self.first + ear.slot as u64)?;
                }
                _ if ear.upgrading => return Err("mqtt_no_connack".into()),
                Packet::SubAck(s) => {
                    for code in s.codes {
                        let result = if code < 0x80 { "granted" } else { "refused" };
                        crate::stats::counters::bump(&mut replies.stats.mqtt_subscriptions, result);
                    }
                }
                Packet::PingResp => replies.beat_answered(answered(ear.inflight, 0)),
                Packet::PubAck(a) | Packet::PubComp(a) => {
                    let Some(sent) = answered(ear.inflight, a.packet_id) else { continue };
                    match a.reason {
                        0..=0x7F => replies.reply(Some(sent)),
                        _ => replies.rejected(),
                    }
                }
                // A QoS 2 publish received: release it (its entry waits
                // for the PUBCOMP), unless the broker refused it (5.0).
                Packet::PubRec(a) if a.reason >= 0x80 => {
                    if answered(ear.inflight, a.packet_id).is_some() {
                        replies.rejected();
                    }
                }
                Packet::PubRec(a) => answer(Packet::PubRel(mqtt::Ack { packet_id: a.packet_id, ..Default::default() }), version, ear.answer)?,
                Packet::PubRel(a) => {
                    self.awaiting.released(ear.slot, a.packet_id);
                    answer(Packet::PubComp(mqtt::Ack { packet_id: a.packet_id, ..Default::default() }), version, ear.answer)?;
                }
                Packet::Publish(p) => {
                    let topic = self.aliases.resolve(ear.slot, p.topic, p.properties.topic_alias, &mut replies.stats.mqtt_topic_aliases_in)?;
                    let id = p.packet_id;
                    let new = match p.qos {
                        QoS::AtMostOnce => true,
                        QoS::AtLeastOnce => {
                            answer(Packet::PubAck(mqtt::Ack { packet_id: id, ..Default::default() }), version, ear.answer)?;
                            true
                        }
                        QoS::ExactlyOnce => {
                            let new = self.awaiting.received(ear.slot, id)?;
                            answer(Packet::PubRec(mqtt::Ack { packet_id: id, ..Default::default() }), version, ear.answer)?;
                            new
                        }
                    };
                    match new {
                        true => mqtt_delivery::delivered(replies, &topic, p.qos, p.payload, crate::proto::push::wall_us()),
                        false => replies.stats.mqtt_qos2_resent_in += 1,
                    }
                }
                // A draining broker (0x8B Server shutting down; 0x9C Use
                // another server, 0x9D Server moved): a goaway, its delay
                // from megaconn's hint in the Reason String, else the
                // longest a megaconn hint asks for (not at once: a broker
                // that says so to every CONNECT is not hammered).
                Packet::Disconnect(d) if matches!(d.reason, crate::proto::goaway::MQTT_SHUTTING_DOWN | 0x9C | 0x9D) => {
                    let hinted = d.properties.reason_string.and_then(|r| crate::proto::goaway::decode_json(r.as_bytes()));
                    ear.goaway = Some(hinted.unwrap_or(crate::proto::goaway::MAX_RETRY_MS));
                    return Err(super::speak::GOAWAY.into());
                }
                Packet::Disconnect(d) => return Err(format!("mqtt_disconnect_0x{:02x}", d.reason).into()),
                _ => return Err("mqtt_unexpected_packet".into()),
            }
        }
        Ok(pos)
    }
}

/// An acknowledgement into the connection's answer (four bytes in 3.1.1,
/// at most a few more in 5.0: it cannot fail to encode).
fn answer(p: Packet<'_>, version: Version, out: &mut Vec<u8>) -> Result<(), Stop> {
    encode::packet(&p, version, out).map_err(|_| Stop::from("mqtt_ack_encode"))
}

#[cfg(test)]
mod tests;
