//! The Kubernetes client Job starts as written: its own command line, taken
//! from deploy/k8s/client-job.yaml with its plan from its ConfigMap,
//! planned for shard 0 of 10 with `--dry-run` (the plan is printed;
//! nothing is opened). The server's ConfigMap file reads as a pod reads it.
//! The server and NATS manifests keep the cluster closed: NATS requires a
//! token from a Secret, the pods read it and the cluster key from mounted
//! Secrets, and the admin port has its own ClusterIP Service.

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
    // The plan from its ConfigMap, where the pod mounts it.
    let plan_file = dir.join("plan.toml");
    std::fs::write(&plan_file, config_map("client-job.yaml", "megaconn-load-plan", "plan.toml")).unwrap();
    assert!(cmd.contains("--config /etc/megaconn/plan/plan.toml"), "{cmd}");
    let cmd = cmd.replace("/etc/megaconn/plan/plan.toml", &plan_file.display().to_string());
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &format!("{cmd} --dry-run --json")]).env("PATH", path).env("JOB_COMPLETION_INDEX", "0");
    for (k, v) in env {
        // START_AT is substituted at apply time (docs/kubernetes.md).
        let v = if k == "START_AT" { start_at.clone() } else { v };
        c.env(k, v);
    }
    let (code, out, err) = crate::common::run(c, std::time::Duration::from_secs(30));
    assert_eq!(code, 0, "the Job's command was refused: {err}{out}");
    let plan: Value = out.lines().find_map(|l| serde_json::from_str::<Value>(l).ok().filter(|v| v["event"] == "plan")).expect("a plan line");
    assert_eq!(plan["connections"], 1_000_000, "shard 0 of 10 of 10M: {plan}");
    assert_eq!(plan["first"], 0, "{plan}");
    assert_eq!(plan["rate_per_s"], 50_000, "--rate is per pod: {plan}");
    assert!(plan["workers"].as_u64().unwrap() >= 1_000_000 / 20_000, "one process cannot hold 1M sockets here: {plan}");
    assert!(!dir.join("shard-0.json").exists());
}

/// Every document of a manifest, as JSON (read with PyYAML).
fn manifest(name: &str) -> Vec<Value> {
    let path = format!("{}/deploy/k8s/{name}", env!("CARGO_MANIFEST_DIR"));
    let script = "import json, sys, yaml\nprint(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))";
    let out = Command::new("python3").args(["-c", script, &path]).output().expect("python3 runs");
    assert!(out.status.success(), "cannot read {name}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// A file of a ConfigMap in a manifest.
fn config_map(manifest_name: &str, map: &str, file: &str) -> String {
    let docs = manifest(manifest_name);
    let m = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == map).unwrap_or_else(|| panic!("ConfigMap {map} in {manifest_name}"));
    m["data"][file].as_str().unwrap_or_else(|| panic!("{file} in ConfigMap {map}")).to_string()
}

/// The server's configuration file (ConfigMap megaconn-server-config),
/// as JSON by section (read with Python's tomllib).
fn server_toml() -> (String, Value) {
    let text = config_map("server.yaml", "megaconn-server-config", "server.toml");
    let script = "import json, sys, tomllib\nprint(json.dumps(tomllib.loads(sys.stdin.read())))";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "server.toml is not TOML: {}", String::from_utf8_lossy(&out.stderr));
    (text, serde_json::from_slice(&out.stdout).unwrap())
}

fn ports(service: &Value) -> Vec<u64> {
    service["spec"]["ports"].as_array().unwrap().iter().map(|p| p["port"].as_u64().unwrap()).collect()
}

#[test]
fn the_cluster_is_authenticated_and_the_admin_port_has_its_own_service() {
    let server = manifest("server.yaml");
    let services: Vec<&Value> = server.iter().filter(|d| d["kind"] == "Service").collect();
    let conns = services.iter().find(|s| ports(s).contains(&8000)).expect("the connections' Service");
    assert!(!ports(conns).contains(&9100), "the admin port is not on the connections' Service: {conns}");
    let admin = services.iter().find(|s| ports(s).contains(&9100)).expect("a Service for the admin port");
    assert!(admin["spec"]["type"].is_null() || admin["spec"]["type"] == "ClusterIP", "{admin}");
    assert_eq!(ports(admin), [9100], "only the admin port: {admin}");

    // The pods read the NATS token and the cluster key from mounted Secrets.
    let deploy = server.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args, ["server", "--config", "/etc/megaconn/config/server.toml"], "every setting in the ConfigMap");
    let (text, conf) = server_toml();
    for (key, secret) in [("cluster_key_file", "megaconn-cluster"), ("cluster_token_file", "megaconn-nats")] {
        let file = conf["cluster"][key].as_str().unwrap_or_else(|| panic!("{key} in [cluster]: {conf}"));
        let mount = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| file.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{file} is not mounted"));
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
        assert_eq!(volume["secret"]["secretName"], secret, "{key} {file} comes from Secret {secret}: {volume}");
    }
    let config = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "config").expect("the config volume");
    assert_eq!(config["configMap"]["name"], "megaconn-server-config", "{config}");

    // megaconn reads the file as a pod would (the Secrets' files here
    // made locally), its node id from the pod's name in the environment.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("k8s-server");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cluster.key"), [9u8; 32]).unwrap();
    std::fs::write(dir.join("token"), "a-nats-token-for-the-test\n").unwrap();
    let local = text.replace("/etc/megaconn/cluster/", &format!("{}/", dir.display())).replace("/etc/megaconn/nats/", &format!("{}/", dir.display()));
    std::fs::write(dir.join("server.toml"), local).unwrap();
    let node = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "MEGACONN_SERVER_NODE_ID").expect("the node id by variable");
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name", "{node}");
    let mut check = crate::common::megaconn();
    check.args(["server", "--config"]).arg(dir.join("server.toml")).arg("--print-config").env("MEGACONN_SERVER_NODE_ID", "megaconn-server-0");
    let (code, printed, err) = crate::common::run(check, std::time::Duration::from_secs(20));
    assert_eq!(code, 0, "the ConfigMap's server.toml: {err}");
    assert!(printed.contains("node_id = \"megaconn-server-0\"  # environment"), "{printed}");
    assert!(printed.contains("connections = 2000000  # "), "{printed}");

    // The admin token comes from its Secret through the environment,
    // never on the command line (`ps` shows it).
    assert!(!args.iter().any(|a| a.starts_with("--admin-token")), "{args:?}");
    let env = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "MEGACONN_ADMIN_TOKEN").expect("MEGACONN_ADMIN_TOKEN in the environment");
    assert_eq!(env["valueFrom"]["secretKeyRef"]["name"], "megaconn-admin", "{env}");

    // NATS requires the same token, from the Secret, not from its command line.
    let nats = manifest("nats.yaml");
    let config = nats.iter().find(|d| d["kind"] == "ConfigMap").unwrap()["data"]["nats.conf"].as_str().unwrap().to_string();
    assert!(config.contains("authorization") && config.contains("token: $NATS_TOKEN"), "{config}");
    let set = nats.iter().find(|d| d["kind"] == "StatefulSet").unwrap();
    let nc = &set["spec"]["template"]["spec"]["containers"][0];
    let env = nc["env"].as_array().unwrap().iter().find(|e| e["name"] == "NATS_TOKEN").expect("NATS_TOKEN from a Secret");
    assert_eq!(env["valueFrom"]["secretKeyRef"]["name"], "megaconn-nats", "{env}");
    assert!(nc["args"].as_array().unwrap().iter().all(|a| !a.as_str().unwrap().contains("NATS_TOKEN")), "{nc}");
    // The cluster's history (JetStream) on a volume that outlives the pod.
    assert!(config.contains("jetstream") && config.contains("store_dir: /data"), "{config}");
    let mounts = nc["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["name"] == "data" && m["mountPath"] == "/data"), "{nc}");
    assert_eq!(set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "data", "{set}");
}

#[test]
fn a_rolling_update_gives_each_pod_its_whole_drain() {
    let server = manifest("server.yaml");
    let deploy = server.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let (_, conf) = server_toml();
    let period = humantime::parse_duration(conf["lifecycle"]["drain_period"].as_str().expect("drain_period in [lifecycle]")).unwrap();
    // Killed before its drain ends, a pod would drop what is left at once.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().expect("terminationGracePeriodSeconds");
    assert!(grace >= period.as_secs() + 10, "grace {grace} s covers --drain-period {period:?} + --drain-timeout 10 s");
    // The connection ports close when the drain starts: a liveness probe
    // on one would restart the container mid-drain.
    assert_eq!(c["livenessProbe"]["tcpSocket"]["port"], "admin", "{c}");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/healthz", "{c}");
    assert_eq!(deploy["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 0, "{deploy}");
}
