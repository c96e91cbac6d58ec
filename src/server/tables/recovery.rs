//! Subscribers of one worker waiting to recover what they missed.
//!
//! A resume subscribes the connection at once and asks the supervisor for
//! the topic's history (one question per topic in flight, however many
//! connections wait). Until the answer comes, live pushes of that topic
//! skip the waiting connection: the supervisor answers after sending the
//! worker every push up to the head it reports, so each of them is in the
//! answer, and every later push comes after it. The seam therefore has no
//! gap and no duplicate, and nothing is buffered per connection.
//!
//! Each waiting connection gets one answer. A connection the answer does
//! not reach back to is asked for again only when the question was for a
//! later offset (someone else's, asked before it came) and the history
//! still has its offset; otherwise it is lost: the history no longer
//! reaches back, or its offset is more than
//! [`MAX_REPLY_BYTES`](crate::server::broker::history::MAX_REPLY_BYTES) of payload
//! behind (an answer holds the latest messages that fit, so asking again
//! would be cut the same way: before this was told apart, such a
//! connection was asked for again without end and never answered).
//!
//! A lost connection gets no replay: only `recovered: false` with the
//! topic's position (epoch, head), so the first push it gets next is
//! head + 1, live. A partial replay (the latest messages that fit) would
//! still leave it a hole to fill from the application's own store, and
//! `recovered: false` would then mean "some of it came" on this path and
//! "none came" on the others (epoch gone, history evicted); with no
//! replay it means one thing everywhere: reload up to the offset named.
//!
//! Unsubscribing (or closing) ends the wait: no replay and no answer come
//! for a topic the connection left.

use crate::proto::push::{Position, BROADCAST_TOPIC};
use crate::server::broker::history::Slice;
use crate::server::close::Close;
use crate::server::tables::topics::{Subs, Topics};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// An unanswered question is asked again after this long (the
/// supervisor drops commands to a worker whose queue is full).
pub(crate) const ASK_AGAIN: Duration = Duration::from_secs(5);

/// One connection waiting on one topic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiting {
    pub gen: u32,
    /// Where it stopped; None: it only wants to know the position (a
    /// first subscription), and live pushes reach it meanwhile.
    pub at: Option<Position>,
}

/// A waiting connection's fate once the history came.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Send it the slice's messages after its offset, then say so.
    Recovered { after: u64 },
    /// Tell it the history does not reach back to its offset.
    Lost,
    /// Tell it the topic's position (it asked for nothing else).
    Position,
}

/// Subscribe connection `key` to `topic` (`*`: the broadcasts, which
/// need no subscription) and have it wait for what it missed after `at`
/// (None: only for the topic's position).
pub(crate) fn resume(
    topics: &mut Topics,
    subs: &mut Subs,
    r: &mut Recoveries,
    (key, gen): (usize, u32),
    topic: &[u8],
    at: Option<Position>,
) -> Result<(), Close> {
    crate::proto::push::check_resumable(topic).map_err(|_| Close::BadTopic)?;
    if topic != BROADCAST_TOPIC.as_bytes() {
        topics.subscribe(subs, key, topic)?;
    }
    let name = std::str::from_utf8(topic).map_err(|_| Close::BadTopic)?;
    r.add(name, key, gen, at);
    Ok(())
}

/// Unsubscribe connection `key` from `topic` (`*`: the broadcasts) and
/// drop its wait for that topic's history, if any.
pub(crate) fn unsubscribe(topics: &mut Topics, subs: &mut Subs, r: &mut Recoveries, key: usize, topic: &[u8]) {
    topics.unsubscribe(subs, key, topic);
    if let Ok(name) = std::str::from_utf8(topic) {
        r.forget(name, key);
    }
}

/// The last offset a subscriber at `at` has (0: none).
fn after_of(at: Position) -> u64 {
    if at.epoch == 0 {
        0
    } else {
        at.offset
    }
}

#[derive(Default)]
pub(crate) struct Recoveries {
    /// Topic -> connection (slab key) -> where it stopped.
    waiting: HashMap<Box<str>, HashMap<usize, Waiting>>,
    /// Questions in flight: topic -> (offset asked after, when).
    asked: HashMap<Box<str>, (u64, Instant)>,
    /// Questions to send: (topic, after).
    wanted: Vec<(String, u64)>,
}

impl Recoveries {
    /// Connection `key` waits on `topic` from `at` (None: for the position only).
    pub(crate) fn add(&mut self, topic: &str, key: usize, gen: u32, at: Option<Position>) {
        self.waiting.entry(topic.into()).or_default().insert(key, Waiting { gen, at });
        let after = at.map_or(u64::MAX, after_of);
        if self.asked.get(topic).is_none_or(|(asked, _)| *asked > after) {
            self.ask(topic, after);
        }
    }

    fn ask(&mut self, topic: &str, after: u64) {
        let after = self.asked.get(topic).map_or(after, |(a, _)| after.min(*a));
        self.asked.insert(topic.into(), (after, Instant::now()));
        self.wanted.push((topic.into(), after));
    }

    /// Whether live pushes of `topic` skip connection `key` (generation `gen`).
    pub(crate) fn holds(&self, topic: &str, key: usize, gen: u32) -> bool {
        !self.waiting.is_empty() && self.waiting.get(topic).and_then(|w| w.get(&key)).is_some_and(|w| w.gen == gen && w.at.is_some())
    }

    /// Questions to send to the supervisor now (asked again when unanswered).
    pub(crate) fn take_wanted(&mut self) -> Vec<(String, u64)> {
        let now = Instant::now();
        let late: Vec<(String, u64)> = self
            .asked
            .iter()
            .filter(|(t, (_, at))| now.duration_since(*at) >= ASK_AGAIN && !self.wanted.iter().any(|w| *w.0 == ***t))
            .map(|(t, (a, _))| (t.to_string(), *a))
            .collect();
        for (t, a) in late {
            self.asked.insert(t.as_str().into(), (a, now));
            self.wanted.push((t, a));
        }
        std::mem::take(&mut self.wanted)
    }

    /// The supervisor's answer for a topic: every waiting connection with
    /// its fate. Those it starts too late for wait on, asked again, only
    /// when it was asked for a later offset than theirs (see
    /// [`Slice::covers`]): the next question is asked from the earliest
    /// of theirs, and its answer settles each of them.
    pub(crate) fn answered(&mut self, slice: &Slice) -> Vec<(usize, u32, Fate)> {
        self.asked.remove(slice.topic.as_str());
        let Some(waiting) = self.waiting.remove(slice.topic.as_str()) else { return Vec::new() };
        let mut out = Vec::new();
        let mut again: HashMap<usize, Waiting> = HashMap::new();
        for (key, w) in waiting {
            let Some(at) = w.at else {
                out.push((key, w.gen, Fate::Position));
                continue;
            };
            match slice.covers(at) {
                Some(true) => out.push((key, w.gen, Fate::Recovered { after: after_of(at) })),
                Some(false) => out.push((key, w.gen, Fate::Lost)),
                None => {
                    again.insert(key, w);
                }
            }
        }
        if let Some(after) = again.values().filter_map(|w| w.at.map(after_of)).min() {
            self.waiting.insert(slice.topic.as_str().into(), again);
            self.ask(&slice.topic, after);
        }
        out
    }

    /// A connection closed or unsubscribed: it waits no more.
    pub(crate) fn forget(&mut self, topic: &str, key: usize) {
        if let Some(w) = self.waiting.get_mut(topic) {
            w.remove(&key);
            if w.is_empty() {
                self.waiting.remove(topic);
            }
        }
    }

    /// Connections waiting, in all.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.values().map(HashMap::len).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer to a question asked after `from - 1`, holding all of it.
    fn slice(epoch: u32, head: u64, from: u64) -> Slice {
        cut_slice(epoch, head, from - 1, from)
    }

    /// The answer to a question asked after `after`, holding `from..=head`.
    fn cut_slice(epoch: u32, head: u64, after: u64, from: u64) -> Slice {
        let messages = (from..=head).map(|offset| crate::server::broker::history::Message { offset, ..Default::default() }).collect();
        Slice { topic: "t".into(), after, epoch, head, messages, oldest: 1 }
    }

    #[test]
    fn one_question_per_topic_and_each_waiter_gets_its_fate() {
        let mut r = Recoveries::default();
        r.add("t", 1, 7, Some(Position { epoch: 5, offset: 10 }));
        r.add("t", 2, 7, Some(Position { epoch: 5, offset: 12 }));
        assert_eq!(r.take_wanted(), vec![("t".to_string(), 10)], "the later one rides along");
        assert!(r.holds("t", 1, 7) && !r.holds("t", 1, 8) && !r.holds("u", 1, 7));
        r.add("t", 3, 1, Some(Position { epoch: 5, offset: 4 }));
        assert_eq!(r.take_wanted(), vec![("t".to_string(), 4)], "an earlier offset asks again");
        // The first answer (after 10) cannot serve 3 though the history can.
        let mut fates = r.answered(&slice(5, 20, 11));
        fates.sort_by_key(|f| f.0);
        assert_eq!(fates, vec![(1, 7, Fate::Recovered { after: 10 }), (2, 7, Fate::Recovered { after: 12 })]);
        assert_eq!((r.len(), r.take_wanted()), (1, vec![("t".to_string(), 4)]));
        assert_eq!(r.answered(&slice(5, 20, 5)), vec![(3, 1, Fate::Recovered { after: 4 })]);
        assert!(r.is_empty());
        r.add("t", 4, 1, Some(Position { epoch: 6, offset: 4 }));
        r.take_wanted();
        assert_eq!(r.answered(&slice(5, 20, 5)), vec![(4, 1, Fate::Lost)], "another epoch");
        r.add("t", 6, 1, None);
        assert!(!r.holds("t", 6, 1), "a position-only subscriber gets live pushes");
        assert_eq!(r.take_wanted(), vec![("t".to_string(), u64::MAX)]);
        assert_eq!(r.answered(&slice(5, 20, 21)), vec![(6, 1, Fate::Position)]);
        r.add("t", 5, 1, Some(Position::default()));
        r.forget("t", 5);
        assert!(r.is_empty() && r.answered(&slice(5, 20, 5)).is_empty());
    }

    #[test]
    fn an_answer_cut_at_the_byte_bound_is_answered_once_and_never_asked_again() {
        let mut r = Recoveries::default();
        let at = |offset| Some(Position { epoch: 5, offset });
        // From the start: the answer (asked after 0) holds only 15..=20.
        r.add("t", 1, 7, Some(Position::default()));
        assert_eq!(r.take_wanted(), vec![("t".to_string(), 0)]);
        assert!(r.holds("t", 1, 7), "no live push before the answer");
        assert_eq!(r.answered(&cut_slice(5, 20, 0, 15)), vec![(1, 7, Fate::Lost)]);
        assert!(r.is_empty() && !r.holds("t", 1, 7), "live from now on");
        assert!(r.take_wanted().is_empty(), "not asked again");
        // One at 10 asked first; one at 2 comes before the answer: the
        // first answer serves 10 and asks again for 2, whose answer is cut.
        r.add("t", 2, 7, at(10));
        r.take_wanted();
        r.add("t", 3, 7, at(2));
        assert_eq!(r.take_wanted(), vec![("t".to_string(), 2)]);
        assert_eq!(r.answered(&slice(5, 20, 11)), vec![(2, 7, Fate::Recovered { after: 10 })], "3 waits: asked for 10, not for it");
        assert_eq!(r.take_wanted(), vec![("t".to_string(), 2)]);
        assert_eq!(r.answered(&cut_slice(5, 20, 2, 15)), vec![(3, 7, Fate::Lost)]);
        assert!(r.is_empty() && r.take_wanted().is_empty());
    }

    #[test]
    fn unsubscribing_ends_the_wait() {
        let (mut topics, mut subs, mut r) = (Topics::default(), Subs::new(), Recoveries::default());
        resume(&mut topics, &mut subs, &mut r, (1, 7), b"t", Some(Position { epoch: 5, offset: 3 })).unwrap();
        resume(&mut topics, &mut subs, &mut r, (1, 7), b"*", Some(Position { epoch: 6, offset: 3 })).unwrap();
        assert!(r.holds("t", 1, 7) && r.holds("*", 1, 7) && topics.subscribers("t") == vec![1]);
        unsubscribe(&mut topics, &mut subs, &mut r, 1, b"t");
        assert!(!r.holds("t", 1, 7) && topics.subscribers("t").is_empty());
        assert!(r.answered(&slice(5, 20, 4)).is_empty(), "no replay for a topic it left");
        assert_eq!(r.len(), 1, "the broadcasts still wait");
    }
}
