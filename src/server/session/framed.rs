//! The server side of `--protocol framed`: what each frame a client sends
//! means (heartbeats acked, requests through the business stage,
//! subscribes, unsubscribes, resumes, the auth frame of `--auth jwt`,
//! publish frames to `--upstream`) and what is written back. Bytes in
//! ([`consume`]), replies in `req.out`; the worker does the socket I/O
//! and the seam (`worker/seam.rs`) from what [`Opening`] says this read
//! brought.

use super::requests::Requests;
use crate::proto::frame::{self, Frame, Kind};
use crate::server::close::{self, Close};
use crate::server::session::ext::{awaiting_auth, Ext};
use crate::server::session::ws;
use crate::server::tables::outbox::Outbox;
use crate::server::tables::recovery::{self, Recoveries};
use crate::server::tables::topics::{Subs, Topics};
use crate::server::up_message::UpMessage;

/// What one read of a framed connection works on: the worker's topics
/// and the connection's subscriptions, borrowed for the read.
pub(crate) struct Ctx<'a> {
    pub req: Requests<'a>,
    pub topics: &'a mut Topics,
    pub subs: &'a mut Subs,
    pub recoveries: &'a mut Recoveries,
    /// `--upstream`: where publish frames go.
    pub upstream: Option<&'a mut Outbox>,
    /// What this read brought of the connection's opening.
    pub opening: Opening,
}

/// What a read decoded that the seam needs to know (`worker/seam.rs`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Opening {
    /// A resume frame came.
    pub resumed: bool,
    /// It resumed the broadcasts (`*`).
    pub resumed_broadcasts: bool,
    /// Whole frames decoded.
    pub frames: usize,
}

/// Take the bytes read so far: every whole frame is carried out; returns
/// how many bytes were used (the rest waits for more). Err closes the
/// connection with that reason.
pub(crate) fn consume(ctx: &mut Ctx<'_>, ext: &mut Ext, buf: &[u8]) -> Result<usize, Close> {
    crate::net::decode_all(buf, &mut |f| on_frame(ctx, ext, f))
}

/// One frame of a client. Err closes the connection.
fn on_frame(ctx: &mut Ctx<'_>, ext: &mut Ext, f: Frame<'_>) -> Result<(), Close> {
    let Ctx { req, topics, subs, recoveries, upstream, opening } = ctx;
    let key = req.key;
    req.stats.frames_in += 1;
    opening.frames += 1;
    if matches!(f.kind, Kind::Subscribe | Kind::Unsubscribe | Kind::Resume) || f.kind == Kind::Auth && !awaiting_auth(ext) {
        topics.rate.charge(key)?;
    }
    if f.kind == Kind::Auth {
        return token(req, topics, (subs, recoveries), ext, f.payload);
    }
    if awaiting_auth(ext) {
        return missing(req);
    }
    match f.kind {
        Kind::Heartbeat => {
            frame::encode(req.out, Kind::HeartbeatAck, f.payload);
            req.stats.frames_out += 1;
        }
        Kind::Request => {
            let mut reply = Vec::with_capacity(frame::HEADER_LEN + f.payload.len());
            frame::encode(&mut reply, Kind::Reply, f.payload);
            req.handle(reply, true);
        }
        Kind::Subscribe => {
            if let Err(reason) = topics.subscribe(subs, key, f.payload) {
                close::count(&mut req.stats.subscribe_refused, reason);
                return Err(reason);
            }
        }
        Kind::Unsubscribe => recovery::unsubscribe(topics, subs, recoveries, key, f.payload),
        Kind::Publish => publish(req, topics, upstream.as_deref_mut(), f.payload)?,
        Kind::Resume => {
            opening.resumed = true;
            let (topic, at) = crate::proto::push::decode_resume(f.payload).map_err(|_| Close::BadFrameResume)?;
            opening.resumed_broadcasts |= topic == crate::proto::push::BROADCAST_TOPIC.as_bytes();
            if let Err(reason) = recovery::resume(topics, subs, recoveries, (key, req.gen), topic, at) {
                close::count(&mut req.stats.subscribe_refused, reason);
                return Err(reason);
            }
        }
        _ => return Err(Close::BadFrameUnexpectedKind),
    }
    Ok(())
}

/// A framed auth frame: the first admits the connection, a later one
/// refreshes its token (a refused refresh keeps the old token: the
/// connection closes at its exp; topics the new token does not permit
/// are unsubscribed). Err closes the connection.
fn token(req: &mut Requests<'_>, topics: &mut Topics, (subs, recoveries): (&mut Subs, &mut Recoveries), ext: &mut Ext, payload: &[u8]) -> Result<(), Close> {
    if !topics.gate.required() {
        return Err(Close::BadFrameUnexpectedKind);
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
            close::count(&mut req.stats.auth_refused, reason);
            Err(reason)
        }
    }
}

/// A framed publish frame (`topic_len:u8 topic data`): to the application.
/// Err closes the connection (no `--upstream`, a bad or forbidden topic,
/// or the worker's upstream queue is full).
fn publish(req: &mut Requests<'_>, topics: &Topics, upstream: Option<&mut Outbox>, payload: &[u8]) -> Result<(), Close> {
    let Some(up) = upstream else { return Err(Close::BadFrameUnexpectedKind) };
    let n = *payload.first().ok_or(Close::BadFramePublish)? as usize;
    let (topic, data) = payload[1..].split_at_checked(n).ok_or(Close::BadFramePublish)?;
    let topic = match topic {
        [] => None,
        t => {
            crate::proto::push::check_topic(t).map_err(|_| Close::BadTopic)?;
            let t = std::str::from_utf8(t).map_err(|_| Close::BadTopic)?;
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
fn missing(req: &mut Requests<'_>) -> Result<(), Close> {
    close::count(&mut req.stats.auth_refused, Close::AuthMissing);
    Err(Close::AuthMissing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::session::fixture::Read;

    /// A session's read parts and its recoveries.
    struct Parts {
        read: Read,
        recoveries: Recoveries,
    }

    fn parts() -> Parts {
        Parts { read: Read::new(), recoveries: Recoveries::default() }
    }

    fn consume_all(p: &mut Parts, buf: &[u8]) -> (Result<usize, Close>, Opening) {
        let (req, topics, subs) = p.read.split();
        let mut ctx = Ctx { req, topics, subs, recoveries: &mut p.recoveries, upstream: None, opening: Opening::default() };
        let r = consume(&mut ctx, &mut None, buf);
        (r, ctx.opening)
    }

    /// Whole frames are carried out and their bytes used; a frame cut
    /// short is left for the next read.
    #[test]
    fn whole_frames_are_answered_and_a_cut_one_waits() {
        let mut buf = Vec::new();
        frame::encode(&mut buf, Kind::Heartbeat, b"hb");
        frame::encode(&mut buf, Kind::Subscribe, b"news");
        let whole = buf.len();
        frame::encode(&mut buf, Kind::Heartbeat, b"later");
        let mut p = parts();
        let (r, opening) = consume_all(&mut p, &buf[..whole + 3]);
        assert_eq!(r, Ok(whole));
        assert_eq!((opening.frames, opening.resumed), (2, false));
        let mut ack = Vec::new();
        frame::encode(&mut ack, Kind::HeartbeatAck, b"hb");
        assert_eq!(p.read.out, ack);
        assert_eq!((p.read.stats.frames_in, p.read.stats.frames_out), (2, 1));
        assert_eq!(p.read.topics.names_of(&p.read.subs), vec!["news".to_string()]);
    }

    /// A kind a client may not send closes the connection.
    #[test]
    fn a_server_kind_from_a_client_is_refused() {
        let mut buf = Vec::new();
        frame::encode(&mut buf, Kind::Reply, b"x");
        let (r, _) = consume_all(&mut parts(), &buf);
        assert_eq!(r, Err(Close::BadFrameUnexpectedKind));
    }
}
