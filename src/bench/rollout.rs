//! `megaconn bench --scenario rollout --nodes 2`: a rolling restart
//! measured. The cluster bench runs as for push (nodes in namespaces,
//! nats-server with JetStream, a broadcast every second, published on the
//! last node), with every client reconnecting (`--reconnect`) and able
//! to reach every other node. A few seconds into the broadcasts node n0
//! gets SIGTERM: it closes its connections evenly over `--drain-period`,
//! each with a reconnect hint, and exits; the bench starts it again.
//! The clients move to another node and resume; the report says what
//! was lost or duplicated, how long re-homing took, and the reconnect
//! rate's peak against connections ÷ drain period.

use super::cluster::{Node, Secrets};
use super::BenchConfig;
use crate::client::run::ClientRun;
use crate::stats::format;
use crate::stats::histogram::LatencySummary;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The node that drains and restarts.
pub(crate) const ROLLED: usize = 0;
/// Broadcasts before the drain starts.
const BEFORE: Duration = Duration::from_secs(3);
/// Broadcasts kept going after the drain period, for the restart and
/// the last resumes.
const AFTER: Duration = Duration::from_secs(15);
/// Longest a restarted node may take to be healthy again is the cluster
/// bench's start timeout; the drain gets its period plus this.
const DRAIN_SLACK: Duration = Duration::from_secs(15);
/// Re-homing goal: within the drain period plus this.
const REHOME_SLACK: Duration = Duration::from_secs(10);
/// Reconnect peak goal: this many times connections ÷ drain period.
const PEAK_FACTOR: f64 = 1.2;

/// The nodes, shared with the thread that rolls one.
#[derive(Clone)]
pub(super) struct Nodes {
    pub list: Arc<Mutex<Vec<Node>>>,
    /// Set while the rolled node is down on purpose.
    pub rolling: Arc<AtomicBool>,
}

impl Nodes {
    pub(super) fn new(list: Vec<Node>) -> Nodes {
        Nodes { list: Arc::new(Mutex::new(list)), rolling: Arc::new(AtomicBool::new(false)) }
    }
}

/// Deliveries per second a rollout's broadcasts may ask of this machine by
/// default: a broadcast costs ~7 µs of CPU per connection here, both
/// ends on 2 cores (bench --scenario push: 1,000,000 in ~7.4 s), and the
/// drain's reconnects and resumes need the rest.
const DELIVERIES_PER_S: u64 = 50_000;

/// A broadcast every second, or as often as the machine keeps up with
/// at this many connections (one per connections ÷ 50,000 s).
pub(crate) fn default_interval(connections: u64) -> Duration {
    Duration::from_secs(connections.div_ceil(DELIVERIES_PER_S).max(1))
}

/// Broadcasts a rollout needs: before, through the drain, and after
/// (unless --broadcasts said how many).
pub(crate) fn broadcasts(args: &BenchConfig) -> u64 {
    let span = BEFORE + args.drain_period + AFTER;
    let needed = (span.as_secs_f64() / args.broadcast_interval.as_secs_f64()).ceil() as u64;
    if args.broadcasts > 0 {
        args.broadcasts
    } else {
        needed
    }
}

/// What the rolling thread saw.
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Roll {
    pub node: String,
    /// Connections the node held when it got SIGTERM.
    pub connections_on_node: u64,
    /// Seconds from the first broadcast to SIGTERM.
    pub started_after_s: f64,
    /// SIGTERM to exit (the drain), and exit to healthy again.
    pub drain_s: f64,
    pub restart_s: f64,
    /// It did not exit within the drain period + 15 s (and was killed).
    pub killed: bool,
    pub error: Option<String>,
}

/// Everything the rolling thread needs to stop and start node n0.
pub(super) struct Roller {
    pub nodes: Nodes,
    pub args: BenchConfig,
    pub capacity: u64,
    pub token: String,
    pub secrets: Arc<Secrets>,
    pub logs: String,
}

impl Roller {
    /// Wait for the broadcasts to start, drain node n0, start it again,
    /// and stay until `over`: the restarted node dies with the thread that
    /// started it (PR_SET_PDEATHSIG is per thread).
    pub(super) fn run(self, ramp_done: &AtomicBool, over: &AtomicBool) -> Roll {
        let roll = self.roll(ramp_done);
        while !over.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        roll
    }

    fn roll(&self, ramp_done: &AtomicBool) -> Roll {
        let mut roll = Roll { node: format!("n{ROLLED}"), ..Default::default() };
        while !ramp_done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let first = Instant::now() + super::push::SETTLE;
        std::thread::sleep(super::push::SETTLE + BEFORE);
        roll.started_after_s = first.elapsed().as_secs_f64();
        self.nodes.rolling.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        {
            let mut list = self.nodes.list.lock().expect("nodes");
            let node = &mut list[ROLLED];
            roll.connections_on_node = node.active();
            // Its exit is awaited outside the lock (the progress line reads the nodes).
            node.proc.signal_term();
        }
        let deadline = t0 + self.args.drain_period + DRAIN_SLACK;
        loop {
            if self.nodes.list.lock().expect("nodes")[ROLLED].proc.exited() {
                break;
            }
            if Instant::now() >= deadline {
                self.nodes.list.lock().expect("nodes")[ROLLED].proc.terminate(Duration::ZERO);
                roll.killed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        roll.drain_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let started = Node::start(ROLLED, &self.args, self.capacity, &self.token, &self.secrets, &self.logs).and_then(|mut n| {
            n.wait_healthy(&self.token)?;
            Ok(n)
        });
        match started {
            Ok(n) => {
                self.nodes.list.lock().expect("nodes")[ROLLED] = n;
                roll.restart_s = t1.elapsed().as_secs_f64();
                self.nodes.rolling.store(false, Ordering::SeqCst);
            }
            Err(e) => roll.error = Some(format!("restarting node n{ROLLED}: {e:#}")),
        }
        roll
    }
}

/// The rollout's verdict, in the JSON as `rollout`.
#[derive(Debug, Serialize)]
pub(crate) struct RolloutReport {
    #[serde(flatten)]
    pub roll: Roll,
    pub drain_period_s: f64,
    /// Broadcast deliveries that never came, and that came twice.
    pub lost: u64,
    pub duplicates: u64,
    /// Connections a reconnect hint moved, and reconnects in all.
    pub goaways: u64,
    pub reconnected: u64,
    /// Subscriptions resumed with everything missed, and not.
    pub recovered: u64,
    pub not_recovered: u64,
    /// From the hint to established on another node.
    pub rehome_ms: LatencySummary,
    /// Most reconnects completed in one second (whole seconds of the run).
    pub reconnect_peak_per_s: f64,
    /// Reconnects completed in each second, from the first to the last.
    pub reconnects_per_s: Vec<u64>,
    /// Goals: every connection re-homed within the drain period + 10 s;
    /// reconnect peak within 1.2 x connections / drain period.
    pub rehome_goal_ms: f64,
    pub reconnect_peak_goal_per_s: f64,
}

impl RolloutReport {
    pub(crate) fn new(
        args: &BenchConfig,
        roll: Roll,
        push: &super::push::PushReport,
        client: &ClientRun,
        summary: &crate::client::run::ClientSummary,
    ) -> RolloutReport {
        let by_s = client.view.totals().reconnects_by_s;
        let peak = by_s.values().copied().max().unwrap_or(0) as f64;
        let reconnects_per_s = match (by_s.keys().next(), by_s.keys().last()) {
            (Some(&a), Some(&b)) => (a..=b).map(|s| by_s.get(&s).copied().unwrap_or(0)).collect(),
            _ => Vec::new(),
        };
        let period = args.drain_period.as_secs_f64();
        RolloutReport {
            drain_period_s: period,
            lost: push.dropped,
            duplicates: push.duplicates,
            goaways: summary.goaways,
            reconnected: summary.reconnects,
            recovered: summary.resumes.get("recovered").copied().unwrap_or(0),
            not_recovered: summary.resumes.iter().filter(|(k, _)| k.as_str() != "recovered").map(|(_, v)| v).sum(),
            rehome_ms: summary.rehome_ms.clone().unwrap_or_default(),
            reconnect_peak_per_s: peak,
            reconnects_per_s,
            rehome_goal_ms: (args.drain_period + REHOME_SLACK).as_secs_f64() * 1000.0,
            reconnect_peak_goal_per_s: if period > 0.0 { PEAK_FACTOR * roll.connections_on_node as f64 / period } else { f64::INFINITY },
            roll,
        }
    }

    pub(crate) fn print(&self) {
        let r = &self.roll;
        println!(
            "rollout       node {} held {} connections; drained in {:.1} s (--drain-period {:.0} s){}, healthy again {:.1} s later",
            r.node,
            format::count(r.connections_on_node),
            r.drain_s,
            self.drain_period_s,
            if r.killed { ", then killed" } else { "" },
            r.restart_s
        );
        println!(
            "              lost {} | duplicated {} | moved by hint {} | reconnected {} | resumed: recovered {}, not {}",
            format::count(self.lost),
            format::count(self.duplicates),
            format::count(self.goaways),
            format::count(self.reconnected),
            format::count(self.recovered),
            format::count(self.not_recovered)
        );
        let ok = |b: bool| if b { "within goal" } else { "OVER goal" };
        println!(
            "              re-homed p50 {:.0} ms | p99 {:.0} ms | max {:.0} ms ({} of {:.0} ms) | reconnect peak {}/s ({} of {}/s)",
            self.rehome_ms.p50_ms,
            self.rehome_ms.p99_ms,
            self.rehome_ms.max_ms,
            ok(self.rehome_ms.max_ms <= self.rehome_goal_ms),
            self.rehome_goal_ms,
            format::count(self.reconnect_peak_per_s as u64),
            ok(self.reconnect_peak_per_s <= self.reconnect_peak_goal_per_s),
            format::count(self.reconnect_peak_goal_per_s as u64)
        );
    }

    pub(crate) fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self.roll.error.iter().cloned().collect();
        if self.roll.connections_on_node > 0 && self.goaways == 0 {
            out.push(format!("node {} drained {} connections but no client was told to move", self.roll.node, self.roll.connections_on_node));
        }
        out
    }
}
