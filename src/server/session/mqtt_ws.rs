//! MQTT over WebSocket (MQTT 5.0 and 3.1.1, §6), the way mqtt.js, paho's
//! `transport="websockets"` and browsers connect: on a `--protocol ws`
//! port an Upgrade offering the `mqtt` subprotocol (or the older
//! `mqttv3.1`) is answered with it, and from then on the connection is an
//! MQTT connection like one on an MQTT port. Its state is the same
//! [`MqttConn`], so keep-alive, `--auth jwt` (the token is the CONNECT's
//! password), client ids, sessions, wills, the bounds and the one topic
//! space are the TCP port's; a JSON WebSocket client of the same port
//! shares its topics.
//!
//! This file composes the two sessions rather than repeating either:
//! frames are read by `proto/ws/frame.rs`'s [`Reader`] (pings answered,
//! a close echoed, a text message refused with close 1003), the payloads
//! of binary messages are one byte stream handed to [`mqtt::consume`] (a
//! packet may span messages and a message may hold several, §6.0), and
//! what the MQTT session writes is wrapped in binary messages
//! ([`frame::wrap_tail`]); the worker wraps its pushes the same way
//! (`worker/mqtt_out.rs`). permessage-deflate is not negotiated on it.
//!
//! Bounds: a message is at most the MQTT packet cap (one packet fits the
//! one message clients put it in); the start of a packet a message's end
//! cut waits in [`Carry`], less than one packet (the codec refuses a
//! longer one from its fixed header: v5 DISCONNECT 0x95, close 1009).
//! `--stall-timeout` sees it as partial input. The carry lives in the
//! connection's boxed MQTT state (`mqtt/extra.rs`), only while it holds
//! something: an idle MQTT-over-WebSocket connection costs what an idle
//! MQTT one does.

use crate::proto::mqtt::Limits;
use crate::proto::ws::frame::{self, Event, Fragments, Opcode, Reader, Role};
use crate::server::close::Close;
use crate::server::session::ext::Ext;
use crate::server::session::mqtt::{self, MqttConfig, MqttConn, Published};
use crate::server::session::ws;

/// What an MQTT-over-WebSocket connection carries between reads.
#[derive(Debug, Default)]
pub(crate) struct Carry {
    /// A binary message whose last fragment has not come.
    frag: Option<Box<Fragments>>,
    /// MQTT bytes of a packet not whole yet; while the CONNECT's claim is
    /// answered, everything after the CONNECT (at most one packet's worth).
    pending: Vec<u8>,
}

impl Carry {
    /// Bytes held: the fragments so far and the cut packet.
    pub(crate) fn held(&self) -> usize {
        self.frag.as_ref().map_or(0, |f| f.len()) + self.pending.len()
    }
}

/// What one read of a WebSocket port's connection works on: the WebSocket
/// session's parts, and what its MQTT connections need besides.
pub(crate) struct Ctx<'a> {
    pub ws: ws::Ctx<'a>,
    pub mqtt: &'a MqttConfig,
    pub limits: &'a Limits,
    pub published: &'a mut Published,
    /// This worker's index (assigned client ids name it).
    pub worker: usize,
    /// The connection's socket, only to tell who the peer is.
    pub peer_fd: std::os::fd::RawFd,
}

/// Bytes of a WebSocket port's connection: the WebSocket session's until
/// an Upgrade chose MQTT, then frames carrying MQTT (the rest of the same
/// read included). Returns the bytes used; Err closes the connection
/// after what `out` holds (an MQTT refusal, then a close frame).
///
/// `mqtt` is the connection's MQTT state: `None` until an Upgrade
/// chooses MQTT (the WebSocket session then says so, `ws::Ctx::mqtt`),
/// when it is made here.
pub(crate) fn consume(ctx: &mut Ctx<'_>, ext: &mut Ext, mqtt: &mut Option<MqttConn>, buf: &[u8]) -> Result<usize, Close> {
    let mut used = 0;
    let m = match mqtt {
        Some(m) => m,
        None => {
            used = ws::consume(&mut ctx.ws, ext, buf)?;
            if !std::mem::take(&mut ctx.ws.mqtt) {
                return Ok(used);
            }
            *ext = None;
            let m = mqtt.insert(MqttConn::fresh());
            if used == buf.len() {
                return Ok(used);
            }
            m
        }
    };
    Ok(used + frames(ctx, m, &buf[used..])?)
}

/// Every whole frame in `buf` of an MQTT-over-WebSocket connection.
fn frames(ctx: &mut Ctx<'_>, m: &mut MqttConn, buf: &[u8]) -> Result<usize, Close> {
    let mut carry = take(m);
    let Carry { frag, pending } = &mut carry;
    let mut mctx = mqtt::Ctx {
        req: ctx.ws.req.reborrow(),
        cfg: ctx.mqtt,
        limits: ctx.limits,
        topics: &mut *ctx.ws.topics,
        subs: &mut *ctx.ws.subs,
        published: &mut *ctx.published,
        worker: ctx.worker,
        upstream: ctx.ws.upstream.as_deref_mut(),
        peer_fd: ctx.peer_fd,
    };
    let max = ctx.limits.max_packet_size as usize;
    let mut peer_closed = false;
    // Packets are counted in `frames_in` by the MQTT session; here only
    // the WebSocket's own (pings, a close).
    let r = Reader { role: Role::Server, max, tmp: &mut *ctx.ws.tmp, frag, inflate: None }.consume(buf, |ev| {
        if !matches!(ev, Event::Message { .. }) {
            mctx.req.stats.frames_in += 1;
        }
        match ev {
            Event::Message { text: true, .. } => Err(Close::MqttWsText),
            Event::Message { data, .. } => packets(&mut mctx, m, pending, data),
            Event::Ping(p) => {
                frame::encode(mctx.req.out, true, Opcode::Pong, p, None);
                mctx.req.stats.frames_out += 1;
                Ok(())
            }
            Event::Pong(_) => Ok(()),
            Event::Close(code, _) => {
                // Echo the status code (RFC 6455 §5.5.1); the will goes as
                // for any end without DISCONNECT.
                match code {
                    Some(c) => frame::encode_close(mctx.req.out, c, None),
                    None => frame::encode(mctx.req.out, true, Opcode::Close, &[], None),
                }
                peer_closed = true;
                Ok(())
            }
        }
    });
    let out = mctx.req.out;
    give_back(m, carry);
    match r {
        Ok(_) if peer_closed => Err(Close::WsPeerClose),
        Ok(used) => Ok(used),
        Err(reason) => {
            frame::encode_close(out, reason.ws_code(), None);
            Err(reason)
        }
    }
}

/// One binary message's payload: the packets it completes carried out,
/// what they answer wrapped in one binary message, the rest kept.
fn packets(ctx: &mut mqtt::Ctx<'_>, m: &mut MqttConn, pending: &mut Vec<u8>, data: &[u8]) -> Result<(), Close> {
    let start = ctx.req.out.len();
    let r = if pending.is_empty() {
        mqtt::consume(ctx, m, data).map(|used| pending.extend_from_slice(&data[used..]))
    } else {
        pending.extend_from_slice(data);
        mqtt::consume(ctx, m, pending).map(|used| {
            pending.drain(..used);
        })
    };
    frame::wrap_tail(ctx.req.out, start, Opcode::Binary);
    r
}

/// What a client sent behind its CONNECT while the claim was answered
/// (it waited in the [`Carry`]): carried out now, its answers wrapped.
pub(crate) fn resume(ctx: &mut mqtt::Ctx<'_>, m: &mut MqttConn) -> Result<(), Close> {
    let mut carry = take(m);
    let pending = std::mem::take(&mut carry.pending);
    let r = packets(ctx, m, &mut carry.pending, &pending);
    give_back(m, carry);
    if let Err(reason) = r {
        frame::encode_close(ctx.req.out, reason.ws_code(), None);
    }
    r
}

/// The carry of an MQTT connection, out of its boxed extra for a read
/// (the session may free that box meanwhile).
fn take(m: &mut MqttConn) -> Carry {
    m.extra.as_deref_mut().map(|x| std::mem::take(&mut x.carry)).unwrap_or_default()
}

/// The carry back after a read: in the boxed state while it holds
/// anything (its memory freed when it holds nothing), else the box
/// freed if nothing else is in it.
fn give_back(m: &mut MqttConn, mut carry: Carry) {
    if carry.held() == 0 {
        m.tidy();
        return;
    }
    if carry.pending.is_empty() {
        carry.pending = Vec::new();
    }
    m.extra_mut().carry = carry;
}

/// Wrap what the worker wrote for an MQTT-over-WebSocket connection from
/// `start` on (a CONNACK, a resumed session, a push) in one binary message.
pub(crate) fn wrap(out: &mut Vec<u8>, start: usize) {
    frame::wrap_tail(out, start, Opcode::Binary);
}

/// Whether a binary message starts with an MQTT CONNECT (its fixed
/// header, then the protocol name `MQTT`, or `MQIsdp` of 3.1): a client
/// that speaks MQTT on a WebSocket it did not ask to carry MQTT.
pub(crate) fn looks_like_connect(data: &[u8]) -> bool {
    if data.first() != Some(&0x10) {
        return false;
    }
    // The remaining length: 1 to 4 bytes, the last without its top bit.
    let Some(len_end) = data.iter().skip(1).take(4).position(|b| b & 0x80 == 0) else { return false };
    let name = &data[2 + len_end..];
    name.starts_with(b"\x00\x04MQTT") || name.starts_with(b"\x00\x06MQIsdp")
}

pub(crate) mod harness;
#[cfg(test)]
mod tests;
