//! Where each option of a configured subcommand goes: its section in a
//! `--config` file, which is also its heading in `--help`. The one place
//! that groups options; everything else about an option (its key, its
//! variable, its values) comes from its clap definition.

/// A subcommand a file and the environment may configure.
pub(crate) struct Layout {
    pub(crate) sub: &'static str,
    /// The file's sections in the order `--help` and `--print-config`
    /// show them, each with its `--help` heading.
    pub(crate) sections: &'static [(&'static str, &'static str)],
    /// The section of the option `--long`.
    pub(crate) section_of: fn(&str) -> &'static str,
    /// Where the file form is documented.
    pub(crate) doc: &'static str,
}

impl Layout {
    /// The `--help` heading of the option `--long`.
    pub(crate) fn heading(&self, long: &str) -> &'static str {
        let section = (self.section_of)(long);
        self.sections.iter().find(|(s, _)| *s == section).map_or("Options", |(_, h)| *h)
    }

    pub(crate) fn has_section(&self, name: &str) -> bool {
        self.sections.iter().any(|(s, _)| *s == name)
    }
}

/// Every configured subcommand.
pub(crate) const LAYOUTS: &[Layout] = &[
    Layout { sub: "server", sections: SERVER, section_of: server, doc: "docs/server.md" },
    Layout { sub: "client", sections: CLIENT, section_of: client, doc: "docs/client.md" },
    Layout { sub: "bench", sections: BENCH, section_of: bench, doc: "docs/bench.md" },
];

/// The layout of `sub`, if a file may configure it.
pub(crate) fn layout(sub: &str) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.sub == sub)
}

const SERVER: &[(&str, &str)] = &[
    ("listen", "Listen"),
    ("workers", "Workers"),
    ("limits", "Limits"),
    ("tls", "TLS"),
    ("auth", "Authentication"),
    ("mqtt", "MQTT"),
    ("websocket", "WebSocket"),
    ("history", "History"),
    ("business", "Business stage"),
    ("cluster", "Cluster"),
    ("admin", "Admin API"),
    ("upstream", "Upstream"),
    ("lifecycle", "Drain and lifetime"),
    ("output", "Output"),
];

fn server(long: &str) -> &'static str {
    let is = |names: &[&str]| names.contains(&long);
    let starts = |prefix: &str| long.starts_with(prefix);
    if is(&["listen", "ports", "serve", "protocol"]) {
        "listen"
    } else if is(&["workers", "connections", "retire-after", "broker-shards", "io", "io-batch-wait"]) {
        "workers"
    } else if starts("tls-") || long == "handshake-timeout" {
        "tls"
    } else if is(&["auth", "admin-topics"]) || starts("jwt-") {
        "auth"
    } else if starts("mqtt-") || long == "sys-interval" {
        "mqtt"
    } else if starts("ws-") || long == "push-format" {
        "websocket"
    } else if starts("history") {
        "history"
    } else if is(&["business", "queue", "service-time", "body-size"]) {
        "business"
    } else if starts("cluster") || long == "node-id" {
        "cluster"
    } else if starts("admin") {
        "admin"
    } else if starts("upstream") || starts("presence-") {
        "upstream"
    } else if is(&["drain-timeout", "drain-period", "duration"]) {
        "lifecycle"
    } else if is(&["stats-interval", "json"]) {
        "output"
    } else {
        "limits"
    }
}

const CLIENT: &[(&str, &str)] = &[
    ("target", "Target"),
    ("load", "Load"),
    ("protocol", "Protocol"),
    ("mqtt", "MQTT"),
    ("tls", "TLS"),
    ("workers", "Workers"),
    ("thresholds", "Thresholds"),
    ("output", "Output"),
];

fn client(long: &str) -> &'static str {
    let is = |names: &[&str]| names.contains(&long);
    if is(&["target", "url", "ports", "source-ips", "header", "origin", "jwt-secret-file"]) {
        "target"
    } else if is(&["protocol", "ws-binary", "ws-deflate", "ws-subprotocol", "message", "first-message", "codec", "subscribe", "close"]) {
        "protocol"
    } else if long.starts_with("mqtt-") {
        "mqtt"
    } else if long.starts_with("tls") || long == "insecure" {
        "tls"
    } else if is(&["io", "workers", "shard", "start-at"]) {
        "workers"
    } else if long.starts_with("threshold") || long == "junit" {
        "thresholds"
    } else if is(&["stats-interval", "json", "summary-json", "hdr-log", "admin", "report", "dry-run"]) {
        "output"
    } else {
        "load"
    }
}

const BENCH: &[(&str, &str)] = &[
    ("load", "Load"),
    ("protocol", "Protocol"),
    ("push", "Push"),
    ("topology", "Topology and workers"),
    ("cluster", "Cluster"),
    ("thresholds", "Thresholds"),
    ("output", "Output"),
];

fn bench(long: &str) -> &'static str {
    let is = |names: &[&str]| names.contains(&long);
    if is(&["protocol", "mqtt-qos", "tls", "auth", "ws-deflate", "history"]) {
        "protocol"
    } else if is(&["push-bytes", "broadcasts", "broadcast-interval", "topics"]) {
        "push"
    } else if is(&["topology", "io", "client-io", "workers", "server-workers", "client-workers", "ports", "source-ips"]) {
        "topology"
    } else if is(&["nodes", "cluster", "cluster-history"]) {
        "cluster"
    } else if long.starts_with("threshold") || long == "junit" {
        "thresholds"
    } else if is(&["report", "json", "admin"]) {
        "output"
    } else {
        "load"
    }
}
