//! The worker's side of its share's checkpoint (see
//! [`crate::client::checkpoint`]): written before every snapshot, and
//! read once by a replacement, which takes the share from there.

use super::{ClientWorkerConfig, Slot, State, Worker};
use crate::client::checkpoint::{Checkpoint, Status};
use crate::client::pushes;

fn status(slot: &Slot) -> Status {
    match slot.state {
        State::Done => Status::Done,
        State::Established => Status::Joined,
        _ if slot.retries > 0 || slot.churned => Status::Joined,
        _ => Status::New,
    }
}

/// Write every connection's state and positions; the checkpoint's number.
pub(super) fn keep(cp: &mut Checkpoint, slots: &[Slot], cfg: &ClientWorkerConfig) -> u64 {
    cp.write(|k, at| {
        let slot = &slots[k];
        for (p, name) in at.iter_mut().zip(cfg.traffic.streams_of(cfg.first + k as u64)) {
            *p = pushes::position(&slot.seen, name);
        }
        status(slot)
    })
}

impl Worker {
    /// A replacement: take the share as checkpoint `n` left it. A
    /// connection that was established opens again as a reconnect and
    /// resumes its streams; one given up stays shut; the share's
    /// connections were planned by the first worker, not again.
    pub(super) fn go_on_from(&mut self, cp: &Checkpoint, n: u64) {
        self.stats.planned = 0;
        let mut at = vec![None; self.cfg.traffic.streams_of(self.cfg.first).count()];
        for k in 0..self.slots.len() {
            let conn = self.cfg.first + k as u64;
            let Some(status) = cp.read(n, k, &mut at) else { return };
            let slot = &mut self.slots[k];
            match status {
                // Not the replacement's to open as new (not queued).
                Status::Done => {
                    slot.state = State::Done;
                    self.stats.queued -= 1;
                }
                Status::Joined => {
                    slot.retries = 1;
                    self.stats.queued -= 1;
                }
                Status::New => {}
            }
            for (p, name) in at.iter().zip(self.cfg.traffic.streams_of(conn)) {
                if let Some(p) = p {
                    pushes::restore(&mut slot.seen, name, *p);
                }
            }
        }
    }
}
