//! `--stages` in a worker: instead of the ramp, slots `0..created` are
//! in use and `created` follows this worker's share of the stage target
//! ([`crate::client::stages::Stages::target_at`]) — up by opening the
//! next slots (paced by the same cap on handshakes in flight as the
//! ramp), down by closing the newest ones (the close mode of the run's
//! end; their unanswered heartbeats and requests are abandoned, the
//! connections counted `stage_closed`, not lost). A slot closed so is
//! fresh again for the next step up. Each stage has its own request
//! schedule (its rate from its start; see `schedule.rs`).

use super::{Slot, State, Worker, RAMP_TICK_US};
use crate::reactor::Handler;

/// How often a worker looks at its stage target while following it.
const STAGE_TICK_US: u64 = 10_000;

impl Worker {
    /// Open or close connections towards this moment's stage target.
    pub(super) fn follow_stages(&mut self, now: u64) {
        let Some(stages) = self.cfg.stages.as_ref() else { return };
        if now < self.cfg.start_at_us {
            return;
        }
        let want = stages.target_at(now - self.cfg.start_at_us).min(self.cfg.count);
        let cap = self.inflight_cap();
        while self.created < want && self.stats.connecting < cap {
            let k = self.created as usize;
            self.created += 1;
            if self.slots[k].state != State::Idle {
                // Closed by an earlier step down (or failed): fresh again.
                self.slots[k] = Slot::new();
            }
            self.open(k, now);
        }
        while self.created > want {
            self.created -= 1;
            self.step_down(self.created as usize);
        }
    }

    /// Close slot k on purpose (a step down): whatever state it is in,
    /// it ends up idle, ready for the next step up.
    fn step_down(&mut self, k: usize) {
        let state = self.slots[k].state;
        super::prepare_close(self.cfg.traffic.close, &mut self.slots[k], &mut self.tls_bufs.wire);
        if state == State::Established {
            self.stats.stage_closed += 1;
        } else if state.connecting() {
            // A handshake the step down no longer wants: not a failure.
            self.stats.connecting = self.stats.connecting.saturating_sub(1);
            if self.slots[k].churned {
                self.stats.churn_closed = self.stats.churn_closed.saturating_sub(1);
            }
        }
        // Drops the socket, its unanswered sends (abandoned) and, when
        // established, its place in `open`.
        self.release(k);
        self.moved_at.remove(&(k as u32));
        self.slots[k] = Slot::new();
    }

    /// A report the moment a stage boundary (or the end of the last
    /// stage) passes, after this turn's opens, closes and sends: the
    /// supervisor marks its phases with the counts at the boundary.
    pub(super) fn report_stage_boundaries(&mut self, now: u64) {
        let Some(stages) = self.cfg.stages.as_ref() else { return };
        let elapsed = now.saturating_sub(self.cfg.start_at_us);
        if now < self.cfg.start_at_us {
            return;
        }
        let passed = (1..=stages.0.len()).filter(|j| stages.start_of_us(*j) <= elapsed).count();
        if passed > self.stage_reports {
            self.stage_reports = passed;
            self.report(false);
        }
    }

    /// When to look at the stage target next: soon while it moves or the
    /// open count lags it, else at the next stage's start.
    pub(super) fn stages_wake(&self, now: u64) -> u64 {
        let Some(stages) = self.cfg.stages.as_ref() else { return u64::MAX };
        let start = self.cfg.start_at_us;
        if now < start {
            return start;
        }
        let elapsed = now - start;
        if elapsed >= stages.total_us() {
            return u64::MAX;
        }
        let i = stages.index_at(elapsed);
        let steady = stages.target_at(elapsed) == self.created && stages.0[i].target == self.created;
        if steady {
            (start + stages.start_of_us(i + 1)).max(now + RAMP_TICK_US)
        } else {
            now + STAGE_TICK_US
        }
    }

    /// `--stages`: the stage under way at `now`, when it is not the one
    /// the request schedule is on.
    pub(super) fn stage_changed(&self, now: u64) -> Option<usize> {
        let stages = self.cfg.stages.as_ref()?;
        let i = stages.index_at(now.saturating_sub(self.cfg.start_at_us));
        (now >= self.cfg.start_at_us && i != self.request_stage).then_some(i)
    }

    /// When stage i starts (CLOCK_MONOTONIC µs).
    pub(super) fn stage_start_us(&self, i: usize) -> u64 {
        self.cfg.start_at_us + self.cfg.stages.as_ref().map_or(0, |s| s.start_of_us(i))
    }

    /// The request schedule (period µs, start) of stage `i` with
    /// `--stages` (the stage's own rate, already resolved against
    /// `--request-rate`; none: no requests in it), else the run's.
    ///
    /// A counted load (`--requests-per-connection M`) has none before
    /// this worker's ramp is done, then starts: its sends are numbered
    /// per connection, and one due before its connection was up would
    /// be skipped, that connection sending one fewer. Once its M × count
    /// sends are made it has none again, so the loop does not wake for
    /// sends that will never go.
    pub(super) fn request_schedule(&self, i: usize) -> Option<(u64, u64)> {
        match self.cfg.stages.as_ref() {
            Some(stages) => {
                let rate = stages.0.get(i)?.request_rate?;
                // As `Traffic::request_us` makes it.
                Some(((1e6 / rate) as u64, self.stage_start_us(i)))
            }
            None => {
                let period = self.cfg.traffic.request_us()?;
                match self.cfg.traffic.requests_per_connection {
                    None => Some((period, self.cfg.start_at_us)),
                    Some(m) if self.request_cursor >= m.saturating_mul(self.cfg.count.max(1)) => None,
                    Some(_) => Some((period, self.stats.ramp_done_at_us?)),
                }
            }
        }
    }
}
