//! `megaconn server`: the supervisor that plans, starts and watches the
//! server worker processes and is the only one that prints.
pub mod business;
pub mod conn;
pub mod http;
pub mod service_time;
pub mod listener;
pub mod requests;
pub mod view;
pub mod worker;

use crate::cli::ServerArgs;
use crate::parse::Workers;
use crate::stats::{format, progress::Progress};
use crate::workers::control::WorkerMsg;
use crate::workers::plan::{plan_workers, WorkerPlan};
use crate::workers::supervisor::{self, Delivery, PoolEvent, Role, WorkerPool};
use anyhow::{bail, Result};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use view::ServerView;
use worker::ServerWorkerConfig;

/// Capacity `--workers auto` plans for when `--connections` is not given.
pub const DEFAULT_CAPACITY: u64 = 1_000_000;

/// Plan the server's worker processes for `connections` (or the default).
pub fn plan(args: &ServerArgs, fd_hard: u64) -> Result<WorkerPlan, String> {
    let n = match (args.connections, args.workers) {
        (Some(n), _) => n,
        (None, Workers::Auto) => DEFAULT_CAPACITY,
        (None, Workers::Fixed(_)) => 1,
    };
    plan_workers(n, args.workers, fd_hard, args.ports.0.len() as u64, crate::sys::online_cpus())
}

impl ServerArgs {
    /// A loopback server as the benches run it: framed, async, no service time.
    pub fn loopback(ports: crate::parse::PortList, workers: Workers, connections: u64) -> ServerArgs {
        ServerArgs {
            listen: std::net::Ipv4Addr::LOCALHOST,
            ports,
            workers,
            connections: Some(connections),
            idle_timeout: crate::parse::OptDuration(None),
            stats_interval: Duration::from_secs(1),
            duration: crate::parse::OptDuration(None),
            protocol: crate::proto::Protocol::Framed,
            business: business::BusinessMode::Async,
            queue: 10_000,
            service_time: service_time::ServiceTime::Fixed(Duration::ZERO),
            body_size: 12,
            max_header_bytes: 8192,
            header_timeout: Duration::from_secs(10),
            json: false,
        }
    }
}

/// A running set of server workers.
pub struct ServerPool {
    pub pool: WorkerPool,
    pub view: ServerView,
}

/// Start the workers and wait until every one listens on every port.
pub fn start(args: &ServerArgs, plan: &WorkerPlan, fd_limit: Option<u64>, tx: &std::sync::mpsc::Sender<Delivery>, rx: &Receiver<Delivery>) -> Result<ServerPool> {
    let configs: Vec<String> = (0..plan.workers)
        .map(|worker| {
            serde_json::to_string(&ServerWorkerConfig {
                worker,
                listen: args.listen,
                ports: args.ports.0.clone(),
                idle_timeout_ms: args.idle_timeout.0.map(|d| d.as_millis() as u64),
                stats_interval_ms: 1000.min(args.stats_interval.as_millis() as u64).max(100),
                protocol: args.protocol,
                business: args.business,
                queue: args.queue as usize,
                service_time: args.service_time.clone(),
                http: http::HttpConfig {
                    body: if args.body_size == 12 { b"Hello world!".to_vec() } else { vec![b'x'; args.body_size] },
                    max_header_bytes: args.max_header_bytes,
                    header_timeout_ms: args.header_timeout.as_millis() as u64,
                },
            })
            .expect("config serializes")
        })
        .collect();
    let pool = WorkerPool::spawn(Role::Server, &configs, fd_limit, tx)?;
    let mut view = ServerView::new(plan.workers);
    let mut ready = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready < plan.workers {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((Role::Server, _, PoolEvent::Msg(WorkerMsg::Ready { .. }))) => ready += 1,
            Ok((Role::Server, _, PoolEvent::Msg(WorkerMsg::Server(s)))) => view.update(s),
            Ok((Role::Server, _, PoolEvent::Msg(WorkerMsg::Fatal { message, .. }))) => bail!("{message}"),
            Ok((Role::Server, i, PoolEvent::Exited)) => bail!("server worker {i} exited during start-up"),
            Ok(_) => {}
            Err(_) => bail!("server workers did not start within 30 s ({ready} of {} ready)", plan.workers),
        }
    }
    Ok(ServerPool { pool, view })
}

pub fn run(args: ServerArgs) -> Result<i32> {
    crate::signals::install();
    let (before, after) = crate::sys::raise_fd_limit();
    let plan = plan(&args, after.hard).map_err(crate::UsageError)?;
    let warnings = match args.connections {
        Some(n) => crate::tune::precheck(n, crate::tune::plan::TuneRole::Server, args.ports.0.len() as u64, 50_000)?,
        None => Vec::new(),
    };
    let mut progress = Progress::new(false);
    for w in &warnings {
        progress.note(w);
    }
    let say = |p: &mut Progress, json: bool, line: String, value: serde_json::Value| {
        if json {
            println!("{value}");
        } else {
            p.note(&line);
        }
    };
    say(
        &mut progress,
        args.json,
        format!("RLIMIT_NOFILE soft {} -> {} (hard {}); every worker raises its own the same way", before.soft, after.soft, after.hard),
        serde_json::json!({"event": "fd_limit", "soft_before": before.soft, "soft": after.soft, "hard": after.hard}),
    );
    let capacity = plan.workers as u64 * (plan.fd_limit - plan.reserved_fds);
    say(
        &mut progress,
        args.json,
        format!(
            "plan: {} worker processes x {} ports on {} (SO_REUSEPORT), up to ~{} connections each, {} in all",
            plan.workers,
            args.ports.0.len(),
            args.listen,
            format::count(plan.fd_limit - plan.reserved_fds),
            format::count(capacity)
        ),
        serde_json::json!({"event": "plan", "workers": plan.workers, "ports": args.ports.0.len(), "per_worker_max": plan.fd_limit - plan.reserved_fds, "capacity": capacity}),
    );
    let (tx, rx) = supervisor::channel();
    let mut server = start(&args, &plan, None, &tx, &rx)?;
    say(
        &mut progress,
        args.json,
        format!("listening on {}:{}-{}", args.listen, args.ports.0[0], args.ports.0[args.ports.0.len() - 1]),
        serde_json::json!({"event": "ready", "workers": plan.workers, "pids": server.pool.pids()}),
    );
    let started = Instant::now();
    let mut next_print = Instant::now() + args.stats_interval;
    let mut prev = server.view.totals();
    let mut prev_at = Instant::now();
    let mut failure = None;
    loop {
        if crate::signals::interrupted() || args.duration.0.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok((_, _, PoolEvent::Msg(WorkerMsg::Server(s)))) => server.view.update(s),
            Ok((_, i, PoolEvent::Msg(WorkerMsg::Fatal { message, .. }))) => {
                failure = Some(format!("server worker {i}: {message}"));
                break;
            }
            Ok((_, i, PoolEvent::Exited)) => {
                failure = Some(format!("server worker {i} exited unexpectedly (killed? see dmesg for the OOM killer)"));
                break;
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if Instant::now() >= next_print {
            let t = server.view.totals();
            let dt = prev_at.elapsed().as_secs_f64().max(1e-3);
            let acc_rate = (t.accepted - prev.accepted) as f64 / dt;
            let close_rate = (t.closed - prev.closed) as f64 / dt;
            say(
                &mut progress,
                args.json,
                format!(
                    "connections {} | accepted/s {} | closed/s {} | rss {} | accept errors {}{}",
                    format::count(t.active),
                    format::count(acc_rate as u64),
                    format::count(close_rate as u64),
                    format::bytes(t.rss_bytes),
                    format::kinds(&t.accept_errors),
                    if t.requests > 0 {
                        format!(
                            " | requests/s {} replies {} rejected {} service {:.2} ms",
                            format::count(((t.requests - prev.requests) as f64 / dt) as u64),
                            format::count(t.replies),
                            format::count(t.rejected),
                            t.applied_service_ms
                        )
                    } else {
                        String::new()
                    }
                ),
                serde_json::json!({"event": "stats", "active": t.active, "accepted": t.accepted, "closed": t.closed,
                    "accepted_per_s": acc_rate, "closed_per_s": close_rate, "rss_bytes": t.rss_bytes,
                    "accept_errors": t.accept_errors, "close_reasons": t.close_reasons, "frames_in": t.frames_in,
                    "requests": t.requests, "replies": t.replies, "rejected": t.rejected, "applied_service_ms": t.applied_service_ms, "threads": t.threads}),
            );
            prev = t;
            prev_at = Instant::now();
            next_print = Instant::now() + args.stats_interval;
        }
    }
    server.pool.stop(Duration::from_secs(3));
    // Collect the last snapshots the workers sent while stopping.
    while let Ok((_, _, ev)) = rx.recv_timeout(Duration::from_millis(50)) {
        if let PoolEvent::Msg(WorkerMsg::Server(s)) = ev {
            server.view.update(s);
        }
    }
    let t = server.view.totals();
    if args.json {
        println!("{}", serde_json::json!({"event": "summary", "totals": t, "failure": failure}));
    } else {
        progress.note(&format!(
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
