//! `bench --topology netns|veth`: private namespaces with a hash table
//! sized to the run, gone afterwards — also when the bench is killed.
//! Skipped, saying why, where this process may not create namespaces.

mod common;
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why namespaces cannot be tested here, if they cannot.
fn no_netns() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    let name = format!("megaconn-probe-{}", std::process::id());
    match Command::new("ip").args(["netns", "add", &name]).output() {
        Ok(o) if o.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
            None
        }
        Ok(o) => Some(format!("ip netns add failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("no ip command: {e}")),
    }
}

macro_rules! need_netns {
    () => {
        if let Some(why) = no_netns() {
            eprintln!("SKIPPED: network namespaces cannot be created here ({why})");
            return;
        }
    };
}

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
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    (pid, serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}")))
}

#[test]
fn a_netns_bench_holds_2000_in_a_sized_hash_and_leaves_nothing() {
    need_netns!();
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
    need_netns!();
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
/// process); the next bench removes it by its name.
#[test]
fn namespaces_of_a_killed_bench_are_removed_by_the_next() {
    need_netns!();
    let mut cmd = megaconn();
    cmd.args(["bench", "--topology", "netns", "--connections", "200", "--hold", "60s", "--ports", "22000-22001"]);
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while namespaces_of(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(namespaces_of(pid).len(), 1, "the bench made its namespace");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(namespaces_of(pid).len(), 1, "a killed bench cannot clean up");
    let mut next = megaconn();
    next.args(["bench", "--topology", "netns", "--connections", "100", "--hold", "1s", "--ports", "22002"]);
    let (code, _, err) = run(next, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("removed namespace megaconn-{pid}-net")), "{err}");
    assert!(namespaces_of(pid).is_empty());
}

#[test]
fn host_topology_shares_the_hosts_hash() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--topology", "host", "--connections", "300", "--hold", "1s", "--ports", "22010-22011", "--json"]);
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
    need_netns!();
    for (presses, ports) in [(1, "22020-22021"), (2, "22022-22023")] {
        let mut cmd = megaconn();
        cmd.args(["bench", "--topology", "netns", "--connections", "200", "--hold", "60s", "--ports", ports]);
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(20);
        while namespaces_of(pid).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(namespaces_of(pid).len(), 1, "the bench made its namespace");
        std::thread::sleep(Duration::from_millis(1500));
        for _ in 0..presses {
            // SAFETY: signalling our own child by PID (not yet reaped).
            unsafe { libc::kill(pid as i32, libc::SIGINT) };
            std::thread::sleep(Duration::from_millis(20));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let status = child.try_wait().unwrap();
        if status.is_none() {
            let _ = child.kill();
        }
        let status = status.expect("the bench ended after Ctrl-C");
        if presses == 2 {
            assert_eq!(status.code(), Some(130), "a second Ctrl-C exits at once");
        }
        assert!(namespaces_of(pid).is_empty(), "namespace removed after {presses} Ctrl-C");
    }
}
