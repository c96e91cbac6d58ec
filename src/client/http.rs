//! The client side of `--protocol http`: a keep-alive GET per request
//! (its intended send time kept in order, since responses carry none),
//! responses read whole and counted by status class.

use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};
use crate::proto::http::{parse_response_head, BodyLength, HeadError};

/// Largest HTTP response body the client accepts (it reads whole responses).
const MAX_HTTP_BODY: usize = 64 * 1024 * 1024;
/// Largest response head the client accepts.
const MAX_HTTP_HEAD: usize = 64 * 1024;

pub(crate) struct Http {
    /// The request every send writes.
    request: Vec<u8>,
}

impl Http {
    pub(crate) fn new(traffic: &Traffic, host_header: &str) -> Http {
        Http { request: format!("GET {} HTTP/1.1\r\nHost: {host_header}\r\n{}\r\n", traffic.ws_target, traffic.header_lines()).into_bytes() }
    }
}

impl Speaker for Http {
    fn beats(&self) -> bool {
        false
    }

    fn request(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) -> bool {
        out.extend_from_slice(&self.request);
        inflight.get_or_insert_with(Default::default).push_back(due.intended);
        true
    }

    /// Whole responses (head and Content-Length body), each matched to
    /// the oldest request awaiting one.
    fn hear(&mut self, buf: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let mut pos = 0;
        loop {
            let head = match parse_response_head(&buf[pos..], MAX_HTTP_HEAD) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(pos),
                Err(HeadError::TooLarge) => return Err("http_response_too_large".into()),
                Err(_) => return Err("http_bad_response".into()),
            };
            let BodyLength::Bytes(length) = head.body else { return Err("http_no_content_length".into()) };
            // A hostile or broken Content-Length must not overflow
            // the arithmetic below or make us buffer without bound.
            if length > MAX_HTTP_BODY as u64 {
                return Err("http_response_too_large".into());
            }
            if buf.len() - pos < head.len + length as usize {
                return Ok(pos);
            }
            pos += head.len + length as usize;
            let class = match head.status {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                500..=599 => "5xx",
                _ => "other",
            };
            match replies.stats.http_status.get_mut(class) {
                Some(n) => *n += 1,
                None => _ = replies.stats.http_status.insert(class.into(), 1),
            }
            let sent = ear.inflight.as_mut().and_then(|q| q.pop_front());
            if sent.is_none() {
                return Err("http_unsolicited_response".into());
            }
            replies.reply(sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::speak::hearing::{same_at_every_cut, Hearing, NOW};
    use crate::net::ReadEnd;

    /// An HTTP speaker with `waiting` requests sent (intended just
    /// before `NOW`).
    fn make(waiting: usize) -> impl Fn() -> (Box<dyn Speaker>, Hearing) {
        move || {
            let mut h = Hearing::new(false);
            h.inflight = Some(Box::new((0..waiting as u64).map(|i| NOW - 1000 + i).collect()));
            (Box::new(Http::new(&Traffic::default(), "h")), h)
        }
    }

    #[test]
    fn responses_cut_anywhere_are_counted_as_whole() {
        let third: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab";
        let wire = [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 503 Busy\r\ncontent-length: 0\r\n\r\n", third].concat();
        let (end, _, h) = same_at_every_cut(&make(3), &wire);
        assert_eq!(end, ReadEnd::Open);
        assert_eq!(h.stats.replies, 2);
        assert_eq!(h.stats.http_status.get("2xx"), Some(&1));
        assert_eq!(h.stats.http_status.get("5xx"), Some(&1));
        assert_eq!(h.inflight.as_ref().map(|q| q.len()), Some(1), "the third still waits");
        assert_eq!(h.kept(), third.len(), "the third's head and 2 bytes wait for its last");
    }

    #[test]
    fn malformed_responses_end_as_they_always_did() {
        let err = |waiting, wire: &[u8]| same_at_every_cut(&make(waiting), wire).0;
        let named = |s: &str| ReadEnd::Error(s.into());
        assert_eq!(err(1, b"HTTP/1.1 200 OK\r\n\r\n"), named("http_no_content_length"));
        assert_eq!(err(1, b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"), named("http_no_content_length"));
        assert_eq!(err(1, b"HTTP/1.1 2x0 OK\r\n\r\n"), named("http_bad_response"));
        assert_eq!(err(0, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), named("http_unsolicited_response"));
        assert_eq!(err(1, b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n"), named("http_response_too_large"));
    }
}
