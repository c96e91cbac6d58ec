//! Topic names and topic filters (§4.7): validating them, parsing shared
//! subscriptions (§4.8.2) and matching a filter against a name.
//!
//! A name is what a PUBLISH is sent to: at least one byte, no wildcard. A
//! filter is what a SUBSCRIBE asks for: `+` stands for exactly one level
//! and must fill its level, `#` for any number of levels (the parent's
//! included) and must be the whole last level. Names starting with `$`
//! (`$SYS/...`) are kept out of filters that start with a wildcard
//! ([MQTT-4.7.2-1]). `$share/{group}/{filter}` subscribes a group, of
//! which one member gets each message; the group name is at least one
//! character without `/`, `+` or `#`. Both versions take shared
//! subscriptions (3.1.1 brokers such as mosquitto do too).
//!
//! Empty levels are levels: `a//b` has three, and `+/+` matches `/x`.

use super::Limits;

/// Why a topic name or filter is refused; the decoder wraps it in
/// `Error::TopicName` or `Error::TopicFilter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicError {
    /// Zero bytes ([MQTT-4.7.3-1]).
    Empty,
    /// A `+` or `#` in a topic name ([MQTT-3.3.2-2]).
    WildcardInName,
    /// A `+` or `#` not alone in its level, or `#` not last ([MQTT-4.7.1-1], [MQTT-4.7.1-2]).
    MisplacedWildcard,
    /// `$share/` without a valid group and filter ([MQTT-4.8.2-1], [MQTT-4.8.2-2]).
    BadShare,
    /// More bytes than `Limits::max_topic_len`.
    TooLong,
    /// More levels than `Limits::max_topic_levels`.
    TooManyLevels,
}

/// The prefix of a shared subscription (§4.8.2).
pub(crate) const SHARE_PREFIX: &str = "$share/";

/// A shared subscription's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shared<'a> {
    /// The share name: subscribers with the same one share the messages.
    pub group: &'a str,
    /// The filter messages are matched against.
    pub filter: &'a str,
}

/// `$share/{group}/{filter}` split into its parts; `None` if `filter`
/// is not a shared subscription or its parts are malformed (the validator
/// tells which).
pub(crate) fn shared(filter: &str) -> Option<Shared<'_>> {
    let rest = filter.strip_prefix(SHARE_PREFIX)?;
    let (group, filter) = rest.split_once('/')?;
    if group.is_empty() || group.contains(['+', '#']) || filter.is_empty() {
        return None;
    }
    Some(Shared { group, filter })
}

fn check_limits(topic: &str, limits: &Limits) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::Empty);
    }
    if topic.len() > limits.max_topic_len {
        return Err(TopicError::TooLong);
    }
    // Levels are separators + 1; counted without splitting into a vector.
    if topic.bytes().filter(|&b| b == b'/').count() >= limits.max_topic_levels {
        return Err(TopicError::TooManyLevels);
    }
    Ok(())
}

/// A topic name a PUBLISH (or a will) may carry.
pub(crate) fn validate_name(name: &str, limits: &Limits) -> Result<(), TopicError> {
    check_limits(name, limits)?;
    if name.contains(['+', '#']) {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// A topic filter a SUBSCRIBE or UNSUBSCRIBE may carry. `Ok(true)`: a
/// shared subscription.
pub(crate) fn validate_filter(filter: &str, limits: &Limits) -> Result<bool, TopicError> {
    check_limits(filter, limits)?;
    let (inner, is_shared) = if filter.starts_with(SHARE_PREFIX) { (shared(filter).ok_or(TopicError::BadShare)?.filter, true) } else { (filter, false) };
    let mut levels = inner.split('/').peekable();
    while let Some(level) = levels.next() {
        let last = levels.peek().is_none();
        let ok = match level {
            "#" => last,
            "+" => true,
            l => !l.contains(['+', '#']),
        };
        if !ok {
            return Err(TopicError::MisplacedWildcard);
        }
    }
    Ok(is_shared)
}

/// Whether a subscription names a wildcard filter (has `+` or `#`), one
/// that must be matched rather than looked up.
pub(crate) fn is_filter(name: &str) -> bool {
    name.contains(['+', '#'])
}

/// Whether a valid `filter` (not a `$share/` one: pass its inner filter)
/// matches a valid topic `name` (§4.7).
pub(crate) fn matches(filter: &str, name: &str) -> bool {
    if name.starts_with('$') && filter.starts_with(['+', '#']) {
        return false;
    }
    let (mut f, mut t) = (filter.split('/'), name.split('/'));
    loop {
        match (f.next(), t.next()) {
            // `#` also matches the parent level: `a/#` matches `a`.
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_follows_the_examples_of_section_4_7() {
        let yes = [
            ("sport/tennis/player1/#", "sport/tennis/player1"),
            ("sport/tennis/player1/#", "sport/tennis/player1/ranking"),
            ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon"),
            ("sport/#", "sport"),
            ("#", "a/b/c"),
            ("sport/tennis/+", "sport/tennis/player1"),
            ("sport/+", "sport/"),
            ("+/+", "/finance"),
            ("/+", "/finance"),
            ("+/tennis/#", "sport/tennis"),
            ("$SYS/#", "$SYS/broker/clients"),
            ("$SYS/+/clients", "$SYS/broker/clients"),
            ("a//b", "a//b"),
        ];
        for (f, n) in yes {
            assert!(matches(f, n), "{f} should match {n}");
        }
        let no = [
            ("sport/tennis/+", "sport/tennis/player1/ranking"),
            ("sport/+", "sport"),
            ("+", "/finance"),
            ("#", "$SYS/broker"),
            ("+/monitor/Clients", "$SYS/monitor/Clients"),
            ("a/b", "a/b/c"),
            ("a/b/c", "a/b"),
            ("ACCOUNTS", "Accounts"),
        ];
        for (f, n) in no {
            assert!(!matches(f, n), "{f} should not match {n}");
        }
    }

    #[test]
    fn filters_and_names_are_validated() {
        let l = Limits::default();
        for f in ["#", "+", "a/+/b", "+/+", "a/#", "/", "sport/tennis/#", "$SYS/#"] {
            assert_eq!(validate_filter(f, &l), Ok(false), "{f}");
        }
        for f in ["a#", "a/#/b", "a+", "+a/b", "##", "a/b#"] {
            assert_eq!(validate_filter(f, &l), Err(TopicError::MisplacedWildcard), "{f}");
        }
        assert_eq!(validate_filter("", &l), Err(TopicError::Empty));
        assert_eq!(validate_filter("$share/g/a/+", &l), Ok(true));
        assert_eq!(shared("$share/g/a/+"), Some(Shared { group: "g", filter: "a/+" }));
        for f in ["$share/g", "$share//a", "$share/g+/a", "$share/g/", "$share/#/a"] {
            assert_eq!(validate_filter(f, &l), Err(TopicError::BadShare), "{f}");
        }
        assert_eq!(validate_filter("$share/g/a/#/b", &l), Err(TopicError::MisplacedWildcard));
        assert_eq!(validate_name("a/b", &l), Ok(()));
        assert_eq!(validate_name("a/+", &l), Err(TopicError::WildcardInName));
        assert_eq!(validate_name("#", &l), Err(TopicError::WildcardInName));
        assert_eq!(validate_name("", &l), Err(TopicError::Empty));
        let small = Limits { max_topic_len: 5, max_topic_levels: 3, ..Limits::default() };
        assert_eq!(validate_name("a/b/c", &small), Ok(()));
        assert_eq!(validate_name("a/b/cd", &small), Err(TopicError::TooLong));
        assert_eq!(validate_name("a/b/c/", &small), Err(TopicError::TooLong));
        assert_eq!(validate_filter("////", &small), Err(TopicError::TooManyLevels));
        assert_eq!(validate_filter("+/+/+", &small), Ok(false));
    }
}
