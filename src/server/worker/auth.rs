//! A worker's side of `--auth jwt`: the close of connections whose token
//! expired (the framed protocol's auth frame is read in
//! `session/framed.rs`, the WebSocket's in `session/ws.rs`).

use super::Worker;
use crate::server::auth::{gate, jwt};
use crate::server::close::Close;
use crate::server::session::kind;

impl Worker {
    /// Close every connection whose token's exp has passed (WebSocket:
    /// close code 4001 first). Called once a second.
    pub(super) fn expire_tokens(&mut self) {
        if !self.topics.gate.expires() {
            return;
        }
        for (key, gen) in self.topics.gate.expired(gate::unix_now()) {
            let Some(conn) = self.conns.get_mut(key).filter(|c| c.gen == gen) else { continue };
            let mut out = Vec::new();
            kind::farewell(&mut out, super::protocol_of(&self.cfg.services, conn), &conn.ext, self.mqtt.get(key), jwt::EXPIRED_CLOSE, b"token expired");
            if !out.is_empty() {
                let _ = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &out, self.cfg.max_pending_bytes, Close::SlowConsumer);
            }
            self.close(key, Close::AuthExpired);
        }
    }
}
