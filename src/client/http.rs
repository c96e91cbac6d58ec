//! The client side of `--protocol http`: a keep-alive GET per request
//! (its intended send time kept in order, since responses carry none),
//! responses read whole and counted by status class.

use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Heard, Inflight, Speaker};
use crate::net;

/// Largest HTTP response body the client accepts (it reads whole responses).
const MAX_HTTP_BODY: usize = 64 * 1024 * 1024;

pub struct Http {
    /// The request every send writes.
    request: Vec<u8>,
}

impl Http {
    pub fn new(traffic: &Traffic, host_header: &str) -> Http {
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

    fn read(&mut self, ear: Ear<'_>, replies: &mut Replies<'_>) -> Heard {
        let (mut wire, inflight) = (ear.wire, ear.inflight);
        net::read_chunks(&mut wire, ear.partial, ear.scratch, ear.read_closed, |buf| {
            let mut pos = 0;
            loop {
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut resp = httparse::Response::new(&mut headers);
                let head = match resp.parse(&buf[pos..]) {
                    Ok(httparse::Status::Complete(n)) => n,
                    Ok(httparse::Status::Partial) if buf.len() - pos > 64 * 1024 => return Err("http_response_too_large"),
                    Ok(httparse::Status::Partial) => return Ok(pos),
                    Err(_) => return Err("http_bad_response"),
                };
                let length = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
                let Some(length) = length else { return Err("http_no_content_length") };
                // A hostile or broken Content-Length must not overflow
                // the arithmetic below or make us buffer without bound.
                if length > MAX_HTTP_BODY {
                    return Err("http_response_too_large");
                }
                if buf.len() - pos < head + length {
                    return Ok(pos);
                }
                pos += head + length;
                let class = match resp.code.unwrap_or(0) {
                    200..=299 => "2xx",
                    300..=399 => "3xx",
                    400..=499 => "4xx",
                    500..=599 => "5xx",
                    _ => "other",
                };
                *replies.stats.http_status.entry(class.into()).or_insert(0) += 1;
                let sent = inflight.as_mut().and_then(|q| q.pop_front());
                if sent.is_none() {
                    return Err("http_unsolicited_response");
                }
                replies.reply(sent);
            }
        })
        .into()
    }
}
