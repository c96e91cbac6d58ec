//! MQTT 3.1.1 (OASIS Standard, 29 October 2014) and MQTT 5.0 (OASIS
//! Standard, 7 March 2019): the codec both ends share, with no I/O.
//!
//! A server feeds a client's bytes to a [`Reader`] (`Reader::server`),
//! which learns the protocol version from the CONNECT and decodes every
//! later packet with it; a load generator's client does the reverse
//! (`Reader::client`, with the version it sent). Whole packets are decoded
//! straight out of the caller's read buffer, borrowing from it; only a
//! packet cut by the network is copied into the reader's own buffer, which
//! exists only while such a packet does and never holds more than
//! [`Limits::max_packet_size`]: a fixed header announcing more is refused
//! before any of its body is kept.
//!
//! Encoders ([`encode::packet`]) append to a caller's `Vec<u8>`. For
//! fan-out, [`encode::PublishPrefix`] encodes a PUBLISH's fixed header,
//! topic and properties once, leaving the payload to be sent after it
//! unchanged (writev or a shared buffer); per subscriber only the flags
//! byte and the packet identifier are patched in place.
//!
//! Every violation is a typed [`Error`] that names its MQTT 5 reason code
//! and what MQTT 3.1.1 does about it (a CONNACK return code, or close).
//! Topic names and filters are validated and matched in [`topic`].
//!
//! Section numbers in this module's comments are the MQTT 5.0 standard's
//! unless marked "3.1.1".

pub(crate) mod decode;
pub(crate) mod encode;
mod error;
pub(crate) mod forward;
pub(crate) mod invariants;
mod packet;
pub(crate) mod properties;
mod reader;
pub(crate) mod reason;
pub(crate) mod topic;

#[cfg(test)]
mod tests;

pub(crate) use error::{EncodeError, Error};
// The codec's tests (`tests/`) name these through `use super::*`.
#[cfg(test)]
pub(crate) use packet::Auth;
pub(crate) use packet::{Ack, ConnAck, Connect, Disconnect, Packet, Publish, SubAck, Subscribe, Subscription, Unsubscribe, Will};
pub(crate) use properties::Properties;
pub(crate) use reader::Reader;
#[cfg(test)]
pub(crate) use topic::TopicError;

/// The protocol level byte of a CONNECT (§3.1.2.2; 3.1.1 §3.1.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum Version {
    /// MQTT 3.1.1: protocol level 4.
    V311 = 4,
    /// MQTT 5.0: protocol level 5.
    V5 = 5,
}

/// Quality of service of a PUBLISH or a subscription (§4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
#[allow(clippy::enum_variant_names)] // the standard's names for the three levels (§4.3)
pub(crate) enum QoS {
    /// At most once: no acknowledgement.
    #[default]
    AtMostOnce = 0,
    /// At least once: PUBACK.
    AtLeastOnce = 1,
    /// Exactly once: PUBREC, PUBREL, PUBCOMP.
    ExactlyOnce = 2,
}

impl QoS {
    /// Its digit, as counters label it ("0", "1", "2").
    pub(crate) fn label(self) -> &'static str {
        ["0", "1", "2"][self as usize]
    }

    /// The QoS for two wire bits; 3 is not one (§3.3.1.2: a malformed packet).
    pub(crate) fn from_bits(bits: u8) -> Option<QoS> {
        match bits {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

/// Which end is reading: a server accepts only the packets a client may
/// send, and a client only those a server may (§2.1.2 table 2-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Reads client-to-server packets (CONNECT first).
    Server,
    /// Reads server-to-client packets.
    Client,
}

/// The caller's bounds on what a peer may send. Every one is checked while
/// decoding, so nothing a peer sends grows past them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Largest whole packet, fixed header included (the v5 Maximum Packet
    /// Size, §3.1.2.11.4). Refused from the fixed header alone, before the
    /// body is buffered; also the most a [`Reader`] ever holds.
    pub max_packet_size: u32,
    /// Longest client identifier in bytes (3.1.1 §3.1.3.1 requires at
    /// least 23 to be allowed).
    pub max_client_id: usize,
    /// Longest topic name or filter in bytes.
    pub max_topic_len: usize,
    /// Most levels (`/`-separated parts) in a topic name or filter.
    pub max_topic_levels: usize,
    /// Most topic filters in one SUBSCRIBE or UNSUBSCRIBE.
    pub max_filters: usize,
    /// Most properties in one property block (user properties included).
    pub max_properties: usize,
    /// Most bytes of user property names and values in one block.
    pub max_user_property_bytes: usize,
}

impl Default for Limits {
    /// Small enough that a million connections cannot be made to hold much:
    /// 64 KiB packets (a megaconn push is at most a few KiB), 128-byte client
    /// ids, 1 KiB topics of at most 32 levels, 32 filters per SUBSCRIBE,
    /// 64 properties and 4 KiB of user properties per block.
    fn default() -> Limits {
        Limits {
            max_packet_size: 64 * 1024,
            max_client_id: 128,
            max_topic_len: 1024,
            max_topic_levels: 32,
            max_filters: 32,
            max_properties: 64,
            max_user_property_bytes: 4096,
        }
    }
}

/// Largest value of a Variable Byte Integer (§1.5.5), so also the largest
/// remaining length.
pub(crate) const MAX_VARINT: u32 = 268_435_455;

/// Packet type numbers, the high nibble of the first byte (§2.1.2).
pub(crate) mod kind {
    /// Client to server: connection request.
    pub(crate) const CONNECT: u8 = 1;
    /// Server to client: connect acknowledgment.
    pub(crate) const CONNACK: u8 = 2;
    /// Both ways: publish message.
    pub(crate) const PUBLISH: u8 = 3;
    /// Both ways: QoS 1 acknowledgment.
    pub(crate) const PUBACK: u8 = 4;
    /// Both ways: QoS 2 part 1.
    pub(crate) const PUBREC: u8 = 5;
    /// Both ways: QoS 2 part 2.
    pub(crate) const PUBREL: u8 = 6;
    /// Both ways: QoS 2 part 3.
    pub(crate) const PUBCOMP: u8 = 7;
    /// Client to server: subscribe request.
    pub(crate) const SUBSCRIBE: u8 = 8;
    /// Server to client: subscribe acknowledgment.
    pub(crate) const SUBACK: u8 = 9;
    /// Client to server: unsubscribe request.
    pub(crate) const UNSUBSCRIBE: u8 = 10;
    /// Server to client: unsubscribe acknowledgment.
    pub(crate) const UNSUBACK: u8 = 11;
    /// Client to server: ping.
    pub(crate) const PINGREQ: u8 = 12;
    /// Server to client: ping response.
    pub(crate) const PINGRESP: u8 = 13;
    /// Client to server in 3.1.1, both ways in 5.0.
    pub(crate) const DISCONNECT: u8 = 14;
    /// Both ways, 5.0 only: authentication exchange.
    pub(crate) const AUTH: u8 = 15;
}
