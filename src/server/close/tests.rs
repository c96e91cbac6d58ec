//! The names, WebSocket codes and MQTT codes of every reason, checked
//! against what the code computed from the names before the enum.

use super::*;
use crate::proto::mqtt::Error as E;
use Close::*;

/// Every reason once (a payload variant with a few payloads): the
/// exhaustive match in [`ordinal`] makes a new variant fail to compile
/// until it is given a place, and the test below checks this list has it.
const ALL: &[Close] = &[
    PeerClosed,
    WriteZero,
    SlowReader,
    SlowConsumer,
    RegisterFailed,
    RearmFailed,
    Io("ECONNRESET"),
    Tls("tls_alert_bad_certificate"),
    TlsPlaintext,
    TlsEof,
    IdleTimeout,
    HeaderTimeout,
    AuthTimeout,
    StallTimeout,
    TlsTimeout,
    MqttKeepalive,
    ServerDrain,
    ServerDrained,
    ServerStopped,
    Disconnected,
    WorkerCrashed,
    TooManyCommands,
    TooManySubscriptions,
    TooManyTopics,
    BadTopic,
    NotPermitted,
    UpstreamFull,
    UpstreamConnectionFull,
    NoUpstream,
    BadFrameZeroLength,
    BadFrameTooLong,
    BadFrameUnknownKind,
    BadFrameUnexpectedKind,
    BadFramePublish,
    BadFrameResume,
    HttpPipelineOverflow,
    HttpConnectionClose,
    Http503Rejected,
    Http400BadRequest,
    Http405Method,
    Http431HeadersTooLarge,
    Http501NotImplemented,
    WsPeerClose,
    WsTryAgainLater,
    Ws(Violation("ws_message_too_big")),
    WsHandshake("ws_handshake_version"),
    AuthMissing,
    AuthExpired,
    AuthMalformed,
    AuthUnknownKey,
    AuthBadClaims,
    AuthBadSignature,
    AuthBadAlgorithm,
    AuthNotYetValid,
    AuthWrongAudience,
    AuthWrongIssuer,
    AuthOtherUser,
    AuthOff,
    MqttNoState,
    MqttDisconnect,
    Mqtt(E::UnexpectedPacket),
    MqttPropertiesTooLarge,
    MqttReceiveMaximumExceeded,
    MqttPayloadTooLarge,
    MqttPublishQueueFull,
    MqttAuthMethodUnsupported,
    MqttWillBadTopic,
    MqttWillNotPermitted,
    MqttWillTooLarge,
    MqttSessionTakenOver,
    MqttClientIdRefused,
    MqttConnectUnansweredOverflow,
    WsMqttNotOffered,
    MqttWsText,
    MqttSysTopic,
    MqttKeepAliveRefused,
    MqttSessionExpiryAfterZero,
    IdentityQuota,
    MqttUnknownUser,
    MqttBadPassword,
    MqttAnonymousRefused,
    MqttAclDenied,
    MqttUserRemoved,
    MqttAuthHttpRefused,
    AuthHttpRefused,
    MqttAuthzHttpDenied,
    MqttAuthzUnanswered,
];

/// Each variant's place in [`ALL`] (payloads aside).
fn ordinal(c: Close) -> usize {
    match c {
        PeerClosed => 0,
        WriteZero => 1,
        SlowReader => 2,
        SlowConsumer => 3,
        RegisterFailed => 4,
        RearmFailed => 5,
        Io(_) => 6,
        Tls(_) => 7,
        TlsPlaintext => 8,
        TlsEof => 9,
        IdleTimeout => 10,
        HeaderTimeout => 11,
        AuthTimeout => 12,
        StallTimeout => 13,
        TlsTimeout => 14,
        MqttKeepalive => 15,
        ServerDrain => 16,
        ServerDrained => 17,
        ServerStopped => 18,
        Disconnected => 19,
        WorkerCrashed => 20,
        TooManyCommands => 21,
        TooManySubscriptions => 22,
        TooManyTopics => 23,
        BadTopic => 24,
        NotPermitted => 25,
        UpstreamFull => 26,
        UpstreamConnectionFull => 27,
        NoUpstream => 28,
        BadFrameZeroLength => 29,
        BadFrameTooLong => 30,
        BadFrameUnknownKind => 31,
        BadFrameUnexpectedKind => 32,
        BadFramePublish => 33,
        BadFrameResume => 34,
        HttpPipelineOverflow => 35,
        HttpConnectionClose => 36,
        Http503Rejected => 37,
        Http400BadRequest => 38,
        Http405Method => 39,
        Http431HeadersTooLarge => 40,
        Http501NotImplemented => 41,
        WsPeerClose => 42,
        WsTryAgainLater => 43,
        Ws(_) => 44,
        WsHandshake(_) => 45,
        AuthMissing => 46,
        AuthExpired => 47,
        AuthMalformed => 48,
        AuthUnknownKey => 49,
        AuthBadClaims => 50,
        AuthBadSignature => 51,
        AuthBadAlgorithm => 52,
        AuthNotYetValid => 53,
        AuthWrongAudience => 54,
        AuthWrongIssuer => 55,
        AuthOtherUser => 56,
        AuthOff => 57,
        MqttNoState => 58,
        MqttDisconnect => 59,
        Mqtt(_) => 60,
        MqttPropertiesTooLarge => 61,
        MqttReceiveMaximumExceeded => 62,
        MqttPayloadTooLarge => 63,
        MqttPublishQueueFull => 64,
        MqttAuthMethodUnsupported => 65,
        MqttWillBadTopic => 66,
        MqttWillNotPermitted => 67,
        MqttWillTooLarge => 68,
        MqttSessionTakenOver => 69,
        MqttClientIdRefused => 70,
        MqttConnectUnansweredOverflow => 71,
        WsMqttNotOffered => 72,
        MqttWsText => 73,
        MqttSysTopic => 74,
        MqttKeepAliveRefused => 75,
        MqttSessionExpiryAfterZero => 76,
        IdentityQuota => 77,
        MqttUnknownUser => 78,
        MqttBadPassword => 79,
        MqttAnonymousRefused => 80,
        MqttAclDenied => 81,
        MqttUserRemoved => 82,
        MqttAuthHttpRefused => 83,
        AuthHttpRefused => 84,
        MqttAuthzHttpDenied => 85,
        MqttAuthzUnanswered => 86,
    }
}

#[test]
fn the_table_has_every_variant_once() {
    let places: Vec<usize> = ALL.iter().map(|c| ordinal(*c)).collect();
    assert_eq!(places, (0..ALL.len()).collect::<Vec<_>>());
}

#[test]
fn every_name_is_distinct_non_empty_and_a_label() {
    let mut seen = std::collections::BTreeSet::new();
    for c in ALL {
        let name = c.as_str();
        assert!(!name.is_empty(), "{c:?}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'), "{c:?}: {name}");
        assert!(seen.insert(name), "{c:?}: {name} twice");
        assert_eq!(c.to_string(), name);
    }
}

/// The names the server used before the enum (constants and literals),
/// beside the reason that carries each now.
#[test]
fn names_are_the_ones_counted_before() {
    let before = [
        (PeerClosed, "peer_closed"),
        (TlsPlaintext, crate::tls::failure::PLAINTEXT),
        (TlsEof, crate::tls::failure::EOF),
        (TlsTimeout, crate::tls::failure::TIMEOUT),
        (ServerDrain, "server_drain"),
        (WsPeerClose, crate::server::session::ws::PEER_CLOSE),
        (MqttDisconnect, crate::server::session::mqtt::PEER_DISCONNECT),
        (MqttKeepalive, crate::server::session::mqtt::KEEPALIVE),
        (UpstreamFull, crate::server::broker::upstream::FULL),
        (UpstreamConnectionFull, crate::server::broker::upstream::CONN_FULL),
        (WorkerCrashed, crate::server::supervisor::view::WORKER_CRASHED),
        (TooManyCommands, crate::server::limits::command_rate::TOO_MANY_COMMANDS),
        (TooManyTopics, crate::server::tables::topics::TOO_MANY_TOPICS),
        (NotPermitted, crate::server::auth::gate::NOT_PERMITTED),
        (AuthOtherUser, crate::server::auth::gate::OTHER_USER),
        (AuthMissing, crate::server::auth::jwt::MISSING),
        (AuthExpired, crate::server::auth::jwt::EXPIRED),
        (AuthNotYetValid, crate::server::auth::jwt::NOT_YET_VALID),
        (AuthWrongAudience, crate::server::auth::jwt::WRONG_AUDIENCE),
        (AuthWrongIssuer, crate::server::auth::jwt::WRONG_ISSUER),
        (Mqtt(E::UnexpectedPacket), "mqtt_unexpected_packet"),
        (BadFrameTooLong, crate::proto::frame::FrameError::TooLong(9).kind_name()),
    ];
    for (c, name) in before {
        assert_eq!(c.as_str(), name, "{c:?}");
    }
}

/// What `session/ws.rs` computed from a reason's name before.
fn ws_code_before(reason: &str) -> u16 {
    let is_full = reason == "upstream_full" || reason == "upstream_connection_full";
    if reason == "ws_try_again_later" || is_full {
        1013
    } else {
        crate::proto::ws::frame::close_code(reason)
    }
}

/// Whether a reason is sent in a close frame only since MQTT over
/// WebSocket (no WebSocket connection ended so before it).
fn since_mqtt_over_websocket(c: Close) -> bool {
    matches!(c, Mqtt(_) | MqttWsText | WsMqttNotOffered)
}

#[test]
fn websocket_codes_are_the_ones_sent_before() {
    for c in ALL.iter().filter(|c| !since_mqtt_over_websocket(**c)) {
        assert_eq!(c.ws_code(), ws_code_before(c.as_str()), "{c:?}");
    }
    // MQTT over WebSocket: too large, the codec's other refusals, text,
    // and MQTT on a WebSocket that did not ask for it.
    assert_eq!(Mqtt(E::PacketTooLarge).ws_code(), 1009);
    assert_eq!(Mqtt(E::UnexpectedPacket).ws_code(), 1002);
    assert_eq!(MqttWsText.ws_code(), 1003);
    assert_eq!(WsMqttNotOffered.ws_code(), 1002);
    assert_eq!(MqttDisconnect.ws_code(), 1000);
    for (name, code) in
        [("ws_message_too_big", 1009), ("ws_inflate_too_big", 1009), ("ws_bad_utf8", 1007), ("ws_inflate_corrupt", 1007), ("ws_bad_close", 1002)]
    {
        assert_eq!(Ws(Violation(name)).ws_code(), code, "{name}");
    }
    assert_eq!(TooManyCommands.ws_code(), 1008);
    assert_eq!(UpstreamFull.ws_code(), 1013);
    assert_eq!(IdleTimeout.ws_code(), 1000);
}

/// What `worker.rs` tested a reason's name for before (`answered_refusal`).
fn lingered_before(reason: &str) -> bool {
    reason == "tls_plaintext"
        || reason == "server_drain"
        || reason.starts_with("ws_handshake")
        || reason.starts_with("auth_")
        || reason.starts_with("mqtt_")
        || reason == "upstream_full"
        || reason == "upstream_connection_full"
        || (reason.starts_with("http_") && reason != "http_connection_close")
}

#[test]
fn the_refusals_that_linger_are_the_ones_before() {
    for c in ALL.iter().filter(|c| **c != WsMqttNotOffered) {
        assert_eq!(c.lingers(), lingered_before(c.as_str()), "{c:?}");
    }
    // Its close frame answers a CONNECT the peer may still be sending.
    assert!(WsMqttNotOffered.lingers());
}

#[test]
fn mqtt_codes_are_the_ones_sent_before() {
    let before = [
        (Mqtt(E::UnexpectedPacket), Some(0x82)),
        (Mqtt(E::PacketTooLarge), Some(0x95)),
        (MqttPropertiesTooLarge, Some(0x95)),
        (MqttReceiveMaximumExceeded, Some(0x93)),
        (BadTopic, Some(0x90)),
        (NotPermitted, Some(0x87)),
        (MqttPayloadTooLarge, Some(0x95)),
        (MqttPublishQueueFull, Some(0x97)),
        (TooManyCommands, None),
        (SlowConsumer, None),
    ];
    for (c, code) in before {
        assert_eq!(c.mqtt_code(), code, "{c:?}");
    }
}

#[test]
fn io_errors_are_named_as_before_and_interned_once() {
    for code in [libc::ECONNRESET, libc::EPIPE, 113, 4242] {
        let e = io::Error::from_raw_os_error(code);
        assert_eq!(Close::io(&e).as_str(), crate::sys::error_kind_name(&e), "{code}");
    }
    let timeout = io::Error::from(io::ErrorKind::TimedOut);
    assert_eq!(Close::io(&timeout), Io("timeout"));
    use crate::tls::failure::TlsError;
    let plaintext: io::Error = TlsError::Plaintext.into();
    assert_eq!(Close::io(&plaintext), TlsPlaintext);
    let alert: io::Error = TlsError::Alert(rustls::AlertDescription::BadCertificate).into();
    assert_eq!(Close::io(&alert).as_str(), "tls_alert_bad_certificate");
    assert_eq!(Close::io(&io::Error::other("tls_alert_bad_certificate")).as_str(), "Other", "a string is not a TLS failure");
    let (a, b) = (intern("errno_4242".into()), intern("errno_4242".into()));
    assert!(std::ptr::eq(a, b), "the second one is found, not leaked again");
}

#[test]
fn a_peer_gone_during_its_handshake_counts_as_tls_eof() {
    assert_eq!(PeerClosed.handshake_failure(), TlsEof);
    assert_eq!(TlsTimeout.handshake_failure(), TlsTimeout);
}

#[test]
fn counting_adds_to_the_label() {
    let mut kinds = Kinds::new();
    count(&mut kinds, IdleTimeout);
    count(&mut kinds, IdleTimeout);
    count_n(&mut kinds, Io("ECONNRESET"), 3);
    assert_eq!(kinds.get("idle_timeout"), Some(&2));
    assert_eq!(kinds.get("ECONNRESET"), Some(&3));
}
