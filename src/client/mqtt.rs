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
//! timed by their PINGRESP, requests are PUBLISHes (QoS 1: timed by their
//! PUBACK; QoS 0 has no answer and is counted apart), and every PUBLISH
//! from the broker is a push (counted, with no latency: an MQTT message
//! carries no publish time).
//!
//! The intended send times of PINGREQs and QoS 1 PUBLISHes wait in the
//! connection's `Inflight` queue, each tagged with its packet id (0 for a
//! ping), at most [`MAX_INFLIGHT`] of them. What the broker sends is
//! bounded by [`MAX_PACKET`]: a larger packet closes the connection
//! (`mqtt_packet_too_large`) before its body is held.

use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};
use super::ws_message::WsMessage;
use crate::proto::mqtt::{self, decode, encode, Packet, QoS, Version};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Largest packet accepted from a broker (a megaconn push is at most
/// 1 MiB of data plus its topic and header).
pub(crate) const MAX_PACKET: u32 = (1 << 20) + 1024;
/// Most PINGREQs and QoS 1 PUBLISHes awaiting their answers per
/// connection; past it the oldest is forgotten (its answer is then not
/// timed).
pub(crate) const MAX_INFLIGHT: usize = 1024;
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
    /// `--mqtt-qos 1`: publish and subscribe with QoS 1.
    pub qos1: bool,
    /// `--mqtt-publish-topic`: where requests publish (`{conn}` replaced).
    pub publish_topic: String,
    /// `--mqtt-subscribe`: topic filters (wildcards allowed, `{conn}`
    /// replaced) every connection subscribes to, besides `--subscribe`.
    pub subscribe: Vec<String>,
}

impl Default for MqttOptions {
    fn default() -> MqttOptions {
        MqttOptions {
            v5: false,
            client_id: "megaconn-{conn}".into(),
            username: None,
            password: None,
            qos1: false,
            publish_topic: "megaconn/{conn}".into(),
            subscribe: Vec::new(),
        }
    }
}

/// `{conn}` in `template` replaced by `conn`.
pub(crate) fn expand(template: &str, conn: u64) -> String {
    template.replace("{conn}", &conn.to_string())
}

/// The keep-alive a CONNECT announces for heartbeats every `heartbeat`:
/// twice the interval (whole seconds, rounded up, at most 65535), so one
/// late heartbeat does not get the connection closed; 0 (off) without
/// heartbeats.
pub(crate) fn keep_alive(heartbeat: Option<std::time::Duration>) -> u16 {
    heartbeat.map_or(0, |h| (h.as_micros().div_ceil(1_000_000) * 2).clamp(1, u16::MAX as u128) as u16)
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
            keep_alive: keep_alive(traffic.heartbeat),
            tokens: traffic.jwt_secret.as_deref().map(super::token::Minter::new),
            message: traffic.raw_message.as_ref().map(|m| WsMessage::new(m, true)),
            traffic: traffic.clone(),
            shard,
            first: 0,
        }
    }

    fn qos(&self) -> QoS {
        if self.traffic.mqtt.qos1 {
            QoS::AtLeastOnce
        } else {
            QoS::AtMostOnce
        }
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
        let o = &self.traffic.mqtt;
        let client_id = expand(&o.client_id, conn);
        let token = self.tokens.as_ref().map(|m| m.mint(conn));
        let password = token.as_deref().or(o.password.as_deref()).map(str::as_bytes);
        let c = mqtt::Connect {
            version: self.version,
            clean_start: true,
            keep_alive: self.keep_alive,
            properties: mqtt::Properties { maximum_packet_size: Some(MAX_PACKET).filter(|_| self.version == Version::V5), ..Default::default() },
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

    /// A PUBLISH to `--mqtt-publish-topic` of `--message` (else a stamped
    /// `--payload`); QoS 1 ones wait for their PUBACK.
    fn request(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) -> bool {
        let seq = due.intended.saturating_sub(due.start) / due.period_us.max(1);
        let mut payload = Vec::new();
        match &self.message {
            Some(m) => m.render(&mut payload, due.conn, self.shard, seq, due.intended),
            None => {
                payload.extend_from_slice(&due.intended.to_be_bytes());
                payload.resize(self.traffic.payload.max(8), 0);
            }
        }
        let topic = expand(&self.traffic.mqtt.publish_topic, due.conn);
        let packet_id = (seq % 65534) as u16 + 1;
        let qos = self.qos();
        let p = mqtt::Publish { dup: false, qos, retain: false, topic: &topic, packet_id, properties: Default::default(), payload: &payload };
        if encode::packet(&Packet::Publish(p), self.version, out).is_ok() && qos == QoS::AtLeastOnce {
            track(inflight, packet_id, due.intended);
        }
        true
    }

    fn acknowledges_requests(&self) -> bool {
        self.traffic.mqtt.qos1
    }

    /// CONNACK (while connecting), then SUBACK, PINGRESP, PUBACK, the
    /// broker's PUBLISHes and (5.0) its DISCONNECT.
    /// The CONNACK (while connecting; then the subscriptions go out),
    /// then SUBACKs, PINGRESPs, PUBACKs, PUBLISHes (QoS 1 acknowledged)
    /// and the broker's DISCONNECT.
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
                        *replies.stats.mqtt_subscriptions.entry(result.into()).or_insert(0) += 1;
                    }
                }
                Packet::PingResp => replies.beat_answered(answered(ear.inflight, 0)),
                Packet::PubAck(a) => {
                    let Some(sent) = answered(ear.inflight, a.packet_id) else { continue };
                    match a.reason {
                        0..=0x7F => replies.reply(Some(sent)),
                        _ => replies.rejected(),
                    }
                }
                Packet::Publish(p) => {
                    if p.qos == QoS::ExactlyOnce {
                        return Err("mqtt_qos2_unsupported".into());
                    }
                    if p.qos == QoS::AtLeastOnce {
                        let ack = Packet::PubAck(mqtt::Ack { packet_id: p.packet_id, ..Default::default() });
                        encode::packet(&ack, version, ear.answer).map_err(|_| "mqtt_puback_encode")?;
                    }
                    count_push(replies, p.topic);
                }
                Packet::Disconnect(d) => return Err(format!("mqtt_disconnect_0x{:02x}", d.reason).into()),
                _ => return Err("mqtt_unexpected_packet".into()),
            }
        }
        Ok(pos)
    }
}

/// A PUBLISH from the broker: a push, counted in total and per topic
/// (MQTT carries no publish time, so no latency).
fn count_push(replies: &mut Replies<'_>, topic: &str) {
    let stats = &mut *replies.stats;
    stats.push_received += 1;
    if let Some(n) = stats.push_topics.get_mut(topic) {
        *n += 1;
    } else if stats.push_topics.len() < super::pushes::MAX_TOPICS_COUNTED {
        stats.push_topics.insert(topic.to_string(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_is_twice_the_heartbeat() {
        use std::time::Duration;
        assert_eq!(keep_alive(None), 0);
        assert_eq!(keep_alive(Some(Duration::from_secs(30))), 60);
        assert_eq!(keep_alive(Some(Duration::from_millis(200))), 2);
        assert_eq!(keep_alive(Some(Duration::from_secs(100_000))), u16::MAX);
    }

    #[test]
    fn answers_are_matched_by_packet_id() {
        let mut q: Inflight = None;
        track(&mut q, 0, 10);
        track(&mut q, 7, 20);
        track(&mut q, 0, 30);
        assert_eq!(answered(&mut q, 7), Some(20));
        assert_eq!(answered(&mut q, 7), None);
        assert_eq!(answered(&mut q, 0), Some(10));
        assert_eq!(answered(&mut q, 0), Some(30));
        for i in 0..MAX_INFLIGHT as u64 + 1 {
            track(&mut q, 1, i);
        }
        assert_eq!(q.as_ref().unwrap().len(), MAX_INFLIGHT);
        assert_eq!(answered(&mut q, 1), Some(1));
    }

    #[test]
    fn refusals_are_named_as_each_standard_writes_them() {
        assert_eq!(connack_reason(false, 5), "mqtt_connack_5");
        assert_eq!(connack_reason(true, 0x87), "mqtt_connack_0x87");
        assert!(check_filter("dev/{conn}/#").is_ok());
        assert!(check_filter("a/#/b").is_err());
    }

    mod heard {
        use super::*;
        use crate::client::speak::hearing::{same_at_every_cut, Hearing, NOW};
        use crate::net::ReadEnd;
        use crate::proto::Protocol;

        fn make() -> (Box<dyn Speaker>, Hearing) {
            let traffic = make_traffic();
            let mut h = Hearing::new(true);
            track(&mut h.inflight, 0, NOW - 500);
            track(&mut h.inflight, 9, NOW - 700);
            (Box::new(MqttSpeaker::new(&traffic, 0)), h)
        }

        fn wire(packets: &[Packet<'_>]) -> Vec<u8> {
            let mut out = Vec::new();
            for p in packets {
                encode::packet(p, Version::V311, &mut out).unwrap();
            }
            out
        }

        fn connack(code: u8) -> Packet<'static> {
            Packet::ConnAck(mqtt::ConnAck { session_present: false, code, properties: Default::default() })
        }

        fn publish(qos: QoS, packet_id: u16) -> Packet<'static> {
            Packet::Publish(mqtt::Publish { dup: false, qos, retain: false, topic: "dev/0", packet_id, properties: Default::default(), payload: b"hi" })
        }

        #[test]
        fn packets_cut_anywhere_are_accounted_as_whole() {
            let bytes = wire(&[
                connack(0),
                Packet::SubAck(mqtt::SubAck { packet_id: SUBSCRIBE_ID, properties: Default::default(), codes: vec![0] }),
                publish(QoS::AtLeastOnce, 4),
                Packet::PingResp,
                Packet::PubAck(mqtt::Ack { packet_id: 9, ..Default::default() }),
                publish(QoS::AtMostOnce, 0),
            ]);
            let (end, _, h) = same_at_every_cut(&make, &bytes[..bytes.len() - 1]);
            assert_eq!(end, ReadEnd::Open);
            assert!(!h.upgrading, "the CONNACK established the connection");
            assert_eq!(h.stats.mqtt_subscriptions.get("granted"), Some(&1));
            assert_eq!((h.stats.push_received, h.stats.heartbeats_answered, h.stats.replies), (1, 1, 1));
            // The SUBSCRIBE, then the QoS 1 PUBLISH's PUBACK.
            let mut expected = Vec::new();
            MqttSpeaker::new(&make_traffic(), 0).subscribe(&mut expected, 0).unwrap();
            encode::packet(&Packet::PubAck(mqtt::Ack { packet_id: 4, ..Default::default() }), Version::V311, &mut expected).unwrap();
            assert_eq!(h.answer, expected);
            assert_eq!(h.kept(), wire(&[publish(QoS::AtMostOnce, 0)]).len() - 1, "the last PUBLISH waits for its last byte");
        }

        fn make_traffic() -> Traffic {
            let mut traffic = Traffic { protocol: Protocol::Mqtt, ..Default::default() };
            traffic.mqtt.subscribe = vec!["dev/{conn}".into()];
            traffic
        }

        #[test]
        fn refusals_end_as_they_always_did() {
            let end = |packets: &[Packet<'_>]| same_at_every_cut(&make, &wire(packets)).0;
            let named = |s: &str| ReadEnd::Error(s.into());
            assert_eq!(end(&[connack(5)]), named("mqtt_connack_5"));
            assert_eq!(end(&[Packet::PingResp]), named("mqtt_no_connack"));
            assert_eq!(end(&[connack(0), publish(QoS::ExactlyOnce, 3)]), named("mqtt_qos2_unsupported"));
            // A 3.1.1 broker never sends DISCONNECT; a 5.0 one names why.
            let disconnect = Packet::Disconnect(mqtt::Disconnect { reason: 0x8b, properties: Default::default() });
            assert_eq!(end(&[connack(0), disconnect.clone()]), named("mqtt_unexpected_packet"));
            let v5 = || {
                let mut traffic = make_traffic();
                traffic.mqtt.v5 = true;
                (Box::new(MqttSpeaker::new(&traffic, 0)) as Box<dyn Speaker>, Hearing::new(true))
            };
            let mut bytes = Vec::new();
            for p in [connack(0), disconnect] {
                encode::packet(&p, Version::V5, &mut bytes).unwrap();
            }
            assert_eq!(same_at_every_cut(&v5, &bytes).0, named("mqtt_disconnect_0x8b"));
            // A length past the packet bound: refused before its body is held.
            assert_eq!(same_at_every_cut(&make, &[0x30, 0xff, 0xff, 0xff, 0x7f]).0, named("mqtt_packet_too_large"));
        }
    }
}
