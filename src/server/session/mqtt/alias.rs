//! Topic aliases from client to server (5.0 §3.3.2.3.4): the CONNACK
//! announces a Topic Alias Maximum of [`TOPIC_ALIAS_MAXIMUM`]; a PUBLISH
//! with a topic and an alias sets the alias, one with an empty topic and
//! an alias is for the topic it names. An alias of 0 (the codec refuses
//! it), above the maximum, or unknown is a protocol error: DISCONNECT
//! 0x94 (`mqtt_topic_alias_invalid`). Server-to-client aliases are not
//! used (the client's Topic Alias Maximum is ignored: topics go whole).
//!
//! Bounded: at most [`TOPIC_ALIAS_MAXIMUM`] topics of at most a megaconn
//! topic's length per connection, in its boxed state (`extra.rs`) and
//! only once it set one.

use super::MqttConn;
use crate::proto::mqtt::Error;
use crate::server::close::Close;

/// Aliases a client may set (the Topic Alias Maximum announced).
pub(crate) const TOPIC_ALIAS_MAXIMUM: u16 = 16;

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
