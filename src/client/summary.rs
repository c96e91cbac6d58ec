//! The client summary for people, and the one sentence on why
//! connections were lost.

use super::config::LoadConfig;
use super::run::ClientSummary;
use super::view::WORKER_CRASHED;
use crate::proto::Protocol;
use crate::stats::format;
use crate::stats::histogram::LatencySummary;
use crate::stats::progress::Progress;
use std::collections::BTreeMap;

/// Print the client summary for people.
pub(crate) fn print_summary(s: &ClientSummary, progress: &mut Progress) {
    progress.finish();
    let ms = |l: &LatencySummary| format!("p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms", l.p50_ms, l.p99_ms, l.max_ms);
    println!("protocol      {}", s.mode);
    println!(
        "connections   requested {} | established {} | held at end of hold {} | failed {}",
        format::count(s.requested),
        format::count(s.established),
        format::count(s.held),
        format::count(s.failed_total)
    );
    if s.failed_total > 0 {
        println!("failures      {}", format::kinds(&s.failed));
    }
    if s.not_attempted > 0 {
        println!(
            "not attempted {} | {} (ramp_deadline: the ramp's deadline passed before their turn, a --rate this machine did not sustain; run_closed: the run ended first)",
            format::count(s.not_attempted),
            format::kinds(&s.not_attempted_by)
        );
    }
    for p in s.phases.iter().filter(|p| p.end.is_some()) {
        println!("{:<13} ended: {}", p.name, p.end.as_deref().unwrap_or_default());
    }
    if !s.lost.is_empty() {
        println!("lost          {} | {}", format::kinds(&s.lost), s.loss.as_deref().unwrap_or(""));
    }
    if s.stage_closed > 0 {
        // Steps down of --stages: closed on purpose, counted as held.
        println!("stages        {} connections closed by steps down (held, not lost)", format::count(s.stage_closed));
    }
    if s.churn_closed > 0 {
        println!(
            "churn         closed {} | reopened {} | failed reopens {}",
            format::count(s.churn_closed),
            format::count(s.churn_reopened),
            if s.churn_failed.is_empty() { "0".into() } else { format::kinds(&s.churn_failed) }
        );
    }
    if s.reconnects > 0 || !s.reconnect_failed.is_empty() {
        println!("reconnects    {} | failed attempts {}", format::count(s.reconnects), format::kinds(&s.reconnect_failed));
    }
    if s.goaways > 0 {
        let rehome = s.rehome_ms.as_ref().map(|r| format!(" | re-homed in p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms", r.p50_ms, r.p99_ms, r.max_ms));
        println!("goaways       {} (a draining server's reconnect hints){}", format::count(s.goaways), rehome.unwrap_or_default());
    }
    match (s.ramp_seconds, s.ramp_rate_per_s) {
        (Some(t), Some(r)) => println!("ramp          {t:.2} s at {} connections/s", format::count(r as u64)),
        // --stages: no single ramp; the phase table has every stage.
        _ if s.phases.first().is_some_and(|p| crate::client::stages::index_of(&p.name).is_some()) => {}
        _ => println!("ramp          did not complete"),
    }
    println!("handshake     {}", ms(&s.connect_ms));
    if s.stages_ms.len() > 1 {
        for (stage, l) in &s.stages_ms {
            let tls = match &s.tls {
                Some(t) if stage == "tls" => format!(" | {} handshakes, {} resumed", format::count(t.handshakes), format::count(t.resumed)),
                _ => String::new(),
            };
            println!("  {stage:<11} {}{tls}", ms(l));
        }
    }
    let mut abandoned =
        if s.heartbeats_abandoned > 0 { format!(" | abandoned {} (connection closed first)", format::count(s.heartbeats_abandoned)) } else { String::new() };
    if s.heartbeats_unanswered > 0 {
        abandoned += &format!(" | unanswered {} (not within --request-timeout)", format::count(s.heartbeats_unanswered));
    }
    println!(
        "heartbeats    sent {} | answered {}{abandoned} | round trip {}",
        format::count(s.heartbeats_sent),
        format::count(s.heartbeats_answered),
        ms(&s.heartbeat_rtt_ms)
    );
    if let Some(r) = &s.requests {
        let l = &r.latency_ms;
        println!(
            "requests      qps {:.1} (offered {:.1}) | sent {} | replies {} | rejected {} | timeouts {} | bad echoes {}",
            r.qps,
            r.offered_qps,
            format::count(r.sent),
            format::count(r.replies),
            format::count(r.rejected),
            format::count(r.timeouts),
            format::count(r.bad_echo)
        );
        if !r.http_status.is_empty() {
            println!("http status   {}", format::kinds(&r.http_status));
        }
        println!(
            "latency       avg {:.2} ms | p50 {:.2} | p90 {:.2} | p99 {:.2} | p99.9 {:.2} | max {:.2} ms (from intended send time)",
            l.mean_ms, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
        );
    }
    if s.raw_bytes_in > 0 {
        println!("raw           {} bytes, {} whole messages received", format::count(s.raw_bytes_in), format::count(s.raw_messages_in));
    }
    if let Some(p) = &s.push {
        let l = &p.latency_ms;
        println!(
            "pushes        received {} | duplicates {} | gaps {} | delivery p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (from publish time)",
            format::count(p.received),
            format::count(p.duplicates),
            format::count(p.gaps),
            l.p50_ms,
            l.p99_ms,
            l.max_ms
        );
        if !p.resumes.is_empty() || p.epoch_changes > 0 {
            let resumes = |r: &str| format::count(p.resumes.get(r).copied().unwrap_or(0));
            println!("resumes       recovered {} | lost {} | new epochs {}", resumes("recovered"), resumes("lost"), format::count(p.epoch_changes));
        }
    }
    if let Some(line) = mqtt_line(&s.counters) {
        println!("{line}");
    }
    print_phases(&s.phases);
    println!(
        "hold          {:.1} s | {} workers, {} source addresses x {} ports | client cpu {:.1} s",
        s.hold_seconds, s.workers, s.source_addresses, s.ports, s.cpu_seconds
    );
    if s.interrupted {
        println!("interrupted   (Ctrl-C): connections closed early");
    }
    if let Some(c) = &s.stopped_by {
        println!("stopped early --threshold-abort {} crossed (measured {}): connections closed before the end of the hold", c.expr, c.measured);
    }
}

/// MQTT messages per QoS: published, and of the stamped ones received,
/// lost and duplicated (their latency is the pushes' line); None when
/// the run published and received no MQTT message.
fn mqtt_line(c: &super::snapshot::ClientCounters) -> Option<String> {
    let qos: std::collections::BTreeSet<&String> =
        [&c.mqtt_published, &c.mqtt_received, &c.mqtt_lost, &c.mqtt_duplicated].iter().flat_map(|m| m.keys()).collect();
    if qos.is_empty() && c.mqtt_unstamped == 0 {
        return None;
    }
    let n = |m: &BTreeMap<String, u64>, q: &str| format::count(m.get(q).copied().unwrap_or(0));
    let mut parts: Vec<String> = qos
        .iter()
        .map(|q| {
            // A run that only subscribes (a bench's clients) publishes nothing.
            let published = if c.mqtt_published.contains_key(*q) { format!("published {}, ", n(&c.mqtt_published, q)) } else { String::new() };
            format!("QoS {q}: {published}received {}, lost {}, duplicated {}", n(&c.mqtt_received, q), n(&c.mqtt_lost, q), n(&c.mqtt_duplicated, q))
        })
        .collect();
    parts.push(format!("unstamped {}", format::count(c.mqtt_unstamped)));
    if c.mqtt_untracked > 0 {
        parts.push(format!("untracked {} (timed, not checked for loss)", format::count(c.mqtt_untracked)));
    }
    if c.mqtt_topic_aliases_in > 0 {
        parts.push(format!("by topic alias {}", format::count(c.mqtt_topic_aliases_in)));
    }
    if c.mqtt_qos2_resent_in > 0 {
        parts.push(format!("QoS 2 resends answered {}", format::count(c.mqtt_qos2_resent_in)));
    }
    Some(format!("mqtt          {}", parts.join(" | ")))
}

/// The phase table: what the ramp, the hold and the close each saw.
fn print_phases(phases: &[super::phases::PhaseResult]) {
    let rows: Vec<Vec<String>> =
        std::iter::once(super::phases::COLUMNS.iter().map(|c| c.to_string()).collect()).chain(phases.iter().map(|p| p.cells())).collect();
    let widths: Vec<usize> = (0..super::phases::COLUMNS.len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        println!("phases        {}", line.join("  "));
    }
}

/// What the connections speak and send, for the summary's first line.
pub(crate) fn describe_mode(target: std::net::IpAddr, load: &LoadConfig) -> String {
    let requests = load.traffic.request_rate.is_some();
    let base = describe_protocol(target, load, requests);
    match &load.traffic.tls {
        Some(t) => {
            format!("{base} | over TLS {} to {:?}{}", versions(t), t.server_name, if t.insecure { " (certificate not verified: --insecure)" } else { "" })
        }
        None => base,
    }
}

fn versions(t: &crate::tls::client::ClientTls) -> String {
    t.versions
        .iter()
        .map(|v| match v {
            crate::tls::client::Version::Tls12 => "1.2",
            crate::tls::client::Version::Tls13 => "1.3",
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn describe_protocol(target: std::net::IpAddr, load: &LoadConfig, requests: bool) -> String {
    match load.traffic.protocol {
        Protocol::Raw => {
            let Some(m) = &load.traffic.raw_message else { return "raw".into() };
            let codec = load.traffic.raw_codec.as_ref().map(|c| format!(", framed {c}")).unwrap_or_default();
            let first = load.traffic.raw_first.as_ref().map(|f| format!(", after a {}-byte first message", f.len())).unwrap_or_default();
            let timing = match (m.stamp_at, load.traffic.raw_codec.is_some() || load.traffic.raw_first.is_none()) {
                (Some(_), true) => "round trips timed by the \\{ts} marker each echo carries back",
                (Some(_), false) => "a first message without --codec: echoes cannot be cut, bytes are counted",
                (None, _) => "no \\{ts} marker: bytes and messages back are counted",
            };
            let schedule = if requests { "request" } else { "heartbeat" };
            format!("raw: a {}-byte --message on the {schedule} schedule{codec}{first}; {timing}", m.bytes.len())
        }
        Protocol::Ws => {
            let port = if load.ports.len() == 1 { load.ports[0].to_string() } else { format!("{{{} ports}}", load.ports.len()) };
            let sends = match (&load.traffic.raw_message, requests) {
                (Some(m), r) => format!(
                    "a {}-byte {} --message{}, {{conn}} {{shard}} {{seq}} {{ts}} substituted, echoes of its shape timed by their {{ts}}",
                    m.bytes.len(),
                    if load.traffic.ws_binary { "binary" } else { "text" },
                    if r { " as requests (pings as heartbeats)" } else { " as heartbeats" },
                ),
                (None, true) => "pings as heartbeats, stamped binary requests echoed".into(),
                (None, false) => "pings as heartbeats".into(),
            };
            let scheme = if load.traffic.tls.is_some() { "wss" } else { "ws" };
            let host = load.traffic.host.clone().unwrap_or_else(|| match target {
                std::net::IpAddr::V6(a) => format!("[{a}]:{port}"),
                v4 => format!("{v4}:{port}"),
            });
            format!("ws: {scheme}://{host}{}; {sends}", load.traffic.ws_target)
        }
        Protocol::Framed => "framed: heartbeats and requests in megaconn frames".into(),
        Protocol::Http => format!("http: keep-alive GET {} requests", load.traffic.ws_target),
        Protocol::Sse => {
            format!("sse: an event stream from GET {}{}", load.traffic.ws_target, if load.traffic.reconnect { ", resumed with Last-Event-ID" } else { "" })
        }
        Protocol::Echo8 => "echo8: 8-byte millisecond timestamps echoed".into(),
        Protocol::Mqtt => {
            let m = &load.traffic.mqtt;
            let publish = match load.traffic.request_rate {
                Some(_) => format!(", PUBLISH QoS {} to {}", m.qos, m.publish_topic),
                None => String::new(),
            };
            let carried = match load.traffic.mqtt_ws {
                true => format!(", over WebSocket ({} to {}, subprotocol mqtt)", if load.traffic.tls.is_some() { "wss" } else { "ws" }, load.traffic.ws_target),
                false => String::new(),
            };
            format!("mqtt {}: CONNECT as {}, PINGREQ heartbeats{publish}{carried}", if m.v5 { "5.0" } else { "3.1.1" }, m.client_id)
        }
        Protocol::Echo | Protocol::Discard => "server protocol".into(),
    }
}

/// One sentence on why connections were lost: the dominant reason, and a
/// protocol-mismatch hint when most died before any answer.
pub(crate) fn loss_verdict(lost: &BTreeMap<String, u64>, unanswered: u64) -> Option<String> {
    let total: u64 = lost.values().sum();
    let (reason, n) = lost.iter().max_by_key(|(_, n)| **n)?;
    if total == 0 {
        return None;
    }
    let c = format::count;
    Some(if unanswered * 2 > total {
        format!(
            "the server closed {} connections before answering anything on them ({} of them {reason}): does it speak this protocol? (check --protocol)",
            c(unanswered),
            c(*n)
        )
    } else if reason == WORKER_CRASHED {
        format!("{} connections died with a crashed client worker", c(*n))
    } else {
        format!("{} of {} lost connections ended with {reason}", c(*n), c(total))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mqtt_line_shows_each_qos_and_only_what_happened() {
        let mut c = crate::client::snapshot::ClientCounters::default();
        assert_eq!(mqtt_line(&c), None, "no MQTT message, no line");
        c.mqtt_published.insert("2".into(), 40);
        c.mqtt_received.insert("1".into(), 1500);
        c.mqtt_lost.insert("1".into(), 3);
        c.mqtt_unstamped = 2;
        assert_eq!(
            mqtt_line(&c).unwrap(),
            "mqtt          QoS 1: received 1,500, lost 3, duplicated 0 | QoS 2: published 40, received 0, lost 0, duplicated 0 | unstamped 2"
        );
        c.mqtt_untracked = 5;
        c.mqtt_qos2_resent_in = 1;
        assert!(mqtt_line(&c).unwrap().ends_with("| untracked 5 (timed, not checked for loss) | QoS 2 resends answered 1"));
    }
}
