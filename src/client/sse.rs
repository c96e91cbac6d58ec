//! The client side of `--protocol sse`: a GET with `Accept:
//! text/event-stream` to a `--url`, the 200 checked, then every event
//! read as the WHATWG EventSource reads it (`proto::sse::parse`: fields,
//! comments, multi-line data, any line end) and accounted: pushes
//! (delivery latency, gaps, duplicates) and `subscribed` answers. With `--reconnect` a lost stream comes back with
//! the last event id it saw as `Last-Event-ID`, as a browser's would.

use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};
use crate::proto::http::{parse_response_head, HeadError};
use crate::proto::sse::parse::{Events, Limits};
use std::collections::HashMap;

/// Longest event (all its lines) the client accepts, and longest line.
const LIMITS: Limits = Limits { max_line: 1 << 20, max_event: 1 << 20 };
/// Longest response head the client accepts before the stream.
const MAX_HEAD: usize = 64 * 1024;

pub(crate) struct SseSpeaker {
    traffic: Traffic,
    host_header: String,
    header_lines: String,
    /// The last event id each connection (by slot) saw.
    last_ids: HashMap<usize, String>,
}

impl SseSpeaker {
    pub(crate) fn new(traffic: &Traffic, host_header: &str) -> SseSpeaker {
        SseSpeaker { traffic: traffic.clone(), host_header: host_header.to_string(), header_lines: traffic.header_lines(), last_ids: HashMap::new() }
    }
}

impl Speaker for SseSpeaker {
    fn upgrades(&self) -> bool {
        true
    }

    /// The request; a `--reconnect` client resumes with the last event id
    /// it got (or, in a worker that took over the connection, one made
    /// of the positions it was handed).
    fn open(&mut self, out: &mut Vec<u8>, slot: usize, conn: u64, seen: &super::pushes::PushSeen) {
        let target = super::ws::target_with_topics(&self.traffic.ws_target, self.traffic.topics_of(conn));
        let handed = || {
            let tokens: Vec<String> =
                self.traffic.streams_of(conn).filter_map(|t| super::pushes::position(seen, t).map(|at| crate::proto::push::resume_token(t, at))).collect();
            (!tokens.is_empty()).then(|| tokens.join(","))
        };
        let last = match self.last_ids.get(&slot).cloned().or_else(handed) {
            Some(id) if self.traffic.reconnect => format!("Last-Event-ID: {id}\r\n"),
            _ => String::new(),
        };
        let req = format!(
            "GET {target} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n{last}{}\r\n",
            self.host_header, self.header_lines
        );
        out.extend_from_slice(req.as_bytes());
    }

    fn beats(&self) -> bool {
        false
    }

    fn request(&mut self, _: &mut Vec<u8>, _: &Due, _: &mut Inflight) -> bool {
        false
    }

    /// The 200 with an event stream (while upgrading), then events:
    /// pushes, `subscribed` answers, a `goaway`; every id remembered.
    fn hear(&mut self, buf: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let mut pos = 0;
        if ear.upgrading {
            let head = match parse_response_head(buf, MAX_HEAD) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(0),
                Err(HeadError::TooLarge) => return Err("sse_head_too_large".into()),
                Err(_) => return Err("sse_bad_response".into()),
            };
            if head.status != 200 {
                return Err("sse_status_not_200".into());
            }
            if !head.content_type.is_some_and(|v| v.starts_with(b"text/event-stream")) {
                return Err("sse_not_an_event_stream".into());
            }
            ear.upgrading = false;
            pos = head.len;
        }
        let mut events = Events::new(&buf[pos..], LIMITS);
        for e in events.by_ref() {
            let e = e.map_err(|e| e.as_str())?;
            if let Some(id) = e.id {
                let last = self.last_ids.entry(ear.slot).or_default();
                last.clear();
                last.push_str(id);
            }
            let Some(data) = e.data else { continue };
            if e.kind == Some("goaway") {
                ear.goaway = Some(crate::proto::goaway::decode_json(data.as_bytes()).unwrap_or(0));
                return Err(super::speak::GOAWAY.into());
            }
            super::ws::account_text(replies, data.as_bytes());
        }
        Ok(pos + events.consumed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::speak::hearing::{same_at_every_cut, Hearing};
    use crate::net::ReadEnd;
    use crate::proto::Protocol;

    const HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";

    fn make() -> (Box<dyn Speaker>, Hearing) {
        let traffic = Traffic { protocol: Protocol::Sse, reconnect: true, ..Default::default() };
        (Box::new(SseSpeaker::new(&traffic, "h")), Hearing::new(true))
    }

    #[test]
    fn a_stream_cut_anywhere_is_accounted_as_whole() {
        let push = |seq: u64| format!(r#"{{"stream":"topic","topic":"a","seq":{seq},"ts":1,"epoch":1}}"#);
        let wire = format!(
            "{HEAD}: hello\n\nevent: subscribed\nid: a:1:0\ndata: {}\n\nid: a:1:1\r\ndata: {}\r\n\r\ndata: {}\r\rdata: not json\n\ndata: half",
            r#"{"type":"subscribed","topic":"a","recovered":false,"offset":0,"epoch":1}"#,
            push(1),
            push(3),
        );
        let (end, mut speaker, h) = same_at_every_cut(&make, wire.as_bytes());
        assert_eq!(end, ReadEnd::Open);
        assert!(!h.upgrading, "the 200 established the stream");
        assert_eq!((h.stats.push_received, h.stats.push_gaps, h.stats.raw_bytes_in), (2, 1, 8));
        assert_eq!(h.kept(), "data: half".len());
        // The last id seen comes back on a reconnect.
        let mut out = Vec::new();
        speaker.open(&mut out, 0, 0, &None);
        assert!(String::from_utf8(out).unwrap().contains("Last-Event-ID: a:1:1\r\n"));
    }

    #[test]
    fn refusals_and_goaway_end_as_they_always_did() {
        let end = |wire: &str| same_at_every_cut(&make, wire.as_bytes()).0;
        let named = |s: &str| ReadEnd::Error(s.into());
        assert_eq!(end("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"), named("sse_status_not_200"));
        assert_eq!(end("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"), named("sse_not_an_event_stream"));
        assert_eq!(end("HTTP/1.1 2000 OK\r\n\r\n"), named("sse_bad_response"));
        let (_, _, h) = same_at_every_cut(&make, format!("{HEAD}data: a\u{ff}b\n\n").as_bytes());
        let bad = same_at_every_cut(&make, [HEAD.as_bytes(), b"data: \xff\n\n"].concat().as_slice()).0;
        assert_eq!(bad, named("sse_bad_utf8"));
        assert_eq!(h.stats.raw_bytes_in, "a\u{ff}b".len() as u64, "a valid UTF-8 character is data");
        let mut goaway = Vec::new();
        crate::proto::goaway::write_sse(&mut goaway, 250);
        let (end, _, h) = same_at_every_cut(&make, [HEAD.as_bytes(), &goaway].concat().as_slice());
        assert_eq!((end, h.goaway), (named(super::super::speak::GOAWAY), Some(250)));
    }
}
