//! `megaconn bench --scenario push --nodes N --cluster nats`: N server
//! nodes (each a `megaconn server --cluster` in its own namespace), a
//! nats-server in another, and the client workers spread over the nodes
//! (worker i runs in node i % N's namespace and connects over its
//! loopback, as in the single-node bench). Broadcasts are published on
//! node 0 and timed to the last receipt on any node, exactly as the
//! single-node push bench times them, so the two compare side by side.

use super::pair::{PairRun, ServerSide};
use super::push::{self, Round};
use super::BenchConfig;
use crate::client::run::ClientRun;
use crate::stats::{format, progress::Progress};
use crate::topology::cluster::{self as place, BROKER_ADDR};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BROKER_PORT: u16 = 4222;
const ADMIN_PORT: u16 = 9100;
/// Longest wait for the broker to listen and every node to be healthy.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A child process in a namespace: SIGTERM then SIGKILL when dropped (by
/// PID; it also dies with the bench through PR_SET_PDEATHSIG).
pub(super) struct Proc {
    child: Child,
    pub(super) what: String,
    /// Its stderr: removed when it stopped as asked, kept when it exited
    /// by itself (an error names it) or would not stop.
    log: std::path::PathBuf,
    /// The log's inode: a node started again writes a new file at the
    /// same path, which this one's end must not remove.
    ino: u64,
    /// SIGTERM sent; SIGKILL needed.
    asked: bool,
    killed: bool,
}

impl Proc {
    fn spawn(mut cmd: Command, ns: &str, what: String, log: std::path::PathBuf) -> Result<Proc> {
        let _ns = place::inside(&mut cmd, ns)?;
        let _ = std::fs::remove_file(&log);
        let err = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let ino = std::os::unix::fs::MetadataExt::ino(&err.metadata().with_context(|| format!("reading {}", log.display()))?);
        let child = cmd.stderr(err).spawn().with_context(|| format!("starting {what}"))?;
        Ok(Proc { child, what, log, ino, asked: false, killed: false })
    }

    /// Why it is gone, if it is.
    fn gone(&mut self) -> Option<String> {
        let st = self.child.try_wait().ok()??;
        Some(format!("{} exited ({st}); its log: {}", self.what, self.log.display()))
    }

    fn stop(&mut self) {
        self.terminate(Duration::from_secs(10));
    }

    /// SIGTERM, unless it is gone already.
    pub(super) fn signal_term(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: signalling our own child by PID; it has not been reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            self.asked = true;
        }
    }

    /// Whether it has exited (reaped).
    pub(super) fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL if it is still running after `grace`; true
    /// when it exited by itself.
    pub(super) fn terminate(&mut self, grace: Duration) -> bool {
        // A reaped child's PID may belong to someone else by now.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return true;
        }
        // SAFETY: signalling our own child by PID; it has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.asked = true;
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.killed = true;
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        let ours = std::fs::metadata(&self.log).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == self.ino);
        if self.asked && !self.killed && ours && !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The secrets of one bench run, in files only this user can read (so
/// none is on a command line), removed when the run ends: the cluster key
/// every node signs with, and the token nats-server requires.
pub(super) struct Secrets {
    key: std::path::PathBuf,
    nats_token: std::path::PathBuf,
    nats_conf: std::path::PathBuf,
    /// nats-server's JetStream store (the cluster's history).
    nats_store: std::path::PathBuf,
}

impl Secrets {
    fn make(logs: &str) -> Result<Secrets> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let write = |path: &std::path::Path, bytes: &[u8]| -> Result<()> {
            let _ = std::fs::remove_file(path);
            let mut f =
                std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).with_context(|| format!("writing {}", path.display()))?;
            f.write_all(bytes).with_context(|| format!("writing {}", path.display()))
        };
        let s = Secrets {
            key: format!("{logs}-cluster.key").into(),
            nats_token: format!("{logs}-nats.token").into(),
            nats_conf: format!("{logs}-nats.conf").into(),
            nats_store: format!("{logs}-nats-store").into(),
        };
        let _ = std::fs::remove_dir_all(&s.nats_store);
        let key: [u8; 32] = rand::random();
        write(&s.key, &key)?;
        let token = format!("{:032x}", rand::random::<u128>());
        write(&s.nats_token, token.as_bytes())?;
        write(&s.nats_conf, format!("authorization {{ token: \"{token}\" }}\n").as_bytes())?;
        Ok(s)
    }
}

impl Drop for Secrets {
    fn drop(&mut self) {
        for p in [&self.key, &self.nats_token, &self.nats_conf] {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir_all(&self.nats_store);
    }
}

/// A server node: its process, admin address and latest stats line.
pub(super) struct Node {
    pub(super) proc: Proc,
    pub(super) admin: SocketAddr,
    stats: Arc<Mutex<Value>>,
}

impl Node {
    /// Node `k`, planned for `capacity` connections.
    pub(super) fn start(k: usize, args: &BenchConfig, capacity: u64, token: &str, secrets: &Secrets, logs: &str) -> Result<Node> {
        let addr = place::node_addr(k);
        let exe = std::env::current_exe().context("finding the megaconn binary")?;
        let mut cmd = Command::new(exe);
        cmd.arg("server")
            // Its clients on its loopback, the bench on the bridge.
            .args(["--listen", "0.0.0.0", "--ports", &super::ports_list(&args.ports)])
            .args(["--connections", &capacity.to_string(), "--protocol", &format!("{:?}", args.protocol).to_lowercase()])
            .args(["--admin", &format!("{addr}:{ADMIN_PORT}"), "--admin-token", token])
            .args(["--cluster", &format!("nats://{BROKER_ADDR}:{BROKER_PORT}"), "--node-id", &format!("n{k}")])
            .arg("--cluster-key-file")
            .arg(&secrets.key)
            .arg("--cluster-token-file")
            .arg(&secrets.nats_token)
            .args(["--cluster-history", if args.cluster_history == crate::cluster::log::HistoryMode::Off { "off" } else { "jetstream" }])
            .args(["--drain-period", &format!("{}ms", args.drain_period.as_millis())])
            .args(["--io", args.io.arg()])
            .args(["--json", "--stats-interval", "500ms"]);
        if let crate::supervise::plan::Workers::Fixed(n) = args.server_workers {
            cmd.args(["--workers", &n.to_string()]);
        }
        // The bench configures its nodes: a server's variables meant for
        // another server of the operator's do not reach them.
        for (name, _) in std::env::vars_os().filter(|(k, _)| k.to_string_lossy().starts_with("MEGACONN_SERVER_")) {
            cmd.env_remove(name);
        }
        cmd.stdout(Stdio::piped());
        let mut proc = Proc::spawn(cmd, &place::ns_name(std::process::id(), Some(k)), format!("node n{k} ({addr})"), format!("{logs}-n{k}.log").into())?;
        let out = proc.child.stdout.take().ok_or_else(|| anyhow!("node n{k} has no stdout"))?;
        let stats = Arc::new(Mutex::new(Value::Null));
        let s = stats.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if v["event"] == "stats" {
                        *s.lock().expect("node stats") = v;
                    }
                }
            }
        });
        Ok(Node { proc, admin: SocketAddr::from((addr, ADMIN_PORT)), stats })
    }

    pub(super) fn active(&self) -> u64 {
        self.stats.lock().expect("node stats")["active"].as_u64().unwrap_or(0)
    }

    /// Wait until its admin API says it is healthy with its link up.
    pub(super) fn wait_healthy(&mut self, token: &str) -> Result<()> {
        let admin = self.admin;
        wait_until(&format!("{} was not healthy with its link to nats up", self.proc.what), || {
            if let Some(why) = self.proc.gone() {
                return Err(why);
            }
            match crate::admin::client::request(admin, "GET", "/healthz", b"", Some(token)) {
                Ok((200, _)) => Ok(true),
                Ok((_, body)) => Err(body.trim().to_string()),
                Err(_) => Ok(false),
            }
        })
    }
}

/// A cluster's node processes and their broker: the server side of a
/// cluster bench's pair, watched through the nodes' admin API.
struct ClusterSide {
    nodes: super::rollout::Nodes,
    broker: Proc,
    token: String,
}

impl ClusterSide {
    fn node_stats(&self) -> Vec<Value> {
        let nodes = self.nodes.list.lock().expect("nodes");
        nodes
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let mut v = crate::admin::client::request(n.admin, "GET", "/stats", b"", Some(&self.token))
                    .ok()
                    .and_then(|(_, b)| serde_json::from_str::<Value>(&b).ok())
                    .unwrap_or_default();
                v["node"] = format!("n{k}").into();
                v
            })
            .collect()
    }
}

impl ServerSide for ClusterSide {
    fn failure(&mut self) -> Option<String> {
        // The node a rollout is restarting is meant to be gone.
        let rolling = self.nodes.rolling.load(Ordering::SeqCst);
        let mut nodes = self.nodes.list.lock().expect("nodes");
        let gone = nodes.iter_mut().enumerate().filter(|(k, _)| !(rolling && *k == super::rollout::ROLLED)).find_map(|(_, n)| n.proc.gone());
        gone.or_else(|| self.broker.gone())
    }

    fn line(&self) -> String {
        let nodes: Vec<String> = self.nodes.list.lock().expect("nodes").iter().map(|n| format::count(n.active())).collect();
        let rolling = if self.nodes.rolling.load(Ordering::SeqCst) { " (n0 rolling)" } else { "" };
        format!("nodes {}{rolling}", nodes.join(" + "))
    }

    /// The nodes see their closes on their own; the bench does not wait.
    fn active(&self) -> u64 {
        0
    }

    fn shut(&mut self) {
        for n in self.nodes.list.lock().expect("nodes").iter_mut() {
            n.proc.stop();
        }
        self.broker.stop();
    }
}

pub(super) fn wait_until(what: &str, mut ok: impl FnMut() -> Result<bool, String>) -> Result<()> {
    let end = Instant::now() + START_TIMEOUT;
    loop {
        let last = match ok() {
            Ok(true) => return Ok(()),
            Ok(false) => String::new(),
            Err(e) => e,
        };
        if Instant::now() >= end {
            bail!("{what} within {} s{}", START_TIMEOUT.as_secs(), if last.is_empty() { String::new() } else { format!(": {last}") });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Check the flags of a cluster bench (usage errors).
pub(crate) fn check(args: &BenchConfig) -> Result<(), String> {
    if !matches!(args.scenario, super::Scenario::Push | super::Scenario::Rollout) {
        return Err("--nodes and --cluster run the push scenario: add --scenario push (or rollout)".into());
    }
    if args.scenario == super::Scenario::Rollout && args.cluster_history != crate::cluster::log::HistoryMode::Jetstream {
        return Err("--scenario rollout resumes clients on another node from the cluster's history: drop --cluster-history off".into());
    }
    if args.cluster.is_none() {
        return Err(format!("--nodes {}: nodes need a broker between them; add --cluster nats", args.nodes));
    }
    if args.topology == crate::topology::Topology::Host || args.topology == crate::topology::Topology::Veth {
        return Err("a cluster bench puts each node in its own namespace: use --topology netns (or auto)".into());
    }
    if args.source_ips.is_some() {
        return Err("--source-ips: a cluster bench gives its client namespace its own addresses; drop --source-ips".into());
    }
    if Command::new("nats-server").arg("--version").output().is_err() {
        return Err("--cluster nats needs nats-server, which is not installed: apt-get install nats-server (scripts/setup.sh does it)".into());
    }
    Ok(())
}

pub(crate) fn run(mut args: BenchConfig) -> Result<i32> {
    check(&args).map_err(crate::UsageError)?;
    let rollout = args.scenario == super::Scenario::Rollout;
    if rollout {
        args.broadcasts = super::rollout::broadcasts(&args);
    }
    let nodes = args.nodes as usize;
    let per_node = args.connections.div_ceil(args.nodes);
    let net = place::place(nodes, args.connections, &super::ports_list(&args.ports))?;
    let mut progress = Progress::new(false);
    for n in &net.notes {
        progress.note(n);
    }
    // Each node's clients reach it on its own loopback.
    args.target = std::net::Ipv4Addr::LOCALHOST;
    let node_ns = (0..nodes)
        .map(|k| {
            let name = place::ns_name(std::process::id(), Some(k));
            std::fs::File::open(format!("/run/netns/{name}")).with_context(|| format!("opening namespace {name}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let (_, fds) = crate::sys::raise_fd_limit();
    let hold = args.hold.unwrap_or(push::SETTLE + args.broadcast_interval * args.broadcasts as u32 + push::TAIL);
    let topics: Vec<String> = (0..args.topics).map(|t| format!("room-{t}")).collect();
    let mut client_cfg = super::client_config(&args, hold);
    client_cfg.load.traffic.subscribe = topics.clone();
    client_cfg.load.traffic.subscribe_spread = true;
    client_cfg.load.traffic.reconnect = rollout;
    client_cfg.load.nodes = node_ns
        .iter()
        .enumerate()
        .map(|(k, f)| crate::client::NodeTarget {
            target: std::net::Ipv4Addr::LOCALHOST.into(),
            netns_fd: Some(std::os::fd::AsRawFd::as_raw_fd(f)),
            // A rollout's clients move to the other nodes over the bridge.
            elsewhere: if rollout { (1..nodes).map(|j| place::node_addr((k + j) % nodes).into()).collect() } else { Vec::new() },
        })
        .collect();
    let (mut cplan, mut cwplan) = crate::client::plan(&client_cfg, fds.hard).map_err(crate::UsageError)?;
    if cwplan.workers % nodes != 0 {
        // Whole workers per node: the same share of connections on each.
        client_cfg.workers = crate::supervise::plan::Workers::Fixed(cwplan.workers.div_ceil(nodes) * nodes);
        (cplan, cwplan) = crate::client::plan(&client_cfg, fds.hard).map_err(crate::UsageError)?;
    }
    let logs = std::env::temp_dir().join(format!("megaconn-{}", std::process::id())).display().to_string();
    let secrets = Arc::new(Secrets::make(&logs)?);
    let mut broker_cmd = Command::new("nats-server");
    broker_cmd.args(["-a", &BROKER_ADDR.to_string(), "-p", &BROKER_PORT.to_string()]).arg("-c").arg(&secrets.nats_conf);
    broker_cmd.arg("-js").arg("-sd").arg(&secrets.nats_store).stdout(Stdio::null());
    let mut broker = Proc::spawn(broker_cmd, &place::ns_name(std::process::id(), None), "nats-server".into(), format!("{logs}-nats.log").into())?;
    let broker_at = SocketAddr::from((BROKER_ADDR, BROKER_PORT));
    wait_until("nats-server did not listen", || match broker.gone() {
        Some(why) => Err(why),
        None => Ok(TcpStream::connect_timeout(&broker_at, Duration::from_millis(200)).is_ok()),
    })?;
    let token = format!("{:032x}", rand::random::<u128>());
    let mut fleet = Vec::new();
    // A rollout's nodes must each hold everyone: the others' clients
    // come to them while one drains.
    let capacity = if rollout { args.connections } else { per_node };
    for k in 0..nodes {
        fleet.push(Node::start(k, &args, capacity, &token, &secrets, &logs)?);
    }
    for n in &mut fleet {
        n.wait_healthy(&token)?;
    }
    // A rollout publishes on the node that stays.
    let publish_on = if rollout { nodes - 1 } else { 0 };
    progress.note(&format!(
        "cluster bench: {} connections over {nodes} nodes ({} each) joined by nats-server at {broker_at}; {} {} of {} bytes published on node n{publish_on} every {:.1} s{} | {}",
        format::count(args.connections),
        format::count(per_node),
        args.broadcasts,
        if topics.is_empty() { "broadcasts".to_string() } else { format!("rounds over {} topics", topics.len()) },
        args.push_bytes,
        args.broadcast_interval.as_secs_f64(),
        if rollout { format!("; node n0 drains over {} and restarts mid-run", humantime::format_duration(args.drain_period)) } else { String::new() },
        crate::client::describe(&cplan, &cwplan)
    ));
    let ch = super::pair::PairChannel::default();
    let client = ClientRun::start(&cplan, &client_cfg.load, &cwplan, None, &ch.client)?;
    let ramp_done = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(Mutex::new(Vec::<Round>::new()));
    let publisher = {
        let (ramp_done, rounds, args, admin, token) = (ramp_done.clone(), rounds.clone(), args.clone(), fleet[publish_on].admin, token.clone());
        std::thread::spawn(move || push::publish(admin, Some(&token), &args, &topics, &ramp_done, &rounds, None))
    };
    let fleet = super::rollout::Nodes::new(fleet);
    let over = Arc::new(AtomicBool::new(false));
    let roller = rollout.then(|| {
        let r =
            super::rollout::Roller { nodes: fleet.clone(), args: args.clone(), capacity, token: token.clone(), secrets: secrets.clone(), logs: logs.clone() };
        let (ramp_done, over) = (ramp_done.clone(), over.clone());
        std::thread::spawn(move || r.run(&ramp_done, &over))
    });
    let netstat_before = crate::stats::netstat::read();
    let side = ClusterSide { nodes: fleet, broker, token };
    let mut pair = PairRun::new(side, client, &mut progress, |side: &ClusterSide, _: &ClientRun| side.node_stats());
    pair.ramp_done = Some(ramp_done.clone());
    let ran = pair.run(&ch.rx);
    ramp_done.store(true, Ordering::SeqCst);
    // The nodes stop (the roller's restarted one with them) once it has the report.
    let node_stats = pair.at_hold.take().or(pair.after_close.take()).unwrap_or_default();
    pair.server.shut();
    over.store(true, Ordering::SeqCst);
    ran?;
    let publish_error = publisher.join().map_err(|_| anyhow!("the publisher thread panicked"))?.err();
    let roll = match roller {
        Some(r) => Some(r.join().map_err(|_| anyhow!("the rollout thread panicked"))?),
        None => None,
    };
    let failure = pair.failure.take();
    let client = pair.client;
    let summary = client.summary();
    let rounds = rounds.lock().expect("rounds").clone();
    let cpu: f64 = node_stats.iter().filter_map(|v| v["cpu_seconds"].as_f64()).sum();
    let workers: usize = node_stats.iter().filter_map(|v| v["workers"].as_u64()).sum::<u64>() as usize;
    let push = push::push_report(&args, &rounds, &client, &summary, workers, cpu, None);
    let rollout = roll.map(|r| super::rollout::RolloutReport::new(&args, r, &push, &client, &summary));
    let outcome = ClusterOutcome {
        rollout,
        base: push::PushOutcome {
            push,
            client: summary,
            topology: net.placement.clone(),
            kernel_drops: crate::stats::netstat::delta(&netstat_before, &crate::stats::netstat::read()),
            failure,
            publish_error: publish_error.map(|e| format!("{e:#}")),
        },
        cluster: ClusterFacts { nodes: args.nodes, broker: format!("nats://{broker_at}"), published_on: format!("n{publish_on}"), node_stats },
    };
    let plan = serde_json::json!({"client": cplan, "client_workers": cwplan, "nodes": args.nodes, "broadcasts": args.broadcasts, "topics": args.topics, "push_bytes": args.push_bytes});
    super::outcome::finish(args.report.as_deref(), args.json, &client, plan, &net.placement, &outcome, &args.thresholds, &mut progress)
}

/// The cluster around a push bench: its nodes and what each saw.
#[derive(Serialize)]
struct ClusterFacts {
    nodes: u64,
    broker: String,
    published_on: String,
    node_stats: Vec<Value>,
}

/// What a cluster push bench found.
#[derive(Serialize)]
struct ClusterOutcome {
    #[serde(flatten)]
    base: push::PushOutcome,
    cluster: ClusterFacts,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout: Option<super::rollout::RolloutReport>,
}

impl super::outcome::Outcome for ClusterOutcome {
    fn kind(&self) -> &'static str {
        if self.rollout.is_some() {
            "bench rollout"
        } else {
            "bench push --nodes"
        }
    }

    fn summary(&self) -> &crate::client::run::ClientSummary {
        &self.base.client
    }

    fn print(&self) {
        self.base.print();
        for v in &self.cluster.node_stats {
            println!(
                "node {:<8} connections at hold {} | pushes delivered {} | from other nodes {} | to other nodes {} | cpu {:.1} s",
                v["node"].as_str().unwrap_or("?"),
                format::count(v["active"].as_u64().unwrap_or(0)),
                format::count(v["push_delivered"].as_u64().unwrap_or(0)),
                format::count(v["cluster"]["messages_in"].as_u64().unwrap_or(0)),
                format::count(v["cluster"]["messages_out"].as_u64().unwrap_or(0)),
                v["cpu_seconds"].as_f64().unwrap_or(0.0)
            );
        }
        if let Some(r) = &self.rollout {
            r.print();
        }
    }

    fn failures(&self) -> Vec<String> {
        let mut out = self.base.failures();
        out.extend(self.rollout.iter().flat_map(super::rollout::RolloutReport::failures));
        out
    }
}
