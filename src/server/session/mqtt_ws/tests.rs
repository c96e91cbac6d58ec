//! MQTT over WebSocket without a socket: an Upgrade and masked frames in,
//! the 101 and the binary messages out read back as a client would.

use super::harness::{port, upgrade};
use super::*;
use crate::proto::mqtt::{encode, Connect, Packet, Properties, Publish, QoS, Subscribe, Subscription, Version};

fn packet(p: &Packet<'_>, v: Version) -> Vec<u8> {
    let mut out = Vec::new();
    encode::packet(p, v, &mut out).unwrap();
    out
}

/// A CONNECT with no client id (3.1.1 clean session: answered at once).
fn connect(v: Version) -> Vec<u8> {
    let c =
        Connect { version: v, clean_start: true, keep_alive: 30, properties: Properties::default(), client_id: "", will: None, username: None, password: None };
    packet(&Packet::Connect(Box::new(c)), v)
}

/// A client's masked frame.
fn client_frame(fin: bool, opcode: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(&mut out, fin, opcode, payload, Some([1, 2, 3, 4]));
    out
}

/// What the server wrote after its 101, read as a client reads it: the
/// binary messages' bytes joined, and the close code if one came.
fn heard(out: &[u8]) -> (Vec<u8>, Option<u16>) {
    let (mut tmp, mut frag) = (Vec::new(), None);
    let (mut bytes, mut close) = (Vec::new(), None);
    Reader { role: Role::Client, max: 1 << 20, tmp: &mut tmp, frag: &mut frag, inflate: None }
        .consume(out, |ev| {
            match ev {
                Event::Message { text: false, data } => bytes.extend_from_slice(data),
                Event::Close(code, _) => close = code,
                other => panic!("unexpected {other:?}"),
            }
            Ok::<(), &str>(())
        })
        .unwrap();
    (bytes, close)
}

/// After the 101's head.
fn after_head(out: &[u8]) -> &[u8] {
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    &out[end..]
}

/// The 101 names `mqtt` (not `mqttv3.1`, offered too); a CONNECT cut across
/// two frames and sent with the Upgrade is answered CONNACK, and one
/// message holding PINGREQ and SUBSCRIBE gets PINGRESP and SUBACK.
#[test]
fn a_connect_across_frames_and_two_packets_in_one_are_answered_in_binary_messages() {
    let mut p = port();
    let c = connect(Version::V311);
    let mut buf = upgrade("mqttv3.1, mqtt");
    buf.extend(client_frame(true, Opcode::Binary, &c[..5]));
    buf.extend(client_frame(true, Opcode::Binary, &c[5..]));
    let (r, out) = p.feed(&buf);
    assert_eq!(r, Ok(buf.len()));
    let head = String::from_utf8_lossy(&out[..out.len() - after_head(&out).len()]).to_string();
    assert!(head.starts_with("HTTP/1.1 101") && head.contains("Sec-WebSocket-Protocol: mqtt\r\n"), "{head}");
    assert_eq!(heard(after_head(&out)), (vec![0x20, 2, 0, 0], None));
    assert!(p.mqtt_state.is_some() && !mqtt::connecting(p.mqtt_state.as_ref()));

    let sub = Subscribe {
        packet_id: 7,
        properties: Properties::default(),
        subscriptions: vec![Subscription { filter: "a/+", qos: QoS::AtLeastOnce, ..Default::default() }],
    };
    let mut two = vec![0xC0, 0];
    two.extend(packet(&Packet::Subscribe(sub), Version::V311));
    let (r, out) = p.feed(&client_frame(true, Opcode::Binary, &two));
    assert!(r.is_ok());
    assert_eq!(heard(&out), (vec![0xD0, 0, 0x90, 3, 0, 7, 1], None));
    assert!(p.read.topics.has(&p.read.subs, "a/+"));
}

/// A PUBLISH cut by a message's end waits in the carry (what
/// `--stall-timeout` sees) and goes into the topic space once whole,
/// also when its rest comes in fragments.
#[test]
fn a_packet_spanning_messages_and_fragments_is_carried_until_whole() {
    let mut p = port();
    let mut buf = upgrade("mqtt");
    buf.extend(client_frame(true, Opcode::Binary, &connect(Version::V5)));
    assert!(p.feed(&buf).0.is_ok());
    let publish = Publish { dup: false, qos: QoS::AtMostOnce, retain: false, topic: "a/b", packet_id: 0, properties: Properties::default(), payload: b"hello" };
    let bytes = packet(&Packet::Publish(publish), Version::V5);
    let (r, out) = p.feed(&client_frame(true, Opcode::Binary, &bytes[..4]));
    assert!(r.is_ok() && out.is_empty());
    assert_eq!(p.mqtt_state.as_ref().and_then(|m| m.extra.as_ref()).map(|x| x.carry.held()), Some(4));
    assert!(p.published.messages.is_empty());
    let mut rest = client_frame(false, Opcode::Binary, &bytes[4..6]);
    rest.extend(client_frame(true, Opcode::Continuation, &bytes[6..]));
    assert!(p.feed(&rest).0.is_ok());
    assert_eq!(p.published.messages.len(), 1);
    assert_eq!(&*p.published.messages[0].topic, "a/b");
    assert!(p.mqtt_state.as_ref().is_some_and(|m| m.extra.is_none()), "nothing carried, nothing boxed");
}

/// A text message is refused with close 1003; a packet past the cap is
/// refused from its fixed header, before the rest of it comes: v5
/// DISCONNECT 0x95 in a binary message, then close 1009.
#[test]
fn text_and_a_packet_too_large_are_refused_with_their_close_codes() {
    let mut p = port();
    let mut buf = upgrade("mqtt");
    buf.extend(client_frame(true, Opcode::Binary, &connect(Version::V5)));
    assert!(p.feed(&buf).0.is_ok());
    let (r, out) = p.feed(&client_frame(true, Opcode::Text, b"{}"));
    assert_eq!(r, Err("mqtt_ws_text"));
    assert_eq!(heard(&out), (Vec::new(), Some(1003)));

    let mut p = port();
    let mut buf = upgrade("mqtt");
    buf.extend(client_frame(true, Opcode::Binary, &connect(Version::V5)));
    assert!(p.feed(&buf).0.is_ok());
    // PUBLISH announcing 2 MiB, its first bytes in a frame of their own.
    let (r, out) = p.feed(&client_frame(false, Opcode::Binary, &[0x30, 0x80, 0x80, 0x80, 0x01, 0, 3]));
    assert_eq!(r, Ok(7 + 6), "a fragment waits for the message's end");
    assert!(out.is_empty());
    let (r, out) = p.feed(&client_frame(true, Opcode::Continuation, b"a/b"));
    assert_eq!(r, Err("mqtt_packet_too_large"));
    assert_eq!(heard(&out), (vec![0xE0, 1, 0x95], Some(1009)));
}

/// A client that did not offer `mqtt` and sends a CONNECT is closed 1002,
/// not echoed; other binary messages still are.
#[test]
fn a_connect_without_the_mqtt_offer_is_refused() {
    let mut p = port();
    let (r, _) = p.feed(&upgrade("megaconn"));
    assert!(r.is_ok() && p.mqtt_state.is_none());
    let (r, out) = p.feed(&client_frame(true, Opcode::Binary, b"\x10\x05abcde"));
    assert!(r.is_ok());
    assert_eq!(heard(&out).0, b"\x10\x05abcde");
    let (r, out) = p.feed(&client_frame(true, Opcode::Binary, &connect(Version::V311)));
    assert_eq!(r, Err("ws_mqtt_not_offered"));
    assert_eq!(heard(&out), (Vec::new(), Some(1002)));
}

/// The CONNECT signature: both protocol names, any remaining-length form,
/// and nothing else.
#[test]
fn a_connect_is_recognised_by_its_protocol_name() {
    assert!(looks_like_connect(&connect(Version::V311)));
    assert!(looks_like_connect(&connect(Version::V5)));
    assert!(looks_like_connect(b"\x10\xff\x01\x00\x06MQIsdp\x03"));
    assert!(!looks_like_connect(b"\x10\x0c\x00\x04MQTX"));
    assert!(!looks_like_connect(b"\x20\x02\x00\x00"));
    assert!(!looks_like_connect(b"\x10\xff\xff\xff\xff\x00\x04MQTT"));
    assert!(!looks_like_connect(b"\x10"));
    assert!(!looks_like_connect(b""));
}
