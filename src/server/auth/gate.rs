//! Who may subscribe to what, inside one server worker: the identity of
//! each authenticated connection (`--auth jwt`), the connections of each
//! user (per-user pushes), when each token expires, and the topics
//! `--admin-topics` keeps for tokens with `"admin": true`.
//!
//! Identities live in this side table, not in the connection record, so a
//! server without `--auth` pays nothing per connection.

use crate::server::auth::jwt::{self, Claims, Verifier};
use crate::server::auth::mosquitto::{Files, Refused, Subject, Want};
use crate::server::auth::scope;
use crate::server::close::Close;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::rc::Rc;

/// A subscription the token does not allow (or an admin-only topic).
pub(crate) const NOT_PERMITTED: &str = "not_permitted";
/// A refresh token for another user than the connection's.
#[cfg(test)]
pub(crate) const OTHER_USER: &str = "auth_other_user";

/// Stale expiry entries tolerated beyond one per identity before the heap
/// is rebuilt (each rebuild is O(identities), so it happens at most once
/// per this many refreshes or closes).
const STALE_SLACK: usize = 1024;

/// One authenticated connection.
struct Identity {
    gen: u32,
    user: Rc<str>,
    /// Its place in `by_user[user]` (so a close costs O(1) however many
    /// connections the user has).
    pos: usize,
    exp: u64,
    topics: Rc<[Box<str>]>,
    info: Option<Box<str>>,
    admin: bool,
}

/// Identities by slab key: slab keys are dense, so a vector beats a hash
/// map (no hashing, no spare buckets).
#[derive(Default)]
struct Table {
    slots: Vec<Option<Identity>>,
    len: usize,
}

impl Table {
    fn get(&self, key: &usize) -> Option<&Identity> {
        self.slots.get(*key).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, key: &usize) -> Option<&mut Identity> {
        self.slots.get_mut(*key).and_then(Option::as_mut)
    }

    fn insert(&mut self, key: usize, id: Identity) {
        if self.slots.len() <= key {
            self.slots.resize_with(key + 1, || None);
        }
        self.len += self.slots[key].is_none() as usize;
        self.slots[key] = Some(id);
    }

    fn remove(&mut self, key: &usize) -> Option<Identity> {
        let id = self.slots.get_mut(*key)?.take()?;
        self.len -= 1;
        if self.len == 0 {
            self.slots = Vec::new();
        }
        Some(id)
    }
}

#[derive(Default)]
pub(crate) struct Gate {
    /// `--auth jwt`: every connection must show a token.
    verifier: Option<Verifier>,
    /// `--admin-topics`: patterns only admin tokens may subscribe to.
    admin_topics: Vec<String>,
    by_key: Table,
    /// Every distinct `topics` claim, shared by the identities that have it
    /// (a million tokens usually carry a handful of distinct lists).
    lists: HashSet<Rc<[Box<str>]>>,
    by_user: HashMap<Rc<str>, Vec<usize>>,
    /// (exp, key, gen), soonest first; stale entries (a refreshed token's
    /// old exp, a closed connection's) are skipped, and the heap is built
    /// anew from the identities once they outnumber the live ones
    /// ([`STALE_SLACK`]): refreshes and closes never grow it for good.
    expiring: BinaryHeap<Reverse<(u64, usize, u32)>>,
    /// `--presence-events` or `--presence-notices`: joins and leaves of
    /// authenticated connections since the worker last took them, netted.
    pub events: Option<PendingPresence>,
    /// `--mqtt-password-file` / `--mqtt-acl-file`: mosquitto's files,
    /// as the supervisor last read them.
    files: Option<Rc<Files>>,
    /// MQTT connections the files let in (slab key -> generation, and
    /// the client id the ACL's `%c` stands for): their subscriptions are
    /// granted and each message they would receive is checked instead.
    by_files: HashMap<usize, (u32, Box<str>)>,
    /// `--mqtt-auth-http`: the rules its backend gave connections it let
    /// in with an `acl` (slab key -> generation, grant).
    by_hook: HashMap<usize, (u32, Rc<super::hook_acl::Grant>)>,
    /// `--mqtt-authz-http`: the backend's answers, questions and the
    /// connections waiting for them.
    pub authz: Option<Box<super::authz::Local>>,
}

/// Joins and leaves not told yet, netted per connection and topic: one
/// that subscribes and leaves again before they are taken tells nobody,
/// so a client flipping a subscription 100,000 times a second makes at
/// most one event per interval instead of 200,000 (each of them a notice
/// to every subscriber, everywhere). At most one entry per subscription a
/// connection gained or lost since the last take: bounded by its
/// subscriptions, whatever the churn.
/// A connection (slab key, generation) and one of its topics.
type Subscription = (usize, u32, Box<str>);
/// Who, joined or left, and the order it was noted in.
type Change = (Rc<str>, bool, u64);

#[derive(Default)]
pub(crate) struct PendingPresence {
    /// (key, gen, topic) -> (user, joined, when noted): the change still
    /// to tell, told in the order the changes were noted.
    changed: HashMap<Subscription, Change>,
    /// Changes noted so far (their order).
    noted: u64,
}

impl PendingPresence {
    fn note(&mut self, key: usize, gen: u32, user: &Rc<str>, topic: &str, join: bool) {
        use std::collections::hash_map::Entry;
        match self.changed.entry((key, gen, topic.into())) {
            // Back to where it was when last told: nothing to tell.
            Entry::Occupied(e) if e.get().1 != join => {
                e.remove();
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(v) => {
                self.noted += 1;
                v.insert((user.clone(), join, self.noted));
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// The net changes since the last take, in the order they were noted.
    pub(crate) fn take(&mut self) -> Vec<PresenceEvent> {
        let mut changed: Vec<_> = std::mem::take(&mut self.changed).into_iter().collect();
        changed.sort_unstable_by_key(|(_, (_, _, noted))| *noted);
        changed.into_iter().map(|((key, gen, topic), (user, join, _))| PresenceEvent { key, gen, user, topic, join }).collect()
    }
}

/// An authenticated connection subscribed to (join) or left a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PresenceEvent {
    pub key: usize,
    pub gen: u32,
    pub user: Rc<str>,
    pub topic: Box<str>,
    pub join: bool,
}

/// Unix seconds now.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Gate {
    pub(crate) fn new(key: Option<&jwt::JwtKey>, expected: &jwt::Expected, admin_topics: Vec<String>) -> Result<Gate, String> {
        let verifier = key.map(|k| Verifier::new(k, expected)).transpose()?;
        Ok(Gate { verifier, admin_topics, ..Default::default() })
    }

    /// Whether connections must authenticate.
    pub(crate) fn required(&self) -> bool {
        self.verifier.is_some()
    }

    /// `--auth jwt`'s key changed: tokens shown from now on are
    /// verified with `v` (admitted connections keep what they showed).
    pub(crate) fn set_verifier(&mut self, v: Verifier) {
        if self.verifier.is_some() {
            self.verifier = Some(v);
        }
    }

    /// mosquitto's files now in force (MQTT clients log in by them).
    pub(crate) fn files(&self) -> Option<&Files> {
        self.files.as_deref()
    }

    /// New files from the supervisor: the connections whose user they no
    /// longer hold, to close.
    pub(crate) fn set_files(&mut self, files: Files) -> Vec<(usize, u32)> {
        let gone =
            self.by_files.iter().filter(|(key, _)| self.by_key.get(key).is_some_and(|id| !files.knows(&id.user))).map(|(key, (gen, _))| (*key, *gen)).collect();
        self.files = Some(Rc::new(files));
        gone
    }

    /// An MQTT CONNECT by mosquitto's files: connection `key` (generation
    /// `gen`) is `user` (anonymous: None), client id `client_id`, if the
    /// password file lets it in. Err: why not. Call only with [`Gate::files`].
    pub(crate) fn login(&mut self, key: usize, gen: u32, user: Option<&str>, password: Option<&[u8]>, client_id: &str) -> Result<(), Close> {
        let files = self.files.clone().ok_or(Close::AuthOff)?;
        let who = files.login(user, password).map_err(|r| match r {
            Refused::UnknownUser => Close::MqttUnknownUser,
            Refused::BadPassword => Close::MqttBadPassword,
            Refused::Anonymous => Close::MqttAnonymousRefused,
        })?;
        match who {
            // The user owns its client ids and sessions, as a token's sub does.
            Some(u) => self.admit(key, gen, Claims { sub: u.to_string(), exp: u64::MAX, topics: Vec::new(), info: None, admin: false }),
            None => self.forget(key),
        }
        self.by_files.insert(key, (gen, client_id.into()));
        Ok(())
    }

    /// What the `--mqtt-auth-http` backend granted connection `key` (of
    /// generation `gen`): its user name the connection's identity, its
    /// `expire_at` when it is closed, `is_superuser` past `--admin-topics`,
    /// its rules what it may publish and subscribe to. A connection
    /// without a user name given an expiry or superuser is admitted under
    /// the empty name.
    pub(crate) fn grant(&mut self, key: usize, gen: u32, g: super::hook_acl::Grant) {
        if !g.user.is_empty() || g.expire_at.is_some() || g.superuser {
            let claims = Claims { sub: g.user.clone(), exp: g.expire_at.unwrap_or(u64::MAX), topics: Vec::new(), info: None, admin: g.superuser };
            self.admit(key, gen, claims);
        }
        if g.rules.is_some() && !g.superuser {
            self.by_hook.insert(key, (gen, Rc::new(g)));
        }
    }

    /// The backend's rules for connection `key`, if it gave any.
    fn hook_rules(&self, key: usize) -> Option<&super::hook_acl::Grant> {
        if self.by_hook.is_empty() {
            return None;
        }
        self.by_hook.get(&key).map(|(_, g)| &**g)
    }

    /// Whether connections' identities may expire (a token's exp, a hook's expire_at).
    pub(crate) fn expires(&self) -> bool {
        !self.expiring.is_empty()
    }

    /// Whether connection `key` may publish to `topic`: by the ACL for a
    /// connection the files let in, by the rules an `--mqtt-auth-http`
    /// backend gave, else as [`Gate::permits`] says.
    pub(crate) fn may_publish(&self, key: usize, topic: &str) -> Result<(), Close> {
        if let Some(g) = self.hook_rules(key) {
            return if g.may_publish(topic) { Ok(()) } else { Err(Close::MqttAclDenied) };
        }
        match self.subject(key) {
            Some((files, who)) if files.allows(who, topic, Want::Write) => Ok(()),
            Some(_) => Err(Close::MqttAclDenied),
            None => self.permits(key, topic),
        }
    }

    /// Whether connection `key` may receive a message of `topic` (its
    /// subscription was granted whatever the ACL, as mosquitto grants
    /// it): the ACL's read access for a connection the files let in;
    /// any other was checked when it subscribed.
    pub(crate) fn may_read(&self, key: usize, topic: &str) -> bool {
        self.subject(key).is_none_or(|(files, who)| files.allows(who, topic, Want::Read))
    }

    /// The files and connection `key` as their ACL sees it.
    fn subject(&self, key: usize) -> Option<(&Files, Subject<'_>)> {
        if self.by_files.is_empty() {
            return None;
        }
        let (_, client_id) = self.by_files.get(&key)?;
        let files = self.files.as_deref()?;
        Some((files, Subject { user: self.by_key.get(&key).map(|i| &*i.user), client_id }))
    }

    /// Check a token; Err: why it is refused.
    pub(crate) fn verify(&self, token: Option<&str>) -> Result<Claims, Close> {
        let v = self.verifier.as_ref().ok_or(Close::AuthOff)?;
        v.verify(token.unwrap_or(""))
    }

    /// Connection `key` (of generation `gen`) is who `claims` say.
    pub(crate) fn admit(&mut self, key: usize, gen: u32, claims: Claims) {
        self.forget(key);
        let user: Rc<str> = match self.by_user.get_key_value(claims.sub.as_str()) {
            Some((u, _)) => u.clone(),
            None => claims.sub.as_str().into(),
        };
        let keys = self.by_user.entry(user.clone()).or_default();
        keys.push(key);
        let pos = keys.len() - 1;
        self.expiring.push(Reverse((claims.exp, key, gen)));
        self.compact_expiring();
        let id = Identity {
            gen,
            user,
            pos,
            exp: claims.exp,
            topics: self.list(claims.topics),
            info: claims.info.map(|v| v.to_string().into_boxed_str()),
            admin: claims.admin,
        };
        self.by_key.insert(key, id);
    }

    /// A fresher token for an authenticated connection: its expiry and
    /// permissions are the new token's. Err: a token for another user.
    pub(crate) fn refresh(&mut self, key: usize, claims: Claims) -> Result<u64, Close> {
        let id = self.by_key.get_mut(&key).ok_or(Close::AuthMissing)?;
        if *id.user != *claims.sub {
            return Err(Close::AuthOtherUser);
        }
        id.exp = claims.exp;
        let old = std::mem::replace(&mut id.topics, Rc::from(Vec::new()));
        let new = self.list(claims.topics);
        self.unlist(old);
        let id = self.by_key.get_mut(&key).expect("looked up above");
        id.topics = new;
        id.info = claims.info.map(|v| v.to_string().into_boxed_str());
        id.admin = claims.admin;
        let gen = id.gen;
        self.expiring.push(Reverse((claims.exp, key, gen)));
        self.compact_expiring();
        Ok(claims.exp)
    }

    /// Rebuild the expiry heap from the identities once stale entries
    /// outnumber them (see `expiring`).
    fn compact_expiring(&mut self) {
        if self.expiring.len() <= 2 * self.by_key.len + STALE_SLACK {
            return;
        }
        let live = self.by_key.slots.iter().enumerate().filter_map(|(key, id)| id.as_ref().map(|i| Reverse((i.exp, key, i.gen))));
        self.expiring = live.collect();
    }

    /// Connection `key` joined (or left) `topic`: an event, if asked for
    /// and the connection has a user.
    pub(crate) fn joined(&mut self, key: usize, topic: &str, join: bool) {
        let Some(events) = &mut self.events else { return };
        let Some(id) = self.by_key.get(&key) else { return };
        events.note(key, id.gen, &id.user, topic, join);
    }

    /// The shared copy of a `topics` claim.
    fn list(&mut self, topics: Vec<String>) -> Rc<[Box<str>]> {
        let v: Vec<Box<str>> = topics.into_iter().map(String::into_boxed_str).collect();
        if let Some(l) = self.lists.get(v.as_slice()) {
            return l.clone();
        }
        let l: Rc<[Box<str>]> = v.into();
        self.lists.insert(l.clone());
        l
    }

    /// An identity let go of its list: forget the list when nobody else has it.
    fn unlist(&mut self, l: Rc<[Box<str>]>) {
        // Held by the set, `l` and nobody else.
        if Rc::strong_count(&l) == 2 {
            self.lists.remove(&*l);
        }
    }

    /// The connection closed.
    pub(crate) fn forget(&mut self, key: usize) {
        if !self.by_files.is_empty() {
            self.by_files.remove(&key);
        }
        if !self.by_hook.is_empty() {
            self.by_hook.remove(&key);
        }
        let Some(Identity { user, pos, topics, .. }) = self.by_key.remove(&key) else { return };
        self.unlist(topics);
        if self.by_key.len == 0 {
            self.expiring = BinaryHeap::new();
        } else {
            self.compact_expiring();
        }
        let Some(keys) = self.by_user.get_mut(&user) else { return };
        keys.swap_remove(pos);
        match keys.get(pos) {
            Some(moved) => {
                if let Some(m) = self.by_key.get_mut(moved) {
                    m.pos = pos;
                }
            }
            None if keys.is_empty() => {
                self.by_user.remove(&user);
            }
            None => {}
        }
    }

    /// Whether connection `key` may subscribe (or publish) to `name`: a
    /// topic, or an MQTT filter standing for every topic it can match
    /// (`scope.rs`): one that could match an `--admin-topics` topic needs
    /// an admin token, and with `--auth` every topic it matches must be
    /// in the token's `topics`.
    pub(crate) fn permits(&self, key: usize, name: &str) -> Result<(), Close> {
        let id = self.by_key.get(&key);
        let admin = id.is_some_and(|i| i.admin);
        if !admin && self.admin_topics.iter().any(|p| scope::touches(p, name)) {
            return Err(Close::NotPermitted);
        }
        if let Some(g) = self.hook_rules(key) {
            return if g.may_subscribe(name) { Ok(()) } else { Err(Close::NotPermitted) };
        }
        // mosquitto's files: granted, and what it would receive checked.
        if !self.required() || self.by_files.contains_key(&key) {
            return Ok(());
        }
        match id {
            Some(i) if i.admin || scope::within(i.topics.iter().map(|p| &**p), name) => Ok(()),
            _ => Err(Close::NotPermitted),
        }
    }

    /// Connections whose token expired by `now` (unix seconds), each once.
    pub(crate) fn expired(&mut self, now: u64) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        while let Some(Reverse((exp, key, gen))) = self.expiring.peek().copied() {
            if exp > now {
                break;
            }
            self.expiring.pop();
            // A refreshed or replaced identity left this entry behind.
            if self.by_key.get(&key).is_some_and(|i| i.gen == gen && i.exp == exp) {
                out.push((key, gen));
            }
        }
        out
    }

    /// The user of connection `key` (authenticated ones).
    pub(crate) fn user_of(&self, key: usize) -> Option<&str> {
        self.by_key.get(&key).map(|i| &*i.user)
    }

    /// The `info` claim of connection `key`'s token (JSON text).
    pub(crate) fn info_of(&self, key: usize) -> Option<&str> {
        self.by_key.get(&key).and_then(|i| i.info.as_deref())
    }

    /// The connections of `user` in this worker.
    pub(crate) fn conns_of(&self, user: &str) -> &[usize] {
        self.by_user.get(user).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Authenticated connections in this worker.
    pub(crate) fn len(&self) -> usize {
        self.by_key.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_key.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(sub: &str, exp: u64, topics: &[&str]) -> Claims {
        Claims { sub: sub.into(), exp, topics: topics.iter().map(|t| t.to_string()).collect(), info: None, admin: false }
    }

    #[test]
    fn identities_permissions_and_expiry() {
        let key = jwt::JwtKey::Secret(vec![7; 32]);
        let mut g = Gate::new(Some(&key), &Default::default(), vec!["ops.*".into()]).unwrap();
        assert_eq!(g.permits(1, "chat.a"), Err(Close::NotPermitted), "no identity yet");
        g.admit(1, 10, claims("alice", 100, &["chat.*"]));
        g.admit(2, 11, claims("alice", 200, &["*"]));
        g.admit(3, 12, claims("bob", 150, &["news"]));
        assert_eq!(g.permits(1, "chat.a"), Ok(()));
        assert_eq!(g.permits(1, "news"), Err(Close::NotPermitted));
        assert_eq!(g.permits(2, "ops.x"), Err(Close::NotPermitted), "admin topics need admin, even with *");
        assert_eq!(g.conns_of("alice"), &[1, 2]);
        assert_eq!(g.refresh(3, claims("alice", 999, &[])), Err(Close::AuthOtherUser));
        assert_eq!(g.refresh(1, claims("alice", 300, &["chat.*"])), Ok(300));
        assert_eq!(g.expired(160), vec![(3, 12)], "alice's first token was refreshed");
        g.forget(2);
        assert_eq!(g.conns_of("alice"), &[1]);
        // Many connections of one user: each close is O(1) and keeps the index right.
        for k in 100..200 {
            g.admit(k, 1, claims("carol", 999, &[]));
        }
        for k in (100..200).step_by(3) {
            g.forget(k);
        }
        let mut left: Vec<usize> = g.conns_of("carol").to_vec();
        left.sort();
        assert_eq!(left, (100..200).filter(|k| (k - 100) % 3 != 0).collect::<Vec<_>>());
        for k in 100..200 {
            g.forget(k);
        }
        assert!(g.conns_of("carol").is_empty());
        assert_eq!(g.expired(1000), vec![(1, 10)]);
        g.forget(1);
        g.forget(3);
        assert!(g.is_empty() && g.by_user.is_empty() && g.lists.is_empty(), "every list forgotten with its last identity");
    }

    #[test]
    fn admin_topics_without_auth() {
        let g = Gate::new(None, &Default::default(), vec!["ops".into()]).unwrap();
        assert_eq!(g.permits(1, "ops"), Err(Close::NotPermitted));
        assert_eq!(g.permits(1, "chat"), Ok(()));
        assert_eq!(g.permits(1, "#"), Err(Close::NotPermitted), "# matches ops");
        assert_eq!(g.permits(1, "+"), Err(Close::NotPermitted));
        assert_eq!(g.permits(1, "chat/#"), Ok(()));
    }

    /// Issue 62, finding 2: filters are judged by every topic they can
    /// match, not as strings.
    #[test]
    fn filters_are_permitted_only_when_every_topic_they_match_is() {
        let key = jwt::JwtKey::Secret(vec![7; 32]);
        let mut g = Gate::new(Some(&key), &Default::default(), vec!["ops/*".into()]).unwrap();
        g.admit(1, 1, claims("eve", 999, &["*"]));
        g.admit(2, 1, claims("sam", 999, &["sensors/*"]));
        let mut boss = claims("boss", 999, &[]);
        boss.admin = true;
        g.admit(3, 1, boss);
        for f in ["ops/secret", "#", "+/secret", "+/#"] {
            assert_eq!(g.permits(1, f), Err(Close::NotPermitted), "eve {f}");
        }
        assert_eq!(g.permits(1, "news/#"), Ok(()));
        assert_eq!(g.permits(2, "sensors/#"), Err(Close::NotPermitted), "sensors/# matches sensors");
        assert_eq!(g.permits(2, "sensors"), Err(Close::NotPermitted));
        assert_eq!(g.permits(2, "sensors/+/temp"), Ok(()));
        assert_eq!(g.permits(2, "sensors/a/#"), Ok(()));
        assert_eq!(g.permits(3, "#"), Ok(()), "an admin token hears everything");
    }

    /// 400,000 refreshes of one connection and 100,000 connections that
    /// came and went leave the expiry heap near the live count, and the
    /// one live token still expires once (issue 42, finding 10).
    #[test]
    fn refreshes_and_closes_do_not_grow_the_expiry_heap() {
        let key = jwt::JwtKey::Secret(vec![7; 32]);
        let mut g = Gate::new(Some(&key), &Default::default(), vec![]).unwrap();
        g.admit(1, 1, claims("alice", 1_000_000, &["*"]));
        for i in 0..400_000 {
            g.refresh(1, claims("alice", 1_000_000 + i, &["*"])).unwrap();
        }
        assert!(g.expiring.len() <= 2 + STALE_SLACK, "{} entries for one connection", g.expiring.len());
        for k in 2..100_002 {
            g.admit(k, 1, claims("bob", 5, &[]));
            g.forget(k);
        }
        assert!(g.expiring.len() <= 2 + STALE_SLACK, "{} entries after closes", g.expiring.len());
        assert_eq!(g.expired(u64::MAX), vec![(1, 1)]);
        g.forget(1);
        assert!(g.expiring.is_empty());
    }

    /// A connection flipping one subscription many times between two
    /// takes makes at most one event: its net change (issue 42, finding 2).
    #[test]
    fn presence_flips_are_netted_between_takes() {
        let key = jwt::JwtKey::Secret(vec![7; 32]);
        let mut g = Gate::new(Some(&key), &Default::default(), vec![]).unwrap();
        g.events = Some(PendingPresence::default());
        g.admit(1, 1, claims("alice", 999, &["*"]));
        g.admit(2, 1, claims("bob", 999, &["*"]));
        for _ in 0..150_000 {
            g.joined(1, "news", true);
            g.joined(1, "news", false);
        }
        assert!(g.events.as_mut().unwrap().take().is_empty(), "a flip storm that ends where it began tells nothing");
        for _ in 0..1000 {
            g.joined(1, "news", true);
            g.joined(1, "news", false);
        }
        g.joined(1, "news", true);
        g.joined(2, "sport", true);
        let got: Vec<(usize, String, bool)> = g.events.as_mut().unwrap().take().into_iter().map(|e| (e.key, e.topic.to_string(), e.join)).collect();
        assert_eq!(got, vec![(1, "news".into(), true), (2, "sport".into(), true)], "in the order noted");
        g.joined(1, "news", false);
        let left: Vec<bool> = g.events.as_mut().unwrap().take().into_iter().map(|e| e.join).collect();
        assert_eq!(left, vec![false], "a leave after the join was told is told");
    }
}
