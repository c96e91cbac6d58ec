//! Random packets round-trip; random bytes (alone, or a valid packet with a
//! byte changed) never panic, stay bounded, and decode the same whole or
//! cut (through the fuzz entry point, which asserts all of that).

use super::*;
use crate::proto::mqtt::properties::{id, Place};
use crate::proto::mqtt::reason;
use proptest::collection::vec;
use proptest::prelude::*;

/// Owned material a random packet is built from.
#[derive(Debug, Clone)]
struct Seed {
    kind: u8,
    v5: bool,
    flags: u32,
    strs: Vec<String>,
    topics: Vec<String>,
    nums: Vec<u32>,
    bytes: Vec<u8>,
    props: u64,
}

fn seed() -> impl Strategy<Value = Seed> {
    (
        1u8..=15,
        any::<bool>(),
        any::<u32>(),
        vec("[a-zA-Z0-9 \u{e9}\u{20ac}\u{1F600}]{0,10}", 4),
        vec("[a-z$]{1,5}(/[a-z]{0,4}){0,3}", 4),
        vec(any::<u32>(), 8),
        vec(any::<u8>(), 0..200),
        any::<u64>(),
    )
        .prop_map(|(kind, v5, flags, strs, topics, nums, bytes, props)| Seed { kind, v5, flags, strs, topics, nums, bytes, props })
}

const IDS: &[u8] = &[
    id::PAYLOAD_FORMAT,
    id::MESSAGE_EXPIRY,
    id::CONTENT_TYPE,
    id::RESPONSE_TOPIC,
    id::CORRELATION_DATA,
    id::SUBSCRIPTION_ID,
    id::SESSION_EXPIRY,
    id::ASSIGNED_CLIENT_ID,
    id::SERVER_KEEP_ALIVE,
    id::AUTH_METHOD,
    id::AUTH_DATA,
    id::REQUEST_PROBLEM_INFO,
    id::WILL_DELAY,
    id::REQUEST_RESPONSE_INFO,
    id::RESPONSE_INFO,
    id::SERVER_REFERENCE,
    id::REASON_STRING,
    id::RECEIVE_MAXIMUM,
    id::TOPIC_ALIAS_MAXIMUM,
    id::TOPIC_ALIAS,
    id::MAXIMUM_QOS,
    id::RETAIN_AVAILABLE,
    id::USER_PROPERTY,
    id::MAXIMUM_PACKET_SIZE,
    id::WILDCARD_SUB_AVAILABLE,
    id::SUB_ID_AVAILABLE,
    id::SHARED_SUB_AVAILABLE,
];

/// Random valid properties for `place` (empty in 3.1.1).
fn props(s: &Seed, place: Place, sub_ids: bool) -> Properties<'_> {
    let mut p = Properties::default();
    if !s.v5 {
        return p;
    }
    for (i, &pid) in IDS.iter().enumerate() {
        if s.props >> i & 1 == 0 || !place.allows(pid) {
            continue;
        }
        let n = s.nums[i % s.nums.len()];
        let (st, topic, bin) = (s.strs[i % 4].as_str(), s.topics[i % 4].as_str(), &s.bytes[..s.bytes.len().min(i)]);
        let (flag, nz16) = (n & 1 == 1, (n % 65535 + 1) as u16);
        match pid {
            id::PAYLOAD_FORMAT => p.payload_is_utf8 = Some(flag),
            id::MESSAGE_EXPIRY => p.message_expiry = Some(n),
            id::CONTENT_TYPE => p.content_type = Some(st),
            id::RESPONSE_TOPIC => p.response_topic = Some(topic),
            id::CORRELATION_DATA => p.correlation_data = Some(bin),
            id::SUBSCRIPTION_ID if sub_ids => {
                let count = if place == Place::PUBLISH { 1 + n as usize % 3 } else { 1 };
                p.subscription_ids = (0..count).map(|k| (n >> k) % MAX_VARINT + 1).collect();
            }
            id::SUBSCRIPTION_ID => {}
            id::SESSION_EXPIRY => p.session_expiry = Some(n),
            id::ASSIGNED_CLIENT_ID => p.assigned_client_id = Some(st),
            id::SERVER_KEEP_ALIVE => p.server_keep_alive = Some(n as u16),
            id::AUTH_METHOD => p.auth_method = Some(st),
            id::AUTH_DATA => p.auth_data = Some(bin),
            id::REQUEST_PROBLEM_INFO => p.request_problem_info = Some(flag),
            id::WILL_DELAY => p.will_delay = Some(n),
            id::REQUEST_RESPONSE_INFO => p.request_response_info = Some(flag),
            id::RESPONSE_INFO => p.response_info = Some(st),
            id::SERVER_REFERENCE => p.server_reference = Some(st),
            id::REASON_STRING => p.reason_string = Some(st),
            id::RECEIVE_MAXIMUM => p.receive_maximum = Some(nz16),
            id::TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(n as u16),
            id::TOPIC_ALIAS => p.topic_alias = Some(nz16),
            id::MAXIMUM_QOS => p.maximum_qos = Some(if flag { QoS::AtLeastOnce } else { QoS::AtMostOnce }),
            id::RETAIN_AVAILABLE => p.retain_available = Some(flag),
            id::USER_PROPERTY => p.user_properties = s.strs.iter().take(1 + n as usize % 3).map(|k| (k.as_str(), st)).collect(),
            id::MAXIMUM_PACKET_SIZE => p.maximum_packet_size = Some(n.max(1)),
            id::WILDCARD_SUB_AVAILABLE => p.wildcard_sub_available = Some(flag),
            id::SUB_ID_AVAILABLE => p.sub_id_available = Some(flag),
            _ => p.shared_sub_available = Some(flag),
        }
    }
    p
}

/// A topic filter from a topic name: maybe `+` for its first level, a
/// trailing `#`, a share group.
fn filter(s: &Seed, i: usize) -> String {
    let t = &s.topics[i % 4];
    let bit = |b: usize| s.flags >> ((b + i) % 32) & 1 == 1;
    let mut f = if bit(8) { t.split_once('/').map_or("+".to_string(), |(_, rest)| format!("+/{rest}")) } else { t.clone() };
    if bit(12) {
        f.push_str("/#");
    }
    if bit(16) {
        f = format!("$share/g{i}/{f}");
    }
    f
}

/// A random valid packet, the role that reads it and the version it is in
/// (AUTH is always 5.0; from a 3.1.1 seed, without reason or properties).
fn build<'a>(s: &'a Seed, filters: &'a [String]) -> (Role, Version, Packet<'a>) {
    let v = if s.v5 || s.kind == kind::AUTH { Version::V5 } else { Version::V311 };
    let f = |bit: u32| s.flags >> bit & 1 == 1;
    let qos = |bit: u32| QoS::from_bits((s.flags >> bit & 0xFF) as u8 % 3).unwrap_or_default();
    let pid = (s.nums[0] % 65535 + 1) as u16;
    let pick = |list: &[u8], k: usize| if s.v5 { list[s.nums[k % 8] as usize % list.len()] } else { 0 };
    let count = 1 + s.nums[2] as usize % 4;
    let client_or_server = if f(5) { Role::Client } else { Role::Server };
    let (role, p) = match s.kind {
        kind::CONNECT => {
            let client_id = s.strs[0].as_str();
            let will = f(1).then(|| Will { qos: qos(2), retain: f(4), properties: props(s, Place::WILL, false), topic: &s.topics[0], payload: &s.bytes });
            let username = f(5).then_some(s.strs[1].as_str());
            let password = (f(6) && (s.v5 || username.is_some())).then_some(&s.bytes[..s.bytes.len() / 2]);
            let clean_start = f(0) || (client_id.is_empty() && !s.v5);
            let properties = props(s, Place::CONNECT, false);
            (
                Role::Server,
                Packet::Connect(Box::new(Connect { version: v, clean_start, keep_alive: s.nums[3] as u16, properties, client_id, will, username, password })),
            )
        }
        kind::CONNACK => {
            let code = if s.v5 { pick(reason::CONNACK_V5, 1) } else { (s.nums[1] % 6) as u8 };
            (Role::Client, Packet::ConnAck(ConnAck { session_present: f(0), code, properties: props(s, Place::CONNACK, false) }))
        }
        kind::PUBLISH => {
            let q = qos(0);
            let packet_id = if q == QoS::AtMostOnce { 0 } else { pid };
            let properties = props(s, Place::PUBLISH, client_or_server == Role::Client);
            let p = Publish { dup: f(2) && q != QoS::AtMostOnce, qos: q, retain: f(3), topic: &s.topics[0], packet_id, properties, payload: &s.bytes };
            (client_or_server, Packet::Publish(p))
        }
        kind::PUBACK..=kind::PUBCOMP => {
            let list = if s.kind <= kind::PUBREC { reason::PUBACK } else { reason::PUBREL };
            let a = Ack { packet_id: pid, reason: pick(list, 1), properties: props(s, Place::ACK, false) };
            let p = [Packet::PubAck, Packet::PubRec, Packet::PubRel, Packet::PubComp][(s.kind - kind::PUBACK) as usize](a);
            (client_or_server, p)
        }
        kind::SUBSCRIBE => {
            let subscriptions = (0..count)
                .map(|i| {
                    let o = s.nums[4 + i % 4];
                    let shared = filters[i].starts_with("$share/");
                    let mut sub = Subscription { filter: &filters[i], qos: QoS::from_bits((o % 3) as u8).unwrap_or_default(), ..Subscription::default() };
                    if s.v5 {
                        sub = Subscription { no_local: o & 4 != 0 && !shared, retain_as_published: o & 8 != 0, retain_handling: (o >> 4) as u8 % 3, ..sub };
                    }
                    sub
                })
                .collect();
            (Role::Server, Packet::Subscribe(Subscribe { packet_id: pid, properties: props(s, Place::SUBSCRIBE, true), subscriptions }))
        }
        kind::SUBACK | kind::UNSUBACK => {
            let sub = s.kind == kind::SUBACK;
            let list = if !sub {
                reason::UNSUBACK
            } else if s.v5 {
                reason::SUBACK
            } else {
                reason::SUBACK_V311
            };
            let codes: Vec<u8> = if sub || s.v5 { (0..count).map(|i| list[s.nums[i] as usize % list.len()]).collect() } else { vec![] };
            let properties = props(s, if sub { Place::SUBACK } else { Place::UNSUBACK }, false);
            let a = SubAck { packet_id: pid, properties, codes };
            (Role::Client, if sub { Packet::SubAck(a) } else { Packet::UnsubAck(a) })
        }
        kind::UNSUBSCRIBE => {
            let filters = filters[..count].iter().map(String::as_str).collect();
            (Role::Server, Packet::Unsubscribe(Unsubscribe { packet_id: pid, properties: props(s, Place::UNSUBSCRIBE, false), filters }))
        }
        kind::PINGREQ => (Role::Server, Packet::PingReq),
        kind::PINGRESP => (Role::Client, Packet::PingResp),
        kind::DISCONNECT => {
            let d = Disconnect { reason: pick(reason::DISCONNECT, 1), properties: props(s, Place::DISCONNECT, false) };
            (if s.v5 { client_or_server } else { Role::Server }, Packet::Disconnect(d))
        }
        _ => (client_or_server, Packet::Auth(Auth { reason: pick(reason::AUTH, 1), properties: props(s, Place::AUTH, false) })),
    };
    (role, v, p)
}

proptest! {
    #[test]
    fn random_packets_round_trip(s in seed(), cut in any::<proptest::sample::Index>()) {
        let filters: Vec<String> = (0..4).map(|i| filter(&s, i)).collect();
        let (role, v, p) = build(&s, &filters);
        let bytes = enc(&p, v);
        let limits = Limits::default();
        prop_assert_eq!(one(&bytes, role, v, &limits), Ok(p.clone()));
        // Through a reader, cut anywhere (a server's reader sees a CONNECT first).
        let connect = if v == Version::V5 { vectors::CONNECT_V5 } else { vectors::CONNECT_V311 };
        let (mut r, stream) = match (role, &p) {
            (Role::Server, Packet::Connect(_)) => (Reader::server(), bytes.clone()),
            (Role::Server, _) => (Reader::server(), cat(&[connect, &bytes])),
            (Role::Client, _) => (Reader::client(v), bytes.clone()),
        };
        let (a, b) = stream.split_at(cut.index(stream.len() + 1));
        let (got, end) = read_all(&mut r, &[a, b], &limits);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(got.last(), Some(&format!("{p:?}")));
    }

    #[test]
    fn changed_packets_hold_the_fuzz_invariants(s in seed(), at in any::<proptest::sample::Index>(), to: u8, mode: u8) {
        let filters: Vec<String> = (0..4).map(|i| filter(&s, i)).collect();
        let (role, v, p) = build(&s, &filters);
        let mut bytes = enc(&p, v);
        let i = at.index(bytes.len());
        bytes[i] = to;
        // The fuzz target's mode byte: bit 0 client, bit 1 version 5.
        let mode = (mode & !3) | (role == Role::Client) as u8 | ((v == Version::V5) as u8) << 1;
        let connect = if v == Version::V5 { vectors::CONNECT_V5 } else { vectors::CONNECT_V311 };
        let head: &[u8] = if role == Role::Server && !matches!(p, Packet::Connect(_)) { connect } else { &[] };
        crate::proto::mqtt::invariants::check(&cat(&[&[mode], head, &bytes]));
    }

    #[test]
    fn random_bytes_hold_the_fuzz_invariants(data in vec(any::<u8>(), 0..300)) {
        crate::proto::mqtt::invariants::check(&data);
    }
}

#[test]
fn every_kind_of_seed_builds() {
    // The generator reaches every packet type (and is used by the tests above).
    let mut s = Seed {
        kind: 1,
        v5: true,
        flags: !0,
        strs: vec!["s".into(); 4],
        topics: vec!["t/u".into(); 4],
        nums: (1..9).collect(),
        bytes: vec![1, 2, 3],
        props: !0,
    };
    let filters: Vec<String> = (0..4).map(|i| filter(&s, i)).collect();
    for k in 1..=15 {
        s.kind = k;
        let (role, v, p) = build(&s, &filters);
        assert_eq!(p.kind(), k);
        assert_eq!(one(&enc(&p, v), role, v, &Limits::default()), Ok(p.clone()));
    }
}
