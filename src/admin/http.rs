//! The admin API's HTTP server: hyper on one thread of its own (a
//! current-thread tokio runtime), so an admin connection costs a task
//! and hyper's buffers, never a thread. Bounds, all in [`super`]:
//! [`MAX_HEAD`] and [`HEAD_TIMEOUT`] for a request head (idle keep-alive
//! included), [`MAX_BODY`] and [`BODY_TIMEOUT`] for a body, read only once
//! the head passed the [`guard`] checks; [`MAX_CONNECTIONS`] admin
//! connections, a new one beyond closing the one idle the longest (a
//! flood of idle sockets cannot lock a probe out); [`MAX_IN_FLIGHT`]
//! requests waiting for the supervisor, `/healthz` not counted.

use super::{guard, route, AdminStats, Request, Response, Route, Scope, Token};
use super::{BODY_TIMEOUT, HEAD_TIMEOUT, MAX_BODY, MAX_CONNECTIONS, MAX_HEAD, MAX_IN_FLIGHT, REPLY_TIMEOUT};
use crate::supervise::Sink;
use anyhow::{anyhow, Result};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Start serving on a thread of its own; every checked request goes to
/// `sink` with a reply channel, and what it answers is counted in
/// `stats`. Returns the address actually bound (port 0 resolved).
pub(crate) fn serve(scope: Scope, addr: SocketAddr, token: Option<Token>, sink: Sink<Request>, stats: AdminStats) -> Result<SocketAddr> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| anyhow!("cannot serve the admin API on {addr}: {e} (choose another --admin port, or --admin off)"))?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let ctx = Arc::new(Ctx { scope, token, sink, in_flight: AtomicUsize::new(0), conns: Mutex::new(Conns::default()), stats });
    std::thread::Builder::new().name("admin".into()).spawn(move || rt.block_on(accept(listener, ctx)))?;
    Ok(bound)
}

struct Ctx {
    scope: Scope,
    token: Option<Token>,
    sink: Sink<Request>,
    in_flight: AtomicUsize,
    conns: Mutex<Conns>,
    stats: AdminStats,
}

/// The admin connections open now.
#[derive(Default)]
struct Conns {
    slots: slab::Slab<Slot>,
    /// Slots not yet told to close.
    live: usize,
    /// Idle connections closed to make room; new ones closed at once.
    evicted: u64,
    refused: u64,
}

struct Slot {
    /// Inside a request (never evicted).
    busy: bool,
    /// When it last became idle (or opened).
    since: Instant,
    /// Closes the connection; taken when it is evicted.
    close: Option<oneshot::Sender<()>>,
}

impl Conns {
    /// Admit a new connection, closing the one idle the longest when at
    /// the cap; None when every connection is inside a request.
    fn admit(&mut self, close: oneshot::Sender<()>) -> Option<usize> {
        if self.live >= MAX_CONNECTIONS {
            let Some((oldest, _)) = self.slots.iter().filter(|(_, s)| !s.busy && s.close.is_some()).min_by_key(|(_, s)| s.since) else {
                self.refused += 1;
                return None;
            };
            self.evicted += 1;
            if let Some(tx) = self.slots[oldest].close.take() {
                let _ = tx.send(());
            }
            self.live -= 1;
        }
        self.live += 1;
        Some(self.slots.insert(Slot { busy: false, since: Instant::now(), close: Some(close) }))
    }

    fn remove(&mut self, key: usize) {
        if self.slots.remove(key).close.is_some() {
            self.live -= 1;
        }
    }

    fn set_busy(&mut self, key: usize, busy: bool) {
        if let Some(s) = self.slots.get_mut(key) {
            s.busy = busy;
            s.since = Instant::now();
        }
    }
}

async fn accept(listener: std::net::TcpListener, ctx: Arc<Ctx>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return eprintln!("megaconn: admin: cannot serve: {e}"),
    };
    let mut warned = false;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors or memory: wait for some to free up.
                if !std::mem::replace(&mut warned, true) {
                    eprintln!("megaconn: admin: accept failed: {e}; retrying every 100 ms (megaconn tune shows the fd limits)");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (close, closed) = oneshot::channel();
        let admitted = {
            let mut conns = ctx.conns.lock().expect("admin connections");
            let key = conns.admit(close);
            let mut stats = ctx.stats.lock().expect("admin stats");
            (stats.connections_evicted, stats.connections_refused) = (conns.evicted, conns.refused);
            key
        };
        let Some(key) = admitted else { continue };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let svc = {
                let ctx = ctx.clone();
                service_fn(move |req| {
                    let ctx = ctx.clone();
                    async move { Ok::<_, Infallible>(ctx.answer(key, req).await) }
                })
            };
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                _ = closed => {}
            }
            ctx.conns.lock().expect("admin connections").remove(key);
        });
    }
}

/// One request slot waiting for the supervisor; freed when dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn take(n: &'a AtomicUsize) -> Option<InFlight<'a>> {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| (v < MAX_IN_FLIGHT).then_some(v + 1)).ok().map(|_| InFlight(n))
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Ctx {
    async fn answer(&self, key: usize, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
        self.conns.lock().expect("admin connections").set_busy(key, true);
        let r = self.respond(req).await;
        self.conns.lock().expect("admin connections").set_busy(key, false);
        *self.stats.lock().expect("admin stats").requests.entry(r.status.to_string()).or_default() += 1;
        let mut resp = hyper::Response::new(Full::new(Bytes::from(r.body)));
        *resp.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
        // The dashboard's page may load its own files and ask /stats;
        // nothing else may run, load or frame anything (super::ui).
        let policy = if r.content_type.starts_with("text/html") { super::ui::PAGE_POLICY } else { super::ui::API_POLICY };
        headers.insert("content-security-policy", HeaderValue::from_static(policy));
        headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
        headers.insert("cache-control", HeaderValue::from_static("no-store"));
        resp
    }

    async fn respond(&self, req: hyper::Request<Incoming>) -> Response {
        let (head, body) = req.into_parts();
        if let Err(r) = guard::check(&head.method, head.uri.path(), &head.headers, self.token.as_ref()) {
            return r;
        }
        if let Some(r) = Some(&head.method).filter(|m| **m == Method::GET || **m == Method::HEAD).and_then(|_| super::ui::asset(head.uri.path())) {
            return r;
        }
        let body = if head.method == Method::POST {
            match read_body(&head.headers, body).await {
                Ok(b) => b,
                Err(r) => return r,
            }
        } else {
            Vec::new()
        };
        let url = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let route = match route::parse(head.method.as_str(), url, body) {
            Ok(r) => r,
            Err(r) => return r,
        };
        if self.scope == Scope::ReadOnly && !matches!(route, Route::Metrics | Route::Stats | Route::Healthz) {
            return Response::error(404, "a client serves /metrics, /stats, /healthz and /ui only");
        }
        let _slot = match route {
            Route::Healthz => None,
            _ => match InFlight::take(&self.in_flight) {
                Some(s) => Some(s),
                None => return Response::error(503, format!("{MAX_IN_FLIGHT} admin requests are already waiting; retry")),
            },
        };
        let (reply, answer) = oneshot::channel();
        if !(self.sink)(Request { route, reply }) {
            return Response::error(503, "the server is stopping or its supervisor is overloaded; retry");
        }
        match tokio::time::timeout(REPLY_TIMEOUT, answer).await {
            Ok(Ok(r)) => r,
            _ => Response::error(504, "the server did not answer in time"),
        }
    }
}

/// Read a POST body within [`MAX_BODY`] and [`BODY_TIMEOUT`].
async fn read_body(headers: &hyper::HeaderMap, body: Incoming) -> Result<Vec<u8>, Response> {
    let too_big = || Response::error(413, format!("body over {MAX_BODY} bytes"));
    let declared = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_big());
    }
    match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
        Err(_) => Err(Response::error(408, format!("the request body did not arrive within {} s", BODY_TIMEOUT.as_secs()))),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_big()),
        Ok(Err(e)) => Err(Response::error(400, format!("cannot read the request body: {e}"))),
        Ok(Ok(c)) => Ok(c.to_bytes().to_vec()),
    }
}
