//! Why a peer's packet was refused, as a value: each kind names the MQTT 5
//! reason code a CONNACK or DISCONNECT carries for it (§2.4 table 2-6,
//! §4.13) and what MQTT 3.1.1 does instead (a CONNACK return code for the
//! CONNECT refusals of 3.1.1 §3.2.2.3, otherwise close the connection,
//! 3.1.1 §4.8), and a counter name.

use super::topic::TopicError;

/// A packet a peer sent that the codec refuses. The connection ends after
/// any of them; what to send first is [`Error::reason_code`] (5.0: in a
/// CONNACK before one was sent, else in a DISCONNECT) or
/// [`Error::v3_connack`] (3.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Error {
    /// A Variable Byte Integer (the remaining length, a property length or
    /// identifier, a subscription identifier) longer than 4 bytes (§1.5.5).
    MalformedVarint,
    /// The fixed header announces a packet over `Limits::max_packet_size`.
    PacketTooLarge,
    /// Packet type 0, or 15 (AUTH) in 3.1.1 (§2.1.2).
    UnknownPacketType,
    /// Fixed-header flags other than the ones the packet type requires
    /// (§2.1.3), or reserved bits set in CONNACK flags or subscription
    /// options (§3.2.2.1, §3.8.3.1).
    ReservedFlags,
    /// A field runs past the end of the packet.
    Truncated,
    /// Bytes left after the last field of a packet.
    TrailingBytes,
    /// A packet the reading end may not receive here: not CONNECT first, a
    /// second CONNECT (§3.1), or a packet sent the wrong way (§2.1.2).
    UnexpectedPacket,
    /// A string that is not well-formed UTF-8 (§1.5.4).
    BadUtf8,
    /// A string containing U+0000 (§1.5.4, [MQTT-1.5.4-2]).
    NullChar,
    /// CONNECT's protocol name is not "MQTT" (§3.1.2.1).
    ProtocolName,
    /// CONNECT's protocol level is neither 4 nor 5 (§3.1.2.2).
    ProtocolVersion(u8),
    /// The client identifier is over the limit, or empty without a clean
    /// session in 3.1.1 (3.1.1 §3.1.3.1, [MQTT-3.1.3-8]).
    ClientIdRejected,
    /// Connect flags: the reserved bit, a will QoS or retain without a
    /// will, or (3.1.1) a password without a user name (§3.1.2.3).
    BadConnectFlags,
    /// QoS 3 in a PUBLISH, a will, or a subscription (§3.3.1.2).
    BadQos,
    /// DUP set on a QoS 0 PUBLISH ([MQTT-3.3.1-2]).
    DupOnQos0,
    /// Packet identifier 0 where one is required (§2.2.1).
    ZeroPacketId,
    /// A topic name that is empty (without a topic alias), has a wildcard,
    /// or is past the limits (§4.7.3).
    TopicName(TopicError),
    /// A topic filter with misplaced wildcards, a bad `$share/`, or past
    /// the limits (§4.7.1, §4.8.2).
    TopicFilter(TopicError),
    /// A Topic Alias of 0 (§3.3.2.3.4).
    TopicAliasInvalid,
    /// A SUBSCRIBE or UNSUBSCRIBE with no topic filter ([MQTT-3.8.3-2],
    /// [MQTT-3.10.3-2]), or a SUBACK with no return code.
    NoFilters,
    /// More topic filters in one SUBSCRIBE or UNSUBSCRIBE than the limit.
    TooManyFilters,
    /// Retain Handling 3 (§3.8.3.1).
    BadRetainHandling,
    /// No Local on a shared subscription ([MQTT-3.8.3-4]).
    NoLocalOnShared,
    /// A reason or return code this packet may not carry (§2.4).
    BadReasonCode(u8),
    /// A property identifier that does not exist (§2.2.2.2).
    UnknownProperty(u8),
    /// A property this packet may not carry (§2.2.2.2 table 2-4), or a
    /// Subscription Identifier in a client's PUBLISH ([MQTT-3.3.4-6]).
    PropertyNotAllowed(u8),
    /// A property given twice where the standard says once.
    DuplicateProperty(u8),
    /// A property value the standard forbids (0 for Receive Maximum, a
    /// flag other than 0 or 1, a wildcard in a Response Topic...).
    BadPropertyValue(u8),
    /// More properties, or more bytes of user properties, than the limits.
    TooManyProperties,
}

impl Error {
    /// The MQTT 5 reason code for this refusal (§2.4 table 2-6): 0x81
    /// malformed packet, 0x82 protocol error, and the specific ones.
    pub(crate) fn reason_code(self) -> u8 {
        use Error::*;
        match self {
            MalformedVarint
            | UnknownPacketType
            | ReservedFlags
            | Truncated
            | TrailingBytes
            | BadUtf8
            | NullChar
            | BadConnectFlags
            | BadQos
            | DupOnQos0
            | UnknownProperty(_)
            | PropertyNotAllowed(_) => 0x81,
            UnexpectedPacket | ZeroPacketId | NoFilters | BadRetainHandling | NoLocalOnShared | BadReasonCode(_) | DuplicateProperty(_)
            | BadPropertyValue(_) => 0x82,
            ProtocolName | ProtocolVersion(_) => 0x84,
            ClientIdRejected => 0x85,
            TopicFilter(_) => 0x8F,
            TopicName(_) => 0x90,
            TopicAliasInvalid => 0x94,
            PacketTooLarge => 0x95,
            TooManyFilters | TooManyProperties => 0x97,
        }
    }

    /// What a 3.1.1 server answers before closing: a CONNACK return code
    /// for the refusals 3.1.1 §3.2.2.3 names (1 unacceptable protocol
    /// version, 2 identifier rejected), `None` for every other kind (3.1.1
    /// §4.8: close without a reply). A CONNECT of unknown level is
    /// answered in the 3.1.1 form, the one every version can read.
    pub(crate) fn v3_connack(self) -> Option<u8> {
        match self {
            Error::ProtocolName | Error::ProtocolVersion(_) => Some(0x01),
            Error::ClientIdRejected => Some(0x02),
            _ => None,
        }
    }

    /// A counter name for this kind.
    pub(crate) fn as_str(self) -> &'static str {
        use Error::*;
        match self {
            MalformedVarint => "mqtt_malformed_varint",
            PacketTooLarge => "mqtt_packet_too_large",
            UnknownPacketType => "mqtt_unknown_packet_type",
            ReservedFlags => "mqtt_reserved_flags",
            Truncated => "mqtt_truncated",
            TrailingBytes => "mqtt_trailing_bytes",
            UnexpectedPacket => "mqtt_unexpected_packet",
            BadUtf8 => "mqtt_bad_utf8",
            NullChar => "mqtt_null_char",
            ProtocolName => "mqtt_protocol_name",
            ProtocolVersion(_) => "mqtt_protocol_version",
            ClientIdRejected => "mqtt_client_id_rejected",
            BadConnectFlags => "mqtt_bad_connect_flags",
            BadQos => "mqtt_bad_qos",
            DupOnQos0 => "mqtt_dup_on_qos0",
            ZeroPacketId => "mqtt_zero_packet_id",
            TopicName(_) => "mqtt_topic_name_invalid",
            TopicFilter(_) => "mqtt_topic_filter_invalid",
            TopicAliasInvalid => "mqtt_topic_alias_invalid",
            NoFilters => "mqtt_no_filters",
            TooManyFilters => "mqtt_too_many_filters",
            BadRetainHandling => "mqtt_bad_retain_handling",
            NoLocalOnShared => "mqtt_no_local_on_shared",
            BadReasonCode(_) => "mqtt_bad_reason_code",
            UnknownProperty(_) => "mqtt_unknown_property",
            PropertyNotAllowed(_) => "mqtt_property_not_allowed",
            DuplicateProperty(_) => "mqtt_duplicate_property",
            BadPropertyValue(_) => "mqtt_bad_property_value",
            TooManyProperties => "mqtt_too_many_properties",
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (reason code 0x{:02X})", self.as_str(), self.reason_code())
    }
}

impl std::error::Error for Error {}

/// Why a packet could not be encoded; `out` is left as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncodeError {
    /// A string or binary field over 65,535 bytes (§1.5.4, §1.5.6).
    FieldTooLong,
    /// A packet whose remaining length exceeds 268,435,455 (§2.1.4).
    PacketTooLarge,
    /// A packet that does not exist in the version asked for (AUTH in
    /// 3.1.1), or a QoS patched across the QoS 0 / QoS 1-2 forms.
    WrongForm,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EncodeError::FieldTooLong => "mqtt field over 65535 bytes",
            EncodeError::PacketTooLarge => "mqtt packet over 268435455 bytes",
            EncodeError::WrongForm => "mqtt packet not expressible in this form",
        })
    }
}

impl std::error::Error for EncodeError {}
