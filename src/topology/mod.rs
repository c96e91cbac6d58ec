//! Where a bench runs: on the host's loopback, in one private network
//! namespace (both ends on its loopback), or in two namespaces joined by a
//! veth pair (a server host and a client host on one machine).
//!
//! A private namespace gets its own TCP established-connection hash table,
//! sized to the run (`tcp_child_ehash_entries` on the host when it is
//! created): the host's is fixed at boot (262,144 buckets here) and past
//! ~1M sockets its chains cost CPU on every packet. Namespaces are named
//! `megaconn-<pid>-<role>`; they go away when the bench ends (also on
//! Ctrl-C and errors), and ones left by a killed bench are removed by the
//! next one.
//!
//! Which namespaces are stale is decided by a lock file per namespace
//! (`/run/megaconn-netns/<name>.lock`), flocked by its owner for as long
//! as it lives: the kernel drops the lock when the owner dies however it
//! dies, and a live owner keeps its namespaces whatever its binary is
//! called. The host-wide `tcp_child_ehash_entries` is changed only for
//! the moment a namespace is made; the value to restore is written in the
//! creation lock file first, so a second Ctrl-C restores it at once and a
//! SIGKILLed bench's change is undone by the next bench.

pub(crate) mod cluster;
mod locks;

use anyhow::{bail, Context, Result};
use locks::{hold_lock, lock_path, record_ehash, recorded_ehash, release_lock, restore_ehash, stale_in, EHASH_RESTORE, OWNED};
use serde::Serialize;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Topology {
    /// netns when this process may create namespaces, else host.
    Auto,
    /// The host's own loopback and kernel tables.
    Host,
    /// One private namespace: both ends on its loopback, hash table sized.
    Netns,
    /// Two namespaces (server, client) joined by a veth pair.
    Veth,
}

pub(crate) const PREFIX: &str = "megaconn-";
/// Where each namespace's owner holds its lock file.
const LOCK_DIR: &str = "/run/megaconn-netns";
/// Serialises namespace creation across benches; holds the host's
/// child-ehash value while it is changed.
const CREATE_LOCK: &str = "/run/megaconn-netns.lock";
const CHILD_EHASH: &str = "/proc/sys/net/ipv4/tcp_child_ehash_entries";
/// The kernel's largest per-namespace hash table.
const EHASH_MAX: u64 = 1 << 24;
/// veth addresses: the server host, then client source addresses.
pub(crate) const VETH_SERVER: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);

/// What the run got: reported in the JSON and the report's machine.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Placement {
    pub kind: Topology,
    /// Why this topology (auto's choice, or host's reason).
    pub why: String,
    pub namespaces: Vec<String>,
    /// Buckets planned for each namespace's established hash.
    pub ehash_planned: Option<u64>,
    /// `net.ipv4.tcp_ehash_entries` read back inside the server's
    /// namespace (negative: shared with the host).
    pub ehash_entries: Option<i64>,
    pub server_address: Ipv4Addr,
    /// veth: the client host's source addresses.
    pub client_sources: Vec<Ipv4Addr>,
    /// bench --nodes: each server node's address (its own namespace).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<Ipv4Addr>,
    /// bench --cluster: the broker's URL (its own namespace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
}

/// A placed run. Dropping it removes the namespaces it created.
pub(crate) struct Net {
    pub placement: Placement,
    /// The client's namespace (veth), for its workers to enter.
    pub client_ns: Option<File>,
    /// Lines that say what was done (shown before the run).
    pub notes: Vec<String>,
    /// veth ends made on the host (gone once moved; deleted if not).
    veths: Vec<String>,
}

impl Drop for Net {
    fn drop(&mut self) {
        for v in &self.veths {
            let _ = Command::new("ip").args(["link", "del", v]).stderr(std::process::Stdio::null()).status();
        }
        for name in &self.placement.namespaces {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
            release_lock(name);
        }
    }
}

pub(crate) fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Namespaces named by a megaconn whose owner is gone (its lock file is
/// not held).
pub(crate) fn stale() -> Vec<String> {
    stale_in(std::path::Path::new("/run/netns"), std::path::Path::new(LOCK_DIR))
}

/// Remove this process's namespaces (a second Ctrl-C, which exits
/// without running `Net`'s drop).
pub(crate) fn remove_own() {
    let mine = format!("{PREFIX}{}-", std::process::id());
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
    for name in dir.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.starts_with(&mine)) {
        let _ = ip(&["netns", "del", &name]);
        let _ = std::fs::remove_file(lock_path(std::path::Path::new(LOCK_DIR), &name));
    }
}

/// Remove what killed benches left; says what it removed. Called before
/// making namespaces, so it also arranges their removal on a second Ctrl-C.
pub(crate) fn remove_stale() -> Vec<String> {
    crate::signals::on_hard_exit(remove_own);
    crate::signals::on_hard_exit(restore_ehash);
    let mut notes = Vec::new();
    for name in stale() {
        if ip(&["netns", "del", &name]).is_ok() {
            let _ = std::fs::remove_file(lock_path(std::path::Path::new(LOCK_DIR), &name));
            notes.push(format!("removed namespace {name} left by a megaconn that is gone"));
        }
    }
    notes
}

/// Buckets for `sockets` established sockets: the next power of two.
pub(crate) fn ehash_for(sockets: u64) -> u64 {
    sockets.max(1024).next_power_of_two().min(EHASH_MAX)
}

pub(crate) fn may_create() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: creating network namespaces needs CAP_SYS_ADMIN".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Err("the ip command (iproute2) is not installed".into());
    }
    Ok(())
}

/// Create namespace `name` with its own established hash of `ehash`
/// buckets (the host's child-ehash sysctl is set for the creation and put
/// back at once), loopback up and `sysctls` set inside.
pub(crate) fn create(name: &str, ehash: u64, sysctls: &[(&str, String)], notes: &mut Vec<String>) -> Result<()> {
    // Benches starting together must not restore each other's size.
    let mut lock =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(CREATE_LOCK).context("creating /run/megaconn-netns.lock")?;
    // SAFETY: flock on an open file; released when `lock` closes.
    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    // A value recorded and never cleared: a bench died while its
    // namespace was being made; that value is the host's own.
    let before = recorded_ehash(&mut lock).or_else(|| std::fs::read_to_string(CHILD_EHASH).ok());
    // Own the namespace's lock before it exists: a concurrent cleanup
    // never sees it without a live owner.
    let ns_lock = hold_lock(std::path::Path::new(LOCK_DIR), name).with_context(|| format!("taking the lock file of namespace {name} in {LOCK_DIR}"))?;
    if let Ok(mut owned) = OWNED.lock() {
        owned.push((name.to_string(), ns_lock));
    }
    if let Some(b) = &before {
        record_ehash(&mut lock, Some(b)).context("recording tcp_child_ehash_entries in /run/megaconn-netns.lock")?;
        if let Ok(mut r) = EHASH_RESTORE.lock() {
            *r = Some(b.clone());
        }
        crate::signals::on_hard_exit(restore_ehash);
        std::fs::write(CHILD_EHASH, ehash.to_string()).with_context(|| format!("setting {CHILD_EHASH} to {ehash}"))?;
    }
    let made = ip(&["netns", "add", name]);
    if before.is_some() {
        restore_ehash();
        let _ = record_ehash(&mut lock, None);
    }
    drop(lock);
    made?;
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    if sysctls.is_empty() {
        notes.push(format!("namespace {name}: established hash {} buckets", crate::stats::format::count(ehash)));
        return Ok(());
    }
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", name, "sysctl", "-q", "-w"]);
    cmd.args(sysctls.iter().map(|(k, v)| format!("{k}={v}")));
    let out = cmd.output().context("running sysctl in the namespace")?;
    if !out.status.success() {
        bail!("setting sysctls in {name}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let set: Vec<String> = sysctls.iter().map(|(k, v)| format!("{k}={v}")).collect();
    notes.push(format!(
        "namespace {name}: established hash {} buckets{}; {}",
        crate::stats::format::count(ehash),
        if before.is_some() { "" } else { " (this kernel has no tcp_child_ehash_entries: shared with the host)" },
        set.join(" ")
    ));
    Ok(())
}

pub(crate) fn enter(name: &str) -> Result<File> {
    let f = File::open(format!("/run/netns/{name}")).with_context(|| format!("opening namespace {name}"))?;
    // SAFETY: setns on a valid namespace fd; affects the calling thread
    // (the main thread, before it starts any worker).
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("entering namespace {name}: {}", std::io::Error::last_os_error());
    }
    Ok(f)
}

pub(crate) fn ehash_here() -> Option<i64> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_ehash_entries").ok()?.trim().parse().ok()
}

/// Place a bench of `connections` on `ports` (call on the main thread
/// before any worker starts). `sources` is how many client addresses a
/// veth plan needs. `auto` falls back to the host, saying why.
pub(crate) fn place(want: Topology, connections: u64, ports: &str, sources: u64) -> Result<Net> {
    let mut notes = remove_stale();
    let host = |why: String, notes: Vec<String>| {
        let mut net = Net::new(Topology::Host, why);
        net.placement.ehash_entries = ehash_here();
        net.notes = notes;
        net
    };
    let kind = match (want, may_create()) {
        (Topology::Host, _) => return Ok(host("--topology host".into(), notes)),
        (Topology::Auto, Err(why)) => {
            notes.push(format!("topology host: {why} (--topology netns gives the run a private TCP hash table sized to it)"));
            return Ok(host(format!("auto: {why}"), notes));
        }
        (Topology::Netns | Topology::Veth, Err(why)) => bail!("--topology {}: {why}; use --topology host", format!("{want:?}").to_lowercase()),
        (Topology::Auto, Ok(())) => Topology::Netns,
        (k, Ok(())) => k,
    };
    let pid = std::process::id();
    let sysctls = Sysctls::for_ports(ports);
    let why = if want == Topology::Auto { "auto: root may create namespaces".into() } else { format!("--topology {}", format!("{kind:?}").to_lowercase()) };
    let mut net = Net::new(kind, why);
    match build(&mut net, pid, connections, &sysctls, sources) {
        Ok(()) => {
            net.notes.splice(0..0, notes);
            Ok(net)
        }
        Err(e) if want == Topology::Auto => {
            drop(net);
            notes.push(format!("topology host: a private namespace could not be made ({e:#})"));
            Ok(host(format!("auto: {e:#}"), notes))
        }
        Err(e) => Err(e.context("--topology: the namespaces could not be set up; --topology host runs without them")),
    }
}

/// What a namespace gets set inside.
pub(crate) struct Sysctls {
    pub queues: Vec<(&'static str, String)>,
    pub ports: Vec<(&'static str, String)>,
}

impl Sysctls {
    pub(crate) fn for_ports(ports: &str) -> Sysctls {
        Sysctls {
            // The listen queues (the server's host).
            queues: vec![("net.core.somaxconn", "65535".to_string()), ("net.ipv4.tcp_max_syn_backlog", "65535".into())],
            // The ports (the client's host; both in netns).
            ports: vec![("net.ipv4.ip_local_port_range", "1024 65535".to_string()), ("net.ipv4.ip_local_reserved_ports", ports.to_string())],
        }
    }
}

impl Net {
    pub(crate) fn new(kind: Topology, why: String) -> Net {
        Net {
            placement: Placement {
                kind,
                why,
                namespaces: Vec::new(),
                ehash_planned: None,
                ehash_entries: None,
                server_address: Ipv4Addr::LOCALHOST,
                client_sources: Vec::new(),
                nodes: Vec::new(),
                broker: None,
            },
            client_ns: None,
            notes: Vec::new(),
            veths: Vec::new(),
        }
    }
}

fn build(net: &mut Net, pid: u32, connections: u64, sysctls: &Sysctls, sources: u64) -> Result<()> {
    let both: Vec<(&str, String)> = sysctls.queues.iter().chain(&sysctls.ports).cloned().collect();
    let kind = net.placement.kind;
    match kind {
        Topology::Netns => {
            let name = format!("{PREFIX}{pid}-net");
            // Both ends and the listeners in one table.
            let ehash = ehash_for(2 * connections + 1024);
            net.placement.namespaces.push(name.clone());
            create(&name, ehash, &both, &mut net.notes)?;
            net.placement.ehash_planned = Some(ehash);
            enter(&name)?;
        }
        Topology::Veth => {
            let (srv, cli) = (format!("{PREFIX}{pid}-srv"), format!("{PREFIX}{pid}-cli"));
            let ehash = ehash_for(connections + 1024);
            net.placement.namespaces.push(srv.clone());
            create(&srv, ehash, &both, &mut net.notes)?;
            net.placement.namespaces.push(cli.clone());
            create(&cli, ehash, &sysctls.ports, &mut net.notes)?;
            net.placement.ehash_planned = Some(ehash);
            let (vs, vc) = (format!("mc{pid}s"), format!("mc{pid}c"));
            net.veths.push(vs.clone());
            ip(&["link", "add", &vs, "type", "veth", "peer", "name", &vc])?;
            ip(&["link", "set", &vs, "netns", &srv])?;
            ip(&["link", "set", &vc, "netns", &cli])?;
            ip(&["-n", &srv, "addr", "add", &format!("{VETH_SERVER}/16"), "dev", &vs])?;
            let sources = client_sources(sources);
            for a in &sources {
                ip(&["-n", &cli, "addr", "add", &format!("{a}/16"), "dev", &vc])?;
            }
            ip(&["-n", &srv, "link", "set", &vs, "up"])?;
            ip(&["-n", &cli, "link", "set", &vc, "up"])?;
            net.notes.push(format!("veth {vs} ({srv}, {VETH_SERVER}) <-> {vc} ({cli}, {} source addresses from {})", sources.len(), sources[0]));
            net.placement.server_address = VETH_SERVER;
            net.placement.client_sources = sources;
            net.client_ns = Some(File::open(format!("/run/netns/{cli}")).with_context(|| format!("opening namespace {cli}"))?);
            enter(&srv)?;
        }
        Topology::Auto | Topology::Host => unreachable!("resolved above"),
    }
    net.placement.ehash_entries = ehash_here();
    Ok(())
}

/// `n` client source addresses (10.201.1.1 on) of a namespaced client host.
pub(crate) fn client_sources(n: u64) -> Vec<Ipv4Addr> {
    (0..n.clamp(1, 250 * 254)).map(|i| Ipv4Addr::new(10, 201, 1 + (i / 254) as u8, 1 + (i % 254) as u8)).collect()
}

/// Enter a namespace in a child between fork and exec (async-signal-safe).
pub(crate) fn setns_in_child(fd: i32) -> std::io::Result<()> {
    // SAFETY: setns is a plain syscall on an fd the parent keeps open.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ehash_is_the_next_power_of_two() {
        assert_eq!(ehash_for(2_000_000 * 2 + 1024), 4_194_304);
        assert_eq!(ehash_for(10), 1024);
        assert_eq!(ehash_for(1 << 30), EHASH_MAX);
    }
}
