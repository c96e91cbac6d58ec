//! `megaconn bench --scenario push`: ramp to N connections, then publish
//! K broadcasts (or, with `--topics T`, one message to each of T topics
//! per round; connection g subscribes to topic g % T) through the admin
//! API over real HTTP, and time them: per round, from the publish stamp to
//! the last connection's receipt (time to all), and the delivery latency
//! distribution over every receipt.
//!
//! `--protocol mqtt`: every client subscribes (at `--mqtt-qos`) to one
//! shared topic, [`MQTT_PUSH_TOPIC`] (or with `--topics` to its spread
//! topic), and each broadcast is an admin publish to it at that QoS whose
//! data begins with a [`Stamp`] (an MQTT message carries no publish time
//! or sequence of its own); the clients time and count those as pushes,
//! so the report is the framed one's, line for line.

use super::broadcast_phase::{BroadcastPhase, PhaseSignals, PhaseWatch};
use super::pair::PairRun;
use super::BenchConfig;
use crate::client::run::{ClientRun, ClientSummary};
use crate::proto::stamp::{Stamp, BENCH_PUBLISHER};
use crate::server::supervisor::fleet::ServerFleet;
use crate::stats::histogram::{self, LatencySummary};
use crate::stats::{format, progress::Progress};
use anyhow::Result;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Pause between the end of the ramp and the first publish.
pub(super) const SETTLE: Duration = Duration::from_secs(2);
/// Hold kept after the last publish, for the last deliveries.
pub(super) const TAIL: Duration = Duration::from_secs(15);

/// The topic every `--protocol mqtt` push bench client subscribes to
/// without `--topics` (MQTT clients get topic messages, not the admin
/// API's broadcasts): the fan-out is a publish to it.
pub(crate) const MQTT_PUSH_TOPIC: &str = "bench/all";

/// What a pushed message carries besides its data: the JSON envelope
/// (topic, sequence, stamps) and the frame header, about.
const ENVELOPE_BYTES: u64 = 320;

/// One round as the admin API answered it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Round {
    pub seq: u64,
    pub publish_us: u64,
    /// Connections the server wrote it to.
    pub queued: u64,
    /// The admin request's own round trip (the server answers once every
    /// worker has written the message).
    pub request_ms: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct RoundResult {
    pub seq: u64,
    pub deliveries: u64,
    pub queued: u64,
    /// Last receipt minus the publish stamp.
    pub time_to_all_ms: f64,
    /// The admin request's round trip (longest of the round's publishes).
    pub request_ms: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct PushReport {
    pub connections: u64,
    pub topics: u64,
    pub broadcasts: u64,
    /// Bytes of data in each published message.
    pub push_bytes: usize,
    pub expected_deliveries: u64,
    pub deliveries: u64,
    pub dropped: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub time_to_all_ms: Spread,
    pub delivery_ms: LatencySummary,
    pub rounds: Vec<RoundResult>,
    pub heartbeats_sent: u64,
    pub heartbeats_answered: u64,
    pub server_workers: usize,
    pub server_cpu_seconds: f64,
    pub client_cpu_seconds: f64,
    /// The broadcasts alone: the server's CPU and deflate work from just
    /// before the first publish to the last receipt (one server only).
    pub broadcast_phase: Option<BroadcastPhase>,
}

impl PushReport {
    /// What never arrived or arrived twice, and what 0 gaps says of it.
    pub(crate) fn undelivered(&self) -> Option<String> {
        if self.dropped == 0 && self.duplicates == 0 {
            return None;
        }
        let mut s = format!("{} pushes were never delivered and {} delivered twice", format::count(self.dropped), format::count(self.duplicates));
        if self.dropped > 0 && self.gaps == 0 {
            // A connection that missed one and got a later one counts a gap.
            s.push_str(&format!(
                "; with 0 gaps each connection missed only its last ones: still on their way when the hold ended (the slowest round took {:.1} s), \
                 or those connections stalled. A longer --hold tells which",
                self.time_to_all_ms.max / 1000.0
            ));
        }
        Some(s)
    }
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

fn spread(mut v: Vec<f64>) -> Spread {
    if v.is_empty() {
        return Spread::default();
    }
    v.sort_by(f64::total_cmp);
    Spread { min: v[0], median: v[v.len() / 2], max: v[v.len() - 1] }
}

pub(crate) fn run(args: BenchConfig, placement: &crate::topology::Placement) -> Result<i32> {
    let publishing = args.broadcast_interval * args.broadcasts as u32;
    let hold = args.hold.unwrap_or(SETTLE + publishing + TAIL);
    let mut server_cfg = super::server_config(&args, args.connections);
    server_cfg.admin = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let topics: Vec<String> = (0..args.topics).map(|t| format!("room-{t}")).collect();
    let mut client_cfg = super::client_config(&args, hold);
    client_cfg.load.traffic.subscribe = topics.clone();
    client_cfg.load.traffic.subscribe_spread = true;
    if args.protocol == crate::proto::Protocol::Mqtt {
        // One shared topic (or the spread ones), instead of a topic each.
        client_cfg.load.traffic.mqtt.subscribe = if topics.is_empty() { vec![MQTT_PUSH_TOPIC.into()] } else { Vec::new() };
    }
    let super::outcome::PairPlan { server: splan, client: cplan, client_workers: cwplan } = super::outcome::plan_pair(&server_cfg, &client_cfg)?;
    crate::tune::precheck(args.connections, crate::tune::plan::TuneRole::Both, args.ports.len() as u64, args.rate)?;
    let mut progress = Progress::new(false);
    // The message as it goes out: the data, its JSON envelope or frame.
    if let Some(w) = crate::tune::broadcast_memory(&crate::tune::limits_here(), args.connections, args.push_bytes as u64 + ENVELOPE_BYTES) {
        progress.note(&w);
    }
    let what = if topics.is_empty() { "broadcasts".to_string() } else { format!("rounds over {} topics", topics.len()) };
    progress.note(&format!(
        "push bench: {} connections, then {} {what} of {} bytes every {:.1} s | {}",
        format::count(args.connections),
        args.broadcasts,
        args.push_bytes,
        args.broadcast_interval.as_secs_f64(),
        crate::client::describe(&cplan, &cwplan)
    ));
    let ch = super::pair::PairChannel::default();
    let netstat_before = crate::stats::netstat::read();
    let server = ch.start_server(&server_cfg, &splan)?;
    let anon_baseline = crate::stats::memory::pss_of(&server.pids()).anon;
    let to = ch.server.clone();
    let admin = crate::admin::serve(
        crate::admin::Scope::Full,
        server_cfg.admin.expect("set above"),
        None,
        std::sync::Arc::new(move |r| to(crate::server::supervisor::ServerEvent::Admin(r))),
        Default::default(),
    )?;
    let client = ClientRun::start(&cplan, &client_cfg.load, &cwplan, None, &ch.client)?;
    let ramp_done = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(Mutex::new(Vec::<Round>::new()));
    let signals = Arc::new(PhaseSignals::default());
    let publisher = {
        let (ramp_done, rounds, args, signals) = (ramp_done.clone(), rounds.clone(), args.clone(), signals.clone());
        std::thread::spawn(move || publish(admin, None, &args, &topics, &ramp_done, &rounds, Some(&signals)))
    };
    let sample = |server: &ServerFleet, _: &ClientRun| server.pids().len();
    let mut pair = PairRun::new(server, client, &mut progress, sample);
    pair.ramp_done = Some(ramp_done.clone());
    pair.server_sampler = Some(super::sampler::ServerSampler::new(&pair.server, anon_baseline, splan.initial()));
    pair.phase = Some(PhaseWatch::new(signals, rounds.clone()));
    pair.run(&ch.rx)?;
    ramp_done.store(true, Ordering::SeqCst);
    let publish_error = publisher.join().map_err(|_| anyhow::anyhow!("the publisher thread panicked"))?.err();
    let workers = pair.at_hold.take().unwrap_or(0);
    let failure = pair.failure.take();
    let phase = pair.phase.as_ref().and_then(PhaseWatch::report);
    let (server, client) = (pair.server, pair.client);
    let summary = client.summary();
    let rounds = rounds.lock().expect("rounds").clone();
    let push = push_report(&args, &rounds, &client, &summary, workers, server.view.totals().cpu_seconds, phase);
    let kernel_drops = crate::stats::netstat::delta(&netstat_before, &crate::stats::netstat::read());
    let outcome =
        PushOutcome { push, client: summary, topology: placement.clone(), kernel_drops, failure, publish_error: publish_error.map(|e| format!("{e:#}")) };
    let plan =
        serde_json::json!({"client": cplan, "client_workers": cwplan, "broadcasts": args.broadcasts, "topics": args.topics, "push_bytes": args.push_bytes});
    super::outcome::finish(args.report.as_deref(), args.json, &client, plan, placement, &outcome, &args.thresholds, &mut progress)
}

/// What a push bench found (one server, or a cluster's nodes).
#[derive(Serialize)]
pub(crate) struct PushOutcome {
    pub push: PushReport,
    pub client: ClientSummary,
    pub topology: crate::topology::Placement,
    /// What the kernel dropped or ran short of during the run (TcpExt
    /// counters that rose), each printed with its fix.
    pub kernel_drops: std::collections::BTreeMap<String, u64>,
    /// Why the pair failed (the server's crash-loop guard, a node that
    /// exited), and why publishing failed.
    #[serde(skip)]
    pub failure: Option<String>,
    #[serde(skip)]
    pub publish_error: Option<String>,
}

impl super::outcome::Outcome for PushOutcome {
    fn kind(&self) -> &'static str {
        "bench push"
    }

    fn summary(&self) -> &ClientSummary {
        &self.client
    }

    fn print(&self) {
        print_report(&self.push);
        super::print_kernel_drops(&self.kernel_drops, super::drops_scope(self.topology.kind));
    }

    fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self.failure.iter().cloned().collect();
        out.extend(self.publish_error.iter().map(|e| format!("publishing failed: {e}")));
        out.extend(self.push.undelivered());
        out
    }
}

/// The rounds as the clients received them. One result per round: with
/// topics, round k is sequence k of every topic, timed from its first
/// publish.
pub(super) fn push_report(
    args: &BenchConfig,
    rounds: &[Round],
    client: &ClientRun,
    summary: &ClientSummary,
    server_workers: usize,
    server_cpu_seconds: f64,
    broadcast_phase: Option<BroadcastPhase>,
) -> PushReport {
    let t = client.view.totals();
    let mut by_seq: std::collections::BTreeMap<u64, (u64, u64, f64)> = Default::default();
    for r in rounds {
        let e = by_seq.entry(r.seq).or_insert((u64::MAX, 0, 0.0));
        e.0 = e.0.min(r.publish_us);
        e.1 += r.queued;
        e.2 = e.2.max(r.request_ms);
    }
    let results: Vec<RoundResult> = by_seq
        .iter()
        .map(|(seq, (publish_us, queued, request_ms))| {
            let (n, last) = t.push_by_seq.get(seq).copied().unwrap_or((0, *publish_us));
            RoundResult { seq: *seq, deliveries: n, queued: *queued, time_to_all_ms: last.saturating_sub(*publish_us) as f64 / 1000.0, request_ms: *request_ms }
        })
        .collect();
    let expected = summary.held * results.len() as u64;
    let deliveries: u64 = results.iter().map(|r| r.deliveries).sum();
    PushReport {
        connections: summary.held,
        topics: args.topics,
        broadcasts: results.len() as u64,
        push_bytes: args.push_bytes,
        expected_deliveries: expected,
        deliveries,
        dropped: expected.saturating_sub(deliveries),
        duplicates: t.push_duplicates,
        gaps: t.push_gaps,
        time_to_all_ms: spread(results.iter().map(|r| r.time_to_all_ms).collect()),
        delivery_ms: histogram::summarize(&client.view.push_hist),
        rounds: results,
        heartbeats_sent: summary.heartbeats_sent,
        heartbeats_answered: summary.heartbeats_answered,
        server_workers,
        server_cpu_seconds,
        client_cpu_seconds: summary.cpu_seconds,
        broadcast_phase,
    }
}

/// The publisher thread: wait for the ramp, then publish on schedule
/// (through the admin API at `admin`, with its bearer `token` if any),
/// marking the broadcast phase's start and the last publish on `phase`.
pub(super) fn publish(
    admin: SocketAddr,
    token: Option<&str>,
    args: &BenchConfig,
    topics: &[String],
    ramp_done: &AtomicBool,
    rounds: &Mutex<Vec<Round>>,
    phase: Option<&PhaseSignals>,
) -> Result<()> {
    while !ramp_done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(SETTLE);
    if let Some(p) = phase {
        p.start();
    }
    let r = publish_rounds(admin, token, args, topics, rounds);
    if let Some(p) = phase {
        p.published();
    }
    r
}

/// Every round, on schedule. For MQTT clients (whose messages carry no
/// publish time or sequence) each message is a topic publish at
/// `--mqtt-qos` whose data begins with a [`Stamp`]: round k is sequence
/// k + 1, stamped with its intended publish time (each receipt's latency
/// is measured from it); the round's time to all is measured from the
/// server's publish stamp, as a framed round's is.
fn publish_rounds(admin: SocketAddr, token: Option<&str>, args: &BenchConfig, topics: &[String], rounds: &Mutex<Vec<Round>>) -> Result<()> {
    let payload = quotes(args.push_bytes);
    let mqtt = args.protocol == crate::proto::Protocol::Mqtt;
    let (start, wall_start) = (Instant::now(), crate::proto::push::wall_us());
    let paths: Vec<String> = match (topics.is_empty(), mqtt) {
        (true, false) => vec!["/broadcast".into()],
        (true, true) => vec![format!("/publish?topic={MQTT_PUSH_TOPIC}&qos={}", args.mqtt_qos)],
        (false, false) => topics.iter().map(|t| format!("/publish?topic={t}")).collect(),
        (false, true) => topics.iter().map(|t| format!("/publish?topic={t}&qos={}", args.mqtt_qos)).collect(),
    };
    let mut stamped = Vec::new();
    for k in 0..args.broadcasts {
        let offset = args.broadcast_interval * k as u32;
        std::thread::sleep((start + offset).saturating_duration_since(Instant::now()));
        let stamp = Stamp { publisher: BENCH_PUBLISHER, seq: k + 1, sent_us: wall_start + offset.as_micros() as u64 };
        for path in &paths {
            let r = if mqtt {
                stamped.clear();
                stamp.encode(&mut stamped, args.push_bytes, &payload);
                // Timed from the server's publish stamp, as the framed
                // rounds are (the stamp's intended time is the latency's).
                let r = publish_one(admin, path, &stamped, token)?;
                Round { seq: stamp.seq, publish_us: if r.publish_us > 0 { r.publish_us } else { stamp.sent_us }, ..r }
            } else {
                publish_one(admin, path, &payload, token)?
            };
            rounds.lock().expect("rounds").push(r);
        }
    }
    Ok(())
}

/// `n` bytes of what pushes usually carry: JSON records of market
/// quotes with varying numbers (a run of one letter would flatter
/// `--ws-deflate`, random bytes would wrong it).
fn quotes(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 96);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut seq = 0u32;
    out.push(b'[');
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        seq += 1;
        let side = if x & 1 == 0 { "buy" } else { "sell" };
        let rec = format!(
            "{{\"seq\":{seq},\"symbol\":\"S{:03}\",\"price\":{}.{:02},\"size\":{},\"side\":\"{side}\"}},",
            x % 500,
            50 + (x >> 9) % 150,
            (x >> 17) % 100,
            100 * (1 + (x >> 23) % 50)
        );
        out.extend_from_slice(rec.as_bytes());
    }
    out.truncate(n);
    out
}

/// One POST to the admin API (a publish or broadcast), as a [`Round`].
pub(super) fn publish_one(admin: SocketAddr, path: &str, payload: &[u8], token: Option<&str>) -> Result<Round> {
    let t0 = Instant::now();
    let (status, body) = crate::admin::client::request(admin, "POST", path, payload, token)?;
    if status != 200 {
        anyhow::bail!("POST {path} answered {status}: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body)?;
    Ok(Round {
        seq: v["seq"][0].as_u64().unwrap_or(0),
        publish_us: v["publish_us"].as_u64().unwrap_or(0),
        queued: v["queued"].as_u64().unwrap_or(0),
        request_ms: t0.elapsed().as_secs_f64() * 1000.0,
    })
}

pub(super) fn print_report(r: &PushReport) {
    println!(
        "push          {} broadcasts x {} connections{} | deliveries {} of {} expected | dropped {} | duplicates {} | gaps {}",
        r.broadcasts,
        format::count(r.connections),
        if r.topics > 0 { format!(" over {} topics", r.topics) } else { String::new() },
        format::count(r.deliveries),
        format::count(r.expected_deliveries),
        format::count(r.dropped),
        format::count(r.duplicates),
        format::count(r.gaps)
    );
    println!(
        "time to all   min {:.1} ms | median {:.1} ms | max {:.1} ms (publish stamp to the last connection's receipt)",
        r.time_to_all_ms.min, r.time_to_all_ms.median, r.time_to_all_ms.max
    );
    let l = &r.delivery_ms;
    println!("delivery      p50 {:.1} ms | p99 {:.1} ms | max {:.1} ms over {} receipts", l.p50_ms, l.p99_ms, l.max_ms, format::count(l.count));
    println!("cpu           server {:.1} s | client {:.1} s | {} server workers", r.server_cpu_seconds, r.client_cpu_seconds, r.server_workers);
    for line in r.broadcast_phase.iter().flat_map(BroadcastPhase::lines) {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::{PushReport, Spread};

    fn report(dropped: u64, duplicates: u64, gaps: u64) -> PushReport {
        PushReport {
            connections: 1000,
            topics: 0,
            broadcasts: 3,
            push_bytes: 64,
            expected_deliveries: 3000,
            deliveries: 3000 - dropped,
            dropped,
            duplicates,
            gaps,
            time_to_all_ms: Spread { min: 1000.0, median: 2000.0, max: 71_054.2 },
            delivery_ms: Default::default(),
            rounds: Vec::new(),
            heartbeats_sent: 0,
            heartbeats_answered: 0,
            server_workers: 1,
            server_cpu_seconds: 0.0,
            client_cpu_seconds: 0.0,
            broadcast_phase: None,
        }
    }

    /// Missing pushes with no gap are the ends of streams: the failure
    /// says they may still have been on their way and how to tell; with
    /// gaps it does not.
    #[test]
    fn undelivered_pushes_name_what_no_gaps_means() {
        assert_eq!(report(0, 0, 0).undelivered(), None);
        let tail = report(38, 0, 0).undelivered().expect("a failure");
        assert!(tail.starts_with("38 pushes were never delivered and 0 delivered twice;"), "{tail}");
        assert!(tail.contains("71.1 s") && tail.contains("--hold"), "{tail}");
        let holes = report(38, 0, 5).undelivered().expect("a failure");
        assert_eq!(holes, "38 pushes were never delivered and 0 delivered twice");
        assert_eq!(report(0, 2, 0).undelivered().as_deref(), Some("0 pushes were never delivered and 2 delivered twice"));
    }
}
