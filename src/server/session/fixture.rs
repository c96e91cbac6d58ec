//! Test support: everything one read of a session borrows (the reply
//! buffer, the counters, the business stage, the topic registry), owned
//! by a unit test, so a session is driven by bytes alone.

use crate::server::business::service_time::ServiceTime;
use crate::server::business::{BusinessMode, Stage};
use crate::server::session::requests::Requests;
use crate::server::snapshot::ServerSnapshot;
use crate::server::tables::topics::{Subs, Topics};
use rand::SeedableRng;
use std::sync::Arc;

/// What a session's read borrows from its worker.
pub(crate) struct Read {
    pub(crate) out: Vec<u8>,
    pub(crate) stats: ServerSnapshot,
    pub(crate) stage: Stage,
    pub(crate) rng: rand::rngs::SmallRng,
    pub(crate) service: ServiceTime,
    pub(crate) topics: Topics,
    pub(crate) subs: Subs,
}

impl Read {
    /// A worker's parts with an inline business stage and no subscription.
    pub(crate) fn new() -> Read {
        Read {
            out: Vec::new(),
            stats: ServerSnapshot::default(),
            stage: Stage::new(BusinessMode::Inline, 16, Arc::new(|| {})).unwrap(),
            rng: rand::rngs::SmallRng::seed_from_u64(1),
            service: ServiceTime::Fixed(std::time::Duration::ZERO),
            topics: Topics::default(),
            subs: Subs::new(),
        }
    }

    /// The request side of connection (3, 1), and the topic registry
    /// with this connection's subscriptions.
    pub(crate) fn split(&mut self) -> (Requests<'_>, &mut Topics, &mut Subs) {
        let req = Requests { out: &mut self.out, stats: &mut self.stats, stage: &mut self.stage, rng: &mut self.rng, service: &self.service, key: 3, gen: 1 };
        (req, &mut self.topics, &mut self.subs)
    }
}
