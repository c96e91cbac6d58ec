//! A framed connection's first broadcasts and its resume. Broadcasts
//! reach every connection from its accept on, while its resume (the
//! first frame its client sends) is read a moment later, or seconds later
//! on a loaded worker: a broadcast pushed in between reaches it live and
//! is also in the history answer. So the worker remembers when each
//! connection not read yet was accepted, and the broadcasts it pushed in
//! the last [`FRESH`]; a resume of the broadcasts skips those pushed
//! after its accept (it has them), so each offset reaches the connection
//! once. A WebSocket or event stream resumes at its Upgrade, before any
//! push.
//!
//! Accepts are noted only while this worker has seen a resume in the last
//! [`FRESH`] (a rollout, reconnecting clients): a million connections
//! that never resume cost nothing here. TLS connections are not noted
//! (broadcasts skip them until their handshake ends, so the time of the
//! accept would not say what they got).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long an accept and a broadcast are remembered, and how long after
/// a resume accepts are noted.
pub const FRESH: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Seam {
    /// Connections accepted and not read yet: key -> (generation, accepted at).
    fresh: HashMap<usize, (u32, Instant)>,
    /// Broadcasts pushed: (when, offset), oldest first.
    pushed: VecDeque<(Instant, u64)>,
    /// Accepts are noted until then.
    noting_until: Option<Instant>,
}

impl Seam {
    pub fn accepted(&mut self, key: usize, gen: u32) {
        let now = Instant::now();
        if self.noting_until.is_some_and(|t| now < t) {
            self.fresh.insert(key, (gen, now));
        }
    }

    /// A resume was read: note the accepts that follow.
    pub fn resumed(&mut self) {
        self.noting_until = Some(Instant::now() + FRESH);
    }

    /// A broadcast at `offset` was pushed to every connection not waiting
    /// for a recovery.
    pub fn broadcast(&mut self, offset: u64) {
        let now = Instant::now();
        while self.pushed.front().is_some_and(|(at, _)| now.duration_since(*at) > FRESH) {
            self.pushed.pop_front();
        }
        if self.fresh.len() > 1024 {
            self.fresh.retain(|_, (_, at)| now.duration_since(*at) <= FRESH);
        }
        self.pushed.push_back((now, offset));
    }

    /// Connection `key` is read: the broadcast offsets it already got live
    /// (None: none), to skip in the recovery of a resume in this read.
    /// Later broadcasts come after its resume, if it sends one.
    pub fn read(&mut self, key: usize, gen: u32) -> Option<(u64, u64)> {
        if self.fresh.is_empty() {
            return None;
        }
        let (g, accepted) = self.fresh.remove(&key)?;
        if g != gen {
            return None;
        }
        let mut after = self.pushed.iter().filter(|(at, _)| *at >= accepted).map(|(_, o)| *o);
        let first = after.next()?;
        Some((first, after.next_back().unwrap_or(first)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_skips_what_its_connection_got_between_accept_and_read() {
        let mut s = Seam::default();
        s.accepted(1, 7);
        s.broadcast(40);
        assert_eq!(s.read(1, 7), None, "no resume seen yet: not noted");
        s.resumed();
        s.accepted(1, 7);
        s.accepted(2, 7);
        s.broadcast(41);
        s.broadcast(42);
        assert_eq!(s.read(1, 8), None, "another connection on the same key");
        s.accepted(2, 7);
        s.broadcast(43);
        assert_eq!(s.read(2, 7), Some((43, 43)), "only what came after its accept");
        assert_eq!(s.read(2, 7), None, "read once");
        s.accepted(3, 1);
        assert_eq!(s.read(3, 1), None, "nothing pushed since");
    }
}
