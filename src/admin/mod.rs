//! The admin HTTP API, served by the server's supervisor (loopback by
//! default): `/metrics` (Prometheus/OpenMetrics), `/stats` (JSON),
//! `/healthz` (no token needed: probes), `/connections`, and `POST /publish?topic=T`, `/broadcast`,
//! `/push/{id}`, `/push` (batch: one `id payload` per line).
//!
//! HTTP parsing is tiny_http's; each request is validated here (route,
//! token, body size, topic syntax, ids) and then handed to the supervisor
//! loop as an [`Request`] on the same channel the workers report on, so
//! one thread owns every worker pipe. The handler waits for the loop's
//! [`Response`] (a publish answers once every worker has written it).
pub mod client;
pub mod route;

use crate::supervise::Sink;
use anyhow::{anyhow, Result};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

pub use route::Request as Route;

/// Largest request body accepted (a `/push` batch); larger gets 413.
pub const MAX_BODY: usize = 1 << 20;
/// Admin requests handled at once; more get 503.
const MAX_IN_FLIGHT: usize = 64;
/// Longest a request waits for the supervisor (a 1M broadcast takes ~10 s).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// What the supervisor answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn json(status: u16, v: &serde_json::Value) -> Response {
        Response { status, content_type: "application/json", body: v.to_string() + "\n" }
    }

    /// A 4xx/5xx with a one-line reason.
    pub fn error(status: u16, reason: impl Into<String>) -> Response {
        Response::json(status, &serde_json::json!({ "error": reason.into() }))
    }
}

/// A validated admin request on its way to the supervisor loop.
#[derive(Debug)]
pub struct Request {
    pub route: Route,
    pub reply: SyncSender<Response>,
}

/// Whether `addr` may serve without a token.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Check the admin settings before anything starts (usage errors).
pub fn check(addr: &SocketAddr, token: Option<&str>) -> Result<(), String> {
    if !is_loopback(addr) && token.is_none_or(str::is_empty) {
        return Err(format!(
            "--admin {addr} is not a loopback address: anyone who reaches it could publish to every connection. \
             Give --admin-token TOKEN (requests then need 'Authorization: Bearer TOKEN'), or use --admin 127.0.0.1:9100"
        ));
    }
    Ok(())
}

/// What an admin API lets a caller do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The server's whole API: read, publish, push.
    Full,
    /// /metrics, /stats and /healthz only (a load generator's).
    ReadOnly,
}

/// Start serving; every parsed request goes to `sink` with a reply
/// channel. Returns the address actually bound (port 0 resolved).
pub fn serve(scope: Scope, addr: SocketAddr, token: Option<String>, sink: Sink<Request>) -> Result<SocketAddr> {
    let server =
        tiny_http::Server::http(addr).map_err(|e| anyhow!("cannot serve the admin API on {addr}: {e} (choose another --admin port, or --admin off)"))?;
    let bound = server.server_addr().to_ip().ok_or_else(|| anyhow!("admin API bound to a non-IP address"))?;
    let server = Arc::new(server);
    let in_flight = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("admin".into()).spawn(move || {
        for req in server.incoming_requests() {
            if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::SeqCst);
                respond(req, Response::error(503, "too many admin requests at once; retry"));
                continue;
            }
            let (sink, token, in_flight) = (sink.clone(), token.clone(), in_flight.clone());
            let spawned = std::thread::Builder::new().name("admin-req".into()).stack_size(256 * 1024).spawn(move || {
                handle(scope, req, token.as_deref(), &sink);
                in_flight.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                eprintln!("megaconn: admin: cannot start a request thread");
            }
        }
    })?;
    Ok(bound)
}

fn handle(scope: Scope, mut req: tiny_http::Request, token: Option<&str>, sink: &Sink<Request>) {
    // GET /healthz answers without the token: orchestrators' probes
    // (Kubernetes httpGet) cannot carry a secret, and it tells only
    // whether the node serves and why not.
    let probe = req.method() == &tiny_http::Method::Get && req.url() == "/healthz";
    if let Some(t) = token.filter(|_| !probe) {
        let ok = req.headers().iter().any(|h| h.field.equiv("Authorization") && h.value.as_str() == format!("Bearer {t}"));
        if !ok {
            return respond(req, Response::error(401, "missing or wrong 'Authorization: Bearer <token>' (see --admin-token)"));
        }
    }
    let mut body = Vec::new();
    if let Err(e) = req.as_reader().take(MAX_BODY as u64 + 1).read_to_end(&mut body) {
        return respond(req, Response::error(400, format!("cannot read the request body: {e}")));
    }
    if body.len() > MAX_BODY {
        return respond(req, Response::error(413, format!("body over {MAX_BODY} bytes")));
    }
    let method = req.method().as_str().to_string();
    let route = match route::parse(&method, req.url(), body) {
        Ok(r) => r,
        Err(resp) => return respond(req, resp),
    };
    if scope == Scope::ReadOnly && !matches!(route, Route::Metrics | Route::Stats | Route::Healthz) {
        return respond(req, Response::error(404, "a client serves /metrics, /stats and /healthz only"));
    }
    let (reply, answer) = std::sync::mpsc::sync_channel(1);
    if !sink(Request { route, reply }) {
        return respond(req, Response::error(503, "the server is stopping"));
    }
    let resp = answer.recv_timeout(REPLY_TIMEOUT).unwrap_or_else(|_| Response::error(504, "the server did not answer in time"));
    respond(req, resp);
}

fn respond(req: tiny_http::Request, r: Response) {
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], r.content_type.as_bytes()).expect("valid header");
    // A plain Content-Length body (no chunking): simple clients read it.
    let resp = tiny_http::Response::from_string(r.body).with_status_code(r.status).with_header(header).with_chunked_threshold(usize::MAX);
    let _ = req.respond(resp);
}
