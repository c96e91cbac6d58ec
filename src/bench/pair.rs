//! A server and a client run side by side under one supervisor loop: the
//! shape every bench scenario shares, whether the server is one
//! in-process fleet or a cluster's node processes ([`ServerSide`]). The
//! scenario decides what to sample when the hold ends (before anything
//! closes).

use crate::client::run::{ClientRun, Tick};
use crate::client::snapshot::ClientEvent;
use crate::server::supervisor::fleet::ServerFleet;
use crate::server::supervisor::ServerEvent;
use crate::stats::{format, progress::Progress};
use crate::supervise::{self, Flow, Sink, Supervised};
use anyhow::Result;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// What arrives on a bench's channel: the server's events and the client's.
#[derive(Debug)]
pub(crate) enum PairEvent {
    Server(ServerEvent),
    Client(ClientEvent),
}

/// The one channel of a server and a client run side by side.
pub(crate) struct PairChannel {
    pub rx: Receiver<PairEvent>,
    pub server: Sink<ServerEvent>,
    pub client: Sink<ClientEvent>,
}

impl Default for PairChannel {
    fn default() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let client = supervise::sink(&tx, PairEvent::Client);
        *ADMIN.lock().expect("the bench's admin sink") = Some(client.clone());
        PairChannel { server: supervise::sink(&tx, PairEvent::Server), client, rx }
    }
}

/// Where `bench --admin` hands its requests: the client of the pair
/// running now (a business bench runs four, one after another).
static ADMIN: std::sync::Mutex<Option<Sink<ClientEvent>>> = std::sync::Mutex::new(None);

/// `bench --admin ADDR`: the load generator's read-only admin API and
/// dashboard, bound now, before the run enters its namespace, so the
/// host's loopback reaches it whatever the topology. Answers 503 until
/// the run's client starts.
pub(crate) fn serve_admin(addr: std::net::SocketAddr) -> Result<std::net::SocketAddr> {
    let sink: Sink<crate::admin::Request> = std::sync::Arc::new(|r: crate::admin::Request| {
        let client = ADMIN.lock().expect("the bench's admin sink").clone();
        match client {
            Some(client) => client(ClientEvent::Admin(r)),
            None => {
                let _ = r.reply.send(crate::admin::Response::error(503, "the run's client has not started yet; retry"));
                true
            }
        }
    });
    crate::admin::serve(crate::admin::Scope::ReadOnly, addr, None, sink, Default::default())
}

impl PairChannel {
    /// Start the server's workers on this channel and wait until they listen.
    pub(crate) fn start_server(&self, cfg: &crate::server::ServerConfig, plan: &crate::server::ServerPlan) -> Result<ServerFleet> {
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

/// The server half of a pair.
pub(crate) trait ServerSide {
    /// An event from the server's workers (a fleet's; a cluster's nodes
    /// report through their admin API instead).
    fn on_event(&mut self, _ev: ServerEvent) {}
    /// Housekeeping, every tick.
    fn upkeep(&mut self) {}
    /// Print what the operator should know (worker crashes, retirements).
    fn notes(&mut self, _progress: &mut Progress) {}
    /// Why the server side failed, once (a crash loop, a node that exited).
    fn failure(&mut self) -> Option<String>;
    /// The server's part of the progress line.
    fn line(&self) -> String;
    /// Connections it still holds: the pair waits (up to [`SETTLE`]) for
    /// none after the client's close.
    fn active(&self) -> u64;
    /// Surplus (elastic) workers are gone, and how long that may take.
    fn settled(&self) -> bool {
        true
    }
    fn retire_wait(&self) -> Duration {
        Duration::ZERO
    }
    /// Stop it.
    fn shut(&mut self);
    /// The in-process fleet, for the time series' server columns.
    fn fleet(&self) -> Option<&ServerFleet> {
        None
    }
}

impl ServerSide for ServerFleet {
    fn on_event(&mut self, ev: ServerEvent) {
        ServerFleet::on_event(self, ev)
    }

    fn upkeep(&mut self) {
        ServerFleet::upkeep(self)
    }

    fn notes(&mut self, progress: &mut Progress) {
        crate::server::print_notes(&mut self.notes, progress, false);
    }

    fn failure(&mut self) -> Option<String> {
        self.failure.take()
    }

    fn line(&self) -> String {
        let s = self.view.totals();
        format!(
            "server {} conns, {} workers ({} accepting, {} full), rss {}",
            format::count(s.active),
            s.workers,
            s.accepting,
            s.full,
            format::bytes(s.rss_bytes)
        )
    }

    fn active(&self) -> u64 {
        self.view.totals().active
    }

    fn settled(&self) -> bool {
        self.live().len() <= self.initial_workers()
    }

    fn retire_wait(&self) -> Duration {
        self.retire_after() + Duration::from_secs(5)
    }

    fn shut(&mut self) {
        self.stop(Duration::from_secs(3))
    }

    fn fleet(&self) -> Option<&ServerFleet> {
        Some(self)
    }
}

/// A scenario's script, called every tick with the client and the
/// connections the server holds.
pub(crate) type Director = Box<dyn FnMut(&mut ClientRun, u64)>;

/// Progress line interval of bench runs.
const PRINT_EVERY: Duration = Duration::from_secs(2);
/// Longest wait for the server to see every close after the client ends.
const SETTLE: Duration = Duration::from_secs(30);

pub(crate) struct PairRun<'p, V: ServerSide, S, F: FnMut(&V, &ClientRun) -> S> {
    pub server: V,
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
    /// A scenario's own script, every tick: the client, and the
    /// connections the server still holds (bench --scenario recovery).
    pub director: Option<Director>,
    /// The push scenario's broadcast phase (an in-process fleet only).
    pub phase: Option<super::broadcast_phase::PhaseWatch>,
}

impl<'p, V: ServerSide, S, F: FnMut(&V, &ClientRun) -> S> PairRun<'p, V, S, F> {
    pub(crate) fn new(server: V, client: ClientRun, progress: &'p mut Progress, sample: F) -> Self {
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
            director: None,
            phase: None,
        }
    }

    fn line(&mut self) -> String {
        format!("{}{} | {}", self.label, self.client.progress_line(), self.server.line())
    }

    fn notes(&mut self) {
        self.server.notes(self.progress);
        crate::client::print_notes(&mut self.client.notes, self.progress);
    }

    /// Run to the end of the client's close, then let the server see every
    /// close (up to [`SETTLE`]) and stop it.
    pub(crate) fn run(&mut self, rx: &Receiver<PairEvent>) -> Result<()> {
        supervise::run_loop(rx, self)?;
        let deadline = Instant::now() + SETTLE;
        while Instant::now() < deadline && self.server.active() > 0 {
            if let Ok(d) = rx.recv_timeout(supervise::TICK) {
                self.deliver(d)?;
            }
        }
        // An elastic server retires its surplus workers once they stay
        // empty; wait for that so "after" is comparable with "before".
        let retire_by = Instant::now() + self.server.retire_wait();
        while self.settle_workers && Instant::now() < retire_by && !self.server.settled() {
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
        self.server.shut();
        supervise::drain(rx, self, Duration::from_millis(50));
        self.notes();
        Ok(())
    }
}

impl<V: ServerSide, S, F: FnMut(&V, &ClientRun) -> S> Supervised for PairRun<'_, V, S, F> {
    type Event = PairEvent;

    fn deliver(&mut self, ev: PairEvent) -> Result<()> {
        match ev {
            PairEvent::Server(ev) => self.server.on_event(ev),
            PairEvent::Client(ClientEvent::Worker(i, ev)) => self.client.on_event(i, ev),
            PairEvent::Client(ClientEvent::Admin(req)) => super::client_only::answer_admin(&self.client, req),
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<Flow> {
        self.server.upkeep();
        self.notes();
        if let Some(f) = self.server.failure() {
            if self.failure.is_none() {
                self.progress.note(&format!("server: {f}"));
                self.failure = Some(f);
                self.client.interrupt();
            }
        }
        let tick = self.client.tick();
        if let Some(d) = self.director.as_mut() {
            d(&mut self.client, self.server.active());
        }
        if let (Some(phase), Some(fleet)) = (self.phase.as_mut(), self.server.fleet()) {
            phase.tick(fleet, &self.client);
        }
        if let (Some(sampler), Some(sample), Some(fleet)) = (self.server_sampler.as_mut(), self.client.series.fresh(), self.server.fleet()) {
            sample.server = Some(sampler.sample(fleet));
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
                if let (Some(phase), Some(fleet)) = (self.phase.as_mut(), self.server.fleet()) {
                    phase.hold_over(fleet, &self.client);
                }
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
