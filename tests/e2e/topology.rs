//! `bench --topology netns|veth`: private namespaces with a hash table
//! sized to the run, gone afterwards — also when the bench is killed.
//! These tests need network namespaces: where they cannot be made they
//! fail, saying why (or are skipped with MEGACONN_SKIP_NETNS=1).

use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Ports of the benches that run in their own namespace (nothing else
/// listens there, so they cannot collide with anything).
const NS_PORTS: [&str; 4] = ["8000-8001", "8002", "8004-8005", "8006-8007"];

fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("megaconn-{pid}-")))
        .map(String::from)
        .collect()
}

fn links_of(pid: u32) -> usize {
    let out = Command::new("ip").args(["-o", "link"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains(&format!("mc{pid}"))).count()
}

/// Run a bench; returns (its pid, its JSON report).
fn bench(topology: &str) -> (u32, Value) {
    let mut cmd = megaconn();
    cmd.args(["bench", "--topology", topology, "--connections", "2000", "--hold", "1s", "--heartbeat", "300ms", "--rate", "5000", "--json"]);
    let mut bench = Peer::spawn(&format!("megaconn bench --topology {topology}"), cmd);
    let pid = bench.child.id();
    let out = bench.finish_ok(Duration::from_secs(120)).join("\n");
    (pid, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")))
}

/// Start a bench that holds 200 connections for a minute in its own
/// namespace, and wait until they are established in there.
fn holding_bench(ports: &str) -> (Peer, u32) {
    let mut cmd = megaconn();
    cmd.args(["bench", "--topology", "netns", "--connections", "200", "--hold", "60s", "--ports", ports]);
    let bench = Peer::spawn("megaconn bench --topology netns (held)", cmd);
    let pid = bench.child.id();
    wait_until("the bench made its namespace", Duration::from_secs(20), || !namespaces_of(pid).is_empty());
    assert_eq!(namespaces_of(pid).len(), 1, "one namespace: {:?}", namespaces_of(pid));
    let ns = namespaces_of(pid).remove(0);
    // Both ends of every connection live in the namespace.
    wait_until("200 connections established in the namespace", Duration::from_secs(30), || established_in_netns(&ns) >= 400);
    (bench, pid)
}

/// Whether `sig` is still pending for process `pid` (not yet delivered
/// to its handler), from ShdPnd in /proc/PID/status.
fn signal_pending(pid: u32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status.lines().find_map(|l| l.strip_prefix("ShdPnd:")).map(|m| u64::from_str_radix(m.trim(), 16).unwrap()).unwrap_or(0);
    mask & (1 << (sig - 1)) != 0
}

#[test]
fn a_netns_bench_holds_2000_in_a_sized_hash_and_leaves_nothing() {
    if !needs_netns() {
        return;
    }
    let (pid, v) = bench("netns");
    assert_eq!(v["client"]["established"], 2000, "{}", v["client"]);
    assert_eq!(v["client"]["failed_total"], 0);
    let t = &v["topology"];
    assert_eq!(t["kind"], "netns", "{t}");
    // 2 x 2000 sockets + listeners: the next power of two, read back inside.
    assert_eq!(t["ehash_planned"], 8192, "{t}");
    assert_eq!(t["ehash_entries"], 8192, "tcp_ehash_entries inside the namespace: {t}");
    assert_eq!(t["namespaces"].as_array().unwrap().len(), 1);
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "namespace removed");
    assert_eq!(v["sockets_left"], 0);
}

#[test]
fn a_veth_bench_runs_between_two_namespaces_and_leaves_nothing() {
    if !needs_netns() {
        return;
    }
    let (pid, v) = bench("veth");
    assert_eq!(v["client"]["established"], 2000, "{}", v["client"]);
    assert_eq!(v["client"]["heartbeats_answered"], v["client"]["heartbeats_sent"]);
    let t = &v["topology"];
    assert_eq!(t["kind"], "veth", "{t}");
    assert_eq!(t["server_address"], "10.201.0.1");
    assert_eq!(t["ehash_entries"], t["ehash_planned"], "{t}");
    assert_eq!(t["namespaces"].as_array().unwrap().len(), 2);
    assert_eq!(v["server_active_at_hold"], 2000, "the server in its namespace saw them all");
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "namespaces removed");
    assert_eq!(links_of(pid), 0, "no veth left on the host");
    // The addresses lived only inside the namespaces.
    let addrs = String::from_utf8_lossy(&Command::new("ip").args(["-o", "addr"]).output().unwrap().stdout).to_string();
    assert!(!addrs.contains("10.201."), "{addrs}");
}

/// SIGKILL leaves the namespace behind (nothing can run in a killed
/// process); the next bench removes it by its name. Any bench starting
/// between the two would remove it first, so this runs alone, after the
/// others (scripts/test.sh).
#[test]
#[ignore = "run alone: any other bench removes the killed bench's namespace (scripts/test.sh runs it after the rest)"]
fn alone_namespaces_of_a_killed_bench_are_removed_by_the_next() {
    if !needs_netns() {
        return;
    }
    let (mut killed, pid) = holding_bench(NS_PORTS[0]);
    // SAFETY: SIGKILL to our own child, by PID (not reaped yet).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    killed.finish(Duration::from_secs(10));
    assert_eq!(namespaces_of(pid).len(), 1, "a killed bench cannot clean up");
    let mut next = megaconn();
    next.args(["bench", "--topology", "netns", "--connections", "100", "--hold", "1s", "--ports", NS_PORTS[1]]);
    let (code, _, err) = run(next, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("removed namespace megaconn-{pid}-net")), "{err}");
    assert!(namespaces_of(pid).is_empty());
}

#[test]
fn host_topology_shares_the_hosts_hash() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--topology", "host", "--connections", "300", "--hold", "1s", "--ports", &free_ports(2).arg(), "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["topology"]["kind"], "host");
    assert!(v["topology"]["namespaces"].as_array().unwrap().is_empty());
    assert_eq!(v["client"]["established"], 300);
}

/// Ctrl-C ends the run early; the namespace still goes. A second Ctrl-C
/// (the user means it) exits at once, and the namespace still goes.
#[test]
fn ctrl_c_removes_the_namespace() {
    if !needs_netns() {
        return;
    }
    for (presses, ports) in [(1, NS_PORTS[2]), (2, NS_PORTS[3])] {
        // Ctrl-C in the hold, once every connection is up.
        let (mut bench, pid) = holding_bench(ports);
        for press in 1..=presses {
            if press > 1 {
                // Each press is its own delivery: the next waits until the
                // last reached the handler (two pending SIGINTs merge).
                wait_until(&format!("Ctrl-C {} delivered", press - 1), Duration::from_secs(5), || !signal_pending(pid, libc::SIGINT));
            }
            // SAFETY: signalling our own child by PID (not reaped yet).
            unsafe { libc::kill(pid as i32, libc::SIGINT) };
        }
        let (status, _) = bench.finish(Duration::from_secs(30));
        if presses == 2 {
            assert_eq!(status.code(), Some(130), "a second Ctrl-C exits at once");
        }
        assert!(namespaces_of(pid).is_empty(), "namespace removed after {presses} Ctrl-C");
    }
}
