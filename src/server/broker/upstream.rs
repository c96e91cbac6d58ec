//! What clients say, to the application (`server --upstream URL`): the
//! messages WebSocket clients send (and framed publish frames), and
//! presence joins and leaves, POSTed to a webhook in batches.
//!
//! Workers hand their messages to the supervisor over their pipe; one
//! thread here (a current-thread tokio runtime, hyper's HTTP/1 client on
//! one keep-alive connection) sends whatever has queued as one batch as
//! soon as the previous batch was answered, so a quiet backend gets each
//! message at once and a busy one gets large batches, of at most
//! [`MAX_BATCH`] messages and [`MAX_BATCH_BYTES`] of body (always at least
//! one message).
//!
//! What the backend answers decides the next batch ([`Sizer`]):
//! - 2xx: taken; batches grow back (doubling) toward their caps;
//! - 413: the batch is too large for the backend: it is sent again at
//!   once, halved, and the backend's limit is remembered; a single
//!   message refused with 413 is dropped, counted
//!   (`upstream_refused{status="413"}`) and the operator told;
//! - a timeout ([`REQUEST_TIMEOUT`]): sent again after a back-off, halved,
//!   so a batch too large to send in time gets smaller instead of being
//!   sent again whole for ever (a single message that still times out is
//!   a backend that does not answer: it is retried like a 5xx);
//! - no connection, 5xx, 408, 429: the same batch again after a back-off
//!   of 100 ms doubling to 5 s; nothing behind it overtakes it;
//! - another 4xx: not sent again; counted by status and the operator told.
//!
//! Bounds (docs/upstream.md): each worker may have `--upstream-queue`
//! messages and its share of `--upstream-queue-bytes` ([`worker_share`])
//! not yet taken (see `tables/outbox.rs`); a client whose message would exceed
//! that is closed with 1013 (try again later) and counted, so nothing is
//! dropped silently. The supervisor holds what the workers handed it; as a
//! last guard against what dead or retired workers left behind, it holds
//! at most [`supervisor_cap`] bytes and drops (counted, told) beyond.
//!
//! With `--upstream-secret-file` every POST is signed: `X-Megaconn-Timestamp`
//! (Unix ms) and `X-Megaconn-Signature: sha256=HEX`, the HMAC-SHA256 of
//! `TIMESTAMP.BODY` ([`signature`]); the backend recomputes it and checks
//! the timestamp is recent, so nobody else who reaches it can forge what
//! clients said.
//!
//! `--upstream nats://HOST:PORT/PREFIX` sends the same messages to NATS
//! JetStream instead, one stream message each (`upstream/nats.rs`).

use crate::server::up_message::UpMessage;
use crate::server::up_message::{JSON_ESCAPE_MAX, MESSAGE_OVERHEAD};
use crate::supervise::Sink;
use anyhow::{Context, Result};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use sha2::Sha256;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

pub(crate) mod nats;

/// Default `--upstream-queue`: messages per worker the backend has not taken.
pub(crate) const DEFAULT_QUEUE: usize = 262_144;
/// Default `--upstream-queue-bytes`: what the whole server may hold for
/// the backend. A backend that stalls 5 s under 50,000 messages/s of
/// ~1 KiB needs ~250 MB.
pub(crate) const DEFAULT_QUEUE_BYTES: u64 = 256 << 20;
/// The least share of `--upstream-queue-bytes` a worker gets, whatever
/// the number of workers: less would refuse clients after a handful of
/// messages.
pub(crate) const MIN_WORKER_BYTES: u64 = 1 << 20;
/// How much the supervisor may hold, as a multiple of what the live
/// workers can hand it: the same again is room for the messages of
/// workers that died or retired with messages still queued here (they
/// are still sent). Past it, the supervisor's memory (every worker's
/// lifeline) comes first: arrivals are dropped, counted and told.
pub(crate) const SUPERVISOR_SLACK: u64 = 2;
/// Most messages in one POST.
pub(crate) const MAX_BATCH: usize = 5_000;
/// Most bytes in one POST's body (a single larger message still goes, alone):
/// a 5,000-message batch of 64 KiB messages was ~430 MB, more than
/// any webhook takes or can receive within [`REQUEST_TIMEOUT`].
pub(crate) const MAX_BATCH_BYTES: usize = 4 << 20;
/// A 413 never lowers the byte cap below this: a backend that refuses a
/// body this small refuses it for what it is, and each message goes alone.
const MIN_BATCH_CEILING: usize = 64 << 10;
/// Longest a POST may take before it is sent again.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Drops at the supervisor's bound are told at most this often (each one
/// is counted).
const DROP_NOTE_EVERY: Duration = Duration::from_secs(10);
/// The close reason (and WebSocket 1013) of a client whose worker's
/// upstream budget is full.
#[cfg(test)]
pub(crate) const FULL: &str = "upstream_full";
/// The close reason (and WebSocket 1013) of a client that holds its
/// part of its worker's upstream bytes (`outbox::CONN_PART`).
#[cfg(test)]
pub(crate) const CONN_FULL: &str = "upstream_connection_full";
/// The signing time of a POST, Unix milliseconds.
pub(crate) const H_TIMESTAMP: &str = "X-Megaconn-Timestamp";
/// `sha256=` and the hex HMAC-SHA256 of `TIMESTAMP.BODY`.
pub(crate) const H_SIGNATURE: &str = "X-Megaconn-Signature";
/// Shortest `--upstream-secret-file` accepted: 256 bits, the HMAC-SHA256
/// block's worth (as for `--jwt-secret-file`).
pub(crate) const MIN_SECRET: usize = 32;
/// A worker's share of `--upstream-queue-bytes` when at most `max_workers`
/// run at once: the supervisor holds at most `max_workers` shares.
pub(crate) fn worker_share(total: u64, max_workers: usize) -> u64 {
    (total / max_workers.max(1) as u64).max(MIN_WORKER_BYTES)
}

/// The most one message may cost ([`UpMessage::bytes`]) when clients'
/// messages are at most `max_message` bytes (framed publish frames are
/// smaller still): its data escaped or base64, the longest user (a
/// token's `sub`) and topic.
pub(crate) fn max_message_cost(max_message: usize) -> u64 {
    let data = max_message.max(crate::proto::frame::MAX_PAYLOAD);
    (MESSAGE_OVERHEAD + JSON_ESCAPE_MAX * (data + crate::server::auth::jwt::MAX_TOKEN + crate::proto::push::MAX_TOPIC)) as u64
}

/// What the supervisor holds at most: every live worker's share plus the
/// one message a worker with nothing in flight may send whatever its
/// size, times [`SUPERVISOR_SLACK`].
pub(crate) fn supervisor_cap(share: u64, max_workers: usize, max_message: usize) -> u64 {
    SUPERVISOR_SLACK * max_workers.max(1) as u64 * (share + max_message_cost(max_message))
}

crate::counters! {
    /// The supervisor's webhook sender (`/stats` "upstream", `/metrics`).
    pub(crate) struct UpstreamCounters {
        delivered: counter "upstream_delivered" "Messages (and presence events) the --upstream backend took (2xx)",
        batches: counter "upstream_batches" "Batches the --upstream backend took",
        retries: by("reason") "upstream_retries" "Batches sent again, by reason (connect, io, timeout: sent again halved, http_5xx, http_429, http_413: split in half at once, no_stream: NATS has no stream for the subjects, ...)",
        refused: by("status") "upstream_refused" "Messages the --upstream backend refused for good: a 4xx that is not retried, or 413 to a message sent alone, or max_payload: larger than the NATS server takes (not sent again; the operator is told)",
        duplicates: counter "upstream_duplicates" "Messages sent again to NATS JetStream that it had stored already (its acknowledgement was lost): stored once, by their Nats-Msg-Id",
        dropped: counter "upstream_dropped" "Messages dropped by the supervisor at its bound (SUPERVISOR_SLACK times the workers' shares of --upstream-queue-bytes: only with messages of dead workers still queued; the operator is told)",
        queued: gauge "upstream_queued" "Messages waiting in the supervisor for the --upstream backend",
        queued_bytes: bytes "upstream_queued" "Bytes of messages waiting in the supervisor for the --upstream backend (as the workers count them)",
    }
}

/// What the sender tells the supervisor.
#[derive(Debug)]
pub(crate) enum UpstreamEvent {
    /// The backend took (or refused for good) this many more of each
    /// worker's messages, its oldest: their budget has that much room again
    /// (the worker knows their bytes; see `tables/outbox.rs`).
    Done(BTreeMap<usize, u64>),
    /// Something the operator must hear (a refused batch).
    Note(String),
}

/// `--upstream-secret-file`: the key POSTs are signed with. Its Debug
/// never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct UpstreamSecret(Vec<u8>);

impl std::fmt::Debug for UpstreamSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UpstreamSecret({} bytes)", self.0.len())
    }
}

impl UpstreamSecret {
    #[cfg(test)]
    pub(crate) fn new(bytes: Vec<u8>) -> Result<UpstreamSecret, String> {
        if bytes.len() < MIN_SECRET {
            return Err(format!("the secret is {} bytes; at least {MIN_SECRET} are needed", bytes.len()));
        }
        Ok(UpstreamSecret(bytes))
    }

    /// Read `--upstream-secret-file` (its bytes, without a trailing newline).
    pub(crate) fn read(path: &str) -> Result<UpstreamSecret, String> {
        let make = format!("head -c 48 /dev/urandom | base64 > {path}; give your backend the same file");
        crate::values::secret_file("--upstream-secret-file", path, MIN_SECRET, &make).map(UpstreamSecret)
    }
}

/// The `X-Megaconn-Signature` of a POST signed at `timestamp_ms`:
/// `sha256=` and the hex HMAC-SHA256 of `TIMESTAMP.BODY`.
pub(crate) fn signature(secret: &UpstreamSecret, timestamp_ms: u64, body: &[u8]) -> String {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes a key of any length");
    m.update(timestamp_ms.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    let hex: String = m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// The `--upstream` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// Check an `--upstream` URL: http://HOST[:PORT][/PATH].
pub(crate) fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("--upstream {url}: give an http:// URL of your backend's webhook, e.g. http://127.0.0.1:8080/megaconn (https is not supported yet: put a local proxy in front)")
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, p.parse::<u16>().map_err(|_| format!("--upstream {url}: '{p}' is not a port"))?),
        _ => (authority, 80),
    };
    if host.is_empty() {
        return Err(format!("--upstream {url}: no host"));
    }
    Ok(Target { host: host.trim_start_matches('[').trim_end_matches(']').to_string(), port, path: path.to_string() })
}

/// Where `--upstream` sends what clients said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Destination {
    /// A webhook: batches POSTed as JSON.
    Webhook(Target),
    /// NATS JetStream: a stream message each, under a subject prefix.
    Nats(nats::NatsTarget),
}

impl Destination {
    /// As the operator is shown it (a NATS URL without its credentials).
    pub(crate) fn shown(&self) -> String {
        match self {
            Destination::Webhook(t) => format!("http://{}:{}{}", t.host, t.port, t.path),
            Destination::Nats(n) => n.shown(),
        }
    }
}

/// Check an `--upstream` URL: a webhook (http://) or NATS JetStream
/// (nats://, tls://, nats+tls://).
pub(crate) fn parse_destination(url: &str) -> Result<Destination, String> {
    match nats::is_nats(url) {
        true => nats::parse(url).map(Destination::Nats),
        false => parse_url(url).map(Destination::Webhook).map_err(|e| match url.contains("://") && !url.starts_with("http://") {
            true => format!("{e}, or nats://HOST:PORT/SUBJECT.PREFIX for NATS JetStream"),
            false => e,
        }),
    }
}

/// What the sender thread needs.
#[derive(Debug, Clone)]
pub(crate) struct SenderConfig {
    pub target: Destination,
    /// `--upstream-nats-creds`: a NATS creds file's contents.
    pub nats_creds: Option<String>,
    /// This node's id in a cluster (the batch's `node`).
    pub node: Option<String>,
    /// `--upstream-secret-file`: sign every POST.
    pub secret: Option<UpstreamSecret>,
    /// The most bytes the supervisor holds ([`supervisor_cap`]).
    pub hold_bytes: u64,
}

/// What a worker handed over, or how many of its messages were dropped
/// at the supervisor's bound (finished in their place in the queue, so
/// the worker's oldest-first accounting holds).
struct Arrival {
    worker: usize,
    messages: Vec<UpMessage>,
    dropped: u64,
}

/// The supervisor's handle on the sender thread.
pub(crate) struct Upstream {
    tx: UnboundedSender<Arrival>,
    /// Where batches go (SIGHUP may change a webhook's: the next batch goes there).
    target: Arc<Mutex<Destination>>,
    /// Bytes handed to the sender and not finished ([`UpMessage::bytes`]).
    held: Arc<AtomicU64>,
    hold_bytes: u64,
    pub counters: Arc<Mutex<UpstreamCounters>>,
}

impl Upstream {
    pub(crate) fn start(cfg: SenderConfig, sink: Sink<UpstreamEvent>) -> Result<Upstream> {
        let (tx, rx) = unbounded_channel();
        let counters = Arc::new(Mutex::new(UpstreamCounters::default()));
        let held = Arc::new(AtomicU64::new(0));
        let (c, h, hold_bytes) = (counters.clone(), held.clone(), cfg.hold_bytes);
        let target = Arc::new(Mutex::new(cfg.target.clone()));
        let t = target.clone();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the upstream sender's runtime")?;
        std::thread::Builder::new()
            .name("upstream".into())
            .spawn(move || rt.block_on(run(cfg, rx, sink, c, h, t)))
            .context("starting the upstream sender thread")?;
        Ok(Upstream { tx, target, held, hold_bytes, counters })
    }

    /// Send the next batches to `t` (SIGHUP's `upstream`); false when
    /// that takes a restart (a webhook for NATS, another NATS server).
    pub(crate) fn retarget(&self, t: Destination) -> bool {
        let mut now = self.target.lock().expect("the upstream target");
        match (&*now, &t) {
            (Destination::Webhook(_), Destination::Webhook(_)) => {
                *now = t;
                true
            }
            (a, b) => a == b,
        }
    }

    /// Messages of worker `w` to send; past the supervisor's bound they
    /// are dropped and counted instead.
    pub(crate) fn send(&self, w: usize, messages: Vec<UpMessage>) {
        let cost: u64 = messages.iter().map(|m| m.bytes() as u64).sum();
        let arrival = if self.held.load(Ordering::Relaxed) + cost > self.hold_bytes {
            self.counters.lock().expect("counters").dropped += messages.len() as u64;
            Arrival { worker: w, dropped: messages.len() as u64, messages: Vec::new() }
        } else {
            self.held.fetch_add(cost, Ordering::Relaxed);
            Arrival { worker: w, messages, dropped: 0 }
        };
        let _ = self.tx.send(arrival);
    }
}

/// How many of the queue's first messages (`sizes`: each one's JSON
/// length) the next POST carries: at most `count`, their JSON (with a
/// comma each) at most `bytes`, and always at least one.
pub(crate) fn batch_len(sizes: impl Iterator<Item = usize>, count: usize, bytes: usize) -> usize {
    let mut total = 0;
    let mut n = 0;
    for size in sizes.take(count.max(1)) {
        total += size + 1;
        if n > 0 && total > bytes {
            break;
        }
        n += 1;
    }
    n
}

/// Why a batch is sent again (the `upstream_retries` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// No connection to the backend.
    Connect,
    /// The connection failed mid-request.
    Io,
    /// No answer within the request timeout: sent again halved.
    Timeout,
    /// A 5xx answer.
    Http5xx,
    /// A 408 or 429 answer.
    Http(u16),
    /// NATS: no stream holds the subject (it is looked for, or made, again).
    NoStream,
}

impl Retry {
    /// Its label: connect, io, timeout, http_5xx, http_429, ...
    pub(crate) fn label(self) -> String {
        match self {
            Retry::Connect => "connect".into(),
            Retry::Io => "io".into(),
            Retry::Timeout => "timeout".into(),
            Retry::Http5xx => "http_5xx".into(),
            Retry::Http(status) => format!("http_{status}"),
            Retry::NoStream => "no_stream".into(),
        }
    }
}

/// How a POST ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Taken,
    /// Send again, for this reason.
    Retry(Retry),
    /// An answer that is not retried as such.
    Refused(u16),
}

/// What to do with the batch that was just sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Taken: finish it.
    Taken,
    /// Send a smaller batch at once (413 to more than one message).
    Split,
    /// Finish it without sending it again, counted under this status.
    Refused(u16),
    /// Send again after the back-off, for this reason.
    Retry(Retry),
}

/// The size of the next batch, learned from the backend's answers.
///
/// A 413 bounds the body the backend takes from above (`ceiling`), a 2xx
/// from below (`ok`); batches then grow to halfway between the two, so
/// the backend's limit is found in a few 413s and not hit again on every
/// second batch. A timeout halves the batch without teaching a limit:
/// it grows back by doubling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sizer {
    /// Most messages in the next batch.
    pub count: usize,
    /// Most body bytes in the next batch (at least one message goes).
    pub bytes: usize,
    /// Just under the smallest body the backend refused with 413, at
    /// least [`MIN_BATCH_CEILING`], at most [`MAX_BATCH_BYTES`].
    pub ceiling: usize,
    /// The largest body taken (at most `ceiling`).
    pub ok: usize,
}

impl Default for Sizer {
    fn default() -> Sizer {
        Sizer { count: MAX_BATCH, bytes: MAX_BATCH_BYTES, ceiling: MAX_BATCH_BYTES, ok: 0 }
    }
}

impl Sizer {
    /// The backend answered `outcome` to a batch of `n` messages in a
    /// body of `body` bytes.
    pub(crate) fn after(&mut self, n: usize, body: usize, outcome: Outcome) -> Next {
        match outcome {
            Outcome::Taken => {
                self.ok = self.ok.max(body).min(self.ceiling);
                self.count = (self.count * 2).min(MAX_BATCH);
                self.bytes = (self.bytes * 2).min(self.room());
                Next::Taken
            }
            Outcome::Refused(413) => {
                self.ceiling = self.ceiling.min(body.saturating_sub(1)).max(MIN_BATCH_CEILING);
                self.ok = self.ok.min(self.ceiling);
                self.count = (n / 2).max(1);
                // What was taken before is worth trying again; always less
                // than what was refused.
                self.bytes = (body / 2).max(self.ok).min(body.saturating_sub(1)).max(1);
                if n > 1 {
                    Next::Split
                } else {
                    Next::Refused(413)
                }
            }
            Outcome::Refused(status) => Next::Refused(status),
            Outcome::Retry(reason) => {
                if reason == Retry::Timeout {
                    self.count = (n / 2).max(1);
                    self.bytes = (body / 2).max(1);
                }
                Next::Retry(reason)
            }
        }
    }

    /// How far `bytes` may grow: the cap, or halfway from what was taken
    /// to what was refused.
    fn room(&self) -> usize {
        match self.ceiling < MAX_BATCH_BYTES {
            true => self.ok + (self.ceiling - self.ok) / 2,
            false => MAX_BATCH_BYTES,
        }
        .max(1)
    }
}

pub(crate) type Conn = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// An HTTP/1 connection to `t` (its driver spawned on this runtime).
pub(crate) async fn connect(t: &Target) -> Result<Conn> {
    let stream = tokio::net::TcpStream::connect((t.host.as_str(), t.port)).await?;
    stream.set_nodelay(true)?;
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(send)
}

fn unix_ms() -> u64 {
    crate::proto::push::wall_us() / 1000
}

async fn post(conn: &mut Option<Conn>, t: &Target, secret: Option<&UpstreamSecret>, body: Bytes) -> Outcome {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = match tokio::time::timeout(REQUEST_TIMEOUT, connect(t)).await {
            Ok(Ok(c)) => Some(c),
            _ => return Outcome::Retry(Retry::Connect),
        };
    }
    let Some(c) = conn.as_mut() else { return Outcome::Retry(Retry::Connect) };
    let mut req =
        hyper::Request::post(&t.path).header(hyper::header::HOST, format!("{}:{}", t.host, t.port)).header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(s) = secret {
        // Signed at each attempt: a retry carries a fresh timestamp.
        let ts = unix_ms();
        req = req.header(H_TIMESTAMP, ts.to_string()).header(H_SIGNATURE, signature(s, ts, &body));
    }
    let req = req.body(Full::new(body)).expect("a valid request");
    let answer = async {
        c.ready().await?;
        let resp = c.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok::<u16, anyhow::Error>(status)
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
        Ok(Ok(s)) if (200..300).contains(&s) => Outcome::Taken,
        Ok(Ok(s)) if s == 408 || s == 429 || s >= 500 => {
            *conn = None;
            Outcome::Retry(if s >= 500 { Retry::Http5xx } else { Retry::Http(s) })
        }
        Ok(Ok(s)) => Outcome::Refused(s),
        Ok(Err(_)) => {
            *conn = None;
            Outcome::Retry(Retry::Io)
        }
        Err(_) => {
            *conn = None;
            Outcome::Retry(Retry::Timeout)
        }
    }
}

/// One queued message as it will be sent, or a run of dropped ones.
enum Entry {
    /// As it goes out, and what it counts in `held`.
    Msg { worker: usize, wire: Wire, cost: u64 },
    /// Dropped at the supervisor's bound: finished when it reaches the front.
    Dropped { worker: usize, n: u64 },
}

/// A message as its destination takes it.
enum Wire {
    /// Its JSON, one element of a POST's `messages`.
    Json(Vec<u8>),
    /// A JetStream message.
    Nats(nats::Outgoing),
}

impl Entry {
    /// Its size as sent (a run of dropped ones: None).
    fn json_len(&self) -> Option<usize> {
        match self {
            Entry::Msg { wire: Wire::Json(json), .. } => Some(json.len()),
            Entry::Msg { wire: Wire::Nats(o), .. } => Some(o.len()),
            Entry::Dropped { .. } => None,
        }
    }
}

/// The sender's state between batches.
struct Sender {
    cfg: SenderConfig,
    queue: VecDeque<Entry>,
    sink: Sink<UpstreamEvent>,
    counters: Arc<Mutex<UpstreamCounters>>,
    held: Arc<AtomicU64>,
    drop_noted: Option<Instant>,
    /// NATS: how each message becomes a stream message.
    nats: Option<nats::Shaper>,
}

impl Sender {
    fn take(&mut self, a: Arrival) {
        if a.dropped > 0 {
            self.queue.push_back(Entry::Dropped { worker: a.worker, n: a.dropped });
            if self.drop_noted.is_none_or(|t| t.elapsed() >= DROP_NOTE_EVERY) {
                self.drop_noted = Some(Instant::now());
                let note = format!(
                    "upstream: the supervisor holds its bound of {} MiB for {} (workers that died with messages queued, and a backend that does not take them): {} messages of worker {} dropped (counted as upstream_dropped)",
                    self.cfg.hold_bytes >> 20,
                    self.cfg.target.shown(),
                    a.dropped,
                    a.worker
                );
                let _ = (self.sink)(UpstreamEvent::Note(note));
            }
        }
        for m in a.messages {
            let cost = m.bytes() as u64;
            let wire = match &mut self.nats {
                Some(shape) => Wire::Nats(shape.outgoing(m)),
                None => Wire::Json(serde_json::to_vec(&m).expect("a message serializes")),
            };
            self.queue.push_back(Entry::Msg { worker: a.worker, wire, cost });
        }
    }

    fn gauges(&self) {
        let mut c = self.counters.lock().expect("counters");
        c.queued = self.queue.iter().filter(|e| e.json_len().is_some()).count() as u64;
        c.queued_bytes = self.held.load(Ordering::Relaxed);
    }

    /// Finish the first `n` entries (and dropped ones right behind them);
    /// false when the supervisor is gone.
    fn finish(&mut self, n: usize) -> bool {
        let mut per: BTreeMap<usize, u64> = BTreeMap::new();
        let mut freed = 0;
        let mut taken = 0;
        while let Some(e) = self.queue.front() {
            if taken >= n && e.json_len().is_some() {
                break;
            }
            match self.queue.pop_front().expect("a front") {
                Entry::Msg { worker, cost, .. } => {
                    taken += 1;
                    freed += cost;
                    *per.entry(worker).or_insert(0) += 1;
                }
                Entry::Dropped { worker, n } => *per.entry(worker).or_insert(0) += n,
            }
        }
        self.held.fetch_sub(freed, Ordering::Relaxed);
        self.gauges();
        per.is_empty() || (self.sink)(UpstreamEvent::Done(per))
    }

    /// The body of a POST of the first `n` messages.
    fn body(&self, n: usize) -> Vec<u8> {
        let mut body = self.envelope();
        let close = body.split_off(body.len() - 2);
        for (i, e) in self.queue.iter().take(n).enumerate() {
            if let Entry::Msg { wire: Wire::Json(json), .. } = e {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(json);
            }
        }
        body.extend_from_slice(&close);
        body
    }

    /// `{"node":..,"messages":[]}`.
    fn envelope(&self) -> Vec<u8> {
        format!(r#"{{"node":{},"messages":[]}}"#, serde_json::to_string(&self.cfg.node).expect("serializes")).into_bytes()
    }
}

impl Sender {
    /// Wait until something is to be sent (dropped ones at the front are
    /// finished on the way); false once the supervisor is gone.
    async fn ready(&mut self, rx: &mut UnboundedReceiver<Arrival>) -> bool {
        loop {
            if self.queue.is_empty() {
                match rx.recv().await {
                    Some(a) => self.take(a),
                    None => return false,
                }
            }
            while let Ok(a) = rx.try_recv() {
                self.take(a);
            }
            self.gauges();
            // Dropped ones at the front: finished without sending.
            if self.queue.front().is_some_and(|e| e.json_len().is_none()) {
                if !self.finish(0) {
                    return false;
                }
                continue;
            }
            return true;
        }
    }

    /// `n` messages taken: counted and finished; false once the supervisor is gone.
    fn taken(&mut self, n: usize) -> bool {
        {
            let mut c = self.counters.lock().expect("counters");
            c.delivered += n as u64;
            c.batches += 1;
        }
        self.finish(n)
    }
}

async fn run(
    cfg: SenderConfig,
    mut rx: UnboundedReceiver<Arrival>,
    sink: Sink<UpstreamEvent>,
    counters: Arc<Mutex<UpstreamCounters>>,
    held: Arc<AtomicU64>,
    target: Arc<Mutex<Destination>>,
) {
    let nats = match &cfg.target {
        Destination::Nats(t) => Some(nats::Shaper::new(t, cfg.node.clone())),
        Destination::Webhook(_) => None,
    };
    let mut s = Sender { cfg, queue: VecDeque::new(), sink, counters, held, drop_noted: None, nats };
    if let Destination::Nats(t) = s.cfg.target.clone() {
        return nats::run(t, &mut s, &mut rx).await;
    }
    let overhead = s.envelope().len();
    let mut conn = None;
    let mut backoff = FIRST_BACKOFF;
    let mut sizer = Sizer::default();
    loop {
        if !s.ready(&mut rx).await {
            return;
        }
        let now = target.lock().expect("the upstream target").clone();
        if now != s.cfg.target {
            s.cfg.target = now;
            conn = None;
        }
        let Destination::Webhook(t) = s.cfg.target.clone() else { return };
        let n = batch_len(s.queue.iter().map_while(Entry::json_len), sizer.count, sizer.bytes.saturating_sub(overhead));
        let body = s.body(n);
        let size = body.len();
        let outcome = post(&mut conn, &t, s.cfg.secret.as_ref(), Bytes::from(body)).await;
        match sizer.after(n, size, outcome) {
            Next::Taken => {
                backoff = FIRST_BACKOFF;
                if !s.taken(n) {
                    return;
                }
            }
            Next::Split => {
                crate::stats::counters::bump(&mut s.counters.lock().expect("counters").retries, "http_413");
            }
            Next::Refused(status) => {
                *s.counters.lock().expect("counters").refused.entry(status.to_string()).or_insert(0) += n as u64;
                let why = match status {
                    413 => "it is too large for the backend even alone".to_string(),
                    _ => "A webhook should answer 2xx, or 5xx/429 to have them sent again".to_string(),
                };
                let note = format!(
                    "upstream: {}{} answered {status} to a batch of {n} messages ({size} bytes); they are not sent again (counted as upstream_refused): {why}",
                    t.host, t.path
                );
                if !(s.sink)(UpstreamEvent::Note(note)) || !s.finish(n) {
                    return;
                }
            }
            Next::Retry(reason) => {
                *s.counters.lock().expect("counters").retries.entry(reason.label()).or_insert(0) += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("http://127.0.0.1:8080/hook"), Ok(Target { host: "127.0.0.1".into(), port: 8080, path: "/hook".into() }));
        assert_eq!(parse_url("http://app.local").unwrap().port, 80);
        assert_eq!(parse_url("http://[::1]:9/x").unwrap().host, "::1");
        assert!(parse_url("https://x/").unwrap_err().contains("https is not supported"));
        assert!(parse_url("http://x:port/").unwrap_err().contains("not a port"));
    }

    #[test]
    fn batches_are_capped_by_count_and_bytes() {
        assert_eq!(batch_len([10, 10, 10].into_iter(), 5_000, 1_000), 3);
        assert_eq!(batch_len([10, 10, 10].into_iter(), 2, 1_000), 2, "count");
        assert_eq!(batch_len([10, 10, 10].into_iter(), 5_000, 22), 2, "bytes: 11 each with its comma");
        assert_eq!(batch_len([10_000, 10].into_iter(), 5_000, 100), 1, "one message, however large");
        assert_eq!(batch_len(std::iter::repeat_n(65_600, 5_000), MAX_BATCH, MAX_BATCH_BYTES), 63, "64 KiB messages: ~4 MiB, not 430 MB");
        assert_eq!(batch_len(std::iter::empty(), 10, 10), 0);
    }

    /// Sends a queue of messages of `sizes` to a backend that answers
    /// 413 to bodies over `limit` (and 2xx otherwise) the way the sender
    /// does; returns the bodies it took, the messages refused and the
    /// number of POSTs.
    fn against_a_413_backend(sizes: &[usize], limit: usize, overhead: usize) -> (Vec<Vec<usize>>, Vec<usize>, usize) {
        let mut queue: VecDeque<usize> = sizes.iter().copied().collect();
        let (mut taken, mut refused, mut posts) = (Vec::new(), Vec::new(), 0);
        let mut sizer = Sizer::default();
        while !queue.is_empty() {
            posts += 1;
            assert!(posts < 10_000, "no progress");
            let n = batch_len(queue.iter().copied(), sizer.count, sizer.bytes.saturating_sub(overhead));
            let body = overhead + queue.iter().take(n).map(|s| s + 1).sum::<usize>();
            let outcome = if body > limit { Outcome::Refused(413) } else { Outcome::Taken };
            match sizer.after(n, body, outcome) {
                Next::Taken => taken.push(queue.drain(..n).collect()),
                Next::Refused(413) => refused.extend(queue.drain(..n)),
                Next::Split => {}
                other => panic!("{other:?}"),
            }
        }
        (taken, refused, posts)
    }

    #[test]
    fn a_413_splits_the_batch_until_it_fits() {
        // 5,000 messages of 1 KiB against a backend that takes 100 KB.
        let (taken, refused, posts) = against_a_413_backend(&[1024; 5_000], 100_000, 30);
        assert!(refused.is_empty());
        assert_eq!(taken.iter().map(Vec::len).sum::<usize>(), 5_000, "every message taken");
        assert!(taken.iter().all(|b| 30 + b.iter().map(|s| s + 1).sum::<usize>() <= 100_000));
        // The limit is learned: a few 413s, not one per batch.
        assert!(posts <= taken.len() + 16, "{posts} POSTs for {} batches", taken.len());
    }

    #[test]
    fn a_single_message_refused_with_413_is_dropped_and_the_rest_goes() {
        let (taken, refused, _) = against_a_413_backend(&[100, 100, 500_000, 100], 100_000, 30);
        assert_eq!(refused, [500_000], "only the one too large alone");
        assert_eq!(taken.concat(), [100, 100, 100]);
    }

    #[test]
    fn a_timeout_halves_the_batch_and_success_grows_it_back() {
        let mut s = Sizer::default();
        assert_eq!(s.after(5_000, 4 << 20, Outcome::Retry(Retry::Timeout)), Next::Retry(Retry::Timeout));
        assert_eq!((s.count, s.bytes), (2_500, 2 << 20));
        assert_eq!(s.after(2_500, 2 << 20, Outcome::Retry(Retry::Connect)), Next::Retry(Retry::Connect));
        assert_eq!(s.count, 2_500, "only a timeout says the batch was too large to send in time");
        for _ in 0..2 {
            s.after(1, 10, Outcome::Retry(Retry::Timeout));
        }
        assert_eq!(s.count, 1);
        for _ in 0..25 {
            assert_eq!(s.after(1, 10, Outcome::Taken), Next::Taken);
        }
        assert_eq!(s, Sizer { ok: 10, ..Sizer::default() }, "grown back to the caps");
        assert_eq!(s.after(10, 1000, Outcome::Refused(400)), Next::Refused(400));
    }

    #[test]
    fn a_413_limit_is_learned_not_hit_again() {
        let mut s = Sizer::default();
        assert_eq!(s.after(100, 1_000_000, Outcome::Refused(413)), Next::Split);
        assert_eq!((s.ceiling, s.bytes, s.count), (999_999, 500_000, 50));
        s.after(50, 500_000, Outcome::Taken);
        assert_eq!((s.ok, s.bytes), (500_000, 749_999), "halfway between taken and refused");
        s.after(1, 100, Outcome::Refused(413));
        assert_eq!((s.ceiling, s.ok), (MIN_BATCH_CEILING, MIN_BATCH_CEILING), "never below the floor");
        assert_eq!(s.bytes, 99, "less than what was refused");
    }

    #[test]
    fn posts_are_signed_over_the_timestamp_and_body() {
        let secret = UpstreamSecret::new(vec![b'k'; 32]).unwrap();
        let body = br#"{"node":null,"messages":[]}"#;
        // Python: hmac.new(b"k"*32, b"1700000000000." + body, hashlib.sha256).hexdigest()
        let want = "sha256=834ca0e9f201b2f1a9fe255133860d3c90ef30c36b67307896de836a81ec5309";
        assert_eq!(signature(&secret, 1_700_000_000_000, body), want);
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&[b'k'; 32]).unwrap();
        m.update(b"1700000000000.");
        m.update(body);
        m.verify_slice(&crate_hex(&want["sha256=".len()..])).expect("the hmac crate agrees");
        assert_ne!(signature(&secret, 1_700_000_000_001, body), want, "the timestamp is signed");
        assert!(UpstreamSecret::new(vec![b'k'; 31]).unwrap_err().contains("at least 32"));
        assert_eq!(format!("{secret:?}"), "UpstreamSecret(32 bytes)");
    }

    fn crate_hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn a_message_costs_at_least_its_json() {
        for data in ["plain", "quotes \" and \\ and \n", "\u{1}\u{2}\u{1f} control", "ünïcödé"] {
            let m = UpMessage::message(u64::MAX, Some("a\"user"), Some("chat.room"), true, data.as_bytes());
            let m = UpMessage { ts: u64::MAX, ..m };
            assert!(serde_json::to_vec(&m).unwrap().len() <= m.bytes(), "{data:?}: {} > {}", serde_json::to_vec(&m).unwrap().len(), m.bytes());
            assert!(m.bytes() as u64 <= max_message_cost(data.len()));
        }
        let b = UpMessage::message(1, None, None, false, &[0xff; 3000]);
        assert!(serde_json::to_vec(&b).unwrap().len() <= b.bytes());
    }

    #[test]
    fn shares_bound_the_supervisor() {
        assert_eq!(worker_share(256 << 20, 16), 16 << 20);
        assert_eq!(worker_share(256 << 20, 1_000), MIN_WORKER_BYTES, "at least 1 MiB each");
        assert_eq!(worker_share(256 << 20, 0), 256 << 20);
        let cap = supervisor_cap(16 << 20, 16, 64 << 10);
        assert_eq!(cap, SUPERVISOR_SLACK * 16 * ((16 << 20) + max_message_cost(64 << 10)));
    }

    #[test]
    fn messages_carry_text_or_base64() {
        let m = UpMessage::message(7, Some("alice"), Some("chat"), true, b"hi");
        assert_eq!((m.data.as_deref(), m.data_b64.as_deref()), (Some("hi"), None));
        let b = UpMessage::message(7, None, None, false, &[0xff, 0]);
        assert_eq!((b.data, b.data_b64.as_deref()), (None, Some("/wA=")));
    }
}

#[cfg(test)]
mod retarget_tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};

    /// A backend on loopback that answers each POST 200 and hands its
    /// body over.
    fn backend() -> (u16, std::sync::mpsc::Receiver<String>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    loop {
                        let mut len = 0;
                        loop {
                            let mut line = String::new();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                                len = v.trim().parse().unwrap();
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0; len];
                        r.read_exact(&mut body).unwrap();
                        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").unwrap();
                        let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
                    }
                });
            }
        });
        (port, rx)
    }

    /// SIGHUP's new target: the next batch goes there, on a connection of its own.
    #[test]
    fn a_new_target_takes_the_next_batch() {
        let ((a, got_a), (b, got_b)) = (backend(), backend());
        let target = |port| Target { host: "127.0.0.1".into(), port, path: "/hook".into() };
        let cfg = SenderConfig { target: Destination::Webhook(target(a)), nats_creds: None, node: None, secret: None, hold_bytes: 1 << 20 };
        let up = Upstream::start(cfg, Arc::new(|_| true)).unwrap();
        let limit = Duration::from_secs(10);
        up.send(0, vec![UpMessage::message(1, None, None, true, b"first")]);
        assert!(got_a.recv_timeout(limit).unwrap().contains("first"));
        assert!(up.retarget(Destination::Webhook(target(b))));
        up.send(0, vec![UpMessage::message(1, None, None, true, b"second")]);
        assert!(got_b.recv_timeout(limit).unwrap().contains("second"));
        assert!(got_a.try_recv().is_err(), "nothing more to the old target");
    }
}
