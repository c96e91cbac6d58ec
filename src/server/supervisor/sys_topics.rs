//! `$SYS` topics as mosquitto names them (`sys_tree.c`), so a dashboard,
//! a Grafana MQTT source or a script written for mosquitto's
//! `$SYS/broker/...` reads megaconn's unchanged: published retained every
//! `--sys-interval` from the numbers the
//! supervisor already sums over every worker (every 10 s by default,
//! mosquitto's own rhythm; `--sys-interval 0` turns it off). They are
//! not written to `--mqtt-retained-file`: each start publishes them anew.
//!
//! As mosquitto does, a value goes out only when it changed since it was
//! last published (the uptime every time, the version once), and a load
//! is an exponentially decaying average of a rate per minute over 1, 5
//! and 15 minutes, published when it moved by 0.01 or more. In a cluster
//! every node publishes under `$SYS/brokers/NODE/...` (as EMQX names its
//! nodes), since retained topics are shared by the nodes and one
//! `$SYS/broker/uptime` would be whichever node wrote last.
//!
//! Clients cannot publish to `$SYS` (refused, counted); subscribing takes
//! a filter that starts with `$SYS` (`#` does not match it, §4.7.2), and
//! an ACL or a token's topics decide who may, like any topic.
//!
//! `bytes/received` and `bytes/sent` are what the protocols read and
//! wrote (inside TLS), counted per read and per send, not per connection;
//! `publish/bytes/...` the payloads of MQTT PUBLISH packets. Not
//! published: mosquitto's heap (`heap/...`) and store (`store/...`).

use std::collections::HashMap;
use std::time::Duration;

/// `--sys-interval`'s default: mosquitto's (`sys_interval 10`).
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// The numbers one update reads (sums over every worker, and the
/// supervisor's own).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Reading {
    pub uptime_s: u64,
    /// MQTT connections open now.
    pub connected: u64,
    /// Sessions kept for clients gone.
    pub disconnected: u64,
    /// Kept sessions that expired, so far.
    pub expired: u64,
    /// Packets of every protocol read and written, so far.
    pub messages_received: u64,
    pub messages_sent: u64,
    /// Bytes the protocols read and wrote (inside TLS), so far.
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// Payload bytes of MQTT PUBLISH packets read and written, so far.
    pub publish_bytes_received: u64,
    pub publish_bytes_sent: u64,
    /// MQTT PUBLISH packets read and written, and deliveries dropped, so far.
    pub publish_received: u64,
    pub publish_sent: u64,
    pub publish_dropped: u64,
    /// Connections accepted, so far.
    pub connections: u64,
    pub subscriptions: u64,
    pub retained: u64,
}

/// A load's three averages (1, 5, 15 minutes).
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    avg: [f64; 3],
}

/// What the `$SYS` tree last said, to publish only what changed.
#[derive(Debug)]
pub(crate) struct SysTree {
    prefix: String,
    version: String,
    /// The last reading (None: nothing published yet).
    last: Option<Reading>,
    maximum: u64,
    loads: HashMap<&'static str, Load>,
    said: HashMap<String, String>,
}

/// One counter of a [`Reading`].
type Counter = fn(&Reading) -> u64;

/// The loads, each from one counter of a [`Reading`].
const LOADS: [(&str, Counter); 8] = [
    ("messages/received", |r| r.messages_received),
    ("messages/sent", |r| r.messages_sent),
    ("bytes/received", |r| r.bytes_received),
    ("bytes/sent", |r| r.bytes_sent),
    ("publish/received", |r| r.publish_received),
    ("publish/sent", |r| r.publish_sent),
    ("publish/dropped", |r| r.publish_dropped),
    ("connections", |r| r.connections),
];
const MINUTES: [(u32, &str); 3] = [(1, "1min"), (5, "5min"), (15, "15min")];

impl SysTree {
    /// `$SYS/broker` for a single node, `$SYS/brokers/NODE` in a cluster.
    pub(crate) fn new(node: Option<&str>) -> SysTree {
        let prefix = match node {
            Some(n) => format!("$SYS/brokers/{n}"),
            None => "$SYS/broker".to_string(),
        };
        SysTree {
            prefix,
            version: format!("megaconn version {}", env!("CARGO_PKG_VERSION")),
            last: None,
            maximum: 0,
            loads: HashMap::new(),
            said: HashMap::new(),
        }
    }

    /// The topics to publish (retained) for reading `r`, taken `elapsed_s`
    /// after the last one: what changed, as (topic, payload).
    pub(crate) fn update(&mut self, r: &Reading, elapsed_s: f64) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let first = self.last.is_none();
        // The uptime always; the rest when it changed.
        out.push((format!("{}/uptime", self.prefix), format!("{} seconds", r.uptime_s)));
        let total = r.connected + r.disconnected;
        self.maximum = self.maximum.max(total);
        let values = [
            ("version", self.version.clone()),
            ("clients/total", total.to_string()),
            ("clients/maximum", self.maximum.to_string()),
            ("clients/connected", r.connected.to_string()),
            ("clients/active", r.connected.to_string()),
            ("clients/disconnected", r.disconnected.to_string()),
            ("clients/inactive", r.disconnected.to_string()),
            ("clients/expired", r.expired.to_string()),
            ("messages/received", r.messages_received.to_string()),
            ("messages/sent", r.messages_sent.to_string()),
            ("bytes/received", r.bytes_received.to_string()),
            ("bytes/sent", r.bytes_sent.to_string()),
            ("publish/messages/received", r.publish_received.to_string()),
            ("publish/messages/sent", r.publish_sent.to_string()),
            ("publish/messages/dropped", r.publish_dropped.to_string()),
            ("publish/bytes/received", r.publish_bytes_received.to_string()),
            ("publish/bytes/sent", r.publish_bytes_sent.to_string()),
            ("subscriptions/count", r.subscriptions.to_string()),
            ("retained messages/count", r.retained.to_string()),
        ];
        for (name, value) in values {
            self.say(name, value, &mut out);
        }
        let last = self.last.unwrap_or(*r);
        let per_minute = 60.0 / elapsed_s.max(1.0);
        for (name, of) in LOADS {
            let rate = of(r).saturating_sub(of(&last)) as f64 * per_minute;
            let load = self.loads.entry(name).or_default();
            for (i, (minutes, label)) in MINUTES.iter().enumerate() {
                let topic = format!("{}/load/{name}/{label}", self.prefix);
                let before = load.avg[i];
                let now = if first { 0.0 } else { rate + (-elapsed_s / (60.0 * f64::from(*minutes))).exp() * (before - rate) };
                load.avg[i] = now;
                if first || (now - before).abs() >= 0.01 {
                    out.push((topic, format!("{now:.2}")));
                }
            }
        }
        self.last = Some(*r);
        out
    }

    /// `name`'s value, if it is not what was said last.
    fn say(&mut self, name: &str, value: String, out: &mut Vec<(String, String)>) {
        let topic = format!("{}/{name}", self.prefix);
        if self.said.get(&topic) != Some(&value) {
            self.said.insert(topic.clone(), value.clone());
            out.push((topic, value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(out: &[(String, String)]) -> Vec<&str> {
        out.iter().map(|(t, _)| t.as_str()).collect()
    }

    /// The first update says everything, named as mosquitto names it;
    /// the next only what changed, the uptime always; loads decay toward
    /// the rate per minute.
    #[test]
    fn values_go_out_when_they_change() {
        let mut t = SysTree::new(None);
        let r = Reading { uptime_s: 10, connected: 3, disconnected: 2, publish_received: 600, ..Reading::default() };
        let first = t.update(&r, 10.0);
        let got: HashMap<&str, &str> = first.iter().map(|(t, v)| (t.as_str(), v.as_str())).collect();
        assert_eq!(got["$SYS/broker/uptime"], "10 seconds");
        assert_eq!(got["$SYS/broker/clients/connected"], "3");
        assert_eq!(got["$SYS/broker/clients/total"], "5");
        assert_eq!(got["$SYS/broker/clients/maximum"], "5");
        assert_eq!(got["$SYS/broker/load/publish/received/1min"], "0.00");
        assert!(got["$SYS/broker/version"].starts_with("megaconn version "));
        assert_eq!(got["$SYS/broker/retained messages/count"], "0");
        assert_eq!(got["$SYS/broker/bytes/received"], "0");
        let r2 = Reading { uptime_s: 20, connected: 1, publish_received: 1_600, ..r };
        let second = t.update(&r2, 10.0);
        let names = topics(&second);
        assert!(names.contains(&"$SYS/broker/uptime") && names.contains(&"$SYS/broker/clients/connected"));
        assert!(!names.contains(&"$SYS/broker/version") && !names.contains(&"$SYS/broker/clients/maximum"), "unchanged: {names:?}");
        let got: HashMap<&str, &str> = second.iter().map(|(t, v)| (t.as_str(), v.as_str())).collect();
        assert_eq!(got["$SYS/broker/clients/total"], "3");
        // 1,000 publishes in 10 s is 6,000 a minute: the 1-minute load
        // moves a sixth of the way there (1 - e^(-10/60)).
        let one: f64 = got["$SYS/broker/load/publish/received/1min"].parse().unwrap();
        assert!((one - 6000.0 * (1.0 - (-10.0f64 / 60.0).exp())).abs() < 0.01, "{one}");
        assert!(!names.contains(&"$SYS/broker/load/connections/1min"), "no change, not said: {names:?}");
    }

    /// A cluster node's tree is its own.
    #[test]
    fn a_cluster_node_has_its_own_prefix() {
        let out = SysTree::new(Some("node-a")).update(&Reading::default(), 10.0);
        assert!(out.iter().all(|(t, _)| t.starts_with("$SYS/brokers/node-a/")), "{out:?}");
    }
}
