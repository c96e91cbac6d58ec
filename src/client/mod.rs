//! `megaconn client`: the load generator's supervisor. Plans addresses and
//! processes, starts the workers, shows progress, prints the summary.
pub mod plan;
pub mod replies;
pub mod run;
pub mod view;
pub mod worker;

use crate::cli::ClientArgs;
use crate::stats::{format, progress::Progress};
use crate::workers::plan::{plan_workers, WorkerPlan};
use crate::workers::supervisor;
use anyhow::Result;
use plan::ConnectionPlan;
use run::{ClientRun, Tick};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// Plan addresses and processes for this client; errors are usage errors
/// (the target cannot be reached with these flags on this machine).
pub fn plan(args: &ClientArgs, fd_hard: u64) -> Result<(ConnectionPlan, WorkerPlan), String> {
    let shard = args.shard.map(|s| s.range(args.load.connections)).unwrap_or((0, args.load.connections));
    let sources = args.load.source_ips.as_ref().map(|l| l.0.as_slice());
    let cp = ConnectionPlan::build(args.target, &args.load.ports.0, sources, args.load.connections, shard, plan::local_port_range())?;
    let wp = plan_workers(cp.count, args.workers, fd_hard, 0, crate::sys::online_cpus())?;
    Ok((cp, wp))
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

pub fn run(args: ClientArgs) -> Result<i32> {
    crate::signals::install();
    let (before, after) = crate::sys::raise_fd_limit();
    let (cp, wp) = plan(&args, after.hard).map_err(crate::UsageError)?;
    let warnings = crate::tune::precheck(cp.count, crate::tune::plan::TuneRole::Client, cp.ports.len() as u64, args.load.rate)?;
    let mut progress = Progress::new(false);
    for w in &warnings {
        progress.note(w);
    }
    progress.note(&format!("RLIMIT_NOFILE soft {} -> {} (hard {})", before.soft, after.soft, after.hard));
    progress.note(&describe(&cp, &wp));
    for w in &cp.warnings {
        progress.note(&format!("warning: {w}"));
    }
    let (tx, rx) = supervisor::channel();
    let mut run = ClientRun::start(&cp, &args.load, &wp, None, &tx)?;
    let mut next_print = Instant::now() + args.load.stats_interval;
    let mut failure = None;
    loop {
        if crate::signals::interrupted() {
            run.interrupt();
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((_, i, ev)) => {
                if let Err(e) = run.on_event(i, ev) {
                    failure = Some(e.to_string());
                    run.interrupt();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        match run.tick() {
            Tick::RampDone => progress.note(&format!("ramp done: {}", run.progress_line())),
            Tick::HoldOver => {
                progress.note(&format!("hold over: {}", run.progress_line()));
                run.close();
            }
            Tick::Finished => break,
            Tick::Continue => {}
        }
        if Instant::now() >= next_print {
            let line = run.progress_line();
            progress.update(&line);
            next_print = Instant::now() + args.load.stats_interval;
        }
    }
    // Drain the last snapshots still in the channel.
    while let Ok((_, i, ev)) = rx.recv_timeout(Duration::from_millis(20)) {
        let _ = run.on_event(i, ev);
    }
    let summary = run.summary();
    if args.load.json {
        progress.finish();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"plan": cp, "workers": wp, "summary": summary, "failure": failure}))?);
    } else {
        run::print_summary(&summary, &mut progress);
    }
    if let Some(f) = failure {
        eprintln!("megaconn client: {f}");
        return Ok(1);
    }
    Ok(if summary.established == summary.requested && !summary.interrupted { 0 } else { 1 })
}
