//! The supervisor's HTTP backends, `--mqtt-auth-http` (CONNECTs with a
//! login, WebSocket and event-stream requests) and `--mqtt-authz-http`
//! (publishes, subscriptions and wills held in a worker): what is asked,
//! what waits for an answer, what a cached answer decides at once. No
//! process here: each call returns the decisions, the fleet sends them to
//! the workers.

use crate::server::auth::authz;
use crate::server::broker::auth_hook::{self, AuthzCounters, Credentials, Decision, Hook, Key, Waiting};
use crate::server::broker::sessions::{hook_refusal, Action};
use crate::server::commands::{SessionClaim, UpgradeAnswer, UpgradeAsk};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// The backends this server asks, and the questions in flight.
#[derive(Default)]
pub(crate) struct Hooks {
    /// `--mqtt-auth-http`.
    pub(crate) auth: Option<Hook>,
    auth_waiting: HashMap<u64, (usize, Waiting, Credentials)>,
    /// `--mqtt-authz-http`, and its questions waiting (worker, cache key, what about).
    pub(crate) authz: Option<Hook<AuthzCounters>>,
    authz_waiting: HashMap<u64, (usize, Key, authz::About)>,
    seq: u64,
}

/// What the auth backend's answers decided.
#[derive(Default)]
pub(crate) struct AuthDecided {
    /// Claims let in, by worker: to be claimed.
    pub(crate) admitted: BTreeMap<usize, Vec<SessionClaim>>,
    /// Claims refused: their answers.
    pub(crate) refused: Vec<Action>,
    /// Requests held for an upgrade, allowed or not.
    pub(crate) upgrades: Vec<(usize, UpgradeAnswer)>,
}

impl Hooks {
    /// `--mqtt-auth-http`: the claims of worker `worker` that carry a
    /// login asked of the backend (or decided from its cached answers):
    /// those that go on now (let in, or without a login), and the answers
    /// of those refused. The others wait for [`Self::auth_decided`].
    pub(crate) fn authenticate(&mut self, worker: usize, claims: Vec<SessionClaim>, now: Instant) -> (Vec<SessionClaim>, Vec<Action>) {
        let Some(hook) = &mut self.auth else { return (claims, Vec::new()) };
        let (mut go, mut refused) = (Vec::with_capacity(claims.len()), Vec::new());
        for mut c in claims {
            let Some(login) = c.login.take() else {
                go.push(c);
                continue;
            };
            let creds = Credentials {
                username: login.username,
                password: login.password,
                clientid: c.client_id.clone(),
                peerhost: login.peerhost,
                protocol: "mqtt".into(),
                headers: Default::default(),
                cookie: None,
            };
            self.seq += 1;
            let body = creds.body();
            match hook.ask(self.seq, &auth_hook::key(&body), body, now) {
                None => _ = self.auth_waiting.insert(self.seq, (worker, Waiting::Claim(Box::new(c)), creds)),
                Some((o, grant)) if o.admits(hook.fail_open) => {
                    c.grant = grant.map(|g| g.bind(&creds.username, &creds.clientid));
                    go.push(c)
                }
                Some(_) => refused.push(Action::Answer(worker, hook_refusal(c.conn, c.v5))),
            }
        }
        (go, refused)
    }

    /// The auth backend decided questions [`Self::authenticate`] and
    /// [`Self::ask_upgrades`] asked.
    pub(crate) fn auth_decided(&mut self, decided: Vec<Decision>, now: Instant) -> AuthDecided {
        let mut out = AuthDecided::default();
        let Some(hook) = &mut self.auth else { return out };
        for d in decided {
            let Some((worker, waiting, creds)) = self.auth_waiting.remove(&d.id) else { continue };
            hook.answered(auth_hook::key(&creds.body()), d.outcome, d.grant.as_ref(), now);
            let allow = d.outcome.admits(hook.fail_open);
            match waiting {
                Waiting::Upgrade(conn) => out.upgrades.push((worker, UpgradeAnswer { conn, allow })),
                Waiting::Claim(c) if allow => {
                    let mut c = *c;
                    c.grant = d.grant.map(|g| g.bind(&creds.username, &creds.clientid));
                    out.admitted.entry(worker).or_default().push(c);
                }
                Waiting::Claim(c) => out.refused.push(Action::Answer(worker, hook_refusal(c.conn, c.v5))),
            }
        }
        out
    }

    /// WebSocket and event-stream requests held by worker `worker` for
    /// the auth backend: those decided now (from its cached answers, or
    /// allowed where this server has no backend: a worker of another
    /// configuration); the others wait for [`Self::auth_decided`].
    pub(crate) fn ask_upgrades(&mut self, worker: usize, asks: Vec<UpgradeAsk>, now: Instant) -> Vec<(usize, UpgradeAnswer)> {
        let mut decided = Vec::new();
        for a in asks {
            let conn = a.conn;
            let Some(hook) = &mut self.auth else {
                decided.push((worker, UpgradeAnswer { conn, allow: true }));
                continue;
            };
            self.seq += 1;
            let creds = Credentials::of_upgrade(a);
            let body = creds.body();
            match hook.ask(self.seq, &auth_hook::key(&body), body, now) {
                None => _ = self.auth_waiting.insert(self.seq, (worker, Waiting::Upgrade(conn), creds)),
                Some((o, _)) => decided.push((worker, UpgradeAnswer { conn, allow: o.admits(hook.fail_open) })),
            }
        }
        decided
    }

    /// `--mqtt-authz-http`: publishes, subscriptions and wills held in
    /// worker `worker`: those decided now (from its cached answers;
    /// refused where this server has no backend, as a backend that cannot
    /// say); the others wait for [`Self::authz_decided`].
    pub(crate) fn ask_authz(&mut self, worker: usize, asks: Vec<authz::About>, now: Instant) -> Vec<authz::Answer> {
        let mut decided = Vec::new();
        for a in asks {
            let Some(hook) = &mut self.authz else {
                decided.push(authz::Answer { about: a, allow: false, keep: false });
                continue;
            };
            self.seq += 1;
            let body = serde_json::to_vec(&authz::Request::of(&a)).expect("serializes");
            let k = auth_hook::key(&body);
            match hook.ask(self.seq, &k, body, now) {
                None => _ = self.authz_waiting.insert(self.seq, (worker, k, a)),
                Some((o, _)) => decided.push(authz::Answer { about: a, allow: o.admits(hook.fail_open), keep: o.answered() }),
            }
        }
        decided
    }

    /// The authz backend decided questions [`Self::ask_authz`] asked:
    /// the answers, by the worker waiting for them.
    pub(crate) fn authz_decided(&mut self, decided: Vec<Decision>, now: Instant) -> BTreeMap<usize, Vec<authz::Answer>> {
        let mut by_worker = BTreeMap::<usize, Vec<authz::Answer>>::new();
        let Some(hook) = &mut self.authz else { return by_worker };
        for d in decided {
            let Some((worker, k, about)) = self.authz_waiting.remove(&d.id) else { continue };
            hook.answered(k, d.outcome, None, now);
            let (allow, keep) = (d.outcome.admits(hook.fail_open), d.outcome.answered());
            by_worker.entry(worker).or_default().push(authz::Answer { about, allow, keep });
        }
        by_worker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::broker::auth_hook::HookConfig;
    use std::time::Duration;

    fn about(topic: &str) -> authz::About {
        authz::About {
            username: "u".into(),
            clientid: "c".into(),
            peerhost: "127.0.0.1".into(),
            topic: topic.into(),
            action: authz::Action::Publish,
            qos: 1,
            retain: false,
        }
    }

    /// Without a backend: claims go on untouched, upgrades are allowed,
    /// authz questions refused at once (a worker of another configuration).
    #[test]
    fn without_a_backend_nothing_waits() {
        let mut h = Hooks::default();
        let now = Instant::now();
        let (go, refused) = h.authenticate(0, vec![SessionClaim::v5(7, "d", true, 0)], now);
        assert_eq!((go.len(), refused.len()), (1, 0));
        let up = h.ask_upgrades(
            2,
            vec![UpgradeAsk {
                conn: 9,
                protocol: "ws".into(),
                username: String::new(),
                password: String::new(),
                peerhost: String::new(),
                headers: Default::default(),
            }],
            now,
        );
        assert_eq!(up, vec![(2, UpgradeAnswer { conn: 9, allow: true })]);
        let a = h.ask_authz(1, vec![about("t")], now);
        assert_eq!((a.len(), a[0].allow), (1, false));
    }

    /// An authz question to a backend that cannot be reached waits for
    /// its decision, which comes back to the worker that asked: refused
    /// (the hook fails closed) and not kept in its cache, so the next
    /// question is asked again.
    #[test]
    fn an_authz_question_waits_and_its_decision_goes_to_its_worker() {
        // A port nobody listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let cfg = HookConfig {
            target: crate::server::broker::upstream::parse_url(&format!("http://127.0.0.1:{port}/authz")).unwrap(),
            timeout: Duration::from_secs(5),
            cache_ttl: Duration::from_secs(60),
            concurrency: 2,
            fail_open: false,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let mut h = Hooks { authz: Some(Hook::start(cfg, std::sync::Arc::new(move |d| tx.lock().unwrap().send(d).is_ok())).unwrap()), ..Default::default() };
        assert!(h.ask_authz(3, vec![about("a/b")], Instant::now()).is_empty(), "it waits for the backend");
        let decided = rx.recv_timeout(Duration::from_secs(20)).expect("a decision within the hook's timeout");
        let by_worker = h.authz_decided(decided, Instant::now());
        let answers = &by_worker[&3];
        assert_eq!((answers.len(), answers[0].about.topic.as_str(), answers[0].allow, answers[0].keep), (1, "a/b", false, false));
        assert!(h.ask_authz(3, vec![about("a/b")], Instant::now()).is_empty(), "a failure is not cached: asked again");
        assert!(h.authz_decided(Vec::new(), Instant::now()).is_empty());
    }
}
