//! A client worker's TLS connections: the handshake between TCP and the
//! protocol (timed as its own stage, counted, failures named). Their
//! bytes are read through `tls::conn::Wire::of` and sent through
//! `tls::conn::send`, as the server's are.

use super::{Stage, State, Worker};

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
            self.fail(k, reason.to_string(), crate::sys::mono_us());
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
        let backlog = &mut slot.backlog;
        let put = |bytes: &[u8]| crate::net::send_capped(stream, backlog, bytes, crate::net::MAX_BACKLOG, "slow_reader");
        if let Err(reason) = crate::tls::conn::send(Some(tls), &mut self.tls_bufs.wire, &[], put) {
            self.lose(k, reason);
            return false;
        }
        let resumed = match finished {
            None => return true,
            Some(Ok(resumed)) => resumed,
            Some(Err(reason)) => {
                self.fail(k, reason.to_string(), now);
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
