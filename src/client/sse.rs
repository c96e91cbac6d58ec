//! The client side of `--protocol sse`: a GET with `Accept:
//! text/event-stream` to a `--url`, the 200 checked, then every event
//! read as the WHATWG EventSource reads it (fields, comments, multi-line
//! data) and accounted: pushes (delivery latency, gaps, duplicates) and
//! `subscribed` answers. With `--reconnect` a lost stream comes back with
//! the last event id it saw as `Last-Event-ID`, as a browser's would.

use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Heard, Inflight, Speaker};
use crate::net;
use std::collections::HashMap;

/// Longest event (all its lines) the client accepts.
const MAX_EVENT: usize = 1 << 20;

pub struct SseSpeaker {
    traffic: Traffic,
    host_header: String,
    header_lines: String,
    /// The last event id each connection (by slot) saw.
    last_ids: HashMap<usize, String>,
}

impl SseSpeaker {
    pub fn new(traffic: &Traffic, host_header: &str) -> SseSpeaker {
        SseSpeaker { traffic: traffic.clone(), host_header: host_header.to_string(), header_lines: traffic.header_lines(), last_ids: HashMap::new() }
    }
}

/// One event: its type, id and data lines joined.
#[derive(Debug, Default, PartialEq, Eq)]
struct Event {
    kind: Option<String>,
    id: Option<String>,
    data: Option<String>,
}

/// Parse the events whole in `buf` (lines end in LF or CRLF; an empty
/// line ends an event); returns them and the bytes used.
fn events(buf: &[u8]) -> Result<(Vec<Event>, usize), &'static str> {
    let mut out = Vec::new();
    let (mut used, mut pos) = (0, 0);
    let mut e = Event::default();
    while let Some(nl) = buf[pos..].iter().position(|b| *b == b'\n') {
        let raw = &buf[pos..pos + nl];
        pos += nl + 1;
        let line = std::str::from_utf8(raw.strip_suffix(b"\r").unwrap_or(raw)).map_err(|_| "sse_bad_utf8")?;
        if line.is_empty() {
            out.push(std::mem::take(&mut e));
            used = pos;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
        match field {
            "event" => e.kind = Some(value.to_string()),
            "id" => e.id = Some(value.to_string()),
            "data" => match &mut e.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => e.data = Some(value.to_string()),
            },
            _ => {}
        }
    }
    if buf.len() - used > MAX_EVENT {
        return Err("sse_event_too_large");
    }
    Ok((out, used))
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

    fn read(&mut self, ear: Ear<'_>, replies: &mut Replies<'_>) -> Heard {
        let (slot, mut upgrading) = (ear.slot, ear.upgrading);
        let mut upgraded = false;
        let mut goaway = None;
        let last_ids = &mut self.last_ids;
        let mut wire = ear.wire;
        let end = net::read_chunks(&mut wire, ear.partial, ear.scratch, ear.read_closed, |buf| {
            let mut pos = 0;
            if upgrading {
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut resp = httparse::Response::new(&mut headers);
                pos = match resp.parse(buf) {
                    Ok(httparse::Status::Complete(n)) => n,
                    Ok(httparse::Status::Partial) if buf.len() > 64 * 1024 => return Err("sse_head_too_large"),
                    Ok(httparse::Status::Partial) => return Ok(0),
                    Err(_) => return Err("sse_bad_response"),
                };
                if resp.code != Some(200) {
                    return Err("sse_status_not_200");
                }
                let kind = resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-type")).map(|h| h.value);
                if !kind.is_some_and(|v| v.starts_with(b"text/event-stream")) {
                    return Err("sse_not_an_event_stream");
                }
                (upgrading, upgraded) = (false, true);
            }
            let (evs, used) = events(&buf[pos..])?;
            for e in evs {
                if let Some(id) = e.id {
                    last_ids.insert(slot, id);
                }
                let Some(data) = e.data else { continue };
                if e.kind.as_deref() == Some("goaway") {
                    goaway = Some(crate::proto::goaway::decode_json(data.as_bytes()).unwrap_or(0));
                    return Err(super::speak::GOAWAY);
                }
                super::ws::account_text(replies, data.as_bytes());
            }
            Ok(pos + used)
        });
        Heard { end, upgraded, goaway }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_as_eventsource_reads_them() {
        let wire = b"retry: 2000\n: comment\n\nevent: subscribed\r\nid: a:1:2\r\ndata: {\"x\":\r\ndata:1}\r\n\r\nid: b\ndata: half";
        let (evs, used) = events(wire).unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[1], Event { kind: Some("subscribed".into()), id: Some("a:1:2".into()), data: Some("{\"x\":\n1}".into()) });
        assert_eq!(&wire[used..], b"id: b\ndata: half", "the partial event waits for more");
        assert!(events(&vec![b'x'; MAX_EVENT + 1]).is_err());
    }
}
