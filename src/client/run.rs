//! One load run as the supervisor drives it: ramp -> hold -> close, with
//! progress and the final summary. Shared by `megaconn client` and
//! `megaconn bench` (which also runs a server beside it).

use super::config::{LoadConfig, Traffic};
use super::phases::{PhaseResult, Phases};
use super::plan::ConnectionPlan;
use super::series::{Counters, Series};
use super::snapshot::{ClientCounters, ClientEvent, ClientMsg, ClientSnapshot};
use super::view::{ClientView, WORKER_CRASHED};
use super::worker::ClientWorkerConfig;
use crate::stats::format;
use crate::stats::histogram::{self, LatencySummary};
use crate::supervise::control::CMD_CLOSE;
use crate::supervise::plan::WorkerPlan;
use crate::supervise::{Pool, PoolEvent, Sink};
use crate::sys::mono_us;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The reason of planned connections still queued or connecting when
/// the summary was made (no worker settled them).
pub(crate) const UNSETTLED: &str = "unsettled";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ramp,
    /// `--stages`: stage `index` is under way (instead of ramp and hold).
    Stages {
        index: usize,
    },
    Hold {
        until_us: u64,
    },
    /// Hold is over; waiting for the caller to call `close()`.
    HoldOver,
    Closing {
        since_us: u64,
    },
    Finished,
}

/// What a tick observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tick {
    Continue,
    /// Every planned connection has resolved (established or failed).
    RampDone,
    /// Hold time is up; call `close()` when ready.
    HoldOver,
    Finished,
}

/// Read back too (reports, `merge`): a field an older file lacks is
/// zero/empty.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ClientSummary {
    /// Every counter, summed over the workers (the names `/metrics` uses
    /// without the prefix).
    #[serde(flatten)]
    pub counters: ClientCounters,
    /// What the connections spoke and sent.
    pub mode: String,
    /// The workers' reactor for what connections received (uring or epoll).
    pub io: crate::uring::Io,
    /// Connections asked for (the plan's share of this client).
    pub requested: u64,
    /// Connections that completed the handshake (`established_total`).
    pub established: u64,
    /// Connections still open when the hold ended.
    pub held: u64,
    pub failed_total: u64,
    /// Requested connections neither established nor failed: never
    /// attempted, each with its reason in `not_attempted_by` (requested =
    /// established + failed + this, exactly).
    pub not_attempted: u64,
    pub lost_total: u64,
    /// Why connections were lost, in one sentence (None: nothing lost).
    pub loss: Option<String>,
    pub ramp_seconds: Option<f64>,
    pub ramp_rate_per_s: Option<f64>,
    pub connect_ms: LatencySummary,
    /// The handshake by stage ("tcp", "tls", "upgrade"), for the stages
    /// the connections went through.
    pub stages_ms: BTreeMap<String, LatencySummary>,
    /// Present when the connections spoke TLS.
    pub tls: Option<TlsSummary>,
    pub heartbeat_rtt_ms: LatencySummary,
    pub requests: Option<RequestSummary>,
    /// Present when any push arrived.
    pub push: Option<PushSummary>,
    /// From a draining server's reconnect hint to established again
    /// (present when a server drained with --reconnect on).
    pub rehome_ms: Option<LatencySummary>,
    /// The same run split into ramp, hold and close.
    pub phases: Vec<PhaseResult>,
    pub hold_seconds: f64,
    pub workers: usize,
    pub source_addresses: u64,
    pub ports: usize,
    pub cpu_seconds: f64,
    pub interrupted: bool,
    /// The `--threshold-abort` that stopped the run early, as it was
    /// measured then (None: the run was not stopped by one).
    pub stopped_by: Option<super::thresholds::Checked>,
}

crate::counters_deref!(ClientSummary => ClientCounters);

/// After the workers' ramp deadline (when they stop starting connections),
/// how long the supervisor waits beyond the connect timeout for the
/// handshakes in flight to settle and for the reports of a busy worker to
/// arrive, before it ends the ramp with them unsettled.
const SETTLE_GRACE_US: u64 = 10_000_000;
/// The longest the supervisor waits for the workers' reports from a stage
/// boundary before it marks the boundary with what it has.
const STAGE_REPORT_GRACE_US: u64 = 1_000_000;
/// A closing worker that has sent no report for this long is stopped
/// (a worker that closes reports between its batches).
const CLOSE_SILENCE_US: u64 = 20_000_000;
/// The longest a close may take, however busy the machine: workers not
/// done by then are stopped.
const CLOSE_LIMIT_US: u64 = 120_000_000;

/// Handshakes per second per core the ramp's time bound assumes over TLS
/// (measured here: ~1,500 full handshakes/s per core, both ends counted).
const TLS_FLOOR_PER_CORE: u64 = 500;
/// CONNECTs per second per core the ramp's time bound assumes for MQTT,
/// whose CONNACK waits for the server supervisor's client id registry
/// (measured here: a million in ~70 s on two cores, ~7,000/s per core;
/// at 50,000/s offered, a bound of twice what that rate needs ended one
/// such ramp at 945,390).
const MQTT_FLOOR_PER_CORE: u64 = 5_000;

/// The pace a ramp's time bound assumes: the offered `rate`, or less
/// where the handshakes set it (TLS, MQTT) on this many cores.
fn ramp_pace(rate: u64, traffic: &Traffic, cores: u64) -> u64 {
    let mut pace = rate;
    if traffic.tls.is_some() {
        pace = pace.min(TLS_FLOOR_PER_CORE * cores);
    }
    if traffic.protocol == crate::proto::Protocol::Mqtt {
        pace = pace.min(MQTT_FLOOR_PER_CORE * cores);
    }
    pace
}

/// TLS handshakes: how many, how many resumed, how long they took.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TlsSummary {
    pub handshakes: u64,
    pub resumed: u64,
    pub handshake_ms: LatencySummary,
}

/// Pushes received (`--subscribe`, broadcasts, unicasts).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PushSummary {
    pub received: u64,
    pub duplicates: u64,
    /// Offsets skipped within a stream on a connection, and messages a
    /// resume could not recover.
    pub gaps: u64,
    /// Pushes that came in a new epoch (the server lost the history).
    pub epoch_changes: u64,
    /// Resumes after a reconnect, by result (recovered, lost).
    pub resumes: BTreeMap<String, u64>,
    /// Per topic ("*": broadcasts).
    pub topics: BTreeMap<String, u64>,
    /// From the publish stamp (server's CLOCK_REALTIME) to receipt.
    pub latency_ms: LatencySummary,
}

/// Request results, present when `--request-rate` was set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RequestSummary {
    /// Replies per second during the hold.
    pub qps: f64,
    /// What the schedule offered: connections x rate.
    pub offered_qps: f64,
    pub sent: u64,
    pub replies: u64,
    pub rejected: u64,
    /// Replies later than --request-timeout plus requests never answered.
    pub timeouts: u64,
    pub bad_echo: u64,
    /// HTTP responses by status class.
    pub http_status: BTreeMap<String, u64>,
    /// Latency from the intended send time (open loop).
    pub latency_ms: LatencySummary,
}

pub(crate) struct ClientRun {
    pub pool: Pool,
    /// The workers' shares (replaced when a worker dies, with --reconnect).
    shares: super::replace::Shares,
    /// Crashes and other events not yet printed.
    pub notes: Vec<String>,
    /// Why each worker still closing was stopped (for its exit's note).
    stopped_why: BTreeMap<usize, String>,
    pub view: ClientView,
    start_at_us: u64,
    hold: Duration,
    until_pushes: Option<u64>,
    ramp_deadline_us: u64,
    phase: Phase,
    held: u64,
    hold_started_us: Option<u64>,
    hold_ended_us: Option<u64>,
    interrupted: bool,
    source_addresses: u64,
    io: crate::uring::Io,
    ports: usize,
    prev_est: u64,
    prev_at_us: u64,
    last_rate: f64,
    /// `--churn`: reopens at the last progress line, and their rate.
    prev_churn: u64,
    last_churn_rate: f64,
    prev_replies: u64,
    /// Per worker (snapshot µs, replies) when the hold started and ended:
    /// QPS from exact snapshot times, not from when we happened to look.
    replies_at_hold: Vec<Option<(u64, u64)>>,
    replies_at_close: Vec<Option<(u64, u64)>>,
    request_rate: Option<f64>,
    /// What the connections speak and send, in one line.
    mode: String,
    phases: Phases,
    /// Sampled every 500 ms for `--report`.
    pub series: Series,
    finished_us: Option<u64>,
    /// Wall-clock time of the planned start (`start_at_us`).
    pub origin_wall: std::time::SystemTime,
    /// `--threshold-abort`: checked live, next at `abort_check_us`.
    abort: Vec<super::thresholds::Threshold>,
    abort_check_us: u64,
    /// The one that stopped the run, as measured then.
    stopped_by: Option<super::thresholds::Checked>,
    /// `--stages`, each stage's request rate resolved against
    /// `--request-rate`.
    stages: Option<super::stages::Stages>,
}

impl ClientRun {
    pub(crate) fn start(plan: &ConnectionPlan, load: &LoadConfig, workers: &WorkerPlan, fd_limit: Option<u64>, sink: &Sink<ClientEvent>) -> Result<ClientRun> {
        let w = workers.workers.min(plan.count.max(1) as usize);
        // Processes take a while to start; everyone ramps from one instant.
        let start_at_us = match load.start_at {
            // The plan checked it is ahead; the monotonic clock does not jump.
            Some(t) => mono_us() + t.duration_since(std::time::SystemTime::now()).unwrap_or_default().as_micros() as u64,
            None => mono_us() + 300_000 + 5_000 * w as u64,
        };
        // The ramp is given twice what the offered rate needs, or, over
        // TLS (where the handshakes' CPU sets the pace, ~3,000/s on two
        // cores here), twice what TLS_FLOOR_PER_CORE handshakes/s per core
        // need, and for MQTT what MQTT_FLOOR_PER_CORE CONNECTs/s per core
        // need: a bound on the run, never a wait (it ends when done).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let pace = ramp_pace(load.rate, &load.traffic, cores);
        let ramp_us = (plan.count as f64 / pace.max(1) as f64 * 1e6) as u64;
        // Workers start no connection after `last_start_us`; the ramp
        // ends when every connection settled, or at `ramp_deadline_us`
        // (the handshakes then in flight had their connect timeout).
        let mut last_start_us = start_at_us + ramp_us * 2 + 30_000_000;
        let mut ramp_deadline_us = last_start_us + load.traffic.connect_timeout.as_micros() as u64 + SETTLE_GRACE_US;
        let mut deadline_us = ramp_deadline_us + load.hold.as_micros() as u64 + 60_000_000;
        let mut traffic = load.traffic.clone();
        let stages = plan.stages.clone().map(|mut s| {
            for stage in &mut s.0 {
                stage.request_rate = stage.request_rate.or(load.traffic.request_rate);
            }
            // Requests in some stage: the connections speak as with
            // --request-rate (a raw or ws --message goes on that schedule).
            traffic.request_rate = traffic.request_rate.or(s.0.iter().filter_map(|x| x.request_rate).reduce(f64::max));
            // The stages set the time: connections open until their end.
            last_start_us = start_at_us + s.total_us();
            ramp_deadline_us = last_start_us;
            deadline_us = last_start_us + load.traffic.connect_timeout.as_micros() as u64 + 60_000_000;
            s
        });
        // Heartbeats start once the ramp is done: an MQTT keep-alive
        // covers the ramp up to its deadline (stages set no ramp).
        if stages.is_none() {
            traffic.mqtt.ramp_s = u32::try_from(ramp_deadline_us.saturating_sub(start_at_us).div_ceil(1_000_000)).unwrap_or(u32::MAX);
        }
        // Worker i's share: with --stages the g % w == i of every stage
        // target (so a share of the highest bounds its share of each),
        // else a contiguous slice of the plan.
        let slice = |i: usize| match &stages {
            Some(_) => {
                let lo: u64 = (0..i as u64).map(|j| super::stages::share_of(plan.count, j, w as u64)).sum();
                (lo, lo + super::stages::share_of(plan.count, i as u64, w as u64))
            }
            None => (plan.count * i as u64 / w as u64, plan.count * (i as u64 + 1) / w as u64),
        };
        let configs: Vec<(ClientWorkerConfig, Option<i32>)> = (0..w)
            .map(|i| {
                let (lo, hi) = slice(i);
                let share = stages.as_ref().map(|s| s.share(i as u64, w as u64));
                let config = ClientWorkerConfig {
                    worker: i,
                    target: load.nodes.get(i % load.nodes.len().max(1)).map_or(plan.target, |n| n.target),
                    elsewhere: load
                        .nodes
                        .get(i % load.nodes.len().max(1))
                        .map_or(&[][..], |n| &n.elsewhere)
                        .iter()
                        .chain(&load.traffic.reconnect_to)
                        .copied()
                        .collect(),
                    ports: plan.ports.clone(),
                    source_ranges: plan.source_ranges.clone(),
                    first: plan.first + lo,
                    count: hi - lo,
                    rate: match &share {
                        Some(s) => s.steepest_rate() as f64,
                        None if plan.count > 0 => load.rate as f64 * (hi - lo) as f64 / plan.count as f64,
                        None => load.rate as f64,
                    },
                    start_at_us,
                    ramp_deadline_us: last_start_us,
                    // Every 500 ms at most: the report's time series samples that often.
                    stats_interval_ms: load.stats_interval.as_millis().clamp(100, 500) as u64,
                    deadline_us,
                    churn_us: load.churn.map(|r| (1e6 * plan.count.max(1) as f64 / r / (hi - lo).max(1) as f64) as u64),
                    traffic: traffic.clone(),
                    shard: plan.shard_index,
                    checkpoint: None,
                    io: plan.io,
                    stages: share,
                };
                (config, load.nodes.get(i % load.nodes.len().max(1)).and_then(|n| n.netns_fd).or(load.netns_fd))
            })
            .collect();
        let to = sink.clone();
        let mut pool = Pool::new(super::WORKER_KIND, fd_limit, std::sync::Arc::new(move |(i, ev)| to(ClientEvent::Worker(i, ev))))?;
        pool.set_nice(load.nice);
        let mut shares = super::replace::Shares::new(configs)?;
        shares.spawn_all(&mut pool)?;
        Ok(ClientRun {
            pool,
            shares,
            notes: Vec::new(),
            stopped_why: BTreeMap::new(),
            view: ClientView::new(w),
            start_at_us,
            hold: load.hold,
            until_pushes: load.until_pushes,
            ramp_deadline_us,
            phase: if stages.is_some() { Phase::Stages { index: 0 } } else { Phase::Ramp },
            held: 0,
            hold_started_us: None,
            hold_ended_us: None,
            interrupted: false,
            source_addresses: plan.source_count,
            io: plan.io,
            ports: plan.ports.len(),
            prev_est: 0,
            prev_at_us: start_at_us,
            last_rate: 0.0,
            prev_churn: 0,
            last_churn_rate: 0.0,
            prev_replies: 0,
            replies_at_hold: Vec::new(),
            replies_at_close: Vec::new(),
            request_rate: traffic.request_rate,
            mode: super::summary::describe_mode(plan.target, load),
            phases: match stages {
                Some(_) => Phases::starting(super::stages::name(0), start_at_us),
                None => Phases::new(start_at_us),
            },
            series: Series::new(start_at_us),
            finished_us: None,
            origin_wall: std::time::SystemTime::now() + Duration::from_micros(start_at_us.saturating_sub(mono_us())),
            abort: load.thresholds.abort.clone(),
            abort_check_us: start_at_us + super::thresholds::ABORT_GRACE.as_micros() as u64,
            stopped_by: None,
            stages,
        })
    }

    /// Take one worker event. A worker that dies before its final
    /// snapshot costs its connections (counted lost as `worker_crashed`),
    /// not the run.
    pub(crate) fn on_event(&mut self, i: usize, ev: PoolEvent<ClientMsg>) {
        match ev {
            PoolEvent::Msg(ClientMsg::Client(s)) => self.update(*s),
            PoolEvent::Msg(ClientMsg::Fatal { message, .. }) => self.notes.push(format!("client worker {i}: {message}")),
            PoolEvent::Garbled(line) => self.notes.push(format!("client worker {i} wrote a line that is not a message: {line}")),
            PoolEvent::Exited(info) => {
                self.pool.mark_exited(i);
                if self.phase == Phase::Finished && !self.view.is_finished(i) {
                    // Stopped by us after the close timeout: its connections
                    // were held to the end; they are not losses.
                    self.view.stopped(i);
                    let why = self.stopped_why.remove(&i).unwrap_or_default();
                    self.notes.push(format!("client worker {i} did not finish closing and was stopped ({info}): {why}"));
                } else if !self.view.is_finished(i) {
                    self.replace(i, info);
                }
            }
            PoolEvent::Msg(ClientMsg::Ready { .. }) => {}
        }
    }

    /// Worker `i` died mid-run: with `--reconnect` another takes its
    /// share from its last snapshot; otherwise (or after too many
    /// replacements) its connections are lost.
    fn replace(&mut self, i: usize, info: impl std::fmt::Display) {
        let from = self.view.checkpoint_of(i);
        let replaced = if matches!(self.phase, Phase::Closing { .. } | Phase::Finished) { None } else { self.shares.replace(&mut self.pool, i, from) };
        match replaced {
            Some(Ok(j)) => {
                self.view.replaced(i);
                self.view.add_worker();
                self.notes.push(format!(
                    "client worker {i} ({info}): replaced by worker {j}, which reopens its {} connections and resumes them from its last report",
                    format::count(self.shares.count_of(j))
                ));
            }
            Some(Err(e)) => {
                let lost = self.view.retire(i);
                self.notes.push(format!("client worker {i} ({info}): {lost} connections lost ({WORKER_CRASHED}); its replacement did not start: {e:#}"));
            }
            None => {
                let lost = self.view.retire(i);
                let why = if self.shares.exhausted(i) {
                    format!("; its share was replaced {} times already", super::replace::MAX_REPLACEMENTS)
                } else {
                    String::new()
                };
                self.notes.push(format!("client worker {i} ({info}): {lost} connections lost ({WORKER_CRASHED}){why}"));
            }
        }
    }

    fn update(&mut self, s: ClientSnapshot) {
        let h = super::view::Intervals::of(&s);
        self.phases.record(s.at_us, &h);
        self.series.record(&h);
        self.view.update(s, &h);
    }

    /// An outage: every worker closes all its connections at once and
    /// opens nothing until [`ClientRun::rejoin`] (bench --scenario recovery).
    pub(crate) fn outage(&mut self) {
        self.pool.broadcast(super::worker::outage::CMD_OUTAGE);
    }

    /// The end of the outage: every closed connection reconnects now and resumes.
    pub(crate) fn rejoin(&mut self) {
        self.pool.broadcast(super::worker::outage::CMD_REJOIN);
    }

    /// Ask the workers to drain and close (also on Ctrl-C).
    pub(crate) fn close(&mut self) {
        if !matches!(self.phase, Phase::Closing { .. } | Phase::Finished) {
            let now = mono_us();
            if self.hold_started_us.is_some() && self.hold_ended_us.is_none() {
                self.hold_ended_us = Some(now);
            }
            let t = self.view.totals();
            // A connection --churn is reopening right now is held by
            // intent: it was closed on purpose, not lost.
            let churning = t.churn_closed.saturating_sub(t.churn_reopened + t.churn_failed.values().sum::<u64>());
            // So is one a step down of --stages closed.
            self.held = t.open + churning + t.stage_closed;
            self.replies_at_close = self.view.reply_marks();
            self.phases.enter("close", &t, now);
            self.pool.broadcast(CMD_CLOSE);
            self.phase = Phase::Closing { since_us: now };
        }
    }

    /// The monotonic µs the ramp started from (the series' origin).
    pub(crate) fn origin_us(&self) -> u64 {
        self.start_at_us
    }

    pub(crate) fn interrupt(&mut self) {
        self.interrupted = true;
        self.close();
    }

    pub(crate) fn tick(&mut self) -> Tick {
        let now = mono_us();
        let t = self.view.totals();
        if self.series.due(now) && self.phase != Phase::Finished && now >= self.start_at_us {
            let c = Counters {
                open: t.open,
                connecting: t.connecting,
                established_total: t.established_total,
                failed: t.failed.values().sum(),
                lost: t.lost.values().sum(),
                reconnects: t.reconnects,
                replies: t.replies,
                cpu_seconds: t.cpu_seconds,
                rss_bytes: t.rss_bytes,
            };
            self.series.sample(now, self.phase_name(), c);
        }
        if let Phase::Stages { index } = self.phase {
            if let Some(tick) = self.follow_stages(index, now, &t) {
                return tick;
            }
        }
        match self.phase {
            Phase::Ramp if t.ramp_done_at_us.is_some() || now >= self.ramp_deadline_us => {
                let why = self.ramp_end(&t);
                if t.ramp_done_at_us.is_none() || !t.not_attempted_by.is_empty() {
                    // Not every connection opened: said when it happens too.
                    self.notes.push(format!("ramp ended: {why}"));
                }
                self.phases.end_with(why);
                // Nothing to hold (every attempt failed): do not wait
                // out the hold for nothing.
                let hold = if t.open == 0 { 0 } else { self.hold.as_micros() as u64 };
                self.phase = Phase::Hold { until_us: now + hold };
                self.pool.broadcast(&format!("{} {}", super::worker::schedule::CMD_HOLD_UNTIL, now + hold));
                self.hold_started_us = Some(now);
                self.replies_at_hold = self.view.reply_marks();
                // The ramp ended when its last connection resolved, not
                // when the workers' reports of it arrived.
                self.phases.enter("hold", &t, t.ramp_done_at_us.unwrap_or(now).min(now));
                return Tick::RampDone;
            }
            Phase::Hold { until_us } if now >= until_us || self.until_pushes.is_some_and(|n| t.push_received >= n) => {
                if let Some(n) = self.until_pushes {
                    let c = format::count;
                    self.notes.push(if t.push_received >= n {
                        format!("hold ended: {} pushes received (--until-pushes {})", c(t.push_received), c(n))
                    } else {
                        format!("hold ended at its deadline with {} of the {} pushes --until-pushes waited for", c(t.push_received), c(n))
                    });
                }
                self.phase = Phase::HoldOver;
                self.hold_ended_us = Some(now);
                return Tick::HoldOver;
            }
            Phase::Closing { since_us } if self.view.finished() == self.view.worker_count() || self.close_stuck(since_us, now) => {
                self.stopped_why = (0..self.view.worker_count())
                    .filter(|i| !self.view.is_finished(*i))
                    .map(|i| (i, self.view.why_not_closed(i, now, now >= since_us + CLOSE_LIMIT_US)))
                    .collect();
                self.phase = Phase::Finished;
                self.finished_us = Some(now);
                self.pool.stop(Duration::from_secs(2));
                return Tick::Finished;
            }
            Phase::Ramp | Phase::Stages { .. } | Phase::Hold { .. } if !self.abort.is_empty() && now >= self.abort_check_us => self.check_abort(now),
            _ => {}
        }
        if self.phase == Phase::Finished {
            Tick::Finished
        } else {
            Tick::Continue
        }
    }

    /// `--stages`: a new stage's phase starts at its planned start; after
    /// the last one the run is over (as a hold is: the caller closes).
    fn follow_stages(&mut self, index: usize, now: u64, t: &super::view::ClientTotals) -> Option<Tick> {
        let stages = self.stages.as_ref()?;
        let end_us = self.start_at_us + stages.total_us();
        let current = stages.index_at(now.saturating_sub(self.start_at_us));
        let entered: Vec<(usize, u64)> =
            (index + 1..=current.max(index)).map(|j| (j, self.start_at_us + stages.start_of_us(j))).filter(|(_, at)| *at <= now).collect();
        for (j, at) in entered {
            if !self.reported_since(at, now) {
                return None;
            }
            self.phases.enter(super::stages::name(j), t, at);
            self.phase = Phase::Stages { index: j };
        }
        if now < end_us || !self.reported_since(end_us, now) {
            return None;
        }
        // Nothing more to hold: the close follows at once.
        self.phase = Phase::Hold { until_us: now };
        self.hold_started_us = Some(now);
        Some(Tick::RampDone)
    }

    /// Whether every worker still running has reported as of `at_us` (a
    /// stage boundary: workers report the moment they pass one), so the
    /// phase marks taken now are the counts at the boundary, not a report
    /// older; after [`STAGE_REPORT_GRACE_US`] a late worker is not waited for.
    fn reported_since(&self, at_us: u64, now: u64) -> bool {
        now >= at_us + STAGE_REPORT_GRACE_US
            || (0..self.view.worker_count()).all(|i| self.view.is_finished(i) || self.view.last_report_us(i).is_some_and(|r| r >= at_us))
    }

    /// `--threshold-abort` on the numbers so far: the first one crossed
    /// stops the run (the close starts now; the summary says why).
    fn check_abort(&mut self, now: u64) {
        self.abort_check_us = now + super::thresholds::ABORT_EVERY.as_micros() as u64;
        let mut live = self.summary();
        // Nothing is "held at the end of the hold" yet: what is open is.
        live.held = self.view.totals().open;
        if let Some(crossed) = super::thresholds::crossed_live(&self.abort, &live) {
            self.notes.push(format!("--threshold-abort {} crossed (measured {}): stopping the run early", crossed.expr, crossed.measured));
            self.stopped_by = Some(crossed);
            self.close();
        }
    }

    /// Why the ramp ends now, in one sentence: every connection settled
    /// (with what did not open, and why), or the deadline with how many
    /// were not settled.
    fn ramp_end(&self, t: &super::view::ClientTotals) -> String {
        let c = format::count;
        let not_attempted: u64 = t.not_attempted_by.values().sum();
        let failed: u64 = t.failed.values().sum();
        if t.ramp_done_at_us.is_some() {
            let why = if not_attempted > 0 { format!(" ({})", format::kinds(&t.not_attempted_by)) } else { String::new() };
            return format!("every connection settled: {} established, {} failed, {} not attempted{why}", c(t.established_total), c(failed), c(not_attempted));
        }
        format!(
            "the ramp's deadline ({:.0} s from its start) passed with {} connections not settled ({} connecting, {} queued, the rest in workers whose reports did not come): a busy machine, or a --rate above what it sustains",
            self.ramp_deadline_us.saturating_sub(self.start_at_us) as f64 / 1e6,
            c(t.planned.saturating_sub(t.established_total + failed + not_attempted)),
            c(t.connecting),
            c(t.queued)
        )
    }

    /// The close has gone on too long: every worker not done has been
    /// silent for [`CLOSE_SILENCE_US`], or [`CLOSE_LIMIT_US`] has passed.
    /// A worker still reporting (closing in batches) is given the time.
    fn close_stuck(&self, since_us: u64, now: u64) -> bool {
        if now >= since_us + CLOSE_LIMIT_US {
            return true;
        }
        now >= since_us + CLOSE_SILENCE_US
            && (0..self.view.worker_count())
                .filter(|i| !self.view.is_finished(*i))
                .all(|i| now.saturating_sub(self.view.last_report_us(i).unwrap_or(0)) >= CLOSE_SILENCE_US)
    }

    /// Each phase so far, the current one up to now (its latency
    /// percentiles what the workers reported by now): `/stats` "phases".
    pub(crate) fn phases_so_far(&self) -> Vec<PhaseResult> {
        self.phases.results(&self.view.totals(), self.finished_us.unwrap_or_else(mono_us))
    }

    pub(crate) fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Ramp => "ramp",
            Phase::Stages { index } => super::stages::name(index),
            Phase::Hold { .. } | Phase::HoldOver => "hold",
            Phase::Closing { .. } => "closing",
            Phase::Finished => "done",
        }
    }

    /// One progress line: phase, counts, rate since the last line.
    pub(crate) fn progress_line(&mut self) -> String {
        let t = self.view.totals();
        let now = mono_us();
        let dt = (now.saturating_sub(self.prev_at_us)) as f64 / 1e6;
        if dt >= 0.5 {
            self.last_rate = t.established_total.saturating_sub(self.prev_est) as f64 / dt;
            self.last_churn_rate = t.churn_reopened.saturating_sub(self.prev_churn) as f64 / dt;
            self.prev_est = t.established_total;
            self.prev_churn = t.churn_reopened;
            self.prev_at_us = now;
        }
        let churn = if t.churn_closed > 0 {
            let failed: u64 = t.churn_failed.values().sum();
            format!(
                " | churn {}/s{}",
                format::count(self.last_churn_rate as u64),
                if failed > 0 { format!(" ({} failed)", format::count(failed)) } else { String::new() }
            )
        } else {
            String::new()
        };
        let rate = self.last_rate;
        let rtt = self.view.take_interval_rtt();
        let failed: u64 = t.failed.values().sum();
        let requests = if self.request_rate.is_some() {
            let lat = self.view.take_interval_requests();
            let qps = if dt >= 0.5 { t.replies.saturating_sub(self.prev_replies) as f64 / dt } else { 0.0 };
            self.prev_replies = t.replies;
            format!(
                " | qps {} avg {:.1}ms p50 {:.1}ms p99 {:.1}ms max {:.1}ms{}",
                format::count(qps as u64),
                lat.mean_ms,
                lat.p50_ms,
                lat.p99_ms,
                lat.max_ms,
                if t.rejected > 0 { format!(" rejected {}", format::count(t.rejected)) } else { String::new() }
            )
        } else {
            String::new()
        };
        // Every state a planned connection can be in, so the line adds up.
        let not_attempted: u64 = t.not_attempted_by.values().sum();
        let lost: u64 = t.lost.values().sum();
        let more = [
            (not_attempted, format!(" | not attempted {}", format::kinds(&t.not_attempted_by))),
            (lost, format!(" | lost {}", format::count(lost))),
            (t.heartbeats_unanswered, format!(" unanswered {}", format::count(t.heartbeats_unanswered))),
        ];
        let [not_attempted, lost, unanswered] = more.map(|(n, s)| if n > 0 { s } else { String::new() });
        // With --stages: which stage, and the target now and at its end.
        let phase = match (&self.stages, self.phase) {
            (Some(s), Phase::Stages { index }) => format!(
                "{} of {} (target {} -> {})",
                self.phase_name(),
                s.0.len(),
                format::count(s.target_at(now.saturating_sub(self.start_at_us))),
                format::count(s.0[index].target)
            ),
            _ => self.phase_name().to_string(),
        };
        format!(
            "{:<7} open {}/{} ({}/s) | connecting {} | queued {} | failed {}{not_attempted}{lost} | heartbeats {}/{}{unanswered} rtt p99 {:.1}ms",
            phase,
            format::count(t.open),
            format::count(t.planned),
            format::count(rate as u64),
            format::count(t.connecting),
            format::count(t.queued),
            if failed == 0 { "0".into() } else { format::kinds(&t.failed) },
            format::count(t.heartbeats_answered),
            format::count(t.heartbeats_sent),
            rtt.p99_ms
        ) + &churn
            + &requests
    }

    pub(crate) fn summary(&self) -> ClientSummary {
        let t = self.view.totals();
        // Stages have no ramp to time (their phases say how each went).
        let ramp_seconds = t.ramp_done_at_us.filter(|_| self.stages.is_none()).map(|d| d.saturating_sub(self.start_at_us) as f64 / 1e6);
        let phases = self.phases.results(&t, self.finished_us.unwrap_or_else(mono_us));
        let failed_total: u64 = t.failed.values().sum();
        let mut counters = t.counters.clone();
        // Whatever no worker settled by the end (a run cut short, a
        // report that never came) is named too, so the sum is exact.
        let unsettled = t.planned.saturating_sub(t.established_total + failed_total + t.not_attempted_by.values().sum::<u64>());
        if unsettled > 0 {
            *counters.not_attempted_by.entry(UNSETTLED.into()).or_insert(0) += unsettled;
        }
        ClientSummary {
            mode: self.mode.clone(),
            io: self.io,
            requested: t.planned,
            established: t.established_total,
            held: self.held,
            failed_total,
            not_attempted: counters.not_attempted_by.values().sum(),
            lost_total: t.lost.values().sum(),
            loss: super::summary::loss_verdict(&t.lost, t.lost_unanswered),
            ramp_seconds,
            // Handshakes of the ramp only (not churn reopens or reconnects later).
            ramp_rate_per_s: ramp_seconds.filter(|s| *s > 0.0).map(|s| phases.first().map_or(t.established_total, |p| p.established) as f64 / s),
            connect_ms: histogram::summarize(&self.view.connect_hist),
            stages_ms: self.view.stage_hists.iter().map(|(k, h)| (k.clone(), histogram::summarize(h))).collect(),
            tls: self.view.stage_hists.get("tls").map(|h| TlsSummary {
                handshakes: t.tls_handshakes,
                resumed: t.tls_resumed,
                handshake_ms: histogram::summarize(h),
            }),
            heartbeat_rtt_ms: histogram::summarize(&self.view.rtt_hist),
            rehome_ms: (!self.view.rehome_hist.is_empty()).then(|| histogram::summarize(&self.view.rehome_hist)),
            requests: self.request_rate.map(|rate| {
                let qps: f64 = self
                    .replies_at_hold
                    .iter()
                    .zip(&self.replies_at_close)
                    .filter_map(|(a, b)| match (a, b) {
                        (Some((t0, r0)), Some((t1, r1))) if t1 > t0 => Some((r1 - r0) as f64 / ((t1 - t0) as f64 / 1e6)),
                        _ => None,
                    })
                    .sum();
                let outstanding = t.requests_sent.saturating_sub(t.replies + t.rejected);
                // With --stages there is no hold: over the stages' time,
                // against what their targets and rates offered.
                let (qps, offered_qps) = match &self.stages {
                    Some(s) => {
                        let seconds = (s.total_us() as f64 / 1e6).max(1e-3);
                        (t.replies as f64 / seconds, s.offered_requests() / seconds)
                    }
                    None => (qps, rate * t.planned as f64),
                };
                RequestSummary {
                    qps,
                    offered_qps,
                    sent: t.requests_sent,
                    replies: t.replies,
                    rejected: t.rejected,
                    timeouts: t.late + outstanding,
                    bad_echo: t.bad_echo,
                    http_status: t.http_status.clone(),
                    latency_ms: histogram::summarize(&self.view.request_hist),
                }
            }),
            push: (t.push_received > 0 || !t.resumes.is_empty()).then(|| PushSummary {
                received: t.push_received,
                duplicates: t.push_duplicates,
                gaps: t.push_gaps,
                epoch_changes: t.push_epoch_changes,
                resumes: t.resumes.clone(),
                topics: t.push_topics.clone(),
                latency_ms: histogram::summarize(&self.view.push_hist),
            }),
            phases,
            hold_seconds: match (self.hold_started_us, self.hold_ended_us) {
                (Some(a), Some(b)) => (b - a) as f64 / 1e6,
                _ => 0.0,
            },
            workers: self.view.worker_count(),
            source_addresses: self.source_addresses,
            ports: self.ports,
            cpu_seconds: t.cpu_seconds,
            interrupted: self.interrupted,
            stopped_by: self.stopped_by.clone(),
            counters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Protocol;

    /// The ramp's bound assumes the offered rate, or the pace TLS or
    /// MQTT handshakes keep on these cores when that is lower.
    #[test]
    fn a_ramps_bound_assumes_the_pace_its_handshakes_keep() {
        let plain = Traffic { protocol: Protocol::Framed, ..Traffic::default() };
        let mqtt = Traffic { protocol: Protocol::Mqtt, ..Traffic::default() };
        assert_eq!(ramp_pace(50_000, &plain, 2), 50_000);
        assert_eq!(ramp_pace(50_000, &mqtt, 2), 2 * MQTT_FLOOR_PER_CORE);
        assert_eq!(ramp_pace(1_000, &mqtt, 2), 1_000, "a slower offered rate is the pace");
    }
}
