//! Forwarded PUBLISH properties (`forward.rs`): taken from a client's
//! PUBLISH, bounded, encoded for a subscriber with what is left of the
//! expiry and its subscription ids, and the expiry found in the bytes.

use super::*;
use crate::proto::mqtt::forward::{expiry_at, Forwarded, MAX_FORWARDED_BYTES};

fn published() -> Properties<'static> {
    Properties {
        payload_is_utf8: Some(true),
        message_expiry: Some(30),
        content_type: Some("application/json"),
        response_topic: Some("reply/to"),
        correlation_data: Some(b"\x00\x01corr"),
        user_properties: vec![("k", "v"), ("k", "w")],
        topic_alias: Some(3),
        ..Properties::default()
    }
}

#[test]
fn forwarded_properties_reach_a_subscriber_with_the_expiry_left_and_its_ids() {
    let f = Forwarded::from_publish(&published(), Some(7)).unwrap();
    assert_eq!((f.origin, f.cost()), (Some(7), 16 + 8 + 6 + 4));
    assert!(!f.is_bare());
    assert!(Forwarded::from_publish(&Properties { topic_alias: Some(1), ..Properties::default() }, Some(7)).unwrap().is_bare());
    // 10.2 s after the publish, 19.8 s are left: sent as 20.
    let left = f.expiry_left(10_200_000).unwrap();
    assert_eq!(left, Some(20));
    assert_eq!(f.expiry_left(30_000_000), None, "expired");
    assert_eq!(Forwarded::default().expiry_left(u64::MAX), Some(None), "no expiry: forever");
    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce] {
        let properties = f.properties(left, vec![5, 9]);
        let packet_id = if qos == QoS::AtMostOnce { 0 } else { 1 };
        let p = Publish { dup: false, qos, retain: false, topic: "a/b", packet_id, properties, payload: b"x" };
        let bytes = enc(&Packet::Publish(p.clone()), Version::V5);
        let Packet::Publish(back) = one(&bytes, Role::Client, Version::V5, &Limits::default()).unwrap() else { panic!() };
        assert_eq!(back, p, "every forwarded property, in order, without the alias");
        let at = expiry_at(&bytes).expect("an expiry");
        assert_eq!(bytes[at..at + 4], 20u32.to_be_bytes());
    }
    let none = enc(
        &Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: "a",
            packet_id: 0,
            properties: Properties::default(),
            payload: b"",
        }),
        Version::V5,
    );
    assert_eq!(expiry_at(&none), None);
    assert_eq!(expiry_at(&[0x30]), None, "cut bytes are no expiry, not a panic");
}

#[test]
fn forwarded_properties_are_bounded() {
    let big = "x".repeat(MAX_FORWARDED_BYTES);
    let p = Properties { content_type: Some(&big), response_topic: Some("r"), ..Properties::default() };
    assert_eq!(Forwarded::from_publish(&p, None), Err(MAX_FORWARDED_BYTES + 1));
    let p = Properties { content_type: Some(&big), ..Properties::default() };
    assert!(Forwarded::from_publish(&p, None).is_ok());
}

/// A PUBLISH this server encoded gives back its message and the
/// properties it forwards (what a kept session keeps), whatever its
/// packet id; 3.1.1 has none; a stored copy drops the publisher and
/// carries what is left of the expiry.
#[test]
fn an_encoded_publish_gives_back_its_message_and_forwarded_properties() {
    use crate::proto::mqtt::forward::own_publish;
    let f = Forwarded::from_publish(&published(), Some(7)).unwrap();
    let props = f.properties(Some(30), vec![4]);
    let p = Publish { dup: false, qos: QoS::AtLeastOnce, retain: true, topic: "a/b", packet_id: 9, properties: props, payload: b"body" };
    let v5 = enc(&Packet::Publish(p.clone()), Version::V5);
    let (topic, payload, retain, got) = own_publish(&v5, true).unwrap();
    assert_eq!((topic, payload, retain), ("a/b", &b"body"[..], true));
    assert_eq!(got, Some(Forwarded { origin: None, ..f.clone() }));
    let v3 = enc(&Packet::Publish(Publish { properties: Properties::default(), ..p }), Version::V311);
    assert_eq!(own_publish(&v3, false), Some(("a/b", &b"body"[..], true, None)));
    assert_eq!(own_publish(b"\xC0\x00", false), None, "a PINGREQ is no PUBLISH");
    // The payload alone, its properties skipped (what is counted as sent).
    use crate::proto::mqtt::forward::own_payload;
    assert_eq!((own_payload(&v5, true), own_payload(&v3, false), own_payload(b"\xC0\x00", true)), (Some(&b"body"[..]), Some(&b"body"[..]), None));
    let stored = Forwarded::stored(Some(&f)).unwrap();
    assert_eq!(stored.origin, None);
    assert_eq!(Forwarded::stored(Some(&Forwarded { origin: Some(7), ..Forwarded::default() })), None, "nothing a subscriber would see");
    assert_eq!(Forwarded::at(Some(&stored), 1_000_000, 11_500_000).unwrap().unwrap().message_expiry, Some(20));
    assert_eq!(Forwarded::at(Some(&stored), 1_000_000, 31_000_000), Err(()));
}

/// A PUBLISH this server encoded, rewritten with a topic alias: every
/// field a client decodes is as it was but the topic and the alias; the
/// expiry is still found; bounded by the size given.
#[test]
fn an_encoded_publish_takes_a_topic_alias_and_keeps_the_rest() {
    use crate::proto::mqtt::encode::{publish_topic, with_topic_alias};
    let f = Forwarded::from_publish(&published(), None).unwrap();
    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
        let packet_id = if qos == QoS::AtMostOnce { 0 } else { 300 };
        let p = Publish { dup: false, qos, retain: true, topic: "dev/abc", packet_id, properties: f.properties(Some(20), vec![5]), payload: b"xyz" };
        let bytes = enc(&Packet::Publish(p.clone()), Version::V5);
        assert_eq!(publish_topic(&bytes), Some("dev/abc"));
        for (with_topic, topic) in [(true, "dev/abc"), (false, "")] {
            let aliased = with_topic_alias(&bytes, 12, with_topic, u32::MAX).unwrap();
            let Packet::Publish(back) = one(&aliased, Role::Client, Version::V5, &Limits::default()).unwrap() else { panic!() };
            let want = Properties { topic_alias: Some(12), ..p.properties.clone() };
            assert_eq!(back, Publish { topic, properties: want, ..p.clone() });
            let at = expiry_at(&aliased).expect("an expiry");
            assert_eq!(aliased[at..at + 4], 20u32.to_be_bytes());
        }
        let set = with_topic_alias(&bytes, 1, true, u32::MAX).unwrap();
        assert_eq!(with_topic_alias(&bytes, 1, true, set.len() as u32 - 1), None, "past the size given");
        assert_eq!(with_topic_alias(&bytes, 0, true, u32::MAX), None, "alias 0 does not exist");
    }
    assert_eq!(with_topic_alias(&enc(&Packet::PingResp, Version::V5), 1, true, u32::MAX), None, "not a PUBLISH");
    assert_eq!(with_topic_alias(&[0x30, 9, 0], 1, true, u32::MAX), None, "cut bytes are none, not a panic");
}
