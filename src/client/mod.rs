//! `megaconn client`: the load generator's supervisor. Plans addresses and
//! processes, starts the workers, shows progress, prints the summary.
pub mod codec;
pub mod config;
pub mod phases;
pub mod plan;
pub mod pushes;
pub mod raw;
pub mod replies;
pub mod run;
pub mod summary;
pub mod view;
pub mod worker;
pub mod ws;

pub use config::{ClientConfig, CloseMode, LoadConfig, NodeTarget};

use crate::stats::{format, progress::Progress};
use crate::supervise::plan::{plan_workers, WorkerPlan};
use crate::supervise::{self, Delivery, Flow, Role, Supervised};
use anyhow::Result;
use plan::ConnectionPlan;
use run::{ClientRun, ClientSummary, Tick};
use std::time::{Duration, Instant};

/// Plan addresses and processes for this client; errors are usage errors
/// (the target cannot be reached with these flags on this machine).
pub fn plan(cfg: &ClientConfig, fd_hard: u64) -> Result<(ConnectionPlan, WorkerPlan), String> {
    if cfg.load.protocol == crate::proto::Protocol::Raw && cfg.load.raw_message.is_none() {
        return Err("--protocol raw needs --message, e.g. --message 'PING \\{ts}\\r\\n'".into());
    }
    if cfg.url.is_some() && cfg.load.protocol != crate::proto::Protocol::Ws {
        return Err(format!("--url is a WebSocket URL; it loads with --protocol ws, not {:?}", cfg.load.protocol).to_lowercase());
    }
    if cfg.load.protocol != crate::proto::Protocol::Raw && (cfg.load.raw_message.is_some() || cfg.load.raw_first.is_some() || cfg.load.raw_codec.is_some()) {
        return Err("--message, --first-message and --codec are for --protocol raw".into());
    }
    if let (Some(c), Some(m)) = (&cfg.load.raw_codec, &cfg.load.raw_message) {
        let longest = m.bytes.len().max(cfg.load.raw_first.as_ref().map_or(0, |f| f.len()));
        if longest > c.max_message() {
            return Err(format!("a {longest}-byte message does not fit the {c} codec's length field (at most {}); use len:4", c.max_message()));
        }
    }
    if matches!(cfg.load.protocol, crate::proto::Protocol::Echo | crate::proto::Protocol::Discard) {
        return Err(format!(
            "--protocol {:?} is a server protocol; the client speaks framed, ws, http, echo8 or raw (e.g. --protocol framed)",
            cfg.load.protocol
        )
        .to_lowercase());
    }
    if let Some(t) = cfg.load.start_at {
        let now = std::time::SystemTime::now();
        match t.duration_since(now) {
            Ok(ahead) if ahead >= std::time::Duration::from_millis(500) && ahead <= std::time::Duration::from_secs(86_400) => {}
            Ok(ahead) if ahead > std::time::Duration::from_secs(86_400) => {
                return Err(format!("--start-at is {} h ahead; give a time within 24 h", ahead.as_secs() / 3600));
            }
            _ => {
                return Err("--start-at is not at least 0.5 s in the future (workers need that long to start); give a later time, e.g. $(date -u -d '+30 seconds' +%FT%TZ)".into());
            }
        }
    }
    let shard = match cfg.shard {
        Some(s) => Some(s),
        None => shard_from_env()?,
    };
    let shard = shard.map(|s| s.range(cfg.load.connections)).unwrap_or((0, cfg.load.connections));
    let cp = ConnectionPlan::build(cfg.target, &cfg.load.ports, cfg.load.source_ips.as_deref(), cfg.load.connections, shard, plan::local_port_range())?;
    let wp = plan_workers(cp.count, cfg.workers, fd_hard, 0, crate::sys::online_cpus())?;
    Ok((cp, wp))
}

/// The shard of a Kubernetes Indexed Job: JOB_COMPLETION_INDEX of
/// JOB_COMPLETIONS (both set, or neither).
fn shard_from_env() -> Result<Option<plan::Shard>, String> {
    let (i, n) = (std::env::var("JOB_COMPLETION_INDEX").ok(), std::env::var("JOB_COMPLETIONS").ok());
    match (i, n) {
        (None, _) => Ok(None),
        (Some(i), Some(n)) => format!("{i}/{n}").parse().map(Some).map_err(|e| format!("JOB_COMPLETION_INDEX/JOB_COMPLETIONS: {e}")),
        (Some(_), None) => Err("JOB_COMPLETION_INDEX is set but JOB_COMPLETIONS is not: set both (an Indexed Job's completions), or pass --shard i/n".into()),
    }
}

pub fn describe(cp: &ConnectionPlan, wp: &WorkerPlan) -> String {
    format!(
        "plan: {} connections to {} over {} ports from {} source addresses ({} per address/port pair of {} ports), {} worker processes (<= {} each, fd limit {})",
        format::count(cp.count),
        cp.target,
        cp.ports.len(),
        cp.source_count,
        format::count(cp.per_pair),
        format::count(cp.per_pair_capacity),
        wp.workers,
        format::count(wp.per_worker),
        format::count(wp.fd_limit)
    )
}

/// Print what a run noted (worker crashes) as lines that stay.
pub fn print_notes(notes: &mut Vec<String>, progress: &mut Progress) {
    for n in notes.drain(..) {
        progress.note(&n);
    }
}

/// Exit status of a finished load and, when it failed, why.
pub fn verdict(s: &ClientSummary, allow_loss: bool) -> (i32, Option<String>) {
    if s.interrupted {
        return (1, Some("interrupted before the end of the hold".into()));
    }
    if s.established < s.requested {
        return (1, Some(format!("{} of {} connections were established", format::count(s.established), format::count(s.requested))));
    }
    if s.held < s.established && !allow_loss {
        let why = s.loss.clone().unwrap_or_default();
        return (
            1,
            Some(format!(
                "{} connections held at the end of the hold of {} established: {why} (--reconnect re-opens lost connections; --allow-loss accepts losses)",
                format::count(s.held),
                format::count(s.established)
            )),
        );
    }
    (0, None)
}

impl ClientCmd {
    /// The client's admin API: metrics, stats and health of this run.
    fn on_admin(&mut self, req: crate::admin::Request) {
        use crate::admin::{metrics, Response, Route};
        let t = self.run.view.totals();
        let v = &self.run.view;
        let resp = match req.route {
            Route::Metrics => Response {
                status: 200,
                content_type: metrics::CONTENT_TYPE,
                body: metrics::render_client(&t, &v.connect_hist, &v.rtt_hist, &v.request_hist, &v.push_hist),
            },
            Route::Stats => Response::json(200, &serde_json::to_value(&t).unwrap_or_default()),
            Route::Healthz => Response::json(200, &serde_json::json!({"status": "ok", "phase": self.run.phase_name(), "connections": t.established})),
            _ => Response::error(404, "a client serves /metrics, /stats and /healthz only"),
        };
        let _ = req.reply.send(resp);
    }
}

/// `megaconn client` as the one supervisor loop runs it.
struct ClientCmd {
    run: ClientRun,
    progress: Progress,
    stats_interval: Duration,
    next_print: Instant,
}

impl Supervised for ClientCmd {
    fn deliver(&mut self, (role, i, ev): Delivery) -> Result<()> {
        match ev {
            crate::supervise::PoolEvent::Admin(req) => self.on_admin(req),
            ev if role == Role::Client => self.run.on_event(i, ev),
            _ => {}
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<Flow> {
        print_notes(&mut self.run.notes, &mut self.progress);
        match self.run.tick() {
            Tick::RampDone => self.progress.note(&format!("ramp done: {}", self.run.progress_line())),
            Tick::HoldOver => {
                self.progress.note(&format!("hold over: {}", self.run.progress_line()));
                self.run.close();
            }
            Tick::Finished => return Ok(Flow::Done),
            Tick::Continue => {}
        }
        if Instant::now() >= self.next_print {
            let line = self.run.progress_line();
            self.progress.update(&line);
            self.next_print = Instant::now() + self.stats_interval;
        }
        Ok(Flow::Continue)
    }

    fn interrupt(&mut self) {
        self.run.interrupt();
    }
}

pub fn run(cfg: ClientConfig) -> Result<i32> {
    crate::signals::install();
    let (before, after) = crate::sys::raise_fd_limit();
    let (cp, wp) = plan(&cfg, after.hard).map_err(crate::UsageError)?;
    let warnings = crate::tune::precheck(cp.count.max(1), crate::tune::plan::TuneRole::Client, cp.ports.len() as u64, cfg.load.rate)?;
    let mut progress = Progress::new(false);
    for w in &warnings {
        progress.note(w);
    }
    progress.note(&format!("RLIMIT_NOFILE soft {} -> {} (hard {})", before.soft, after.soft, after.hard));
    progress.note(&describe(&cp, &wp));
    for w in &cp.warnings {
        progress.note(&format!("warning: {w}"));
    }
    if let Some(s) = cfg.shard.filter(|_| cp.count == 0) {
        progress.note(&format!("shard {}/{} of {} connections is empty: nothing to do", s.index, s.count, cfg.load.connections));
        return Ok(0);
    }
    if let Some(a) = &cfg.admin {
        crate::admin::check(a, None).map_err(crate::UsageError)?;
    }
    if let Some(dir) = &cfg.report {
        crate::report::prepare(dir)?;
    }
    for (flag, p) in [("--summary-json", &cfg.summary_json), ("--hdr-log", &cfg.hdr_log)] {
        if let Some(p) = p {
            std::fs::write(p, b"").map_err(|e| crate::UsageError(format!("{flag} {}: {e}; give a file this user can write", p.display())))?;
        }
    }
    let (tx, rx) = supervise::channel();
    let run = ClientRun::start(&cp, &cfg.load, &wp, None, &tx)?;
    if let Some(a) = cfg.admin {
        let bound = crate::admin::serve(Role::Client, a, None, tx.clone())?;
        progress.note(&format!("admin API on http://{bound} (/metrics /stats /healthz)"));
    }
    let mut run = run;
    run.series.keep_intervals = cfg.hdr_log.is_some();
    let mut cmd = ClientCmd { run, progress, stats_interval: cfg.load.stats_interval, next_print: Instant::now() + cfg.load.stats_interval };
    supervise::run_loop(&rx, &mut cmd)?;
    supervise::drain(&rx, &mut cmd, Duration::from_millis(20));
    print_notes(&mut cmd.run.notes, &mut cmd.progress);
    let summary = cmd.run.summary();
    let (code, why) = verdict(&summary, cfg.load.allow_loss);
    if let Some(dir) = &cfg.report {
        let plan = serde_json::json!({"client": cp, "workers": wp});
        let result = serde_json::to_value(&summary)?;
        let r = crate::report::Report::new("client", &cmd.run, &summary, plan, result, crate::report::machine(serde_json::json!({"kind": "host"})));
        if let Err(e) = r.save(dir, &mut cmd.progress) {
            cmd.progress.note(&format!("warning: the report was not written ({e:#}); the results follow"));
        }
    }
    if let Some(path) = &cfg.hdr_log {
        cmd.run.series.flush(crate::sys::mono_us());
        if let Err(e) = crate::report::hdrlog::write(path, cmd.run.origin_wall, cmd.run.origin_us(), &cmd.run.series.intervals) {
            cmd.progress.note(&format!("warning: {e:#}; the summary follows"));
        }
    }
    let doc = serde_json::json!({"plan": cp, "workers": wp, "summary": summary, "failure": why});
    if let Some(path) = &cfg.summary_json {
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&doc)?) {
            cmd.progress.note(&format!("warning: --summary-json {}: {e}; the summary follows", path.display()));
        }
    }
    if cfg.load.json {
        cmd.progress.finish();
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        summary::print_summary(&summary, &mut cmd.progress);
    }
    if let Some(w) = why {
        eprintln!("megaconn client: {w}");
    }
    Ok(code)
}
