//! WebSocket frames (RFC 6455 §5) decoded straight out of a read buffer.
//!
//! No per-connection buffer: a frame is handled as soon as it is whole in
//! the reactor's scratch buffer (unmasked into a per-worker vector); only a
//! frame cut by the network waits in the connection's spill, and only a
//! message split into fragments keeps its data so far in a [`Fragments`]
//! box. Both are bounded by the message cap.
//!
//! With permessage-deflate negotiated (`deflate.rs`) a message whose
//! first frame has RSV1 set is compressed: it is inflated whole, under
//! the message cap, by the caller's per-worker [`Inflater`] once its last
//! fragment is here (the fragments wait compressed, bounded by the cap).
//!
//! Errors are counter names; [`close_code`] maps each to the status code
//! the close frame carries (1002 protocol error, 1007 bad UTF-8 or
//! deflate data, 1009 too big, inflated or not).

use super::deflate::Inflater;

/// Largest payload of a control frame (ping, pong, close).
pub(crate) const MAX_CONTROL: usize = 125;
/// Most bytes a server's frame puts before its payload: 2, then 8 of
/// length from 64 KiB up (RFC 6455 5.2; a server masks nothing).
pub(crate) const MAX_SERVER_HEADER: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opcode {
    Continuation = 0,
    Text = 1,
    Binary = 2,
    Close = 8,
    Ping = 9,
    Pong = 10,
}

impl Opcode {
    fn from_u8(v: u8) -> Option<Opcode> {
        Some(match v {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            8 => Opcode::Close,
            9 => Opcode::Ping,
            10 => Opcode::Pong,
            _ => return None,
        })
    }

    pub(crate) fn is_control(self) -> bool {
        self as u8 >= 8
    }
}

/// Which end is reading: a server requires masked frames, a client
/// refuses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Server,
    Client,
}

/// One decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub fin: bool,
    pub opcode: Opcode,
    pub mask: Option<[u8; 4]>,
    pub len: usize,
    /// RSV1: the message this frame starts is compressed.
    pub rsv1: bool,
    /// Bytes of the header itself (2 to 14).
    pub size: usize,
}

/// Decode the header at the start of `buf`. `Ok(None)`: not all of it is
/// here yet. A payload longer than `max` is refused at once, before any
/// of it is buffered. `deflate`: permessage-deflate was negotiated, so
/// RSV1 may start a data message (never on a control frame or a
/// continuation, RFC 7692 §6.1).
pub(crate) fn header(buf: &[u8], role: Role, max: usize, deflate: bool) -> Result<Option<Header>, &'static str> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    let rsv1 = b0 & 0x40 != 0;
    if b0 & 0x30 != 0 || rsv1 && !deflate {
        // No extension gives RSV2 or RSV3 a meaning here.
        return Err("ws_reserved_bits");
    }
    let opcode = Opcode::from_u8(b0 & 0x0F).ok_or("ws_unknown_opcode")?;
    if rsv1 && opcode.is_control() {
        return Err("ws_rsv1_control");
    }
    if rsv1 && opcode == Opcode::Continuation {
        return Err("ws_rsv1_continuation");
    }
    let fin = b0 & 0x80 != 0;
    let masked = b1 & 0x80 != 0;
    match (role, masked) {
        (Role::Server, false) => return Err("ws_unmasked_frame"),
        (Role::Client, true) => return Err("ws_masked_frame"),
        _ => {}
    }
    let (len, mut size) = match b1 & 0x7F {
        126 => {
            let Some(b) = buf.get(2..4) else { return Ok(None) };
            (u16::from_be_bytes([b[0], b[1]]) as u64, 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else { return Ok(None) };
            let len = u64::from_be_bytes(b.try_into().expect("8 bytes"));
            if len >> 63 != 0 {
                return Err("ws_bad_length");
            }
            (len, 10)
        }
        n => (n as u64, 2),
    };
    if opcode.is_control() {
        if !fin {
            return Err("ws_fragmented_control");
        }
        if len > MAX_CONTROL as u64 {
            return Err("ws_control_too_long");
        }
    } else if len > max as u64 {
        return Err("ws_message_too_big");
    }
    let mask = if masked {
        let Some(m) = buf.get(size..size + 4) else { return Ok(None) };
        size += 4;
        Some([m[0], m[1], m[2], m[3]])
    } else {
        None
    };
    Ok(Some(Header { fin, opcode, mask, len: len as usize, rsv1, size }))
}

/// A protocol violation [`Reader::consume`] found, by its counter name
/// ("ws_bad_utf8", "ws_message_too_big", ...). A caller's own error type
/// takes it by `From` (a plain `&'static str` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Violation(pub(crate) &'static str);

impl Violation {
    /// The close status code its close frame carries (see [`close_code`]).
    pub(crate) fn close_code(self) -> u16 {
        close_code(self.0)
    }
}

impl From<Violation> for &'static str {
    fn from(v: Violation) -> &'static str {
        v.0
    }
}

/// The close status code for a reason from this module (or 1000).
pub(crate) fn close_code(reason: &str) -> u16 {
    match reason {
        "ws_message_too_big" | "ws_inflate_too_big" => 1009,
        "ws_bad_utf8" | "ws_inflate_corrupt" => 1007,
        // Policy violation: past a bound on what a client may ask for.
        "too_many_commands" => 1008,
        r if r.starts_with("ws_") => 1002,
        _ => 1000,
    }
}

/// Append one frame. `mask`: a client's masking key (servers send none).
pub(crate) fn encode(out: &mut Vec<u8>, fin: bool, opcode: Opcode, payload: &[u8], mask: Option<[u8; 4]>) {
    out.reserve(14 + payload.len());
    put_header(out, fin, opcode, payload.len(), mask.is_some());
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            let start = out.len();
            out.extend_from_slice(payload);
            apply_mask(&mut out[start..], key, 0);
        }
        None => out.extend_from_slice(payload),
    }
}

/// A frame header without its masking key: FIN, opcode, the mask bit and
/// the shortest of the three length forms.
fn put_header(out: &mut Vec<u8>, fin: bool, opcode: Opcode, len: usize, masked: bool) {
    out.push(if fin { 0x80 } else { 0 } | opcode as u8);
    let m = if masked { 0x80 } else { 0 };
    match len {
        n if n < 126 => out.push(m | n as u8),
        n if n <= u16::MAX as usize => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
}

/// Make what `out` holds from `start` on one unmasked message (a
/// server's), its header put in front of it: for bytes another protocol
/// wrote first (MQTT packets over WebSocket). Nothing when there are none.
pub(crate) fn wrap_tail(out: &mut Vec<u8>, start: usize, opcode: Opcode) {
    let Some(len) = out.len().checked_sub(start).filter(|n| *n > 0) else { return };
    let mut head = Vec::with_capacity(MAX_SERVER_HEADER);
    put_header(&mut head, true, opcode, len, false);
    out.splice(start..start, head);
}

/// Append one unfragmented message whose payload is already compressed
/// (permessage-deflate): RSV1 set.
pub(crate) fn encode_compressed(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8], mask: Option<[u8; 4]>) {
    let at = out.len();
    encode(out, true, opcode, payload, mask);
    out[at] |= 0x40;
}

/// A close frame with a status code (and no reason text).
pub(crate) fn encode_close(out: &mut Vec<u8>, code: u16, mask: Option<[u8; 4]>) {
    encode_close_reason(out, code, &[], mask);
}

/// A close frame with a status code and a reason (at most 123 bytes of
/// UTF-8: a control frame carries 125).
pub(crate) fn encode_close_reason(out: &mut Vec<u8>, code: u16, reason: &[u8], mask: Option<[u8; 4]>) {
    debug_assert!(reason.len() <= 123);
    let mut payload = [0u8; 125];
    payload[..2].copy_from_slice(&code.to_be_bytes());
    let n = reason.len().min(123);
    payload[2..2 + n].copy_from_slice(&reason[..n]);
    encode(out, true, Opcode::Close, &payload[..2 + n], mask);
}

/// XOR `data` with the masking key, `offset` bytes into the payload.
pub(crate) fn apply_mask(data: &mut [u8], key: [u8; 4], offset: usize) {
    let mut key = key;
    key.rotate_left(offset % 4);
    let word = u32::from_ne_bytes(key);
    let mut chunks = data.chunks_exact_mut(4);
    for c in &mut chunks {
        let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i];
    }
}

/// Whether a close frame's status code may be sent on the wire (§7.4).
fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// A message or control frame, unmasked and (for text) UTF-8 checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event<'a> {
    Message {
        text: bool,
        data: &'a [u8],
    },
    Ping(&'a [u8]),
    Pong(&'a [u8]),
    /// The peer's close: its status code, if it sent one, and its reason
    /// (valid UTF-8, possibly empty).
    Close(Option<u16>, &'a [u8]),
}

/// A message whose first fragments arrived and whose last has not.
#[derive(Debug, Default)]
pub(crate) struct Fragments {
    text: bool,
    /// RSV1 was on its first frame: `data` is deflate data.
    compressed: bool,
    data: Vec<u8>,
}

impl Fragments {
    /// Bytes of the message gathered so far.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }
}

/// Where a reader keeps what it needs between calls.
pub(crate) struct Reader<'a> {
    pub role: Role,
    /// Largest message (all fragments together).
    pub max: usize,
    /// A per-worker vector the payloads are unmasked into.
    pub tmp: &'a mut Vec<u8>,
    pub frag: &'a mut Option<Box<Fragments>>,
    /// permessage-deflate negotiated: the worker's inflater (RSV1 is
    /// refused without one).
    pub inflate: Option<&'a mut Inflater>,
}

impl Reader<'_> {
    /// Decode every whole frame in `buf` and hand each message or control
    /// frame to `on`; return the bytes used (the rest is an incomplete
    /// frame). Stops after a close frame. Err: why the connection must end
    /// (a violation, or the callback's own reason).
    pub(crate) fn consume<E: From<Violation>>(&mut self, buf: &[u8], mut on: impl FnMut(Event<'_>) -> Result<(), E>) -> Result<usize, E> {
        let mut pos = 0;
        loop {
            let Some(h) = header(&buf[pos..], self.role, self.max, self.inflate.is_some()).map_err(Violation)? else { return Ok(pos) };
            if buf.len() - pos < h.size + h.len {
                return Ok(pos);
            }
            let payload = &buf[pos + h.size..pos + h.size + h.len];
            pos += h.size + h.len;
            self.tmp.clear();
            self.tmp.extend_from_slice(payload);
            if let Some(key) = h.mask {
                apply_mask(self.tmp, key, 0);
            }
            match h.opcode {
                Opcode::Ping => on(Event::Ping(self.tmp))?,
                Opcode::Pong => on(Event::Pong(self.tmp))?,
                Opcode::Close => {
                    let (code, reason) = match self.tmp.len() {
                        0 => (None, &[][..]),
                        1 => return Err(Violation("ws_bad_close").into()),
                        _ => {
                            let code = u16::from_be_bytes([self.tmp[0], self.tmp[1]]);
                            if !valid_close_code(code) {
                                return Err(Violation("ws_bad_close").into());
                            }
                            std::str::from_utf8(&self.tmp[2..]).map_err(|_| Violation("ws_bad_utf8"))?;
                            (Some(code), &self.tmp[2..])
                        }
                    };
                    on(Event::Close(code, reason))?;
                    return Ok(pos);
                }
                Opcode::Text | Opcode::Binary => {
                    if self.frag.is_some() {
                        return Err(Violation("ws_expected_continuation").into());
                    }
                    let text = h.opcode == Opcode::Text;
                    if !h.fin {
                        *self.frag = Some(Box::new(Fragments { text, compressed: h.rsv1, data: std::mem::take(self.tmp) }));
                    } else if h.rsv1 {
                        let data = inflate(&mut self.inflate, self.tmp, self.max).map_err(Violation)?;
                        deliver(text, data, &mut on)?;
                    } else {
                        deliver(text, self.tmp, &mut on)?;
                    }
                }
                Opcode::Continuation => {
                    let Some(f) = self.frag.as_mut() else { return Err(Violation("ws_unexpected_continuation").into()) };
                    if f.data.len() + self.tmp.len() > self.max {
                        return Err(Violation("ws_message_too_big").into());
                    }
                    f.data.extend_from_slice(self.tmp);
                    if h.fin {
                        let f = self.frag.take().expect("checked above");
                        if f.compressed {
                            let data = inflate(&mut self.inflate, &f.data, self.max).map_err(Violation)?;
                            deliver(f.text, data, &mut on)?;
                        } else {
                            deliver(f.text, &f.data, &mut on)?;
                        }
                    }
                }
            }
        }
    }
}

/// A compressed message's payload inflated (RSV1 is refused by the
/// header check without an inflater, so one is here).
fn inflate<'i>(inflater: &'i mut Option<&mut Inflater>, data: &[u8], max: usize) -> Result<&'i [u8], &'static str> {
    let i = inflater.as_deref_mut().ok_or("ws_reserved_bits")?;
    i.inflate(data, max).map_err(|e| e.reason())
}

fn deliver<E: From<Violation>>(text: bool, data: &[u8], on: &mut impl FnMut(Event<'_>) -> Result<(), E>) -> Result<(), E> {
    if text {
        std::str::from_utf8(data).map_err(|_| Violation("ws_bad_utf8"))?;
    }
    on(Event::Message { text, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn events(buf: &[u8], role: Role, max: usize) -> (Result<usize, &'static str>, Vec<String>) {
        let (mut tmp, mut frag) = (Vec::new(), None);
        let mut got = Vec::new();
        let r = Reader { role, max, tmp: &mut tmp, frag: &mut frag, inflate: None }.consume(buf, |e| {
            got.push(format!("{e:?}"));
            Ok(())
        });
        (r, got)
    }

    #[test]
    fn masked_frames_unmask_and_lengths_use_all_three_forms() {
        for n in [0usize, 5, 125, 126, 65535, 65536] {
            let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let mut buf = Vec::new();
            encode(&mut buf, true, Opcode::Binary, &data, Some([1, 2, 3, 4]));
            let (mut tmp, mut frag) = (Vec::new(), None);
            let mut seen = None;
            let used = Reader { role: Role::Server, max: 1 << 20, tmp: &mut tmp, frag: &mut frag, inflate: None }
                .consume(&buf, |e| {
                    if let Event::Message { data, .. } = e {
                        seen = Some(data.to_vec());
                    }
                    Ok::<(), &str>(())
                })
                .unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(seen.unwrap(), data);
        }
    }

    /// Bytes written first and wrapped after are the frame `encode`
    /// makes of them, in each length form; what came before is kept, and
    /// nothing to wrap adds nothing.
    #[test]
    fn a_wrapped_tail_is_the_frame_encode_makes() {
        for n in [1usize, 125, 126, 65535, 65536] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let mut wrapped = b"before".to_vec();
            wrapped.extend_from_slice(&payload);
            wrap_tail(&mut wrapped, 6, Opcode::Binary);
            let mut encoded = b"before".to_vec();
            encode(&mut encoded, true, Opcode::Binary, &payload, None);
            assert_eq!(wrapped, encoded, "{n} bytes");
        }
        let mut none = b"kept".to_vec();
        wrap_tail(&mut none, 4, Opcode::Binary);
        assert_eq!(none, b"kept");
    }

    #[test]
    fn violations_are_named_with_their_close_codes() {
        let mut unmasked = Vec::new();
        encode(&mut unmasked, true, Opcode::Text, b"hi", None);
        assert_eq!(events(&unmasked, Role::Server, 100).0, Err("ws_unmasked_frame"));
        assert_eq!(close_code("ws_unmasked_frame"), 1002);
        let mut big = Vec::new();
        encode(&mut big, true, Opcode::Binary, &[0; 200], Some([9; 4]));
        // Refused from the header alone, before the payload arrives.
        assert_eq!(events(&big[..8], Role::Server, 100).0, Err("ws_message_too_big"));
        assert_eq!(close_code("ws_message_too_big"), 1009);
        let mut bad = Vec::new();
        encode(&mut bad, true, Opcode::Text, &[0xC3, 0x28], Some([7; 4]));
        assert_eq!(events(&bad, Role::Server, 100).0, Err("ws_bad_utf8"));
        assert_eq!(close_code("ws_bad_utf8"), 1007);
        assert_eq!(events(&[0x83, 0x80, 0, 0, 0, 0], Role::Server, 100).0, Err("ws_unknown_opcode"));
        assert_eq!(events(&[0xC2, 0x80, 0, 0, 0, 0], Role::Server, 100).0, Err("ws_reserved_bits"));
        assert_eq!(events(&[0x09, 0x80, 0, 0, 0, 0], Role::Server, 100).0, Err("ws_fragmented_control"));
        assert_eq!(events(&[0x80, 0x80, 0, 0, 0, 0], Role::Server, 100).0, Err("ws_unexpected_continuation"));
        let mut close1 = Vec::new();
        encode(&mut close1, true, Opcode::Close, &[3], Some([0; 4]));
        assert_eq!(events(&close1, Role::Server, 100).0, Err("ws_bad_close"));
        let mut masked = Vec::new();
        encode(&mut masked, true, Opcode::Ping, b"x", Some([1; 4]));
        assert_eq!(events(&masked, Role::Client, 100).0, Err("ws_masked_frame"));
    }

    #[test]
    fn fragments_reassemble_around_control_frames() {
        let key = Some([5, 6, 7, 8]);
        let mut buf = Vec::new();
        encode(&mut buf, false, Opcode::Text, "h\u{e9}".as_bytes(), key);
        encode(&mut buf, true, Opcode::Ping, b"p", key);
        encode(&mut buf, false, Opcode::Continuation, "ll".as_bytes(), key);
        encode(&mut buf, true, Opcode::Continuation, "o \u{1F600}".as_bytes(), key);
        encode_close(&mut buf, 1000, key);
        let (r, got) = events(&buf, Role::Server, 100);
        assert_eq!(r, Ok(buf.len()));
        let want = format!("{:?}", Event::Message { text: true, data: "h\u{e9}llo \u{1F600}".as_bytes() });
        assert_eq!(got, vec![format!("{:?}", Event::Ping(b"p")), want, "Close(Some(1000), [])".to_string()]);
        // A UTF-8 sequence cut between fragments is valid once whole.
        let mut split = Vec::new();
        encode(&mut split, false, Opcode::Text, &[0xF0, 0x9F], key);
        encode(&mut split, true, Opcode::Continuation, &[0x98, 0x80], key);
        assert_eq!(events(&split, Role::Server, 100).0, Ok(split.len()));
        // The cap counts every fragment.
        let mut many = Vec::new();
        encode(&mut many, false, Opcode::Binary, &[0; 60], key);
        encode(&mut many, true, Opcode::Continuation, &[0; 60], key);
        assert_eq!(events(&many, Role::Server, 100).0, Err("ws_message_too_big"));
    }

    proptest! {
        #[test]
        fn any_split_point_gives_the_same_messages(data in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..400) {
            let mut buf = Vec::new();
            encode(&mut buf, true, Opcode::Binary, &data, Some([0xA, 0xB, 0xC, 0xD]));
            encode(&mut buf, true, Opcode::Pong, b"t", Some([1, 2, 3, 4]));
            let cut = cut.min(buf.len());
            let (mut tmp, mut frag) = (Vec::new(), None);
            let mut got = Vec::new();
            let mut r = Reader { role: Role::Server, max: 1000, tmp: &mut tmp, frag: &mut frag, inflate: None };
            let used = r.consume(&buf[..cut], |e| { got.push(format!("{e:?}")); Ok::<(), &str>(()) }).unwrap();
            let rest = buf[used..].to_vec();
            r.consume(&rest, |e| { got.push(format!("{e:?}")); Ok::<(), &str>(()) }).unwrap();
            prop_assert_eq!(got, vec![format!("{:?}", Event::Message { text: false, data: &data }), format!("{:?}", Event::Pong(b"t"))]);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = events(&bytes, Role::Server, 50);
            let _ = events(&bytes, Role::Client, 50);
        }

        #[test]
        fn masking_twice_is_identity(data in proptest::collection::vec(any::<u8>(), 0..40), key: [u8; 4], off in 0usize..8) {
            let mut d = data.clone();
            apply_mask(&mut d, key, off);
            apply_mask(&mut d, key, off);
            prop_assert_eq!(d, data);
        }
    }
}
