//! `megaconn client` on its own: the client half of a bench, run against
//! any server, under the one supervisor loop, with its read-only admin
//! API, its summary, and the report and HdrHistogram log it writes.

use crate::client::run::{ClientRun, Tick};
use crate::client::snapshot::ClientEvent;
use crate::client::{describe, plan, print_notes, summary, thresholds, verdict, ClientConfig};
use crate::stats::progress::Progress;
use crate::supervise::{self, Flow, Sink, Supervised};
use anyhow::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A load generator's admin API: metrics, stats and health of `run`
/// (`megaconn client --admin`, and `megaconn bench --admin` for its
/// client); its dashboard's files are served before a request gets here.
pub(crate) fn answer_admin(run: &ClientRun, req: crate::admin::Request) {
    use crate::admin::{Response, Route};
    use crate::client::metrics::{render, Latencies};
    let t = run.view.totals();
    let v = &run.view;
    let resp = match req.route {
        Route::Metrics => Response {
            status: 200,
            content_type: crate::stats::exposition::CONTENT_TYPE,
            body: render(&t, &Latencies { connect: &v.connect_hist, heartbeat: &v.rtt_hist, request: &v.request_hist, push: &v.push_hist }),
        },
        Route::Stats => {
            // The counters, with the phase now and each phase's latency
            // percentiles so far (the dashboard's table of phases).
            let mut v = serde_json::to_value(&t).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("phase".into(), run.phase_name().into());
                o.insert("phases".into(), serde_json::to_value(run.phases_so_far()).unwrap_or_default());
            }
            Response::json(200, &v)
        }
        Route::Healthz => Response::json(200, &serde_json::json!({"status": "ok", "phase": run.phase_name(), "connections": t.open})),
        _ => Response::error(404, "a client serves /metrics, /stats, /healthz and /ui only"),
    };
    let _ = req.reply.send(resp);
}

/// `megaconn client` as the one supervisor loop runs it.
struct ClientCmd {
    run: ClientRun,
    progress: Progress,
    stats_interval: Duration,
    next_print: Instant,
}

impl Supervised for ClientCmd {
    type Event = ClientEvent;

    fn deliver(&mut self, ev: ClientEvent) -> Result<()> {
        match ev {
            ClientEvent::Admin(req) => answer_admin(&self.run, req),
            ClientEvent::Worker(i, ev) => self.run.on_event(i, ev),
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

pub(crate) fn run(cfg: ClientConfig) -> Result<i32> {
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
    if let Some(line) = cfg.load.thresholds.armed() {
        progress.note(&line);
    }
    for w in &cp.warnings {
        progress.note(&format!("warning: {w}"));
    }
    if cfg.dry_run {
        let plan = serde_json::json!({"event": "plan", "connections": cp.count, "first": cp.first, "target": cp.target, "ports": cp.ports.len(),
            "source_addresses": cp.source_count, "rate_per_s": cfg.load.rate, "workers": wp.workers, "per_worker": wp.per_worker,
            "fd_limit": wp.fd_limit, "start_at_checked": cfg.load.start_at.is_some(), "io": cp.io, "io_fallback": cp.io_fallback,
            "thresholds": cfg.load.thresholds.check.iter().map(|t| &t.text).collect::<Vec<_>>(),
            "threshold_aborts": cfg.load.thresholds.abort.iter().map(|t| &t.text).collect::<Vec<_>>()});
        if cfg.load.json {
            println!("{plan}");
        } else {
            progress.note(&format!("dry run: {} connections/s from this process; nothing opened", crate::stats::format::count(cfg.load.rate)));
        }
        return Ok(0);
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
    for (flag, p) in [("--summary-json", &cfg.summary_json), ("--hdr-log", &cfg.hdr_log), ("--junit", &cfg.load.thresholds.junit)] {
        if let Some(p) = p {
            std::fs::write(p, b"").map_err(|e| crate::UsageError(format!("{flag} {}: {e}; give a file this user can write", p.display())))?;
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let sink: Sink<ClientEvent> = supervise::sink(&tx, |e| e);
    let run = ClientRun::start(&cp, &cfg.load, &wp, None, &sink)?;
    if let Some(a) = cfg.admin {
        let bound = crate::admin::serve(crate::admin::Scope::ReadOnly, a, None, Arc::new(move |r| sink(ClientEvent::Admin(r))), Default::default())?;
        progress.note(&format!("admin API on http://{bound} (/metrics /stats /healthz, the dashboard at /ui)"));
    }
    let mut run = run;
    run.series.keep_intervals = cfg.hdr_log.is_some();
    let mut cmd = ClientCmd { run, progress, stats_interval: cfg.load.stats_interval, next_print: Instant::now() + cfg.load.stats_interval };
    supervise::run_loop(&rx, &mut cmd)?;
    supervise::drain(&rx, &mut cmd, Duration::from_millis(20));
    print_notes(&mut cmd.run.notes, &mut cmd.progress);
    let summary = cmd.run.summary();
    let judged = thresholds::judge(&summary, &cfg.load.thresholds, cfg.load.allow_loss);
    if let Some(dir) = &cfg.report {
        let plan = serde_json::json!({"client": cp, "workers": wp});
        let mut result = serde_json::to_value(&summary)?;
        result["thresholds"] = serde_json::to_value(&judged.results)?;
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
    if let Some(path) = &cfg.load.thresholds.junit {
        let seconds = summary.phases.iter().map(|p| p.seconds).sum();
        let xml = thresholds::junit::render("client", &judged.results, verdict(&summary, cfg.load.allow_loss).1.as_deref(), seconds);
        if let Err(e) = std::fs::write(path, xml) {
            cmd.progress.note(&format!("warning: --junit {}: {e}; the summary follows", path.display()));
        }
    }
    let doc = serde_json::json!({"plan": cp, "workers": wp, "summary": summary, "thresholds": judged.results, "failure": judged.why});
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
        thresholds::print(&judged.results, &mut std::io::stdout().lock())?;
    }
    if let Some(w) = judged.why {
        eprintln!("megaconn client: {w}");
    }
    Ok(judged.code)
}
