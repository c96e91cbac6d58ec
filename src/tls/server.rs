//! A server connection's TLS: the state a server worker keeps per
//! connection (see [`super::conn`]) and the answer to cleartext.

use rustls::server::UnbufferedServerConnection;
use std::sync::Arc;

pub(crate) use super::conn::TlsBufs;

/// One server connection's TLS state.
pub(crate) type TlsConn = super::conn::TlsConn<UnbufferedServerConnection>;

/// A new server connection's TLS state, handshake not started.
pub(crate) fn accept(config: Arc<rustls::ServerConfig>) -> Result<Box<TlsConn>, rustls::Error> {
    Ok(TlsConn::new(UnbufferedServerConnection::new(config)?))
}

/// The answer to cleartext HTTP on a TLS http/ws port.
pub(crate) const PLAINTEXT_REPLY: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 52\r\n\r\nThis port speaks TLS: use https:// or wss:// here.\r\n";

#[cfg(test)]
mod tests {
    /// What an idle TLS connection keeps after its handshake: a small
    /// box, and the record layer's (keys, sequence numbers and rustls's
    /// key-update remainder); the whole is measured by
    /// bench/tls_idle_memory.py.
    #[test]
    fn an_idle_tls_connection_keeps_keys_not_the_handshake() {
        assert!(std::mem::size_of::<super::TlsConn>() <= 48, "{}", std::mem::size_of::<super::TlsConn>());
        let kernel = std::mem::size_of::<rustls::kernel::KernelConnection<rustls::server::ServerConnectionData>>();
        let records = std::mem::size_of::<crate::tls::records::Records>();
        assert!(records <= kernel + 128, "{records} vs rustls's remainder {kernel}");
        assert!(records < std::mem::size_of::<rustls::server::UnbufferedServerConnection>(), "{records}");
    }
}
