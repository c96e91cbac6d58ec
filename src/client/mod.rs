//! `megaconn client`: the load generator's supervisor. Plans addresses and
//! processes, starts the workers, shows progress, prints the summary.
pub(crate) mod checkpoint;
pub(crate) mod codec;
pub(crate) mod config;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod mqtt;
pub(crate) mod mqtt_delivery;
pub(crate) mod mqtt_ws;
pub(crate) mod phases;
pub(crate) mod plan;
mod push_json;
pub(crate) mod pushes;
pub(crate) mod raw;
pub(crate) mod replace;
pub(crate) mod replies;
pub(crate) mod run;
pub(crate) mod series;
pub mod snapshot;
pub(crate) mod speak;
pub(crate) mod sse;
pub(crate) mod stages;
pub(crate) mod summary;
pub(crate) mod thresholds;
pub(crate) mod token;
pub(crate) mod url;
pub(crate) mod view;
pub(crate) mod worker;
pub(crate) mod ws;
pub(crate) mod ws_message;

pub(crate) use config::{ClientConfig, CloseMode, LoadConfig, NodeTarget, Traffic};

use crate::stats::{format, progress::Progress};
use crate::supervise::plan::{plan_workers, WorkerPlan};
use anyhow::Result;
use plan::ConnectionPlan;
use run::ClientSummary;

/// The worker subcommand's argument (`megaconn __worker client`).
pub(crate) const WORKER_KIND: &str = "client";

/// Plan addresses and processes for this client; errors are usage errors
/// (the target cannot be reached with these flags on this machine).
pub(crate) fn plan(cfg: &ClientConfig, fd_hard: u64) -> Result<(ConnectionPlan, WorkerPlan), String> {
    let mqtt = cfg.load.traffic.protocol == crate::proto::Protocol::Mqtt;
    if !mqtt && cfg.load.traffic.mqtt != Default::default() {
        return Err("--mqtt-* options are for --protocol mqtt".into());
    }
    if mqtt && cfg.url.as_ref().is_some_and(|u| !u.websocket) {
        return Err(
            "--protocol mqtt takes --target and --ports, or a ws:// or wss:// --url for MQTT over WebSocket (e.g. --url ws://127.0.0.1:8080/mqtt)".into()
        );
    }
    if cfg.load.traffic.protocol == crate::proto::Protocol::Raw && cfg.load.traffic.raw_message.is_none() {
        return Err("--protocol raw needs --message, e.g. --message 'PING \\{ts}\\r\\n'".into());
    }
    if let Some(u) = &cfg.url {
        let wants = if u.websocket { crate::proto::Protocol::Ws } else { crate::proto::Protocol::Http };
        let sse = !u.websocket && cfg.load.traffic.protocol == crate::proto::Protocol::Sse;
        if cfg.load.traffic.protocol != wants && !sse && !(mqtt && u.websocket) {
            return Err(format!(
                "--url {} loads with --protocol {wants:?}{}, not {:?}",
                if u.websocket { "ws:// or wss://" } else { "http:// or https://" },
                if u.websocket { "" } else { " (or sse for an event stream)" },
                cfg.load.traffic.protocol
            )
            .to_lowercase());
        }
    }
    if !cfg.load.traffic.subprotocols.is_empty() && cfg.load.traffic.protocol != crate::proto::Protocol::Ws {
        return Err("--ws-subprotocol is for --protocol ws (a ws:// or wss:// --url)".into());
    }
    if !cfg.load.traffic.headers.is_empty()
        && !cfg.load.traffic.mqtt_ws
        && !matches!(cfg.load.traffic.protocol, crate::proto::Protocol::Ws | crate::proto::Protocol::Http | crate::proto::Protocol::Sse)
    {
        return Err("-H/--header and --origin go on WebSocket upgrades and HTTP requests: use them with --protocol ws, http or sse".into());
    }
    if cfg.load.traffic.protocol == crate::proto::Protocol::Sse && cfg.url.is_none() {
        return Err("--protocol sse follows an event stream at a URL: give --url http://HOST:PORT/events?subscribe=TOPICS".into());
    }
    if let Some(t) = &cfg.load.traffic.tls {
        // Read the CA now: a bad file is a usage error, not 1,000 failures.
        crate::tls::client::Configs::new(t).map_err(|e| format!("{e:#}"))?;
    }
    let ws = cfg.load.traffic.protocol == crate::proto::Protocol::Ws;
    if cfg.load.traffic.protocol != crate::proto::Protocol::Raw
        && (cfg.load.traffic.raw_first.is_some() || cfg.load.traffic.raw_codec.is_some() || (cfg.load.traffic.raw_message.is_some() && !ws && !mqtt))
    {
        return Err("--message is for --protocol raw, ws or mqtt; --first-message and --codec for raw".into());
    }
    if cfg.load.traffic.ws_binary && !(ws && cfg.load.traffic.raw_message.is_some()) {
        return Err("--ws-binary sends --message in binary frames: use it with --protocol ws and --message".into());
    }
    if let (Some(c), Some(m)) = (&cfg.load.traffic.raw_codec, &cfg.load.traffic.raw_message) {
        let longest = m.bytes.len().max(cfg.load.traffic.raw_first.as_ref().map_or(0, |f| f.len()));
        if longest > c.max_message() {
            return Err(format!("a {longest}-byte message does not fit the {c} codec's length field (at most {}); use len:4", c.max_message()));
        }
    }
    if matches!(cfg.load.traffic.protocol, crate::proto::Protocol::Echo | crate::proto::Protocol::Discard) {
        return Err(format!(
            "--protocol {:?} is a server protocol; the client speaks framed, ws, http, echo8, raw, sse or mqtt (e.g. --protocol framed)",
            cfg.load.traffic.protocol
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
    let index = shard.map_or(0, |s| s.index);
    let (range, stages) = match (&cfg.load.stages, shard) {
        // A shard takes the g % n == i of every stage target (as a worker
        // does): the shards' targets add up to each stage's exactly.
        (Some(st), Some(s)) => {
            let highest = st.highest();
            let first: u64 = (0..s.index).map(|j| stages::share_of(highest, j, s.count)).sum();
            ((first, first + stages::share_of(highest, s.index, s.count)), Some(st.share(s.index, s.count)))
        }
        (Some(st), None) => ((0, st.highest()), Some(st.clone())),
        (None, _) => (shard.map(|s| s.range(cfg.load.connections)).unwrap_or((0, cfg.load.connections)), None),
    };
    let total = cfg.load.stages.as_ref().map_or(cfg.load.connections, |s| s.highest());
    let mut cp = ConnectionPlan::build(cfg.target, &cfg.load.ports, cfg.load.source_ips.as_deref(), total, range, plan::local_port_range())?;
    cp.shard_index = index;
    cp.stages = stages;
    (cp.io, cp.io_fallback) = cfg.load.io.resolve()?;
    let wp = plan_workers(cp.count, cfg.workers, fd_hard, 0, u64::MAX, crate::sys::online_cpus())?;
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

pub(crate) fn describe(cp: &ConnectionPlan, wp: &WorkerPlan) -> String {
    format!(
        "plan: {} connections to {} over {} ports from {} source addresses ({} per address/port pair of {} ports), {} worker processes (<= {} each, fd limit {}) on {}{}",
        format::count(cp.count),
        cp.target,
        cp.ports.len(),
        cp.source_count,
        format::count(cp.per_pair),
        format::count(cp.per_pair_capacity),
        wp.workers,
        format::count(wp.per_worker),
        format::count(wp.fd_limit),
        cp.io.name(),
        cp.io_fallback.as_ref().map(|why| format!(" (--io auto: {why})")).unwrap_or_default()
    )
}

/// Print what a run noted (worker crashes) as lines that stay.
pub(crate) fn print_notes(notes: &mut Vec<String>, progress: &mut Progress) {
    for n in notes.drain(..) {
        progress.note(&n);
    }
}

/// Exit status of a finished load and, when it failed, why: the first of
/// the built-in rules ([`thresholds::builtin`]) that does not hold, in
/// one sentence.
pub(crate) fn verdict(s: &ClientSummary, allow_loss: bool) -> (i32, Option<String>) {
    let Some(rule) = thresholds::builtin(allow_loss).into_iter().find(|r| !r.check(s).1) else {
        return (0, None);
    };
    let why = match rule.name.as_str() {
        "interrupted" => "interrupted before the end of the hold".into(),
        "established_ratio" => format!("{} of {} connections were established", format::count(s.established), format::count(s.requested)),
        "heartbeats_unanswered" => format!(
            "{} of {} heartbeats were not answered within --request-timeout ({} answered): the server did not keep up, or does not answer them",
            format::count(s.heartbeats_unanswered),
            format::count(s.heartbeats_sent),
            format::count(s.heartbeats_answered)
        ),
        _ => format!(
            "{} connections held at the end of the hold of {} established: {} (--reconnect re-opens lost connections; --allow-loss accepts losses)",
            format::count(s.held),
            format::count(s.established),
            s.loss.clone().unwrap_or_default()
        ),
    };
    (1, Some(why))
}
