//! The MQTT session without a socket: packets encoded by the codec in,
//! the bytes and state it leaves checked.

use super::*;
use crate::proto::mqtt::{Connect, SubAck, Subscribe, Subscription};
use crate::server::session::fixture::Read;

/// A session's read parts and the MQTT connection's own.
struct Parts {
    read: Read,
    published: Published,
    m: MqttConn,
    cfg: MqttConfig,
}

fn parts() -> Parts {
    Parts {
        read: Read::new(),
        published: Published::default(),
        m: MqttConn::fresh(),
        cfg: MqttConfig {
            max_push: 1024,
            flight: flight::Bounds { inflight: 2, queued: 1, queued_bytes: 1 << 20 },
            max_keep_alive: 0,
            auth_hook: false,
            authz_hook: None,
        },
    }
}

impl Parts {
    /// Feed `buf`, a client id's claim accepted at once (as the
    /// supervisor would, no session); (result with the close's name,
    /// what was written), `out` emptied.
    fn feed(&mut self, buf: &[u8]) -> (Result<usize, &'static str>, Vec<u8>) {
        let limits = self.cfg.limits();
        let mut used = 0;
        loop {
            let r = self.feed_once(&buf[used..], &limits);
            match r {
                Ok(n) => used += n,
                Err(e) => return (Err(e), std::mem::take(&mut self.read.out)),
            }
            if std::mem::take(&mut self.published.claims).is_empty() {
                return (Ok(used), std::mem::take(&mut self.read.out));
            }
            connect::claimed(&mut self.read.out, &mut self.m, (limits.max_packet_size, 0), false, None);
        }
    }

    /// Feed `buf` as it is: a claim stays unanswered.
    fn feed_once(&mut self, buf: &[u8], limits: &Limits) -> Result<usize, &'static str> {
        let (req, topics, subs) = self.read.split();
        let mut ctx = Ctx { req, cfg: &self.cfg, limits, topics, subs, published: &mut self.published, worker: 0, upstream: None, peer_fd: -1 };
        consume(&mut ctx, &mut self.m, buf).map_err(Close::as_str)
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
    assert!(p.m.connecting());
    let mut buf = connect(Version::V311, 30);
    let whole = buf.len();
    buf.extend_from_slice(&[0xC0, 0x00, 0xC0]);
    let (r, out) = p.feed(&buf);
    assert_eq!(r, Ok(whole + 2));
    assert_eq!(out, [0x20, 0x02, 0x00, 0x00, 0xD0, 0x00]);
    assert_eq!((p.m.version, p.m.keep_alive_s), (Some(Version::V311), 30));
    assert_eq!(p.read.stats.mqtt_connects.get("3.1.1"), Some(&1));
}

/// A v5 CONNACK tells the client what this server does not do (QoS 2
/// and retain are available: their properties are absent).
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
    assert_eq!(seen, Some((0, None, None, Some(true), Some(alias::TOPIC_ALIAS_MAXIMUM))));
}

/// Wildcard and exact subscriptions are granted the QoS asked; refusals
/// carry their v5 codes and are counted; a push's audience includes the
/// wildcard subscriber, and `$` topics stay out of `#`.
#[test]
fn subscriptions_are_granted_refused_and_matched() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let (r, out) =
        p.feed(&subscribe(Version::V5, &[("a/+", QoS::ExactlyOnce), ("x", QoS::AtMostOnce), ("$share/g/a", QoS::AtMostOnce), ("a b", QoS::AtMostOnce)]));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![2, 0, 0, 0x8F] }), Version::V5));
    assert_eq!(p.read.topics.audience("a/b"), vec![3]);
    assert_eq!(p.read.topics.audience("x"), vec![3]);
    assert!(p.read.topics.audience("b/c").is_empty());
    assert_eq!(p.read.stats.subscribe_refused.values().sum::<u64>(), 1);
    let mut p3 = parts();
    assert!(p3.feed(&connect(Version::V311, 0)).0.is_ok());
    let (_, out) = p3.feed(&subscribe(Version::V311, &[("#", QoS::AtLeastOnce), ("$share/g/a b", QoS::AtMostOnce)]));
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![1, 0x80] }), Version::V311));
    assert!(p3.read.topics.audience("$SYS/x").is_empty());
}

/// A QoS 1 publish is handed on (topic and payload) and acknowledged; a
/// QoS 2 one is handed on once per packet id until its PUBREL (a resend
/// gets PUBREC again, counted, not forwarded); a PUBREL for an unknown id
/// gets PUBCOMP 0x92; a second CONNECT DISCONNECT 0x82.
#[test]
fn publishes_are_handed_on_and_acknowledged_or_refused() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let (r, out) = p.feed(&publish(Version::V5, "a/b", QoS::AtLeastOnce, b"hi"));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::PubAck(Ack { packet_id: 9, reason: 0, properties: Properties::default() }), Version::V5));
    assert_eq!(
        p.published.messages,
        vec![ClientPublish {
            topic: "a/b".into(),
            data: b"hi".to_vec(),
            qos: 1,
            retain: false,
            mqtt: Some(Box::new(crate::proto::mqtt::forward::Forwarded { origin: Some(crate::server::commands::conn_id(0, 3, 1)), ..Default::default() })),
            identity: None,
        }]
    );
    let ack = |packet_id, reason| Ack { packet_id, reason, properties: Properties::default() };
    for _ in 0..2 {
        let (r, out) = p.feed(&publish(Version::V5, "a/b", QoS::ExactlyOnce, b"hi"));
        assert!(r.is_ok());
        assert_eq!(out, bytes(&Packet::PubRec(ack(9, 0)), Version::V5));
    }
    assert_eq!(p.published.messages.len(), 2, "the resend was not handed on");
    assert_eq!((p.read.stats.mqtt_qos2_resent, p.read.stats.mqtt_publishes_in.get("2")), (1, Some(&1)));
    assert!(p.m.extra.is_some(), "the id awaits its PUBREL");
    let (_, out) = p.feed(&bytes(&Packet::PubRel(ack(9, 0)), Version::V5));
    assert_eq!(out, bytes(&Packet::PubComp(ack(9, 0)), Version::V5));
    assert!(p.m.extra.is_none(), "released: the box is freed");
    let (r, out) = p.feed(&bytes(&Packet::PubRel(ack(9, 0)), Version::V5));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::PubComp(ack(9, 0x92)), Version::V5));
    assert_eq!(p.read.stats.mqtt_unknown_packet_ids.get("pubrel"), Some(&1));
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

/// Deliveries the worker put in flight are moved on by the client's
/// acknowledgements: PUBACK frees the window for the held one (sent in
/// the same reply), PUBREC gets PUBREL, PUBCOMP ends it; an unknown
/// PUBREC gets PUBREL 0x92 (v5). Then nothing is left allocated.
#[test]
fn acknowledgements_move_deliveries_on_and_release_the_held_ones() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let bounds = p.cfg.flight;
    let m = &mut p.m;
    assert_eq!(m.window(bounds.inflight), 2, "--mqtt-inflight, the client gave no Receive Maximum");
    let mut offer = |qos: QoS| {
        let (bytes, id_at) = encode_push(Version::V5, "t", b"x", qos, false, Properties::default());
        m.extra_mut().flight.offer(flight::Delivery { bytes: bytes.into(), id_at, qos, expires_us: 0 }, 2, bounds)
    };
    assert!(matches!(offer(QoS::AtLeastOnce), flight::Offer::Send(_)));
    assert!(matches!(offer(QoS::ExactlyOnce), flight::Offer::Send(_)));
    assert_eq!(offer(QoS::AtLeastOnce), flight::Offer::Held);
    assert_eq!(offer(QoS::AtLeastOnce), flight::Offer::Dropped(flight::QUEUE_FULL));
    let ack = |packet_id, reason| Ack { packet_id, reason, properties: Properties::default() };
    let (_, out) = p.feed(&bytes(&Packet::PubAck(ack(1, 0)), Version::V5));
    let (held, _) = encode_push(Version::V5, "t", b"x", QoS::AtLeastOnce, false, Properties::default());
    let mut with_id = held.clone();
    let at = with_id.len() - 4; // id, properties (0), payload
    with_id[at..at + 2].copy_from_slice(&3u16.to_be_bytes());
    assert_eq!(out, with_id, "the held one, as id 3");
    let (_, out) = p.feed(&bytes(&Packet::PubRec(ack(2, 0)), Version::V5));
    assert_eq!(out, bytes(&Packet::PubRel(ack(2, 0)), Version::V5));
    let (_, out) = p.feed(&bytes(&Packet::PubComp(ack(2, 0)), Version::V5));
    assert!(out.is_empty());
    let (_, out) = p.feed(&bytes(&Packet::PubRec(ack(40, 0)), Version::V5));
    assert_eq!(out, bytes(&Packet::PubRel(ack(40, 0x92)), Version::V5));
    let (_, out) = p.feed(&bytes(&Packet::PubAck(ack(3, 0)), Version::V5));
    assert!(out.is_empty());
    assert!(p.m.extra.is_none(), "nothing in flight: nothing allocated");
    let s = &p.read.stats;
    assert_eq!((s.mqtt_acks_in["puback"], s.mqtt_acks_in["pubrec"], s.mqtt_acks_in["pubcomp"]), (2, 2, 1));
    assert_eq!((s.mqtt_unknown_packet_ids["pubrec"], s.mqtt_publishes_out["1"]), (1, 1));
}

/// A will is kept from the CONNECT with its properties, dropped by a
/// clean DISCONNECT and kept by v5 DISCONNECT 0x04; one on a topic megaconn does not take is
/// refused with CONNACK 0x90. A QoS 0 subscriber keeps no box.
#[test]
fn wills_are_kept_until_a_clean_disconnect() {
    let props = Properties { content_type: Some("text/plain"), user_properties: vec![("k", "v")], will_delay: Some(0), ..Properties::default() };
    let will = |topic| crate::proto::mqtt::Will { qos: QoS::AtLeastOnce, retain: true, properties: props.clone(), topic, payload: b"gone" };
    let connect_with = |topic| {
        let c = Connect {
            version: Version::V5,
            clean_start: true,
            keep_alive: 0,
            properties: Properties::default(),
            client_id: "dev",
            will: Some(will(topic)),
            username: None,
            password: None,
        };
        bytes(&Packet::Connect(Box::new(c)), Version::V5)
    };
    // Its properties go with it (not the Will Delay, which is the server's).
    let fwd = crate::proto::mqtt::forward::Forwarded {
        content_type: Some("text/plain".into()),
        user_properties: vec![("k".into(), "v".into())],
        ..Default::default()
    };
    for (reason, kept) in [(0x00, false), (0x04, true)] {
        let mut p = parts();
        assert!(p.feed(&connect_with("dev/status")).0.is_ok());
        assert!(p.feed(&subscribe(Version::V5, &[("a/#", QoS::AtMostOnce)])).0.is_ok());
        let (r, _) = p.feed(&bytes(&Packet::Disconnect(Disconnect { reason, properties: Properties::default() }), Version::V5));
        assert_eq!(r, Err(PEER_DISCONNECT));
        let m = &mut p.m;
        let want = extra::OwnedWill {
            topic: "dev/status".into(),
            payload: (*b"gone").into(),
            qos: QoS::AtLeastOnce,
            retain: true,
            delay_s: 0,
            mqtt: Some(Box::new(fwd.clone())),
        };
        assert_eq!(m.take_will(), kept.then_some(want));
        m.tidy();
        assert!(m.extra.is_none(), "a QoS 0 subscription keeps nothing");
    }
    let (r, out) = parts().feed(&connect_with("a b"));
    assert_eq!(r, Err("mqtt_will_bad_topic"));
    assert_eq!(out[3], 0x90);
}

/// A filter repeated in one SUBSCRIBE (32 × `#`) asks for its retained
/// messages once, with the last options; each filter is charged to the
/// connection's command budget, so a packet of more filters than the
/// budget closes it.
#[test]
fn a_repeated_filter_asks_for_retained_once_and_each_filter_is_charged() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V311, 0)).0.is_ok());
    let mut filters = vec![("#", QoS::AtMostOnce); 31];
    filters.push(("#", QoS::AtLeastOnce));
    assert!(p.feed(&subscribe(Version::V311, &filters)).0.is_ok());
    let wants: Vec<_> = p.published.wants.iter().map(|w| (w.filter.as_str(), w.qos)).collect();
    assert_eq!(wants, [("#", 1)], "one lookup, the last QoS");
    // 200 a second: six packets of 32 filters (192) pass, a seventh not.
    let packet = subscribe(Version::V311, &[("a", QoS::AtMostOnce); 32]);
    for _ in 1..6 {
        assert!(p.feed(&packet).0.is_ok());
    }
    assert_eq!(p.feed(&packet).0, Err("too_many_commands"), "the 224th filter in one second");
}

/// A subscription's options are kept only when they are not plain QoS 0,
/// and a delivery takes the highest QoS of the matching subscriptions, no
/// more than the publish's; each SUBSCRIBE asks for its retained messages
/// unless v5 Retain Handling says not to.
#[test]
fn granted_qos_decides_each_delivery_and_retain_handling_the_wants() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let subs = [
        Subscription { filter: "a/+", qos: QoS::AtLeastOnce, ..Default::default() },
        Subscription { filter: "a/b", qos: QoS::ExactlyOnce, retain_handling: 1, ..Default::default() },
        Subscription { filter: "c", qos: QoS::AtMostOnce, retain_handling: 2, retain_as_published: true, ..Default::default() },
    ];
    let sub = bytes(&Packet::Subscribe(Subscribe { packet_id: 7, properties: Properties::default(), subscriptions: subs.to_vec() }), Version::V5);
    assert!(p.feed(&sub).0.is_ok());
    let filters: Vec<_> = p.published.wants.iter().map(|w| (w.filter.as_str(), w.qos)).collect();
    assert_eq!(filters, [("a/+", 1), ("a/b", 2)], "retain handling 2: none for c");
    p.published.wants.clear();
    assert!(p.feed(&sub).0.is_ok());
    assert_eq!(p.published.wants.len(), 1, "retain handling 1: not again for an existing a/b");
    let m = &p.m;
    let (topics, all) = (&p.read.topics, &p.read.subs);
    let d = |topic, qos, retain| m.delivery(topics, all, topic, qos, retain, false).map(|d| (d.qos, d.retain));
    assert_eq!(d("a/b", QoS::ExactlyOnce, true), Some((QoS::ExactlyOnce, false)));
    assert_eq!(d("a/c", QoS::ExactlyOnce, true), Some((QoS::AtLeastOnce, false)));
    assert_eq!(d("a/c", QoS::AtMostOnce, false), Some((QoS::AtMostOnce, false)));
    assert_eq!(d("c", QoS::ExactlyOnce, true), Some((QoS::AtMostOnce, true)), "retain as published");
    let unsub = bytes(
        &Packet::Unsubscribe(crate::proto::mqtt::Unsubscribe { packet_id: 8, properties: Properties::default(), filters: vec!["a/+", "a/b", "c"] }),
        Version::V5,
    );
    assert!(p.feed(&unsub).0.is_ok());
    assert!(p.m.extra.is_none(), "unsubscribed: no options kept");
}

/// An MQTT connection's state is 24 bytes with the registry's 12-byte
/// key (the boxed extra is one pointer), and a fresh one allocates
/// nothing: the worker's table holds it (`session/mqtt/states.rs`).
#[test]
fn the_connection_state_stays_small() {
    assert_eq!(std::mem::size_of::<MqttConn>(), 24);
    let (m, held) = crate::test_alloc::held(MqttConn::fresh);
    assert!(m.connecting());
    assert_eq!(held, 0);
}

/// A CONNECT with a client id is answered only once its claim is: what
/// the client sends behind it waits unread (one packet's worth at most);
/// 3.1.1 Clean Session 0 asks for a session that never expires, v5 for
/// its Session Expiry Interval.
#[test]
fn a_named_connect_waits_for_its_claim_and_what_follows_waits_unread() {
    let mut p = parts();
    let limits = p.cfg.limits();
    let mut c = Connect {
        version: Version::V311,
        clean_start: false,
        keep_alive: 0,
        properties: Properties::default(),
        client_id: "dev",
        will: None,
        username: None,
        password: None,
    };
    let mut buf = bytes(&Packet::Connect(Box::new(c.clone())), Version::V311);
    let whole = buf.len();
    buf.extend_from_slice(&[0xC0, 0x00]);
    assert_eq!(p.feed_once(&buf, &limits), Ok(whole));
    assert!(p.read.out.is_empty(), "no CONNACK before the claim is answered");
    assert!(p.m.connecting());
    let claims = std::mem::take(&mut p.published.claims);
    assert_eq!((claims[0].client_id.as_str(), claims[0].clean, claims[0].expiry_s), ("dev", false, crate::server::broker::sessions::NEVER));
    assert_eq!(p.feed_once(&buf[whole..], &limits), Ok(0), "the PINGREQ waits");
    let flood = vec![0xC0; limits.max_packet_size as usize + 1];
    assert_eq!(p.feed_once(&flood, &limits), Err("mqtt_connect_unanswered_overflow"));
    connect::claimed(&mut p.read.out, &mut p.m, (limits.max_packet_size, 0), true, None);
    assert_eq!(std::mem::take(&mut p.read.out), [0x20, 0x02, 0x01, 0x00], "session present");
    assert_eq!(p.feed_once(&buf[whole..], &limits), Ok(2));
    assert_eq!(p.read.out, [0xD0, 0x00]);
    let mut q = parts();
    c.version = Version::V5;
    c.properties.session_expiry = Some(30);
    assert_eq!(q.feed_once(&bytes(&Packet::Connect(Box::new(c)), Version::V5), &limits).map(|_| q.published.claims[0].expiry_s), Ok(30));
}

mod v5;

/// `--mqtt-authz-http`: a PUBLISH and a SUBSCRIBE whose answers are not
/// known wait unread (nothing used, nothing written, the questions
/// made once), then go on as answered, in order.
#[test]
fn packets_wait_unread_for_the_authorizer_and_go_on_as_it_answers() {
    use crate::server::auth::authz::{Answer, Local};
    let mut p = parts();
    let ttl = std::time::Duration::from_secs(60);
    p.read.topics.gate.authz = Some(Box::new(Local::new(ttl, ttl)));
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let mut two = publish(Version::V5, "a/b", QoS::AtLeastOnce, b"hi");
    two.extend_from_slice(&subscribe(Version::V5, &[("a/#", QoS::AtLeastOnce), ("x", QoS::AtMostOnce)]));
    let (r, out) = p.feed(&two);
    assert_eq!((r, out.len()), (Ok(0), 0), "the publish waits unread");
    let a = p.read.topics.gate.authz.as_mut().unwrap();
    let asks = a.take_asks();
    assert_eq!(asks.len(), 1);
    assert_eq!((asks[0].clientid.as_str(), asks[0].topic.as_str(), asks[0].qos), ("dev", "a/b", 1));
    assert_eq!(p.feed(&two).0, Ok(0), "still waiting: asked once");
    let a = p.read.topics.gate.authz.as_mut().unwrap();
    assert!(a.take_asks().is_empty());
    let back = a.answered(vec![Answer { about: asks[0].clone(), allow: true, keep: true }], std::time::Instant::now());
    assert_eq!(back.len(), 1);
    let (r, out) = p.feed(&two);
    let publish_len = two.len() - subscribe(Version::V5, &[("a/#", QoS::AtLeastOnce), ("x", QoS::AtMostOnce)]).len();
    assert_eq!(r, Ok(publish_len), "the publish went on, the subscribe waits");
    assert_eq!(out, bytes(&Packet::PubAck(Ack { packet_id: 9, reason: 0, properties: Properties::default() }), Version::V5));
    assert_eq!(p.published.messages.len(), 1);
    let a = p.read.topics.gate.authz.as_mut().unwrap();
    let asks = a.take_asks();
    assert_eq!(asks.iter().map(|a| a.topic.as_str()).collect::<Vec<_>>(), ["a/#", "x"]);
    let now = std::time::Instant::now();
    a.answered(vec![Answer { about: asks[0].clone(), allow: false, keep: true }, Answer { about: asks[1].clone(), allow: true, keep: true }], now);
    let rest = &two[publish_len..];
    let (r, out) = p.feed(rest);
    assert_eq!(r, Ok(rest.len()));
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![0x87, 0] }), Version::V5));
    assert_eq!(p.read.stats.subscribe_refused.get("mqtt_authz_http_denied"), Some(&1));
    // Kept: the same publish again asks nobody.
    let again = publish(Version::V5, "a/b", QoS::AtLeastOnce, b"hi");
    assert_eq!(p.feed(&again).0, Ok(again.len()));
    assert!(p.read.topics.gate.authz.as_mut().unwrap().take_asks().is_empty());
}
