//! A server and a client run side by side under one supervisor loop: the
//! shape every bench scenario shares. The scenario decides what to sample
//! when the hold ends (before anything closes).

use crate::client::run::{ClientRun, Tick};
use crate::client::snapshot::ClientEvent;
use crate::server::fleet::ServerFleet;
use crate::server::snapshot::ServerEvent;
use crate::stats::{format, progress::Progress};
use crate::supervise::{self, Flow, Sink, Supervised};
use anyhow::Result;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// What arrives on a bench's channel: the server's events and the client's.
#[derive(Debug)]
pub enum PairEvent {
    Server(ServerEvent),
    Client(ClientEvent),
}

/// The one channel of a server and a client run side by side.
pub struct PairChannel {
    pub rx: Receiver<PairEvent>,
    pub server: Sink<ServerEvent>,
    pub client: Sink<ClientEvent>,
}

impl Default for PairChannel {
    fn default() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        PairChannel { server: supervise::sink(&tx, PairEvent::Server), client: supervise::sink(&tx, PairEvent::Client), rx }
    }
}

impl PairChannel {
    /// Start the server's workers on this channel and wait until they listen.
    pub fn start_server(&self, cfg: &crate::server::ServerConfig, plan: &crate::server::ServerPlan) -> Result<ServerFleet> {
        let rx = &self.rx;
        crate::server::start(cfg, plan, None, &self.server, &mut |wait| {
            let deadline = Instant::now() + wait;
            loop {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(PairEvent::Server(ev)) => return Some(ev),
                    Ok(PairEvent::Client(_)) => {}
                    Err(_) => return None,
                }
            }
        })
    }
}

/// Progress line interval of bench runs.
const PRINT_EVERY: Duration = Duration::from_secs(2);
/// Longest wait for the server to see every close after the client ends.
const SETTLE: Duration = Duration::from_secs(30);

pub struct PairRun<'p, S, F: FnMut(&ServerFleet, &ClientRun) -> S> {
    pub server: ServerFleet,
    pub client: ClientRun,
    pub progress: &'p mut Progress,
    /// Prefix of progress lines (e.g. the business mode).
    pub label: String,
    sample: F,
    /// What `sample` returned when the hold ended.
    pub at_hold: Option<S>,
    /// And after the run: every connection closed and surplus workers
    /// retired (what must come back to its baseline).
    pub after_close: Option<S>,
    /// Wait for surplus workers to retire before sampling `after_close`
    /// (a soak compares it with the start; costs `--retire-after`).
    pub settle_workers: bool,
    /// Why the run stopped early (the server's crash-loop guard).
    pub failure: Option<String>,
    next_print: Instant,
    /// Phase lines (ramp done, hold over) are shown; business runs show
    /// only their own summary lines.
    pub verbose: bool,
    /// Set when the ramp is done (the push scenario starts publishing).
    pub ramp_done: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Adds the server's side to the client's time-series samples.
    pub server_sampler: Option<super::sampler::ServerSampler>,
}

impl<'p, S, F: FnMut(&ServerFleet, &ClientRun) -> S> PairRun<'p, S, F> {
    pub fn new(server: ServerFleet, client: ClientRun, progress: &'p mut Progress, sample: F) -> Self {
        PairRun {
            server,
            client,
            progress,
            label: String::new(),
            sample,
            at_hold: None,
            after_close: None,
            settle_workers: false,
            failure: None,
            next_print: Instant::now() + PRINT_EVERY,
            verbose: true,
            ramp_done: None,
            server_sampler: None,
        }
    }

    fn line(&mut self) -> String {
        let s = self.server.view.totals();
        format!(
            "{}{} | server {} conns, {} workers ({} accepting, {} full), rss {}",
            self.label,
            self.client.progress_line(),
            format::count(s.active),
            s.workers,
            s.accepting,
            s.full,
            format::bytes(s.rss_bytes)
        )
    }

    fn notes(&mut self) {
        crate::server::print_notes(&mut self.server.notes, self.progress, false);
        crate::client::print_notes(&mut self.client.notes, self.progress);
    }

    /// Run to the end of the client's close, then let the server see every
    /// close (up to [`SETTLE`]) and stop it.
    pub fn run(&mut self, rx: &Receiver<PairEvent>) -> Result<()> {
        supervise::run_loop(rx, self)?;
        let deadline = Instant::now() + SETTLE;
        while Instant::now() < deadline && self.server.view.totals().active > 0 {
            if let Ok(d) = rx.recv_timeout(supervise::TICK) {
                self.deliver(d)?;
            }
        }
        // An elastic server retires its surplus workers once they stay
        // empty; wait for that so "after" is comparable with "before".
        let retire_by = Instant::now() + self.server.retire_after() + Duration::from_secs(5);
        while self.settle_workers && Instant::now() < retire_by && self.server.live().len() > self.server.initial_workers() {
            if let Ok(d) = rx.recv_timeout(supervise::TICK) {
                self.deliver(d)?;
            }
            self.server.upkeep();
        }
        if self.settle_workers {
            // Sockets closed with a reset are freed after an RCU grace period.
            std::thread::sleep(Duration::from_secs(1));
        }
        self.after_close = Some((self.sample)(&self.server, &self.client));
        self.server.stop(Duration::from_secs(3));
        supervise::drain(rx, self, Duration::from_millis(50));
        self.notes();
        Ok(())
    }
}

impl<S, F: FnMut(&ServerFleet, &ClientRun) -> S> Supervised for PairRun<'_, S, F> {
    type Event = PairEvent;

    fn deliver(&mut self, ev: PairEvent) -> Result<()> {
        match ev {
            PairEvent::Server(ev) => self.server.on_event(ev),
            PairEvent::Client(ClientEvent::Worker(i, ev)) => self.client.on_event(i, ev),
            // A bench's client serves no admin API.
            PairEvent::Client(ClientEvent::Admin(_)) => {}
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<Flow> {
        self.server.upkeep();
        self.notes();
        if let Some(f) = self.server.failure.take() {
            self.progress.note(&format!("server: {f}"));
            self.failure = Some(f);
            self.client.interrupt();
        }
        let tick = self.client.tick();
        if let (Some(sampler), Some(sample)) = (self.server_sampler.as_mut(), self.client.series.fresh()) {
            sample.server = Some(sampler.sample(&self.server));
        }
        match tick {
            Tick::RampDone => {
                if let Some(f) = &self.ramp_done {
                    f.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                if self.verbose {
                    let l = self.line();
                    self.progress.note(&format!("ramp done: {l}"));
                }
            }
            Tick::HoldOver => {
                self.at_hold = Some((self.sample)(&self.server, &self.client));
                if self.verbose {
                    let l = self.line();
                    self.progress.note(&format!("hold over: {l}"));
                }
                self.client.close();
            }
            Tick::Finished => return Ok(Flow::Done),
            _ => {}
        }
        if Instant::now() >= self.next_print {
            let l = self.line();
            self.progress.update(&l);
            self.next_print = Instant::now() + PRINT_EVERY;
        }
        Ok(Flow::Continue)
    }

    fn interrupt(&mut self) {
        self.client.interrupt();
    }
}
