//! permessage-deflate on the server's WebSocket ports (`--ws-deflate`):
//! the settings, and the one compressor and decompressor a worker keeps
//! for all its connections (the wire format is `proto/ws/deflate.rs`).
//!
//! A connection that negotiated the extension costs one bit of its
//! record (`Conn::ws_deflate`); a push is compressed once per worker and
//! the same bytes go to every such subscriber, next to the uncompressed
//! frame for the others. Compressed messages from clients are inflated by
//! the worker's [`Inflater`], reset per message, under `--max-message-bytes`.

use crate::proto::ws::deflate::{Deflater, Inflater};
use crate::proto::ws::frame::{self, Opcode};
use crate::server::snapshot::ServerSnapshot;
use serde::{Deserialize, Serialize};

/// Below this many bytes a message goes uncompressed by default: a
/// message this small rarely shrinks by more than its frame header.
pub const DEFAULT_MIN_BYTES: usize = 64;

/// `--ws-deflate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum DeflateMode {
    /// Answer permessage-deflate offers (no context takeover both ways).
    #[default]
    On,
    /// Never negotiate it: every message goes uncompressed.
    Off,
}

/// The deflate settings of a server worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeflateConfig {
    pub mode: DeflateMode,
    /// Messages shorter than this go uncompressed (RSV1 clear).
    pub min_bytes: usize,
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig { mode: DeflateMode::On, min_bytes: DEFAULT_MIN_BYTES }
    }
}

/// The worker's compressor and decompressor, shared by every connection.
#[derive(Default)]
pub struct WsCodec {
    pub deflater: Deflater,
    pub inflater: Inflater,
    /// Where a message is compressed before it is framed.
    buf: Vec<u8>,
}

impl WsCodec {
    /// One message compressed (once), framed with RSV1, and counted.
    pub fn frame(&mut self, stats: &mut ServerSnapshot, opcode: Opcode, payload: &[u8]) -> Vec<u8> {
        self.buf.clear();
        compress(&mut self.deflater, stats, payload, &mut self.buf);
        let mut out = Vec::with_capacity(self.buf.len() + frame::MAX_SERVER_HEADER);
        frame::encode_compressed(&mut out, opcode, &self.buf, None);
        out
    }

    /// Move what the inflater did into the worker's counters.
    pub fn count_inflated(&mut self, stats: &mut ServerSnapshot) {
        count_inflated(&mut self.inflater, stats);
    }
}

/// Compress `payload` into `out`, counting the call and both sizes.
pub fn compress(d: &mut Deflater, stats: &mut ServerSnapshot, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    d.compress(payload, out);
    stats.ws_deflate_calls += 1;
    stats.ws_deflate_bytes_before += payload.len() as u64;
    stats.ws_deflate_bytes_after += (out.len() - start) as u64;
}

/// Move what an inflater did into the worker's counters.
pub fn count_inflated(i: &mut Inflater, stats: &mut ServerSnapshot) {
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
