//! Completion batching for a server worker's ring (`--io-batch-wait`):
//! interrupt moderation, as a NIC's or NAPI's, for a worker whose
//! connections each speak rarely.
//!
//! Why: a loop turn costs a sleep and a wake-up whatever it handles, and
//! on this kind of machine (a VM, two cores) the context switch is the
//! largest single cost of a message that arrives alone (`perf`:
//! `finish_task_switch` and the wake-up's lock are a third of a worker's
//! CPU at 60,000 MQTT publishes a second from 2,000 devices). Waiting a
//! little for company turns many wake-ups into one: the worker enters
//! the kernel asking for [`BATCH`] completions and, with the kernel's
//! minimum wait (Linux 6.13, `IORING_FEAT_MIN_TIMEOUT`), is woken when
//! they are there or when `wait` has passed and at least one is. An idle
//! worker still sleeps until its next timer; a worker with nothing
//! arriving is never held back.
//!
//! When: only while the worker's connections are *many and quiet*, and
//! the worker busy with them: at least [`MIN_RATE`] receives a second in
//! all (below it the wake-ups cost a few percent of a core, not worth
//! anybody's latency: a business stage's 1,000 requests a second never
//! wait), on average fewer than [`QUIET_READS`] a second each, over at
//! least [`MIN_CONNECTIONS`] connections (devices reporting, subscribers,
//! many browsers). There each connection waits for its next message far
//! longer than the batch, so holding a receive back by at most `wait`
//! adds that to its latency and nothing to its rate. A busy
//! request/response connection (wrk, ab, a client waiting for each
//! PUBACK) reads thousands of times a second: there a wait would be paid
//! by every round trip, so the worker does not batch. The judgement is
//! made again every [`WINDOW`].

use std::time::{Duration, Instant};

/// Completions a batched wait asks for before its time is up.
pub(crate) const BATCH: u32 = 64;
/// Receives a second per connection under which connections are quiet.
const QUIET_READS: u64 = 200;
/// Receives a second in all under which a worker never batches.
const MIN_RATE: u64 = 4_000;
/// Fewer connections than this never batch: there is no company to wait for.
const MIN_CONNECTIONS: usize = 64;
/// How often the worker's quiet is judged anew.
const WINDOW: Duration = Duration::from_millis(100);

/// The batching state of one ring.
#[derive(Debug)]
pub(crate) struct Batching {
    /// `--io-batch-wait` (zero: never; also when the kernel lacks the
    /// minimum wait).
    wait: Duration,
    /// Whether the last window judged the connections quiet.
    on: bool,
    /// Completions since the window began.
    completions: u64,
    since: Instant,
}

impl Batching {
    pub(crate) fn new(wait: Duration) -> Batching {
        Batching { wait, on: false, completions: 0, since: Instant::now() }
    }

    /// `n` receives were handled.
    pub(crate) fn note(&mut self, n: usize) {
        self.completions += n as u64;
    }

    /// The minimum wait of the next enter (zero: wake at the first
    /// completion), judged again once a window passed, given the
    /// handler's open `connections`.
    pub(crate) fn wait(&mut self, now: Instant, connections: usize) -> Duration {
        if self.wait.is_zero() {
            return Duration::ZERO;
        }
        let took = now.saturating_duration_since(self.since);
        if took >= WINDOW {
            self.on = quiet(self.completions, took, connections);
            (self.completions, self.since) = (0, now);
        }
        if self.on {
            self.wait
        } else {
            Duration::ZERO
        }
    }
}

/// Whether `completions` over `took` among `connections` make them quiet.
fn quiet(completions: u64, took: Duration, connections: usize) -> bool {
    let (per_s, us) = (completions as u128 * 1_000_000, took.as_micros());
    connections >= MIN_CONNECTIONS && per_s >= MIN_RATE as u128 * us && per_s < QUIET_READS as u128 * connections as u128 * us
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2,000 devices at 30 messages a second each are quiet; ten wrk
    /// connections at 13,000 round trips a second each are not, nor are
    /// a thousand at 500; too few connections never batch, nor does a
    /// worker reading a thousand times a second in all.
    #[test]
    fn quiet_means_many_connections_each_reading_rarely() {
        let second = Duration::from_secs(1);
        assert!(quiet(60_000, second, 2_000));
        assert!(quiet(5_000, second, 1_000));
        assert!(!quiet(130_000, second, 10));
        assert!(!quiet(500_000, second, 1_000));
        assert!(!quiet(10_000, second, MIN_CONNECTIONS - 1));
        assert!(!quiet(1_000, second, 1_000), "1,000 requests a second: not worth anybody's latency");
    }

    /// The judgement holds for a window, then follows the new rate; a
    /// zero wait never batches.
    #[test]
    fn the_wait_follows_the_last_window() {
        let t0 = Instant::now();
        let mut b = Batching { wait: Duration::from_micros(250), on: false, completions: 0, since: t0 };
        b.note(1_000);
        assert_eq!(b.wait(t0 + WINDOW / 2, 2_000), Duration::ZERO, "judged only once a window passed");
        assert_eq!(b.wait(t0 + WINDOW, 2_000), Duration::from_micros(250));
        b.note(100_000);
        assert_eq!(b.wait(t0 + WINDOW * 2, 2_000), Duration::ZERO, "1,000,000 reads a second over 2,000 connections is busy");
        let mut off = Batching::new(Duration::ZERO);
        assert_eq!(off.wait(Instant::now() + WINDOW, 2_000), Duration::ZERO);
    }
}
