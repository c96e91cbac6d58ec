//! The packets of MQTT 3.1.1 and 5.0 (§3), borrowing their strings and
//! payloads from the buffer they were decoded from (or will be encoded
//! from). One type serves both versions: fields only 5.0 has (properties,
//! reason codes on acknowledgements) are empty or 0 in 3.1.1 and the
//! encoder leaves them out there.

use super::properties::Properties;
use super::{QoS, Version};

/// One MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Packet<'a> {
    /// §3.1: a client's connection request (boxed: with its two property
    /// blocks it is twice any other packet, and comes once per connection).
    Connect(Box<Connect<'a>>),
    /// §3.2: the server's answer to CONNECT.
    ConnAck(ConnAck<'a>),
    /// §3.3: an application message, either way.
    Publish(Publish<'a>),
    /// §3.4: QoS 1 acknowledgement.
    PubAck(Ack<'a>),
    /// §3.5: QoS 2, publish received.
    PubRec(Ack<'a>),
    /// §3.6: QoS 2, publish release.
    PubRel(Ack<'a>),
    /// §3.7: QoS 2, publish complete.
    PubComp(Ack<'a>),
    /// §3.8: subscribe to topic filters.
    Subscribe(Subscribe<'a>),
    /// §3.9: one return/reason code per filter subscribed.
    SubAck(SubAck<'a>),
    /// §3.10: unsubscribe from topic filters.
    Unsubscribe(Unsubscribe<'a>),
    /// §3.11: one reason code per filter in 5.0, none in 3.1.1.
    UnsubAck(SubAck<'a>),
    /// §3.12: keep-alive ping.
    PingReq,
    /// §3.13: its answer.
    PingResp,
    /// §3.14: orderly close (with a reason in 5.0).
    Disconnect(Disconnect<'a>),
    /// §3.15: 5.0 only, extended authentication.
    Auth(Auth<'a>),
}

impl Packet<'_> {
    /// The packet type number (§2.1.2), see [`super::kind`].
    pub(crate) fn kind(&self) -> u8 {
        use super::kind::*;
        match self {
            Packet::Connect(_) => CONNECT,
            Packet::ConnAck(_) => CONNACK,
            Packet::Publish(_) => PUBLISH,
            Packet::PubAck(_) => PUBACK,
            Packet::PubRec(_) => PUBREC,
            Packet::PubRel(_) => PUBREL,
            Packet::PubComp(_) => PUBCOMP,
            Packet::Subscribe(_) => SUBSCRIBE,
            Packet::SubAck(_) => SUBACK,
            Packet::Unsubscribe(_) => UNSUBSCRIBE,
            Packet::UnsubAck(_) => UNSUBACK,
            Packet::PingReq => PINGREQ,
            Packet::PingResp => PINGRESP,
            Packet::Disconnect(_) => DISCONNECT,
            Packet::Auth(_) => AUTH,
        }
    }
}

/// CONNECT (§3.1). The encoder writes it in its own `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Connect<'a> {
    /// Protocol level; every later packet of the connection uses it.
    pub version: Version,
    /// Clean Start (5.0) / Clean Session (3.1.1).
    pub clean_start: bool,
    /// Seconds; 0 turns keep-alive off (§3.1.2.10).
    pub keep_alive: u16,
    /// CONNECT properties (5.0 §3.1.2.11).
    pub properties: Properties<'a>,
    /// May be empty: the server assigns one (5.0), or (3.1.1) only with a
    /// clean session.
    pub client_id: &'a str,
    /// The will message, if the will flag is set.
    pub will: Option<Will<'a>>,
    /// User name, if its flag is set.
    pub username: Option<&'a str>,
    /// Password (binary data), if its flag is set.
    pub password: Option<&'a [u8]>,
}

/// A will message (§3.1.3.2 to §3.1.3.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Will<'a> {
    /// QoS to publish it with.
    pub qos: QoS,
    /// Publish it retained.
    pub retain: bool,
    /// Will properties (5.0 §3.1.3.2): will delay, expiry, content type...
    pub properties: Properties<'a>,
    /// A topic name (no wildcards).
    pub topic: &'a str,
    /// The message body.
    pub payload: &'a [u8],
}

/// CONNACK (§3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnAck<'a> {
    /// The server holds a session for this client id.
    pub session_present: bool,
    /// 3.1.1 return code (0 to 5) or 5.0 reason code (0 or >= 0x80).
    pub code: u8,
    /// CONNACK properties (5.0 §3.2.2.3).
    pub properties: Properties<'a>,
}

/// PUBLISH (§3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Publish<'a> {
    /// A re-delivery of a QoS 1 or 2 message.
    pub dup: bool,
    /// Delivery guarantee.
    pub qos: QoS,
    /// Set or (empty payload) clear the retained message.
    pub retain: bool,
    /// Topic name; empty in 5.0 when a Topic Alias stands for it.
    pub topic: &'a str,
    /// Non-zero for QoS 1 and 2; ignored (and 0 when decoded) for QoS 0.
    pub packet_id: u16,
    /// PUBLISH properties (5.0 §3.3.2.3).
    pub properties: Properties<'a>,
    /// Application message, opaque.
    pub payload: &'a [u8],
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP (§3.4 to §3.7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Ack<'a> {
    /// Non-zero.
    pub packet_id: u16,
    /// 5.0 reason code (0 success); always 0 in 3.1.1.
    pub reason: u8,
    /// Reason string and user properties (5.0).
    pub properties: Properties<'a>,
}

/// Options of one subscription (§3.8.3.1; 3.1.1 has only the QoS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Subscription<'a> {
    /// Topic filter, possibly `$share/group/filter`.
    pub filter: &'a str,
    /// Maximum QoS the server may deliver with.
    pub qos: QoS,
    /// 5.0: do not send this client its own publications.
    pub no_local: bool,
    /// 5.0: keep the RETAIN flag as published on forwarded messages.
    pub retain_as_published: bool,
    /// 5.0: 0 send retained on subscribe, 1 only if new, 2 never.
    pub retain_handling: u8,
}

/// SUBSCRIBE (§3.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subscribe<'a> {
    /// Non-zero.
    pub packet_id: u16,
    /// Subscription identifier and user properties (5.0).
    pub properties: Properties<'a>,
    /// At least one.
    pub subscriptions: Vec<Subscription<'a>>,
}

/// SUBACK (§3.9) and UNSUBACK (§3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubAck<'a> {
    /// The SUBSCRIBE's or UNSUBSCRIBE's identifier.
    pub packet_id: u16,
    /// Reason string and user properties (5.0).
    pub properties: Properties<'a>,
    /// One per filter, in order (empty for a 3.1.1 UNSUBACK).
    pub codes: Vec<u8>,
}

/// UNSUBSCRIBE (§3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsubscribe<'a> {
    /// Non-zero.
    pub packet_id: u16,
    /// User properties (5.0).
    pub properties: Properties<'a>,
    /// At least one.
    pub filters: Vec<&'a str>,
}

/// DISCONNECT (§3.14); empty in 3.1.1.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Disconnect<'a> {
    /// 5.0 reason code (0 normal disconnection).
    pub reason: u8,
    /// Session expiry, reason string, server reference, user properties.
    pub properties: Properties<'a>,
}

/// AUTH (§3.15, 5.0 only).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Auth<'a> {
    /// 0x00 success, 0x18 continue authentication, 0x19 re-authenticate.
    pub reason: u8,
    /// Authentication method and data, reason string, user properties.
    pub properties: Properties<'a>,
}
