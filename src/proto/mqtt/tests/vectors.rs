//! Bytes written by hand from the standards' layouts, decoded, and encoded
//! back to the same bytes.

use super::*;
use crate::proto::mqtt::decode::Cursor;

/// 3.1.1 §3.1: CONNECT, clean session, keep alive 60, client id "a".
pub(super) const CONNECT_V311: &[u8] = &[0x10, 13, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60, 0, 1, b'a'];
/// 5.0 §3.1: the same with a Receive Maximum of 20.
pub(super) const CONNECT_V5: &[u8] = &[0x10, 17, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 60, 3, 0x21, 0, 20, 0, 1, b'a'];

#[test]
fn variable_byte_integers_match_the_table_of_section_1_5_5() {
    let table: &[(u32, &[u8])] = &[
        (0, &[0x00]),
        (127, &[0x7F]),
        (128, &[0x80, 0x01]),
        (16_383, &[0xFF, 0x7F]),
        (16_384, &[0x80, 0x80, 0x01]),
        (2_097_151, &[0xFF, 0xFF, 0x7F]),
        (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
        (268_435_455, &[0xFF, 0xFF, 0xFF, 0x7F]),
    ];
    for &(v, bytes) in table {
        let mut out = Vec::new();
        encode::put_varint(&mut out, v).unwrap();
        assert_eq!(out, bytes);
        assert_eq!(Cursor::new(bytes).varint(), Ok(v));
    }
    // The remaining length of 321 from the 3.1.1 example (§2.2.3): 0xC1 0x02.
    let h = decode::fixed_header(&[0x30, 0xC1, 0x02], Some(Version::V311), 1000).unwrap().unwrap();
    assert_eq!((h.len, h.remaining), (3, 321));
    assert_eq!(decode::fixed_header(&[0x30, 0xC1], Some(Version::V311), 1000), Ok(None), "not all of it yet");
}

#[test]
fn hand_written_packets_decode_and_encode_to_the_same_bytes() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    let connect = |version, properties| {
        Packet::Connect(Box::new(Connect {
            version,
            clean_start: true,
            keep_alive: 60,
            properties,
            client_id: "a",
            will: None,
            username: None,
            password: None,
        }))
    };
    let publish =
        |qos, topic, packet_id, properties, payload| Packet::Publish(Publish { dup: false, qos, retain: false, topic, packet_id, properties, payload });
    let cases: Vec<(Role, Version, &[u8], Packet<'static>)> = vec![
        (Role::Server, v3, CONNECT_V311, connect(v3, Properties::default())),
        (Role::Server, v5, CONNECT_V5, connect(v5, Properties { receive_maximum: Some(20), ..Properties::default() })),
        (Role::Client, v3, &[0x20, 2, 0, 0], Packet::ConnAck(ConnAck { session_present: false, code: 0, properties: Properties::default() })),
        (
            Role::Client,
            v5,
            &[0x20, 5, 1, 0, 2, 0x24, 1],
            Packet::ConnAck(ConnAck {
                session_present: true,
                code: 0,
                properties: Properties { maximum_qos: Some(QoS::AtLeastOnce), ..Properties::default() },
            }),
        ),
        (Role::Server, v3, &[0x32, 9, 0, 3, b'a', b'/', b'b', 0, 10, b'h', b'i'], publish(QoS::AtLeastOnce, "a/b", 10, Properties::default(), b"hi")),
        // 5.0 §3.3.2.3.4: an empty topic name with a Topic Alias.
        (
            Role::Client,
            v5,
            &[0x30, 7, 0, 0, 3, 0x23, 0, 5, b'x'],
            publish(QoS::AtMostOnce, "", 0, Properties { topic_alias: Some(5), ..Properties::default() }, b"x"),
        ),
        // 5.0 §3.4.2.1: reason code and properties left out when success and none.
        (Role::Server, v5, &[0x40, 2, 0, 1], Packet::PubAck(Ack { packet_id: 1, ..Ack::default() })),
        (Role::Server, v5, &[0x50, 3, 0, 1, 0x10], Packet::PubRec(Ack { packet_id: 1, reason: 0x10, ..Ack::default() })),
        (Role::Client, v3, &[0x62, 2, 0x12, 0x34], Packet::PubRel(Ack { packet_id: 0x1234, ..Ack::default() })),
        (
            Role::Server,
            v3,
            &[0x82, 8, 0, 1, 0, 3, b'a', b'/', b'b', 1],
            Packet::Subscribe(Subscribe {
                packet_id: 1,
                properties: Properties::default(),
                subscriptions: vec![Subscription { filter: "a/b", qos: QoS::AtLeastOnce, ..Subscription::default() }],
            }),
        ),
        (Role::Client, v3, &[0x90, 3, 0, 1, 1], Packet::SubAck(SubAck { packet_id: 1, properties: Properties::default(), codes: vec![1] })),
        (
            Role::Server,
            v5,
            &[0xA2, 6, 0, 2, 0, 0, 1, b'#'],
            Packet::Unsubscribe(Unsubscribe { packet_id: 2, properties: Properties::default(), filters: vec!["#"] }),
        ),
        (Role::Client, v3, &[0xB0, 2, 0, 2], Packet::UnsubAck(SubAck { packet_id: 2, properties: Properties::default(), codes: vec![] })),
        (Role::Server, v3, &[0xC0, 0], Packet::PingReq),
        (Role::Client, v3, &[0xD0, 0], Packet::PingResp),
        (Role::Server, v3, &[0xE0, 0], Packet::Disconnect(Disconnect::default())),
        (Role::Server, v5, &[0xE0, 1, 0x04], Packet::Disconnect(Disconnect { reason: 0x04, ..Disconnect::default() })),
        (Role::Client, v5, &[0xF0, 0], Packet::Auth(Auth::default())),
    ];
    for (role, v, bytes, want) in cases {
        assert_eq!(one(bytes, role, v, &l), Ok(want.clone()), "{bytes:02X?}");
        assert_eq!(enc(&want, v), bytes, "{want:?}");
    }
}

#[test]
fn the_version_is_learned_from_connect() {
    let l = Limits::default();
    // 5.0: a PUBLISH after the CONNECT is read with properties.
    let mut r = Reader::server();
    assert_eq!(r.version(), None);
    let publish = [0x30, 7, 0, 1, b't', 2, 0x01, 1, b'x'];
    let (got, end) = read_all(&mut r, &[CONNECT_V5, &publish], &l);
    assert_eq!((got.len(), end, r.version()), (2, Ok(()), Some(Version::V5)));
    assert!(got[1].contains("payload_is_utf8: Some(true)"), "{}", got[1]);
    // 3.1.1: the same bytes are a topic "t", then payload.
    let mut r = Reader::server();
    let (got, _) = read_all(&mut r, &[CONNECT_V311, &publish], &l);
    assert_eq!(r.version(), Some(Version::V311));
    assert!(got[1].contains("payload: [2, 1, 1, 120]"), "{}", got[1]);
    // A 3.1.1 connection has no AUTH.
    let mut r = Reader::server();
    assert_eq!(read_all(&mut r, &[CONNECT_V311, &[0xF0, 0]], &l).1, Err(Error::UnknownPacketType));
    // A CONNECT refused after its level still tells the version, for the CONNACK.
    let mut bad = CONNECT_V5.to_vec();
    bad[14] = 0; // receive maximum 0
    bad[15] = 0;
    let mut r = Reader::server();
    assert_eq!(read_all(&mut r, &[&bad], &l).1, Err(Error::BadPropertyValue(0x21)));
    assert_eq!(r.version(), Some(Version::V5));
}
