//! Every refusal, from bytes a peer could send, with the reason code and
//! the 3.1.1 behaviour each maps to.

use super::vectors::{CONNECT_V311, CONNECT_V5};
use super::*;

/// How a server's reader (after a CONNECT of `v`) ends on `bytes`.
fn as_server(v: Version, bytes: &[u8], limits: &Limits) -> Result<(), Error> {
    let connect = if v == Version::V5 { CONNECT_V5 } else { CONNECT_V311 };
    read_all(&mut Reader::server(), &[connect, bytes], limits).1
}

/// How a client's reader of version `v` ends on `bytes`.
fn as_client(v: Version, bytes: &[u8], limits: &Limits) -> Result<(), Error> {
    read_all(&mut Reader::client(v), &[bytes], limits).1
}

/// A CONNECT of `v` with its flags byte and the rest after keep alive replaced.
fn connect(v: Version, flags: u8, rest: &[u8]) -> Vec<u8> {
    let head: &[u8] = &[0, 4, b'M', b'Q', b'T', b'T', v as u8, flags, 0, 60];
    let props: &[u8] = if v == Version::V5 { &[0] } else { &[] };
    let body = cat(&[head, props, rest]);
    cat(&[&[0x10, body.len() as u8], &body])
}

#[test]
fn framing_errors() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    assert_eq!(as_server(v3, &[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], &l), Err(Error::MalformedVarint));
    // A property length of five bytes.
    assert_eq!(as_server(v5, &[0x40, 8, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFF, 1], &l), Err(Error::MalformedVarint));
    assert_eq!(as_server(v3, &[0x00, 0], &l), Err(Error::UnknownPacketType));
    assert_eq!(as_server(v3, &[0xF0, 0], &l), Err(Error::UnknownPacketType));
    for bytes in [&[0xC1, 0][..], &[0x60, 2, 0, 1], &[0x80, 5, 0, 1, 0, 1, b'a', 0], &[0xA0, 5, 0, 1, 0, 1, b'a'], &[0x42, 2, 0, 1]] {
        assert_eq!(as_server(v3, bytes, &l), Err(Error::ReservedFlags), "{bytes:02X?}");
    }
    assert_eq!(as_client(v3, &[0x20, 2, 2, 0], &l), Err(Error::ReservedFlags), "CONNACK flags");
    assert_eq!(as_server(v3, &[0x82, 8, 0, 1, 0, 3, b'a', b'/', b'b', 0x05], &l), Err(Error::ReservedFlags), "3.1.1 options");
    assert_eq!(as_server(v5, &[0x82, 9, 0, 1, 0, 0, 3, b'a', b'/', b'b', 0x40], &l), Err(Error::ReservedFlags), "5.0 options");
    assert_eq!(as_server(v3, &[0x32, 3, 0, 3, b'a'], &l), Err(Error::Truncated));
    assert_eq!(as_server(v3, &[0xC0, 1, 0], &l), Err(Error::TrailingBytes));
    assert_eq!(as_server(v3, &[0x40, 3, 0, 1, 0], &l), Err(Error::TrailingBytes), "3.1.1 PUBACK has no reason");
    for e in [Error::MalformedVarint, Error::UnknownPacketType, Error::ReservedFlags, Error::Truncated, Error::TrailingBytes] {
        assert_eq!((e.reason_code(), e.v3_connack()), (0x81, None), "{e}");
    }
}

#[test]
fn oversized_packets_are_refused_from_the_fixed_header() {
    let l = Limits { max_packet_size: 100, ..Limits::default() };
    let mut r = Reader::client(Version::V311);
    // 1000 bytes announced; only the header has arrived.
    assert_eq!(read_all(&mut r, &[&[0x30, 0xE8, 0x07]], &l).1, Err(Error::PacketTooLarge));
    assert_eq!(Error::PacketTooLarge.reason_code(), 0x95);
    // At the limit is fine, and held only as it arrives.
    let mut r = Reader::client(Version::V311);
    let mut at_limit = vec![0x30, 98, 0, 1, b't'];
    at_limit.resize(100, 7);
    assert_eq!(read_all(&mut r, &[&at_limit[..50]], &l), (vec![], Ok(())));
    assert_eq!(r.buffered(), 50);
    assert_eq!(read_all(&mut r, &[&at_limit[50..]], &l).0.len(), 1);
    assert_eq!(r.buffered(), 0);
}

#[test]
fn sequence_errors() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    assert_eq!(read_all(&mut Reader::server(), &[&[0xC0, 0]], &l).1, Err(Error::UnexpectedPacket), "CONNECT first");
    assert_eq!(as_server(v3, CONNECT_V311, &l), Err(Error::UnexpectedPacket), "one CONNECT");
    assert_eq!(as_server(v3, &[0x20, 2, 0, 0], &l), Err(Error::UnexpectedPacket), "CONNACK to a server");
    assert_eq!(as_server(v5, &[0xD0, 0], &l), Err(Error::UnexpectedPacket), "PINGRESP to a server");
    assert_eq!(as_client(v3, &[0xC0, 0], &l), Err(Error::UnexpectedPacket), "PINGREQ to a client");
    assert_eq!(as_client(v3, CONNECT_V311, &l), Err(Error::UnexpectedPacket), "CONNECT to a client");
    assert_eq!(as_client(v3, &[0xE0, 0], &l), Err(Error::UnexpectedPacket), "a 3.1.1 server sends no DISCONNECT");
    assert_eq!(as_client(v5, &[0xE0, 0], &l), Ok(()));
    assert_eq!(Error::UnexpectedPacket.reason_code(), 0x82);
}

#[test]
fn connect_errors() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    let server = |b: &[u8], l: &Limits| read_all(&mut Reader::server(), &[b], l).1;
    let name = [0x10, 15, 0, 6, b'M', b'Q', b'I', b's', b'd', b'p', 3, 2, 0, 60, 0, 1, b'a'];
    assert_eq!(server(&name, &l), Err(Error::ProtocolName));
    let mut level = CONNECT_V311.to_vec();
    level[8] = 6;
    assert_eq!(server(&level, &l), Err(Error::ProtocolVersion(6)));
    for e in [Error::ProtocolName, Error::ProtocolVersion(6)] {
        assert_eq!((e.reason_code(), e.v3_connack()), (0x84, Some(0x01)));
    }
    // 3.1.1: an empty client id needs a clean session; 5.0 assigns one.
    assert_eq!(server(&connect(v3, 0x00, &[0, 0]), &l), Err(Error::ClientIdRejected));
    assert_eq!(server(&connect(v5, 0x00, &[0, 0]), &l), Ok(()));
    let small = Limits { max_client_id: 2, ..Limits::default() };
    assert_eq!(server(&connect(v5, 0x02, &[0, 3, b'a', b'b', b'c']), &small), Err(Error::ClientIdRejected));
    assert_eq!((Error::ClientIdRejected.reason_code(), Error::ClientIdRejected.v3_connack()), (0x85, Some(0x02)));
    for flags in [0x03, 0x0A, 0x22] {
        assert_eq!(server(&connect(v5, flags, &[0, 1, b'a']), &l), Err(Error::BadConnectFlags), "flags {flags:#04x}");
    }
    // 3.1.1 [MQTT-3.1.2-22]: a password needs a user name; 5.0 lifts that.
    assert_eq!(server(&connect(v3, 0x42, &[0, 1, b'a', 0, 0]), &l), Err(Error::BadConnectFlags));
    assert_eq!(server(&connect(v5, 0x42, &[0, 1, b'a', 0, 0]), &l), Ok(()));
    // Will QoS 3.
    assert_eq!(server(&connect(v3, 0x1E, &[0, 1, b'a', 0, 1, b't', 0, 0]), &l), Err(Error::BadQos));
    // A will topic is a topic name.
    assert_eq!(server(&connect(v3, 0x06, &[0, 1, b'a', 0, 1, b'#', 0, 0]), &l), Err(Error::TopicName(TopicError::WildcardInName)));
    assert_eq!(server(&connect(v3, 0x06, &[0, 1, b'a', 0, 1, b't', 0, 0]), &l), Ok(()));
}

#[test]
fn publish_and_string_errors() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    assert_eq!(as_server(v3, &[0x36, 5, 0, 3, b'a', b'/', b'b'], &l), Err(Error::BadQos));
    assert_eq!(as_server(v3, &[0x38, 5, 0, 3, b'a', b'/', b'b'], &l), Err(Error::DupOnQos0));
    assert_eq!(as_server(v3, &[0x32, 7, 0, 3, b'a', b'/', b'b', 0, 0], &l), Err(Error::ZeroPacketId));
    assert_eq!(as_server(v5, &[0x40, 2, 0, 0], &l), Err(Error::ZeroPacketId));
    assert_eq!(as_server(v3, &[0x30, 4, 0, 2, 0xC3, 0x28], &l), Err(Error::BadUtf8));
    assert_eq!(as_server(v3, &[0x30, 5, 0, 3, b'a', 0, b'b'], &l), Err(Error::NullChar));
    assert_eq!(as_server(v3, &[0x30, 5, 0, 3, b'a', b'/', b'+'], &l), Err(Error::TopicName(TopicError::WildcardInName)));
    assert_eq!(as_server(v3, &[0x30, 2, 0, 0], &l), Err(Error::TopicName(TopicError::Empty)));
    assert_eq!(as_server(v5, &[0x30, 3, 0, 0, 0], &l), Err(Error::TopicName(TopicError::Empty)), "empty without an alias");
    let deep = Limits { max_topic_levels: 2, ..Limits::default() };
    assert_eq!(as_server(v3, &[0x30, 7, 0, 5, b'a', b'/', b'b', b'/', b'c'], &deep), Err(Error::TopicName(TopicError::TooManyLevels)));
    assert_eq!(as_server(v5, &[0x30, 7, 0, 1, b'a', 3, 0x23, 0, 0], &l), Err(Error::TopicAliasInvalid));
    assert_eq!(Error::TopicName(TopicError::Empty).reason_code(), 0x90);
    assert_eq!(Error::TopicAliasInvalid.reason_code(), 0x94);
    assert_eq!((Error::BadUtf8.reason_code(), Error::BadUtf8.v3_connack()), (0x81, None));
    // A client may not send a Subscription Identifier; a server may.
    let sid = [0x30, 6, 0, 1, b'a', 2, 0x0B, 1];
    assert_eq!(as_server(v5, &sid, &l), Err(Error::PropertyNotAllowed(0x0B)));
    assert_eq!(as_client(v5, &sid, &l), Ok(()));
}

#[test]
fn subscribe_errors() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    assert_eq!(as_server(v3, &[0x82, 2, 0, 1], &l), Err(Error::NoFilters));
    assert_eq!(as_server(v5, &[0xA2, 3, 0, 1, 0], &l), Err(Error::NoFilters));
    assert_eq!(as_server(v3, &[0x82, 8, 0, 0, 0, 3, b'a', b'/', b'b', 0], &l), Err(Error::ZeroPacketId));
    assert_eq!(as_server(v3, &[0x82, 7, 0, 1, 0, 2, b'a', b'#', 0], &l), Err(Error::TopicFilter(TopicError::MisplacedWildcard)));
    assert_eq!(as_server(v3, &[0xA2, 6, 0, 1, 0, 2, b'a', b'+'], &l), Err(Error::TopicFilter(TopicError::MisplacedWildcard)));
    let share = cat(&[&[0x82, 13, 0, 1, 0, 8], b"$share/g", &[0]]);
    assert_eq!(as_server(v3, &share, &l), Err(Error::TopicFilter(TopicError::BadShare)));
    assert_eq!(as_server(v3, &[0x82, 8, 0, 1, 0, 3, b'a', b'/', b'b', 3], &l), Err(Error::BadQos));
    let two = [0x82, 10, 0, 1, 0, 1, b'a', 0, 0, 1, b'b', 0];
    assert_eq!(as_server(v3, &two, &Limits { max_filters: 1, ..Limits::default() }), Err(Error::TooManyFilters));
    assert_eq!(as_server(v3, &two, &l), Ok(()));
    assert_eq!(as_server(v5, &[0x82, 9, 0, 1, 0, 0, 3, b'a', b'/', b'b', 0x30], &l), Err(Error::BadRetainHandling));
    let no_local = cat(&[&[0x82, 16, 0, 1, 0, 0, 10], b"$share/g/a", &[0x04]]);
    assert_eq!(as_server(v5, &no_local, &l), Err(Error::NoLocalOnShared));
    assert_eq!(Error::TopicFilter(TopicError::BadShare).reason_code(), 0x8F);
    assert_eq!(Error::TooManyFilters.reason_code(), 0x97);
    assert_eq!(Error::NoFilters.reason_code(), 0x82);
}

#[test]
fn reason_code_and_property_errors() {
    let l = Limits::default();
    let (v3, v5) = (Version::V311, Version::V5);
    assert_eq!(as_client(v3, &[0x20, 2, 0, 6], &l), Err(Error::BadReasonCode(6)));
    assert_eq!(as_client(v5, &[0x20, 3, 0, 0x05, 0], &l), Err(Error::BadReasonCode(5)));
    assert_eq!(as_server(v5, &[0x40, 3, 0, 1, 0x05], &l), Err(Error::BadReasonCode(5)));
    assert_eq!(as_client(v3, &[0x90, 3, 0, 1, 0x03], &l), Err(Error::BadReasonCode(3)));
    assert_eq!(as_server(v5, &[0x40, 6, 0, 1, 0, 2, 0x04, 0], &l), Err(Error::UnknownProperty(0x04)));
    assert_eq!(as_server(v5, &[0x40, 9, 0, 1, 0, 5, 0x11, 0, 0, 0, 1], &l), Err(Error::PropertyNotAllowed(0x11)));
    assert_eq!(as_server(v5, &[0x40, 10, 0, 1, 0, 6, 0x1F, 0, 0, 0x1F, 0, 0], &l), Err(Error::DuplicateProperty(0x1F)));
    assert_eq!(as_server(v5, &[0x82, 11, 0, 1, 4, 0x0B, 1, 0x0B, 2, 0, 1, b'a', 0], &l), Err(Error::DuplicateProperty(0x0B)), "one id per SUBSCRIBE");
    assert_eq!(as_server(v5, &[0x82, 9, 0, 1, 2, 0x0B, 0, 0, 1, b'a', 0], &l), Err(Error::BadPropertyValue(0x0B)), "id 0");
    assert_eq!(as_server(v5, &[0x30, 6, 0, 1, b'a', 2, 0x01, 2], &l), Err(Error::BadPropertyValue(0x01)), "payload format 2");
    assert_eq!(as_server(v5, &[0x30, 8, 0, 1, b'a', 4, 0x08, 0, 1, b'#'], &l), Err(Error::BadPropertyValue(0x08)), "wildcard response topic");
    let two_users = [0x40, 16, 0, 1, 0, 12, 0x26, 0, 1, b'k', 0, 0, 0x26, 0, 1, b'k', 0, 0];
    assert_eq!(as_server(v5, &two_users, &l), Ok(()));
    assert_eq!(as_server(v5, &two_users, &Limits { max_properties: 1, ..l.clone() }), Err(Error::TooManyProperties));
    assert_eq!(as_server(v5, &two_users, &Limits { max_user_property_bytes: 1, ..l.clone() }), Err(Error::TooManyProperties));
    for (e, code) in [
        (Error::BadReasonCode(5), 0x82),
        (Error::UnknownProperty(4), 0x81),
        (Error::PropertyNotAllowed(0x11), 0x81),
        (Error::DuplicateProperty(0x1F), 0x82),
        (Error::BadPropertyValue(0x21), 0x82),
        (Error::TooManyProperties, 0x97),
    ] {
        assert_eq!((e.reason_code(), e.v3_connack()), (code, None), "{e}");
    }
}
