//! The cluster's history in NATS JetStream (`--cluster-history
//! jetstream`, the default): offsets that are the same on every node.
//!
//! Every topic and broadcast message is stored in one stream, `MEGACONN`,
//! under `megaconn.log.<subject>`, and the stream republishes each message
//! it stored to `megaconn.live.<subject>`, which the nodes subscribe to.
//! So a node only ever sees what the stream kept, in the stream's order.
//!
//! Offsets: the publishing node gives a message the offset after the
//! topic's last one and publishes it with
//! `Nats-Expected-Last-Subject-Sequence` set to that last message's stream
//! sequence. The stream refuses it when another node published to the
//! topic in between; the node reads the new last message and tries again.
//! Offsets are therefore contiguous per topic across the cluster. The
//! epoch is chosen (at random) by whoever publishes a topic's first
//! message while the stream holds none of it, and carried on by every
//! later one; a stream that lost its data (NATS restarted with memory
//! storage) gives every topic a new epoch.
//!
//! Each message carries `Megaconn-Position: EPOCH:OFFSET`, signed with the
//! rest ([`super::sign`]), and a `Nats-Msg-Id`, so a publish retried after
//! a lost acknowledgement is stored once.

use crate::proto::push::Position;
use async_nats::jetstream::{self, stream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const STREAM: &str = "MEGACONN";
const LOG_PREFIX: &str = "megaconn.log.";
const LIVE_PREFIX: &str = "megaconn.live.";
/// `EPOCH:OFFSET` of a message in the cluster's history.
pub const H_POSITION: &str = "Megaconn-Position";
/// Tries of one publish when other nodes keep publishing to its topic.
const MAX_TRIES: usize = 16;
/// Most messages one fetch walks (the stream keeps at most `--history`
/// per topic, itself at most 100,000).
const MAX_FETCH: usize = 100_001;
/// Most payload bytes one recovery reads from the stream (the latest
/// ones): a subscriber further behind is told it cannot recover.
pub const MAX_RECOVER_BYTES: usize = 4 << 20;
/// Most payload bytes one gap fill reads (the latest ones; older
/// missing messages count as lost).
pub const MAX_FILL_BYTES: usize = 64 << 20;
/// Longest one fetch (a gap fill or a recovery) may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Topics whose last position a node remembers for its publishes.
const MAX_HEADS: usize = 100_000;

/// `--cluster-history`: where the history that gives every node the same
/// offsets lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HistoryMode {
    /// In NATS JetStream (the stream `MEGACONN`; nats-server runs with -js).
    Jetstream,
    /// In each node only: offsets differ between nodes, so a client resumes only on the node it left.
    Off,
}

/// Where the stream keeps its messages (`--cluster-storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// On the NATS server's disk (its `-sd` directory): survives a NATS restart.
    File,
    /// In the NATS server's memory: lost when it restarts (every topic gets a new epoch).
    Memory,
}

/// The stream's limits, from the node that creates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    pub storage: Storage,
    /// `--history`: messages kept per topic.
    pub per_topic: usize,
    /// `--history-ttl`.
    pub max_age: Duration,
    /// `--history-max-bytes`.
    pub max_bytes: u64,
}

/// The stream's subject for a message that travels on `subject`.
pub fn log_subject(subject: &str) -> String {
    format!("{LOG_PREFIX}{}", subject.strip_prefix("megaconn.").unwrap_or(subject))
}

/// The subject the stream republishes `subject`'s messages on.
pub fn live_subject(subject: &str) -> String {
    format!("{LIVE_PREFIX}{}", subject.strip_prefix("megaconn.").unwrap_or(subject))
}

/// The plain subject (`megaconn.topic.X`, `megaconn.broadcast`) of a
/// stream or republished subject.
pub fn plain_subject(subject: &str) -> Option<String> {
    let rest = subject.strip_prefix(LOG_PREFIX).or_else(|| subject.strip_prefix(LIVE_PREFIX))?;
    Some(format!("megaconn.{rest}"))
}

pub fn position_value(at: Position) -> String {
    format!("{}:{}", at.epoch, at.offset)
}

pub fn parse_position(v: &str) -> Option<Position> {
    let (e, o) = v.split_once(':')?;
    let at = Position { epoch: e.parse().ok()?, offset: o.parse().ok()? };
    (at.epoch != 0 && at.offset != 0).then_some(at)
}

/// A topic's epoch when it starts over: random, never 0.
fn new_epoch() -> u32 {
    rand::Rng::gen_range(&mut rand::thread_rng(), 1..=u32::MAX)
}

/// The last message of a topic as a node knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub at: Position,
    /// Its stream sequence.
    pub seq: u64,
}

/// A message read back from the stream.
#[derive(Debug, Clone)]
pub struct Stored {
    pub seq: u64,
    pub subject: String,
    pub headers: async_nats::HeaderMap,
    pub data: bytes::Bytes,
}

/// How a stored message's headers and data are checked and read by the
/// link: Some(position) when it is a genuine message of the cluster.
pub type Check<'a> = &'a (dyn Fn(&Stored) -> Option<Position> + Sync);

crate::counters! {
    /// The link's work with the JetStream history (`/stats`
    /// cluster.history, `/metrics` megaconn_cluster_history_*).
    pub struct LogCounters {
        stored: counter "stored" "Messages this node stored in the cluster's JetStream history",
        contended: counter "contended" "Publishes tried again because another node published to the topic first",
        gaps: counter "gaps" "Gaps in what NATS delivered, filled from the stream",
        gap_messages: counter "gap_messages" "Messages read from the stream to fill gaps or catch up after a reconnect",
        gap_lost: counter "gap_lost" "Messages a gap fill could not find (older than the stream keeps)",
        fetches: counter "fetches" "Recoveries this node's history could not answer, read from the stream",
    }
}

/// Why a publish to the stream failed.
#[derive(Debug)]
pub struct Failed {
    /// Whether the stream may have stored it anyway.
    pub maybe: bool,
    pub reason: String,
}

pub struct Log {
    js: jetstream::Context,
    cfg: LogConfig,
    /// Per topic subject: its last message, locked while a publish to it
    /// is in flight (a node's publishes to one topic go one at a time).
    heads: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Head>>>>>,
    pub counters: Mutex<LogCounters>,
}

impl Log {
    pub fn new(client: async_nats::Client, cfg: LogConfig) -> Log {
        let mut js = jetstream::new(client);
        js.set_timeout(super::link::CONFIRM_TIMEOUT);
        Log { js, cfg, heads: Mutex::new(HashMap::new()), counters: Mutex::default() }
    }

    /// Count something.
    pub fn count(&self, f: impl FnOnce(&mut LogCounters)) {
        f(&mut self.counters.lock().expect("log counters"));
    }

    fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{LOG_PREFIX}>")],
            max_messages_per_subject: self.cfg.per_topic.max(1) as i64,
            max_age: self.cfg.max_age,
            max_bytes: self.cfg.max_bytes as i64,
            storage: match self.cfg.storage {
                Storage::File => stream::StorageType::File,
                Storage::Memory => stream::StorageType::Memory,
            },
            discard: stream::DiscardPolicy::Old,
            allow_direct: true,
            republish: Some(stream::Republish { source: format!("{LOG_PREFIX}>"), destination: format!("{LIVE_PREFIX}>"), headers_only: false }),
            ..Default::default()
        }
    }

    /// Make sure the stream exists (the first node creates it; the others
    /// use it as it is). Err(fatal, reason).
    pub async fn ensure(&self) -> Result<(), (bool, String)> {
        match self.js.get_or_create_stream(self.stream_config()).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == jetstream::context::CreateStreamErrorKind::JetStreamUnavailable => Err((
                true,
                "the NATS server has no JetStream, which keeps the cluster's history: start it with -js and a store directory (nats-server -js -sd DIR), or run every node with --cluster-history off (offsets then differ between nodes)".into(),
            )),
            Err(e) => Err((false, format!("cannot create or open the JetStream stream {STREAM}: {e}"))),
        }
    }

    fn slot(&self, subject: &str) -> Arc<tokio::sync::Mutex<Option<Head>>> {
        let mut heads = self.heads.lock().expect("heads");
        if heads.len() >= MAX_HEADS && !heads.contains_key(subject) {
            heads.retain(|_, h| Arc::strong_count(h) > 1);
        }
        heads.entry(subject.to_string()).or_default().clone()
    }

    /// A node saw `head` of `subject` go by: later publishes start there.
    pub fn saw(&self, subject: &str, head: Head) {
        let slot = self.heads.lock().expect("heads").get(subject).cloned();
        if let Some(slot) = slot {
            if let Ok(mut h) = slot.try_lock() {
                if h.is_none_or(|h| h.seq < head.seq) {
                    *h = Some(head);
                }
            }
        }
    }

    async fn stream(&self) -> Result<stream::Stream<()>, String> {
        self.js.get_stream_no_info(STREAM).await.map_err(|e| format!("cannot open the JetStream stream {STREAM}: {e}"))
    }

    /// The last message the stream has of `subject` (plain).
    pub async fn last_stored(&self, subject: &str) -> Result<Option<Stored>, String> {
        let subject = log_subject(subject);
        match self.stream().await?.direct_get_last_for_subject(subject.as_str()).await {
            Ok(m) => Ok(Some(Stored { seq: m.sequence, subject: m.subject.to_string(), headers: m.headers, data: m.payload })),
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read the last message of {subject} from JetStream: {e}")),
        }
    }

    /// Where the stream's `subject` (plain) is: its last message's
    /// position and stream sequence.
    pub async fn last(&self, subject: &str, check: Check<'_>) -> Result<Option<Head>, String> {
        let Some(s) = self.last_stored(subject).await? else { return Ok(None) };
        // Not from a node (someone with write access to the stream's
        // subjects): the topic goes on after it, in a new epoch, rather
        // than being blocked by it.
        Ok(Some(check(&s).map_or(Head { at: Position { epoch: new_epoch(), offset: 0 }, seq: s.seq }, |at| Head { at, seq: s.seq })))
    }

    /// Store one message of `subject` (plain) at the next offset of its
    /// topic: `headers` signs it for that position. Returns the position.
    pub async fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        data: bytes::Bytes,
        headers: impl Fn(Position) -> async_nats::HeaderMap,
        check: Check<'_>,
    ) -> Result<Position, Failed> {
        let plain = subject;
        let subject = log_subject(subject);
        let slot = self.slot(&subject);
        let mut head = slot.lock().await;
        let mut maybe = false;
        let mut last_error = String::new();
        for _ in 0..MAX_TRIES {
            if head.is_none() {
                *head = self.last(plain, check).await.map_err(|reason| Failed { maybe, reason })?;
            }
            let (at, expect) = match *head {
                Some(h) => (Position { epoch: h.at.epoch, offset: h.at.offset + 1 }, h.seq),
                None => (Position { epoch: new_epoch(), offset: 1 }, 0),
            };
            let mut h = headers(at);
            h.insert("Nats-Expected-Last-Subject-Sequence", expect.to_string().as_str());
            h.insert("Nats-Msg-Id", msg_id);
            let sent = match self.js.publish_with_headers(subject.clone(), h, data.clone()).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(ack) => {
                    // A duplicate: a try whose acknowledgement was lost
                    // stored it, at the position computed then (the same).
                    *head = Some(Head { at, seq: ack.sequence });
                    self.count(|c| c.stored += 1);
                    return Ok(at);
                }
                Err(e) => {
                    use jetstream::context::PublishErrorKind as K;
                    last_error = e.to_string();
                    match e.kind() {
                        K::WrongLastSequence => {
                            self.count(|c| c.contended += 1);
                            *head = None;
                        }
                        K::StreamNotFound => {
                            // NATS lost the stream (memory storage, restarted).
                            *head = None;
                            if let Err((_, why)) = self.ensure().await {
                                return Err(Failed { maybe, reason: why });
                            }
                        }
                        K::TimedOut => maybe = true,
                        _ => return Err(Failed { maybe: maybe || e.kind() != K::BrokenPipe, reason: format!("JetStream did not store the publish: {e}") }),
                    }
                }
            }
        }
        Err(Failed { maybe, reason: format!("JetStream did not store the publish after {MAX_TRIES} tries (last: {last_error})") })
    }

    /// The messages of `subject` (plain) the stream has from stream
    /// sequence `from` on that `keep` takes, oldest first; at most
    /// `max_bytes` of payload (the latest ones when it must cut).
    pub async fn fetch(
        &self,
        subject: &str,
        from: u64,
        keep: &(dyn Fn(Position) -> bool + Sync),
        check: Check<'_>,
        max_bytes: usize,
    ) -> Result<Vec<(Position, Stored)>, String> {
        let subject = log_subject(subject);
        let walk = async {
            let stream = self.stream().await?;
            let mut out: std::collections::VecDeque<(Position, Stored)> = Default::default();
            let mut bytes = 0;
            let mut seq = from.max(1);
            for _ in 0..MAX_FETCH {
                let m = match stream.direct_get_next_for_subject(subject.as_str(), Some(seq)).await {
                    Ok(m) => m,
                    Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => break,
                    Err(e) => return Err(format!("cannot read {subject} from JetStream: {e}")),
                };
                seq = m.sequence + 1;
                let s = Stored { seq: m.sequence, subject: m.subject.to_string(), headers: m.headers, data: m.payload };
                if let Some(at) = check(&s).filter(|at| keep(*at)) {
                    bytes += s.data.len();
                    out.push_back((at, s));
                    while bytes > max_bytes {
                        let Some((_, old)) = out.pop_front() else { break };
                        bytes -= old.data.len();
                    }
                }
            }
            Ok(out.into())
        };
        tokio::time::timeout(FETCH_TIMEOUT, walk).await.map_err(|_| format!("reading {subject} from JetStream took over {} s", FETCH_TIMEOUT.as_secs()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_and_positions() {
        assert_eq!(log_subject("megaconn.topic.a.b"), "megaconn.log.topic.a.b");
        assert_eq!(live_subject("megaconn.broadcast"), "megaconn.live.broadcast");
        assert_eq!(plain_subject("megaconn.live.topic.x").as_deref(), Some("megaconn.topic.x"));
        assert_eq!(plain_subject("megaconn.log.broadcast").as_deref(), Some("megaconn.broadcast"));
        assert_eq!(plain_subject("megaconn.topic.x"), None);
        let at = Position { epoch: 7, offset: 42 };
        assert_eq!(parse_position(&position_value(at)), Some(at));
        assert_eq!(parse_position("0:1"), None);
        assert_eq!(parse_position("1:x"), None);
    }
}
