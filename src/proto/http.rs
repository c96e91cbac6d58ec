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
pub const MAX_HEADERS: usize = 64;

/// What a connection must remember between reads. Default (all zero) for
/// every connection between requests; the server only allocates one while
/// a body or chunked stream is being skipped or a reply is pending.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HttpState {
    /// Bytes of a Content-Length body still to discard.
    pub body_left: u64,
    pub chunk: Option<Chunk>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Discarding chunk data, then its CRLF.
    Data(u64),
    Crlf,
    /// After the last (zero) chunk: optional trailers, then CRLF.
    Trailer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A complete request head. The response can go out now; its body (if
    /// any) is discarded by later calls.
    Request(Request),
    /// Everything usable was consumed; wait for more bytes.
    NeedMore,
    /// Answer with this status and close.
    Fail(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub keep_alive: bool,
    /// HTTP/1.0 with `Connection: keep-alive` (echo it back, as ab -k expects).
    pub http10: bool,
    pub head: bool,
    /// A GET with `Accept: text/event-stream`: an event stream, not a request.
    pub events: Option<Box<Events>>,
}

/// What an event stream's request says: its target (`?subscribe=`,
/// `?since=`) and the `Last-Event-ID` of a reconnect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Events {
    pub target: String,
    pub last_event_id: Option<String>,
}

/// Consume from `buf` up to the next complete request head (skipping any
/// body still owed), returning how many bytes were used and what was found.
pub fn next(buf: &[u8], st: &mut HttpState, max_header_bytes: usize) -> (usize, Step) {
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
    let (mut accept, mut last_event_id) = (None, None);
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
        }
    }
    let events = (method == "GET" && super::ws::handshake::wants_events(accept))
        .then(|| Box::new(Events { target: req.path.unwrap_or("/").to_string(), last_event_id }));
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
pub fn respond(out: &mut Vec<u8>, status: u16, req: Option<&Request>, body: &[u8], date: &str) {
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

/// Most headers in one response head a client reads (more is
/// [`HeadError::TooManyHeaders`]): bounds the parse, and matches what a
/// request may carry.
pub const MAX_RESPONSE_HEADERS: usize = MAX_HEADERS;

/// A complete response head: the status, its length and the headers any
/// client here acts on (values trimmed, borrowed from the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead<'a> {
    pub status: u16,
    /// Bytes of the head, blank line included: the body starts here.
    pub len: usize,
    /// How the body is delimited.
    pub body: BodyLength,
    pub content_type: Option<&'a [u8]>,
    /// `Sec-WebSocket-Accept`, `-Protocol`, and the first
    /// `-Extensions` (an Upgrade's answer).
    pub ws_accept: Option<&'a [u8]>,
    pub ws_protocol: Option<&'a [u8]>,
    pub ws_extensions: Option<&'a [u8]>,
    /// More than one `Sec-WebSocket-Extensions` header came.
    pub ws_extensions_repeated: bool,
}

/// How a response's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// `Content-Length`: this many bytes.
    Bytes(u64),
    /// `Transfer-Encoding` ending in `chunked`.
    Chunked,
    /// Neither: the body runs until the connection closes.
    UntilClose,
    /// A Content-Length that is not a number, two that disagree, or one
    /// beside a Transfer-Encoding (how responses are smuggled).
    Invalid,
}

/// Why a response head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// More than the caller's bound of bytes without the head ending.
    TooLarge,
    /// More than [`MAX_RESPONSE_HEADERS`] headers.
    TooManyHeaders,
    /// Not `HTTP/1.x NNN reason`.
    BadStatusLine,
    /// A header name, value or line ending that is not HTTP.
    BadHeader,
}

impl HeadError {
    /// The error as a counter-style name.
    pub fn as_str(self) -> &'static str {
        match self {
            HeadError::TooLarge => "http_head_too_large",
            HeadError::TooManyHeaders => "http_too_many_headers",
            HeadError::BadStatusLine => "http_bad_status_line",
            HeadError::BadHeader => "http_bad_header",
        }
    }
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for HeadError {}

/// The response head at the start of `buf`: `Ok(None)` while it is
/// incomplete and within `max_head` bytes. A head over `max_head` is
/// refused whether it arrived whole or in pieces, so the verdict does
/// not depend on how the network cut it.
pub fn parse_response_head(buf: &[u8], max_head: usize) -> Result<Option<ResponseHead<'_>>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Ok(None),
        Ok(_) => return Err(HeadError::TooLarge),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(httparse::Error::Status | httparse::Error::Version | httparse::Error::Token) => return Err(HeadError::BadStatusLine),
        Err(_) => return Err(HeadError::BadHeader),
    };
    let mut head = ResponseHead {
        status: resp.code.unwrap_or(0),
        len,
        body: BodyLength::UntilClose,
        content_type: None,
        ws_accept: None,
        ws_protocol: None,
        ws_extensions: None,
        ws_extensions_repeated: false,
    };
    let (mut length, mut te, mut chunked, mut bad_length) = (None::<u64>, false, false, false);
    for h in resp.headers.iter() {
        let (name, value) = (h.name, h.value.trim_ascii());
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("content-length") {
            match std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok()) {
                Some(v) if length.is_none_or(|l| l == v) => length = Some(v),
                _ => bad_length = true,
            }
        } else if is("transfer-encoding") {
            te = true;
            chunked = value.rsplit(|b| *b == b',').next().is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if is("content-type") {
            head.content_type = head.content_type.or(Some(value));
        } else if is("sec-websocket-accept") {
            head.ws_accept = head.ws_accept.or(Some(value));
        } else if is("sec-websocket-protocol") {
            head.ws_protocol = head.ws_protocol.or(Some(value));
        } else if is("sec-websocket-extensions") {
            head.ws_extensions_repeated |= head.ws_extensions.is_some();
            head.ws_extensions = head.ws_extensions.or(Some(h.value));
        }
    }
    head.body = match (te, chunked, length) {
        _ if bad_length => BodyLength::Invalid,
        (true, _, Some(_)) => BodyLength::Invalid,
        (true, true, None) => BodyLength::Chunked,
        (true, false, None) => BodyLength::UntilClose,
        (false, _, Some(n)) => BodyLength::Bytes(n),
        (false, _, None) => BodyLength::UntilClose,
    };
    Ok(Some(head))
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

    #[test]
    fn response_head_reads_status_length_and_upgrade_headers() {
        let wire = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept:  abc= \r\nSec-WebSocket-Protocol: chat\r\nContent-Length: 5\r\n\r\nhello";
        let h = parse_response_head(wire, 1024).unwrap().unwrap();
        assert_eq!((h.status, h.len, h.body), (101, wire.len() - 5, BodyLength::Bytes(5)));
        assert_eq!((h.ws_accept, h.ws_protocol, h.ws_extensions), (Some(&b"abc="[..]), Some(&b"chat"[..]), None));
        let sse = parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 1024).unwrap().unwrap();
        assert_eq!((sse.content_type, sse.body), (Some(&b"text/event-stream"[..]), BodyLength::UntilClose));
        let chunked = parse_response_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 1024).unwrap().unwrap();
        assert_eq!(chunked.body, BodyLength::Chunked);
    }

    #[test]
    fn response_head_split_anywhere_waits_then_reads_the_same() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nSec-WebSocket-Extensions: a\r\nSec-WebSocket-Extensions: b\r\n\r\n";
        let whole = parse_response_head(wire, 1024).unwrap().unwrap();
        assert!(whole.ws_extensions_repeated);
        assert_eq!(whole.ws_extensions, Some(&b"a"[..]));
        for cut in 0..wire.len() {
            assert_eq!(parse_response_head(&wire[..cut], 1024), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn response_head_refusals_name_the_problem() {
        assert_eq!(parse_response_head(b"HTTP/1.1 2x0 OK\r\n\r\n", 1024), Err(HeadError::BadStatusLine));
        assert_eq!(parse_response_head(b"HTTZ/1.1 200 OK\r\n\r\n", 1024), Err(HeadError::BadStatusLine));
        assert_eq!(parse_response_head(b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", 1024), Err(HeadError::BadHeader));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_RESPONSE_HEADERS {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_response_head(&many, 1 << 20), Err(HeadError::TooManyHeaders));
        // Too large whole or in pieces alike.
        let long = b"HTTP/1.1 200 OK\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        assert_eq!(parse_response_head(long, 30), Err(HeadError::TooLarge));
        assert_eq!(parse_response_head(&long[..31], 30), Err(HeadError::TooLarge));
        assert_eq!(parse_response_head(&long[..30], 30), Ok(None));
    }

    #[test]
    fn response_body_length_refuses_smuggling_shapes() {
        let body = |h: &str| parse_response_head(format!("HTTP/1.1 200 OK\r\n{h}\r\n").as_bytes(), 1024).unwrap().unwrap().body;
        assert_eq!(body("Content-Length: x\r\n"), BodyLength::Invalid);
        assert_eq!(body("Content-Length: 3\r\nContent-Length: 4\r\n"), BodyLength::Invalid);
        assert_eq!(body("Content-Length: 3\r\nContent-Length: 3\r\n"), BodyLength::Bytes(3));
        assert_eq!(body("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"), BodyLength::Invalid);
    }
}
