//! mosquitto's `acl_file`, read and decided as mosquitto 2.0 reads and
//! decides it (`security_default.c`: `aclfile__parse`,
//! `mosquitto_acl_check_default`), so a file that works there works here
//! unchanged:
//!
//! - `topic [read|write|readwrite|deny] FILTER` (no access word:
//!   readwrite) belongs to the last `user NAME` line above it, or to
//!   anonymous clients (no user name) when no `user` line came yet;
//! - `pattern [read|write|readwrite|deny] FILTER` holds for everyone,
//!   `%u` standing for the user name (a pattern with `%u` skips anonymous
//!   clients) and `%c` for the client id;
//! - a line starting with `#` is a comment, a blank line is nothing,
//!   anything else is an error naming its line.
//!
//! **Deciding** whether a client may read (receive) or write (publish)
//! a topic: its own rules first, then the patterns; in each list every
//! `deny` rule before the others. The first rule whose filter matches the
//! topic decides: `deny` refuses; a rule giving the access allows; one
//! that does not give it is passed over. A client's own rules never
//! match a `$` topic unless they start with `$`. A user name or client
//! id holding `+` or `#` gets nothing from the patterns (it could make
//! one match others' topics). Nothing matched: refused.
//!
//! **Subscribing** is not decided here: mosquitto 2.0 grants every
//! subscription and checks each message it would deliver (and each
//! retained one) for read access, and so does megaconn for clients
//! admitted by these files.

use crate::proto::mqtt::topic;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What a rule gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Access {
    Deny,
    Read,
    Write,
    ReadWrite,
}

impl Access {
    fn gives(self, want: Want) -> bool {
        matches!((self, want), (Access::ReadWrite, _) | (Access::Read, Want::Read) | (Access::Write, Want::Write))
    }
}

/// What a client asks to do with a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Receive a message of it.
    Read,
    /// Publish to it.
    Write,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Rule {
    access: Access,
    filter: String,
}

/// A client as the rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    /// Its user name (None: anonymous).
    pub user: Option<&'a str>,
    pub client_id: &'a str,
}

/// An ACL file's rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Acl {
    /// Before the first `user` line: clients without a user name.
    anonymous: Option<Vec<Rule>>,
    users: HashMap<String, Vec<Rule>>,
    patterns: Vec<Rule>,
}

impl Acl {
    /// Parse an ACL file's text; Err: "line N: what is wrong; the fix".
    pub(crate) fn parse(text: &str) -> Result<Acl, String> {
        let mut acl = Acl::default();
        let mut user: Option<String> = None;
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim_end();
            if line.starts_with('#') {
                continue;
            }
            // mosquitto splits at spaces (strtok): runs of them are one.
            let line = line.trim_start_matches(' ');
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "" => continue,
                "topic" | "pattern" => {
                    let rest = rest.trim_start_matches(' ');
                    let (first, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                    let tail = tail.trim_matches([' ', '\t']);
                    if first.is_empty() {
                        return Err(format!("line {n}: '{word}' without a topic; write '{word} [read|write|readwrite|deny] FILTER'"));
                    }
                    // One word only: it is the filter, and the access readwrite.
                    let (access, filter) = match tail {
                        "" => (Access::ReadWrite, first),
                        _ => (access_of(first).ok_or_else(|| format!("line {n}: '{first}' is not read, write, readwrite or deny"))?, tail),
                    };
                    if !valid_filter(filter) {
                        return Err(format!("line {n}: '{filter}' is not a valid MQTT topic filter ('+' and '#' stand alone in a level, '#' last)"));
                    }
                    let rule = Rule { access, filter: filter.to_string() };
                    match word {
                        "pattern" => acl.patterns.push(rule),
                        _ => match &user {
                            Some(u) => acl.users.entry(u.clone()).or_default().push(rule),
                            None => acl.anonymous.get_or_insert_with(Vec::new).push(rule),
                        },
                    }
                }
                "user" => {
                    let name = rest.trim_matches([' ', '\t']);
                    if name.is_empty() {
                        return Err(format!("line {n}: 'user' without a name; write 'user NAME'"));
                    }
                    user = Some(name.to_string());
                    // A user block that names no rule still exists (its
                    // clients then get only the patterns), as in mosquitto.
                    acl.users.entry(name.to_string()).or_default();
                }
                other => return Err(format!("line {n}: '{other}' is not topic, pattern or user (a comment starts the line with #)")),
            }
        }
        // Every deny rule first, as mosquitto keeps them.
        for list in acl.users.values_mut().chain(acl.anonymous.iter_mut()).chain(std::iter::once(&mut acl.patterns)) {
            list.sort_by_key(|r| r.access != Access::Deny);
        }
        Ok(acl)
    }

    /// Rules for users, patterns (what the file holds, for the log).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let users = self.users.values().map(Vec::len).sum::<usize>() + self.anonymous.as_ref().map_or(0, Vec::len);
        (users, self.patterns.len())
    }

    /// Whether `who` may `want` `topic`.
    pub(crate) fn allows(&self, who: Subject<'_>, topic: &str, want: Want) -> bool {
        let own = match who.user {
            Some(u) => self.users.get(u),
            None => self.anonymous.as_ref(),
        };
        if own.is_none() && self.patterns.is_empty() {
            return false;
        }
        for r in own.into_iter().flatten() {
            if topic.starts_with('$') && !r.filter.starts_with('$') {
                continue;
            }
            if let Some(allowed) = decide(r, &r.filter, topic, want) {
                return allowed;
            }
        }
        if self.patterns.is_empty() {
            return false;
        }
        let dangerous = |s: &str| s.contains(['+', '#']);
        if who.user.is_some_and(dangerous) || dangerous(who.client_id) {
            return false;
        }
        for r in &self.patterns {
            if r.filter.contains("%u") && who.user.is_none() {
                continue;
            }
            let filter = r.filter.replace("%c", who.client_id);
            let filter = match who.user {
                Some(u) => filter.replace("%u", u),
                None => filter,
            };
            if let Some(allowed) = decide(r, &filter, topic, want) {
                return allowed;
            }
        }
        false
    }
}

/// A rule's word on `topic`: Some(false) deny, Some(true) allow, None: it
/// says nothing (no match, or a match without the access asked).
fn decide(r: &Rule, filter: &str, topic: &str, want: Want) -> Option<bool> {
    if !topic::matches(filter, topic) {
        return None;
    }
    match r.access {
        Access::Deny => Some(false),
        a if a.gives(want) => Some(true),
        _ => None,
    }
}

fn access_of(word: &str) -> Option<Access> {
    Some(match word {
        "read" => Access::Read,
        "write" => Access::Write,
        "readwrite" => Access::ReadWrite,
        "deny" => Access::Deny,
        _ => return None,
    })
}

/// A filter mosquitto accepts in an ACL (`mosquitto_sub_topic_check`):
/// `+` and `#` alone in their level, `#` the last level.
fn valid_filter(f: &str) -> bool {
    let levels: Vec<&str> = f.split('/').collect();
    levels.iter().enumerate().all(|(i, l)| match *l {
        "#" => i + 1 == levels.len(),
        "+" => true,
        l => !l.contains(['+', '#']),
    }) && !f.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub<'a>(user: Option<&'a str>, client_id: &'a str) -> Subject<'a> {
        Subject { user, client_id }
    }

    /// The example of mosquitto's `aclfile.example`, decided as there:
    /// anonymous rules, a user's, patterns with %u and %c, deny first.
    #[test]
    fn rules_and_patterns_decide_as_mosquitto() {
        let acl = Acl::parse(
            "# anonymous clients\ntopic read $SYS/#\ntopic read public/#\n\nuser alice\ntopic readwrite home/#\ntopic deny home/secret\ntopic write alerts\ntopic sensors/+/temp\n\nuser bob\n\npattern read devices/%c/cmd\npattern write devices/%c/state\npattern readwrite users/%u/#\n",
        )
        .unwrap();
        let alice = sub(Some("alice"), "a1");
        let (r, w) = (Want::Read, Want::Write);
        assert!(acl.allows(alice, "home/kitchen", r) && acl.allows(alice, "home/kitchen", w));
        assert!(!acl.allows(alice, "home/secret", r), "deny wins, wherever it is written");
        assert!(acl.allows(alice, "alerts", w) && !acl.allows(alice, "alerts", r), "write only");
        assert!(acl.allows(alice, "sensors/x/temp", r), "no access word: readwrite");
        assert!(acl.allows(alice, "users/alice/inbox", r), "%u");
        assert!(!acl.allows(alice, "users/bob/inbox", r));
        assert!(acl.allows(alice, "devices/a1/cmd", r) && !acl.allows(alice, "devices/a1/cmd", w), "%c");
        assert!(!acl.allows(alice, "$SYS/broker/uptime", r), "a user's rules are not the anonymous ones");
        let anon = sub(None, "anon-1");
        assert!(acl.allows(anon, "$SYS/broker/uptime", r) && acl.allows(anon, "public/news", r));
        assert!(!acl.allows(anon, "public/news", w));
        assert!(!acl.allows(anon, "users/anon-1/x", r), "a %u pattern skips anonymous clients");
        assert!(acl.allows(anon, "devices/anon-1/cmd", r));
        let bob = sub(Some("bob"), "b");
        assert!(!acl.allows(bob, "home/kitchen", r) && acl.allows(bob, "users/bob/x", w), "an empty user block: patterns only");
        let carol = sub(Some("carol"), "c");
        assert!(acl.allows(carol, "users/carol/x", r), "a user without a block: patterns only");
        assert!(!acl.allows(sub(Some("eve/#"), "e"), "users/eve/#", r), "a user name with a wildcard is refused when patterns exist");
        assert!(acl.allows(sub(Some("alice"), "a+"), "home/kitchen", r), "a client id with one keeps its user's own rules");
        assert!(!acl.allows(sub(Some("alice"), "a+"), "users/alice/x", r), "but gets nothing from the patterns");
    }

    /// `#` rules do not reach `$` topics unless they start with `$`; a
    /// file without patterns refuses a user it does not name.
    #[test]
    fn dollar_topics_and_unnamed_users() {
        let acl = Acl::parse("user root\ntopic #\n").unwrap();
        let root = sub(Some("root"), "r");
        assert!(acl.allows(root, "a/b", Want::Write));
        assert!(!acl.allows(root, "$SYS/broker/uptime", Want::Read));
        assert!(!acl.allows(sub(Some("other"), "o"), "a/b", Want::Read));
        assert!(!acl.allows(sub(None, "o"), "a/b", Want::Read), "no anonymous rules, no patterns");
    }

    /// mosquitto's quirks kept: one word after `topic` is the filter;
    /// spaces inside a filter are part of it.
    #[test]
    fn the_file_is_read_as_mosquitto_reads_it() {
        let acl = Acl::parse("user u\ntopic read\ntopic  write   a b/c  \n").unwrap();
        let u = sub(Some("u"), "c");
        assert!(acl.allows(u, "read", Want::Write), "'topic read' is the topic 'read', readwrite");
        assert!(acl.allows(u, "a b/c", Want::Write));
        for (text, says) in [
            ("topic", "line 1: 'topic' without a topic"),
            ("user u\ntopic maybe a", "line 2: 'maybe' is not read"),
            ("topic read a/#/b", "'a/#/b' is not a valid"),
            ("topic read a+", "'a+' is not a valid"),
            ("  # indented", "'#' is not topic"),
            ("users alice", "'users' is not topic"),
            ("user", "'user' without a name"),
        ] {
            let e = Acl::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
