//! What a load run is asked to do, as domain types (the CLI converts its
//! flags into these; the bench and tests build them directly).

use super::plan::Shard;
use crate::proto::Protocol;
use crate::supervise::plan::Workers;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub(crate) enum CloseMode {
    /// RST (SO_LINGER 0): no TIME_WAIT left behind, ports free at once.
    Reset,
    /// FIN: the client side keeps TIME_WAIT sockets for 60 s.
    Graceful,
}

/// How long a load holds its connections after the ramp, unless told:
/// the client's and the bench's default alike.
pub(crate) const DEFAULT_HOLD: Duration = Duration::from_secs(20);
/// [`DEFAULT_HOLD`] as the CLI writes it.
#[cfg(test)]
pub(crate) const DEFAULT_HOLD_TEXT: &str = "20s";

/// One server of several (bench --nodes): where its share of the client
/// workers connect, and the network namespace (fd) they run in.
#[derive(Debug, Clone)]
pub(crate) struct NodeTarget {
    pub target: IpAddr,
    pub netns_fd: Option<i32>,
    /// Where this node's connections move when it drains (the other
    /// nodes, as reached from this node's namespace).
    pub elsewhere: Vec<IpAddr>,
}

/// What every connection of a load does: the protocol it speaks, what it
/// sends and when, how it opens and how it ends. Client workers get it as
/// it is (inside their config); nothing copies its fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Traffic {
    pub protocol: Protocol,
    pub heartbeat: Option<Duration>,
    pub payload: usize,
    /// Requests per second per connection.
    pub request_rate: Option<f64>,
    /// `--requests-per-connection`: a connection's requests stop after
    /// this many (the request schedule then starts when the ramp is
    /// done: see `worker/schedule.rs`).
    #[serde(default)]
    pub requests_per_connection: Option<u64>,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub close: CloseMode,
    /// Open lost connections again, paced and with jittered back-off.
    pub reconnect: bool,
    /// `--reconnect-to`: where a connection told to go away moves, in turn.
    #[serde(default)]
    pub reconnect_to: Vec<IpAddr>,
    /// `--protocol raw` (and ws): the message sent on the heartbeat
    /// schedule (or the request schedule with a request rate), and, raw
    /// only, one sent once when a connection is established.
    pub raw_message: Option<super::raw::RawMessage>,
    pub raw_first: Option<Vec<u8>>,
    /// `--codec`: frame raw messages with a length prefix.
    pub raw_codec: Option<super::codec::Codec>,
    /// Topics every connection subscribes to, or (spread) one per
    /// connection round-robin.
    pub subscribe: Vec<String>,
    pub subscribe_spread: bool,
    /// `--protocol ws` and `http`: the request target (path and query)
    /// of the Upgrade and of every HTTP request.
    pub ws_target: String,
    /// Host header of those requests (default: the target address and port).
    pub host: Option<String>,
    /// Extra header lines of those requests (`-H`, `--origin`,
    /// `--ws-subprotocol`), as `Name: value`.
    pub headers: Vec<String>,
    /// `--ws-subprotocol`: offered; the server must pick one.
    pub subprotocols: Vec<String>,
    /// TLS (`--tls`, `wss://`, `https://`, bench --tls).
    pub tls: Option<crate::tls::client::ClientTls>,
    /// `--ws-binary`: `--message` goes in binary frames, not text.
    pub ws_binary: bool,
    /// `--ws-deflate`: offer permessage-deflate (no context takeover
    /// either way), require it, inflate what comes, compress what goes.
    #[serde(default)]
    pub ws_deflate: bool,
    /// `--jwt-secret-file`: each connection shows a token minted with it.
    #[serde(default)]
    pub jwt_secret: Option<Vec<u8>>,
    /// `--protocol mqtt`: version, client id, credentials, QoS, topics.
    #[serde(default)]
    pub mqtt: super::mqtt::MqttOptions,
    /// `--protocol mqtt --url ws://...` (or `wss://`): MQTT carried in
    /// WebSocket messages, the Upgrade offering the `mqtt` subprotocol
    /// (`mqtt_ws.rs`).
    #[serde(default)]
    pub mqtt_ws: bool,
}

impl Default for Traffic {
    fn default() -> Traffic {
        Traffic {
            protocol: Protocol::Framed,
            heartbeat: Some(Duration::from_secs(30)),
            payload: 64,
            request_rate: None,
            requests_per_connection: None,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            close: CloseMode::Reset,
            reconnect: false,
            reconnect_to: Vec::new(),
            raw_message: None,
            raw_first: None,
            raw_codec: None,
            subscribe: Vec::new(),
            subscribe_spread: false,
            ws_target: "/".into(),
            mqtt_ws: false,
            host: None,
            headers: Vec::new(),
            subprotocols: Vec::new(),
            tls: None,
            ws_binary: false,
            ws_deflate: false,
            jwt_secret: None,
            mqtt: Default::default(),
        }
    }
}

impl Traffic {
    pub(crate) fn heartbeat_us(&self) -> Option<u64> {
        self.heartbeat.map(|d| d.as_micros() as u64)
    }

    /// Interval between requests on one connection (µs), if any.
    pub(crate) fn request_us(&self) -> Option<u64> {
        self.request_rate.map(|r| (1e6 / r) as u64)
    }

    pub(crate) fn request_timeout_us(&self) -> u64 {
        self.request_timeout.as_micros() as u64
    }

    pub(crate) fn connect_timeout_ms(&self) -> u64 {
        self.connect_timeout.as_millis() as u64
    }

    /// The Host header of Upgrade and HTTP requests to `target`.
    pub(crate) fn host_header(&self, target: IpAddr, ports: &[u16]) -> String {
        let host = match target {
            IpAddr::V6(a) => format!("[{a}]"),
            IpAddr::V4(a) => a.to_string(),
        };
        self.host.clone().unwrap_or_else(|| match ports {
            [one] => format!("{host}:{one}"),
            _ => host,
        })
    }

    /// The topics connection `conn` (its index in the plan) subscribes to.
    pub(crate) fn topics_of(&self, conn: u64) -> &[String] {
        match (self.subscribe.len(), self.subscribe_spread) {
            (0, _) => &[],
            (n, true) => {
                let i = (conn % n as u64) as usize;
                &self.subscribe[i..=i]
            }
            (_, false) => &self.subscribe,
        }
    }

    /// What connection `conn` follows and resumes: its topics (and those
    /// its `--url` subscribes to), then the broadcasts (`*`).
    pub(crate) fn streams_of(&self, conn: u64) -> impl Iterator<Item = &str> {
        self.topics_of(conn).iter().map(String::as_str).chain(self.url_topics()).chain([crate::proto::push::BROADCAST_TOPIC])
    }

    /// Topics in the request target's `subscribe=` (a `--url`'s query).
    fn url_topics(&self) -> impl Iterator<Item = &str> {
        let query = self.ws_target.split_once('?').map_or("", |(_, q)| q);
        query.split('&').filter_map(|kv| kv.strip_prefix("subscribe=")).flat_map(|v| v.split(',')).filter(|t| !t.is_empty())
    }

    /// The extra header lines, each ending in CRLF.
    pub(crate) fn header_lines(&self) -> String {
        self.headers.iter().map(|h| format!("{h}\r\n")).collect()
    }
}

/// The load itself: how many connections, how fast, for how long, from
/// where, and what each does ([`Traffic`]).
#[derive(Debug, Clone)]
pub(crate) struct LoadConfig {
    pub traffic: Traffic,
    pub ports: Vec<u16>,
    pub connections: u64,
    /// New connections per second over the whole run.
    pub rate: u64,
    /// None: enough 127.0.0.x addresses for an IPv4 loopback target,
    /// else the kernel's choice.
    pub source_ips: Option<Vec<IpAddr>>,
    pub hold: Duration,
    /// `--until-pushes`: the hold ends once this many pushes arrived in all.
    pub until_pushes: Option<u64>,
    pub stats_interval: Duration,
    /// Close and reopen this many connections per second (whole run)
    /// once the ramp is done, spread evenly (open loop).
    pub churn: Option<f64>,
    /// Exit 0 even when connections were lost during the run.
    pub allow_loss: bool,
    /// `--io`: the workers' reactor for what connections receive.
    pub io: crate::uring::Io,
    /// Niceness of the client workers (bench: the load generator yields
    /// CPU to the server it measures on the same machine).
    pub nice: i32,
    /// Network namespace (fd) the client workers run in (bench --topology veth).
    pub netns_fd: Option<i32>,
    /// `--start-at`: the wall-clock instant the ramp starts.
    pub start_at: Option<std::time::SystemTime>,
    /// Several servers (bench --nodes): worker i connects to nodes[i % n]
    /// from that node's namespace; empty: the plan's one target.
    pub nodes: Vec<NodeTarget>,
    /// `--threshold`, `--threshold-abort`, `--junit`.
    pub thresholds: super::thresholds::Thresholds,
    /// `--stages`: open connections over time instead of ramp and hold
    /// (`connections` is then the highest target, `rate` the steepest
    /// change).
    pub stages: Option<super::stages::Stages>,
    pub json: bool,
}

impl Default for LoadConfig {
    fn default() -> LoadConfig {
        LoadConfig {
            traffic: Traffic::default(),
            ports: (8000..=8099).collect(),
            connections: 1000,
            rate: 50_000,
            source_ips: None,
            hold: DEFAULT_HOLD,
            until_pushes: None,
            stats_interval: Duration::from_secs(2),
            churn: None,
            allow_loss: false,
            nice: 0,
            io: crate::uring::Io::Auto,
            netns_fd: None,
            start_at: None,
            nodes: Vec::new(),
            thresholds: Default::default(),
            stages: None,
            json: false,
        }
    }
}

/// A whole `megaconn client` run.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfig {
    pub target: IpAddr,
    pub load: LoadConfig,
    pub workers: Workers,
    pub shard: Option<Shard>,
    /// Serve /metrics, /stats and /healthz for this run here.
    pub admin: Option<std::net::SocketAddr>,
    /// `--url`: the server (its scheme, host, port and path are applied).
    pub url: Option<super::url::Url>,
    /// `--report DIR`.
    pub report: Option<std::path::PathBuf>,
    /// `--summary-json FILE`.
    pub summary_json: Option<std::path::PathBuf>,
    /// `--hdr-log FILE`.
    pub hdr_log: Option<std::path::PathBuf>,
    /// `--dry-run`: print the plan and open nothing.
    pub dry_run: bool,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            target: IpAddr::V4(Ipv4Addr::LOCALHOST),
            load: LoadConfig::default(),
            workers: Workers::Auto,
            shard: None,
            admin: None,
            url: None,
            report: None,
            summary_json: None,
            hdr_log: None,
            dry_run: false,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hold_default_is_written_once() {
        assert_eq!(humantime::parse_duration(super::DEFAULT_HOLD_TEXT).unwrap(), super::DEFAULT_HOLD);
    }
}
