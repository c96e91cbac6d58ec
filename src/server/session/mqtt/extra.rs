//! What an MQTT connection holds beyond its fixed few bytes, boxed and
//! only while it has any of it: its subscriptions granted QoS 1 or 2 (or
//! v5 Retain As Published), its deliveries in flight ([`Flight`]) and its
//! will message. An idle QoS 0 subscriber without a will has none of it:
//! its state stays one null pointer.

use super::flight::Flight;
use super::MqttConn;
use crate::proto::mqtt::QoS;
use crate::server::worker::topics::Topics;

/// Options of one subscription that differ from QoS 0 without Retain As
/// Published (the only ones kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SubOpts {
    /// The subscription's id in the worker's topics (`topics::Subs`).
    pub id: u32,
    /// Granted QoS.
    pub qos: QoS,
    /// v5 Retain As Published: forwarded messages keep their retain flag.
    pub rap: bool,
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
}

/// The boxed part of an [`MqttConn`].
#[derive(Debug, Default)]
pub(crate) struct Extra {
    /// Subscriptions with a QoS above 0 or Retain As Published, at most
    /// one per subscription of the connection (so bounded like them).
    pub subs: Vec<SubOpts>,
    pub flight: Flight,
    pub will: Option<OwnedWill>,
}

impl MqttConn {
    /// The boxed part, made if it did not exist.
    pub(crate) fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// Free the boxed part once it holds nothing.
    pub(crate) fn tidy(&mut self) {
        if self.extra.as_deref().is_some_and(|x| x.subs.is_empty() && x.will.is_none() && x.flight.idle()) {
            self.extra = None;
        }
    }

    /// Record a subscription's options: kept only when they are not the
    /// plain QoS 0 ones.
    pub(crate) fn set_sub(&mut self, id: u32, qos: QoS, rap: bool) {
        if let Some(x) = self.extra.as_deref_mut() {
            x.subs.retain(|s| s.id != id);
        }
        if qos != QoS::AtMostOnce || rap {
            self.extra_mut().subs.push(SubOpts { id, qos, rap });
        }
        self.tidy();
    }

    /// With what QoS and retain flag a message of `topic` published with
    /// `qos` and `retain` goes to this connection: the highest QoS its
    /// matching subscriptions were granted, no more than the publish's
    /// (§3.8.4); the retain flag only through a Retain As Published one.
    pub(crate) fn delivery(&self, topics: &Topics, topic: &str, qos: QoS, retain: bool) -> (QoS, bool) {
        let Some(x) = self.extra.as_deref().filter(|x| !x.subs.is_empty()) else { return (QoS::AtMostOnce, false) };
        let (mut granted, mut rap) = (QoS::AtMostOnce, false);
        for s in x.subs.iter().filter(|s| topics.sub_matches(s.id, topic)) {
            granted = granted.max(s.qos);
            rap |= s.rap;
        }
        (granted.min(qos), retain && rap)
    }

    /// The will to publish now that the connection ends (taken: once).
    pub(crate) fn take_will(&mut self) -> Option<OwnedWill> {
        self.extra.as_deref_mut().and_then(|x| x.will.take())
    }
}
