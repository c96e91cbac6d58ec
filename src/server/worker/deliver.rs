//! Pushes and connection listings, as the supervisor commands them.
//!
//! A push is encoded once per worker per format; on a WebSocket port it
//! is also compressed once (permessage-deflate, no context takeover), the
//! first time a subscriber that negotiated it is reached, and those bytes
//! are shared by every such subscriber. History replays compress each
//! replayed message once per answer, whoever waited for it. A connection
//! that keeps context (`--ws-deflate takeover`) gets its pushes
//! compressed by its own compressor instead. An event stream's push
//! has its data encoded once too; its id is the stream's own, so streams
//! share a whole event only where their ids agree
//! ([`SharedPush`](crate::server::session::sse::SharedPush) says why).
//! A WebSocket port's MQTT-over-WebSocket clients get topic messages as
//! an MQTT port's do (`mqtt_out.rs`), from the same push.

use super::Worker;
use crate::proto::push::{self, Position, Push, Stream, BROADCAST_TOPIC};
use crate::server::broker::history::{Message, Slice};
use crate::server::close::Close;
use crate::server::commands::{conn_id, split_id, PushCommand};
use crate::server::commands::{ConnInfo, ListCommand, PresenceCommand, ServerMsg, LIST_BYTES, LIST_TOPICS};
use crate::server::session::ext::{sse_mut, takes_pushes};
use crate::server::session::sse::SharedPush;
use crate::server::session::{kind, ws};
use crate::server::tables::recovery::Fate;
use crate::server::tables::topics::{bucket, LATENCY_BUCKETS_MS};
use crate::supervise::control;

/// WebSocket close code of `POST /disconnect/user/SUB` (private range).
pub(super) const DISCONNECT_CLOSE: u16 = 4000;
/// Re-read the wall clock after this many writes (latency buckets).
const CLOCK_EVERY: usize = 64;

/// One push in the forms this worker's connections take it in.
struct PushForms {
    /// The framed push (empty when no framed connection takes pushes).
    framed: std::rc::Rc<[u8]>,
    /// The WebSocket message's frame, uncompressed.
    ws_frame: Option<std::rc::Rc<[u8]>>,
    /// Its opcode and body, when a deflate subscriber may want it compressed.
    message: Option<(crate::proto::ws::frame::Opcode, Vec<u8>)>,
}

impl Worker {
    /// Deliver one publish to its targets in this worker, from one buffer.
    pub(super) fn push(&mut self, mut cmd: PushCommand) {
        self.stats.push_commands += 1;
        let mut queued = 0;
        let data = std::mem::take(&mut cmd.data);
        let targets = self.push_targets(&cmd);
        if cmd.close {
            return self.disconnect(&targets, cmd.publish_id);
        }
        if self.needs.mqtt_only {
            return self.push_mqtt(&cmd, &data, &targets);
        }
        let p = Push { stream: cmd.stream, topic: cmd.topic.as_bytes(), seq: cmd.seq, publish_us: cmd.publish_us, epoch: cmd.epoch, data: &data };
        let PushForms { framed, ws_frame, message } = self.push_forms(&p);
        let mut compressed: Option<std::rc::Rc<[u8]>> = None;
        // Subscribers recovering this stream get it in the history answer.
        let history_name = if cmd.stream == Stream::Broadcast { BROADCAST_TOPIC } else { cmd.topic.as_str() };
        let waiting = cmd.stream != Stream::Unicast && !self.recoveries.is_empty();
        // Framed connections not read yet get their broadcasts at their first read (the seam).
        let broadcast = cmd.stream == Stream::Broadcast && self.seam.resuming();
        let mut slow = Vec::new();
        let mut now_us = push::wall_us();
        let now_s = self.now_s();
        let mut sse_push: Option<SharedPush> = None;
        // A ws port's MQTT-over-WebSocket subscribers: after the others, as
        // an MQTT port's get a topic message (nothing else yet).
        let mut mqtt_targets = Vec::new();
        for (i, key) in targets.iter().enumerate() {
            let Some(conn) = self.conns.get_mut(*key) else { continue };
            if self.mqtt.get(*key).is_some() {
                if cmd.stream == Stream::Topic {
                    mqtt_targets.push(*key);
                }
                continue;
            }
            if waiting && self.recoveries.holds(history_name, *key, conn.gen) {
                continue;
            }
            if broadcast && conn.unread() {
                self.seam.note(*key, conn.gen);
                continue;
            }
            // An event stream's id is its own (its positions in every
            // stream); the data is encoded once, and a whole event shared
            // by the streams whose ids agree.
            let sent = match sse_mut(&mut conn.ext) {
                Some(sse) => {
                    let shared = sse_push.get_or_insert_with(|| SharedPush::encode(&p, &self.topics, &mut self.stats));
                    let event = shared.event(sse, &self.topics, now_s);
                    super::io::send_frame(self.tls.as_mut(), self.ring.as_mut(), *key, conn, &event, self.cfg.max_pending_bytes, Close::SlowConsumer)
                }
                None => {
                    // One buffer for every connection of a format: on the ring each send points at it.
                    let form = kind::push_form(super::protocol_of(&self.cfg.services, conn), &conn.ext, false);
                    let frame = match (form, &ws_frame) {
                        (kind::PushForm::Ws, Some(f)) => f,
                        _ => &framed,
                    };
                    let mut own = None;
                    let shared = match (&message, self.ws_codec.as_deref_mut()) {
                        (Some((opcode, body)), Some(codec)) if conn.ws_deflate() => {
                            self.stats.ws_compressed_out += 1;
                            // Context takeover: compressed for this connection alone.
                            own = codec.frame_for(*key, &mut self.stats, *opcode, body);
                            match own {
                                Some(_) => frame,
                                None => compressed.get_or_insert_with(|| codec.frame(&mut self.stats, *opcode, body).into()),
                            }
                        }
                        _ => frame,
                    };
                    match &own {
                        Some(f) => super::io::send(self.tls.as_mut(), self.ring.as_mut(), *key, conn, f, self.cfg.max_pending_bytes, Close::SlowConsumer),
                        None => {
                            super::io::send_frame(self.tls.as_mut(), self.ring.as_mut(), *key, conn, shared, self.cfg.max_pending_bytes, Close::SlowConsumer)
                        }
                    }
                }
            };
            match sent {
                Ok(()) => {
                    queued += 1;
                    if i % CLOCK_EVERY == 0 {
                        now_us = push::wall_us();
                    }
                    let lat_us = now_us.saturating_sub(cmd.publish_us);
                    self.record_push_latency(lat_us);
                }
                Err(reason) => slow.push((*key, reason)),
            }
        }
        if cmd.stream == Stream::Broadcast && self.needs.framed_pushes && self.seam.broadcast(cmd.seq, &framed) {
            let released = self.seam.release_all();
            self.send_held(released);
        }
        // Shared subscription members the supervisor picked here too.
        if !mqtt_targets.is_empty() || !cmd.shared.is_empty() {
            let (q, s) = self.deliver_mqtt(&cmd, &data, &mqtt_targets);
            queued += q;
            slow.extend(s);
        }
        self.stats.push_delivered_bytes += queued * data.len() as u64;
        self.pushed(cmd.publish_id, queued, slow);
    }

    /// The connections of this worker a push goes to.
    fn push_targets(&self, cmd: &PushCommand) -> Vec<usize> {
        // Who takes pushes (`session/kind.rs`): framed, ws and MQTT
        // connections; on an HTTP port only event streams.
        let services = &self.cfg.services;
        let mqtt = &self.mqtt;
        let takes = |k: usize, c: &crate::server::worker::conn::Conn| kind::takes_pushes(super::protocol_of(services, c), &c.ext, mqtt.get(k));
        match cmd.stream {
            // Not to connections still in their TLS handshake. MQTT
            // connections take topic messages only (skipped below).
            Stream::Broadcast => {
                let tls = self.tls.as_ref();
                self.conns.iter().filter(|(k, c)| takes(*k, c) && !tls.is_some_and(|t| t.handshaking(*k))).map(|(k, _)| k).collect()
            }
            // `audience`: exact topics and MQTT `+`/`#` filters.
            // Not to one waiting for this retained message in its
            // subscription's answer (`held_back`, `bus/waits.rs`).
            Stream::Topic => self
                .topics
                .audience(&cmd.topic)
                .into_iter()
                .filter(|k| self.conns.get(*k).is_some_and(|c| takes(*k, c) && !self.held_back.contains(&conn_id(self.cfg.worker, *k, c.gen))))
                .collect(),
            Stream::Unicast if cmd.user.is_some() => {
                let user = cmd.user.as_deref().unwrap_or_default();
                self.topics.gate.conns_of(user).iter().copied().filter(|k| self.conns.get(*k).is_some_and(|c| takes(*k, c))).collect()
            }
            Stream::Unicast => cmd
                .target
                .map(split_id)
                .filter(|(w, k, g)| {
                    *w == self.cfg.worker
                        && self.conns.get(*k).is_some_and(|c| c.gen == *g && takes(*k, c))
                        && !self.tls.as_ref().is_some_and(|t| t.handshaking(*k))
                })
                .map(|(_, k, _)| vec![k])
                .unwrap_or_default(),
        }
    }

    /// A push encoded once per format this worker serves: the framed push
    /// and the WebSocket message (event streams share theirs, in `push`).
    fn push_forms(&mut self, p: &Push<'_>) -> PushForms {
        let framed: std::rc::Rc<[u8]> = if self.needs.framed_pushes {
            let mut framed = Vec::with_capacity(64 + p.data.len());
            push::encode(&mut framed, p);
            framed.into()
        } else {
            std::rc::Rc::from(&[][..])
        };
        // A WebSocket push's message, kept to be compressed once if a
        // subscriber negotiated deflate and it is long enough.
        let mut message = None;
        let mut ws_frame: Option<std::rc::Rc<[u8]>> = None;
        if self.needs.ws_pushes {
            let (opcode, body) = ws::push_message(self.cfg.ws.push_format, p);
            let mut frame = Vec::with_capacity(16 + body.len());
            crate::proto::ws::frame::encode(&mut frame, true, opcode, &body, None);
            ws_frame = Some(frame.into());
            if self.ws_codec.is_some() && body.len() >= self.cfg.ws.deflate.min_bytes {
                message = Some((opcode, body));
            }
        }
        PushForms { framed, ws_frame, message }
    }

    /// A push's end, whatever the protocol: the slow consumers it found
    /// closed (each one dropped), the counts, and the answer to the
    /// supervisor.
    pub(super) fn pushed(&mut self, publish_id: u64, queued: u64, slow: Vec<(usize, Close)>) {
        let mut dropped = 0;
        for (key, reason) in slow {
            dropped += 1;
            self.close(key, reason);
        }
        self.stats.push_delivered += queued;
        self.stats.push_dropped += dropped;
        self.stats.frames_out += queued;
        self.ack_push(publish_id, queued, dropped);
    }

    /// Tell the supervisor push `publish_id` was carried out (not a quiet
    /// one's, id 0: nobody waits for it).
    fn ack_push(&self, publish_id: u64, queued: u64, dropped: u64) {
        if publish_id != 0 {
            control::emit_batched(&ServerMsg::Pushed { worker: self.cfg.worker, publish_id, queued, dropped });
        }
    }

    /// Close these connections as the application asked (WebSocket:
    /// close code 4000 first) and acknowledge publish `publish_id`.
    fn disconnect(&mut self, targets: &[usize], publish_id: u64) {
        for &key in targets {
            let Some(conn) = self.conns.get_mut(key) else { continue };
            let mut out = Vec::new();
            kind::farewell(&mut out, super::protocol_of(&self.cfg.services, conn), &conn.ext, self.mqtt.get(key), DISCONNECT_CLOSE, b"disconnected");
            if !out.is_empty() {
                let _ = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &out, self.cfg.max_pending_bytes, Close::SlowConsumer);
            }
            self.close(key, Close::Disconnected);
        }
        self.ack_push(publish_id, targets.len() as u64, 0);
    }

    /// Connections silent since their accept for the seam's FRESH get
    /// the broadcasts held for them (see `seam.rs`). Called every second.
    pub(super) fn release_held(&mut self) {
        if !self.seam.pending() {
            return;
        }
        let expired = self.seam.expire();
        self.send_held(expired);
    }

    /// What the seam held for these connections, to each (those still
    /// there and authenticated).
    fn send_held(&mut self, held: Vec<(usize, u32, super::seam::Held)>) {
        let mut slow = Vec::new();
        for (key, gen, held) in held {
            // Never to one that has not shown its token (`--auth jwt`).
            let Some(conn) = self.conns.get_mut(key).filter(|c| c.gen == gen && takes_pushes(&c.ext, self.mqtt.get(key))) else { continue };
            conn.set_read();
            for f in &held.frames {
                if let Err(reason) = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, f, self.cfg.max_pending_bytes, Close::SlowConsumer) {
                    slow.push((key, reason));
                    break;
                }
                self.stats.frames_out += 1;
                self.stats.push_delivered += 1;
            }
        }
        for (key, reason) in slow {
            self.stats.push_dropped += 1;
            self.close(key, reason);
        }
    }

    /// A comment on every event stream quiet for 15 s (proxies close
    /// idle ones). Called once a second; costs nothing without streams.
    pub(super) fn sse_heartbeats(&mut self) {
        if self.stats.sse_streams == 0 {
            return;
        }
        let now_s = self.now_s();
        let mut slow = Vec::new();
        for (key, conn) in self.conns.iter_mut() {
            let Some(sse) = sse_mut(&mut conn.ext) else { continue };
            if !crate::server::session::sse::heartbeat_due(sse, now_s) {
                continue;
            }
            sse.last_write_s = now_s;
            let beat = crate::server::session::sse::HEARTBEAT;
            if let Err(reason) = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, beat, self.cfg.max_pending_bytes, Close::SlowConsumer) {
                slow.push((key, reason));
            }
        }
        for (key, reason) in slow {
            self.close(key, reason);
        }
    }

    /// The history of a topic came: each connection that waited for it
    /// gets the messages after its offset, then the answer to its resume.
    pub(super) fn recovered(&mut self, slice: &Slice) {
        let stream = if slice.topic == BROADCAST_TOPIC { Stream::Broadcast } else { Stream::Topic };
        let topic = if stream == Stream::Broadcast { "" } else { slice.topic.as_str() };
        let head = Position { epoch: slice.epoch, offset: slice.head };
        let mut slow = Vec::new();
        let mut out = Vec::new();
        let now_s = self.now_s();
        // Replayed messages compressed for deflate subscribers, by index
        // in the slice: each once, whoever else waited for it.
        let mut compressed: Vec<Option<Vec<u8>>> = Vec::new();
        for (key, gen, fate) in self.recoveries.answered(slice) {
            if self.conns.get(key).is_none_or(|c| c.gen != gen) {
                continue;
            }
            out.clear();
            let first = match &fate {
                Fate::Recovered { after } => slice.messages.partition_point(|m| m.offset <= *after),
                _ => slice.messages.len(),
            };
            let replay: &[Message] = &slice.messages[first..];
            let recovered = fate != Fate::Lost;
            if fate != Fate::Position {
                crate::stats::counters::bump(&mut self.stats.recoveries, if recovered { "recovered" } else { "lost" });
            }
            self.stats.recovered_messages += replay.len() as u64;
            self.stats.frames_out += replay.len() as u64 + 1;
            let pushes =
                replay.iter().map(|m| Push { stream, topic: topic.as_bytes(), seq: m.offset, publish_us: m.publish_us, epoch: slice.epoch, data: &m.data });
            let conn = self.conns.get_mut(key).expect("checked above");
            let deflate = conn.ws_deflate();
            let form = kind::push_form(super::protocol_of(&self.cfg.services, conn), &conn.ext, false);
            match (sse_mut(&mut conn.ext), form) {
                (Some(sse), _) => {
                    for p in pushes {
                        crate::server::session::sse::write_push(&mut out, sse, &self.topics, &p, now_s, &mut self.stats);
                    }
                    crate::server::session::sse::write_subscribed(&mut out, sse, &self.topics, &slice.topic, recovered, head, now_s);
                }
                (None, kind::PushForm::Ws) => {
                    let codec = self.ws_codec.as_deref_mut().filter(|_| deflate);
                    replay_ws(&mut out, &self.cfg.ws, codec.map(|c| (c, key)), &mut self.stats, &mut compressed, first, pushes);
                    ws::encode_subscribed(&mut out, &slice.topic, recovered, head);
                }
                (None, _) => {
                    for p in pushes {
                        push::encode(&mut out, &p);
                    }
                    push::encode_subscribed(&mut out, &slice.topic, recovered, head);
                }
            }
            if let Err(reason) = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &out, self.cfg.max_pending_bytes, Close::SlowConsumer) {
                slow.push((key, reason));
            }
        }
        for (key, reason) in slow {
            self.stats.push_dropped += 1;
            self.close(key, reason);
        }
    }

    pub(super) fn record_push_latency(&mut self, us: u64) {
        let b = &mut self.stats.push_latency_buckets;
        if b.len() != LATENCY_BUCKETS_MS.len() + 1 {
            b.resize(LATENCY_BUCKETS_MS.len() + 1, 0);
        }
        b[bucket(us as f64 / 1000.0)] += 1;
        self.stats.push_latency_sum_us += us;
    }

    /// Report a topic's subscribers, by user.
    pub(super) fn presence(&mut self, cmd: &PresenceCommand) {
        let gate = &self.topics.gate;
        let mut users: std::collections::HashMap<&str, (u64, Option<&str>)> = std::collections::HashMap::new();
        let mut anonymous = 0;
        for key in self.topics.subscribers(&cmd.topic) {
            match gate.user_of(key) {
                Some(u) => {
                    let e = users.entry(u).or_insert((0, gate.info_of(key)));
                    e.0 += 1;
                }
                None => anonymous += 1,
            }
        }
        let users = users.into_iter().map(|(u, (n, info))| (u.to_string(), n, info.map(str::to_string))).collect();
        control::emit(&ServerMsg::Presence { worker: self.cfg.worker, request_id: cmd.request_id, users, anonymous });
    }

    /// Report up to `limit` connections (optionally only a topic's).
    pub(super) fn list(&mut self, cmd: &ListCommand) {
        let now = self.now_s();
        let worker = self.cfg.worker;
        let (mut list, mut bytes, mut truncated) = (Vec::new(), 0, false);
        let gate = &self.topics.gate;
        let matching = self.conns.iter().filter(|(k, c)| {
            cmd.topic.as_deref().is_none_or(|t| self.topics.has(&c.subs, t)) && cmd.user.as_deref().is_none_or(|u| gate.user_of(*k) == Some(u))
        });
        for (k, c) in matching.take(cmd.limit) {
            let mut topics = self.topics.names_of(&c.subs);
            let topics_total = topics.len();
            topics.truncate(LIST_TOPICS);
            let info = ConnInfo {
                id: conn_id(worker, k, c.gen),
                worker,
                peer: c.stream.peer_addr().map(|a| a.to_string()).unwrap_or_default(),
                age_s: now.saturating_sub(c.since_s()) as u64,
                topics,
                topics_total,
                user: gate.user_of(k).map(str::to_string),
                info: gate.info_of(k).and_then(|i| serde_json::from_str(i).ok()),
            };
            bytes += info.json_bytes();
            if bytes > LIST_BYTES {
                truncated = true;
                break;
            }
            list.push(info);
        }
        control::emit(&ServerMsg::Connections { worker, request_id: cmd.request_id, list, truncated });
    }
}

/// Replayed pushes to one WebSocket subscriber: compressed when it
/// negotiated deflate (`codec` and the connection's key) and the message
/// is long enough, each message compressed once into `cache` (by its
/// index in the slice, the first replayed being `first`) and shared with
/// the next subscriber; or, if the connection keeps context, for it alone.
fn replay_ws<'p>(
    out: &mut Vec<u8>,
    cfg: &ws::WsConfig,
    mut codec: Option<(&mut crate::server::session::ws_deflate::WsCodec, usize)>,
    stats: &mut crate::server::snapshot::ServerSnapshot,
    cache: &mut Vec<Option<Vec<u8>>>,
    first: usize,
    pushes: impl Iterator<Item = Push<'p>>,
) {
    for (i, p) in pushes.enumerate() {
        let (opcode, body) = ws::push_message(cfg.push_format, &p);
        match codec.as_mut().filter(|_| body.len() >= cfg.deflate.min_bytes) {
            Some((codec, key)) => {
                stats.ws_compressed_out += 1;
                if let Some(f) = codec.frame_for(*key, stats, opcode, &body) {
                    out.extend_from_slice(&f);
                    continue;
                }
                let at = first + i;
                if cache.len() <= at {
                    cache.resize(at + 1, None);
                }
                let f = cache[at].get_or_insert_with(|| codec.frame(stats, opcode, &body));
                out.extend_from_slice(f);
            }
            None => crate::proto::ws::frame::encode(out, true, opcode, &body, None),
        }
    }
}
