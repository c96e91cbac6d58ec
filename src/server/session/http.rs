//! The server side of `--protocol http`: turning parsed requests
//! (`proto::http`) into responses through the business stage, keeping
//! pipelined responses in order, and remembering per-connection state only
//! while a request is half-read or a reply is pending.

use crate::proto::http::{self, HttpState, Step};
use crate::server::close::Close;
use crate::server::session::ext::{Ext, HookWait, HttpExt};
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
    /// `--mqtt-auth-http`: an event-stream request asked of the backend,
    /// waiting in the partial input (`worker/upgrade.rs` reads it again).
    pub hook: HookWait,
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
    /// `--mqtt-auth-http`: where an event-stream request's ask goes (it
    /// waits unanswered for the backend's decision).
    pub asks: Option<&'a mut Vec<crate::server::commands::UpgradeAsk>>,
}

/// Handle as many requests in `buf` as possible; return the bytes used.
/// Err names why the connection must close (after `ctx.out` is sent).
pub(crate) fn consume(ctx: &mut Ctx<'_>, conn: &mut Ext, buf: &[u8]) -> Result<usize, Close> {
    if crate::server::session::ext::sse_mut(conn).is_some() {
        // An event stream only sends; what its client sends is dropped.
        return Ok(buf.len());
    }
    if conn.http().is_some_and(|c| c.hook == HookWait::Asked) {
        // Held for the backend: what a client sends meanwhile is held
        // too, a head's worth at most.
        if buf.len() > 2 * ctx.cfg.max_header_bytes {
            return Err(Close::Http431HeadersTooLarge);
        }
        return Ok(0);
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
        let start = pos;
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
                if let Some(asks) = ctx.asks.as_deref_mut() {
                    // `--mqtt-auth-http`: held, unanswered, until the backend decides.
                    let c = conn.http_or_default();
                    if c.hook != HookWait::Allowed {
                        c.hook = HookWait::Asked;
                        asks.push(crate::server::session::ext::hook_ask(ctx.req.key, ctx.req.gen, true, &buf[start..pos]));
                        st = HttpState::default();
                        break Ok(start);
                    }
                }
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
    let idle = st == HttpState::default() && !conn.http().is_some_and(|c| c.awaiting || c.hook != HookWait::No);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::business::service_time::ServiceTime;
    use crate::server::business::{BusinessMode, Stage};
    use crate::server::session::fixture::Read;
    use crate::server::tables::recovery::Recoveries;

    const DATE: &str = "Thu, 01 Jan 1970 00:00:00 GMT";

    /// An HTTP port's read parts and one connection's state.
    struct Parts {
        read: Read,
        recoveries: Recoveries,
        cfg: HttpConfig,
        ext: Ext,
    }

    fn parts() -> Parts {
        Parts {
            read: Read::new(),
            recoveries: Recoveries::default(),
            cfg: HttpConfig { body: b"hello".to_vec(), max_header_bytes: 256, header_timeout_ms: 1000 },
            ext: None,
        }
    }

    impl Parts {
        /// Feed `buf`: the bytes used or the close, and what was written.
        fn feed(&mut self, buf: &[u8]) -> (Result<usize, Close>, String) {
            let (req, topics, subs) = self.read.split();
            let mut ctx = Ctx { req, cfg: &self.cfg, date: DATE, topics, subs, recoveries: &mut self.recoveries, now_s: 7, asks: None };
            let r = consume(&mut ctx, &mut self.ext, buf);
            (r, String::from_utf8(std::mem::take(&mut self.read.out)).unwrap())
        }

        /// A business stage that holds `queue` requests and answers none here.
        fn slow_stage(&mut self, queue: usize) {
            self.read.stage = Stage::new(BusinessMode::Async, queue, std::sync::Arc::new(|| {})).unwrap();
            self.read.service = ServiceTime::Fixed(std::time::Duration::from_secs(3600));
        }
    }

    fn ok(extra: &str, body: &str) -> String {
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nDate: {DATE}\r\n{extra}\r\n{body}")
    }

    /// Pipelined requests in one read are answered in order, each as its
    /// own request says (a HEAD without the body, an HTTP/1.0 keep-alive
    /// echoed), and the connection keeps no state after them.
    #[test]
    fn pipelined_requests_are_answered_in_order() {
        let mut p = parts();
        let buf = b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\nGET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyzGET /c HTTP/1.1\r\n\r\n";
        let (r, out) = p.feed(buf);
        assert_eq!(r, Ok(buf.len()));
        let http10 = format!("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nDate: {DATE}\r\nConnection: keep-alive\r\n\r\nhello");
        assert_eq!(out, [ok("", ""), http10, ok("", "hello"), ok("", "hello")].concat());
        assert_eq!((p.read.stats.requests, p.read.stats.frames_in, p.read.stats.replies), (4, 4, 4));
        assert!(p.ext.is_none(), "idle again: no state kept");
    }

    /// A head cut short waits unused and keeps nothing; whole, it is
    /// answered. A body cut short is owed: its rest is skipped from the
    /// next read before the request after it.
    #[test]
    fn a_request_or_body_split_across_reads_waits_for_its_rest() {
        let mut p = parts();
        let get = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        for cut in [1, 10, get.len() - 1] {
            assert_eq!(p.feed(&get[..cut]), (Ok(0), String::new()), "cut at {cut}");
            assert!(p.ext.is_none());
        }
        assert_eq!(p.feed(get), (Ok(get.len()), ok("", "hello")));

        let post = b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nhello";
        assert_eq!(p.feed(post), (Ok(post.len()), ok("", "hello")), "answered at its head");
        assert_eq!(p.ext.http().map(|c| c.state.body_left), Some(5), "five bytes owed");
        let rest = b"worldGET / HTTP/1.1\r\n\r\n";
        assert_eq!(p.feed(rest), (Ok(rest.len()), ok("", "hello")), "the body's rest is skipped, not read as a request");
        assert!(p.ext.is_none());
        assert_eq!(p.read.stats.requests, 3);
    }

    /// `Connection: close` (or HTTP/1.0 without keep-alive) is answered
    /// with `Connection: close` and closes; what was pipelined after it is
    /// not answered. HTTP/1.1 keeps the connection without the header.
    #[test]
    fn keep_alive_and_connection_close() {
        let mut p = parts();
        let (r, out) = p.feed(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!((r, out), (Ok(18), ok("", "hello")));

        let buf = b"GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\nGET /after HTTP/1.1\r\n\r\n";
        let (r, out) = p.feed(buf);
        assert_eq!(r, Err(Close::HttpConnectionClose));
        assert_eq!(out, ok("Connection: close\r\n", "hello"), "one answer, nothing for the request after it");

        let mut p = parts();
        let (r, out) = p.feed(b"GET / HTTP/1.0\r\n\r\n");
        assert_eq!(r, Err(Close::HttpConnectionClose));
        assert_eq!(out, ok("Connection: close\r\n", "hello"), "answered as HTTP/1.1, which a 1.0 client reads (RFC 9110 §6.2)");
        assert_eq!(p.read.stats.requests, 1);
    }

    /// A request head past `max_header_bytes`, whole or still arriving,
    /// is answered 431 and closes; so are too many headers.
    #[test]
    fn a_head_over_the_limit_is_refused_431() {
        let refusal = format!(
            "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\nContent-Length: 31\r\nDate: {DATE}\r\nConnection: close\r\n\r\nRequest Header Fields Too Large"
        );
        let long = format!("GET / HTTP/1.1\r\nX-Long: {}\r\n\r\n", "a".repeat(300));
        let unfinished = format!("GET / HTTP/1.1\r\nX-Long: {}", "a".repeat(300));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: 1\r\n".repeat(crate::proto::http::MAX_HEADERS + 1));
        for (name, buf, max) in [("whole", &long, 256), ("arriving", &unfinished, 256), ("too many headers", &many, 8192)] {
            let mut p = parts();
            p.cfg.max_header_bytes = max;
            let (r, out) = p.feed(buf.as_bytes());
            assert_eq!(r, Err(Close::Http431HeadersTooLarge), "{name}");
            assert_eq!(out, refusal, "{name}");
            assert_eq!(p.read.stats.requests, 0, "{name}");
        }
        // Exactly at the limit is a request.
        let mut p = parts();
        let pad = 256 - "GET / HTTP/1.1\r\nX: \r\n\r\n".len();
        let at = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(pad));
        assert_eq!(at.len(), 256);
        assert_eq!(p.feed(at.as_bytes()), (Ok(256), ok("", "hello")));
    }

    /// Requests the server will not serve get their status and close:
    /// 400 malformed or smuggling both framings, 405 (with Allow) for a
    /// known method it does not take, 501 for an unknown one.
    #[test]
    fn hostile_requests_are_answered_with_their_status_and_closed() {
        let cases: [(&[u8], u16, &str, Close); 4] = [
            (b"\x01\x02 nonsense\r\n\r\n", 400, "Bad Request", Close::Http400BadRequest),
            (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "Bad Request", Close::Http400BadRequest),
            (b"PUT / HTTP/1.1\r\n\r\n", 405, "Method Not Allowed", Close::Http405Method),
            (b"BREW /pot HTTP/1.1\r\n\r\n", 501, "Not Implemented", Close::Http501NotImplemented),
        ];
        for (buf, status, reason, close) in cases {
            let mut p = parts();
            let (r, out) = p.feed(buf);
            assert_eq!(r, Err(close), "{status}");
            let allow = if status == 405 { "Allow: GET, HEAD, POST\r\n" } else { "" };
            let want = format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nDate: {DATE}\r\n{allow}Connection: close\r\n\r\n{reason}",
                reason.len()
            );
            assert_eq!(out, want);
            assert_eq!(p.read.stats.requests, 0);
        }
    }

    /// A reply still with the business stage holds what was pipelined
    /// behind it unparsed (nothing used), remembering whether to close
    /// after it; more than `MAX_PIPELINED` waiting closes the connection.
    #[test]
    fn a_deferred_reply_holds_the_pipeline() {
        let mut p = parts();
        p.slow_stage(8);
        let first = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
        let mut buf = first.to_vec();
        buf.extend_from_slice(b"GET /second HTTP/1.1\r\n\r\n");
        assert_eq!(p.feed(&buf), (Ok(first.len()), String::new()), "only the first is taken");
        let c = p.ext.http().expect("state while a reply is pending");
        assert!(c.awaiting && c.close_after);
        assert_eq!(p.feed(&buf[first.len()..]), (Ok(0), String::new()), "the second waits");
        assert_eq!(p.read.stats.requests, 1);
        assert_eq!(p.feed(&vec![b'G'; MAX_PIPELINED]).0, Ok(0));
        assert_eq!(p.feed(&vec![b'G'; MAX_PIPELINED + 1]), (Err(Close::HttpPipelineOverflow), String::new()));
    }

    /// A full business stage refuses a request with 503 and closes.
    #[test]
    fn a_full_business_stage_is_a_503() {
        let mut p = parts();
        p.slow_stage(0);
        let (r, out) = p.feed(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(r, Err(Close::Http503Rejected));
        assert_eq!(
            out,
            format!("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 19\r\nDate: {DATE}\r\nConnection: close\r\n\r\nService Unavailable")
        );
        assert_eq!((p.read.stats.requests, p.read.stats.rejected), (1, 1));
    }

    /// A GET asking for `text/event-stream` on an HTTP port becomes an
    /// event stream after the requests before it are answered: the
    /// stream's head, its topics subscribed, its Last-Event-ID resumed;
    /// from then on what its client sends is dropped unanswered.
    #[test]
    fn an_event_stream_request_turns_the_connection_into_a_stream() {
        let mut p = parts();
        let buf = b"GET / HTTP/1.1\r\n\r\nGET /events?subscribe=news HTTP/1.1\r\nAccept: text/event-stream\r\nLast-Event-ID: news:4:9\r\n\r\nGET /late HTTP/1.1\r\n\r\n";
        let (r, out) = p.feed(buf);
        assert_eq!(r, Ok(buf.len()), "the rest is dropped");
        let head = std::str::from_utf8(crate::proto::sse::write::HEAD).unwrap();
        assert_eq!(out, format!("{}{head}retry: 2000\n: megaconn event stream\n\n", ok("", "hello")));
        assert!(crate::server::session::ext::sse_mut(&mut p.ext).is_some_and(|s| s.last_write_s == 7));
        assert_eq!((p.read.stats.requests, p.read.stats.sse_streams), (1, 1));
        assert!(p.read.topics.has(&p.read.subs, "news"));
        assert!(p.recoveries.holds("news", 3, 1), "waits for what it missed after news:4:9");
        let mut wanted = p.recoveries.take_wanted();
        wanted.sort();
        assert_eq!(wanted, [("*".to_string(), u64::MAX), ("news".to_string(), 9)]);
        assert_eq!(p.feed(b"GET / HTTP/1.1\r\n\r\n"), (Ok(18), String::new()));
    }

    /// The slowloris clock: it starts with the first read that leaves a
    /// request unfinished (never at 0), keeps its start while the request
    /// stays unfinished, says stalled from the timeout on (not while a
    /// reply is pending), and stops, freeing the state, once it is whole.
    #[test]
    fn an_unfinished_request_is_timed_until_it_is_whole() {
        let mut p = parts();
        assert_eq!(p.feed(b"GET / HT"), (Ok(0), String::new()));
        track_partial(&mut p.ext, true, 0);
        assert_eq!(p.ext.http().map(|c| c.partial_since_ds), Some(1), "0 means none: started at 1");
        track_partial(&mut p.ext, true, 40);
        assert_eq!(p.ext.http().map(|c| c.partial_since_ds), Some(1), "the first read's time stays");
        assert!(!stalled(&p.ext, 30, 30));
        assert!(stalled(&p.ext, 31, 30));
        let get = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(p.feed(get), (Ok(get.len()), ok("", "hello")));
        track_partial(&mut p.ext, false, 50);
        assert!(p.ext.is_none() && !stalled(&p.ext, 1000, 30), "whole: no clock, no state");

        // A body still owed keeps the clock running without buffered bytes.
        let post = b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(p.feed(post).0, Ok(post.len()));
        track_partial(&mut p.ext, false, 60);
        assert!(stalled(&p.ext, 90, 30));

        // A reply with the business stage is not a stall.
        let mut p = parts();
        p.slow_stage(1);
        assert_eq!(p.feed(get).0, Ok(get.len()));
        track_partial(&mut p.ext, true, 5);
        assert!(!stalled(&p.ext, 1000, 30));
    }
}
