//! What clients say, to the application (`server --upstream URL`): the
//! messages WebSocket clients send (and framed publish frames), and
//! presence joins and leaves, POSTed to a webhook in batches.
//!
//! Workers hand their messages to the supervisor over their pipe; one
//! thread here (a current-thread tokio runtime, hyper's HTTP/1 client on
//! one keep-alive connection) sends whatever has queued as one batch as
//! soon as the previous batch was answered, so a quiet backend gets each
//! message at once and a busy one gets large batches. A batch that fails
//! (no connection, a timeout, 5xx, 408, 429) is sent again after a back-off
//! of 100 ms doubling to 5 s; nothing behind it overtakes it. Each worker
//! may have `--upstream-queue` messages not yet taken by the backend; a
//! client whose message would exceed that is closed with 1013 (try again
//! later) and counted, so nothing is dropped silently. A batch the backend
//! refuses with another 4xx is not sent again: it is counted by status
//! and the operator is told.

use crate::supervise::Sink;
use anyhow::{Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Default `--upstream-queue`: messages per worker the backend has not taken.
pub const DEFAULT_QUEUE: usize = 262_144;
/// Most messages in one POST.
pub const MAX_BATCH: usize = 5_000;
/// Longest a POST may take before it is sent again.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The close reason (and WebSocket 1013) of a client whose worker's
/// upstream queue is full.
pub const FULL: &str = "upstream_full";

/// One thing a client said or did, as the backend receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpMessage {
    /// `message`, `join` (a subscription) or `leave`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The connection's id (answer it with `POST /push/ID`).
    pub conn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// The message as text (WebSocket text, or UTF-8)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// ... or base64 when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_b64: Option<String>,
    /// When the server read it, µs since the epoch.
    pub ts: u64,
}

impl UpMessage {
    /// A message a client sent.
    pub fn message(conn: u64, user: Option<&str>, topic: Option<&str>, text: bool, data: &[u8]) -> UpMessage {
        let (data, data_b64) = match std::str::from_utf8(data) {
            Ok(s) if text || !s.contains('\0') => (Some(s.to_string()), None),
            _ => {
                use base64::Engine;
                (None, Some(base64::engine::general_purpose::STANDARD.encode(data)))
            }
        };
        UpMessage {
            kind: "message".into(),
            conn,
            user: user.map(str::to_string),
            topic: topic.map(str::to_string),
            data,
            data_b64,
            ts: crate::proto::push::wall_us(),
        }
    }

    /// About what it costs queued.
    pub fn bytes(&self) -> usize {
        96 + self.user.as_ref().map_or(0, String::len)
            + self.topic.as_ref().map_or(0, String::len)
            + self.data.as_ref().map_or(0, String::len)
            + self.data_b64.as_ref().map_or(0, String::len)
    }
}

crate::counters! {
    /// The supervisor's webhook sender (`/stats` "upstream", `/metrics`).
    pub struct UpstreamCounters {
        delivered: counter "upstream_delivered" "Messages (and presence events) the --upstream backend took (2xx)",
        batches: counter "upstream_batches" "Batches the --upstream backend took",
        retries: by("reason") "upstream_retries" "Batches sent again after a failure, by reason (connect, timeout, http_5xx, http_429, ...)",
        refused: by("status") "upstream_refused" "Messages the --upstream backend refused with a 4xx that is not retried (not sent again; the operator is told)",
        queued: gauge "upstream_queued" "Messages waiting in the supervisor for the --upstream backend",
    }
}

/// What the sender tells the supervisor.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// The backend took (or refused for good) this many messages of each
    /// worker: their queue has that much room again.
    Done(BTreeMap<usize, u64>),
    /// Something the operator must hear (a refused batch).
    Note(String),
}

/// The `--upstream` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// Check an `--upstream` URL: http://HOST[:PORT][/PATH].
pub fn parse_url(url: &str) -> Result<Target, String> {
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

/// The supervisor's handle on the sender thread.
pub struct Upstream {
    tx: UnboundedSender<(usize, Vec<UpMessage>)>,
    pub counters: Arc<Mutex<UpstreamCounters>>,
}

impl Upstream {
    pub fn start(target: Target, node: Option<String>, sink: Sink<UpstreamEvent>) -> Result<Upstream> {
        let (tx, rx) = unbounded_channel();
        let counters = Arc::new(Mutex::new(UpstreamCounters::default()));
        let c = counters.clone();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the upstream sender's runtime")?;
        std::thread::Builder::new()
            .name("upstream".into())
            .spawn(move || rt.block_on(run(target, node, rx, sink, c)))
            .context("starting the upstream sender thread")?;
        Ok(Upstream { tx, counters })
    }

    /// Messages of worker `w` to send.
    pub fn send(&self, w: usize, messages: Vec<UpMessage>) {
        let _ = self.tx.send((w, messages));
    }
}

type Conn = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Why a POST failed, as a retry reason; None: taken.
enum Outcome {
    Taken,
    Retry(String),
    Refused(u16),
}

async fn connect(t: &Target) -> Result<Conn> {
    let stream = tokio::net::TcpStream::connect((t.host.as_str(), t.port)).await?;
    stream.set_nodelay(true)?;
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(send)
}

async fn post(conn: &mut Option<Conn>, t: &Target, body: Bytes) -> Outcome {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = match tokio::time::timeout(REQUEST_TIMEOUT, connect(t)).await {
            Ok(Ok(c)) => Some(c),
            _ => return Outcome::Retry("connect".into()),
        };
    }
    let Some(c) = conn.as_mut() else { return Outcome::Retry("connect".into()) };
    let req = hyper::Request::post(&t.path)
        .header(hyper::header::HOST, format!("{}:{}", t.host, t.port))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .expect("a valid request");
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
            Outcome::Retry(if s >= 500 { "http_5xx".into() } else { format!("http_{s}") })
        }
        Ok(Ok(s)) => Outcome::Refused(s),
        Ok(Err(_)) => {
            *conn = None;
            Outcome::Retry("io".into())
        }
        Err(_) => {
            *conn = None;
            Outcome::Retry("timeout".into())
        }
    }
}

/// Take what arrived without waiting.
fn drain(rx: &mut UnboundedReceiver<(usize, Vec<UpMessage>)>, queue: &mut VecDeque<(usize, UpMessage)>) {
    while let Ok((w, ms)) = rx.try_recv() {
        queue.extend(ms.into_iter().map(|m| (w, m)));
    }
}

async fn run(
    t: Target,
    node: Option<String>,
    mut rx: UnboundedReceiver<(usize, Vec<UpMessage>)>,
    sink: Sink<UpstreamEvent>,
    counters: Arc<Mutex<UpstreamCounters>>,
) {
    let mut queue: VecDeque<(usize, UpMessage)> = VecDeque::new();
    let mut conn = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        if queue.is_empty() {
            match rx.recv().await {
                Some((w, ms)) => queue.extend(ms.into_iter().map(|m| (w, m))),
                None => return,
            }
        }
        drain(&mut rx, &mut queue);
        counters.lock().expect("counters").queued = queue.len() as u64;
        let n = queue.len().min(MAX_BATCH);
        let batch: Vec<&UpMessage> = queue.iter().take(n).map(|(_, m)| m).collect();
        let body = serde_json::json!({ "node": node, "messages": batch }).to_string();
        let outcome = post(&mut conn, &t, Bytes::from(body)).await;
        let done = |queue: &mut VecDeque<(usize, UpMessage)>| {
            let mut per: BTreeMap<usize, u64> = BTreeMap::new();
            for (w, _) in queue.drain(..n) {
                *per.entry(w).or_insert(0) += 1;
            }
            per
        };
        match outcome {
            Outcome::Taken => {
                backoff = FIRST_BACKOFF;
                {
                    let mut c = counters.lock().expect("counters");
                    c.delivered += n as u64;
                    c.batches += 1;
                }
                let per = done(&mut queue);
                counters.lock().expect("counters").queued = queue.len() as u64;
                if !sink(UpstreamEvent::Done(per)) {
                    return;
                }
            }
            Outcome::Refused(status) => {
                *counters.lock().expect("counters").refused.entry(status.to_string()).or_insert(0) += n as u64;
                let note = format!(
                    "upstream: {}{} answered {status} to a batch of {n} messages; they are not sent again (counted as upstream_refused). A webhook should answer 2xx, or 5xx/429 to have them sent again",
                    t.host, t.path
                );
                if !sink(UpstreamEvent::Note(note)) || !sink(UpstreamEvent::Done(done(&mut queue))) {
                    return;
                }
            }
            Outcome::Retry(reason) => {
                *counters.lock().expect("counters").retries.entry(reason).or_insert(0) += 1;
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
    fn messages_carry_text_or_base64() {
        let m = UpMessage::message(7, Some("alice"), Some("chat"), true, b"hi");
        assert_eq!((m.data.as_deref(), m.data_b64.as_deref()), (Some("hi"), None));
        let b = UpMessage::message(7, None, None, false, &[0xff, 0]);
        assert_eq!((b.data, b.data_b64.as_deref()), (None, Some("/wA=")));
    }
}
