//! `--mqtt-auth-http URL`: each MQTT CONNECT's user name and password
//! decided by the application's HTTP backend, asked as EMQX's HTTP
//! authentication asks it, so a backend written for EMQX answers
//! unchanged: a POST of JSON `{"username", "password", "clientid",
//! "peerhost", "protocol"}`, answered 200 with `{"result": "allow" |
//! "deny" | "ignore", "is_superuser": bool}` (204 with no body allows);
//! any other status denies. An "allow" may carry what EMQX's answers
//! carry beside it: `is_superuser`, `expire_at` (Unix seconds: the
//! connection is closed then; one already past denies) and `acl`, the
//! client's own publish and subscribe rules (`auth/hook_acl.rs`).
//! `--mqtt-authz-http URL` is a second [`Hook`] of the same kind, asked
//! EMQX's authorization request (`auth/authz.rs`), counted apart.
//!
//! The CONNECT waits in its worker (whose loop goes on) while its claim
//! of its client id waits here for the answer. One thread (a
//! current-thread tokio runtime, hyper's HTTP/1 client) asks the backend
//! over a pool of keep-alive connections, at most `concurrency` requests
//! at once; each has `timeout` to connect and be answered. Bounded:
//! more than [`QUEUED_PER_SLOT`] x `concurrency` requests waiting are
//! refused at once (`busy`), answers past 64 KiB are not read. Answers
//! (allow, deny, ignore) are kept `cache_ttl` per request body (its
//! SHA-256: the password is not kept), at most [`CACHE_ENTRIES`]. Fail
//! closed: a timeout, a backend that cannot be reached, an error status
//! or an answer that is not its JSON refuses, unless `fail_open` lets it
//! through (counted either way). `ignore` refuses too: no other
//! authenticator decides after this one.

use crate::server::auth::hook_acl::{self, Grant};
use crate::server::broker::upstream::{connect, Conn, Target};
use crate::supervise::Sink;
use anyhow::{Context, Result};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// CONNECTs that may wait per request the backend may have at once: 16
/// refused 1% of a 100,000-CONNECT ramp at 20,000/s as busy against a
/// backend that answered every one at once (BENCHMARKS.md, session 25);
/// 256 (16,384 waiting by default, a few MB) rides out such bursts.
pub(crate) const QUEUED_PER_SLOT: usize = 256;
/// Answers kept at most (the cache is emptied of expired ones, then
/// wholly, when it is full).
pub(crate) const CACHE_ENTRIES: usize = 100_000;
/// The largest answer read.
const MAX_ANSWER: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct HookConfig {
    pub target: Target,
    pub timeout: Duration,
    pub cache_ttl: Duration,
    pub concurrency: usize,
    pub fail_open: bool,
}

/// What the backend is asked: EMQX's HTTP authentication request body;
/// for a WebSocket or event-stream request (`protocol` `ws` or `sse`)
/// also its headers and its cookie.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct Credentials {
    pub username: String,
    pub password: String,
    pub clientid: String,
    pub peerhost: String,
    pub protocol: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
}

impl Credentials {
    /// The body the backend is POSTed.
    pub(crate) fn body(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("credentials serialize")
    }

    /// A held WebSocket or event-stream request's.
    pub(crate) fn of_upgrade(a: crate::server::commands::UpgradeAsk) -> Credentials {
        let cookie = a.headers.get("cookie").cloned();
        Credentials {
            username: a.username,
            password: a.password,
            clientid: String::new(),
            peerhost: a.peerhost,
            protocol: a.protocol,
            headers: a.headers,
            cookie,
        }
    }
}

/// What waits for the backend's answer.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// An MQTT CONNECT's claim of its client id.
    Claim(Box<crate::server::commands::SessionClaim>),
    /// A WebSocket or event-stream request (its connection id).
    Upgrade(u64),
}

/// How one CONNECT was decided (the `mqtt_auth_http_decisions` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allow,
    Deny,
    Ignore,
    /// A status other than 200 and 204.
    Status,
    Timeout,
    Unreachable,
    /// 200 without `{"result": "allow" | "deny" | "ignore"}`.
    BadAnswer,
    /// Too many CONNECTs waiting already.
    Busy,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::Ignore => "ignore",
            Outcome::Status => "status",
            Outcome::Timeout => "timeout",
            Outcome::Unreachable => "unreachable",
            Outcome::BadAnswer => "bad_answer",
            Outcome::Busy => "busy",
        }
    }

    /// The backend's own answer (kept in the cache), not a failure to get one.
    pub(crate) fn answered(self) -> bool {
        matches!(self, Outcome::Allow | Outcome::Deny | Outcome::Ignore)
    }

    /// Whether the CONNECT goes on.
    pub(crate) fn admits(self, fail_open: bool) -> bool {
        match self {
            Outcome::Allow => true,
            Outcome::Deny | Outcome::Ignore => false,
            Outcome::Status | Outcome::Timeout | Outcome::Unreachable | Outcome::BadAnswer | Outcome::Busy => fail_open,
        }
    }
}

/// The backend's answer to request `id` (an event of the supervisor's).
#[derive(Debug)]
pub(crate) struct Decision {
    pub id: u64,
    pub outcome: Outcome,
    /// With an allow: what it granted.
    pub grant: Option<Grant>,
}

crate::counters! {
    /// `--mqtt-auth-http` (`/stats` "mqtt_auth_http", `/metrics`).
    pub(crate) struct HookCounters {
        asked: counter "mqtt_auth_http_requests" "CONNECTs the --mqtt-auth-http backend was asked about",
        decided: by("outcome") "mqtt_auth_http_decisions" "CONNECTs decided by the --mqtt-auth-http backend, by outcome: allow, deny, ignore (its answers), status (another status than 200 or 204), timeout, unreachable, bad_answer (not its JSON), busy (too many waiting); all but allow refuse the CONNECT (not authorized), unless --mqtt-auth-http-fail-open lets the last five in",
        cached: by("outcome") "mqtt_auth_http_cached" "CONNECTs decided by an answer the backend gave within --mqtt-auth-http-cache, by outcome",
        waiting: gauge "mqtt_auth_http_waiting" "CONNECTs waiting for the --mqtt-auth-http backend now",
    }
}

crate::counters! {
    /// `--mqtt-authz-http` (`/stats` "mqtt_authz_http", `/metrics`): the
    /// questions that reached the supervisor (a worker answers from its
    /// own cache first).
    pub(crate) struct AuthzCounters {
        asked: counter "mqtt_authz_http_requests" "Publishes, subscriptions and wills the --mqtt-authz-http backend was asked about",
        decided: by("outcome") "mqtt_authz_http_decisions" "Questions decided by the --mqtt-authz-http backend, by outcome (as mqtt_auth_http_decisions); all but allow deny, unless --mqtt-auth-http-fail-open lets the last five through",
        cached: by("outcome") "mqtt_authz_http_cached" "Questions the supervisor decided by an answer the backend gave within --mqtt-auth-http-cache, by outcome",
        waiting: gauge "mqtt_authz_http_waiting" "Questions waiting for the --mqtt-authz-http backend now",
    }
}

/// The counters a hook keeps: asked, decided and cached by outcome, waiting.
pub(crate) trait HookStats: Default {
    fn parts(&mut self) -> (&mut u64, &mut crate::stats::counters::Kinds, &mut crate::stats::counters::Kinds, &mut u64);
}

macro_rules! hook_stats {
    ($t:ty) => {
        impl HookStats for $t {
            fn parts(&mut self) -> (&mut u64, &mut crate::stats::counters::Kinds, &mut crate::stats::counters::Kinds, &mut u64) {
                (&mut self.asked, &mut self.decided, &mut self.cached, &mut self.waiting)
            }
        }
    };
}
hook_stats!(HookCounters);
hook_stats!(AuthzCounters);

/// How much longer than the hook's timeout a worker lets a packet wait
/// for its answer (the trip through the supervisor) before closing it.
pub(crate) const AUTHZ_SLACK: Duration = Duration::from_secs(5);

/// A cache entry's key: the SHA-256 of the request's body (a password,
/// a cookie or a token kept only so).
pub(crate) type Key = [u8; 32];

/// The key of a request `body`.
pub(crate) fn key(body: &[u8]) -> Key {
    use sha2::Digest;
    sha2::Sha256::digest(body).into()
}

/// The supervisor's handle on a hook's thread, with the cache.
pub(crate) struct Hook<C = HookCounters> {
    tx: UnboundedSender<(u64, Vec<u8>)>,
    cache: HashMap<Key, (Outcome, Option<Grant>, Instant)>,
    ttl: Duration,
    cap: usize,
    pub fail_open: bool,
    pub counters: C,
}

impl<C: HookStats> Hook<C> {
    pub(crate) fn start(cfg: HookConfig, sink: Sink<Vec<Decision>>) -> Result<Hook<C>> {
        let (tx, rx) = unbounded_channel();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the auth hook's runtime")?;
        let (ttl, cap, fail_open) = (cfg.cache_ttl, cfg.concurrency * QUEUED_PER_SLOT, cfg.fail_open);
        std::thread::Builder::new().name("auth-hook".into()).spawn(move || rt.block_on(run(cfg, rx, sink))).context("starting the auth hook thread")?;
        Ok(Hook { tx, cache: HashMap::new(), ttl, cap, fail_open, counters: C::default() })
    }

    /// Request `id` (its `body`, whose [`key`] is `k`): decided now (from
    /// the cache, or refused as busy), or None: asked, its [`Decision`]
    /// comes in an event (a batch).
    pub(crate) fn ask(&mut self, id: u64, k: &Key, body: Vec<u8>, now: Instant) -> Option<(Outcome, Option<Grant>)> {
        let (asked, decided, cached, waiting) = self.counters.parts();
        if let Some((outcome, grant, at)) = self.cache.get(k) {
            if now.duration_since(*at) < self.ttl {
                // An allow whose expire_at passed since it was kept denies.
                let outcome = expired(*outcome, grant.as_ref(), crate::server::auth::gate::unix_now());
                crate::stats::counters::bump(cached, outcome.as_str());
                return Some((outcome, grant.clone()));
            }
        }
        if *waiting as usize >= self.cap {
            crate::stats::counters::bump(decided, Outcome::Busy.as_str());
            return Some((Outcome::Busy, None));
        }
        *waiting += 1;
        *asked += 1;
        // The thread ends only with the process.
        let _ = self.tx.send((id, body));
        None
    }

    /// The backend's answer about the request of key `k`: counted, and kept if it is one.
    pub(crate) fn answered(&mut self, k: Key, outcome: Outcome, grant: Option<&Grant>, now: Instant) {
        let (_, decided, _, waiting) = self.counters.parts();
        *waiting = waiting.saturating_sub(1);
        crate::stats::counters::bump(decided, outcome.as_str());
        if outcome.answered() && !self.ttl.is_zero() {
            if self.cache.len() >= CACHE_ENTRIES {
                let ttl = self.ttl;
                self.cache.retain(|_, (_, _, at)| now.duration_since(*at) < ttl);
                if self.cache.len() >= CACHE_ENTRIES {
                    self.cache.clear();
                }
            }
            self.cache.insert(k, (outcome, grant.cloned(), now));
        }
    }
}

/// EMQX's answer body (what else it holds is not read).
#[derive(Deserialize)]
struct Answer {
    result: String,
    #[serde(default)]
    is_superuser: bool,
    #[serde(default)]
    expire_at: Option<u64>,
    #[serde(default)]
    acl: Option<serde_json::Value>,
}

/// What an answer's status and body decide, at `now_s` (Unix seconds):
/// with an allow, what it granted.
pub(crate) fn judge(status: u16, body: &[u8], now_s: u64) -> (Outcome, Option<Grant>) {
    let a = match status {
        204 => return (Outcome::Allow, Some(Grant::default())),
        200 => match serde_json::from_slice::<Answer>(body) {
            Ok(a) => a,
            Err(_) => return (Outcome::BadAnswer, None),
        },
        _ => return (Outcome::Status, None),
    };
    match a.result.as_str() {
        "allow" => {
            let rules = match a.acl.map(hook_acl::rules).transpose() {
                Ok(r) => r,
                Err(_) => return (Outcome::BadAnswer, None),
            };
            let g = Grant { user: String::new(), superuser: a.is_superuser, expire_at: a.expire_at, rules };
            (expired(Outcome::Allow, Some(&g), now_s), Some(g))
        }
        "deny" => (Outcome::Deny, None),
        "ignore" => (Outcome::Ignore, None),
        _ => (Outcome::BadAnswer, None),
    }
}

/// An allow whose `expire_at` is not after `now_s` denies.
fn expired(o: Outcome, g: Option<&Grant>, now_s: u64) -> Outcome {
    match g.and_then(|g| g.expire_at) {
        Some(at) if o == Outcome::Allow && at <= now_s => Outcome::Deny,
        _ => o,
    }
}

/// Idle keep-alive connections to the backend.
type Pool = Arc<Mutex<Vec<Conn>>>;

/// Ask the backend about `c`, within `timeout` all told.
async fn ask(t: &Target, pool: &Pool, timeout: Duration, body: Vec<u8>) -> (Outcome, Option<Grant>) {
    let body = Bytes::from(body);
    let work = async {
        let idle = pool.lock().expect("the pool").pop().filter(|c| !c.is_closed());
        let mut conn = match idle {
            Some(c) => c,
            None => connect(t).await.map_err(|_| Outcome::Unreachable)?,
        };
        let req = hyper::Request::post(&t.path)
            .header(hyper::header::HOST, format!("{}:{}", t.host, t.port))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("a valid request");
        conn.ready().await.map_err(|_| Outcome::Unreachable)?;
        let resp = conn.send_request(req).await.map_err(|_| Outcome::Unreachable)?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_ANSWER).collect().await.map_err(|_| Outcome::BadAnswer)?.to_bytes();
        pool.lock().expect("the pool").push(conn);
        Ok::<(Outcome, Option<Grant>), Outcome>(judge(status, &body, crate::server::auth::gate::unix_now()))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(o)) => o,
        Ok(Err(o)) => (o, None),
        Err(_) => (Outcome::Timeout, None),
    }
}

async fn run(cfg: HookConfig, mut rx: UnboundedReceiver<(u64, Vec<u8>)>, sink: Sink<Vec<Decision>>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(cfg.concurrency));
    let pool: Pool = Arc::new(Mutex::new(Vec::new()));
    let cfg = Arc::new(cfg);
    // Answers go to the supervisor in batches: all those in by the time
    // the collector runs, one wake-up of the supervisor's thread for each
    // batch instead of each answer (a ramp's CONNECTs answer together).
    let (done, mut answers) = unbounded_channel::<Decision>();
    tokio::spawn(async move {
        while let Some(d) = answers.recv().await {
            tokio::task::yield_now().await;
            let mut batch = vec![d];
            while let Ok(d) = answers.try_recv() {
                batch.push(d);
            }
            // False only once the supervisor is gone.
            if !sink(batch) {
                return;
            }
        }
    });
    while let Some((id, c)) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (cfg, pool, done) = (cfg.clone(), pool.clone(), done.clone());
        tokio::spawn(async move {
            let (outcome, grant) = ask(&cfg.target, &pool, cfg.timeout, c).await;
            drop(slot);
            let _ = done.send(Decision { id, outcome, grant });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_as_emqx_says() {
        let o = |status, body: &[u8]| judge(status, body, 1_000).0;
        assert_eq!(o(200, br#"{"result": "allow", "is_superuser": true}"#), Outcome::Allow);
        assert_eq!(o(200, br#"{"result": "deny"}"#), Outcome::Deny);
        assert_eq!(o(200, br#"{"result": "ignore"}"#), Outcome::Ignore);
        assert_eq!(o(204, b""), Outcome::Allow);
        assert_eq!(o(200, b"allow"), Outcome::BadAnswer);
        assert_eq!(o(200, br#"{"result": "yes"}"#), Outcome::BadAnswer);
        assert_eq!(o(401, br#"{"result": "allow"}"#), Outcome::Status);
        assert_eq!(o(500, b""), Outcome::Status);
    }

    #[test]
    fn an_allow_carries_its_grant_and_an_expired_one_denies() {
        let (o, g) = judge(
            200,
            br#"{"result": "allow", "is_superuser": true, "expire_at": 2000, "acl": [{"permission": "allow", "action": "all", "topic": "a"}]}"#,
            1_000,
        );
        let g = g.expect("a grant");
        assert_eq!((o, g.superuser, g.expire_at, g.rules.map(|r| r.len())), (Outcome::Allow, true, Some(2000), Some(1)));
        assert_eq!(judge(200, br#"{"result": "allow", "expire_at": 1000}"#, 1_000).0, Outcome::Deny, "expire_at not after now");
        assert_eq!(judge(200, br#"{"result": "allow", "acl": [{"permission": "perhaps"}]}"#, 1_000).0, Outcome::BadAnswer, "rules that do not read refuse");
        assert_eq!(judge(204, b"", 1_000).1, Some(Grant::default()));
        assert_eq!(expired(Outcome::Allow, Some(&Grant { expire_at: Some(5), ..Grant::default() }), 6), Outcome::Deny, "a kept answer expires too");
    }

    #[test]
    fn failures_refuse_unless_the_hook_fails_open() {
        for o in [Outcome::Status, Outcome::Timeout, Outcome::Unreachable, Outcome::BadAnswer, Outcome::Busy] {
            assert!(!o.admits(false) && o.admits(true), "{o:?}");
        }
        assert!(Outcome::Allow.admits(false));
        assert!(!Outcome::Deny.admits(true) && !Outcome::Ignore.admits(true));
    }
}
