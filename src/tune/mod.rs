//! `megaconn tune`: the doctor. Reads every limit on connection count,
//! says which one binds for a target N and prints (or applies) the fix.
//! server, client and bench run the same check before they start.
pub mod apply;
pub mod limits;
pub mod plan;
pub mod tasks;

use crate::stats::format;
use anyhow::Result;
use plan::{Assessment, Request, Status, TuneRole};

/// The limits of this machine, as read now.
pub fn limits_here() -> limits::Limits {
    limits::Reader::new("/").read_all()
}

pub fn assess_here(root: &std::path::Path, connections: u64, role: TuneRole, ports: u64, rate: u64) -> Assessment {
    let l = limits::Reader::new(root).read_all();
    plan::assess(&l, Request { connections, role, ports, rate, cpus: crate::sys::online_cpus() })
}

/// The check every run does first: Err (a usage error) when a limit makes
/// the target impossible, else the warning lines to show.
pub fn precheck(connections: u64, role: TuneRole, ports: u64, rate: u64) -> Result<Vec<String>, crate::UsageError> {
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
pub fn check_files(extra: u64, what: &str) -> Result<(), crate::UsageError> {
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

/// What `megaconn tune` is asked.
#[derive(Debug, Clone)]
pub struct TuneConfig {
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

pub fn run(args: TuneConfig) -> Result<i32> {
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
