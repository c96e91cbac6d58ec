//! QoS 1 and 2 state of one MQTT connection, both directions, with no
//! I/O: deliveries to the client with their packet ids (an inflight
//! window of at most the client's Receive Maximum, the rest held in a
//! queue bounded in count and bytes), the acknowledgements that move them
//! on (PUBACK; PUBREC → PUBREL → PUBCOMP), and the client's own QoS 2
//! publishes awaiting their PUBREL (forwarded once: a resent PUBLISH with
//! an id still awaiting its PUBREL is acknowledged, not forwarded again).
//!
//! Over the held queue's bounds a delivery is dropped and counted, as a
//! QoS 0 message would be (`mqtt_inflight_dropped`): the server does not
//! close a subscriber that is slow to acknowledge, it stops queueing for
//! it. When the connection ends and its session outlives it, what is in
//! flight and held goes to the supervisor's kept session
//! ([`Flight::pending`]), and comes back to the next connection of the
//! client id: those sent are resent with DUP and their packet ids
//! ([`Flight::resume`]), the rest offered as new deliveries.

use crate::proto::mqtt::QoS;
use std::collections::VecDeque;
use std::rc::Rc;

/// Default and largest inflight window to one client (`--mqtt-inflight`):
/// its v5 Receive Maximum may only lower it.
pub(crate) const DEFAULT_INFLIGHT: u16 = 32;
/// Default `--mqtt-queue`: deliveries held per connection behind a full window.
pub(crate) const DEFAULT_QUEUED: usize = 1000;
/// Default `--mqtt-queue-bytes`: bytes of those (shared buffers counted
/// whole, as if each were the connection's own).
pub(crate) const DEFAULT_QUEUED_BYTES: usize = 1 << 20;
/// Drop reason: the held queue has `--mqtt-queue` deliveries.
pub(crate) const QUEUE_FULL: &str = "queue_full";
/// Drop reason: the held queue has `--mqtt-queue-bytes`.
pub(crate) const QUEUE_BYTES: &str = "queue_bytes";

/// Where an outbound delivery is in its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// QoS 1, sent: PUBACK due.
    Ack,
    /// QoS 2, sent: PUBREC due.
    Rec,
    /// QoS 2, PUBREL sent: PUBCOMP due.
    Comp,
}

/// A PUBLISH at QoS 1 or 2 encoded once for every subscriber of a
/// version, QoS and retain flag; each gets a copy with its packet id at
/// `id_at`.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub bytes: Rc<[u8]>,
    pub id_at: usize,
    pub qos: QoS,
    /// Wall-clock µs its v5 Message Expiry Interval ends (0: never): past
    /// it a held delivery is dropped, before it the interval it carries is
    /// what is left ([`Delivery::packet`]).
    pub expires_us: u64,
}

impl Delivery {
    /// The message this PUBLISH carries: topic, payload, retain flag and
    /// (v5) the properties it forwards, to keep in a session.
    pub(crate) fn message(&self, v5: bool) -> Option<(&str, &[u8], bool, Option<crate::proto::mqtt::forward::Forwarded>)> {
        crate::proto::mqtt::forward::own_publish(&self.bytes, v5)
    }

    /// Seconds left of its Message Expiry Interval at `now_us` (at least
    /// 1, what a PUBLISH then carries); None: it has none.
    pub(crate) fn expiry_left(&self, now_us: u64) -> Option<u32> {
        (self.expires_us != 0).then(|| self.expires_us.saturating_sub(now_us).div_ceil(1_000_000).clamp(1, u64::from(u32::MAX)) as u32)
    }

    /// Whether its Message Expiry Interval passed at `now_us`.
    pub(crate) fn expired(&self, now_us: u64) -> bool {
        self.expires_us != 0 && now_us >= self.expires_us
    }

    /// The packet for one connection, with `id`; with `now_us`, carrying
    /// what is left of its Message Expiry Interval then (at least 1 s),
    /// else as encoded.
    fn packet(&self, id: u16, now_us: Option<u64>) -> Vec<u8> {
        let mut v = self.bytes.to_vec();
        if let Some(at) = v.get_mut(self.id_at..self.id_at + 2) {
            at.copy_from_slice(&id.to_be_bytes());
        }
        if let Some(left) = now_us.and_then(|now_us| self.expiry_left(now_us)) {
            if let Some(at) = crate::proto::mqtt::forward::expiry_at(&v) {
                v[at..at + 4].copy_from_slice(&left.to_be_bytes());
            }
        }
        v
    }
}

/// The bounds of one connection's deliveries (`--mqtt-inflight`,
/// `--mqtt-queue`, `--mqtt-queue-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Bounds {
    /// Most in flight (a v5 client's Receive Maximum may lower it).
    pub inflight: u16,
    /// Most held behind a full window.
    pub queued: usize,
    /// Most bytes held behind a full window.
    pub queued_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds { inflight: DEFAULT_INFLIGHT, queued: DEFAULT_QUEUED, queued_bytes: DEFAULT_QUEUED_BYTES }
    }
}

/// What became of an offered delivery.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Send these bytes now (in flight).
    Send(Vec<u8>),
    /// The window is full: it waits in the queue.
    Held,
    /// The queue is full too: dropped, for this reason.
    Dropped(&'static str),
}

/// What an acknowledgement from the client asks of the server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Acked {
    /// It closed a delivery (PUBACK, PUBCOMP, a v5 PUBREC refusing it).
    Done,
    /// PUBREC: send PUBREL for this id.
    Release,
    /// No delivery is at that stage with that id.
    Unknown,
}

/// What a client's QoS 2 PUBLISH is to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A new id: forward it, then PUBREC (the id now awaits its PUBREL).
    New,
    /// Its id awaits its PUBREL already: PUBREC again, not forwarded again.
    Resent,
    /// `max` ids await their PUBREL already (v5: Receive Maximum exceeded).
    TooMany,
}

/// A connection's QoS 1 and 2 deliveries and the client's QoS 2
/// publishes awaiting PUBREL.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    /// The last packet id given (ids cycle 1..=65535, skipping those in flight).
    last_id: u16,
    /// Deliveries in flight, at most the window (a resumed session's may
    /// be more), each kept until acknowledged: a session that outlives
    /// the connection resends it.
    out: Vec<(u16, Stage, Delivery)>,
    held: VecDeque<Delivery>,
    held_bytes: usize,
    /// Ids of the client's QoS 2 publishes forwarded, PUBREL due.
    incoming: Vec<u16>,
}

impl Flight {
    /// Whether nothing is in flight either way (the state may be freed).
    pub(crate) fn idle(&self) -> bool {
        self.out.is_empty() && self.held.is_empty() && self.incoming.is_empty()
    }

    /// Deliveries in flight and held: (in flight, held, held bytes).
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        (self.out.len(), self.held.len(), self.held_bytes)
    }

    /// Deliver `d`: at once when fewer than `window` are in flight, else
    /// queued within `bounds`, else dropped.
    pub(crate) fn offer(&mut self, d: Delivery, window: u16, bounds: Bounds) -> Offer {
        if self.out.len() < usize::from(window.max(1)) && self.held.is_empty() {
            return Offer::Send(self.start(&d, None));
        }
        if self.held.len() >= bounds.queued {
            return Offer::Dropped(QUEUE_FULL);
        }
        if self.held_bytes + d.bytes.len() > bounds.queued_bytes {
            return Offer::Dropped(QUEUE_BYTES);
        }
        self.held_bytes += d.bytes.len();
        self.held.push_back(d);
        Offer::Held
    }

    /// Give `d` a free packet id and put it in flight; its bytes (the
    /// expiry left at `now_us`; None: as encoded, just now).
    fn start(&mut self, d: &Delivery, now_us: Option<u64>) -> Vec<u8> {
        // At most 65535 ids and a window far smaller: one is free.
        loop {
            self.last_id = self.last_id.checked_add(1).unwrap_or(1);
            if !self.out.iter().any(|(id, _, _)| *id == self.last_id) {
                break;
            }
        }
        let stage = if d.qos == QoS::ExactlyOnce { Stage::Rec } else { Stage::Ack };
        self.out.push((self.last_id, stage, d.clone()));
        d.packet(self.last_id, now_us)
    }

    /// Move held deliveries into the window's free places; each one's
    /// packet, with its QoS, appended in order. Those whose Message
    /// Expiry Interval passed by `now_us` are dropped; how many returned.
    pub(crate) fn release(&mut self, window: u16, now_us: u64, sent: &mut Vec<(Vec<u8>, QoS)>) -> u64 {
        let mut expired = 0;
        while self.out.len() < usize::from(window.max(1)) {
            let Some(d) = self.held.pop_front() else { break };
            self.held_bytes -= d.bytes.len();
            if d.expired(now_us) {
                expired += 1;
                continue;
            }
            sent.push((self.start(&d, Some(now_us)), d.qos));
        }
        if self.held.is_empty() && self.held.capacity() > 0 {
            self.held = VecDeque::new();
        }
        expired
    }

    /// The client acknowledged `id` (`stage`: which ack it sent: PUBACK
    /// closes a QoS 1 delivery, PUBREC moves a QoS 2 one on unless it
    /// refuses it (`refused`, v5 reason ≥ 0x80), PUBCOMP closes it).
    pub(crate) fn acked(&mut self, stage: Stage, id: u16, refused: bool) -> Acked {
        let Some(i) = self.out.iter().position(|(i, s, _)| *i == id && *s == stage) else {
            // A PUBREC repeated after the PUBREL went: send PUBREL again.
            if stage == Stage::Rec && self.out.iter().any(|(i, s, _)| *i == id && *s == Stage::Comp) {
                return Acked::Release;
            }
            return Acked::Unknown;
        };
        match stage {
            Stage::Rec if !refused => {
                self.out[i].1 = Stage::Comp;
                Acked::Release
            }
            _ => {
                // In order: a session kept now resends them in this order.
                self.out.remove(i);
                if self.out.is_empty() && self.out.capacity() > 0 && self.held.is_empty() {
                    self.out = Vec::new();
                }
                Acked::Done
            }
        }
    }

    /// What a session keeps of this flight when its connection ends, in
    /// order: those in flight (packet id, whether PUBREL went), then
    /// those held (id 0).
    pub(crate) fn pending(&self) -> impl Iterator<Item = (u16, bool, &Delivery)> {
        self.out.iter().map(|(id, s, d)| (*id, *s == Stage::Comp, d)).chain(self.held.iter().map(|d| (0, false, d)))
    }

    /// A resumed session's delivery that was in flight with `id`: in
    /// flight again, its packet (the PUBLISH with DUP, or the PUBREL when
    /// that went already, §4.4). None when the id is in flight already
    /// (a peer's resumed state is not trusted): offer it as new instead.
    pub(crate) fn resume(&mut self, d: Delivery, id: u16, released: bool) -> Option<Vec<u8>> {
        if id == 0 || self.out.iter().any(|(i, _, _)| *i == id) {
            return None;
        }
        let (stage, bytes) = if released {
            let [hi, lo] = id.to_be_bytes();
            (Stage::Comp, vec![0x62, 2, hi, lo])
        } else {
            let mut b = d.packet(id, None);
            b[0] |= 0x08;
            (if d.qos == QoS::ExactlyOnce { Stage::Rec } else { Stage::Ack }, b)
        };
        self.out.push((id, stage, d));
        Some(bytes)
    }

    /// A QoS 2 PUBLISH from the client with `id`.
    pub(crate) fn received(&mut self, id: u16, max: usize) -> Incoming {
        if self.incoming.contains(&id) {
            return Incoming::Resent;
        }
        if self.incoming.len() >= max {
            return Incoming::TooMany;
        }
        self.incoming.push(id);
        Incoming::New
    }

    /// The client's QoS 2 ids forwarded whose PUBREL is due (a session
    /// that outlives the connection keeps them).
    pub(crate) fn awaiting(&self) -> &[u16] {
        &self.incoming
    }

    /// A resumed session's QoS 2 ids awaiting PUBREL (at most `max`,
    /// each once): a resend of one is acknowledged, not forwarded again.
    pub(crate) fn awaiting_release(&mut self, ids: &[u16], max: usize) {
        for &id in ids {
            if id != 0 && self.incoming.len() < max && !self.incoming.contains(&id) {
                self.incoming.push(id);
            }
        }
    }

    /// PUBREL for `id`: whether it awaited one (then forgotten).
    pub(crate) fn released(&mut self, id: u16) -> bool {
        let Some(i) = self.incoming.iter().position(|i| *i == id) else { return false };
        self.incoming.swap_remove(i);
        if self.incoming.is_empty() {
            self.incoming = Vec::new();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(qos: QoS) -> Delivery {
        // A PUBLISH of "t" with room for an id at 5: 3x 03 00 01 74 <id> "p".
        Delivery { bytes: vec![0x30 | (qos as u8) << 1, 6, 0, 1, b't', 0, 0, b'p'].into(), id_at: 5, qos, expires_us: 0 }
    }

    const BOUNDS: Bounds = Bounds { inflight: 2, queued: 2, queued_bytes: 1 << 20 };

    /// The window bounds what is in flight, the queue what waits, and an
    /// acknowledgement lets the oldest held one go with the next id.
    #[test]
    fn the_window_and_the_queue_are_bounded_and_acks_release_in_order() {
        let mut f = Flight::default();
        let Offer::Send(first) = f.offer(delivery(QoS::AtLeastOnce), 2, BOUNDS) else { panic!() };
        assert_eq!(&first[5..7], &[0, 1]);
        assert!(matches!(f.offer(delivery(QoS::ExactlyOnce), 2, BOUNDS), Offer::Send(b) if b[5..7] == [0, 2]));
        assert_eq!(f.offer(delivery(QoS::AtLeastOnce), 2, BOUNDS), Offer::Held);
        assert_eq!(f.offer(delivery(QoS::AtLeastOnce), 2, BOUNDS), Offer::Held);
        assert_eq!(f.offer(delivery(QoS::AtLeastOnce), 2, BOUNDS), Offer::Dropped(QUEUE_FULL));
        let tight = Bounds { inflight: 2, queued: 10, queued_bytes: 16 };
        assert_eq!(f.offer(delivery(QoS::AtLeastOnce), 2, tight), Offer::Dropped(QUEUE_BYTES));
        assert_eq!(f.counts(), (2, 2, 16));
        // A PUBACK for the QoS 2 one, or for an id never sent: unknown.
        assert_eq!(f.acked(Stage::Ack, 2, false), Acked::Unknown);
        assert_eq!(f.acked(Stage::Ack, 9, false), Acked::Unknown);
        assert_eq!(f.acked(Stage::Ack, 1, false), Acked::Done);
        let mut sent = Vec::new();
        assert_eq!(f.release(2, 0, &mut sent), 0);
        assert_eq!(sent.len(), 1);
        assert_eq!(&sent[0].0[5..7], &[0, 3]);
        // QoS 2: PUBREC -> PUBREL (again if PUBREC is repeated) -> PUBCOMP.
        assert_eq!(f.acked(Stage::Rec, 2, false), Acked::Release);
        assert_eq!(f.acked(Stage::Rec, 2, false), Acked::Release);
        assert_eq!(f.acked(Stage::Comp, 2, false), Acked::Done);
        assert_eq!(f.acked(Stage::Comp, 2, false), Acked::Unknown);
        assert_eq!(f.release(2, 0, &mut sent), 0);
        assert_eq!(f.acked(Stage::Ack, 3, false), Acked::Done);
        assert_eq!(f.acked(Stage::Ack, 4, false), Acked::Done);
        assert!(f.idle());
    }

    /// What a session keeps: those in flight in order with their ids and
    /// stage, then those held; resumed with DUP and the same ids (PUBREL
    /// for a released QoS 2 one), an id in flight already refused.
    #[test]
    fn pending_deliveries_are_kept_in_order_and_resumed_with_dup() {
        let mut f = Flight::default();
        for q in [QoS::AtLeastOnce, QoS::ExactlyOnce, QoS::AtLeastOnce] {
            f.offer(delivery(q), 2, BOUNDS);
        }
        assert_eq!(f.acked(Stage::Rec, 2, false), Acked::Release);
        let kept: Vec<(u16, bool, QoS)> = f.pending().map(|(id, rel, d)| (id, rel, d.qos)).collect();
        assert_eq!(kept, [(1, false, QoS::AtLeastOnce), (2, true, QoS::ExactlyOnce), (0, false, QoS::AtLeastOnce)]);
        assert_eq!(delivery(QoS::AtLeastOnce).message(false), Some(("t", &b"p"[..], false, None)));
        let mut g = Flight::default();
        let again = g.resume(delivery(QoS::AtLeastOnce), 1, false).unwrap();
        assert_eq!(again, [0x3A, 6, 0, 1, b't', 0, 1, b'p'], "DUP set, id 1");
        assert_eq!(g.resume(delivery(QoS::ExactlyOnce), 2, true).unwrap(), [0x62, 2, 0, 2], "PUBREL again");
        assert_eq!(g.resume(delivery(QoS::AtLeastOnce), 1, false), None, "id 1 is in flight");
        assert_eq!(g.acked(Stage::Comp, 2, false), Acked::Done);
        assert_eq!(g.acked(Stage::Ack, 1, false), Acked::Done);
        assert!(g.idle());
    }

    /// A v5 PUBREC with a refusal closes the delivery: no PUBREL.
    #[test]
    fn a_refusing_pubrec_ends_the_delivery() {
        let mut f = Flight::default();
        assert!(matches!(f.offer(delivery(QoS::ExactlyOnce), 1, BOUNDS), Offer::Send(_)));
        assert_eq!(f.acked(Stage::Rec, 1, true), Acked::Done);
        assert!(f.idle());
    }

    /// Ids in flight are never given twice, also across the wrap.
    #[test]
    fn ids_skip_those_in_flight_and_wrap() {
        let mut f = Flight { last_id: u16::MAX - 1, ..Default::default() };
        let mut ids = Vec::new();
        for _ in 0..3 {
            let Offer::Send(b) = f.offer(delivery(QoS::AtLeastOnce), 8, BOUNDS) else { panic!() };
            ids.push(u16::from_be_bytes([b[5], b[6]]));
        }
        assert_eq!(ids, [u16::MAX, 1, 2]);
        f.last_id = 0;
        let Offer::Send(b) = f.offer(delivery(QoS::AtLeastOnce), 8, BOUNDS) else { panic!() };
        assert_eq!(u16::from_be_bytes([b[5], b[6]]), 3, "1 and 2 are in flight");
    }

    /// The client's QoS 2 publishes: forwarded once per id until PUBREL,
    /// bounded, and a PUBREL for an unknown id says so.
    #[test]
    fn incoming_qos2_ids_are_forwarded_once_until_released() {
        let mut f = Flight::default();
        assert_eq!(f.received(5, 2), Incoming::New);
        assert_eq!(f.received(5, 2), Incoming::Resent, "a resend is not forwarded again");
        assert_eq!(f.received(6, 2), Incoming::New);
        assert_eq!(f.received(7, 2), Incoming::TooMany);
        assert!(f.released(5));
        assert!(!f.released(5));
        assert_eq!(f.received(5, 2), Incoming::New, "released: the id is free again");
        assert!(f.released(5) && f.released(6) && f.idle());
    }

    /// A held delivery past its Message Expiry Interval is dropped when
    /// the window frees (counted by the caller); one still alive goes out
    /// with what is left of it patched in.
    #[test]
    fn held_deliveries_expire_or_carry_what_is_left() {
        use crate::proto::mqtt::{encode, Packet, Properties, Publish};
        let properties = Properties { message_expiry: Some(60), ..Properties::default() };
        let p = Publish { dup: false, qos: QoS::AtLeastOnce, retain: false, topic: "t", packet_id: 1, properties, payload: b"x" };
        let mut bytes = Vec::new();
        encode::packet(&Packet::Publish(p), crate::proto::mqtt::Version::V5, &mut bytes).unwrap();
        let aged = |expires_us| Delivery { bytes: bytes.clone().into(), id_at: 5, qos: QoS::AtLeastOnce, expires_us };
        let mut f = Flight::default();
        let b = Bounds::default();
        assert!(matches!(f.offer(delivery(QoS::AtLeastOnce), 1, b), Offer::Send(_)));
        assert_eq!(f.offer(aged(1_000_000), 1, b), Offer::Held);
        assert_eq!(f.offer(aged(60_000_000), 1, b), Offer::Held);
        assert_eq!(f.acked(Stage::Ack, 1, false), Acked::Done);
        let mut sent = Vec::new();
        // At 40.5 s the first has expired; the second has 19.5 s left: 20.
        assert_eq!(f.release(1, 40_500_000, &mut sent), 1);
        assert_eq!(sent.len(), 1);
        let at = crate::proto::mqtt::forward::expiry_at(&sent[0].0).unwrap();
        assert_eq!(sent[0].0[at..at + 4], 20u32.to_be_bytes());
    }
}
