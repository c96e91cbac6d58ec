//! Decoding one packet: the fixed header (§2.1), then the variable header
//! and payload of each type (§3), checked as it goes. Nothing here keeps
//! state or buffers; [`super::Reader`] strings packets together.

use super::packet::*;
use super::properties::{Place, Properties};
use super::topic;
use super::{kind, Error, Limits, QoS, Role, Version};

/// Reads the data types of §1.5 from a packet's bytes, borrowing them.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf }
    }

    /// Nothing left.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.buf.len() {
            return Err(Error::Truncated);
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    /// Everything left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Byte (§1.5.1).
    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    /// Two Byte Integer, big-endian (§1.5.2).
    pub(crate) fn u16(&mut self) -> Result<u16, Error> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Four Byte Integer (§1.5.3).
    pub(crate) fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Variable Byte Integer (§1.5.5): at most 4 bytes, 7 bits each, least
    /// significant first. Non-minimal encodings are accepted.
    pub(crate) fn varint(&mut self) -> Result<u32, Error> {
        let mut value = 0u32;
        for i in 0..4 {
            let b = self.u8()?;
            value |= u32::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::MalformedVarint)
    }

    /// Binary Data: a two-byte length, then that many bytes (§1.5.6).
    pub(crate) fn bin(&mut self) -> Result<&'a [u8], Error> {
        let n = self.u16()? as usize;
        self.take(n)
    }

    /// UTF-8 Encoded String (§1.5.4): well-formed, without U+0000.
    pub(crate) fn str(&mut self) -> Result<&'a str, Error> {
        let s = std::str::from_utf8(self.bin()?).map_err(|_| Error::BadUtf8)?;
        // In UTF-8 a zero byte is only ever U+0000 itself.
        if s.as_bytes().contains(&0) {
            return Err(Error::NullChar);
        }
        Ok(s)
    }

    /// A non-zero Packet Identifier (§2.2.1).
    pub(crate) fn packet_id(&mut self) -> Result<u16, Error> {
        match self.u16()? {
            0 => Err(Error::ZeroPacketId),
            id => Ok(id),
        }
    }

    /// The packet must end here.
    pub(crate) fn end(&self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::TrailingBytes)
        }
    }
}

/// A decoded fixed header (§2.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedHeader {
    /// Packet type, see [`kind`].
    pub kind: u8,
    /// The low nibble of the first byte.
    pub flags: u8,
    /// Bytes of the fixed header itself (2 to 5).
    pub len: usize,
    /// Bytes after it (the remaining length).
    pub remaining: usize,
}

impl FixedHeader {
    /// The whole packet's size.
    pub(crate) fn total(&self) -> usize {
        self.len + self.remaining
    }
}

/// Decode the fixed header at the start of `buf`. `Ok(None)`: not all of
/// it is here yet. Checks the packet type against `version` (`None`
/// before CONNECT: any type that exists), the flags it requires (§2.1.3)
/// and the size against `max_packet_size`, so a bad or oversized packet
/// is refused before its body is buffered.
pub(crate) fn fixed_header(buf: &[u8], version: Option<Version>, max_packet_size: u32) -> Result<Option<FixedHeader>, Error> {
    let Some(&b0) = buf.first() else { return Ok(None) };
    let (kind, flags) = (b0 >> 4, b0 & 0x0F);
    match kind {
        0 => return Err(Error::UnknownPacketType),
        kind::AUTH if version == Some(Version::V311) => return Err(Error::UnknownPacketType),
        kind::PUBLISH if flags & 0b0110 == 0b0110 => return Err(Error::BadQos),
        kind::PUBLISH => {}
        kind::PUBREL | kind::SUBSCRIBE | kind::UNSUBSCRIBE if flags != 0b0010 => return Err(Error::ReservedFlags),
        kind::PUBREL | kind::SUBSCRIBE | kind::UNSUBSCRIBE => {}
        _ if flags != 0 => return Err(Error::ReservedFlags),
        _ => {}
    }
    let mut remaining = 0usize;
    for i in 0..4 {
        let Some(&b) = buf.get(1 + i) else { return Ok(None) };
        remaining |= usize::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            let h = FixedHeader { kind, flags, len: 2 + i, remaining };
            if h.total() > max_packet_size as usize {
                return Err(Error::PacketTooLarge);
            }
            return Ok(Some(h));
        }
    }
    Err(Error::MalformedVarint)
}

/// Whether `role` may receive packets of this type in `version`
/// (§2.1.2 table 2-1; DISCONNECT goes both ways only in 5.0).
pub(crate) fn may_receive(role: Role, kind: u8, version: Version) -> bool {
    match kind {
        kind::PUBLISH | kind::PUBACK | kind::PUBREC | kind::PUBREL | kind::PUBCOMP => true,
        kind::CONNECT | kind::SUBSCRIBE | kind::UNSUBSCRIBE | kind::PINGREQ => role == Role::Server,
        kind::CONNACK | kind::SUBACK | kind::UNSUBACK | kind::PINGRESP => role == Role::Client,
        kind::DISCONNECT => role == Role::Server || version == Version::V5,
        kind::AUTH => version == Version::V5,
        _ => false,
    }
}

/// The protocol level a CONNECT body announces, if its name is "MQTT" and
/// the level one this codec speaks (so a refusal later in the packet can
/// be answered in the client's version).
pub(crate) fn connect_version(body: &[u8]) -> Result<Version, Error> {
    let mut c = Cursor::new(body);
    if c.bin()? != b"MQTT" {
        return Err(Error::ProtocolName);
    }
    match c.u8()? {
        4 => Ok(Version::V311),
        5 => Ok(Version::V5),
        level => Err(Error::ProtocolVersion(level)),
    }
}

/// Decode the body of a packet whose fixed header is `h`, as `role` reads
/// it. `version` is the connection's (ignored for CONNECT, which carries
/// its own).
pub(crate) fn packet<'a>(h: &FixedHeader, body: &'a [u8], role: Role, version: Version, limits: &Limits) -> Result<Packet<'a>, Error> {
    let version = if h.kind == kind::CONNECT { connect_version(body)? } else { version };
    if !may_receive(role, h.kind, version) {
        return Err(Error::UnexpectedPacket);
    }
    let mut c = Cursor::new(body);
    let v5 = version == Version::V5;
    let props = |c: &mut Cursor<'a>, place| if v5 { Properties::decode(c, place, limits) } else { Ok(Properties::default()) };
    let p = match h.kind {
        kind::CONNECT => Packet::Connect(Box::new(connect(&mut c, version, limits)?)),
        kind::CONNACK => {
            let flags = c.u8()?;
            if flags & 0xFE != 0 {
                return Err(Error::ReservedFlags);
            }
            let code = c.u8()?;
            if !(if v5 { super::reason::CONNACK_V5.contains(&code) } else { code <= 5 }) {
                return Err(Error::BadReasonCode(code));
            }
            Packet::ConnAck(ConnAck { session_present: flags == 1, code, properties: props(&mut c, Place::CONNACK)? })
        }
        kind::PUBLISH => Packet::Publish(publish(&mut c, h.flags, role, version, limits)?),
        kind::PUBACK | kind::PUBREC | kind::PUBREL | kind::PUBCOMP => {
            let packet_id = c.packet_id()?;
            let mut ack = Ack { packet_id, ..Ack::default() };
            if v5 && !c.is_empty() {
                ack.reason = c.u8()?;
                let allowed = if h.kind <= kind::PUBREC { super::reason::PUBACK } else { super::reason::PUBREL };
                if !allowed.contains(&ack.reason) {
                    return Err(Error::BadReasonCode(ack.reason));
                }
                if !c.is_empty() {
                    ack.properties = props(&mut c, Place::ACK)?;
                }
            }
            match h.kind {
                kind::PUBACK => Packet::PubAck(ack),
                kind::PUBREC => Packet::PubRec(ack),
                kind::PUBREL => Packet::PubRel(ack),
                _ => Packet::PubComp(ack),
            }
        }
        kind::SUBSCRIBE => Packet::Subscribe(subscribe(&mut c, v5, limits)?),
        kind::SUBACK | kind::UNSUBACK => {
            let packet_id = c.packet_id()?;
            let sub = h.kind == kind::SUBACK;
            let properties = props(&mut c, if sub { Place::SUBACK } else { Place::UNSUBACK })?;
            let codes = c.rest().to_vec();
            let allowed: &[u8] = match (sub, v5) {
                (true, false) => super::reason::SUBACK_V311,
                (true, true) => super::reason::SUBACK,
                (false, _) => super::reason::UNSUBACK,
            };
            if let Some(&bad) = codes.iter().find(|c| !allowed.contains(c)) {
                return Err(Error::BadReasonCode(bad));
            }
            // 3.1.1's UNSUBACK has no codes; every other has one per filter.
            if codes.is_empty() == (sub || v5) {
                return Err(if codes.is_empty() { Error::NoFilters } else { Error::TrailingBytes });
            }
            let ack = SubAck { packet_id, properties, codes };
            if sub {
                Packet::SubAck(ack)
            } else {
                Packet::UnsubAck(ack)
            }
        }
        kind::UNSUBSCRIBE => {
            let packet_id = c.packet_id()?;
            let properties = props(&mut c, Place::UNSUBSCRIBE)?;
            let mut filters = Vec::new();
            while !c.is_empty() {
                if filters.len() == limits.max_filters {
                    return Err(Error::TooManyFilters);
                }
                let f = c.str()?;
                topic::validate_filter(f, limits).map_err(Error::TopicFilter)?;
                filters.push(f);
            }
            if filters.is_empty() {
                return Err(Error::NoFilters);
            }
            Packet::Unsubscribe(Unsubscribe { packet_id, properties, filters })
        }
        kind::PINGREQ => Packet::PingReq,
        kind::PINGRESP => Packet::PingResp,
        kind::DISCONNECT | kind::AUTH => {
            let (place, allowed) = if h.kind == kind::AUTH { (Place::AUTH, super::reason::AUTH) } else { (Place::DISCONNECT, super::reason::DISCONNECT) };
            let mut reason = 0;
            let mut properties = Properties::default();
            if !c.is_empty() {
                reason = c.u8()?;
                if !allowed.contains(&reason) {
                    return Err(Error::BadReasonCode(reason));
                }
                if !c.is_empty() {
                    properties = props(&mut c, place)?;
                }
            }
            if h.kind == kind::AUTH {
                Packet::Auth(Auth { reason, properties })
            } else {
                Packet::Disconnect(Disconnect { reason, properties })
            }
        }
        _ => return Err(Error::UnknownPacketType),
    };
    c.end()?;
    Ok(p)
}

/// CONNECT's variable header and payload (§3.1.2, §3.1.3).
fn connect<'a>(c: &mut Cursor<'a>, version: Version, limits: &Limits) -> Result<Connect<'a>, Error> {
    c.take(7)?; // protocol name and level, read by connect_version
    let flags = c.u8()?;
    let (has_will, will_retain) = (flags & 0x04 != 0, flags & 0x20 != 0);
    let will_qos = QoS::from_bits((flags >> 3) & 3).ok_or(Error::BadQos)?;
    let (has_password, has_username) = (flags & 0x40 != 0, flags & 0x80 != 0);
    if flags & 0x01 != 0 || (!has_will && (will_qos != QoS::AtMostOnce || will_retain)) {
        return Err(Error::BadConnectFlags);
    }
    let v5 = version == Version::V5;
    if !v5 && has_password && !has_username {
        return Err(Error::BadConnectFlags);
    }
    let clean_start = flags & 0x02 != 0;
    let keep_alive = c.u16()?;
    let properties = if v5 { Properties::decode(c, Place::CONNECT, limits)? } else { Properties::default() };
    let client_id = c.str()?;
    if client_id.len() > limits.max_client_id || (!v5 && client_id.is_empty() && !clean_start) {
        return Err(Error::ClientIdRejected);
    }
    let will = if has_will {
        let properties = if v5 { Properties::decode(c, Place::WILL, limits)? } else { Properties::default() };
        let topic = c.str()?;
        topic::validate_name(topic, limits).map_err(Error::TopicName)?;
        Some(Will { qos: will_qos, retain: will_retain, properties, topic, payload: c.bin()? })
    } else {
        None
    };
    let username = if has_username { Some(c.str()?) } else { None };
    let password = if has_password { Some(c.bin()?) } else { None };
    Ok(Connect { version, clean_start, keep_alive, properties, client_id, will, username, password })
}

/// PUBLISH (§3.3): flags from the fixed header, topic, packet id, properties, payload.
fn publish<'a>(c: &mut Cursor<'a>, flags: u8, role: Role, version: Version, limits: &Limits) -> Result<Publish<'a>, Error> {
    let qos = QoS::from_bits((flags >> 1) & 3).ok_or(Error::BadQos)?;
    let (dup, retain) = (flags & 0x08 != 0, flags & 0x01 != 0);
    if dup && qos == QoS::AtMostOnce {
        return Err(Error::DupOnQos0);
    }
    let topic = c.str()?;
    let packet_id = if qos == QoS::AtMostOnce { 0 } else { c.packet_id()? };
    let properties = if version == Version::V5 { Properties::decode(c, Place::PUBLISH, limits)? } else { Properties::default() };
    if role == Role::Server && !properties.subscription_ids.is_empty() {
        return Err(Error::PropertyNotAllowed(super::properties::id::SUBSCRIPTION_ID));
    }
    // An empty topic stands for the one a Topic Alias names (§3.3.2.1).
    if !(topic.is_empty() && properties.topic_alias.is_some()) {
        topic::validate_name(topic, limits).map_err(Error::TopicName)?;
    }
    Ok(Publish { dup, qos, retain, topic, packet_id, properties, payload: c.rest() })
}

/// SUBSCRIBE (§3.8): packet id, properties, then filter / options pairs.
fn subscribe<'a>(c: &mut Cursor<'a>, v5: bool, limits: &Limits) -> Result<Subscribe<'a>, Error> {
    let packet_id = c.packet_id()?;
    let properties = if v5 { Properties::decode(c, Place::SUBSCRIBE, limits)? } else { Properties::default() };
    let mut subscriptions = Vec::new();
    while !c.is_empty() {
        if subscriptions.len() == limits.max_filters {
            return Err(Error::TooManyFilters);
        }
        let filter = c.str()?;
        let o = c.u8()?;
        if o & if v5 { 0xC0 } else { 0xFC } != 0 {
            return Err(Error::ReservedFlags);
        }
        let s = Subscription {
            filter,
            qos: QoS::from_bits(o & 3).ok_or(Error::BadQos)?,
            no_local: o & 0x04 != 0,
            retain_as_published: o & 0x08 != 0,
            retain_handling: (o >> 4) & 3,
        };
        if s.retain_handling == 3 {
            return Err(Error::BadRetainHandling);
        }
        let shared = topic::validate_filter(filter, limits).map_err(Error::TopicFilter)?;
        if shared && s.no_local {
            return Err(Error::NoLocalOnShared);
        }
        subscriptions.push(s);
    }
    if subscriptions.is_empty() {
        return Err(Error::NoFilters);
    }
    Ok(Subscribe { packet_id, properties, subscriptions })
}
