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

/// What [`Local::decide`] says of a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every item decided: allowed or not, in the order asked.
    Decided(Vec<bool>),
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
    cache: HashMap<About, (bool, Instant)>,
    /// Connections' user names, client ids (from their CONNECT) and addresses.
    who: HashMap<usize, (u32, Who)>,
    waiting: HashMap<usize, Wait>,
    /// Questions in flight, with the connections waiting on each.
    asked: HashMap<About, Vec<(usize, u32)>>,
    /// Questions made since the last take.
    asks: Vec<About>,
}

impl Local {
    /// Answers kept `ttl`; a connection waits at most `deadline`.
    pub(crate) fn new(ttl: Duration, deadline: Duration) -> Local {
        Local { ttl, deadline, cache: HashMap::new(), who: HashMap::new(), waiting: HashMap::new(), asked: HashMap::new(), asks: Vec::new() }
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

    /// Whether each of `items` may be done by connection `key`: decided
    /// when every answer is known (its packet's own, then the cache's),
    /// else the unknown ones are asked (once however many wait on them)
    /// and the packet waits.
    pub(crate) fn decide(&mut self, key: usize, gen: u32, items: &[About], now: Instant) -> Verdict {
        let mut known = Vec::with_capacity(items.len());
        for a in items {
            let own = self.waiting.get(&key).filter(|w| w.gen == gen).and_then(|w| w.answers.iter().find(|(b, _)| b == a)).map(|(_, allow)| *allow);
            let cached = || self.cache.get(a).filter(|(_, until)| now < *until).map(|(allow, _)| *allow);
            // Past the bound of questions in flight a new one is denied at once.
            let refused = || (self.asked.len() >= MAX_ASKED && !self.asked.contains_key(a)).then_some(false);
            known.push(own.or_else(cached).or_else(refused));
        }
        if known.iter().all(Option::is_some) {
            // Read: its answers were for it.
            self.waiting.remove(&key);
            return Verdict::Decided(known.into_iter().flatten().collect());
        }
        for (a, _) in items.iter().zip(&known).filter(|(_, k)| k.is_none()) {
            let waiters = match self.asked.get_mut(a) {
                Some(w) => w,
                None => {
                    self.asks.push(a.clone());
                    self.asked.entry(a.clone()).or_default()
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

    /// The questions made since the last take.
    pub(crate) fn take_asks(&mut self) -> Vec<About> {
        std::mem::take(&mut self.asks)
    }

    /// The backend's answers: kept, and handed to the connections waiting
    /// on them; those connections (key, generation, whether their read
    /// was stopped) are to be read again, their packets no longer held.
    pub(crate) fn answered(&mut self, answers: Vec<Answer>, now: Instant) -> Vec<(usize, u32, bool)> {
        let mut resume = Vec::new();
        for Answer { about, allow } in answers {
            for (key, gen) in self.asked.remove(&about).unwrap_or_default() {
                let Some(w) = self.waiting.get_mut(&key).filter(|w| w.gen == gen) else { continue };
                w.answers.push((about.clone(), allow));
                if w.held {
                    w.held = false;
                    resume.push((key, gen, std::mem::take(&mut w.paused)));
                }
            }
            self.keep(about, allow, now);
        }
        resume
    }

    fn keep(&mut self, about: About, allow: bool, now: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        if self.cache.len() >= CACHE_ENTRIES {
            self.cache.retain(|_, (_, until)| now < *until);
            if self.cache.len() >= CACHE_ENTRIES {
                self.cache.clear();
            }
        }
        self.cache.insert(about, (allow, now + self.ttl));
    }

    /// Connections that waited past their deadline (each once).
    pub(crate) fn overdue(&mut self, now: Instant) -> Vec<(usize, u32)> {
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

    fn about(topic: &str, action: Action) -> About {
        About { username: "u".into(), clientid: "c".into(), peerhost: "127.0.0.1".into(), topic: topic.into(), action, qos: 1, retain: false }
    }

    #[test]
    fn an_unknown_decision_is_asked_once_and_its_answer_brings_the_packet_back() {
        let now = Instant::now();
        let mut l = Local::new(Duration::from_secs(60), Duration::from_secs(10));
        let a = about("t/1", Action::Publish);
        assert_eq!(l.decide(1, 7, std::slice::from_ref(&a), now), Verdict::Wait);
        assert_eq!(l.decide(2, 3, std::slice::from_ref(&a), now), Verdict::Wait, "another connection waits on the same question");
        assert!(l.waits(1) && l.waits(2) && l.pause(1));
        assert_eq!(l.take_asks(), vec![a.clone()], "asked once");
        let mut back = l.answered(vec![Answer { about: a.clone(), allow: true }], now);
        back.sort();
        assert_eq!(back, vec![(1, 7, true), (2, 3, false)]);
        assert!(!l.waits(1));
        assert_eq!(l.decide(1, 7, std::slice::from_ref(&a), now), Verdict::Decided(vec![true]));
        assert_eq!(l.decide(9, 1, std::slice::from_ref(&a), now), Verdict::Decided(vec![true]), "kept for others");
        assert!(l.take_asks().is_empty());
        let later = now + Duration::from_secs(61);
        assert_eq!(l.decide(9, 1, std::slice::from_ref(&a), later), Verdict::Wait, "expired");
    }

    #[test]
    fn without_a_cache_a_packet_still_reads_its_own_answers_however_they_come() {
        let now = Instant::now();
        let mut l = Local::new(Duration::ZERO, Duration::from_secs(10));
        let (a, b) = (about("a/#", Action::Subscribe), about("b", Action::Subscribe));
        let items = [a.clone(), b.clone()];
        assert_eq!(l.decide(1, 1, &items, now), Verdict::Wait);
        assert_eq!(l.take_asks().len(), 2);
        assert_eq!(l.answered(vec![Answer { about: a.clone(), allow: false }], now), vec![(1, 1, false)]);
        assert_eq!(l.decide(1, 1, &items, now), Verdict::Wait, "b is still out");
        assert!(l.take_asks().is_empty(), "nothing asked twice");
        l.answered(vec![Answer { about: b, allow: true }], now);
        assert_eq!(l.decide(1, 1, &items, now), Verdict::Decided(vec![false, true]));
        assert_eq!(l.decide(1, 1, &items, now), Verdict::Wait, "nothing kept: the next packet asks again");
    }

    #[test]
    fn a_connection_waits_no_longer_than_its_deadline_and_questions_are_bounded() {
        let now = Instant::now();
        let mut l = Local::new(Duration::from_secs(60), Duration::from_secs(5));
        l.decide(4, 2, &[about("x", Action::Publish)], now);
        assert!(l.overdue(now + Duration::from_secs(5)).is_empty());
        assert_eq!(l.overdue(now + Duration::from_secs(6)), vec![(4, 2)]);
        assert!(!l.waits(4));
        for i in 0..MAX_ASKED {
            l.decide(5, 1, &[about(&i.to_string(), Action::Publish)], now);
        }
        assert_eq!(l.decide(6, 1, &[about("one more", Action::Publish)], now), Verdict::Decided(vec![false]), "denied at once past the bound");
    }

    #[test]
    fn a_closed_connection_is_not_brought_back() {
        let now = Instant::now();
        let mut l = Local::new(Duration::from_secs(60), Duration::from_secs(5));
        let a = about("t", Action::Publish);
        l.decide(1, 1, std::slice::from_ref(&a), now);
        l.forget(1);
        assert!(l.answered(vec![Answer { about: a, allow: true }], now).is_empty());
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
