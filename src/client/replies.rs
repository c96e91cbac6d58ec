//! Reading what the server sends back, per protocol, and accounting for
//! it: heartbeat acks, replies (latency from the intended send time),
//! rejections, and HTTP responses by status class.

use super::snapshot::ClientSnapshot;
use crate::net::{self, ReadEnd, Spill};
use crate::proto::frame::{self, Kind};
use crate::proto::{Protocol, ECHO8_LEN};
use crate::stats::histogram;
use hdrhistogram::Histogram;
use std::collections::VecDeque;

/// Largest HTTP response body the client accepts (it reads whole responses).
const MAX_HTTP_BODY: usize = 64 * 1024 * 1024;

/// What the read path needs to account for replies.
pub struct Replies<'a> {
    pub stats: &'a mut ClientSnapshot,
    pub rtt: &'a mut Histogram<u64>,
    pub latency: &'a mut Histogram<u64>,
    pub now: u64,
    pub timeout_us: u64,
    pub push: &'a mut Histogram<u64>,
    pub seen: &'a mut super::pushes::PushSeen,
    /// `--protocol raw`: how echoes are cut and timed.
    pub raw: Option<&'a super::raw::RawEcho>,
    /// Heartbeats sent on this connection and not answered yet.
    pub beats_out: &'a mut u8,
}

/// Everything a connection can receive that shows the server speaks its
/// protocol: heartbeat answers, replies, rejections, pushes, raw bytes.
/// One definition for every protocol, so "lost before any answer" (the
/// protocol-mismatch verdict) means the same thing for each.
pub fn answers(s: &ClientSnapshot) -> u64 {
    s.heartbeats_answered + s.replies + s.rejected + s.push_received + s.raw_bytes_in
}

impl Replies<'_> {
    /// A heartbeat came back; `sent`: its intended send time, if it
    /// carried one.
    pub(super) fn beat_answered(&mut self, sent: Option<u64>) {
        self.stats.heartbeats_answered += 1;
        *self.beats_out = self.beats_out.saturating_sub(1);
        if let Some(sent) = sent {
            histogram::record(self.rtt, self.now.saturating_sub(sent));
        }
    }

    /// A reply to a request sent at intended time `sent` (µs, monotonic).
    pub(super) fn reply(&mut self, sent: Option<u64>) {
        self.stats.replies += 1;
        let Some(sent) = sent else { return };
        if sent > self.now + 1_000_000 {
            // Not a time we could have sent: the echo was corrupted.
            self.stats.bad_echo += 1;
            return;
        }
        let latency = self.now.saturating_sub(sent);
        if latency > self.timeout_us {
            self.stats.late += 1;
        }
        histogram::record(self.latency, latency);
    }
}

/// Read everything the connection has and account for it.
#[allow(clippy::too_many_arguments)]
pub fn read<S: net::Source>(
    protocol: Protocol,
    stream: &mut S,
    partial: &mut Spill,
    inflight: &mut Option<Box<VecDeque<u64>>>,
    scratch: &mut [u8],
    read_closed: bool,
    wall_offset_us: i64,
    replies: &mut Replies<'_>,
) -> ReadEnd {
    match protocol {
        Protocol::Framed => net::read_frames(stream, partial, scratch, read_closed, |f| {
            match f.kind {
                Kind::HeartbeatAck => replies.beat_answered(frame::stamp_of(f.payload)),
                Kind::Reply => replies.reply(frame::stamp_of(f.payload)),
                Kind::Rejected => replies.stats.rejected += 1,
                Kind::Push => {
                    let p = crate::proto::push::decode(f.payload)?;
                    super::pushes::account(replies.stats, replies.push, replies.seen, &p, crate::proto::push::wall_us());
                }
                _ => return Err("bad_frame_unexpected_kind"),
            }
            Ok(())
        }),
        Protocol::Http => net::read_chunks(stream, partial, scratch, read_closed, |buf| {
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
        }),
        // Server-only protocols (refused by the client's plan): drop.
        Protocol::Raw => match replies.raw {
            Some(raw) => raw.read(stream, partial, scratch, read_closed, replies),
            None => net::read_chunks(stream, partial, scratch, read_closed, |buf| Ok(buf.len())),
        },
        // Server-only protocols (refused by the client's plan): drop.
        Protocol::Echo | Protocol::Discard | Protocol::Ws => net::read_chunks(stream, partial, scratch, read_closed, |buf| Ok(buf.len())),
        Protocol::Echo8 => {
            let offset = wall_offset_us;
            net::read_fixed(stream, partial, scratch, read_closed, ECHO8_LEN, |u| {
                // Back from epoch milliseconds to our monotonic µs.
                let ms = u64::from_be_bytes(u.try_into().expect("8 bytes"));
                replies.reply(Some((ms as i64 * 1000 - offset).max(0) as u64));
                Ok(())
            })
        }
    }
}
