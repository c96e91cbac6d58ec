//! The MQTT session without a socket: packets encoded by the codec in,
//! the bytes and state it leaves checked.

use super::*;
use crate::proto::mqtt::{Subscribe, Subscription};
use crate::server::session::fixture::Read;

/// A session's read parts and the MQTT connection's own.
struct Parts {
    read: Read,
    published: Published,
    ext: Ext,
    cfg: MqttConfig,
}

fn parts() -> Parts {
    Parts { read: Read::new(), published: Published::default(), ext: fresh(), cfg: MqttConfig { max_push: 1024 } }
}

impl Parts {
    /// Feed `buf`; (result, what was written), `out` emptied.
    fn feed(&mut self, buf: &[u8]) -> (Result<usize, &'static str>, Vec<u8>) {
        let limits = self.cfg.limits();
        let (req, topics, subs) = self.read.split();
        let mut ctx = Ctx { req, cfg: &self.cfg, limits: &limits, topics, subs, published: &mut self.published, worker: 0 };
        let r = consume(&mut ctx, &mut self.ext, buf);
        (r, std::mem::take(&mut self.read.out))
    }
}

fn bytes(p: &Packet<'_>, v: Version) -> Vec<u8> {
    let mut out = Vec::new();
    encode::packet(p, v, &mut out).unwrap();
    out
}

fn connect(v: Version, keep_alive: u16) -> Vec<u8> {
    let c =
        Connect { version: v, clean_start: true, keep_alive, properties: Properties::default(), client_id: "dev", will: None, username: None, password: None };
    bytes(&Packet::Connect(Box::new(c)), v)
}

fn subscribe(v: Version, filters: &[(&str, QoS)]) -> Vec<u8> {
    let subscriptions = filters.iter().map(|(f, q)| Subscription { filter: f, qos: *q, ..Default::default() }).collect();
    bytes(&Packet::Subscribe(Subscribe { packet_id: 7, properties: Properties::default(), subscriptions }), v)
}

fn publish(v: Version, topic: &str, qos: QoS, payload: &[u8]) -> Vec<u8> {
    let packet_id = if qos == QoS::AtMostOnce { 0 } else { 9 };
    bytes(&Packet::Publish(Publish { dup: false, qos, retain: false, topic, packet_id, properties: Properties::default(), payload }), v)
}

/// A 3.1.1 CONNECT is answered `20 02 00 00`, sets the keep-alive, and a
/// PINGREQ gets its PINGRESP; a cut packet waits for the rest.
#[test]
fn a_v311_connect_and_ping_are_answered_and_a_cut_packet_waits() {
    let mut p = parts();
    assert!(connecting(&p.ext));
    let mut buf = connect(Version::V311, 30);
    let whole = buf.len();
    buf.extend_from_slice(&[0xC0, 0x00, 0xC0]);
    let (r, out) = p.feed(&buf);
    assert_eq!(r, Ok(whole + 2));
    assert_eq!(out, [0x20, 0x02, 0x00, 0x00, 0xD0, 0x00]);
    assert_eq!(state(&p.ext).map(|m| (m.version, m.keep_alive_s)), Some((Some(Version::V311), 30)));
    assert_eq!(p.read.stats.mqtt_connects.get("3.1.1"), Some(&1));
}

/// A v5 CONNACK tells the client what this server does not do.
#[test]
fn a_v5_connack_announces_the_capabilities() {
    let mut p = parts();
    let (r, out) = p.feed(&connect(Version::V5, 0));
    assert!(r.is_ok());
    let mut reader = crate::proto::mqtt::Reader::client(Version::V5);
    let mut seen = None;
    reader
        .consume::<Error>(&out, &Limits::default(), |pk| {
            if let Packet::ConnAck(c) = pk {
                seen = Some((
                    c.code,
                    c.properties.maximum_qos,
                    c.properties.retain_available,
                    c.properties.shared_sub_available,
                    c.properties.topic_alias_maximum,
                ));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, Some((0, Some(QoS::AtLeastOnce), Some(false), Some(false), Some(0))));
}

/// Wildcard and exact subscriptions are granted at most QoS 1; refusals
/// carry their v5 codes and are counted; a push's audience includes the
/// wildcard subscriber, and `$` topics stay out of `#`.
#[test]
fn subscriptions_are_granted_refused_and_matched() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let (r, out) =
        p.feed(&subscribe(Version::V5, &[("a/+", QoS::ExactlyOnce), ("x", QoS::AtMostOnce), ("$share/g/a", QoS::AtMostOnce), ("a b", QoS::AtMostOnce)]));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![1, 0, 0x9E, 0x8F] }), Version::V5));
    assert_eq!(p.read.topics.audience("a/b"), vec![3]);
    assert_eq!(p.read.topics.audience("x"), vec![3]);
    assert!(p.read.topics.audience("b/c").is_empty());
    assert_eq!(p.read.stats.subscribe_refused.values().sum::<u64>(), 2);
    let mut p3 = parts();
    assert!(p3.feed(&connect(Version::V311, 0)).0.is_ok());
    let (_, out) = p3.feed(&subscribe(Version::V311, &[("#", QoS::AtLeastOnce), ("$share/g/a", QoS::AtMostOnce)]));
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![1, 0x80] }), Version::V311));
    assert!(p3.read.topics.audience("$SYS/x").is_empty());
}

/// A QoS 1 publish is handed on (topic and payload) and acknowledged; a
/// QoS 2 one is refused with DISCONNECT 0x9B; a second CONNECT with 0x82.
#[test]
fn publishes_are_handed_on_and_acknowledged_or_refused() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let (r, out) = p.feed(&publish(Version::V5, "a/b", QoS::AtLeastOnce, b"hi"));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::PubAck(Ack { packet_id: 9, reason: 0, properties: Properties::default() }), Version::V5));
    assert_eq!(p.published.messages, vec![ClientPublish { topic: "a/b".into(), data: "aGk=".into() }]);
    let (r, out) = p.feed(&publish(Version::V5, "a/b", QoS::ExactlyOnce, b"hi"));
    assert_eq!(r, Err("mqtt_qos2_unsupported"));
    assert_eq!(out, bytes(&Packet::Disconnect(Disconnect { reason: 0x9B, properties: Properties::default() }), Version::V5));
    let (r, out) = p.feed(&connect(Version::V5, 0));
    assert_eq!(r, Err("mqtt_unexpected_packet"));
    assert_eq!(out, bytes(&Packet::Disconnect(Disconnect { reason: 0x82, properties: Properties::default() }), Version::V5));
    // Over --max-push-bytes: a v5 QoS 1 publish gets PUBACK 0x95 and the connection stays.
    let (r, out) = p.feed(&publish(Version::V5, "a/b", QoS::AtLeastOnce, &[0; 1025]));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::PubAck(Ack { packet_id: 9, reason: 0x95, properties: Properties::default() }), Version::V5));
}

/// Before the CONNECT: another packet, or an unknown protocol level
/// (CONNACK 0x01 in the 3.1.1 form), closes the connection.
#[test]
fn a_connect_is_required_first_and_its_level_checked() {
    let (r, out) = parts().feed(&[0xC0, 0x00]);
    assert_eq!((r, out), (Err("mqtt_unexpected_packet"), vec![]));
    let mut bad = connect(Version::V311, 0);
    bad[8] = 6;
    let (r, out) = parts().feed(&bad);
    assert_eq!((r, out), (Err("mqtt_protocol_version"), vec![0x20, 0x02, 0x00, 0x01]));
}
