//! `megaconn tune` on this machine and on a fake tree.
mod common;
use common::*;
use std::time::Duration;

#[test]
fn million_both_ends_needs_about_a_hundred_processes_and_memory_suffices() {
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "1000000", "--role", "both"]);
    let (_, text, err) = run(cmd, Duration::from_secs(20));
    assert!(text.contains("RLIMIT_NOFILE hard") && text.contains("worker processes"), "{text}{err}");
    let mut cmd = megaconn();
    cmd.args(["tune", "--connections", "1000000", "--role", "both", "--json"]);
    let (_code, out, err) = run(cmd, Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let procs = v["worker_processes"].as_u64().unwrap();
    let fd_hard = {
        let l = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = l.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
        line.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap_or(u64::MAX)
    };
    if fd_hard == 20_000 {
        assert!((100..=120).contains(&procs), "~100 processes at the 20000 fd wall: {procs}");
    }
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
        cmd.args(["tune", "--connections", n]);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{n}: {err}");
        assert!(err.contains("--connections") || err.contains("-5"), "{n}: {err}");
    }
}

#[test]
fn impossible_bench_is_refused_with_the_binding_limit() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--connections", "50M", "--ports", "21400-21401"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("cannot be reached") && err.contains("binds first") && err.contains("fix"), "{err}");
    assert_eq!(sockets_on(21400, 21401), 0);
}
