//! `megaconn tune`: the doctor. Reads every limit on connection count,
//! says which one binds for a target N and prints (or applies) the fix.
//! server, client and bench run the same check before they start.
pub(crate) mod apply;
pub(crate) mod limits;
pub(crate) mod plan;
pub(crate) mod tasks;

use crate::stats::format;
use anyhow::Result;
use plan::{Assessment, Request, Status, TuneRole};

/// The limits of this machine, as read now.
pub(crate) fn limits_here() -> limits::Limits {
    limits::Reader::new("/").read_all()
}

pub(crate) fn assess_here(root: &std::path::Path, connections: u64, role: TuneRole, ports: u64, rate: u64) -> Assessment {
    let l = limits::Reader::new(root).read_all();
    plan::assess(&l, Request { connections, role, ports, rate, cpus: crate::sys::online_cpus() })
}

/// The check every run does first: Err (a usage error) when a limit makes
/// the target impossible, else the warning lines to show.
pub(crate) fn precheck(connections: u64, role: TuneRole, ports: u64, rate: u64) -> Result<Vec<String>, crate::UsageError> {
    let a = assess_here(std::path::Path::new("/"), connections, role, ports, rate);
    if let Some(b) = &a.binding {
        let role_name = format!("{role:?}").to_lowercase();
        let causes: Vec<String> = a
            .rows
            .iter()
            .filter(|r| r.status == Status::Binds)
            .map(|r| format!("{} is {}, needs {} (fix: {})", r.limit, r.current, r.needed, r.fix.as_deref().unwrap_or("see megaconn tune")))
            .collect();
        return Err(crate::UsageError(format!(
            "{} connections cannot be reached; {b} binds first. {}. Details: megaconn tune --connections {connections} --role {role_name}",
            format::count(connections),
            causes.join("; ")
        )));
    }
    Ok(a.rows
        .iter()
        .filter(|r| r.status == Status::Warning)
        .map(|r| format!("warning: {}: {} (needs {}){}", r.limit, r.current, r.needed, r.fix.as_ref().map(|f| format!("; fix: {f}")).unwrap_or_default()))
        .collect())
}

/// fs.file-max against `extra` more open files than are in use now (a
/// run whose peak the per-process check cannot see: a rollout's
/// restarted node plans for every connection while the client and the
/// other nodes hold them all); a usage error with the fix.
pub(crate) fn check_files(extra: u64, what: &str) -> Result<(), crate::UsageError> {
    let l = limits_here();
    let (Some(max), used) = (l.file_max, l.files_allocated.unwrap_or(0)) else { return Ok(()) };
    let needed = used + extra + 10_000;
    if max >= needed {
        return Ok(());
    }
    Err(crate::UsageError(format!(
        "{what} needs {} open files system-wide at its peak, and fs.file-max is {} ({} in use) (fix: sysctl -w fs.file-max={})",
        format::count(needed),
        format::count(max),
        format::count(used),
        needed.next_power_of_two()
    )))
}

/// Kernel bytes a connection's receive queue holds for one message of
/// `message_bytes`: the skb around it (its head, shared info, the rounding
/// of its data) is about this much more than the message.
pub(crate) const SKB_OVERHEAD_BYTES: u64 = 1280;

/// A broadcast to `connections` queues its message in every receive queue
/// until the reader catches up (a load generator reads slower than a
/// server writes), each in an skb of about the message plus
/// [`SKB_OVERHEAD_BYTES`]. Past net.ipv4.tcp_mem's high mark the kernel
/// gives no socket a buffer: what arrives is dropped and retransmitted,
/// heartbeats and deliveries stall for minutes (measured: a 1 KB
/// broadcast to 1,000,000 WebSocket connections at the default 575,802
/// pages delivered 84,701 of 5,000,000). A warning with the fix when the
/// high mark is below one broadcast's worth.
pub(crate) fn broadcast_memory(l: &limits::Limits, connections: u64, message_bytes: u64) -> Option<String> {
    let [_, _, high] = l.tcp_mem?;
    let page = l.page_size.max(1);
    let needed = connections.saturating_mul(message_bytes + SKB_OVERHEAD_BYTES).div_ceil(page);
    if high >= needed {
        return None;
    }
    // Low at one broadcast, pressure at 1.5, high at 2: room for two
    // rounds in flight before the kernel starts refusing buffers.
    let fix = format!("sysctl -w net.ipv4.tcp_mem=\"{needed} {} {}\"", needed * 3 / 2, needed * 2);
    let room = l.mem_available.map_or(String::new(), |a| {
        if needed * 2 * page > a {
            format!("; that is more than the {} this machine has available: fewer connections or smaller messages", format::bytes(a))
        } else {
            String::new()
        }
    });
    Some(format!(
        "warning: net.ipv4.tcp_mem: high mark {} pages ({}) is below one broadcast of {} bytes to {} connections (~{} pages, {} in receive queues): past it the kernel drops and the run stalls; fix: {fix}{room}",
        format::count(high),
        format::bytes(high * page),
        format::count(message_bytes),
        format::count(connections),
        format::count(needed),
        format::bytes(needed * page),
    ))
}

/// What `megaconn tune` is asked.
#[derive(Debug, Clone)]
pub(crate) struct TuneConfig {
    pub connections: u64,
    pub role: TuneRole,
    /// Server ports in use (listener fds, port-pair capacity).
    pub ports: u64,
    /// Planned new connections per second (accept queues).
    pub rate: u64,
    pub apply: bool,
    pub dry_run: bool,
    pub json: bool,
    /// Read /proc and /sys below this directory (tests).
    pub root: std::path::PathBuf,
}

impl Default for TuneConfig {
    fn default() -> TuneConfig {
        TuneConfig { connections: 1_000_000, role: TuneRole::Both, ports: 100, rate: 50_000, apply: false, dry_run: false, json: false, root: "/".into() }
    }
}

pub(crate) fn run(args: TuneConfig) -> Result<i32> {
    let a = assess_here(&args.root, args.connections, args.role, args.ports, args.rate);
    if args.apply || args.dry_run {
        print_table(&a);
        return apply::apply(&a, &args.root, args.dry_run);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&a)?);
    } else {
        print_table(&a);
    }
    Ok(if a.binding.is_some() { 1 } else { 0 })
}

fn print_table(a: &Assessment) {
    let w0 = a.rows.iter().map(|r| r.limit.len()).max().unwrap_or(5).max(5);
    let w1 = a.rows.iter().map(|r| r.current.len()).max().unwrap_or(7).max(7);
    println!("{:<w0$}  {:<w1$}  {:<7}  needed / fix", "limit", "current", "status");
    for r in &a.rows {
        let status = match r.status {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Binds => "BINDS",
        };
        println!("{:<w0$}  {:<w1$}  {:<7}  {}", r.limit, r.current, status, r.needed);
        if let Some(f) = &r.fix {
            println!("{:<w0$}  {:<w1$}           fix: {f}", "", "");
        }
    }
    println!("\n{}", a.verdict);
}

#[cfg(test)]
mod tests {
    use super::limits::Limits;

    fn with_tcp_mem(high: u64, available: u64) -> Limits {
        Limits { tcp_mem: Some([high / 2, high * 3 / 4, high]), page_size: 4096, mem_available: Some(available), ..Limits::default() }
    }

    #[test]
    fn a_broadcast_larger_than_tcp_mem_is_warned_with_a_fix() {
        // The measured collapse: 1 KB (1,343 B on the wire) to 1M at 575,802 pages.
        let l = with_tcp_mem(575_802, 12 << 30);
        let w = super::broadcast_memory(&l, 1_000_000, 1343).expect("1M x 2.6 KB does not fit 2.2 GiB");
        let needed = (1_000_000u64 * (1343 + super::SKB_OVERHEAD_BYTES)).div_ceil(4096);
        assert!(w.contains(&format!("net.ipv4.tcp_mem=\"{needed} {} {}\"", needed * 3 / 2, needed * 2)), "{w}");
        assert!(!w.contains("available"), "12 GiB is enough for the fix: {w}");
        assert_eq!(super::broadcast_memory(&l, 100_000, 1343), None, "100K fits");
        assert_eq!(super::broadcast_memory(&Limits { tcp_mem: None, ..l.clone() }, 1_000_000, 1343), None, "unknown: no guess");
    }

    #[test]
    fn a_fix_larger_than_the_memory_says_so() {
        let w = super::broadcast_memory(&with_tcp_mem(1000, 1 << 30), 10_000_000, 4096).expect("far too small");
        assert!(w.contains("more than the") && w.contains("fewer connections or smaller messages"), "{w}");
    }
}
