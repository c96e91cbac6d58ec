//! The server side of `--protocol http`: turning parsed requests
//! (`proto::http`) into responses through the business stage, keeping
//! pipelined responses in order, and remembering per-connection state only
//! while a request is half-read or a reply is pending.

use crate::proto::http::{self, HttpState, Step};
use crate::server::close::Close;
use crate::server::session::ext::{Ext, HttpExt};
use crate::server::session::requests::{Answer, Requests};

/// Most bytes of pipelined requests kept behind a reply that is still
/// with the business stage (the connection is closed beyond it).
pub(crate) const MAX_PIPELINED: usize = 64 * 1024;

/// Per-connection HTTP state, boxed and present only when not idle.
#[derive(Debug, Default)]
pub(crate) struct HttpConn {
    pub state: HttpState,
    /// A response is with the business stage: parse nothing further until
    /// it is sent, so pipelined responses stay in order.
    pub awaiting: bool,
    /// Close once the pending response is sent.
    pub close_after: bool,
    /// Worker-relative time (100 ms units) when the current incomplete
    /// request began; 0 when none. Slowloris guard.
    pub partial_since_ds: u32,
}

/// Server-wide HTTP settings.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct HttpConfig {
    pub body: Vec<u8>,
    pub max_header_bytes: usize,
    pub header_timeout_ms: u64,
}

/// What request handling needs from the worker.
pub(crate) struct Ctx<'a> {
    /// The path into the business stage every protocol shares.
    pub req: Requests<'a>,
    pub cfg: &'a HttpConfig,
    pub date: &'a str,
    /// What a GET with `Accept: text/event-stream` (an event stream on
    /// this port, as on the WebSocket ports) subscribes with.
    pub topics: &'a mut crate::server::tables::topics::Topics,
    pub subs: &'a mut crate::server::tables::topics::Subs,
    pub recoveries: &'a mut crate::server::tables::recovery::Recoveries,
    pub now_s: u32,
}

/// Handle as many requests in `buf` as possible; return the bytes used.
/// Err names why the connection must close (after `ctx.out` is sent).
pub(crate) fn consume(ctx: &mut Ctx<'_>, conn: &mut Ext, buf: &[u8]) -> Result<usize, Close> {
    if crate::server::session::ext::sse_mut(conn).is_some() {
        // An event stream only sends; what its client sends is dropped.
        return Ok(buf.len());
    }
    if conn.http().is_some_and(|c| c.awaiting) {
        // Pipelined requests wait unparsed behind a deferred reply; a
        // peer may not pile up more than this behind one.
        if buf.len() > MAX_PIPELINED {
            return Err(Close::HttpPipelineOverflow);
        }
        return Ok(0);
    }
    let mut st = conn.http().map(|c| c.state.clone()).unwrap_or_default();
    let mut pos = 0;
    let result = loop {
        let (used, step) = http::next(&buf[pos..], &mut st, ctx.cfg.max_header_bytes);
        pos += used;
        match step {
            Step::NeedMore => break Ok(pos),
            Step::Fail(code) => {
                http::respond(ctx.req.out, code, None, b"", ctx.date);
                break Err(match code {
                    400 => Close::Http400BadRequest,
                    405 => Close::Http405Method,
                    431 => Close::Http431HeadersTooLarge,
                    _ => Close::Http501NotImplemented,
                });
            }
            Step::Request(req) if req.events.is_some() => {
                // Whatever came before it is answered first, in order.
                let events = req.events.expect("checked");
                // It hears pushes: with `--auth` it shows a token as a
                // WebSocket would, or hears nothing (401).
                if ctx.topics.gate.required() {
                    match ctx.topics.gate.verify(events.token.as_deref()) {
                        Ok(claims) => ctx.topics.gate.admit(ctx.req.key, ctx.req.gen, claims),
                        Err(reason) => {
                            crate::server::close::count(&mut ctx.req.stats.auth_refused, reason);
                            let refusal =
                                crate::proto::ws::handshake::Refusal { status: 401, reason: reason.as_str(), text: crate::server::auth::jwt::explain(reason) };
                            crate::proto::ws::handshake::write_refusal(ctx.req.out, &refusal);
                            return Err(reason);
                        }
                    }
                }
                let mut follow = crate::server::session::sse::Follow { req: &mut ctx.req, topics: ctx.topics, subs: ctx.subs, recoveries: ctx.recoveries };
                follow.start(&events.target, Some(events.last_event_id.as_deref().unwrap_or("")))?;
                *conn = crate::server::session::sse::open(ctx.req.out, ctx.req.stats, ctx.now_s);
                return Ok(buf.len());
            }
            Step::Request(req) => {
                ctx.req.stats.frames_in += 1;
                let mut reply = Vec::with_capacity(160 + ctx.cfg.body.len());
                http::respond(&mut reply, 200, Some(&req), &ctx.cfg.body, ctx.date);
                match ctx.req.submit(reply) {
                    Answer::Sent if !req.keep_alive => break Err(Close::HttpConnectionClose),
                    Answer::Sent => {}
                    Answer::Deferred => {
                        let c = conn.http_or_default();
                        c.awaiting = true;
                        c.close_after = !req.keep_alive;
                        break Ok(pos);
                    }
                    Answer::Rejected(_) => {
                        http::respond(ctx.req.out, 503, None, b"", ctx.date);
                        break Err(Close::Http503Rejected);
                    }
                }
            }
        }
    };
    // Keep state only while it says something.
    let idle = st == HttpState::default() && !conn.http().is_some_and(|c| c.awaiting);
    if idle {
        if conn.http().is_some_and(|c| c.partial_since_ds != 0) {
            conn.http_mut().unwrap().state = st;
        } else {
            *conn = None;
        }
    } else {
        conn.http_or_default().state = st;
    }
    result
}

/// Update the slowloris clock after a read: `partial` says whether an
/// incomplete request (head or body) is still buffered or owed.
pub(crate) fn track_partial(conn: &mut Ext, partial: bool, now_ds: u32) {
    let owed = conn.http().is_some_and(|c| c.state != HttpState::default());
    if partial || owed {
        let c = conn.http_or_default();
        if c.partial_since_ds == 0 {
            c.partial_since_ds = now_ds.max(1);
        }
    } else if let Some(c) = conn.http_mut() {
        c.partial_since_ds = 0;
        if !c.awaiting && c.state == HttpState::default() {
            *conn = None;
        }
    }
}

/// Whether the connection has been stuck in one request too long.
pub(crate) fn stalled(conn: &Ext, now_ds: u32, timeout_ds: u32) -> bool {
    conn.http().is_some_and(|c| !c.awaiting && c.partial_since_ds != 0 && now_ds.saturating_sub(c.partial_since_ds) >= timeout_ds)
}
