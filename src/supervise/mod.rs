//! The process model: a supervisor re-executes its own binary as worker
//! processes, hands each its config over stdin, watches them over pipes,
//! reaps them with their exit status and replaces the ones that die.
//! One loop ([`run_loop`]) drives every supervisor: server, client and
//! bench differ only in the [`Supervised`] they pass it.
pub mod control;
pub mod elastic;
pub mod plan;
pub mod pool;

pub use pool::{channel, Delivery, ExitInfo, Pool, PoolEvent, Role};

use anyhow::{Context, Result};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// Longest the loop waits for an event before ticking.
pub const TICK: Duration = Duration::from_millis(50);

/// Entry point of a worker process (`megaconn __worker ROLE`, config on
/// the first line of stdin).
pub fn run_worker(role: &str) -> Result<()> {
    let result = (|| {
        let config = control::read_config().context("cannot read the worker config from stdin")?;
        match role {
            "server" => crate::server::worker::run(serde_json::from_str(&config).context("bad server worker config")?),
            "client" => crate::client::worker::run(serde_json::from_str(&config).context("bad client worker config")?),
            other => anyhow::bail!("unknown worker role {other}"),
        }
    })();
    if let Err(e) = &result {
        // The supervisor reads this and names the worker; stderr stays quiet.
        control::emit(&control::WorkerMsg::Fatal { worker: usize::MAX, message: format!("{e:#}") });
    }
    result
}

/// Whether the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Done,
}

/// What one supervisor does with its workers' events.
pub trait Supervised {
    /// One message, exit or garbled line from one worker.
    fn deliver(&mut self, delivery: Delivery) -> Result<()>;
    /// Upkeep, phase changes and progress; called at least every [`TICK`].
    fn tick(&mut self) -> Result<Flow>;
    /// Ctrl-C or SIGTERM arrived (called once).
    fn interrupt(&mut self);
}

/// The one supervisor loop: deliver every event, tick, stop on `Done`.
pub fn run_loop(rx: &Receiver<Delivery>, s: &mut impl Supervised) -> Result<()> {
    let mut interrupted = false;
    loop {
        if !interrupted && crate::signals::interrupted() {
            interrupted = true;
            s.interrupt();
        }
        match rx.recv_timeout(TICK) {
            Ok(d) => {
                s.deliver(d)?;
                while let Ok(d) = rx.try_recv() {
                    s.deliver(d)?;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        if s.tick()? == Flow::Done {
            return Ok(());
        }
    }
}

/// Deliver whatever arrives within `wait` (final snapshots after a stop).
pub fn drain(rx: &Receiver<Delivery>, s: &mut impl Supervised, wait: Duration) {
    while let Ok(d) = rx.recv_timeout(wait) {
        let _ = s.deliver(d);
    }
}
