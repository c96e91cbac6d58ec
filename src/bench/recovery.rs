//! `megaconn bench --scenario recovery`: what a reconnect storm costs
//! with history. N connections (each on one of `--topics T`, or on the
//! broadcasts), every one resuming (`--reconnect`). First K messages per
//! stream (`--broadcasts K`, default 100) are published back to back
//! while everyone is connected, and timed from the first publish to the
//! last receipt: the live time. Then every connection drops at once (an
//! outage), K more per stream are published to nobody, and everyone
//! reconnects at once and resumes: the time from that rejoin to the last
//! recovered receipt, against the live time (goal: within 2x), every
//! message counted once. The server's history memory comes from
//! `/metrics` at the end (goal: 1.2 x payload + 64 B per message).

use super::pair::PairRun;
use super::push::{publish_one, Round};
use super::BenchConfig;
use crate::client::run::{ClientRun, ClientSummary};
use crate::stats::histogram::LatencySummary;
use crate::stats::{format, progress::Progress};
use anyhow::{bail, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Goal: recovering takes at most this many times the live deliveries.
pub(crate) const RATIO_GOAL: f64 = 2.0;
/// Goal: history memory per message, over its payload.
const PAYLOAD_FACTOR: f64 = 1.2;
const RECORD_GOAL: f64 = 64.0;
/// Publishers working at once (a message per topic, across the topics).
const PUBLISHERS: usize = 8;
/// Longest wait for a step (the outage, every delivery), beyond what the
/// deliveries need at this many per second.
const STEP_SLACK: Duration = Duration::from_secs(120);
const DELIVERIES_PER_S_FLOOR: u64 = 100_000;

/// What the script asks of the client, through the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Outage,
    Rejoin,
    Close,
}

/// The client as the script sees it (updated every tick), and what the
/// script asks of it.
#[derive(Default)]
struct Board {
    open: u64,
    connecting: u64,
    server_active: u64,
    by_seq: BTreeMap<u64, (u64, u64)>,
    cmd: Option<Cmd>,
    /// The client is done (the script's waits end).
    over: bool,
}

/// One batch of K messages per stream as the clients received it.
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Batch {
    pub expected: u64,
    pub deliveries: u64,
    /// Seconds the publishing took.
    pub publish_s: f64,
    /// From the first publish (live) or the rejoin (recovery) to the last receipt.
    pub time_to_all_ms: f64,
}

/// The scenario's verdict, in the JSON as `recovery`.
#[derive(Debug, Default, Serialize)]
pub(crate) struct RecoveryReport {
    pub connections: u64,
    pub topics: u64,
    pub messages_per_stream: u64,
    pub push_bytes: usize,
    pub live: Batch,
    /// Connections the outage closed.
    pub outage_closed: u64,
    pub recovery: Batch,
    /// Rejoin to established again, per connection.
    pub reconnect_ms: LatencySummary,
    pub resumed_recovered: u64,
    pub resumed_lost: u64,
    pub duplicates: u64,
    pub gaps: u64,
    /// recovery.time_to_all_ms / live.time_to_all_ms, and its goal.
    pub ratio: f64,
    pub ratio_goal: f64,
    /// The server's history at the end (`/metrics`).
    pub history_messages: u64,
    pub history_memory_bytes: u64,
    pub history_bytes_per_message: f64,
    pub history_goal_bytes_per_message: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct RecoveryOutcome {
    pub recovery: RecoveryReport,
    pub client: ClientSummary,
    pub topology: crate::topology::Placement,
    #[serde(skip)]
    pub failure: Option<String>,
}

/// A plan that cannot recover what it publishes, as a usage error.
pub(crate) fn check(args: &BenchConfig) -> Result<(), crate::UsageError> {
    let k = args.broadcasts;
    if k == 0 || args.history < k as usize {
        return Err(crate::UsageError(format!(
            "--scenario recovery has each connection recover --broadcasts {k} messages per stream, which needs --history of at least that (got --history {}): raise --history or lower --broadcasts (1 or more)",
            args.history
        )));
    }
    if args.nodes > 1 || args.cluster.is_some() {
        return Err(crate::UsageError(
            "--scenario recovery runs one server (drop --nodes/--cluster); a cluster's resumes across nodes are measured by --scenario rollout".into(),
        ));
    }
    Ok(())
}

pub(crate) fn run(args: BenchConfig, placement: &crate::topology::Placement) -> Result<i32> {
    let k = args.broadcasts;
    let mut server_cfg = super::server_config(&args, args.connections);
    server_cfg.admin = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let topics: Vec<String> = (0..args.topics).map(|t| format!("room-{t}")).collect();
    // The script ends the run; this only bounds it.
    let mut client_cfg = super::client_config(&args, args.hold.unwrap_or(Duration::from_secs(3600)));
    client_cfg.load.traffic.subscribe = topics.clone();
    client_cfg.load.traffic.subscribe_spread = true;
    client_cfg.load.traffic.reconnect = true;
    let super::outcome::PairPlan { server: splan, client: cplan, client_workers: cwplan } = super::outcome::plan_pair(&server_cfg, &client_cfg)?;
    crate::tune::precheck(args.connections, crate::tune::plan::TuneRole::Both, args.ports.len() as u64, args.rate)?;
    let mut progress = Progress::new(false);
    let streams = if topics.is_empty() { "the broadcasts".to_string() } else { format!("{} topics", topics.len()) };
    progress.note(&format!(
        "recovery bench: {} connections on {streams}; {k} messages per stream live, then an outage, {k} more, and everyone back at once | {}",
        format::count(args.connections),
        crate::client::describe(&cplan, &cwplan)
    ));
    let ch = super::pair::PairChannel::default();
    let server = ch.start_server(&server_cfg, &splan)?;
    let to = ch.server.clone();
    let admin = crate::admin::serve(
        crate::admin::Scope::Full,
        server_cfg.admin.expect("set above"),
        None,
        Arc::new(move |r| to(crate::server::supervisor::ServerEvent::Admin(r))),
        Default::default(),
    )?;
    let client = ClientRun::start(&cplan, &client_cfg.load, &cwplan, None, &ch.client)?;
    let ramp_done = Arc::new(AtomicBool::new(false));
    let board = Arc::new(Mutex::new(Board::default()));
    let script = {
        let (ramp_done, board, args) = (ramp_done.clone(), board.clone(), args.clone());
        std::thread::spawn(move || {
            let mut report = RecoveryReport::default();
            let script = Script { admin, args: &args, topics: &topics, board: &board };
            if let Err(e) = script.run(&ramp_done, &mut report) {
                report.error = Some(format!("{e:#}"));
            }
            board.lock().expect("board").cmd = Some(Cmd::Close);
            report
        })
    };
    let sample = |_: &crate::server::supervisor::fleet::ServerFleet, _: &ClientRun| ();
    let mut pair = PairRun::new(server, client, &mut progress, sample);
    pair.ramp_done = Some(ramp_done.clone());
    let director_board = board.clone();
    pair.director = Some(Box::new(move |client: &mut ClientRun, server_active: u64| direct(&director_board, client, server_active)));
    let run = pair.run(&ch.rx);
    {
        let mut b = board.lock().expect("board");
        b.over = true;
    }
    ramp_done.store(true, Ordering::SeqCst);
    let mut report = script.join().map_err(|_| anyhow::anyhow!("the recovery script panicked"))?;
    run?;
    let failure = pair.failure.take();
    let summary = pair.client.summary();
    if report.connections == 0 {
        report.connections = summary.held;
    }
    report.reconnect_ms = summary.rehome_ms.clone().unwrap_or_default();
    report.resumed_recovered = summary.resumes.get("recovered").copied().unwrap_or(0);
    report.resumed_lost = summary.resumes.iter().filter(|(k, _)| k.as_str() != "recovered").map(|(_, v)| v).sum();
    let t = pair.client.view.totals();
    (report.duplicates, report.gaps, report.outage_closed) = (t.push_duplicates, t.push_gaps, t.outage_closed);
    let outcome = RecoveryOutcome { recovery: report, client: summary, topology: placement.clone(), failure };
    let plan = serde_json::json!({"client": cplan, "client_workers": cwplan, "messages_per_stream": k, "topics": args.topics, "push_bytes": args.push_bytes});
    super::outcome::finish(args.report.as_deref(), args.json, &pair.client, plan, placement, &outcome, &args.thresholds, &mut progress)
}

/// Every tick, on the supervisor loop: show the script the client, and
/// carry out what it asked.
fn direct(board: &Mutex<Board>, client: &mut ClientRun, server_active: u64) {
    let t = client.view.totals();
    let mut b = board.lock().expect("board");
    (b.open, b.connecting, b.server_active) = (t.open, t.connecting, server_active);
    b.by_seq = t.push_by_seq;
    match b.cmd.take() {
        Some(Cmd::Outage) => client.outage(),
        Some(Cmd::Rejoin) => client.rejoin(),
        Some(Cmd::Close) => client.close(),
        None => {}
    }
}

struct Script<'a> {
    admin: SocketAddr,
    args: &'a BenchConfig,
    topics: &'a [String],
    board: &'a Mutex<Board>,
}

impl Script<'_> {
    fn run(&self, ramp_done: &AtomicBool, report: &mut RecoveryReport) -> Result<()> {
        let k = self.args.broadcasts;
        (report.topics, report.messages_per_stream, report.push_bytes) = (self.args.topics, k, self.args.push_bytes);
        report.ratio_goal = RATIO_GOAL;
        report.history_goal_bytes_per_message = PAYLOAD_FACTOR * self.args.push_bytes as f64 + RECORD_GOAL;
        while !ramp_done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(super::push::SETTLE);
        let held = self.board.lock().expect("board").open;
        report.connections = held;
        if held == 0 {
            bail!("no connection was established, so nothing can be recovered");
        }
        let step = STEP_SLACK + Duration::from_secs(held * k / DELIVERIES_PER_S_FLOOR);

        // Live: everyone connected.
        let t0 = Instant::now();
        let live = self.publish(1..=k)?;
        report.live.publish_s = t0.elapsed().as_secs_f64();
        let first = live.iter().map(|r| r.publish_us).min().unwrap_or(0);
        report.live = self.delivered(report.live.publish_s, 1..=k, held, first, step)?;

        // The outage: nobody connected while K more are published.
        self.ask(Cmd::Outage);
        self.wait(step, "the outage (every connection closed, on both ends)", |b| b.open == 0 && b.connecting == 0 && b.server_active == 0)?;
        let t1 = Instant::now();
        self.publish(k + 1..=2 * k)?;
        let publish_s = t1.elapsed().as_secs_f64();

        // Everyone back at once.
        let rejoin = crate::proto::push::wall_us();
        self.ask(Cmd::Rejoin);
        report.recovery = self.delivered(publish_s, k + 1..=2 * k, held, rejoin, step)?;
        report.ratio = if report.live.time_to_all_ms > 0.0 { report.recovery.time_to_all_ms / report.live.time_to_all_ms } else { 0.0 };
        let (messages, bytes) = history_metrics(self.admin)?;
        report.history_messages = messages;
        report.history_memory_bytes = bytes;
        report.history_bytes_per_message = if messages > 0 { bytes as f64 / messages as f64 } else { 0.0 };
        Ok(())
    }

    fn ask(&self, cmd: Cmd) {
        self.board.lock().expect("board").cmd = Some(cmd);
    }

    /// Wait (polling the board) until `done`, or fail naming `what`.
    fn wait(&self, within: Duration, what: &str, done: impl Fn(&Board) -> bool) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            {
                let b = self.board.lock().expect("board");
                if done(&b) {
                    return Ok(());
                }
                if b.over {
                    bail!("the client ended before {what}");
                }
            }
            if Instant::now() >= deadline {
                bail!("{what} did not happen within {} s", within.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until every one of `held` connections has message `seqs` of
    /// its stream; the batch as received, timed from `from_us`.
    fn delivered(&self, publish_s: f64, seqs: std::ops::RangeInclusive<u64>, held: u64, from_us: u64, within: Duration) -> Result<Batch> {
        let expected = held * (seqs.end() - seqs.start() + 1);
        let all = |b: &Board| seqs.clone().all(|s| b.by_seq.get(&s).is_some_and(|(n, _)| *n >= held));
        let waited = self.wait(within, &format!("delivery of messages {}..={} to every connection", seqs.start(), seqs.end()), all);
        let b = self.board.lock().expect("board");
        let deliveries = seqs.clone().map(|s| b.by_seq.get(&s).map_or(0, |(n, _)| *n)).sum();
        let last = seqs.clone().filter_map(|s| b.by_seq.get(&s).map(|(_, at)| *at)).max().unwrap_or(from_us);
        drop(b);
        waited?;
        Ok(Batch { expected, deliveries, publish_s, time_to_all_ms: last.saturating_sub(from_us) as f64 / 1000.0 })
    }

    /// Publish messages `seqs` on every stream (back to back; the topics
    /// by several publishers at once, each message's offsets in order).
    fn publish(&self, seqs: std::ops::RangeInclusive<u64>) -> Result<Vec<Round>> {
        let payload = vec![b'm'; self.args.push_bytes];
        let rounds = Mutex::new(Vec::new());
        if self.topics.is_empty() {
            for _ in seqs {
                rounds.lock().expect("rounds").push(publish_one(self.admin, "/broadcast", &payload, None)?);
            }
            return Ok(rounds.into_inner().expect("rounds"));
        }
        let share = self.topics.len().div_ceil(PUBLISHERS);
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .topics
                .chunks(share)
                .map(|mine| {
                    let (payload, rounds, seqs) = (&payload, &rounds, seqs.clone());
                    s.spawn(move || -> Result<()> {
                        for _ in seqs {
                            for t in mine {
                                let r = publish_one(self.admin, &format!("/publish?topic={t}"), payload, None)?;
                                rounds.lock().expect("rounds").push(r);
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a publisher panicked"))?)
        })?;
        Ok(rounds.into_inner().expect("rounds"))
    }
}

/// (messages kept, bytes held) by the server's history, from `/metrics`.
fn history_metrics(admin: SocketAddr) -> Result<(u64, u64)> {
    let (status, body) = crate::admin::client::request(admin, "GET", "/metrics", b"", None)?;
    if status != 200 {
        bail!("GET /metrics answered {status}");
    }
    let value = |name: &str| {
        body.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0) as u64
    };
    Ok((value("megaconn_history_messages"), value("megaconn_history_memory_bytes")))
}

impl super::outcome::Outcome for RecoveryOutcome {
    fn kind(&self) -> &'static str {
        "bench recovery"
    }

    fn summary(&self) -> &ClientSummary {
        &self.client
    }

    fn print(&self) {
        let r = &self.recovery;
        let on = if r.topics > 0 { format!("{} topics", r.topics) } else { "the broadcasts".into() };
        println!(
            "live          {} messages per stream on {on} to {} connections: {} of {} delivered, last {:.0} ms after the first publish (published in {:.1} s)",
            r.messages_per_stream,
            format::count(r.connections),
            format::count(r.live.deliveries),
            format::count(r.live.expected),
            r.live.time_to_all_ms,
            r.live.publish_s
        );
        println!(
            "recovery      outage closed {}; {} more per stream published in {:.1} s; back at once: {} of {} recovered, last {:.0} ms after the rejoin ({:.2}x live, goal {:.1}x: {})",
            format::count(r.outage_closed),
            r.messages_per_stream,
            r.recovery.publish_s,
            format::count(r.recovery.deliveries),
            format::count(r.recovery.expected),
            r.recovery.time_to_all_ms,
            r.ratio,
            r.ratio_goal,
            if r.ratio <= r.ratio_goal { "met" } else { "NOT met" }
        );
        println!(
            "              reconnected p50 {:.0} ms | p99 {:.0} ms | max {:.0} ms | resumes recovered {}, lost {} | duplicates {} | gaps {}",
            r.reconnect_ms.p50_ms,
            r.reconnect_ms.p99_ms,
            r.reconnect_ms.max_ms,
            format::count(r.resumed_recovered),
            format::count(r.resumed_lost),
            format::count(r.duplicates),
            format::count(r.gaps)
        );
        println!(
            "history       {} messages in {}: {:.0} B per message of {} B payload (goal {:.0} B: {})",
            format::count(r.history_messages),
            format::bytes(r.history_memory_bytes),
            r.history_bytes_per_message,
            r.push_bytes,
            r.history_goal_bytes_per_message,
            if r.history_bytes_per_message <= r.history_goal_bytes_per_message { "met" } else { "NOT met" }
        );
    }

    fn failures(&self) -> Vec<String> {
        let r = &self.recovery;
        let mut out: Vec<String> = self.failure.iter().cloned().collect();
        out.extend(r.error.iter().cloned());
        for (what, b) in [("live", &r.live), ("recovered", &r.recovery)] {
            if b.deliveries < b.expected {
                out.push(format!("{} of {} {what} deliveries never came", format::count(b.expected - b.deliveries), format::count(b.expected)));
            }
        }
        if r.duplicates > 0 || r.gaps > 0 || r.resumed_lost > 0 {
            out.push(format!("{} duplicates, {} gaps and {} resumes the history could not serve", r.duplicates, r.gaps, r.resumed_lost));
        }
        out
    }
}
