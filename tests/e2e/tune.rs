//! `megaconn tune` on this machine and on a fake tree.
use crate::common::*;
use std::time::Duration;

#[test]
fn million_both_ends_needs_about_a_hundred_processes_and_memory_suffices() {
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "1000000", "--role", "both"]);
    let (text_code, text, err) = run(cmd, Duration::from_secs(20));
    assert!(text.contains("RLIMIT_NOFILE hard") && text.contains("worker processes"), "{text}{err}");
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "1000000", "--role", "both", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    // Exit 0 when no limit binds, 1 when one does; text and JSON agree.
    let want_code = if v["binding"].is_null() { 0 } else { 1 };
    assert_eq!((text_code, code), (want_code, want_code), "{v}");
    // Processes per side: a million over what one process may hold (90%
    // of the fd hard limit, less 16 and one per port of the default 100),
    // at least one per core. 112 at this machine's 20000-fd wall.
    let procs = v["worker_processes"].as_u64().unwrap();
    let fd_hard = {
        let l = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = l.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
        line.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap_or(u64::MAX)
    };
    let per_process = ((fd_hard as f64 * 0.9) as u64).saturating_sub(16 + 100);
    let cpus = v["request"]["cpus"].as_u64().unwrap();
    assert_eq!(procs, 2 * 1_000_000u64.div_ceil(per_process).max(cpus), "fd hard limit {fd_hard}: {v}");
    let rows = v["rows"].as_array().unwrap();
    let mem = rows.iter().find(|r| r["limit"] == "memory (MemAvailable)").expect("memory row");
    assert_eq!(mem["status"], "ok", "{mem}");
    // Text and JSON carry the same verdict (counts of files in use may
    // move between the two runs, the binding limit does not).
    match v["binding"].as_str() {
        None => assert!(text.contains("no limit binds") && v["verdict"].as_str().unwrap().contains("no limit binds"), "{text}"),
        Some(b) => assert!(text.contains(&format!("{b} binds first")), "{text}"),
    }
}

#[test]
fn fake_tree_file_max_binds_and_exits_1() {
    let root = std::env::temp_dir().join(format!("megaconn-tune-e2e-{}", std::process::id()));
    std::fs::create_dir_all(root.join("proc/sys/fs")).unwrap();
    std::fs::create_dir_all(root.join("proc/self")).unwrap();
    std::fs::write(root.join("proc/sys/fs/file-max"), "100000\n").unwrap();
    std::fs::write(root.join("proc/meminfo"), "MemAvailable: 25000000 kB\n").unwrap();
    std::fs::write(root.join("proc/self/limits"), "Max open files 1024 1024 files\n").unwrap();
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "200000", "--role", "server", "--json", "--root"]).arg(&root);
    let (code, out, _) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["binding"], "fs.file-max");
    // --apply into the fake tree writes the sysctl file with the fix.
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "200000", "--role", "server", "--apply", "--root"]).arg(&root);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 0, "{out}{err}");
    let written = std::fs::read_to_string(root.join("etc/sysctl.d/90-megaconn.conf")).unwrap();
    assert!(written.contains("fs.file-max = "), "{written}");
    assert!(out.contains("LimitNOFILE="), "{out}");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn bad_targets_exit_2() {
    for n in ["0", "-5", "many"] {
        let mut cmd = megaconn();
        cmd.args(["tune", &format!("--connections={n}")]);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{n}: {err}");
        assert!(err.contains(&format!("invalid value '{n}' for '--connections")) && err.contains("expected e.g. 1000"), "{n}: {err}");
    }
    // Apart from its flag, "-5" reads as an unknown flag: clap says so and
    // shows the usage with --connections.
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "-5"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unexpected argument '-5'") && err.contains("--connections <CONNECTIONS>"), "{err}");
}

#[test]
fn impossible_bench_is_refused_with_the_binding_limit() {
    let ports = free_ports(2);
    let mut cmd = megaconn();
    cmd.args(["bench", "--connections", "50M", "--ports", &ports.arg()]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("cannot be reached") && err.contains("binds first") && err.contains("fix"), "{err}");
    assert_eq!(sockets_on(ports.first, ports.last), 0);
}

#[test]
fn a_closed_stdout_ends_tune_quietly() {
    // A pipe whose reading end is already closed: every write to it fails
    // (EPIPE), as when the output is piped into `head` that has exited.
    let mut fds = [0; 2];
    // SAFETY: pipe() fills two descriptors we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing the reading end we own; the writing end is handed to the child.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is a descriptor we own and give away exactly once.
    let write_end = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
    let out = megaconn().args(["tune", "--connections", "1000000"]).stdout(write_end).stderr(std::process::Stdio::piped()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(libc::SIGPIPE), "{:?} {err}", out.status);
}
