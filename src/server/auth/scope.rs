//! What a permission pattern allows, for a topic and for an MQTT filter.
//!
//! A pattern (a token's `topics` claim, `--admin-topics`) is a topic name,
//! a prefix ending in `*` (`chat.*`, `sensors/*`), or `*` for every topic.
//! A topic is allowed when a pattern covers it. An MQTT filter (`+`, `#`)
//! stands for every topic it can match (§4.7: `#` its parent level too,
//! `sensors/#` matches `sensors`; `+` any one level; neither at the first
//! level matches a `$` topic), so:
//!
//! - a filter is **within** a token's patterns only if every topic it can
//!   match is covered ([`within`]): `sensors/#` needs `sensors` covered as
//!   well as `sensors/...`; a filter whose matches no pattern covers whole
//!   is refused, never granted and filtered per message;
//! - a filter **touches** a pattern when at least one topic it can match
//!   is covered by it ([`touches`]): `#` and `+/secret` touch `ops/*`, so
//!   they are refused to a token that may not hear `ops/*`.
//!
//! Both are decided on the strings alone, in one pass over the filter.

pub(crate) use crate::proto::mqtt::topic::is_filter;

/// Whether pattern `pattern` covers topic `topic`.
pub(crate) fn covers(pattern: &str, topic: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => topic.starts_with(prefix),
        None => pattern == topic,
    }
}

/// Whether every topic `name` stands for (itself, or every topic an MQTT
/// filter can match) is covered by one of `patterns`.
pub(crate) fn within<'a>(mut patterns: impl Iterator<Item = &'a str> + Clone, name: &str) -> bool {
    let Some((literal, wild)) = first_wildcard(name) else {
        return patterns.any(|p| covers(p, name));
    };
    // Past its literal head a wildcard level takes any characters, so
    // only a prefix pattern that holds the whole head covers what follows
    // (a pattern longer than the head leaves other first characters out).
    let head = patterns.clone().any(|p| p.strip_suffix('*').is_some_and(|prefix| literal.starts_with(prefix)));
    // `a/#` matches `a` itself too.
    let parent = wild != "#" || literal.is_empty() || {
        let parent = &literal[..literal.len() - 1];
        patterns.any(|p| covers(p, parent))
    };
    head && parent
}

/// Whether some topic `name` stands for (itself, or a topic an MQTT filter
/// can match) is covered by `pattern`.
pub(crate) fn touches(pattern: &str, name: &str) -> bool {
    let Some(prefix) = pattern.strip_suffix('*') else {
        return crate::proto::mqtt::topic::matches(name, pattern);
    };
    if !is_filter(name) {
        return name.starts_with(prefix);
    }
    // Wildcards at the first level never match a `$` topic.
    if name.starts_with(['+', '#']) && prefix.starts_with('$') {
        return false;
    }
    // Walk the prefix along the filter's levels: it touches when the
    // prefix runs out while the filter can still go on matching.
    let mut rest = prefix;
    let mut levels = name.split('/').peekable();
    while let Some(level) = levels.next() {
        let last = levels.peek().is_none();
        match level {
            "#" => return true,
            "+" => match rest.find('/') {
                // The prefix ends inside this level: any level fits.
                None => return true,
                Some(i) => rest = &rest[i..],
            },
            literal => {
                if literal.starts_with(rest) {
                    return true;
                }
                let Some(after) = rest.strip_prefix(literal) else { return false };
                rest = after;
            }
        }
        // At a level's end: the prefix goes on with '/' into the next one.
        if rest.is_empty() {
            return true;
        }
        match rest.strip_prefix('/') {
            Some(next) if !last => rest = next,
            _ => return false,
        }
        if rest.is_empty() {
            return true;
        }
    }
    rest.is_empty()
}

/// A filter's literal head (up to and including the `/` before its
/// first wildcard level) and that level; None for a topic name.
fn first_wildcard(name: &str) -> Option<(&str, &str)> {
    let mut at = 0;
    for level in name.split('/') {
        if level == "+" || level == "#" {
            return Some((&name[..at], level));
        }
        at += level.len() + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mqtt::topic::matches;

    fn within_of(patterns: &[&str], name: &str) -> bool {
        within(patterns.iter().copied(), name)
    }

    #[test]
    fn patterns_cover_names_and_prefixes() {
        assert!(covers("*", "x"));
        assert!(covers("chat.*", "chat.room1"));
        assert!(!covers("chat.*", "chatroom"));
        assert!(covers("news", "news"));
        assert!(!covers("news", "news2"));
    }

    /// Issue 62, finding 2: `sensors/*` does not hold `sensors/#` (it
    /// matches `sensors`), `*` holds `#` and `+/secret`.
    #[test]
    fn a_filter_is_within_only_when_every_topic_it_matches_is() {
        assert!(!within_of(&["sensors/*"], "sensors/#"), "sensors/# matches sensors too");
        assert!(within_of(&["sensors/*", "sensors"], "sensors/#"));
        assert!(within_of(&["sensors*"], "sensors/#"));
        assert!(within_of(&["sensors/*"], "sensors/+/temp"));
        assert!(within_of(&["sensors/*"], "sensors/a/#"));
        assert!(!within_of(&["sensors/a*"], "sensors/+"), "+ may be b");
        assert!(!within_of(&["sensors/+"], "sensors/+"), "a pattern is no filter");
        assert!(within_of(&["*"], "#") && within_of(&["*"], "+/secret"));
        assert!(!within_of(&["alice/*"], "#") && !within_of(&["alice/*"], "+/cmd"));
        assert!(within_of(&["alice/*"], "alice/cmd") && !within_of(&["alice/*"], "bob/cmd"));
        assert!(!within_of(&[], "#") && !within_of(&[], "a"));
    }

    #[test]
    fn a_filter_touches_a_pattern_when_one_of_its_topics_is_covered() {
        assert!(touches("ops/*", "#") && touches("ops/*", "+/secret"));
        assert!(!touches("ops/*", "+"), "+ is one level: never ops/...");
        assert!(touches("ops/*", "ops/#"));
        assert!(touches("ops*", "+"), "+ may be ops");
        assert!(touches("ops", "+") && touches("ops", "#") && touches("ops", "ops/#"), "ops/# matches ops");
        assert!(!touches("ops/*", "news/#"));
        assert!(touches("ops/*", "+/+/x"), "ops/a/x");
        assert!(!touches("ops/a/*", "+/b/#"));
        assert!(!touches("$SYS/*", "#") && !touches("$SYS/*", "+/x"), "wildcards at the first level skip $ topics");
        assert!(touches("$SYS/*", "$SYS/#"));
        assert!(!touches("a/b", "a/+/c") && touches("a/b/c", "a/+/c"));
        assert!(touches("*", "#") && touches("*", "a/b"));
        assert!(!touches("a/b*", "a") && touches("a*", "a/b"));
    }

    /// Every topic over a small alphabet, up to 5 characters.
    fn universe() -> Vec<String> {
        let mut all = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..5 {
            layer = layer.iter().flat_map(|s| ["a", "b", "/", "$"].map(|c| format!("{s}{c}"))).collect();
            all.extend(layer.iter().cloned());
        }
        all.retain(|t| !t.is_empty());
        all
    }

    proptest::proptest! {
        /// Against brute force over every short topic: a filter within
        /// the patterns matches no topic they leave out, and one that
        /// matches a covered topic touches its pattern.
        #[test]
        fn within_and_touches_agree_with_every_short_topic(
            filter in "[ab$]{0,2}(/(\\+|[ab]{0,2})){0,2}(/#)?|#|\\+(/[ab+]{0,2}){0,2}(/#)?",
            patterns in proptest::collection::vec("[ab/$]{0,3}\\*?", 0..3),
        ) {
            let filter = filter.trim_start_matches('/');
            proptest::prop_assume!(!filter.is_empty());
            let topics = universe();
            let matched: Vec<&String> = topics.iter().filter(|t| matches(filter, t)).collect();
            if within(patterns.iter().map(String::as_str), filter) {
                for t in &matched {
                    proptest::prop_assert!(patterns.iter().any(|p| covers(p, t)), "{filter} within {patterns:?} yet {t} is not covered");
                }
            }
            for p in &patterns {
                if matched.iter().any(|t| covers(p, t)) {
                    proptest::prop_assert!(touches(p, filter), "{filter} matches a topic {p} covers, yet does not touch it");
                }
            }
        }
    }
}
