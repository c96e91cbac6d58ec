//! The busiest topics, for `/stats` "top_topics" and the dashboard: each
//! shard counts messages and payload bytes per topic it routed since the
//! supervisor last took the counts ([`Counts`], at most [`TRACKED`]
//! topics between two takes; past that a message is counted as
//! `untracked` only). The supervisor takes them about once a second and
//! keeps the [`TOP`] topics with the most messages, as rates over the
//! time since the take before ([`top`]). A topic belongs to one shard, so
//! the shards' counts never overlap.

use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Topics counted per shard between two takes.
pub(crate) const TRACKED: usize = 65_536;
/// Topics `/stats` lists.
pub(crate) const TOP: usize = 10;

/// One shard's counts since the last take.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    by_topic: HashMap<Box<str>, (u64, u64)>,
    /// Messages of topics past [`TRACKED`].
    untracked: u64,
}

impl Counts {
    /// A message of `topic` with `bytes` of payload.
    pub(crate) fn note(&mut self, topic: &str, bytes: usize) {
        if let Some(c) = self.by_topic.get_mut(topic) {
            c.0 += 1;
            c.1 += bytes as u64;
        } else if self.by_topic.len() < TRACKED {
            self.by_topic.insert(topic.into(), (1, bytes as u64));
        } else {
            self.untracked += 1;
        }
    }

    /// The counts so far (and the untracked messages), the shard's
    /// starting again from nothing.
    pub(crate) fn take(&mut self) -> (HashMap<Box<str>, (u64, u64)>, u64) {
        (std::mem::take(&mut self.by_topic), std::mem::take(&mut self.untracked))
    }
}

/// How often the supervisor takes the shards' counts.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// The supervisor's view: the busiest topics of the last window.
#[derive(Debug)]
pub(crate) struct TopTopics {
    pub list: Vec<TopTopic>,
    /// Messages not counted by topic (past [`TRACKED`] in a window), in all.
    pub untracked: u64,
    taken: Instant,
}

impl TopTopics {
    pub(crate) fn new(now: Instant) -> TopTopics {
        TopTopics { list: Vec::new(), untracked: 0, taken: now }
    }

    /// Take every shard's counts once [`EVERY`] has passed since the last take.
    pub(crate) fn refresh(&mut self, shards: &super::shard::Shards, now: Instant) {
        let seconds = now.duration_since(self.taken);
        if seconds < EVERY {
            return;
        }
        self.taken = now;
        let mut counts = Vec::with_capacity(shards.len());
        for i in 0..shards.len() {
            let (c, untracked) = shards.core(i).top.take();
            self.untracked += untracked;
            counts.push(c);
        }
        self.list = top(counts, seconds.as_secs_f64());
    }
}

/// A topic among the busiest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TopTopic {
    pub topic: String,
    pub messages_per_s: f64,
    pub bytes_per_s: f64,
}

/// The busiest of every shard's `counts`, over `seconds`.
pub(crate) fn top(counts: impl IntoIterator<Item = HashMap<Box<str>, (u64, u64)>>, seconds: f64) -> Vec<TopTopic> {
    let mut all: Vec<(Box<str>, (u64, u64))> = counts.into_iter().flatten().collect();
    let by_busiest = |a: &(Box<str>, (u64, u64)), b: &(Box<str>, (u64, u64))| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0));
    if all.len() > TOP {
        all.select_nth_unstable_by(TOP - 1, by_busiest);
        all.truncate(TOP);
    }
    all.sort_unstable_by(by_busiest);
    let s = seconds.max(1e-3);
    all.into_iter().map(|(t, (m, b))| TopTopic { topic: t.into(), messages_per_s: m as f64 / s, bytes_per_s: b as f64 / s }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_topics_as_rates_over_the_window() {
        let mut a = Counts::default();
        let mut b = Counts::default();
        for i in 0..30u64 {
            for _ in 0..i {
                let t = format!("t{i}");
                if i % 2 == 0 {
                    a.note(&t, 10)
                } else {
                    b.note(&t, 10)
                }
            }
        }
        let t = top([a.take().0, b.take().0], 2.0);
        assert_eq!(t.len(), TOP);
        assert_eq!(t[0], TopTopic { topic: "t29".into(), messages_per_s: 14.5, bytes_per_s: 145.0 });
        assert_eq!(t.iter().map(|x| x.topic.as_str()).collect::<Vec<_>>(), (20..30).rev().map(|i| format!("t{i}")).collect::<Vec<_>>());
        assert!(a.take().0.is_empty(), "a take starts the counts again");
    }

    #[test]
    fn counts_are_bounded_between_takes() {
        let mut c = Counts::default();
        for i in 0..TRACKED + 5 {
            c.note(&format!("t{i}"), 1);
        }
        c.note("t0", 1);
        let (m, untracked) = c.take();
        assert_eq!((m.len(), untracked, m["t0"]), (TRACKED, 5, (2, 2)));
    }
}
