//! A client worker's TLS connections: the handshake between TCP and the
//! protocol (timed as its own stage, counted, failures named), and the
//! reader every TLS connection's bytes come through.

use super::{Stage, State, Worker};
use crate::net::Received;
use crate::tls::client::ClientConn;
use crate::tls::conn::{TlsBufs, TlsRead, Wire};

/// The bytes of a connection: through TLS when it has TLS state.
/// From the socket, or (`rx`) from the bytes a ring receive brought.
pub(super) fn wire<'a>(
    sock: &'a mut mio::net::TcpStream,
    rx: Option<&'a mut Received<'a>>,
    tls: Option<&'a mut ClientConn>,
    bufs: &'a mut TlsBufs,
) -> Wire<'a, rustls::client::UnbufferedClientConnection> {
    match (tls, rx) {
        (Some(tls), Some(rx)) => Wire::TlsReceived(TlsRead { sock: rx, tls, bufs, plaintext_reply: None }),
        (Some(tls), None) => Wire::Tls(TlsRead { sock, tls, bufs, plaintext_reply: None }),
        (None, Some(rx)) => Wire::Received(Received(rx.0)),
        (None, None) => Wire::Plain(sock),
    }
}

impl Worker {
    /// TCP is up: start the TLS handshake (the ClientHello goes out).
    /// False if the connection failed.
    pub(super) fn start_tls(&mut self, k: usize) -> bool {
        let Some(configs) = &self.tls else { return true };
        let slot = &mut self.slots[k];
        // A reconnect or churn reopen is a returning client: it may resume.
        let again = slot.retries > 0 || slot.churned;
        match configs.connect(again) {
            Ok(conn) => slot.tls = Some(conn),
            Err(reason) => {
                self.fail(k, reason, crate::sys::mono_us());
                return false;
            }
        }
        slot.state = State::TlsHandshaking;
        if let Err(reason) = slot.tls.as_deref_mut().map_or(Ok(()), |t| t.kick(&mut self.tls_bufs.wire)) {
            self.fail(k, reason, crate::sys::mono_us());
            return false;
        }
        self.after_tls_read(k, crate::sys::mono_us())
    }

    /// After rustls saw what was read (or at the start): handshake
    /// flights and alerts go out, and a finished handshake moves the
    /// connection on. False if the connection is gone.
    pub(super) fn after_tls_read(&mut self, k: usize, now: u64) -> bool {
        let slot = &mut self.slots[k];
        let (Some(tls), Some(stream)) = (slot.tls.as_deref_mut(), slot.stream.as_mut()) else { return true };
        let finished = tls.take_finished();
        if let Err(reason) = crate::tls::conn::send(Some(tls), &mut self.tls_bufs.wire, stream, &mut slot.backlog, &[], crate::net::MAX_BACKLOG, "slow_reader")
        {
            self.lose(k, reason);
            return false;
        }
        let resumed = match finished {
            None => return true,
            Some(Ok(resumed)) => resumed,
            Some(Err(reason)) => {
                self.fail(k, reason, now);
                return false;
            }
        };
        self.stats.tls_handshakes += 1;
        if resumed {
            self.stats.tls_resumed += 1;
        }
        self.stage_done(k, Stage::Tls, now);
        self.connected(k, now)
    }
}
