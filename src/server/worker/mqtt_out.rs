//! What a worker sends MQTT clients beyond replies: topic messages (each
//! form of a PUBLISH encoded once per push, shared by every subscriber of
//! that version, QoS and retain flag; a QoS 1 or 2 copy gets its packet id
//! through the connection's flight, `session/mqtt/flight.rs`), retained
//! messages for a new subscription (the supervisor's answer), and the will
//! of a connection that ended without DISCONNECT (into the topic space
//! like a client's publish). An MQTT-over-WebSocket subscriber gets each
//! in a binary message: the QoS 0 form wrapped once and shared too, a
//! QoS 1 or 2 copy wrapped as it goes out.

use super::Worker;
use crate::proto::mqtt::forward::Forwarded;
use crate::proto::mqtt::{Properties, QoS, Version};
use crate::proto::push;
use crate::server::close::Close;
use crate::server::commands::{conn_id, split_id, PushCommand};
use crate::server::session::mqtt::extra::Delivered;
use crate::server::session::mqtt::{self, flight};
use crate::server::session::mqtt_ws;
use std::rc::Rc;

/// Re-read the wall clock after this many writes (latency buckets).
const CLOCK_EVERY: usize = 64;

/// One form of a PUBLISH: its bytes and where its packet id goes, once made.
type Form = Option<(Rc<[u8]>, usize)>;

/// One message's PUBLISH in every form met so far: by version, QoS and
/// retain flag, each encoded the first time a subscriber needs it. A v5
/// form carries the message's forwarded properties (`fwd`, with the
/// expiry left, `expiry`); a v5 subscriber whose subscriptions have
/// identifiers gets a copy of its own ([`Forms::own`]).
struct Forms<'a> {
    topic: &'a str,
    data: &'a [u8],
    fwd: Option<&'a Forwarded>,
    /// The Message Expiry Interval left, seconds (v5 forms).
    expiry: Option<u32>,
    /// Wall-clock µs it expires (0: never), for deliveries held.
    expires_us: u64,
    /// [version][qos][retain]: (bytes, where the packet id goes).
    made: [[[Form; 2]; 3]; 2],
    /// [version][retain]: the QoS 0 form in a binary WebSocket message,
    /// shared by the MQTT-over-WebSocket subscribers.
    in_ws: [[Option<Rc<[u8]>>; 2]; 2],
}

impl<'a> Forms<'a> {
    fn new(topic: &'a str, data: &'a [u8]) -> Forms<'a> {
        Forms { topic, data, fwd: None, expiry: None, expires_us: 0, made: Default::default(), in_ws: Default::default() }
    }

    /// With the message's forwarded properties, published at
    /// `publish_us`: its forms carry what is left of its Message Expiry
    /// Interval at `now_us`. None: it expired, nobody gets it.
    fn expiring(mut self, fwd: Option<&'a Forwarded>, publish_us: u64, now_us: u64) -> Option<Forms<'a>> {
        self.fwd = fwd;
        self.expiry = fwd.map_or(Some(None), |f| f.expiry_left(now_us.saturating_sub(publish_us)))?;
        self.expires_us = fwd.map_or(0, |f| f.expires_us(publish_us));
        Some(self)
    }

    /// The PUBLISH properties of a v5 form (none in 3.1.1).
    fn properties(&self, version: Version, sids: Vec<u32>) -> Properties<'a> {
        match (version, self.fwd) {
            (Version::V5, Some(f)) => f.properties(self.expiry, sids),
            (Version::V5, None) => Properties { subscription_ids: sids, ..Properties::default() },
            _ => Properties::default(),
        }
    }

    /// The QoS 0 form as a binary WebSocket message (empty when the codec
    /// refused the packet).
    fn get_ws(&mut self, version: Version, retain: bool) -> Rc<[u8]> {
        let (packet, _) = self.get(version, QoS::AtMostOnce, retain);
        self.in_ws[(version == Version::V5) as usize][retain as usize]
            .get_or_insert_with(|| {
                let mut message = Vec::with_capacity(packet.len() + crate::proto::ws::frame::MAX_SERVER_HEADER);
                crate::proto::ws::frame::encode(&mut message, true, crate::proto::ws::frame::Opcode::Binary, &packet, None);
                if packet.is_empty() {
                    message.clear();
                }
                message.into()
            })
            .clone()
    }

    fn get(&mut self, version: Version, qos: QoS, retain: bool) -> (Rc<[u8]>, usize) {
        let (v, q, r) = ((version == Version::V5) as usize, qos as usize, retain as usize);
        // Its properties only the first time: this runs once per subscriber.
        if let Some(form) = &self.made[v][q][r] {
            return form.clone();
        }
        let (bytes, id_at) = mqtt::encode_push(version, self.topic, self.data, qos, retain, self.properties(version, Vec::new()));
        self.made[v][q][r].insert((bytes.into(), id_at)).clone()
    }

    /// A v5 copy with this subscriber's subscription identifiers.
    fn own(&self, qos: QoS, retain: bool, sids: Vec<u32>) -> (Rc<[u8]>, usize) {
        let (bytes, id_at) = mqtt::encode_push(Version::V5, self.topic, self.data, qos, retain, self.properties(Version::V5, sids));
        (bytes.into(), id_at)
    }
}

/// What became of one delivery to one connection.
enum Sent {
    /// Written or queued to the socket.
    Out,
    /// Held behind a full window, or not for this client.
    Not,
}

impl Worker {
    /// A topic message to MQTT subscribers, each at the QoS its matching
    /// subscriptions were granted (at most the publish's); not sent to a
    /// client whose Maximum Packet Size it exceeds (§3.1.2.11.4).
    pub(super) fn push_mqtt(&mut self, cmd: &PushCommand, data: &[u8], targets: &[usize]) {
        let (queued, slow) = self.deliver_mqtt(cmd, data, targets);
        self.pushed(cmd.publish_id, queued, slow);
    }

    /// [`push_mqtt`](Self::push_mqtt)'s deliveries, without the push's end:
    /// how many went out, and the slow consumers to close. A WebSocket
    /// port's push calls it for its MQTT subscribers.
    pub(super) fn deliver_mqtt(&mut self, cmd: &PushCommand, data: &[u8], targets: &[usize]) -> (u64, Vec<(usize, Close)>) {
        let qos = QoS::from_bits(cmd.qos).unwrap_or_default();
        let (mut queued, mut slow) = (0, Vec::new());
        let mut now_us = push::wall_us();
        let fwd = cmd.mqtt.as_deref();
        // The v5 Message Expiry Interval: what is left goes out; a message
        // past it reaches nobody (counted once per would-be receiver).
        let Some(mut forms) = Forms::new(&cmd.topic, data).expiring(fwd, cmd.publish_us, now_us) else {
            self.stats.mqtt_expired_dropped += (targets.len() + cmd.shared.len()) as u64;
            return (0, Vec::new());
        };
        let origin = fwd.and_then(|f| f.origin);
        // The members of shared subscription groups the supervisor picked
        // for this message, those of this worker: at the lower of the
        // publish's QoS and the granted one, without the retain flag.
        let shared: Vec<(usize, Option<Delivered>)> = cmd
            .shared
            .iter()
            .filter_map(|&(id, granted)| {
                let (w, key, gen) = split_id(id);
                let q = QoS::from_bits(granted).unwrap_or_default().min(qos);
                let d = Delivered { qos: q, retain: false, sids: Vec::new() };
                (w == self.cfg.worker && self.conns.get(key).is_some_and(|c| c.gen == gen)).then_some((key, Some(d)))
            })
            .collect();
        for (i, (key, how)) in targets.iter().map(|k| (*k, None)).chain(shared).enumerate() {
            let Some(c) = self.conns.get(key) else { continue };
            let Some(m) = self.mqtt.get(key) else { continue };
            let own = origin == Some(conn_id(self.cfg.worker, key, c.gen));
            let Some(d) = how.or_else(|| m.delivery(&self.topics, &c.subs, &cmd.topic, qos, cmd.retain, own)) else { continue };
            // A connection met twice (a subscription and a shared group's
            // pick) whose first copy found it slow gets no second: nothing
            // after a copy that did not go (it may have set a topic alias).
            if !slow.is_empty() && slow.iter().any(|(k, _)| *k == key) {
                continue;
            }
            match self.mqtt_send(key, &mut forms, d) {
                Ok(Sent::Out) => {
                    queued += 1;
                    if i % CLOCK_EVERY == 0 {
                        now_us = push::wall_us();
                    }
                    self.record_push_latency(now_us.saturating_sub(cmd.publish_us));
                }
                Ok(Sent::Not) => {}
                Err(reason) => slow.push((key, reason)),
            }
        }
        (queued, slow)
    }

    /// One connection's copy of `forms` at `qos`: the shared QoS 0 bytes,
    /// or a QoS 1/2 copy with its packet id when the window has room
    /// (else held or dropped, counted). Err: a slow consumer, to close.
    fn mqtt_send(&mut self, key: usize, forms: &mut Forms<'_>, d: Delivered) -> Result<Sent, Close> {
        // mosquitto's ACL: a message the client may not read is not sent
        // (its subscription was granted, as mosquitto grants it).
        if !self.topics.gate.may_read(key, forms.topic) {
            self.stats.mqtt_acl_read_denied += 1;
            return Ok(Sent::Not);
        }
        let bounds = self.cfg.mqtt.flight;
        let Some(conn) = self.conns.get_mut(key) else { return Ok(Sent::Not) };
        let ws = super::over_ws(&self.cfg.services, conn);
        let Some(m) = self.mqtt.get_mut(key) else { return Ok(Sent::Not) };
        let Some(version) = m.version else { return Ok(Sent::Not) };
        let qos = d.qos;
        let own = version == Version::V5 && !d.sids.is_empty();
        let (frame, id_at) = if own { forms.own(qos, d.retain, d.sids) } else { forms.get(version, qos, d.retain) };
        if frame.is_empty() || frame.len() > m.max_in() as usize {
            return Ok(Sent::Not);
        }
        let aliases = &mut self.stats.mqtt_topic_aliases_out;
        let sent = if qos == QoS::AtMostOnce {
            // Over WebSocket the shared form in a binary message, or this
            // subscriber's own copy (its identifiers, a topic alias) wrapped.
            let frame = match (ws, own, mqtt::alias::outgoing(m, &frame, aliases)) {
                (false, _, None) => frame,
                (false, _, Some(aliased)) => aliased.into(),
                (true, false, None) => forms.get_ws(version, d.retain),
                (true, _, aliased) => {
                    let mut message = aliased.unwrap_or_else(|| frame.to_vec());
                    mqtt_ws::wrap(&mut message, 0);
                    message.into()
                }
            };
            super::io::send_frame(self.tls.as_mut(), self.ring.as_mut(), key, conn, &frame, self.cfg.max_pending_bytes, Close::SlowConsumer)
        } else {
            let window = m.window(bounds.inflight);
            match m.extra_mut().flight.offer(flight::Delivery { bytes: frame, id_at, qos, expires_us: forms.expires_us }, window, bounds) {
                flight::Offer::Send(mut bytes) => {
                    if let Some(aliased) = mqtt::alias::outgoing(m, &bytes, aliases) {
                        bytes = aliased;
                    }
                    if ws {
                        mqtt_ws::wrap(&mut bytes, 0);
                    }
                    super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &bytes, self.cfg.max_pending_bytes, Close::SlowConsumer)
                }
                flight::Offer::Held => {
                    self.stats.mqtt_held += 1;
                    return Ok(Sent::Not);
                }
                flight::Offer::Dropped(reason) => {
                    m.tidy();
                    crate::stats::counters::bump(&mut self.stats.mqtt_inflight_dropped, reason);
                    return Ok(Sent::Not);
                }
            }
        };
        sent?;
        crate::stats::counters::bump(&mut self.stats.mqtt_publishes_out, qos.label());
        self.stats.mqtt_publish_bytes_out += forms.data.len() as u64;
        Ok(Sent::Out)
    }

    /// The supervisor's retained messages for one new subscription: each
    /// with the retain flag, at the lower of its QoS and the granted one,
    /// its properties and the subscription's identifier (v5).
    pub(super) fn retained(&mut self, conn: u64, granted: u8, sid: u32, messages: &[crate::proto::bus::RetainedMessage<'_>]) {
        let (worker, key, gen) = split_id(conn);
        if worker != self.cfg.worker || self.conns.get(key).is_none_or(|c| c.gen != gen) {
            return;
        }
        let granted = QoS::from_bits(granted).unwrap_or_default();
        let now_us = push::wall_us();
        for m in messages {
            let qos = QoS::from_bits(m.qos).unwrap_or_default().min(granted);
            // Its properties, with what was left of its expiry when the
            // shard answered.
            let Some(mut forms) = Forms::new(m.topic, m.payload).expiring(m.props.as_ref(), now_us, now_us) else { continue };
            let sids = if sid == 0 { Vec::new() } else { vec![sid] };
            match self.mqtt_send(key, &mut forms, Delivered { qos, retain: true, sids }) {
                Ok(Sent::Out) => {
                    self.stats.mqtt_retained_out += 1;
                    self.stats.frames_out += 1;
                }
                Ok(Sent::Not) => {}
                Err(reason) => {
                    self.stats.push_dropped += 1;
                    return self.close(key, reason);
                }
            }
        }
    }

    /// A connection ends: the shared subscription groups it was in are
    /// told it left.
    pub(super) fn mqtt_shared_leave(&mut self, key: usize, gen: u32, m: &mut mqtt::MqttConn) {
        let changes = mqtt::shared::leave_all(m, &mut self.published.shared, crate::server::commands::conn_id(self.cfg.worker, key, gen));
        if !changes.is_empty() {
            super::mqtt_session::shares_changed(&mut self.bus, self.cfg.worker, changes);
        }
    }

    /// A connection ends: its will, if it still has one (no DISCONNECT,
    /// or v5 reason 0x04), goes into the topic space now.
    pub(super) fn mqtt_will(&mut self, key: usize, conn: &super::conn::Conn, m: &mut mqtt::MqttConn) {
        let Some(will) = m.take_will() else { return };
        // Only a connection whose CONNECT was accepted has a will: one
        // whose claim was still unanswered (timed out, displaced) has none.
        if m.claim == mqtt::Claim::Waiting {
            return;
        }
        self.stats.mqtt_wills_sent += 1;
        let identity = match self.topics.gate.user_of(key) {
            Some(user) => user.to_string(),
            None if will.retain => crate::sys::peer_ip(std::os::fd::AsRawFd::as_raw_fd(&conn.stream)),
            None => String::new(),
        };
        super::mqtt_session::publish(&mut self.bus, &super::mqtt_session::will_message(will, &identity));
    }
}
