//! The MQTT 5 features without a socket: shared subscriptions, No
//! Local and subscription identifiers, forwarded PUBLISH properties,
//! topic aliases.

use super::*;

/// A shared subscription (5.0 and 3.1.1) is granted, reported to the
/// supervisor as a join (not into the worker's topics: the supervisor
/// picks its member), left on UNSUBSCRIBE and at the end; past the
/// per-connection bound refused 0x97 and counted.
#[test]
fn shared_subscriptions_join_leave_and_are_bounded() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let (r, out) = p.feed(&subscribe(Version::V5, &[("$share/g/a/+", QoS::AtLeastOnce)]));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![1] }), Version::V5));
    let joined = std::mem::take(&mut p.published.shared_changes);
    assert_eq!(joined.iter().map(|c| (c.name.as_str(), c.qos, c.join)).collect::<Vec<_>>(), [("$share/g/a/+", 1, true)]);
    assert!(p.read.topics.audience("a/b").is_empty());
    assert!(p.published.wants.is_empty(), "no retained messages on a shared subscription");
    let many: Vec<(String, QoS)> = (0..shared::MAX_PER_CONN).map(|i| (format!("$share/g{i}/t"), QoS::AtMostOnce)).collect();
    let many: Vec<(&str, QoS)> = many.iter().map(|(f, q)| (f.as_str(), *q)).collect();
    let (_, out) = p.feed(&subscribe(Version::V5, &many[..shared::MAX_PER_CONN - 1]));
    assert!(!out.is_empty());
    let (_, out) = p.feed(&subscribe(Version::V5, &many[shared::MAX_PER_CONN - 1..]));
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![0x97] }), Version::V5));
    assert_eq!(p.read.stats.subscribe_refused.get("mqtt_shared_per_connection"), Some(&1));
    p.published.shared_changes.clear();
    let unsub =
        Packet::Unsubscribe(crate::proto::mqtt::Unsubscribe { packet_id: 8, properties: Properties::default(), filters: vec!["$share/g/a/+", "$share/x/y"] });
    let (_, out) = p.feed(&bytes(&unsub, Version::V5));
    assert_eq!(out, bytes(&Packet::UnsubAck(SubAck { packet_id: 8, properties: Properties::default(), codes: vec![0, 0x11] }), Version::V5));
    assert_eq!(p.published.shared_changes.iter().map(|c| (c.name.as_str(), c.join)).collect::<Vec<_>>(), [("$share/g/a/+", false)]);
    let left = shared::leave_all(&mut p.m, &mut p.published.shared, 5);
    assert_eq!(left.len(), shared::MAX_PER_CONN - 1);
    assert!(left.iter().all(|c| c.conn == 5 && !c.join));
    // A 3.1.1 client's `$share/...` is a shared subscription too (as mosquitto takes it).
    let mut p3 = parts();
    assert!(p3.feed(&connect(Version::V311, 0)).0.is_ok());
    let (_, out) = p3.feed(&subscribe(Version::V311, &[("$share/g/a", QoS::AtMostOnce)]));
    assert_eq!(out, bytes(&Packet::SubAck(SubAck { packet_id: 7, properties: Properties::default(), codes: vec![0] }), Version::V311));
    assert_eq!(p3.published.shared_changes.len(), 1);
}

/// v5 No Local keeps a connection's own messages from it unless another
/// (plain) subscription matches; Subscription Identifiers go with what
/// their subscriptions match; 3.1.1 has neither.
#[test]
fn no_local_and_subscription_ids_decide_each_delivery() {
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let subscribe = |filter, no_local, sid: Option<u32>| {
        let properties = Properties { subscription_ids: sid.into_iter().collect(), ..Properties::default() };
        let subscriptions = vec![Subscription { filter, qos: QoS::AtLeastOnce, no_local, ..Default::default() }];
        bytes(&Packet::Subscribe(Subscribe { packet_id: 7, properties, subscriptions }), Version::V5)
    };
    let mut buf = subscribe("a/+", true, Some(5));
    buf.extend(subscribe("a/b", false, Some(9)));
    buf.extend(subscribe("x/#", true, None));
    let (r, out) = p.feed(&buf);
    assert!(r.is_ok());
    assert_eq!(out.len(), 3 * 6, "three SUBACKs granting QoS 1: {out:x?}");
    let m = &p.m;
    let (topics, all) = (&p.read.topics, &p.read.subs);
    let d = |topic, own| m.delivery(topics, all, topic, QoS::AtLeastOnce, false, own).map(|d| d.sids);
    assert_eq!(d("a/b", false), Some(vec![5, 9]));
    assert_eq!(d("a/b", true), Some(vec![9]), "its own through a/b, not No Local a/+");
    assert_eq!(d("a/c", true), None, "its own, only No Local a/+ matches");
    assert_eq!(d("a/c", false), Some(vec![5]));
    assert_eq!(d("x/y", true), None);
    // A plain QoS 0 subscription (no options kept) still delivers its own, at its QoS.
    assert!(p.feed(&subscribe_plain(Version::V5, "x/y")).0.is_ok());
    let m = &p.m;
    let (topics, all) = (&p.read.topics, &p.read.subs);
    assert_eq!(m.delivery(topics, all, "x/y", QoS::AtLeastOnce, false, true).map(|d| d.qos), Some(QoS::AtMostOnce));
}

fn subscribe_plain(v: Version, filter: &str) -> Vec<u8> {
    subscribe(v, &[(filter, QoS::AtMostOnce)])
}

/// A v5 PUBLISH's properties go to the topic space with it (and its
/// connection, for No Local); past their bound the PUBLISH is refused
/// 0x95 and counted.
#[test]
fn publish_properties_are_forwarded_and_bounded() {
    let mut p = parts();
    p.cfg.max_push = 64 << 10;
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let big = "x".repeat(crate::proto::mqtt::forward::MAX_FORWARDED_BYTES / 2 + 1);
    let publish = |properties: Properties<'_>| {
        bytes(&Packet::Publish(Publish { dup: false, qos: QoS::AtLeastOnce, retain: false, topic: "a", packet_id: 9, properties, payload: b"" }), Version::V5)
    };
    let props = Properties { content_type: Some("text/plain"), message_expiry: Some(5), user_properties: vec![("k", "v")], ..Properties::default() };
    assert!(p.feed(&publish(props)).0.is_ok());
    let f = p.published.messages[0].mqtt.as_deref().unwrap();
    assert_eq!((f.content_type.as_deref(), f.message_expiry, f.user_properties.len(), f.origin.is_some()), (Some("text/plain"), Some(5), 1, true));
    let (r, out) = p.feed(&publish(Properties { content_type: Some(&big), response_topic: Some(&big), ..Properties::default() }));
    assert!(r.is_ok());
    assert_eq!(out, bytes(&Packet::PubAck(Ack { packet_id: 9, reason: 0x95, properties: Properties::default() }), Version::V5));
    assert_eq!(p.read.stats.mqtt_publish_refused.get("mqtt_properties_too_large"), Some(&1));
}

/// A v5 topic alias set with a topic stands for it in a later PUBLISH
/// with an empty topic; one over the maximum or never set is DISCONNECT
/// 0x94.
#[test]
fn topic_aliases_are_set_resolved_and_bounded() {
    let aliased = |topic: &str, alias: u16, payload: &[u8]| {
        let properties = Properties { topic_alias: Some(alias), ..Properties::default() };
        bytes(&Packet::Publish(Publish { dup: false, qos: QoS::AtMostOnce, retain: false, topic, packet_id: 0, properties, payload }), Version::V5)
    };
    let mut p = parts();
    assert!(p.feed(&connect(Version::V5, 0)).0.is_ok());
    let mut buf = aliased("a/b", alias::TOPIC_ALIAS_MAXIMUM, b"1");
    buf.extend(aliased("", alias::TOPIC_ALIAS_MAXIMUM, b"2"));
    assert!(p.feed(&buf).0.is_ok());
    let got: Vec<(&str, &str)> = p.published.messages.iter().map(|m| (m.topic.as_str(), std::str::from_utf8(&m.data).unwrap())).collect();
    assert_eq!(got, [("a/b", "1"), ("a/b", "2")]);
    let disconnect = bytes(&Packet::Disconnect(Disconnect { reason: 0x94, properties: Properties::default() }), Version::V5);
    assert_eq!(p.feed(&aliased("a/c", alias::TOPIC_ALIAS_MAXIMUM + 1, b"3")), (Err("mqtt_topic_alias_invalid"), disconnect.clone()));
    let mut q = parts();
    assert!(q.feed(&connect(Version::V5, 0)).0.is_ok());
    assert_eq!(q.feed(&aliased("", 1, b"4")), (Err("mqtt_topic_alias_invalid"), disconnect));
    assert!(q.published.messages.is_empty());
}

/// A v5 client's Receive Maximum below `--mqtt-inflight` is its window,
/// kept in the boxed part; one at or above it (or none) is the server's
/// window and keeps nothing boxed.
#[test]
fn a_receive_maximum_below_the_inflight_window_narrows_it() {
    let receive = |rm: Option<u16>| {
        let mut p = parts();
        let properties = Properties { receive_maximum: rm, ..Properties::default() };
        let c = Connect { version: Version::V5, clean_start: true, keep_alive: 0, properties, client_id: "", will: None, username: None, password: None };
        assert!(p.feed(&bytes(&Packet::Connect(Box::new(c)), Version::V5)).0.is_ok());
        (p.m.window(p.cfg.flight.inflight), p.m.extra.is_some())
    };
    // parts() sets --mqtt-inflight to 2.
    assert_eq!(receive(None), (2, false));
    assert_eq!(receive(Some(65_535)), (2, false));
    assert_eq!(receive(Some(2)), (2, false));
    assert_eq!(receive(Some(1)), (1, true));
}
