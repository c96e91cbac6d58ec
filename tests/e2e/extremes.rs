//! Issue 42: no accepted flag value makes the client or the server spin
//! or hang. Random runs, each a real server and a real client on
//! loopback on one reactor (both io_uring or both epoll), with the
//! extremes of the rates, durations and sizes their parsers accept
//! (1 ns and 30 days, 1e-30/s and the most a flag takes, 0 and the
//! largest payload). Every run is bounded: a client still running after
//! [`INTERRUPT_AFTER`] is interrupted (SIGINT, as an operator would) and
//! must then end within [`ENDS_AFTER_INTERRUPT`] with its summary.
//!
//! What must hold whatever the values: the server starts (or refuses
//! its flags with exit 2 and words), the client ends with 0 or 1 and a
//! summary that accounts for every connection (requested is established
//! plus failed plus not attempted), nothing panics, the server still accepts
//! and stops on SIGTERM, and where the values ask for next to no work
//! (at most [`IDLE_EVENTS_PER_S`] heartbeats, requests and churns per
//! second), neither the client's workers nor the server's worker spend
//! more than [`IDLE_CPU_SECONDS`] of CPU: a busy loop would spend a core
//! for as long as the run lasts.
use crate::common::ports::free_port;
use crate::common::{megaconn, pids, server_ready};
use proptest::prelude::*;
use serde_json::Value;
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A client still running then is interrupted.
const INTERRUPT_AFTER: Duration = Duration::from_secs(3);
/// After SIGINT the client must be gone within this (its close phase
/// resets a handful of sockets; the bound is for a loaded machine).
const ENDS_AFTER_INTERRUPT: Duration = Duration::from_secs(20);
/// A run that asks for at most this many events per second is idle.
const IDLE_EVENTS_PER_S: f64 = 10.0;
/// CPU an idle run may spend (start-up included): a spinning worker
/// spends a whole core for the seconds the run lasts.
const IDLE_CPU_SECONDS: f64 = 1.0;

/// Durations at their extremes (parsers cap them at 30 days).
const DURATIONS: [&str; 4] = ["1ns", "1ms", "2s", "30days"];

/// One run's flags, with what they ask of the machine.
#[derive(Debug, Clone)]
struct Case {
    io: &'static str,
    server: Vec<(&'static str, String)>,
    client: Vec<(&'static str, String)>,
    /// Heartbeats, requests and churns per second the client flags ask for.
    events_per_s: f64,
}

fn pick<T: Clone + std::fmt::Debug + 'static>(of: &[T]) -> impl Strategy<Value = T> {
    prop::sample::select(of.to_vec())
}

fn case() -> impl Strategy<Value = Case> {
    let server = (pick(&["100ms", "24h", "off"]), pick(&DURATIONS), pick(&DURATIONS), pick(&DURATIONS), pick(&["1", "4294967295"]));
    // (The server's --stats-interval is the tests' own 200 ms.)
    let client = (
        pick(&["1", "3"]),
        pick(&["1/s", "18446744073709551615/s"]),
        pick(&["off", "1ns", "1s", "30days"]),
        pick(&["0s", "1ns", "1s", "30days"]),
        pick(&["off", "1e-30/s", "1/s", "100000/s"]),
        (pick(&DURATIONS), pick(&DURATIONS), pick(&DURATIONS)),
        pick(&["0", "4096"]),
        pick(&["off", "1e-30/s", "1000/s"]),
    );
    (pick(&["uring", "epoll"]), server, client).prop_map(|(io, s, c)| {
        let (stall, idle, drain, header, commands) = s;
        let (conns, rate, heartbeat, hold, requests, (request_timeout, connect_timeout, stats_c), payload, churn) = c;
        let per_s = |v: &str| -> f64 {
            match v {
                "off" => 0.0,
                "1ns" => 1e9,
                "1s" => 1.0,
                "30days" => 0.0,
                rate => rate.trim_end_matches("/s").parse().expect("a rate"),
            }
        };
        let n: f64 = conns.parse().expect("a count");
        let events_per_s = n * (per_s(heartbeat) + per_s(requests) + per_s(churn));
        let mut client = vec![
            ("--connections", conns.to_string()),
            ("--rate", rate.to_string()),
            ("--hold", hold.to_string()),
            ("--request-timeout", request_timeout.to_string()),
            ("--connect-timeout", connect_timeout.to_string()),
            ("--stats-interval", stats_c.to_string()),
            ("--payload", payload.to_string()),
        ];
        for (flag, v) in [("--heartbeat", heartbeat), ("--request-rate", requests), ("--churn", churn)] {
            if v != "off" {
                client.push((flag, v.to_string()));
            }
        }
        let server = vec![
            ("--stall-timeout", stall.to_string()),
            ("--idle-timeout", idle.to_string()),
            ("--drain-timeout", drain.to_string()),
            ("--header-timeout", header.to_string()),
            ("--max-commands-per-second", commands.to_string()),
        ];
        Case { io, server, client, events_per_s }
    })
}

/// utime + stime of a process, in seconds (0 once it is gone).
fn cpu_seconds(pid: u64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(") ") else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Run one case; Err says what broke.
fn run_case(c: &Case) -> Result<(), String> {
    let port = free_port().to_string();
    let mut args: Vec<String> = ["--ports", &port, "--workers", "1", "--io", c.io].iter().map(|s| s.to_string()).collect();
    for (f, v) in &c.server {
        args.extend([f.to_string(), v.clone()]);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    // A server that refuses its flags fails server_ready with its words;
    // every value here is one its parsers accept, so it must start.
    let (mut srv, _, ready) = server_ready(&refs, None);
    let workers = pids(&ready);
    let server_cpu_before: f64 = workers.iter().map(|p| cpu_seconds(*p)).sum();

    let mut cmd = megaconn();
    cmd.args(["client", "--io", c.io, "--ports", &port, "--workers", "1", "--json"]);
    for (f, v) in &c.client {
        cmd.args([f, v.as_str()]);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("start the client: {e}"))?;
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let mut interrupted = None;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        match interrupted {
            None if started.elapsed() >= INTERRUPT_AFTER => {
                // SAFETY: signalling our own child by PID (not reaped yet).
                unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                interrupted = Some(Instant::now());
            }
            Some(at) if at.elapsed() >= ENDS_AFTER_INTERRUPT => {
                let _ = child.kill();
                let _ = child.wait();
                let err = err.join().unwrap_or_default();
                return Err(format!("the client did not end within {ENDS_AFTER_INTERRUPT:?} of SIGINT; stderr tail: {}", tail(&err)));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if err.contains("panicked") {
        return Err(format!("the client panicked: {}", tail(&err)));
    }
    let code = status.code().ok_or_else(|| format!("the client died by a signal ({status}): {}", tail(&err)))?;
    if code != 0 && code != 1 {
        return Err(format!("the client exited {code} (0 or 1 expected for flags its parsers accept): {}", tail(&err)));
    }
    let doc: Value = serde_json::from_str(&out).map_err(|e| format!("no JSON summary ({e}): {}", tail(&err)))?;
    let s = &doc["summary"];
    let failed: u64 = s["failed"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    let (requested, established, not_attempted) = (s["requested"].as_u64(), s["established"].as_u64(), s["not_attempted"].as_u64());
    if requested != Some(established.unwrap_or(0) + failed + not_attempted.unwrap_or(0)) {
        return Err(format!("requested != established + failed + not attempted: {s}"));
    }
    if c.events_per_s <= IDLE_EVENTS_PER_S {
        let cpu = s["cpu_seconds"].as_f64().ok_or_else(|| format!("no cpu_seconds: {s}"))?;
        if cpu > IDLE_CPU_SECONDS {
            return Err(format!("an idle run's client workers spent {cpu} s of CPU in {took:?}: {s}"));
        }
        let server_cpu: f64 = workers.iter().map(|p| cpu_seconds(*p)).sum::<f64>() - server_cpu_before;
        if server_cpu > IDLE_CPU_SECONDS {
            return Err(format!("an idle run's server worker spent {server_cpu:.2} s of CPU in {took:?}"));
        }
    }
    // The server still accepts, then stops when asked.
    std::net::TcpStream::connect(format!("127.0.0.1:{port}")).map_err(|e| format!("the server no longer accepts: {e}"))?;
    let st = srv.terminate();
    let log = srv.log.text();
    if log.contains("panicked") {
        return Err(format!("the server panicked: {}", tail(&log)));
    }
    if !st.success() {
        return Err(format!("the server exited {st} on SIGTERM: {}", tail(&log)));
    }
    Ok(())
}

fn tail(s: &str) -> &str {
    s[s.len().saturating_sub(2000)..].trim_start_matches(|c: char| !c.is_ascii())
}

proptest! {
    // Each case is a few seconds of real processes; failures shrink to
    // the smallest set of extremes that still breaks.
    #![proptest_config(ProptestConfig { cases: 12, max_shrink_iters: 20, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_accepted_rate_duration_or_size_makes_client_or_server_spin_or_hang(c in case()) {
        if let Err(e) = run_case(&c) {
            prop_assert!(false, "{e}\ncase: {c:?}");
        }
    }
}
