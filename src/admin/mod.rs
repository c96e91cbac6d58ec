//! The admin HTTP API, served by the server's supervisor (loopback by
//! default): `/metrics` (Prometheus/OpenMetrics), `/stats` (JSON),
//! `/healthz` (no token needed: probes), `/ui` (the live dashboard,
//! [`ui`]), `/connections`, and `POST /publish?topic=T`, `/broadcast`,
//! `/push/{id}`, `/push` (batch: one `id payload` per line).
//!
//! HTTP is hyper's (src/admin/http.rs), with every bound a public port
//! needs: a header deadline, head and body size limits, a cap on admin
//! connections (the oldest idle one is closed to make room), no thread
//! per connection. Each request is checked here (token, cross-site and
//! rebinding guards in [`guard`], route, body size, topic syntax, ids) and
//! then handed to the supervisor loop as a [`Request`] on the same channel
//! the workers report on, so one thread owns every worker pipe. The
//! handler waits for the loop's [`Response`] (a publish answers once every
//! worker has taken it).
pub(crate) mod client;
pub(crate) mod guard;
mod http;
pub(crate) mod route;
pub(crate) mod ui;

pub(crate) use guard::Token;
pub(crate) use http::serve;
pub(crate) use route::Request as Route;

use std::net::SocketAddr;
use std::time::Duration;

crate::counters! {
    /// What the admin API answered and whom it turned away: a flood or a
    /// probing web page shows here (`/stats` "admin", `/metrics`).
    pub(crate) struct AdminCounters {
        requests: by("status") "admin_requests" "Admin API answers, by HTTP status (401 no token, 403 cross-site or rebinding, 408/413 body, 503 busy, ...)",
        connections_evicted: counter "admin_connections_evicted" "Idle admin connections closed to make room at the cap",
        connections_refused: counter "admin_connections_refused" "Admin connections closed at once: every one at the cap was inside a request",
    }
}

/// The admin API's counters, shared with whoever reports them.
pub(crate) type AdminStats = std::sync::Arc<std::sync::Mutex<AdminCounters>>;

/// Largest request body accepted (a `/push` batch); larger gets 413.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// Admin requests waiting for the supervisor at once; more get 503
/// (`GET /healthz` is not counted: probes always get through).
pub(crate) const MAX_IN_FLIGHT: usize = 64;
/// Admin connections held at once; a new one beyond closes the one idle
/// the longest (or is closed itself when all are busy).
pub(crate) const MAX_CONNECTIONS: usize = 512;
/// Largest request head (request line and headers); larger gets 431.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Longest a connection may take to send a request head, idle
/// keep-alive included.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a request body may take to arrive.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a request waits for the supervisor (a 1M broadcast takes ~10 s).
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// What the supervisor answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub(crate) fn json(status: u16, v: &serde_json::Value) -> Response {
        Response { status, content_type: "application/json", body: v.to_string() + "\n" }
    }

    /// A 4xx/5xx with a one-line reason.
    pub(crate) fn error(status: u16, reason: impl Into<String>) -> Response {
        Response::json(status, &serde_json::json!({ "error": reason.into() }))
    }
}

/// A validated admin request on its way to the supervisor loop.
#[derive(Debug)]
pub(crate) struct Request {
    pub route: Route,
    pub reply: Reply,
}

/// Where the supervisor sends a request's answer (never blocks it).
pub(crate) type Reply = tokio::sync::oneshot::Sender<Response>;

/// Whether `addr` may serve without a token.
pub(crate) fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Check the admin settings before anything starts (usage errors).
pub(crate) fn check(addr: &SocketAddr, token: Option<&Token>) -> Result<(), String> {
    if !is_loopback(addr) && token.is_none() {
        return Err(format!(
            "--admin {addr} is not a loopback address: anyone who reaches it could publish to every connection. \
             Give a token with --admin-token-file FILE or MEGACONN_ADMIN_TOKEN (requests then need 'Authorization: Bearer TOKEN'), or use --admin 127.0.0.1:9100"
        ));
    }
    Ok(())
}

/// What an admin API lets a caller do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The server's whole API: read, publish, push.
    Full,
    /// /metrics, /stats and /healthz only (a load generator's).
    ReadOnly,
}
