//! What an MQTT client makes of each message a broker delivers: a push,
//! counted per topic as every protocol's are; when its payload carries a
//! megaconn [`Stamp`] (any `megaconn client --protocol mqtt` publisher's,
//! or a `bench --protocol mqtt --scenario push` broadcast's), also its
//! delivery latency from the intended send time (the same histogram as
//! every protocol's push latency), its arrival for time-to-all, and
//! where it falls in its publisher's sequence on its topic: a gap counts
//! the missing as lost, a repeat as duplicated, per QoS.
//!
//! Also the other half of QoS 2 deliveries: the packet ids a connection
//! answered PUBREC and awaits the PUBREL of, so that the broker's resend
//! of one (DUP) is answered again and not delivered twice.
//!
//! Everything here is bounded per connection, since a hostile broker can
//! send anything: at most [`MAX_STREAMS`] publisher streams are checked
//! for loss (further ones are timed and counted `mqtt_untracked`), at
//! most [`MAX_AWAITING_RELEASE`] QoS 2 ids await their PUBREL (one more
//! closes the connection, `mqtt_qos2_awaiting_overflow`).

use super::pushes::{self, Step};
use super::replies::Replies;
use super::speak::Stop;
use crate::proto::mqtt::QoS;
use crate::proto::stamp::Stamp;
use crate::stats::histogram;
use std::collections::{BTreeMap, HashMap};

/// Publisher streams (publisher × topic) checked for loss per connection:
/// a device hears a handful; a fan-in subscriber of many publishers gets
/// the first 64 checked and the rest only timed.
pub(crate) const MAX_STREAMS: usize = 64;
/// QoS 2 packet ids awaiting their PUBREL per connection (the Receive
/// Maximum a 5.0 CONNECT announces; a 3.1.1 broker has no such bound and
/// mosquitto keeps 20 in flight by default).
pub(crate) const MAX_AWAITING_RELEASE: usize = 1024;

/// The label a QoS is counted under.
pub(crate) fn qos_label(q: QoS) -> &'static str {
    match q {
        QoS::AtMostOnce => "0",
        QoS::AtLeastOnce => "1",
        QoS::ExactlyOnce => "2",
    }
}

/// One more under `label` in a by-kind counter.
pub(crate) fn bump(map: &mut BTreeMap<String, u64>, label: &str, n: u64) {
    match map.get_mut(label) {
        Some(v) => *v += n,
        None => {
            map.insert(label.to_string(), n);
        }
    }
}

/// FNV-1a over the publisher and the topic: one stream's key.
fn stream_key(publisher: u64, topic: &str) -> u64 {
    publisher.to_be_bytes().iter().chain(topic.as_bytes()).fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// A message delivered on `topic` with `qos` (once: a QoS 2 resend never
/// gets here), received at `now_wall_us` (CLOCK_REALTIME).
pub(crate) fn delivered(replies: &mut Replies<'_>, topic: &str, qos: QoS, payload: &[u8], now_wall_us: u64) {
    let stats = &mut *replies.stats;
    stats.push_received += 1;
    if let Some(n) = stats.push_topics.get_mut(topic) {
        *n += 1;
    } else if stats.push_topics.len() < pushes::MAX_TOPICS_COUNTED {
        stats.push_topics.insert(topic.to_string(), 1);
    }
    let Some(s) = Stamp::decode(payload) else {
        stats.mqtt_unstamped += 1;
        return;
    };
    let label = qos_label(qos);
    bump(&mut stats.mqtt_received, label, 1);
    histogram::record(replies.push, now_wall_us.saturating_sub(s.sent_us));
    pushes::arrived(stats, s.seq, now_wall_us);
    match pushes::advance(replies.seen, stream_key(s.publisher, topic), s.seq, MAX_STREAMS) {
        Step::First | Step::Next { missing: 0 } => {}
        Step::Next { missing } => {
            bump(&mut stats.mqtt_lost, label, missing);
            stats.push_gaps += missing;
        }
        Step::Repeat => {
            bump(&mut stats.mqtt_duplicated, label, 1);
            stats.push_duplicates += 1;
        }
        Step::Untracked => stats.mqtt_untracked += 1,
    }
}

/// QoS 2 packet ids each connection (by slot) answered PUBREC and awaits
/// the PUBREL of; an entry exists only while one does.
#[derive(Default)]
pub(crate) struct AwaitingRelease(HashMap<usize, Vec<u16>>);

impl AwaitingRelease {
    /// A QoS 2 PUBLISH `id` arrived on `slot`: true when it is new (to be
    /// delivered), false when the broker resent one awaiting its PUBREL.
    pub(crate) fn received(&mut self, slot: usize, id: u16) -> Result<bool, Stop> {
        let ids = self.0.entry(slot).or_default();
        if ids.contains(&id) {
            return Ok(false);
        }
        if ids.len() >= MAX_AWAITING_RELEASE {
            return Err("mqtt_qos2_awaiting_overflow".into());
        }
        ids.push(id);
        Ok(true)
    }

    /// The PUBREL of `id` came: it may be used again.
    pub(crate) fn released(&mut self, slot: usize, id: u16) {
        if let Some(ids) = self.0.get_mut(&slot) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.0.remove(&slot);
            }
        }
    }

    /// A new connection in `slot`: nothing of the last one's awaits.
    pub(crate) fn reset(&mut self, slot: usize) {
        self.0.remove(&slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resends_are_known_until_released_and_bounded() {
        let mut a = AwaitingRelease::default();
        assert_eq!(a.received(3, 7), Ok(true));
        assert_eq!(a.received(3, 7), Ok(false), "a DUP resend");
        assert_eq!(a.received(4, 7), Ok(true), "another connection's id");
        a.released(3, 7);
        assert_eq!(a.received(3, 7), Ok(true), "reused after PUBREL");
        a.reset(3);
        for id in 0..MAX_AWAITING_RELEASE as u16 {
            assert_eq!(a.received(3, id), Ok(true));
        }
        assert_eq!(a.received(3, u16::MAX), Err("mqtt_qos2_awaiting_overflow".into()));
        a.reset(3);
        a.released(4, 7);
        assert!(a.0.is_empty(), "no state once nothing awaits");
    }
}

/// The topic aliases brokers set on each connection (5.0, §3.3.2.3.4):
/// a PUBLISH with a topic and an alias sets it, one with only the alias
/// is for that topic. Bounded: `max` aliases per connection (the Topic
/// Alias Maximum its CONNECT gave), each a topic the codec bounded;
/// forgotten when the connection's slot opens again.
#[derive(Debug, Default)]
pub(crate) struct AliasesIn {
    max: u16,
    /// By slot: alias N at N - 1 (an empty topic where none is set).
    by_slot: HashMap<usize, Vec<Box<str>>>,
}

impl AliasesIn {
    pub(crate) fn new(max: u16) -> AliasesIn {
        AliasesIn { max, by_slot: HashMap::new() }
    }

    /// A new connection in `slot`: no alias yet.
    pub(crate) fn reset(&mut self, slot: usize) {
        self.by_slot.remove(&slot);
    }

    /// The topic a PUBLISH is for; one that came by its alias alone is
    /// counted in `aliased`. Err: an alias of 0, past the maximum (or
    /// with none given), or never set: the broker broke the protocol.
    pub(crate) fn resolve<'a>(&mut self, slot: usize, topic: &'a str, alias: Option<u16>, aliased: &mut u64) -> Result<std::borrow::Cow<'a, str>, Stop> {
        let Some(a) = alias else { return Ok(topic.into()) };
        if a == 0 || a > self.max {
            return Err("mqtt_topic_alias_invalid".into());
        }
        let i = usize::from(a - 1);
        if topic.is_empty() {
            let known = self.by_slot.get(&slot).and_then(|v| v.get(i)).filter(|t| !t.is_empty());
            let t = known.ok_or(Stop::from("mqtt_topic_alias_unknown"))?;
            *aliased += 1;
            return Ok(t.to_string().into());
        }
        let v = self.by_slot.entry(slot).or_default();
        if v.len() <= i {
            v.resize(i + 1, Box::default());
        }
        v[i] = topic.into();
        Ok(topic.into())
    }
}
