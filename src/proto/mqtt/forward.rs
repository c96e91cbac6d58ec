//! What of a client's PUBLISH travels with the message to the MQTT 5
//! subscribers it reaches (§3.3.2.3, [MQTT-3.3.2-4], [MQTT-3.3.2-15..20]):
//! the Payload Format Indicator, Message Expiry Interval (the remaining
//! one is sent), Content Type, Response Topic, Correlation Data and the
//! User Properties, in order. Owned and serializable, since a message
//! crosses from a worker to the supervisor and on to every worker; also
//! the publishing connection (for No Local), which is not a property.
//!
//! Bounded: [`Forwarded::cost`] at most [`MAX_FORWARDED_BYTES`] (a
//! PUBLISH past it is refused by the server, v5 0x95); the codec already
//! bounds each string and the user properties of one block.

use super::Properties;
use serde::{Deserialize, Serialize};

/// Most bytes of forwarded properties one message may carry: strings,
/// correlation data and user property names and values.
pub(crate) const MAX_FORWARDED_BYTES: usize = 8192;

/// A message's forwarded properties and where it came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Forwarded {
    /// The connection id that published it (No Local: not sent back to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_is_utf8: Option<bool>,
    /// Seconds the message lives from its publish (`publish_us`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_expiry: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_topic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_data: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub user_properties: Vec<(String, String)>,
}

impl Forwarded {
    /// The properties of a client's PUBLISH that are forwarded, with its
    /// connection; `Err(cost)` past [`MAX_FORWARDED_BYTES`].
    pub(crate) fn from_publish(p: &Properties<'_>, origin: Option<u64>) -> Result<Forwarded, usize> {
        let f = Forwarded {
            origin,
            payload_is_utf8: p.payload_is_utf8,
            message_expiry: p.message_expiry,
            content_type: p.content_type.map(str::to_string),
            response_topic: p.response_topic.map(str::to_string),
            correlation_data: p.correlation_data.map(<[u8]>::to_vec),
            user_properties: p.user_properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        match f.cost() {
            n if n > MAX_FORWARDED_BYTES => Err(n),
            _ => Ok(f),
        }
    }

    /// Bytes of its strings and data.
    pub(crate) fn cost(&self) -> usize {
        let s = |v: &Option<String>| v.as_ref().map_or(0, String::len);
        s(&self.content_type)
            + s(&self.response_topic)
            + self.correlation_data.as_ref().map_or(0, Vec::len)
            + self.user_properties.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }

    /// Whether a subscriber sees none of it (only the origin is set).
    pub(crate) fn is_bare(&self) -> bool {
        Forwarded { origin: None, ..self.clone() } == Forwarded::default()
    }

    /// What a stored copy of a message keeps (a retained message, a kept
    /// session's queue, a will): its properties without the publisher;
    /// `None` when a subscriber would see none of them.
    pub(crate) fn stored(f: Option<&Forwarded>) -> Option<Box<Forwarded>> {
        f.filter(|f| !f.is_bare()).map(|f| Box::new(Forwarded { origin: None, ..f.clone() }))
    }

    /// Wall-clock µs a message published at `publish_us` expires (0: never).
    pub(crate) fn expires_us(&self, publish_us: u64) -> u64 {
        self.message_expiry.map_or(0, |s| publish_us + u64::from(s) * 1_000_000)
    }

    /// A stored copy published at `publish_us`, handed on at `now_us`:
    /// its Message Expiry Interval is what is left of it. `Err(())`: it
    /// expired (nobody gets it, [MQTT-3.3.2-5]).
    pub(crate) fn at(f: Option<&Forwarded>, publish_us: u64, now_us: u64) -> Result<Option<Box<Forwarded>>, ()> {
        let Some(f) = f else { return Ok(None) };
        let left = f.expiry_left(now_us.saturating_sub(publish_us)).ok_or(())?;
        Ok(Some(Box::new(Forwarded { message_expiry: left, ..f.clone() })))
    }

    /// The PUBLISH properties for a subscriber: these, with `expiry_left`
    /// seconds as the Message Expiry Interval (what is left of it), and
    /// the subscriber's `subscription_ids`.
    pub(crate) fn properties(&self, expiry_left: Option<u32>, subscription_ids: Vec<u32>) -> Properties<'_> {
        Properties {
            payload_is_utf8: self.payload_is_utf8,
            message_expiry: expiry_left,
            content_type: self.content_type.as_deref(),
            response_topic: self.response_topic.as_deref(),
            correlation_data: self.correlation_data.as_deref(),
            user_properties: self.user_properties.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            subscription_ids,
            ..Properties::default()
        }
    }

    /// What is left of the Message Expiry Interval `elapsed_us` after the
    /// publish: `Some(None)` none was set, `Some(Some(s))` s seconds left
    /// (at least 1 while any is left), `None` it expired.
    pub(crate) fn expiry_left(&self, elapsed_us: u64) -> Option<Option<u32>> {
        let Some(total) = self.message_expiry else { return Some(None) };
        let total_us = u64::from(total) * 1_000_000;
        if elapsed_us >= total_us {
            return None;
        }
        Some(Some(((total_us - elapsed_us).div_ceil(1_000_000)) as u32))
    }
}

/// The message in a PUBLISH this server encoded (whatever packet id it
/// has): topic, payload, retain flag and, in 5.0, the properties it
/// forwards (those a kept session keeps; the expiry as encoded). `None`:
/// not such a packet.
pub(crate) fn own_publish(bytes: &[u8], v5: bool) -> Option<(&str, &[u8], bool, Option<Forwarded>)> {
    // Our own encoding, so the codec's bounds for peers do not apply.
    let limits = super::Limits {
        max_packet_size: u32::MAX,
        max_client_id: usize::MAX,
        max_topic_len: usize::MAX,
        max_topic_levels: usize::MAX,
        max_filters: usize::MAX,
        max_properties: usize::MAX,
        max_user_property_bytes: usize::MAX,
    };
    let (topic, mut c, retain) = own_publish_head(bytes)?;
    let fwd = match v5 {
        true => Some(Forwarded::from_publish(&Properties::decode(&mut c, super::properties::Place::PUBLISH, &limits).ok()?, None).ok()?),
        false => None,
    };
    Some((topic, c.rest(), retain, fwd))
}

/// The payload of a PUBLISH this server encoded, its properties skipped
/// undecoded (a count on the hot path: nothing allocated).
pub(crate) fn own_payload(bytes: &[u8], v5: bool) -> Option<&[u8]> {
    let (_, mut c, _) = own_publish_head(bytes)?;
    if v5 {
        let n = c.varint().ok()? as usize;
        c.take(n).ok()?;
    }
    Some(c.rest())
}

/// A PUBLISH this server encoded, up to its properties: the topic, the
/// rest (properties in 5.0, then the payload) and the retain flag.
fn own_publish_head(bytes: &[u8]) -> Option<(&str, super::decode::Cursor<'_>, bool)> {
    use super::decode::{fixed_header, Cursor};
    let h = fixed_header(bytes, None, u32::MAX).ok()??;
    if h.kind != super::kind::PUBLISH {
        return None;
    }
    let mut c = Cursor::new(bytes.get(h.len..h.total())?);
    let topic = c.str().ok()?;
    if (h.flags >> 1) & 3 != 0 {
        c.take(2).ok()?;
    }
    Some((topic, c, h.flags & 1 == 1))
}

/// Where the 4-byte Message Expiry Interval sits in an encoded v5 PUBLISH
/// (`bytes` as the encoder wrote it: the Payload Format Indicator, if
/// any, then the expiry, first in its property block), so a message held
/// in a queue goes out with what is left of it. `None`: it has none.
pub(crate) fn expiry_at(bytes: &[u8]) -> Option<usize> {
    let mut at = 1;
    while bytes.get(at)? & 0x80 != 0 {
        at += 1;
    }
    at += 1;
    let topic_len = usize::from(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]));
    at += 2 + topic_len;
    if (bytes[0] >> 1) & 3 != 0 {
        at += 2;
    }
    while bytes.get(at)? & 0x80 != 0 {
        at += 1;
    }
    at += 1;
    if *bytes.get(at)? == super::properties::id::PAYLOAD_FORMAT {
        at += 2;
    }
    (*bytes.get(at)? == super::properties::id::MESSAGE_EXPIRY && bytes.len() >= at + 5).then_some(at + 1)
}
