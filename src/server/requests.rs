//! Framed and echo8 requests on their way through the business stage:
//! draw the service time, submit, answer now, later, or with a refusal.

use super::business::{Job, Outcome, Stage};
use super::service_time::ServiceTime;
use crate::proto::frame::{self, Kind};
use crate::workers::control::ServerSnapshot;
use rand::rngs::SmallRng;
use std::time::Duration;

/// What the read path needs to run requests through the business stage.
pub struct Requests<'a> {
    pub out: &'a mut Vec<u8>,
    pub stats: &'a mut ServerSnapshot,
    pub stage: &'a mut Stage,
    pub rng: &'a mut SmallRng,
    pub service: &'a ServiceTime,
    pub key: usize,
    pub gen: u32,
}

impl Requests<'_> {
    /// One request: draw its service time and hand it to the stage. `reply`
    /// is what to send back when done; `framed` allows an error reply.
    pub fn handle(&mut self, reply: Vec<u8>, framed: bool) {
        self.stats.requests += 1;
        let service = if self.service.is_zero() { Duration::ZERO } else { self.service.sample(self.rng) };
        match self.stage.submit(Job::new(self.key, self.gen, service, reply)) {
            Outcome::Now(done) => {
                self.stats.count_reply(done.applied);
                self.out.extend_from_slice(&done.job.reply);
            }
            Outcome::Later => {}
            Outcome::Rejected(job) => {
                self.stats.rejected += 1;
                // echo8 has no error message: the request is dropped
                // (and counted); framed clients get an explicit refusal.
                if framed {
                    frame::encode(self.out, Kind::Rejected, &job.reply[frame::HEADER_LEN..]);
                    self.stats.frames_out += 1;
                }
            }
        }
    }
}
