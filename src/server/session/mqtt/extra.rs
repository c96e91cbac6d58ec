//! What an MQTT connection holds beyond its fixed few bytes, boxed and
//! only while it has any of it: its subscriptions granted QoS 1 or 2 (or
//! v5 Retain As Published), its deliveries in flight ([`Flight`]), its
//! will message, its shared subscriptions and its topic aliases, and over
//! WebSocket a packet cut by a message's end. An idle QoS 0 subscriber
//! without a will has none of it: its state stays one null pointer.

use super::flight::Flight;
use super::MqttConn;
use crate::proto::mqtt::QoS;
use crate::server::tables::topics::{Subs, Topics};

/// Options of one subscription that differ from QoS 0 without Retain As
/// Published, No Local or a subscription identifier (the only ones kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SubOpts {
    /// The subscription's id in the worker's topics (`topics::Subs`).
    pub id: u32,
    /// Granted QoS.
    pub qos: QoS,
    /// v5 Retain As Published: forwarded messages keep their retain flag.
    pub rap: bool,
    /// v5 No Local: the connection's own publishes do not come back.
    pub no_local: bool,
    /// v5 Subscription Identifier (0: none), sent with what it matches.
    pub sid: u32,
}

/// How a message goes to one connection ([`MqttConn::delivery`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivered {
    pub qos: QoS,
    pub retain: bool,
    /// The identifiers of the subscriptions it matched (v5).
    pub sids: Vec<u32>,
}

/// A will message, owned (from the CONNECT), published through the same
/// path as a client's publish when the connection ends without a
/// DISCONNECT (or with v5 reason 0x04).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedWill {
    pub topic: Box<str>,
    pub payload: Box<[u8]>,
    pub qos: QoS,
    pub retain: bool,
    /// v5 Will Delay Interval, seconds (0: at once; 3.1.1 always 0).
    pub delay_s: u32,
    /// Its v5 will properties that go with the message (content type,
    /// message expiry, user properties...), `Forwarded::stored`.
    pub mqtt: Option<Box<crate::proto::mqtt::forward::Forwarded>>,
}

/// The boxed part of an [`MqttConn`].
#[derive(Debug, Default)]
pub(crate) struct Extra {
    /// Subscriptions with a QoS above 0 or Retain As Published, at most
    /// one per subscription of the connection (so bounded like them).
    pub subs: Vec<SubOpts>,
    pub flight: Flight,
    pub will: Option<OwnedWill>,
    /// Shared subscriptions (`shared.rs`), at most `shared::MAX_PER_CONN`.
    pub shares: Vec<super::shared::Share>,
    /// Topic aliases the client set (`alias.rs`): alias N at N - 1, an
    /// empty topic where none is set; at most `alias::TOPIC_ALIAS_MAXIMUM`.
    pub aliases: Vec<Box<str>>,
    /// Topic aliases the server set (`alias.rs`), when the client's
    /// CONNECT gave a Topic Alias Maximum (v5).
    pub sent_aliases: Option<Box<super::alias::Outgoing>>,
    /// MQTT over WebSocket: fragments and a cut packet between reads
    /// (`session/mqtt_ws.rs`).
    pub carry: crate::server::session::mqtt_ws::Carry,
    /// The client's Maximum Packet Size (v5): larger pushes are not sent
    /// to it ([MQTT-3.1.2-24]). 0 when it gave none (0 is not a size a
    /// client may give).
    pub max_in: u32,
    /// Seconds its session outlives it (0: not at all; `u32::MAX` never
    /// expires: 3.1.1 Clean Session 0).
    pub expiry_s: u32,
    /// A v5 client's Receive Maximum, when below `--mqtt-inflight` (0:
    /// none given, or not below).
    pub receive_max: u16,
}

impl MqttConn {
    /// The client's Maximum Packet Size (`u32::MAX` when it gave none).
    pub(crate) fn max_in(&self) -> u32 {
        match self.extra.as_deref().map_or(0, |x| x.max_in) {
            0 => u32::MAX,
            m => m,
        }
    }

    /// QoS 1 and 2 deliveries in flight at most: `inflight`
    /// (`--mqtt-inflight`), or a v5 client's Receive Maximum when lower.
    pub(crate) fn window(&self, inflight: u16) -> u16 {
        match self.extra.as_deref().map_or(0, |x| x.receive_max) {
            0 => inflight,
            r => r.min(inflight),
        }
        .max(1)
    }

    /// A CONNECT's Receive Maximum (v5): kept (boxed) only when it is
    /// below `inflight`, the window it would otherwise get.
    pub(crate) fn set_receive_max(&mut self, receive_max: Option<u16>, inflight: u16) {
        if let Some(r) = receive_max.filter(|r| *r < inflight) {
            self.extra_mut().receive_max = r.max(1);
        }
    }

    /// Seconds its session outlives it (0: not at all).
    pub(crate) fn expiry_s(&self) -> u32 {
        self.extra.as_deref().map_or(0, |x| x.expiry_s)
    }

    /// Set the Maximum Packet Size and session expiry of a CONNECT
    /// (boxed only when they are not the defaults).
    pub(crate) fn set_limits(&mut self, max_in: Option<u32>, expiry_s: u32) {
        let max_in = max_in.filter(|m| *m != u32::MAX).unwrap_or(0);
        if max_in != 0 || expiry_s != 0 {
            let x = self.extra_mut();
            (x.max_in, x.expiry_s) = (max_in, expiry_s);
        }
    }

    /// A v5 DISCONNECT's Session Expiry Interval (the CONNECT's was not 0).
    pub(crate) fn set_expiry(&mut self, expiry_s: u32) {
        if expiry_s != 0 || self.extra.is_some() {
            self.extra_mut().expiry_s = expiry_s;
        }
    }

    /// The boxed part, made if it did not exist.
    pub(crate) fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// Free the boxed part once it holds nothing.
    pub(crate) fn tidy(&mut self) {
        if self.extra.as_deref().is_some_and(|x| {
            x.subs.is_empty()
                && x.will.is_none()
                && x.flight.idle()
                && x.shares.is_empty()
                && x.aliases.is_empty()
                && x.sent_aliases.is_none()
                && x.carry.held() == 0
                && x.max_in == 0
                && x.expiry_s == 0
                && x.receive_max == 0
        }) {
            self.extra = None;
        }
    }

    /// Record a subscription's options: kept only when they are not the
    /// plain QoS 0 ones.
    pub(crate) fn set_sub(&mut self, o: SubOpts) {
        if let Some(x) = self.extra.as_deref_mut() {
            x.subs.retain(|s| s.id != o.id);
        }
        if o != (SubOpts { id: o.id, ..SubOpts::default() }) {
            self.extra_mut().subs.push(o);
        }
        self.tidy();
    }

    /// How a message of `topic` published with `qos` and `retain` goes to
    /// this connection (`all` its subscriptions, `own` it published it):
    /// at the highest QoS its matching subscriptions were granted, no more
    /// than the publish's (§3.8.4); the retain flag only through a Retain
    /// As Published one; with their subscription identifiers. None: it
    /// matched only No Local subscriptions and is its own (§3.8.3.1).
    pub(crate) fn delivery(&self, topics: &Topics, all: &Subs, topic: &str, qos: QoS, retain: bool, own: bool) -> Option<Delivered> {
        let plain = Delivered { qos: QoS::AtMostOnce, retain: false, sids: Vec::new() };
        let Some(x) = self.extra.as_deref().filter(|x| !x.subs.is_empty()) else { return Some(plain) };
        let (mut granted, mut rap, mut sids, mut any) = (QoS::AtMostOnce, false, Vec::new(), false);
        for s in x.subs.iter().filter(|s| !(own && s.no_local) && topics.sub_matches(s.id, topic)) {
            any = true;
            granted = granted.max(s.qos);
            rap |= s.rap;
            if s.sid != 0 {
                sids.push(s.sid);
            }
        }
        if !any && own {
            // Only plain subscriptions (not in `x.subs`) may still match.
            let options = |id: &u32| x.subs.iter().any(|s| s.id == *id);
            if !all.iter().any(|id| !options(&id) && topics.sub_matches(id, topic)) {
                return None;
            }
        }
        Some(Delivered { qos: granted.min(qos), retain: retain && rap, sids })
    }

    /// The will to publish now that the connection ends (taken: once).
    pub(crate) fn take_will(&mut self) -> Option<OwnedWill> {
        self.extra.as_deref_mut().and_then(|x| x.will.take())
    }
}
