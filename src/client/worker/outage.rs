//! An outage on command (what `bench --scenario recovery` does to every
//! client at once): `outage` closes each of the worker's connections
//! now, keeping what each had seen (not counted lost: closed on purpose),
//! and opens nothing until `rejoin`, which queues every one of them to
//! reconnect at once (at the worker's connection pace) and resume where
//! it stopped. Re-homing time counts from the rejoin.

use super::{Phase, State, Worker};
use std::cmp::Reverse;

/// Supervisor -> client worker commands (see `supervise::control`).
pub(crate) const CMD_OUTAGE: &str = "outage";
pub(crate) const CMD_REJOIN: &str = "rejoin";

impl Worker {
    pub(super) fn outage(&mut self) {
        if self.phase != Phase::Running || self.paused {
            return;
        }
        self.paused = true;
        for k in 0..self.slots.len() {
            let state = self.slots[k].state;
            if state == State::Established {
                self.release(k);
                self.stats.outage_closed += 1;
                // Its reopening is a reconnect (counted, and resumed).
                self.slots[k].retries = 1;
            } else if state.connecting() {
                self.stats.connecting -= 1;
                self.release(k);
            } else if state != State::Waiting {
                continue;
            }
            self.slots[k].state = State::Paused;
        }
    }

    pub(super) fn rejoin(&mut self, now: u64) {
        if !self.paused {
            return;
        }
        self.paused = false;
        for k in 0..self.slots.len() {
            if self.slots[k].state != State::Paused {
                continue;
            }
            self.slots[k].state = State::Waiting;
            if self.slots[k].retries > 0 {
                self.moved_at.insert(k as u32, now);
            }
            self.reconnects.push(Reverse((now, k as u32)));
        }
    }
}
