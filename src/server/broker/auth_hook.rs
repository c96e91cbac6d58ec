//! `--mqtt-auth-http URL`: each MQTT CONNECT's user name and password
//! decided by the application's HTTP backend, asked as EMQX's HTTP
//! authentication asks it, so a backend written for EMQX answers
//! unchanged: a POST of JSON `{"username", "password", "clientid",
//! "peerhost", "protocol"}`, answered 200 with `{"result": "allow" |
//! "deny" | "ignore", "is_superuser": bool}` (204 with no body allows);
//! any other status denies.
//!
//! The CONNECT waits in its worker (whose loop goes on) while its claim
//! of its client id waits here for the answer. One thread (a
//! current-thread tokio runtime, hyper's HTTP/1 client) asks the backend
//! over a pool of keep-alive connections, at most `concurrency` requests
//! at once; each has `timeout` to connect and be answered. Bounded:
//! more than [`QUEUED_PER_SLOT`] x `concurrency` CONNECTs waiting are
//! refused at once (`busy`), answers past 64 KiB are not read. Answers
//! (allow, deny, ignore) are kept `cache_ttl` per user name, password
//! (its SHA-256) and client id, at most [`CACHE_ENTRIES`]. Fail closed:
//! a timeout, a backend that cannot be reached, an error status or an
//! answer that is not its JSON refuses the CONNECT, unless `fail_open`
//! lets it in (counted either way). `ignore` refuses too: no other
//! authenticator decides after this one.

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

/// What the backend is asked: EMQX's HTTP authentication request body.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct Credentials {
    pub username: String,
    pub password: String,
    pub clientid: String,
    pub peerhost: String,
    pub protocol: String,
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
    fn answered(self) -> bool {
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

/// The supervisor's handle on the hook's thread, with the cache.
pub(crate) struct Hook {
    tx: UnboundedSender<(u64, Credentials)>,
    cache: HashMap<CacheKey, (Outcome, Instant)>,
    ttl: Duration,
    cap: usize,
    pub fail_open: bool,
    pub counters: HookCounters,
}

/// A cache entry's key: the password only as its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    username: String,
    password: [u8; 32],
    clientid: String,
}

impl CacheKey {
    fn of(c: &Credentials) -> CacheKey {
        use sha2::Digest;
        CacheKey { username: c.username.clone(), password: sha2::Sha256::digest(c.password.as_bytes()).into(), clientid: c.clientid.clone() }
    }
}

impl Hook {
    pub(crate) fn start(cfg: HookConfig, sink: Sink<Vec<Decision>>) -> Result<Hook> {
        let (tx, rx) = unbounded_channel();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the auth hook's runtime")?;
        let (ttl, cap, fail_open) = (cfg.cache_ttl, cfg.concurrency * QUEUED_PER_SLOT, cfg.fail_open);
        std::thread::Builder::new().name("auth-hook".into()).spawn(move || rt.block_on(run(cfg, rx, sink))).context("starting the auth hook thread")?;
        Ok(Hook { tx, cache: HashMap::new(), ttl, cap, fail_open, counters: HookCounters::default() })
    }

    /// Request `id`: decided now (from the cache, or refused as busy), or
    /// None: asked, its [`Decision`] comes in an event (a batch).
    pub(crate) fn ask(&mut self, id: u64, c: Credentials, now: Instant) -> Option<Outcome> {
        if let Some((outcome, at)) = self.cache.get(&CacheKey::of(&c)) {
            if now.duration_since(*at) < self.ttl {
                crate::stats::counters::bump(&mut self.counters.cached, outcome.as_str());
                return Some(*outcome);
            }
        }
        if self.counters.waiting as usize >= self.cap {
            crate::stats::counters::bump(&mut self.counters.decided, Outcome::Busy.as_str());
            return Some(Outcome::Busy);
        }
        self.counters.waiting += 1;
        self.counters.asked += 1;
        // The thread ends only with the process.
        let _ = self.tx.send((id, c));
        None
    }

    /// The backend's answer about `c`: counted, and kept if it is one.
    pub(crate) fn answered(&mut self, c: &Credentials, outcome: Outcome, now: Instant) {
        self.counters.waiting = self.counters.waiting.saturating_sub(1);
        crate::stats::counters::bump(&mut self.counters.decided, outcome.as_str());
        if outcome.answered() && !self.ttl.is_zero() {
            if self.cache.len() >= CACHE_ENTRIES {
                let ttl = self.ttl;
                self.cache.retain(|_, (_, at)| now.duration_since(*at) < ttl);
                if self.cache.len() >= CACHE_ENTRIES {
                    self.cache.clear();
                }
            }
            self.cache.insert(CacheKey::of(c), (outcome, now));
        }
    }
}

/// EMQX's answer body (what else it holds is not read).
#[derive(Deserialize)]
struct Answer {
    result: String,
}

/// What an answer's status and body decide.
pub(crate) fn judge(status: u16, body: &[u8]) -> Outcome {
    match status {
        204 => Outcome::Allow,
        200 => match serde_json::from_slice::<Answer>(body).map(|a| a.result) {
            Ok(r) if r == "allow" => Outcome::Allow,
            Ok(r) if r == "deny" => Outcome::Deny,
            Ok(r) if r == "ignore" => Outcome::Ignore,
            _ => Outcome::BadAnswer,
        },
        _ => Outcome::Status,
    }
}

/// Idle keep-alive connections to the backend.
type Pool = Arc<Mutex<Vec<Conn>>>;

/// Ask the backend about `c`, within `timeout` all told.
async fn ask(t: &Target, pool: &Pool, timeout: Duration, c: &Credentials) -> Outcome {
    let body = Bytes::from(serde_json::to_vec(c).expect("credentials serialize"));
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
        Ok::<Outcome, Outcome>(judge(status, &body))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(o) | Err(o)) => o,
        Err(_) => Outcome::Timeout,
    }
}

async fn run(cfg: HookConfig, mut rx: UnboundedReceiver<(u64, Credentials)>, sink: Sink<Vec<Decision>>) {
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
            let outcome = ask(&cfg.target, &pool, cfg.timeout, &c).await;
            drop(slot);
            let _ = done.send(Decision { id, outcome });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_as_emqx_says() {
        assert_eq!(judge(200, br#"{"result": "allow", "is_superuser": true}"#), Outcome::Allow);
        assert_eq!(judge(200, br#"{"result": "deny"}"#), Outcome::Deny);
        assert_eq!(judge(200, br#"{"result": "ignore"}"#), Outcome::Ignore);
        assert_eq!(judge(204, b""), Outcome::Allow);
        assert_eq!(judge(200, b"allow"), Outcome::BadAnswer);
        assert_eq!(judge(200, br#"{"result": "yes"}"#), Outcome::BadAnswer);
        assert_eq!(judge(401, br#"{"result": "allow"}"#), Outcome::Status);
        assert_eq!(judge(500, b""), Outcome::Status);
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
