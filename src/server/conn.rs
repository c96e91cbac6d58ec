//! One accepted connection: the socket and the little state it needs
//! between readiness events.

use crate::net::Spill;

/// Per-connection record kept in the worker's slab. An idle connection
/// costs the socket handle, two timestamps, a generation and four empty
/// `Option<Box>`es: 48 bytes, 56 with the slab's tag.
pub struct Conn {
    pub stream: mio::net::TcpStream,
    /// Worker-relative second of the last byte received (idle timeout).
    pub last_seen_s: u32,
    /// An incomplete frame carried to the next read.
    pub partial: Spill,
    /// Output the socket did not take yet.
    pub backlog: Spill,
    /// Distinguishes this connection from a later one reusing its slab
    /// key, so a late business-stage reply never reaches the wrong peer.
    pub gen: u32,
    /// HTTP request state, only while a request is half-read or a reply
    /// is pending (`--protocol http`).
    pub http: Option<Box<super::http::HttpConn>>,
    /// Topics this connection subscribed to (None for most).
    pub subs: super::push::Subs,
    /// Worker-relative second it was accepted (its age in /connections).
    pub since_s: u32,
}

impl Conn {
    pub fn new(stream: mio::net::TcpStream, now_s: u32, gen: u32) -> Conn {
        Conn { stream, last_seen_s: now_s, partial: None, backlog: None, gen, http: None, subs: None, since_s: now_s }
    }
}
