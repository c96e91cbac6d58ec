//! The process model end to end: elastic server workers, crashed workers
//! replaced at the cost of their own connections only, client loss
//! accounting and `--reconnect`, threads planned like processes.
use crate::common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

fn client(ports: Ports, connections: u64, extra: &[&str]) -> std::process::Command {
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", &connections.to_string(), "--json"]);
    cmd.args(extra);
    cmd
}

fn summary(out: &str) -> Value {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("client JSON: {e}: {out}"));
    v["summary"].clone()
}

#[test]
fn elastic_server_grows_with_the_load_and_shrinks_after() {
    // The 20000-fd wall in miniature: every process may open 1,000 files,
    // so one worker holds at most ~880 connections.
    let ports = free_ports(3);
    let (mut srv, plan) = server(&["--ports", &ports.arg(), "--retire-after", "2s"], Some(1000));
    assert_eq!(plan["elastic"], true, "{plan}");
    let initial = plan["workers"].as_u64().unwrap();
    let budget = plan["per_worker_max"].as_u64().unwrap();
    assert!(budget < 1000, "{plan}");
    let mut cmd = client(ports, 6000, &["--rate", "3000", "--heartbeat", "1s", "--hold", "3s"]);
    with_fd_limit(&mut cmd, 1000);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(90)));
    let full = srv.wait_for(Duration::from_secs(40), "server holds 6000", |v| v["event"] == "stats" && v["active"] == 6000);
    assert!(full["workers"].as_u64().unwrap() >= 7, "grew from {initial} to at least 7 workers: {full}");
    assert_eq!(established_on(ports.first, ports.last), 6000, "ss agrees with the server's count");
    // Workers came and went from accepting; the listeners never closed:
    // one per port, shared by every worker.
    for port in ports.first..=ports.last {
        assert_eq!(listeners_on(port), 1, "port {port}");
    }
    assert!(full["accept_errors"].as_object().unwrap().is_empty(), "{full}");
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "client: {err}");
    let s = summary(&out);
    assert_eq!(s["established"], 6000, "{s}");
    assert_eq!(s["held"], 6000, "{s}");
    assert_eq!(s["failed_total"], 0, "no connection refused or reset: {s}");
    assert_eq!(s["lost_total"], 0, "{s}");
    // Drained: full workers rejoin, then every surplus empty one exits.
    let shrunk =
        srv.wait_for(Duration::from_secs(30), "surplus workers exit", |v| v["event"] == "stats" && v["active"] == 0 && v["workers"].as_u64() == Some(initial));
    assert_eq!(shrunk["accepting"].as_u64(), Some(initial), "{shrunk}");
    assert!(srv.terminate().success());
}

#[test]
fn a_worker_at_its_descriptor_ceiling_pauses_instead_of_failing_accept() {
    // One fixed worker may open 1,000 files; 1,100 clients arrive. It holds
    // what its descriptors allow, leaves the rest queued in the kernel
    // (no EMFILE), and takes them once the first ones close.
    let ports = free_ports(3);
    let (mut srv, plan) = server(&["--ports", &ports.arg(), "--workers", "1"], Some(1000));
    assert_eq!(plan["workers"], 1, "{plan}");
    let cmd = client(ports, 1100, &["--rate", "5000", "--hold", "6s"]);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(60)));
    let paused =
        srv.wait_for(Duration::from_secs(30), "worker pauses at its ceiling", |v| v["event"] == "stats" && v["accept_paused"]["fd_ceiling"].as_u64() > Some(0));
    let held = paused["active"].as_u64().unwrap();
    assert!((900..1000).contains(&held), "held up to the fd limit less its own descriptors: {paused}");
    assert!(paused["accept_errors"].as_object().unwrap().is_empty(), "{paused}");
    // The rest wait in the kernel's accept queue, counted, and the
    // operator is told once they have waited 3 s.
    let queued = srv.wait_for(Duration::from_secs(10), "the accept queue counted", |v| v["event"] == "stats" && v["accept_queue"].as_u64() > Some(0));
    assert_eq!(queued["accept_queue"].as_u64().unwrap() + queued["active"].as_u64().unwrap(), 1100, "{queued}");
    let told = srv.wait_for(Duration::from_secs(10), "the operator told", |v| v["event"] == "accept_queue_waiting");
    assert!(told["message"].as_str().unwrap().contains("Raise the server's --connections"), "{told}");
    let (code, _, err) = load.join().unwrap();
    assert_eq!(code, 0, "client: {err}");
    let drained =
        srv.wait_for(Duration::from_secs(30), "queued connections taken and closed", |v| v["event"] == "stats" && v["accepted"] == 1100 && v["active"] == 0);
    assert!(drained["accept_errors"].as_object().unwrap().is_empty(), "{drained}");
    assert!(srv.terminate().success());
}

#[test]
fn a_crashed_worker_costs_only_its_own_connections() {
    let ports = free_ports(3);
    let (mut srv, _, ready) = server_ready(&["--ports", &ports.arg(), "--workers", "3"], None);
    let workers = pids(&ready);
    assert_eq!(workers.len(), 3);
    let cmd = client(ports, 6000, &["--rate", "6000", "--heartbeat", "1s", "--hold", "6s", "--source-ips", "127.0.0.2-127.0.0.9"]);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(90)));
    srv.wait_for(Duration::from_secs(30), "server holds 6000", |v| v["event"] == "stats" && v["active"] == 6000);
    let killed_at = Instant::now();
    kill9(workers[1]);
    let crash = srv.wait_for(Duration::from_secs(5), "crash reported", |v| v["event"] == "worker_crashed");
    let lost = crash["lost"].as_u64().unwrap();
    assert!(lost > 0 && lost < 6000, "{crash}");
    assert!(crash["message"].as_str().unwrap().contains("SIGKILL"), "{crash}");
    let replaced = srv.wait_for(Duration::from_secs(5), "replacement started", |v| v["event"] == "worker_replaced");
    eprintln!("replacement after {:?}: {replaced}", killed_at.elapsed());
    // The other workers keep theirs, and the supervisor's count is exact.
    let after = srv.wait_for(Duration::from_secs(5), "count without the crashed worker", |v| v["event"] == "stats" && v["active"] == 6000 - lost);
    assert_eq!(after["workers"], 3, "{after}");
    assert_eq!(after["close_reasons"]["worker_crashed"], lost, "{after}");
    // The kernel closes a killed process's sockets behind its io_uring
    // (a kernel worker tears the ring down): ss catches up shortly after.
    wait_until("ss to agree with the count", Duration::from_secs(20), || established_on(ports.first, ports.last) as u64 == 6000 - lost);
    // Without --reconnect the client reports the loss and fails.
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 1, "losing connections is a failure: {err}");
    assert!(err.contains("held at the end of the hold") && err.contains("--reconnect"), "{err}");
    let s = summary(&out);
    assert_eq!(s["lost_total"], lost, "{s}");
    assert_eq!(s["held"].as_u64().unwrap(), 6000 - lost, "{s}");
    assert!(srv.terminate().success());
}

#[test]
fn reconnect_restores_every_connection_after_a_crash() {
    let ports = free_ports(3);
    let (mut srv, _, ready) = server_ready(&["--ports", &ports.arg(), "--workers", "3"], None);
    let workers = pids(&ready);
    let cmd = client(ports, 6000, &["--rate", "6000", "--heartbeat", "1s", "--hold", "8s", "--reconnect", "--source-ips", "127.0.0.2-127.0.0.9"]);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(90)));
    srv.wait_for(Duration::from_secs(30), "server holds 6000", |v| v["event"] == "stats" && v["active"] == 6000);
    kill9(workers[0]);
    let crash = srv.wait_for(Duration::from_secs(5), "crash reported", |v| v["event"] == "worker_crashed");
    let lost = crash["lost"].as_u64().unwrap();
    srv.wait_for(Duration::from_secs(10), "back to 6000", |v| v["event"] == "stats" && v["active"] == 6000 && v["workers"] == 3);
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "client: {err}");
    let s = summary(&out);
    assert_eq!(s["held"], 6000, "{s}");
    assert_eq!(s["lost_total"], lost, "{s}");
    assert_eq!(s["reconnects"], lost, "{s}");
    assert!(srv.terminate().success());
}

#[test]
fn pool_threads_are_divided_over_the_workers() {
    let (mut srv, plan, ready) = server_ready(&["--ports", &free_port().to_string(), "--workers", "8", "--business", "pool:1000"], None);
    assert_eq!(plan["threads_per_worker"], 1 + 1000 / 8, "{plan}");
    let threads: usize = pids(&ready).iter().map(|p| threads_of(*p)).sum();
    assert!((1000..=1000 + 8 + 8).contains(&threads), "pool:1000 over 8 workers runs {threads} threads");
    assert!(srv.terminate().success());
}

/// A number from /proc or /sys, as the kernel writes it.
fn read_num(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.split_whitespace().next()?.parse().ok()
}

/// The soft RLIMIT_NPROC of this process ("Max processes").
fn nproc_soft() -> Option<u64> {
    let l = std::fs::read_to_string("/proc/self/limits").ok()?;
    l.lines().find(|l| l.starts_with("Max processes"))?.split_whitespace().nth(2)?.parse().ok()
}

#[test]
fn more_threads_than_the_pid_limit_allows_are_refused_up_front() {
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &free_port().to_string(), "--workers", "8", "--business", "pool:100000"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    // The refusal names the first limit (in the order pid_max,
    // threads-max, pids.max, NPROC) that the tasks do not fit under, with
    // the value this machine really has.
    let needed: u64 = err.split("needs ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{err}"));
    assert!(needed >= 100_000 && err.contains(&format!("needs {needed} threads and processes")), "pool:100000 is at least 100000 threads: {err}");
    let order: [(&str, Option<u64>); 4] = [
        ("kernel.pid_max", read_num("/proc/sys/kernel/pid_max")),
        ("kernel.threads-max", read_num("/proc/sys/kernel/threads-max")),
        ("the cgroup's pids.max", None),
        ("RLIMIT_NPROC (ulimit -u)", nproc_soft()),
    ];
    let (named, value) = order.iter().find(|(name, _)| err.contains(&format!("but {name} is "))).unwrap_or_else(|| panic!("no limit named: {err}"));
    let cap: u64 = err.split(&format!("but {named} is ")).nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    if let Some(v) = value {
        assert_eq!(cap, *v, "{named} as this machine has it: {err}");
    }
    assert!(cap < needed + 200, "{named} = {cap} really is too small for {needed} tasks: {err}");
    for (earlier, v) in order.iter().take_while(|(n, _)| n != named) {
        assert!(v.is_none_or(|v| v >= needed), "{earlier} ({v:?}) binds before {named}: {err}");
    }
}

#[test]
fn a_shard_with_nothing_to_do_exits_cleanly() {
    let mut cmd = megaconn();
    let port = free_port().to_string();
    cmd.args(["client", "--connections", "3", "--shard", "0/4", "--ports", &port]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("empty"), "{err}");
    // Shard 3/4 of 3 owns one connection: with nobody listening it fails, named.
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "3", "--shard", "3/4", "--ports", &port, "--hold", "1s", "--connect-timeout", "2s"]);
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("0 of 1 connections"), "{err}");
}
