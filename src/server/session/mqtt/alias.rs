//! Topic aliases from client to server (5.0 §3.3.2.3.4): the CONNACK
//! announces a Topic Alias Maximum of [`TOPIC_ALIAS_MAXIMUM`]; a PUBLISH
//! with a topic and an alias sets the alias, one with an empty topic and
//! an alias is for the topic it names. An alias of 0 (the codec refuses
//! it), above the maximum, or unknown is a protocol error: DISCONNECT
//! 0x94 (`mqtt_topic_alias_invalid`).
//!
//! And from server to client ([`outgoing`]): to a v5 client whose
//! CONNECT gave a Topic Alias Maximum, a PUBLISH of a topic longer than 3
//! bytes goes with an alias: the first one of a topic carries the topic
//! and sets the alias, the next ones carry only the alias. At most
//! [`OUT_ALIASES`] topics (or the client's maximum, when lower) have one
//! at a time; a new topic past that takes the alias of the one used
//! least recently. A rewrite that would pass the client's Maximum Packet
//! Size goes whole instead. What is kept for resending (the flight, a
//! kept session) stays whole: aliases live only as long as the network
//! connection (§3.3.2.3.4), and a resent PUBLISH on the next one names
//! its topic.
//!
//! Bounded: at most [`TOPIC_ALIAS_MAXIMUM`] topics the client set and
//! [`OUT_ALIASES`] the server set, each at most a megaconn topic's
//! length, per connection, in its boxed state (`extra.rs`).

use super::MqttConn;
use crate::proto::mqtt::{encode, Error, Version};
use crate::server::close::Close;
use crate::stats::counters::{bump, Kinds};

/// Aliases a client may set (the Topic Alias Maximum announced).
pub(crate) const TOPIC_ALIAS_MAXIMUM: u16 = 16;

/// Aliases the server sets for one client at most.
pub(crate) const OUT_ALIASES: u16 = 16;

/// Topics this long or shorter go whole: an alias (3 bytes) saves nothing.
const SHORT_TOPIC: usize = 3;

/// The aliases this server set for one connection.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Outgoing {
    /// Aliases it may set: the client's maximum, at most [`OUT_ALIASES`].
    max: u16,
    /// Alias and topic, the most recently used first.
    named: Vec<(u16, Box<str>)>,
}

impl MqttConn {
    /// A v5 CONNECT's Topic Alias Maximum: the server may alias topics
    /// to it (kept boxed only when it is above 0).
    pub(crate) fn set_alias_maximum(&mut self, version: Version, maximum: Option<u16>) {
        let max = maximum.unwrap_or(0).min(OUT_ALIASES);
        if version == Version::V5 && max > 0 {
            self.extra_mut().sent_aliases = Some(Box::new(Outgoing { max, named: Vec::new() }));
        }
    }
}

/// An encoded PUBLISH (topic whole, no alias) as it goes to this
/// connection now: with an alias where the client takes them (see the
/// module doc), counted in `counted` (`set`, `used`). `None`: it goes as
/// it is.
pub(crate) fn outgoing(m: &mut MqttConn, packet: &[u8], counted: &mut Kinds) -> Option<Vec<u8>> {
    let max_in = m.max_in();
    let out = m.extra.as_deref_mut()?.sent_aliases.as_deref_mut()?;
    let topic = encode::publish_topic(packet).filter(|t| t.len() > SHORT_TOPIC)?;
    if let Some(i) = out.named.iter().position(|(_, t)| **t == *topic) {
        let bytes = encode::with_topic_alias(packet, out.named[i].0, false, max_in)?;
        out.named[..=i].rotate_right(1);
        bump(counted, "used");
        return Some(bytes);
    }
    let alias = match out.named.last() {
        Some(&(a, _)) if out.named.len() >= usize::from(out.max) => a,
        _ => out.named.len() as u16 + 1,
    };
    let bytes = encode::with_topic_alias(packet, alias, true, max_in)?;
    if out.named.len() >= usize::from(out.max) {
        out.named.pop();
    }
    out.named.insert(0, (alias, topic.into()));
    bump(counted, "set");
    Some(bytes)
}

/// The topic a PUBLISH is for: `None` when it carries its topic (its
/// alias, if any, now names it), the aliased topic when it carries only
/// the alias. Err: the alias is over the maximum or unknown.
pub(crate) fn resolve(m: &mut MqttConn, topic: &str, alias: Option<u16>) -> Result<Option<Box<str>>, Close> {
    let Some(alias) = alias else { return Ok(None) };
    if alias == 0 || alias > TOPIC_ALIAS_MAXIMUM {
        return Err(Close::Mqtt(Error::TopicAliasInvalid));
    }
    let i = usize::from(alias - 1);
    if topic.is_empty() {
        let known = m.extra.as_deref().and_then(|x| x.aliases.get(i)).filter(|t| !t.is_empty());
        return match known {
            Some(t) => Ok(Some(t.clone())),
            None => Err(Close::Mqtt(Error::TopicAliasInvalid)),
        };
    }
    let aliases = &mut m.extra_mut().aliases;
    if aliases.len() <= i {
        aliases.resize(i + 1, Box::default());
    }
    aliases[i] = topic.into();
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mqtt::{Packet, Properties, Publish, QoS};

    fn publish(topic: &str, qos: QoS) -> Vec<u8> {
        let packet_id = if qos == QoS::AtMostOnce { 0 } else { 7 };
        let properties = Properties { message_expiry: Some(9), ..Properties::default() };
        let p = Publish { dup: false, qos, retain: false, topic, packet_id, properties, payload: b"data" };
        let mut out = Vec::new();
        encode::packet(&Packet::Publish(p), Version::V5, &mut out).unwrap();
        out
    }

    /// The topic and alias a rewritten PUBLISH carries, as a v5 client
    /// decodes it (and that the rest came through).
    fn seen(bytes: &[u8]) -> (String, Option<u16>) {
        use crate::proto::mqtt::{decode, Limits, Role};
        let h = decode::fixed_header(bytes, Some(Version::V5), u32::MAX).unwrap().unwrap();
        assert_eq!(h.total(), bytes.len());
        let Packet::Publish(p) = decode::packet(&h, &bytes[h.len..], Role::Client, Version::V5, &Limits::default()).unwrap() else { panic!() };
        assert_eq!((p.payload, p.properties.message_expiry), (&b"data"[..], Some(9)));
        (p.topic.to_string(), p.properties.topic_alias)
    }

    fn conn(version: Version, maximum: Option<u16>) -> MqttConn {
        let mut m = MqttConn { version: Some(version), ..MqttConn::default() };
        m.set_alias_maximum(version, maximum);
        m
    }

    /// The first PUBLISH of a topic sets its alias, the next use it alone;
    /// past the client's maximum a new topic takes the alias used least
    /// recently; short topics go whole; each counted.
    #[test]
    fn topics_get_aliases_the_client_accepts_least_recently_used_replaced() {
        let mut m = conn(Version::V5, Some(2));
        let mut counted = Kinds::new();
        let mut send = |topic: &str, qos| outgoing(&mut m, &publish(topic, qos), &mut counted).map(|b| seen(&b));
        assert_eq!(send("dev/a", QoS::AtMostOnce), Some(("dev/a".into(), Some(1))));
        assert_eq!(send("dev/b", QoS::AtLeastOnce), Some(("dev/b".into(), Some(2))));
        assert_eq!(send("dev/a", QoS::ExactlyOnce), Some(("".into(), Some(1))));
        // Full: dev/b (alias 2) was used least recently.
        assert_eq!(send("dev/c", QoS::AtMostOnce), Some(("dev/c".into(), Some(2))));
        assert_eq!(send("dev/c", QoS::AtMostOnce), Some(("".into(), Some(2))));
        assert_eq!(send("dev/b", QoS::AtLeastOnce), Some(("dev/b".into(), Some(1))), "dev/a's alias now");
        assert_eq!(send("a/b", QoS::AtMostOnce), None, "3 bytes: whole");
        assert_eq!((counted["set"], counted["used"]), (4, 2));
    }

    /// No aliases to a 3.1.1 client, a v5 one that gave no maximum (or 0),
    /// and none past the client's Maximum Packet Size; the server's own
    /// bound holds whatever the client's maximum.
    #[test]
    fn aliases_only_where_the_client_takes_them_and_bounded() {
        let mut counted = Kinds::new();
        for mut m in [conn(Version::V311, Some(5)), conn(Version::V5, None), conn(Version::V5, Some(0))] {
            assert_eq!(outgoing(&mut m, &publish("dev/a", QoS::AtMostOnce), &mut counted), None);
            assert!(m.extra.is_none(), "nothing boxed for it");
        }
        let whole = publish("dev/a", QoS::AtMostOnce);
        let mut m = conn(Version::V5, Some(4));
        m.extra_mut().max_in = whole.len() as u32 + 1;
        assert_eq!(outgoing(&mut m, &whole, &mut counted), None, "setting it would pass the client's Maximum Packet Size");
        assert!(counted.is_empty());
        let mut m = conn(Version::V5, Some(u16::MAX));
        for i in 0..100 {
            let (_, alias) = seen(&outgoing(&mut m, &publish(&format!("dev/{i}"), QoS::AtMostOnce), &mut counted).unwrap());
            assert!(alias.is_some_and(|a| (1..=OUT_ALIASES).contains(&a)), "{alias:?}");
        }
        assert_eq!(m.extra.as_ref().unwrap().sent_aliases.as_ref().unwrap().named.len(), usize::from(OUT_ALIASES));
        m.tidy();
        assert!(m.extra.is_some(), "the aliases stay for the connection's life");
    }
}
