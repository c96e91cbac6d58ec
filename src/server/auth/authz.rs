//! `--mqtt-authz-http URL`, a worker's side: each MQTT PUBLISH, each
//! SUBSCRIBE's filters and each CONNECT's will are decided by the
//! application's HTTP backend, asked as EMQX's HTTP authorizer asks (the
//! supervisor's `broker/auth_hook.rs` asks it; [`Request`] is the body).
//!
//! A packet whose decisions are not all known waits unread in the
//! connection's partial input, as a CONNECT waits for its claim: its
//! questions go to the supervisor after the read ([`Local::take_asks`]),
//! the connection is not read meanwhile (TCP holds its client back), and
//! the answers bring it back: read again from that packet on
//! (`worker/mqtt_session.rs`). Answers are kept `--mqtt-auth-http-cache`
//! in the worker, so a client publishing to the same topic again asks
//! nobody; a packet's own answers stay with its connection until it is
//! read, whatever the cache keeps.
//!
//! Bounded: [`CACHE_ENTRIES`] answers kept, [`MAX_ASKED`] questions in
//! flight (past it a question is denied at once); a connection waits at
//! most its deadline (the hook's timeout and 5 s), then it is closed
//! (`mqtt_authz_unanswered`).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Answers a worker keeps at most (emptied of expired ones, then wholly).
pub(crate) const CACHE_ENTRIES: usize = 65_536;
/// Questions a worker has in flight at most.
pub(crate) const MAX_ASKED: usize = 16_384;

/// What a client wants to do with a topic (EMQX's `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
    Publish,
    Subscribe,
}

/// What one decision is about: who (from where), which topic (a
/// subscription's filter, without a `$share/GROUP/` prefix), what, at
/// which QoS and retain flag (a subscription's: false).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct About {
    pub username: String,
    pub clientid: String,
    pub peerhost: String,
    pub topic: String,
    pub action: Action,
    pub qos: u8,
    pub retain: bool,
}

/// The backend's decision on an [`About`], supervisor to worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Answer {
    #[serde(flatten)]
    pub about: About,
    pub allow: bool,
    /// The backend's own answer, kept; false for what it could not say
    /// (a timeout, an error: decided by failing closed or open), which
    /// decides only the packets waiting on it.
    #[serde(default)]
    pub keep: bool,
}

/// The body the backend is POSTed: EMQX's authorization request.
#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    pub username: &'a str,
    pub clientid: &'a str,
    pub peerhost: &'a str,
    pub protocol: &'static str,
    pub topic: &'a str,
    pub action: Action,
    pub qos: u8,
    pub retain: bool,
}

impl<'a> Request<'a> {
    pub(crate) fn of(b: &'a About) -> Request<'a> {
        Request {
            username: &b.username,
            clientid: &b.clientid,
            peerhost: &b.peerhost,
            protocol: "mqtt",
            topic: &b.topic,
            action: b.action,
            qos: b.qos,
            retain: b.retain,
        }
    }
}

/// Who asks: a connection's user name, client id and address.
#[derive(Debug, Clone, Default)]
pub(crate) struct Who {
    pub username: Rc<str>,
    pub clientid: Rc<str>,
    pub peerhost: Rc<str>,
}

/// One item of a packet: a topic (a subscription's filter), the action,
/// QoS, retain.
pub(crate) type Item<'a> = (&'a str, Action, u8, bool);

/// [`About`] borrowed: what the cache is looked up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key<'a> {
    username: &'a str,
    clientid: &'a str,
    peerhost: &'a str,
    topic: &'a str,
    action: Action,
    qos: u8,
    retain: bool,
}

impl<'a> Key<'a> {
    fn of(who: &'a Who, &(topic, action, qos, retain): &Item<'a>) -> Key<'a> {
        Key { username: &who.username, clientid: &who.clientid, peerhost: &who.peerhost, topic, action, qos, retain }
    }

    fn to_owned(self) -> About {
        About {
            username: self.username.into(),
            clientid: self.clientid.into(),
            peerhost: self.peerhost.into(),
            topic: self.topic.into(),
            action: self.action,
            qos: self.qos,
            retain: self.retain,
        }
    }
}

impl<'a> From<&'a About> for Key<'a> {
    fn from(a: &'a About) -> Key<'a> {
        Key { username: &a.username, clientid: &a.clientid, peerhost: &a.peerhost, topic: &a.topic, action: a.action, qos: a.qos, retain: a.retain }
    }
}

/// What [`Local::decide`] says of a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every item decided: the places of those denied (none: empty, no allocation).
    Decided(Vec<usize>),
    /// Some are asked: the packet waits.
    Wait,
}

/// A connection whose packet waits for answers.
#[derive(Debug)]
struct Wait {
    gen: u32,
    since: Instant,
    /// Waiting now (not while it is read again).
    held: bool,
    /// Not read while it waits (its read stopped).
    paused: bool,
    /// The answers to its questions, for its held packet.
    answers: Vec<(About, bool)>,
}

/// A worker's answers, questions and waiting connections.
#[derive(Debug)]
pub(crate) struct Local {
    ttl: Duration,
    deadline: Duration,
    /// Answers by the hash of what they are about (compared whole on a
    /// hit), until when each is kept: looked up without an allocation.
    cache: HashMap<u64, Vec<(About, bool, Instant)>>,
    kept: usize,
    hasher: std::collections::hash_map::RandomState,
    /// Connections' user names, client ids (from their CONNECT) and addresses.
    who: HashMap<usize, (u32, Who)>,
    waiting: HashMap<usize, Wait>,
    /// Questions in flight, with the connections waiting on each.
    asked: HashMap<About, (Instant, Vec<(usize, u32)>)>,
    /// Questions made since the last take.
    asks: Vec<About>,
}

impl Local {
    /// Answers kept `ttl`; a connection waits at most `deadline`.
    pub(crate) fn new(ttl: Duration, deadline: Duration) -> Local {
        Local {
            ttl,
            deadline,
            cache: HashMap::new(),
            kept: 0,
            hasher: Default::default(),
            who: HashMap::new(),
            waiting: HashMap::new(),
            asked: HashMap::new(),
            asks: Vec::new(),
        }
    }

    /// Connection `key` (of generation `gen`) logged in as `who`.
    pub(crate) fn connected(&mut self, key: usize, gen: u32, who: Who) {
        self.who.insert(key, (gen, who));
    }

    /// Connection `key`'s user name, client id and address.
    pub(crate) fn who(&self, key: usize) -> Option<&Who> {
        self.who.get(&key).map(|(_, w)| w)
    }

    /// Connection `key` closed.
    pub(crate) fn forget(&mut self, key: usize) {
        self.who.remove(&key);
        self.waiting.remove(&key);
    }

    /// Whether connection `key` has a packet waiting for answers.
    pub(crate) fn waits(&self, key: usize) -> bool {
        self.waiting.get(&key).is_some_and(|w| w.held)
    }

    /// Connection `key`'s read is stopped while it waits; false when it does not wait.
    pub(crate) fn pause(&mut self, key: usize) -> bool {
        match self.waiting.get_mut(&key).filter(|w| w.held) {
            Some(w) => {
                w.paused = true;
                true
            }
            None => false,
        }
    }

    /// Whether each of `items` may be done by connection `key` as
    /// `who`: decided when every answer is known (its packet's own, then
    /// the cache's; no allocation when all are allowed), else the
    /// unknown ones are asked (once however many wait on them) and the
    /// packet waits.
    pub(crate) fn decide(&mut self, key: usize, gen: u32, who: &Who, items: &[Item<'_>], now: Instant) -> Verdict {
        let mut denied = Vec::new();
        let mut missing = false;
        for (i, item) in items.iter().enumerate() {
            let k = Key::of(who, item);
            let own = self.waiting.get(&key).filter(|w| w.gen == gen).and_then(|w| w.answers.iter().find(|(b, _)| Key::from(b) == k)).map(|(_, allow)| *allow);
            let known = own.or_else(|| self.cached(&k, now)).or_else(|| {
                // Past the bound of questions in flight a new one is denied at once.
                (self.asked.len() >= MAX_ASKED && !self.asked.contains_key(&k.to_owned())).then_some(false)
            });
            match known {
                Some(true) => {}
                Some(false) => denied.push(i),
                None => missing = true,
            }
        }
        if !missing {
            if !self.waiting.is_empty() {
                // Read: its answers were for it.
                self.waiting.remove(&key);
            }
            return Verdict::Decided(denied);
        }
        for item in items {
            let k = Key::of(who, item);
            let answered = self.waiting.get(&key).filter(|w| w.gen == gen).is_some_and(|w| w.answers.iter().any(|(b, _)| Key::from(b) == k));
            if answered || self.cached(&k, now).is_some() {
                continue;
            }
            let a = k.to_owned();
            let (_, waiters) = match self.asked.get_mut(&a) {
                Some(w) => w,
                None => {
                    self.asks.push(a.clone());
                    self.asked.entry(a).or_insert_with(|| (now, Vec::new()))
                }
            };
            if !waiters.contains(&(key, gen)) {
                waiters.push((key, gen));
            }
        }
        let w = self.waiting.entry(key).or_insert_with(|| Wait { gen, since: now, held: false, paused: false, answers: Vec::new() });
        if !w.held {
            w.since = now;
        }
        w.held = true;
        Verdict::Wait
    }

    /// A kept answer about `k`, if it has not expired.
    fn cached(&self, k: &Key<'_>, now: Instant) -> Option<bool> {
        let h = self.hasher.hash_one(k);
        self.cache.get(&h)?.iter().find(|(a, _, until)| Key::from(a) == *k && now < *until).map(|(_, allow, _)| *allow)
    }

    /// The questions made since the last take.
    pub(crate) fn take_asks(&mut self) -> Vec<About> {
        std::mem::take(&mut self.asks)
    }

    /// The backend's answers: kept, and handed to the connections waiting
    /// on them; those connections (key, generation, whether their read
    /// was stopped) are to be read again, their packets no longer held.
    pub(crate) fn answered(&mut self, answers: Vec<Answer>, now: Instant) -> Vec<(usize, u32, bool)> {
        let mut resume = Vec::new();
        for Answer { about, allow, keep } in answers {
            for (key, gen) in self.asked.remove(&about).map(|(_, w)| w).unwrap_or_default() {
                let Some(w) = self.waiting.get_mut(&key).filter(|w| w.gen == gen) else { continue };
                w.answers.push((about.clone(), allow));
                if w.held {
                    w.held = false;
                    resume.push((key, gen, std::mem::take(&mut w.paused)));
                }
            }
            if keep {
                self.keep(about, allow, now);
            }
        }
        resume
    }

    fn keep(&mut self, about: About, allow: bool, now: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        if self.kept >= CACHE_ENTRIES {
            self.cache.retain(|_, entries| {
                entries.retain(|(_, _, until)| now < *until);
                !entries.is_empty()
            });
            self.kept = self.cache.values().map(Vec::len).sum();
            if self.kept >= CACHE_ENTRIES {
                self.cache.clear();
                self.kept = 0;
            }
        }
        let h = self.hasher.hash_one(Key::from(&about));
        let entries = self.cache.entry(h).or_default();
        let until = now + self.ttl;
        match entries.iter_mut().find(|(a, _, _)| *a == about) {
            Some(e) => (e.1, e.2) = (allow, until),
            None => {
                entries.push((about, allow, until));
                self.kept += 1;
            }
        }
    }

    /// Connections that waited past their deadline (each once); a
    /// question unanswered that long is forgotten (its answer lost on
    /// the way: the next packet asks again).
    pub(crate) fn overdue(&mut self, now: Instant) -> Vec<(usize, u32)> {
        if !self.asked.is_empty() {
            let deadline = self.deadline;
            self.asked.retain(|_, (at, _)| now.duration_since(*at) <= deadline);
        }
        let late: Vec<(usize, u32)> =
            self.waiting.iter().filter(|(_, w)| w.held && now.duration_since(w.since) > self.deadline).map(|(k, w)| (*k, w.gen)).collect();
        for (k, _) in &late {
            self.waiting.remove(k);
        }
        late
    }

    /// Connections with a packet waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.values().filter(|w| w.held).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Who {
        Who { username: "u".into(), clientid: "c".into(), peerhost: "127.0.0.1".into() }
    }

    fn about(topic: &str, action: Action) -> About {
        About { username: "u".into(), clientid: "c".into(), peerhost: "127.0.0.1".into(), topic: topic.into(), action, qos: 1, retain: false }
    }

    fn item(topic: &str, action: Action) -> Item<'_> {
        (topic, action, 1, false)
    }

    #[test]
    fn an_unknown_decision_is_asked_once_and_its_answer_brings_the_packet_back() {
        let now = Instant::now();
        let (mut l, w) = (Local::new(Duration::from_secs(60), Duration::from_secs(10)), who());
        let a = [item("t/1", Action::Publish)];
        assert_eq!(l.decide(1, 7, &w, &a, now), Verdict::Wait);
        assert_eq!(l.decide(2, 3, &w, &a, now), Verdict::Wait, "another connection waits on the same question");
        assert!(l.waits(1) && l.waits(2) && l.pause(1));
        assert_eq!(l.take_asks(), vec![about("t/1", Action::Publish)], "asked once");
        let mut back = l.answered(vec![Answer { about: about("t/1", Action::Publish), allow: true, keep: true }], now);
        back.sort();
        assert_eq!(back, vec![(1, 7, true), (2, 3, false)]);
        assert!(!l.waits(1));
        assert_eq!(l.decide(1, 7, &w, &a, now), Verdict::Decided(vec![]));
        assert_eq!(l.decide(9, 1, &w, &a, now), Verdict::Decided(vec![]), "kept for others");
        let other = Who { clientid: "d".into(), ..who() };
        assert_eq!(l.decide(9, 1, &other, &a, now), Verdict::Wait, "kept for its client id only");
        l.take_asks();
        let later = now + Duration::from_secs(61);
        assert_eq!(l.decide(8, 1, &w, &a, later), Verdict::Wait, "expired");
    }

    #[test]
    fn without_a_cache_a_packet_still_reads_its_own_answers_however_they_come() {
        let now = Instant::now();
        let (mut l, w) = (Local::new(Duration::ZERO, Duration::from_secs(10)), who());
        let items = [item("a/#", Action::Subscribe), item("b", Action::Subscribe)];
        assert_eq!(l.decide(1, 1, &w, &items, now), Verdict::Wait);
        assert_eq!(l.take_asks().len(), 2);
        assert_eq!(l.answered(vec![Answer { about: about("a/#", Action::Subscribe), allow: false, keep: true }], now), vec![(1, 1, false)]);
        assert_eq!(l.decide(1, 1, &w, &items, now), Verdict::Wait, "b is still out");
        assert!(l.take_asks().is_empty(), "nothing asked twice");
        l.answered(vec![Answer { about: about("b", Action::Subscribe), allow: true, keep: true }], now);
        assert_eq!(l.decide(1, 1, &w, &items, now), Verdict::Decided(vec![0]));
        assert_eq!(l.decide(1, 1, &w, &items, now), Verdict::Wait, "nothing kept: the next packet asks again");
    }

    #[test]
    fn a_connection_waits_no_longer_than_its_deadline_and_questions_are_bounded() {
        let now = Instant::now();
        let (mut l, w) = (Local::new(Duration::from_secs(60), Duration::from_secs(5)), who());
        l.decide(4, 2, &w, &[item("x", Action::Publish)], now);
        assert!(l.overdue(now + Duration::from_secs(5)).is_empty());
        assert_eq!(l.overdue(now + Duration::from_secs(6)), vec![(4, 2)]);
        assert!(!l.waits(4));
        assert!(l.take_asks().len() == 1 && l.asked.is_empty(), "the lost question is forgotten");
        assert_eq!(l.decide(4, 3, &w, &[item("x", Action::Publish)], now), Verdict::Wait);
        assert_eq!(l.take_asks().len(), 1, "and asked again by the next packet");
        for i in 0..MAX_ASKED {
            l.decide(5, 1, &w, &[item(&i.to_string(), Action::Publish)], now);
        }
        assert_eq!(l.decide(6, 1, &w, &[item("one more", Action::Publish)], now), Verdict::Decided(vec![0]), "denied at once past the bound");
    }

    #[test]
    fn what_the_backend_could_not_say_decides_only_the_packets_waiting_on_it() {
        let now = Instant::now();
        let (mut l, w) = (Local::new(Duration::from_secs(60), Duration::from_secs(5)), who());
        let a = [item("t", Action::Publish)];
        l.decide(1, 1, &w, &a, now);
        l.answered(vec![Answer { about: about("t", Action::Publish), allow: false, keep: false }], now);
        assert_eq!(l.decide(1, 1, &w, &a, now), Verdict::Decided(vec![0]), "the waiting packet is denied");
        assert_eq!(l.decide(1, 1, &w, &a, now), Verdict::Wait, "the next one asks again");
    }

    #[test]
    fn the_cache_is_bounded() {
        let now = Instant::now();
        let mut l = Local::new(Duration::from_secs(60), Duration::from_secs(5));
        let answers = (0..CACHE_ENTRIES + 10).map(|i| Answer { about: about(&i.to_string(), Action::Publish), allow: true, keep: true }).collect();
        l.answered(answers, now);
        assert!(l.kept <= CACHE_ENTRIES && l.kept > 0, "{}", l.kept);
        assert_eq!(l.kept, l.cache.values().map(Vec::len).sum::<usize>());
    }

    #[test]
    fn a_closed_connection_is_not_brought_back() {
        let now = Instant::now();
        let (mut l, w) = (Local::new(Duration::from_secs(60), Duration::from_secs(5)), who());
        l.decide(1, 1, &w, &[item("t", Action::Publish)], now);
        l.forget(1);
        assert!(l.answered(vec![Answer { about: about("t", Action::Publish), allow: true, keep: true }], now).is_empty());
    }

    #[test]
    fn the_request_is_emqxs() {
        let ask = about("t/1", Action::Subscribe);
        let v: serde_json::Value = serde_json::to_value(Request::of(&ask)).expect("serializes");
        assert_eq!(
            v,
            serde_json::json!({"username": "u", "clientid": "c", "peerhost": "127.0.0.1", "protocol": "mqtt", "topic": "t/1", "action": "subscribe", "qos": 1, "retain": false})
        );
        let back: About = serde_json::from_str(&serde_json::to_string(&ask).expect("serializes")).expect("parses");
        assert_eq!(back, ask);
    }
}
