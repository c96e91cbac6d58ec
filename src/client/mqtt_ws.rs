//! The client side of MQTT over WebSocket: `megaconn client --protocol
//! mqtt --url ws://HOST:PORT/mqtt` (or `wss://`), what mqtt.js and
//! browsers speak to a broker. The Upgrade offers the `mqtt` subprotocol
//! and the 101 must choose it (else the connection fails as
//! `mqtt_ws_subprotocol_refused`); then the CONNECT goes out, and from
//! there everything is `--protocol mqtt`'s own speaker ([`MqttSpeaker`],
//! unchanged) with its packets in masked binary messages, the ws client's
//! framing (`proto/ws/frame.rs`) around them: pings answered, a text
//! message refused (`mqtt_ws_text`), the server's close counted as
//! `ws_close_<code>`.
//!
//! Bounds: a message is at most [`mqtt::MAX_PACKET`]. A broker puts each
//! packet in whole messages (megaconn, mosquitto and EMQX do); since a
//! speaker keeps nothing per connection, a message that ends inside a
//! packet fails the connection (`mqtt_ws_packet_split`) rather than
//! being carried.

use super::config::Traffic;
use super::mqtt::{self, MqttSpeaker};
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};
use crate::proto::ws::frame::{self, Event, Opcode, Reader, Role};
use crate::proto::ws::handshake;

/// The subprotocol offered, the one MQTT 3.1.1 and 5.0 name (§6).
const SUBPROTOCOL: &str = "mqtt";

/// `--protocol mqtt` over a ws:// or wss:// `--url`.
pub(crate) struct MqttWsSpeaker {
    mqtt: MqttSpeaker,
    host_header: String,
    /// The Upgrade's header lines: `-H`, `--origin`, the subprotocol.
    header_lines: String,
    /// Handshake keys derive from this and the slot (`handshake::client_key`).
    seed: u64,
    rng: rand::rngs::SmallRng,
    target: String,
    /// The plan index of slot 0, learnt from the first `open`.
    first: u64,
    /// Where payloads are unmasked, and the MQTT speaker writes.
    unmasked: Vec<u8>,
    packets: Vec<u8>,
}

impl MqttWsSpeaker {
    pub(crate) fn new(traffic: &Traffic, host_header: &str, shard: u64) -> MqttWsSpeaker {
        use rand::SeedableRng;
        MqttWsSpeaker {
            mqtt: MqttSpeaker::new(traffic, shard),
            host_header: host_header.to_string(),
            header_lines: format!("{}Sec-WebSocket-Protocol: {SUBPROTOCOL}\r\n", traffic.header_lines()),
            seed: rand::random(),
            rng: rand::rngs::SmallRng::from_entropy(),
            target: traffic.ws_target.clone(),
            first: 0,
            unmasked: Vec::new(),
            packets: Vec::new(),
        }
    }

    /// What the MQTT speaker wrote into `self.packets`, as one masked
    /// binary message into `out`.
    fn wrap(&mut self, out: &mut Vec<u8>) {
        if !self.packets.is_empty() {
            frame::encode(out, true, Opcode::Binary, &self.packets, Some(rand::Rng::gen(&mut self.rng)));
            self.packets.clear();
        }
    }
}

/// Whether `buf` may be (the start of) the 101: while a connection waits
/// for its CONNACK, only the answer to its Upgrade begins with `H` (no
/// frame a server may send does: that byte would be RSV1 on a close).
fn http_answer(buf: &[u8]) -> bool {
    let n = buf.len().min(5);
    buf[..n] == b"HTTP/"[..n]
}

impl Speaker for MqttWsSpeaker {
    /// The 101, then the CONNACK, before the connection counts.
    fn upgrades(&self) -> bool {
        true
    }

    fn open(&mut self, out: &mut Vec<u8>, slot: usize, conn: u64, _: &super::pushes::PushSeen) {
        self.first = conn - slot as u64;
        let key = handshake::client_key(self.seed, slot as u64);
        handshake::write_request(out, &self.host_header, &self.target, &key, &self.header_lines);
    }

    fn beats(&self) -> bool {
        true
    }

    fn beat(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) {
        let mut packets = std::mem::take(&mut self.packets);
        self.mqtt.beat(&mut packets, due, inflight);
        self.packets = packets;
        self.wrap(out);
    }

    fn request(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) -> bool {
        let mut packets = std::mem::take(&mut self.packets);
        let r = self.mqtt.request(&mut packets, due, inflight);
        self.packets = packets;
        self.wrap(out);
        r
    }

    fn acknowledges_requests(&self) -> bool {
        self.mqtt.acknowledges_requests()
    }

    /// The 101 (then the CONNECT goes out), then binary messages, each
    /// heard by the MQTT speaker; pings answered, the close counted.
    fn hear(&mut self, buf: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let mut pos = 0;
        if ear.upgrading && http_answer(buf) {
            let key = handshake::client_key(self.seed, ear.slot as u64);
            match handshake::parse_response(buf, &key, &[SUBPROTOCOL.to_string()]) {
                Ok(None) => return Ok(0),
                Ok(Some(used)) => pos = used,
                Err("ws_handshake_no_subprotocol" | "ws_handshake_unrequested_subprotocol") => return Err("mqtt_ws_subprotocol_refused".into()),
                Err(e) => return Err(e.into()),
            }
            let mut packets = std::mem::take(&mut self.packets);
            self.mqtt.open(&mut packets, ear.slot, self.first + ear.slot as u64, &None);
            self.packets = packets;
            self.wrap(ear.answer);
        }
        let Ear { slot, upgrading, inflight, ws_frag, answer, goaway } = ear;
        let (mqtt, rng, packets) = (&mut self.mqtt, &mut self.rng, &mut self.packets);
        let mut none = None;
        let mut closed = None;
        let mut reader = Reader { role: Role::Client, max: mqtt::MAX_PACKET as usize, tmp: &mut self.unmasked, frag: ws_frag, inflate: None };
        let used = reader.consume(&buf[pos..], |ev| -> Result<(), Stop> {
            match ev {
                Event::Message { text: true, .. } => return Err("mqtt_ws_text".into()),
                Event::Message { data, .. } => {
                    let mut inner = Ear { slot: *slot, upgrading: *upgrading, inflight, ws_frag: &mut none, answer: &mut *packets, goaway: None };
                    // Its goaway is kept before its end (a goaway's) is passed on.
                    let heard = mqtt.hear(data, &mut inner, replies);
                    *goaway = inner.goaway.or(*goaway);
                    let used = heard?;
                    *upgrading = inner.upgrading;
                    if used < data.len() {
                        return Err("mqtt_ws_packet_split".into());
                    }
                    if !packets.is_empty() {
                        frame::encode(answer, true, Opcode::Binary, packets, Some(rand::Rng::gen(&mut *rng)));
                        packets.clear();
                    }
                }
                Event::Ping(p) => frame::encode(answer, true, Opcode::Pong, p, Some(rand::Rng::gen(&mut *rng))),
                Event::Pong(_) => {}
                Event::Close(code, _) => {
                    match code {
                        Some(c) => frame::encode_close(answer, c, Some(rand::Rng::gen(&mut *rng))),
                        None => frame::encode(answer, true, Opcode::Close, &[], Some(rand::Rng::gen(&mut *rng))),
                    }
                    closed = Some(code.unwrap_or(0));
                    return Err(format!("ws_close_{}", code.unwrap_or(0)).into());
                }
            }
            Ok(())
        });
        match used {
            Ok(n) => Ok(pos + n),
            Err(stop) => {
                if closed.is_none() {
                    frame::encode_close(answer, frame::close_code(&stop.0), Some(rand::Rng::gen(&mut self.rng)));
                }
                Err(stop)
            }
        }
    }
}

impl From<frame::Violation> for Stop {
    fn from(v: frame::Violation) -> Stop {
        Stop::from(v.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::speak::hearing::Hearing;
    use crate::net::ReadEnd;
    use crate::proto::mqtt::{encode, ConnAck, Packet, Version};
    use crate::proto::Protocol;

    fn speaker() -> MqttWsSpeaker {
        let traffic = Traffic { protocol: Protocol::Mqtt, mqtt_ws: true, ws_target: "/mqtt".into(), ..Default::default() };
        MqttWsSpeaker::new(&traffic, "h", 0)
    }

    fn answer_101(s: &MqttWsSpeaker, protocol: Option<&str>) -> Vec<u8> {
        let accept = handshake::accept_key(handshake::client_key(s.seed, 0).as_bytes());
        let mut out = Vec::new();
        handshake::write_accept(&mut out, &accept, protocol, None);
        out
    }

    /// The Upgrade offers `mqtt`; its 101 sends the CONNECT in a masked
    /// binary message; a CONNACK in a binary message establishes it.
    #[test]
    fn the_connect_follows_the_101_and_the_connack_establishes() {
        let mut s = speaker();
        let mut out = Vec::new();
        s.open(&mut out, 0, 0, &None);
        let head = String::from_utf8(out).unwrap();
        assert!(head.starts_with("GET /mqtt HTTP/1.1\r\n") && head.contains("\r\nSec-WebSocket-Protocol: mqtt\r\n"), "{head}");
        let mut h = Hearing::new(true);
        let ok = answer_101(&s, Some("mqtt"));
        assert_eq!(h.read(&mut s, &ok), ReadEnd::Open);
        assert_eq!(h.answer.first(), Some(&0x82), "the CONNECT in a binary message");
        assert!(h.upgrading, "not before the CONNACK");
        let mut connack = Vec::new();
        encode::packet(&Packet::ConnAck(ConnAck { session_present: false, code: 0, properties: Default::default() }), Version::V311, &mut connack).unwrap();
        let mut wire = Vec::new();
        frame::encode(&mut wire, true, Opcode::Binary, &connack, None);
        assert_eq!(h.read(&mut s, &wire), ReadEnd::Open);
        assert!(!h.upgrading);
    }

    /// A 101 without the subprotocol, a text message, a packet cut by a
    /// message's end: each ends the connection under its own name.
    #[test]
    fn a_server_without_mqtt_text_and_split_packets_are_refused() {
        let mut s = speaker();
        s.open(&mut Vec::new(), 0, 0, &None);
        let named = |n: &str| ReadEnd::Error(n.into());
        let without = answer_101(&s, None);
        assert_eq!(Hearing::new(true).read(&mut s, &without), named("mqtt_ws_subprotocol_refused"));
        let mut text = Vec::new();
        frame::encode(&mut text, true, Opcode::Text, b"{}", None);
        assert_eq!(Hearing::new(false).read(&mut s, &text), named("mqtt_ws_text"));
        let mut cut = Vec::new();
        frame::encode(&mut cut, true, Opcode::Binary, &[0xD0], None);
        assert_eq!(Hearing::new(false).read(&mut s, &cut), named("mqtt_ws_packet_split"));
    }

    /// A draining megaconn's DISCONNECT 0x8B in a binary message is a
    /// goaway with the hint's delay, as over TCP.
    #[test]
    fn a_disconnect_0x8b_in_a_message_is_a_goaway() {
        let mut traffic = Traffic { protocol: Protocol::Mqtt, mqtt_ws: true, ws_target: "/mqtt".into(), ..Default::default() };
        traffic.mqtt.v5 = true;
        let mut s = MqttWsSpeaker::new(&traffic, "h", 0);
        s.open(&mut Vec::new(), 0, 0, &None);
        let mut disconnect = Vec::new();
        crate::proto::goaway::write_mqtt(&mut disconnect, Version::V5, 250, u32::MAX);
        let mut wire = Vec::new();
        frame::encode(&mut wire, true, Opcode::Binary, &disconnect, None);
        let mut h = Hearing::new(false);
        assert_eq!(h.read(&mut s, &wire), ReadEnd::Error(crate::client::speak::GOAWAY.into()));
        assert_eq!(h.goaway, Some(250));
    }
}
