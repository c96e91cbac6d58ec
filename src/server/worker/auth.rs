//! A worker's side of `--auth jwt`: the framed protocol's auth frame
//! (first, then refreshes) and the close of connections whose token
//! expired; and the framed publish frame (`--upstream`).

use super::Worker;
use crate::proto::Protocol;
use crate::server::auth::{gate, jwt};
use crate::server::broker::upstream::UpMessage;
use crate::server::session::requests::Requests;
use crate::server::session::ws;
use crate::server::worker::conn::{awaiting_auth, Ext};
use crate::server::worker::outbox::Outbox;
use crate::server::worker::topics::Topics;

/// A framed auth frame: the first admits the connection, a later one
/// refreshes its token (a refused refresh keeps the old token: the
/// connection closes at its exp; topics the new token does not permit
/// are unsubscribed). Err closes the connection.
pub fn framed_token(
    req: &mut Requests<'_>,
    topics: &mut Topics,
    (subs, recoveries): (&mut crate::server::worker::topics::Subs, &mut crate::server::worker::recovery::Recoveries),
    ext: &mut Ext,
    payload: &[u8],
) -> Result<(), &'static str> {
    if !topics.gate.required() {
        return Err("bad_frame_unexpected_kind");
    }
    let token = std::str::from_utf8(payload).unwrap_or("\u{0}");
    if !awaiting_auth(ext) {
        if let Ok((_, revoked)) = ws::refresh(req, topics, subs, token) {
            for topic in revoked {
                recoveries.forget(&topic, req.key);
            }
        }
        return Ok(());
    }
    match topics.gate.verify(Some(token)) {
        Ok(claims) => {
            topics.gate.admit(req.key, req.gen, claims);
            *ext = None;
            Ok(())
        }
        Err(reason) => {
            *req.stats.auth_refused.entry(reason.into()).or_insert(0) += 1;
            Err(reason)
        }
    }
}

/// A framed publish frame (`topic_len:u8 topic data`): to the application.
/// Err closes the connection (no `--upstream`, a bad or forbidden topic,
/// or the worker's upstream queue is full).
pub fn framed_publish(req: &mut Requests<'_>, topics: &Topics, upstream: Option<&mut Outbox>, payload: &[u8]) -> Result<(), &'static str> {
    let Some(up) = upstream else { return Err("bad_frame_unexpected_kind") };
    let n = *payload.first().ok_or("bad_frame_publish")? as usize;
    let (topic, data) = payload[1..].split_at_checked(n).ok_or("bad_frame_publish")?;
    let topic = match topic {
        [] => None,
        t => {
            crate::proto::push::check_topic(t).map_err(|_| "bad_topic")?;
            let t = std::str::from_utf8(t).map_err(|_| "bad_topic")?;
            topics.gate.permits(req.key, t)?;
            Some(t)
        }
    };
    let user = topics.gate.user_of(req.key);
    up.offer((req.key, req.gen), |conn| UpMessage::message(conn, user, topic, false, data))?;
    req.stats.upstream_sent += 1;
    Ok(())
}

/// A framed frame before the auth frame: refused and counted.
pub fn missing(req: &mut Requests<'_>) -> Result<(), &'static str> {
    *req.stats.auth_refused.entry(jwt::MISSING.into()).or_insert(0) += 1;
    Err(jwt::MISSING)
}

impl Worker {
    /// Close every connection whose token's exp has passed (WebSocket:
    /// close code 4001 first). Called once a second.
    pub(super) fn expire_tokens(&mut self) {
        if !self.topics.gate.required() {
            return;
        }
        for (key, gen) in self.topics.gate.expired(gate::unix_now()) {
            let Some(conn) = self.conns.get_mut(key).filter(|c| c.gen == gen) else { continue };
            if self.cfg.protocol == Protocol::Ws && crate::server::worker::conn::takes_pushes(&conn.ext) {
                let mut out = Vec::new();
                crate::proto::ws::frame::encode_close_reason(&mut out, jwt::EXPIRED_CLOSE, b"token expired", None);
                let _ = super::tls::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &out, self.cfg.max_pending_bytes, "slow_consumer");
            }
            self.close(key, jwt::EXPIRED.into());
        }
    }
}
