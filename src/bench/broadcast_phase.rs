//! The broadcast phase of `bench --scenario push`, measured on its own:
//! the server's CPU seconds from just before the first publish until every
//! round has reached every connection the server wrote it to (or the hold
//! ends), and its permessage-deflate counters over the same phase. The
//! whole run's CPU includes the ramp, which at a million connections
//! dwarfs a few broadcasts: a run with and one without `--ws-deflate`
//! compare their broadcasts' CPU only through this phase.
//!
//! The publisher thread and the bench's loop meet here: the publisher
//! asks for the start mark and waits (bounded) until the loop has taken
//! it, so nothing it publishes is counted before the start; it says when
//! it has published everything, and the loop closes the phase once the
//! client has counted every receipt.
//!
//! CPU comes from `/proc/PID/stat` of the worker processes (read at the
//! moment, in clock ticks: 10 ms), not from their snapshots (up to a stats
//! interval old). The deflate counters come from the snapshots: they move
//! only with pushes and echoes, so a snapshot taken in the quiet before
//! the first publish and one at the end of the hold bracket the phase.

use super::push::Round;
use crate::client::run::ClientRun;
use crate::server::supervisor::fleet::ServerFleet;
use crate::server::supervisor::view::ServerTotals;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest the publisher waits for the start mark (the loop ticks every
/// 50 ms; a stuck loop must not stop the publishing).
const START_WAIT: Duration = Duration::from_secs(2);

/// What the publisher thread and the bench's loop tell each other.
#[derive(Debug, Default)]
pub(crate) struct PhaseSignals {
    /// The publisher is about to publish its first round.
    start_wanted: AtomicBool,
    /// The loop has taken the start mark.
    started: AtomicBool,
    /// The publisher has published every round (or given up).
    published: AtomicBool,
}

impl PhaseSignals {
    /// The publisher's side: ask for the start mark and wait until it is
    /// taken (at most [`START_WAIT`]).
    pub(crate) fn start(&self) {
        self.start_wanted.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + START_WAIT;
        while !self.started.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The publisher's side: nothing more will be published.
    pub(crate) fn published(&self) {
        self.published.store(true, Ordering::SeqCst);
    }
}

/// The server's permessage-deflate counters at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct DeflateCounters {
    calls: u64,
    bytes_before: u64,
    bytes_after: u64,
    compressed_out: u64,
}

impl DeflateCounters {
    fn of(t: &ServerTotals) -> Self {
        DeflateCounters {
            calls: t.ws_deflate_calls,
            bytes_before: t.ws_deflate_bytes_before,
            bytes_after: t.ws_deflate_bytes_after,
            compressed_out: t.ws_compressed_out,
        }
    }
}

/// What the loop saw at the start of the phase.
#[derive(Debug, Clone, Copy)]
struct Start {
    /// The server's workers' CPU seconds, and the client's.
    cpu_seconds: (f64, f64),
    deflate: DeflateCounters,
    /// Worker processes holding at least one connection.
    workers_holding: usize,
}

/// The bench loop's side: takes the marks as the signals and the
/// client's receipts say.
pub(crate) struct PhaseWatch {
    signals: Arc<PhaseSignals>,
    rounds: Arc<Mutex<Vec<Round>>>,
    start: Option<Start>,
    /// CPU seconds at the end (server, client), and whether every round
    /// was delivered by then.
    end: Option<((f64, f64), bool)>,
    deflate_end: Option<DeflateCounters>,
}

impl PhaseWatch {
    pub(crate) fn new(signals: Arc<PhaseSignals>, rounds: Arc<Mutex<Vec<Round>>>) -> PhaseWatch {
        PhaseWatch { signals, rounds, start: None, end: None, deflate_end: None }
    }

    /// Every tick of the bench's loop.
    pub(crate) fn tick(&mut self, fleet: &ServerFleet, client: &ClientRun) {
        if self.start.is_none() && self.signals.start_wanted.load(Ordering::SeqCst) {
            let live = fleet.live();
            let workers_holding = live.iter().filter(|i| fleet.view.get(**i).is_some_and(|s| s.active > 0)).count();
            self.start = Some(Start { cpu_seconds: both_cpu_seconds(fleet, client), deflate: DeflateCounters::of(&fleet.view.totals()), workers_holding });
            self.signals.started.store(true, Ordering::SeqCst);
        }
        if self.start.is_some() && self.end.is_none() && self.signals.published.load(Ordering::SeqCst) {
            let receipts = client.view.totals().push_by_seq;
            let rounds = self.rounds.lock().expect("rounds");
            if all_delivered(&rounds, &receipts) {
                self.end = Some((both_cpu_seconds(fleet, client), true));
            }
        }
    }

    /// When the hold ends (before anything closes): the end of the phase
    /// if the receipts have not ended it, and the deflate counters.
    pub(crate) fn hold_over(&mut self, fleet: &ServerFleet, client: &ClientRun) {
        if self.start.is_none() {
            return;
        }
        if self.end.is_none() {
            self.end = Some((both_cpu_seconds(fleet, client), false));
        }
        self.deflate_end = Some(DeflateCounters::of(&fleet.view.totals()));
    }

    /// The phase as measured; None if it never started (the ramp failed).
    pub(crate) fn report(&self) -> Option<BroadcastPhase> {
        let start = self.start?;
        let (end_cpu, delivered) = self.end?;
        let pushes = self.rounds.lock().expect("rounds").len() as u64;
        let d = self.deflate_end.unwrap_or(start.deflate);
        let cpu = (end_cpu.0 - start.cpu_seconds.0, end_cpu.1 - start.cpu_seconds.1);
        Some(BroadcastPhase::new(cpu, delivered, start.workers_holding, pushes, start.deflate, d))
    }
}

/// CPU seconds of the server's workers and of the client's, now.
fn both_cpu_seconds(fleet: &ServerFleet, client: &ClientRun) -> (f64, f64) {
    (cpu_seconds_of(&fleet.pids()), cpu_seconds_of(&client.pool.pids()))
}

/// Whether every round has been received as often as the server wrote it
/// (`receipts`: per sequence number, receipts and the last one's time).
fn all_delivered(rounds: &[Round], receipts: &std::collections::BTreeMap<u64, (u64, u64)>) -> bool {
    let mut queued: std::collections::BTreeMap<u64, u64> = Default::default();
    for r in rounds {
        *queued.entry(r.seq).or_insert(0) += r.queued;
    }
    !queued.is_empty() && queued.iter().all(|(seq, q)| receipts.get(seq).is_some_and(|(n, _)| n >= q))
}

/// The server's broadcast phase, as the summary and the JSON give it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct BroadcastPhase {
    /// CPU seconds of the server's workers from just before the first
    /// publish to the last receipt (or the end of the hold), 10 ms steps.
    pub cpu_seconds: f64,
    /// The client's workers' CPU seconds over the same span: both ends
    /// share this machine's cores, so a receiver that costs more per
    /// message delays the time to all as much as the server does.
    pub client_cpu_seconds: f64,
    /// Whether every round reached every connection it was written to
    /// before the hold ended (false: the phase ran to the hold's end).
    pub all_delivered: bool,
    /// Worker processes holding connections when the phase began.
    pub workers_holding: usize,
    /// Publishes made (broadcasts, or topic messages over all rounds).
    pub pushes: u64,
    /// The server's permessage-deflate work over the phase (None: nothing
    /// was compressed, e.g. no connection negotiated it).
    pub deflate: Option<DeflatePhase>,
}

/// permessage-deflate over a broadcast phase.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct DeflatePhase {
    /// Messages compressed.
    pub calls: u64,
    /// Per publish: one per worker holding subscribers is the design.
    pub calls_per_push: f64,
    /// Bytes of the messages compressed, before and after (payloads).
    pub message_bytes: u64,
    pub wire_bytes: u64,
    /// wire / message bytes.
    pub ratio: f64,
    /// Compressed messages written to connections.
    pub compressed_out: u64,
}

impl BroadcastPhase {
    fn new(
        (cpu_seconds, client_cpu_seconds): (f64, f64),
        all_delivered: bool,
        workers_holding: usize,
        pushes: u64,
        a: DeflateCounters,
        b: DeflateCounters,
    ) -> BroadcastPhase {
        let calls = b.calls.saturating_sub(a.calls);
        let (message_bytes, wire_bytes) = (b.bytes_before.saturating_sub(a.bytes_before), b.bytes_after.saturating_sub(a.bytes_after));
        let deflate = (calls > 0).then(|| DeflatePhase {
            calls,
            calls_per_push: calls as f64 / pushes.max(1) as f64,
            message_bytes,
            wire_bytes,
            ratio: if message_bytes > 0 { wire_bytes as f64 / message_bytes as f64 } else { 0.0 },
            compressed_out: b.compressed_out.saturating_sub(a.compressed_out),
        });
        BroadcastPhase { cpu_seconds: cpu_seconds.max(0.0), client_cpu_seconds: client_cpu_seconds.max(0.0), all_delivered, workers_holding, pushes, deflate }
    }

    /// The summary's lines.
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "broadcasts    server cpu {:.2} s, client cpu {:.2} s from the first publish to {} | {} workers holding connections",
            self.cpu_seconds,
            self.client_cpu_seconds,
            if self.all_delivered { "the last receipt" } else { "the end of the hold (not every receipt came)" },
            self.workers_holding
        )];
        if let Some(d) = &self.deflate {
            out.push(format!(
                "deflate       {} calls ({:.2} per push) | message bytes {} -> wire bytes {} (ratio {:.3}) | {} compressed messages out",
                d.calls, d.calls_per_push, d.message_bytes, d.wire_bytes, d.ratio, d.compressed_out
            ));
        }
        out
    }
}

/// User + system CPU seconds of these processes now (`/proc/PID/stat`);
/// a process gone is counted as 0.
pub(crate) fn cpu_seconds_of(pids: &[u32]) -> f64 {
    let ticks: u64 = pids.iter().filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok()).filter_map(|s| stat_cpu_ticks(&s)).sum();
    ticks as f64 / clock_ticks_per_second() as f64
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// utime + stime (clock ticks) of a `/proc/PID/stat` line: fields 14 and
/// 15, counted after the command name's closing parenthesis (the name
/// may hold spaces and parentheses).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_ticks_reads_utime_and_stime_past_an_awkward_name() {
        let line = "4242 (megaconn (w) 1) S 1 4242 4242 0 -1 4194560 1500 0 0 0 731 269 0 0 20 0 3 0 99 1000 200";
        assert_eq!(stat_cpu_ticks(line), Some(1000));
        assert_eq!(stat_cpu_ticks("4242 (x) S 1 2"), None);
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_has_spent_some_cpu() {
        // Spin until the kernel has charged at least one tick.
        let me = [std::process::id()];
        let t0 = Instant::now();
        while cpu_seconds_of(&me) == 0.0 && t0.elapsed() < Duration::from_secs(5) {
            std::hint::black_box((0..10_000u64).sum::<u64>());
        }
        assert!(cpu_seconds_of(&me) > 0.0);
        assert_eq!(cpu_seconds_of(&[u32::MAX]), 0.0, "no such process");
    }

    fn round(seq: u64, queued: u64) -> Round {
        Round { seq, publish_us: 0, queued, request_ms: 0.0 }
    }

    #[test]
    fn delivered_when_every_round_reached_what_the_server_queued() {
        let rounds = [round(1, 2), round(2, 1), round(2, 1)];
        let mut receipts = std::collections::BTreeMap::from([(1, (2, 0)), (2, (1, 0))]);
        assert!(!all_delivered(&rounds, &receipts), "round 2 went to 2 connections over its two topics");
        receipts.insert(2, (2, 0));
        assert!(all_delivered(&rounds, &receipts));
        assert!(!all_delivered(&[], &receipts), "nothing published is not a finished phase");
    }

    #[test]
    fn deflate_over_the_phase_is_the_difference_and_absent_without_calls() {
        let a = DeflateCounters { calls: 3, bytes_before: 100, bytes_after: 50, compressed_out: 3 };
        let b = DeflateCounters { calls: 13, bytes_before: 10_100, bytes_after: 4_050, compressed_out: 1_003 };
        let p = BroadcastPhase::new((1.5, 2.5), true, 2, 5, a, b);
        let d = p.deflate.clone().expect("deflate");
        assert_eq!((d.calls, d.message_bytes, d.wire_bytes, d.compressed_out), (10, 10_000, 4_000, 1_000));
        assert_eq!((d.calls_per_push, d.ratio), (2.0, 0.4));
        assert!(p.lines()[1].contains("2.00 per push") && p.lines()[1].contains("ratio 0.400"), "{:?}", p.lines());
        assert_eq!(BroadcastPhase::new((0.5, 0.7), false, 1, 5, a, a).deflate, None);
    }
}
