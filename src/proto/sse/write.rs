//! Writing a `text/event-stream` (WHATWG HTML, "Server-sent events"):
//! the HTTP head that opens a stream, and events as their fields: `id`,
//! `event`, `data` (one `data:` line per line of the text), `retry`, and
//! comments (the heartbeats that keep proxies from closing a quiet
//! stream). Encoders append to a caller's `Vec`; the event loop owns the
//! sockets.
//!
//! Nothing a value holds can break the stream: a field is one line, so a
//! line break in an id, an event name or a comment would end it and start
//! a field nobody wrote. `data` is split at its line breaks (`\r\n`, `\r`
//! and `\n`, as a reader splits them) into one `data:` line each, which a
//! reader joins back with `\n`; in a one-line field they are dropped, and
//! so is NUL in an id (a reader ignores such an id).

/// The answer that opens a stream: `200 text/event-stream`, not cached,
/// not buffered by nginx (`X-Accel-Buffering: no`), readable by a page on
/// any origin (`EventSource` across origins needs CORS).
pub(crate) const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nX-Accel-Buffering: no\r\nAccess-Control-Allow-Origin: *\r\n\r\n";

/// A comment alone, as a heartbeat: readers ignore it, proxies see bytes.
pub(crate) const HEARTBEAT: &[u8] = b": ping\n\n";

/// One event, as [`Event::write`] puts it on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// `id:`, what a reader sends back as `Last-Event-ID` when it reconnects.
    pub id: Option<&'a str>,
    /// `event:`, the type a reader dispatches it as (`message` if None).
    pub event: Option<&'a str>,
    /// `data:` lines, one per line of it; an event always carries one.
    pub data: &'a str,
    /// `retry:`, how long a reader waits before reconnecting (ms).
    pub retry_ms: Option<u32>,
}

impl Event<'_> {
    /// The event's fields and the blank line that dispatches it.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        if let Some(ms) = self.retry_ms {
            retry(out, ms);
        }
        if let Some(name) = self.event {
            event_type(out, name);
        }
        if let Some(id) = self.id {
            id_field(out, id);
        }
        data(out, self.data);
        end(out);
    }
}

/// `id: ID` (line breaks and NUL dropped).
pub(crate) fn id_field(out: &mut Vec<u8>, id: &str) {
    line(out, b"id: ", id, |b| b == b'\r' || b == b'\n' || b == 0);
}

/// `event: NAME` (line breaks dropped).
pub(crate) fn event_type(out: &mut Vec<u8>, name: &str) {
    line(out, b"event: ", name, is_break);
}

/// `retry: MS`.
pub(crate) fn retry(out: &mut Vec<u8>, ms: u32) {
    out.extend_from_slice(format!("retry: {ms}\n").as_bytes());
}

/// `data: LINE` for every line of `text` (`\r\n`, `\r` or `\n` end one),
/// so a reader's data is `text` with its line breaks made `\n`.
pub(crate) fn data(out: &mut Vec<u8>, text: &str) {
    let mut rest = text.as_bytes();
    loop {
        let cut = rest.iter().position(|b| is_break(*b));
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&rest[..cut.unwrap_or(rest.len())]);
        out.push(b'\n');
        let Some(at) = cut else { return };
        let width = if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') { 2 } else { 1 };
        rest = &rest[at + width..];
    }
}

/// `: TEXT`, a comment line (line breaks dropped): readers skip it.
pub(crate) fn comment(out: &mut Vec<u8>, text: &str) {
    line(out, b": ", text, is_break);
}

/// The blank line that ends an event: a reader dispatches it here.
pub(crate) fn end(out: &mut Vec<u8>) {
    out.push(b'\n');
}

fn is_break(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

/// `prefix`, `value` without the bytes `drop` names, a newline.
fn line(out: &mut Vec<u8>, prefix: &[u8], value: &str, drop: impl Fn(u8) -> bool) {
    out.extend_from_slice(prefix);
    out.extend(value.bytes().filter(|b| !drop(*b)));
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader as the WHATWG algorithm reads a stream: (type, data, last
    /// id) of every event dispatched, comments skipped.
    fn read(stream: &[u8]) -> Vec<(String, String, String)> {
        let text = std::str::from_utf8(stream).expect("utf-8");
        let (mut events, mut kind, mut data, mut id) = (Vec::new(), String::new(), String::new(), String::new());
        let mut lines = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(['\r', '\n']) {
            lines.push(&rest[..at]);
            let width = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
            rest = &rest[at + width..];
        }
        assert_eq!(rest, "", "a stream ends with a line break");
        for l in lines {
            if l.is_empty() {
                if !data.is_empty() {
                    data.pop();
                    events.push((if kind.is_empty() { "message".into() } else { kind.clone() }, data.clone(), id.clone()));
                }
                (kind, data) = (String::new(), String::new());
                continue;
            }
            if l.starts_with(':') {
                continue;
            }
            let (name, value) = l.split_once(':').unwrap_or((l, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match name {
                "event" => kind = value.into(),
                "data" => {
                    data.push_str(value);
                    data.push('\n');
                }
                "id" if !value.contains('\0') => id = value.into(),
                _ => {}
            }
        }
        events
    }

    #[test]
    fn an_event_writes_each_field_once_and_ends_with_a_blank_line() {
        let mut out = Vec::new();
        Event { id: Some("a:1:2"), event: Some("subscribed"), data: "{}", retry_ms: Some(2000) }.write(&mut out);
        assert_eq!(out, b"retry: 2000\nevent: subscribed\nid: a:1:2\ndata: {}\n\n");
        out.clear();
        Event { data: "x", ..Event::default() }.write(&mut out);
        assert_eq!(out, b"data: x\n\n");
    }

    #[test]
    fn data_is_one_line_per_line_and_reads_back_with_newlines() {
        let mut out = Vec::new();
        data(&mut out, "a\nb\r\nc\rd");
        assert_eq!(out, b"data: a\ndata: b\ndata: c\ndata: d\n");
        for text in ["", "one", "two\nlines", "trailing\n", "\n\n", " leading space", "crlf\r\nand\rcr", "data: inside\n\nid: forged"] {
            let mut out = Vec::new();
            Event { id: Some("7"), data: text, ..Event::default() }.write(&mut out);
            let want = text.replace("\r\n", "\n").replace('\r', "\n");
            assert_eq!(read(&out), vec![("message".to_string(), want, "7".to_string())], "{text:?}: {:?}", String::from_utf8_lossy(&out));
        }
    }

    #[test]
    fn a_value_cannot_start_a_field_or_an_event() {
        let mut out = Vec::new();
        Event { id: Some("1\nevent: x\0"), event: Some("ev\r\ndata: forged"), data: "d", retry_ms: None }.write(&mut out);
        comment(&mut out, "c\n\ndata: forged");
        assert_eq!(out, b"event: evdata: forged\nid: 1event: x\ndata: d\n\n: cdata: forged\n");
        assert_eq!(read(&out), vec![("evdata: forged".to_string(), "d".to_string(), "1event: x".to_string())]);
    }

    #[test]
    fn heartbeats_and_the_head_dispatch_nothing() {
        let mut out = HEARTBEAT.to_vec();
        retry(&mut out, 2000);
        comment(&mut out, "megaconn event stream");
        end(&mut out);
        assert!(read(&out).is_empty());
        let head = std::str::from_utf8(HEAD).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n") && head.contains("\r\nContent-Type: text/event-stream\r\n"));
    }
}
