//! The kernel's own count of what it dropped while a run ramped
//! (`/proc/net/netstat`, what `nstat` reads): a full accept queue, a full
//! SYN queue, a listener that went away. megaconn sees none of these as
//! errors; the peer sees a retransmitted SYN (a 1 s stall) or a reset.
//! Beside them, the per-CPU input backlog's drops (`/proc/net/softnet_stat`):
//! every packet between network namespaces (veth, a bridge) passes that
//! queue, and at `net.core.netdev_max_backlog` 1000 (the default) a
//! broadcast or a reconnect storm over a million connections overflows
//! it: retransmissions, then connections closed `ETIMEDOUT`. And the
//! TCP memory counters: a broadcast to a million slow readers queues
//! gigabytes in receive queues, and past `net.ipv4.tcp_mem` the kernel
//! drops what arrives for every socket.

use std::collections::BTreeMap;

/// The TcpExt counters a ramp can trip, and the fix for each.
pub(crate) const WATCHED: &[(&str, &str)] = &[
    ("ListenOverflows", "accept queue full: raise net.core.somaxconn (megaconn tune --apply) or accept faster (more workers)"),
    (
        "ListenDrops",
        "SYN or final ACK dropped by a listener (its queue was full: see ListenOverflows, raise net.core.somaxconn and net.ipv4.tcp_max_syn_backlog)",
    ),
    ("TCPReqQFullDrop", "SYN queue full: raise net.ipv4.tcp_max_syn_backlog (megaconn tune --apply)"),
    ("TCPReqQFullDoCookies", "SYN queue full, SYN cookies sent: raise net.ipv4.tcp_max_syn_backlog"),
    ("TCPMigrateReqFailure", "a handshake on a closing listener could not move to a sibling: net.ipv4.tcp_migrate_req=1, and leave one worker at a time"),
    ("TCPSynRetrans", "SYNs or SYN-ACKs retransmitted (each is a 1 s stall for that connection)"),
    (
        "TCPMemoryPressures",
        "TCP buffer memory passed net.ipv4.tcp_mem's pressure mark: receive queues of slow readers (a broadcast to many connections) filled the kernel's share; raise net.ipv4.tcp_mem (the push bench prints a value)",
    ),
    ("TCPAbortOnMemory", "connections reset because the kernel had no TCP memory left for them: raise net.ipv4.tcp_mem"),
    (
        "TCPRcvQDrop",
        "packets dropped because a receive queue could get no memory (net.ipv4.tcp_mem exhausted or the reader far behind): raise net.ipv4.tcp_mem",
    ),
    (
        BACKLOG_DROPS,
        "packets dropped by a full per-CPU input backlog (traffic between namespaces passes it): raise net.core.netdev_max_backlog (megaconn tune --apply sets 65536)",
    ),
];

/// The name the input backlog's drops go by among the TcpExt counters.
pub(crate) const BACKLOG_DROPS: &str = "BacklogDrops";

/// The TcpExt counters now, with [`BACKLOG_DROPS`] (empty if the files
/// cannot be read).
pub(crate) fn read() -> BTreeMap<String, u64> {
    let mut out = parse(&std::fs::read_to_string("/proc/net/netstat").unwrap_or_default());
    if let Some(d) = backlog_drops(&std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default()) {
        out.insert(BACKLOG_DROPS.into(), d);
    }
    out
}

/// Packets dropped by the per-CPU input backlogs: the second (hex)
/// column of `/proc/net/softnet_stat`, summed over CPUs.
pub(crate) fn backlog_drops(text: &str) -> Option<u64> {
    let mut sum = None;
    for line in text.lines() {
        let d = u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()?;
        sum = Some(sum.unwrap_or(0) + d);
    }
    sum
}

/// TcpExt name/value lines of /proc/net/netstat into a map.
pub(crate) fn parse(text: &str) -> BTreeMap<String, u64> {
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("TcpExt:")).collect();
    let mut out = BTreeMap::new();
    if let [names, values] = lines[..] {
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()).skip(1) {
            if let Ok(v) = v.parse() {
                out.insert(n.to_string(), v);
            }
        }
    }
    out
}

/// What the watched counters rose by between two readings (only those
/// that rose).
pub(crate) fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    WATCHED
        .iter()
        .filter_map(|(name, _)| {
            let d = after.get(*name)?.saturating_sub(*before.get(*name).unwrap_or(&0));
            (d > 0).then(|| (name.to_string(), d))
        })
        .collect()
}

/// The fix for a watched counter.
pub(crate) fn fix(name: &str) -> &'static str {
    WATCHED.iter().find(|(n, _)| *n == name).map_or("", |(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_and_only_rises_are_reported() {
        let a = parse("TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 3 5\nIpExt: InNoRoutes\nIpExt: 1\n");
        assert_eq!(a["ListenOverflows"], 3);
        let b = parse("TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 3 9\n");
        assert_eq!(delta(&a, &b), BTreeMap::from([("ListenDrops".to_string(), 4)]));
        assert!(fix("ListenDrops").contains("somaxconn"));
    }

    #[test]
    fn backlog_drops_sum_the_second_column_over_cpus() {
        let text = "0cadfa10 001786d6 000000dd 00000000\n0cd8913f 0023808c 000000e3 00000000\n";
        assert_eq!(backlog_drops(text), Some(0x1786d6 + 0x23808c));
        assert_eq!(backlog_drops(""), None);
        assert_eq!(backlog_drops("zz"), None, "a line it cannot read: nothing rather than a wrong sum");
        assert!(fix(BACKLOG_DROPS).contains("netdev_max_backlog"));
    }
}
