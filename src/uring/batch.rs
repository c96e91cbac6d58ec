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
//!
//! How long: the flag's wait where receives are many; stretched as they
//! become fewer, to gather about [`AIM`] a turn, up to [`STRETCH`] times
//! the flag (at 5,000 receives a second a 250 µs wait gathers one or
//! two, and the fan-in's three threads each woke for nearly every
//! message: 2.2 times mosquitto's CPU at 10,000/s; stretched, 1.17).
//! Not stretched where round trips set the pace: one connection reads
//! most of the receives (a majority vote over their tags), or a
//! delivery waited behind a client's QoS 1/2 window in the last
//! [`HELD_CALM`] (a longer wait there slows the window's acknowledgements
//! and its queue overflows: 0.05-1% of a QoS 1 fan-in lost when tried).

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
/// Receives a batched turn aims to gather: the wait grows as the rate
/// falls, up to [`STRETCH`] times `--io-batch-wait`.
const AIM: u64 = 8;
const STRETCH: u32 = 8;
/// How long after a delivery was last held behind a window the wait is
/// not stretched.
const HELD_CALM: Duration = Duration::from_secs(5);

/// The batching state of one ring.
#[derive(Debug)]
pub(crate) struct Batching {
    /// `--io-batch-wait` (zero: never; also when the kernel lacks the
    /// minimum wait).
    wait: Duration,
    /// The wait the last window judged (zero: the connections are not
    /// quiet, no batching).
    now: Duration,
    /// Completions since the window began.
    completions: u64,
    /// The receive tag seen most this window (a majority vote: the
    /// count is how far it leads every other tag together).
    lead: u64,
    lead_by: u64,
    /// The handler's count of deliveries held behind windows at the last
    /// judgement, and when it last moved.
    held: u64,
    held_at: Option<Instant>,
    since: Instant,
}

impl Batching {
    pub(crate) fn new(wait: Duration) -> Batching {
        Batching { wait, now: Duration::ZERO, completions: 0, lead: 0, lead_by: 0, held: 0, held_at: None, since: Instant::now() }
    }

    /// The receives handled, by tag.
    pub(crate) fn note(&mut self, tags: impl Iterator<Item = u64>) {
        for tag in tags {
            self.completions += 1;
            if tag == self.lead {
                self.lead_by += 1;
            } else if self.lead_by == 0 {
                (self.lead, self.lead_by) = (tag, 1);
            } else {
                self.lead_by -= 1;
            }
        }
    }

    /// The minimum wait of the next enter (zero: wake at the first
    /// completion), judged again once a window passed, given the
    /// handler's open `connections`.
    pub(crate) fn wait(&mut self, now: Instant, connections: usize, held: u64) -> Duration {
        if self.wait.is_zero() {
            return Duration::ZERO;
        }
        let took = now.saturating_duration_since(self.since);
        if took >= WINDOW {
            if held != self.held {
                (self.held, self.held_at) = (held, Some(now));
            }
            let calm = self.held_at.is_none_or(|at| now.saturating_duration_since(at) >= HELD_CALM);
            self.now = match quiet(self.completions, took, connections) {
                false => Duration::ZERO,
                // One connection reads most of it, or deliveries wait behind
                // a client's window (a subscriber acknowledging QoS 1): each
                // round trip would pay a longer wait, so it stays the flag's.
                true if self.lead_by * 4 > self.completions || !calm => self.wait,
                true => stretched(self.wait, self.completions, took),
            };
            (self.completions, self.lead_by, self.since) = (0, 0, now);
        }
        self.now
    }
}

/// The wait that gathers about [`AIM`] receives at the rate of
/// `completions` over `took`: at least `wait`, at most [`STRETCH`] times it.
fn stretched(wait: Duration, completions: u64, took: Duration) -> Duration {
    let us = AIM as u128 * took.as_micros() / completions.max(1) as u128;
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX)).clamp(wait, wait * STRETCH)
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

    /// The judgement holds for a window, then follows the new rate: the
    /// quieter, the longer (about [`AIM`] receives a turn, within the
    /// flag's wait and [`STRETCH`] times it), the flag's own wait when one
    /// connection reads most; a zero wait never batches.
    #[test]
    fn the_wait_follows_the_last_window() {
        let t0 = Instant::now();
        let mut b = Batching::new(Duration::from_micros(250));
        b.since = t0;
        b.note(0..1_000);
        assert_eq!(b.wait(t0 + WINDOW / 2, 2_000, 0), Duration::ZERO, "judged only once a window passed");
        assert_eq!(b.wait(t0 + WINDOW, 2_000, 0), Duration::from_micros(800), "10,000 a second: 8 in 800 µs");
        b.note(0..3_000);
        assert_eq!(b.wait(t0 + WINDOW * 2, 2_000, 0), Duration::from_micros(266), "30,000 a second");
        b.note((0..500).chain(std::iter::repeat_n(7, 600)));
        assert_eq!(b.wait(t0 + WINDOW * 3, 2_000, 0), Duration::from_micros(250), "one connection reads most: the flag's wait");
        b.note(0..450);
        assert_eq!(b.wait(t0 + WINDOW * 4, 2_000, 0), Duration::from_micros(1_777), "4,500 a second");
        assert_eq!(stretched(Duration::from_micros(250), 1, WINDOW), Duration::from_millis(2), "at most 8 times the flag's");
        b.note(0..450);
        assert_eq!(b.wait(t0 + WINDOW * 5, 2_000, 3), Duration::from_micros(250), "deliveries held behind a window: the flag's wait");
        b.note(0..450);
        assert_eq!(b.wait(t0 + WINDOW * 6, 2_000, 3), Duration::from_micros(250), "and for a while after");
        // 4,500 a second for the 4.9 s until the calm.
        b.note(0..22_050);
        let calm = t0 + WINDOW * 5 + HELD_CALM;
        assert_eq!(b.wait(calm, 2_000, 3), Duration::from_micros(1_777), "then stretched again");
        b.note(0..100_000);
        assert_eq!(b.wait(calm + WINDOW, 2_000, 3), Duration::ZERO, "1,000,000 reads a second over 2,000 connections is busy");
        let mut off = Batching::new(Duration::ZERO);
        assert_eq!(off.wait(Instant::now() + WINDOW, 2_000, 0), Duration::ZERO);
    }
}
