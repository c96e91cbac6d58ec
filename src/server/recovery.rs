//! Subscribers of one worker waiting to recover what they missed.
//!
//! A resume subscribes the connection at once and asks the supervisor for
//! the topic's history (one question per topic in flight, however many
//! connections wait). Until the answer comes, live pushes of that topic
//! skip the waiting connection: the supervisor answers after sending the
//! worker every push up to the head it reports, so each of them is in the
//! answer, and every later push comes after it. The seam therefore has no
//! gap and no duplicate, and nothing is buffered per connection.

use super::history::Slice;
use super::push::{Subs, Topics};
use crate::proto::push::{Position, BROADCAST_TOPIC};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// An unanswered question is asked again after this long (the
/// supervisor drops commands to a worker whose queue is full).
pub const ASK_AGAIN: Duration = Duration::from_secs(5);

/// One connection waiting on one topic.
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    pub gen: u32,
    /// Where it stopped; None: it only wants to know the position (a
    /// first subscription), and live pushes reach it meanwhile.
    pub at: Option<Position>,
}

/// A waiting connection's fate once the history came.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate {
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
pub fn resume(
    topics: &mut Topics,
    subs: &mut Subs,
    r: &mut Recoveries,
    (key, gen): (usize, u32),
    topic: &[u8],
    at: Option<Position>,
) -> Result<(), &'static str> {
    crate::proto::push::check_resumable(topic).map_err(|_| "bad_topic")?;
    if topic != BROADCAST_TOPIC.as_bytes() {
        topics.subscribe(subs, key, topic)?;
    }
    let name = std::str::from_utf8(topic).map_err(|_| "bad_topic")?;
    r.add(name, key, gen, at);
    Ok(())
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
pub struct Recoveries {
    /// Topic -> connection (slab key) -> where it stopped.
    waiting: HashMap<Box<str>, HashMap<usize, Waiting>>,
    /// Questions in flight: topic -> (offset asked after, when).
    asked: HashMap<Box<str>, (u64, Instant)>,
    /// Questions to send: (topic, after).
    wanted: Vec<(String, u64)>,
}

impl Recoveries {
    /// Connection `key` waits on `topic` from `at` (None: for the position only).
    pub fn add(&mut self, topic: &str, key: usize, gen: u32, at: Option<Position>) {
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
    pub fn holds(&self, topic: &str, key: usize, gen: u32) -> bool {
        !self.waiting.is_empty() && self.waiting.get(topic).and_then(|w| w.get(&key)).is_some_and(|w| w.gen == gen && w.at.is_some())
    }

    /// Questions to send to the supervisor now (asked again when unanswered).
    pub fn take_wanted(&mut self) -> Vec<(String, u64)> {
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
    /// its fate (those the slice starts too late for wait on, asked again).
    pub fn answered(&mut self, slice: &Slice) -> Vec<(usize, u32, Fate)> {
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
    pub fn forget(&mut self, topic: &str, key: usize) {
        if let Some(w) = self.waiting.get_mut(topic) {
            w.remove(&key);
            if w.is_empty() {
                self.waiting.remove(topic);
            }
        }
    }

    /// Connections waiting, in all.
    pub fn len(&self) -> usize {
        self.waiting.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(epoch: u32, head: u64, from: u64) -> Slice {
        let messages = (from..=head).map(|offset| super::super::history::Message { offset, ..Default::default() }).collect();
        Slice { topic: "t".into(), epoch, head, messages, oldest: 1 }
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
}
