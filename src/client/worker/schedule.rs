//! The open-loop send schedules of a client worker: heartbeats and
//! requests. Send number j of a schedule goes to connection `j % count`
//! and is due at `start + j * period / count`, so every connection sends
//! once per period, phases spread evenly, and no per-connection timer is
//! needed. Sends never wait for replies (no coordinated omission).
//!
//! Every accepted rate must give a sane schedule: `--request-rate 1e-30/s`
//! is a period of ~1e36 µs (saturated to `u64::MAX`), so the arithmetic
//! saturates instead of wrapping. A wrapped due time lay in the past, the
//! loop's wait became 0 and the worker spun on a full core (issue 42,
//! finding 14); a send that is due after the end of time is never due.

use super::{State, Worker};
use crate::client::speak::Due;
use crate::net;

/// Supervisor -> client worker: `hold_until MONO_US`, the monotonic µs
/// the hold ends at (sent when the hold starts).
pub(crate) const CMD_HOLD_UNTIL: &str = "hold_until";

/// Shortest period of a schedule: a rate above 1e6/s per connection
/// (possible in a config built in code; the CLI caps it at 100,000/s)
/// gives 0 µs, a division by zero and every send due at the start.
const MIN_PERIOD_US: u64 = 1;

/// Intended time of send number `j` of a schedule with this period over
/// `count` connections that started at `start` (send j goes to connection
/// `j % count`); `u64::MAX` (never) when that is past the clock's end.
pub(super) fn due_at(j: u64, period_us: u64, count: u64, start: u64) -> u64 {
    let offset = j as u128 * period_us.max(MIN_PERIOD_US) as u128 / count.max(1) as u128;
    start.saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
}

/// How many sends of a schedule are due by `now` (send j is due at
/// `due_at(j)`, so sends 0..=floor(elapsed * count / period) are; 0
/// before the start).
pub(super) fn due_by(now: u64, period_us: u64, count: u64, start: u64) -> u64 {
    if now < start {
        return 0;
    }
    let due = (now - start) as u128 * count.max(1) as u128 / period_us.max(MIN_PERIOD_US) as u128;
    u64::try_from(due).unwrap_or(u64::MAX).saturating_add(1)
}

/// The sends of a schedule over `count` connections that may be made
/// when `due` are due and each connection sends at most `per_connection`
/// (`--requests-per-connection`): send j is connection `j % count`'s
/// number `j / count`, so the first `per_connection * count` sends are
/// exactly that many per connection.
pub(super) fn counted(due: u64, per_connection: Option<u64>, count: u64) -> u64 {
    match per_connection {
        Some(m) => due.min(m.saturating_mul(count.max(1))),
        None => due,
    }
}

/// Which of a worker's two send schedules.
#[derive(Clone, Copy)]
pub(super) enum Schedule {
    Heartbeats,
    Requests,
}

impl Worker {
    /// Heartbeats, if the protocol sends them (framed, ws pings, raw
    /// `--message` unless it goes on the request schedule).
    pub(super) fn heartbeat_period(&self) -> Option<u64> {
        self.cfg.traffic.heartbeat_us().filter(|_| self.speaker.beats())
    }

    /// When a schedule starts. Requests start with the ramp (what a slow
    /// ramp does to them is part of the measurement; a counted load
    /// starts later, see `request_schedule`). Heartbeats start
    /// when this worker's ramp is done: keep-alives sent while it still
    /// runs took a 1M ramp from ~25K/s to ~8K/s (BENCHMARKS.md), and a
    /// connection established seconds ago needs no keep-alive yet.
    pub(super) fn schedule_start(&self, schedule: Schedule) -> Option<u64> {
        match schedule {
            // Stages have no end of a ramp: keep-alives from the start.
            Schedule::Heartbeats if self.cfg.stages.is_some() => Some(self.cfg.start_at_us),
            Schedule::Heartbeats => self.stats.ramp_done_at_us,
            Schedule::Requests => Some(self.cfg.start_at_us),
        }
    }

    /// This worker's [`due_at`].
    pub(super) fn due_at(&self, j: u64, period_us: u64, start: u64) -> u64 {
        due_at(j, period_us, self.cfg.count, start)
    }

    /// This worker's [`due_by`].
    fn due_by(&self, now: u64, period_us: u64, start: u64) -> u64 {
        due_by(now, period_us, self.cfg.count, start)
    }

    /// The next of the first `due` sends of a schedule that goes to an
    /// established connection: (connection, intended time). Advances the
    /// schedule's cursor past sends for connections not (or no longer) up.
    fn next_due(&mut self, due: u64, schedule: Schedule, period_us: u64, start: u64) -> Option<(usize, u64)> {
        loop {
            let cursor = match schedule {
                Schedule::Heartbeats => &mut self.beat_cursor,
                Schedule::Requests => &mut self.request_cursor,
            };
            if *cursor >= due {
                return None;
            }
            let j = *cursor;
            *cursor += 1;
            let k = (j % self.cfg.count) as usize;
            if self.slots[k].state == State::Established {
                return Some((k, self.due_at(j, period_us, start)));
            }
        }
    }

    /// Send every heartbeat whose time has come.
    pub(super) fn beat(&mut self, now: u64) {
        let Some(hb) = self.heartbeat_period() else { return };
        let Some(start) = self.schedule_start(Schedule::Heartbeats) else { return };
        let due = self.due_by(now, hb, start);
        while let Some((k, intended)) = self.next_due(due, Schedule::Heartbeats, hb, start) {
            self.out.clear();
            let d = Due { conn: self.cfg.first + k as u64, intended, period_us: hb, start };
            self.speaker.beat(&mut self.out, &d, &mut self.slots[k].inflight);
            if self.write_slot(k) {
                self.stats.heartbeats_sent += 1;
                let b = &mut self.slots[k].beats_out;
                *b = b.saturating_add(1);
            }
        }
    }

    /// Send every request whose time has come (open loop: never waits for
    /// replies; the intended time travels in the request).
    pub(super) fn request(&mut self, now: u64) {
        // Nothing due at or after the end of the hold: a worker starved of
        // CPU that reads `close` late must not send the backlog of a hold
        // that is over (issue 44: 6.2M publishes for a 3.5M schedule when
        // the QoS 1 bench overloaded the machine).
        let now = now.min(self.requests_end_us.saturating_sub(1));
        if let Some(stage) = self.stage_changed(now) {
            // What the ending stage still owed goes first, then the next
            // stage's schedule starts at its own start.
            let end = self.stage_start_us(stage);
            self.request_until(end.saturating_sub(1).min(now));
            self.request_stage = stage;
            self.request_cursor = 0;
        }
        self.request_until(now);
    }

    /// Send every request of the current schedule due by `now`.
    fn request_until(&mut self, now: u64) {
        let Some((period, start)) = self.request_schedule(self.request_stage) else { return };
        let due = counted(self.due_by(now, period, start), self.cfg.traffic.requests_per_connection, self.cfg.count);
        while let Some((k, intended)) = self.next_due(due, Schedule::Requests, period, start) {
            self.out.clear();
            let d = Due { conn: self.cfg.first + k as u64, intended, period_us: period, start };
            if !self.speaker.request(&mut self.out, &d, &mut self.slots[k].inflight) {
                return;
            }
            if !self.speaker.acknowledges_requests() {
                if self.write_slot(k) {
                    self.stats.requests_unacknowledged += 1;
                    self.speaker.count_request(&mut self.stats);
                }
                continue;
            }
            if self.write_slot(k) {
                self.stats.requests_sent += 1;
                self.speaker.count_request(&mut self.stats);
                if self.cfg.stages.is_some() {
                    let stage = crate::client::stages::name(self.request_stage);
                    match self.stats.stage_requests.get_mut(stage) {
                        Some(n) => *n += 1,
                        None => {
                            self.stats.stage_requests.insert(stage.into(), 1);
                        }
                    }
                }
                let r = &mut self.slots[k].requests_out;
                *r = r.saturating_add(1);
            }
        }
    }

    /// Write `self.out` to connection k; false (and the connection lost)
    /// on error.
    pub(super) fn write_slot(&mut self, k: usize) -> bool {
        let slot = &mut self.slots[k];
        let stream = slot.stream.as_mut().expect("established slot has a stream");
        let put = |bytes: &[u8]| net::send_capped(stream, &mut slot.backlog, bytes, net::MAX_BACKLOG, "slow_reader");
        match crate::tls::conn::send(slot.tls.as_deref_mut(), &mut self.tls_bufs.wire, &self.out, put) {
            Ok(()) => true,
            Err(reason) => {
                self.lose(k, reason);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{counted, due_at, due_by};
    use crate::client::config::Traffic;

    /// A monotonic clock reading well into a run (µs).
    const START: u64 = 5_000_000_000;

    fn period_of(rate: f64) -> u64 {
        Traffic { request_rate: Some(rate), ..Default::default() }.request_us().expect("a period")
    }

    /// `--request-rate 1e-30/s`: the first request is due at the start,
    /// the next never (not at a time wrapped into the past, which made
    /// the loop's wait 0 and the worker spin).
    #[test]
    fn an_extreme_slow_rate_is_due_once_then_never() {
        let period = period_of(1e-30);
        for count in [1, 2, 1_000_000] {
            assert_eq!(due_at(0, period, count, START), START);
            for j in [1, 2, count, u64::MAX] {
                let due = due_at(j, period, count, START);
                assert!(due >= START, "send {j} of {count}: due at {due}, before the start {START}");
            }
            assert_eq!(due_at(count, period, count, START), u64::MAX, "a second round past the clock's end is never");
            assert_eq!(due_by(START + 3_600_000_000, period, count, START), 1, "an hour in, only the first send is due");
        }
    }

    /// The fastest rates and the longest runs: due times grow with j and
    /// the count of due sends never overflows or divides by zero.
    #[test]
    fn extreme_fast_rates_and_long_runs_stay_bounded() {
        for period in [0, 1, 10, period_of(100_000.0), period_of(1e12)] {
            for count in [0, 1, 7, u64::MAX] {
                let mut last = START;
                for j in [0, 1, 2, 1_000, u64::MAX / 2, u64::MAX] {
                    let due = due_at(j, period, count, START);
                    assert!(due >= last, "period {period} count {count}: send {j} due at {due}, before send j-1 at {last}");
                    last = due;
                }
                assert_eq!(due_by(START - 1, period, count, START), 0, "nothing is due before the start");
                assert!(due_by(u64::MAX, period, count, START) >= 1);
            }
        }
    }

    /// `--requests-per-connection 3` over 4 connections: sends 0..12 are
    /// three per connection (send j goes to j % 4), the 13th never goes
    /// however late it is; without a count the schedule is unchanged.
    #[test]
    fn a_counted_schedule_stops_after_that_many_per_connection() {
        let (period, count) = (1_000_000, 4);
        let late = START + 3_600_000_000;
        assert_eq!(counted(due_by(late, period, count, START), Some(3), count), 12);
        assert_eq!(counted(due_by(START + 250_000, period, count, START), Some(3), count), 2, "before the cap: as due");
        assert_eq!(counted(due_by(late, period, count, START), None, count), due_by(late, period, count, START));
        assert_eq!(counted(u64::MAX, Some(u64::MAX), u64::MAX), u64::MAX, "saturates, never wraps");
    }

    /// A send is due by `now` exactly when its due time has come.
    #[test]
    fn due_by_counts_the_sends_whose_time_has_come() {
        let (period, count) = (1_000_000, 4);
        assert_eq!(due_by(START, period, count, START), 1);
        assert_eq!(due_at(1, period, count, START), START + 250_000);
        assert_eq!(due_by(START + 249_999, period, count, START), 1);
        assert_eq!(due_by(START + 250_000, period, count, START), 2);
    }
}
