//! The process model: a supervisor re-executes its own binary as worker
//! processes, hands each its config over stdin, watches them over pipes,
//! reaps them with their exit status and replaces the ones that die.
//! One loop ([`run_loop`]) drives every supervisor: server, client and
//! bench differ only in the [`Supervised`] they pass it. Nothing here
//! names a role: a role brings its worker entry point (dispatched by the
//! CLI), its message type and its event type.
pub(crate) mod control;
pub(crate) mod elastic;
pub(crate) mod plan;
pub(crate) mod pool;

pub(crate) use pool::{ExitInfo, Pool, PoolEvent};

use anyhow::Result;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// Longest the loop waits for an event before ticking.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Where a producer (a pool's reader threads, the admin API, the cluster
/// link) hands its events, without knowing the supervisor's event type;
/// false when the supervisor is gone.
pub(crate) type Sink<T> = Arc<dyn Fn(T) -> bool + Send + Sync>;

/// A [`Sink`] that wraps each event into the supervisor's event type and
/// sends it on `tx`.
pub(crate) fn sink<T: 'static, E: Send + 'static>(tx: &Sender<E>, wrap: fn(T) -> E) -> Sink<T> {
    let tx = tx.clone();
    Arc::new(move |t| tx.send(wrap(t)).is_ok())
}

/// Events a long-running supervisor's channel holds (`megaconn server`;
/// std preallocates them: 4,096 is ~0.6 MiB, 65,536 was 9 MiB):
/// past that, producers that can wait (worker readers, the cluster
/// link) wait, and the admin API is refused (503).
pub(crate) const EVENT_QUEUE: usize = 4096;

/// What a producer does when a bounded channel is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WhenFull {
    /// Wait for room (back-pressure onto a pipe or socket).
    Wait,
    /// Give up at once: the sink answers false.
    Refuse,
}

/// A [`Sink`] onto a bounded channel.
pub(crate) fn bounded_sink<T: 'static, E: Send + 'static>(tx: &SyncSender<E>, wrap: fn(T) -> E, full: WhenFull) -> Sink<T> {
    let tx = tx.clone();
    Arc::new(move |t| match full {
        WhenFull::Wait => tx.send(wrap(t)).is_ok(),
        WhenFull::Refuse => !matches!(tx.try_send(wrap(t)), Err(TrySendError::Full(_) | TrySendError::Disconnected(_))),
    })
}

/// Whether the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Done,
}

/// What one supervisor does with its workers' events.
pub(crate) trait Supervised {
    /// What arrives on the supervisor's channel.
    type Event;
    /// One message, exit or garbled line from one worker, or any other
    /// event of the supervisor.
    fn deliver(&mut self, event: Self::Event) -> Result<()>;
    /// Upkeep, phase changes and progress; called at least every [`TICK`].
    fn tick(&mut self) -> Result<Flow>;
    /// Ctrl-C or SIGTERM arrived (called once).
    fn interrupt(&mut self);
}

/// The one supervisor loop: deliver every event, tick, stop on `Done`.
pub(crate) fn run_loop<S: Supervised>(rx: &Receiver<S::Event>, s: &mut S) -> Result<()> {
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
pub(crate) fn drain<S: Supervised>(rx: &Receiver<S::Event>, s: &mut S, wait: Duration) {
    while let Ok(d) = rx.recv_timeout(wait) {
        let _ = s.deliver(d);
    }
}
