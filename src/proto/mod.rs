//! Wire protocols spoken between megaconn clients and servers, and the
//! bus between a server's own processes (`bus`).
pub(crate) mod b64;
pub(crate) mod bus;
pub(crate) mod frame;
pub(crate) mod goaway;
pub(crate) mod http;
pub(crate) mod mqtt;
pub(crate) mod push;
pub(crate) mod sse;
pub(crate) mod stamp;
pub(crate) mod ws;

/// Which wire protocol a server or client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
pub(crate) enum Protocol {
    /// Length-prefixed frames (heartbeats, requests, replies): the default.
    Framed,
    /// Raw 8-byte big-endian millisecond timestamps echoed back, no framing
    /// (a Netty FixedLengthFrameDecoder(8) echo server and its client).
    Echo8,
    /// HTTP/1.1 keep-alive (server answers "Hello world!"; client sends GET /).
    Http,
    /// Server only: every byte back, no framing (any TCP load generator
    /// can hold connections and measure round trips against it).
    Echo,
    /// Server only: read and drop everything.
    Discard,
    /// WebSocket (RFC 6455): the server upgrades and echoes messages
    /// through the business stage; the client pings and sends binary
    /// requests.
    Ws,
    /// Client only: `--message` bytes on the heartbeat schedule, to any
    /// TCP server (round trips with a `\{ts}` marker against an echo).
    Raw,
    /// Client only: Server-Sent Events (a GET with Accept:
    /// text/event-stream); pushes counted, resumed with Last-Event-ID.
    Sse,
    /// Server only for now: MQTT 3.1.1 and 5.0 (`proto/mqtt`, the
    /// server's `session/mqtt.rs`): devices and apps with an off-the-shelf
    /// MQTT library subscribe and publish in the one topic space.
    Mqtt,
}

/// Where a fuzz input is cut in two, chosen by its first byte: a parser
/// must decode the same bytes the same way whether they arrive whole or
/// in two reads (`src/fuzz_targets.rs`, `mqtt::invariants`).
pub(crate) fn fuzz_split(data: &[u8]) -> (&[u8], &[u8]) {
    let at = data.first().map_or(0, |b| *b as usize % (data.len() + 1));
    data.split_at(at)
}

/// Bytes in one echo8 message.
pub(crate) const ECHO8_LEN: usize = 8;
