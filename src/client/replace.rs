//! Client worker shares and their replacement. Each worker process owns
//! a share of the connections; with `--reconnect` a share also has a
//! checkpoint (see [`super::checkpoint`]), so when its worker dies a new
//! one is started for the same share: it reopens the connections the
//! dead one held (reconnects, not losses) and resumes every stream from
//! the positions of the dead worker's last snapshot. A share whose
//! workers keep dying is given up after [`MAX_REPLACEMENTS`] (its
//! connections then count as lost, `worker_crashed`).

use super::checkpoint;
use super::worker::ClientWorkerConfig;
use crate::supervise::Pool;
use anyhow::Result;
use std::os::fd::{AsRawFd, OwnedFd};

/// Replacements per share before its connections are given up.
pub(crate) const MAX_REPLACEMENTS: u8 = 3;
/// A replacement starts its ramp this long after it is spawned.
const START_DELAY_US: u64 = 300_000;

struct Share {
    config: ClientWorkerConfig,
    netns: Option<i32>,
    /// The checkpoint's memfd (only with `--reconnect`).
    checkpoint: Option<OwnedFd>,
    replaced: u8,
}

pub(crate) struct Shares {
    shares: Vec<Share>,
    /// The share of each worker index (replacements get new indexes).
    of_worker: Vec<usize>,
}

impl Shares {
    /// Plan the shares: with `--reconnect`, each gets a checkpoint.
    pub(crate) fn new(configs: Vec<(ClientWorkerConfig, Option<i32>)>) -> Result<Shares> {
        let mut shares = Vec::with_capacity(configs.len());
        for (mut config, netns) in configs {
            let mut fd = None;
            if config.traffic.reconnect && config.count > 0 {
                let streams = config.traffic.streams_of(config.first).count();
                let f = checkpoint::create(config.count, streams)?;
                config.checkpoint = Some(checkpoint::CheckpointRef { fd: f.as_raw_fd(), streams, replacing: None });
                fd = Some(f);
            }
            shares.push(Share { config, netns, checkpoint: fd, replaced: 0 });
        }
        Ok(Shares { shares, of_worker: Vec::new() })
    }

    /// Start every share's first worker.
    pub(crate) fn spawn_all(&mut self, pool: &mut Pool) -> Result<()> {
        for s in 0..self.shares.len() {
            self.spawn(pool, s)?;
        }
        Ok(())
    }

    fn spawn(&mut self, pool: &mut Pool, s: usize) -> Result<usize> {
        let share = &mut self.shares[s];
        share.config.worker = pool.next_index();
        pool.set_netns(share.netns);
        pool.set_inherit(share.checkpoint.iter().map(AsRawFd::as_raw_fd).collect());
        let i = pool.spawn(&serde_json::to_string(&share.config).expect("config serializes"))?;
        pool.set_inherit(Vec::new());
        self.of_worker.push(s);
        debug_assert_eq!(self.of_worker.len(), i + 1);
        Ok(i)
    }

    /// Worker `i` died mid-run after its snapshot `checkpoint`: start
    /// another for its share, going on from that checkpoint. None when
    /// the share has no checkpoint or has been replaced too often.
    pub(crate) fn replace(&mut self, pool: &mut Pool, i: usize, checkpoint: u64) -> Option<Result<usize>> {
        let s = *self.of_worker.get(i)?;
        let share = &mut self.shares[s];
        let cp = share.config.checkpoint.as_mut()?;
        if share.replaced >= MAX_REPLACEMENTS {
            return None;
        }
        share.replaced += 1;
        cp.replacing = Some(checkpoint);
        share.config.start_at_us = crate::sys::mono_us() + START_DELAY_US;
        Some(self.spawn(pool, s))
    }

    /// Worker `i`'s share was replaced as often as it may be.
    pub(crate) fn exhausted(&self, i: usize) -> bool {
        self.of_worker.get(i).is_some_and(|s| self.shares[*s].replaced >= MAX_REPLACEMENTS)
    }

    /// Connections of worker `i`'s share.
    pub(crate) fn count_of(&self, i: usize) -> u64 {
        self.of_worker.get(i).map_or(0, |s| self.shares[*s].config.count)
    }
}
