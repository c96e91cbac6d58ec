//! `--hdr-log FILE`: the run's latency as HdrHistogram interval logs (the
//! standard format HdrHistogram's tools read: one compressed histogram per
//! 500 ms interval and kind, tagged handshake/heartbeat/request/push,
//! timestamps in Unix seconds so shards from many hosts line up), and
//! `megaconn merge`, which adds shards' summaries and logs exactly.

use crate::client::run::{ClientSummary, PushSummary, RequestSummary};
use crate::client::series::Interval;
use crate::client::snapshot::ClientCounters;
use crate::client::thresholds::{self, Thresholds};
use crate::stats::histogram::LatencySummary;
use anyhow::{bail, Context, Result};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Write the intervals; `origin` is the wall-clock time of `origin_us`.
pub(crate) fn write(path: &Path, origin: SystemTime, origin_us: u64, intervals: &[Interval]) -> Result<()> {
    let mut out = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment("megaconn latency interval log: values in microseconds")
            .with_start_time(origin)
            .with_max_value_divisor(1000.0)
            .begin_log_with(&mut out, &mut ser)
            .context("starting the interval log")?;
        let at = |us: u64| (origin + Duration::from_micros(us.saturating_sub(origin_us))).duration_since(UNIX_EPOCH).unwrap_or_default();
        for i in intervals {
            for (tag, h) in &i.hists {
                let d = Duration::from_micros(i.end_us.saturating_sub(i.start_us));
                log.write_histogram(h, at(i.start_us), d, Tag::new(tag)).map_err(|e| anyhow::anyhow!("writing the interval log: {e:?}"))?;
            }
        }
    }
    std::fs::write(path, out).with_context(|| format!("writing --hdr-log {}", path.display()))
}

/// Histograms of a log, added up per tag.
pub(crate) fn read(path: &Path) -> Result<BTreeMap<String, Histogram<u64>>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let entry = entry.map_err(|e| anyhow::anyhow!("{} is not an HdrHistogram interval log: {e:?}", path.display()))?;
        if let LogEntry::Interval(h) = entry {
            let tag = h.tag().map_or("untagged".to_string(), |t| t.as_str().to_string());
            let raw = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, h.encoded_histogram())
                .with_context(|| format!("{}: an interval is not base64", path.display()))?;
            let hist: Histogram<u64> =
                Deserializer::new().deserialize(&mut raw.as_slice()).map_err(|e| anyhow::anyhow!("{}: an interval does not decode: {e:?}", path.display()))?;
            let into = out.entry(tag).or_insert_with(crate::stats::histogram::new);
            into.add(&hist).map_err(|e| anyhow::anyhow!("{}: {e:?}", path.display()))?;
        }
    }
    Ok(out)
}

/// What adds up across shards: every client counter, and the summary's
/// counts of connections (read from `--summary-json` files by name; the
/// round trip through a summary is tested below).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ShardCounts {
    #[serde(flatten)]
    pub counters: ClientCounters,
    pub requested: u64,
    pub established: u64,
    pub held: u64,
    pub failed_total: u64,
    pub lost_total: u64,
}

crate::counters_deref!(ShardCounts => ClientCounters);

impl ShardCounts {
    fn add(&mut self, o: &ShardCounts) {
        self.counters.add(&o.counters);
        self.requested += o.requested;
        self.established += o.established;
        self.held += o.held;
        self.failed_total += o.failed_total;
        self.lost_total += o.lost_total;
    }

    fn line(&self) -> String {
        let c = crate::stats::format::count;
        format!(
            "established {} of {} | held {} | failed {} | lost {} | heartbeats {}/{}",
            c(self.established),
            c(self.requested),
            c(self.held),
            c(self.failed_total),
            c(self.lost_total),
            c(self.heartbeats_answered),
            c(self.heartbeats_sent)
        )
    }
}

/// `megaconn merge FILES...`: summaries (`--summary-json`, *.json) and
/// interval logs (`--hdr-log`, anything else), in any order; thresholds
/// are checked on the merged numbers (exit 99 when one is crossed).
pub(crate) fn merge(files: &[PathBuf], json: bool, gate: &Thresholds) -> Result<i32> {
    let mut shards = Vec::new();
    let mut parts = Vec::new();
    let mut hists: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut logs = 0;
    for f in files {
        if f.extension().is_some_and(|e| e == "json") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?)
                .with_context(|| format!("{} is not JSON (a --summary-json file)", f.display()))?;
            let Some(summary) = v.get("summary") else {
                bail!("{} has no \"summary\": pass files written by megaconn client --summary-json", f.display());
            };
            let counts = ShardCounts::deserialize(summary).with_context(|| format!("{}: its summary is not a megaconn client summary", f.display()))?;
            let whole = ClientSummary::deserialize(summary).with_context(|| format!("{}: its summary is not a megaconn client summary", f.display()))?;
            parts.push(whole);
            shards.push((f.display().to_string(), v, counts));
        } else {
            for (tag, h) in read(f)? {
                hists.entry(tag).or_insert_with(crate::stats::histogram::new).add(&h).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            }
            logs += 1;
        }
    }
    if shards.is_empty() && logs == 0 {
        bail!("nothing to merge: pass --summary-json files and/or --hdr-log files");
    }
    let mut total = ShardCounts::default();
    for (_, _, c) in &shards {
        total.add(c);
    }
    let latency: BTreeMap<&String, crate::stats::histogram::LatencySummary> = hists.iter().map(|(k, h)| (k, crate::stats::histogram::summarize(h))).collect();
    let merged = merged_summary(&parts, &total, &latency);
    // No built-in verdict here: each shard had its own exit code.
    let judged = thresholds::judge(&merged, gate, true);
    let results: Vec<&thresholds::Checked> = judged.results.iter().filter(|r| r.kind != thresholds::Kind::BuiltIn).collect();
    let crossed = results.iter().filter(|r| !r.pass).count();
    let code = if crossed > 0 { thresholds::EXIT_CROSSED } else { 0 };
    if let Some(path) = &gate.junit {
        let only: Vec<thresholds::Checked> = results.iter().map(|r| (*r).clone()).collect();
        std::fs::write(path, thresholds::junit::render("merge", &only, None, merged.hold_seconds))
            .map_err(|e| crate::UsageError(format!("--junit {}: {e}; give a file this user can write", path.display())))?;
    }
    if json {
        let rows: Vec<Value> = shards.iter().map(|(f, v, _)| serde_json::json!({"file": f, "summary": v["summary"]})).collect();
        let doc = serde_json::json!({"shards": rows, "total": total, "latency_ms": latency, "logs": logs, "thresholds": results});
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    if let Some(why) = judged.why.filter(|_| crossed > 0) {
        eprintln!("megaconn merge: {why}");
    }
    if json {
        return Ok(code);
    }
    for (f, _, c) in &shards {
        println!("shard  {f}: {}", c.line());
    }
    println!("total  {} shards: {}", shards.len(), total.line());
    for (tag, l) in &latency {
        println!(
            "{tag:<10} {} samples from {logs} logs | p50 {:.2} | p90 {:.2} | p99 {:.2} | p99.9 {:.2} | max {:.2} ms (merged histograms, not averaged)",
            crate::stats::format::count(l.count),
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms
        );
    }
    let only: Vec<thresholds::Checked> = results.into_iter().cloned().collect();
    thresholds::print(&only, &mut std::io::stdout().lock())?;
    Ok(code)
}

/// One summary of the merged shards, for thresholds: counts add (QPS
/// too: shards ran side by side), latencies are the merged interval logs'
/// (handshake, heartbeat, request, push; none without logs), phases are
/// not merged (a per-phase threshold has no data here).
fn merged_summary(parts: &[ClientSummary], total: &ShardCounts, latency: &BTreeMap<&String, LatencySummary>) -> ClientSummary {
    let lat = |tag: &str| latency.iter().find(|(k, _)| k.as_str() == tag).map(|(_, l)| l.clone()).unwrap_or_default();
    let requests: Vec<&RequestSummary> = parts.iter().filter_map(|p| p.requests.as_ref()).collect();
    let pushes: Vec<&PushSummary> = parts.iter().filter_map(|p| p.push.as_ref()).collect();
    ClientSummary {
        counters: total.counters.clone(),
        requested: total.requested,
        established: total.established,
        held: total.held,
        failed_total: total.failed_total,
        lost_total: total.lost_total,
        not_attempted: parts.iter().map(|p| p.not_attempted).sum(),
        connect_ms: lat("handshake"),
        heartbeat_rtt_ms: lat("heartbeat"),
        requests: (!requests.is_empty()).then(|| RequestSummary {
            qps: requests.iter().map(|r| r.qps).sum(),
            offered_qps: requests.iter().map(|r| r.offered_qps).sum(),
            sent: requests.iter().map(|r| r.sent).sum(),
            replies: requests.iter().map(|r| r.replies).sum(),
            rejected: requests.iter().map(|r| r.rejected).sum(),
            timeouts: requests.iter().map(|r| r.timeouts).sum(),
            bad_echo: requests.iter().map(|r| r.bad_echo).sum(),
            latency_ms: lat("request"),
            ..Default::default()
        }),
        push: (!pushes.is_empty()).then(|| PushSummary {
            received: pushes.iter().map(|p| p.received).sum(),
            duplicates: pushes.iter().map(|p| p.duplicates).sum(),
            gaps: pushes.iter().map(|p| p.gaps).sum(),
            latency_ms: lat("push"),
            ..Default::default()
        }),
        hold_seconds: parts.iter().map(|p| p.hold_seconds).fold(0.0, f64::max),
        cpu_seconds: parts.iter().map(|p| p.cpu_seconds).sum(),
        interrupted: parts.iter().any(|p| p.interrupted),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::ShardCounts;
    use crate::client::run::ClientSummary;
    use crate::client::snapshot::ClientCounters;

    /// What merge reads by name is what a summary writes.
    #[test]
    fn a_summary_reads_back_as_shard_counts() {
        let s =
            ClientSummary { counters: ClientCounters::example(), requested: 5, established: 4, held: 3, failed_total: 2, lost_total: 1, ..Default::default() };
        let c: ShardCounts = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(c.counters, s.counters);
        assert_eq!((c.requested, c.established, c.held, c.failed_total, c.lost_total), (5, 4, 3, 2, 1));
    }
}
