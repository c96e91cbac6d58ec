//! MQTT 5.0 properties (§2.2.2): a length-prefixed block of identifier /
//! value pairs in most packets' variable header and in the will.
//!
//! Every property of §2.2.2.2 is a field of [`Properties`]. Decoding checks
//! that each is allowed where it appears (table 2-4, [`Place`]), refuses a
//! second copy of any but User Property and (in PUBLISH) Subscription
//! Identifier, refuses the values the standard calls a protocol error, and
//! bounds the block by `Limits::max_properties` and
//! `Limits::max_user_property_bytes`. 3.1.1 has no properties: its
//! packets decode with an empty [`Properties`] and encode without one.

use super::decode::Cursor;
use super::encode::{put_bin, put_str, put_varint, with_length};
use super::{EncodeError, Error, Limits, QoS};

/// Where a property block sits; table 2-4 says which properties each
/// place may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place(u16);

impl Place {
    /// CONNECT's variable header.
    pub(crate) const CONNECT: Place = Place(1 << 0);
    /// CONNACK.
    pub(crate) const CONNACK: Place = Place(1 << 1);
    /// PUBLISH.
    pub(crate) const PUBLISH: Place = Place(1 << 2);
    /// The will properties in CONNECT's payload (§3.1.3.2).
    pub(crate) const WILL: Place = Place(1 << 3);
    /// PUBACK, PUBREC, PUBREL and PUBCOMP (the same two properties).
    pub(crate) const ACK: Place = Place(1 << 4);
    /// SUBSCRIBE.
    pub(crate) const SUBSCRIBE: Place = Place(1 << 5);
    /// SUBACK.
    pub(crate) const SUBACK: Place = Place(1 << 6);
    /// UNSUBSCRIBE.
    pub(crate) const UNSUBSCRIBE: Place = Place(1 << 7);
    /// UNSUBACK.
    pub(crate) const UNSUBACK: Place = Place(1 << 8);
    /// DISCONNECT.
    pub(crate) const DISCONNECT: Place = Place(1 << 9);
    /// AUTH.
    pub(crate) const AUTH: Place = Place(1 << 10);

    /// Whether table 2-4 lets `property` appear here.
    pub(crate) fn allows(self, property: u8) -> bool {
        allowed_in(property).is_some_and(|places| places & self.0 != 0)
    }
}

/// Property identifiers (§2.2.2.2 table 2-4).
pub(crate) mod id {
    pub(crate) const PAYLOAD_FORMAT: u8 = 0x01;
    pub(crate) const MESSAGE_EXPIRY: u8 = 0x02;
    pub(crate) const CONTENT_TYPE: u8 = 0x03;
    pub(crate) const RESPONSE_TOPIC: u8 = 0x08;
    pub(crate) const CORRELATION_DATA: u8 = 0x09;
    pub(crate) const SUBSCRIPTION_ID: u8 = 0x0B;
    pub(crate) const SESSION_EXPIRY: u8 = 0x11;
    pub(crate) const ASSIGNED_CLIENT_ID: u8 = 0x12;
    pub(crate) const SERVER_KEEP_ALIVE: u8 = 0x13;
    pub(crate) const AUTH_METHOD: u8 = 0x15;
    pub(crate) const AUTH_DATA: u8 = 0x16;
    pub(crate) const REQUEST_PROBLEM_INFO: u8 = 0x17;
    pub(crate) const WILL_DELAY: u8 = 0x18;
    pub(crate) const REQUEST_RESPONSE_INFO: u8 = 0x19;
    pub(crate) const RESPONSE_INFO: u8 = 0x1A;
    pub(crate) const SERVER_REFERENCE: u8 = 0x1C;
    pub(crate) const REASON_STRING: u8 = 0x1F;
    pub(crate) const RECEIVE_MAXIMUM: u8 = 0x21;
    pub(crate) const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
    pub(crate) const TOPIC_ALIAS: u8 = 0x23;
    pub(crate) const MAXIMUM_QOS: u8 = 0x24;
    pub(crate) const RETAIN_AVAILABLE: u8 = 0x25;
    pub(crate) const USER_PROPERTY: u8 = 0x26;
    pub(crate) const MAXIMUM_PACKET_SIZE: u8 = 0x27;
    pub(crate) const WILDCARD_SUB_AVAILABLE: u8 = 0x28;
    pub(crate) const SUB_ID_AVAILABLE: u8 = 0x29;
    pub(crate) const SHARED_SUB_AVAILABLE: u8 = 0x2A;
}

/// The places a property may appear (table 2-4), or `None` for an
/// identifier that does not exist.
pub(crate) fn allowed_in(property: u8) -> Option<u16> {
    const CONNECT: u16 = Place::CONNECT.0;
    const CONNACK: u16 = Place::CONNACK.0;
    const PUBLISH: u16 = Place::PUBLISH.0;
    const WILL: u16 = Place::WILL.0;
    const ACK: u16 = Place::ACK.0;
    const SUBSCRIBE: u16 = Place::SUBSCRIBE.0;
    const SUBACK: u16 = Place::SUBACK.0;
    const UNSUBSCRIBE: u16 = Place::UNSUBSCRIBE.0;
    const UNSUBACK: u16 = Place::UNSUBACK.0;
    const DISCONNECT: u16 = Place::DISCONNECT.0;
    const AUTH: u16 = Place::AUTH.0;
    Some(match property {
        id::PAYLOAD_FORMAT | id::MESSAGE_EXPIRY | id::CONTENT_TYPE | id::RESPONSE_TOPIC | id::CORRELATION_DATA => PUBLISH | WILL,
        id::SUBSCRIPTION_ID => PUBLISH | SUBSCRIBE,
        id::SESSION_EXPIRY => CONNECT | CONNACK | DISCONNECT,
        id::ASSIGNED_CLIENT_ID | id::SERVER_KEEP_ALIVE | id::RESPONSE_INFO | id::MAXIMUM_QOS | id::RETAIN_AVAILABLE => CONNACK,
        id::WILDCARD_SUB_AVAILABLE | id::SUB_ID_AVAILABLE | id::SHARED_SUB_AVAILABLE => CONNACK,
        id::AUTH_METHOD | id::AUTH_DATA => CONNECT | CONNACK | AUTH,
        id::REQUEST_PROBLEM_INFO | id::REQUEST_RESPONSE_INFO => CONNECT,
        id::WILL_DELAY => WILL,
        id::SERVER_REFERENCE => CONNACK | DISCONNECT,
        id::REASON_STRING => CONNACK | ACK | SUBACK | UNSUBACK | DISCONNECT | AUTH,
        id::RECEIVE_MAXIMUM | id::TOPIC_ALIAS_MAXIMUM | id::MAXIMUM_PACKET_SIZE => CONNECT | CONNACK,
        id::TOPIC_ALIAS => PUBLISH,
        id::USER_PROPERTY => CONNECT | CONNACK | PUBLISH | WILL | ACK | SUBSCRIBE | SUBACK | UNSUBSCRIBE | UNSUBACK | DISCONNECT | AUTH,
        _ => return None,
    })
}

/// Every property of §2.2.2.2; absent ones are `None` or empty.
/// Booleans are the byte properties whose only values are 0 and 1.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Properties<'a> {
    /// 0x01: the payload is UTF-8 (true) or unspecified bytes (false).
    pub payload_is_utf8: Option<bool>,
    /// 0x02: seconds the message lives.
    pub message_expiry: Option<u32>,
    /// 0x03: MIME type of the payload.
    pub content_type: Option<&'a str>,
    /// 0x08: topic name for a response (no wildcards).
    pub response_topic: Option<&'a str>,
    /// 0x09: correlation data for a response.
    pub correlation_data: Option<&'a [u8]>,
    /// 0x0B: 1 to 268,435,455; once in SUBSCRIBE, any number of times in
    /// a server's PUBLISH (one per matching subscription).
    pub subscription_ids: Vec<u32>,
    /// 0x11: seconds the session outlives the connection.
    pub session_expiry: Option<u32>,
    /// 0x12: the client id the server chose.
    pub assigned_client_id: Option<&'a str>,
    /// 0x13: keep-alive the server imposes.
    pub server_keep_alive: Option<u16>,
    /// 0x15: extended authentication method.
    pub auth_method: Option<&'a str>,
    /// 0x16: its data.
    pub auth_data: Option<&'a [u8]>,
    /// 0x17: whether reason strings / user properties may be sent on failures.
    pub request_problem_info: Option<bool>,
    /// 0x18: seconds to wait before publishing the will.
    pub will_delay: Option<u32>,
    /// 0x19: whether the client wants Response Information in CONNACK.
    pub request_response_info: Option<bool>,
    /// 0x1A: basis for response topics.
    pub response_info: Option<&'a str>,
    /// 0x1C: another server to use.
    pub server_reference: Option<&'a str>,
    /// 0x1F: human-readable diagnostics.
    pub reason_string: Option<&'a str>,
    /// 0x21: most unacknowledged QoS 1/2 publishes the sender accepts (not 0).
    pub receive_maximum: Option<u16>,
    /// 0x22: highest topic alias the sender accepts.
    pub topic_alias_maximum: Option<u16>,
    /// 0x23: topic alias (not 0).
    pub topic_alias: Option<u16>,
    /// 0x24: highest QoS the server supports (0 or 1; absent means 2).
    pub maximum_qos: Option<QoS>,
    /// 0x25: retained messages supported.
    pub retain_available: Option<bool>,
    /// 0x26: name / value pairs, in order, repeatable.
    pub user_properties: Vec<(&'a str, &'a str)>,
    /// 0x27: largest packet the sender accepts (not 0).
    pub maximum_packet_size: Option<u32>,
    /// 0x28: wildcard subscriptions supported.
    pub wildcard_sub_available: Option<bool>,
    /// 0x29: subscription identifiers supported.
    pub sub_id_available: Option<bool>,
    /// 0x2A: shared subscriptions supported.
    pub shared_sub_available: Option<bool>,
}

/// A byte property that may only be 0 or 1.
fn flag(c: &mut Cursor<'_>, property: u8) -> Result<bool, Error> {
    match c.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::BadPropertyValue(property)),
    }
}

/// A property whose value 0 is a protocol error.
fn nonzero<T: PartialEq + Default>(v: T, property: u8) -> Result<T, Error> {
    if v == T::default() {
        return Err(Error::BadPropertyValue(property));
    }
    Ok(v)
}

impl<'a> Properties<'a> {
    /// Decode a property block (length, then properties) at `c`, for
    /// `place`.
    pub(crate) fn decode(c: &mut Cursor<'a>, place: Place, limits: &Limits) -> Result<Properties<'a>, Error> {
        let len = c.varint()? as usize;
        let mut b = Cursor::new(c.take(len)?);
        let mut p = Properties::default();
        let (mut count, mut user_bytes, mut seen) = (0usize, 0usize, 0u64);
        while !b.is_empty() {
            let raw = b.varint()?;
            let Ok(pid) = u8::try_from(raw) else { return Err(Error::UnknownProperty(u8::MAX)) };
            if allowed_in(pid).is_none() {
                return Err(Error::UnknownProperty(pid));
            }
            if !place.allows(pid) {
                return Err(Error::PropertyNotAllowed(pid));
            }
            count += 1;
            if count > limits.max_properties {
                return Err(Error::TooManyProperties);
            }
            let repeatable = pid == id::USER_PROPERTY || (pid == id::SUBSCRIPTION_ID && place == Place::PUBLISH);
            if !repeatable && seen & (1 << pid) != 0 {
                return Err(Error::DuplicateProperty(pid));
            }
            seen |= 1 << pid;
            match pid {
                id::PAYLOAD_FORMAT => p.payload_is_utf8 = Some(flag(&mut b, pid)?),
                id::MESSAGE_EXPIRY => p.message_expiry = Some(b.u32()?),
                id::CONTENT_TYPE => p.content_type = Some(b.str()?),
                id::RESPONSE_TOPIC => {
                    let t = b.str()?;
                    if t.is_empty() || t.contains(['+', '#']) {
                        return Err(Error::BadPropertyValue(pid));
                    }
                    p.response_topic = Some(t);
                }
                id::CORRELATION_DATA => p.correlation_data = Some(b.bin()?),
                id::SUBSCRIPTION_ID => p.subscription_ids.push(nonzero(b.varint()?, pid)?),
                id::SESSION_EXPIRY => p.session_expiry = Some(b.u32()?),
                id::ASSIGNED_CLIENT_ID => p.assigned_client_id = Some(b.str()?),
                id::SERVER_KEEP_ALIVE => p.server_keep_alive = Some(b.u16()?),
                id::AUTH_METHOD => p.auth_method = Some(b.str()?),
                id::AUTH_DATA => p.auth_data = Some(b.bin()?),
                id::REQUEST_PROBLEM_INFO => p.request_problem_info = Some(flag(&mut b, pid)?),
                id::WILL_DELAY => p.will_delay = Some(b.u32()?),
                id::REQUEST_RESPONSE_INFO => p.request_response_info = Some(flag(&mut b, pid)?),
                id::RESPONSE_INFO => p.response_info = Some(b.str()?),
                id::SERVER_REFERENCE => p.server_reference = Some(b.str()?),
                id::REASON_STRING => p.reason_string = Some(b.str()?),
                id::RECEIVE_MAXIMUM => p.receive_maximum = Some(nonzero(b.u16()?, pid)?),
                id::TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(b.u16()?),
                id::TOPIC_ALIAS => p.topic_alias = Some(nonzero(b.u16()?, pid).map_err(|_| Error::TopicAliasInvalid)?),
                id::MAXIMUM_QOS => p.maximum_qos = Some(if flag(&mut b, pid)? { QoS::AtLeastOnce } else { QoS::AtMostOnce }),
                id::RETAIN_AVAILABLE => p.retain_available = Some(flag(&mut b, pid)?),
                id::USER_PROPERTY => {
                    let (k, v) = (b.str()?, b.str()?);
                    user_bytes += k.len() + v.len();
                    if user_bytes > limits.max_user_property_bytes {
                        return Err(Error::TooManyProperties);
                    }
                    p.user_properties.push((k, v));
                }
                id::MAXIMUM_PACKET_SIZE => p.maximum_packet_size = Some(nonzero(b.u32()?, pid)?),
                id::WILDCARD_SUB_AVAILABLE => p.wildcard_sub_available = Some(flag(&mut b, pid)?),
                id::SUB_ID_AVAILABLE => p.sub_id_available = Some(flag(&mut b, pid)?),
                id::SHARED_SUB_AVAILABLE => p.shared_sub_available = Some(flag(&mut b, pid)?),
                // allowed_in knows only the identifiers matched above.
                _ => return Err(Error::UnknownProperty(pid)),
            }
        }
        Ok(p)
    }

    /// Append this block, its length first. Writes what is set whatever the
    /// place: keeping to table 2-4 is the caller's part.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        with_length(out, |out| self.encode_body(out))
    }

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let byte = |out: &mut Vec<u8>, pid: u8, v: Option<bool>| {
            if let Some(v) = v {
                out.extend_from_slice(&[pid, v as u8]);
            }
        };
        let u16p = |out: &mut Vec<u8>, pid: u8, v: Option<u16>| {
            if let Some(v) = v {
                out.push(pid);
                out.extend_from_slice(&v.to_be_bytes());
            }
        };
        let u32p = |out: &mut Vec<u8>, pid: u8, v: Option<u32>| {
            if let Some(v) = v {
                out.push(pid);
                out.extend_from_slice(&v.to_be_bytes());
            }
        };
        let strp = |out: &mut Vec<u8>, pid: u8, v: Option<&str>| -> Result<(), EncodeError> {
            if let Some(v) = v {
                out.push(pid);
                put_str(out, v)?;
            }
            Ok(())
        };
        let binp = |out: &mut Vec<u8>, pid: u8, v: Option<&[u8]>| -> Result<(), EncodeError> {
            if let Some(v) = v {
                out.push(pid);
                put_bin(out, v)?;
            }
            Ok(())
        };
        byte(out, id::PAYLOAD_FORMAT, self.payload_is_utf8);
        u32p(out, id::MESSAGE_EXPIRY, self.message_expiry);
        strp(out, id::CONTENT_TYPE, self.content_type)?;
        strp(out, id::RESPONSE_TOPIC, self.response_topic)?;
        binp(out, id::CORRELATION_DATA, self.correlation_data)?;
        for &sid in &self.subscription_ids {
            out.push(id::SUBSCRIPTION_ID);
            put_varint(out, sid)?;
        }
        u32p(out, id::SESSION_EXPIRY, self.session_expiry);
        strp(out, id::ASSIGNED_CLIENT_ID, self.assigned_client_id)?;
        u16p(out, id::SERVER_KEEP_ALIVE, self.server_keep_alive);
        strp(out, id::AUTH_METHOD, self.auth_method)?;
        binp(out, id::AUTH_DATA, self.auth_data)?;
        byte(out, id::REQUEST_PROBLEM_INFO, self.request_problem_info);
        u32p(out, id::WILL_DELAY, self.will_delay);
        byte(out, id::REQUEST_RESPONSE_INFO, self.request_response_info);
        strp(out, id::RESPONSE_INFO, self.response_info)?;
        strp(out, id::SERVER_REFERENCE, self.server_reference)?;
        strp(out, id::REASON_STRING, self.reason_string)?;
        u16p(out, id::RECEIVE_MAXIMUM, self.receive_maximum);
        u16p(out, id::TOPIC_ALIAS_MAXIMUM, self.topic_alias_maximum);
        u16p(out, id::TOPIC_ALIAS, self.topic_alias);
        byte(out, id::MAXIMUM_QOS, self.maximum_qos.map(|q| q != QoS::AtMostOnce));
        byte(out, id::RETAIN_AVAILABLE, self.retain_available);
        for (k, v) in &self.user_properties {
            out.push(id::USER_PROPERTY);
            put_str(out, k)?;
            put_str(out, v)?;
        }
        u32p(out, id::MAXIMUM_PACKET_SIZE, self.maximum_packet_size);
        byte(out, id::WILDCARD_SUB_AVAILABLE, self.wildcard_sub_available);
        byte(out, id::SUB_ID_AVAILABLE, self.sub_id_available);
        byte(out, id::SHARED_SUB_AVAILABLE, self.shared_sub_available);
        Ok(())
    }
}
