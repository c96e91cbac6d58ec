//! What a bench run is asked to do (domain type; the CLI converts into it).

use crate::supervise::plan::Workers;
use std::net::Ipv4Addr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// Ramp to N, hold with heartbeats, measure memory and CPU per connection.
    Connections,
    /// The thread-pool experiment: 1000 connections x 1 req/s against
    /// inline, pool:1000, pool:20 and async, classic service time.
    Business,
    /// Ramp to N, then publish broadcasts (or one message per topic)
    /// through the admin API and time their delivery to every connection.
    Push,
    /// A rolling restart: --nodes (2 or more) joined by NATS JetStream,
    /// a broadcast every second; node n0 drains (SIGTERM, --drain-period)
    /// and restarts mid-run while its clients move and resume elsewhere.
    Rollout,
    /// A reconnect storm with history: --broadcasts K messages per stream
    /// live, then every connection drops, K more are published, and all
    /// reconnect at once and resume; recovery time against live time.
    Recovery,
}

/// What joins the nodes of a cluster bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Broker {
    /// nats-server (Debian's package), one NATS server with JetStream.
    Nats,
}

#[derive(Debug, Clone)]
pub(crate) struct BenchConfig {
    pub scenario: Scenario,
    pub connections: u64,
    pub ports: Vec<u16>,
    pub rate: u64,
    /// `--stages` (the connections scenario): open connections over time
    /// instead of ramp and hold; `connections` is the highest target.
    pub stages: Option<crate::client::stages::Stages>,
    /// None: 20 s (connections) or 30 s per mode (business).
    pub hold: Option<Duration>,
    pub heartbeat: Option<Duration>,
    pub payload: usize,
    /// Push scenario: bytes of data in each published message.
    pub push_bytes: usize,
    /// `--protocol ws`: the clients offer permessage-deflate.
    pub ws_deflate: bool,
    /// The server's `--history`.
    pub history: usize,
    pub source_ips: Option<Vec<std::net::IpAddr>>,
    pub server_workers: Workers,
    pub client_workers: Workers,
    pub connect_timeout: Duration,
    /// Push scenario: how many broadcasts (rounds), how far apart, and
    /// over how many topics (0: broadcasts to everyone).
    pub broadcasts: u64,
    pub broadcast_interval: Duration,
    pub topics: u64,
    /// `--churn`: connections closed and reopened per second in the hold.
    pub churn: Option<f64>,
    /// What both ends speak: framed, ws, http or mqtt.
    pub protocol: crate::proto::Protocol,
    /// `--mqtt-qos`: the QoS MQTT clients subscribe with, and (push
    /// scenario) the QoS of the bench's publishes.
    pub mqtt_qos: u8,
    /// `--report DIR`.
    pub report: Option<std::path::PathBuf>,
    /// `--admin`: the load generator's admin API and dashboard.
    pub admin: Option<std::net::SocketAddr>,
    pub topology: crate::topology::Topology,
    /// The server's address (set by the topology: 127.0.0.1 or veth's).
    pub target: Ipv4Addr,
    /// Namespace (fd) the client workers enter (veth).
    pub client_netns: Option<i32>,
    /// `--tls`: both ends speak TLS, with a throwaway CA and certificate
    /// (`pki`, made when the run starts and removed when it ends).
    pub tls: bool,
    /// `--auth jwt`: the server verifies a token per connection, minted by
    /// the client with this secret (random, made for the run).
    pub jwt_secret: Option<Vec<u8>>,
    /// `--io`: the server's reactor.
    pub io: crate::uring::Io,
    /// `--client-io`: the client workers' reactor.
    pub client_io: crate::uring::Io,
    pub pki: Option<std::sync::Arc<crate::tls::throwaway::Throwaway>>,
    /// Push scenario: server nodes (each its own namespace) and the broker
    /// between them.
    pub nodes: u64,
    pub cluster: Option<Broker>,
    /// The nodes' `--cluster-history`.
    pub cluster_history: crate::cluster::log::HistoryMode,
    /// The nodes' `--drain-period` (a rollout's drain).
    pub drain_period: Duration,
    /// `--threshold`, `--threshold-abort`, `--junit` (the client's).
    pub thresholds: crate::client::thresholds::Thresholds,
    pub json: bool,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            scenario: Scenario::Connections,
            admin: None,
            connections: 200_000,
            ports: (8000..=8099).collect(),
            rate: 50_000,
            stages: None,
            hold: None,
            heartbeat: Some(Duration::from_secs(30)),
            payload: 64,
            push_bytes: 64,
            ws_deflate: false,
            history: crate::server::broker::history::DEFAULT_SIZE,
            source_ips: None,
            server_workers: Workers::Auto,
            client_workers: Workers::Auto,
            connect_timeout: Duration::from_secs(10),
            report: None,
            topology: crate::topology::Topology::Host,
            target: Ipv4Addr::LOCALHOST,
            client_netns: None,
            nodes: 1,
            cluster: None,
            cluster_history: crate::cluster::log::HistoryMode::Jetstream,
            drain_period: Duration::from_secs(30),
            broadcasts: 10,
            broadcast_interval: Duration::from_secs(5),
            topics: 0,
            churn: None,
            protocol: crate::proto::Protocol::Framed,
            mqtt_qos: 0,
            tls: false,
            jwt_secret: None,
            io: crate::uring::Io::Auto,
            client_io: crate::uring::Io::Auto,
            pki: None,
            thresholds: Default::default(),
            json: false,
        }
    }
}
