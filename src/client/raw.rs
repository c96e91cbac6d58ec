//! `--protocol raw`: the client talks to any TCP server. Each heartbeat
//! sends `--message` (escapes `\r \n \t \\ \xHH`, or `@file`); a
//! `\{ts}` marker in it is replaced by the intended send time as 20
//! decimal digits (µs, monotonic), so against an echoing server every
//! reply carries its own round trip. Without a marker the client counts
//! the bytes that come back.

use super::codec::Codec;
use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};

/// Digits of a rendered timestamp marker.
pub(crate) const STAMP_LEN: usize = 20;
/// The marker in `--message` that becomes a timestamp.
pub(crate) const MARKER: &str = "\\{ts}";
/// Largest message (one write per heartbeat; the echo is read in units).
pub(crate) const MAX_MESSAGE: usize = 65536;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RawMessage {
    /// The bytes, with STAMP_LEN placeholder bytes where the marker was.
    pub bytes: Vec<u8>,
    /// Where the timestamp goes, if the message has a marker.
    pub stamp_at: Option<usize>,
}

fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let e = *b.get(i + 1).ok_or("a lone '\\' at the end; write '\\\\' for a backslash")?;
        i += 2;
        out.push(match e {
            b'r' => b'\r',
            b'n' => b'\n',
            b't' => b'\t',
            b'0' => 0,
            b'\\' => b'\\',
            b'x' => {
                let h = s.get(i..i + 2).ok_or("'\\x' needs two hex digits, e.g. \\x00")?;
                i += 2;
                u8::from_str_radix(h, 16).map_err(|_| format!("'\\x{h}' is not a hex byte, e.g. \\x0a"))?
            }
            other => return Err(format!("unknown escape '\\{}'; use \\r \\n \\t \\0 \\\\ \\xHH or \\{{ts}}", other as char)),
        });
    }
    Ok(out)
}

/// Parse `--message` / `--first-message`.
pub(crate) fn parse_message(s: &str) -> Result<RawMessage, String> {
    let text = match s.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?,
        None => s.to_string(),
    };
    let (bytes, stamp_at) = match text.split_once(MARKER) {
        Some((a, b)) => {
            if b.contains(MARKER) {
                return Err("only one \\{ts} marker per message".into());
            }
            let mut bytes = unescape(a)?;
            let at = bytes.len();
            bytes.extend(std::iter::repeat_n(b'0', STAMP_LEN));
            bytes.extend(unescape(b)?);
            (bytes, Some(at))
        }
        None => (unescape(&text)?, None),
    };
    if bytes.is_empty() || bytes.len() > MAX_MESSAGE {
        return Err(format!("a message is 1 to {MAX_MESSAGE} bytes, not {}", bytes.len()));
    }
    Ok(RawMessage { bytes, stamp_at })
}

/// The message with `stamp` in place of the marker.
pub(crate) fn render(m: &RawMessage, out: &mut Vec<u8>, stamp: u64) {
    let start = out.len();
    out.extend_from_slice(&m.bytes);
    if let Some(at) = m.stamp_at {
        let digits = format!("{stamp:0width$}", width = STAMP_LEN);
        out[start + at..start + at + STAMP_LEN].copy_from_slice(digits.as_bytes());
    }
}

/// The timestamp in one echoed message, if it is intact.
pub(crate) fn stamp_in(unit: &[u8], at: usize) -> Option<u64> {
    std::str::from_utf8(unit.get(at..at + STAMP_LEN)?).ok()?.parse().ok()
}

/// How a raw client reads what comes back.
#[derive(Debug, Clone)]
pub(crate) struct RawEcho {
    pub codec: Option<Codec>,
    /// The message as sent (its length) and where its stamp is.
    pub unit: usize,
    pub stamp_at: Option<usize>,
    /// A first message was sent: unframed echoes cannot be cut into
    /// units, so only bytes are counted.
    pub first_sent: bool,
    /// The message goes out on the request schedule (its echoes are
    /// replies) rather than the heartbeat schedule.
    pub as_requests: bool,
}

impl RawEcho {
    /// A message came back: count it, and time it if it carries a stamp.
    fn echo(&self, m: &[u8], replies: &mut Replies<'_>) {
        replies.stats.raw_messages_in += 1;
        let Some(sent) = self.stamp_at.filter(|_| m.len() == self.unit).and_then(|at| stamp_in(m, at)) else { return };
        if self.as_requests {
            replies.reply(Some(sent));
        } else {
            replies.beat_answered(Some(sent));
        }
    }

    /// What the server sent: whole codec frames, whole echoed messages
    /// (a stamp and no first message), or just bytes; returns the bytes
    /// used (only those are counted: the rest is counted when whole).
    pub(crate) fn consume(&self, buf: &[u8], replies: &mut Replies<'_>) -> Result<usize, &'static str> {
        replies.stats.raw_bytes_in += buf.len() as u64;
        let mut used = 0;
        match &self.codec {
            Some(c) => {
                while let Some((m, n)) = c.next(&buf[used..])? {
                    self.echo(m, replies);
                    used += n;
                }
            }
            None if self.stamp_at.is_some() && !self.first_sent => {
                while buf.len() - used >= self.unit {
                    self.echo(&buf[used..used + self.unit], replies);
                    used += self.unit;
                }
            }
            None => used = buf.len(),
        }
        // Bytes left for the next read are counted again then.
        replies.stats.raw_bytes_in -= (buf.len() - used) as u64;
        Ok(used)
    }
}

/// The message as it goes on the wire: framed by the codec, if any.
pub(crate) fn render_framed(m: &RawMessage, codec: Option<&Codec>, out: &mut Vec<u8>, stamp: u64) {
    if let Some(c) = codec {
        c.header(out, m.bytes.len());
    }
    render(m, out, stamp);
}

/// `--protocol raw` as a worker speaks it: the first message once, then
/// `--message` on the heartbeat schedule (or, with a request rate, the
/// request schedule).
pub(crate) struct RawSpeaker {
    message: Option<RawMessage>,
    first: Option<Vec<u8>>,
    codec: Option<Codec>,
    as_requests: bool,
    echo: Option<RawEcho>,
}

impl RawSpeaker {
    pub(crate) fn new(t: &Traffic) -> RawSpeaker {
        RawSpeaker {
            message: t.raw_message.clone(),
            first: t.raw_first.clone(),
            codec: t.raw_codec.clone(),
            as_requests: t.request_rate.is_some(),
            echo: t.raw_message.as_ref().map(|m| RawEcho {
                codec: t.raw_codec.clone(),
                unit: m.bytes.len(),
                stamp_at: m.stamp_at,
                first_sent: t.raw_first.is_some(),
                as_requests: t.request_rate.is_some(),
            }),
        }
    }
}

impl Speaker for RawSpeaker {
    fn open(&mut self, out: &mut Vec<u8>, _slot: usize, _conn: u64, _seen: &super::pushes::PushSeen) {
        if let Some(first) = &self.first {
            if let Some(c) = &self.codec {
                c.header(out, first.len());
            }
            out.extend_from_slice(first);
        }
    }

    fn beats(&self) -> bool {
        !self.as_requests
    }

    /// Only stamped echoes that can be cut into messages are matched to
    /// their heartbeat (see `RawEcho::echo`).
    fn hears_beats(&self) -> bool {
        self.beats() && self.echo.as_ref().is_some_and(|e| e.stamp_at.is_some() && (e.codec.is_some() || !e.first_sent))
    }

    fn beat(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) {
        if let Some(m) = &self.message {
            render_framed(m, self.codec.as_ref(), out, due.intended);
        }
    }

    fn request(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) -> bool {
        let Some(m) = &self.message else { return false };
        render_framed(m, self.codec.as_ref(), out, due.intended);
        true
    }

    fn hear(&mut self, buf: &[u8], _: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        match &self.echo {
            Some(echo) => Ok(echo.consume(buf, replies)?),
            None => Ok(buf.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_escape_and_stamp() {
        let m = parse_message("PING \\{ts}\\r\\n").unwrap();
        assert_eq!(m.stamp_at, Some(5));
        let mut out = Vec::new();
        render(&m, &mut out, 1234);
        assert_eq!(out, b"PING 00000000000000001234\r\n");
        assert_eq!(stamp_in(&out, 5), Some(1234));
        assert_eq!(parse_message("\\x00\\x01a").unwrap().bytes, vec![0, 1, b'a']);
        assert!(parse_message("bad \\q").unwrap_err().contains("unknown escape"));
        assert!(parse_message("\\xZZ").is_err());
        assert!(parse_message("").is_err());
        assert!(parse_message("@/nonexistent/file").unwrap_err().contains("cannot read"));
    }
}
