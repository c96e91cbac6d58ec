//! The entry points the fuzzers drive (`fuzz/fuzz_targets/*.rs` call
//! these) and `tests/fuzz_regressions.rs` replays every saved input
//! through: one function per parser that reads bytes from a peer or a
//! user. Each feeds the input the way the product does (whole, and cut
//! into reads) and checks what must hold whatever the input: no panic,
//! no progress beyond the buffer, bounded state.

use crate::proto::ws::frame::{Reader, Role};
use crate::proto::{frame, http, push, ws};

/// One fuzz entry point.
pub type Target = fn(&[u8]);

/// Every target, by name (the fuzz target and corpus directory names).
pub const TARGETS: &[(&str, Target)] = &[
    ("framed", framed),
    ("echo8", echo8),
    ("http_request", http_request),
    ("ws_frames", ws_frames),
    ("ws_handshake", ws_handshake),
    ("ws_inflate", ws_inflate),
    ("admin_request", admin_request),
    ("cli_values", cli_values),
    ("codec", codec),
    ("tls_records", tls_records),
    ("mqtt", mqtt),
    ("http_response", http_response),
    ("sse_events", sse_events),
    ("mqtt_ws", mqtt_ws),
    ("bus", bus),
];

use crate::proto::fuzz_split as split;

/// A socket stand-in: hands out `data` in reads of `step` bytes, then
/// reports WouldBlock like a drained non-blocking socket.
struct Chunks<'a> {
    data: &'a [u8],
    step: usize,
}

impl std::io::Read for Chunks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.data.is_empty() {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The framed decoder through the real read loop (reads of a size the
/// first byte picks), and push payloads inside it.
pub fn framed(data: &[u8]) {
    let step = data.first().map_or(1, |b| *b as usize % 64 + 1);
    let (mut partial, mut scratch) = (None, vec![0u8; 256]);
    let mut frames = 0usize;
    let mut sock = Chunks { data, step };
    // One call per readiness event, until the peer's bytes are used up.
    while !sock.data.is_empty() {
        let end = crate::net::read_frames(&mut sock, &mut partial, &mut scratch, false, |f| {
            frames += 1;
            if f.kind == frame::Kind::Push {
                let _ = push::decode(f.payload);
            }
            Ok(())
        });
        if !matches!(end, crate::net::ReadEnd::Open | crate::net::ReadEnd::Budget) {
            break;
        }
    }
    // What is kept between reads is at most one frame and one read.
    assert!(partial.as_ref().map_or(0, |p| p.len()) <= frame::HEADER_LEN + frame::MAX_PAYLOAD + 256);
    let mut pos = 0;
    while let Ok(Some((_, used))) = frame::decode(&data[pos..]) {
        pos += used;
    }
    let _ = frames;
}

/// The echo8 reader: fixed 8-byte units across arbitrary reads.
pub fn echo8(data: &[u8]) {
    let step = data.first().map_or(1, |b| *b as usize % 13 + 1);
    let (mut partial, mut scratch) = (None, vec![0u8; 64]);
    let mut units = 0usize;
    let mut sock = Chunks { data, step };
    while !sock.data.is_empty() {
        let end = crate::net::read_fixed(&mut sock, &mut partial, &mut scratch, false, crate::proto::ECHO8_LEN, |_| {
            units += 1;
            Ok(())
        });
        assert!(matches!(end, crate::net::ReadEnd::Open | crate::net::ReadEnd::Budget));
    }
    assert_eq!(units, data.len() / 8);
    assert_eq!(partial.map_or(0, |p| p.len()), data.len() % 8);
}

/// HTTP request heads, bodies and chunked streams (on httparse).
pub fn http_request(data: &[u8]) {
    let mut st = http::HttpState::default();
    let mut pos = 0;
    for _ in 0..1000 {
        let (used, step) = http::next(&data[pos..], &mut st, 8192);
        assert!(pos + used <= data.len());
        pos += used;
        match step {
            http::Step::Request(_) if used > 0 => continue,
            _ => break,
        }
    }
}

/// WebSocket frames as a server and as a client reads them, whole and
/// cut in two, with fragments bounded by the message cap.
pub fn ws_frames(data: &[u8]) {
    for role in [Role::Server, Role::Client] {
        let (mut tmp, mut frag) = (Vec::new(), None);
        let mut r = Reader { role, max: 1024, tmp: &mut tmp, frag: &mut frag, inflate: None };
        // As both ends do: a close ends the reading.
        let on = |e: ws::frame::Event<'_>| if matches!(e, ws::frame::Event::Close(..)) { Err("closed") } else { Ok(()) };
        let whole = r.consume(data, on);
        let (a, b) = split(data);
        let (mut tmp2, mut frag2) = (Vec::new(), None);
        let mut r2 = Reader { role, max: 1024, tmp: &mut tmp2, frag: &mut frag2, inflate: None };
        let first = r2.consume(a, on);
        if let (Ok(whole), Ok(used)) = (&whole, &first) {
            let mut rest = a[*used..].to_vec();
            rest.extend_from_slice(b);
            let second = r2.consume(&rest, on);
            assert_eq!(second.map(|n| n + used), Ok(*whole), "cut reads decode like one read");
        }
        if let Ok(n) = whole {
            assert!(n <= data.len());
        }
    }
}

/// permessage-deflate: the input inflated under a bound (never more than
/// the bound, however it compresses), then as the frames of a connection
/// that negotiated it (RSV1 messages, fragments, cut reads); and the
/// offers parsed as a server and answers as a client.
pub fn ws_inflate(data: &[u8]) {
    let max = 4096;
    let mut inflater = ws::deflate::Inflater::default();
    if let Ok(out) = inflater.inflate(data, max) {
        assert!(out.len() <= max);
    }
    for role in [Role::Server, Role::Client] {
        let run = |bytes: &[&[u8]]| {
            let (mut tmp, mut frag, mut inf) = (Vec::new(), None, ws::deflate::Inflater::default());
            let mut r = Reader { role, max, tmp: &mut tmp, frag: &mut frag, inflate: Some(&mut inf) };
            let mut total: Result<usize, &'static str> = Ok(0);
            let mut carry = Vec::new();
            for b in bytes {
                carry.extend_from_slice(b);
                let used = r.consume(&carry, |e| {
                    if let ws::frame::Event::Message { data, .. } = e {
                        assert!(data.len() <= max, "an inflated message past the cap");
                    }
                    Ok(())
                });
                match used {
                    Ok(n) => {
                        carry.drain(..n);
                        total = total.map(|t| t + n);
                    }
                    Err(e) => return Err(e),
                }
            }
            total
        };
        let (a, b) = split(data);
        if let (Ok(whole), Ok(cut)) = (run(&[data]), run(&[a, b])) {
            assert_eq!(whole, cut, "cut reads decode like one read");
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = ws::deflate::accept(s);
        let _ = ws::deflate::check_answer(Some(s));
    }
}

/// The Upgrade request (server) and the 101 (client).
pub fn ws_handshake(data: &[u8]) {
    if let Ok(Some((up, used))) = ws::handshake::parse_request(data, 8192) {
        assert!(used <= data.len());
        let _ = ws::handshake::subscriptions(&up.target).count();
    }
    let _ = ws::handshake::parse_response(data, "dGhlIHNhbXBsZSBub25jZQ==", &[]);
}

/// The admin API's request routing: method, URL and body from bytes.
pub fn admin_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let method = parts.next().unwrap_or("");
    let url = parts.next().unwrap_or("");
    let body = parts.next().unwrap_or("").as_bytes().to_vec();
    let _ = crate::admin::route::parse(method, url, body);
}

/// Every flag value parser a user's command line reaches.
pub fn cli_values(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let _ = s.parse::<crate::values::PortList>();
    let _ = s.parse::<crate::values::IpList>();
    let _ = s.parse::<crate::values::OptDuration>();
    let _ = s.parse::<crate::values::OptAddr>();
    let _ = s.parse::<crate::values::PerSecond>();
    let _ = crate::values::duration(&s);
    let _ = crate::values::positive_count(&s);
    let _ = crate::values::payload(&s);
    let _ = s.parse::<crate::server::business::service_time::ServiceTime>();
    let _ = s.parse::<crate::server::business::BusinessMode>();
    let _ = crate::client::pushes::parse_subscribe(&s);
    let _ = crate::client::codec::parse(&s);
    let _ = crate::client::url::parse_url(&s);
    if !s.starts_with('@') {
        let _ = crate::client::raw::parse_message(&s);
    }
}

/// `--codec` frames coming back from any server.
pub fn codec(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else { return };
    let c = crate::client::codec::Codec { len_bytes: if sel & 1 == 0 { 2 } else { 4 }, magic: vec![0xCA; (sel as usize >> 1) % 4] };
    let mut pos = 0;
    while let Ok(Some((m, used))) = c.next(&rest[pos..]) {
        assert!(used > m.len() || m.is_empty() && used >= c.len_bytes);
        pos += used;
    }
}

/// The TLS record layer a server connection reads through after its
/// handshake: records sealed from the input (data, alerts, handshake
/// messages, of lengths it picks), one byte possibly flipped, fed back in
/// reads of a size it picks, with what a read leaves over carried to the
/// next (a spill). Whatever the input: no panic, never more plaintext than
/// was sealed, and with nothing flipped every data byte comes back in
/// order until the first record that must end the connection.
pub fn tls_records(data: &[u8]) {
    let [mode, step, flip, rest @ ..] = data else { return };
    let mut sealer = crate::tls::records::Records::for_fuzzing(mode & 1 == 1, mode >> 1);
    let mut opener = crate::tls::records::Records::for_fuzzing(mode & 1 == 1, mode >> 1);
    let (mut wire, mut sent, mut expect_all) = (Vec::new(), Vec::new(), true);
    let mut items = rest;
    while let [kind, len, tail @ ..] = items {
        let n = (*len as usize * 97).min(tail.len());
        let (chunk, after) = tail.split_at(n);
        let kind = [0x17, 0x17, 0x17, 0x15, 0x16, 0x14][*kind as usize % 6];
        if sealer.seal_kind(kind, chunk, &mut wire).is_err() {
            return;
        }
        if kind == 0x17 && expect_all {
            sent.extend_from_slice(chunk);
        } else {
            expect_all = false;
        }
        items = after;
    }
    if *flip > 0 && !wire.is_empty() {
        let at = *flip as usize * 31 % wire.len();
        wire[at] ^= 0x55;
    }
    let step = *step as usize % 200 + 1;
    let mut buf = vec![0u8; 17_000];
    let (mut got, mut spill, mut other) = (Vec::new(), Vec::new(), Vec::new());
    for piece in wire.chunks(step) {
        let mut incoming = std::mem::take(&mut spill);
        incoming.extend_from_slice(piece);
        match opener.open(&mut incoming, &mut buf, &mut other) {
            Ok(o) => {
                assert!(o.used <= incoming.len() && o.filled <= o.used, "{o:?}");
                got.extend_from_slice(&buf[..o.filled]);
                if o.closed {
                    break;
                }
                spill = incoming[o.used..].to_vec();
                assert!(spill.len() < 5 + 16_384 + 256, "a spill never holds more than one record");
            }
            Err(_) => break,
        }
    }
    assert!(got.len() <= rest.len(), "more plaintext than was sealed");
    if *flip == 0 && expect_all {
        assert_eq!(got, sent, "every data byte back, in order");
    }
}

/// MQTT 3.1.1 and 5.0 packets as a server reads them (CONNECT first) and
/// as a client of either version does. The first byte picks: bit 0 client,
/// bit 1 version 5 (client), the rest the packet size limit and a read
/// size. The rest is read whole, cut in two, and in small reads: the
/// packets decoded (re-encoded, as the canonical form) and the end must be
/// the same, what the reader holds never exceeds the packet size limit,
/// and every decoded packet encodes back to bytes that decode to it.
pub fn mqtt(data: &[u8]) {
    crate::proto::mqtt::invariants::check(data);
}

/// A response head as every client reads it: within the buffer, and a
/// head read whole is only waited for (never refused) on any shorter cut.
pub fn http_response(data: &[u8]) {
    if let Ok(Some(h)) = http::parse_response_head(data, 4096) {
        assert!(h.len <= data.len());
        let (cut, _) = split(data);
        if cut.len() < h.len {
            assert!(matches!(http::parse_response_head(cut, 4096), Ok(None)), "a cut head is waited for");
        }
    }
}

/// An event stream as the SSE client reads it, whole and cut in two:
/// the same events and the same error, and never more kept than one
/// event's bound and a line end.
pub fn sse_events(data: &[u8]) {
    use crate::proto::sse::parse::{read_in_pieces, Limits};
    let limits = Limits { max_line: 64, max_event: 256 };
    let read = |pieces: &[&[u8]]| read_in_pieces(pieces, limits, |e| format!("{e:?}"));
    let (a, b) = split(data);
    assert_eq!(read(&[data]), read(&[a, b]));
}

/// MQTT over WebSocket as a WebSocket port's connection reads it after an
/// Upgrade offering `mqtt`, whole and cut into two reads: no panic, never
/// more used than given, what waits between reads within a packet's
/// bound (`server/session/mqtt_ws/harness.rs`).
pub fn mqtt_ws(data: &[u8]) {
    crate::server::session::mqtt_ws::harness::fuzz(data);
}

/// The bus between workers and broker shards (`proto/bus.rs`), fed in
/// reads of a size the first byte picks: every frame it yields encodes
/// back to one that decodes the same, and the buffer never holds more
/// than one frame's bound past what it was given to read.
pub fn bus(data: &[u8]) {
    use crate::proto::bus::{self, FrameBuf, MAX_FRAME};
    let step = data.first().map_or(1, |b| *b as usize % 97 + 1);
    let mut buf = FrameBuf::default();
    for chunk in data.chunks(step) {
        buf.extend(chunk);
        loop {
            match buf.next() {
                Ok(Some(frame)) => {
                    let mut again = Vec::new();
                    bus::encode(&mut again, &frame);
                    let mut other = FrameBuf::default();
                    other.extend(&again);
                    assert_eq!(other.next().expect("an encoded frame decodes"), Some(frame), "a frame round-trips");
                }
                Ok(None) => break,
                // A bad frame ends the link: nothing after it is read.
                Err(_) => return,
            }
        }
        buf.tidy();
        assert!(buf.pending() <= MAX_FRAME + step + 5, "the buffer holds at most a frame in progress");
    }
}
