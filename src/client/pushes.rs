//! Pushes as a client receives them: counted per topic, delivery latency
//! measured from the publish stamp (CLOCK_REALTIME, so it also holds across
//! hosts with synchronised clocks), duplicates and gaps found from the
//! per-stream sequence numbers, and per-sequence arrival counts so the
//! supervisor can tell when a message reached every connection.

use super::snapshot::ClientSnapshot;
use crate::proto::push::{Position, Push, Stream, BROADCAST_TOPIC};
use crate::stats::histogram;
use hdrhistogram::Histogram;

/// Where one connection is in one stream's history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    key: u64,
    last: u64,
    /// 0: the server had no history of it when we subscribed.
    epoch: u32,
}

/// Last offset and epoch seen per stream on one connection (boxed:
/// nothing for connections that never got a push or a position). Kept
/// across reconnects, so a resumed connection's gaps and duplicates count.
pub(crate) type PushSeen = Option<Box<Vec<Seen>>>;

/// Topics counted one by one; pushes on more topics are counted in total only.
pub(crate) const MAX_TOPICS_COUNTED: usize = 1000;
/// Sequence numbers tracked for time-to-all (oldest dropped first).
pub(crate) const MAX_SEQS_TRACKED: usize = 10_000;

fn stream_key(stream: Stream, topic: &[u8]) -> u64 {
    match stream {
        Stream::Broadcast => 0,
        Stream::Unicast => 1,
        // FNV-1a over the topic; the low bit set keeps it off 0 and 1.
        Stream::Topic => topic.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3)) | 2,
    }
}

/// A resumable name (`*`: the broadcasts) as its stream and topic.
fn stream_of(name: &[u8]) -> (Stream, &[u8]) {
    if name == BROADCAST_TOPIC.as_bytes() {
        (Stream::Broadcast, b"")
    } else {
        (Stream::Topic, name)
    }
}

/// Where this connection stopped in `name`'s history (`*`: broadcasts);
/// None when it never heard of it.
pub(crate) fn position(seen: &PushSeen, name: &str) -> Option<Position> {
    let (stream, topic) = stream_of(name.as_bytes());
    let key = stream_key(stream, topic);
    seen.iter().flat_map(|l| l.iter()).find(|s| s.key == key).map(|s| Position { epoch: s.epoch, offset: s.last })
}

/// A connection known to stand at `at` in `name` (a replacement worker
/// taking over its predecessor's connections).
pub(crate) fn restore(seen: &mut PushSeen, name: &str, at: Position) {
    let (stream, topic) = stream_of(name.as_bytes());
    let key = stream_key(stream, topic);
    let list = seen.get_or_insert_with(Default::default);
    list.retain(|s| s.key != key);
    list.push(Seen { key, last: at.offset, epoch: at.epoch });
}

/// The answer to a resume: the connection is now at `at`. A connection
/// that knew a position before has resumed (counted by result), and the
/// messages it recovered came before this answer.
pub(crate) fn subscribed(stats: &mut ClientSnapshot, seen: &mut PushSeen, name: &[u8], recovered: bool, at: Position) {
    let (stream, topic) = stream_of(name);
    let key = stream_key(stream, topic);
    let list = seen.get_or_insert_with(Default::default);
    match list.iter_mut().find(|s| s.key == key) {
        Some(s) => {
            crate::stats::counters::bump(&mut stats.resumes, if recovered { "recovered" } else { "lost" });
            if !recovered {
                // What the history no longer has is missing for good.
                stats.push_gaps += at.offset.saturating_sub(s.last);
            }
            (s.last, s.epoch) = (at.offset, at.epoch);
        }
        None => list.push(Seen { key, last: at.offset, epoch: at.epoch }),
    }
}

/// Account for one push received at `now_wall_us`.
pub(crate) fn account(stats: &mut ClientSnapshot, hist: &mut Histogram<u64>, seen: &mut PushSeen, p: &Push<'_>, now_wall_us: u64) {
    stats.push_received += 1;
    histogram::record(hist, now_wall_us.saturating_sub(p.publish_us));
    if p.stream != Stream::Unicast {
        let key = stream_key(p.stream, p.topic);
        let list = seen.get_or_insert_with(Default::default);
        match list.iter_mut().find(|s| s.key == key) {
            // The server began this history after we subscribed.
            Some(s) if s.epoch == 0 && p.epoch != 0 => {
                stats.push_gaps += p.seq.saturating_sub(1);
                (s.last, s.epoch) = (p.seq, p.epoch);
            }
            // The server lost the history: a new baseline.
            Some(s) if s.epoch != p.epoch => {
                stats.push_epoch_changes += 1;
                (s.last, s.epoch) = (p.seq, p.epoch);
            }
            Some(s) if p.seq <= s.last => stats.push_duplicates += 1,
            Some(s) => {
                stats.push_gaps += p.seq - s.last - 1;
                s.last = p.seq;
            }
            // The first message of a stream on this connection sets the
            // baseline (it may have connected after earlier ones).
            None => list.push(Seen { key, last: p.seq, epoch: p.epoch }),
        }
        arrived(stats, p.seq, now_wall_us);
    }
    let topic = if p.stream == Stream::Broadcast { "*" } else { std::str::from_utf8(p.topic).unwrap_or("?") };
    if let Some(n) = stats.push_topics.get_mut(topic) {
        *n += 1;
    } else if stats.push_topics.len() < MAX_TOPICS_COUNTED {
        stats.push_topics.insert(topic.to_string(), 1);
    }
}

/// Sequence number `seq` reached this connection at `now_wall_us`: counted
/// for time-to-all (arrivals and the latest of them per sequence number,
/// the oldest numbers forgotten past [`MAX_SEQS_TRACKED`]).
pub(crate) fn arrived(stats: &mut ClientSnapshot, seq: u64, now_wall_us: u64) {
    let e = stats.push_by_seq.entry(seq).or_insert((0, 0));
    e.0 += 1;
    e.1 = e.1.max(now_wall_us);
    while stats.push_by_seq.len() > MAX_SEQS_TRACKED {
        stats.push_by_seq.pop_first();
    }
}

/// Where a message falls in its stream on one connection (see [`advance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The first of its stream here: the baseline (earlier ones may have
    /// gone before the connection subscribed).
    First,
    /// After the last one seen, with this many missing between them.
    Next { missing: u64 },
    /// At or before the last one seen: a repeat.
    Repeat,
    /// The connection already tracks `cap` streams: not checked.
    Untracked,
}

/// Stream `key` (a hash the caller makes of what names the stream) moves
/// to `seq` on this connection, tracking at most `cap` streams (a peer
/// naming endless streams costs the cap, no more). Kept with the
/// connection's other positions, across reconnects.
pub(crate) fn advance(seen: &mut PushSeen, key: u64, seq: u64, cap: usize) -> Step {
    let list = seen.get_or_insert_with(Default::default);
    let full = list.len() >= cap;
    match list.iter_mut().find(|s| s.key == key) {
        Some(s) if seq <= s.last => Step::Repeat,
        Some(s) => {
            let missing = seq - s.last - 1;
            s.last = seq;
            Step::Next { missing }
        }
        None if full => Step::Untracked,
        None => {
            list.push(Seen { key, last: seq, epoch: 0 });
            Step::First
        }
    }
}

/// Most bytes a `--subscribe` pattern may expand to (every client
/// worker gets the list in its config).
const MAX_PATTERN_BYTES: u64 = 16 * 1024 * 1024;

/// Expand `--subscribe`: "a,b" (every connection takes all) or a pattern
/// "room-{0..999}" (connection g takes topic g % 1000). Returns (topics,
/// spread).
pub(crate) fn parse_subscribe(s: &str) -> Result<(Vec<String>, bool), String> {
    const EX: &str = "expected topics like news,sport or a pattern like room-{0..999}";
    let s = s.trim();
    if let Some((pre, rest)) = s.split_once('{') {
        let (range, post) = rest.split_once('}').ok_or_else(|| format!("'{s}': unclosed '{{'; {EX}"))?;
        let (a, b) = range.split_once("..").ok_or_else(|| format!("'{s}': write the range as {{FIRST..LAST}}; {EX}"))?;
        let (a, b): (u64, u64) =
            (a.trim().parse().map_err(|_| format!("'{a}' is not a number; {EX}"))?, b.trim().parse().map_err(|_| format!("'{b}' is not a number; {EX}"))?);
        if a > b || b - a >= 1_000_000 {
            return Err(format!("'{s}': the range must go up and hold at most 1,000,000 topics; {EX}"));
        }
        // Check the names before making a million of them (the longest
        // is the last); found by fuzz/run.sh: a bad prefix used to be
        // expanded first and refused after.
        for i in [a, b] {
            let t = format!("{pre}{i}{post}");
            crate::proto::push::check_topic(t.as_bytes()).map_err(|e| format!("'{t}': {e}"))?;
        }
        let bytes = (b - a + 1) * (pre.len() + post.len() + b.to_string().len()) as u64;
        if bytes > MAX_PATTERN_BYTES {
            return Err(format!("'{s}' expands to {bytes} bytes of topic names (at most {MAX_PATTERN_BYTES}); use a shorter name or fewer topics"));
        }
        let topics: Vec<String> = (a..=b).map(|i| format!("{pre}{i}{post}")).collect();
        return Ok((topics, true));
    }
    let topics: Vec<String> = s.split(',').map(|t| t.trim().to_string()).collect();
    if topics.len() > crate::proto::push::MAX_SUBSCRIPTIONS {
        return Err(format!("{} topics per connection; the server allows {}", topics.len(), crate::proto::push::MAX_SUBSCRIPTIONS));
    }
    for t in &topics {
        crate::proto::push::check_topic(t.as_bytes()).map_err(|e| format!("'{t}': {e}; {EX}"))?;
    }
    Ok((topics, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_checked_before_they_are_expanded() {
        // Found by fuzz/run.sh (cli_values, out of memory).
        assert!(parse_subscribe("roo\u{0}\u{c9}{0..991039}").unwrap_err().contains("use letters"));
        assert!(parse_subscribe(&format!("{}{{0..999999}}", "a".repeat(100))).unwrap_err().contains("expands to"));
        assert_eq!(parse_subscribe("room-{0..999}").unwrap().0.len(), 1000);
    }

    #[test]
    fn duplicates_and_gaps_per_stream() {
        let mut stats = ClientSnapshot::default();
        let mut h = histogram::new();
        let mut seen: PushSeen = None;
        let p = |stream, topic: &'static [u8], seq| Push { stream, topic, seq, publish_us: 1_000, epoch: 5, data: b"" };
        for (s, t, q) in
            [(Stream::Broadcast, &b""[..], 3), (Stream::Broadcast, b"", 4), (Stream::Topic, b"a", 1), (Stream::Broadcast, b"", 7), (Stream::Broadcast, b"", 7)]
        {
            account(&mut stats, &mut h, &mut seen, &p(s, t, q), 3_000);
        }
        assert_eq!((stats.push_received, stats.push_duplicates, stats.push_gaps), (5, 1, 2));
        assert_eq!(stats.push_topics["*"], 4);
        assert_eq!(stats.push_by_seq[&7], (2, 3_000));
        assert_eq!(h.len(), 5);
        assert_eq!(position(&seen, "*"), Some(Position { epoch: 5, offset: 7 }));
        assert_eq!(position(&seen, "a"), Some(Position { epoch: 5, offset: 1 }));
        assert_eq!(position(&seen, "b"), None);
    }

    #[test]
    fn resumes_continue_the_count() {
        let mut stats = ClientSnapshot::default();
        let mut h = histogram::new();
        let mut seen: PushSeen = None;
        let p = |seq, epoch| Push { stream: Stream::Topic, topic: b"t", seq, publish_us: 1, epoch, data: b"" };
        // Subscribed before the topic had any history: offsets from 1 count.
        subscribed(&mut stats, &mut seen, b"t", true, Position::default());
        assert!(stats.resumes.is_empty(), "a first subscription is not a resume");
        account(&mut stats, &mut h, &mut seen, &p(2, 9), 1);
        assert_eq!(stats.push_gaps, 1, "offset 1 never came");
        // Lost the connection at 2; the server recovers 3..5, then answers.
        for o in 3..=5 {
            account(&mut stats, &mut h, &mut seen, &p(o, 9), 1);
        }
        subscribed(&mut stats, &mut seen, b"t", true, Position { epoch: 9, offset: 5 });
        assert_eq!((stats.resumes["recovered"], stats.push_gaps, stats.push_duplicates), (1, 1, 0));
        // A resume the history could not serve: what it lacked is a gap.
        subscribed(&mut stats, &mut seen, b"t", false, Position { epoch: 9, offset: 9 });
        assert_eq!((stats.resumes["lost"], stats.push_gaps), (1, 5));
        account(&mut stats, &mut h, &mut seen, &p(1, 10), 1);
        assert_eq!(stats.push_epoch_changes, 1);
        assert_eq!(position(&seen, "t"), Some(Position { epoch: 10, offset: 1 }));
    }

    #[test]
    fn streams_advance_within_their_cap() {
        let mut seen: PushSeen = None;
        assert_eq!(advance(&mut seen, 9, 3, 2), Step::First);
        assert_eq!(advance(&mut seen, 9, 4, 2), Step::Next { missing: 0 });
        assert_eq!(advance(&mut seen, 9, 7, 2), Step::Next { missing: 2 });
        assert_eq!(advance(&mut seen, 9, 7, 2), Step::Repeat);
        assert_eq!(advance(&mut seen, 9, 5, 2), Step::Repeat);
        assert_eq!(advance(&mut seen, 10, 1, 2), Step::First);
        assert_eq!(advance(&mut seen, 11, 1, 2), Step::Untracked, "past the cap");
        assert_eq!(advance(&mut seen, 10, 2, 2), Step::Next { missing: 0 });
    }

    #[test]
    fn subscribe_patterns() {
        let (t, spread) = parse_subscribe("room-{0..999}").unwrap();
        assert_eq!((t.len(), t[999].as_str(), spread), (1000, "room-999", true));
        assert_eq!(parse_subscribe("a,b").unwrap(), (vec!["a".to_string(), "b".to_string()], false));
        assert!(parse_subscribe("room-{5..1}").is_err());
        assert!(parse_subscribe("bad topic").is_err());
    }
}
