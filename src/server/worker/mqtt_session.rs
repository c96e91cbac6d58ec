//! A worker's side of MQTT client ids and persistent sessions (the
//! registry and the kept sessions are the supervisor's:
//! `broker/sessions.rs`): the answer to a CONNECT's claim (the CONNACK,
//! a resumed session's subscriptions and messages, then what the client
//! sent behind its CONNECT), a takeover (v5 DISCONNECT 0x8E, then the
//! close, which publishes the will), and the end of a registered
//! connection (the id freed; its subscriptions and unacknowledged
//! messages, with their v5 properties and what is left of their expiry,
//! handed over when its session outlives it). What goes to an
//! MQTT-over-WebSocket connection is wrapped in a binary message
//! (`session/mqtt_ws.rs`), and what it sent behind its CONNECT waited
//! there, as MQTT bytes.

use super::Worker;
use crate::net::Carried;
use crate::proto::bus::{Frame, Publish};
use crate::proto::mqtt::forward::Forwarded;
use crate::proto::mqtt::{encode, ConnAck, Packet, Properties, QoS, Version};
use crate::server::close::Close;
use crate::server::commands::DelayedWill;
use crate::server::commands::{conn_id, split_id, ClientPublish, KeptSub, ServerMsg, SessionAnswer, SessionEnd, SessionMessage, SessionState};
use crate::server::session::mqtt::{self, connect, flight, Claim};
use crate::server::session::mqtt_ws;
use crate::server::session::requests::Requests;
use crate::server::tables::topics::Topics;
use crate::server::tables::wildcards;
use crate::server::worker::bus::Bus;
use crate::supervise::control;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// v5 DISCONNECT: Session taken over.
const SESSION_TAKEN_OVER: u8 = 0x8E;

impl Worker {
    /// How many MQTT states the worker's table reserves at its first: the
    /// connections this worker can hold (its budget, its fds).
    pub(super) fn mqtt_reserve(&self) -> usize {
        self.cfg.budget.min(self.fd_ceiling).min(crate::server::session::mqtt::states::MAX_RESERVE as u64) as usize
    }

    /// The supervisor's answer to a CONNECT's claim of its client id.
    pub(super) fn mqtt_session(&mut self, a: SessionAnswer) {
        let (worker, key, gen) = split_id(a.conn);
        let waiting =
            worker == self.cfg.worker && self.conns.get(key).is_some_and(|c| c.gen == gen) && self.mqtt.get(key).is_some_and(|m| m.claim == Claim::Waiting);
        if !waiting {
            // It closed meanwhile: give the id back, and the session it
            // resumed (from this node or another), to be kept again.
            if a.code == 0 {
                control::emit(&ServerMsg::SessionsEnded { worker: self.cfg.worker, ended: vec![unclaimed(a)] });
            }
            return;
        }
        self.out.clear();
        let bounds = self.cfg.mqtt.flight;
        let max_packet = self.mqtt_limits.max_packet_size;
        let Some(conn) = self.conns.get_mut(key) else { return };
        let ws = super::over_ws(&self.cfg.services, conn);
        let Some(m) = self.mqtt.get_mut(key) else { return };
        let v = m.version.unwrap_or(Version::V311);
        if a.code != 0 {
            return self.mqtt_refused(key, a.code, a.hook_refused, ws);
        }
        m.key = a.key;
        if let Some(g) = a.grant.clone() {
            // `--mqtt-auth-http`: its identity, expiry and rules, before
            // its kept subscriptions are taken up again under them.
            self.topics.gate.grant(key, gen, g);
            // A will its client may not publish is never sent (as with
            // mosquitto's ACL).
            if m.extra.as_ref().and_then(|x| x.will.as_ref()).is_some_and(|w| self.topics.gate.may_publish(key, &w.topic).is_err()) {
                m.take_will();
                crate::server::close::count(&mut self.stats.mqtt_publish_refused, Close::MqttAclDenied);
            }
        }
        connect::claimed(&mut self.out, m, (max_packet, self.cfg.mqtt.max_keep_alive), a.present, a.assigned.as_deref());
        self.stats.frames_out += 1;
        for sub in &a.subs {
            let filter = &sub.filter;
            let r = if wildcards::is_filter(filter) {
                // Its identity as the claim gave it (the owner, or the address).
                self.topics.subscribe_filter(&mut conn.subs, key, filter, || a.identity.clone())
            } else {
                self.topics.subscribe(&mut conn.subs, key, filter.as_bytes())
            };
            if let (Ok(()), Some(id)) = (r, self.topics.sub_id(filter)) {
                let qos = QoS::from_bits(sub.qos).unwrap_or_default();
                m.set_sub(mqtt::extra::SubOpts { id, qos, rap: sub.rap, no_local: sub.no_local, sid: sub.sid });
            }
        }
        if !a.rel.is_empty() {
            m.extra_mut().flight.awaiting_release(&a.rel, usize::from(mqtt::RECEIVE_MAXIMUM));
        }
        let mut resumed = Resumed {
            out: &mut self.out,
            m,
            topics: &self.topics,
            subs: &conn.subs,
            stats: &mut self.stats,
            key,
            v,
            bounds,
            now_us: crate::proto::push::wall_us(),
        };
        for msg in &a.messages {
            resumed.send(msg);
        }
        let m = resumed.m;
        m.tidy();
        if ws {
            mqtt_ws::wrap(&mut self.out, 0);
        }
        let cap = self.cfg.max_pending_bytes.max(self.reply_cap);
        // The CONNACK behind its session's subscriptions' interest.
        self.bus.before_reply(&mut self.topics);
        if let Err(reason) = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, cap, Close::SlowConsumer) {
            return self.close(key, reason);
        }
        self.mqtt_resume(key);
    }

    /// A CONNECT the supervisor refused (`code`; `hook`: the HTTP auth
    /// backend did): its CONNACK, then the close; no will of it is ever
    /// published.
    fn mqtt_refused(&mut self, key: usize, code: u8, hook: bool, ws: bool) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        let Some(m) = self.mqtt.get_mut(key) else { return };
        let v = m.version.unwrap_or(Version::V311);
        m.claim = Claim::None;
        m.take_will();
        m.tidy();
        let refused = Packet::ConnAck(ConnAck { session_present: false, code, properties: Properties::default() });
        let _ = encode::packet(&refused, v, &mut self.out);
        if ws {
            mqtt_ws::wrap(&mut self.out, 0);
            crate::proto::ws::frame::encode_close(&mut self.out, 1000, None);
        }
        let _ = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, self.reply_cap, Close::SlowReader);
        if hook {
            crate::server::close::count(&mut self.stats.auth_refused, Close::MqttAuthHttpRefused);
            return self.close(key, Close::MqttAuthHttpRefused);
        }
        self.close(key, Close::MqttClientIdRefused)
    }

    /// Read what a client sent behind its CONNECT while the claim was
    /// answered (it waited in the connection's partial input).
    fn mqtt_resume(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        let Some(m) = self.mqtt.get_mut(key) else { return };
        // Over WebSocket it waited as MQTT bytes (the partial input is a
        // frame's start, for the next read).
        let ws = super::over_ws(&self.cfg.services, conn);
        let buf = if ws {
            Vec::new()
        } else {
            let Some(buf) = conn.spills.partial().take() else { return };
            buf
        };
        self.out.clear();
        let req = Requests {
            out: &mut self.out,
            stats: &mut self.stats,
            stage: &mut self.stage,
            rng: &mut self.rng,
            service: &self.cfg.service_time,
            key,
            gen: conn.gen,
        };
        let mut ctx = mqtt::Ctx {
            req,
            cfg: &self.cfg.mqtt,
            limits: &self.mqtt_limits,
            topics: &mut self.topics,
            subs: &mut conn.subs,
            published: &mut self.published,
            worker: self.cfg.worker,
            upstream: self.upstream.as_mut(),
            peer_fd: conn.stream.as_raw_fd(),
        };
        let end = if ws {
            mqtt_ws::resume(&mut ctx, m).err()
        } else {
            let r = mqtt::consume(&mut ctx, m, &buf);
            conn.spills.keep_unused(&buf, r)
        };
        self.emit_published(key);
        self.reply_resumed(key, end);
    }

    /// A CONNECT with this connection's client id came: v5 DISCONNECT
    /// 0x8E, then closed (its will goes as for any end but DISCONNECT).
    pub(super) fn mqtt_takeover(&mut self, id: u64) {
        let (worker, key, gen) = split_id(id);
        if worker != self.cfg.worker {
            return;
        }
        self.mqtt_close_by(key, gen, Close::MqttSessionTakenOver, SESSION_TAKEN_OVER, "session taken over: another connection gave this client id");
    }

    /// Close MQTT connection `key` of generation `gen` for the server's
    /// own reason: a v5 client is told first (DISCONNECT `code`, `why`),
    /// over WebSocket in a binary message before a close frame.
    pub(super) fn mqtt_close_by(&mut self, key: usize, gen: u32, reason: Close, code: u8, why: &str) {
        let Some(conn) = self.conns.get_mut(key).filter(|c| c.gen == gen) else { return };
        let m = self.mqtt.get(key);
        let ws = super::over_ws(&self.cfg.services, conn);
        self.out.clear();
        if let Some(m) = m.filter(|m| m.version == Some(Version::V5)) {
            encode::disconnect_within(&mut self.out, code, why, m.max_in());
        }
        if ws {
            mqtt_ws::wrap(&mut self.out, 0);
            crate::proto::ws::frame::encode_close(&mut self.out, 1000, None);
        }
        if !self.out.is_empty() {
            let _ = super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, self.reply_cap, Close::SlowReader);
        }
        self.close(key, reason);
    }

    /// A registered connection ends: its id goes back to the supervisor,
    /// with its session (subscriptions and unacknowledged messages) when
    /// that outlives it, and then its will when it asked for a v5 Will
    /// Delay Interval (the supervisor holds it: a reconnect of the id on
    /// any worker cancels it).
    pub(super) fn mqtt_session_end(&mut self, key: usize, conn: &super::conn::Conn, m: &mut mqtt::MqttConn) {
        let owner = self.topics.gate.user_of(key).map(str::to_string);
        // Without `--auth` its bounds are charged to its address.
        let identity = owner.clone().unwrap_or_else(|| crate::sys::peer_ip(conn.stream.as_raw_fd()));
        let delayed = m.claim == Claim::Registered && m.expiry_s() > 0 && m.extra.as_deref().and_then(|x| x.will.as_ref()).is_some_and(|w| w.delay_s > 0);
        let will = delayed.then(|| m.take_will()).flatten().map(|w| {
            self.stats.mqtt_wills_sent += 1;
            DelayedWill { delay_s: w.delay_s, will: will_message(w, &identity) }
        });
        if m.claim != Claim::Registered {
            return;
        }
        let state = (m.expiry_s() > 0).then(|| {
            // A subscription with no options kept is plain QoS 0.
            let opts = |id: u32| m.extra.as_deref().and_then(|x| x.subs.iter().find(|s| s.id == id));
            let subs = conn
                .subs
                .iter()
                .filter_map(|id| {
                    let filter = self.topics.sub_name(id)?.to_string();
                    Some(match opts(id) {
                        Some(o) => KeptSub { filter, qos: o.qos as u8, no_local: o.no_local, rap: o.rap, sid: o.sid },
                        None => KeptSub { filter, ..KeptSub::default() },
                    })
                })
                .collect();
            let v5 = m.version == Some(Version::V5);
            let now_us = crate::proto::push::wall_us();
            let messages = m
                .extra
                .as_deref()
                .into_iter()
                .flat_map(|x| x.flight.pending())
                .filter_map(|(id, released, d)| {
                    let (topic, payload, retain, fwd) = d.message(v5)?;
                    let data = payload.to_vec();
                    // Kept with what is left of its expiry, counted from now.
                    let mut mqtt = Forwarded::stored(fwd.as_ref());
                    if let Some(f) = mqtt.as_deref_mut() {
                        f.message_expiry = d.expiry_left(now_us);
                    }
                    Some(SessionMessage { topic: topic.into(), data, qos: d.qos as u8, retain, id, released, mqtt, publish_us: now_us })
                })
                .collect();
            let rel = m.extra.as_deref().map(|x| x.flight.awaiting().to_vec()).unwrap_or_default();
            SessionState { subs, messages, rel }
        });
        let end = SessionEnd { conn: conn_id(self.cfg.worker, key, conn.gen), key: m.key, expiry_s: m.expiry_s(), state, will, owner, identity };
        control::emit(&ServerMsg::SessionsEnded { worker: self.cfg.worker, ended: vec![end] });
    }

    /// `--mqtt-authz-http`: the backend's answers; the connections whose
    /// packets waited on them read again from those packets (read from
    /// the socket again once nothing waits).
    pub(super) fn authz_decided(&mut self, answers: Vec<crate::server::auth::authz::Answer>) {
        let Some(a) = &mut self.topics.gate.authz else { return };
        for (key, gen, paused) in a.answered(answers, Instant::now()) {
            let live = |w: &Self| w.conns.get(key).is_some_and(|c| c.gen == gen);
            if !live(self) {
                continue;
            }
            self.mqtt_resume(key);
            if !paused || !live(self) {
                continue;
            }
            match &mut self.topics.gate.authz {
                // Its next packet waits too: still not read.
                Some(a) if a.waits(key) => _ = a.pause(key),
                _ => self.resume_reading(key),
            }
        }
    }

    /// `--mqtt-authz-http`: close connections whose packets waited for an
    /// answer past their deadline (one never came back).
    pub(super) fn expire_authz(&mut self, now: Instant) {
        let Some(a) = &mut self.topics.gate.authz else { return };
        for (key, gen) in a.overdue(now) {
            if self.conns.get(key).is_some_and(|c| c.gen == gen) {
                self.close(key, Close::MqttAuthzUnanswered);
            }
        }
    }

    /// Hand the supervisor what the read of connection `key` left for
    /// it ([`emit`]).
    pub(super) fn emit_published(&mut self, key: usize) {
        let fd = self.conns.get(key).map(|c| c.stream.as_raw_fd());
        emit(self.cfg.worker, &mut self.published, &mut self.topics, &mut self.bus, &mut self.stats.mqtt_authz_asked, || {
            fd.map(crate::sys::peer_ip).unwrap_or_default()
        });
    }
}

/// Hand the supervisor what MQTT reads left for it: client publishes
/// (before their PUBACKs go out), retained wants, client id claims,
/// shared subscription groups joined and left. A claim without an owner
/// (no `--auth`) is charged to `peer()`, the reading connection's address.
pub(super) fn emit(w: usize, published: &mut mqtt::Published, topics: &mut Topics, bus: &mut Bus, asked: &mut u64, peer: impl Fn() -> String) {
    // Interest first: a subscription and a publish to it in one read
    // reach the topic's shard in that order.
    bus.take_interest(topics);
    for c in published.claims.iter_mut().filter(|c| c.identity.is_empty()) {
        c.identity = peer();
    }
    for i in published.messages.iter_mut().filter_map(|m| m.identity.as_mut()).filter(|i| i.is_empty()) {
        *i = peer();
    }
    if !published.messages.is_empty() {
        for m in std::mem::take(&mut published.messages) {
            publish(bus, &m);
        }
        published.bytes = 0;
    }
    for want in std::mem::take(&mut published.wants) {
        bus.want_retained(want.conn, want.qos, want.sid, &want.filter);
    }
    if !published.claims.is_empty() {
        let claims = std::mem::take(&mut published.claims);
        control::emit(&ServerMsg::SessionClaims { worker: w, claims });
    }
    if !published.shared_changes.is_empty() {
        shares_changed(bus, w, std::mem::take(&mut published.shared_changes));
    }
    if let Some(a) = topics.gate.authz.as_mut() {
        let asks = a.take_asks();
        if !asks.is_empty() {
            *asked += asks.len() as u64;
            control::emit(&ServerMsg::AuthzAsks { worker: w, asks });
        }
    }
}

/// Members joined or left shared groups: every shard picks for its
/// topics; the supervisor announces the node's groups to the cluster.
pub(super) fn shares_changed(bus: &mut Bus, w: usize, changes: Vec<crate::server::commands::SharedChange>) {
    for c in &changes {
        bus.share(&Frame::Share { join: c.join, conn: c.conn, qos: c.qos, name: &c.name });
    }
    control::emit(&ServerMsg::SharedChanged { worker: w, changes });
}

/// One client message (a PUBLISH or a will) to its topic's shard.
pub(super) fn publish(bus: &mut Bus, m: &ClientPublish) {
    let origin = m.mqtt.as_ref().and_then(|f| f.origin).unwrap_or(0);
    let f = Frame::Publish(Publish {
        origin,
        qos: m.qos,
        retain: m.retain,
        publish_us: crate::proto::push::wall_us(),
        topic: &m.topic,
        props: m.mqtt.as_deref().cloned(),
        identity: m.identity.as_deref().unwrap_or(""),
        payload: &m.data,
    });
    bus.send_topic(&m.topic, &f);
}

/// A will as the topic space takes it: like a publish of its client,
/// charged (when retained) to `identity`.
pub(super) fn will_message(w: mqtt::extra::OwnedWill, identity: &str) -> ClientPublish {
    let data = w.payload.into_vec();
    let identity = w.retain.then(|| identity.to_string());
    ClientPublish { topic: w.topic.into(), data, qos: w.qos as u8, retain: w.retain, mqtt: w.mqtt, identity }
}

/// A resumed session's queued messages, each written behind its
/// CONNACK (or held behind its window, or dropped and counted).
struct Resumed<'a> {
    out: &'a mut Vec<u8>,
    m: &'a mut mqtt::MqttConn,
    topics: &'a Topics,
    subs: &'a crate::server::tables::topics::Subs,
    stats: &'a mut crate::server::snapshot::ServerSnapshot,
    key: usize,
    v: Version,
    bounds: flight::Bounds,
    now_us: u64,
}

impl Resumed<'_> {
    fn send(&mut self, msg: &SessionMessage) {
        // What it was queued under may have been granted by an older
        // token: each message passes the token the client shows now.
        if self.topics.gate.permits(self.key, &msg.topic).is_err() {
            self.stats.mqtt_resumed_refused += 1;
            return;
        }
        // mosquitto's ACL, as it is now (mosquitto drops such queued
        // messages when the client comes back).
        if !self.topics.gate.may_read(self.key, &msg.topic) {
            self.stats.mqtt_acl_read_denied += 1;
            return;
        }
        let data = &msg.data;
        let qos = QoS::from_bits(msg.qos).unwrap_or_default();
        // Its properties, the expiry what is left of it; one that
        // expired while the client was away is not sent ([MQTT-3.3.2-5]).
        let Ok(fwd) = Forwarded::at(msg.mqtt.as_deref(), msg.publish_us, self.now_us) else {
            self.stats.mqtt_expired_dropped += 1;
            return;
        };
        // As it matches the resumed subscriptions: their identifiers;
        // one queued while away has the retain flag only through a
        // Retain As Published one (one sent before keeps what it had).
        let how = self.m.delivery(self.topics, self.subs, &msg.topic, qos, msg.retain, false);
        let (retain, sids) = match (msg.id, how) {
            (0, Some(d)) => (d.retain, d.sids),
            (0, None) => (false, Vec::new()),
            (_, d) => (msg.retain, d.map(|d| d.sids).unwrap_or_default()),
        };
        let properties = match (self.v, fwd.as_deref()) {
            (Version::V5, Some(f)) => f.properties(f.message_expiry, sids),
            (Version::V5, None) => Properties { subscription_ids: sids, ..Properties::default() },
            _ => Properties::default(),
        };
        let (bytes, id_at) = mqtt::encode_push(self.v, &msg.topic, data, qos, retain, properties);
        if bytes.is_empty() || qos == QoS::AtMostOnce {
            return;
        }
        let expires_us = fwd.as_deref().map_or(0, |f| f.expires_us(self.now_us));
        let d = flight::Delivery { bytes: bytes.into(), id_at, qos, expires_us };
        let window = self.m.window(self.bounds.inflight);
        let x = self.m.extra_mut();
        let sent = match x.flight.resume(d.clone(), msg.id, msg.released) {
            Some(b) => Some(b),
            None => match x.flight.offer(d, window, self.bounds) {
                flight::Offer::Send(b) => Some(b),
                flight::Offer::Held => {
                    self.stats.mqtt_held += 1;
                    None
                }
                flight::Offer::Dropped(reason) => {
                    crate::stats::counters::bump(&mut self.stats.mqtt_inflight_dropped, reason);
                    None
                }
            },
        };
        if let Some(b) = sent {
            let b = mqtt::alias::outgoing(self.m, &b, &mut self.stats.mqtt_topic_aliases_out).unwrap_or(b);
            self.out.extend_from_slice(&b);
            self.stats.frames_out += 1;
            crate::stats::counters::bump(&mut self.stats.mqtt_publishes_out, qos.label());
            self.stats.mqtt_publish_bytes_out += data.len() as u64;
        }
    }
}

/// The end of a connection that closed before its claim was answered:
/// the id back, with the session the answer resumed (its subscriptions
/// and messages, none of them sent) under the claim's expiry.
fn unclaimed(a: SessionAnswer) -> SessionEnd {
    let state = a.present.then_some(SessionState { subs: a.subs, messages: a.messages, rel: a.rel });
    SessionEnd { conn: a.conn, key: a.key, expiry_s: a.expiry_s, state, owner: a.owner, identity: a.identity, ..SessionEnd::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection gone before its answer gives the id back; a session
    /// the answer resumed comes back with it, under the claim's expiry;
    /// one not resumed brings nothing.
    #[test]
    fn an_answer_for_a_closed_connection_gives_its_session_back() {
        let m = SessionMessage { topic: "t".into(), data: "AA==".into(), qos: 1, retain: false, id: 0, released: false, mqtt: None, publish_us: 0 };
        let a = SessionAnswer {
            conn: 7,
            code: 0,
            hook_refused: false,
            assigned: None,
            grant: None,
            present: true,
            subs: vec![KeptSub::new("t", 1)],
            messages: vec![m.clone()],
            key: [1, 2, 3],
            expiry_s: 60,
            rel: vec![9],
            owner: Some("alice".into()),
            identity: "alice".into(),
        };
        let e = unclaimed(a.clone());
        assert_eq!((e.conn, e.key, e.expiry_s, e.owner.as_deref(), e.identity.as_str()), (7, [1, 2, 3], 60, Some("alice"), "alice"));
        assert_eq!(e.state, Some(SessionState { subs: vec![KeptSub::new("t", 1)], messages: vec![m], rel: vec![9] }));
        assert_eq!(unclaimed(SessionAnswer { present: false, subs: vec![], messages: vec![], ..a }).state, None);
    }
}
