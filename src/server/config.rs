//! What a server run is asked to do, as a domain type (the CLI converts
//! its flags into this; tests and the bench build it directly).

use crate::proto::Protocol;
use crate::server::business::service_time::ServiceTime;
use crate::server::business::BusinessMode;
use crate::supervise::plan::Workers;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Default bound on a connection's unread pushes: 16 messages of 4 KiB.
pub(crate) const DEFAULT_MAX_PENDING: usize = 64 * 1024;
/// Where `megaconn server` serves its admin API unless told otherwise.
pub(crate) const DEFAULT_ADMIN: &str = "127.0.0.1:9100";

/// One option whose value in `--config` changed since it was last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigChange {
    /// Its key in the file (`max_connections`).
    pub key: String,
    /// Its flag without the dashes (`max-connections`).
    pub long: String,
    /// Its new values as the flag takes them (empty: removed from the file).
    pub values: Vec<String>,
    /// A flag or a variable sets it: the file's value does not count.
    pub pinned: bool,
}

/// A reading of `--config`: what changed since the last one, or why the
/// file does not read.
pub(crate) type ConfigReader = dyn FnMut() -> Result<Vec<ConfigChange>, String> + Send;

/// Reads `--config` again (SIGHUP): the changes since the last reading,
/// or why the file does not read (then nothing changed). cli/settings.rs
/// makes it: it knows the options.
#[derive(Clone)]
pub(crate) struct ConfigFile {
    pub path: String,
    pub read: std::sync::Arc<std::sync::Mutex<ConfigReader>>,
}

impl std::fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfigFile({})", self.path)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    /// `--config`, read again on SIGHUP (None: no file, or stdin).
    pub config_file: Option<ConfigFile>,
    pub listen: std::net::IpAddr,
    /// Each protocol on its ports (`--serve`, or `--protocol`/`--ports`):
    /// checked by `services::check` in `plan`.
    pub services: Vec<crate::server::services::Service>,
    /// `Auto`: elastic (one accepting worker per core, grown by the load);
    /// `Fixed(n)`: exactly n workers, replaced when they die.
    pub workers: Workers,
    /// Connections to plan capacity for (checked against the machine).
    pub connections: Option<u64>,
    /// Hard cap on connections held server-wide: beyond it new ones are
    /// closed at once and counted as `refused_over_cap`.
    pub max_connections: Option<u64>,
    /// Hard cap on connections from one source address, server-wide:
    /// beyond it new ones are closed at accept (`refused_per_ip`).
    pub max_connections_per_ip: Option<u32>,
    /// Most topics with subscribers one worker holds; a subscription that
    /// would create another is refused (`subscribe_refused`).
    pub max_topics: usize,
    /// Commands (subscribe, unsubscribe, resume, refresh) one connection
    /// may send per second (`too_many_commands`).
    pub max_commands_per_second: u32,
    /// Close a connection whose partial input or unsent output has not
    /// moved for this long (`stall_timeout`); None: off.
    pub stall_timeout: Option<Duration>,
    /// TCP keepalive on accepted sockets (auto: on unless on loopback).
    pub tcp_keepalive: crate::server::limits::SocketTimer,
    /// `TCP_USER_TIMEOUT` on accepted sockets (auto: on unless on loopback).
    pub tcp_user_timeout: crate::server::limits::SocketTimer,
    pub idle_timeout: Option<Duration>,
    pub stats_interval: Duration,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// `Pool(n)`: n threads for the whole server, divided over the workers.
    pub business: BusinessMode,
    pub queue: u64,
    pub service_time: ServiceTime,
    pub body_size: usize,
    pub max_header_bytes: usize,
    pub header_timeout: Duration,
    /// SIGTERM / Ctrl-C: how long in-flight requests may take to be
    /// answered before the remaining connections are closed.
    pub drain_timeout: Duration,
    /// SIGTERM / Ctrl-C: long-lived connections (framed, ws, sse) close
    /// spread evenly over this long, each after a reconnect hint.
    pub drain_period: Duration,
    /// How long a surplus elastic worker stays empty before it exits.
    pub retire_after: Duration,
    /// Most push bytes one connection may leave unread (slow consumer).
    pub max_pending_bytes: usize,
    /// `--max-push-bytes`: the largest message a publish may carry.
    pub max_push_bytes: usize,
    /// `--history`, `--history-ttl`, `--history-max-bytes`.
    pub history: crate::server::broker::history::HistoryConfig,
    /// MQTT: `--mqtt-inflight`, `--mqtt-queue`, `--mqtt-queue-bytes`.
    pub mqtt_flight: crate::server::session::mqtt::flight::Bounds,
    /// MQTT: `--mqtt-max-keep-alive` (0: any).
    pub mqtt_max_keep_alive: u16,
    /// MQTT: `--mqtt-auth-http` and its bounds.
    pub auth_hook: Option<crate::server::broker::auth_hook::HookConfig>,
    /// MQTT: `--mqtt-authz-http` (with the same bounds).
    pub authz_hook: Option<crate::server::broker::auth_hook::HookConfig>,
    /// `--broker-shards`: threads routing messages (0: one per core).
    pub broker_shards: usize,
    /// MQTT: `--mqtt-retained`, `--mqtt-retained-bytes`.
    pub mqtt_retained: crate::server::broker::retained::RetainedConfig,
    /// MQTT: `--mqtt-retained-file` (the retained set kept across
    /// restarts) and `--mqtt-retained-save-every`.
    pub mqtt_retained_file: Option<std::path::PathBuf>,
    pub mqtt_retained_save_every: Duration,
    /// MQTT: `--mqtt-sessions-file` (kept sessions across restarts) and
    /// `--mqtt-sessions-save-every`.
    pub mqtt_sessions_file: Option<std::path::PathBuf>,
    pub mqtt_sessions_save_every: Duration,
    /// MQTT: `--mqtt-client-ids`, `--mqtt-sessions`, `--mqtt-session-queue` and their bytes.
    pub mqtt_sessions: crate::server::broker::sessions::SessionsConfig,
    /// `--sys-interval`: how often the `$SYS` topics are published (0: never).
    pub sys_interval: Duration,
    /// MQTT: `--mqtt-password-file`, `--mqtt-acl-file`, `--mqtt-allow-anonymous`.
    pub mqtt_files: crate::server::auth::mosquitto::FilesConfig,
    /// WebSocket: largest message (close 1009 above it).
    pub max_message_bytes: usize,
    /// WebSocket: how pushes are framed.
    pub push_format: crate::server::session::ws::PushFormat,
    /// WebSocket permessage-deflate: `--ws-deflate`, `--ws-deflate-min-bytes`.
    pub ws_deflate: crate::server::session::ws_deflate::DeflateConfig,
    /// Admin HTTP API (metrics, stats, publish); None: off.
    pub admin: Option<std::net::SocketAddr>,
    /// Bearer token the admin API requires (mandatory off loopback).
    pub admin_token: Option<crate::admin::Token>,
    /// `--cluster URL --node-id ID`: publishes travel between nodes over NATS.
    pub cluster: Option<crate::cluster::ClusterConfig>,
    /// `--tls-cert`/`--tls-key`: the certificate the TLS entries of
    /// `services` serve (the ticket key and ALPN are filled in when the
    /// server starts).
    pub tls: Option<crate::tls::files::ServerTls>,
    /// `--io`: the workers' reactor (resolved by `plan`).
    pub io: crate::uring::Io,
    /// `--io-batch-wait`: how long a ring worker with quiet connections
    /// waits for company (`uring/batch.rs`).
    pub io_batch_wait: Duration,
    /// `--auth`: who may connect.
    pub auth: Auth,
    /// `--admin-topics`: topic patterns only tokens with `"admin": true`
    /// may subscribe to (nobody, without `--auth`).
    pub admin_topics: Vec<String>,
    /// `--jwt-audience` and `--jwt-issuer`: the `aud` and `iss` every token must carry.
    pub jwt_expected: crate::server::auth::jwt::Expected,
    /// `--upstream URL`: what clients send goes to this webhook or NATS JetStream.
    pub upstream: Option<crate::server::broker::upstream::Destination>,
    /// `--upstream-nats-creds`: the creds file's contents.
    pub upstream_nats_creds: Option<String>,
    /// `--upstream-queue`: messages per worker the backend has not taken.
    pub upstream_queue: usize,
    /// `--upstream-queue-bytes`: bytes the whole server may hold for the
    /// backend; each worker gets its share (`upstream::worker_share`).
    pub upstream_queue_bytes: u64,
    /// `--upstream-secret-file`: every POST is signed with it.
    pub upstream_secret: Option<crate::server::broker::upstream::UpstreamSecret>,
    /// `--presence-events`: joins and leaves go to the upstream too.
    pub presence_events: bool,
    /// `--presence-notices`: joins and leaves to the topic's subscribers.
    pub presence_notices: bool,
    pub json: bool,
}

/// `--auth` and its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Auth {
    /// Anyone may connect and subscribe to anything.
    #[default]
    Off,
    /// Every connection shows a JWT verified with this key (None: no key
    /// flag was given, which `plan` refuses).
    Jwt(Option<crate::server::auth::jwt::JwtKey>),
}

impl Auth {
    pub(crate) fn jwt_key(&self) -> Option<crate::server::auth::jwt::JwtKey> {
        match self {
            Auth::Jwt(k) => k.clone(),
            Auth::Off => None,
        }
    }
}

impl ServerConfig {
    /// The broker's shards: `--broker-shards`, else one per two cores
    /// (at least one): a message costs its shard about a third of what it
    /// costs the workers (BENCHMARKS.md, issue 63's shard sweep), so half
    /// as many shards as cores keep both busy without threads waking each
    /// other for nothing.
    pub(crate) fn shards(&self) -> usize {
        match self.broker_shards {
            0 => (crate::sys::online_cpus() / 2).max(1),
            n => n,
        }
    }

    /// Every listening port, in the order the listeners are bound.
    pub(crate) fn ports(&self) -> Vec<u16> {
        crate::server::services::all_ports(&self.services)
    }

    /// One plain entry of `protocol` on `ports` (tests).
    #[cfg(test)]
    pub(crate) fn only(&mut self, protocol: Protocol, ports: Vec<u16>) {
        self.services = vec![crate::server::services::Service::plain(protocol, ports)];
    }
}

impl Default for ServerConfig {
    /// A loopback server as the benches and tests run it: framed, async
    /// business stage with no service time, elastic workers.
    fn default() -> ServerConfig {
        ServerConfig {
            config_file: None,
            listen: Ipv4Addr::LOCALHOST.into(),
            services: vec![crate::server::services::Service::plain(Protocol::Framed, (8000..=8099).collect())],
            workers: Workers::Auto,
            connections: None,
            max_connections: None,
            max_connections_per_ip: None,
            max_topics: crate::server::tables::topics::DEFAULT_MAX_TOPICS,
            max_commands_per_second: crate::server::limits::command_rate::DEFAULT_PER_SECOND,
            stall_timeout: Some(crate::server::limits::DEFAULT_STALL),
            tcp_keepalive: crate::server::limits::SocketTimer::Auto,
            tcp_user_timeout: crate::server::limits::SocketTimer::Auto,
            idle_timeout: None,
            stats_interval: Duration::from_secs(2),
            duration: None,
            business: BusinessMode::Async,
            queue: 10_000,
            service_time: ServiceTime::Fixed(Duration::ZERO),
            body_size: 12,
            max_header_bytes: 8192,
            header_timeout: Duration::from_secs(10),
            retire_after: crate::supervise::elastic::DEFAULT_GRACE,
            drain_timeout: Duration::from_secs(10),
            drain_period: Duration::from_secs(30),
            max_pending_bytes: DEFAULT_MAX_PENDING,
            max_push_bytes: crate::proto::push::DEFAULT_MAX_PUSH,
            history: Default::default(),
            mqtt_flight: Default::default(),
            mqtt_max_keep_alive: 0,
            auth_hook: None,
            authz_hook: None,
            broker_shards: 0,
            mqtt_retained: Default::default(),
            mqtt_retained_file: None,
            mqtt_retained_save_every: crate::server::broker::retained_file::DEFAULT_EVERY,
            mqtt_sessions_file: None,
            mqtt_sessions_save_every: crate::server::broker::state_file::DEFAULT_EVERY,
            mqtt_sessions: Default::default(),
            mqtt_files: Default::default(),
            sys_interval: crate::server::supervisor::sys_topics::DEFAULT_INTERVAL,
            max_message_bytes: crate::server::session::ws::DEFAULT_MAX_MESSAGE,
            push_format: crate::server::session::ws::PushFormat::Text,
            ws_deflate: Default::default(),
            admin: None,
            admin_token: None,
            io: crate::uring::Io::Auto,
            io_batch_wait: crate::uring::DEFAULT_BATCH_WAIT,
            cluster: None,
            tls: None,
            auth: Auth::Off,
            admin_topics: Vec::new(),
            jwt_expected: Default::default(),
            upstream: None,
            upstream_queue: crate::server::broker::upstream::DEFAULT_QUEUE,
            upstream_queue_bytes: crate::server::broker::upstream::DEFAULT_QUEUE_BYTES,
            upstream_secret: None,
            upstream_nats_creds: None,
            presence_events: false,
            presence_notices: false,
            json: false,
        }
    }
}
