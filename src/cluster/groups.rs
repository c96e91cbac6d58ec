//! MQTT shared subscription groups across a cluster: what each node tells
//! the others of its groups (`megaconn.shared`, signed like every message
//! between nodes), so that the node where a message enters the cluster
//! can name, per group, the one node that delivers it
//! (`server/broker/shared.rs`, [`super::MqttMeta::shared`]).
//!
//! A node announces its whole set (each group's name and how many members
//! it has there) when it changes (at most every [`ANNOUNCE_GAP`]) and every
//! [`ANNOUNCE_EVERY`] in any case; the others forget a node they have not
//! heard for [`FORGET_AFTER`]. A node whose link comes up asks (`ask`),
//! and the others announce at once. A node that stops announces an empty
//! set. One announcement is at most [`MAX_BODY`] bytes: groups past it
//! are not announced (counted), and each node with members of such a
//! group delivers to it as if alone.

use super::malformed::Malformed;
use std::time::Duration;

/// The subject every node announces its groups on and listens to.
pub(crate) const SHARED_GROUPS: &str = "megaconn.shared";
/// A node announces its groups at least this often.
pub(crate) const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);
/// ... and at most this often, however often they change.
pub(crate) const ANNOUNCE_GAP: Duration = Duration::from_millis(200);
/// A node not heard for this long has no groups any more.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(15);
/// Most bytes of one announcement (NATS takes 1 MiB by default).
pub(crate) const MAX_BODY: usize = 512 << 10;
/// Most groups on a node, all told (`$share/{group}/{filter}` names): what
/// one announcement may list.
pub(crate) const MAX_GROUPS: usize = 16_384;
/// Most groups one message names a node for; past them each node
/// delivers to its own members.
pub(crate) const MAX_PICKS: usize = 1024;

/// What a [`SHARED_GROUPS`] message carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Announce {
    /// `$share/{group}/{filter}` and its members on the sender.
    pub(crate) groups: Vec<(String, u32)>,
    /// The sender's link just came up: the others announce at once.
    #[serde(default)]
    pub(crate) ask: bool,
}

impl Announce {
    /// Another node's message, within the bounds a sender keeps: a body of
    /// at most [`MAX_BODY`], at most `max_groups` names, each a shared
    /// subscription.
    pub(crate) fn parse(body: &[u8], max_groups: usize) -> Result<Announce, Malformed> {
        if body.len() > MAX_BODY {
            return Err(Malformed::AnnounceTooLarge(body.len()));
        }
        let a: Announce = serde_json::from_slice(body).map_err(|e| Malformed::GroupsJson(e.to_string()))?;
        if a.groups.len() > max_groups {
            return Err(Malformed::TooManyGroups { count: a.groups.len(), max: max_groups });
        }
        if let Some((name, _)) = a.groups.iter().find(|(n, _)| crate::proto::mqtt::topic::shared(n).is_none()) {
            return Err(Malformed::NotShared(name.clone()));
        }
        Ok(a)
    }

    /// The body for `groups` (sorted by name), and how many did not fit
    /// in [`MAX_BODY`].
    pub(crate) fn body(groups: impl IntoIterator<Item = (String, u32)>, ask: bool) -> (Vec<u8>, usize) {
        let (mut kept, mut bytes, mut left_out) = (Vec::new(), 64, 0);
        for (name, members) in groups {
            // JSON may write a byte as \u00XX: six; and the count and brackets.
            let cost = 6 * name.len() + 16;
            if bytes + cost > MAX_BODY {
                left_out += 1;
                continue;
            }
            bytes += cost;
            kept.push((name, members));
        }
        (serde_json::to_vec(&Announce { groups: kept, ask }).expect("serializes"), left_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An announcement crosses within its bounds; past them (too many
    /// groups, a name that is no shared subscription, too many bytes) it
    /// is refused; a sender leaves out what does not fit and says so.
    #[test]
    fn announcements_cross_within_their_bounds() {
        let groups = vec![("$share/g/a/+".to_string(), 3), ("$share/h/#".to_string(), 1)];
        let (body, left_out) = Announce::body(groups.clone(), true);
        assert_eq!(left_out, 0);
        assert_eq!(Announce::parse(&body, 16), Ok(Announce { groups: groups.clone(), ask: true }));
        assert_eq!(Announce::parse(&body, 1), Err(Malformed::TooManyGroups { count: groups.len(), max: 1 }));
        let bad = serde_json::json!({"groups": [["a/b", 1]]}).to_string();
        assert_eq!(Announce::parse(bad.as_bytes(), 16), Err(Malformed::NotShared("a/b".into())));
        assert!(matches!(Announce::parse(b"nope", 16), Err(Malformed::GroupsJson(_))));
        assert_eq!(Announce::parse(&vec![b' '; MAX_BODY + 1], 16), Err(Malformed::AnnounceTooLarge(MAX_BODY + 1)));

        let long: Vec<(String, u32)> = (0..200).map(|i| (format!("$share/g{i}/{}", "x".repeat(1000)), 1)).collect();
        let (body, left_out) = Announce::body(long, false);
        assert!(body.len() <= MAX_BODY && left_out > 0, "{} bytes, {left_out} left out", body.len());
        assert_eq!(Announce::parse(&body, 1000).unwrap().groups.len(), 200 - left_out);
    }
}
