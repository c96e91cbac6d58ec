//! The arithmetic of `tune`: for a target N, every limit that caps it,
//! what it needs to be, whether it binds, and the exact fix. Pure
//! functions over [`Limits`], so every verdict is unit-testable.

use super::limits::Limits;
use crate::supervise::plan::{plan_workers, Workers, BASE_FDS, FD_HEADROOM};
use serde::Serialize;

/// Kernel bytes per socket endpoint when /proc/slabinfo is unreadable:
/// the Slab growth per endpoint measured here at 1M and 2M (10,216 and
/// 10,342 B per connection, both ends).
pub(crate) const DEFAULT_KERNEL_BYTES_PER_ENDPOINT: u64 = 5_200;
/// Slab grows by more than the socket objects' own sizes (TCP sock 2368 +
/// sock_inode 832 + filp 256 + dentry 192 + epoll item 128 + pwq 72 =
/// 3,712 B here): slab pages' slack, kmalloc'd parts, hash chains.
/// Measured: 5,108-5,171 B per endpoint at 1M-2M = 1.38-1.39x.
const SLAB_GROWTH_PERCENT: u64 = 140;
/// User memory per endpoint we budget: measured 40 B per connection on
/// the server (108 B for an MQTT client with its topic and session) and
/// 74 B on the client at 1M (BENCHMARKS.md), rounded up.
pub(crate) const USER_BYTES_PER_ENDPOINT: u64 = 128;
/// Share of available memory a run may plan to use.
const MEMORY_BUDGET: f64 = 0.9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TuneRole {
    Server,
    Client,
    /// Both ends on this machine (loopback bench): two endpoints per connection.
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Warning,
    Binds,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub limit: String,
    pub current: String,
    pub needed: String,
    pub status: Status,
    /// What to do, as a command or config line; None when nothing is needed.
    pub fix: Option<String>,
    /// Most connections this limit allows as it is (None: no cap).
    pub max_connections: Option<u64>,
    /// Whether `tune --apply` can lift it (a sysctl).
    pub fixable: bool,
    /// The sysctl `--apply` would set: (key, value).
    #[serde(skip)]
    pub sysctl: Option<(String, String)>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Request {
    pub connections: u64,
    pub role: TuneRole,
    pub ports: u64,
    pub rate: u64,
    pub cpus: usize,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Assessment {
    pub request: Request,
    pub rows: Vec<Row>,
    /// The limit that binds first (lowest cap among binding rows).
    pub binding: Option<String>,
    pub worker_processes: u64,
    pub max_connections_now: u64,
    pub max_connections_after_fixes: u64,
    pub verdict: String,
}

fn row(limit: &str, current: String, needed: String, status: Status, fix: Option<String>, max: Option<u64>) -> Row {
    Row { limit: limit.into(), current, needed, status, fix, max_connections: max, fixable: false, sysctl: None }
}

/// A limit that is a sysctl: `--apply` can lift it (and will, when it is
/// not ok).
fn sysctl_row(mut r: Row, key: &str, value: String) -> Row {
    r.fixable = true;
    if r.status != Status::Ok {
        r.fix = Some(format!("sysctl -w {key}=\"{value}\""));
        r.sysctl = Some((key.into(), value));
    }
    r
}

fn opt(v: Option<u64>) -> String {
    v.map(|x| if x == u64::MAX { "unlimited".into() } else { crate::stats::format::count(x) }).unwrap_or_else(|| "unknown".into())
}

/// Worker processes `--workers auto` needs on each side.
pub(crate) fn processes(req: &Request, fd_hard: u64) -> (u64, u64) {
    let n = req.connections;
    let server = || plan_workers(n, Workers::Auto, fd_hard, req.ports, crate::proto::push::MAX_KEYS, req.cpus).map(|p| p.workers as u64).unwrap_or(u64::MAX);
    let client = || plan_workers(n, Workers::Auto, fd_hard, 0, u64::MAX, req.cpus).map(|p| p.workers as u64).unwrap_or(u64::MAX);
    match req.role {
        TuneRole::Server => (server(), 0),
        TuneRole::Client => (0, client()),
        TuneRole::Both => (server(), client()),
    }
}

pub(crate) fn kernel_bytes_per_endpoint(l: &Limits) -> u64 {
    let sum: u64 = l.slab_sizes.values().sum();
    if l.slab_sizes.contains_key("TCP") && sum > 0 {
        sum * SLAB_GROWTH_PERCENT / 100
    } else {
        DEFAULT_KERNEL_BYTES_PER_ENDPOINT
    }
}

/// What every check reads: the limits, the request, and what follows
/// from them (endpoints, worker processes, descriptors per process).
#[derive(Clone, Copy)]
struct Ctx<'a> {
    l: &'a Limits,
    req: &'a Request,
    n: u64,
    /// Socket endpoints per connection here: 2 with both ends on this machine.
    ends: u64,
    endpoints: u64,
    srv: u64,
    cli: u64,
    procs: u64,
    per_proc: u64,
}

/// One limit (or a family of them): its rows for the table.
type Check = fn(&Ctx<'_>) -> Vec<Row>;

/// Every limit on connection count, in the order the table prints them.
const CHECKS: &[Check] = &[descriptors, nr_open, file_max, ephemeral_ports, queues, memory, tcp_mem, conntrack, processes_for_workers, tcp_ehash, io_uring];

pub(crate) fn assess(l: &Limits, req: Request) -> Assessment {
    let n = req.connections;
    let ends: u64 = if req.role == TuneRole::Both { 2 } else { 1 };
    let endpoints = n.saturating_mul(ends);
    let (srv, cli) = processes(&req, l.nofile_hard);
    let procs = srv.saturating_add(cli);
    let per_proc = ((l.nofile_hard as f64 * FD_HEADROOM) as u64).saturating_sub(BASE_FDS + req.ports);
    let c = Ctx { l, req: &req, n, ends, endpoints, srv, cli, procs, per_proc };
    let rows: Vec<Row> = CHECKS.iter().flat_map(|check| check(&c)).collect();
    let binding = rows.iter().filter(|r| r.status == Status::Binds).min_by_key(|r| r.max_connections.unwrap_or(0)).map(|r| r.limit.clone());
    let max_now = rows.iter().filter_map(|r| r.max_connections).min().unwrap_or(u64::MAX);
    let max_after = rows.iter().filter(|r| !r.fixable).filter_map(|r| r.max_connections).min().unwrap_or(u64::MAX);
    let after_bound = rows.iter().filter(|r| !r.fixable && r.max_connections == Some(max_after)).map(|r| r.limit.clone()).next().unwrap_or_default();
    let c = crate::stats::format::count;
    let ends_text = if ends == 2 { " with both ends on this machine" } else { "" };
    let verdict = match &binding {
        Some(b) => format!(
            "For {} connections{ends_text}, {b} binds first: this machine supports about {} connections as it is and about {} after the fixes (then {after_bound} binds).",
            c(n),
            c(max_now),
            c(max_after)
        ),
        None => format!(
            "For {} connections{ends_text}, no limit binds ({procs} worker processes at RLIMIT_NOFILE hard {}); this machine supports about {} connections as it is and about {} after the fixes (bound by {after_bound}).",
            c(n),
            c(l.nofile_hard),
            c(max_now),
            c(max_after)
        ),
    };
    Assessment { request: req, rows, binding, worker_processes: procs, max_connections_now: max_now, max_connections_after_fixes: max_after, verdict }
}

/// Per-process descriptors: the ~870 wall and the 20000 wall.
fn descriptors(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, req, endpoints, srv, cli, procs, per_proc, .. } = *c;
    let mut rows = Vec::new();
    let soft_wall = l.nofile_soft.saturating_sub(150);
    rows.push(row(
        "RLIMIT_NOFILE soft (ulimit -n)",
        opt(Some(l.nofile_soft)),
        format!("{} (raised to hard at start)", opt(Some(l.nofile_hard))),
        if l.nofile_soft < l.nofile_hard { Status::Warning } else { Status::Ok },
        (l.nofile_soft < l.nofile_hard).then(|| {
            format!(
                "a one-process server would stall near {} connections (soft limit {} minus the runtime's own files); megaconn raises soft to hard itself, others need `ulimit -n {}`",
                soft_wall, l.nofile_soft, l.nofile_hard
            )
        }),
        None,
    ));
    let sides = match req.role {
        TuneRole::Server => format!("{srv} server"),
        TuneRole::Client => format!("{cli} client"),
        TuneRole::Both => format!("{srv} server + {cli} client"),
    };
    let hard_small = l.nofile_hard < endpoints.min(1_048_576);
    rows.push(row(
        "RLIMIT_NOFILE hard",
        opt(Some(l.nofile_hard)),
        format!("{} fds per process -> {procs} worker processes ({sides})", crate::stats::format::count(per_proc.min(endpoints))),
        if hard_small && procs > (req.cpus as u64) * 2 { Status::Warning } else { Status::Ok },
        hard_small.then(|| {
            format!(
                "{procs} processes are needed because one process may hold only ~{} sockets (near {} a single process stalls); to use fewer, raise the hard limit: `* hard nofile 1048576` in /etc/security/limits.conf or LimitNOFILE=1048576 (systemd); needs CAP_SYS_RESOURCE",
                per_proc, l.nofile_hard
            )
        }),
        None,
    ));
    rows
}

/// fs.nr_open caps any hard limit anyone can set.
fn nr_open(c: &Ctx<'_>) -> Vec<Row> {
    let l = c.l;
    vec![row("fs.nr_open", opt(l.nr_open), format!(">= RLIMIT_NOFILE hard ({})", opt(Some(l.nofile_hard))), Status::Ok, None, None)]
}

/// fs.file-max: all open files system-wide.
fn file_max(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, req, ends, endpoints, procs, .. } = *c;
    let mut rows = Vec::new();
    if let Some(max) = l.file_max {
        let used = l.files_allocated.unwrap_or(0);
        let needed = endpoints + used + procs * (BASE_FDS + req.ports) + 10_000;
        let room = max.saturating_sub(used + procs * (BASE_FDS + req.ports));
        let cap = room / ends;
        let status = if max < needed { Status::Binds } else { Status::Ok };
        let r = row("fs.file-max", format!("{} ({} in use)", opt(Some(max)), opt(Some(used))), opt(Some(needed)), status, None, Some(cap));
        rows.push(sysctl_row(r, "fs.file-max", (needed.next_power_of_two()).to_string()));
    }
    rows
}

/// Ephemeral ports per (source, destination port) pair.
fn ephemeral_ports(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, req, n, .. } = *c;
    let mut rows = Vec::new();
    if req.role != TuneRole::Server {
        if let Some((lo, hi)) = l.port_range {
            let size = hi.saturating_sub(lo) + 1;
            let sources = n.div_ceil(req.ports.max(1) * size).max(1);
            let narrow = size < 60_000;
            let r = row(
                "net.ipv4.ip_local_port_range",
                format!("{lo} {hi} ({} ports per source/destination pair)", crate::stats::format::count(size)),
                format!("{sources} source address(es) x {} ports (client plans them on loopback)", req.ports),
                if narrow && sources > 1 { Status::Warning } else { Status::Ok },
                None,
                None,
            );
            rows.push(sysctl_row(r, "net.ipv4.ip_local_port_range", "1024 65535".into()));
        }
    }
    rows
}

/// Listen and SYN queues against the accept rate.
fn queues(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, req, .. } = *c;
    let mut rows = Vec::new();
    if req.role != TuneRole::Client {
        let needed = (req.rate / 4).clamp(4096, 65535);
        for (key, cur) in [("net.core.somaxconn", l.somaxconn), ("net.ipv4.tcp_max_syn_backlog", l.tcp_max_syn_backlog)] {
            if let Some(cur) = cur {
                let r = row(
                    key,
                    opt(Some(cur)),
                    format!("{} for {}/s new connections", opt(Some(needed)), crate::stats::format::count(req.rate)),
                    if cur < needed { Status::Warning } else { Status::Ok },
                    None,
                    None,
                );
                rows.push(sysctl_row(r, key, needed.to_string()));
            }
        }
    }
    // Every packet over loopback or between namespaces passes a CPU's input
    // backlog; at the default 1000 a broadcast or a reconnect storm over
    // 100,000s of connections overflows it (measured: 3.8M drops and
    // 360,000 connections closed ETIMEDOUT in a 1M rollout bench).
    if let Some(cur) = l.netdev_max_backlog {
        let needed = if c.n >= BIG_BACKLOG_FROM { BIG_BACKLOG } else { cur.min(BIG_BACKLOG) };
        let r = row(
            "net.core.netdev_max_backlog",
            opt(Some(cur)),
            format!("{} for bursts to {} connections", opt(Some(needed)), crate::stats::format::count(c.n)),
            if cur < needed { Status::Warning } else { Status::Ok },
            None,
            None,
        );
        rows.push(sysctl_row(r, "net.core.netdev_max_backlog", needed.to_string()));
    }
    rows
}

/// From how many connections `tune` asks for a deep input backlog.
const BIG_BACKLOG_FROM: u64 = 100_000;
/// The input backlog it asks for then (packets per CPU).
const BIG_BACKLOG: u64 = 65_536;

/// Memory: kernel socket memory plus ours.
fn memory(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, n, ends, .. } = *c;
    let mut rows = Vec::new();
    let per_conn = ends * (kernel_bytes_per_endpoint(l) + USER_BYTES_PER_ENDPOINT);
    let mem_needed = n.saturating_mul(per_conn);
    let mem_row = |name: &str, avail: u64, what: String, fix: &str| {
        let budget = (avail as f64 * MEMORY_BUDGET) as u64;
        let cap = budget / per_conn;
        row(
            name,
            what,
            format!(
                "{} ({} B per connection: {} B kernel + {} B user per endpoint x {ends})",
                crate::stats::format::bytes(mem_needed),
                per_conn,
                kernel_bytes_per_endpoint(l),
                USER_BYTES_PER_ENDPOINT
            ),
            if mem_needed > budget { Status::Binds } else { Status::Ok },
            (mem_needed > budget).then(|| fix.to_string()),
            Some(cap),
        )
    };
    if let Some(avail) = l.mem_available {
        rows.push(mem_row(
            "memory (MemAvailable)",
            avail,
            format!("{} available", crate::stats::format::bytes(avail)),
            "add memory, or lower N (no setting frees kernel socket memory)",
        ));
    }
    if let Some(max) = l.cgroup_memory_max {
        let free = max.saturating_sub(l.cgroup_memory_usage.unwrap_or(0));
        rows.push(mem_row(
            "cgroup memory.max",
            free,
            format!("{} limit, {} free", crate::stats::format::bytes(max), crate::stats::format::bytes(free)),
            "raise the cgroup limit (memory.max / memory.limit_in_bytes; MemoryMax= in systemd, resources.limits.memory in Kubernetes)",
        ));
    }
    rows
}

/// TCP buffer memory: idle sockets hold none, but bursts of
/// heartbeats queue one small skb (~1 KiB truesize) on up to 1 in 10.
fn tcp_mem(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, endpoints, .. } = *c;
    let mut rows = Vec::new();
    if let Some([_, _, high]) = l.tcp_mem {
        let needed_pages = endpoints * 1024 / 10 / l.page_size.max(1);
        let r = row(
            "net.ipv4.tcp_mem (pages)",
            format!("max {}", opt(Some(high))),
            format!(">= {} pages for queued heartbeats", opt(Some(needed_pages))),
            if high < needed_pages { Status::Warning } else { Status::Ok },
            None,
            None,
        );
        rows.push(sysctl_row(r, "net.ipv4.tcp_mem", format!("{} {} {}", needed_pages, needed_pages * 3 / 2, needed_pages * 2)));
    }
    rows
}

/// Connection tracking, only when it is tracking something.
fn conntrack(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, n, .. } = *c;
    let mut rows = Vec::new();
    if let (Some(max), Some(count)) = (l.conntrack_max, l.conntrack_count) {
        if count > 0 {
            let needed = n + n / 10 + count;
            let r = row(
                "net.netfilter.nf_conntrack_max",
                format!("{} ({} tracked now)", opt(Some(max)), opt(Some(count))),
                opt(Some(needed)),
                if max < needed { Status::Binds } else { Status::Ok },
                None,
                Some(max.saturating_sub(count)),
            );
            rows.push(sysctl_row(r, "net.netfilter.nf_conntrack_max", needed.to_string()));
        }
    }
    rows
}

/// Processes: the workers the fd limit forces.
fn processes_for_workers(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, req, procs, per_proc, .. } = *c;
    let mut rows = Vec::new();
    let pid_caps = [("ulimit -u", l.max_processes), ("cgroup pids.max", l.cgroup_pids_max), ("kernel.pid_max", l.pid_max)];
    if let Some((name, cap)) = pid_caps.iter().filter_map(|(name, c)| c.map(|c| (*name, c))).min_by_key(|(_, c)| *c) {
        // Leave room for everything else running.
        let usable = cap.saturating_sub(200);
        let conn_cap = usable.saturating_mul(per_proc) / if req.role == TuneRole::Both { 2 } else { 1 };
        rows.push(row(
            "processes",
            format!("{} ({name})", opt(Some(cap))),
            format!("{procs} worker processes"),
            if procs > usable { Status::Binds } else { Status::Ok },
            (procs > usable).then(|| format!("raise {name} (LimitNPROC= / pids.max / kernel.pid_max) or the fd hard limit so fewer processes are needed")),
            Some(conn_cap),
        ));
    }
    rows
}

/// The TCP established hash: sized at boot for the host; every packet
/// walks a chain of sockets / buckets entries.
fn tcp_ehash(c: &Ctx<'_>) -> Vec<Row> {
    let Ctx { l, req, endpoints, .. } = *c;
    let mut rows = Vec::new();
    if let Some(e) = l.tcp_ehash_entries {
        let buckets = e.unsigned_abs();
        let sockets = endpoints + req.ports;
        let want = crate::topology::ehash_for(sockets);
        let chain = sockets as f64 / buckets.max(1) as f64;
        rows.push(row(
            "net.ipv4.tcp_ehash_entries",
            format!("{} buckets{}", crate::stats::format::count(buckets), if e < 0 { " (the host's, shared)" } else { "" }),
            format!("{} for {} sockets (chains of {chain:.1}; past ~2 every packet pays)", crate::stats::format::count(want), crate::stats::format::count(sockets)),
            if chain > 2.0 { Status::Warning } else { Status::Ok },
            (chain > 2.0).then(|| {
                format!(
                    "host: boot parameter thash_entries={want} (kernel command line, reboot); a network namespace: sysctl -w net.ipv4.tcp_child_ehash_entries={want} before creating it (megaconn bench --topology netns does this for its own)"
                )
            }),
            None,
        ));
    }
    rows
}

/// Whether the server's `--io auto` gets io_uring here (it falls back to
/// epoll otherwise: a cost per event, not a cap on connections).
fn io_uring(c: &Ctx<'_>) -> Vec<Row> {
    if c.req.role == TuneRole::Client {
        return Vec::new();
    }
    let refused = c.l.io_uring_refused.as_ref();
    vec![row(
        "io_uring (server --io auto)",
        refused.map_or_else(|| "available (multishot receive, provided buffer ring)".into(), |why| format!("refused: {why}")),
        "available, for fewer system calls per heartbeat and request".into(),
        if refused.is_some() { Status::Warning } else { Status::Ok },
        refused.map(|_| {
            "sysctl -w kernel.io_uring_disabled=0; in a container, a seccomp profile allowing io_uring_setup, io_uring_enter and io_uring_register; else the server runs on epoll (--io epoll)".into()
        }),
        None,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Limits {
        Limits {
            nofile_soft: 20_000,
            nofile_hard: 20_000,
            nr_open: Some(1_048_576),
            file_max: Some(2_466_183),
            files_allocated: Some(300),
            port_range: Some((32768, 60999)),
            somaxconn: Some(4096),
            tcp_max_syn_backlog: Some(2048),
            netdev_max_backlog: Some(1000),
            mem_available: Some(24 << 30),
            tcp_mem: Some([287901, 383869, 575802]),
            conntrack_max: Some(262144),
            conntrack_count: Some(0),
            max_processes: Some(96365),
            pid_max: Some(32768),
            page_size: 4096,
            ..Default::default()
        }
    }

    fn req(n: u64, role: TuneRole) -> Request {
        Request { connections: n, role, ports: 100, rate: 50_000, cpus: 2 }
    }

    #[test]
    fn small_soft_limit_reports_the_870_wall() {
        let l = Limits { nofile_soft: 1024, nofile_hard: 1024, ..machine() };
        let a = assess(&l, req(100_000, TuneRole::Server));
        let hard = a.rows.iter().find(|r| r.limit == "RLIMIT_NOFILE hard").unwrap();
        assert_eq!(hard.status, Status::Warning);
        assert!(hard.fix.as_ref().unwrap().contains("limits.conf"), "{hard:?}");
        assert!(hard.fix.as_ref().unwrap().contains("near 1024"));
        let l = Limits { nofile_soft: 1024, nofile_hard: 524_288, ..machine() };
        let a = assess(&l, req(100_000, TuneRole::Server));
        let soft = &a.rows[0];
        assert!(soft.fix.as_ref().unwrap().contains("stall near 874"), "{soft:?}");
    }

    #[test]
    fn a_shallow_input_backlog_is_a_warning_with_its_fix_from_100k() {
        let row = |n| assess(&machine(), req(n, TuneRole::Both)).rows.into_iter().find(|r| r.limit == "net.core.netdev_max_backlog").unwrap();
        let big = row(1_000_000);
        assert_eq!(big.status, Status::Warning, "{big:?}");
        assert_eq!(big.fix.as_deref(), Some("sysctl -w net.core.netdev_max_backlog=\"65536\""), "{big:?}");
        assert_eq!(row(10_000).status, Status::Ok, "a small run keeps the default");
        let deep = Limits { netdev_max_backlog: Some(65_536), ..machine() };
        let r = assess(&deep, req(1_000_000, TuneRole::Both)).rows.into_iter().find(|r| r.limit == "net.core.netdev_max_backlog").unwrap();
        assert_eq!((r.status, r.fix), (Status::Ok, None));
    }

    #[test]
    fn file_max_binds_with_its_fix() {
        let l = Limits { file_max: Some(100_000), ..machine() };
        let a = assess(&l, req(200_000, TuneRole::Server));
        assert_eq!(a.binding.as_deref(), Some("fs.file-max"), "{:#?}", a.rows);
        let r = a.rows.iter().find(|r| r.limit == "fs.file-max").unwrap();
        assert!(r.fix.as_ref().unwrap().starts_with("sysctl -w fs.file-max="));
        assert!(a.max_connections_now < 100_000);
        assert!(a.max_connections_after_fixes > 1_000_000);
    }

    #[test]
    fn five_million_on_24_gib_is_bound_by_memory() {
        let l = Limits { file_max: Some(100_000_000), ..machine() };
        let a = assess(&l, req(5_000_000, TuneRole::Both));
        assert_eq!(a.binding.as_deref(), Some("memory (MemAvailable)"), "{}", a.verdict);
        let expect = (24u64 << 30) as f64 * 0.9 / (2.0 * (DEFAULT_KERNEL_BYTES_PER_ENDPOINT + USER_BYTES_PER_ENDPOINT) as f64);
        assert_eq!(a.max_connections_after_fixes, expect as u64);
        assert!(a.verdict.contains("memory"));
    }

    #[test]
    fn cgroup_lower_than_memavailable_binds() {
        let l = Limits { cgroup_memory_max: Some(2 << 30), cgroup_memory_usage: Some(0), ..machine() };
        let a = assess(&l, req(1_000_000, TuneRole::Both));
        assert_eq!(a.binding.as_deref(), Some("cgroup memory.max"), "{}", a.verdict);
    }

    #[test]
    fn million_both_needs_about_a_hundred_processes_and_fits() {
        let a = assess(&machine(), req(1_000_000, TuneRole::Both));
        assert!((100..=120).contains(&a.worker_processes), "{}", a.worker_processes);
        assert_eq!(a.binding, None, "{}", a.verdict);
        let mem = a.rows.iter().find(|r| r.limit.starts_with("memory")).unwrap();
        assert_eq!(mem.status, Status::Ok);
    }

    #[test]
    fn conntrack_counts_only_when_tracking() {
        let a = assess(&machine(), req(1_000_000, TuneRole::Server));
        assert!(a.rows.iter().all(|r| !r.limit.contains("conntrack")));
        let l = Limits { conntrack_count: Some(10), ..machine() };
        let a = assess(&l, req(1_000_000, TuneRole::Server));
        assert_eq!(a.binding.as_deref(), Some("net.netfilter.nf_conntrack_max"));
    }
}
