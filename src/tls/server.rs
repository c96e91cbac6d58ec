//! A server connection's TLS: the state a server worker keeps per
//! connection (see [`super::conn`]) and the answer to cleartext.

use rustls::server::UnbufferedServerConnection;
use std::sync::Arc;

pub use super::conn::TlsBufs;

/// One server connection's TLS state.
pub type TlsConn = super::conn::TlsConn<UnbufferedServerConnection>;
/// The plaintext reader of a server connection.
pub type TlsRead<'a> = super::conn::TlsRead<'a, UnbufferedServerConnection>;

/// A new server connection's TLS state, handshake not started.
pub fn accept(config: Arc<rustls::ServerConfig>, since_ds: u32) -> Result<Box<TlsConn>, rustls::Error> {
    Ok(TlsConn::new(UnbufferedServerConnection::new(config)?, since_ds))
}

/// The answer to cleartext HTTP on a TLS http/ws port.
pub const PLAINTEXT_REPLY: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 52\r\n\r\nThis port speaks TLS: use https:// or wss:// here.\r\n";

#[cfg(test)]
mod tests {
    /// What an idle TLS connection costs inline (its box); the heap it
    /// points to (cipher keys, key schedule) is measured by
    /// bench/tls_idle_memory.py.
    #[test]
    fn the_inline_tls_state_is_what_rustls_needs_and_a_few_bytes() {
        let inner = std::mem::size_of::<rustls::server::UnbufferedServerConnection>();
        assert!(std::mem::size_of::<super::TlsConn>() <= inner + 24, "{}", std::mem::size_of::<super::TlsConn>());
    }
}
