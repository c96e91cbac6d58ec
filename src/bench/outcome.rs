//! How every bench scenario starts and ends, written once. It starts by
//! planning both sides against the machine (a plan that cannot work is a
//! usage error naming the limit). It ends with the report saved (when
//! asked), the result printed (JSON, or the client's summary and the
//! scenario's own lines for people), and the exit code from what went
//! wrong and the client's verdict. A scenario supplies an [`Outcome`].

use crate::client::run::{ClientRun, ClientSummary};
use crate::client::thresholds::Thresholds;
use crate::stats::progress::Progress;
use anyhow::Result;
use serde::Serialize;

/// Both sides of a pair planned against this process's fd limit.
pub(crate) struct PairPlan {
    pub server: crate::server::ServerPlan,
    pub client: crate::client::plan::ConnectionPlan,
    pub client_workers: crate::supervise::plan::WorkerPlan,
}

/// Plan a server and its client (the bench's pair) on this machine.
pub(crate) fn plan_pair(server: &crate::server::ServerConfig, client: &crate::client::ClientConfig) -> Result<PairPlan> {
    let (_, fds) = crate::sys::raise_fd_limit();
    let splan = crate::server::plan(server, fds.hard).map_err(crate::UsageError)?;
    let (cplan, cwplan) = crate::client::plan(client, fds.hard).map_err(crate::UsageError)?;
    Ok(PairPlan { server: splan, client: cplan, client_workers: cwplan })
}

/// What a scenario found.
pub(crate) trait Outcome: Serialize {
    /// The report's kind ("bench", "bench push", ...).
    fn kind(&self) -> &'static str;
    /// The client's summary inside the result.
    fn summary(&self) -> &ClientSummary;
    /// The scenario's own lines for people (after the client's summary).
    fn print(&self);
    /// Why the run failed beyond the client's verdict (the pair failed,
    /// publishing failed, pushes were dropped), each in one sentence.
    fn failures(&self) -> Vec<String>;
}

/// End a scenario: judge (the thresholds and the built-in verdict),
/// save, print.
#[allow(clippy::too_many_arguments)] // each is one concern of the end of a run
pub(crate) fn finish(
    report_dir: Option<&std::path::Path>,
    json: bool,
    client: &ClientRun,
    plan: serde_json::Value,
    placement: &crate::topology::Placement,
    outcome: &impl Outcome,
    thresholds: &Thresholds,
    progress: &mut Progress,
) -> Result<i32> {
    let judged = crate::client::thresholds::judge(outcome.summary(), thresholds, false);
    let mut result = serde_json::to_value(outcome)?;
    if let Some(o) = result.as_object_mut() {
        o.insert("thresholds".into(), serde_json::to_value(&judged.results)?);
    }
    if let Some(dir) = report_dir {
        let machine = crate::report::machine(serde_json::to_value(placement)?);
        let r = crate::report::Report::new(outcome.kind(), client, outcome.summary(), plan, result.clone(), machine);
        if let Err(e) = r.save(dir, progress) {
            progress.note(&format!("warning: the report was not written ({e:#}); the results follow"));
        }
    }
    if json {
        progress.finish();
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        crate::client::summary::print_summary(outcome.summary(), progress);
        outcome.print();
        crate::client::thresholds::print(&judged.results, &mut std::io::stdout().lock())?;
    }
    let failures = outcome.failures();
    for f in &failures {
        eprintln!("megaconn bench: {f}");
    }
    let verdict = crate::client::verdict(outcome.summary(), false).1;
    if let Some(path) = &thresholds.junit {
        let seconds = outcome.summary().phases.iter().map(|p| p.seconds).sum();
        let failed = failures.first().cloned().or(verdict);
        let xml = crate::client::thresholds::junit::render("bench", &judged.results, failed.as_deref(), seconds);
        if let Err(e) = std::fs::write(path, xml) {
            progress.note(&format!("warning: --junit {}: {e}", path.display()));
        }
    }
    // A threshold crossed is exit 99 even when the pair failed too.
    let crossed = judged.code == crate::client::thresholds::EXIT_CROSSED;
    let code = if crossed || failures.is_empty() { judged.code } else { 1 };
    if let Some(w) = judged.why.filter(|_| failures.is_empty() || crossed) {
        eprintln!("megaconn bench: {w}");
    }
    Ok(code)
}
