//! What an `--mqtt-auth-http` backend grants with its "allow", as EMQX's
//! HTTP authentication answers carry it: `is_superuser`, `expire_at` (Unix
//! seconds: the connection is closed then) and `acl`, the client's own
//! rules, so a backend written for EMQX decides what each client may
//! publish and subscribe to without a request per message:
//!
//! ```json
//! {"result": "allow", "is_superuser": false, "expire_at": 1893456000,
//!  "acl": [{"permission": "allow", "action": "publish", "topic": "tele/${clientid}/#"},
//!          {"permission": "allow", "action": "subscribe", "topics": ["cmd/${username}/#", "eq news/#"]},
//!          {"permission": "deny", "action": "all", "topic": "#"}]}
//! ```
//!
//! **Deciding**, as EMQX does, the rules in their order, the first that
//! matches deciding; with `acl` given, nothing matched refuses (fail
//! closed; EMQX would ask its next authorizer). `action` is `publish`
//! (`pub`), `subscribe` (`sub`) or `all`; `topic` or `topics` are MQTT
//! filters, `eq F` matching the filter F itself only, `${username}` and
//! `${clientid}` standing for the client's (a rule whose placeholder would
//! bring a `+`, `#` or `/` in is dropped if it allows, kept whole if it
//! denies). A publish matches a rule whose filter matches its topic. A
//! subscription is allowed by an allow rule whose filter holds every topic
//! the subscribed filter can match, and refused by a deny rule that shares
//! a topic with it, so a wildcard never slips past a deny rule. A rule with
//! conditions megaconn does not check (`qos`, `retain`, `ipaddr`...) never
//! allows and always denies. Without `acl` (and for a superuser) nothing is
//! refused by these rules.

use crate::proto::mqtt::topic;
use serde::{Deserialize, Serialize};

/// The most rules an answer may carry (more: the answer is refused as
/// not its JSON).
pub(crate) const MAX_RULES: usize = 256;

/// What an answer granted a client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grant {
    /// The CONNECT's user name (the connection's identity; set by [`Grant::bind`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub superuser: bool,
    /// Unix seconds the connection ends at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_at: Option<u64>,
    /// The client's rules (None: no `acl` in the answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<Rule>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Permission {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Action {
    #[serde(rename = "publish", alias = "pub")]
    Publish,
    #[serde(rename = "subscribe", alias = "sub")]
    Subscribe,
    #[serde(rename = "all")]
    All,
}

/// One rule as the answer gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    pub permission: Permission,
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<String>,
    /// Conditions not checked here (qos, retain, ...): the rule never
    /// allows and always denies.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchecked: bool,
}

/// An answer's rule as read: what it holds beyond the fields above marks it.
#[derive(Deserialize)]
struct RawRule {
    permission: Permission,
    action: Action,
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// Read an answer's `acl` (Err: not rules as EMQX writes them).
pub(crate) fn rules(v: serde_json::Value) -> Result<Vec<Rule>, String> {
    let raw: Vec<RawRule> = serde_json::from_value(v).map_err(|e| e.to_string())?;
    if raw.len() > MAX_RULES {
        return Err(format!("{} rules, more than {MAX_RULES}", raw.len()));
    }
    Ok(raw.into_iter().map(|r| Rule { permission: r.permission, action: r.action, topic: r.topic, topics: r.topics, unchecked: !r.rest.is_empty() }).collect())
}

impl Grant {
    /// `${username}` and `${clientid}` in the rules replaced by the client's.
    pub(crate) fn bind(mut self, username: &str, client_id: &str) -> Grant {
        self.user = username.to_string();
        let Some(rules) = self.rules.take() else { return self };
        let unsafe_value = |v: &str| v.contains(['+', '#', '/']);
        let bad = (unsafe_value(username), unsafe_value(client_id));
        let mut out = Vec::with_capacity(rules.len());
        for mut r in rules {
            let mut filters: Vec<String> = r.topic.take().into_iter().chain(std::mem::take(&mut r.topics)).collect();
            let risky = filters.iter().any(|f| (bad.0 && f.contains("${username}")) || (bad.1 && f.contains("${clientid}")));
            if risky && r.permission == Permission::Allow {
                continue;
            }
            for f in &mut filters {
                *f = f.replace("${username}", username).replace("${clientid}", client_id);
            }
            r.topics = filters;
            out.push(r);
        }
        self.rules = Some(out);
        self
    }

    /// Whether the client may publish to `topic`.
    pub(crate) fn may_publish(&self, topic: &str) -> bool {
        self.decide(Action::Publish, |f, _| match f.strip_prefix("eq ") {
            Some(exact) => exact == topic,
            None => topic::matches(f, topic),
        })
    }

    /// Whether the client may subscribe to `filter` (a topic or an MQTT filter).
    pub(crate) fn may_subscribe(&self, filter: &str) -> bool {
        self.decide(Action::Subscribe, |f, r| match (f.strip_prefix("eq "), r.permission) {
            (Some(exact), _) => exact == filter,
            (None, Permission::Allow) => holds(f, filter),
            (None, Permission::Deny) => overlap(f, filter),
        })
    }

    fn decide(&self, want: Action, matches: impl Fn(&str, &Rule) -> bool) -> bool {
        let Some(rules) = &self.rules else { return true };
        if self.superuser {
            return true;
        }
        for r in rules {
            if r.action != want && r.action != Action::All {
                continue;
            }
            if r.topics.iter().chain(r.topic.iter()).any(|f| matches(f, r)) {
                match (r.permission, r.unchecked) {
                    (Permission::Deny, _) => return false,
                    (Permission::Allow, false) => return true,
                    // An allow under conditions not checked: passed over.
                    (Permission::Allow, true) => {}
                }
            }
        }
        false
    }
}

/// Whether every topic `filter` can match is matched by `rule` (both MQTT
/// filters; `a/#` holds `a` too, a wildcard first level no `$` topic).
fn holds(rule: &str, filter: &str) -> bool {
    if filter.starts_with('$') && rule.starts_with(['+', '#']) {
        return false;
    }
    let (mut r, mut f) = (rule.split('/'), filter.split('/'));
    loop {
        match (r.next(), f.next()) {
            (Some("#"), _) => return true,
            (Some(_), Some("#")) => return false,
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b && b != "+" => {}
            (Some(_), Some(_)) => return false,
            (None, None) => return true,
            // `a/#` holds `a`: what is left of the rule is only `#`.
            (Some(rest), None) => return rest == "#" && r.next().is_none(),
            (None, Some(_)) => return false,
        }
    }
}

/// Whether some topic is matched by both filters.
fn overlap(a: &str, b: &str) -> bool {
    let dollar = |s: &str| s.starts_with('$');
    let wild = |s: &str| s.starts_with(['+', '#']);
    if (dollar(a) && wild(b)) || (dollar(b) && wild(a)) {
        return false;
    }
    let (mut x, mut y) = (a.split('/'), b.split('/'));
    loop {
        match (x.next(), y.next()) {
            (Some("#"), _) | (_, Some("#")) => return true,
            (Some("+"), Some(_)) | (Some(_), Some("+")) => {}
            (Some(p), Some(q)) if p == q => {}
            (Some(_), Some(_)) => return false,
            (None, None) => return true,
            (Some(rest), None) | (None, Some(rest)) => return rest == "#",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(json: &str) -> Grant {
        Grant { rules: Some(rules(serde_json::from_str(json).unwrap()).unwrap()), ..Grant::default() }
    }

    #[test]
    fn publishes_are_decided_by_the_first_rule_that_matches() {
        let g = grant(
            r##"[{"permission":"deny","action":"publish","topic":"tele/secret"},
                {"permission":"allow","action":"pub","topics":["tele/#","eq cmd/+"]},
                {"permission":"allow","action":"subscribe","topic":"x/#"}]"##,
        );
        assert!(g.may_publish("tele/a/b") && g.may_publish("tele") && g.may_publish("cmd/+"));
        assert!(!g.may_publish("tele/secret"), "the deny rule comes first");
        assert!(!g.may_publish("cmd/a"), "eq matches the filter itself only");
        assert!(!g.may_publish("x/1"), "a subscribe rule does not let it publish");
        assert!(!g.may_publish("other"), "nothing matched: refused");
    }

    #[test]
    fn a_wildcard_subscription_never_slips_past_a_deny_rule() {
        let g = grant(
            r##"[{"permission":"deny","action":"all","topic":"news/secret/#"},
                {"permission":"allow","action":"subscribe","topic":"news/#"}]"##,
        );
        assert!(g.may_subscribe("news/sport") && g.may_subscribe("news/sport/+"));
        assert!(!g.may_subscribe("news/#"), "shares news/secret with the deny rule");
        assert!(!g.may_subscribe("news/+/today"), "it can match news/secret/today");
        assert!(!g.may_subscribe("+/secret/x") && !g.may_subscribe("#"));
        assert!(!g.may_subscribe("weather"), "no rule holds it");
        let g = grant(r##"[{"permission":"allow","action":"subscribe","topic":"a/+"}]"##);
        assert!(g.may_subscribe("a/b") && g.may_subscribe("a/+"));
        assert!(!g.may_subscribe("a/#") && !g.may_subscribe("a") && !g.may_subscribe("a/b/c"), "a/+ does not hold them");
    }

    #[test]
    fn containment_and_overlap_follow_mqtt_matching() {
        assert!(holds("a/#", "a") && holds("a/#", "a/+/c") && holds("#", "x/#") && holds("+/b", "x/b"));
        assert!(!holds("a/+", "a/#") && !holds("#", "$SYS/x") && !holds("a/b", "a/+"));
        assert!(overlap("a/#", "a") && overlap("+/b", "a/+") && overlap("a/b/#", "#") && !overlap("a/b", "a/c") && !overlap("#", "$SYS/x"));
        assert!(!overlap("a/b", "a/b/c") && overlap("a/+/#", "a/x"));
    }

    #[test]
    fn placeholders_are_the_clients_and_cannot_widen_a_rule() {
        let g = grant(r##"[{"permission":"allow","action":"all","topic":"dev/${clientid}/#"},{"permission":"allow","action":"all","topic":"u/${username}"}]"##);
        let bound = g.clone().bind("alice", "d1");
        assert!(bound.may_publish("dev/d1/t") && bound.may_subscribe("u/alice"));
        assert!(!bound.may_publish("dev/d2/t"));
        let sneaky = g.bind("#", "d1");
        assert!(!sneaky.may_subscribe("u/#") && !sneaky.may_publish("u/bob"), "a user name of # is not a wildcard here");
        assert!(sneaky.may_publish("dev/d1/t"), "the rule without it stays");
    }

    #[test]
    fn rules_with_conditions_not_checked_never_allow_and_always_deny() {
        let g = grant(
            r##"[{"permission":"allow","action":"publish","topic":"a","qos":[0]},{"permission":"deny","action":"publish","topic":"b","retain":true},{"permission":"allow","action":"all","topic":"#"}]"##,
        );
        assert!(!g.may_publish("b"), "the deny rule holds whatever its condition");
        assert!(g.may_publish("a"), "the conditional allow is passed over; # allows");
        let g = grant(r##"[{"permission":"allow","action":"publish","topic":"a","qos":[0]}]"##);
        assert!(!g.may_publish("a"));
    }

    #[test]
    fn a_superuser_or_an_answer_without_acl_is_not_limited_by_rules() {
        assert!(Grant::default().may_publish("any") && Grant::default().may_subscribe("#"));
        let mut g = grant(r##"[{"permission":"deny","action":"all","topic":"#"}]"##);
        assert!(!g.may_publish("a"));
        g.superuser = true;
        assert!(g.may_publish("a") && g.may_subscribe("#"));
        assert!(rules(serde_json::json!([{"permission": "maybe", "action": "all", "topic": "#"}])).is_err());
        assert!(rules(serde_json::json!(vec![serde_json::json!({"permission": "allow", "action": "all", "topic": "#"}); MAX_RULES + 1])).is_err());
    }
}
