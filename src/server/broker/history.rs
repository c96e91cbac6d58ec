//! What was published, kept by the server's supervisor so a subscriber
//! that comes back can get what it missed.
//!
//! Every topic (and `*`, the broadcasts) has a log: an epoch, the offset
//! of its last message (the head), and its latest messages. Offsets go up
//! by one per message, so a subscriber that says "I have epoch E up to
//! offset N" gets exactly N+1..head, or is told it cannot (the epoch is
//! not this log's, or the oldest kept message is later than N+1).
//!
//! Bounds: `--history` messages per topic, `--history-ttl` of age, and
//! `--history-max-bytes` for the whole node (payloads, per-message
//! records and per-topic records together). Over the byte cap, topics
//! give up their oldest message in turn; a log left with nothing kept and
//! no publish within the TTL is forgotten, and a later publish starts a
//! new epoch. Epochs are random and never 0 (0 means "nothing seen").
//!
//! The epoch is per log and lives in this process: a restarted server has
//! new epochs, so a client resuming across the restart is told
//! `recovered: false` rather than given a wrong continuation.
//!
//! One answer to a worker carries at most [`MAX_REPLY_BYTES`] of payload:
//! the latest messages that fit, so it always ends at the head. A cut
//! answer is final for everyone at or after the offset it was asked
//! from: asking again from there is cut at the same place (or later, once
//! more is published), so such a subscriber is told it cannot recover
//! ([`Slice::covers`] says `Some(false)`), never sent to ask again.

use crate::proto::push::Position;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Default `--history`: messages kept per topic.
pub(crate) const DEFAULT_SIZE: usize = 100;
/// Largest `--history`.
pub(crate) const MAX_SIZE: usize = 100_000;
/// Default `--history-ttl`.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// Default `--history-max-bytes`: the whole node's history.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// Most payload bytes one recovery answer carries to a worker (the
/// latest messages that fit); a subscriber that missed more than that
/// is told it cannot recover. The answer is one `History` frame on the
/// bus from the topic's shard (`proto/bus.rs`, payloads raw) and its
/// replay is written to each waiting connection at once, so it is kept
/// to a few of the largest pushes (`--max-push-bytes` is at most 1 MiB).
pub(crate) const MAX_REPLY_BYTES: usize = 4 << 20;
/// Bytes counted per kept message besides its payload (its record).
pub(crate) const PER_MESSAGE: u64 = std::mem::size_of::<Kept>() as u64;
/// Bytes counted per topic log besides its name.
pub(crate) const PER_LOG: u64 = 96;

/// `--history`, `--history-ttl`, `--history-max-bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HistoryConfig {
    /// Messages kept per topic (0: none; offsets and epochs still count).
    pub size: usize,
    pub ttl: Duration,
    pub max_bytes: u64,
}

impl Default for HistoryConfig {
    fn default() -> HistoryConfig {
        HistoryConfig { size: DEFAULT_SIZE, ttl: DEFAULT_TTL, max_bytes: DEFAULT_MAX_BYTES }
    }
}

crate::counters! {
    /// The supervisor's history (`/stats` "history", `/metrics`).
    pub(crate) struct HistoryCounters {
        topics: gauge "history_topics" "Topics (and * for broadcasts) with a history log",
        messages: gauge "history_messages" "Messages kept for recovery",
        bytes: bytes "history_memory" "Bytes the history holds: payloads, per-message and per-topic records",
        evicted: by("reason") "history_evicted" "Messages dropped from history, by reason (size: --history, ttl: --history-ttl, bytes: --history-max-bytes, gap: a cluster node's log restarted at the cluster's offsets)",
        served: counter "history_served" "Recovery answers sent to workers",
    }
}

/// One kept message (its offset follows from its place in the log).
struct Kept {
    publish_us: u64,
    data: Box<[u8]>,
}

struct Log {
    epoch: u32,
    head: u64,
    /// The latest messages, oldest first: offsets head-len+1 ..= head.
    kept: VecDeque<Kept>,
    /// Wall-clock µs of the last publish.
    last_us: u64,
}

impl Log {
    fn first(&self) -> u64 {
        self.head + 1 - self.kept.len() as u64
    }
}

/// A topic's history from some offset on, as a recovery needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Slice {
    pub topic: String,
    /// The offset it was asked after (u64::MAX: for the position only):
    /// a subscriber at or after it that the slice does not reach was cut
    /// off by the byte bound, not by someone else's question.
    pub after: u64,
    /// Epoch 0: the topic has no log (nothing published, or forgotten).
    pub epoch: u32,
    pub head: u64,
    /// Messages after the offset asked for, oldest first, up to the
    /// head. They start later than asked when the history no longer
    /// reaches back, or the answer reached [`MAX_REPLY_BYTES`].
    pub messages: Vec<Message>,
    /// The oldest offset the history still has (head + 1: none).
    pub oldest: u64,
}

/// One message of a [`Slice`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Message {
    pub offset: u64,
    pub publish_us: u64,
    /// The payload, raw (a `History` frame carries it so on the bus).
    pub data: Vec<u8>,
}

impl Slice {
    /// Whether a subscriber at `at` can continue from this slice with
    /// nothing missing: None when the slice was asked for a later offset
    /// and the history itself reaches back to `at` (ask again from
    /// `at`). A slice asked from `at` or earlier that still starts too
    /// late was cut at the byte bound: Some(false), as asking again from
    /// `at` would be cut the same way.
    pub(crate) fn covers(&self, at: Position) -> Option<bool> {
        let oldest_kept = self.oldest;
        // Nothing seen: everything since the log began must be here.
        let after = if at == Position::default() {
            if self.epoch == 0 {
                return Some(true);
            }
            0
        } else if at.epoch != self.epoch || at.offset > self.head {
            return Some(false);
        } else {
            at.offset
        };
        if self.starts_at() <= after + 1 {
            Some(true)
        } else if oldest_kept <= after + 1 && self.after > after {
            // The history has it; this answer was asked for someone later.
            None
        } else {
            // The history no longer reaches back, or it does but not
            // within one answer.
            Some(false)
        }
    }

    /// The first offset this slice has (head + 1 when it has none).
    pub(crate) fn starts_at(&self) -> u64 {
        self.messages.first().map_or(self.head + 1, |m| m.offset)
    }
}

pub(crate) struct History {
    cfg: HistoryConfig,
    logs: HashMap<Box<str>, Log>,
    /// Where the next over-the-cap eviction starts (topics in turn).
    evict_from: usize,
    /// When `expire` last walked the logs (wall µs).
    expired_at: u64,
    pub counters: HistoryCounters,
}

impl Default for History {
    fn default() -> History {
        History::new(HistoryConfig::default())
    }
}

impl History {
    pub(crate) fn new(cfg: HistoryConfig) -> History {
        History { cfg, logs: HashMap::new(), evict_from: 0, expired_at: 0, counters: HistoryCounters::default() }
    }

    /// Record one message; returns the topic's epoch and the message's offset.
    pub(crate) fn append(&mut self, topic: &str, publish_us: u64, data: &[u8]) -> Position {
        // One lookup for a topic that has a log (every publish but its first).
        if let Some(log) = self.logs.get_mut(topic) {
            let at = Position { epoch: log.epoch, offset: log.head + 1 };
            Self::record(log, &self.cfg, &mut self.counters, at.offset, publish_us, data);
            self.fit_bytes();
            return at;
        }
        let at = Position { epoch: rand::thread_rng().gen_range(1..=u32::MAX), offset: 1 };
        self.put(topic, at, publish_us, data);
        at
    }

    /// `log`'s next message, at `offset` (its head + 1), kept within `--history`.
    fn record(log: &mut Log, cfg: &HistoryConfig, counters: &mut HistoryCounters, offset: u64, publish_us: u64, data: &[u8]) {
        log.head = offset;
        log.last_us = publish_us;
        if cfg.size > 0 {
            log.kept.push_back(Kept { publish_us, data: data.into() });
            counters.messages += 1;
            counters.bytes += PER_MESSAGE + data.len() as u64;
            if log.kept.len() > cfg.size {
                let k = log.kept.pop_front().expect("over the size");
                Self::dropped(counters, &k, "size");
            }
        }
    }

    /// Record a message whose place another keeps (the cluster's history
    /// in JetStream): false when this log already has it. A new epoch
    /// starts the log over; a jump forward leaves the messages before it
    /// out (a recovery from before the jump then asks the stream).
    pub(crate) fn put(&mut self, topic: &str, at: Position, publish_us: u64, data: &[u8]) -> bool {
        match self.logs.get(topic) {
            Some(log) if log.epoch == at.epoch && at.offset <= log.head => return false,
            Some(log) if log.epoch == at.epoch && at.offset == log.head + 1 => {}
            Some(_) => self.restart(topic, at),
            None => {
                self.logs.insert(topic.into(), Log { epoch: at.epoch, head: at.offset - 1, kept: VecDeque::new(), last_us: publish_us });
                self.counters.bytes += PER_LOG + topic.len() as u64;
                self.counters.topics = self.logs.len() as u64;
            }
        }
        let log = self.logs.get_mut(topic).expect("inserted above");
        Self::record(log, &self.cfg, &mut self.counters, at.offset, publish_us, data);
        self.fit_bytes();
        true
    }

    /// Empty `topic`'s log so that its next message is at `at`.
    fn restart(&mut self, topic: &str, at: Position) {
        let log = self.logs.get_mut(topic).expect("restarted logs exist");
        for k in std::mem::take(&mut log.kept) {
            Self::dropped(&mut self.counters, &k, "gap");
        }
        log.epoch = at.epoch;
        log.head = at.offset - 1;
    }

    /// Forget `topic`'s log: nothing followed it, so it may be behind the
    /// cluster's (its first subscriber on this node just came).
    pub(crate) fn forget(&mut self, topic: &str) {
        if let Some(log) = self.logs.remove(topic) {
            for k in &log.kept {
                Self::dropped(&mut self.counters, k, "gap");
            }
            self.counters.bytes -= PER_LOG + topic.len() as u64;
            self.counters.topics = self.logs.len() as u64;
        }
    }

    /// What the cluster's history has of `topic` (oldest first, one
    /// epoch: the stream's), read for a recovery this log could not
    /// answer. Older messages join this log below its oldest; a log of
    /// another epoch, or none, becomes the stream's. Returns those after
    /// this log's head, for the caller to deliver (and so record).
    pub(crate) fn merge(&mut self, topic: &str, mut got: Vec<(Position, Message)>) -> Vec<(Position, Message)> {
        let Some(epoch) = got.last().map(|(at, _)| at.epoch) else { return Vec::new() };
        got.retain(|(at, _)| at.epoch == epoch);
        let same = self.logs.get(topic).is_some_and(|l| l.epoch == epoch);
        if !same {
            // Only the run that ends at the stream's head: nothing missing.
            let mut start = got.len() - 1;
            while start > 0 && got[start - 1].0.offset + 1 == got[start].0.offset {
                start -= 1;
            }
            let run = got.split_off(start);
            self.forget(topic);
            for (at, m) in run {
                self.put(topic, at, m.publish_us, &m.data);
            }
            return Vec::new();
        }
        let log = self.logs.get(topic).expect("same epoch");
        let (first, head) = (log.first(), log.head);
        let above: Vec<(Position, Message)> = got.iter().filter(|(at, _)| at.offset > head).cloned().collect();
        // Below the oldest kept: the run that ends right under it.
        let mut below: Vec<&(Position, Message)> = Vec::new();
        let mut want = first.saturating_sub(1);
        for g in got.iter().rev() {
            if want == 0 || self.logs[topic].kept.len() + below.len() >= self.cfg.size {
                break;
            }
            if g.0.offset == want {
                below.push(g);
                want -= 1;
            }
        }
        let log = self.logs.get_mut(topic).expect("same epoch");
        for (_, m) in below {
            log.kept.push_front(Kept { publish_us: m.publish_us, data: m.data.as_slice().into() });
            self.counters.messages += 1;
            self.counters.bytes += PER_MESSAGE + m.data.len() as u64;
        }
        self.fit_bytes();
        above
    }

    fn dropped(c: &mut HistoryCounters, k: &Kept, reason: &str) {
        c.messages -= 1;
        c.bytes -= PER_MESSAGE + k.data.len() as u64;
        crate::stats::counters::bump(&mut c.evicted, reason);
    }

    /// Over `--history-max-bytes`: topics give up their oldest message in
    /// turn; a topic with nothing kept gives up its log.
    fn fit_bytes(&mut self) {
        if self.counters.bytes <= self.cfg.max_bytes {
            return;
        }
        // Down to 95% of the cap, so the walk over the topics is paid once
        // per many publishes, not on each.
        let target = self.cfg.max_bytes - self.cfg.max_bytes / 20;
        let mut names: Vec<Box<str>> = self.logs.keys().cloned().collect();
        names.sort();
        let mut i = self.evict_from;
        while self.counters.bytes > target && !names.is_empty() {
            i %= names.len();
            let log = self.logs.get_mut(&names[i]).expect("listed");
            match log.kept.pop_front() {
                Some(k) => {
                    Self::dropped(&mut self.counters, &k, "bytes");
                    i += 1;
                }
                None => {
                    let name = names.remove(i);
                    self.logs.remove(&name);
                    self.counters.bytes -= PER_LOG + name.len() as u64;
                }
            }
        }
        self.evict_from = i;
        self.counters.topics = self.logs.len() as u64;
    }

    /// Drop messages older than the TTL, and logs with nothing kept and
    /// no publish within it (at most once a second, however often asked).
    pub(crate) fn expire(&mut self, now_us: u64) {
        if now_us.saturating_sub(self.expired_at) < 1_000_000 {
            return;
        }
        self.expired_at = now_us;
        let ttl = self.cfg.ttl.as_micros() as u64;
        let c = &mut self.counters;
        self.logs.retain(|name, log| {
            while log.kept.front().is_some_and(|k| now_us.saturating_sub(k.publish_us) > ttl) {
                let k = log.kept.pop_front().expect("checked");
                Self::dropped(c, &k, "ttl");
            }
            if log.kept.capacity() > 2 * log.kept.len() + 8 {
                log.kept.shrink_to_fit();
            }
            let keep = !log.kept.is_empty() || now_us.saturating_sub(log.last_us) <= ttl;
            if !keep {
                c.bytes -= PER_LOG + name.len() as u64;
            }
            keep
        });
        self.counters.topics = self.logs.len() as u64;
    }

    /// The topic's messages after `after`, at most `limit` of them and
    /// `max_bytes` of payload (the latest ones when it must cut, so the
    /// slice always ends at the head).
    pub(crate) fn since(&self, topic: &str, after: u64, limit: usize, max_bytes: usize) -> Slice {
        let Some(log) = self.logs.get(topic) else { return Slice { topic: topic.into(), after, oldest: 1, ..Default::default() } };
        let first = log.first();
        let skip = after.saturating_add(1).saturating_sub(first).min(log.kept.len() as u64) as usize;
        let mut messages: Vec<Message> = Vec::new();
        let mut bytes = 0;
        for (i, k) in log.kept.iter().enumerate().skip(skip).rev() {
            if messages.len() >= limit || bytes + k.data.len() > max_bytes {
                break;
            }
            bytes += k.data.len();
            messages.push(Message { offset: first + i as u64, publish_us: k.publish_us, data: k.data.to_vec() });
        }
        messages.reverse();
        Slice { topic: topic.into(), after, epoch: log.epoch, head: log.head, messages, oldest: first }
    }

    /// The topic's epoch and head (0, 0 without a log).
    pub(crate) fn position(&self, topic: &str) -> Position {
        self.logs.get(topic).map_or_else(Position::default, |l| Position { epoch: l.epoch, offset: l.head })
    }

    #[cfg(test)]
    pub(crate) fn config(&self) -> HistoryConfig {
        self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(size: usize, max_bytes: u64) -> HistoryConfig {
        HistoryConfig { size, ttl: Duration::from_secs(10), max_bytes }
    }

    #[test]
    fn offsets_count_per_topic_and_a_slice_continues_where_asked() {
        let mut h = History::new(cfg(3, 1 << 20));
        let a1 = h.append("a", 1, b"a1");
        h.append("b", 1, b"b1");
        for i in 2..=5u8 {
            h.append("a", i as u64, &[b'a', b'0' + i]);
        }
        let a = h.position("a");
        assert_eq!((a.epoch, a.offset, a1.offset), (a1.epoch, 5, 1));
        assert_ne!(a.epoch, 0);
        assert_eq!(h.position("b").offset, 1);
        assert_eq!(h.counters.messages, 4, "a keeps 3, b 1");
        assert_eq!(h.counters.evicted["size"], 2);
        let s = h.since("a", 3, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!(s.messages.iter().map(|m| m.offset).collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(s.covers(Position { epoch: a.epoch, offset: 3 }), Some(true));
        assert_eq!(s.covers(Position { epoch: a.epoch, offset: 2 }), None, "the history has 3, the slice does not");
        let all = h.since("a", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!(all.covers(Position { epoch: a.epoch, offset: 1 }), Some(false), "2 was dropped");
        assert_eq!(all.covers(Position { epoch: a.epoch, offset: 2 }), Some(true));
        assert_eq!(all.covers(Position { epoch: a.epoch ^ 1, offset: 4 }), Some(false), "another epoch");
        assert_eq!(all.covers(Position { epoch: a.epoch, offset: 9 }), Some(false), "ahead of the head");
        assert_eq!(all.covers(Position::default()), Some(false), "from the start: 1 is gone");
        let b = h.since("b", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!(b.covers(Position::default()), Some(true));
        let none = h.since("zzz", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!((none.epoch, none.covers(Position::default())), (0, Some(true)));
        let cut = h.since("a", 0, usize::MAX, 2);
        assert_eq!(cut.messages.len(), 1, "the latest that fit");
    }

    #[test]
    fn an_answer_cut_at_the_byte_bound_is_final_for_those_it_was_asked_for() {
        const PAYLOAD: usize = 100;
        let mut h = History::new(cfg(100, 1 << 20));
        for i in 1..=6u64 {
            h.append("t", i, &[b'x'; PAYLOAD]);
        }
        let e = h.position("t").epoch;
        let at = |offset| Position { epoch: e, offset };
        let offsets = |s: &Slice| s.messages.iter().map(|m| m.offset).collect::<Vec<_>>();
        // Exactly four fit: the latest four, ending at the head.
        let four = h.since("t", 0, usize::MAX, 4 * PAYLOAD);
        assert_eq!((offsets(&four), four.oldest, four.after), (vec![3, 4, 5, 6], 1, 0));
        assert_eq!(offsets(&h.since("t", 0, usize::MAX, 4 * PAYLOAD + 1)), vec![3, 4, 5, 6], "one byte more fits no fifth");
        assert_eq!(offsets(&h.since("t", 0, usize::MAX, 4 * PAYLOAD - 1)), vec![4, 5, 6]);
        // Asked from 0: the history has 1.., the answer does not, and
        // asking again from 0 or 1 would be cut the same way.
        assert_eq!(four.covers(Position::default()), Some(false), "nothing seen, more than the bound behind");
        assert_eq!(four.covers(at(1)), Some(false), "5 missed, 4 fit");
        assert_eq!(four.covers(at(2)), Some(true), "exactly the bound behind");
        assert_eq!(four.covers(at(6)), Some(true), "nothing missed");
        // Asked from 3 for someone else: one at 1 asks again from 1.
        let later = h.since("t", 3, usize::MAX, 4 * PAYLOAD);
        assert_eq!((offsets(&later), later.covers(at(1)), later.covers(at(3))), (vec![4, 5, 6], None, Some(true)));
        assert_eq!(h.since("t", 1, usize::MAX, 4 * PAYLOAD), Slice { after: 1, ..four.clone() }, "the same cut from 1");
        // The real bound: four 1 MiB messages fit, a fifth does not.
        let mut big = History::new(cfg(100, 64 << 20));
        for i in 1..=6u64 {
            big.append("t", i, &vec![0; MAX_REPLY_BYTES / 4]);
        }
        let s = big.since("t", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!((s.starts_at(), s.covers(Position::default())), (3, Some(false)));
    }

    #[test]
    fn the_cluster_s_offsets_are_placed_as_given_and_merged_from_the_stream() {
        let mut h = History::new(cfg(10, 1 << 20));
        let at = |offset| Position { epoch: 9, offset };
        let msg = |offset: u64| Message { offset, publish_us: 1, data: vec![offset as u8] };
        assert!(h.put("t", at(5), 1, b"5"), "a log may start anywhere");
        assert!(!h.put("t", at(5), 1, b"5"), "seen already");
        assert!(h.put("t", at(6), 1, b"6"));
        assert!(h.put("t", at(9), 1, b"9"), "a jump forward starts the kept messages over");
        assert_eq!(h.since("t", 0, usize::MAX, MAX_REPLY_BYTES).oldest, 9);
        assert_eq!(h.counters.evicted["gap"], 2);
        // The stream's 6..=10: 7 and 8 join below, 10 is the caller's to deliver.
        let above = h.merge("t", (6..=10).map(|o| (at(o), msg(o))).collect());
        assert_eq!(above.iter().map(|(a, _)| a.offset).collect::<Vec<_>>(), vec![10]);
        let s = h.since("t", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!((s.oldest, s.head, s.messages.len()), (6, 9, 4));
        // Another epoch: the stream's becomes the log, without delivery.
        let other = |offset| (Position { epoch: 3, offset }, msg(offset));
        assert!(h.merge("t", vec![other(1), other(3), other(4)]).is_empty());
        let s = h.since("t", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!((s.epoch, s.oldest, s.head), (3, 3, 4), "only the run that ends at the head");
        h.forget("t");
        assert_eq!((h.counters.topics, h.counters.messages, h.counters.bytes), (0, 0, 0));
    }

    #[test]
    fn the_byte_cap_and_the_ttl_bound_it() {
        let mut h = History::new(cfg(100, 4 * (PER_MESSAGE + 100) + 2 * (PER_LOG + 1)));
        for i in 0..10 {
            h.append(if i % 2 == 0 { "x" } else { "y" }, 1_000_000 + i, &[0; 100]);
        }
        assert!(h.counters.bytes <= h.config().max_bytes, "{}", h.counters.bytes);
        assert_eq!(h.counters.messages, 4);
        assert_eq!(h.counters.evicted["bytes"], 6);
        assert_eq!(h.position("x").offset, 5, "offsets go on");
        h.expire(1_000_008 + 10_000_000);
        assert_eq!(h.counters.messages, 2, "those older than 10 s went");
        h.expire(100_000_000);
        assert_eq!((h.counters.messages, h.counters.topics, h.counters.bytes), (0, 0, 0));
        let e = h.append("x", 100_000_000, b"again");
        assert_eq!(e.offset, 1, "a forgotten log starts over, in a new epoch");
    }

    /// `--history 0`: nothing kept, yet offsets count and the head moves,
    /// so a recovery is told where the topic is and that it cannot have
    /// what it missed.
    #[test]
    fn with_no_messages_kept_offsets_still_count() {
        let mut h = History::new(cfg(0, 1 << 20));
        for i in 1..=3u64 {
            assert_eq!(h.append("t", i, b"x").offset, i);
        }
        let s = h.since("t", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!((s.head, s.oldest, s.messages.len(), s.starts_at()), (3, 4, 0, 4));
        assert_eq!(s.covers(Position { epoch: s.epoch, offset: 3 }), Some(true), "nothing missed");
        assert_eq!(s.covers(Position { epoch: s.epoch, offset: 2 }), Some(false));
        assert_eq!((h.counters.messages, h.counters.bytes, h.counters.topics), (0, PER_LOG + 1, 1));
        assert!(h.counters.evicted.is_empty(), "nothing kept, nothing evicted");
    }

    /// The bytes counted are exactly the payloads, a record per message
    /// and one per log with its name, given back as messages go.
    #[test]
    fn bytes_count_payloads_records_and_logs_exactly() {
        let mut h = History::new(cfg(2, 1 << 20));
        for i in 0..3 {
            h.append("ab", i, &[0; 10]);
        }
        h.append("c", 0, &[0; 7]);
        assert_eq!(h.counters.bytes, (PER_LOG + 2) + 2 * (PER_MESSAGE + 10) + (PER_LOG + 1) + (PER_MESSAGE + 7));
        assert_eq!((h.counters.messages, h.counters.topics, h.counters.evicted["size"]), (3, 2, 1));
        h.forget("ab");
        assert_eq!(h.counters.bytes, (PER_LOG + 1) + (PER_MESSAGE + 7));
        h.forget("never");
        h.forget("c");
        assert_eq!((h.counters.bytes, h.counters.messages, h.counters.topics), (0, 0, 0));
    }

    /// A slice is bounded in count too: the latest `limit` messages, so
    /// it still ends at the head.
    #[test]
    fn a_slice_bounded_in_count_keeps_the_latest() {
        let mut h = History::new(cfg(10, 1 << 20));
        for i in 1..=6u8 {
            h.append("t", 1, &[i]);
        }
        let s = h.since("t", 1, 2, MAX_REPLY_BYTES);
        assert_eq!(s.messages.iter().map(|m| (m.offset, m.data[0])).collect::<Vec<_>>(), vec![(5, 5), (6, 6)]);
        assert_eq!((s.oldest, s.head), (1, 6));
        assert!(h.since("t", 1, 0, MAX_REPLY_BYTES).messages.is_empty());
        assert!(h.since("t", u64::MAX, usize::MAX, MAX_REPLY_BYTES).messages.is_empty(), "the position only");
    }

    /// The TTL walk runs at most once a second of the clock it is given:
    /// a message past its TTL stays until the next walk is due.
    #[test]
    fn expiry_walks_at_most_once_a_second() {
        let mut h = History::new(cfg(10, 1 << 20));
        h.append("t", 1_000_000, b"x");
        h.expire(10_800_000);
        assert_eq!(h.counters.messages, 1, "9.8 s old, within the 10 s TTL");
        h.expire(11_500_000);
        assert_eq!(h.counters.messages, 1, "10.5 s old, but 0.7 s since the last walk");
        h.expire(11_800_000);
        assert_eq!((h.counters.messages, h.counters.evicted["ttl"]), (0, 1));
        assert_eq!((h.position("t"), h.counters.topics, h.counters.bytes), (Position::default(), 0, 0), "nothing kept, no publish within the TTL: forgotten");
    }

    /// A message of another epoch starts the log over there (what was
    /// kept is dropped as a gap); one this log already has is refused.
    #[test]
    fn another_epoch_starts_the_log_over() {
        let mut h = History::new(cfg(10, 1 << 20));
        let at = |epoch, offset| Position { epoch, offset };
        assert!(h.put("t", at(1, 1), 1, b"a"));
        assert!(h.put("t", at(1, 2), 1, b"b"));
        assert!(h.put("t", at(2, 1), 1, b"c"), "a new epoch, from its first message");
        assert_eq!((h.position("t"), h.counters.evicted["gap"], h.counters.messages), (at(2, 1), 2, 1));
        assert!(!h.put("t", at(2, 1), 1, b"c"));
        let s = h.since("t", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!((s.epoch, s.oldest, s.messages.iter().map(|m| m.data.clone()).collect::<Vec<_>>()), (2, 1, vec![b"c".to_vec()]));
    }

    /// What the stream gives below the oldest kept message joins the log
    /// only up to `--history`, the run right under it first; nothing given
    /// changes nothing.
    #[test]
    fn a_merge_below_the_oldest_stays_within_the_size() {
        let mut h = History::new(cfg(3, 1 << 20));
        let at = |offset| Position { epoch: 9, offset };
        let msg = |offset: u64| Message { offset, publish_us: 1, data: vec![offset as u8] };
        assert!(h.merge("t", Vec::new()).is_empty());
        assert_eq!(h.position("t"), Position::default(), "no log made of nothing");
        h.put("t", at(5), 1, &[5]);
        h.put("t", at(6), 1, &[6]);
        assert!(h.merge("t", (1..=6).map(|o| (at(o), msg(o))).collect()).is_empty(), "nothing past the head");
        let s = h.since("t", 0, usize::MAX, MAX_REPLY_BYTES);
        assert_eq!(s.messages, vec![msg(4), msg(5), msg(6)], "4 right under 5, and no more than 3");
        assert_eq!((s.oldest, h.counters.messages), (4, 3));
    }

    #[test]
    fn a_kept_message_costs_its_payload_and_a_small_record() {
        let payload = [7u8; 64];
        let (h, held) = crate::test_alloc::held(|| {
            let mut h = History::new(cfg(100, u64::MAX));
            for _ in 0..100 {
                for t in 0..100 {
                    h.append(&format!("topic-{t}"), 1, &payload);
                }
            }
            h
        });
        let per = (held as f64 - 100.0 * (PER_LOG as f64 + 8.0)) / 10_000.0;
        // Goal: at most 1.2 x payload + 64 B per message, malloc's own
        // overhead included.
        assert!(per <= 1.2 * 64.0 + 64.0, "{per:.1} B per 64-byte message");
        assert_eq!(h.counters.messages, 10_000);
    }
}
