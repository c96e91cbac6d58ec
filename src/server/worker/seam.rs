//! A framed connection's first broadcasts and its resume. Broadcasts
//! reach every connection from its accept on, while its resume (the
//! first frame its client sends) is read a moment later: a broadcast
//! pushed in between reaches it live and is also in the history answer.
//! The worker notes, for connections accepted in the last [`FRESH`], the
//! first broadcast each got live; a resume of the broadcasts then skips
//! from that offset to the last broadcast pushed (what it already has),
//! so each offset reaches the connection once. A WebSocket or event
//! stream resumes at its Upgrade, before any push.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long after its accept a connection's first live broadcast is noted.
pub const FRESH: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Seam {
    /// (accepted at, key, generation), oldest first.
    fresh: VecDeque<(Instant, usize, u32)>,
    /// Key -> (generation, first broadcast offset it got live, when).
    first_live: HashMap<usize, (u32, u64, Instant)>,
    /// The last broadcast offset this worker pushed.
    last: u64,
}

impl Seam {
    pub fn accepted(&mut self, key: usize, gen: u32) {
        self.fresh.push_back((Instant::now(), key, gen));
    }

    /// A broadcast at `offset` is being pushed: forget what is too old,
    /// then note it for every fresh connection `got` it (alive, same
    /// generation, not held for a recovery).
    pub fn broadcast(&mut self, offset: u64, mut got: impl FnMut(usize, u32) -> bool) {
        let now = Instant::now();
        while self.fresh.front().is_some_and(|(at, ..)| now.duration_since(*at) > FRESH) {
            self.fresh.pop_front();
        }
        self.first_live.retain(|_, (_, _, at)| now.duration_since(*at) <= FRESH);
        for &(_, key, gen) in &self.fresh {
            if got(key, gen) {
                self.first_live.entry(key).or_insert((gen, offset, now));
            }
        }
        self.last = offset;
    }

    /// The broadcast offsets connection `key` already got live, to skip
    /// in its recovery (None: none).
    pub fn had(&self, key: usize, gen: u32) -> Option<(u64, u64)> {
        if self.first_live.is_empty() {
            return None;
        }
        self.first_live.get(&key).filter(|(g, ..)| *g == gen).map(|(_, first, _)| (*first, self.last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_fresh_connection_got_live_is_skipped() {
        let mut s = Seam::default();
        s.accepted(1, 7);
        s.accepted(2, 7);
        assert_eq!(s.had(1, 7), None);
        s.broadcast(41, |k, _| k == 1);
        s.broadcast(42, |_, _| true);
        assert_eq!(s.had(1, 7), Some((41, 42)));
        assert_eq!(s.had(2, 7), Some((42, 42)));
        assert_eq!(s.had(1, 8), None, "a later connection on the same key");
        assert_eq!(s.had(3, 7), None);
    }
}
