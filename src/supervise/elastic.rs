//! Elastic sizing of the server's worker processes: how many exist is
//! decided by the load, not by the worst case.
//!
//! Why: a server planned for 1M connections used to start 56 workers at
//! once. With 50,000 connections x 1 req/s on 2 cores those 56 event loops
//! each woke for a trickle of work, and mean latency was 121 ms (p50 22 ms)
//! against 14.76 ms (p50 1.19 ms) with 3 workers. Per-process fd limits
//! (20,000 here) still force many processes at a million connections, so
//! the count must grow with the load:
//!
//! - one accepting worker per core to start with;
//! - a worker that reaches its fd budget (90% of RLIMIT_NOFILE minus its
//!   listeners) stops watching the shared listeners (closes nothing);
//!   it rejoins when it drains below the low-water
//!   mark;
//! - the supervisor keeps `target` workers accepting *with room*: when an
//!   accepting worker passes [`PRESPAWN_SHARE`] of its budget a new one is
//!   started, so the replacement is listening before the full one leaves;
//! - accepting workers with no connection for `grace` beyond the target
//!   exit.
//!
//! This module is the pure policy (unit-tested); the server supervisor
//! feeds it what its workers report and carries out the decision.

use std::time::{Duration, Instant};

/// Share of its budget at which an accepting worker stops counting as
/// "room": a successor starts then (process start + bind take ~10-50 ms,
/// in which a fast ramp fills the rest).
pub(crate) const PRESPAWN_SHARE: f64 = 0.75;
/// A full worker rejoins the accept group once it holds at most this
/// share of its budget.
pub(crate) const LOW_WATER_SHARE: f64 = 0.80;
/// How long a surplus worker stays empty before it exits.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// What the policy needs to know of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkerState {
    pub index: usize,
    /// Started, not yet ready.
    pub starting: bool,
    /// Asked to exit.
    pub retiring: bool,
    pub accepting: bool,
    pub active: u64,
    pub budget: u64,
    /// Since when it has held no connection (None: it holds some).
    pub empty_since: Option<Instant>,
}

impl WorkerState {
    fn has_room(&self) -> bool {
        self.accepting && !self.retiring && (self.active as f64) < self.budget as f64 * PRESPAWN_SHARE
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Workers to start now.
    pub spawn: usize,
    /// Workers to ask to exit (surplus, empty for longer than the grace).
    pub retire: Vec<usize>,
}

/// Decide what to start and retire so that `target` workers accept with
/// room, never exceeding `max_workers` live processes.
pub(crate) fn decide(workers: &[WorkerState], target: usize, max_workers: usize, now: Instant, grace: Duration) -> Decision {
    let live = workers.iter().filter(|w| !w.retiring).count();
    let starting = workers.iter().filter(|w| w.starting).count();
    let with_room = workers.iter().filter(|w| !w.starting && w.has_room()).count();
    let spawn = target.saturating_sub(with_room + starting).min(max_workers.saturating_sub(live));
    let mut retire = Vec::new();
    if starting == 0 && with_room > target {
        let mut idle: Vec<&WorkerState> =
            workers.iter().filter(|w| w.has_room() && w.active == 0 && w.empty_since.is_some_and(|t| now.duration_since(t) >= grace)).collect();
        idle.sort_by_key(|w| std::cmp::Reverse(w.index));
        retire = idle.into_iter().take(with_room - target).map(|w| w.index).collect();
    }
    Decision { spawn, retire }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(index: usize, accepting: bool, active: u64) -> WorkerState {
        WorkerState { index, starting: false, retiring: false, accepting, active, budget: 1000, empty_since: None }
    }

    #[test]
    fn starts_one_per_core_and_grows_before_workers_fill() {
        let now = Instant::now();
        assert_eq!(decide(&[], 2, 100, now, DEFAULT_GRACE).spawn, 2);
        // Both accepting with room: nothing to do.
        assert_eq!(decide(&[w(0, true, 100), w(1, true, 700)], 2, 100, now, DEFAULT_GRACE), Decision::default());
        // One passed the pre-spawn share: a successor starts.
        assert_eq!(decide(&[w(0, true, 100), w(1, true, 800)], 2, 100, now, DEFAULT_GRACE).spawn, 1);
        // One full (left the group), one starting: nothing more.
        let mut s = w(2, false, 0);
        s.starting = true;
        assert_eq!(decide(&[w(0, true, 100), w(1, false, 1000), s], 2, 100, now, DEFAULT_GRACE).spawn, 0);
        // The process cap wins.
        assert_eq!(decide(&[w(0, false, 1000), w(1, false, 1000)], 2, 3, now, DEFAULT_GRACE).spawn, 1);
    }

    #[test]
    fn surplus_empty_workers_retire_after_the_grace() {
        let now = Instant::now();
        let long_ago = now - Duration::from_secs(60);
        let mut ws: Vec<WorkerState> = (0..5).map(|i| w(i, true, 0)).collect();
        for x in ws.iter_mut() {
            x.empty_since = Some(long_ago);
        }
        ws[0].active = 10;
        ws[0].empty_since = None;
        let d = decide(&ws, 2, 100, now, DEFAULT_GRACE);
        assert_eq!(d.spawn, 0);
        assert_eq!(d.retire, vec![4, 3, 2]);
        // Not yet past the grace: nobody retires.
        for x in ws.iter_mut().skip(1) {
            x.empty_since = Some(now);
        }
        assert!(decide(&ws, 2, 100, now, DEFAULT_GRACE).retire.is_empty());
    }
}
