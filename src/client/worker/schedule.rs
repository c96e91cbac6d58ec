//! The open-loop send schedules of a client worker: heartbeats and
//! requests. Send number j of a schedule goes to connection `j % count`
//! and is due at `start + j * period / count`, so every connection sends
//! once per period, phases spread evenly, and no per-connection timer is
//! needed. Sends never wait for replies (no coordinated omission).

use super::{State, Worker};
use crate::client::speak::Due;
use crate::net;

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
    /// ramp does to them is part of the measurement). Heartbeats start
    /// when this worker's ramp is done: keep-alives sent while it still
    /// runs took a 1M ramp from ~25K/s to ~8K/s (BENCHMARKS.md), and a
    /// connection established seconds ago needs no keep-alive yet.
    pub(super) fn schedule_start(&self, schedule: Schedule) -> Option<u64> {
        match schedule {
            Schedule::Heartbeats => self.stats.ramp_done_at_us,
            Schedule::Requests => Some(self.cfg.start_at_us),
        }
    }

    /// Intended time of send number `j` of a schedule with this period
    /// that started at `start`: send j goes to connection `j % count`.
    pub(super) fn due_at(&self, j: u64, period_us: u64, start: u64) -> u64 {
        start + (j as u128 * period_us as u128 / self.cfg.count as u128) as u64
    }

    /// How many sends of a schedule are due by `now` (send j is due at
    /// `due_at(j)`, so sends 0..=floor(elapsed * count / period) are; 0
    /// before the start).
    fn due_by(&self, now: u64, period_us: u64, start: u64) -> u64 {
        if now < start {
            return 0;
        }
        ((now - start) as u128 * self.cfg.count as u128 / period_us as u128) as u64 + 1
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
            let d = Due { slot: k, conn: self.cfg.first + k as u64, intended, period_us: hb, start };
            self.speaker.beat(&mut self.out, &d);
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
        let Some(period) = self.cfg.traffic.request_us() else { return };
        let start = self.cfg.start_at_us;
        let due = self.due_by(now, period, start);
        while let Some((k, intended)) = self.next_due(due, Schedule::Requests, period, start) {
            self.out.clear();
            let d = Due { slot: k, conn: self.cfg.first + k as u64, intended, period_us: period, start };
            if !self.speaker.request(&mut self.out, &d, &mut self.slots[k].inflight) {
                return;
            }
            if self.write_slot(k) {
                self.stats.requests_sent += 1;
            }
        }
    }

    /// Write `self.out` to connection k; false (and the connection lost)
    /// on error.
    pub(super) fn write_slot(&mut self, k: usize) -> bool {
        let slot = &mut self.slots[k];
        let stream = slot.stream.as_mut().expect("established slot has a stream");
        match crate::tls::conn::send(slot.tls.as_deref_mut(), &mut self.tls_bufs.wire, stream, &mut slot.backlog, &self.out, net::MAX_BACKLOG, "slow_reader") {
            Ok(()) => true,
            Err(reason) => {
                self.lose(k, reason);
                false
            }
        }
    }
}
