//! permessage-deflate on the server's WebSocket ports (`--ws-deflate`):
//! the settings, and the one compressor and decompressor a worker keeps
//! for all its connections (the wire format is `proto/ws/deflate.rs`).
//!
//! A connection that negotiated the extension costs one bit of its
//! record (`Conn::ws_deflate`); a push is compressed once per worker and
//! the same bytes go to every such subscriber, next to the uncompressed
//! frame for the others. Compressed messages from clients are inflated by
//! the worker's [`Inflater`], reset per message, under `--max-message-bytes`.
//!
//! `--ws-deflate takeover` (off by default) lets a client that allows it
//! keep context both ways: such a connection gets a [`ConnContext`] in the
//! worker's table at its handshake, whose compressor and decompressor are
//! made at their first message and freed with the connection. Its pushes
//! are then compressed for it alone (the price of the ratio: one deflate
//! per such subscriber, and its zlib state for as long as it lives).

use crate::proto::ws::deflate::takeover::{Agreement, InflateContext};
use crate::proto::ws::deflate::{Deflater, Inflater};
use crate::proto::ws::frame::{self, Opcode};
use crate::server::snapshot::ServerSnapshot;
use serde::{Deserialize, Serialize};

/// Below this many bytes a message goes uncompressed by default: a
/// message this small rarely shrinks by more than its frame header.
pub(crate) const DEFAULT_MIN_BYTES: usize = 64;

/// `--ws-deflate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub(crate) enum DeflateMode {
    /// Answer permessage-deflate offers (no context takeover both ways).
    #[default]
    On,
    /// Never negotiate it: every message goes uncompressed.
    Off,
    /// As `on`, and where the client's offer allows it, context takeover
    /// in either direction: a compressor and a decompressor per such
    /// connection (window: --ws-deflate-window-bits), better ratio for
    /// repetitive pushes, memory per connection (docs/protocol.md).
    Takeover,
}

/// The window of a connection's own compressor by default (2^12 = 4 KiB):
/// a push repeats its predecessors' keys and symbols within a few KB, and
/// a smaller window costs less per connection (docs/protocol.md).
pub(crate) const DEFAULT_WINDOW_BITS: u8 = 12;

/// The deflate settings of a server worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeflateConfig {
    pub mode: DeflateMode,
    /// Messages shorter than this go uncompressed (RSV1 clear).
    pub min_bytes: usize,
    /// `--ws-deflate-window-bits`: the largest window (2^bits) of a
    /// connection's own compressor and of its client's, in takeover mode.
    #[serde(default = "default_window_bits")]
    pub window_bits: u8,
}

fn default_window_bits() -> u8 {
    DEFAULT_WINDOW_BITS
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig { mode: DeflateMode::On, min_bytes: DEFAULT_MIN_BYTES, window_bits: DEFAULT_WINDOW_BITS }
    }
}

impl DeflateConfig {
    /// The answer to a client's offers (None: none acceptable or off),
    /// and the state its connection needs if it keeps context.
    pub(crate) fn negotiate(&self, offers: &str) -> Option<(String, Option<Box<ConnContext>>)> {
        match self.mode {
            DeflateMode::Off => None,
            // A smaller server window asked for: a compressor of the
            // connection's own, without context (made at its first message).
            DeflateMode::On => crate::proto::ws::deflate::accept(offers).map(|(answer, window)| {
                let own = window.map(|bits| Box::new(ConnContext { deflater: Some(Deflater::new(bits)), inflate: None }));
                (answer, own)
            }),
            DeflateMode::Takeover => {
                let a = crate::proto::ws::deflate::takeover::accept(offers, self.window_bits)?;
                let ctx = a.takes_over().then(|| Box::new(ConnContext::new(&a)));
                Some((a.answer, ctx))
            }
        }
    }
}

/// One connection's compression state in takeover mode: its own
/// compressor if our side keeps context, its decompressor if the client's
/// does. Each holds nothing until its first message.
pub(crate) struct ConnContext {
    pub deflater: Option<Deflater>,
    pub inflate: Option<InflateContext>,
}

impl ConnContext {
    fn new(a: &Agreement) -> ConnContext {
        ConnContext { deflater: a.server_window.map(Deflater::with_context_takeover), inflate: a.client_window.map(InflateContext::new) }
    }
}

/// The worker's compressor and decompressor, shared by every connection,
/// and (takeover mode) the contexts of the connections that keep one.
#[derive(Default)]
pub(crate) struct WsCodec {
    pub deflater: Deflater,
    pub inflater: Inflater,
    /// Where a message is compressed before it is framed.
    buf: Vec<u8>,
    /// By connection key: added at the handshake, removed at the close
    /// (at most one per connection the worker holds).
    pub contexts: std::collections::HashMap<usize, Box<ConnContext>>,
}

impl WsCodec {
    /// A connection negotiated context takeover, or a server window of
    /// its own: its compression state, kept until it closes.
    pub(crate) fn keep(&mut self, stats: &mut ServerSnapshot, key: usize, ctx: Box<ConnContext>) {
        match ctx.deflater.as_ref().is_some_and(|d| !d.keeps_context()) && ctx.inflate.is_none() {
            true => stats.ws_deflate_small_window += 1,
            false => stats.ws_deflate_takeover += 1,
        }
        self.contexts.insert(key, ctx);
        stats.ws_deflate_contexts = self.contexts.len() as u64;
    }

    /// A connection closed: its context (if any) is freed.
    pub(crate) fn forget(&mut self, stats: &mut ServerSnapshot, key: usize) {
        if self.contexts.remove(&key).is_some() {
            stats.ws_deflate_contexts = self.contexts.len() as u64;
        }
    }

    /// One message compressed for connection `key` alone, framed, if
    /// its side keeps context (None: it takes the shared bytes).
    pub(crate) fn frame_for(&mut self, key: usize, stats: &mut ServerSnapshot, opcode: Opcode, payload: &[u8]) -> Option<Vec<u8>> {
        if self.contexts.is_empty() {
            // The shared mode: no lookup per subscriber.
            return None;
        }
        let d = self.contexts.get_mut(&key)?.deflater.as_mut()?;
        self.buf.clear();
        compress(d, stats, payload, &mut self.buf);
        let mut out = Vec::with_capacity(self.buf.len() + frame::MAX_SERVER_HEADER);
        frame::encode_compressed(&mut out, opcode, &self.buf, None);
        Some(out)
    }

    /// One message compressed (once), framed with RSV1, and counted.
    pub(crate) fn frame(&mut self, stats: &mut ServerSnapshot, opcode: Opcode, payload: &[u8]) -> Vec<u8> {
        self.buf.clear();
        compress(&mut self.deflater, stats, payload, &mut self.buf);
        let mut out = Vec::with_capacity(self.buf.len() + frame::MAX_SERVER_HEADER);
        frame::encode_compressed(&mut out, opcode, &self.buf, None);
        out
    }

    /// Move what the inflater did into the worker's counters.
    pub(crate) fn count_inflated(&mut self, stats: &mut ServerSnapshot) {
        count_inflated(&mut self.inflater, stats);
    }
}

/// Compress `payload` into `out`, counting the call and both sizes.
pub(crate) fn compress(d: &mut Deflater, stats: &mut ServerSnapshot, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    d.compress(payload, out);
    stats.ws_deflate_calls += 1;
    stats.ws_deflate_bytes_before += payload.len() as u64;
    stats.ws_deflate_bytes_after += (out.len() - start) as u64;
}

/// Move what an inflater did into the worker's counters.
pub(crate) fn count_inflated(i: &mut Inflater, stats: &mut ServerSnapshot) {
    let t = std::mem::take(&mut i.tally);
    stats.ws_inflated_messages += t.messages;
    stats.ws_inflate_bytes_before += t.wire_bytes;
    stats.ws_inflate_bytes_after += t.message_bytes;
    for (reason, n) in [("too_big", t.too_big), ("corrupt", t.corrupt)] {
        if n > 0 {
            *stats.ws_inflate_refused.entry(reason.into()).or_insert(0) += n;
        }
    }
}
