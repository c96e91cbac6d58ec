//! The default megaconn wire format: small length-prefixed binary frames.
//!
//! ```text
//! 0        2        3                      2+len
//! +--------+--------+----------------------+
//! | len:u16 (BE)    | kind:u8 | payload    |   len = 1 + payload bytes
//! +--------+--------+----------------------+
//! ```
//!
//! `len` counts the kind byte and the payload, so it is at least 1 and at
//! most `1 + MAX_PAYLOAD`. Kinds: 1 heartbeat, 2 heartbeat ack (the
//! server echoes the heartbeat's payload), 3 request, 4 reply, 5 rejected,
//! 6 subscribe and 7 unsubscribe (payload: the topic name), 8 push, 9
//! resume (subscribe and recover what was missed), 10 subscribed (its
//! answer), 11 push part (the rest of a push over one frame), 12 goaway
//! (a draining server's reconnect hint: u32 BE retry delay in ms, see
//! `server::goaway`); see `proto::push` for the payloads of 8 to 11.
//! Clients put their intended send time (u64 BE microseconds on
//! CLOCK_MONOTONIC) in the first 8 payload bytes when the payload is at
//! least 8 bytes long, so round trips can be timed from the echo alone.
//! Anything else (length 0, length above the cap, unknown kind) is a
//! protocol error and the connection is closed and counted.

/// Largest payload a frame may carry (bytes). Frames stay small so no
/// connection ever needs a large buffer.
pub(crate) const MAX_PAYLOAD: usize = 4096;

/// Bytes before the payload: length (2) and kind (1).
pub(crate) const HEADER_LEN: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Heartbeat = 1,
    HeartbeatAck = 2,
    Request = 3,
    Reply = 4,
    Rejected = 5,
    Subscribe = 6,
    Unsubscribe = 7,
    Push = 8,
    Resume = 9,
    Subscribed = 10,
    PushPart = 11,
    Goaway = 12,
    /// Client -> server: a bearer token (`server --auth jwt`), first
    /// before anything else, and again to refresh it before it expires.
    Auth = 13,
    /// Client -> server: `topic_len:u8 topic data` for the application
    /// (`server --upstream`); topic_len 0: no topic.
    Publish = 14,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Heartbeat,
            2 => Kind::HeartbeatAck,
            3 => Kind::Request,
            4 => Kind::Reply,
            5 => Kind::Rejected,
            6 => Kind::Subscribe,
            7 => Kind::Unsubscribe,
            8 => Kind::Push,
            9 => Kind::Resume,
            10 => Kind::Subscribed,
            11 => Kind::PushPart,
            12 => Kind::Goaway,
            13 => Kind::Auth,
            14 => Kind::Publish,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    pub kind: Kind,
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameError {
    ZeroLength,
    TooLong(usize),
    UnknownKind(u8),
}

impl FrameError {
    /// The counter name this error is reported under.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            FrameError::ZeroLength => "bad_frame_zero_length",
            FrameError::TooLong(_) => "bad_frame_too_long",
            FrameError::UnknownKind(_) => "bad_frame_unknown_kind",
        }
    }
}

/// A decode error as its counter name, for callers whose errors are names.
impl From<FrameError> for &'static str {
    fn from(e: FrameError) -> &'static str {
        e.kind_name()
    }
}

/// Decode the first frame of `buf`. `Ok(None)` means more bytes are
/// needed; on success returns the frame and how many bytes it used.
pub(crate) fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
    if len == 0 {
        return Err(FrameError::ZeroLength);
    }
    if len > 1 + MAX_PAYLOAD {
        return Err(FrameError::TooLong(len));
    }
    let Some(&kind_byte) = buf.get(2) else { return Ok(None) };
    let kind = Kind::from_u8(kind_byte).ok_or(FrameError::UnknownKind(kind_byte))?;
    if buf.len() < 2 + len {
        return Ok(None);
    }
    Ok(Some((Frame { kind, payload: &buf[3..2 + len] }, 2 + len)))
}

/// Append one frame to `out`. Payloads above the cap are a caller bug
/// (flags are validated long before), so they are truncated to the cap.
pub(crate) fn encode(out: &mut Vec<u8>, kind: Kind, payload: &[u8]) {
    let payload = &payload[..payload.len().min(MAX_PAYLOAD)];
    out.reserve(HEADER_LEN + payload.len());
    out.extend_from_slice(&((payload.len() + 1) as u16).to_be_bytes());
    out.push(kind as u8);
    out.extend_from_slice(payload);
}

/// Append a frame whose payload is `size` bytes starting with the send
/// timestamp (when it fits) and zero-filled after it.
pub(crate) fn encode_stamped(out: &mut Vec<u8>, kind: Kind, stamp_us: u64, size: usize) {
    let size = size.min(MAX_PAYLOAD);
    out.extend_from_slice(&((size + 1) as u16).to_be_bytes());
    out.push(kind as u8);
    let stamp = stamp_us.to_be_bytes();
    let n = size.min(8);
    out.extend_from_slice(&stamp[..n]);
    out.resize(out.len() + (size - n), 0);
}

/// The send timestamp carried in a payload, if it has one.
pub(crate) fn stamp_of(payload: &[u8]) -> Option<u64> {
    payload.get(..8).map(|b| u64::from_be_bytes(b.try_into().unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip_and_errors() {
        let mut out = Vec::new();
        encode_stamped(&mut out, Kind::Heartbeat, 42, 64);
        assert_eq!(out.len(), HEADER_LEN + 64);
        let (f, used) = decode(&out).unwrap().unwrap();
        assert_eq!((f.kind, used, stamp_of(f.payload)), (Kind::Heartbeat, 67, Some(42)));
        assert_eq!(decode(&out[..10]).unwrap(), None);
        assert_eq!(decode(&out[..2]).unwrap(), None);
        assert_eq!(decode(&[0, 0, 1]), Err(FrameError::ZeroLength));
        assert_eq!(decode(&[0xff, 0xff, 1]), Err(FrameError::TooLong(65535)));
        assert_eq!(decode(&[0, 1, 99]), Err(FrameError::UnknownKind(99)));
        let mut tiny = Vec::new();
        encode_stamped(&mut tiny, Kind::Request, 7, 3);
        let (f, _) = decode(&tiny).unwrap().unwrap();
        assert_eq!((f.payload.len(), stamp_of(f.payload)), (3, None));
    }

    proptest! {
        /// However the byte stream is cut into reads, the decoder yields
        /// the same frames in the same order.
        #[test]
        fn any_split_decodes_the_same(sizes in proptest::collection::vec(0usize..200, 1..20),
                                      cuts in proptest::collection::vec(1usize..50, 1..100)) {
            let mut stream = Vec::new();
            for (i, s) in sizes.iter().enumerate() {
                encode_stamped(&mut stream, Kind::Heartbeat, i as u64, *s);
            }
            let mut pending: Vec<u8> = Vec::new();
            let mut seen = Vec::new();
            let mut pos = 0;
            let mut ci = 0;
            while pos < stream.len() {
                let n = cuts[ci % cuts.len()].min(stream.len() - pos);
                ci += 1;
                pending.extend_from_slice(&stream[pos..pos + n]);
                pos += n;
                let mut used_total = 0;
                while let Some((f, used)) = decode(&pending[used_total..]).unwrap() {
                    seen.push(f.payload.len());
                    used_total += used;
                }
                pending.drain(..used_total);
            }
            prop_assert!(pending.is_empty());
            prop_assert_eq!(seen, sizes);
        }
    }
}
