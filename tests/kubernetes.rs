//! The Kubernetes client Job starts as written: its own command line, taken
//! from deploy/k8s/client-job.yaml, planned for shard 0 of 10 with
//! `--dry-run` (the plan is printed; nothing is opened).
mod common;

use serde_json::Value;
use std::process::Command;

/// The Job's shell command (container args) and its env, read with PyYAML.
fn job_command() -> (String, Vec<(String, String)>) {
    let manifest = format!("{}/deploy/k8s/client-job.yaml", env!("CARGO_MANIFEST_DIR"));
    let script = "import json, sys, yaml\n\
                  job = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d['kind'] == 'Job')\n\
                  c = job['spec']['template']['spec']['containers'][0]\n\
                  print(json.dumps({'args': c['args'], 'env': c.get('env', [])}))";
    let out = Command::new("python3").args(["-c", script, &manifest]).output().expect("python3 runs");
    assert!(out.status.success(), "cannot read the manifest: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let args = v["args"].as_array().expect("args");
    assert_eq!(args.len(), 1, "one shell command: {args:?}");
    let env = v["env"].as_array().unwrap().iter().map(|e| (e["name"].as_str().unwrap().to_string(), e["value"].as_str().unwrap_or("").to_string())).collect();
    (args[0].as_str().unwrap().to_string(), env)
}

#[test]
fn the_client_job_command_plans_shard_0_of_10() {
    let (cmd, env) = job_command();
    assert!(cmd.contains("exec megaconn client"), "{cmd}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("k8s-job");
    std::fs::create_dir_all(&dir).unwrap();
    // The Service name resolves in a cluster; here it is this machine.
    let getent = dir.join("getent");
    std::fs::write(&getent, "#!/bin/sh\necho '127.0.0.1       megaconn-server'\n").unwrap();
    std::fs::set_permissions(&getent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_megaconn")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}:{}", dir.display(), bin.display(), std::env::var("PATH").unwrap_or_default());
    let start_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + std::time::Duration::from_secs(120)).to_string();
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &format!("{cmd} --dry-run --json")]).env("PATH", path).env("JOB_COMPLETION_INDEX", "0");
    for (k, v) in env {
        // START_AT is substituted at apply time (docs/kubernetes.md).
        let v = if k == "START_AT" { start_at.clone() } else { v };
        c.env(k, v);
    }
    let (code, out, err) = common::run(c, std::time::Duration::from_secs(30));
    assert_eq!(code, 0, "the Job's command was refused: {err}{out}");
    let plan: Value = out.lines().find_map(|l| serde_json::from_str::<Value>(l).ok().filter(|v| v["event"] == "plan")).expect("a plan line");
    assert_eq!(plan["connections"], 1_000_000, "shard 0 of 10 of 10M: {plan}");
    assert_eq!(plan["first"], 0, "{plan}");
    assert_eq!(plan["rate_per_s"], 50_000, "--rate is per pod: {plan}");
    assert!(plan["workers"].as_u64().unwrap() >= 1_000_000 / 20_000, "one process cannot hold 1M sockets here: {plan}");
    assert!(!dir.join("shard-0.json").exists());
}
