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
use crate::server::session::ext::{sse_mut, ws_mut, ConnExt, Ext, HookWait, WsConn};
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
    /// `--mqtt-auth-http`: requests to hold until the backend decides
    /// them (None: no hook; an MQTT Upgrade is decided by its CONNECT).
    pub asks: Option<&'a mut Vec<crate::server::commands::UpgradeAsk>>,
}

/// State of a connection just accepted: waiting for its Upgrade request.
pub(crate) fn fresh(now_ds: u32) -> Ext {
    Some(Box::new(ConnExt::Ws(WsConn { handshake_since_ds: now_ds.max(1), frag: None, hook: Default::default() })))
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
                if let Some(asks) = ctx.asks.as_deref_mut() {
                    // `--mqtt-auth-http`: held, unanswered, in the partial
                    // input, until the backend decides (`worker/upgrade.rs`).
                    let Some(ConnExt::Ws(w)) = ext.as_deref_mut() else { return Err(Close::WsHandshake("state")) };
                    match w.hook {
                        HookWait::Allowed => {}
                        // What a client sends before its answer is held
                        // too: a head's worth at most.
                        HookWait::Asked if buf.len() > 2 * ctx.cfg.max_head => return Err(Close::WsHandshake("ws_unanswered_overflow")),
                        HookWait::Asked => return Ok(0),
                        HookWait::No => {
                            w.hook = HookWait::Asked;
                            asks.push(crate::server::session::ext::hook_ask(ctx.req.key, ctx.req.gen, up.events.is_some(), &buf[..used]));
                            return Ok(0);
                        }
                    }
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
    *ext = frag.map(|f| Box::new(ConnExt::Ws(WsConn { handshake_since_ds: 0, frag: Some(f), hook: Default::default() })));
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
    use crate::server::business::service_time::ServiceTime;
    use crate::server::business::{BusinessMode, Stage};
    use crate::server::session::fixture::Read;

    /// A WebSocket port's read parts and one connection's state (fresh:
    /// waiting for its Upgrade).
    struct Conn {
        read: Read,
        recoveries: Recoveries,
        tmp: Vec<u8>,
        cfg: WsConfig,
        ext: Ext,
    }

    fn conn() -> Conn {
        let cfg = WsConfig { max_message: 1024, max_head: 1024, push_format: PushFormat::Text, deflate: DeflateConfig::default() };
        Conn { read: Read::new(), recoveries: Recoveries::default(), tmp: Vec::new(), cfg, ext: fresh(1) }
    }

    impl Conn {
        /// Feed `buf`: the bytes used or the close, and what was written.
        fn feed(&mut self, buf: &[u8]) -> (Result<usize, Close>, Vec<u8>) {
            let (req, topics, subs) = self.read.split();
            let mut ctx = Ctx {
                req,
                cfg: &self.cfg,
                topics,
                subs,
                recoveries: &mut self.recoveries,
                now_s: 5,
                tmp: &mut self.tmp,
                upstream: None,
                codec: None,
                deflate: false,
                mqtt: false,
                asks: None,
            };
            let r = consume(&mut ctx, &mut self.ext, buf);
            assert!(!ctx.mqtt && !ctx.deflate);
            (r, std::mem::take(&mut self.read.out))
        }

        /// A connection past its Upgrade (the 101 dropped).
        fn upgraded() -> Conn {
            let mut c = conn();
            let up = upgrade("/");
            assert_eq!(c.feed(&up).0, Ok(up.len()));
            c
        }
    }

    /// The Upgrade of RFC 6455 §1.3, with its sample key, to `target`.
    fn upgrade(target: &str) -> Vec<u8> {
        format!("GET {target} HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://example.com\r\nSec-WebSocket-Version: 13\r\n\r\n").into_bytes()
    }

    /// A client's frame, masked.
    fn masked(fin: bool, opcode: Opcode, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::encode(&mut out, fin, opcode, payload, Some([0x37, 0xfa, 0x21, 0x3d]));
        out
    }

    /// A server's frame (unmasked), as it must be on the wire.
    fn server(opcode: Opcode, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::encode(&mut out, true, opcode, payload, None);
        out
    }

    /// The close frame a server sends with `code`.
    fn close_frame(code: u16) -> Vec<u8> {
        let mut out = Vec::new();
        frame::encode_close(&mut out, code, None);
        out
    }

    /// The text messages the server wrote, as JSON.
    fn json_messages(out: &[u8]) -> Vec<serde_json::Value> {
        let (mut tmp, mut frag) = (Vec::new(), None);
        let mut got = Vec::new();
        Reader { role: Role::Client, max: 1 << 20, tmp: &mut tmp, frag: &mut frag, inflate: None }
            .consume(out, |ev| {
                match ev {
                    Event::Message { text: true, data } => got.push(serde_json::from_slice(data).unwrap()),
                    other => panic!("unexpected {other:?}"),
                }
                Ok::<(), &str>(())
            })
            .unwrap();
        got
    }

    /// The RFC's sample key is answered with the RFC's accept value, in a
    /// 101 and nothing else; an Upgrade cut short waits, unused.
    #[test]
    fn the_upgrade_is_answered_with_the_rfc_accept() {
        let mut c = conn();
        let up = upgrade("/chat");
        for cut in [1, 20, up.len() - 1] {
            assert_eq!(c.feed(&up[..cut]), (Ok(0), Vec::new()), "cut at {cut}");
            assert!(crate::server::session::ext::ws_handshaking(&c.ext));
        }
        let (r, out) = c.feed(&up);
        assert_eq!(r, Ok(up.len()));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
        );
        assert!(c.ext.is_none(), "an upgraded idle connection keeps no state");
        assert_eq!(c.read.stats.ws_upgrades, 1);

        // `?subscribe=` topics are subscribed before the 101 goes out; an
        // offered `megaconn` subprotocol is chosen.
        let mut c = conn();
        let up = String::from_utf8(upgrade("/x?subscribe=news,a/b")).unwrap().replace("Origin:", "Sec-WebSocket-Protocol: chat, megaconn\r\nOrigin:");
        let (r, out) = c.feed(up.as_bytes());
        assert_eq!(r, Ok(up.len()));
        assert!(String::from_utf8(out).unwrap().ends_with("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: megaconn\r\n\r\n"));
        assert_eq!(c.read.topics.names_of(&c.read.subs), ["news", "a/b"]);
    }

    /// Upgrades that are not valid are refused with their status and the
    /// handshake's reason, the connection closed.
    #[test]
    fn a_bad_upgrade_is_refused_with_its_status() {
        let up = String::from_utf8(upgrade("/")).unwrap();
        let cases = [
            (up.replace("Upgrade: websocket\r\n", ""), "426 Upgrade Required", "ws_handshake_not_upgrade"),
            (up.replace("GET", "POST"), "405 Method Not Allowed", "ws_handshake_method"),
            (up.replace("Version: 13", "Version: 8"), "426 Upgrade Required", "ws_handshake_version"),
            (up.replace("dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ="), "400 Bad Request", "ws_handshake_key"),
            (up.replace("Connection: Upgrade", "Connection: keep-alive"), "400 Bad Request", "ws_handshake_connection"),
            (up.replace("Origin:", &format!("X-Pad: {}\r\nOrigin:", "p".repeat(1024))), "431 Request Header Fields Too Large", "ws_handshake_too_large"),
        ];
        for (req, status, reason) in cases {
            let mut c = conn();
            let (r, out) = c.feed(req.as_bytes());
            assert_eq!(r, Err(Close::WsHandshake(reason)), "{reason}");
            let out = String::from_utf8(out).unwrap();
            assert!(out.starts_with(&format!("HTTP/1.1 {status}\r\n")) && out.contains("Connection: close\r\n"), "{reason}: {out}");
            assert_eq!(c.read.stats.ws_upgrades, 0);
        }
    }

    /// RFC 6455 §5.7's masked "Hello", sent with the Upgrade, is echoed
    /// unmasked after the 101; a binary message comes back binary.
    #[test]
    fn a_masked_message_is_echoed_unmasked_in_kind() {
        let mut c = conn();
        let mut buf = upgrade("/");
        let hello = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
        assert_eq!(masked(true, Opcode::Text, b"Hello"), hello, "the RFC's bytes");
        buf.extend_from_slice(&hello);
        let (r, out) = c.feed(&buf);
        assert_eq!(r, Ok(buf.len()));
        let accept =
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        assert_eq!(out, [&accept[..], &[0x81, 0x05, b'H', b'e', b'l', b'l', b'o']].concat(), "the 101, then the echo");
        let bin = masked(true, Opcode::Binary, &[0, 1, 2, 255]);
        assert_eq!(c.feed(&bin), (Ok(bin.len()), server(Opcode::Binary, &[0, 1, 2, 255])));
        assert_eq!((c.read.stats.requests, c.read.stats.replies, c.read.stats.frames_in), (2, 2, 2));
    }

    /// A frame cut anywhere waits; a message in fragments is kept across
    /// reads (a ping between them answered at once) and echoed whole as
    /// one frame.
    #[test]
    fn split_frames_and_fragments_are_echoed_whole() {
        let mut c = Conn::upgraded();
        let f = masked(true, Opcode::Text, b"split me");
        for cut in [1, 2, 5, f.len() - 1] {
            assert_eq!(c.feed(&f[..cut]), (Ok(0), Vec::new()), "cut at {cut}");
        }
        assert_eq!(c.feed(&f), (Ok(f.len()), server(Opcode::Text, b"split me")));

        let first = masked(false, Opcode::Text, b"Hel");
        assert_eq!(c.feed(&first), (Ok(first.len()), Vec::new()));
        assert_eq!(ws_mut(&mut c.ext).and_then(|w| w.frag.as_ref()).map(|f| f.len()), Some(3), "kept between reads");
        let mut buf = masked(true, Opcode::Ping, b"p");
        buf.extend(masked(true, Opcode::Continuation, b"lo"));
        let (r, out) = c.feed(&buf);
        assert_eq!(r, Ok(buf.len()));
        assert_eq!(out, [server(Opcode::Pong, b"p"), server(Opcode::Text, b"Hello")].concat());
        assert!(c.ext.is_none(), "nothing kept once whole");
    }

    /// A ping is answered with a pong carrying its payload (empty too); a
    /// pong is taken without an answer.
    #[test]
    fn a_ping_is_answered_with_its_payload() {
        let mut c = Conn::upgraded();
        let payload: Vec<u8> = (0..125).collect();
        let mut buf = masked(true, Opcode::Ping, &payload);
        buf.extend(masked(true, Opcode::Pong, b"unasked"));
        buf.extend(masked(true, Opcode::Ping, b""));
        let (r, out) = c.feed(&buf);
        assert_eq!(r, Ok(buf.len()));
        assert_eq!(out, [server(Opcode::Pong, &payload), vec![0x8A, 0]].concat());
        assert_eq!((c.read.stats.frames_in, c.read.stats.frames_out, c.read.stats.requests), (3, 2, 0));
    }

    /// A close frame is answered with its status code (or an empty close
    /// to an empty one) and ends the read: what follows it is not handled.
    #[test]
    fn a_close_frame_is_answered_and_ends_the_connection() {
        let mut c = Conn::upgraded();
        let mut payload = 1001u16.to_be_bytes().to_vec();
        payload.extend_from_slice(b"going away");
        let mut buf = masked(true, Opcode::Close, &payload);
        buf.extend(masked(true, Opcode::Ping, b"after"));
        let (r, out) = c.feed(&buf);
        assert_eq!(r, Err(Close::WsPeerClose));
        assert_eq!(out, [0x88, 0x02, 0x03, 0xE9], "1001 echoed, no pong");
        assert_eq!(Close::WsPeerClose.as_str(), PEER_CLOSE);

        let mut c = Conn::upgraded();
        assert_eq!(c.feed(&masked(true, Opcode::Close, b"")), (Err(Close::WsPeerClose), vec![0x88, 0x00]));
    }

    /// Each protocol violation is answered with a close frame carrying
    /// its status and closes with the decoder's reason: an unmasked client
    /// frame (1002), bad UTF-8 (1007), a message past the cap (1009), and
    /// the other framing errors (1002).
    #[test]
    fn violations_are_answered_with_their_close_code() {
        let mut unmasked = Vec::new();
        frame::encode(&mut unmasked, true, Opcode::Text, b"Hello", None);
        let mut reserved = masked(true, Opcode::Text, b"x");
        reserved[0] |= 0x20;
        let mut unknown = masked(true, Opcode::Text, b"x");
        unknown[0] = 0x83;
        let cases: [(Vec<u8>, &str, u16); 9] = [
            (unmasked, "ws_unmasked_frame", 1002),
            (masked(true, Opcode::Text, b"\xff\xfe"), "ws_bad_utf8", 1007),
            (masked(true, Opcode::Binary, &[0; 1025]), "ws_message_too_big", 1009),
            (reserved, "ws_reserved_bits", 1002),
            (unknown, "ws_unknown_opcode", 1002),
            (masked(false, Opcode::Ping, b""), "ws_fragmented_control", 1002),
            (masked(true, Opcode::Continuation, b"x"), "ws_unexpected_continuation", 1002),
            (masked(true, Opcode::Close, &[0x03]), "ws_bad_close", 1002),
            (masked(true, Opcode::Close, &1005u16.to_be_bytes()), "ws_bad_close", 1002),
        ];
        for (buf, reason, code) in cases {
            let mut c = Conn::upgraded();
            let (r, out) = c.feed(&buf);
            assert_eq!(r, Err(Close::Ws(frame::Violation(reason))), "{reason}");
            assert_eq!(out, close_frame(code), "{reason}");
            assert_eq!(c.read.stats.requests, 0, "{reason}: nothing echoed");
        }
        // Two fragments past the cap together are refused as one message.
        let mut c = Conn::upgraded();
        let mut buf = masked(false, Opcode::Binary, &[0; 600]);
        buf.extend(masked(true, Opcode::Continuation, &[0; 600]));
        assert_eq!(c.feed(&buf), (Err(Close::Ws(frame::Violation("ws_message_too_big"))), close_frame(1009)));
    }

    /// Text commands subscribe (answered later, with the history),
    /// unsubscribe (answered at once) and are refused in an error message
    /// that keeps the connection: a malformed command, a bad topic, a
    /// publish without `--upstream`.
    #[test]
    fn commands_change_the_topic_table_and_are_answered() {
        let mut c = Conn::upgraded();
        let sub = masked(true, Opcode::Text, br#"{"type":"subscribe","topic":"news"}"#);
        assert_eq!(c.feed(&sub), (Ok(sub.len()), Vec::new()));
        assert_eq!(c.read.topics.subscribers("news"), [3]);
        assert_eq!(c.recoveries.take_wanted(), [("news".to_string(), u64::MAX)], "its position asked for");
        assert_eq!(c.read.stats.frames_out, 0);

        let unsub = masked(true, Opcode::Text, br#"{"type":"unsubscribe","topic":"news"}"#);
        let (r, out) = c.feed(&unsub);
        assert_eq!(r, Ok(unsub.len()));
        assert_eq!(json_messages(&out), [serde_json::json!({"type": "unsubscribed", "topic": "news"})]);
        assert_eq!(c.read.topics.id("news"), None);
        assert!(c.recoveries.is_empty(), "no wait left for a topic it left");

        let cases: [(&[u8], &str); 3] = [
            (br#"{"type":"subscribe","topic":"no space"}"#, "bad_topic"),
            (br#"{"type":"subscribe","topic":"a","extra":1}"#, "bad_command"),
            (br#"{"type":"publish","topic":"a","data":"x"}"#, "no_upstream"),
        ];
        for (cmd, reason) in cases {
            let (r, out) = c.feed(&masked(true, Opcode::Text, cmd));
            assert!(r.is_ok(), "{reason}");
            let answer = json_messages(&out);
            assert_eq!((answer.len(), answer[0]["type"].as_str(), answer[0]["reason"].as_str()), (1, Some("error"), Some(reason)), "{answer:?}");
        }
        assert_eq!(c.read.stats.subscribe_refused.get("bad_topic"), Some(&1));
        assert_eq!(c.read.stats.subscribe_refused.get("bad_command"), Some(&1));
        assert!(c.read.subs.is_empty());
        assert_eq!(c.read.stats.requests, 0, "no command is echoed");

        // Text that is not a command object is an ordinary message.
        let not = masked(true, Opcode::Text, br#"{"kind":"subscribe"}"#);
        assert_eq!(c.feed(&not), (Ok(not.len()), server(Opcode::Text, br#"{"kind":"subscribe"}"#)));
    }

    /// Commands past the rate close with 1008; a full business stage
    /// with 1013; an MQTT CONNECT on a WebSocket that did not offer
    /// `mqtt` with 1002.
    #[test]
    fn overload_and_mqtt_not_offered_close_with_their_codes() {
        let mut c = Conn::upgraded();
        c.read.topics = Topics::new(false, 100, 1);
        let mut buf = masked(true, Opcode::Text, br#"{"type":"subscribe","topic":"a"}"#);
        buf.extend(masked(true, Opcode::Text, br#"{"type":"unsubscribe","topic":"a"}"#));
        assert_eq!(c.feed(&buf), (Err(Close::TooManyCommands), close_frame(1008)));
        assert!(c.read.topics.has(&c.read.subs, "a"), "the second command was not carried out");

        let mut c = Conn::upgraded();
        c.read.stage = Stage::new(BusinessMode::Async, 0, std::sync::Arc::new(|| {})).unwrap();
        c.read.service = ServiceTime::Fixed(std::time::Duration::from_secs(3600));
        assert_eq!(c.feed(&masked(true, Opcode::Text, b"hi")), (Err(Close::WsTryAgainLater), close_frame(1013)));
        assert_eq!(c.read.stats.rejected, 1);

        let mut c = Conn::upgraded();
        let connect = [0x10, 12, 0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 30, 0, 0];
        assert_eq!(c.feed(&masked(true, Opcode::Binary, &connect)), (Err(Close::WsMqttNotOffered), close_frame(1002)));
    }

    /// `Accept: text/event-stream` on a WebSocket port opens an event
    /// stream: its head, the `?subscribe=` topics and the broadcasts asked
    /// for their position, the Last-Event-ID's positions resumed; what
    /// its client sends afterwards is dropped.
    #[test]
    fn an_event_stream_request_opens_a_stream() {
        let mut c = conn();
        let req = "GET /events?subscribe=news,other HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\nLast-Event-ID: news:3:7, *:2:9\r\n\r\n";
        let (r, out) = c.feed(req.as_bytes());
        assert_eq!(r, Ok(req.len()));
        let want = [crate::proto::sse::write::HEAD, b"retry: 2000\n: megaconn event stream\n\n"].concat();
        assert_eq!(out, want);
        assert!(sse_mut(&mut c.ext).is_some_and(|s| s.positions.is_empty() && s.last_write_s == 5));
        assert_eq!((c.read.stats.sse_streams, c.read.stats.ws_upgrades), (1, 0));
        assert_eq!(c.read.topics.names_of(&c.read.subs), ["news", "other"]);
        assert!(c.recoveries.holds("news", 3, 1) && c.recoveries.holds("*", 3, 1), "resumed after their positions");
        assert!(!c.recoveries.holds("other", 3, 1), "its position only: live pushes reach it");
        let mut wanted = c.recoveries.take_wanted();
        wanted.sort();
        assert_eq!(wanted, [("*".to_string(), 9), ("news".to_string(), 7), ("other".to_string(), u64::MAX)]);
        assert_eq!(c.feed(b"anything at all"), (Ok(15), Vec::new()));

        // A Last-Event-ID that is not a resume token is refused, 400.
        let mut c = conn();
        let req = "GET /events HTTP/1.1\r\nAccept: text/event-stream\r\nLast-Event-ID: news:1:2,bad topic\r\n\r\n";
        let (r, out) = c.feed(req.as_bytes());
        assert_eq!(r, Err(Close::BadTopic));
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert_eq!((c.read.stats.sse_streams, c.read.stats.subscribe_refused.get("bad_topic")), (0, Some(&1)));
    }

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
