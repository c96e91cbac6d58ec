//! `megaconn bench --scenario business`: the thread-pool experiment in one
//! command. 1000 connections each send one request per second (8-byte
//! payload, open loop) for the hold time against each business mode in
//! turn — inline, pool:1000, pool:20, async — with the classic service
//! time (mean 14400/999 ≈ 14.41 ms). One server worker process, so
//! `pool:1000` is exactly one pool of 1000 threads and `inline` one
//! blocked event loop, as in the published experiment. Overhead = mean
//! latency − mean service time the server actually applied.

use super::pair::PairRun;
use super::BenchConfig;
use crate::client::run::ClientRun;
use crate::client::{ClientConfig, LoadConfig, Traffic};
use crate::server::business::service_time::ServiceTime;
use crate::server::business::BusinessMode;
use crate::server::supervisor::fleet::ServerFleet;
use crate::stats::histogram::LatencySummary;
use crate::stats::{format, memory, progress::Progress};
use crate::supervise::plan::Workers;
use anyhow::Result;
use serde::Serialize;
use std::time::Duration;

/// Connections of the published experiment (each sends 1 request/s).
pub(crate) const DEFAULT_CONNECTIONS: u64 = 1000;
const MODES: [BusinessMode; 4] = [BusinessMode::Inline, BusinessMode::Pool(1000), BusinessMode::Pool(20), BusinessMode::Async];

#[derive(Debug, Serialize)]
pub(crate) struct ModeResult {
    pub mode: String,
    pub qps: f64,
    pub offered_qps: f64,
    pub latency_ms: LatencySummary,
    pub replies: u64,
    pub rejected: u64,
    pub timeouts: u64,
    /// Mean service time the server applied per reply, ms.
    pub applied_service_ms: f64,
    /// latency mean − applied service mean: what the system adds.
    pub overhead_ms: f64,
    pub server_threads: u64,
    pub server_rss_bytes: u64,
    pub server_cpu_seconds: f64,
    pub client_cpu_seconds: f64,
}

pub(crate) fn run(args: BenchConfig) -> Result<i32> {
    let hold = args.hold.unwrap_or(Duration::from_secs(30));
    let mut progress = Progress::new(false);
    let service = ServiceTime::Classic;
    progress.note(&format!(
        "business scenario: {} connections x 1 request/s for {:.0} s per mode, classic service time (mean {:.2} ms)",
        args.connections,
        hold.as_secs_f64(),
        service.mean_ms()
    ));
    let mut results = Vec::new();
    for mode in MODES {
        if crate::signals::interrupted() {
            break;
        }
        progress.note(&format!("mode {mode}"));
        results.push(run_mode(&args, mode, &service, hold, &mut progress)?);
    }
    progress.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"service_time_mean_ms": service.mean_ms(), "modes": results}))?);
    } else {
        print_table(&results, service.mean_ms());
    }
    Ok(0)
}

fn run_mode(args: &BenchConfig, mode: BusinessMode, service: &ServiceTime, hold: Duration, progress: &mut Progress) -> Result<ModeResult> {
    // One server worker, so `pool:1000` is exactly one pool of 1000
    // threads and `inline` one blocked event loop, as published.
    let workers = match args.server_workers {
        Workers::Auto => Workers::Fixed(1),
        w => w,
    };
    let server_cfg = crate::server::ServerConfig { business: mode, service_time: service.clone(), workers, ..super::server_config(args, args.connections) };
    let client_cfg = ClientConfig {
        load: LoadConfig {
            ports: args.ports.clone(),
            connections: args.connections,
            rate: args.rate.min(10_000),
            source_ips: args.source_ips.clone(),
            traffic: Traffic {
                heartbeat: None,
                payload: 8,
                request_rate: Some(1.0),
                connect_timeout: args.connect_timeout,
                protocol: args.protocol,
                ..Default::default()
            },
            hold,
            ..Default::default()
        },
        workers: args.client_workers,
        ..Default::default()
    };
    let super::outcome::PairPlan { server: splan, client: cplan, client_workers: cwplan } = super::outcome::plan_pair(&server_cfg, &client_cfg)?;
    let ch = super::pair::PairChannel::default();
    let server = ch.start_server(&server_cfg, &splan)?;
    let client = ClientRun::start(&cplan, &client_cfg.load, &cwplan, None, &ch.client)?;
    let sample = |server: &ServerFleet, _: &ClientRun| (server.view.totals(), memory::rss_of(&server.pids()));
    let mut pair = PairRun::new(server, client, progress, sample);
    pair.label = format!("{mode:<9} ");
    pair.verbose = false;
    pair.run(&ch.rx)?;
    if let Some(f) = &pair.failure {
        anyhow::bail!("business mode {mode}: {f}");
    }
    let at_hold = pair.at_hold.take();
    let (server, client) = (pair.server, pair.client);
    let summary = client.summary();
    let totals = server.view.totals();
    let (held, rss) = at_hold.unwrap_or((totals.clone(), 0));
    drop(server);
    let req = summary.requests.clone().expect("requests were scheduled");
    progress.note(&format!("{mode}: qps {:.1}, avg {:.2} ms, timeouts {}", req.qps, req.latency_ms.mean_ms, req.timeouts));
    Ok(ModeResult {
        mode: mode.to_string(),
        qps: req.qps,
        offered_qps: req.offered_qps,
        overhead_ms: req.latency_ms.mean_ms - totals.applied_service_ms,
        latency_ms: req.latency_ms,
        replies: req.replies,
        rejected: req.rejected,
        timeouts: req.timeouts,
        applied_service_ms: totals.applied_service_ms,
        server_threads: held.threads,
        server_rss_bytes: rss,
        server_cpu_seconds: totals.cpu_seconds,
        client_cpu_seconds: summary.cpu_seconds,
    })
}

fn print_table(results: &[ModeResult], floor_ms: f64) {
    println!(
        "{:<10} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8} {:>9}",
        "mode", "QPS", "avg ms", "p50", "p99", "p99.9", "max", "service", "overhead", "threads", "RSS"
    );
    for r in results {
        let l = &r.latency_ms;
        println!(
            "{:<10} {:>8.1} {:>9.2} {:>8.2} {:>9.2} {:>9.2} {:>9.1} {:>10.2} {:>9.2} {:>8} {:>9}",
            r.mode,
            r.qps,
            l.mean_ms,
            l.p50_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms,
            r.applied_service_ms,
            r.overhead_ms,
            r.server_threads,
            format::bytes(r.server_rss_bytes)
        );
    }
    println!("service time floor (classic mean) {floor_ms:.2} ms; overhead = avg latency - mean applied service time");
    for r in results.iter().filter(|r| r.timeouts > 0 || r.rejected > 0) {
        println!("{}: {} timeouts (> 10 s or never answered), {} rejected", r.mode, format::count(r.timeouts), format::count(r.rejected));
    }
}
