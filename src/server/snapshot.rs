//! What a server worker tells its supervisor, and what the supervisor
//! tells it back: the counters (declared once, below), the snapshot that
//! carries them, the worker's messages and the server's own commands.
//! Counters in a snapshot are cumulative, so the supervisor keeps only the
//! latest per worker.

use crate::supervise::PoolEvent;
use serde::{Deserialize, Serialize};

crate::counters! {
    /// Everything a server worker counts. One line per counter: the
    /// snapshot, the totals, `/metrics` and `--json` all come from here.
    pub struct ServerCounters {
        active: gauge "connections" "Connections open now",
        accepted: counter "accepted" "Connections accepted",
        closed: counter "connections_closed" "Connections closed, any reason",
        close_reasons: by("reason") "closed" "Connections closed, by reason (peer_closed, ECONNRESET, idle_timeout, bad_frame_too_long, ...)",
        accept_errors: by("errno") "accept_errors" "accept() failures, by errno (EMFILE, ENFILE, ...)",
        accept_paused: by("reason") "accept_paused" "Times a worker stopped accepting for 100 ms without an error (fd_ceiling: it holds as many connections as its descriptors allow while its successor starts)",
        refused_over_cap: counter "refused_over_cap" "Connections closed at accept: the server was at --max-connections",
        refused_per_ip: by("reason") "refused_per_ip" "Connections closed at accept by --max-connections-per-ip, by reason (max_connections_per_ip, per_ip_table_full)",
        stalled: by("what") "stalled" "Connections closed by --stall-timeout, by what had not moved (partial_input, ws_fragment, backlog)",
        subscribe_refused: by("reason") "subscribe_refused" "Subscriptions refused, by reason (too_many_topics: the worker holds --max-topics; too_many_subscriptions; bad_topic; not_permitted: the token's topics claim or --admin-topics)",
        auth_refused: by("reason") "auth_refused" "Tokens refused (--auth jwt), by reason (auth_missing, auth_expired, auth_bad_signature, auth_bad_algorithm, auth_bad_claims, auth_malformed, auth_unknown_key, auth_not_yet_valid, auth_other_user); at connect the connection is refused (401), on refresh the old token stays",
        auth_refreshed: counter "auth_refreshed" "Tokens refreshed on open connections",
        authenticated: gauge "authenticated_connections" "Connections open now with a verified token",
        upstream_sent: counter "upstream_sent" "Messages clients sent that the workers handed on to the --upstream backend",
        presence_notices: counter "presence_notices" "Join and leave notices written to WebSocket subscribers (--presence-notices)",
        presence_events_dropped: counter "presence_events_dropped" "Join and leave events not sent upstream because their part of the worker's upstream budget (an eighth of --upstream-queue and of its share of --upstream-queue-bytes, apart from client messages) was full",
        ws_upgrades: counter "ws_upgrades" "WebSocket handshakes completed",
        sse_streams: counter "sse_streams" "Server-Sent Event streams opened (GET with Accept: text/event-stream on a WebSocket or HTTP port)",
        goaways: counter "goaways" "Connections closed by a drain (SIGTERM, --drain-period) after a reconnect hint",
        tls_handshakes: counter "tls_handshakes" "TLS handshakes completed (full and resumed)",
        tls_resumed: counter "tls_resumed" "TLS handshakes that resumed a session (ticket)",
        tls_handshake_failures: by("reason") "tls_handshake_failures" "TLS connections closed before their handshake finished, by reason (tls_timeout, tls_plaintext, tls_eof, tls_alert_<name>, tls_bad_message, ...)",
        tls_reload_failures: counter "tls_reload_failures" "Certificate reloads a worker could not apply (the supervisor checked them first, so this stays 0); the previous certificate stays in use",
        frames_in: counter "frames_in" "Frames received",
        frames_out: counter "frames_out" "Frames sent",
        requests: counter "requests" "Requests received",
        replies: counter "replies" "Requests answered",
        rejected: counter "rejections" "Requests refused by a full business queue",
        applied_service_us: micros "business_service_applied" "Business service time applied to answered requests (mean: divide by replies)",
        push_commands: counter "push_commands" "Push commands carried out by the workers (one per worker per publish)",
        push_delivered: counter "push_delivered" "Pushes written or queued to a connection",
        push_dropped: counter "push_dropped" "Connections closed as slow consumers of pushes",
        recoveries: by("result") "recoveries" "Resumed subscriptions answered, by result (recovered: every missed message sent; lost: the history did not reach back or its epoch changed)",
        recovered_messages: counter "recovered_messages" "Missed messages sent to resuming subscribers",
        backlog_bytes: gauge "backlog_bytes" "Bytes accepted for sending that the sockets have not taken yet (each connection holds at most 256 KiB of replies, --max-pending-bytes of pushes)",
        topics: gauge "topics" "Topics with at least one subscriber (summed over workers)",
        subscriptions: gauge "subscriptions" "Topic subscriptions",
        threads: gauge "threads" "Threads in the worker processes",
        rss_bytes: bytes "resident_memory" "Resident memory of the worker processes",
        cpu_us: micros "cpu" "CPU time of the worker processes",
    }
}

/// One worker's state, sent every stats interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerSnapshot {
    pub worker: usize,
    #[serde(flatten)]
    pub counters: ServerCounters,
    /// Whether this worker accepts from the shared listeners.
    pub accepting: bool,
    /// Connections this worker may hold before it leaves the group.
    pub budget: u64,
    /// Publish-to-write latency counts per bucket of
    /// `server::push::LATENCY_BUCKETS_MS` (+Inf last), and their sum (µs).
    pub push_latency_buckets: Vec<u64>,
    pub push_latency_sum_us: u64,
    /// Last snapshot before the worker exits.
    pub last: bool,
}

crate::counters_deref!(ServerSnapshot => ServerCounters);

impl ServerSnapshot {
    /// Count one answered request and the service time it actually got.
    pub fn count_reply(&mut self, applied: std::time::Duration) {
        self.replies += 1;
        self.frames_out += 1;
        self.applied_service_us += applied.as_micros() as u64;
    }
}

/// Server worker -> supervisor, one JSON object per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ServerMsg {
    /// The worker listens.
    Ready {
        worker: usize,
        pid: u32,
        fd_limit: u64,
    },
    Server(Box<ServerSnapshot>),
    /// The worker cannot go on; the message names the cause and the fix.
    Fatal {
        worker: usize,
        message: String,
    },
    /// A push command was carried out: written or queued to `queued`
    /// connections, `dropped` closed as slow consumers.
    Pushed {
        worker: usize,
        publish_id: u64,
        queued: u64,
        dropped: u64,
    },
    /// Topics that gained their first (true) or lost their last (false)
    /// subscriber in this worker, in order (cluster nodes only: the
    /// supervisor subscribes to exactly the topics it has subscribers for).
    Topics {
        worker: usize,
        changes: Vec<(String, bool)>,
    },
    /// Subscribers of `topic` want to recover the messages after `after`
    /// (answered with a `history` command).
    HistoryWanted {
        worker: usize,
        topic: String,
        after: u64,
    },
    /// Joins and leaves for every worker's subscribers (`--presence-notices`).
    Notices {
        worker: usize,
        notices: Vec<crate::proto::push::Notice>,
    },
    /// What clients said, for the `--upstream` backend.
    Upstream {
        worker: usize,
        messages: Vec<super::upstream::UpMessage>,
    },
    /// Answer to a `presence` command: the topic's subscribers here.
    Presence {
        worker: usize,
        request_id: u64,
        /// (user, connections, info as JSON text)
        users: Vec<(String, u64, Option<String>)>,
        /// Subscribers without a user (no --auth).
        anonymous: u64,
    },
    /// Answer to a `list` command.
    Connections {
        worker: usize,
        request_id: u64,
        list: Vec<ConnInfo>,
        /// The answer reached [`LIST_BYTES`] before the limit.
        #[serde(default)]
        truncated: bool,
    },
}

/// One connection as `GET /connections` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnInfo {
    pub id: u64,
    pub worker: usize,
    pub peer: String,
    pub age_s: u64,
    /// The first [`LIST_TOPICS`] of its topics.
    pub topics: Vec<String>,
    /// How many topics it has in all.
    #[serde(default)]
    pub topics_total: usize,
    /// Its token's `sub` (`--auth jwt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its token's `info` claim (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

/// Topics shown per connection in a listing.
pub const LIST_TOPICS: usize = 16;
/// Most bytes of connections one worker answers a listing with (clients
/// choose their topic names: without it a listing could cost a worker
/// and the supervisor gigabytes).
pub const LIST_BYTES: usize = 2 << 20;

impl ConnInfo {
    /// About what it costs as JSON.
    pub fn json_bytes(&self) -> usize {
        96 + self.peer.len()
            + self.topics.iter().map(|t| t.len() + 3).sum::<usize>()
            + self.user.as_ref().map_or(0, |u| u.len() + 10)
            + self.info.as_ref().map_or(0, |i| i.to_string().len() + 10)
    }
}

/// Arguments of a `list` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCommand {
    pub request_id: u64,
    pub limit: usize,
    pub topic: Option<String>,
    /// Only this user's connections.
    #[serde(default)]
    pub user: Option<String>,
}

/// Arguments of a `presence` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceCommand {
    pub request_id: u64,
    pub topic: String,
}

/// `push {json}`: deliver a message.
pub const CMD_PUSH: &str = "push";
/// `list {json}`: report some connections.
pub const CMD_LIST: &str = "list";
/// `presence {json}`: report a topic's subscribers by user.
pub const CMD_PRESENCE: &str = "presence";
/// `history {json}`: a topic's history, for the subscribers recovering it.
pub const CMD_HISTORY: &str = "history";
/// `tls_reload "PEM"`: new handshakes use this certificate and key (the
/// supervisor read and checked them after a SIGHUP or a change of the files).
pub const CMD_TLS_RELOAD: &str = "tls_reload";
/// `notices [json]`: tell the topics' subscribers who joined or left.
pub const CMD_NOTICES: &str = "notices";
/// `upstream_done N`: the backend took (or refused for good) N more of
/// this worker's messages, its oldest (the worker knows their bytes).
pub const CMD_UPSTREAM_DONE: &str = "upstream_done";
/// Clients are resuming somewhere on this server: note accepts for the
/// seam (see `worker/seam.rs`), also on a worker that has read no resume yet.
pub const CMD_RESUMING: &str = "resuming";

/// What a server worker hears from its supervisor beyond the common
/// commands.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerCommand {
    Push(super::push::PushCommand),
    List(ListCommand),
    Presence(PresenceCommand),
    History(super::history::Slice),
    TlsReload(crate::tls::files::Pem),
    Resuming,
    UpstreamDone(u64),
    Notices(Vec<crate::proto::push::Notice>),
}

impl ServerCommand {
    /// A role command's word and argument; None when it is not ours or
    /// its argument does not parse.
    pub fn parse(word: &str, arg: &str) -> Option<ServerCommand> {
        match word {
            CMD_PUSH => serde_json::from_str(arg).ok().map(ServerCommand::Push),
            CMD_LIST => serde_json::from_str(arg).ok().map(ServerCommand::List),
            CMD_PRESENCE => serde_json::from_str(arg).ok().map(ServerCommand::Presence),
            CMD_HISTORY => serde_json::from_str(arg).ok().map(ServerCommand::History),
            CMD_TLS_RELOAD => serde_json::from_str(arg).ok().map(ServerCommand::TlsReload),
            CMD_RESUMING => Some(ServerCommand::Resuming),
            CMD_UPSTREAM_DONE => arg.trim().parse().ok().map(ServerCommand::UpstreamDone),
            CMD_NOTICES => serde_json::from_str(arg).ok().map(ServerCommand::Notices),
            _ => None,
        }
    }
}

/// What arrives on a server supervisor's channel.
#[derive(Debug)]
pub enum ServerEvent {
    Worker(usize, PoolEvent<ServerMsg>),
    /// An admin API request.
    Admin(crate::admin::Request),
    /// News from the cluster link.
    Cluster(crate::cluster::ClusterEvent),
    /// News from the `--upstream` sender.
    Upstream(super::upstream::UpstreamEvent),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_survive_the_pipe() {
        let mut s = ServerSnapshot { worker: 3, budget: 7, ..Default::default() };
        s.accepted = 9;
        s.close_reasons.insert("peer_closed".into(), 2);
        let line = serde_json::to_string(&ServerMsg::Server(Box::new(s))).unwrap();
        let ServerMsg::Server(back) = serde_json::from_str::<ServerMsg>(&line).unwrap() else { panic!("{line}") };
        assert_eq!((back.worker, back.budget, back.accepted, back.close_reasons["peer_closed"]), (3, 7, 9, 2));
        let fatal: ServerMsg = serde_json::from_str(r#"{"event":"fatal","worker":18446744073709551615,"message":"m"}"#).unwrap();
        assert!(matches!(fatal, ServerMsg::Fatal { message, .. } if message == "m"));
    }
}
