//! The one response-head parser every client here uses (the load
//! generator's HTTP and SSE, the WebSocket Upgrade's check, the admin
//! client): the status, the head's length and the headers they act on,
//! bounded in bytes and headers, refused with a typed error.

use super::MAX_HEADERS;

/// Most headers in one response head a client reads (more is
/// [`HeadError::TooManyHeaders`]): bounds the parse, and matches what a
/// request may carry.
pub(crate) const MAX_RESPONSE_HEADERS: usize = MAX_HEADERS;

/// A complete response head: the status, its length and the headers any
/// client here acts on (values trimmed, borrowed from the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponseHead<'a> {
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
pub(crate) enum BodyLength {
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
pub(crate) enum HeadError {
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
    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) fn parse_response_head(buf: &[u8], max_head: usize) -> Result<Option<ResponseHead<'_>>, HeadError> {
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
