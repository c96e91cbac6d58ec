//! HTTP/1.1 on `httparse` (no hand-written parser). For the server,
//! request handling: keep-alive by the rules, pipelining, bodies read and
//! discarded (Content-Length and chunked), and the hostile cases answered
//! with the right status and a close — never a panic or an unbounded
//! buffer. For every client (load generator, WebSocket Upgrade, event
//! streams, the admin client), the one response-head parser,
//! [`parse_response_head`], so a status line or a header is read one way.
//!
//! [`next`] is pure over a byte buffer and a small per-connection
//! [`HttpState`], and [`parse_response_head`] over a byte buffer, so
//! every case is unit-testable without sockets.

/// Most headers in one request (more is 431).
pub(crate) const MAX_HEADERS: usize = 64;

mod response;
pub(crate) use response::{parse_response_head, BodyLength, HeadError};

/// What a connection must remember between reads. Default (all zero) for
/// every connection between requests; the server only allocates one while
/// a body or chunked stream is being skipped or a reply is pending.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct HttpState {
    /// Bytes of a Content-Length body still to discard.
    pub body_left: u64,
    pub chunk: Option<Chunk>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Discarding chunk data, then its CRLF.
    Data(u64),
    Crlf,
    /// After the last (zero) chunk: optional trailers, then CRLF.
    Trailer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A complete request head. The response can go out now; its body (if
    /// any) is discarded by later calls.
    Request(Request),
    /// Everything usable was consumed; wait for more bytes.
    NeedMore,
    /// Answer with this status and close.
    Fail(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub keep_alive: bool,
    /// HTTP/1.0 with `Connection: keep-alive` (echo it back, as ab -k expects).
    pub http10: bool,
    pub head: bool,
    /// A GET with `Accept: text/event-stream`: an event stream, not a request.
    pub events: Option<Box<Events>>,
}

/// What an event stream's request says: its target (`?subscribe=`,
/// `?since=`), the `Last-Event-ID` of a reconnect, and its bearer token
/// (`Authorization: Bearer T` or `?token=T`, as a WebSocket's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Events {
    pub target: String,
    pub last_event_id: Option<String>,
    pub token: Option<String>,
}

/// Consume from `buf` up to the next complete request head (skipping any
/// body still owed), returning how many bytes were used and what was found.
pub(crate) fn next(buf: &[u8], st: &mut HttpState, max_header_bytes: usize) -> (usize, Step) {
    let mut pos = 0;
    loop {
        if st.body_left > 0 {
            let n = (buf.len() - pos).min(st.body_left as usize);
            st.body_left -= n as u64;
            pos += n;
            if st.body_left > 0 {
                return (pos, Step::NeedMore);
            }
        }
        if let Some(c) = st.chunk {
            let rest = &buf[pos..];
            match c {
                Chunk::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((n, 0))) => {
                        pos += n;
                        st.chunk = Some(Chunk::Trailer);
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        pos += n;
                        st.chunk = Some(Chunk::Data(size));
                    }
                    Ok(httparse::Status::Partial) if rest.len() > 1024 => return (pos, Step::Fail(400)),
                    Ok(httparse::Status::Partial) => return (pos, Step::NeedMore),
                    Err(_) => return (pos, Step::Fail(400)),
                },
                Chunk::Data(left) => {
                    let n = rest.len().min(left as usize);
                    pos += n;
                    if (n as u64) < left {
                        st.chunk = Some(Chunk::Data(left - n as u64));
                        return (pos, Step::NeedMore);
                    }
                    st.chunk = Some(Chunk::Crlf);
                }
                Chunk::Crlf => {
                    if rest.len() < 2 {
                        return (pos, Step::NeedMore);
                    }
                    if &rest[..2] != b"\r\n" {
                        return (pos, Step::Fail(400));
                    }
                    pos += 2;
                    st.chunk = Some(Chunk::Size);
                }
                Chunk::Trailer => {
                    if rest.starts_with(b"\r\n") {
                        pos += 2;
                        st.chunk = None;
                    } else if let Some(i) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
                        pos += i + 4;
                        st.chunk = None;
                    } else if rest.len() > max_header_bytes {
                        return (pos, Step::Fail(431));
                    } else {
                        return (pos, Step::NeedMore);
                    }
                }
            }
            continue;
        }
        if pos == buf.len() {
            return (pos, Step::NeedMore);
        }
        let (used, step) = head(&buf[pos..], st, max_header_bytes);
        return (pos + used, step);
    }
}

fn head(buf: &[u8], st: &mut HttpState, max_header_bytes: usize) -> (usize, Step) {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n > max_header_bytes => return (0, Step::Fail(431)),
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > max_header_bytes => return (0, Step::Fail(431)),
        Ok(httparse::Status::Partial) => return (0, Step::NeedMore),
        Err(httparse::Error::TooManyHeaders) => return (0, Step::Fail(431)),
        Err(_) => return (0, Step::Fail(400)),
    };
    let method = req.method.unwrap_or("");
    match method {
        "GET" | "HEAD" | "POST" => {}
        "PUT" | "DELETE" | "PATCH" | "OPTIONS" | "CONNECT" | "TRACE" => return (n, Step::Fail(405)),
        _ => return (n, Step::Fail(501)),
    }
    let http10 = req.version == Some(0);
    let (mut close, mut ka, mut length, mut chunked, mut te) = (false, false, None::<u64>, false, false);
    let (mut accept, mut last_event_id, mut authorization) = (None, None, None);
    for h in req.headers.iter() {
        let name = h.name;
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if name.eq_ignore_ascii_case("content-length") {
            let Ok(v) = value.parse::<u64>() else { return (n, Step::Fail(400)) };
            if length.is_some_and(|l| l != v) {
                return (n, Step::Fail(400));
            }
            length = Some(v);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            chunked = value.rsplit(',').next().is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let t = token.trim();
                close |= t.eq_ignore_ascii_case("close");
                ka |= t.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("accept") {
            accept = Some(h.value);
        } else if name.eq_ignore_ascii_case("last-event-id") {
            last_event_id = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("authorization") {
            authorization = Some(h.value);
        }
    }
    let events = (method == "GET" && super::ws::handshake::wants_events(accept)).then(|| {
        let target = req.path.unwrap_or("/").to_string();
        let (token, _) = super::ws::handshake::credentials(authorization, None, &target);
        Box::new(Events { target, last_event_id, token })
    });
    // Both framings at once is how requests are smuggled: refuse.
    if te && length.is_some() {
        return (n, Step::Fail(400));
    }
    if te && !chunked {
        return (n, Step::Fail(501));
    }
    if chunked {
        st.chunk = Some(Chunk::Size);
    } else if let Some(l) = length {
        st.body_left = l;
    }
    let keep_alive = if http10 { ka && !close } else { !close };
    (n, Step::Request(Request { keep_alive, http10: http10 && keep_alive, head: method == "HEAD", events }))
}

/// Append one response. `date` is the cached IMF-fixdate.
pub(crate) fn respond(out: &mut Vec<u8>, status: u16, req: Option<&Request>, body: &[u8], date: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let (conn, payload, length) = match req {
        Some(r) if status == 200 => {
            let c = if !r.keep_alive {
                "Connection: close\r\n"
            } else if r.http10 {
                "Connection: keep-alive\r\n"
            } else {
                ""
            };
            // HEAD: the GET's Content-Length, no body (RFC 9110 §9.3.2).
            (c, if r.head { &[][..] } else { body }, body.len())
        }
        _ => ("Connection: close\r\n", reason.as_bytes(), reason.len()),
    };
    let allow = if status == 405 { "Allow: GET, HEAD, POST\r\n" } else { "" };
    let version = if req.is_some_and(|r| r.http10) { "HTTP/1.0" } else { "HTTP/1.1" };
    // Pieces, not write!: formatting was 1% of the machine's CPU under wrk.
    let mut digits = itoa::Buffer::new();
    for piece in [version, " ", digits.format(status), " ", reason, "\r\nContent-Type: text/plain\r\nContent-Length: "] {
        out.extend_from_slice(piece.as_bytes());
    }
    for piece in [digits.format(length), "\r\nDate: ", date, "\r\n", allow, conn, "\r\n"] {
        out.extend_from_slice(piece.as_bytes());
    }
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_carries_the_get_length_and_no_body() {
        let head = Request { keep_alive: true, http10: false, head: true, events: None };
        let mut out = Vec::new();
        respond(&mut out, 200, Some(&head), b"Hello world!", "d");
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Content-Length: 12\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "no body: {text}");
    }

    fn run(input: &[u8]) -> Vec<Step> {
        let mut st = HttpState::default();
        let mut pos = 0;
        let mut steps = Vec::new();
        loop {
            let (used, step) = next(&input[pos..], &mut st, 8192);
            pos += used;
            let stop = matches!(step, Step::NeedMore | Step::Fail(_));
            steps.push(step);
            if stop {
                return steps;
            }
        }
    }

    fn ok(keep_alive: bool, http10: bool) -> Step {
        Step::Request(Request { keep_alive, http10, head: false, events: None })
    }

    #[test]
    fn keep_alive_rules() {
        assert_eq!(run(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")[0], ok(true, false));
        assert_eq!(run(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")[0], ok(false, false));
        assert_eq!(run(b"GET / HTTP/1.0\r\n\r\n")[0], ok(false, false));
        assert_eq!(run(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")[0], ok(true, true));
    }

    #[test]
    fn bodies_are_skipped_and_pipelining_works() {
        let s = run(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n");
        assert_eq!(s, vec![ok(true, false), ok(true, false), Step::NeedMore]);
        let s = run(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
        assert_eq!(s, vec![ok(true, false), ok(true, false), Step::NeedMore]);
    }

    #[test]
    fn hostile_requests_get_their_status() {
        assert_eq!(run(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n").last(), Some(&Step::Fail(400)));
        assert_eq!(run(b"\x00\x01garbage\r\n\r\n").last(), Some(&Step::Fail(400)));
        assert_eq!(run(b"DELETE / HTTP/1.1\r\n\r\n").last(), Some(&Step::Fail(405)));
        assert_eq!(run(b"BREW / HTTP/1.1\r\n\r\n").last(), Some(&Step::Fail(501)));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
        assert_eq!(run(big.as_bytes()).last(), Some(&Step::Fail(431)));
        let partial_big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(9000));
        assert_eq!(run(partial_big.as_bytes()).last(), Some(&Step::Fail(431)));
        assert_eq!(run(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n").last(), Some(&Step::Fail(400)));
    }

    #[test]
    fn every_split_of_a_pipeline_parses_the_same() {
        let input = b"GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\nGET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
        for cut in 1..input.len() {
            let mut st = HttpState::default();
            let mut buf: Vec<u8> = Vec::new();
            let mut got = 0;
            for piece in [&input[..cut], &input[cut..]] {
                buf.extend_from_slice(piece);
                loop {
                    let (used, step) = next(&buf, &mut st, 8192);
                    buf.drain(..used);
                    match step {
                        Step::Request(_) => got += 1,
                        Step::NeedMore => break,
                        Step::Fail(c) => panic!("cut {cut}: {c}"),
                    }
                }
            }
            assert_eq!(got, 3, "cut at {cut}");
        }
    }

    #[test]
    fn responses_are_well_formed() {
        let mut out = Vec::new();
        let r = Request { keep_alive: true, http10: true, head: false, events: None };
        respond(&mut out, 200, Some(&r), b"Hello world!", "Sun, 22 Nov 2026 07:00:00 GMT");
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.0 200 OK\r\n")
                && text.contains("Content-Length: 12\r\n")
                && text.contains("Connection: keep-alive\r\n")
                && text.ends_with("\r\n\r\nHello world!"),
            "{text}"
        );
    }
}
