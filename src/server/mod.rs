//! `megaconn server`: the supervisor that plans, starts, grows, replaces
//! and watches the server worker processes, and is the only one that
//! prints.
pub(crate) mod auth;
pub(crate) mod broker;
pub(crate) mod business;
pub(crate) mod close;
pub(crate) mod commands;
pub(crate) mod config;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod services;
pub(crate) mod session;
pub mod snapshot;
pub(crate) mod supervisor;
pub(crate) mod tables;
pub(crate) mod topic_index;
pub(crate) mod up_message;
pub(crate) mod worker;

pub(crate) use config::ServerConfig;

use crate::stats::{format, progress::Progress};
use crate::supervise::plan::{plan_workers, WorkerPlan, Workers};
use crate::supervise::{self, Flow, Sink, Supervised};
use anyhow::Result;
use business::BusinessMode;
use std::time::{Duration, Instant};
use supervisor::fleet::{FleetNote, ServerFleet, Sizing};
use supervisor::view::ServerTotals;
use supervisor::ServerEvent;

/// The worker subcommand's argument (`megaconn __worker server`).
pub(crate) const WORKER_KIND: &str = "server";

/// Capacity an elastic server may grow to when `--connections` is not
/// given: the published million-connection experiment.
pub(crate) const DEFAULT_CAPACITY: u64 = 1_000_000;

/// The processes of a server: how many start, how many may exist, and
/// what one may hold.
#[derive(Debug, Clone)]
pub(crate) struct ServerPlan {
    pub(crate) sizing: Sizing,
    pub(crate) workers: WorkerPlan,
    /// Threads each worker runs (event loop + its pool share).
    pub(crate) threads_per_worker: u64,
    /// The reactor `--io` resolved to, and why `auto` fell back to epoll.
    pub(crate) io: crate::uring::Io,
    pub(crate) io_fallback: Option<String>,
}

impl ServerPlan {
    pub(crate) fn initial(&self) -> usize {
        match self.sizing {
            Sizing::Elastic { target, .. } => target,
            Sizing::Fixed(n) => n,
        }
    }

    pub(crate) fn max(&self) -> usize {
        match self.sizing {
            Sizing::Elastic { max, .. } => max,
            Sizing::Fixed(n) => n,
        }
    }
}

/// Plan the server's processes and threads for this machine; Err is a
/// usage error naming the limit and the fix.
pub(crate) fn plan(cfg: &ServerConfig, fd_hard: u64) -> Result<ServerPlan, String> {
    if let Some(s) = cfg.services.iter().find(|s| matches!(s.protocol, crate::proto::Protocol::Raw | crate::proto::Protocol::Sse)) {
        return Err(format!(
            "--protocol {} is a client protocol; a server speaks framed, ws, http, mqtt, echo8, echo or discard (e.g. --protocol echo; Server-Sent Events are served on --protocol ws ports)",
            s.label()
        ));
    }
    services::check(&cfg.services, cfg.tls.is_some())?;
    check_auth(cfg)?;
    if let Some(c) = &cfg.cluster {
        crate::cluster::check_url(&c.url)?;
    }
    if cfg.max_pending_bytes < cfg.max_push_bytes {
        return Err(format!(
            "--max-pending-bytes {} is below --max-push-bytes {}: every connection would be closed as a slow consumer by one large push; raise --max-pending-bytes to at least {}",
            cfg.max_pending_bytes, cfg.max_push_bytes, cfg.max_push_bytes
        ));
    }
    let cores = crate::sys::online_cpus();
    let n = cfg.connections.unwrap_or(match cfg.workers {
        Workers::Auto => DEFAULT_CAPACITY,
        Workers::Fixed(_) => 1,
    });
    let wp = plan_workers(n, cfg.workers, fd_hard, cfg.ports().len() as u64, crate::proto::push::MAX_KEYS, cores)?;
    let initial = match cfg.workers {
        Workers::Auto => cores,
        Workers::Fixed(w) => w,
    };
    let pool_share = match cfg.business {
        BusinessMode::Pool(t) => (t / initial).max(1) as u64,
        _ => 0,
    };
    // Event loop + pool share in the worker, one reader thread in the
    // supervisor.
    let threads_per_worker = 1 + pool_share;
    let limits = crate::tune::limits_here();
    let what = format!("{} with {initial} server workers", cfg.business);
    crate::tune::tasks::check(&limits, initial as u64 * (threads_per_worker + 1), &what)?;
    let by_tasks = (crate::tune::tasks::free(&limits) / (threads_per_worker + 1)).max(1) as usize;
    let sizing = match cfg.workers {
        Workers::Auto => Sizing::Elastic { target: cores, max: wp.workers.max(cores).min(by_tasks.max(cores)) },
        Workers::Fixed(w) => Sizing::Fixed(w),
    };
    let (io, io_fallback) = cfg.io.resolve()?;
    Ok(ServerPlan { sizing, workers: wp, threads_per_worker, io, io_fallback })
}

/// `--auth` and `--admin-topics` against the rest of the configuration.
fn check_auth(cfg: &ServerConfig) -> Result<(), String> {
    for p in &cfg.admin_topics {
        let name = p.strip_suffix('*').unwrap_or(p);
        if !name.is_empty() && crate::proto::push::check_topic(name.as_bytes()).is_err() {
            return Err(format!("--admin-topics '{p}' is not a topic pattern: a name (1-255 of [A-Za-z0-9._:/$-]), a prefix ending in * (ops.*), or *"));
        }
    }
    match &cfg.upstream {
        Some(broker::upstream::Destination::Nats(t)) if cfg.upstream_secret.is_some() => {
            return Err(format!("--upstream-secret-file signs webhook POSTs; --upstream {} is NATS, where the server authenticates instead: give --upstream-nats-creds or credentials in the URL", t.shown()));
        }
        Some(broker::upstream::Destination::Webhook(_)) if cfg.upstream_nats_creds.is_some() => {
            return Err("--upstream-nats-creds is for --upstream nats://...; a webhook's POSTs are signed with --upstream-secret-file".into());
        }
        _ => {}
    }
    if cfg.mqtt_files.any() {
        if !matches!(cfg.auth, config::Auth::Off) {
            return Err(
                "--mqtt-password-file and --mqtt-acl-file admit MQTT clients by user name and password, --auth jwt by a token in the password: choose one"
                    .into(),
            );
        }
        if !cfg.services.iter().any(|s| matches!(s.protocol, crate::proto::Protocol::Mqtt | crate::proto::Protocol::Ws)) {
            return Err(format!(
                "--mqtt-password-file and --mqtt-acl-file are for MQTT clients, and {} serves none: add --serve mqtt=PORT (or ws=PORT for MQTT over WebSocket)",
                services::describe(&cfg.services)
            ));
        }
        crate::server::auth::mosquitto::Files::load(&cfg.mqtt_files)?;
    }
    match &cfg.auth {
        config::Auth::Off => Ok(()),
        config::Auth::Jwt(None) => {
            Err("--auth jwt needs the key tokens are verified with: --jwt-secret-file (HS256), --jwt-public-key-file (RS256/ES256, PEM) or --jwt-jwks-file"
                .into())
        }
        config::Auth::Jwt(Some(_)) if !subscribable(cfg) => Err(format!(
            "--auth jwt needs a protocol whose connections subscribe (ws, framed, mqtt, or http for its event streams); {} has none",
            services::describe(&cfg.services)
        )),
        config::Auth::Jwt(Some(_)) => Ok(()),
    }
}

/// Whether some entry speaks a protocol whose connections subscribe
/// (an HTTP port's event streams do; with `--auth` they show a token).
fn subscribable(cfg: &ServerConfig) -> bool {
    use crate::proto::Protocol;
    cfg.services.iter().any(|s| matches!(s.protocol, Protocol::Framed | Protocol::Ws | Protocol::Mqtt | Protocol::Http))
}

/// What an operator should hear before the server starts: a listener
/// others can reach that lets anyone subscribe to anything.
pub(crate) fn exposure_warning(cfg: &ServerConfig) -> Option<String> {
    let open = cfg.auth == config::Auth::Off && subscribable(cfg);
    (open && !cfg.listen.is_loopback()).then(|| {
        format!(
            "warning: --listen {} is reachable from other hosts and --auth is off: anyone who connects may subscribe to any topic and hear every broadcast; add --auth jwt (docs/auth.md)",
            cfg.listen
        )
    })
}

/// What an operator should hear about `--upstream` before the server
/// starts: POSTs nobody can verify, and a byte bound the workers' least
/// shares exceed.
pub(crate) fn upstream_warnings(cfg: &ServerConfig, max_workers: usize) -> Vec<String> {
    let Some(t) = &cfg.upstream else { return Vec::new() };
    let mut w = Vec::new();
    if cfg.upstream_secret.is_none() && matches!(t, broker::upstream::Destination::Webhook(_)) {
        w.push(format!(
            "warning: --upstream {}: POSTs are unsigned, so anyone who can reach the backend can forge what clients said; give --upstream-secret-file and check X-Megaconn-Signature in the backend (docs/upstream.md)",
            t.shown()
        ));
    }
    let share = broker::upstream::worker_share(cfg.upstream_queue_bytes, max_workers);
    if share * max_workers as u64 > cfg.upstream_queue_bytes {
        w.push(format!(
            "warning: --upstream-queue-bytes {} MiB over up to {max_workers} workers is less than {} MiB each; each gets {} MiB, so the server may hold {} MiB for the backend",
            cfg.upstream_queue_bytes >> 20,
            broker::upstream::MIN_WORKER_BYTES >> 20,
            share >> 20,
            (share * max_workers as u64) >> 20
        ));
    }
    w
}

/// Start a server's workers (tests and the bench call this directly).
/// Its events go to `sink`; `next` takes the next one (up to a wait)
/// while the first workers start.
pub(crate) fn start(
    cfg: &ServerConfig,
    plan: &ServerPlan,
    fd_limit: Option<u64>,
    sink: &Sink<ServerEvent>,
    next: &mut dyn FnMut(Duration) -> Option<ServerEvent>,
) -> Result<ServerFleet> {
    let cfg = ServerConfig { io: plan.io, ..cfg.clone() };
    ServerFleet::start(&cfg, plan.sizing, plan.workers.budget, fd_limit, sink, next)
}

/// Print a fleet's notes (crashes, growth) as text or JSON events.
pub(crate) fn print_notes(notes: &mut Vec<FleetNote>, progress: &mut Progress, json: bool) {
    for n in notes.drain(..) {
        if json {
            println!("{}", serde_json::to_value(&n).unwrap_or_default());
        } else {
            progress.note(&n.message);
        }
    }
}

/// A stats line (text) for the server's totals and the rates since `prev`.
pub(crate) fn stats_line(t: &ServerTotals, prev: &ServerTotals, dt: f64) -> String {
    let acc_rate = (t.accepted.saturating_sub(prev.accepted)) as f64 / dt;
    let close_rate = (t.closed.saturating_sub(prev.closed)) as f64 / dt;
    let requests = if t.requests > 0 {
        format!(
            " | requests/s {} replies {} rejected {} service {:.2} ms",
            format::count((t.requests.saturating_sub(prev.requests) as f64 / dt) as u64),
            format::count(t.replies),
            format::count(t.rejected),
            t.applied_service_ms
        )
    } else {
        String::new()
    };
    // A worker at its descriptor ceiling leaves connections queued until a
    // successor takes them: the operator should see that it happened.
    let paused = if t.accept_paused.is_empty() { String::new() } else { format!(" | accept paused {}", format::kinds(&t.accept_paused)) };
    format!(
        "connections {} | accepted/s {} | closed/s {} | workers {} accepting / {} full / {} | rss {} | accept errors {}{paused}{requests}",
        format::count(t.active),
        format::count(acc_rate as u64),
        format::count(close_rate as u64),
        t.accepting,
        t.full,
        t.workers,
        format::bytes(t.rss_bytes),
        format::kinds(&t.accept_errors),
    )
}

/// `megaconn server` as the one supervisor loop runs it.
struct ServerRun {
    fleet: ServerFleet,
    cfg: ServerConfig,
    progress: Progress,
    started: Instant,
    next_print: Instant,
    prev: ServerTotals,
    prev_at: Instant,
    /// SIGTERM or Ctrl-C arrived: workers are draining until this.
    drain_until: Option<Instant>,
    /// In a cluster, when the drained workers were all gone while MQTT
    /// sessions were kept: they wait for their clients to come back to
    /// other nodes, which ask for them, up to [`HAND_OVER_LINGER`].
    lingering: Option<Instant>,
}

/// Longest a drained cluster node stays for its kept MQTT sessions to be
/// asked for by the nodes their clients come back to.
const HAND_OVER_LINGER: Duration = Duration::from_secs(5);

impl Supervised for ServerRun {
    type Event = ServerEvent;

    fn deliver(&mut self, ev: ServerEvent) -> Result<()> {
        self.fleet.on_event(ev);
        Ok(())
    }

    fn tick(&mut self) -> Result<Flow> {
        self.fleet.upkeep();
        print_notes(&mut self.fleet.notes, &mut self.progress, self.cfg.json);
        if let Some(until) = self.drain_until {
            if self.fleet.alive() == 0 {
                let kept = self.fleet.sessions_to_hand_over();
                if kept == 0 {
                    return Ok(Flow::Done);
                }
                if self.lingering.is_none() {
                    self.progress.note(&format!(
                        "drain: every connection closed; {kept} MQTT sessions kept here wait up to {} for the nodes their clients come back to",
                        humantime::format_duration(HAND_OVER_LINGER)
                    ));
                }
                let since = *self.lingering.get_or_insert_with(Instant::now);
                if since.elapsed() >= HAND_OVER_LINGER {
                    self.progress.note(&format!(
                        "drain: {kept} MQTT sessions kept here were not asked for by another node within {} (their clients did not come back); they go with this process (into --mqtt-sessions-file if given)",
                        humantime::format_duration(HAND_OVER_LINGER)
                    ));
                    return Ok(Flow::Done);
                }
            }
            if Instant::now() >= until {
                let t = self.fleet.view.totals();
                self.progress.note(&format!(
                    "drain: --drain-timeout {} passed with {} connections and {} requests in flight; closing them",
                    humantime::format_duration(self.cfg.drain_timeout),
                    format::count(t.active),
                    format::count(t.requests.saturating_sub(t.replies + t.rejected))
                ));
                return Ok(Flow::Done);
            }
        } else if self.fleet.failure.is_some() || self.cfg.duration.is_some_and(|d| self.started.elapsed() >= d) {
            return Ok(Flow::Done);
        }
        if Instant::now() >= self.next_print {
            let t = self.fleet.view.totals();
            let dt = self.prev_at.elapsed().as_secs_f64().max(1e-3);
            if self.cfg.json {
                let mut v = serde_json::to_value(&t)?;
                v["event"] = "stats".into();
                v["accept_queue"] = self.fleet.accept_queue.into();
                v["accepted_per_s"] = ((t.accepted - self.prev.accepted) as f64 / dt).into();
                v["closed_per_s"] = ((t.closed - self.prev.closed) as f64 / dt).into();
                if let Some(l) = self.fleet.link_status() {
                    v["cluster_refused"] = serde_json::to_value(&l.refused)?;
                }
                println!("{v}");
            } else {
                let refused = self.fleet.link_status().filter(|l| !l.refused.is_empty()).map(|l| format!(" | cluster refused {}", format::kinds(&l.refused)));
                self.progress.update(&format!("{}{}", stats_line(&t, &self.prev, dt), refused.unwrap_or_default()));
            }
            self.prev = t;
            self.prev_at = Instant::now();
            self.next_print = Instant::now() + self.cfg.stats_interval;
        }
        Ok(Flow::Continue)
    }

    fn interrupt(&mut self) {
        let t = self.fleet.view.totals();
        let spread = if self.cfg.services.iter().any(|s| crate::server::session::kind::spreads(s.protocol)) { self.cfg.drain_period } else { Duration::ZERO };
        if spread.is_zero() {
            self.progress.note(&format!(
                "signal: draining — /healthz says draining, no new connections or requests; answering {} in flight for up to {} (a second signal forces)",
                format::count(t.requests.saturating_sub(t.replies + t.rejected)),
                humantime::format_duration(self.cfg.drain_timeout)
            ));
        } else {
            self.progress.note(&format!(
                "signal: draining — /healthz says draining, no new connections; closing {} connections evenly over {} (--drain-period), each told to reconnect elsewhere (a second signal forces)",
                format::count(t.active),
                humantime::format_duration(spread)
            ));
        }
        self.fleet.drain();
        self.drain_until = Some(Instant::now() + spread + self.cfg.drain_timeout);
    }
}

/// `--check-config`: what `run` checks before it starts anything (the
/// plan against this machine's limits, the cluster's settings, the
/// connection target against the kernel's), and the plan, in one line.
pub(crate) fn check(cfg: &ServerConfig) -> Result<String> {
    let (_, after) = crate::sys::raise_fd_limit();
    let plan = plan(cfg, after.hard).map_err(crate::UsageError)?;
    if let Some(c) = &cfg.cluster {
        c.check().map_err(crate::UsageError)?;
    }
    let warnings = match cfg.connections {
        Some(n) => crate::tune::precheck(n, crate::tune::plan::TuneRole::Server, cfg.ports().len() as u64, 50_000)?,
        None => Vec::new(),
    };
    let notes: Vec<String> = warnings.into_iter().chain(exposure_warning(cfg)).chain(upstream_warnings(cfg, plan.max())).collect();
    let sizing = match plan.sizing {
        Sizing::Elastic { target, max } => format!("{target} workers, up to {max}"),
        Sizing::Fixed(n) => format!("{n} workers"),
    };
    Ok(format!(
        "{} on {} ({} ports), {sizing} of {} connections each, reactor {}{}",
        services::describe(&cfg.services),
        cfg.listen,
        cfg.ports().len(),
        format::count(plan.workers.budget),
        plan.io.name(),
        notes.iter().map(|n| format!("\nwarning: {n}")).collect::<String>()
    ))
}

pub(crate) fn run(cfg: ServerConfig) -> Result<i32> {
    crate::signals::install();
    let (before, after) = crate::sys::raise_fd_limit();
    let plan = plan(&cfg, after.hard).map_err(crate::UsageError)?;
    if let Some(c) = &cfg.cluster {
        c.check().map_err(crate::UsageError)?;
    }
    let warnings = match cfg.connections {
        Some(n) => crate::tune::precheck(n, crate::tune::plan::TuneRole::Server, cfg.ports().len() as u64, 50_000)?,
        None => Vec::new(),
    };
    let mut progress = Progress::new(false);
    let say = |p: &mut Progress, line: String, value: serde_json::Value| {
        if cfg.json {
            println!("{value}");
        } else {
            p.note(&line);
        }
    };
    let upstream_warnings = upstream_warnings(&cfg, plan.max());
    for w in warnings.iter().chain(exposure_warning(&cfg).as_ref()).chain(&upstream_warnings) {
        progress.note(w);
    }
    say(
        &mut progress,
        format!("RLIMIT_NOFILE soft {} -> {} (hard {}); every worker raises its own the same way", before.soft, after.soft, after.hard),
        serde_json::json!({"event": "fd_limit", "soft_before": before.soft, "soft": after.soft, "hard": after.hard}),
    );
    let budget = plan.workers.budget;
    let how = match plan.sizing {
        Sizing::Elastic { target, max } => format!(
            "elastic: {target} accepting workers (one per core), a new one whenever those near their budget, up to {max} ({} connections)",
            format::count(max as u64 * budget)
        ),
        Sizing::Fixed(n) => format!("fixed: {n} workers ({} connections at most), replaced if one dies", format::count(n as u64 * budget)),
    };
    say(
        &mut progress,
        format!(
            "plan: {how}; {} on {} ({} ports, shared listeners), {} connections per worker; reactor {}{}",
            services::describe(&cfg.services),
            cfg.listen,
            cfg.ports().len(),
            format::count(budget),
            plan.io.name(),
            plan.io_fallback.as_ref().map(|why| format!(" (--io auto: {why})")).unwrap_or_default()
        ),
        serde_json::json!({"event": "plan", "workers": plan.initial(), "max_workers": plan.max(), "elastic": matches!(plan.sizing, Sizing::Elastic{..}),
            "ports": cfg.ports().len(), "serve": cfg.services.iter().map(|s| serde_json::json!({"protocol": s.label(), "ports": s.ports})).collect::<Vec<_>>(), "per_worker_max": budget, "capacity": plan.max() as u64 * budget, "threads_per_worker": plan.threads_per_worker,
            "io": plan.io, "io_fallback": plan.io_fallback}),
    );
    if let Sizing::Elastic { .. } = plan.sizing {}
    if let Some(a) = &cfg.admin {
        crate::admin::check(a, cfg.admin_token.as_ref()).map_err(crate::UsageError)?;
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(supervise::EVENT_QUEUE);
    let sink: Sink<ServerEvent> = supervise::bounded_sink(&tx, |e| e, supervise::WhenFull::Wait);
    let mut fleet = start(&cfg, &plan, None, &sink, &mut |wait| rx.recv_timeout(wait).ok())?;
    let mut admin_at = None;
    if let Some(a) = cfg.admin {
        let to = supervise::bounded_sink(&tx, ServerEvent::Admin, supervise::WhenFull::Refuse);
        let stats = crate::admin::AdminStats::default();
        let bound = crate::admin::serve(crate::admin::Scope::Full, a, cfg.admin_token.clone(), to, stats.clone())?;
        fleet.admin_stats = Some(stats);
        admin_at = Some(bound.to_string());
        say(
            &mut progress,
            format!(
                "admin API on http://{bound} (/metrics /stats /healthz /connections, POST /publish?topic=T /broadcast /push/ID){}",
                if cfg.admin_token.is_some() { ", bearer token required" } else { "" }
            ),
            serde_json::json!({"event": "admin", "address": bound.to_string()}),
        );
    }
    if let Some(c) = &cfg.cluster {
        say(
            &mut progress,
            format!("cluster: node {} joins through {} (publishes that need other nodes answer 503 until the link is up)", c.node, c.shown_url()),
            serde_json::json!({"event": "cluster", "node": c.node, "url": c.shown_url()}),
        );
    }
    say(
        &mut progress,
        format!("listening on {}: {}", cfg.listen, services::describe(&cfg.services)),
        serde_json::json!({"event": "ready", "workers": plan.initial(), "pids": fleet.pids(), "admin": admin_at}),
    );
    let mut run = ServerRun {
        fleet,
        next_print: Instant::now() + cfg.stats_interval,
        cfg,
        progress,
        started: Instant::now(),
        prev: ServerTotals::default(),
        prev_at: Instant::now(),
        drain_until: None,
        lingering: None,
    };
    supervise::run_loop(&rx, &mut run)?;
    run.fleet.stop(Duration::from_secs(3));
    supervise::drain(&rx, &mut run, Duration::from_millis(50));
    run.fleet.save_state(true);
    print_notes(&mut run.fleet.notes, &mut run.progress, run.cfg.json);
    let t = run.fleet.view.totals();
    let failure = run.fleet.failure.clone();
    if run.cfg.json {
        println!("{}", serde_json::json!({"event": "summary", "totals": t, "failure": failure}));
    } else {
        run.progress.note(&format!(
            "stopped: accepted {} closed {} | close reasons {} | accept errors {} | cpu {:.1}s",
            format::count(t.accepted),
            format::count(t.closed),
            format::kinds(&t.close_reasons),
            format::kinds(&t.accept_errors),
            t.cpu_seconds
        ));
    }
    if let Some(f) = failure {
        eprintln!("megaconn server: {f}");
        return Ok(1);
    }
    Ok(0)
}

#[cfg(test)]
mod auth_tests {
    use super::*;

    #[test]
    fn an_open_server_off_loopback_is_warned_about() {
        let mut cfg = ServerConfig::default();
        cfg.only(crate::proto::Protocol::Ws, vec![8000]);
        assert_eq!(exposure_warning(&cfg), None, "loopback");
        cfg.listen = "0.0.0.0".parse().unwrap();
        assert!(exposure_warning(&cfg).is_some_and(|w| w.contains("anyone who connects may subscribe to any topic")));
        cfg.auth = config::Auth::Jwt(Some(auth::jwt::JwtKey::Secret(vec![1; 32])));
        assert_eq!(exposure_warning(&cfg), None, "with --auth jwt");
        cfg.only(crate::proto::Protocol::Http, vec![8000]);
        cfg.auth = config::Auth::Off;
        assert!(exposure_warning(&cfg).is_some(), "an http port's event streams subscribe too");
        cfg.only(crate::proto::Protocol::Ws, vec![8000]);
        cfg.auth = config::Auth::Jwt(None);
        assert!(check_auth(&cfg).unwrap_err().contains("--jwt-secret-file"));
    }

    #[test]
    fn unsigned_upstream_posts_are_warned_about() {
        let mut cfg = ServerConfig::default();
        assert!(upstream_warnings(&cfg, 4).is_empty(), "no --upstream");
        cfg.upstream = Some(broker::upstream::parse_destination("http://127.0.0.1:9/hook").unwrap());
        let w = upstream_warnings(&cfg, 4);
        assert!(w.len() == 1 && w[0].contains("POSTs are unsigned"), "{w:?}");
        cfg.upstream_secret = Some(broker::upstream::UpstreamSecret::new(vec![7; 32]).unwrap());
        assert!(upstream_warnings(&cfg, 4).is_empty());
        cfg.upstream_queue_bytes = 4 << 20;
        let w = upstream_warnings(&cfg, 8);
        assert!(w.len() == 1 && w[0].contains("may hold 8 MiB"), "{w:?}");
    }
}
