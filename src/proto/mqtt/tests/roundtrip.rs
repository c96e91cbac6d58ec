//! Every packet type, both versions, every property where table 2-4
//! allows it: encode then decode gives the packet back, whole, through a
//! Reader cut at every byte, and (PUBLISH) through a shared prefix.

use super::*;
use crate::proto::mqtt::encode::PublishPrefix;

const USER: &[(&str, &str)] = &[("k", "v"), ("k", "second value, same name"), ("\u{e9}t\u{e9}", "")];

/// `p` in 5.0, nothing in 3.1.1.
fn only_v5(v: Version, p: Properties<'static>) -> Properties<'static> {
    if v == Version::V5 {
        p
    } else {
        Properties::default()
    }
}

fn message_props(sub_ids: Vec<u32>) -> Properties<'static> {
    Properties {
        payload_is_utf8: Some(true),
        message_expiry: Some(3600),
        content_type: Some("text/plain"),
        response_topic: Some("reply/to/me"),
        correlation_data: Some(b"\x00\x01corr"),
        subscription_ids: sub_ids,
        user_properties: USER.to_vec(),
        ..Properties::default()
    }
}

fn reason_props() -> Properties<'static> {
    Properties { reason_string: Some("because"), user_properties: USER.to_vec(), ..Properties::default() }
}

/// Samples of every packet, each with the role that reads it.
fn samples(v: Version) -> Vec<(Role, Packet<'static>)> {
    let v5 = v == Version::V5;
    let connect_props = Properties {
        session_expiry: Some(0xFFFF_FFFF),
        auth_method: Some("SCRAM-SHA-1"),
        auth_data: Some(b"client-first"),
        request_problem_info: Some(false),
        request_response_info: Some(true),
        receive_maximum: Some(20),
        topic_alias_maximum: Some(10),
        maximum_packet_size: Some(1 << 20),
        user_properties: USER.to_vec(),
        ..Properties::default()
    };
    let will_props = Properties { will_delay: Some(30), ..message_props(vec![]) };
    let connack_props = Properties {
        session_expiry: Some(60),
        assigned_client_id: Some("auto-1"),
        server_keep_alive: Some(120),
        auth_method: Some("SCRAM-SHA-1"),
        auth_data: Some(b"server-final"),
        response_info: Some("resp/"),
        server_reference: Some("other:1883"),
        reason_string: Some("welcome"),
        receive_maximum: Some(65535),
        topic_alias_maximum: Some(0),
        maximum_qos: Some(QoS::AtLeastOnce),
        retain_available: Some(false),
        maximum_packet_size: Some(65536),
        wildcard_sub_available: Some(true),
        sub_id_available: Some(false),
        shared_sub_available: Some(true),
        user_properties: USER.to_vec(),
        ..Properties::default()
    };
    let sub = |filter, qos| Subscription { filter, qos, ..Subscription::default() };
    let mut first = sub("a/+/c", QoS::AtLeastOnce);
    if v5 {
        first = Subscription { no_local: true, retain_as_published: true, retain_handling: 2, ..first };
    }
    let mut out = vec![
        (
            Role::Server,
            Packet::Connect(Box::new(Connect {
                version: v,
                clean_start: false,
                keep_alive: 30,
                properties: only_v5(v, connect_props),
                client_id: "dev-1",
                will: Some(Will { qos: QoS::ExactlyOnce, retain: true, properties: only_v5(v, will_props), topic: "dev/1/status", payload: b"gone" }),
                username: Some("user"),
                password: Some(b"\x00pw\xff"),
            })),
        ),
        (
            Role::Server,
            Packet::Connect(Box::new(Connect {
                version: v,
                clean_start: true,
                keep_alive: 0,
                properties: Properties::default(),
                client_id: "",
                will: None,
                username: None,
                password: None,
            })),
        ),
        (Role::Client, Packet::ConnAck(ConnAck { session_present: true, code: 0, properties: only_v5(v, connack_props) })),
        (Role::Client, Packet::ConnAck(ConnAck { session_present: false, code: if v5 { 0x87 } else { 5 }, properties: Properties::default() })),
        (
            Role::Server,
            Packet::Publish(Publish {
                dup: false,
                qos: QoS::AtMostOnce,
                retain: true,
                topic: "a/b",
                packet_id: 0,
                properties: only_v5(v, Properties { topic_alias: Some(3), ..message_props(vec![]) }),
                payload: b"hello",
            }),
        ),
        (
            Role::Client,
            Packet::Publish(Publish {
                dup: true,
                qos: QoS::AtLeastOnce,
                retain: false,
                topic: "$SYS/x",
                packet_id: 10,
                properties: only_v5(v, message_props(vec![1, 268_435_455, 1])),
                payload: &[0xFF; 300],
            }),
        ),
        (
            Role::Server,
            Packet::Publish(Publish {
                dup: false,
                qos: QoS::ExactlyOnce,
                retain: false,
                topic: "t",
                packet_id: 65535,
                properties: Properties::default(),
                payload: b"",
            }),
        ),
        (Role::Server, Packet::PubAck(Ack { packet_id: 1, reason: if v5 { 0x10 } else { 0 }, properties: only_v5(v, reason_props()) })),
        (Role::Client, Packet::PubAck(Ack { packet_id: 2, ..Ack::default() })),
        (Role::Client, Packet::PubRec(Ack { packet_id: 3, reason: if v5 { 0x80 } else { 0 }, properties: Properties::default() })),
        (Role::Server, Packet::PubRel(Ack { packet_id: 4, reason: if v5 { 0x92 } else { 0 }, properties: only_v5(v, reason_props()) })),
        (Role::Client, Packet::PubComp(Ack { packet_id: 5, ..Ack::default() })),
        (
            Role::Server,
            Packet::Subscribe(Subscribe {
                packet_id: 6,
                properties: only_v5(v, Properties { subscription_ids: vec![7], user_properties: USER.to_vec(), ..Properties::default() }),
                subscriptions: vec![first, sub("$share/g/x/#", QoS::ExactlyOnce), sub("#", QoS::AtMostOnce)],
            }),
        ),
        (
            Role::Client,
            Packet::SubAck(SubAck { packet_id: 6, properties: only_v5(v, reason_props()), codes: if v5 { vec![1, 2, 0x80, 0x97] } else { vec![1, 2, 0x80] } }),
        ),
        (
            Role::Server,
            Packet::Unsubscribe(Unsubscribe {
                packet_id: 7,
                properties: only_v5(v, Properties { user_properties: USER.to_vec(), ..Properties::default() }),
                filters: vec!["a/+/c", "$share/g/x/#"],
            }),
        ),
        (Role::Client, Packet::UnsubAck(SubAck { packet_id: 7, properties: only_v5(v, reason_props()), codes: if v5 { vec![0, 0x11] } else { vec![] } })),
        (Role::Server, Packet::PingReq),
        (Role::Client, Packet::PingResp),
        (Role::Server, Packet::Disconnect(Disconnect::default())),
    ];
    if v5 {
        let bye = Properties { session_expiry: Some(0), server_reference: Some("b:1883"), ..reason_props() };
        let auth = Properties { auth_method: Some("SCRAM-SHA-1"), auth_data: Some(b"\x01\x02"), ..reason_props() };
        out.extend([
            (Role::Server, Packet::Disconnect(Disconnect { reason: 0x04, properties: bye.clone() })),
            (Role::Client, Packet::Disconnect(Disconnect { reason: 0x8E, properties: Properties::default() })),
            (Role::Server, Packet::Auth(Auth { reason: 0x19, properties: auth })),
            (Role::Client, Packet::Auth(Auth { reason: 0x18, properties: Properties::default() })),
            (Role::Server, Packet::Auth(Auth::default())),
        ]);
    }
    out
}

#[test]
fn every_packet_type_round_trips_in_both_versions() {
    let limits = Limits::default();
    for v in [Version::V311, Version::V5] {
        let all = samples(v);
        let kinds: std::collections::BTreeSet<u8> = all.iter().map(|(_, p)| p.kind()).collect();
        assert_eq!(kinds.len(), if v == Version::V5 { 15 } else { 14 }, "{v:?}: every type");
        for (role, p) in &all {
            let bytes = enc(p, v);
            assert_eq!(one(&bytes, *role, v, &limits).as_ref(), Ok(p), "{v:?} {p:?}");
        }
    }
}

#[test]
fn a_stream_decodes_the_same_cut_anywhere() {
    let limits = Limits::default();
    for v in [Version::V311, Version::V5] {
        for role in [Role::Server, Role::Client] {
            // A server's stream: one CONNECT, then everything else a client sends.
            let mut seen_connect = false;
            let stream: Vec<Packet<'static>> = samples(v)
                .into_iter()
                .filter(|(r, p)| *r == role && !(matches!(p, Packet::Connect(_)) && std::mem::replace(&mut seen_connect, true)))
                .map(|(_, p)| p)
                .collect();
            let bytes: Vec<u8> = stream.iter().flat_map(|p| enc(p, v)).collect();
            let want: Vec<String> = stream.iter().map(|p| format!("{p:?}")).collect();
            let fresh = || if role == Role::Server { Reader::server() } else { Reader::client(v) };
            for cut in 0..=bytes.len() {
                let (a, b) = bytes.split_at(cut);
                let mut r = fresh();
                let (got, end) = read_all(&mut r, &[a, b], &limits);
                assert_eq!((got, end), (want.clone(), Ok(())), "{v:?} {role:?} cut at {cut}");
                assert_eq!(r.buffered(), 0);
            }
            // One byte at a time.
            let singles: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(read_all(&mut fresh(), &singles, &limits), (want, Ok(())));
        }
    }
}

#[test]
fn a_publish_prefix_is_encoded_once_and_patched_per_subscriber() {
    for v in [Version::V311, Version::V5] {
        for (_, p) in samples(v) {
            let Packet::Publish(p) = p else { continue };
            let mut prefix = PublishPrefix::new(&p, v).unwrap();
            assert_eq!([prefix.bytes(), p.payload].concat(), enc(&Packet::Publish(p.clone()), v));
            // Another subscriber: the same bytes but for flags and packet id.
            let (qos, pid) = if p.qos == QoS::AtMostOnce { (QoS::AtMostOnce, 0) } else { (QoS::ExactlyOnce, 0xBEEF) };
            prefix.patch(false, qos, false, pid).unwrap();
            let other = Publish { dup: false, qos, retain: false, packet_id: pid, ..p.clone() };
            assert_eq!([prefix.bytes(), p.payload].concat(), enc(&Packet::Publish(other), v));
            let wrong = if qos == QoS::AtMostOnce { QoS::AtLeastOnce } else { QoS::AtMostOnce };
            assert_eq!(prefix.patch(false, wrong, false, 1), Err(EncodeError::WrongForm));
        }
    }
}

#[test]
fn encoding_refuses_what_the_wire_cannot_carry_and_leaves_out_untouched() {
    let long = "x".repeat(70_000);
    let p = Packet::Unsubscribe(Unsubscribe { packet_id: 1, properties: Properties::default(), filters: vec![&long] });
    let mut out = vec![1, 2, 3];
    assert_eq!(encode::packet(&p, Version::V5, &mut out), Err(EncodeError::FieldTooLong));
    assert_eq!(out, [1, 2, 3]);
    assert_eq!(encode::packet(&Packet::Auth(Auth::default()), Version::V311, &mut out), Err(EncodeError::WrongForm));
    assert_eq!(out, [1, 2, 3]);
    let mut v = Vec::new();
    assert_eq!(encode::put_varint(&mut v, MAX_VARINT + 1), Err(EncodeError::PacketTooLarge));
}
