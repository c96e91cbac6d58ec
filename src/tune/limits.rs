//! Reading every value that caps connection count, through one reader
//! rooted at a directory (default `/`), so tests can point it at a fake
//! /proc and /sys tree. Missing files are `None`, never an error: a
//! container may hide any of them.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Everything `tune` looks at, as read.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Limits {
    pub nofile_soft: u64,
    pub nofile_hard: u64,
    pub nr_open: Option<u64>,
    pub file_max: Option<u64>,
    /// Files allocated system-wide right now (first field of file-nr).
    pub files_allocated: Option<u64>,
    pub port_range: Option<(u64, u64)>,
    pub somaxconn: Option<u64>,
    pub tcp_max_syn_backlog: Option<u64>,
    /// net.core.netdev_max_backlog: packets each CPU's input backlog
    /// holds (loopback and veth traffic passes it).
    pub netdev_max_backlog: Option<u64>,
    pub mem_available: Option<u64>,
    pub cgroup_memory_max: Option<u64>,
    pub cgroup_memory_usage: Option<u64>,
    /// net.ipv4.tcp_mem (pages): low, pressure, high.
    pub tcp_mem: Option<[u64; 3]>,
    pub conntrack_max: Option<u64>,
    pub conntrack_count: Option<u64>,
    /// RLIMIT_NPROC soft limit (`ulimit -u`).
    pub max_processes: Option<u64>,
    pub cgroup_pids_max: Option<u64>,
    pub pid_max: Option<u64>,
    /// kernel.threads-max: threads system-wide.
    pub threads_max: Option<u64>,
    /// Tasks (processes and threads) that exist now (/proc/loadavg).
    pub tasks_now: Option<u64>,
    /// net.ipv4.tcp_migrate_req (reported; megaconn closes no listener
    /// while running, so it does not depend on it): 1 moves handshakes queued on a closing
    /// SO_REUSEPORT listener to a sibling instead of resetting them.
    pub tcp_migrate_req: Option<u64>,
    /// net.ipv4.tcp_ehash_entries: buckets of the TCP established hash of
    /// this namespace (negative: a namespace sharing the host's).
    pub tcp_ehash_entries: Option<i64>,
    /// net.ipv4.tcp_child_ehash_entries: the size namespaces created from
    /// here get (0: they share this one).
    pub tcp_child_ehash_entries: Option<u64>,
    /// Why this process cannot run the io_uring reactor (None: it can;
    /// only probed on the live system, root `/`).
    pub io_uring_refused: Option<String>,
    /// Object size in bytes of the slab caches a socket endpoint uses.
    pub slab_sizes: BTreeMap<String, u64>,
    pub page_size: u64,
}

pub(crate) struct Reader {
    root: PathBuf,
}

/// cgroup v1 reports "no limit" as a huge number.
const CGROUP_UNLIMITED: u64 = 1 << 60;

impl Reader {
    pub(crate) fn new(root: impl Into<PathBuf>) -> Reader {
        Reader { root: root.into() }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel.trim_start_matches('/'))).ok()
    }

    fn num(&self, rel: &str) -> Option<u64> {
        self.read(rel)?.split_whitespace().next()?.parse().ok()
    }

    pub(crate) fn read_all(&self) -> Limits {
        let limits = self.read("proc/self/limits").unwrap_or_default();
        let (nofile_soft, nofile_hard) = rlimit(&limits, "Max open files").unwrap_or((1024, 1024));
        let meminfo = self.read("proc/meminfo").unwrap_or_default();
        let two = |rel: &str| -> Option<Vec<u64>> { Some(self.read(rel)?.split_whitespace().filter_map(|v| v.parse().ok()).collect()) };
        let slabinfo = self.read("proc/slabinfo").unwrap_or_default();
        let slab_sizes = crate::stats::memory::slab_caches(&slabinfo)
            .filter(|(name, _, _)| crate::stats::memory::SOCKET_CACHES.contains(name))
            .map(|(name, _, size)| (name.to_string(), size))
            .collect();
        let (cg_max, cg_usage, cg_pids) = self.cgroup();
        Limits {
            nofile_soft,
            nofile_hard,
            nr_open: self.num("proc/sys/fs/nr_open"),
            file_max: self.num("proc/sys/fs/file-max"),
            files_allocated: self.num("proc/sys/fs/file-nr"),
            port_range: two("proc/sys/net/ipv4/ip_local_port_range").filter(|v| v.len() == 2).map(|v| (v[0], v[1])),
            somaxconn: self.num("proc/sys/net/core/somaxconn"),
            tcp_max_syn_backlog: self.num("proc/sys/net/ipv4/tcp_max_syn_backlog"),
            netdev_max_backlog: self.num("proc/sys/net/core/netdev_max_backlog"),
            mem_available: crate::stats::memory::meminfo_kib(&meminfo, "MemAvailable:").map(|k| k * 1024),
            cgroup_memory_max: cg_max,
            cgroup_memory_usage: cg_usage,
            tcp_mem: two("proc/sys/net/ipv4/tcp_mem").filter(|v| v.len() == 3).map(|v| [v[0], v[1], v[2]]),
            conntrack_max: self.num("proc/sys/net/netfilter/nf_conntrack_max"),
            conntrack_count: self.num("proc/sys/net/netfilter/nf_conntrack_count"),
            max_processes: rlimit(&limits, "Max processes").map(|(soft, _)| soft),
            cgroup_pids_max: cg_pids,
            pid_max: self.num("proc/sys/kernel/pid_max"),
            threads_max: self.num("proc/sys/kernel/threads-max"),
            tasks_now: self.read("proc/loadavg").and_then(|l| l.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()),
            tcp_migrate_req: self.num("proc/sys/net/ipv4/tcp_migrate_req"),
            tcp_ehash_entries: self.read("proc/sys/net/ipv4/tcp_ehash_entries").and_then(|s| s.trim().parse().ok()),
            tcp_child_ehash_entries: self.num("proc/sys/net/ipv4/tcp_child_ehash_entries"),
            io_uring_refused: if self.root == std::path::Path::new("/") { crate::uring::probe().err() } else { None },
            slab_sizes,
            page_size: crate::sys::page_size(),
        }
    }

    /// (memory limit, memory usage, pids limit) of this process's cgroup,
    /// v2 or v1, falling back to the hierarchy root when the process's
    /// own path is not visible (containers).
    fn cgroup(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let text = self.read("proc/self/cgroup").unwrap_or_default();
        let mut v2 = None;
        let mut v1_mem = None;
        let mut v1_pids = None;
        for line in text.lines() {
            let mut f = line.splitn(3, ':');
            let (_, ctrl, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or("/"));
            if ctrl.is_empty() {
                v2 = Some(path.to_string());
            } else if ctrl.split(',').any(|c| c == "memory") {
                v1_mem = Some(path.to_string());
            } else if ctrl.split(',').any(|c| c == "pids") {
                v1_pids = Some(path.to_string());
            }
        }
        let first = |cands: Vec<String>| -> Option<u64> {
            cands.iter().find_map(|c| {
                let s = self.read(c)?;
                let s = s.trim();
                if s == "max" {
                    Some(u64::MAX)
                } else {
                    s.parse().ok()
                }
            })
        };
        let limited = |v: Option<u64>| v.filter(|x| *x < CGROUP_UNLIMITED);
        let at = |base: &str, path: &Option<String>, file: &str| -> Vec<String> {
            let mut v = Vec::new();
            if let Some(p) = path {
                v.push(format!("{base}{}/{file}", p.trim_end_matches('/')));
            }
            v.push(format!("{base}/{file}"));
            v
        };
        // v1 hierarchies first when present, as on this kind of machine.
        let mem_max =
            limited(first(at("sys/fs/cgroup/memory", &v1_mem, "memory.limit_in_bytes"))).or_else(|| limited(first(at("sys/fs/cgroup", &v2, "memory.max"))));
        let mem_usage = first(at("sys/fs/cgroup/memory", &v1_mem, "memory.usage_in_bytes")).or_else(|| first(at("sys/fs/cgroup", &v2, "memory.current")));
        let pids = limited(first(at("sys/fs/cgroup/pids", &v1_pids, "pids.max"))).or_else(|| limited(first(at("sys/fs/cgroup", &v2, "pids.max"))));
        (mem_max, mem_usage.filter(|_| mem_max.is_some()), pids)
    }
}

/// (soft, hard) of one line of /proc/PID/limits; "unlimited" is u64::MAX.
fn rlimit(limits: &str, name: &str) -> Option<(u64, u64)> {
    let rest = limits.lines().find(|l| l.starts_with(name))?[name.len()..].to_string();
    let mut f = rest.split_whitespace().map(|v| if v == "unlimited" { Some(u64::MAX) } else { v.parse().ok() });
    Some((f.next()??, f.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Write a fake /proc and /sys tree.
    fn tree(files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("megaconn-tune-{}-{}", std::process::id(), files.len() * 7919 + files[0].1.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, content) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        dir
    }

    const LIMITS_1024: &str = "Limit Soft Hard Units\nMax processes 4096 4096 processes\nMax open files 1024 1024 files\n";

    #[test]
    fn reads_a_fake_tree_v2_cgroup() {
        let root = tree(&[
            ("proc/self/limits", LIMITS_1024),
            ("proc/sys/fs/file-max", "100000\n"),
            ("proc/sys/fs/file-nr", "1500\t0\t100000\n"),
            ("proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n"),
            ("proc/meminfo", "MemTotal: 25165824 kB\nMemAvailable: 25000000 kB\n"),
            ("proc/self/cgroup", "0::/job\n"),
            ("sys/fs/cgroup/job/memory.max", "2147483648\n"),
            ("sys/fs/cgroup/job/memory.current", "0\n"),
            ("sys/fs/cgroup/job/pids.max", "max\n"),
        ]);
        let l = Reader::new(&root).read_all();
        assert_eq!((l.nofile_soft, l.nofile_hard), (1024, 1024));
        assert_eq!(l.file_max, Some(100_000));
        assert_eq!(l.files_allocated, Some(1500));
        assert_eq!(l.port_range, Some((32768, 60999)));
        assert_eq!(l.cgroup_memory_max, Some(2 << 30));
        assert_eq!(l.cgroup_pids_max, None);
        assert_eq!(l.max_processes, Some(4096));
        use crate::tune::plan::*;
        let req = |n, role| Request { connections: n, role, ports: 100, rate: 50_000, cpus: 2 };
        // file-max 100000 with N = 200000 -> file-max binds.
        let a = assess(&l, req(200_000, TuneRole::Server));
        assert_eq!(a.binding.as_deref(), Some("fs.file-max"), "{}", a.verdict);
        // 1024 fds per process: the wall and its fix are named.
        let hard = a.rows.iter().find(|r| r.limit == "RLIMIT_NOFILE hard").unwrap();
        assert!(hard.fix.as_deref().unwrap().contains("near 1024"));
        // Under file-max, the 2 GiB cgroup binds before 24 GiB of RAM.
        let a = assess(&l, req(30_000, TuneRole::Both));
        assert!(a.binding.is_none(), "{}", a.verdict);
        let big = Limits { file_max: Some(100_000_000), ..l.clone() };
        let a = assess(&big, req(1_000_000, TuneRole::Both));
        assert_eq!(a.binding.as_deref(), Some("cgroup memory.max"), "{}", a.verdict);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn reads_v1_cgroup_and_ignores_unlimited() {
        let root = tree(&[
            ("proc/self/limits", LIMITS_1024),
            ("proc/self/cgroup", "4:memory:/a\n8:pids:/\n"),
            ("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "9223372036854771712\n"),
            ("sys/fs/cgroup/pids/pids.max", "500\n"),
        ]);
        let l = Reader::new(&root).read_all();
        assert_eq!(l.cgroup_memory_max, None);
        assert_eq!(l.cgroup_pids_max, Some(500));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn parses_limits_lines() {
        let t = "Limit                     Soft Limit           Hard Limit           Units\nMax processes             unlimited            unlimited            processes\nMax open files            1024                 524288               files\n";
        assert_eq!(rlimit(t, "Max open files"), Some((1024, 524288)));
        assert_eq!(rlimit(t, "Max processes"), Some((u64::MAX, u64::MAX)));
    }
}
