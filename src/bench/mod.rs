//! `megaconn bench`: the main job. Starts server and client worker
//! processes on this machine, ramps to N, holds while heartbeating,
//! measures user and kernel memory per connection and CPU,
//! closes everything and reports. The bench process is the supervisor of both
//! pools (one event channel, one progress line); every worker is its child
//! and dies with it.
pub(crate) mod broadcast_phase;
pub(crate) mod business;
pub(crate) mod client_only;
pub(crate) mod cluster;
pub(crate) mod config;
pub(crate) mod outcome;
pub(crate) mod pair;
pub(crate) mod push;
pub(crate) mod recovery;
pub(crate) mod rollout;
pub(crate) mod sampler;
pub(crate) mod sockets;

pub(crate) use config::{BenchConfig, Scenario};

use crate::client::run::{ClientRun, ClientSummary};
use crate::client::{ClientConfig, LoadConfig, Traffic};
use crate::server::supervisor::fleet::ServerFleet;
use crate::server::supervisor::view::ServerTotals;
use crate::server::ServerConfig;
use crate::stats::memory::{self, KernelMemory};
use crate::stats::{format, progress::Progress};
use anyhow::Result;
use pair::PairRun;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Serialize)]
pub(crate) struct BenchReport {
    pub target: u64,
    pub established: u64,
    pub held: u64,
    pub failed_total: u64,
    /// Server worker processes alive when the hold ended.
    pub server_workers: usize,
    pub client_workers: usize,
    /// Server connections counted at the end of the hold.
    pub server_active_at_hold: u64,
    /// Sum of the server workers' PSS before any connection, bytes.
    pub server_pss_baseline_bytes: u64,
    pub server_pss_at_hold_bytes: u64,
    pub server_anon_baseline_bytes: u64,
    pub server_anon_at_hold_bytes: u64,
    /// (anonymous PSS at hold - one idle worker's anonymous PSS x workers
    /// at hold) / connections held.
    pub server_user_bytes_per_conn: f64,
    /// PSS at hold / connections held: every process's baseline included.
    pub server_user_bytes_per_conn_with_processes: f64,
    /// Sum of RSS, which counts the shared binary once per process.
    pub server_rss_baseline_bytes: u64,
    pub server_rss_at_hold_bytes: u64,
    pub client_pss_at_hold_bytes: u64,
    /// Delta of /proc/meminfo Slab / connections (both ends on this host).
    pub kernel_slab_bytes_per_conn: f64,
    /// Delta of the socket slab caches alone / connections.
    pub kernel_socket_cache_bytes_per_conn: f64,
    pub tcp_objects_added: i64,
    pub server_cpu_seconds: f64,
    pub client_cpu_seconds: f64,
    pub server_active_after_close: u64,
    /// After the run, once surplus workers retired: what came back.
    pub server_fds_baseline: u64,
    pub server_fds_after_close: u64,
    /// Server workers alive then, and at the start: surplus elastic
    /// workers stay until `--retire-after` (the bench waits for them only
    /// with --churn), each with its own listening sockets and pipes.
    pub server_workers_after_close: usize,
    pub server_workers_at_start: usize,
    pub server_rss_after_close_bytes: u64,
    /// Anonymous PSS (heap, stacks: what a leak grows) after the run.
    pub server_anon_after_close_bytes: u64,
    /// TCP socket objects alive after the run minus before it.
    pub tcp_objects_after_close_delta: i64,
    /// Slab (/proc/meminfo) after the run minus before it, bytes.
    pub kernel_slab_after_close_delta_bytes: i64,
    pub sockets_left: usize,
    /// Kernel drop counters (TcpExt, as `nstat` shows them) that rose
    /// during the run, with the fix for each.
    pub kernel_drops: std::collections::BTreeMap<String, u64>,
    /// Where the run was: host, netns or veth, with the hash table size.
    pub topology: crate::topology::Placement,
    pub client: ClientSummary,
    pub server: ServerTotals,
    /// Why the pair failed (a server or client crash loop, a deadline).
    #[serde(skip)]
    pub failure: Option<String>,
}

impl outcome::Outcome for BenchReport {
    fn kind(&self) -> &'static str {
        "bench"
    }

    fn summary(&self) -> &ClientSummary {
        &self.client
    }

    fn print(&self) {
        print_report(self);
    }

    fn failures(&self) -> Vec<String> {
        self.failure.iter().cloned().collect()
    }
}

/// Readings taken when the hold ends, before anything closes.
#[derive(Default)]
struct HoldSample {
    server_fds: u64,
    server_rss: u64,
    server_pss: memory::Pss,
    client_pss: u64,
    kernel: KernelMemory,
    active: u64,
    server_workers: usize,
}

/// Niceness of the bench's client workers. The kernel divides CPU per
/// process: at 1M connections the client needs 56 processes (fd limit)
/// while an elastic server starts with one per core, and at equal priority
/// the load generator took ~85% of the 2 cores and the server fell 400K
/// accepts behind (measured). On one machine the client stands in for
/// remote hosts, so it yields; it still gets all idle CPU.
pub(crate) const CLIENT_NICE: i32 = 10;

/// The server a bench runs: loopback, framed, async, elastic unless told.
pub(crate) fn server_config(cfg: &BenchConfig, connections: u64) -> ServerConfig {
    ServerConfig {
        listen: cfg.target.into(),
        // Every port of the one protocol, TLS with the bench's certificate.
        services: vec![crate::server::services::Service { protocol: cfg.protocol, tls: cfg.pki.is_some(), ports: cfg.ports.clone() }],
        workers: cfg.server_workers,
        connections: Some(connections),
        // The report's series samples every 500 ms.
        stats_interval: Duration::from_millis(500),
        history: crate::server::broker::history::HistoryConfig { size: cfg.history, ..Default::default() },
        tls: cfg.pki.as_ref().map(|p| crate::tls::files::ServerTls {
            cert: p.cert.clone(),
            key: p.key.clone(),
            // The server waits for a handshake as long as its clients do.
            handshake_timeout_ms: crate::tls::files::DEFAULT_HANDSHAKE_TIMEOUT.max(cfg.connect_timeout).as_millis() as u64,
            ticket_key: String::new(),
            alpn_http: false,
            pem: None,
        }),
        auth: match &cfg.jwt_secret {
            Some(s) => crate::server::config::Auth::Jwt(Some(crate::server::auth::jwt::JwtKey::Secret(s.clone()))),
            None => crate::server::config::Auth::Off,
        },
        io: cfg.io,
        ..Default::default()
    }
}

/// The topic filter each `--protocol mqtt` bench client subscribes to.
pub(crate) const BENCH_MQTT_TOPIC: &str = "dev/{conn}";

/// The client a bench runs: the bench's load, held for `hold`, yielding
/// CPU to the server (see [`CLIENT_NICE`]).
pub(crate) fn client_config(args: &BenchConfig, hold: Duration) -> ClientConfig {
    ClientConfig {
        load: LoadConfig {
            ports: args.ports.clone(),
            connections: args.connections,
            rate: args.rate,
            source_ips: args.source_ips.clone(),
            traffic: Traffic {
                // HTTP has no heartbeat: each connection sends a keep-alive
                // GET once per heartbeat interval instead.
                heartbeat: args.heartbeat.filter(|_| args.protocol != crate::proto::Protocol::Http),
                request_rate: args.heartbeat.filter(|_| args.protocol == crate::proto::Protocol::Http).map(|d| 1.0 / d.as_secs_f64()),
                payload: args.payload,
                connect_timeout: args.connect_timeout,
                protocol: args.protocol,
                tls: args.pki.as_ref().map(|p| crate::tls::client::ClientTls {
                    ca: Some(p.ca.clone()),
                    server_name: crate::tls::throwaway::SERVER_NAME.into(),
                    alpn: crate::tls::client::alpn_for(args.protocol),
                    ..Default::default()
                }),
                jwt_secret: args.jwt_secret.clone(),
                ws_deflate: args.ws_deflate,
                // MQTT: every client holds a subscription of its own, as
                // devices listening on their topic do.
                mqtt: crate::client::mqtt::MqttOptions {
                    subscribe: if args.protocol == crate::proto::Protocol::Mqtt { vec![BENCH_MQTT_TOPIC.into()] } else { Vec::new() },
                    qos: args.mqtt_qos,
                    ..Default::default()
                },
                ..Default::default()
            },
            hold,
            json: args.json,
            nice: CLIENT_NICE,
            io: args.client_io,
            churn: args.churn,
            netns_fd: args.client_netns,
            thresholds: args.thresholds.clone(),
            stages: args.stages.clone(),
            ..Default::default()
        },
        target: args.target.into(),
        workers: args.client_workers,
        ..Default::default()
    }
}

pub(crate) fn run(mut args: BenchConfig) -> Result<i32> {
    crate::signals::install();
    let http_ok = matches!(args.protocol, crate::proto::Protocol::Http | crate::proto::Protocol::Mqtt) && args.scenario == Scenario::Connections;
    let mqtt_push = args.protocol == crate::proto::Protocol::Mqtt && args.scenario == Scenario::Push && args.nodes == 1 && args.cluster.is_none();
    if !matches!(args.protocol, crate::proto::Protocol::Framed | crate::proto::Protocol::Ws) && !http_ok && !mqtt_push {
        return Err(crate::UsageError(
            format!(
                "bench runs --protocol framed or ws (and http with --scenario connections, mqtt with --scenario connections or push on one node), not {:?} with --scenario {:?}; load other protocols with megaconn server and megaconn client",
                args.protocol, args.scenario
            )
            .to_lowercase(),
        )
        .into());
    }
    if let Some(dir) = &args.report {
        if args.scenario == Scenario::Business {
            return Err(crate::UsageError("--report writes one run; --scenario business is four (its table is the report): drop --report, or report one mode with megaconn server --business MODE and megaconn client --report DIR".into()).into());
        }
        crate::report::prepare(dir)?;
    }
    if args.scenario == Scenario::Business && (!args.thresholds.check.is_empty() || !args.thresholds.abort.is_empty() || args.thresholds.junit.is_some()) {
        return Err(crate::UsageError("--threshold, --threshold-abort and --junit judge one run; --scenario business is four (its table compares them): drop them, or gate one mode with megaconn server --business MODE and megaconn client --threshold".into()).into());
    }
    if let Some(line) = args.thresholds.armed() {
        Progress::new(false).note(&line);
    }
    if args.scenario == Scenario::Rollout {
        if args.nodes < 2 {
            return Err(crate::UsageError(format!(
                "--scenario rollout drains node n0 while its clients move to another node: add --nodes 2 (got --nodes {})",
                args.nodes
            ))
            .into());
        }
        args.cluster = Some(config::Broker::Nats);
        // When n0 restarts, the client and the other nodes hold every
        // connection and n0 plans for all of them again.
        crate::tune::check_files(3 * args.connections, &format!("a rollout of {} connections", format::count(args.connections)))?;
    }
    if args.scenario == Scenario::Recovery {
        recovery::check(&args)?;
    }
    if let Some(a) = args.admin {
        crate::admin::check(&a, None).map_err(crate::UsageError)?;
        let bound = pair::serve_admin(a)?;
        Progress::new(false).note(&format!("the load generator's admin API on http://{bound} (/metrics /stats /healthz, the dashboard at /ui)"));
    }
    if args.nodes > 1 || args.cluster.is_some() {
        if args.tls {
            return Err(crate::UsageError(
                "--tls runs one server (drop --nodes/--cluster); a TLS cluster is loaded with megaconn server --tls-cert and megaconn client --tls".into(),
            )
            .into());
        }
        return cluster::run(args);
    }
    // Placed before anything starts: workers inherit the namespace. The
    // namespaces live as long as `net` (removed when the run ends).
    let per_source = args.ports.len() as u64 * 60_000;
    let net = crate::topology::place(args.topology, args.connections, &ports_list(&args.ports), args.connections.div_ceil(per_source))?;
    let mut progress = Progress::new(false);
    for n in &net.notes {
        progress.note(n);
    }
    args.target = net.placement.server_address;
    if !net.placement.client_sources.is_empty() {
        args.source_ips = Some(net.placement.client_sources.iter().map(|&a| a.into()).collect());
    }
    args.client_netns = net.client_ns.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    if args.tls {
        let pki = crate::tls::throwaway::Throwaway::new(args.target)?;
        progress.note(&format!(
            "tls: a throwaway CA and a certificate for {} and {} in {}",
            crate::tls::throwaway::SERVER_NAME,
            args.target,
            pki.ca.parent().map_or(String::new(), |d| d.display().to_string())
        ));
        args.pki = Some(std::sync::Arc::new(pki));
    }
    match args.scenario {
        Scenario::Business => business::run(args),
        Scenario::Push => push::run(args, &net.placement),
        Scenario::Recovery => recovery::run(args, &net.placement),
        Scenario::Rollout => unreachable!("a rollout runs a cluster (above)"),
        Scenario::Connections => connections(args, &net.placement, progress),
    }
}

/// "8000-8099,9000" for ip_local_reserved_ports.
fn ports_list(ports: &[u16]) -> String {
    let mut sorted = ports.to_vec();
    sorted.sort_unstable();
    let mut runs: Vec<(u16, u16)> = Vec::new();
    for p in sorted {
        match runs.last_mut() {
            Some((_, hi)) if p <= hi.saturating_add(1) => *hi = (*hi).max(p),
            _ => runs.push((p, p)),
        }
    }
    runs.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect::<Vec<_>>().join(",")
}

/// The connections scenario: ramp, hold, memory and CPU per connection.
fn connections(args: BenchConfig, placement: &crate::topology::Placement, mut progress: Progress) -> Result<i32> {
    let hold = args.hold.unwrap_or(crate::client::config::DEFAULT_HOLD);
    let server_cfg = server_config(&args, args.connections);
    let client_cfg = client_config(&args, hold);
    let outcome::PairPlan { server: splan, client: cplan, client_workers: cwplan } = outcome::plan_pair(&server_cfg, &client_cfg)?;
    if placement.kind != crate::topology::Topology::Host {
        for line in crate::tune::apply::lift_global_binds(args.connections, crate::tune::plan::TuneRole::Both, args.ports.len() as u64, args.rate) {
            progress.note(&line);
        }
    }
    let warnings = crate::tune::precheck(args.connections, crate::tune::plan::TuneRole::Both, args.ports.len() as u64, args.rate)?;
    for w in &warnings {
        progress.note(w);
    }
    progress.note(&format!(
        "bench: {} connections on {} ports {}-{} | server: {} workers at start, up to {} | client: {}",
        format::count(args.connections),
        args.target,
        args.ports[0],
        args.ports[args.ports.len() - 1],
        splan.initial(),
        splan.max(),
        crate::client::describe(&cplan, &cwplan)
    ));
    for w in &cplan.warnings {
        progress.note(&format!("warning: {w}"));
    }
    let kernel_before = memory::kernel_memory();
    let netstat_before = crate::stats::netstat::read();
    let ch = pair::PairChannel::default();
    let server = ch.start_server(&server_cfg, &splan)?;
    let server_pids = server.pids();
    let server_rss_baseline = memory::rss_of(&server_pids);
    let server_fds_baseline = memory::fds_of(&server_pids);
    let server_pss_baseline = memory::pss_of(&server_pids);
    progress.note(&format!(
        "server ready: {} workers, {} PSS ({} RSS)",
        splan.initial(),
        format::bytes(server_pss_baseline.total),
        format::bytes(server_rss_baseline)
    ));
    let client = ClientRun::start(&cplan, &client_cfg.load, &cwplan, None, &ch.client)?;
    let sample = |server: &ServerFleet, client: &ClientRun| {
        let pids = server.pids();
        HoldSample {
            server_fds: memory::fds_of(&pids),
            server_rss: memory::rss_of(&pids),
            server_pss: memory::pss_of(&pids),
            client_pss: memory::pss_of(&client.pool.pids()).total,
            kernel: memory::kernel_memory(),
            active: server.view.totals().active,
            server_workers: pids.len(),
        }
    };
    let mut pair = PairRun::new(server, client, &mut progress, sample);
    pair.settle_workers = args.churn.is_some();
    pair.server_sampler = Some(sampler::ServerSampler::new(&pair.server, server_pss_baseline.anon, splan.initial()));
    pair.run(&ch.rx)?;
    let active_after = pair.server.view.totals().active;
    let failure = pair.failure.clone();
    let hs = pair.at_hold.take().unwrap_or_default();
    let after = pair.after_close.take().unwrap_or_default();
    let (server, client) = (pair.server, pair.client);
    let summary = client.summary();
    let stotals = server.view.totals();
    let held = hs.active.max(1) as f64;
    let report = BenchReport {
        target: args.connections,
        established: summary.established,
        held: summary.held,
        failed_total: summary.failed_total,
        server_workers: hs.server_workers,
        client_workers: cwplan.workers,
        server_active_at_hold: hs.active,
        server_pss_baseline_bytes: server_pss_baseline.total,
        server_pss_at_hold_bytes: hs.server_pss.total,
        server_anon_baseline_bytes: server_pss_baseline.anon,
        server_anon_at_hold_bytes: hs.server_pss.anon,
        // Elastic servers start more workers as they fill: subtract each
        // live worker's own baseline (measured on the initial ones), not
        // just the initial workers'.
        server_user_bytes_per_conn: hs.server_pss.anon.saturating_sub(server_pss_baseline.anon / splan.initial().max(1) as u64 * hs.server_workers as u64)
            as f64
            / held,
        server_user_bytes_per_conn_with_processes: hs.server_pss.total as f64 / held,
        server_rss_baseline_bytes: server_rss_baseline,
        server_rss_at_hold_bytes: hs.server_rss,
        client_pss_at_hold_bytes: hs.client_pss,
        kernel_slab_bytes_per_conn: hs.kernel.slab_bytes.saturating_sub(kernel_before.slab_bytes) as f64 / held,
        kernel_socket_cache_bytes_per_conn: hs.kernel.socket_cache_bytes.saturating_sub(kernel_before.socket_cache_bytes) as f64 / held,
        tcp_objects_added: hs.kernel.tcp_objects as i64 - kernel_before.tcp_objects as i64,
        server_cpu_seconds: stotals.cpu_seconds,
        client_cpu_seconds: summary.cpu_seconds,
        server_active_after_close: active_after,
        server_fds_baseline,
        server_fds_after_close: after.server_fds,
        server_workers_after_close: after.server_workers,
        server_workers_at_start: splan.initial(),
        server_rss_after_close_bytes: after.server_rss,
        server_anon_after_close_bytes: after.server_pss.anon,
        tcp_objects_after_close_delta: after.kernel.tcp_objects as i64 - kernel_before.tcp_objects as i64,
        kernel_slab_after_close_delta_bytes: after.kernel.slab_bytes as i64 - kernel_before.slab_bytes as i64,
        sockets_left: sockets::sockets_on_ports(&args.ports),
        kernel_drops: crate::stats::netstat::delta(&netstat_before, &crate::stats::netstat::read()),
        topology: placement.clone(),
        client: summary,
        server: stotals,
        failure,
    };
    let plan = serde_json::json!({
        "server": {"workers_at_start": splan.initial(), "workers_max": splan.max(), "ports": args.ports.len(), "io": splan.io},
        "client": cplan, "client_workers": cwplan, "rate": args.rate, "hold_s": hold.as_secs_f64(),
        "heartbeat_s": args.heartbeat.map(|d| d.as_secs_f64()), "protocol": format!("{:?}", args.protocol).to_lowercase(),
    });
    outcome::finish(args.report.as_deref(), args.json, &client, plan, placement, &report, &args.thresholds, &mut progress)
}

fn print_report(r: &BenchReport) {
    let t = &r.topology;
    println!(
        "topology      {}{} | established hash {} buckets{}",
        format!("{:?}", t.kind).to_lowercase(),
        if t.namespaces.is_empty() { format!(" ({})", t.why) } else { format!(" {}", t.namespaces.join(", ")) },
        t.ehash_entries.map(|e| format::count(e.unsigned_abs())).unwrap_or_else(|| "?".into()),
        if t.ehash_entries.is_some_and(|e| e < 0) { " (the host's, shared)" } else { "" }
    );
    if r.server_pss_at_hold_bytes == 0 {
        println!("memory        not measured: the run ended before the hold did");
        println!("cleanup       server connections after close {} | sockets left on bench ports {}", r.server_active_after_close, r.sockets_left);
        return;
    }
    println!(
        "server        {} connections at end of hold over {} workers | cpu {:.1} s",
        format::count(r.server_active_at_hold),
        r.server_workers,
        r.server_cpu_seconds
    );
    println!(
        "user memory   server heap {} -> {}: {:.0} B/conn added | PSS at hold {}: {:.0} B/conn with process baselines (RSS {} -> {}) | client PSS {}",
        format::bytes(r.server_anon_baseline_bytes),
        format::bytes(r.server_anon_at_hold_bytes),
        r.server_user_bytes_per_conn,
        format::bytes(r.server_pss_at_hold_bytes),
        r.server_user_bytes_per_conn_with_processes,
        format::bytes(r.server_rss_baseline_bytes),
        format::bytes(r.server_rss_at_hold_bytes),
        format::bytes(r.client_pss_at_hold_bytes)
    );
    println!(
        "kernel memory {:.0} B/conn Slab delta, {:.0} B/conn in socket caches (both ends), TCP objects +{}",
        r.kernel_slab_bytes_per_conn, r.kernel_socket_cache_bytes_per_conn, r.tcp_objects_added
    );
    println!("cleanup       server connections after close {} | sockets left on bench ports {}", r.server_active_after_close, r.sockets_left);
    if r.server_fds_after_close > 0 {
        let workers = match r.server_workers_after_close > r.server_workers_at_start {
            true => {
                format!(" ({} workers still up, {} at start: the surplus retire after --retire-after)", r.server_workers_after_close, r.server_workers_at_start)
            }
            false => String::new(),
        };
        println!(
            "after close   server fds {} -> {}{workers} | server heap (anon PSS) {} -> {} | RSS {} -> {} | TCP sockets {:+} | kernel Slab {:+.1} MiB (freed objects the slab caches keep)",
            r.server_fds_baseline,
            r.server_fds_after_close,
            format::bytes(r.server_anon_baseline_bytes),
            format::bytes(r.server_anon_after_close_bytes),
            format::bytes(r.server_rss_baseline_bytes),
            format::bytes(r.server_rss_after_close_bytes),
            r.tcp_objects_after_close_delta,
            r.kernel_slab_after_close_delta_bytes as f64 / 1048576.0
        );
    }
    print_kernel_drops(&r.kernel_drops, drops_scope(r.topology.kind));
}

/// Where the kernel's counters were read, for a run on `kind`.
pub(super) fn drops_scope(kind: crate::topology::Topology) -> &'static str {
    match kind {
        crate::topology::Topology::Veth => "server's namespace; the client's is not counted",
        crate::topology::Topology::Netns => "the run's namespace",
        _ => "this host",
    }
}

/// The kernel's drops during the run (in `scope`), each with its fix.
pub(super) fn print_kernel_drops(drops: &std::collections::BTreeMap<String, u64>, scope: &str) {
    if drops.is_empty() {
        let names: Vec<&str> = crate::stats::netstat::WATCHED.iter().map(|(n, _)| *n).collect();
        println!("kernel drops  none in {scope} ({} all unchanged)", names.join(", "));
    }
    for (name, n) in drops {
        println!("kernel drops  {name} +{} — {}", format::count(*n), crate::stats::netstat::fix(name));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reserved_ports_as_ranges() {
        assert_eq!(super::ports_list(&[8001, 8000, 8002, 9000, 8002]), "8000-8002,9000");
    }
}
