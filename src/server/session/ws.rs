//! The server side of `--protocol ws`: the Upgrade handshake, then
//! messages through the business stage (echoed in kind), pings answered
//! with pongs, the close handshake, and every protocol violation answered
//! with a close frame carrying its status code before the socket closes.
//!
//! permessage-deflate (`--ws-deflate`, `ws_deflate.rs`): offered by the
//! client, answered without context takeover either way; the
//! connection's flag rides in its record, its echoes of long enough
//! messages go compressed, its compressed messages are inflated by the
//! worker's inflater under the message cap. With `--ws-deflate takeover`
//! a connection that keeps context has its own compressor and
//! decompressor (`ws_deflate::ConnContext`), taken out of the worker's
//! table for each read.
//!
//! Topics are subscribed in the Upgrade request: `GET /path?subscribe=a,b`.
//! An Upgrade offering the `mqtt` subprotocol makes the connection an
//! MQTT one (`mqtt_ws.rs`, which hands this file the bytes until then); an
//! MQTT CONNECT on a connection that did not offer it is closed 1002.
//! Pushes go out as text (a JSON envelope) or binary (`--push-format`).

use crate::proto::push::{self, Push, Stream};
use crate::proto::ws::frame::{self, Event, Opcode, Reader, Role};
use crate::proto::ws::handshake;
use crate::server::auth::jwt;
use crate::server::close::{self, Close};
use crate::server::session::ext::{sse_mut, ws_mut, ConnExt, Ext, WsConn};
use crate::server::session::requests::{Answer, Requests};
use crate::server::session::ws_deflate::{self, DeflateConfig, DeflateMode, WsCodec};
use crate::server::tables::recovery::{self, Recoveries};
use crate::server::tables::topics::{Subs, Topics};
use serde::{Deserialize, Serialize};

/// Default cap on one message, all fragments together (close 1009 above).
pub(crate) const DEFAULT_MAX_MESSAGE: usize = 64 * 1024;
/// The counter a peer's own close is reported under ([`Close::WsPeerClose`]).
#[cfg(test)]
pub(crate) const PEER_CLOSE: &str = "ws_peer_close";

/// How pushes are framed for WebSocket subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub(crate) enum PushFormat {
    /// A text message: `{"stream":..,"topic":..,"seq":..,"ts":µs,"data":..}`
    /// (data as a string when it is UTF-8, else `data_b64`).
    Text,
    /// A binary message: the framed protocol's push frame without its
    /// length prefix (kind byte 8, stream, topic, seq, publish µs, data).
    Binary,
}

/// WebSocket settings of a server worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WsConfig {
    pub max_message: usize,
    pub max_head: usize,
    pub push_format: PushFormat,
    /// `--ws-deflate`, `--ws-deflate-min-bytes`.
    #[serde(default)]
    pub deflate: DeflateConfig,
}

impl WsConfig {
    /// The largest echo a client can ask for: a message of `max_message`
    /// bytes, back in one frame. A connection's bound on unsent replies
    /// must hold it whole (`net::reply_cap`).
    pub(crate) fn largest_echo(&self) -> usize {
        self.max_message.saturating_add(frame::MAX_SERVER_HEADER)
    }
}

/// What the read path needs besides the business stage.
pub(crate) struct Ctx<'a> {
    pub req: Requests<'a>,
    pub cfg: &'a WsConfig,
    pub topics: &'a mut Topics,
    pub subs: &'a mut Subs,
    pub recoveries: &'a mut Recoveries,
    /// Worker-relative second (an event stream's heartbeats count from it).
    pub now_s: u32,
    /// Per-worker vector payloads are unmasked into.
    pub tmp: &'a mut Vec<u8>,
    /// `--upstream`: what clients send goes to the application, not back.
    pub upstream: Option<&'a mut crate::server::tables::outbox::Outbox>,
    /// The worker's compressor and decompressor (None: `--ws-deflate off`).
    pub codec: Option<&'a mut WsCodec>,
    /// Whether this connection negotiated permessage-deflate: read from
    /// its record before, set by its handshake, written back after.
    pub deflate: bool,
    /// Set by a handshake whose Upgrade chose the `mqtt` subprotocol: from
    /// then on the connection is an MQTT one (`mqtt_ws.rs` makes its state).
    pub mqtt: bool,
}

/// State of a connection just accepted: waiting for its Upgrade request.
pub(crate) fn fresh(now_ds: u32) -> Ext {
    Some(Box::new(ConnExt::Ws(WsConn { handshake_since_ds: now_ds.max(1), frag: None })))
}

/// Handle the handshake (if still due) and every whole frame in `buf`;
/// return the bytes used. Err names why the connection must close; what
/// the peer must hear first (a refusal, a close frame) is in `out`.
pub(crate) fn consume(ctx: &mut Ctx<'_>, ext: &mut Ext, buf: &[u8]) -> Result<usize, Close> {
    let mut pos = 0;
    if sse_mut(ext).is_some() {
        // An event stream only sends; what its client sends is dropped.
        return Ok(buf.len());
    }
    if crate::server::session::ext::ws_handshaking(ext) {
        match handshake::parse_request(buf, ctx.cfg.max_head) {
            Ok(None) => return Ok(0),
            Err(refusal) => {
                handshake::write_refusal(ctx.req.out, &refusal);
                return Err(Close::WsHandshake(refusal.reason));
            }
            Ok(Some((up, used))) => {
                if let Some(p) = up.mqtt.filter(|_| up.events.is_none()) {
                    // MQTT over WebSocket (`mqtt_ws.rs`): its token comes in
                    // the CONNECT, as on an MQTT port; no deflate.
                    handshake::write_accept(ctx.req.out, &up.accept, Some(p), None);
                    ctx.req.stats.ws_upgrades += 1;
                    // The caller (`mqtt_ws::consume`) makes its MQTT state.
                    *ext = None;
                    ctx.mqtt = true;
                    return Ok(used);
                }
                if ctx.topics.gate.required() {
                    match ctx.topics.gate.verify(up.token.as_deref()) {
                        Ok(claims) => ctx.topics.gate.admit(ctx.req.key, ctx.req.gen, claims),
                        Err(reason) => {
                            close::count(&mut ctx.req.stats.auth_refused, reason);
                            handshake::write_refusal(ctx.req.out, &handshake::Refusal { status: 401, reason: reason.as_str(), text: jwt::explain(reason) });
                            return Err(reason);
                        }
                    }
                }
                let mut follow = crate::server::session::sse::Follow { req: &mut ctx.req, topics: ctx.topics, subs: ctx.subs, recoveries: ctx.recoveries };
                follow.start(&up.target, up.events.as_deref())?;
                if up.events.is_some() {
                    *ext = crate::server::session::sse::open(ctx.req.out, ctx.req.stats, ctx.now_s);
                    return Ok(buf.len());
                }
                let on = ctx.codec.is_some() && ctx.cfg.deflate.mode != DeflateMode::Off;
                let negotiated = up.extensions.as_deref().filter(|_| on).and_then(|offers| ctx.cfg.deflate.negotiate(offers));
                handshake::write_accept(ctx.req.out, &up.accept, up.protocol.as_deref(), negotiated.as_ref().map(|(answer, _)| answer.as_str()));
                ctx.req.stats.ws_upgrades += 1;
                if let Some((_, own)) = negotiated {
                    ctx.deflate = true;
                    ctx.req.stats.ws_deflate_negotiated += 1;
                    if let (Some(codec), Some(own)) = (ctx.codec.as_deref_mut(), own) {
                        codec.keep(ctx.req.stats, ctx.req.key, own);
                    }
                }
                *ext = None;
                pos = used;
            }
        }
    }
    let mut frag = ws_mut(ext).and_then(|w| w.frag.take());
    let Ctx { req, cfg, tmp, topics, subs, recoveries, upstream, codec, deflate, .. } = ctx;
    // Context takeover: the connection's own state, out of the worker's
    // table for the read (its compressor answers echoes, its decompressor
    // is lent to the worker's inflater), back in after.
    let mut own = codec.as_deref_mut().filter(|_| *deflate).and_then(|c| c.contexts.remove(&req.key));
    let (inflate, compress) = match codec.as_deref_mut().filter(|_| *deflate) {
        Some(WsCodec { deflater, inflater, .. }) => {
            if let Some(i) = own.as_mut().and_then(|o| o.inflate.as_mut()) {
                inflater.lend(i);
            }
            let deflater = match own.as_mut().and_then(|o| o.deflater.as_mut()) {
                Some(d) => d,
                None => deflater,
            };
            (Some(inflater), Some((deflater, cfg.deflate.min_bytes)))
        }
        None => (None, None),
    };
    let mut subscriber = Subscriber { topics, subs, recoveries, upstream: upstream.as_deref_mut(), compress };
    let r = Reader { role: Role::Server, max: cfg.max_message, tmp, frag: &mut frag, inflate }.consume(&buf[pos..], |ev| on_event(req, &mut subscriber, ev));
    if let Some(c) = codec.as_deref_mut() {
        if let Some(i) = own.as_mut().and_then(|o| o.inflate.as_mut()) {
            c.inflater.give_back(i);
        }
        c.count_inflated(req.stats);
        if let Some(o) = own {
            c.contexts.insert(req.key, o);
        }
    }
    *ext = frag.map(|f| Box::new(ConnExt::Ws(WsConn { handshake_since_ds: 0, frag: Some(f) })));
    match r {
        Ok(used) => Ok(pos + used),
        Err(Close::WsPeerClose) => Err(Close::WsPeerClose),
        Err(reason) => {
            frame::encode_close(req.out, reason.ws_code(), None);
            Err(reason)
        }
    }
}

/// A connection's subscriptions, as its commands change them, and where
/// what it says goes (`--upstream`).
struct Subscriber<'a> {
    topics: &'a mut Topics,
    subs: &'a mut Subs,
    recoveries: &'a mut Recoveries,
    upstream: Option<&'a mut crate::server::tables::outbox::Outbox>,
    /// The connection negotiated permessage-deflate: the worker's
    /// compressor, and the size from which an echo is compressed.
    compress: Option<(&'a mut crate::proto::ws::deflate::Deflater, usize)>,
}

/// A command a WebSocket client sends as a text message.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Command {
    /// Subscribe; with `since`, also get what was missed after it. The
    /// answer is a `subscribed` message with the topic's position.
    Subscribe {
        topic: String,
        since: Option<push::Position>,
    },
    Unsubscribe {
        topic: String,
    },
    /// A fresher token (`--auth jwt`) before the connection's expires.
    Refresh {
        token: String,
    },
    /// A message for the application about a topic (`--upstream`).
    Publish {
        topic: String,
        data: serde_json::Value,
    },
}

/// Whether a text message is meant as a command (a JSON object with a
/// "type"); anything else is echoed as before.
fn is_command(data: &[u8]) -> bool {
    data.first() == Some(&b'{') && data.windows(6).take(64).any(|w| w == b"\"type\"")
}

/// Hand what a client said to the application (`--upstream`). Err:
/// [`Close::UpstreamFull`] or [`Close::UpstreamConnectionFull`] (close
/// with 1013), [`Close::NoUpstream`], or the topic is bad or not permitted.
fn up_message(req: &mut Requests<'_>, s: &mut Subscriber<'_>, topic: Option<&str>, text: bool, data: &[u8]) -> Result<(), Close> {
    let Some(up) = s.upstream.as_deref_mut() else { return Err(Close::NoUpstream) };
    if let Some(t) = topic {
        crate::proto::push::check_topic(t.as_bytes()).map_err(|_| Close::BadTopic)?;
        s.topics.gate.permits(req.key, t)?;
    }
    let user = s.topics.gate.user_of(req.key);
    up.offer((req.key, req.gen), |conn| crate::server::up_message::UpMessage::message(conn, user, topic, text, data))?;
    req.stats.upstream_sent += 1;
    Ok(())
}

/// Carry out a command; what the client must hear goes into `out`.
fn command(req: &mut Requests<'_>, s: &mut Subscriber<'_>, data: &[u8]) -> Result<(), Close> {
    let answer = |out: &mut Vec<u8>, v: serde_json::Value| frame::encode(out, true, Opcode::Text, v.to_string().as_bytes(), None);
    let cmd = match serde_json::from_slice::<Command>(data) {
        Ok(c) => c,
        Err(e) => {
            req.stats.frames_out += 1;
            crate::stats::counters::bump(&mut req.stats.subscribe_refused, "bad_command");
            let hint = r#"expected {"type":"subscribe","topic":"T"} (optionally "since":{"epoch":E,"offset":N}), {"type":"unsubscribe","topic":"T"}, {"type":"refresh","token":"JWT"} or {"type":"publish","topic":"T","data":..} (with --upstream)"#;
            answer(req.out, serde_json::json!({"type": "error", "reason": "bad_command", "message": format!("{e}; {hint}")}));
            return Ok(());
        }
    };
    if !matches!(cmd, Command::Publish { .. }) {
        s.topics.rate.charge(req.key)?;
    }
    req.stats.frames_out += 1;
    match cmd {
        Command::Subscribe { topic, since } => {
            if let Err(reason) = recovery::resume(s.topics, s.subs, s.recoveries, (req.key, req.gen), topic.as_bytes(), since) {
                close::count(&mut req.stats.subscribe_refused, reason);
                let message = match reason {
                    Close::TooManyTopics => "this server holds its --max-topics topics; subscribe to an existing topic or try later",
                    Close::TooManySubscriptions => "a connection may hold at most 64 subscriptions",
                    Close::NotPermitted => "this connection's token does not allow this topic (its topics claim), or the topic is one of --admin-topics",
                    _ => "a topic is 1-255 of [A-Za-z0-9._:/$-] (or * for the broadcasts)",
                };
                answer(req.out, serde_json::json!({"type": "error", "topic": topic, "reason": reason.as_str(), "message": message}));
            } else {
                // The `subscribed` answer comes with the history.
                req.stats.frames_out -= 1;
            }
        }
        Command::Unsubscribe { topic } => {
            recovery::unsubscribe(s.topics, s.subs, s.recoveries, req.key, topic.as_bytes());
            answer(req.out, serde_json::json!({"type": "unsubscribed", "topic": topic}));
        }
        Command::Publish { topic, data } => {
            req.stats.frames_out -= 1;
            let text = match &data {
                serde_json::Value::String(t) => t.clone(),
                other => other.to_string(),
            };
            match up_message(req, s, Some(&topic), true, text.as_bytes()) {
                Ok(()) => {}
                Err(reason @ (Close::UpstreamFull | Close::UpstreamConnectionFull)) => return Err(reason),
                Err(reason) => {
                    req.stats.frames_out += 1;
                    let message = match reason {
                        Close::NotPermitted => "this connection's token does not allow this topic",
                        _ => "this server sends nothing to an application: start it with --upstream URL",
                    };
                    answer(req.out, serde_json::json!({"type": "error", "topic": topic, "reason": reason.as_str(), "message": message}));
                }
            }
        }
        Command::Refresh { token } => match refresh(req, s.topics, s.subs, &token) {
            Ok((exp, revoked)) => {
                answer(req.out, serde_json::json!({"type": "refreshed", "exp": exp}));
                for topic in revoked {
                    s.recoveries.forget(&topic, req.key);
                    req.stats.frames_out += 1;
                    answer(req.out, serde_json::json!({"type": "unsubscribed", "topic": topic, "reason": crate::server::auth::gate::NOT_PERMITTED}));
                }
            }
            Err(reason) => answer(req.out, serde_json::json!({"type": "error", "reason": reason.as_str(), "message": jwt::explain(reason)})),
        },
    }
    Ok(())
}

/// Take a fresher token for this connection: its new exp, and the topics
/// it followed that the new token does not permit (unsubscribed). Err:
/// why not (the old one stays, and the connection closes at its exp).
pub(crate) fn refresh(
    req: &mut Requests<'_>,
    topics: &mut Topics,
    subs: &mut crate::server::tables::topics::Subs,
    token: &str,
) -> Result<(u64, Vec<Box<str>>), Close> {
    let r = match topics.gate.verify(Some(token)) {
        Ok(claims) => topics.gate.refresh(req.key, claims),
        Err(e) => Err(e),
    };
    match r {
        Ok(exp) => {
            req.stats.auth_refreshed += 1;
            let revoked = topics.revoke(subs, req.key);
            *req.stats.subscribe_refused.entry(crate::server::auth::gate::NOT_PERMITTED.into()).or_insert(0) += revoked.len() as u64;
            Ok((exp, revoked))
        }
        Err(reason) => {
            close::count(&mut req.stats.auth_refused, reason);
            Err(reason)
        }
    }
}

fn on_event(req: &mut Requests<'_>, s: &mut Subscriber<'_>, ev: Event<'_>) -> Result<(), Close> {
    req.stats.frames_in += 1;
    match ev {
        Event::Message { text: true, data } if is_command(data) => command(req, s, data)?,
        // MQTT on a WebSocket that did not offer `mqtt`: refused, not echoed.
        Event::Message { text: false, data } if crate::server::session::mqtt_ws::looks_like_connect(data) => return Err(Close::WsMqttNotOffered),
        Event::Message { text, data } if s.upstream.is_some() => up_message(req, s, None, text, data)?,
        Event::Message { text, data } => {
            let opcode = if text { Opcode::Text } else { Opcode::Binary };
            let mut reply = Vec::with_capacity(data.len() + 10);
            match s.compress.as_mut().filter(|(_, min)| data.len() >= *min) {
                Some((d, _)) => {
                    let mut z = Vec::with_capacity(data.len() / 2 + 16);
                    ws_deflate::compress(d, req.stats, data, &mut z);
                    frame::encode_compressed(&mut reply, opcode, &z, None);
                    req.stats.ws_compressed_out += 1;
                }
                None => frame::encode(&mut reply, true, opcode, data, None),
            }
            if let Answer::Rejected(_) = req.submit(reply) {
                return Err(Close::WsTryAgainLater);
            }
        }
        Event::Ping(p) => {
            frame::encode(req.out, true, Opcode::Pong, p, None);
            req.stats.frames_out += 1;
        }
        Event::Pong(_) => {}
        Event::Close(code, _) => {
            // Echo the status code (RFC 6455 §5.5.1), then close.
            match code {
                Some(c) => frame::encode_close(req.out, c, None),
                None => frame::encode(req.out, true, Opcode::Close, &[], None),
            }
            return Err(Close::WsPeerClose);
        }
    }
    Ok(())
}

/// One push's message before framing (and compression): its opcode and
/// payload.
pub(crate) fn push_message(format: PushFormat, p: &Push<'_>) -> (Opcode, Vec<u8>) {
    match format {
        PushFormat::Binary => {
            let mut body = Vec::with_capacity(64 + p.data.len());
            body.push(crate::proto::frame::Kind::Push as u8);
            push::encode_fields(&mut body, p, p.data, false);
            (Opcode::Binary, body)
        }
        PushFormat::Text => (Opcode::Text, push_json(p).to_string().into_bytes()),
    }
}

/// A push as JSON: `{"stream","topic","offset","epoch","seq","ts","data"}`
/// (`data_b64` when the data is not UTF-8); WebSocket text pushes and
/// Server-Sent Events carry it.
pub(crate) fn push_json(p: &Push<'_>) -> serde_json::Value {
    let stream = match p.stream {
        Stream::Broadcast => "broadcast",
        Stream::Topic => "topic",
        Stream::Unicast => "unicast",
    };
    let topic = String::from_utf8_lossy(p.topic);
    let mut v = serde_json::json!({ "stream": stream, "topic": topic, "offset": p.seq, "epoch": p.epoch, "seq": p.seq, "ts": p.publish_us });
    match std::str::from_utf8(p.data) {
        Ok(s) => v["data"] = s.into(),
        Err(_) => {
            use base64::Engine;
            v["data_b64"] = base64::engine::general_purpose::STANDARD.encode(p.data).into();
        }
    }
    v
}

/// The answer to a subscribe command or a resume: a text message
/// `{"type":"subscribed","topic":..,"epoch":..,"offset":..,"recovered":..}`.
pub(crate) fn encode_subscribed(out: &mut Vec<u8>, topic: &str, recovered: bool, at: push::Position) {
    let v = serde_json::json!({ "type": "subscribed", "topic": topic, "epoch": at.epoch, "offset": at.offset, "recovered": recovered });
    frame::encode(out, true, Opcode::Text, v.to_string().as_bytes(), None);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo of the largest message a client may send is exactly
    /// `largest_echo` bytes on the wire, the 64 KiB length form included.
    #[test]
    fn the_largest_echo_is_a_full_message_and_its_frame_header() {
        for max_message in [0, 125, 126, u16::MAX as usize, 1 << 16, 1 << 20] {
            let cfg = WsConfig { max_message, max_head: 8192, push_format: PushFormat::Text, deflate: DeflateConfig::default() };
            let mut reply = Vec::new();
            frame::encode(&mut reply, true, Opcode::Binary, &vec![7; max_message], None);
            assert!(reply.len() <= cfg.largest_echo(), "{max_message}: {} bytes", reply.len());
        }
        let cfg = WsConfig { max_message: 16 << 20, max_head: 8192, push_format: PushFormat::Binary, deflate: DeflateConfig::default() };
        let mut reply = Vec::new();
        frame::encode(&mut reply, true, Opcode::Text, &vec![b'a'; cfg.max_message], None);
        assert_eq!(reply.len(), cfg.largest_echo());
    }
}
