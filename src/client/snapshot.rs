//! What a client worker tells its supervisor: the counters (declared
//! once, below), the interval histograms and push bookkeeping that travel
//! beside them, and the worker's messages.

use crate::supervise::PoolEvent;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

crate::counters! {
    /// Everything a client worker counts. One line per counter: the
    /// snapshot, the totals, `/metrics` and `--json` all come from here.
    pub struct ClientCounters {
        planned: counter "planned" "Connections this client is to open",
        attempted: counter "attempted" "connect() calls made",
        open: gauge "connections" "Connections open now",
        established_total: counter "established" "Connections that completed the handshake",
        connecting: gauge "connecting" "Handshakes in flight",
        queued: gauge "queued" "Planned connections not started yet: waiting for their turn in the ramp (its pace, or the cap on handshakes in flight)",
        not_attempted_by: by("reason") "not_attempted" "Planned connections never attempted, by reason (ramp_deadline: the ramp's deadline passed before their turn; run_closed: the run closed first; worker_stopped, worker_crashed: their worker ended first)",
        tls_handshakes: counter "tls_handshakes" "TLS handshakes completed",
        tls_resumed: counter "tls_resumed" "TLS handshakes that resumed a session with a ticket from an earlier one",
        failed: by("kind") "failed" "Connection attempts that failed, by kind (ECONNREFUSED, timeout, ...)",
        lost: by("reason") "lost" "Established connections the server or network ended, by reason",
        lost_unanswered: counter "lost_unanswered" "Lost connections that never received an answer (a protocol mismatch looks like this)",
        reconnects: counter "reconnects" "Lost connections opened again (--reconnect)",
        goaways: counter "goaways" "Connections a draining server closed with a reconnect hint (with --reconnect: moved, not lost)",
        outage_closed: counter "outage_closed" "Connections closed at once on purpose by a bench's outage (reopened and resumed on its rejoin; not lost)",
        reconnect_failed: by("kind") "reconnect_failed" "Failed reconnect attempts, by kind (retried with back-off)",
        churn_closed: counter "churn_closed" "Connections closed on purpose (--churn)",
        churn_reopened: counter "churn_reopened" "Connections reopened after a churn close",
        churn_failed: by("kind") "churn_failed" "Churn reopen attempts that failed, by kind",
        stage_closed: counter "stage_closed" "Connections closed on purpose by a --stages step down (not lost)",
        stage_requests: by("stage") "stage_requests" "--stages: requests sent in each stage (stage1, stage2, ...), by the workers' own clocks",
        heartbeats_sent: counter "heartbeats_sent" "Heartbeats sent",
        heartbeats_answered: counter "heartbeats_answered" "Heartbeats answered",
        heartbeats_abandoned: counter "heartbeats_abandoned" "Heartbeats whose connection closed before they were answered",
        heartbeats_unanswered: counter "heartbeats_unanswered" "Heartbeats answered later than --request-timeout, or still unanswered when the run closed their connection (after its drain)",
        requests_sent: counter "requests_sent" "Requests sent",
        requests_unacknowledged: counter "requests_unacknowledged" "Requests sent that nothing answers (MQTT QoS 0 PUBLISH): not timed, never timeouts",
        requests_abandoned: counter "requests_abandoned" "Requests whose connection closed before they were answered or refused",
        replies: counter "replies" "Replies received (any latency)",
        rejected: counter "rejections" "Requests the server refused (its queue was full)",
        late: counter "late_replies" "Replies that came later than --request-timeout",
        bad_echo: counter "bad_echoes" "Replies whose echoed timestamp was not one we sent",
        http_status: by("class") "http_responses" "HTTP responses, by status class (2xx, 4xx, ...)",
        raw_bytes_in: counter "raw_received_bytes" "--protocol raw: bytes received",
        raw_messages_in: counter "raw_messages" "--protocol raw: whole messages received (echoed units or codec frames)",
        ws_deflate_sent: counter "ws_deflate_messages_sent" "--ws-deflate: messages sent compressed (counted at the connection's next read)",
        ws_deflate_sent_message_bytes: counter "ws_deflate_sent_message_bytes" "--ws-deflate: bytes of the messages sent compressed, before compression",
        ws_deflate_sent_wire_bytes: counter "ws_deflate_sent_wire_bytes" "--ws-deflate: bytes of the messages sent compressed, as on the wire (payload)",
        ws_inflated: counter "ws_inflated_messages" "--ws-deflate: compressed messages received and inflated",
        ws_inflated_wire_bytes: counter "ws_inflated_wire_bytes" "--ws-deflate: bytes of the compressed messages received, as on the wire (payload)",
        ws_inflated_message_bytes: counter "ws_inflated_message_bytes" "--ws-deflate: bytes of the compressed messages received, once inflated",
        mqtt_subscriptions: by("result") "mqtt_subscriptions" "--protocol mqtt: topic filters the broker's SUBACK granted or refused",
        mqtt_published: by("qos") "mqtt_published" "--protocol mqtt: PUBLISHes sent (--request-rate), by QoS",
        mqtt_received: by("qos") "mqtt_received" "--protocol mqtt: stamped PUBLISHes received (a QoS 2 one once, however often the broker resent it), by the QoS they came with",
        mqtt_lost: by("qos") "mqtt_lost" "--protocol mqtt: stamped messages missing from one publisher's sequence on one topic (a gap before a later one), by the QoS of the later one",
        mqtt_duplicated: by("qos") "mqtt_duplicated" "--protocol mqtt: stamped messages received again (at or before the last of their publisher's sequence on that topic), by QoS",
        mqtt_unstamped: counter "mqtt_unstamped" "--protocol mqtt: PUBLISHes received without a megaconn stamp (other publishers): counted as pushes, not timed",
        mqtt_untracked: counter "mqtt_untracked" "--protocol mqtt: stamped PUBLISHes timed but not checked for loss or repeats (their connection already tracked its most publisher streams)",
        mqtt_topic_aliases_in: counter "mqtt_topic_aliases_in" "--protocol mqtt --mqtt-topic-alias-maximum: PUBLISHes the broker sent with a topic alias and no topic, resolved to the topic it set",
        mqtt_qos2_resent_in: counter "mqtt_qos2_resent_in" "--protocol mqtt: QoS 2 PUBLISHes the broker sent again under a packet id still awaiting its PUBREL: answered PUBREC again, not delivered twice",
        push_received: counter "pushes" "Pushes received",
        push_duplicates: counter "push_duplicates" "Pushes received more than once",
        push_gaps: counter "push_gaps" "Push offsets skipped (and, on a resume the server could not serve, the messages it no longer had)",
        push_epoch_changes: counter "push_epoch_changes" "Pushes that came in a new epoch: the server lost that topic's history (e.g. restarted without a durable store)",
        resumes: by("result") "resumes" "Subscriptions resumed after a reconnect, by result (recovered: every missed message came; lost: the history did not reach back)",
        push_topics: by("topic") "pushes_by_topic" "Pushes received per topic (* for broadcasts; capped in number)",
        rss_bytes: bytes "resident_memory" "Resident memory of the worker processes",
        cpu_us: micros "cpu" "CPU time of the worker processes",
    }
}

/// One worker's state, sent every stats interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ClientSnapshot {
    pub(crate) worker: usize,
    #[serde(flatten)]
    pub(crate) counters: ClientCounters,
    /// Interval histogram of request latency from the intended send time
    /// (µs), base64 HdrHistogram V2.
    pub(crate) request_hist: String,
    /// The checkpoint written with this snapshot (`--reconnect`; 0: none).
    #[serde(default)]
    pub(crate) checkpoint: u64,
    /// CLOCK_MONOTONIC µs when the last planned connection resolved.
    pub(crate) ramp_done_at_us: Option<u64>,
    /// Interval histogram of handshake times (µs), base64 HdrHistogram V2.
    pub(crate) connect_hist: String,
    /// The same per handshake stage ("tcp", "tls", "upgrade"), for the
    /// stages this worker went through.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) stage_hists: BTreeMap<String, String>,
    /// Interval histogram of heartbeat round trips from the intended send
    /// time (µs), base64 HdrHistogram V2.
    pub(crate) rtt_hist: String,
    /// Per sequence number: (arrivals, latest arrival CLOCK_REALTIME µs).
    /// Sent as a list: integer map keys do not survive serde's internally
    /// tagged enums.
    #[serde(with = "seq_map")]
    pub(crate) push_by_seq: BTreeMap<u64, (u64, u64)>,
    /// Reconnects by second from the start of the ramp (so far; a list
    /// of pairs on the wire, as `push_by_seq`): a reconnect storm's shape.
    #[serde(default, with = "count_map")]
    pub(crate) reconnects_by_s: BTreeMap<u64, u64>,
    /// Interval histogram of push delivery latency (µs), base64 HdrHistogram V2.
    pub(crate) push_hist: String,
    /// Interval histogram of re-homing (µs): from a draining server's
    /// reconnect hint to established again (elsewhere).
    #[serde(default)]
    pub(crate) rehome_hist: String,
    /// CLOCK_MONOTONIC µs when this snapshot was taken (exact rates).
    pub(crate) at_us: u64,
    pub(crate) last: bool,
}

crate::counters_deref!(ClientSnapshot => ClientCounters);

/// Client worker -> supervisor, one JSON object per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum ClientMsg {
    /// The worker is ready to connect.
    Ready {
        worker: usize,
        pid: u32,
        fd_limit: u64,
    },
    Client(Box<ClientSnapshot>),
    /// The worker cannot go on; the message names the cause and the fix.
    Fatal {
        worker: usize,
        message: String,
    },
}

/// What arrives on a client supervisor's channel.
#[derive(Debug)]
pub(crate) enum ClientEvent {
    Worker(usize, PoolEvent<ClientMsg>),
    /// A request to the client's read-only admin API.
    Admin(crate::admin::Request),
}

/// A `BTreeMap<u64, (u64, u64)>` as a list of `[key, a, b]`.
mod seq_map {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub(super) fn serialize<S: Serializer>(m: &BTreeMap<u64, (u64, u64)>, s: S) -> Result<S::Ok, S::Error> {
        m.iter().map(|(k, (a, b))| (*k, *a, *b)).collect::<Vec<_>>().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, (u64, u64)>, D::Error> {
        Ok(Vec::<(u64, u64, u64)>::deserialize(d)?.into_iter().map(|(k, a, b)| (k, (a, b))).collect())
    }
}

mod count_map {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub(super) fn serialize<S: Serializer>(m: &BTreeMap<u64, u64>, s: S) -> Result<S::Ok, S::Error> {
        m.iter().map(|(k, n)| (*k, *n)).collect::<Vec<_>>().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, u64>, D::Error> {
        Ok(Vec::<(u64, u64)>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_survive_the_pipe() {
        let mut s = ClientSnapshot { worker: 3, ..Default::default() };
        s.push_received = 2;
        s.push_by_seq.insert(7, (2, 99));
        s.reconnects_by_s.insert(12, 5);
        s.push_topics.insert("*".into(), 2);
        let line = serde_json::to_string(&ClientMsg::Client(Box::new(s))).unwrap();
        let ClientMsg::Client(back) = serde_json::from_str::<ClientMsg>(&line).unwrap() else { panic!("{line}") };
        assert_eq!((back.worker, back.push_by_seq[&7], back.push_topics["*"], back.push_received), (3, (2, 99), 2, 2));
        assert_eq!(back.reconnects_by_s[&12], 5);
    }
}
