//! The one worker event loop, shared by server and client workers.
//!
//! Every worker is a single-threaded mio reactor that waits for readiness
//! with µs-precise timeouts ([`crate::timer::wait`]), takes commands from
//! its supervisor on stdin, sends a stats snapshot on a fixed interval and
//! runs its own timers. Server and client differ only in their
//! [`Handler`]: what a readiness event, a command and a tick mean.

use crate::supervise::control::{Command, CommandReader};
use crate::supervise::Flow;
use anyhow::Result;
use mio::event::Event;
use mio::{Poll, Token};
use std::io;
use std::time::{Duration, Instant};

/// The token of the worker's stdin (supervisor commands).
pub(crate) const STDIN: Token = Token(usize::MAX - 1);
/// Readiness events taken per wake-up.
const EVENTS: usize = 1024;

/// What a worker does on each kind of event.
pub(crate) trait Handler {
    fn poll_mut(&mut self) -> &mut Poll;
    /// Readiness of any token but [`STDIN`].
    fn on_ready(&mut self, ev: &Event);
    /// A supervisor command; `Done` ends the loop (after any clean-up).
    fn on_command(&mut self, cmd: Command) -> Flow;
    /// Run whatever is due now; `Done` ends the loop.
    fn on_tick(&mut self) -> Flow;
    /// How long the loop may sleep before `on_tick` is due again.
    fn next_wake(&self) -> Duration;
    /// Send a stats snapshot to the supervisor (`last`: the final one).
    fn report(&mut self, last: bool);
    /// Write what waits for other processes before the loop sleeps (a
    /// server worker's frames to the broker shards); `Done` ends the loop.
    fn flush(&mut self) -> Flow {
        Flow::Continue
    }
}

/// Run `h` until it is done; the final snapshot is sent on the way out.
pub(crate) fn run(h: &mut impl Handler, stats_interval: Duration) -> Result<()> {
    let mut events = Events::new(h)?;
    let mut turns = Turns::new(stats_interval);
    loop {
        if turns.start(h) == Flow::Done {
            h.report(true);
            return Ok(());
        }
        let wait = turns.wait(h);
        if h.flush() == Flow::Done {
            h.report(true);
            return Ok(());
        }
        crate::supervise::control::flush();
        crate::timer::wait(h.poll_mut(), wait);
        if events.dispatch(h)? == Polled::Done {
            h.report(true);
            return Ok(());
        }
    }
}

/// The start of every loop turn, for both reactors: a stats snapshot
/// when one is due, then whatever `on_tick` has due.
pub(crate) struct Turns {
    next_stats: Instant,
    stats_interval: Duration,
}

impl Turns {
    pub(crate) fn new(stats_interval: Duration) -> Self {
        Self { next_stats: Instant::now(), stats_interval }
    }

    /// Report if due, then tick; `Done` ends the loop.
    pub(crate) fn start(&mut self, h: &mut impl Handler) -> Flow {
        let now = Instant::now();
        if now >= self.next_stats {
            h.report(false);
            self.next_stats = now + self.stats_interval;
        }
        h.on_tick()
    }

    /// How long the loop may sleep: until a tick or a snapshot is due.
    pub(crate) fn wait(&self, h: &impl Handler) -> Duration {
        h.next_wake().min(self.next_stats.saturating_duration_since(Instant::now()))
    }
}

/// What one look at the epoll found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// This many ready events were handled.
    Events(usize),
    /// A command ended the loop (the caller sends the final snapshot).
    Done,
}

/// The worker's epoll events and its supervisor's commands.
pub(crate) struct Events {
    events: mio::Events,
    commands: CommandReader,
}

impl Events {
    pub(crate) fn new(h: &mut impl Handler) -> Result<Events> {
        Ok(Events { commands: CommandReader::register(h.poll_mut().registry(), STDIN)?, events: mio::Events::with_capacity(EVENTS) })
    }

    /// Handle whatever is ready now, without waiting.
    pub(crate) fn dispatch(&mut self, h: &mut impl Handler) -> Result<Polled> {
        loop {
            match h.poll_mut().poll(&mut self.events, Some(Duration::ZERO)) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
                Ok(()) => break,
            }
        }
        let mut n = 0;
        for ev in self.events.iter() {
            n += 1;
            if ev.token() != STDIN {
                h.on_ready(ev);
                continue;
            }
            for cmd in self.commands.poll() {
                if h.on_command(cmd) == Flow::Done {
                    return Ok(Polled::Done);
                }
            }
        }
        Ok(Polled::Events(n))
    }
}
