//! A connection's protocol state while it has some, behind one pointer
//! in the worker's connection record (`worker/conn.rs`): an HTTP request
//! half-read or a reply pending, a WebSocket handshake not yet done or a
//! message still in fragments, an event stream, a framed connection that
//! owes its token. The sessions own what is inside; the worker keeps the
//! box.
use crate::proto::ws::frame::Fragments;
use crate::server::session::http::HttpConn;

/// Boxed protocol state: one pointer, null for every idle connection.
pub(crate) type Ext = Option<Box<ConnExt>>;

pub(crate) enum ConnExt {
    Http(HttpConn),
    Ws(WsConn),
    /// A Server-Sent Events stream on a WebSocket port.
    Sse(super::sse::SseConn),
    /// A framed connection that has not shown its token yet (`--auth
    /// jwt`). It gets no push until it has.
    Unauthenticated,
}

/// Whether a connection still owes its token.
pub(crate) fn awaiting_auth(ext: &Ext) -> bool {
    matches!(ext.as_deref(), Some(ConnExt::Unauthenticated))
}

/// Whether a connection may get pushes: it finished its WebSocket
/// handshake and showed its token, if it owes them (an MQTT connection,
/// `mqtt` its state in the worker's table: its CONNECT was accepted).
pub(crate) fn takes_pushes(ext: &Ext, mqtt: Option<&super::mqtt::MqttConn>) -> bool {
    !ws_handshaking(ext) && !awaiting_auth(ext) && !super::mqtt::connecting(mqtt)
}

/// The event-stream state inside an [`Ext`], if any.
pub(crate) fn sse_mut(ext: &mut Ext) -> Option<&mut super::sse::SseConn> {
    match ext.as_deref_mut() {
        Some(ConnExt::Sse(s)) => Some(s),
        _ => None,
    }
}

/// A WebSocket connection's state while it has some.
#[derive(Debug, Default)]
pub(crate) struct WsConn {
    /// Worker-relative time (100 ms units) the connection began waiting
    /// for its Upgrade request; 0 once upgraded.
    pub handshake_since_ds: u32,
    pub frag: Option<Box<Fragments>>,
    /// `--mqtt-auth-http`: the Upgrade (or event-stream request) asked of
    /// the backend, waiting in the partial input ([`HookWait`]).
    pub hook: HookWait,
}

/// Where a held request is with the `--mqtt-auth-http` backend.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookWait {
    /// Not asked (or no hook).
    #[default]
    No,
    Asked,
    Allowed,
}

/// What the `--mqtt-auth-http` backend is asked about a request whose
/// head is `head`: its headers (lower-case names; a repeated one joined
/// with ", "), a Basic `Authorization`'s user name and password. The peer
/// address is the worker's to fill in.
pub(crate) fn hook_ask(key: usize, gen: u32, events: bool, head: &[u8]) -> crate::server::commands::UpgradeAsk {
    let mut raw = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut raw);
    let _ = req.parse(head);
    let mut headers = std::collections::BTreeMap::<String, String>::new();
    for h in req.headers.iter().filter(|h| !h.name.is_empty()) {
        let v = String::from_utf8_lossy(h.value).into_owned();
        headers.entry(h.name.to_ascii_lowercase()).and_modify(|old| *old = format!("{old}, {v}")).or_insert(v);
    }
    let (username, password) = headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("Basic ").or_else(|| a.strip_prefix("basic ")))
        .and_then(|b| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(b.trim()).ok()
        })
        .and_then(|d| String::from_utf8(d).ok())
        .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_string(), p.to_string())))
        .unwrap_or_default();
    crate::server::commands::UpgradeAsk {
        conn: crate::server::commands::conn_id(0, key, gen),
        protocol: if events { "sse" } else { "ws" }.into(),
        username,
        password,
        peerhost: String::new(),
        headers,
    }
}

/// The HTTP state inside an [`Ext`].
pub(crate) trait HttpExt {
    fn http(&self) -> Option<&HttpConn>;
    fn http_mut(&mut self) -> Option<&mut HttpConn>;
    fn http_or_default(&mut self) -> &mut HttpConn;
}

impl HttpExt for Ext {
    fn http(&self) -> Option<&HttpConn> {
        match self.as_deref() {
            Some(ConnExt::Http(h)) => Some(h),
            _ => None,
        }
    }

    fn http_mut(&mut self) -> Option<&mut HttpConn> {
        match self.as_deref_mut() {
            Some(ConnExt::Http(h)) => Some(h),
            _ => None,
        }
    }

    fn http_or_default(&mut self) -> &mut HttpConn {
        if self.http().is_none() {
            *self = Some(Box::new(ConnExt::Http(HttpConn::default())));
        }
        self.http_mut().expect("just set")
    }
}

/// The WebSocket state inside an [`Ext`], if any.
pub(crate) fn ws_mut(ext: &mut Ext) -> Option<&mut WsConn> {
    match ext.as_deref_mut() {
        Some(ConnExt::Ws(w)) => Some(w),
        _ => None,
    }
}

/// Whether a WebSocket connection still waits for its Upgrade request.
pub(crate) fn ws_handshaking(ext: &Ext) -> bool {
    matches!(ext.as_deref(), Some(ConnExt::Ws(w)) if w.handshake_since_ds != 0)
}
