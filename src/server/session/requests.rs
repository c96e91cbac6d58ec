//! Framed and echo8 requests on their way through the business stage:
//! draw the service time, submit, answer now, later, or with a refusal.

use crate::proto::frame::{self, Kind};
use crate::server::business::service_time::ServiceTime;
use crate::server::business::{Job, Outcome, Stage};
use crate::server::snapshot::ServerSnapshot;
use rand::rngs::SmallRng;
use std::time::Duration;

/// What the read path needs to run requests through the business stage.
pub(crate) struct Requests<'a> {
    pub out: &'a mut Vec<u8>,
    pub stats: &'a mut ServerSnapshot,
    pub stage: &'a mut Stage,
    pub rng: &'a mut SmallRng,
    pub service: &'a ServiceTime,
    pub key: usize,
    pub gen: u32,
}

/// What became of a submitted request.
pub(crate) enum Answer {
    /// Answered already: the reply is in `out`.
    Sent,
    /// With the business stage; the reply comes back through `take_done`.
    Deferred,
    /// The pool's queue was full (counted); the caller says so if it can.
    Rejected(Job),
}

impl Requests<'_> {
    /// The same connection's requests, borrowed for a shorter while: a
    /// session that hands its bytes on to another (MQTT inside WebSocket)
    /// lends it what it was given.
    pub(crate) fn reborrow(&mut self) -> Requests<'_> {
        Requests { out: self.out, stats: self.stats, stage: self.stage, rng: self.rng, service: self.service, key: self.key, gen: self.gen }
    }

    /// One request: draw its service time and hand it to the stage.
    /// `reply` is what to send back when done.
    pub(crate) fn submit(&mut self, reply: Vec<u8>) -> Answer {
        self.stats.requests += 1;
        let service = if self.service.is_zero() { Duration::ZERO } else { self.service.sample(self.rng) };
        match self.stage.submit(Job::new(self.key, self.gen, service, reply)) {
            Outcome::Now(done) => {
                self.stats.count_reply(done.applied);
                self.out.extend_from_slice(&done.job.reply);
                Answer::Sent
            }
            Outcome::Later => Answer::Deferred,
            Outcome::Rejected(job) => {
                self.stats.rejected += 1;
                Answer::Rejected(job)
            }
        }
    }

    /// A framed or echo8 request. echo8 has no error message: a rejected
    /// request is dropped (and counted); framed clients get a refusal.
    pub(crate) fn handle(&mut self, reply: Vec<u8>, framed: bool) {
        if let Answer::Rejected(job) = self.submit(reply) {
            if framed {
                frame::encode(self.out, Kind::Rejected, &job.reply[frame::HEADER_LEN..]);
                self.stats.frames_out += 1;
            }
        }
    }
}
