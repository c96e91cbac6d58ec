//! WebSocket per-message compression (RFC 7692, `permessage-deflate`),
//! both ends, without I/O: the `Sec-WebSocket-Extensions` offers parsed
//! and answered, a message compressed, a compressed message inflated
//! under a hard bound.
//!
//! Only the no-context-takeover form is spoken, in both directions: every
//! message is compressed from an empty window, so its compressed bytes do
//! not depend on the connection. A server then compresses a broadcast
//! once per worker and writes the same bytes to every subscriber, and one
//! [`Deflater`] and one [`Inflater`] per worker (reset per message) serve
//! every connection: an idle connection keeps no compression state, only
//! the fact that it negotiated the extension. The cost is ratio: a
//! message cannot refer back to the previous one.
//!
//! The optional context-takeover form (`takeover.rs`) trades memory for
//! that ratio: a [`Deflater`] of the connection's own that keeps its
//! window between messages, and an [`Inflater`] that lends a connection's
//! [`takeover::InflateContext`] for the length of a read.
//!
//! Raw deflate is flate2's (zlib-rs backend), never written here.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

pub(crate) mod takeover;

/// The extension's token in `Sec-WebSocket-Extensions`.
pub(crate) const EXTENSION: &str = "permessage-deflate";
/// What a sync flush ends with; the sender strips it, the receiver puts
/// it back (RFC 7692 §7.2.1, §7.2.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];
/// The LZ77 window of the shared compressor (2^15 = 32 KiB). A client
/// asking the server for a smaller one (`server_max_window_bits=9..14`)
/// gets that window from a compressor of its connection's own (still no
/// context takeover: made at its first message, reset for each); 8,
/// which zlib cannot make, is declined (§7.1.2.1 allows it).
pub(crate) const WINDOW_BITS: u8 = 15;
/// The smallest window zlib's raw deflate makes.
pub(crate) const MIN_SERVER_WINDOW_BITS: u8 = 9;
/// zlib's default level: a push is compressed once per worker, so its
/// cost is paid once whatever the audience.
const LEVEL: u32 = 6;
/// Bytes inflated per step: the most an inflate may produce beyond the
/// caller's limit before it stops.
pub(crate) const INFLATE_CHUNK: usize = 16 * 1024;
/// Longest `Sec-WebSocket-Extensions` value looked at (several header
/// lines together); past it no offer is accepted.
pub(crate) const MAX_OFFERS_LEN: usize = 4096;

/// One `permessage-deflate` offer's parameters (RFC 7692 §7.1), valid:
/// each at most once, window bits 8..=15 written without leading zeros.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offer {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
    /// `server_max_window_bits=N`: the client asks the server's window to
    /// be at most 2^N.
    pub server_max_window_bits: Option<u8>,
    /// `client_max_window_bits` (Some(None): without a value): the client
    /// can limit its own window if asked.
    pub client_max_window_bits: Option<Option<u8>>,
}

/// Why an offer was refused (the next one is tried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OfferError {
    UnknownParameter,
    DuplicateParameter,
    BadValue,
}

/// A parameter's value: 8..=15 as a token or a quoted string, no
/// leading zero (RFC 7692 §7.1.2.1: `1*DIGIT` in 8..15).
fn window_bits(v: &str) -> Result<u8, OfferError> {
    let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
    if v.is_empty() || v.len() > 2 || v.starts_with('0') || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(OfferError::BadValue);
    }
    let n: u8 = v.parse().map_err(|_| OfferError::BadValue)?;
    (8..=15).contains(&n).then_some(n).ok_or(OfferError::BadValue)
}

/// Parse one offer's parameters (`name` or `name=value`, already split).
pub(crate) fn parse_offer<'a>(params: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Result<Offer, OfferError> {
    let mut o = Offer::default();
    let mut seen = [false; 4];
    for (name, value) in params {
        let i = match name.to_ascii_lowercase().as_str() {
            "server_no_context_takeover" => 0,
            "client_no_context_takeover" => 1,
            "server_max_window_bits" => 2,
            "client_max_window_bits" => 3,
            _ => return Err(OfferError::UnknownParameter),
        };
        if std::mem::replace(&mut seen[i], true) {
            return Err(OfferError::DuplicateParameter);
        }
        match (i, value) {
            (0, None) => o.server_no_context_takeover = true,
            (1, None) => o.client_no_context_takeover = true,
            (2, Some(v)) => o.server_max_window_bits = Some(window_bits(v)?),
            (3, None) => o.client_max_window_bits = Some(None),
            (3, Some(v)) => o.client_max_window_bits = Some(Some(window_bits(v)?)),
            _ => return Err(OfferError::BadValue),
        }
    }
    Ok(o)
}

/// One extension of a `Sec-WebSocket-Extensions` value: its name and its
/// parameters (`name` or `name=value`, a value still quoted if it was).
pub(crate) type Extension<'a> = (&'a str, Vec<(&'a str, Option<&'a str>)>);

/// The extensions in a `Sec-WebSocket-Extensions` value, in order: each
/// a name and its parameters. A quoted value may hold `,` and `;`. None:
/// the value is not even a list (an unterminated quote).
pub(crate) fn extensions(value: &str) -> Option<Vec<Extension<'_>>> {
    let mut items = Vec::new();
    for ext in split_outside_quotes(value, ',')? {
        let mut parts = split_outside_quotes(ext, ';')?.into_iter().map(str::trim);
        let name = parts.next().unwrap_or("");
        if name.is_empty() {
            continue;
        }
        let params = parts
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (p, None),
            })
            .collect();
        items.push((name, params));
    }
    Some(items)
}

fn split_outside_quotes(s: &str, sep: char) -> Option<Vec<&str>> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return None;
    }
    out.push(&s[start..]);
    Some(out)
}

/// The server's choice among a client's offers: the answer's value for
/// `Sec-WebSocket-Extensions` and, when the client asked for a server
/// window under 2^15, that window (its connection then compresses with a
/// compressor of its own); None: no acceptable offer, the connection goes
/// on uncompressed. The first valid `permessage-deflate` offer the server
/// can honour wins (a window of 2^8 it cannot, see [`WINDOW_BITS`]). The
/// answer always carries `server_no_context_takeover` (our messages stand
/// alone) and `client_no_context_takeover` (a server may require it,
/// §7.1.1.2: the client's must too, or one inflater per worker could not
/// read them), and the `server_max_window_bits` asked for, as §7.1.2.1
/// accepts it.
pub(crate) fn accept(offers: &str) -> Option<(String, Option<u8>)> {
    if offers.len() > MAX_OFFERS_LEN {
        return None;
    }
    let chosen = extensions(offers)?
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(EXTENSION))
        .filter_map(|(_, params)| parse_offer(params).ok())
        .find(|o| o.server_max_window_bits.is_none_or(|b| b >= MIN_SERVER_WINDOW_BITS))?;
    Some(match chosen.server_max_window_bits {
        None => (ANSWER.to_string(), None),
        Some(b) => (format!("{ANSWER}; server_max_window_bits={b}"), (b < WINDOW_BITS).then_some(b)),
    })
}

/// What a server accepting an offer answers (see [`accept`]).
pub(crate) const ANSWER: &str = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";
/// What a client offers: both directions without context takeover, so
/// one inflater per worker reads every connection's messages.
pub(crate) const CLIENT_OFFER: &str = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

/// A client's check of the server's answer to [`CLIENT_OFFER`]: Ok(true)
/// accepted, Ok(false) the server left the extension out, Err: an answer
/// the offer did not allow (RFC 7692 §7.1: the client must fail the
/// connection) or one without `server_no_context_takeover`.
pub(crate) fn check_answer(value: Option<&str>) -> Result<bool, &'static str> {
    let Some(value) = value else { return Ok(false) };
    let exts = extensions(value).ok_or("ws_deflate_bad_answer")?;
    let mut found = None;
    for (name, params) in exts {
        if !name.eq_ignore_ascii_case(EXTENSION) || found.is_some() {
            return Err("ws_deflate_bad_answer");
        }
        found = Some(parse_offer(params).map_err(|_| "ws_deflate_bad_answer")?);
    }
    match found {
        None => Ok(false),
        Some(o) if !o.server_no_context_takeover => Err("ws_deflate_bad_answer"),
        // Our offer carried no client_max_window_bits: the server may not
        // name one (§7.1.2.2); its own window bits are its business.
        Some(o) if o.client_max_window_bits.is_some() => Err("ws_deflate_bad_answer"),
        Some(_) => Ok(true),
    }
}

/// A compressor kept once per worker and reset per message (or, with
/// [`Deflater::with_context_takeover`], one connection's, never reset).
pub(crate) struct Deflater {
    /// Made at the first message: zlib's state for a 2^15 window is
    /// ~270 KB, which a worker that never compresses should not hold
    /// (56 workers hold 1,000,000 idle connections).
    c: Option<Box<Compress>>,
    bits: u8,
    /// Keep the window between messages (context takeover): each message
    /// may refer back to the ones before it on this connection.
    keep_context: bool,
}

impl Default for Deflater {
    fn default() -> Self {
        Self::new(WINDOW_BITS)
    }
}

impl Deflater {
    /// With a window of 2^`bits` (9..=15; 8 is taken as 9, as zlib does).
    pub(crate) fn new(bits: u8) -> Deflater {
        Deflater { c: None, bits: bits.clamp(9, 15), keep_context: false }
    }

    /// One connection's compressor with context takeover: never reset, so
    /// a message repeating an earlier one (within 2^`bits` bytes) costs a
    /// few back-references. Its zlib state is made at the first message
    /// and lives until the connection closes.
    pub(crate) fn with_context_takeover(bits: u8) -> Deflater {
        Deflater { keep_context: true, ..Deflater::new(bits) }
    }

    /// Whether it keeps its window between messages.
    pub(crate) fn keeps_context(&self) -> bool {
        self.keep_context
    }

    /// Whether its zlib state has been made (the first message came).
    #[cfg(test)]
    pub(crate) fn is_allocated(&self) -> bool {
        self.c.is_some()
    }

    /// Append `msg` compressed on its own (raw deflate, sync flush, the
    /// trailing `00 00 FF FF` stripped) to `out`.
    pub(crate) fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        let bits = self.bits;
        let c = self.c.get_or_insert_with(|| Box::new(Compress::new_with_window_bits(Compression::new(LEVEL), false, bits)));
        if !self.keep_context {
            c.reset();
        }
        let start = out.len();
        // Stored blocks bound the output: 5 bytes per 16 KiB and the flush.
        out.reserve(msg.len() + msg.len() / 1024 + 64);
        let mut used = 0;
        loop {
            let before = c.total_in();
            let st = c.compress_vec(&msg[used..], out, FlushCompress::Sync);
            used += (c.total_in() - before) as usize;
            let full = out.len() == out.capacity();
            if st.is_err() || (used == msg.len() && !full) {
                break;
            }
            out.reserve(1024);
        }
        if out[start..].ends_with(&TAIL) {
            out.truncate(out.len() - TAIL.len());
        }
        if out.len() == start {
            // An empty message compresses to one empty block (§7.2.3.6).
            out.push(0x00);
        }
    }
}

/// Why a compressed message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InflateError {
    /// It inflated past the limit (close 1009).
    TooBig,
    /// Not valid deflate data (close 1007).
    Corrupt,
}

impl InflateError {
    /// The close reason (a counter name; `frame::close_code` maps it).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            InflateError::TooBig => "ws_inflate_too_big",
            InflateError::Corrupt => "ws_inflate_corrupt",
        }
    }
}

/// What an [`Inflater`] did since it was last asked (moved into a
/// side's counters after each read).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InflateTally {
    pub messages: u64,
    /// Compressed bytes (as on the wire, without frame headers).
    pub wire_bytes: u64,
    /// Bytes of the messages once inflated.
    pub message_bytes: u64,
    pub too_big: u64,
    pub corrupt: u64,
}

/// A decompressor kept once per worker, reset per message, and the
/// vector messages are inflated into (its capacity stays at most the
/// largest message allowed plus one chunk).
#[derive(Default)]
pub(crate) struct Inflater {
    /// Made at the first message (~45 KB of zlib state), as [`Deflater`].
    d: Option<Box<Decompress>>,
    out: Vec<u8>,
    pub tally: InflateTally,
    /// While a connection's [`takeover::InflateContext`] is lent
    /// ([`Inflater::lend`]): its window, kept between messages, and the
    /// worker's own decompressor, put back by [`Inflater::give_back`].
    lent: Option<(u8, Option<Box<Decompress>>)>,
}

impl Inflater {
    /// Inflate one message (its frames' payloads joined) no larger than
    /// `max` once inflated. The inflated bytes are counted as they come:
    /// a small message that would inflate to gigabytes stops after `max`
    /// (+ at most [`INFLATE_CHUNK`]) bytes with [`InflateError::TooBig`].
    pub(crate) fn inflate(&mut self, data: &[u8], max: usize) -> Result<&[u8], InflateError> {
        let r = self.run(data, max);
        match r {
            Ok(n) => {
                self.tally.messages += 1;
                self.tally.wire_bytes += data.len() as u64;
                self.tally.message_bytes += n as u64;
                Ok(&self.out[..n])
            }
            Err(e) => {
                match e {
                    InflateError::TooBig => self.tally.too_big += 1,
                    InflateError::Corrupt => self.tally.corrupt += 1,
                }
                self.out = Vec::new();
                Err(e)
            }
        }
    }

    /// Inflate with a connection's context (context takeover) until
    /// [`Inflater::give_back`]: its decompressor is made at its first
    /// message with its window and never reset; the output vector stays
    /// the worker's.
    pub(crate) fn lend(&mut self, ctx: &mut takeover::InflateContext) {
        debug_assert!(self.lent.is_none(), "one context at a time");
        let own = std::mem::replace(&mut self.d, ctx.d.take());
        self.lent = Some((ctx.bits, own));
    }

    /// End [`Inflater::lend`]: the connection's decompressor (with its
    /// window) back into `ctx`, the worker's back in place.
    pub(crate) fn give_back(&mut self, ctx: &mut takeover::InflateContext) {
        if let Some((_, own)) = self.lent.take() {
            ctx.d = std::mem::replace(&mut self.d, own);
        }
    }

    fn run(&mut self, data: &[u8], max: usize) -> Result<usize, InflateError> {
        let d = match self.lent {
            Some((bits, _)) => self.d.get_or_insert_with(|| Box::new(Decompress::new_with_window_bits(false, bits))),
            None => {
                let d = self.d.get_or_insert_with(|| Box::new(Decompress::new(false)));
                d.reset(false);
                d
            }
        };
        let cap = max.saturating_add(1);
        let mut produced = 0usize;
        for part in [data, &TAIL[..]] {
            let mut used = 0;
            loop {
                let room = produced.saturating_add(INFLATE_CHUNK).min(cap);
                if self.out.len() < room {
                    self.out.resize(room, 0);
                }
                let (in0, out0) = (d.total_in(), d.total_out());
                let st = d.decompress(&part[used..], &mut self.out[produced..room], FlushDecompress::Sync).map_err(|_| InflateError::Corrupt)?;
                let (took, made) = ((d.total_in() - in0) as usize, (d.total_out() - out0) as usize);
                used += took;
                produced += made;
                if produced > max {
                    return Err(InflateError::TooBig);
                }
                if st == Status::StreamEnd {
                    // A final block (BFINAL): nothing after it counts.
                    return Ok(produced);
                }
                let full = produced == room;
                if used == part.len() && !full {
                    break;
                }
                if took == 0 && made == 0 && !full {
                    return Err(InflateError::Corrupt);
                }
            }
        }
        Ok(produced)
    }
}

#[cfg(test)]
mod tests;
