//! Kernel and process memory readings used to price a connection.
//!
//! User memory is the RSS the workers report about themselves. Kernel
//! memory is read two ways: total `Slab` from /proc/meminfo (everything the
//! kernel allocated, including caches that unrelated activity grows) and
//! the socket caches alone from /proc/slabinfo (TCP socks, socket inodes,
//! files, dentries, epoll items), which is the cleaner per-socket figure.
//! Nothing here walks /proc/PID/fd: doing so grows proc inode caches by
//! ~1.8 KB per connection and would pollute the very number we measure.

use serde::Serialize;

/// Slab caches that a TCP socket endpoint allocates from.
pub(crate) const SOCKET_CACHES: &[&str] = &["TCP", "sock_inode_cache", "filp", "dentry", "eventpoll_epi", "eventpoll_pwq"];

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct KernelMemory {
    /// Slab from /proc/meminfo, bytes.
    pub slab_bytes: u64,
    /// Bytes held by [`SOCKET_CACHES`] objects (active objects × size),
    /// or 0 when /proc/slabinfo is not readable.
    pub socket_cache_bytes: u64,
    /// Active objects in the TCP cache (one per TCP socket endpoint).
    pub tcp_objects: u64,
}

pub(crate) fn kernel_memory() -> KernelMemory {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let slab_bytes = meminfo_kib(&meminfo, "Slab:").unwrap_or(0) * 1024;
    let slabinfo = std::fs::read_to_string("/proc/slabinfo").unwrap_or_default();
    let mut socket_cache_bytes = 0;
    let mut tcp_objects = 0;
    for (name, active, size) in slab_caches(&slabinfo) {
        if SOCKET_CACHES.contains(&name) {
            socket_cache_bytes += active * size;
        }
        if name == "TCP" {
            tcp_objects = active;
        }
    }
    KernelMemory { slab_bytes, socket_cache_bytes, tcp_objects }
}

/// A "Key:   123 kB" value from /proc/meminfo, in KiB.
pub(crate) fn meminfo_kib(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

/// (name, active objects, object size) for every cache in /proc/slabinfo.
pub(crate) fn slab_caches(slabinfo: &str) -> impl Iterator<Item = (&str, u64, u64)> {
    slabinfo.lines().filter(|l| !l.starts_with('#') && !l.starts_with("slabinfo")).filter_map(|l| {
        let mut f = l.split_whitespace();
        let name = f.next()?;
        let active = f.next()?.parse().ok()?;
        let _total: u64 = f.next()?.parse().ok()?;
        let size = f.next()?.parse().ok()?;
        Some((name, active, size))
    })
}

/// Sum of VmRSS over processes, bytes (vanished processes count 0).
/// Open file descriptors of these processes (entries of /proc/PID/fd).
/// Linux 6.2+ reports the count as the directory's size (one stat); older
/// kernels need the directory walked (seconds at millions of fds).
pub(crate) fn fds_of(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| {
            let dir = format!("/proc/{pid}/fd");
            match std::fs::metadata(&dir).map(|m| m.len()) {
                Ok(n) if n > 0 => Some(n),
                _ => std::fs::read_dir(&dir).ok().map(|d| d.count() as u64),
            }
        })
        .sum()
}

pub(crate) fn rss_of(pids: &[u32]) -> u64 {
    let page = crate::sys::page_size();
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/statm")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * page)
        .sum()
}

/// PSS (proportional set size) summed over processes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Pss {
    /// Everything, with shared pages (the binary's text) split between the
    /// processes mapping them: what the processes cost the machine.
    pub total: u64,
    /// Anonymous memory only (heap, stacks): what connections allocate,
    /// unaffected by how many other processes share the binary.
    pub anon: u64,
}

/// Sum of PSS over processes, bytes (vanished processes count 0).
pub(crate) fn pss_of(pids: &[u32]) -> Pss {
    let mut out = Pss::default();
    for s in pids.iter().filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()) {
        out.total += meminfo_kib(&s, "Pss:").unwrap_or(0) * 1024;
        out.anon += meminfo_kib(&s, "Pss_Anon:").unwrap_or(0) * 1024;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slabinfo_and_meminfo() {
        let slab = "slabinfo - version: 2.1\n# name <active_objs> <num_objs> <objsize> ...\nTCP 26 26 2368 13 8 : tunables\nfilp 504 504 192 21 1 : x\nkmalloc-8 9 9 8 1 1\n";
        let v: Vec<_> = slab_caches(slab).collect();
        assert_eq!(v, vec![("TCP", 26, 2368), ("filp", 504, 192), ("kmalloc-8", 9, 8)]);
        assert_eq!(meminfo_kib("MemTotal: 10 kB\nSlab:  76540 kB\n", "Slab:"), Some(76540));
    }
}
