//! Encoding packets into a caller's `Vec<u8>` (§2, §3).
//!
//! Lengths are written by encoding the content first and then moving it
//! over by the size of its Variable Byte Integer length (at most 3 bytes
//! of memmove per level), which keeps one code path per packet instead of
//! a size computation that must agree with it. A failed encode leaves
//! `out` as it was.
//!
//! Fields 3.1.1 does not have (properties, reason codes of
//! acknowledgements and DISCONNECT) are left out when encoding for 3.1.1.
//!
//! For fan-out, [`PublishPrefix`] holds a PUBLISH up to its payload,
//! encoded once: the server sends `prefix.bytes()` and then the shared
//! payload (writev, or two slices into one send buffer), and per
//! subscriber only patches the flags (QoS, DUP, RETAIN) and packet id in
//! place with [`PublishPrefix::patch`]. QoS 0 and QoS 1/2 differ in
//! length (a packet id or not), so a server keeps at most two prefixes per
//! message and version; a v5 subscriber whose PUBLISH needs its own
//! properties (subscription identifiers, a topic alias) gets its own
//! prefix, still before the shared payload.

use super::packet::*;
use super::{kind, EncodeError, QoS, Version, MAX_VARINT};

/// A Variable Byte Integer (§1.5.5) in a small array: the bytes and how
/// many are used.
fn varint_bytes(mut v: u32) -> Result<([u8; 4], usize), EncodeError> {
    if v > MAX_VARINT {
        return Err(EncodeError::PacketTooLarge);
    }
    let mut b = [0u8; 4];
    for (i, slot) in b.iter_mut().enumerate() {
        *slot = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            return Ok((b, i + 1));
        }
        *slot |= 0x80;
    }
    unreachable!("MAX_VARINT fits in 4 bytes")
}

/// Append a Variable Byte Integer (§1.5.5).
pub(crate) fn put_varint(out: &mut Vec<u8>, v: u32) -> Result<(), EncodeError> {
    let (b, n) = varint_bytes(v)?;
    out.extend_from_slice(&b[..n]);
    Ok(())
}

/// Append Binary Data: a two-byte length and the bytes (§1.5.6).
pub(crate) fn put_bin(out: &mut Vec<u8>, b: &[u8]) -> Result<(), EncodeError> {
    let n = u16::try_from(b.len()).map_err(|_| EncodeError::FieldTooLong)?;
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(b);
    Ok(())
}

/// Append a UTF-8 Encoded String (§1.5.4).
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), EncodeError> {
    put_bin(out, s.as_bytes())
}

/// Append what `body` writes, preceded by its length as a Variable Byte
/// Integer. On error `out` is truncated back.
pub(crate) fn with_length(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>) -> Result<(), EncodeError> {
    let start = out.len();
    // Room for the longest length; moved back once the length is known.
    out.extend_from_slice(&[0; 4]);
    let r = body(out).and_then(|()| {
        let n = u32::try_from(out.len() - start - 4).map_err(|_| EncodeError::PacketTooLarge)?;
        let (len, used) = varint_bytes(n)?;
        out.copy_within(start + 4.., start + used);
        out.truncate(out.len() - (4 - used));
        out[start..start + used].copy_from_slice(&len[..used]);
        Ok(())
    });
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// Append one whole packet as `version` speaks it (a CONNECT in its own
/// version).
pub(crate) fn packet(p: &Packet<'_>, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let version = if let Packet::Connect(c) = p { c.version } else { version };
    let v5 = version == Version::V5;
    let start = out.len();
    let flags = match p {
        Packet::Publish(p) => publish_flags(p.dup, p.qos, p.retain),
        Packet::PubRel(_) | Packet::Subscribe(_) | Packet::Unsubscribe(_) => 0b0010,
        Packet::Auth(_) if !v5 => return Err(EncodeError::WrongForm),
        _ => 0,
    };
    out.push(p.kind() << 4 | flags);
    let r = with_length(out, |out| {
        let props = |out: &mut Vec<u8>, pr: &super::Properties<'_>| if v5 { pr.encode(out) } else { Ok(()) };
        match p {
            Packet::Connect(c) => connect(c, out)?,
            Packet::ConnAck(c) => {
                out.extend_from_slice(&[c.session_present as u8, c.code]);
                props(out, &c.properties)?;
            }
            Packet::Publish(p) => publish_head(p, v5, out)?,
            Packet::PubAck(a) | Packet::PubRec(a) | Packet::PubRel(a) | Packet::PubComp(a) => {
                out.extend_from_slice(&a.packet_id.to_be_bytes());
                // §3.4.2.1: reason and properties may be left out when
                // they are success and none.
                let no_props = a.properties == super::Properties::default();
                if v5 && (a.reason != 0 || !no_props) {
                    out.push(a.reason);
                    if !no_props {
                        a.properties.encode(out)?;
                    }
                }
            }
            Packet::Subscribe(s) => {
                out.extend_from_slice(&s.packet_id.to_be_bytes());
                props(out, &s.properties)?;
                for sub in &s.subscriptions {
                    put_str(out, sub.filter)?;
                    let mut o = sub.qos as u8;
                    if v5 {
                        o |= (sub.no_local as u8) << 2 | (sub.retain_as_published as u8) << 3 | (sub.retain_handling & 3) << 4;
                    }
                    out.push(o);
                }
            }
            Packet::SubAck(s) | Packet::UnsubAck(s) => {
                out.extend_from_slice(&s.packet_id.to_be_bytes());
                props(out, &s.properties)?;
                if v5 || p.kind() == kind::SUBACK {
                    out.extend_from_slice(&s.codes);
                }
            }
            Packet::Unsubscribe(u) => {
                out.extend_from_slice(&u.packet_id.to_be_bytes());
                props(out, &u.properties)?;
                for f in &u.filters {
                    put_str(out, f)?;
                }
            }
            Packet::PingReq | Packet::PingResp => {}
            Packet::Disconnect(Disconnect { reason, properties }) | Packet::Auth(Auth { reason, properties }) => {
                // §3.14.2.1, §3.15.2.1: both may be left out when success and none.
                let no_props = *properties == super::Properties::default();
                if v5 && (*reason != 0 || !no_props) {
                    out.push(*reason);
                    if !no_props {
                        properties.encode(out)?;
                    }
                }
            }
        }
        if let Packet::Publish(p) = p {
            out.extend_from_slice(p.payload);
        }
        Ok(())
    });
    if r.is_err() {
        out.truncate(start);
    }
    r
}

fn publish_flags(dup: bool, qos: QoS, retain: bool) -> u8 {
    (dup as u8) << 3 | (qos as u8) << 1 | retain as u8
}

/// Topic, packet id (QoS 1 and 2) and properties (§3.3.2).
fn publish_head(p: &Publish<'_>, v5: bool, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    put_str(out, p.topic)?;
    if p.qos != QoS::AtMostOnce {
        debug_assert!(p.packet_id != 0, "QoS 1 and 2 need a packet id");
        out.extend_from_slice(&p.packet_id.to_be_bytes());
    }
    if v5 {
        p.properties.encode(out)?;
    }
    Ok(())
}

/// CONNECT's variable header and payload (§3.1.2, §3.1.3).
fn connect(c: &Connect<'_>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let v5 = c.version == Version::V5;
    put_str(out, "MQTT")?;
    out.push(c.version as u8);
    let mut flags = (c.clean_start as u8) << 1;
    if let Some(w) = &c.will {
        flags |= 0x04 | (w.qos as u8) << 3 | (w.retain as u8) << 5;
    }
    flags |= (c.password.is_some() as u8) << 6 | (c.username.is_some() as u8) << 7;
    out.push(flags);
    out.extend_from_slice(&c.keep_alive.to_be_bytes());
    if v5 {
        c.properties.encode(out)?;
    }
    put_str(out, c.client_id)?;
    if let Some(w) = &c.will {
        if v5 {
            w.properties.encode(out)?;
        }
        put_str(out, w.topic)?;
        put_bin(out, w.payload)?;
    }
    if let Some(u) = c.username {
        put_str(out, u)?;
    }
    if let Some(pw) = c.password {
        put_bin(out, pw)?;
    }
    Ok(())
}

/// A PUBLISH encoded up to its payload, once, for many subscribers; see
/// the module doc. Its remaining length counts the payload it was made
/// for, which is sent right after [`PublishPrefix::bytes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublishPrefix {
    bytes: Vec<u8>,
    /// Where the packet id sits (QoS 1 and 2 forms), else `None`.
    packet_id_at: Option<usize>,
}

impl PublishPrefix {
    /// Encode `p` without its payload (but counting `p.payload.len()` in
    /// the remaining length). `p.qos` picks the form: QoS 0, or QoS 1/2
    /// with room for a packet id.
    pub(crate) fn new(p: &Publish<'_>, version: Version) -> Result<PublishPrefix, EncodeError> {
        let mut head = Vec::new();
        let q = Publish { packet_id: p.packet_id.max(1), ..p.clone() };
        publish_head(&q, version == Version::V5, &mut head)?;
        let remaining = u32::try_from(head.len() + p.payload.len()).map_err(|_| EncodeError::PacketTooLarge)?;
        let mut bytes = vec![kind::PUBLISH << 4 | publish_flags(p.dup, p.qos, p.retain)];
        put_varint(&mut bytes, remaining)?;
        let topic_end = bytes.len() + 2 + p.topic.len();
        bytes.extend_from_slice(&head);
        let packet_id_at = (p.qos != QoS::AtMostOnce).then_some(topic_end);
        let mut prefix = PublishPrefix { bytes, packet_id_at };
        prefix.patch(p.dup, p.qos, p.retain, p.packet_id)?;
        Ok(prefix)
    }

    /// Set the flags and packet id for one subscriber. The QoS must stay in
    /// the form the prefix was made for (0, or 1/2), else `WrongForm`.
    pub(crate) fn patch(&mut self, dup: bool, qos: QoS, retain: bool, packet_id: u16) -> Result<(), EncodeError> {
        match (self.packet_id_at, qos) {
            (None, QoS::AtMostOnce) => {}
            (Some(at), QoS::AtLeastOnce | QoS::ExactlyOnce) => self.bytes[at..at + 2].copy_from_slice(&packet_id.to_be_bytes()),
            _ => return Err(EncodeError::WrongForm),
        }
        self.bytes[0] = kind::PUBLISH << 4 | publish_flags(dup && qos != QoS::AtMostOnce, qos, retain);
        Ok(())
    }

    /// Where the packet id sits in [`PublishPrefix::bytes`] (QoS 1 and 2
    /// forms): a copy of the whole packet is patched there per subscriber.
    pub(crate) fn packet_id_at(&self) -> Option<usize> {
        self.packet_id_at
    }

    /// The packet up to the payload.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The topic of a v5 PUBLISH this server encoded (whole, without a Topic
/// Alias), and the packet rewritten to carry Topic Alias `alias`
/// (§3.3.2.3.4): with its topic when `with_topic` (the alias now names
/// it for this connection), else with an empty topic (the client knows
/// the alias). The alias goes last in the property block, so what reads
/// the expiry at its head (`forward::expiry_at`) still finds it. `None`:
/// not such a packet, or the rewrite is longer than `max` bytes.
pub(crate) fn with_topic_alias(packet: &[u8], alias: u16, with_topic: bool, max: u32) -> Option<Vec<u8>> {
    use super::decode::{fixed_header, Cursor};
    let h = fixed_header(packet, Some(Version::V5), u32::MAX).ok()??;
    if h.kind != kind::PUBLISH || alias == 0 {
        return None;
    }
    let mut c = Cursor::new(packet.get(h.len..h.total())?);
    let topic = c.str().ok()?;
    let packet_id = match (h.flags >> 1) & 3 {
        0 => None,
        _ => Some(c.take(2).ok()?),
    };
    let props_len = c.varint().ok()? as usize;
    let props = c.take(props_len).ok()?;
    let payload = c.rest();
    let mut out = Vec::with_capacity(packet.len() + 4);
    out.push(packet[0]);
    with_length(&mut out, |out| {
        put_str(out, if with_topic { topic } else { "" })?;
        out.extend_from_slice(packet_id.unwrap_or_default());
        put_varint(out, u32::try_from(props_len + 3).map_err(|_| EncodeError::PacketTooLarge)?)?;
        out.extend_from_slice(props);
        out.push(super::properties::id::TOPIC_ALIAS);
        out.extend_from_slice(&alias.to_be_bytes());
        out.extend_from_slice(payload);
        Ok(())
    })
    .ok()?;
    (out.len() <= max as usize).then_some(out)
}

/// The topic of a PUBLISH this server encoded. `None`: not such a packet.
pub(crate) fn publish_topic(packet: &[u8]) -> Option<&str> {
    let h = super::decode::fixed_header(packet, None, u32::MAX).ok()??;
    (h.kind == kind::PUBLISH).then_some(())?;
    super::decode::Cursor::new(packet.get(h.len..h.total())?).str().ok()
}

/// A v5 DISCONNECT with `reason` and, when it fits the peer's Maximum
/// Packet Size `max` (§3.14.2.2.3), the Reason String `why` (which some
/// clients need to read the code at all: paho-mqtt 2.1 reads a
/// DISCONNECT's reason only past 2 bytes of it); without it when it
/// would not fit; nothing when even that would not.
pub(crate) fn disconnect_within(out: &mut Vec<u8>, reason: u8, why: &str, max: u32) {
    for reason_string in [Some(why), None] {
        let start = out.len();
        let properties = super::Properties { reason_string, ..super::Properties::default() };
        // A short string in a small packet: it encodes.
        let _ = packet(&Packet::Disconnect(Disconnect { reason, properties }), Version::V5, out);
        if out.len() - start <= max as usize {
            return;
        }
        out.truncate(start);
    }
}
