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
    use crate::server::business::service_time::ServiceTime;
    use crate::server::business::{BusinessMode, Stage};
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
        consume_ext(p, &mut None, buf)
    }

    /// [`consume_all`] for a connection whose state is `ext`.
    fn consume_ext(p: &mut Parts, ext: &mut Ext, buf: &[u8]) -> (Result<usize, Close>, Opening) {
        let (req, topics, subs) = p.read.split();
        let mut ctx = Ctx { req, topics, subs, recoveries: &mut p.recoveries, upstream: None, opening: Opening::default() };
        let r = consume(&mut ctx, ext, buf);
        (r, ctx.opening)
    }

    /// Frames one after the other.
    fn frames(list: &[(Kind, &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (kind, payload) in list {
            frame::encode(&mut buf, *kind, payload);
        }
        buf
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

    /// A heartbeat cut anywhere (inside its length, its kind, its
    /// payload) waits, nothing used or answered; once whole it is acked
    /// once with its payload, the send stamp included. An empty one is
    /// acked empty.
    #[test]
    fn a_heartbeat_split_across_reads_is_acked_once_with_its_payload() {
        let mut hb = Vec::new();
        frame::encode_stamped(&mut hb, Kind::Heartbeat, 0x0102_0304_0506_0708, 20);
        let payload = hb[frame::HEADER_LEN..].to_vec();
        let mut p = parts();
        for cut in [1, 2, 3, 11, hb.len() - 1] {
            let (r, opening) = consume_all(&mut p, &hb[..cut]);
            assert_eq!((r, opening.frames), (Ok(0), 0), "cut at {cut}");
            assert!(p.read.out.is_empty(), "cut at {cut}");
        }
        let (r, opening) = consume_all(&mut p, &hb);
        assert_eq!((r, opening.frames), (Ok(hb.len()), 1));
        assert_eq!(p.read.out, frames(&[(Kind::HeartbeatAck, &payload)]));
        assert_eq!(frame::stamp_of(&p.read.out[frame::HEADER_LEN..]), Some(0x0102_0304_0506_0708), "the stamp comes back");
        p.read.out.clear();
        let empty = frames(&[(Kind::Heartbeat, b"")]);
        assert_eq!(empty, [0, 1, Kind::Heartbeat as u8]);
        assert_eq!(consume_all(&mut p, &empty).0, Ok(3));
        assert_eq!(p.read.out, [0, 1, Kind::HeartbeatAck as u8]);
        assert_eq!((p.read.stats.frames_in, p.read.stats.frames_out), (2, 2));
    }

    /// A frame the codec refuses closes the connection with the codec's
    /// reason, after the whole frames before it were answered; a length
    /// past the cap is refused before its payload arrives.
    #[test]
    fn a_bad_frame_closes_with_its_reason_after_what_came_before() {
        let mut buf = frames(&[(Kind::Heartbeat, b"first")]);
        let ack = frames(&[(Kind::HeartbeatAck, b"first")]);
        let cases: [(&[u8], Close); 4] = [
            (&[0, 2, 99, b'x'], Close::BadFrameUnknownKind),
            (&[0, 1, 0], Close::BadFrameUnknownKind),
            (&[0, 0, 1], Close::BadFrameZeroLength),
            (&((frame::MAX_PAYLOAD + 2) as u16).to_be_bytes(), Close::BadFrameTooLong),
        ];
        let whole = buf.len();
        for (bad, reason) in cases {
            buf.truncate(whole);
            buf.extend_from_slice(bad);
            let mut p = parts();
            assert_eq!(consume_all(&mut p, &buf).0, Err(reason), "{bad:?}");
            assert_eq!(p.read.out, ack, "{bad:?}: the heartbeat before it is answered");
        }
        // The longest frame allowed only waits for the rest of itself.
        let mut p = parts();
        let longest = ((frame::MAX_PAYLOAD + 1) as u16).to_be_bytes();
        assert_eq!(consume_all(&mut p, &[longest[0], longest[1], Kind::Request as u8, 0]).0, Ok(0));
    }

    /// Every kind only a server sends, and the publish and auth frames a
    /// server without `--upstream` or `--auth` does not take, close the
    /// connection as unexpected.
    #[test]
    fn kinds_a_client_may_not_send_here_are_unexpected() {
        let kinds = [Kind::HeartbeatAck, Kind::Reply, Kind::Rejected, Kind::Push, Kind::Subscribed, Kind::PushPart, Kind::Goaway, Kind::Publish, Kind::Auth];
        for kind in kinds {
            let mut p = parts();
            let (r, opening) = consume_all(&mut p, &frames(&[(kind, b"\x04news-data")]));
            assert_eq!((r, opening.frames), (Err(Close::BadFrameUnexpectedKind), 1), "{kind:?}");
            assert!(p.read.out.is_empty(), "{kind:?}");
            assert_eq!(p.read.stats.upstream_sent, 0);
        }
    }

    /// Subscribe and unsubscribe frames change the worker's topic table
    /// and the connection's subscriptions, unanswered; a repeat is no
    /// second subscription, an unknown unsubscribe changes nothing, and
    /// the topic is forgotten with its last subscriber.
    #[test]
    fn subscribe_and_unsubscribe_change_the_topic_table() {
        let mut p = parts();
        let buf = frames(&[(Kind::Subscribe, b"news"), (Kind::Subscribe, b"a/b"), (Kind::Subscribe, b"news")]);
        assert_eq!(consume_all(&mut p, &buf).0, Ok(buf.len()));
        assert_eq!(p.read.topics.names_of(&p.read.subs), ["news", "a/b"]);
        assert_eq!(p.read.topics.subscribers("news"), [3]);
        assert_eq!(p.read.topics.counts(), (2, 2));
        assert!(p.read.out.is_empty() && p.read.stats.frames_out == 0, "a subscribe has no answer");
        let buf = frames(&[(Kind::Unsubscribe, b"news"), (Kind::Unsubscribe, b"never"), (Kind::Unsubscribe, b"bad topic!")]);
        assert_eq!(consume_all(&mut p, &buf).0, Ok(buf.len()));
        assert_eq!(p.read.topics.names_of(&p.read.subs), ["a/b"]);
        assert_eq!(p.read.topics.id("news"), None, "no subscriber left: forgotten");
        assert!(p.read.topics.subscribers("news").is_empty());
        assert_eq!(p.read.topics.counts(), (1, 1));
        let interest: Vec<(bool, String)> = p.read.topics.take_interest().into_iter().map(|(on, t)| (on, t.to_string())).collect();
        assert_eq!(interest, [(true, "news".to_string()), (true, "a/b".to_string()), (false, "news".to_string())]);
    }

    /// A subscription the table refuses closes the connection with its
    /// reason, counted: a bad name, past `--max-topics`, past the 64 a
    /// connection may hold.
    #[test]
    fn refused_subscriptions_close_and_are_counted() {
        for bad in [&b""[..], b"with space", b"caf\xc3\xa9", &[b'a'; 256]] {
            let mut p = parts();
            assert_eq!(consume_all(&mut p, &frames(&[(Kind::Subscribe, bad)])).0, Err(Close::BadTopic), "{bad:?}");
            assert_eq!(p.read.stats.subscribe_refused.get("bad_topic"), Some(&1));
            assert!(p.read.subs.is_empty());
        }
        let mut p = parts();
        p.read.topics = Topics::new(false, 1, 200);
        let buf = frames(&[(Kind::Subscribe, b"one"), (Kind::Subscribe, b"two")]);
        assert_eq!(consume_all(&mut p, &buf).0, Err(Close::TooManyTopics));
        assert_eq!(p.read.stats.subscribe_refused.get("too_many_topics"), Some(&1));
        assert_eq!(p.read.topics.names_of(&p.read.subs), ["one"]);

        let mut p = parts();
        let names: Vec<String> = (0..=crate::proto::push::MAX_SUBSCRIPTIONS).map(|i| format!("t{i}")).collect();
        let list: Vec<(Kind, &[u8])> = names.iter().map(|n| (Kind::Subscribe, n.as_bytes())).collect();
        assert_eq!(consume_all(&mut p, &frames(&list)).0, Err(Close::TooManySubscriptions));
        assert_eq!(p.read.subs.len(), crate::proto::push::MAX_SUBSCRIPTIONS);
        assert_eq!(p.read.stats.subscribe_refused.get("too_many_subscriptions"), Some(&1));
    }

    /// Subscribe, unsubscribe and resume frames are charged against the
    /// command rate (heartbeats and requests are not): one past it closes
    /// the connection; the next second's budget is whole again.
    #[test]
    fn commands_past_the_rate_close_the_connection() {
        let mut p = parts();
        p.read.topics = Topics::new(false, 100, 3);
        let mut resume = Vec::new();
        crate::proto::push::encode_resume(&mut resume, "c", None);
        let mut buf = frames(&[(Kind::Heartbeat, b""), (Kind::Subscribe, b"a"), (Kind::Request, b"r"), (Kind::Unsubscribe, b"a"), (Kind::Heartbeat, b"")]);
        buf.extend_from_slice(&resume);
        assert_eq!(consume_all(&mut p, &buf).0, Ok(buf.len()), "three commands");
        assert_eq!(consume_all(&mut p, &frames(&[(Kind::Heartbeat, b"")])).0, Ok(3), "a heartbeat is no command");
        assert_eq!(consume_all(&mut p, &frames(&[(Kind::Subscribe, b"b")])).0, Err(Close::TooManyCommands));
        assert!(!p.read.topics.has(&p.read.subs, "b"), "refused before it took effect");
        p.read.topics.rate.tick();
        assert_eq!(consume_all(&mut p, &frames(&[(Kind::Subscribe, b"b")])).0, Ok(4));
        assert!(p.read.topics.has(&p.read.subs, "b"));
    }

    /// A request is answered with a reply carrying its payload; with the
    /// business stage full, the next is refused with a rejected frame
    /// carrying its payload, and the connection stays.
    #[test]
    fn requests_are_replied_deferred_or_rejected() {
        let mut p = parts();
        let buf = frames(&[(Kind::Request, b"one"), (Kind::Request, b"two")]);
        assert_eq!(consume_all(&mut p, &buf).0, Ok(buf.len()));
        assert_eq!(p.read.out, frames(&[(Kind::Reply, b"one"), (Kind::Reply, b"two")]), "in order");
        assert_eq!((p.read.stats.requests, p.read.stats.replies, p.read.stats.frames_out), (2, 2, 2));

        // An async stage holding one request, whose service never ends here.
        let mut p = parts();
        p.read.stage = Stage::new(BusinessMode::Async, 1, std::sync::Arc::new(|| {})).unwrap();
        p.read.service = ServiceTime::Fixed(std::time::Duration::from_secs(3600));
        assert_eq!(consume_all(&mut p, &buf).0, Ok(buf.len()));
        assert_eq!(p.read.out, frames(&[(Kind::Rejected, b"two")]), "the first waits, the second is refused");
        assert_eq!((p.read.stats.requests, p.read.stats.replies, p.read.stats.rejected, p.read.stats.frames_out), (2, 0, 1, 1));
    }

    /// A resume frame subscribes and waits for the topic's history after
    /// its position (`*`: the broadcasts, no subscription), and says so
    /// to the seam; an unsubscribe ends the wait; a resume that does not
    /// decode, or names a bad topic, closes.
    #[test]
    fn resumes_subscribe_and_wait_for_their_history() {
        let mut p = parts();
        let mut buf = Vec::new();
        crate::proto::push::encode_resume(&mut buf, "news", Some(crate::proto::push::Position { epoch: 2, offset: 5 }));
        let (r, opening) = consume_all(&mut p, &buf);
        assert_eq!(r, Ok(buf.len()));
        assert!(opening.resumed && !opening.resumed_broadcasts);
        assert!(p.read.topics.has(&p.read.subs, "news"));
        assert!(p.recoveries.holds("news", 3, 1), "live pushes wait for the history");
        assert!(!p.recoveries.holds("news", 3, 2), "another generation of the slot is not held");
        assert_eq!(p.recoveries.take_wanted(), [("news".to_string(), 5)]);
        assert!(p.read.out.is_empty(), "the answer comes with the history");

        let mut buf = Vec::new();
        crate::proto::push::encode_resume(&mut buf, "*", None);
        let (r, opening) = consume_all(&mut p, &buf);
        assert_eq!(r, Ok(buf.len()));
        assert!(opening.resumed && opening.resumed_broadcasts);
        assert_eq!(p.read.topics.id("*"), None, "the broadcasts need no subscription");
        assert_eq!(p.recoveries.take_wanted(), [("*".to_string(), u64::MAX)], "its position only");
        assert_eq!(p.recoveries.len(), 2);

        assert_eq!(consume_all(&mut p, &frames(&[(Kind::Unsubscribe, b"news")])).0, Ok(7));
        assert!(!p.recoveries.holds("news", 3, 1) && p.recoveries.len() == 1, "the wait ends with the subscription");

        let mut p = parts();
        assert_eq!(consume_all(&mut p, &frames(&[(Kind::Resume, &[1, 0, 0, 0, 2])])).0, Err(Close::BadFrameResume));
        let mut bad = Vec::new();
        crate::proto::push::encode_resume(&mut bad, "no space", None);
        assert_eq!(consume_all(&mut p, &bad).0, Err(Close::BadTopic));
        assert_eq!(p.read.stats.subscribe_refused.get("bad_topic"), Some(&1));
        assert!(p.recoveries.is_empty() && p.read.subs.is_empty());
    }

    /// A connection that owes its token (`--auth jwt`) is closed, counted,
    /// at its first frame that is not the token, with nothing answered.
    #[test]
    fn a_frame_before_the_token_closes_as_auth_missing() {
        for kind in [Kind::Heartbeat, Kind::Subscribe, Kind::Request] {
            let mut p = parts();
            let mut ext: Ext = Some(Box::new(crate::server::session::ext::ConnExt::Unauthenticated));
            let (r, _) = consume_ext(&mut p, &mut ext, &frames(&[(kind, b"news")]));
            assert_eq!(r, Err(Close::AuthMissing), "{kind:?}");
            assert_eq!(p.read.stats.auth_refused.get("auth_missing"), Some(&1));
            assert!(p.read.out.is_empty() && p.read.subs.is_empty() && p.read.stats.requests == 0);
            assert!(awaiting_auth(&ext), "still owes it");
        }
    }
}
