//! Command-line definitions for every subcommand (clap derive). Parsing
//! only: single values are validated by the parsers in `values`, flags
//! become domain configs in `convert`, and cross-checks against the
//! machine's limits happen in the subcommands themselves. Nothing outside
//! this module imports it.
mod convert;
mod sections;
mod settings;
pub use settings::parse_args;

use crate::bench::Scenario;
use crate::client::plan::Shard;
use crate::client::CloseMode;
use crate::proto::Protocol;
use crate::server::business::service_time::ServiceTime;
use crate::server::business::BusinessMode;
use crate::supervise::plan::Workers;
use crate::values::{self as parse, IpList, OptDuration, PerSecond, PortList};
use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};
use std::time::Duration;

/// What each subcommand's `--protocol` accepts (its help lists only these).
use crate::server::services::SERVER_PROTOCOLS;
const CLIENT_PROTOCOLS: &[&str] = &["framed", "ws", "http", "echo8", "raw", "sse", "mqtt"];
const BENCH_PROTOCOLS: &[&str] = &["framed", "ws", "http", "mqtt"];

/// A `--protocol` parser that accepts only `names`.
fn protocols(names: &'static [&'static str]) -> impl TypedValueParser<Value = Protocol> {
    clap::builder::PossibleValuesParser::new(names)
        .map(|s| <Protocol as clap::ValueEnum>::from_str(&s, false).expect("every listed protocol name is a Protocol"))
}

/// Run the parsed command line; Ok is the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Cmd::Server(a) => crate::server::run(a.try_into()?),
        Cmd::Client(a) => {
            a.load.flags_fit()?;
            crate::bench::client_only::run((*a).into())
        }
        Cmd::Bench(a) => {
            a.stages_fit()?;
            crate::bench::run(a.into())
        }
        Cmd::Tune(a) => {
            crate::sys::end_on_broken_stdout();
            crate::tune::run(a.into())
        }
        Cmd::Report { action: ReportCmd::Compare { a, b, html, json } } => {
            crate::sys::end_on_broken_stdout();
            crate::report::compare::run(&a, &b, html, json)
        }
        Cmd::Merge { files, json, gate } => {
            crate::sys::end_on_broken_stdout();
            crate::report::hdrlog::merge(&files, json, &gate.into_thresholds(Vec::new()))
        }
        Cmd::Worker { role } => run_worker(&role).map(|_| 0),
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "megaconn",
    version,
    about = "Hold millions of concurrent TCP connections on one Linux machine, prove it, and name the limit that stops them."
)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

impl Cli {
    /// Whether this process is a worker, which reports its own failure to
    /// its supervisor (so `main` prints nothing). Lets `main` decide that
    /// without the subcommands, which stay inside the crate.
    pub fn is_worker(&self) -> bool {
        matches!(self.command, Cmd::Worker { .. })
    }
}

// Parsed once per process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// The long-connection server: holds connections and answers heartbeats.
    Server(ServerArgs),
    /// The load generator: opens N paced connections, keeps them alive, reports.
    #[command(after_help = EXIT_CODES)]
    Client(Box<ClientArgs>),
    /// Server and client on this machine: ramp to N, hold, measure, report.
    #[command(after_help = EXIT_CODES)]
    Bench(BenchArgs),
    /// The doctor: every limit on connection count, which one binds, the fix.
    Tune(TuneArgs),
    /// Work with the report directories `--report DIR` writes.
    Report {
        #[command(subcommand)]
        action: ReportCmd,
    },
    /// Add up shards: `--summary-json` files (*.json) and `--hdr-log` interval logs; counts add, percentiles come from the merged histograms.
    #[command(
        after_help = "Exit codes: 0 merged, every --threshold held; 1 a file could not be read or merged; 2 usage error (a bad flag or threshold); 99 a --threshold was crossed on the merged numbers (latencies need the shards' --hdr-log files: without them they are \"no data\")."
    )]
    Merge {
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// Print the merged result as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        gate: GateArgs,
    },
    /// Internal: one worker process (started by a supervisor; config on stdin).
    #[command(name = "__worker", hide = true)]
    Worker { role: String },
}

/// The exit codes of a load run (`client`, `bench`), under their `--help`.
const EXIT_CODES: &str = "Exit codes: 0 passed; 1 the run failed its built-in verdict (a connection not established or not held, a heartbeat unanswered, interrupted) or could not run; 2 usage error (a bad flag, an unknown threshold metric); 99 a --threshold or --threshold-abort was crossed (whatever the verdict).";

/// `--threshold` and `--junit`: rules on a run's numbers that decide its
/// exit code, and a CI-readable record of them.
#[derive(Args, Debug, Clone)]
pub(crate) struct GateArgs {
    /// Exit 99 unless this holds at the end: [PHASE:]METRIC OP VALUE, e.g. heartbeat_rtt.p99<50ms, hold:handshake.p99<=200ms, established_ratio>=99.9%, failed==0; OP one of < <= > >= == !=; units us ms s, % , k M (repeatable; a metric the run measured nothing for fails as "no data"; an unknown one is refused with the list; docs/client.md#thresholds).
    #[arg(long = "threshold", value_name = "EXPR", value_parser = crate::client::thresholds::parse)]
    pub(crate) thresholds: Vec<crate::client::thresholds::Threshold>,
    /// Write the thresholds and the built-in verdict as JUnit XML (one test case each, crossed ones as failures) to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<std::path::PathBuf>,
}

impl GateArgs {
    /// With the `--threshold-abort`s of a run (none for merge).
    pub(crate) fn into_thresholds(self, abort: Vec<crate::client::thresholds::Threshold>) -> crate::client::thresholds::Thresholds {
        crate::client::thresholds::Thresholds { check: self.thresholds, abort, junit: self.junit }
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum ReportCmd {
    /// Two runs side by side with ratios, e.g. `megaconn report compare before/report.json after/report.json`.
    Compare {
        /// The baseline run's report.json (A).
        a: std::path::PathBuf,
        /// The run compared with it (B).
        b: std::path::PathBuf,
        /// Also write a comparison page with both runs' charts to this file.
        #[arg(long)]
        html: Option<std::path::PathBuf>,
        /// Print the rows as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug, Clone)]
pub(crate) struct ServerArgs {
    /// `--config`, to read again on SIGHUP (set by cli/settings.rs).
    #[arg(skip)]
    pub(crate) config_file: Option<crate::server::config::ConfigFile>,
    /// Address to listen on, IPv4 or IPv6 (:: takes IPv4 too; IPv6 peers are counted per /64 by --max-connections-per-ip).
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) listen: std::net::IpAddr,
    /// Ports to listen on, e.g. 8000-8099 or 8000,8001 (default 8000-8099); with --protocol, the one-protocol shorthand of --serve.
    #[arg(long)]
    pub(crate) ports: Option<PortList>,
    /// Serve a protocol on its ports, repeatable: several protocols in one process, e.g. --serve mqtt=1883 --serve mqtt+tls=8883 --serve ws=8080-8089 (+tls: TLS with --tls-cert/--tls-key; instead of --protocol/--ports; docs/mqtt.md#several-protocols-in-one-process).
    #[arg(long, value_name = "PROTO[+tls]=PORTS", value_parser = |s: &str| s.parse::<crate::server::services::Service>())]
    pub(crate) serve: Vec<crate::server::services::Service>,
    /// Worker processes: auto (elastic: one accepting worker per core, more as they fill, surplus ones exit) or N (fixed).
    #[arg(long, default_value = "auto")]
    pub(crate) workers: Workers,
    /// Connections to plan capacity for (default 1M with --workers auto).
    #[arg(long, value_parser = parse::positive_count)]
    pub(crate) connections: Option<u64>,
    /// Hold at most N connections server-wide; beyond that new ones are closed at once (RST) and counted as refused_over_cap.
    #[arg(long, value_parser = parse::positive_count)]
    pub(crate) max_connections: Option<u64>,
    /// Hold at most N connections from one source address, across all workers; beyond that new ones are closed at accept (RST) and counted as refused_per_ip.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections_per_ip: Option<u32>,
    /// Most topics with subscribers in one worker; a subscription that would create another is refused (too_many_topics) and counted.
    #[arg(long, default_value = "100000", value_parser = clap::value_parser!(u32).range(1..=10_000_000).map(|v| v as usize))]
    pub(crate) max_topics: usize,
    /// Most subscribe, unsubscribe, resume and token-refresh commands one connection may send per second; past it the connection is closed (too_many_commands; WebSocket 1008) and counted.
    #[arg(long, default_value = "200", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_commands_per_second: u32,
    /// Close a connection whose partial frame, WebSocket fragment or unsent output has not moved for this long (stall_timeout); off to disable.
    #[arg(long, default_value = "30s", value_parser = |s: &str| crate::server::limits::stall_timeout(s).map(OptDuration))]
    pub(crate) stall_timeout: OptDuration,
    /// TCP keepalive on accepted connections: auto (60s idle, then 4 probes 15s apart, unless --listen is loopback), off, or the idle time (1s..24h).
    #[arg(long, default_value = "auto")]
    pub(crate) tcp_keepalive: crate::server::limits::SocketTimer,
    /// TCP_USER_TIMEOUT on accepted connections (drop a peer that stops acknowledging): auto (60s unless --listen is loopback), off, or a duration (1s..24h).
    #[arg(long, default_value = "auto")]
    pub(crate) tcp_user_timeout: crate::server::limits::SocketTimer,
    /// Close connections silent for longer than this (e.g. 90s); off by default.
    #[arg(long, default_value = "off")]
    pub(crate) idle_timeout: OptDuration,
    /// How often to print the connection count.
    #[arg(long, value_parser = parse::positive_duration, default_value = "2s")]
    pub(crate) stats_interval: Duration,
    /// On SIGTERM or Ctrl-C: stop accepting and reading, answer in-flight requests for up to this long, then close the rest (a second signal forces).
    #[arg(long, value_parser = parse::duration, default_value = "10s")]
    pub(crate) drain_timeout: Duration,
    /// On SIGTERM or Ctrl-C (a rolling restart): close framed, WebSocket and MQTT connections and event streams spread evenly over this long, each after a reconnect hint (goaway frame, WebSocket close 1012, SSE retry, MQTT 5 DISCONNECT 0x8B), so clients move to other nodes without a reconnect storm; 0 closes them all at once (a single MQTT broker restarted in place has nowhere to send its clients). Give Kubernetes' terminationGracePeriodSeconds this plus --drain-timeout.
    #[arg(long, value_parser = parse::duration, default_value = "30s")]
    pub(crate) drain_period: Duration,
    /// Elastic workers: how long a surplus worker stays empty before it exits.
    #[arg(long, value_parser = parse::positive_duration, default_value = "10s")]
    pub(crate) retire_after: Duration,
    /// Stop by itself after this long (default: run until Ctrl-C).
    #[arg(long, default_value = "off")]
    pub(crate) duration: OptDuration,
    /// Wire protocol on every port of --ports: framed (megaconn frames; the default), ws (WebSocket), http, mqtt (MQTT 3.1.1 and 5.0, docs/mqtt.md), echo8 (8-byte timestamps), echo or discard (any TCP peer). Several at once: --serve.
    #[arg(long, value_parser = protocols(SERVER_PROTOCOLS))]
    pub(crate) protocol: Option<Protocol>,
    /// WebSocket: largest message, all fragments together; larger is closed with status 1009.
    #[arg(long, default_value = "65536", value_parser = clap::value_parser!(u32).range(126..=67_108_864).map(|v| v as usize))]
    pub(crate) max_message_bytes: usize,
    /// WebSocket: pushes as text (a JSON envelope with seq, ts and data) or binary (the framed push layout).
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) push_format: crate::server::session::ws::PushFormat,
    /// WebSocket: answer permessage-deflate offers (RFC 7692) with no context takeover either way, so a push is compressed once per worker and a connection keeps no compression state; takeover: keep context where the client allows it, at a compressor and decompressor per such connection (docs/protocol.md#compression-permessage-deflate).
    #[arg(long, value_enum, default_value = "on")]
    pub(crate) ws_deflate: crate::server::session::ws_deflate::DeflateMode,
    /// WebSocket with deflate: messages shorter than this go uncompressed.
    #[arg(long, default_value = "64", value_parser = clap::value_parser!(u32).range(0..=67_108_864).map(|v| v as usize))]
    pub(crate) ws_deflate_min_bytes: usize,
    /// WebSocket with --ws-deflate takeover: the window (2^bits bytes) of a connection's own compressor, and the most the client's may use when its offer lets the server say.
    #[arg(long, default_value_t = crate::server::session::ws_deflate::DEFAULT_WINDOW_BITS, value_parser = clap::value_parser!(u8).range(9..=15))]
    pub(crate) ws_deflate_window_bits: u8,
    /// Where requests run: inline (blocks the event loop), pool:N (N threads for the whole server, divided over the workers), async.
    #[arg(long, default_value = "async")]
    pub(crate) business: BusinessMode,
    /// Queue depth in front of the pool; a full queue rejects requests.
    #[arg(long, value_parser = parse::positive_count, default_value = "10000")]
    pub(crate) queue: u64,
    /// Simulated business time: classic, 0, 5ms, or 1ms:90%,10ms:5%,100ms:4%,1000ms:1%.
    #[arg(long, default_value = "0")]
    pub(crate) service_time: ServiceTime,
    /// HTTP: response body size in bytes (12 = "Hello world!").
    #[arg(long, default_value = "12", value_parser = clap::value_parser!(u32).range(0..=1_048_576).map(|v| v as usize))]
    pub(crate) body_size: usize,
    /// HTTP: largest request head accepted; larger gets 431 and a close.
    #[arg(long, default_value = "8192", value_parser = clap::value_parser!(u32).range(256..=1_048_576).map(|v| v as usize))]
    pub(crate) max_header_bytes: usize,
    /// Push: most bytes one connection may leave unread before it is closed as a slow consumer.
    #[arg(long, default_value = "64KiB", value_parser = |s: &str| parse::byte_size(s).and_then(|v| if (4096..=64 << 20).contains(&v) { Ok(v as usize) } else { Err(format!("--max-pending-bytes {v} must be 4KiB to 64MiB")) }))]
    pub(crate) max_pending_bytes: usize,
    /// Push: largest message a publish may carry (up to 1MiB); larger is refused with 413. Framed connections get it in parts, WebSocket and event streams in one message.
    #[arg(long, default_value = "64KiB", value_parser = |s: &str| parse::byte_size(s).and_then(|v| if (1..=crate::proto::push::MAX_PUSH as u64).contains(&v) { Ok(v as usize) } else { Err(format!("--max-push-bytes {v} must be 1 to 1MiB")) }))]
    pub(crate) max_push_bytes: usize,
    /// History: messages kept per topic (and for broadcasts) so a subscriber that comes back gets what it missed; 0 keeps none (offsets and epochs still count).
    #[arg(long, default_value = "100", value_parser = clap::value_parser!(u32).range(0..=crate::server::broker::history::MAX_SIZE as i64).map(|v| v as usize))]
    pub(crate) history: usize,
    /// History: how long a message stays recoverable.
    #[arg(long, value_parser = parse::positive_duration, default_value = "5m")]
    pub(crate) history_ttl: Duration,
    /// History: most bytes the whole node keeps (payloads and records); over it, topics give up their oldest messages in turn.
    #[arg(long, default_value = "256MiB", value_parser = |s: &str| parse::byte_size(s).and_then(|v| if v >= 1 << 20 { Ok(v) } else { Err(format!("--history-max-bytes {v} is below 1MiB; give e.g. 256MiB")) }))]
    pub(crate) history_max_bytes: u64,
    /// MQTT: QoS 1 and 2 deliveries in flight to one client before it acknowledges (a v5 client's Receive Maximum may lower it).
    #[arg(long, default_value = "32", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) mqtt_inflight: u16,
    /// MQTT: QoS 1 and 2 deliveries held for one client behind a full window; past it (or --mqtt-queue-bytes) they are dropped and counted (mqtt_inflight_dropped).
    #[arg(long, default_value = "1000", value_parser = clap::value_parser!(u32).range(0..=1_000_000).map(|v| v as usize))]
    pub(crate) mqtt_queue: usize,
    /// MQTT: bytes of deliveries held for one client behind a full window.
    #[arg(long, default_value = "1MiB", value_parser = |s: &str| parse::byte_size(s).and_then(|v| if v <= 1 << 30 { Ok(v as usize) } else { Err(format!("--mqtt-queue-bytes {v} is over 1GiB")) }))]
    pub(crate) mqtt_queue_bytes: usize,
    /// MQTT: retained messages kept (one per topic); a retained publish past it is delivered but not kept (mqtt_retained_refused).
    #[arg(long, default_value = "10000", value_parser = clap::value_parser!(u32).range(0..=10_000_000).map(|v| v as usize))]
    pub(crate) mqtt_retained: usize,
    /// MQTT: retained topics one client identity may hold (the token's sub with --auth, else the peer's address; 0: a tenth of --mqtt-retained); past it its new retained topic is delivered but not kept (mqtt_retained_refused, reason identity).
    #[arg(long, default_value = "0", value_parser = clap::value_parser!(u32).range(0..=10_000_000).map(|v| v as usize))]
    pub(crate) mqtt_retained_per_identity: usize,
    /// MQTT: bytes of retained messages kept (topics, payloads, 64 bytes of record each).
    #[arg(long, default_value = "64MiB", value_parser = parse::byte_size)]
    pub(crate) mqtt_retained_bytes: u64,
    /// MQTT: keep the retained messages in this file across restarts: read at start, written (whole, then renamed into place) when they changed, at most every --mqtt-retained-save-every, and at stop.
    #[arg(long, value_name = "PATH")]
    pub(crate) mqtt_retained_file: Option<std::path::PathBuf>,
    /// MQTT: how often at most the retained messages are written to --mqtt-retained-file (a crash loses what changed since).
    #[arg(long, default_value = "10s", value_parser = parse::positive_duration)]
    pub(crate) mqtt_retained_save_every: Duration,
    /// MQTT: keep the sessions of clients gone (subscriptions and queued messages) in this file across restarts: read at start, written (whole, then renamed into place) when they changed, at most every --mqtt-sessions-save-every, and at stop, after the drain kept the sessions of the clients it closed.
    #[arg(long, value_name = "PATH")]
    pub(crate) mqtt_sessions_file: Option<std::path::PathBuf>,
    /// MQTT: how often at most the kept sessions are written to --mqtt-sessions-file (a crash loses what changed since).
    #[arg(long, default_value = "10s", value_parser = parse::positive_duration)]
    pub(crate) mqtt_sessions_save_every: Duration,
    /// MQTT: client ids connected at once (the registry across every worker); a CONNECT past it is refused (CONNACK 0x97 / 3.1.1 3, mqtt_client_ids_refused).
    #[arg(long, default_value = "4000000", value_parser = clap::value_parser!(u32).range(1..=100_000_000).map(|v| v as usize))]
    pub mqtt_client_ids: usize,
    /// MQTT: sessions kept for clients gone (3.1.1 Clean Session 0, v5 Session Expiry Interval > 0); past it a session is not kept, nobody else's pushed out (mqtt_sessions_expired, reason full).
    #[arg(long, default_value = "10000", value_parser = clap::value_parser!(u32).range(0..=10_000_000).map(|v| v as usize))]
    pub(crate) mqtt_sessions: usize,
    /// MQTT: kept sessions and delayed wills of one identity (the token's sub with --auth, else the peer's address; 0: a tenth of --mqtt-sessions); one more expires that identity's oldest session (reason identity). Raise it when a fleet shares one credential.
    #[arg(long, default_value = "0", value_parser = clap::value_parser!(u32).range(0..=10_000_000).map(|v| v as usize))]
    pub(crate) mqtt_sessions_per_identity: usize,
    /// MQTT: publish $SYS topics as mosquitto names them ($SYS/broker/uptime, clients/connected, publish/messages/received, load/publish/received/1min, ...; $SYS/brokers/NODE/... in a cluster), retained, every this long (mosquitto's sys_interval), each when it changed; not written to --mqtt-retained-file (0: never).
    #[arg(long, value_parser = parse::duration, default_value = "10s")]
    pub(crate) sys_interval: Duration,
    /// MQTT: mosquitto's password_file as mosquitto_passwd writes it ($7$ PBKDF2-SHA512, or $6$): a CONNECT's user name and password must match a line, one without a user name needs --mqtt-allow-anonymous; refused: CONNACK not authorized (auth_refused). Read again on SIGHUP (docs/mosquitto.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) mqtt_password_file: Option<std::path::PathBuf>,
    /// MQTT: mosquitto's acl_file (user blocks, topic [read|write|readwrite|deny] FILTER, pattern lines with %u and %c): what each MQTT client may publish and receive, decided as mosquitto 2.0 does (subscriptions granted, each message checked). Read again on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub(crate) mqtt_acl_file: Option<std::path::PathBuf>,
    /// MQTT, with --mqtt-password-file: let CONNECTs without a user name in (mosquitto's allow_anonymous; off by default, as in mosquitto 2.0).
    #[arg(long, requires = "mqtt_password_file")]
    pub(crate) mqtt_allow_anonymous: bool,
    /// MQTT: ask this HTTP backend whether each CONNECT may log in, as EMQX's HTTP authentication asks (POST JSON username, password, clientid, peerhost, protocol; 200 {"result": "allow"|"deny"|"ignore"} or 204 allows; anything else refuses: CONNACK not authorized, mqtt_auth_http_refused). docs/mqtt.md#an-http-auth-backend
    #[arg(long, value_name = "URL", conflicts_with_all = ["mqtt_password_file", "auth"], value_parser = |s: &str| crate::server::broker::upstream::parse_url(s).map_err(|e| e.replace("--upstream", "--mqtt-auth-http")))]
    pub(crate) mqtt_auth_http: Option<crate::server::broker::upstream::Target>,
    /// MQTT, with --mqtt-auth-http or --mqtt-authz-http: how long a CONNECT (a publish, a subscription) waits for the backend's answer (connecting included); past it the CONNECT is refused (timeout), or let in with --mqtt-auth-http-fail-open.
    #[arg(long, value_parser = parse::positive_duration, default_value = "5s")]
    pub(crate) mqtt_auth_http_timeout: Duration,
    /// MQTT, with --mqtt-auth-http or --mqtt-authz-http: how long the backend's answer (allow, deny, ignore) about a user name, password, client id and address (a topic and action) is reused (0: ask every time).
    #[arg(long, value_parser = parse::duration, default_value = "60s")]
    pub(crate) mqtt_auth_http_cache: Duration,
    /// MQTT, with --mqtt-auth-http or --mqtt-authz-http: requests each backend has at once (connections kept open to it); 256 times as many questions may wait, more are refused (busy).
    #[arg(long, default_value = "64", value_parser = clap::value_parser!(u16).range(1..=4096).map(|v| v as usize))]
    pub(crate) mqtt_auth_http_concurrency: usize,
    /// MQTT, with --mqtt-auth-http or --mqtt-authz-http: let a CONNECT in (a publish or subscription go on) when the backend cannot say (timeout, unreachable, an error status, an answer not its JSON, busy); its deny and ignore still refuse. Off: fail closed.
    #[arg(long)]
    pub(crate) mqtt_auth_http_fail_open: bool,
    /// MQTT: ask this HTTP backend whether each PUBLISH, each SUBSCRIBE's filter and each will may be done, as EMQX's HTTP authorization asks (POST JSON username, clientid, peerhost, protocol, topic, action publish|subscribe, qos, retain; 200 {"result": "allow"|"deny"|"ignore"} or 204 allows; anything else denies: the publish dropped, v5 told 0x87; the filter refused in SUBACK). The packet waits unread for the answer; answers are kept --mqtt-auth-http-cache in each worker, and the --mqtt-auth-http-* bounds apply. docs/mqtt.md#an-http-authorization-backend
    #[arg(long, value_name = "URL", conflicts_with = "mqtt_acl_file", value_parser = |s: &str| crate::server::broker::upstream::parse_url(s).map_err(|e| e.replace("--upstream", "--mqtt-authz-http")))]
    pub(crate) mqtt_authz_http: Option<crate::server::broker::upstream::Target>,
    /// Broker shards: threads in the supervisor's process that route every message between the workers, each owning the topics that hash to it (their history, retained messages, subscribers); 0: one per two cores, at least one.
    #[arg(long, default_value = "0", value_parser = clap::value_parser!(u16).range(0..=256).map(|v| v as usize))]
    pub(crate) broker_shards: usize,
    /// MQTT: the longest keep-alive a client may ask for, seconds (0: any). A v5 client asking more, or 0, is told this one (CONNACK Server Keep Alive) and held to it; a 3.1.1 one is refused (CONNACK 2), as mosquitto's max_keepalive does.
    #[arg(long, default_value = "0", value_parser = clap::value_parser!(u16))]
    pub(crate) mqtt_max_keep_alive: u16,
    /// MQTT: bytes of every kept session (filters, queued messages, 64 bytes of record each).
    #[arg(long, default_value = "256MiB", value_parser = |s: &str| parse::byte_size(s).map(|v| v as usize))]
    pub(crate) mqtt_sessions_bytes: usize,
    /// MQTT: QoS 1 and 2 messages queued per kept session while its client is gone; past it the newest is dropped (mqtt_session_queue_dropped).
    #[arg(long, default_value = "1000", value_parser = clap::value_parser!(u32).range(0..=1_000_000).map(|v| v as usize))]
    pub(crate) mqtt_session_queue: usize,
    /// MQTT: bytes of the messages queued per kept session.
    #[arg(long, default_value = "1MiB", value_parser = |s: &str| parse::byte_size(s).and_then(|v| if v <= 1 << 30 { Ok(v as usize) } else { Err(format!("--mqtt-session-queue-bytes {v} is over 1GiB")) }))]
    pub(crate) mqtt_session_queue_bytes: usize,
    /// Admin HTTP API (/metrics, /stats, /healthz, /connections, POST /publish /broadcast /push): ADDR:PORT or off.
    #[arg(long, default_value = crate::server::config::DEFAULT_ADMIN)]
    pub(crate) admin: parse::OptAddr,
    /// Bearer token the admin API requires; mandatory when --admin is not
    /// on loopback. Prefer --admin-token-file or the environment: a
    /// command line is visible to every user in `ps`.
    #[arg(long, env = "MEGACONN_ADMIN_TOKEN", hide_env_values = true, value_name = "TOKEN", value_parser = |s: &str| crate::admin::Token::new(s))]
    pub(crate) admin_token: Option<crate::admin::Token>,
    /// Read the admin API's bearer token from FILE (its first line), e.g. a mounted Kubernetes Secret.
    #[arg(long, value_name = "FILE", conflicts_with = "admin_token", value_parser = |s: &str| crate::admin::Token::from_file(std::path::Path::new(s)))]
    pub(crate) admin_token_file: Option<crate::admin::Token>,
    /// Join a cluster through this NATS server (nats://HOST:PORT, or a
    /// comma-separated list of a NATS cluster's servers): publishes on any
    /// node reach subscribers on every node, unicasts reach their
    /// connection's node.
    /// (Checked by the server's plan, not here: clap's own error would
    /// echo the value, credentials and all.)
    #[arg(long, value_name = "URL")]
    pub(crate) cluster: Option<String>,
    /// This node's id in the cluster (letters, digits, _ and -); it prefixes
    /// connection ids (NODE.ID). Default: the host name (a pod's name).
    #[arg(long, requires = "cluster", value_parser = |s: &str| crate::cluster::check_node_id(s).map(|_| s.to_string()))]
    pub(crate) node_id: Option<String>,
    /// Where the history that gives every node the same offsets lives:
    /// `jetstream` (NATS JetStream, stream MEGACONN; nats-server needs -js)
    /// or `off` (each node's own: a client resumes only on the node it left).
    #[arg(long, value_enum, requires = "cluster", default_value = "jetstream")]
    pub(crate) cluster_history: crate::cluster::log::HistoryMode,
    /// Where JetStream keeps that history: `file` (survives a NATS restart) or `memory`.
    #[arg(long, value_enum, requires = "cluster", default_value = "file")]
    pub(crate) cluster_storage: crate::cluster::log::Storage,
    #[command(flatten)]
    pub(crate) cluster_auth: Box<ClusterAuthArgs>,
    /// HTTP: close a connection stuck in one incomplete request this long (slowloris).
    #[arg(long, value_parser = parse::positive_duration, default_value = "10s")]
    pub(crate) header_timeout: Duration,
    #[command(flatten)]
    pub(crate) tls: Box<ServerTlsArgs>,
    /// The workers' reactor: io_uring (multishot receives into one shared buffer ring, one submit-and-wait per loop turn) or epoll; auto takes io_uring where the kernel and any seccomp profile allow it and says which it chose.
    #[arg(long, value_enum, default_value = "auto", env = "MEGACONN_IO")]
    pub(crate) io: crate::uring::Io,
    /// io_uring: while a worker is busy with many quiet connections (4,000 receives a second or more, over 64 or more connections, under 200 a second each: devices, subscribers), it waits up to this long for 64 completions to handle in one turn instead of waking for each, trading at most this much latency for fewer wake-ups; stretched as the rate falls (about 8 receives a turn, up to 8 times this) unless deliveries wait behind a client's QoS 1/2 window or one connection reads most; busy request/response connections and light loads never wait (0: never; needs Linux 6.13).
    #[arg(long, value_parser = parse::duration, default_value = "250us")]
    pub(crate) io_batch_wait: Duration,
    #[command(flatten)]
    pub(crate) auth: Box<ServerAuthArgs>,
    /// Print stats and the summary as JSON lines on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Who may connect and subscribe (`docs/auth.md`).
#[derive(Args, Debug, Clone)]
pub(crate) struct ServerAuthArgs {
    /// Who may connect: off (anyone, to any topic) or jwt (every connection shows a JSON Web Token: Authorization: Bearer, the subprotocol bearer.TOKEN, ?token=, or the framed auth frame; its topics claim says what it may subscribe to; it is closed at its exp unless refreshed).
    #[arg(long, value_enum, default_value = "off")]
    pub(crate) auth: AuthMode,
    /// --auth jwt: the HMAC secret tokens are signed with (HS256/384/512; at least 32 bytes).
    #[arg(long, value_name = "FILE", group = "jwt_key", requires = "auth", value_parser = crate::server::auth::jwt::JwtKey::read_secret)]
    pub(crate) jwt_secret_file: Option<crate::server::auth::jwt::JwtKey>,
    /// --auth jwt: the public key tokens are verified with (PEM: RSA for RS*/PS*, EC for ES256/ES384, Ed25519 for EdDSA).
    #[arg(long, value_name = "FILE", group = "jwt_key", requires = "auth", value_parser = crate::server::auth::jwt::JwtKey::read_public)]
    pub(crate) jwt_public_key_file: Option<crate::server::auth::jwt::JwtKey>,
    /// --auth jwt: a JSON Web Key Set (a token's kid picks the key).
    #[arg(long, value_name = "FILE", group = "jwt_key", requires = "auth", value_parser = crate::server::auth::jwt::JwtKey::read_jwks)]
    pub(crate) jwt_jwks_file: Option<crate::server::auth::jwt::JwtKey>,
    /// --auth jwt: every token must carry this aud (the identity provider's name for this service); others are refused auth_wrong_audience.
    #[arg(long, value_name = "AUD", requires = "auth")]
    pub(crate) jwt_audience: Option<String>,
    /// --auth jwt: every token must carry this iss (who issues them); others are refused auth_wrong_issuer.
    #[arg(long, value_name = "ISS", requires = "auth")]
    pub(crate) jwt_issuer: Option<String>,
    /// Topic patterns only tokens with "admin": true may subscribe to (NAME, PREFIX*, comma-separated); without --auth, nobody may.
    #[arg(long, value_name = "PATTERNS", value_delimiter = ',')]
    pub(crate) admin_topics: Vec<String>,
    /// Send what clients say (MQTT publishes, WebSocket messages, {"type":"publish"} commands, framed publish frames) and presence joins/leaves to the application, instead of echoing them: a webhook http://HOST:PORT/PATH (batched, retried), or NATS JetStream nats://HOST:PORT/SUBJECT.PREFIX (tls:// for TLS; a stream message each under PREFIX.TOPIC, stored at least once) (docs/upstream.md).
    #[arg(long, value_name = "URL", value_parser = crate::server::broker::upstream::parse_destination)]
    pub(crate) upstream: Option<crate::server::broker::upstream::Destination>,
    /// --upstream: messages each worker may have that the backend has not taken yet; a client whose message would be one more is closed with 1013 (try again later).
    #[arg(long, default_value = "262144", value_parser = clap::value_parser!(u32).range(1..=16_777_216).map(|v| v as usize))]
    pub(crate) upstream_queue: usize,
    /// --upstream: bytes of messages the whole server may hold that the backend has not taken; each worker gets an equal share for the most workers the server may run (at least 1MiB), one connection at most a quarter of its worker's, presence events an eighth of their own; a client whose message would exceed its share is closed with 1013.
    #[arg(long, default_value = "256MiB", value_parser = |s: &str| parse::byte_size(s).and_then(|v| if (1 << 20..=1 << 40).contains(&v) { Ok(v) } else { Err(format!("--upstream-queue-bytes {v} must be 1MiB to 1TiB")) }))]
    pub(crate) upstream_queue_bytes: u64,
    /// --upstream: sign every POST with the secret in FILE (at least 32 bytes): X-Megaconn-Timestamp (Unix ms) and X-Megaconn-Signature: sha256=HEX of HMAC-SHA256 over "TIMESTAMP.BODY" (docs/upstream.md shows how a backend checks it). Without it POSTs are unsigned and a warning says so.
    #[arg(long, value_name = "FILE", requires = "upstream", value_parser = crate::server::broker::upstream::UpstreamSecret::read)]
    pub(crate) upstream_secret_file: Option<crate::server::broker::upstream::UpstreamSecret>,
    /// --upstream nats://: the NATS creds file (user JWT and nkey seed, as `nsc` writes it) the server authenticates with (or credentials in the URL: nats://USER:PASS@HOST:PORT).
    #[arg(long, value_name = "FILE", requires = "upstream", value_parser = |p: &str| crate::cluster::auth::read_creds("--upstream-nats-creds", p).map(crate::cluster::auth::Secret))]
    pub(crate) upstream_nats_creds: Option<crate::cluster::auth::Secret>,
    /// --upstream: also send a join or leave event each time a connection with a user (--auth jwt) subscribes to or leaves a topic (presence for the application).
    #[arg(long, requires = "upstream")]
    pub(crate) presence_events: bool,
    /// Tell a topic's WebSocket subscribers, on every worker and node, each time a connection with a user (--auth jwt) joins or leaves it: {"type":"join"|"leave","topic":..,"user":..}.
    #[arg(long)]
    pub(crate) presence_notices: bool,
}

/// `--auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AuthMode {
    Off,
    Jwt,
}

/// How a cluster node signs its messages and authenticates to NATS.
/// Secrets are read from files, never taken from the command line.
#[derive(Args, Debug, Clone)]
pub(crate) struct ClusterAuthArgs {
    /// The cluster key (required with --cluster): every message between
    /// nodes is signed with it and unsigned or forged ones are dropped.
    /// Every node needs the same file: `head -c 32 /dev/urandom > cluster.key`.
    #[arg(long, value_name = "FILE", requires = "cluster", value_parser = |p: &str| crate::cluster::ClusterKey::read(p))]
    pub(crate) cluster_key_file: Option<crate::cluster::ClusterKey>,
    /// NATS user name (with --cluster-password-file).
    #[arg(long, value_name = "NAME", requires = "cluster_password_file")]
    pub(crate) cluster_user: Option<String>,
    /// File holding the NATS password of --cluster-user.
    #[arg(long, value_name = "FILE", requires = "cluster_user", value_parser = crate::cluster::auth::secret_file("--cluster-password-file"))]
    pub(crate) cluster_password_file: Option<crate::cluster::auth::Secret>,
    /// File holding a NATS authentication token.
    #[arg(long, value_name = "FILE", requires = "cluster", value_parser = crate::cluster::auth::secret_file("--cluster-token-file"))]
    pub(crate) cluster_token_file: Option<crate::cluster::auth::Secret>,
    /// File holding a NATS user nkey seed (SU...).
    #[arg(long, value_name = "FILE", requires = "cluster", value_parser = |p: &str| crate::cluster::auth::read_nkey("--cluster-nkey-file", p).map(crate::cluster::auth::Secret))]
    pub(crate) cluster_nkey_file: Option<crate::cluster::auth::Secret>,
    /// NATS creds file (user JWT and nkey seed, as `nsc` writes it).
    #[arg(long, value_name = "FILE", requires = "cluster", value_parser = |p: &str| crate::cluster::auth::read_creds("--cluster-creds", p).map(crate::cluster::auth::Secret))]
    pub(crate) cluster_creds: Option<crate::cluster::auth::Secret>,
    /// CA certificate (PEM) that signs the NATS server's certificate; the link then requires TLS.
    #[arg(long, value_name = "FILE", requires = "cluster", value_parser = |p: &str| crate::cluster::auth::readable("--cluster-tls-ca", p))]
    pub(crate) cluster_tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) the link presents to NATS (with --cluster-tls-key).
    #[arg(long, value_name = "FILE", requires_all = ["cluster", "cluster_tls_key"], value_parser = |p: &str| crate::cluster::auth::readable("--cluster-tls-cert", p))]
    pub(crate) cluster_tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cluster_tls_cert", value_parser = |p: &str| crate::cluster::auth::readable("--cluster-tls-key", p))]
    pub(crate) cluster_tls_key: Option<std::path::PathBuf>,
}

impl ClusterAuthArgs {
    /// The credentials, for a node that joins through `url`.
    pub(crate) fn into_cluster(self, url: String, node: String) -> crate::cluster::ClusterConfig {
        let auth = crate::cluster::NatsAuth {
            user: self.cluster_user,
            password: self.cluster_password_file.map(|s| s.0),
            token: self.cluster_token_file.map(|s| s.0),
            nkey_seed: self.cluster_nkey_file.map(|s| s.0),
            creds: self.cluster_creds.map(|s| s.0),
            tls_ca: self.cluster_tls_ca,
            tls_cert: self.cluster_tls_cert.zip(self.cluster_tls_key),
        };
        crate::cluster::ClusterConfig { url, node, key: self.cluster_key_file, auth, max_push: crate::proto::push::DEFAULT_MAX_PUSH, log: None }
    }
}

#[derive(Args, Debug, Clone)]
pub(crate) struct LoadArgs {
    /// Destination ports (round-robin), e.g. 8000-8099.
    #[arg(long, default_value = "8000-8099")]
    pub(crate) ports: PortList,
    /// Each connection shows its own JWT to a `server --auth jwt`, minted with this HMAC secret (HS256, sub c<index>, every topic): framed as an auth frame first, WebSocket as an Authorization header.
    #[arg(long, value_name = "FILE", value_parser = crate::server::auth::jwt::JwtKey::read_secret)]
    pub(crate) jwt_secret_file: Option<crate::server::auth::jwt::JwtKey>,
    /// Connections to open.
    #[arg(long, value_parser = parse::positive_count, required_unless_present = "stages")]
    pub(crate) connections: Option<u64>,
    /// New connections per second, spread evenly over time (e.g. 50000/s; a bare number is per second; default 50000/s). Per process: every shard or pod runs its own.
    #[arg(long, value_parser = parse::per_second_count)]
    pub(crate) rate: Option<u64>,
    /// Connections over time, k6-style: DURATION:TARGET[@RATE/s] stages separated by commas, e.g. 30s:10000,2m:10000,30s:50000,1m:0; each moves the open connections linearly to TARGET over DURATION (down too: the newest close), @RATE sets the stage's requests per connection (as --request-rate, which stages without one keep). Instead of --connections, --rate and --hold; phases stage1..stageN (docs/client.md#stages).
    #[arg(long, value_name = "STAGES", value_parser = crate::client::stages::parse)]
    pub(crate) stages: Option<crate::client::stages::Stages>,
    /// Source addresses (range, CIDR or list; IPv4 or IPv6, the target's family, e.g. fd00::1-fd00::40); default: enough 127.0.0.x for an IPv4 loopback target, else the kernel's choice.
    #[arg(long)]
    pub(crate) source_ips: Option<IpList>,
    /// Heartbeat interval per connection ("off" to disable).
    #[arg(long, default_value = "30s")]
    pub(crate) heartbeat: OptDuration,
    /// Heartbeat and request payload in bytes (cap 4096; requests carry at least 8).
    #[arg(long, value_parser = parse::payload, default_value = "64")]
    pub(crate) payload: usize,
    /// Requests per connection, open loop (e.g. 1/s); off by default.
    #[arg(long, default_value = "off")]
    pub(crate) request_rate: PerSecond,
    /// With --request-rate: each connection sends this many requests, then no more (N publishers x M messages, as other MQTT load generators count a load); the requests then start once the ramp is done, so no connection misses its first ones while others still connect.
    #[arg(long, value_name = "N", value_parser = parse::positive_count, conflicts_with = "stages")]
    pub(crate) requests_per_connection: Option<u64>,
    /// A reply later than this (or never) counts as a timeout.
    #[arg(long, value_parser = parse::positive_duration, default_value = "10s")]
    pub request_timeout: Duration,
    /// Wire protocol: framed (megaconn frames), ws (WebSocket), http (keep-alive GET /), echo8 (8-byte ms timestamps; no heartbeats), raw (--message bytes to any TCP server), sse (--url of an event stream) or mqtt (MQTT 3.1.1 or 5.0 to any broker: --mqtt-* options, over WebSocket with a ws:// --url; docs/mqtt.md).
    #[arg(long, value_parser = protocols(CLIENT_PROTOCOLS), default_value = "framed")]
    pub(crate) protocol: Protocol,
    /// How long to hold all connections after the ramp (default 20s).
    #[arg(long, value_parser = parse::duration)]
    pub(crate) hold: Option<Duration>,
    /// Give up on a handshake after this long.
    #[arg(long, value_parser = parse::positive_duration, default_value = "10s")]
    pub(crate) connect_timeout: Duration,
    /// Re-open connections the server or network ends, paced at --rate with jittered back-off.
    #[arg(long)]
    pub(crate) reconnect: bool,
    /// With --reconnect: addresses (same ports) a connection moves to, in turn, when a draining server closes it with a reconnect hint or a reconnect attempt fails (a rolling restart's other nodes; a --url host with several addresses moves among them already).
    #[arg(long, value_delimiter = ',')]
    pub(crate) reconnect_to: Vec<std::net::IpAddr>,
    /// Once the ramp is done, close and reopen R connections per second while holding the rest (e.g. 20000/s; spread evenly, open loop).
    #[arg(long, default_value = "off")]
    pub(crate) churn: PerSecond,
    /// Exit 0 even if connections were lost before the end of the hold.
    #[arg(long)]
    pub(crate) allow_loss: bool,
    /// The workers' reactor for what connections receive: io_uring (one multishot receive per connection into a buffer ring the worker shares, no read() per message) or epoll; auto takes io_uring where the kernel and any seccomp profile allow it and says which it chose. Connects and sends use epoll and write() with either.
    #[arg(long, value_enum, default_value = "auto", env = "MEGACONN_CLIENT_IO")]
    pub(crate) io: crate::uring::Io,
    /// --protocol raw or ws: the message sent on the heartbeat schedule, or the request schedule with --request-rate (escapes \r \n \t \0 \\ \xHH; @file; raw: \{ts} becomes a timestamp the echo carries back; ws: {conn} {shard} {seq} {ts} are substituted per connection).
    #[arg(long, value_parser = crate::client::raw::parse_message)]
    pub(crate) message: Option<crate::client::raw::RawMessage>,
    /// --protocol raw: bytes sent once when a connection opens (e.g. a login line).
    #[arg(long, value_parser = crate::client::raw::parse_message)]
    pub(crate) first_message: Option<crate::client::raw::RawMessage>,
    /// --protocol raw: frame each message with a length prefix: len:2 or len:4 (big-endian, message length), optionally ,magic=HEX before it.
    #[arg(long, value_parser = crate::client::codec::parse)]
    pub(crate) codec: Option<crate::client::codec::Codec>,
    /// Subscribe to topics: a list every connection takes (news,sport), or a pattern spread over connections (room-{0..999}).
    #[arg(long, value_parser = crate::client::pushes::parse_subscribe)]
    pub(crate) subscribe: Option<(Vec<String>, bool)>,
    #[command(flatten)]
    pub(crate) mqtt: MqttArgs,
    /// How connections are closed at the end.
    #[arg(long, value_enum, default_value = "reset")]
    pub(crate) close: CloseMode,
    /// Progress interval.
    #[arg(long, value_parser = parse::positive_duration, default_value = "2s")]
    pub(crate) stats_interval: Duration,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--stages` beside a flag it contradicts: a usage error naming the
/// clash and the fix (None: no clash).
fn stages_clash(connections: bool, rate: bool, hold: bool) -> Result<(), crate::UsageError> {
    let fix = if connections {
        "--connections: the stages set the connections over time and the plan holds the highest target; drop --connections"
    } else if rate {
        "--rate: each stage paces its own change (its target difference over its duration); drop --rate, or lengthen a stage to open slower"
    } else if hold {
        "--hold: the run ends with its last stage; drop --hold and add a stage that keeps the target, e.g. ...,1m:10000"
    } else {
        return Ok(());
    };
    Err(crate::UsageError(format!("--stages cannot be used with {fix}")))
}

impl LoadArgs {
    /// `--stages` and the flags it replaces (see [`stages_clash`]), and
    /// `--requests-per-connection` without the rate it counts.
    fn flags_fit(&self) -> Result<(), crate::UsageError> {
        if self.requests_per_connection.is_some() && self.request_rate.0.is_none() {
            return Err(crate::UsageError("--requests-per-connection counts requests sent at --request-rate: add one, e.g. --request-rate 10/s".into()));
        }
        if self.mqtt.mqtt_topic_alias_maximum.is_some() && self.mqtt.mqtt_version != "5" {
            return Err(crate::UsageError("--mqtt-topic-alias-maximum is MQTT 5's: add --mqtt-version 5 (3.1.1 has no topic aliases)".into()));
        }
        match self.stages {
            Some(_) => stages_clash(self.connections.is_some(), self.rate.is_some(), self.hold.is_some()),
            None => Ok(()),
        }
    }
}

impl BenchArgs {
    /// `--stages`: the connections scenario only, and not with the flags
    /// it replaces (see [`stages_clash`]).
    fn stages_fit(&self) -> Result<(), crate::UsageError> {
        if self.stages.is_none() {
            return Ok(());
        }
        if self.scenario != Scenario::Connections {
            return Err(crate::UsageError(
                format!("--stages runs with --scenario connections (the default), not {:?}: drop --stages or --scenario", self.scenario).to_lowercase(),
            ));
        }
        stages_clash(self.connections.is_some(), self.rate.is_some(), self.hold.is_some())
    }
}

#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// Server address (IPv4 or IPv6).
    #[arg(long, default_value = "127.0.0.1")]
    pub target: std::net::IpAddr,
    /// Server to load: ws://, wss://, http:// or https://HOST[:PORT][/PATH] (implies --protocol ws or http, and TLS for wss/https; with --protocol mqtt a ws:// or wss:// URL carries MQTT over WebSocket; port default 80/443; a host name spreads the connections over its addresses of one family: that of --source-ips, else the resolver's first; IPv6 as [::1]).
    #[arg(long, value_parser = crate::client::url::url_arg)]
    pub(crate) url: Option<crate::client::url::Url>,
    /// Add a header to WebSocket upgrades and HTTP requests: 'Name: value' (repeatable; a Host header replaces the default).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse::header)]
    pub(crate) headers: Vec<(String, String)>,
    /// Origin header of WebSocket upgrades (what a browser sends).
    #[arg(long)]
    pub(crate) origin: Option<String>,
    /// --protocol ws --message: send it in binary frames (default: text).
    #[arg(long)]
    pub(crate) ws_binary: bool,
    /// --protocol ws: offer permessage-deflate (server_no_context_takeover, client_no_context_takeover); a server that declines fails the connection (ws_deflate_declined). What comes compressed is inflated, messages and requests go compressed.
    #[arg(long)]
    pub(crate) ws_deflate: bool,
    /// Offer these WebSocket subprotocols (comma-separated or repeated); the server must choose one of them.
    #[arg(long, value_delimiter = ',', value_parser = parse::token)]
    pub(crate) ws_subprotocol: Vec<String>,
    #[command(flatten)]
    pub(crate) tls: ClientTlsArgs,
    #[command(flatten)]
    pub(crate) load: LoadArgs,
    /// Worker processes: auto or N.
    #[arg(long, default_value = "auto")]
    pub(crate) workers: Workers,
    /// Run only shard i of n of the connection plan (for multi-host runs; default: JOB_COMPLETION_INDEX of JOB_COMPLETIONS from a Kubernetes Indexed Job, when set).
    #[arg(long)]
    pub(crate) shard: Option<Shard>,
    /// Start the ramp at this wall-clock time (RFC 3339 or @UNIX-SECONDS), so shards on different hosts ramp together.
    #[arg(long, value_parser = parse::wall_time)]
    pub(crate) start_at: Option<std::time::SystemTime>,
    /// Also write the full summary (plan, workers, summary, failure) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) summary_json: Option<std::path::PathBuf>,
    /// Write latency as an HdrHistogram interval log (500 ms intervals, tagged handshake/heartbeat/request/push) to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) hdr_log: Option<std::path::PathBuf>,
    /// Serve this run's /metrics (Prometheus), /stats and /healthz on ADDR:PORT (loopback), or off.
    #[arg(long, default_value = "off")]
    pub(crate) admin: parse::OptAddr,
    /// Write report.json, index.html and charts (SVG, PNG) of this run to DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) report: Option<std::path::PathBuf>,
    /// Print the plan (connections, workers, source addresses, rate, fds) and exit: opens nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// End the hold once N pushes (MQTT: messages) have been received in all, every connection's summed, resumed ones included; --hold is then its deadline (e.g. 200 subscribers x 100 publishes: --until-pushes 20000 --hold 60s).
    #[arg(long, value_name = "N", value_parser = parse::positive_count, conflicts_with = "stages")]
    pub(crate) until_pushes: Option<u64>,
    /// As --threshold, and also checked on the live numbers every second from 3 s after the ramp began: when crossed the run stops early (summary, JSON, JUnit and report still written) and exits 99.
    #[arg(long = "threshold-abort", value_name = "EXPR", value_parser = crate::client::thresholds::parse)]
    pub(crate) threshold_abort: Vec<crate::client::thresholds::Threshold>,
    #[command(flatten)]
    pub(crate) gate: GateArgs,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct BenchArgs {
    /// Where both ends run: auto (netns when root), host (this machine's loopback and kernel tables), netns (one private namespace with a TCP hash table sized to the run), veth (a server and a client namespace joined by a veth pair).
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) topology: crate::topology::Topology,
    /// Serve the load generator's /metrics, /stats, /healthz and live dashboard (/ui) on ADDR:PORT (loopback), or off: bound before the run enters its namespace, so it is reached from this machine's loopback whatever --topology.
    #[arg(long, default_value = "off")]
    pub(crate) admin: parse::OptAddr,
    /// Write report.json (every number, phases, time series, machine), index.html and charts (SVG, PNG) to DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) report: Option<std::path::PathBuf>,
    /// During the hold, close and reopen R connections per second (e.g. 20000/s): a churn soak; the report compares the server's fds, RSS and kernel Slab after the run with before it.
    #[arg(long, default_value = "off")]
    pub churn: PerSecond,
    /// What both ends speak: framed (megaconn frames), ws (WebSocket: pings, binary requests, pushes as messages), http (keep-alive GETs, one per connection every --heartbeat; the connections scenario only) or mqtt (MQTT 3.1.1: CONNECT, a SUBSCRIBE to dev/{conn} (push scenario: to the shared topic, or room-N with --topics), PINGREQ heartbeats; the connections and push scenarios).
    #[arg(long, value_parser = protocols(BENCH_PROTOCOLS), default_value = "framed")]
    pub protocol: Protocol,
    /// --protocol mqtt: QoS the clients subscribe with and (push scenario) the bench publishes with: 0, 1 (every delivery PUBACKed) or 2 (PUBREC, PUBREL, PUBCOMP).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2), default_value = "0")]
    pub mqtt_qos: u8,
    /// Both ends speak TLS, with a throwaway CA and certificate made for the run (removed after).
    #[arg(long)]
    pub(crate) tls: bool,
    /// jwt: the server runs --auth jwt and every connection shows its own HS256 token (the ramp then includes one verification per connection).
    #[arg(long, value_enum, default_value = "off")]
    pub(crate) auth: AuthMode,
    /// The server's reactor (as `megaconn server --io`): auto, uring or epoll.
    #[arg(long, value_enum, default_value = "auto", env = "MEGACONN_IO")]
    pub(crate) io: crate::uring::Io,
    /// The client's reactor (as `megaconn client --io`): auto, uring or epoll.
    #[arg(long, value_enum, default_value = "auto", env = "MEGACONN_CLIENT_IO")]
    pub(crate) client_io: crate::uring::Io,
    /// What to run: connections (ramp, hold, memory), business (the
    /// thread-pool experiment: 1000 conns x 1 req/s against inline,
    /// pool:1000, pool:20 and async, classic service time), push
    /// (broadcast timing) or rollout (node n0 of a cluster drains and
    /// restarts while its clients move and resume: lost, duplicated,
    /// re-homing time, reconnect peak).
    #[arg(long, value_enum, default_value = "connections")]
    pub(crate) scenario: Scenario,
    /// Connections to reach and hold (default 200000; --scenario business: 1000, each sending 1 request/s).
    #[arg(long, value_parser = parse::positive_count)]
    pub(crate) connections: Option<u64>,
    /// Server ports.
    #[arg(long, default_value = "8000-8099")]
    pub(crate) ports: PortList,
    /// New connections per second (e.g. 50000/s; a bare number is per second; default 50000/s).
    #[arg(long, value_parser = parse::per_second_count)]
    pub(crate) rate: Option<u64>,
    /// --scenario connections: Connections over time, k6-style: DURATION:TARGET[@RATE/s] stages separated by commas, e.g. 30s:10000,2m:10000,30s:50000,1m:0; each moves the open connections linearly to TARGET over DURATION (down too: the newest close), @RATE sets the stage's requests per connection (as --request-rate, which stages without one keep). Instead of --connections, --rate and --hold; phases stage1..stageN (docs/client.md#stages).
    #[arg(long, value_name = "STAGES", value_parser = crate::client::stages::parse)]
    pub(crate) stages: Option<crate::client::stages::Stages>,
    /// Hold time after the ramp (default 20s, as the client's; 30s per mode for --scenario business; the publishing time for --scenario push).
    #[arg(long, value_parser = parse::duration)]
    pub(crate) hold: Option<Duration>,
    /// Heartbeat interval per connection ("off" to disable).
    #[arg(long, default_value = "30s")]
    pub(crate) heartbeat: OptDuration,
    /// Heartbeat payload in bytes (cap 4096).
    #[arg(long, value_parser = parse::payload, default_value = "64")]
    pub(crate) payload: usize,
    /// Push scenario: bytes of data in each published message (cap: what a framed push carries).
    #[arg(long, value_parser = parse::push_bytes, default_value = "64")]
    pub(crate) push_bytes: usize,
    /// --protocol ws: the clients offer permessage-deflate (the server answers it by default), so pushes go compressed once per worker; compare with a run without it.
    #[arg(long)]
    pub(crate) ws_deflate: bool,
    /// The server's --history: messages kept per topic for resuming subscribers (0: none), e.g. to compare the push bench with and without it.
    #[arg(long, default_value = "100", value_parser = clap::value_parser!(u32).range(0..=crate::server::broker::history::MAX_SIZE as i64).map(|v| v as usize))]
    pub(crate) history: usize,
    /// Source addresses; default: enough 127.0.0.x for the target.
    #[arg(long)]
    pub(crate) source_ips: Option<IpList>,
    /// Worker processes on both sides: auto or N (as `server --workers` and `client --workers`); --server-workers and --client-workers set one side.
    #[arg(long, conflicts_with_all = ["server_workers", "client_workers"])]
    pub(crate) workers: Option<Workers>,
    /// Server worker processes: auto or N.
    #[arg(long, default_value = "auto")]
    pub(crate) server_workers: Workers,
    /// Client worker processes: auto or N.
    #[arg(long, default_value = "auto")]
    pub(crate) client_workers: Workers,
    /// Give up on a handshake after this long (the bench's server waits as long for a TLS handshake, 10 s at least).
    #[arg(long, value_parser = parse::positive_duration, default_value = "10s")]
    pub(crate) connect_timeout: Duration,
    /// Push scenario: broadcasts to publish (rounds, with --topics); default 10 (rollout: enough for 3 s, the drain period and 15 s; recovery: messages per stream live and again during the outage, default 100).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) broadcasts: Option<u64>,
    /// Push scenario: time between broadcasts (default 5s; rollout: 1s).
    #[arg(long, value_parser = parse::positive_duration)]
    pub(crate) broadcast_interval: Option<Duration>,
    /// Push scenario: spread connections over this many topics and publish one message to each per round (0: broadcasts).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=100_000), default_value = "0")]
    pub(crate) topics: u64,
    /// Push scenario: server nodes, each in its own network namespace, the
    /// clients spread over them (needs --cluster).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16), default_value = "1")]
    pub(crate) nodes: u64,
    /// Push scenario: join the nodes through this broker (a nats-server in
    /// its own namespace); broadcasts are published on node 0.
    #[arg(long, value_enum)]
    pub(crate) cluster: Option<crate::bench::config::Broker>,
    /// Push scenario with --cluster: the nodes' --cluster-history
    /// (`jetstream`: the cluster's history in NATS JetStream; `off`: core NATS).
    #[arg(long, value_enum, default_value = "jetstream")]
    pub(crate) cluster_history: crate::cluster::log::HistoryMode,
    /// Rollout scenario: the nodes' --drain-period (node n0 closes its connections evenly over it).
    #[arg(long, value_parser = parse::duration, default_value = "30s")]
    pub(crate) drain_period: Duration,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// As --threshold, and also checked on the live numbers every second from 3 s after the ramp began: when crossed the run stops early (summary, JSON, JUnit and report still written) and exits 99.
    #[arg(long = "threshold-abort", value_name = "EXPR", value_parser = crate::client::thresholds::parse)]
    pub(crate) threshold_abort: Vec<crate::client::thresholds::Threshold>,
    #[command(flatten)]
    pub(crate) gate: GateArgs,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct TuneArgs {
    /// Target number of connections.
    #[arg(long, value_parser = parse::positive_count)]
    pub(crate) connections: u64,
    /// Which ends run on this machine: both (loopback test) counts two sockets per connection.
    #[arg(long, value_enum, default_value = "both")]
    pub(crate) role: crate::tune::plan::TuneRole,
    /// Server ports (their count sets listener fds and port-pair capacity).
    #[arg(long, default_value = "8000-8099")]
    pub(crate) ports: PortList,
    /// Planned new connections per second, e.g. 50000/s (sizes the accept queues).
    #[arg(long, value_parser = parse::per_second_count, default_value = "50000/s")]
    pub(crate) rate: u64,
    /// Write /etc/sysctl.d/90-megaconn.conf and load it (root only).
    #[arg(long)]
    pub(crate) apply: bool,
    /// Show what --apply would write, change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print the assessment as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Read /proc and /sys below this directory (testing).
    #[arg(long, default_value = "/", hide = true)]
    pub(crate) root: std::path::PathBuf,
}

/// Every check a command does before it starts anything: flags into
/// configs, then the plans (processes, threads, addresses, limits). Runs
/// nothing and opens no socket; the CLI property test drives it.
pub fn plan_only(cli: Cli) -> Result<(), String> {
    let fd_hard = crate::sys::fd_limit().hard;
    match cli.command {
        Cmd::Server(a) => crate::server::plan(&a.try_into().map_err(|e: crate::UsageError| e.0)?, fd_hard).map(|_| ()),
        Cmd::Client(a) => {
            a.load.flags_fit().map_err(|e| e.0)?;
            crate::client::plan(&(*a).into(), fd_hard).map(|_| ())
        }
        Cmd::Bench(a) => {
            a.stages_fit().map_err(|e| e.0)?;
            let cfg: crate::bench::BenchConfig = a.into();
            crate::server::plan(&crate::bench::server_config(&cfg, cfg.connections), fd_hard).map(|_| ())
        }
        Cmd::Tune(a) => {
            let c: crate::tune::TuneConfig = a.into();
            crate::tune::assess_here(std::path::Path::new("/"), c.connections, c.role, c.ports, c.rate);
            Ok(())
        }
        Cmd::Worker { .. } | Cmd::Report { .. } | Cmd::Merge { .. } => Ok(()),
    }
}

/// Entry point of a worker process (`megaconn __worker ROLE`, config on
/// the first line of stdin): the one place that knows both roles' workers.
fn run_worker(role: &str) -> anyhow::Result<()> {
    use crate::supervise::control;
    use anyhow::Context;
    let result = (|| {
        let config = control::read_config().context("cannot read the worker config from stdin")?;
        match role {
            crate::server::WORKER_KIND => crate::server::worker::run(serde_json::from_str(&config).context("bad server worker config")?),
            crate::client::WORKER_KIND => crate::client::worker::run(serde_json::from_str(&config).context("bad client worker config")?),
            other => anyhow::bail!("unknown worker role {other}"),
        }
    })();
    if let Err(e) = &result {
        // The supervisor reads this and names the worker; stderr stays quiet.
        control::emit_fatal(&format!("{e:#}"));
    }
    result
}

/// `megaconn client --protocol mqtt`'s flags.
#[derive(Args, Debug, Clone)]
pub(crate) struct MqttArgs {
    /// --protocol mqtt: the MQTT version of every CONNECT: 3.1.1 or 5.
    #[arg(long, value_parser = ["3.1.1", "5"], default_value = "3.1.1")]
    pub(crate) mqtt_version: String,
    /// --protocol mqtt: client id of each connection ({conn}: its index).
    #[arg(long, default_value = "megaconn-{conn}")]
    pub(crate) mqtt_client_id: String,
    /// --protocol mqtt: user name of every CONNECT (default, with a password or --jwt-secret-file: the client id; MQTT 3.1.1 allows no password without a user name).
    #[arg(long)]
    pub(crate) mqtt_username: Option<String>,
    /// --protocol mqtt: password of every CONNECT (--jwt-secret-file instead shows each connection's own token as its password).
    #[arg(long, conflicts_with = "jwt_secret_file", hide_env_values = true)]
    pub mqtt_password: Option<String>,
    /// --protocol mqtt: QoS of publishes (--request-rate) and subscriptions: 0 (publishes not answered, counted as requests_unacknowledged), 1 (each PUBACK times its publish as a request) or 2 (each PUBCOMP does, after PUBREC answered PUBREL).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2), default_value = "0")]
    pub mqtt_qos: u8,
    /// --protocol mqtt: topic each connection publishes --message (else a stamped --payload) to with --request-rate ({conn}: its index).
    #[arg(long, default_value = "megaconn/{conn}")]
    pub(crate) mqtt_publish_topic: String,
    /// --protocol mqtt: topic filter each connection subscribes to, wildcards allowed ({conn}: its index; repeatable; besides --subscribe).
    #[arg(long, value_parser = |s: &str| crate::client::mqtt::check_filter(s).map(|()| s.to_string()))]
    pub(crate) mqtt_subscribe: Vec<String>,
    /// --protocol mqtt --mqtt-version 5: topic aliases each connection takes from the broker (its CONNECT's Topic Alias Maximum, 1 to 1024); the broker may then send a topic once and its alias after, resolved and counted as mqtt_topic_aliases_in.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=crate::client::mqtt::MAX_TOPIC_ALIASES as i64))]
    pub(crate) mqtt_topic_alias_maximum: Option<u16>,
}

/// `megaconn client`'s TLS flags (any of them turns TLS on).
#[derive(Args, Debug, Clone)]
pub(crate) struct ClientTlsArgs {
    /// Speak TLS (any protocol; wss:// and https:// URLs imply it, as does any --tls-* flag).
    #[arg(long)]
    pub(crate) tls: bool,
    /// PEM file of the CA(s) to trust for the server's certificate (default: the system's trust store).
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
    /// Accept any server certificate (a test server's self-signed one); the handshake still checks the server holds its key.
    #[arg(long, conflicts_with = "tls_ca")]
    pub(crate) insecure: bool,
    /// Name sent in SNI and checked against the certificate (default: the URL's host, else --target).
    #[arg(long, value_name = "NAME")]
    pub(crate) tls_server_name: Option<String>,
    /// TLS versions to offer: 1.2, 1.3 or 1.2,1.3.
    #[arg(long, value_parser = crate::tls::client::parse_versions)]
    pub(crate) tls_versions: Option<std::vec::Vec<crate::tls::client::Version>>,
    /// Which handshakes resume a session with a ticket: reconnect (reconnects and churn reopens, as returning devices), always, never (full handshakes only).
    #[arg(long, value_enum)]
    pub(crate) tls_resume: Option<crate::tls::client::Resume>,
}

/// `megaconn server`'s TLS flags.
#[derive(Args, Debug, Clone)]
pub(crate) struct ServerTlsArgs {
    /// Serve TLS on every port (with --serve: on the +tls entries): the certificate (PEM, the server's first, then its chain; RSA or ECDSA). Reloaded on SIGHUP and when the file changes.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// TLS: close a connection that has not finished its handshake in this long (tls_timeout).
    #[arg(long, value_parser = parse::positive_duration, default_value = "10s")]
    pub(crate) handshake_timeout: Duration,
}
