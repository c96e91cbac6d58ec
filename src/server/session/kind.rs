//! What a connection's protocol means to the worker, answered in one
//! place (issue 64): the worker accepts, reads, writes and times
//! connections and asks here what each protocol wants — how a connection
//! opens, which pushes it takes and in what form, what it is told before
//! a close, how it drains, how large a reply may grow — instead of
//! matching protocols itself. Its one remaining match is the read path's
//! dispatch to the session files (`worker/serve.rs`). Adding a protocol
//! adds its answers here.

use super::ext::{self, ConnExt, Ext};
use super::mqtt::MqttConn;
use crate::proto::{goaway, Protocol};
use crate::server::services::Service;

/// How a connection is sent a push, when it takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushForm {
    /// A framed push (`proto/push.rs`).
    Framed,
    /// A JSON or binary WebSocket message (`session/ws.rs`).
    Ws,
    /// An event of its event stream (`session/sse.rs`).
    Sse,
    /// An MQTT PUBLISH (`worker/mqtt_out.rs`), on an MQTT port or over
    /// WebSocket: topic messages only.
    Mqtt,
    /// Nothing: echo, echo8, discard and HTTP requests take no push.
    None,
}

/// How connection of `protocol`'s port, with this protocol state (`mqtt`:
/// whether it has MQTT state), is sent a push.
pub(crate) fn push_form(protocol: Protocol, ext: &Ext, mqtt: bool) -> PushForm {
    if mqtt {
        return PushForm::Mqtt;
    }
    match (protocol, ext.as_deref()) {
        (_, Some(ConnExt::Sse(_))) => PushForm::Sse,
        (Protocol::Framed, _) => PushForm::Framed,
        (Protocol::Ws, _) => PushForm::Ws,
        _ => PushForm::None,
    }
}

/// Whether the connection takes pushes now: its protocol does, and it
/// finished its handshake, showed its token, had its CONNECT accepted.
pub(crate) fn takes_pushes(protocol: Protocol, ext: &Ext, mqtt: Option<&MqttConn>) -> bool {
    push_form(protocol, ext, mqtt.is_some()) != PushForm::None && ext::takes_pushes(ext, mqtt)
}

/// What a connection accepted on a port of `protocol` starts with.
pub(crate) struct Opening {
    /// Its protocol state from the start (a WebSocket handshake to wait
    /// for, a token owed).
    pub ext: Ext,
    /// MQTT state, made at the accept and gone with the connection.
    pub mqtt: Option<MqttConn>,
    /// Its first bytes are timed (`worker/heads.rs`): an Upgrade, a
    /// CONNECT, a token.
    pub owes_head: bool,
    /// Broadcasts wait for its first read (`worker/seam.rs`).
    pub waits_first_read: bool,
}

/// How a connection of `protocol` opens (`auth`: `--auth jwt`, tokens
/// owed by connections that subscribe; `tls`: a TLS port).
pub(crate) fn opening(protocol: Protocol, auth: bool, tls: bool, now_ds: u32) -> Opening {
    // Only connections that subscribe owe a token.
    let gated = auth && matches!(protocol, Protocol::Framed | Protocol::Ws | Protocol::Mqtt);
    let (ext, mqtt) = match protocol {
        Protocol::Ws => (super::ws::fresh(now_ds), None),
        // The token comes in the CONNECT.
        Protocol::Mqtt => (None, Some(MqttConn::fresh())),
        _ if gated => (Some(Box::new(ConnExt::Unauthenticated)), None),
        _ => (None, None),
    };
    Opening {
        ext,
        mqtt,
        owes_head: gated || matches!(protocol, Protocol::Ws | Protocol::Mqtt),
        // Not one that owes its token: it takes no broadcast before it, so
        // nothing held can reach it after; nor TLS (none before its
        // handshake ends).
        waits_first_read: protocol == Protocol::Framed && !tls && !auth,
    }
}

/// Write what a connection is told before the application closes it
/// (`code`, `reason`): a WebSocket close frame once it is upgraded (an
/// MQTT client over WebSocket too); nothing for the others.
pub(crate) fn farewell(out: &mut Vec<u8>, protocol: Protocol, ext: &Ext, mqtt: Option<&MqttConn>, code: u16, reason: &[u8]) {
    if protocol == Protocol::Ws && ext::takes_pushes(ext, mqtt) {
        crate::proto::ws::frame::encode_close_reason(out, code, reason, None);
    }
}

/// Whether a connection of `protocol` is answered with what it sent
/// (echo; discard reads and drops).
pub(crate) fn echoes(protocol: Protocol) -> bool {
    protocol == Protocol::Echo
}

/// Whether connections of `protocol` live long enough to be spread over
/// a drain period (request/response protocols finish what is in flight
/// and close).
pub(crate) fn spreads(protocol: Protocol) -> bool {
    matches!(protocol, Protocol::Framed | Protocol::Ws | Protocol::Mqtt)
}

/// Whether this connection is closed in its turn of a drain: a
/// long-lived one, or an event stream on an HTTP port.
pub(crate) fn drains_in_turn(protocol: Protocol, ext: &Ext) -> bool {
    spreads(protocol) || matches!(ext.as_deref(), Some(ConnExt::Sse(_)))
}

/// Write the drain hint a connection understands (`goaway.rs`): its
/// event stream's retry, MQTT's DISCONNECT (in a binary message over
/// WebSocket; none before the CONNACK, when no packet may come first),
/// a WebSocket close, a framed GOAWAY; nothing for the others.
pub(crate) fn goaway(out: &mut Vec<u8>, protocol: Protocol, ext: &Ext, mqtt: Option<&MqttConn>, retry_ms: u32) {
    if matches!(ext.as_deref(), Some(ConnExt::Sse(_))) {
        goaway::write_sse(out, retry_ms);
    } else if let Some(m) = mqtt {
        if let Some(version) = m.version.filter(|_| !m.connecting()) {
            goaway::write_mqtt(out, version, retry_ms, m.max_in());
        }
        if protocol == Protocol::Ws {
            if !out.is_empty() {
                super::mqtt_ws::wrap(out, 0);
            }
            goaway::write_ws(out, retry_ms);
        }
    } else if protocol == Protocol::Ws && !ext::ws_handshaking(ext) {
        goaway::write_ws(out, retry_ms);
    } else if protocol == Protocol::Framed {
        goaway::write_framed(out, retry_ms);
    }
}

/// The bound on a connection's unsent replies (see
/// [`crate::net::reply_cap`]): room for the largest single reply a
/// connection of `protocol` may be given, as the wire carries it (sealed
/// on a TLS port). A WebSocket echo is as large as the largest message
/// accepted (`--max-message-bytes`, framing included); an HTTP answer
/// carries the `--body-size` body (its head fits in the reply's slack);
/// framed replies (4 KiB at most), the echo protocol's (what one read
/// brings) and MQTT's acks are small (a PUBLISH is a push, which this
/// does not bound).
pub(crate) fn reply_cap(protocol: Protocol, ws: &super::ws::WsConfig, http_body: usize, tls: bool) -> usize {
    let largest = match protocol {
        Protocol::Ws => ws.largest_echo(),
        Protocol::Http => http_body,
        _ => 0,
    };
    crate::net::reply_cap(if tls { crate::tls::records::sealed_len_bound(largest) } else { largest })
}

/// Whether a TLS port of `protocol` answers a cleartext request (with a
/// redirect or a refusal) rather than closing at once.
pub(crate) fn answers_cleartext(protocol: Protocol) -> bool {
    matches!(protocol, Protocol::Http | Protocol::Ws)
}

/// Whether requests pipelined behind a reply are parsed once it is sent.
pub(crate) fn pipelines(protocol: Protocol) -> bool {
    protocol == Protocol::Http
}

/// Whether an MQTT connection of this port speaks over WebSocket (binary
/// messages carry its packets).
pub(crate) fn mqtt_over_ws(protocol: Protocol) -> bool {
    protocol == Protocol::Ws
}

/// What a worker serving `services` needs beside its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Needs {
    /// Framed pushes to encode.
    pub framed_pushes: bool,
    /// WebSocket messages to encode (and presence notices to send, and a
    /// deflate codec if asked for).
    pub ws_pushes: bool,
    /// Every entry speaks MQTT: a push is a PUBLISH and nothing else.
    pub mqtt_only: bool,
    /// MQTT keep-alive to sweep (MQTT ports, and MQTT over WebSocket).
    pub keepalive: bool,
    /// HTTP heads to time and a Date header to keep.
    pub http: bool,
}

impl Needs {
    pub(crate) fn of(services: &[Service]) -> Needs {
        let serves = |p: Protocol| services.iter().any(|s| s.protocol == p);
        Needs {
            framed_pushes: serves(Protocol::Framed),
            ws_pushes: serves(Protocol::Ws),
            mqtt_only: !services.is_empty() && services.iter().all(|s| s.protocol == Protocol::Mqtt),
            keepalive: serves(Protocol::Mqtt) || serves(Protocol::Ws),
            http: serves(Protocol::Http),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(protocol: Protocol) -> Service {
        Service { protocol, tls: false, ports: vec![1] }
    }

    #[test]
    fn pushes_go_to_framed_ws_sse_and_mqtt_connections_only() {
        let sse: Ext = Some(Box::new(ConnExt::Sse(Default::default())));
        assert_eq!(push_form(Protocol::Framed, &None, false), PushForm::Framed);
        assert_eq!(push_form(Protocol::Ws, &None, false), PushForm::Ws);
        assert_eq!(push_form(Protocol::Ws, &None, true), PushForm::Mqtt);
        assert_eq!(push_form(Protocol::Mqtt, &None, true), PushForm::Mqtt);
        assert_eq!(push_form(Protocol::Http, &sse, false), PushForm::Sse);
        assert_eq!(push_form(Protocol::Ws, &sse, false), PushForm::Sse);
        for p in [Protocol::Http, Protocol::Echo, Protocol::Echo8, Protocol::Discard] {
            assert_eq!(push_form(p, &None, false), PushForm::None, "{p:?}");
            assert!(!takes_pushes(p, &None, None), "{p:?}");
        }
        // A WebSocket connection still in its handshake takes none yet.
        assert!(!takes_pushes(Protocol::Ws, &super::super::ws::fresh(1), None));
        assert!(takes_pushes(Protocol::Ws, &None, None));
    }

    #[test]
    fn an_opening_owes_what_its_protocol_and_auth_say() {
        let ws = opening(Protocol::Ws, false, false, 1);
        assert!(ws.owes_head && ws.mqtt.is_none() && ext::ws_handshaking(&ws.ext) && !ws.waits_first_read);
        let mqtt = opening(Protocol::Mqtt, false, false, 1);
        assert!(mqtt.owes_head && mqtt.mqtt.is_some() && mqtt.ext.is_none());
        let framed = opening(Protocol::Framed, false, false, 1);
        assert!(!framed.owes_head && framed.waits_first_read && framed.ext.is_none());
        assert!(!opening(Protocol::Framed, false, true, 1).waits_first_read, "not on TLS");
        let gated = opening(Protocol::Framed, true, false, 1);
        assert!(gated.owes_head && ext::awaiting_auth(&gated.ext) && !gated.waits_first_read);
        let http = opening(Protocol::Http, true, false, 1);
        assert!(!http.owes_head && http.ext.is_none(), "HTTP requests owe no token");
    }

    #[test]
    fn hints_and_farewells_are_each_protocols_own() {
        let mut out = Vec::new();
        goaway(&mut out, Protocol::Framed, &None, None, 100);
        assert!(!out.is_empty());
        let framed = std::mem::take(&mut out);
        goaway(&mut out, Protocol::Ws, &None, None, 100);
        assert!(!out.is_empty() && out != framed);
        out.clear();
        goaway(&mut out, Protocol::Ws, &super::super::ws::fresh(1), None, 100);
        assert!(out.is_empty(), "no hint before the Upgrade");
        goaway(&mut out, Protocol::Http, &None, None, 100);
        assert!(out.is_empty(), "HTTP requests finish instead");
        // An MQTT client whose CONNECT is unanswered gets no packet.
        goaway(&mut out, Protocol::Mqtt, &None, Some(&MqttConn::fresh()), 100);
        assert!(out.is_empty());
        farewell(&mut out, Protocol::Framed, &None, None, 4000, b"bye");
        assert!(out.is_empty());
        farewell(&mut out, Protocol::Ws, &None, None, 4000, b"bye");
        assert_eq!(&out[..2], &[0x88, 5], "a close frame: code and reason");
    }

    #[test]
    fn needs_follow_the_entries() {
        let mqtt = Needs::of(&[service(Protocol::Mqtt)]);
        assert!(mqtt.mqtt_only && mqtt.keepalive && !mqtt.framed_pushes && !mqtt.http);
        let mixed = Needs::of(&[service(Protocol::Mqtt), service(Protocol::Http), service(Protocol::Framed)]);
        assert!(!mixed.mqtt_only && mixed.http && mixed.framed_pushes && !mixed.ws_pushes);
        assert!(Needs::of(&[service(Protocol::Ws)]).keepalive, "MQTT over WebSocket keeps alive");
    }

    fn ws(max_message: usize) -> super::super::ws::WsConfig {
        use super::super::ws;
        ws::WsConfig { max_message, max_head: 8192, push_format: ws::PushFormat::Text, deflate: Default::default() }
    }

    /// Finding 15 of issue 42: a ws server accepting 16 MiB messages
    /// bounded their echoes at 256 KiB and closed the peers reading them
    /// `slow_reader`. Its bound now holds the whole echo (ciphertext over
    /// TLS); every default keeps the 256 KiB of README's bounds table.
    #[test]
    fn the_reply_bound_holds_the_largest_reply_and_defaults_keep_256_kib() {
        use crate::net;
        let default_ws = ws(super::super::ws::DEFAULT_MAX_MESSAGE);
        for protocol in [Protocol::Framed, Protocol::Echo, Protocol::Echo8, Protocol::Http, Protocol::Ws] {
            for tls in [false, true] {
                assert_eq!(reply_cap(protocol, &default_ws, 12, tls), net::MAX_BACKLOG, "{protocol:?} tls {tls}");
            }
        }
        let big = ws(16 << 20);
        let plain = reply_cap(Protocol::Ws, &big, 12, false);
        assert_eq!(plain, big.largest_echo() + net::REPLY_SLACK);
        let sealed = reply_cap(Protocol::Ws, &big, 12, true);
        assert_eq!(sealed, crate::tls::records::sealed_len_bound(big.largest_echo()) + net::REPLY_SLACK);
        assert!(sealed > plain);
        assert_eq!(reply_cap(Protocol::Framed, &big, 12, false), net::MAX_BACKLOG, "only the ws protocol answers with messages");
        assert_eq!(reply_cap(Protocol::Http, &default_ws, 4 << 20, false), (4 << 20) + net::REPLY_SLACK);
    }
}
