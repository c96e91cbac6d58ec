//! `--protocol ws --message`: an application's own message (text, or
//! binary with `--ws-binary`) instead of pings or stamped requests, with
//! per-connection substitutions: `{conn}` (the connection's global
//! index), `{shard}` (this client's shard), `{seq}` (the connection's
//! message number), `{ts}` (the intended send time, 20 digits, µs). An
//! echo that matches the message's shape is timed from its `{ts}`.

use super::raw::{RawMessage, STAMP_LEN};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Bytes(Vec<u8>),
    Conn,
    Shard,
    Seq,
    Ts,
}

#[derive(Debug, Clone)]
pub(crate) struct WsMessage {
    parts: Vec<Part>,
    pub binary: bool,
}

const PLACEHOLDERS: [(&[u8], Part); 4] = [(b"{conn}", Part::Conn), (b"{shard}", Part::Shard), (b"{seq}", Part::Seq), (b"{ts}", Part::Ts)];

impl WsMessage {
    /// From `--message` (its escapes already applied; a raw-style `\{ts}`
    /// marker counts as `{ts}`).
    pub(crate) fn new(m: &RawMessage, binary: bool) -> WsMessage {
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let mut i = 0;
        while i < m.bytes.len() {
            if m.stamp_at == Some(i) {
                parts.push(Part::Bytes(std::mem::take(&mut lit)));
                parts.push(Part::Ts);
                i += STAMP_LEN;
                continue;
            }
            if let Some((p, part)) = PLACEHOLDERS.iter().find(|(p, _)| m.bytes[i..].starts_with(p)) {
                parts.push(Part::Bytes(std::mem::take(&mut lit)));
                parts.push(part.clone());
                i += p.len();
                continue;
            }
            lit.push(m.bytes[i]);
            i += 1;
        }
        parts.push(Part::Bytes(lit));
        parts.retain(|p| !matches!(p, Part::Bytes(b) if b.is_empty()));
        WsMessage { parts, binary }
    }

    /// Whether echoes can be timed (the message has a `{ts}`).
    #[cfg(test)]
    pub(crate) fn timed(&self) -> bool {
        self.parts.contains(&Part::Ts)
    }

    pub(crate) fn render(&self, out: &mut Vec<u8>, conn: u64, shard: u64, seq: u64, ts: u64) {
        for p in &self.parts {
            match p {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::Conn => out.extend_from_slice(conn.to_string().as_bytes()),
                Part::Shard => out.extend_from_slice(shard.to_string().as_bytes()),
                Part::Seq => out.extend_from_slice(seq.to_string().as_bytes()),
                Part::Ts => out.extend_from_slice(format!("{ts:0width$}", width = STAMP_LEN).as_bytes()),
            }
        }
    }

    /// If `echo` has this message's shape: Some(its `{ts}`, if it has one).
    pub(crate) fn echo_of(&self, echo: &[u8]) -> Option<Option<u64>> {
        let mut rest = echo;
        let mut ts = None;
        for p in &self.parts {
            match p {
                Part::Bytes(b) => rest = rest.strip_prefix(b.as_slice())?,
                Part::Conn | Part::Shard | Part::Seq => {
                    let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                    if n == 0 {
                        return None;
                    }
                    rest = &rest[n..];
                }
                Part::Ts => {
                    let digits = rest.get(..STAMP_LEN)?;
                    ts = Some(std::str::from_utf8(digits).ok()?.parse().ok()?);
                    rest = &rest[STAMP_LEN..];
                }
            }
        }
        rest.is_empty().then_some(ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_render_and_echoes_are_recognised() {
        let m = WsMessage::new(&super::super::raw::parse_message(r#"{"op":"ping","conn":{conn},"shard":{shard},"n":{seq},"ts":{ts}}"#).unwrap(), false);
        let mut out = Vec::new();
        m.render(&mut out, 42, 3, 7, 123_456);
        assert_eq!(String::from_utf8_lossy(&out), r#"{"op":"ping","conn":42,"shard":3,"n":7,"ts":00000000000000123456}"#);
        assert_eq!(m.echo_of(&out), Some(Some(123_456)));
        assert_eq!(m.echo_of(b"something else"), None);
        assert!(m.timed());
        let plain = WsMessage::new(&super::super::raw::parse_message("hello {conn}").unwrap(), true);
        assert!(!plain.timed());
        let mut out = Vec::new();
        plain.render(&mut out, 5, 0, 0, 0);
        assert_eq!(out, b"hello 5");
        assert_eq!(plain.echo_of(b"hello 5"), Some(None));
        // The raw client's marker works too.
        let raw = WsMessage::new(&super::super::raw::parse_message("t=\\{ts}").unwrap(), false);
        let mut out = Vec::new();
        raw.render(&mut out, 0, 0, 0, 99);
        assert_eq!(raw.echo_of(&out), Some(Some(99)));
    }
}
