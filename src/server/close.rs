//! Why the server closed a connection, as one typed value.
//!
//! Every path that ends a connection (a session refusing what a peer
//! sent, a send the peer does not take, a timer, a drain) returns a
//! [`Close`]; the worker's `close` takes it. Control flow matches on the
//! enum (`matches!`, `==`), never on strings, and closing allocates
//! nothing: the counters are keyed by [`Close::as_str`], a `&'static str`
//! that is exactly the label `closed{reason}` has always had, so /stats,
//! /metrics, the docs and the tests read the same names as before.
//!
//! What each protocol tells its peer on the way out is here too, beside
//! the reason: [`Close::ws_code`] is the WebSocket close status, and
//! [`Close::mqtt_code`] the MQTT 5.0 reason code of the DISCONNECT sent
//! before the close.
//!
//! Two kinds of reason carry a name made by a lower layer: an I/O error
//! (`ECONNRESET`, `errno_113`, `timeout`) and a TLS failure
//! (`tls_alert_bad_certificate`, `tls_bad_message`). Known errnos are
//! named without allocating; any other name is interned once per process
//! (see [`intern`]) so the value stays `Copy`. A WebSocket violation
//! ([`Close::Ws`]) and a refused upgrade ([`Close::WsHandshake`]) carry the
//! name the wire-format module (shared with the client) gives them.

use crate::proto::mqtt::Error as MqttError;
use crate::proto::ws::frame::Violation;
use crate::stats::counters::Kinds;
use std::io;
use std::sync::Mutex;

/// Why the server closed a connection (the label of `closed{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // HttpConnectionClose, WsPeerClose: the protocols' own words
pub(crate) enum Close {
    // The transport.
    /// The peer closed its side (read returned 0).
    PeerClosed,
    /// A write took no byte.
    WriteZero,
    /// Unsent replies passed the connection's bound.
    SlowReader,
    /// Unsent pushes passed `--max-pending-bytes`.
    SlowConsumer,
    /// The socket could not be watched (io_uring: registering it failed).
    RegisterFailed,
    /// The socket could not be watched again after a read budget.
    RearmFailed,
    /// An I/O error, by name: "ECONNRESET", "errno_113", "timeout".
    Io(&'static str),
    /// A TLS failure named by the TLS layer ("tls_alert_<name>",
    /// "tls_bad_message", "tls_key_update_limit", ...).
    Tls(&'static str),
    /// Cleartext (an HTTP request) sent to a TLS port; answered, then closed.
    TlsPlaintext,
    /// The peer closed during its TLS handshake.
    TlsEof,

    // Timers.
    /// Silent past `--idle-timeout`.
    IdleTimeout,
    /// A request head not whole within `--header-timeout`.
    HeaderTimeout,
    /// No auth frame within the auth deadline (`--auth jwt`, framed).
    AuthTimeout,
    /// Readable but not read past the stall bound (a stalled connection).
    StallTimeout,
    /// The TLS handshake outlived `--handshake-timeout`.
    TlsTimeout,
    /// An MQTT client silent past 1.5 × its keep alive.
    MqttKeepalive,

    // The server's own ends.
    /// Told to go elsewhere by a drain (a GOAWAY, a 503 to a new request).
    ServerDrain,
    /// Still open when a drain's deadline passed.
    ServerDrained,
    /// Still open when the worker stopped.
    ServerStopped,
    /// Disconnected by the admin API.
    Disconnected,
    /// Lost with a worker that crashed (counted by the supervisor).
    WorkerCrashed,

    // Bounds and permissions.
    /// Past `--max-commands-per-sec`.
    TooManyCommands,
    /// Past the subscriptions one connection may hold.
    TooManySubscriptions,
    /// The worker holds `--max-topics` topics.
    TooManyTopics,
    /// The subscriber's identity created its share of the worker's MQTT
    /// wildcard filters or shared subscription names (`limits/identity.rs`).
    IdentityQuota,
    /// Not a megaconn topic.
    BadTopic,
    /// The token's topics claim or `--admin-topics` refuse the topic.
    NotPermitted,
    /// The worker's upstream queue is full (WebSocket close 1013).
    UpstreamFull,
    /// This connection's share of the upstream queue is full (1013).
    UpstreamConnectionFull,
    /// A publish to the application without `--upstream`.
    NoUpstream,

    // The framed protocol.
    /// A frame of length 0.
    BadFrameZeroLength,
    /// A frame longer than the protocol allows.
    BadFrameTooLong,
    /// A frame of a kind the protocol does not know.
    BadFrameUnknownKind,
    /// A frame of a kind a client may not send here.
    BadFrameUnexpectedKind,
    /// A publish frame cut short.
    BadFramePublish,
    /// A resume frame that does not decode.
    BadFrameResume,

    // HTTP.
    /// More pipelined than may wait behind a deferred reply.
    HttpPipelineOverflow,
    /// The reply to a request without keep-alive was sent.
    HttpConnectionClose,
    /// The business stage refused a request (503).
    Http503Rejected,
    /// A malformed request (400).
    Http400BadRequest,
    /// A method other than GET or HEAD (405).
    Http405Method,
    /// A request head past `--max-header-bytes` (431).
    Http431HeadersTooLarge,
    /// A request this server does not implement (501).
    Http501NotImplemented,

    // WebSocket.
    /// The peer's close frame, answered.
    WsPeerClose,
    /// The business stage's queue was full (close 1013).
    WsTryAgainLater,
    /// A protocol violation, named by the frame decoder.
    Ws(Violation),
    /// An Upgrade request refused (an HTTP error answered first).
    WsHandshake(&'static str),
    /// An MQTT CONNECT on a WebSocket that did not offer the `mqtt`
    /// subprotocol (close 1002: MQTT over WebSocket is negotiated).
    WsMqttNotOffered,
    /// A text message on MQTT over WebSocket (close 1003: MQTT 5.0 §6
    /// carries packets in binary messages only).
    MqttWsText,
    /// A client's publish (or will) to `$SYS`, which is the server's
    /// (MQTT-4.7.2-1): v5 0x87, refused; 3.1.1 dropped.
    MqttSysTopic,
    /// A 3.1.1 CONNECT whose keep-alive is 0 or past `--mqtt-max-keep-alive`
    /// (CONNACK 2, as mosquitto answers; a v5 client is told the server's
    /// keep-alive instead).
    MqttKeepAliveRefused,
    /// A v5 DISCONNECT giving a Session Expiry Interval to a session its
    /// CONNECT gave 0 (§3.14.2.2.2: a protocol error, 0x82).
    MqttSessionExpiryAfterZero,

    // Tokens (`--auth jwt`).
    /// No token.
    AuthMissing,
    /// The token expired (at connect, or later: closed at its exp).
    AuthExpired,
    /// Not a JWT.
    AuthMalformed,
    /// The JWKS has no key with the token's kid.
    AuthUnknownKey,
    /// sub, exp or topics missing or of the wrong type.
    AuthBadClaims,
    /// The signature does not match the key.
    AuthBadSignature,
    /// An algorithm the key does not allow.
    AuthBadAlgorithm,
    /// nbf in the future.
    AuthNotYetValid,
    /// aud is not `--jwt-audience`.
    AuthWrongAudience,
    /// iss is not `--jwt-issuer`.
    AuthWrongIssuer,
    /// A refreshed token of another user.
    AuthOtherUser,
    /// A token checked where auth is off.
    AuthOff,

    // MQTT.
    /// An MQTT connection without its state (a bug, never a peer).
    MqttNoState,
    /// The client's DISCONNECT.
    MqttDisconnect,
    /// A codec refusal (malformed or unexpected packet, bad CONNECT, ...).
    Mqtt(MqttError),
    /// A PUBLISH whose v5 properties to forward are past their bound
    /// (`proto::mqtt::forward::MAX_FORWARDED_BYTES`).
    MqttPropertiesTooLarge,
    /// More QoS 2 publishes in flight than the server's Receive Maximum.
    MqttReceiveMaximumExceeded,
    /// A PUBLISH past `--max-push-bytes`, not refusable in a PUBACK.
    MqttPayloadTooLarge,
    /// The worker's queue of client publishes is full.
    MqttPublishQueueFull,
    /// A CONNECT with an authentication method (enhanced auth).
    MqttAuthMethodUnsupported,
    /// A will whose topic is not a megaconn topic.
    MqttWillBadTopic,
    /// A will whose topic the token does not permit.
    MqttWillNotPermitted,
    /// A will past `--max-push-bytes`.
    MqttWillTooLarge,
    /// A newer CONNECT with the same client id took the session over.
    MqttSessionTakenOver,
    /// The supervisor refused the client id's claim (its bounds).
    MqttClientIdRefused,
    /// More than one packet's worth sent before the CONNACK arrived.
    MqttConnectUnansweredOverflow,
    /// `--mqtt-password-file`: a user name the file does not hold.
    MqttUnknownUser,
    /// `--mqtt-password-file`: the user's password did not match.
    MqttBadPassword,
    /// `--mqtt-password-file`: no user name, and no `--mqtt-allow-anonymous`.
    MqttAnonymousRefused,
    /// `--mqtt-acl-file`: a publish its client may not write (dropped as
    /// mosquitto drops it; 5.0 QoS 1 and 2 are told 0x87).
    MqttAclDenied,
    /// A reloaded `--mqtt-password-file` no longer holds the connection's user.
    MqttUserRemoved,
    /// `--mqtt-auth-http`: the backend refused the CONNECT (or could not
    /// say, failing closed).
    MqttAuthHttpRefused,
    /// `--mqtt-auth-http`: the backend refused a WebSocket Upgrade or an
    /// event-stream request (answered 403).
    AuthHttpRefused,
    /// `--mqtt-authz-http`: the backend refused a publish or a
    /// subscription (or could not say, failing closed): the publish
    /// dropped (5.0 QoS 1 and 2 told 0x87), the filter refused in SUBACK.
    MqttAuthzHttpDenied,
    /// `--mqtt-authz-http`: more than a packet's worth sent while a
    /// publish or subscription waited for the backend, or no answer came
    /// in time.
    MqttAuthzUnanswered,
}

impl Close {
    /// The reason's name: the label of `closed{reason}` (and of
    /// `tls_handshake_failures`, `auth_refused`, ...).
    pub(crate) fn as_str(self) -> &'static str {
        use Close::*;
        match self {
            PeerClosed => "peer_closed",
            WriteZero => "write_zero",
            SlowReader => "slow_reader",
            SlowConsumer => "slow_consumer",
            RegisterFailed => "register_failed",
            RearmFailed => "rearm_failed",
            Io(name) | Tls(name) | WsHandshake(name) => name,
            TlsPlaintext => crate::tls::failure::PLAINTEXT,
            TlsEof => crate::tls::failure::EOF,
            IdleTimeout => "idle_timeout",
            HeaderTimeout => "header_timeout",
            AuthTimeout => "auth_timeout",
            StallTimeout => "stall_timeout",
            TlsTimeout => crate::tls::failure::TIMEOUT,
            MqttKeepalive => "mqtt_keepalive_timeout",
            ServerDrain => "server_drain",
            ServerDrained => "server_drained",
            ServerStopped => "server_stopped",
            Disconnected => "disconnected",
            WorkerCrashed => "worker_crashed",
            TooManyCommands => "too_many_commands",
            TooManySubscriptions => "too_many_subscriptions",
            TooManyTopics => "too_many_topics",
            IdentityQuota => "identity_quota",
            BadTopic => "bad_topic",
            NotPermitted => "not_permitted",
            UpstreamFull => "upstream_full",
            UpstreamConnectionFull => "upstream_connection_full",
            NoUpstream => "no_upstream",
            BadFrameZeroLength => "bad_frame_zero_length",
            BadFrameTooLong => "bad_frame_too_long",
            BadFrameUnknownKind => "bad_frame_unknown_kind",
            BadFrameUnexpectedKind => "bad_frame_unexpected_kind",
            BadFramePublish => "bad_frame_publish",
            BadFrameResume => "bad_frame_resume",
            HttpPipelineOverflow => "http_pipeline_overflow",
            HttpConnectionClose => "http_connection_close",
            Http503Rejected => "http_503_rejected",
            Http400BadRequest => "http_400_bad_request",
            Http405Method => "http_405_method",
            Http431HeadersTooLarge => "http_431_headers_too_large",
            Http501NotImplemented => "http_501_not_implemented",
            WsPeerClose => "ws_peer_close",
            WsTryAgainLater => "ws_try_again_later",
            Ws(v) => v.0,
            WsMqttNotOffered => "ws_mqtt_not_offered",
            MqttWsText => "mqtt_ws_text",
            MqttSysTopic => "mqtt_sys_topic",
            MqttKeepAliveRefused => "mqtt_keep_alive_refused",
            MqttSessionExpiryAfterZero => "mqtt_session_expiry_after_zero",
            AuthMissing => "auth_missing",
            AuthExpired => "auth_expired",
            AuthMalformed => "auth_malformed",
            AuthUnknownKey => "auth_unknown_key",
            AuthBadClaims => "auth_bad_claims",
            AuthBadSignature => "auth_bad_signature",
            AuthBadAlgorithm => "auth_bad_algorithm",
            AuthNotYetValid => "auth_not_yet_valid",
            AuthWrongAudience => "auth_wrong_audience",
            AuthWrongIssuer => "auth_wrong_issuer",
            AuthOtherUser => "auth_other_user",
            AuthOff => "auth_off",
            MqttNoState => "mqtt_no_state",
            MqttDisconnect => "mqtt_disconnect",
            Mqtt(e) => e.as_str(),
            MqttPropertiesTooLarge => "mqtt_properties_too_large",
            MqttReceiveMaximumExceeded => "mqtt_receive_maximum_exceeded",
            MqttPayloadTooLarge => "mqtt_payload_too_large",
            MqttPublishQueueFull => "mqtt_publish_queue_full",
            MqttAuthMethodUnsupported => "mqtt_auth_method_unsupported",
            MqttWillBadTopic => "mqtt_will_bad_topic",
            MqttWillNotPermitted => "mqtt_will_not_permitted",
            MqttWillTooLarge => "mqtt_will_too_large",
            MqttSessionTakenOver => "mqtt_session_taken_over",
            MqttClientIdRefused => "mqtt_client_id_refused",
            MqttConnectUnansweredOverflow => "mqtt_connect_unanswered_overflow",
            MqttUnknownUser => "mqtt_unknown_user",
            MqttBadPassword => "mqtt_bad_password",
            MqttAnonymousRefused => "mqtt_anonymous_refused",
            MqttAclDenied => "mqtt_acl_denied",
            MqttUserRemoved => "mqtt_user_removed",
            MqttAuthHttpRefused => "mqtt_auth_http_refused",
            AuthHttpRefused => "auth_http_refused",
            MqttAuthzHttpDenied => "mqtt_authz_http_denied",
            MqttAuthzUnanswered => "mqtt_authz_unanswered",
        }
    }

    /// The WebSocket close status this reason is sent with: 1013 (try
    /// again later) for an overloaded business stage or upstream queue,
    /// the decoder's code for a violation (1002, 1007 bad UTF-8 or
    /// deflate data, 1009 too big), 1008 past the command rate; MQTT over
    /// WebSocket: 1009 for a packet too large, 1002 for the codec's other
    /// refusals, 1003 for a text message; else 1000.
    pub(crate) fn ws_code(self) -> u16 {
        use Close::*;
        match self {
            WsTryAgainLater | UpstreamFull | UpstreamConnectionFull => 1013,
            TooManyCommands => 1008,
            Ws(v) => v.close_code(),
            // Refused before any frame; named like a violation.
            WsHandshake(_) | WsPeerClose | WsMqttNotOffered => 1002,
            MqttWsText => 1003,
            Mqtt(MqttError::PacketTooLarge) => 1009,
            Mqtt(_) => 1002,
            _ => 1000,
        }
    }

    /// The MQTT 5.0 reason code of the DISCONNECT sent before this close
    /// (3.1.1 has none); `None` where the session closes without one.
    pub(crate) fn mqtt_code(self) -> Option<u8> {
        use Close::*;
        Some(match self {
            Mqtt(e) => e.reason_code(),
            MqttPropertiesTooLarge => 0x95,
            MqttReceiveMaximumExceeded => 0x93,
            BadTopic => 0x90,
            NotPermitted | MqttSysTopic | MqttAclDenied | MqttAuthzHttpDenied => 0x87,
            MqttUserRemoved => 0x98,
            MqttSessionExpiryAfterZero => 0x82,
            MqttPayloadTooLarge => 0x95,
            MqttPublishQueueFull | UpstreamFull | UpstreamConnectionFull => 0x97,
            _ => return None,
        })
    }

    /// Whether the close follows an answered refusal (an HTTP status, a
    /// CONNACK, a close frame for a refused upgrade): the peer may still
    /// be sending its request, so the socket lingers to let the answer
    /// arrive rather than be cut by a reset.
    pub(crate) fn lingers(self) -> bool {
        use Close::*;
        match self {
            TlsPlaintext | ServerDrain | WsHandshake(_) | UpstreamFull | UpstreamConnectionFull => true,
            HttpPipelineOverflow | Http503Rejected | Http400BadRequest | Http405Method | Http431HeadersTooLarge | Http501NotImplemented => true,
            AuthMissing | AuthExpired | AuthMalformed | AuthUnknownKey | AuthBadClaims | AuthBadSignature | AuthBadAlgorithm => true,
            AuthNotYetValid | AuthWrongAudience | AuthWrongIssuer | AuthOtherUser | AuthOff | AuthTimeout => true,
            MqttKeepalive | MqttNoState | MqttDisconnect | Mqtt(_) | MqttPropertiesTooLarge => true,
            MqttReceiveMaximumExceeded | MqttPayloadTooLarge | MqttPublishQueueFull | MqttAuthMethodUnsupported => true,
            MqttWillBadTopic | MqttWillNotPermitted | MqttWillTooLarge => true,
            MqttSessionTakenOver | MqttClientIdRefused | MqttConnectUnansweredOverflow => true,
            WsMqttNotOffered | MqttWsText => true,
            MqttSysTopic | MqttKeepAliveRefused | MqttSessionExpiryAfterZero => true,
            MqttUnknownUser | MqttBadPassword | MqttAnonymousRefused | MqttAclDenied | MqttUserRemoved | MqttAuthHttpRefused | AuthHttpRefused => true,
            MqttAuthzHttpDenied | MqttAuthzUnanswered => true,
            // Names made below: a TLS failure, an I/O error.
            Tls(_) | Io(_) => false,
            _ => false,
        }
    }

    /// An I/O error named the way operators grep for it (see
    /// [`crate::sys::error_kind_name`]); a known errno without allocating.
    pub(crate) fn io(e: &io::Error) -> Close {
        // The TLS layer's own failures travel as io errors carrying them.
        if let Some(t) = crate::tls::failure::TlsError::of(e) {
            return Close::tls(t);
        }
        match e.raw_os_error() {
            Some(code) => Close::Io(crate::sys::errno_static(code).unwrap_or_else(|| intern(crate::sys::errno_name(code)))),
            None if e.kind() == io::ErrorKind::TimedOut => Close::Io("timeout"),
            None => Close::Io(intern(format!("{:?}", e.kind()))),
        }
    }

    /// Why a send failed: `full` past its bound, else the socket's error.
    pub(crate) fn send(e: crate::net::SendError, full: Close) -> Close {
        match e {
            crate::net::SendError::Full => full,
            crate::net::SendError::WriteZero => Close::WriteZero,
            crate::net::SendError::Io(e) => Close::io(&e),
        }
    }

    /// A failure of the TLS layer, under its label ("tls_alert_...").
    pub(crate) fn tls(e: crate::tls::failure::TlsError) -> Close {
        match e {
            crate::tls::failure::TlsError::Plaintext => Close::TlsPlaintext,
            e => Close::Tls(intern(e.to_string())),
        }
    }

    /// What the worker counts when a TLS handshake ends this way: a peer
    /// gone mid-handshake is `tls_eof`, not `peer_closed`.
    pub(crate) fn handshake_failure(self) -> Close {
        match self {
            Close::PeerClosed => Close::TlsEof,
            other => other,
        }
    }
}

impl From<Violation> for Close {
    fn from(v: Violation) -> Close {
        Close::Ws(v)
    }
}

impl From<MqttError> for Close {
    fn from(e: MqttError) -> Close {
        Close::Mqtt(e)
    }
}

impl From<crate::proto::frame::FrameError> for Close {
    fn from(e: crate::proto::frame::FrameError) -> Close {
        use crate::proto::frame::FrameError;
        match e {
            FrameError::ZeroLength => Close::BadFrameZeroLength,
            FrameError::TooLong(_) => Close::BadFrameTooLong,
            FrameError::UnknownKind(_) => Close::BadFrameUnknownKind,
        }
    }
}

impl std::fmt::Display for Close {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Count one more `reason` in a by-reason counter, allocating its label
/// only the first time it is seen.
pub(crate) fn count(kinds: &mut Kinds, reason: Close) {
    count_n(kinds, reason, 1);
}

/// Count `n` more `reason`s (see [`count`]).
pub(crate) fn count_n(kinds: &mut Kinds, reason: Close, n: u64) {
    match kinds.get_mut(reason.as_str()) {
        Some(c) => *c += n,
        None => {
            kinds.insert(reason.as_str().to_owned(), n);
        }
    }
}

/// Most distinct names [`intern`] keeps: errnos, io error kinds and TLS
/// failures (alerts are a byte: at most 256 of them) are far fewer; a
/// name past the bound is counted as [`OVERFLOW`].
const MAX_INTERNED: usize = 1024;
/// The name of every failure past [`MAX_INTERNED`] distinct ones.
const OVERFLOW: &str = "error_other";

/// `name` as a `&'static str`: the first time a process meets it, it is
/// leaked once and kept; later it is found again, so the memory is bounded
/// by [`MAX_INTERNED`] names, whatever peers do.
pub(crate) fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    if names.len() >= MAX_INTERNED {
        return OVERFLOW;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.push(leaked);
    leaked
}

#[cfg(test)]
mod tests;
