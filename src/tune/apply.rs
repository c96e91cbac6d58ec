//! `tune --apply`: write the sysctl fixes to /etc/sysctl.d and load them,
//! and print (never silently write) the settings only an administrator can
//! change: the hard fd limit in limits.conf and systemd.

use super::plan::Assessment;
use anyhow::{Context, Result};
use std::path::Path;

pub(crate) const SYSCTL_FILE: &str = "etc/sysctl.d/90-megaconn.conf";

/// The sysctl.d file for the rows that need a change; None if none does.
pub(crate) fn sysctl_file(a: &Assessment) -> Option<String> {
    let lines: Vec<String> = a.rows.iter().filter_map(|r| r.sysctl.as_ref()).map(|(k, v)| format!("{k} = {v}")).collect();
    if lines.is_empty() {
        return None;
    }
    let role = format!("{:?}", a.request.role).to_lowercase();
    Some(format!(
        "# Written by `megaconn tune --connections {} --role {role} --apply`.\n# Lifts the kernel limits that cap that many connections.\n{}\n",
        a.request.connections,
        lines.join("\n")
    ))
}

/// The fd hard limit snippets for the operator (megaconn cannot raise it).
pub(crate) fn nofile_snippets(hard: u64) -> String {
    format!(
        "# /etc/security/limits.conf (PAM logins), then log in again:\n*    soft nofile {hard}\n*    hard nofile {hard}\n\n\
         # systemd service: /etc/systemd/system/megaconn.service.d/nofile.conf, then `systemctl daemon-reload`:\n[Service]\nLimitNOFILE={hard}\n"
    )
}

/// Write and load the sysctl file. `root` other than "/" writes into that
/// tree without loading (used by tests with a fake tree).
pub(crate) fn apply(a: &Assessment, root: &Path, dry_run: bool) -> Result<i32> {
    let nofile = nofile_snippets(1_048_576);
    let Some(content) = sysctl_file(a) else {
        println!("nothing to change: every kernel setting already fits {} connections", a.request.connections);
        println!("\nTo hold more sockets per process (fewer worker processes), an administrator can raise the hard fd limit:\n{nofile}");
        return Ok(0);
    };
    let path = root.join(SYSCTL_FILE);
    if dry_run {
        println!("would write {}:\n{content}", path.display());
        println!("would run: sysctl -p {}", path.display());
        println!("\nThe hard fd limit is not a sysctl; set it yourself:\n{nofile}");
        return Ok(0);
    }
    // SAFETY: geteuid takes nothing and cannot fail.
    let is_root = unsafe { libc::geteuid() } == 0;
    if root == Path::new("/") && !is_root {
        eprintln!("megaconn tune --apply needs root; run these as root instead:");
        for r in a.rows.iter().filter_map(|r| r.sysctl.as_ref()) {
            eprintln!("  sysctl -w {}=\"{}\"", r.0, r.1);
        }
        return Ok(1);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&path, &content).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}:\n{content}", path.display());
    if root == Path::new("/") {
        let st = std::process::Command::new("sysctl").arg("-p").arg(&path).status().context("cannot run sysctl")?;
        if !st.success() {
            anyhow::bail!("sysctl -p {} failed ({st})", path.display());
        }
        println!("loaded with sysctl -p {}", path.display());
    }
    println!("\nThe hard fd limit is not a sysctl; set it yourself:\n{nofile}");
    Ok(0)
}

/// A bench in its own namespace sets that namespace's sysctls; what stays
/// global (fs.file-max) it raises when that limit alone makes the target
/// impossible, as root, saying so. Returns the lines to show.
pub(crate) fn lift_global_binds(connections: u64, role: super::plan::TuneRole, ports: u64, rate: u64) -> Vec<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Vec::new();
    }
    let a = super::assess_here(Path::new("/"), connections, role, ports, rate);
    let binds = || a.rows.iter().filter(|r| r.status == super::plan::Status::Binds);
    // Only when lifting them makes the run possible (not when memory binds too).
    if binds().any(|r| !r.sysctl.as_ref().is_some_and(|(k, _)| k.starts_with("fs."))) {
        return Vec::new();
    }
    binds()
        .filter_map(|r| r.sysctl.as_ref())
        .filter_map(|(k, v)| {
            let path = format!("/proc/sys/{}", k.replace('.', "/"));
            let before = std::fs::read_to_string(&path).ok()?;
            std::fs::write(&path, v).ok()?;
            Some(format!(
                "sysctl {k}: {} -> {v} (system-wide; {} connections need it; megaconn tune --apply makes it permanent)",
                before.trim(),
                crate::stats::format::count(connections)
            ))
        })
        .collect()
}
