//! `--mqtt-auth-http` for WebSocket and event-stream clients (on `ws`
//! ports, and event streams on `http` ports): their request, held
//! unanswered in the connection's partial input, is asked of the backend
//! through the supervisor (`session/ws.rs` and `session/http.rs` make the ask,
//! [`emit`] sends it); the decision comes back as an `upgrade` command:
//! allowed, the held request is read again and answered as it would have
//! been without the hook; refused, it is answered 403 and closed
//! (`auth_http_refused`). The handshake timeout bounds the wait.

use super::Worker;
use crate::net::Carried;
use crate::server::close::Close;
use crate::server::commands::{conn_id, split_id, ServerMsg, UpgradeAnswer, UpgradeAsk};
use crate::server::session::ext::{ConnExt, HookWait};
use crate::server::session::requests::Requests;
use crate::server::session::ws;
use crate::supervise::control;

/// Hand this read's asks to the supervisor, each with its connection's
/// id and the peer's address.
pub(super) fn emit(worker: usize, asks: &mut Vec<UpgradeAsk>, peer: impl Fn() -> String) {
    if asks.is_empty() {
        return;
    }
    for a in asks.iter_mut() {
        let (_, key, gen) = split_id(a.conn);
        a.conn = conn_id(worker, key, gen);
        a.peerhost = peer();
    }
    control::emit(&ServerMsg::UpgradeAsks { worker, asks: std::mem::take(asks) });
}

impl Worker {
    /// The backend decided a held request.
    pub(super) fn upgrade_decided(&mut self, a: UpgradeAnswer) {
        let (worker, key, gen) = split_id(a.conn);
        let (now_s, now_ds) = (self.now_s(), self.now_ds());
        let Some(conn) = self.conns.get_mut(key).filter(|c| worker == self.cfg.worker && c.gen == gen) else { return };
        let (hook, http) = match conn.ext.as_deref_mut() {
            Some(ConnExt::Ws(w)) => (&mut w.hook, false),
            Some(ConnExt::Http(h)) => (&mut h.hook, true),
            _ => return,
        };
        if *hook != HookWait::Asked {
            return;
        }
        if !a.allow {
            let refusal =
                crate::proto::ws::handshake::Refusal { status: 403, reason: "auth_http_refused", text: "the authentication backend refused this request" };
            let mut out = Vec::new();
            crate::proto::ws::handshake::write_refusal(&mut out, &refusal);
            let _ = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &out, self.reply_cap, Close::SlowReader);
            crate::server::close::count(&mut self.stats.auth_refused, Close::AuthHttpRefused);
            return self.close(key, Close::AuthHttpRefused);
        }
        *hook = HookWait::Allowed;
        if http {
            // An event stream on an HTTP port: read again as any request waiting there.
            return self.reread_http(key, now_ds, now_s);
        }
        // The held request, read again as it came.
        let Some(buf) = conn.spills.partial().take() else { return };
        self.out.clear();
        let req =
            Requests { out: &mut self.out, stats: &mut self.stats, stage: &mut self.stage, rng: &mut self.rng, service: &self.cfg.service_time, key, gen };
        let deflate = conn.ws_deflate();
        let mut ctx = ws::Ctx {
            req,
            cfg: &self.cfg.ws,
            topics: &mut self.topics,
            subs: &mut conn.subs,
            recoveries: &mut self.recoveries,
            now_s,
            tmp: &mut self.unmasked,
            upstream: self.upstream.as_mut(),
            codec: self.ws_codec.as_deref_mut(),
            deflate,
            mqtt: false,
            asks: None,
        };
        let r = ws::consume(&mut ctx, &mut conn.ext, &buf);
        let negotiated = ctx.deflate;
        let end = conn.spills.keep_unused(&buf, r);
        if negotiated != deflate {
            conn.set_ws_deflate(negotiated);
        }
        self.reply_resumed(key, end);
    }
}
