//! The server's worker processes as the supervisor runs them: started,
//! grown and shrunk by the load (elastic) or kept at a fixed count, and
//! replaced when one dies. A crashed worker costs only its own
//! connections; a worker that keeps crashing stops the server with the
//! reason (crash-loop guard).

use crate::server::business::BusinessMode;
use crate::server::close::Close;
use crate::server::commands::{ServerMsg, SessionClaim};
use crate::server::config::ServerConfig;
use crate::server::session::http;
use crate::server::supervisor::view::{ServerView, WORKER_CRASHED};
use crate::server::supervisor::ServerEvent;
use crate::server::worker::ServerWorkerConfig;
use crate::stats::format;
use crate::supervise::elastic::{self, WorkerState};
use crate::supervise::{ExitInfo, Pool, PoolEvent, Sink};

/// The "worker" that holds the kept MQTT sessions' topics in the
/// cluster link's table of who follows what (no worker has this index).
const KEPT_SESSIONS: usize = usize::MAX;
/// The holder of the topics a node follows for its MQTT shared
/// subscription groups (`broker/shared.rs`).
const SHARED_GROUPS: usize = usize::MAX - 2;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Crashes within [`CRASH_WINDOW`] that stop the server.
pub(crate) const CRASH_LIMIT: usize = 5;
pub(crate) const CRASH_WINDOW: Duration = Duration::from_secs(10);
/// A worker whose command pipe stayed full this long is stalled.
const STALL_AFTER: Duration = Duration::from_millis(500);
/// A worker that sent nothing (snapshots come every second at most) this
/// long is stalled.
const SILENCE_LIMIT: Duration = Duration::from_secs(5);
/// Longest the initial workers may take to listen.
/// How often the TLS certificate and key files are looked at for changes.
const TLS_FILE_CHECK: Duration = Duration::from_secs(1);
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How the number of workers is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Sizing {
    /// `target` accepting workers with room, at most `max` in all.
    Elastic {
        target: usize,
        max: usize,
    },
    Fixed(usize),
}

/// Something worth telling the operator, as text and as a JSON event.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FleetNote {
    pub event: &'static str,
    /// usize::MAX: about the server as a whole (not shown).
    #[serde(skip_serializing_if = "no_worker")]
    pub worker: usize,
    pub message: String,
    /// Connections lost with the worker (crashes).
    pub lost: u64,
}

fn no_worker(w: &usize) -> bool {
    *w == usize::MAX
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Starting,
    Running,
    Retiring,
    Dead,
}

/// How long connections may wait in the accept queue before the
/// operator is told.
const QUEUE_WAIT: Duration = Duration::from_secs(3);

#[derive(Default)]
struct QueueWatch {
    read_at: Option<Instant>,
    /// The queue has not been empty since.
    since: Option<Instant>,
    told: bool,
}

pub(crate) struct ServerFleet {
    pub(super) pool: Pool,
    pub view: ServerView,
    template: ServerWorkerConfig,
    pub sizing: Sizing,
    life: BTreeMap<usize, Life>,
    empty_since: BTreeMap<usize, Instant>,
    /// When the workers were last told that clients are resuming.
    resuming_told: Option<Instant>,
    /// Connections waiting in the listeners' accept queues (read once a
    /// second), since when, and whether the operator was told.
    pub accept_queue: u64,
    queue: QueueWatch,
    /// Full workers sent `leave` whose snapshot still says accepting.
    told_leave: std::collections::BTreeSet<usize>,
    crashes: VecDeque<Instant>,
    /// When the TLS files last changed, and when that was last looked at.
    tls_stamp: Option<(std::time::SystemTime, std::time::SystemTime)>,
    tls_checked: Instant,
    /// `--mqtt-password-file` and `--mqtt-acl-file`: read again on SIGHUP.
    mqtt_files: crate::server::auth::mosquitto::FilesConfig,
    /// `--config`, read again on SIGHUP, and what those readings did.
    config_file: Option<crate::server::config::ConfigFile>,
    pub(super) config_counters: super::reload::ConfigCounters,
    /// `--mqtt-auth-http` and `--mqtt-authz-http`, and the questions
    /// waiting for their answers.
    pub(super) hooks: super::hooks::Hooks,
    /// `--sys-interval`: the `$SYS` topics, when they were last published
    /// and when the server started (None: off).
    sys: Option<(super::sys_topics::SysTree, Duration, Instant)>,
    started: Instant,
    retire_after: Duration,
    pub(super) stopping: bool,
    /// Notes not yet printed.
    pub notes: Vec<FleetNote>,
    /// Why the server must stop (crash loop), once known.
    pub failure: Option<String>,
    pub(super) publisher: crate::server::broker::publish::Publisher,
    /// `--max-connections`: the count every worker shares.
    cap: Option<crate::server::limits::cap::SharedCap>,
    /// The listening sockets every worker inherits (closed on drain).
    listeners: Vec<std::net::TcpListener>,
    /// `--cluster`: the NATS link and what waits on it.
    pub(super) relay: Option<crate::server::broker::relay::Relay>,
    /// The busiest topics (`/stats` "top_topics").
    pub(super) top_topics: crate::server::broker::top_topics::TopTopics,
    /// `--upstream`: the webhook sender.
    pub(super) upstream: Option<crate::server::broker::upstream::Upstream>,
    /// `upstream_done` counts not yet taken by their worker's command
    /// queue (it was full): offered again every tick, so a worker's
    /// in-flight count always falls.
    upstream_done: BTreeMap<usize, u64>,
    /// Workers that stopped reading their commands or reporting: sent to,
    /// not waited for (admin answers list them).
    stalled: std::collections::BTreeSet<usize>,
    /// The admin API's own counters, once it serves.
    pub admin_stats: Option<crate::admin::AdminStats>,
}

impl ServerFleet {
    /// Start the initial workers and wait until every one listens.
    pub(crate) fn start(
        cfg: &ServerConfig,
        sizing: Sizing,
        budget: u64,
        fd_limit: Option<u64>,
        sink: &Sink<ServerEvent>,
        next: &mut dyn FnMut(Duration) -> Option<ServerEvent>,
    ) -> Result<ServerFleet> {
        let (initial, max_workers) = match sizing {
            Sizing::Elastic { target, max } => (target, max),
            Sizing::Fixed(n) => (n, n),
        };
        let cap = match cfg.max_connections {
            Some(n) => Some(crate::server::limits::cap::SharedCap::create(n).context("cannot create the shared --max-connections count")?),
            None => None,
        };
        let listeners = crate::server::listener::bind_all(cfg.listen, &cfg.ports())?;
        let mut template = worker_template(cfg, initial, max_workers, budget, matches!(sizing, Sizing::Elastic { .. }));
        template.cap_fd = cap.as_ref().map(|c| c.fd());
        template.listen_fds = listeners.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        shared_state(cfg, &mut template)?;
        let tls_stamp = template.tls.as_ref().and_then(crate::tls::files::stamp);
        let to = sink.clone();
        let shards = crate::server::broker::shard::Shards::start(
            cfg.shards(),
            cfg.history,
            cfg.mqtt_retained,
            crate::server::broker::core::CoreConfig { relay: cfg.cluster.is_some(), fetch: cfg.cluster.is_some() },
            Arc::new(move |m| {
                to(ServerEvent::Broker(m));
            }),
        )?;
        let to = sink.clone();
        let mut pool = Pool::new(crate::server::WORKER_KIND, fd_limit, Arc::new(move |(i, ev)| to(ServerEvent::Worker(i, ev))))?;
        pool.set_inherit(template.listen_fds.clone());
        let mut f = ServerFleet {
            pool,
            view: ServerView::default(),
            template,
            sizing,
            life: BTreeMap::new(),
            empty_since: BTreeMap::new(),
            resuming_told: None,
            accept_queue: 0,
            queue: QueueWatch::default(),
            told_leave: Default::default(),
            crashes: VecDeque::new(),
            tls_stamp,
            tls_checked: Instant::now(),
            mqtt_files: cfg.mqtt_files.clone(),
            config_file: cfg.config_file.clone(),
            config_counters: Default::default(),
            hooks: Default::default(),
            sys: None,
            started: Instant::now(),
            retire_after: cfg.retire_after,
            stopping: false,
            notes: Vec::new(),
            failure: None,
            publisher: crate::server::broker::publish::Publisher::new(shards, cfg.max_push_bytes, cfg.mqtt_retained, cfg.mqtt_sessions),
            cap,
            listeners,
            relay: None,
            upstream: None,
            top_topics: crate::server::broker::top_topics::TopTopics::new(Instant::now()),
            upstream_done: BTreeMap::new(),
            stalled: Default::default(),
            admin_stats: None,
        };
        if !cfg.sys_interval.is_zero() && cfg.services.iter().any(|s| s.protocol == crate::proto::Protocol::Mqtt || s.protocol == crate::proto::Protocol::Ws) {
            let node = cfg.cluster.as_ref().map(|c| c.node.as_str());
            // The first one a tick after the start, then every interval.
            f.sys = Some((super::sys_topics::SysTree::new(node), cfg.sys_interval, Instant::now() - cfg.sys_interval));
        }
        if let Some(files) = &f.template.mqtt_files {
            let message = format!("mqtt: clients admitted by mosquitto's files: {}", files.describe());
            f.note("mqtt_files", usize::MAX, message, 0);
        }
        f.open_broker(cfg, sink)?;
        f.start_hooks(cfg, sink, max_workers)?;
        for _ in 0..initial {
            f.spawn()?;
        }
        f.wait_started(initial, next)?;
        Ok(f)
    }

    /// The broker's state read back (`--mqtt-retained-file`,
    /// `--mqtt-sessions-file`) and its cluster link started.
    fn open_broker(&mut self, cfg: &ServerConfig, sink: &Sink<ServerEvent>) -> Result<()> {
        if let Some(path) = &cfg.mqtt_retained_file {
            let n = self.publisher.open_retained_file(path, cfg.mqtt_retained_save_every).map_err(crate::UsageError)?;
            self.note("mqtt_retained_file", usize::MAX, format!("mqtt: {n} retained messages read from {}", path.display()), 0);
        }
        if let Some(c) = &cfg.cluster {
            let to = sink.clone();
            let relay = crate::server::broker::relay::Relay::start(c.clone(), Arc::new(move |ev| to(ServerEvent::Cluster(ev))))?;
            self.publisher.node = Some(relay.node().to_string());
            self.publisher.sessions.follow();
            for i in 0..self.publisher.shards.len() {
                self.publisher.shards.core(i).retained.keep_clears();
            }
            self.relay = Some(relay);
        }
        if let Some(path) = &cfg.mqtt_sessions_file {
            let n = self.publisher.open_sessions_file(path, cfg.mqtt_sessions_save_every).map_err(crate::UsageError)?;
            self.note("mqtt_sessions_file", usize::MAX, format!("mqtt: {n} kept sessions read from {}", path.display()), 0);
            // In a cluster the node follows their topics from now on.
            self.session_actions(Vec::new());
        }
        Ok(())
    }

    /// The threads that talk to the application's backends: `--upstream`,
    /// `--auth-http`, `--mqtt-authz-http`.
    fn start_hooks(&mut self, cfg: &ServerConfig, sink: &Sink<ServerEvent>, max_workers: usize) -> Result<()> {
        if let Some(t) = &cfg.upstream {
            let to = sink.clone();
            let sender = crate::server::broker::upstream::SenderConfig {
                target: t.clone(),
                node: cfg.cluster.as_ref().map(|c| c.node.clone()),
                secret: cfg.upstream_secret.clone(),
                nats_creds: cfg.upstream_nats_creds.clone(),
                hold_bytes: crate::server::broker::upstream::supervisor_cap(self.template.upstream_bytes, max_workers, cfg.max_message_bytes),
            };
            self.upstream = Some(crate::server::broker::upstream::Upstream::start(sender, Arc::new(move |ev| to(ServerEvent::Upstream(ev))))?);
        }
        if let Some(h) = &cfg.auth_hook {
            let to = sink.clone();
            self.hooks.auth = Some(crate::server::broker::auth_hook::Hook::start(h.clone(), Arc::new(move |d| to(ServerEvent::AuthHook(d))))?);
        }
        if let Some(h) = &cfg.authz_hook {
            let to = sink.clone();
            self.hooks.authz = Some(crate::server::broker::auth_hook::Hook::start(h.clone(), Arc::new(move |d| to(ServerEvent::AuthzHook(d))))?);
        }
        Ok(())
    }

    /// Wait until the `initial` workers listen (at most START_TIMEOUT),
    /// handling what comes meanwhile.
    fn wait_started(&mut self, initial: usize, next: &mut dyn FnMut(Duration) -> Option<ServerEvent>) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        while self.starting() > 0 {
            let Some(ev) = next(deadline.saturating_duration_since(Instant::now())) else {
                bail!("server workers did not start within {} s ({} of {initial} ready)", START_TIMEOUT.as_secs(), initial - self.starting());
            };
            match ev {
                ServerEvent::Worker(_, PoolEvent::Msg(ServerMsg::Fatal { message, .. })) => bail!("{message}"),
                ServerEvent::Worker(i, PoolEvent::Exited(info)) => bail!("server worker {i} ({info}) exited during start-up"),
                ev => self.on_event(ev),
            }
        }
        Ok(())
    }

    fn spawn(&mut self) -> Result<usize> {
        let i = self.pool.next_index();
        // Its sockets to the shards: the shards hold their ends already;
        // ours of its ends close once it inherited them.
        let ends = self.publisher.shards.pairs_for(i as u32)?;
        let bus_fds: Vec<i32> = ends.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        let cfg = ServerWorkerConfig { worker: i, bus_fds: bus_fds.clone(), ..self.template.clone() };
        self.pool.spawn_with(&serde_json::to_string(&cfg).expect("config serializes"), &bus_fds)?;
        drop(ends);
        self.view.add(i);
        self.life.insert(i, Life::Starting);
        // A worker started in a reconnect storm (elastic growth) notes its
        // first accepts too.
        if self.resuming_told.is_some_and(|t| t.elapsed() < crate::server::worker::seam::FRESH) {
            self.pool.send(i, crate::server::commands::CMD_RESUMING);
        }
        Ok(i)
    }

    fn starting(&self) -> usize {
        self.life.values().filter(|l| **l == Life::Starting).count()
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.pool.pids()
    }

    /// Worker indices alive now: those that answer publishes and
    /// listings (a starting one reads them once it runs).
    pub(crate) fn live(&self) -> Vec<usize> {
        self.life.iter().filter(|(_, l)| matches!(l, Life::Starting | Life::Running | Life::Retiring)).map(|(i, _)| *i).collect()
    }

    /// Take one event: of a worker, the admin API or the cluster link.
    pub(crate) fn on_event(&mut self, ev: ServerEvent) {
        let (i, ev) = match ev {
            ServerEvent::Worker(i, ev) => (i, ev),
            ServerEvent::Admin(req) => return self.on_admin(req),
            ServerEvent::Upstream(crate::server::broker::upstream::UpstreamEvent::Done(per)) => {
                for (w, n) in per {
                    *self.upstream_done.entry(w).or_insert(0) += n;
                }
                return self.send_upstream_done();
            }
            ServerEvent::Upstream(crate::server::broker::upstream::UpstreamEvent::Note(message)) => {
                return self.note("upstream_refused", usize::MAX, message, 0)
            }
            ServerEvent::AuthHook(d) => return self.hook_decided(d),
            ServerEvent::AuthzHook(d) => {
                for (w, answers) in self.hooks.authz_decided(d, Instant::now()) {
                    self.answer_authz(w, answers);
                }
                return;
            }
            ServerEvent::Cluster(crate::cluster::ClusterEvent::Fatal(e)) => return self.failure = Some(e),
            ServerEvent::Broker(m) => return self.on_broker(m),
            ServerEvent::Cluster(crate::cluster::ClusterEvent::ClientIds { node, ids, at_us }) => {
                let theirs_wins = self.relay.as_ref().is_some_and(|r| node.as_str() > r.node());
                let actions = self.publisher.sessions.connected_elsewhere(&ids, at_us, theirs_wins);
                return self.session_actions(actions);
            }
            ServerEvent::Cluster(crate::cluster::ClusterEvent::SessionsAsked { node, ids, at_us, reply }) => {
                return self.hand_sessions(&node, ids, at_us, reply)
            }
            ServerEvent::Cluster(crate::cluster::ClusterEvent::SessionsHanded(handed)) => return self.sessions_handed(handed),
            ServerEvent::Cluster(crate::cluster::ClusterEvent::SessionsTaken { node, lend }) => {
                self.publisher.sessions.taken(&node, lend);
                return;
            }
            ServerEvent::Cluster(ev) => {
                let running = self.live();
                if let Some(r) = &mut self.relay {
                    r.on_event(ev, &mut self.publisher, &running, &mut self.pool);
                }
                return;
            }
        };
        match ev {
            PoolEvent::Msg(ServerMsg::Ready { .. }) => {
                if self.life.get(&i) == Some(&Life::Starting) {
                    self.life.insert(i, Life::Running);
                }
            }
            PoolEvent::Msg(ServerMsg::Server(s)) => {
                if s.active == 0 {
                    self.empty_since.entry(i).or_insert_with(Instant::now);
                } else {
                    self.empty_since.remove(&i);
                }
                self.view.update(*s);
            }
            PoolEvent::Msg(ServerMsg::Fatal { message, .. }) => {
                self.note("worker_fatal", i, format!("server worker {i}: {message}"), 0);
            }
            PoolEvent::Msg(ServerMsg::Pushed { worker, publish_id, queued, dropped }) => self.publisher.pushed(worker, publish_id, queued, dropped),
            PoolEvent::Msg(ServerMsg::Connections { worker, request_id, list, truncated }) => self.publisher.listed(worker, request_id, list, truncated),
            PoolEvent::Msg(ServerMsg::Presence { worker, request_id, users, anonymous }) => self.publisher.presence(worker, request_id, users, anonymous),

            PoolEvent::Msg(ServerMsg::Notices { notices, .. }) => {
                self.pool.broadcast(&format!("{} {}", crate::server::commands::CMD_NOTICES, serde_json::to_string(&notices).expect("serializes")));
                if let Some(r) = &self.relay {
                    r.link.notices(notices);
                }
            }

            PoolEvent::Msg(ServerMsg::UpgradeAsks { worker, asks }) => {
                let decided = self.hooks.ask_upgrades(worker, asks, Instant::now());
                self.answer_upgrades(decided);
            }
            PoolEvent::Msg(ServerMsg::AuthzAsks { worker, asks }) => {
                let decided = self.hooks.ask_authz(worker, asks, Instant::now());
                self.answer_authz(worker, decided);
            }
            PoolEvent::Msg(ServerMsg::SessionClaims { worker, claims }) => {
                let claims = self.authenticate(worker, claims);
                self.claim(worker, claims);
            }
            PoolEvent::Msg(ServerMsg::SharedChanged { changes, .. }) => {
                self.publisher.shared.changed(changes);
                self.follow_shared();
            }
            PoolEvent::Msg(ServerMsg::SessionsEnded { ended, .. }) => {
                let now = Instant::now();
                let actions = ended.into_iter().flat_map(|e| self.publisher.sessions.ended(e, now)).collect();
                self.session_actions(actions);
            }
            PoolEvent::Msg(ServerMsg::Upstream { worker, messages }) => {
                if let Some(u) = &self.upstream {
                    u.send(worker, messages);
                }
            }
            PoolEvent::Msg(ServerMsg::Topics { worker, changes }) => {
                if let Some(r) = &mut self.relay {
                    r.topics_changed(worker, &changes, &mut self.publisher);
                }
            }
            PoolEvent::Garbled(line) => self.note("worker_garbled", i, format!("server worker {i} wrote a line that is not a message: {line}"), 0),
            PoolEvent::Exited(info) => {
                self.on_exit(i, info);
                self.follow_shared();
            }
        }
    }

    /// `--mqtt-auth-http`: the claims that carry a login are asked of
    /// the backend (or decided from its cached answers); those decided
    /// now and those without one go on.
    fn authenticate(&mut self, worker: usize, claims: Vec<SessionClaim>) -> Vec<SessionClaim> {
        let (go, refused) = self.hooks.authenticate(worker, claims, Instant::now());
        self.session_actions(refused);
        go
    }

    /// The backend decided claims [`Self::authenticate`] asked about:
    /// those let in claimed per worker, the others refused.
    fn hook_decided(&mut self, decided: Vec<crate::server::broker::auth_hook::Decision>) {
        let d = self.hooks.auth_decided(decided, Instant::now());
        for (worker, claims) in d.admitted {
            self.claim(worker, claims);
        }
        self.session_actions(d.refused);
        self.answer_upgrades(d.upgrades);
    }

    /// Decisions to the worker whose packets wait for them (control lane).
    fn answer_authz(&mut self, w: usize, answers: Vec<crate::server::auth::authz::Answer>) {
        if answers.is_empty() {
            return;
        }
        let cmd = format!("{} {}", crate::server::commands::CMD_AUTHZ, serde_json::to_string(&answers).expect("serializes"));
        if self.pool.send_control(w, &cmd) == crate::supervise::pool::Sent::Full {
            self.publisher.control_refused("authz");
        }
    }

    /// Each decision to the worker holding its request (control lane: never dropped below its bound).
    fn answer_upgrades(&mut self, answers: Vec<(usize, crate::server::commands::UpgradeAnswer)>) {
        for (w, a) in answers {
            let cmd = format!("{} {}", crate::server::commands::CMD_UPGRADE, serde_json::to_string(&a).expect("serializes"));
            if self.pool.send_control(w, &cmd) == crate::supervise::pool::Sent::Full {
                self.publisher.control_refused("upgrade");
            }
        }
    }

    /// CONNECTs' claims of their client ids, answered (or taken over, or
    /// asked of the other nodes).
    fn claim(&mut self, worker: usize, claims: Vec<SessionClaim>) {
        if claims.is_empty() {
            return;
        }
        {
            {
                use crate::server::broker::sessions::Action;
                let (now, at_us) = (Instant::now(), crate::proto::push::wall_us());
                self.publisher.sessions.clock(at_us);
                let (mut actions, mut admitted) = (Vec::new(), Vec::new());
                for c in claims {
                    let id = self.relay.is_some().then(|| (c.client_id.clone(), c.owner.clone()));
                    let (conn, assigned) = (c.conn, c.assigned.then(|| c.client_id.clone()));
                    let mut a = self.publisher.sessions.claim(worker, c, now);
                    // A 5.0 CONNECT without a client id is told the one it was
                    // given (unique: never a takeover).
                    for x in a.iter_mut() {
                        if let Action::Answer(_, ans) = x {
                            if ans.conn == conn && ans.code == 0 {
                                ans.assigned.clone_from(&assigned);
                            }
                        }
                    }
                    // Admitted now, or once the connection it takes over here ended.
                    if a.iter().any(|x| matches!(x, Action::Answer(_, ans) if ans.code == 0) || matches!(x, Action::Takeover(..))) {
                        admitted.extend(id);
                    }
                    actions.extend(a);
                }
                self.admitted_here(admitted, at_us);
                // Claims that want a session kept on another node.
                let asks = self.publisher.sessions.take_asks();
                if let (Some(r), false) = (&self.relay, asks.is_empty()) {
                    r.link.ask_sessions(asks, at_us);
                }
                self.session_actions(actions);
            }
        }
    }

    /// MQTT sessions kept here that another cluster node may still ask
    /// for (0 outside a cluster or with the link down). Those handed over
    /// are not in `--mqtt-sessions-file` when the process stops.
    pub(crate) fn sessions_to_hand_over(&self) -> u64 {
        match self.relay.as_ref().is_some_and(|r| r.link.up()) {
            true => self.publisher.sessions.counters.kept,
            false => 0,
        }
    }

    /// In a cluster the other nodes let go of client ids admitted here.
    fn admitted_here(&mut self, ids: Vec<crate::cluster::OwnedId>, at_us: u64) {
        if let (Some(r), false) = (&self.relay, ids.is_empty()) {
            r.link.connected_here(ids, at_us);
        }
    }

    /// Claims that waited for the other nodes, admitted: announced at
    /// the times of their CONNECTs (one message per time).
    fn admitted_at(&mut self, admitted: Vec<(crate::cluster::OwnedId, u64)>) {
        let mut by_time: std::collections::BTreeMap<u64, Vec<crate::cluster::OwnedId>> = std::collections::BTreeMap::new();
        for (id, at_us) in admitted {
            by_time.entry(at_us).or_default().push(id);
        }
        for (at_us, ids) in by_time {
            self.admitted_here(ids, at_us);
        }
    }

    /// Another node asks for the MQTT sessions of `ids`, whose CONNECTs
    /// came at `at_us`: those kept here are lent to it, the connections
    /// here of older CONNECTs taken over.
    fn hand_sessions(&mut self, node: &str, ids: Vec<crate::cluster::OwnedId>, at_us: u64, reply: String) {
        let Some(r) = &self.relay else { return };
        if node == r.node() {
            return;
        }
        let theirs_wins = node > r.node();
        let (answer, actions) = self.publisher.sessions.hand_over(node, &ids, at_us, theirs_wins, Instant::now(), crate::proto::push::wall_us());
        r.link.hand_sessions(reply, answer);
        self.session_actions(actions);
    }

    /// The other nodes' answers to this node's question about sessions:
    /// those handed over are kept, then the claims waiting are answered.
    fn sessions_handed(&mut self, handed: crate::cluster::sessions::Handed) {
        let mut sessions = Vec::new();
        for json in handed.sessions {
            match crate::server::broker::sessions::saved::SavedSession::parse(json.as_bytes()) {
                Ok(s) => sessions.push(s),
                Err(e) => self.note("mqtt_session_refused", usize::MAX, format!("refused an MQTT session another node handed over: {e}"), 0),
            }
        }
        let (now, wall) = (Instant::now(), crate::proto::push::wall_us());
        // Admissions noted at the time they are announced with.
        self.publisher.sessions.clock(wall);
        let (actions, admitted) = self.publisher.sessions.handed(&handed.asked, (&handed.newer, &handed.owned, handed.at_us), sessions, now, wall);
        self.admitted_at(admitted);
        self.session_actions(actions);
    }

    /// In a cluster: follow the topics of this node's shared subscription
    /// groups' filters (its members' are not in their workers' topics).
    fn follow_shared(&mut self) {
        let Some(r) = &mut self.relay else { return };
        let changes = self.publisher.shared.take_followed();
        if !changes.is_empty() {
            r.topics_changed(SHARED_GROUPS, &changes, &mut self.publisher);
        }
    }

    /// What a broker shard said for the supervisor: an admin publish's
    /// place, a message for the kept sessions' queues, a cluster node's
    /// client publish for NATS, a recovery for the cluster's stream.
    fn on_broker(&mut self, m: crate::server::broker::core::ToMain) {
        use crate::server::broker::core::ToMain;
        match m {
            ToMain::Routed { publish_id, at, workers } => self.publisher.routed(publish_id, at, workers),
            ToMain::Offline(m) => self.publisher.sessions.offline(&m.topic, &m.data, m.qos, m.retain, m.props.as_deref(), m.publish_us),
            ToMain::Relay(m) => self.client_published(vec![m]),
            ToMain::Fetch { worker, topic, after } => {
                self.resuming();
                match &mut self.relay {
                    Some(r) => r.history_wanted(worker as usize, &topic, after, &mut self.publisher),
                    None => self.publisher.answer_history(worker as usize, &topic, after),
                }
            }
        }
    }

    /// Send the client id registry's answers and takeovers
    /// (`broker/sessions.rs`); in a cluster, follow what the kept sessions
    /// subscribed to.
    fn session_actions(&mut self, actions: Vec<crate::server::broker::sessions::Action>) {
        use crate::server::broker::sessions::Action;
        use crate::server::commands::{CMD_SESSION, CMD_TAKEOVER};
        for a in actions {
            // The control lane: never dropped below its 64 MiB bound
            // (Pool::send_control); past it, counted.
            let (kind, sent) = match a {
                Action::Answer(w, answer) => {
                    ("answer", self.pool.send_control(w, &format!("{CMD_SESSION} {}", serde_json::to_string(&answer).expect("serializes"))))
                }
                Action::Takeover(w, conn) => ("takeover", self.pool.send_control(w, &format!("{CMD_TAKEOVER} {conn}"))),
                Action::Will(will) => {
                    self.client_published(vec![crate::server::broker::core::Message::will(will)]);
                    continue;
                }
            };
            if sent == crate::supervise::pool::Sent::Full {
                self.publisher.control_refused(kind);
            }
        }
        // The shards route to the supervisor what its kept sessions'
        // filters match.
        for (add, filter) in self.publisher.sessions.take_interest() {
            self.publisher.shards.offline(add, &filter);
        }
        // A node follows the topics its kept sessions subscribed to, as if
        // a worker of its own held them.
        if let Some(r) = &mut self.relay {
            let changes = self.publisher.sessions.take_followed();
            if !changes.is_empty() {
                r.topics_changed(KEPT_SESSIONS, &changes, &mut self.publisher);
            }
        }
    }

    /// Tell each worker how many more of its messages the backend took.
    /// A worker whose command queue is full now is told on a later tick
    /// (the counts add up), so its in-flight count always falls; a
    /// worker that is gone needs no telling.
    fn send_upstream_done(&mut self) {
        let pool = &mut self.pool;
        self.upstream_done
            .retain(|&w, n| matches!(pool.send(w, &format!("{} {n}", crate::server::commands::CMD_UPSTREAM_DONE)), crate::supervise::pool::Sent::Full));
    }

    /// Read the accept queues once a second; connections left there for
    /// [`QUEUE_WAIT`] are reported once (their clients count them as
    /// connected, and nothing serves them).
    fn watch_accept_queue(&mut self) {
        if self.queue.read_at.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.queue.read_at = Some(Instant::now());
        self.accept_queue = self.listeners.iter().map(crate::server::listener::queued).sum();
        if self.accept_queue == 0 {
            self.queue = QueueWatch { read_at: self.queue.read_at, ..Default::default() };
            return;
        }
        let since = *self.queue.since.get_or_insert_with(Instant::now);
        if self.queue.told || since.elapsed() < QUEUE_WAIT || self.stopping {
            return;
        }
        self.queue.told = true;
        let t = self.view.totals();
        let cap = match self.sizing {
            Sizing::Elastic { max, .. } => format!("{} workers of the {max} that --connections allows", t.workers),
            _ => format!("{} workers (fixed)", t.workers),
        };
        let message = format!(
            "{} connections have waited over {} s in the kernel's accept queue: their clients count them as connected, but no worker takes them ({cap}, {} full, {} connections held, {} per worker at most). Raise the server's --connections (it caps how many workers start) or its descriptor limit (megaconn tune --connections N --role server)",
            format::count(self.accept_queue),
            QUEUE_WAIT.as_secs(),
            t.full,
            format::count(t.active),
            format::count(self.template.budget),
        );
        self.note("accept_queue_waiting", usize::MAX, message, 0);
    }

    /// A worker is recovering a client's history: every worker notes its
    /// accepts for the seam from now on (told again every FRESH / 2).
    fn resuming(&mut self) {
        let fresh = crate::server::worker::seam::FRESH;
        if self.resuming_told.is_none_or(|t| t.elapsed() >= fresh / 2) {
            self.resuming_told = Some(Instant::now());
            self.pool.broadcast(crate::server::commands::CMD_RESUMING);
        }
    }

    /// The cluster link's state and counters (in a cluster).
    pub(crate) fn link_status(&self) -> Option<crate::cluster::LinkStatus> {
        self.relay.as_ref().map(|r| r.status())
    }

    fn on_exit(&mut self, i: usize, info: ExitInfo) {
        self.pool.mark_exited(i);
        self.publisher.worker_gone(i);
        let actions = self.publisher.sessions.worker_gone(i, Instant::now());
        self.session_actions(actions);
        if let Some(r) = &mut self.relay {
            r.link.worker_gone(i);
        }
        let was = self.life.insert(i, Life::Dead);
        if let Some(c) = &self.cap {
            // The kernel closed its sockets: their places are free.
            c.forget(i);
        }
        self.empty_since.remove(&i);
        if self.stopping || was == Some(Life::Retiring) {
            self.view.retire(i, Close::ServerStopped);
            return;
        }
        let lost = self.view.retire(i, Close::WorkerCrashed);
        let now = Instant::now();
        self.crashes.push_back(now);
        while self.crashes.front().is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW) {
            self.crashes.pop_front();
        }
        self.note("worker_crashed", i, format!("server worker {i} ({info}): {lost} connections lost (close reason {WORKER_CRASHED})"), lost);
        if self.crashes.len() >= CRASH_LIMIT {
            self.failure = Some(format!(
                "crash loop: {} server workers died within {} s (last: worker {i}, {info}); stopping instead of restarting them again",
                self.crashes.len(),
                CRASH_WINDOW.as_secs()
            ));
            return;
        }
        if let Sizing::Fixed(_) = self.sizing {
            match self.spawn() {
                Ok(j) => self.note("worker_replaced", j, format!("started server worker {j} to replace worker {i}"), 0),
                Err(e) => self.failure = Some(format!("cannot replace server worker {i}: {e:#}")),
            }
        }
    }

    /// Find workers that stopped taking commands (SIGSTOP, a long inline
    /// stage): never wait on them, say so once, and once they recover.
    fn watch_stalls(&mut self) {
        let now: std::collections::BTreeSet<usize> = self
            .live()
            .into_iter()
            .filter(|&i| {
                let (blocked, silent) = (self.pool.blocked_for(i), self.pool.silent_for(i));
                // A stalled worker recovers when it reports again.
                let was = self.stalled.contains(&i);
                blocked >= STALL_AFTER
                    || silent >= SILENCE_LIMIT
                    || (silent >= STALL_AFTER && (was || ((blocked > Duration::ZERO || self.publisher.waits_on(i)) && self.pool.is_stopped(i))))
            })
            .collect();
        if now == self.stalled {
            return;
        }
        let old = std::mem::take(&mut self.stalled);
        for &i in now.difference(&old) {
            let why = if self.pool.is_stopped(i) { "stopped by a signal" } else { "not reading its commands or reporting" };
            self.note("worker_stalled", i, format!("server worker {i} stalled ({why}): admin answers no longer wait for it"), 0);
        }
        for &i in old.difference(&now) {
            self.note("worker_recovered", i, format!("server worker {i} takes its commands again"), 0);
        }
        self.publisher.set_stalled(&now);
        self.stalled = now;
    }

    /// Workers that stopped taking commands.
    pub(crate) fn stalled(&self) -> Vec<usize> {
        self.stalled.iter().copied().collect()
    }

    fn note(&mut self, event: &'static str, worker: usize, message: String, lost: u64) {
        self.notes.push(FleetNote { event, worker, message, lost });
    }

    /// SIGHUP, or the certificate or key file changed (looked at once a
    /// second): read them, and if they make a certificate, every worker
    /// uses it for new handshakes, and so does every worker started later
    /// (the template keeps the bytes in force: bad files on disk never
    /// reach a worker). Established connections are untouched.
    fn maybe_reload_tls(&mut self, hup: bool) {
        let Some(t) = &mut self.template.tls else { return };
        if !hup && self.tls_checked.elapsed() < TLS_FILE_CHECK {
            return;
        }
        self.tls_checked = Instant::now();
        let stamp = crate::tls::files::stamp(t);
        if !hup && stamp == self.tls_stamp {
            return;
        }
        self.tls_stamp = stamp;
        let why = if hup { "SIGHUP" } else { "the files changed" };
        match crate::tls::files::read_pem(t) {
            Ok(pem) => {
                let arg = serde_json::to_string(&pem).expect("a string serializes");
                t.pem = Some(pem);
                self.pool.broadcast(&format!("{} {arg}", crate::server::commands::CMD_TLS_RELOAD));
                let message = format!("TLS certificate reloaded ({why}): new handshakes use {}", t.cert.display());
                self.note("tls_reloaded", usize::MAX, message, 0);
            }
            Err(e) => {
                let message = format!("TLS certificate not reloaded ({why}): {e:#}; the previous one stays in use");
                self.note("tls_reload_failed", usize::MAX, message, 0);
            }
        }
    }

    /// `--sys-interval`: the `$SYS` topics that changed, published
    /// retained like any publish from the application.
    fn publish_sys(&mut self) {
        let Some((_, every, last)) = &self.sys else { return };
        let elapsed = last.elapsed();
        if elapsed < *every {
            return;
        }
        let t = self.view.totals();
        let sum = |k: &crate::stats::counters::Kinds| k.values().sum::<u64>();
        let s = &self.publisher.sessions.counters;
        let reading = super::sys_topics::Reading {
            uptime_s: self.started.elapsed().as_secs(),
            connected: t.active_by_protocol.iter().filter(|(p, _)| p.starts_with("mqtt")).map(|(_, n)| *n).sum(),
            disconnected: s.kept,
            expired: s.expired.get("expiry").copied().unwrap_or(0),
            messages_received: t.frames_in,
            messages_sent: t.frames_out,
            bytes_received: t.bytes_received,
            bytes_sent: t.bytes_sent,
            publish_bytes_received: t.mqtt_publish_bytes_in,
            publish_bytes_sent: t.mqtt_publish_bytes_out,
            publish_received: sum(&t.mqtt_publishes_in),
            publish_sent: sum(&t.mqtt_publishes_out),
            publish_dropped: sum(&t.mqtt_inflight_dropped),
            connections: t.accepted,
            subscriptions: t.subscriptions,
            // mosquitto's count holds its own $SYS topics too.
            retained: {
                let r = self.publisher.broker_counters().1;
                r.messages + r.sys
            },
        };
        let Some((tree, _, last)) = &mut self.sys else { return };
        *last = Instant::now();
        let messages = tree
            .update(&reading, elapsed.as_secs_f64())
            .into_iter()
            .map(|(topic, payload)| crate::server::broker::core::Message {
                retain: true,
                ..crate::server::broker::core::Message::topic(topic, payload.into_bytes())
            })
            .collect();
        self.client_published(messages);
    }

    /// SIGHUP: `--config` read again (server/supervisor/reload.rs); the
    /// TLS and mosquitto files it names are then read by their reloads,
    /// which follow.
    fn reread_config(&mut self) {
        let Some(file) = &self.config_file else { return };
        let read = (file.read.lock().expect("the config reader"))();
        let path = file.path.clone();
        match read {
            Ok(changes) => {
                let live = super::reload::Live {
                    tls: self.template.tls.as_mut(),
                    mqtt: &mut self.mqtt_files,
                    jwt: self.template.auth.as_mut(),
                    cap: self.cap.as_ref(),
                    upstream: self.upstream.as_ref(),
                };
                let outcome = super::reload::sort(changes, live);
                if let (true, Some(key)) = (outcome.new_key, &self.template.auth) {
                    // Workers started later take it from the template.
                    self.pool.broadcast(&format!("{} {}", crate::server::commands::CMD_AUTH_KEY, serde_json::to_string(key).expect("serializes")));
                }
                self.config_counters.reloaded += 1;
                self.config_counters.applied += outcome.applied.len() as u64;
                self.config_counters.need_restart += outcome.need_restart.len() as u64;
                self.note("config_reloaded", usize::MAX, format!("config: {path} read again (SIGHUP): {}", outcome.describe()), 0);
            }
            Err(e) => {
                self.config_counters.refused += 1;
                self.note("config_reload_failed", usize::MAX, format!("config: not reloaded (SIGHUP): {e}; the configuration in force stays"), 0);
            }
        }
    }

    /// SIGHUP: mosquitto's password and ACL files read again; if both
    /// parse, every worker (and every later one) admits and decides by
    /// them, and closes the connections of users no longer in the
    /// password file. A file that does not parse changes nothing.
    fn reload_mqtt_files(&mut self) {
        if !self.mqtt_files.any() {
            return;
        }
        match crate::server::auth::mosquitto::Files::load(&self.mqtt_files) {
            Ok(files) => {
                let message = format!("mqtt: password and ACL files read again (SIGHUP): {}", files.describe());
                self.pool.broadcast(&format!("{} {}", crate::server::commands::CMD_MQTT_FILES, serde_json::to_string(&files).expect("serializes")));
                self.template.mqtt_files = Some(files);
                self.publisher.sessions.counters.files_reloaded += 1;
                self.note("mqtt_files_reloaded", usize::MAX, message, 0);
            }
            Err(e) => {
                self.publisher.sessions.counters.files_refused += 1;
                self.note("mqtt_files_reload_failed", usize::MAX, format!("mqtt: not reloaded (SIGHUP): {e}; the files read before stay in force"), 0);
            }
        }
    }

    /// Grow or shrink an elastic fleet; called on every supervisor tick.
    pub(crate) fn upkeep(&mut self) {
        self.pool.flush();
        if !self.upstream_done.is_empty() {
            self.send_upstream_done();
        }
        self.watch_accept_queue();
        let hup = crate::signals::take_hangup();
        if hup {
            self.reread_config();
        }
        self.maybe_reload_tls(hup);
        if hup {
            self.reload_mqtt_files();
        }
        self.watch_stalls();
        self.top_topics.refresh(&self.publisher.shards, Instant::now());
        self.publisher.expire();
        // A will published while the cluster link is down would be refused
        // (503 to nobody): it waits for the link.
        let link_down = self.relay.as_ref().is_some_and(|r| !r.link.up());
        let mut actions = self.publisher.sessions.expire(Instant::now(), link_down);
        let wall = crate::proto::push::wall_us();
        self.publisher.sessions.clock(wall);
        self.publisher.sessions.unconfirmed(Instant::now());
        let (answers, admitted) = self.publisher.sessions.overdue(Instant::now());
        actions.extend(answers);
        self.admitted_at(admitted);
        self.session_actions(actions);
        self.publish_sys();
        self.save_state(false);
        if let Some(r) = &mut self.relay {
            r.flush_replies(&mut self.publisher);
            if let Some((event, message)) = r.link_change() {
                // Up: ask the other nodes for the retained messages it may
                // have missed, and tell them its shared subscription groups.
                if r.link.up() {
                    r.ask_retained(&self.publisher);
                    self.publisher.shared.linked();
                }
                self.note(event, usize::MAX, message, 0);
            }
        }
        self.announce_groups(false);
        let Sizing::Elastic { target, max } = self.sizing else { return };
        if self.stopping || self.failure.is_some() {
            return;
        }
        let states: Vec<WorkerState> = self
            .life
            .iter()
            .filter(|(_, l)| **l != Life::Dead)
            .map(|(&index, &life)| {
                let s = self.view.get(index);
                WorkerState {
                    index,
                    starting: life == Life::Starting,
                    retiring: life == Life::Retiring,
                    accepting: s.is_none_or(|s| s.accepting),
                    active: s.map_or(0, |s| s.active),
                    budget: self.template.budget,
                    empty_since: self.empty_since.get(&index).copied(),
                }
            })
            .collect();
        // Full workers stop accepting once a sibling has room, one at a
        // time, so some worker always watches the shared listeners.
        self.told_leave.retain(|i| self.view.get(*i).is_some_and(|s| s.accepting));
        if self.told_leave.is_empty() && states.iter().any(|w| !w.starting && w.accepting && w.active < (w.budget as f64 * elastic::PRESPAWN_SHARE) as u64) {
            if let Some(w) = states.iter().find(|w| w.accepting && !w.retiring && w.active >= w.budget) {
                self.told_leave.insert(w.index);
                self.pool.send(w.index, crate::supervise::control::CMD_LEAVE);
            }
        }
        let d = elastic::decide(&states, target, max, Instant::now(), self.retire_after);
        for _ in 0..d.spawn {
            match self.spawn() {
                Ok(j) => {
                    let t = self.view.totals();
                    self.note(
                        "worker_started",
                        j,
                        format!("elastic: started server worker {j} ({} accepting, {} full, {} workers)", t.accepting, t.full, t.workers + 1),
                        0,
                    );
                }
                Err(e) => {
                    self.failure = Some(format!("cannot grow the server: {e:#}"));
                    return;
                }
            }
        }
        for i in d.retire {
            self.life.insert(i, Life::Retiring);
            self.pool.send(i, crate::supervise::control::CMD_STOP);
            self.note("worker_retired", i, format!("elastic: server worker {i} empty for {} s, exiting", self.retire_after.as_secs()), 0);
        }
    }

    /// SIGTERM: every worker stops accepting and reading, answers what is
    /// in flight and exits; none is replaced or grown meanwhile.
    pub(crate) fn drain(&mut self) {
        self.announce_groups(true);
        self.stopping = true;
        self.close_listeners();
        self.pool.broadcast(crate::supervise::control::CMD_CLOSE);
    }

    pub(crate) fn retire_after(&self) -> Duration {
        self.retire_after
    }

    /// Workers an elastic server keeps when idle (a fixed pool: all).
    pub(crate) fn initial_workers(&self) -> usize {
        match self.sizing {
            Sizing::Elastic { target, .. } => target,
            Sizing::Fixed(n) => n,
        }
    }

    /// Workers still running.
    pub(crate) fn alive(&self) -> usize {
        self.pool.alive()
    }

    /// Write the retained set to `--mqtt-retained-file` and the kept
    /// sessions to `--mqtt-sessions-file` if they changed (`force`: now,
    /// the server stops; else at most every `--mqtt-*-save-every`).
    pub(crate) fn save_state(&mut self, force: bool) {
        for (kind, e) in self.publisher.save_state(force) {
            self.note(kind, usize::MAX, format!("mqtt: {e}"), 0);
        }
    }

    /// In a cluster: forget the nodes gone quiet, and tell the others this
    /// node's MQTT shared subscription groups when due (`leaving`: none,
    /// once, as it stops).
    fn announce_groups(&mut self, leaving: bool) {
        let Some(r) = &self.relay else { return };
        let now = Instant::now();
        self.publisher.shared.expire(now);
        if self.stopping || !r.link.up() {
            return;
        }
        if let Some(body) = self.publisher.shared.announce(now, leaving) {
            r.link.announce_groups(body);
        }
    }

    /// Stop every worker (graceful, then SIGKILL after `grace`).
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.announce_groups(true);
        self.stopping = true;
        self.close_listeners();
        self.pool.stop(grace);
    }

    /// Close the supervisor's copies; no later worker may inherit the
    /// (now reusable) descriptor numbers.
    fn close_listeners(&mut self) {
        self.listeners.clear();
        self.pool.set_inherit(Vec::new());
        self.template.listen_fds.clear();
    }
}

/// What every worker shares, made once here: the per-address table
/// (`--max-connections-per-ip`), the TLS material (a ticket key for all,
/// ALPN when a TLS entry speaks HTTP), mosquitto's files; SIGHUP
/// watched when any of them (or `--config`) can be read again.
fn shared_state(cfg: &ServerConfig, template: &mut ServerWorkerConfig) -> Result<()> {
    template.limits = crate::server::limits::ConnLimits::of(cfg).context("cannot create the shared --max-connections-per-ip table")?;
    if let Some(t) = &mut template.tls {
        t.ticket_key = crate::tls::tickets::new_key()?;
        // ALPN http/1.1 when a TLS entry speaks HTTP or WebSocket.
        t.alpn_http = cfg.services.iter().any(|s| s.tls && matches!(s.protocol, crate::proto::Protocol::Http | crate::proto::Protocol::Ws));
        t.pem = Some(crate::tls::files::read_pem(t).context("cannot serve TLS (--tls-cert, --tls-key)")?);
        crate::signals::watch_hangup();
    }
    if cfg.mqtt_files.any() {
        template.mqtt_files = Some(crate::server::auth::mosquitto::Files::load(&cfg.mqtt_files).map_err(crate::UsageError)?);
        crate::signals::watch_hangup();
    }
    if cfg.config_file.is_some() {
        // SIGHUP reads the file again (supervisor/reload.rs).
        crate::signals::watch_hangup();
    }
    Ok(())
}

/// The config every worker of this server gets (its index filled in at
/// spawn). `pool:N` is N threads for the whole server, divided over the
/// initial workers (at least one each); `--upstream-queue-bytes` over
/// the most workers that may run at once.
fn worker_template(cfg: &ServerConfig, initial: usize, max_workers: usize, budget: u64, elastic: bool) -> ServerWorkerConfig {
    let business = match cfg.business {
        BusinessMode::Pool(n) => BusinessMode::Pool((n / initial.max(1)).max(1)),
        other => other,
    };
    ServerWorkerConfig {
        worker: 0,
        listen: cfg.listen,
        services: cfg.services.clone(),
        idle_timeout_ms: cfg.idle_timeout.map(|d| d.as_millis() as u64),
        stats_interval_ms: (cfg.stats_interval.as_millis() as u64).clamp(100, 1000),
        business,
        queue: cfg.queue as usize,
        service_time: cfg.service_time.clone(),
        http: http::HttpConfig {
            body: if cfg.body_size == 12 { b"Hello world!".to_vec() } else { vec![b'x'; cfg.body_size] },
            max_header_bytes: cfg.max_header_bytes,
            header_timeout_ms: cfg.header_timeout.as_millis() as u64,
        },
        budget,
        elastic,
        max_pending_bytes: cfg.max_pending_bytes,
        cap_fd: None,
        listen_fds: Vec::new(),
        track_topics: cfg.cluster.is_some(),
        limits: Default::default(),
        ws: crate::server::session::ws::WsConfig {
            max_message: cfg.max_message_bytes,
            max_head: cfg.max_header_bytes,
            push_format: cfg.push_format,
            deflate: cfg.ws_deflate,
        },
        mqtt: crate::server::session::mqtt::MqttConfig {
            max_push: cfg.max_push_bytes,
            flight: cfg.mqtt_flight,
            max_keep_alive: cfg.mqtt_max_keep_alive,
            auth_hook: cfg.auth_hook.is_some(),
            authz_hook: cfg.authz_hook.as_ref().map(|h| (h.cache_ttl, h.timeout + crate::server::broker::auth_hook::AUTHZ_SLACK)),
        },
        tls: cfg.tls.clone(),
        drain_period_ms: cfg.drain_period.as_millis() as u64,
        auth: cfg.auth.jwt_key(),
        jwt_expected: cfg.jwt_expected.clone(),
        admin_topics: cfg.admin_topics.clone(),
        upstream_queue: cfg.upstream.as_ref().map(|_| cfg.upstream_queue),
        upstream_bytes: crate::server::broker::upstream::worker_share(cfg.upstream_queue_bytes, max_workers),
        presence_events: cfg.upstream.is_some() && cfg.presence_events,
        presence_notices: cfg.presence_notices,
        io: cfg.io,
        mqtt_files: None,
        io_batch_wait_us: cfg.io_batch_wait.as_micros() as u64,
        bus_fds: Vec::new(),
    }
}
