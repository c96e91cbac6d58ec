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
//! Each message carries `Megaconn-Position: EPOCH:OFFSET` and
//! `Megaconn-Follows: SEQ` (the stream sequence of the topic's message it
//! was published after, the `Nats-Expected-Last-Subject-Sequence` the
//! stream checked), signed with the rest ([`super::sign`]), and a
//! `Nats-Msg-Id`, so a publish retried after a lost acknowledgement is
//! stored once.
//!
//! Anyone who may publish on `megaconn.log.>` can store a copy of an old
//! signed message again, at the stream's end. Its signature still holds,
//! but not its place: every reader ([`Log::last`], [`Log::fetch`], a
//! follower's live messages) checks a message against the one before it
//! in the stream ([`Chain`]) and against the time the stream stored it.
//! One out of place is skipped and counted (`poisoned`): never the head a
//! publish continues, never returned for an offset (issue 42, finding 9).

use super::error::LogError;
use crate::proto::push::Position;
use async_nats::jetstream::{self, stream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) const STREAM: &str = "MEGACONN";
const LOG_PREFIX: &str = "megaconn.log.";
const LIVE_PREFIX: &str = "megaconn.live.";
/// `EPOCH:OFFSET` of a message in the cluster's history.
pub(crate) const H_POSITION: &str = "Megaconn-Position";
/// The stream sequence of the topic's previous message when a message
/// was published (0: none): where in the stream it belongs.
pub(crate) const H_FOLLOWS: &str = "Megaconn-Follows";
/// Most a genuine message's signing time and the time the stream stored
/// it may differ (the clocks of the nodes and of NATS agree within it): a
/// message stored later than that is a copy stored again.
pub(crate) const STORE_WINDOW: Duration = super::sign::WINDOW;
/// Least time between two warning lines about messages out of place (an
/// attacker chooses how many there are).
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Tries of one publish when other nodes keep publishing to its topic.
const MAX_TRIES: usize = 16;
/// Most messages one fetch walks (the stream keeps at most `--history`
/// per topic, itself at most 100,000).
const MAX_FETCH: usize = 100_001;
/// Most payload bytes one recovery reads from the stream (the latest
/// ones): a subscriber further behind is told it cannot recover.
pub(crate) const MAX_RECOVER_BYTES: usize = 4 << 20;
/// Most payload bytes one gap fill reads (the latest ones; older
/// missing messages count as lost).
pub(crate) const MAX_FILL_BYTES: usize = 64 << 20;
/// Longest one fetch (a gap fill or a recovery) may take.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Topics whose last position a node remembers for its publishes.
const MAX_HEADS: usize = 100_000;

/// `--cluster-history`: where the history that gives every node the same
/// offsets lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HistoryMode {
    /// In NATS JetStream (the stream `MEGACONN`; nats-server runs with -js).
    Jetstream,
    /// In each node only: offsets differ between nodes, so a client resumes only on the node it left.
    Off,
}

/// Where the stream keeps its messages (`--cluster-storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Storage {
    /// On the NATS server's disk (its `-sd` directory): survives a NATS restart.
    File,
    /// In the NATS server's memory: lost when it restarts (every topic gets a new epoch).
    Memory,
}

/// The stream's limits, from the node that creates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogConfig {
    pub storage: Storage,
    /// `--history`: messages kept per topic.
    pub per_topic: usize,
    /// `--history-ttl`.
    pub max_age: Duration,
    /// `--history-max-bytes`.
    pub max_bytes: u64,
}

/// The stream's subject for a message that travels on `subject`.
pub(crate) fn log_subject(subject: &str) -> String {
    format!("{LOG_PREFIX}{}", subject.strip_prefix("megaconn.").unwrap_or(subject))
}

/// The subject the stream republishes `subject`'s messages on.
pub(crate) fn live_subject(subject: &str) -> String {
    format!("{LIVE_PREFIX}{}", subject.strip_prefix("megaconn.").unwrap_or(subject))
}

/// The plain subject (`megaconn.topic.X`, `megaconn.broadcast`) of a
/// stream or republished subject.
pub(crate) fn plain_subject(subject: &str) -> Option<String> {
    let rest = subject.strip_prefix(LOG_PREFIX).or_else(|| subject.strip_prefix(LIVE_PREFIX))?;
    Some(format!("megaconn.{rest}"))
}

pub(crate) fn position_value(at: Position) -> String {
    format!("{}:{}", at.epoch, at.offset)
}

pub(crate) fn parse_position(v: &str) -> Option<Position> {
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
pub(crate) struct Head {
    /// The position of the topic's last message in place (offset 0: none
    /// yet in this epoch).
    pub at: Position,
    /// The stream sequence of the topic's last message (in place or not):
    /// the next publish expects it.
    pub seq: u64,
}

impl Head {
    /// A reader's knowledge of the stream up to this head.
    pub(crate) fn chain(self) -> Chain {
        Chain { seq: Some(self.seq).filter(|s| *s > 0), at: Some(self.at).filter(|a| a.offset > 0 && a.epoch > 0) }
    }
}

/// A message read back from the stream.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub seq: u64,
    pub subject: String,
    pub headers: async_nats::HeaderMap,
    pub data: bytes::Bytes,
    /// When the stream stored it, in Unix milliseconds.
    pub stored_ms: u64,
}

impl Stored {
    fn read(m: jetstream::message::StreamMessage) -> Stored {
        let stored_ms = u64::try_from(m.time.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        Stored { seq: m.sequence, subject: m.subject.to_string(), headers: m.headers, data: m.payload, stored_ms }
    }
}

/// Where a genuine (signed) message says it belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub at: Position,
    /// [`H_FOLLOWS`].
    pub follows: u64,
    /// Its signing time, in Unix milliseconds.
    pub signed_ms: u64,
}

/// How a stored message's headers and data are checked and read by the
/// link: Some(place) when it is a genuine message of the cluster.
pub(crate) type Check<'a> = &'a (dyn Fn(&Stored) -> Option<Place> + Sync);

/// What a reader knows of a topic's stream before a message: the stream
/// sequence of the topic's message before it (None: not known, e.g. the
/// first one a walk from the start finds) and the position of the last
/// one in place (None: none yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Chain {
    pub seq: Option<u64>,
    pub at: Option<Position>,
}

impl Chain {
    /// Whether the genuine message at stream sequence `seq`, which says it
    /// belongs at `place` and was stored at `stored_ms`, is where it says;
    /// the chain moves past it either way. In place: stored when it was
    /// signed; after the message it says it follows, at the next offset
    /// of the last one in place; or the first of a new epoch (offset 1,
    /// published when the stream had none of the topic); or after
    /// messages this reader never saw (the stream trimmed them), later
    /// than the last one it has.
    pub(crate) fn admit(&mut self, seq: u64, place: Place, stored_ms: u64) -> bool {
        let at = place.at;
        let next = |a: Position| a.epoch == at.epoch && at.offset == a.offset + 1;
        let recent = place.signed_ms.abs_diff(stored_ms) <= STORE_WINDOW.as_millis() as u64;
        let new_epoch = at.offset == 1 && place.follows == 0 && self.at.is_none_or(|a| a.epoch != at.epoch);
        let linked = match self.seq {
            None => true,
            Some(p) if place.follows == p => self.at.is_none_or(next),
            Some(p) if place.follows > p => self.at.is_none_or(|a| a.epoch != at.epoch || at.offset > a.offset),
            Some(_) => false,
        };
        let ok = recent && place.follows < seq && (new_epoch || linked);
        self.skip(seq);
        if ok {
            self.at = Some(at);
        }
        ok
    }

    /// A message at stream sequence `seq` that is not a node's at all.
    pub(crate) fn skip(&mut self, seq: u64) {
        self.seq = Some(seq);
    }
}

crate::counters! {
    /// The link's work with the JetStream history (`/stats`
    /// cluster.history, `/metrics` megaconn_cluster_history_*).
    pub(crate) struct LogCounters {
        stored: counter "stored" "Messages this node stored in the cluster's JetStream history",
        contended: counter "contended" "Publishes tried again because another node published to the topic first",
        gaps: counter "gaps" "Gaps in what NATS delivered, filled from the stream",
        gap_messages: counter "gap_messages" "Messages read from the stream to fill gaps or catch up after a reconnect",
        gap_lost: counter "gap_lost" "Messages a gap fill could not find (older than the stream keeps)",
        fetches: counter "fetches" "Recoveries this node's history could not answer, read from the stream",
        poisoned: counter "poisoned" "Signed messages read out of place in the stream (a copy stored again by someone who may publish on its subjects): skipped",
    }
}

/// Why a publish to the stream failed.
#[derive(Debug)]
pub(crate) struct Failed {
    /// Whether the stream may have stored it anyway.
    pub maybe: bool,
    pub reason: LogError,
}

pub(crate) struct Log {
    js: jetstream::Context,
    cfg: LogConfig,
    /// Per topic subject: its last message, locked while a publish to it
    /// is in flight (a node's publishes to one topic go one at a time).
    heads: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Head>>>>>,
    pub counters: Mutex<LogCounters>,
    /// When the last warning about a message out of place was written.
    warned: Mutex<Option<std::time::Instant>>,
}

impl Log {
    pub(crate) fn new(client: async_nats::Client, cfg: LogConfig) -> Log {
        let mut js = jetstream::new(client);
        js.set_timeout(super::link::CONFIRM_TIMEOUT);
        Log { js, cfg, heads: Mutex::new(HashMap::new()), counters: Mutex::default(), warned: Mutex::default() }
    }

    /// Count something.
    pub(crate) fn count(&self, f: impl FnOnce(&mut LogCounters)) {
        f(&mut self.counters.lock().expect("log counters"));
    }

    /// A message out of place: counted, and a warning line (at most one
    /// per [`WARN_EVERY`]).
    pub(crate) fn poisoned(&self, s: &Stored, place: Place) {
        let mut total = 0;
        self.count(|c| {
            c.poisoned += 1;
            total = c.poisoned;
        });
        let mut warned = self.warned.lock().expect("warned");
        if warned.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            *warned = Some(std::time::Instant::now());
            eprintln!(
                "warning: skipped a signed message of {} at stream sequence {} that says it belongs at {} after sequence {}: a copy stored again by someone who may publish on the stream's subjects ({total} so far; cluster.history.poisoned)",
                s.subject,
                s.seq,
                position_value(place.at),
                place.follows
            );
        }
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
    pub(crate) async fn ensure(&self) -> Result<(), (bool, String)> {
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
    pub(crate) fn saw(&self, subject: &str, head: Head) {
        let slot = self.heads.lock().expect("heads").get(subject).cloned();
        if let Some(slot) = slot {
            if let Ok(mut h) = slot.try_lock() {
                if h.is_none_or(|h| h.seq < head.seq) {
                    *h = Some(head);
                }
            }
        }
    }

    async fn stream(&self) -> Result<stream::Stream<()>, LogError> {
        self.js.get_stream_no_info(STREAM).await.map_err(LogError::Open)
    }

    /// The last message the stream has of `subject` (plain).
    pub(crate) async fn last_stored(&self, subject: &str) -> Result<Option<Stored>, LogError> {
        let subject = log_subject(subject);
        match self.stream().await?.direct_get_last_for_subject(subject.as_str()).await {
            Ok(m) => Ok(Some(Stored::read(m))),
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
            Err(source) => Err(LogError::Read { subject, source }),
        }
    }

    /// Where the stream's `subject` (plain) is: the position of its last
    /// message in place and the stream sequence of its last message.
    pub(crate) async fn last(&self, subject: &str, check: Check<'_>) -> Result<Option<Head>, LogError> {
        Ok(self.tip(subject, check).await?.map(|(head, _)| head))
    }

    /// [`Log::last`], with the last message in place (None: the stream
    /// has none of the topic in place; the topic then goes on after what
    /// it has, in a new epoch, rather than being blocked by it).
    pub(crate) async fn tip(&self, subject: &str, check: Check<'_>) -> Result<Option<(Head, Option<Stored>)>, LogError> {
        let Some(s) = self.last_stored(subject).await? else { return Ok(None) };
        if let Some(place) = check(&s) {
            if self.in_place(subject, &s, place).await? {
                return Ok(Some((Head { at: place.at, seq: s.seq }, Some(s))));
            }
        }
        // Not a node's, or out of place: the last one in place is found
        // by reading the topic from its start.
        let (mut got, chain) = self.walk(subject, Chain::default(), &|_| true, check, usize::MAX, true).await?;
        let at = chain.at.unwrap_or(Position { epoch: new_epoch(), offset: 0 });
        Ok(Some((Head { at, seq: chain.seq.unwrap_or(0).max(s.seq) }, got.pop().map(|(_, s)| s))))
    }

    /// Whether the topic's last message `s` is in place without reading
    /// the topic: stored when it was signed, and the stream's message of
    /// the topic before it is the one it follows (or it has none).
    async fn in_place(&self, subject: &str, s: &Stored, place: Place) -> Result<bool, LogError> {
        // Out of place by its own fields: the walk that follows counts it.
        if !Chain::default().admit(s.seq, place, s.stored_ms) {
            return Ok(false);
        }
        let log = log_subject(subject);
        let after = match self.stream().await?.direct_get_next_for_subject(log.as_str(), Some(place.follows + 1)).await {
            Ok(m) => m.sequence,
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => 0,
            Err(source) => return Err(LogError::Read { subject: log, source }),
        };
        Ok(after == s.seq)
    }

    /// Store one message of `subject` (plain) at the next offset of its
    /// topic: `headers` signs it for that position. Returns the position.
    pub(crate) async fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        data: bytes::Bytes,
        headers: impl Fn(Position, u64) -> async_nats::HeaderMap,
        check: Check<'_>,
    ) -> Result<Position, Failed> {
        let plain = subject;
        let subject = log_subject(subject);
        let slot = self.slot(&subject);
        let mut head = slot.lock().await;
        let mut maybe = false;
        let mut last_error = None;
        for _ in 0..MAX_TRIES {
            if head.is_none() {
                *head = self.last(plain, check).await.map_err(|reason| Failed { maybe, reason })?;
            }
            let (at, expect) = match *head {
                Some(h) => (Position { epoch: h.at.epoch, offset: h.at.offset + 1 }, h.seq),
                None => (Position { epoch: new_epoch(), offset: 1 }, 0),
            };
            let mut h = headers(at, expect);
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
                    match e.kind() {
                        K::WrongLastSequence => {
                            self.count(|c| c.contended += 1);
                            *head = None;
                            last_error = Some(e);
                        }
                        K::StreamNotFound => {
                            // NATS lost the stream (memory storage, restarted).
                            *head = None;
                            if let Err((_, why)) = self.ensure().await {
                                return Err(Failed { maybe, reason: LogError::Unavailable(why) });
                            }
                            last_error = Some(e);
                        }
                        K::TimedOut => {
                            maybe = true;
                            last_error = Some(e);
                        }
                        _ => return Err(Failed { maybe: maybe || e.kind() != K::BrokenPipe, reason: LogError::NotStored(e) }),
                    }
                }
            }
        }
        let last = last_error.map_or_else(String::new, |e| e.to_string());
        Err(Failed { maybe, reason: LogError::Tries { tries: MAX_TRIES, last } })
    }

    /// The messages of `subject` (plain) in place that the stream has
    /// after `from` (a reader's head; the topic's start when its seq is
    /// 0) and that `keep` takes, oldest first; at most `max_bytes` of
    /// payload (the latest ones when it must cut).
    pub(crate) async fn fetch(
        &self,
        subject: &str,
        from: Head,
        keep: &(dyn Fn(Position) -> bool + Sync),
        check: Check<'_>,
        max_bytes: usize,
    ) -> Result<Vec<(Position, Stored)>, LogError> {
        Ok(self.walk(subject, from.chain(), keep, check, max_bytes, false).await?.0)
    }

    /// Read `subject` (plain) after `chain` (from its start when its seq
    /// is None), checking each message against the one before it: the
    /// messages in place that `keep` takes (at most `max_bytes` of
    /// payload; `last_only`: only the last one), and the chain at the end.
    async fn walk(
        &self,
        subject: &str,
        mut chain: Chain,
        keep: &(dyn Fn(Position) -> bool + Sync),
        check: Check<'_>,
        max_bytes: usize,
        last_only: bool,
    ) -> Result<(Vec<(Position, Stored)>, Chain), LogError> {
        let subject = log_subject(subject);
        let walk = async {
            let stream = self.stream().await?;
            let mut out: std::collections::VecDeque<(Position, Stored)> = Default::default();
            let mut bytes = 0;
            let mut seq = chain.seq.map_or(1, |s| s + 1);
            for _ in 0..MAX_FETCH {
                let m = match stream.direct_get_next_for_subject(subject.as_str(), Some(seq)).await {
                    Ok(m) => m,
                    Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => break,
                    Err(source) => return Err(LogError::Read { subject: subject.clone(), source }),
                };
                seq = m.sequence + 1;
                let s = Stored::read(m);
                let Some(place) = check(&s) else {
                    chain.skip(s.seq);
                    continue;
                };
                if !chain.admit(s.seq, place, s.stored_ms) {
                    self.poisoned(&s, place);
                    continue;
                }
                if keep(place.at) {
                    if last_only {
                        out.clear();
                        bytes = 0;
                    }
                    bytes += s.data.len();
                    out.push_back((place.at, s));
                    while bytes > max_bytes {
                        let Some((_, old)) = out.pop_front() else { break };
                        bytes -= old.data.len();
                    }
                }
            }
            Ok((out.into(), chain))
        };
        tokio::time::timeout(FETCH_TIMEOUT, walk).await.map_err(|_| LogError::Slow { subject: subject.clone() })?
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

    const T: u64 = 1_000_000;

    fn place(epoch: u32, offset: u64, follows: u64) -> Place {
        Place { at: Position { epoch, offset }, follows, signed_ms: T }
    }

    /// Walk `stream` (stream sequence, place) from `chain`: the sequences
    /// admitted.
    fn walk(mut chain: Chain, stream: &[(u64, Place)]) -> Vec<u64> {
        stream.iter().filter(|(seq, p)| chain.admit(*seq, *p, T)).map(|(seq, _)| *seq).collect()
    }

    /// Issue 42, finding 9: a copy of an old signed message stored again
    /// at the stream's end is out of place wherever a reader starts, and
    /// what nodes publish after it is in place.
    #[test]
    fn a_copy_stored_again_is_out_of_place_and_what_follows_it_is_not() {
        // m1..m3 at 1..3, a copy of m1 at 10, then m4 (published after
        // the copy, continuing m3) and m5.
        let stream = [(1, place(7, 1, 0)), (2, place(7, 2, 1)), (3, place(7, 3, 2)), (10, place(7, 1, 0)), (11, place(7, 4, 10)), (12, place(7, 5, 11))];
        assert_eq!(walk(Chain::default(), &stream), [1, 2, 3, 11, 12], "from the start");
        let head = Head { at: Position { epoch: 7, offset: 3 }, seq: 3 };
        assert_eq!(walk(head.chain(), &stream[3..]), [11, 12], "from a follower's head");
        // A copy of m2 (follows 1) or of m3 is out of place too.
        for copy in [place(7, 2, 1), place(7, 3, 2)] {
            let mut chain = head.chain();
            assert!(!chain.admit(10, copy, T), "{copy:?}");
            assert_eq!(chain, Chain { seq: Some(10), at: Some(head.at) }, "the chain moves past it, its head stays");
        }
        // The chain moves past it: what follows the copy is in place.
        let mut chain = head.chain();
        assert!(!chain.admit(10, place(7, 1, 0), T) && chain.admit(11, place(7, 4, 10), T));
        // A copy that says it is the next one but follows an older message.
        assert!(!head.chain().admit(10, place(7, 4, 2), T));
    }

    #[test]
    fn a_message_stored_long_after_it_was_signed_is_a_copy() {
        let window = STORE_WINDOW.as_millis() as u64;
        assert!(Chain::default().admit(1, place(7, 1, 0), T + window));
        assert!(!Chain::default().admit(1, place(7, 1, 0), T + window + 1), "stored again later");
        assert!(!Chain::default().admit(5, place(7, 2, 5), T), "follows itself");
    }

    #[test]
    fn genuine_histories_are_in_place() {
        // The first message a walk finds, whatever it follows (older ones trimmed).
        assert_eq!(walk(Chain::default(), &[(40, place(7, 9, 38)), (41, place(7, 10, 40))]), [40, 41]);
        // A new epoch: the stream had none of the topic (expired, or NATS lost its memory).
        let head = Head { at: Position { epoch: 7, offset: 9 }, seq: 41 };
        assert!(head.chain().admit(3, place(8, 1, 0), T));
        // A stranger's message (not signed) before a node's: skipped, and
        // the topic goes on after it, in a new epoch when nothing before it is in place.
        let mut chain = Chain::default();
        chain.skip(1);
        assert!(chain.admit(2, place(9, 1, 1), T));
        let mut chain = head.chain();
        chain.skip(42);
        assert!(chain.admit(43, place(7, 10, 42), T), "continues after the stranger's message");
        // Messages this reader never saw (trimmed before it read them): later ones are taken.
        assert!(head.chain().admit(60, place(7, 15, 59), T));
        assert!(!head.chain().admit(60, place(7, 9, 59), T), "not later than the head");
        // A head with no message in place yet (offset 0) takes the first one.
        assert!(Head { at: Position { epoch: 5, offset: 0 }, seq: 4 }.chain().admit(6, place(9, 1, 4), T));
    }
}
