//! What a server worker counts: the counters (declared once, below) and
//! the snapshot that carries them to the supervisor (the messages and
//! commands around it are in `commands.rs`).
//! Counters in a snapshot are cumulative, so the supervisor keeps only the
//! latest per worker.

use serde::{Deserialize, Serialize};

crate::counters! {
    /// Everything a server worker counts. One line per counter: the
    /// snapshot, the totals, `/metrics` and `--json` all come from here.
    pub struct ServerCounters {
        active: gauge "connections" "Connections open now",
        active_by_protocol: levels("protocol") "connections_by_protocol" "Connections open now, by the protocol of the port they came in on (framed, echo8, discard, http, ws, mqtt; +tls on TLS ports)",
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
        ws_deflate_negotiated: counter "ws_deflate_negotiated" "WebSocket handshakes that negotiated permessage-deflate (--ws-deflate on: no context takeover either way; takeover: also counted in ws_deflate_takeover when either side keeps context)",
        ws_deflate_takeover: counter "ws_deflate_takeover" "WebSocket handshakes that negotiated context takeover in either direction (--ws-deflate takeover)",
        ws_deflate_small_window: counter "ws_deflate_small_window" "WebSocket handshakes whose client asked for a server window under 2^15 (server_max_window_bits=9..14): their messages are compressed for them alone, still without context",
        ws_deflate_contexts: gauge "ws_deflate_contexts" "Connections open now with compression context of their own (--ws-deflate takeover; each holds its zlib state from its first message)",
        ws_deflate_calls: counter "ws_deflate_calls" "Messages compressed (a push once per worker whatever its audience, an echo once; with --ws-deflate takeover, a push once per connection that keeps context)",
        ws_deflate_bytes_before: counter "ws_deflate_bytes_before" "Bytes of the messages compressed, before compression",
        ws_deflate_bytes_after: counter "ws_deflate_bytes_after" "Bytes of the messages compressed, after compression (payload, without frame headers)",
        ws_compressed_out: counter "ws_compressed_messages_out" "Compressed messages (RSV1) written or queued to connections",
        ws_inflated_messages: counter "ws_inflated_messages" "Compressed messages received from clients and inflated",
        ws_inflate_bytes_before: counter "ws_inflate_bytes_before" "Bytes of the compressed messages received, as on the wire (payload)",
        ws_inflate_bytes_after: counter "ws_inflate_bytes_after" "Bytes of the compressed messages received, once inflated",
        ws_inflate_refused: by("reason") "ws_inflate_refused" "Compressed messages refused, by reason (too_big: inflated past --max-message-bytes, closed 1009; corrupt: not deflate data, closed 1007)",
        mqtt_connects: by("version") "mqtt_connects" "MQTT CONNECTs accepted, by protocol version (3.1.1, 5.0)",
        mqtt_publishes_in: by("qos") "mqtt_publishes_in" "MQTT PUBLISH packets from clients handed to the topic space, by QoS (0, 1, 2; a QoS 2 one once per packet id)",
        mqtt_publish_bytes_in: counter "mqtt_publish_bytes_in" "Payload bytes of the MQTT PUBLISH packets from clients handed to the topic space ($SYS/broker/publish/bytes/received)",
        mqtt_publish_bytes_out: counter "mqtt_publish_bytes_out" "Payload bytes of the PUBLISH packets written or queued to MQTT subscribers ($SYS/broker/publish/bytes/sent)",
        mqtt_publishes_out: by("qos") "mqtt_publishes_out" "PUBLISH packets written or queued to MQTT subscribers, by QoS (0, 1, 2; a QoS 1 or 2 one when it enters the inflight window)",
        mqtt_acks_in: by("kind") "mqtt_acks_in" "MQTT acknowledgements received from clients, by kind (puback, pubrec, pubcomp of deliveries; pubrel of their QoS 2 publishes)",
        mqtt_unknown_packet_ids: by("kind") "mqtt_unknown_packet_ids" "MQTT acknowledgements naming no packet id at that stage, by kind (v5: PUBREC answered PUBREL 0x92, PUBREL answered PUBCOMP 0x92)",
        mqtt_qos2_resent: counter "mqtt_qos2_resent" "QoS 2 PUBLISH packets a client sent again while their PUBREL was due: answered PUBREC, not forwarded again",
        mqtt_held: counter "mqtt_deliveries_held" "QoS 1 and 2 deliveries held behind a client's full inflight window, sent as its acknowledgements make room (while any are, an io_uring worker's --io-batch-wait is not stretched)",
        mqtt_inflight_dropped: by("reason") "mqtt_inflight_dropped" "QoS 1 and 2 deliveries dropped for a client whose window and queue were full, by reason (queue_full: --mqtt-queue, queue_bytes: --mqtt-queue-bytes)",
        mqtt_authz_waiting: gauge "mqtt_authz_waiting" "MQTT connections whose packet waits for the --mqtt-authz-http backend now (the connection not read meanwhile)",
        mqtt_authz_asked: counter "mqtt_authz_asked" "Questions a worker sent the --mqtt-authz-http backend (through the supervisor): a publish's, a subscription filter's or a will's decision it did not have",
        mqtt_resumed_refused: counter "mqtt_resumed_refused" "Messages of a resumed MQTT session not sent because the client's token (its topics claim now) does not permit their topic",
        mqtt_expired_dropped: counter "mqtt_expired_dropped" "MQTT deliveries dropped because the v5 Message Expiry Interval passed before they went out (at delivery, or held behind the window)",
        mqtt_topic_aliases_out: by("kind") "mqtt_topic_aliases_out" "PUBLISH packets sent to v5 clients with a topic alias the server chose, by kind (set: with the topic, naming it; used: the alias alone, without the topic)",
        mqtt_retained_out: counter "mqtt_retained_out" "Retained messages sent to MQTT clients for their new subscriptions",
        mqtt_acl_read_denied: counter "mqtt_acl_read_denied" "Messages (live, retained or resumed) not sent to an MQTT client because --mqtt-acl-file gives it no read access to their topic (its subscription was granted, as mosquitto grants it)",
        mqtt_wills_sent: counter "mqtt_wills_sent" "MQTT will messages published: connections that ended without DISCONNECT (or with v5 reason 0x04)",
        mqtt_publish_refused: by("reason") "mqtt_publish_refused" "MQTT publishes refused (v5 QoS 1: PUBACK with the reason code; else the connection closes), by reason (bad_topic, not_permitted, mqtt_payload_too_large, mqtt_publish_queue_full)",
        sse_streams: counter "sse_streams" "Server-Sent Event streams opened (GET with Accept: text/event-stream on a WebSocket or HTTP port)",
        sse_encodes: counter "sse_encodes" "Pushes encoded as a Server-Sent Event's data: once per push per worker whatever its event streams (a replayed one once per stream resuming)",
        goaways: counter "goaways" "Connections closed by a drain (SIGTERM, --drain-period) after a reconnect hint",
        tls_handshakes: counter "tls_handshakes" "TLS handshakes completed (full and resumed)",
        tls_resumed: counter "tls_resumed" "TLS handshakes that resumed a session (ticket)",
        tls_handshake_failures: by("reason") "tls_handshake_failures" "TLS connections closed before their handshake finished, by reason (tls_timeout, tls_plaintext, tls_eof, tls_alert_<name>, tls_bad_message, ...)",
        auth_key_failures: counter "auth_key_failures" "JWT keys sent after a SIGHUP that a worker could not use (the supervisor read and checked them first, so this stays 0); the key in force stays",
        tls_reload_failures: counter "tls_reload_failures" "Certificate reloads a worker could not apply (the supervisor checked them first, so this stays 0); the previous certificate stays in use",
        commands_refused: counter "commands_refused" "Supervisor commands a worker could not parse (a bug; each is logged)",
        bus_frames_out: counter "bus_frames_out" "Frames the workers wrote to the broker shards (publishes, interest, retained and history questions)",
        bus_frames_in: counter "bus_frames_in" "Frames the broker shards wrote to the workers (deliveries, retained and history answers)",
        retained_not_held: counter "retained_not_held" "New subscriptions' retained asks past the 4,096 a worker holds in flight: such a subscription may get a retained message published meanwhile twice (live and in its answer)",
        bus_paused: counter "bus_paused" "Times a worker stopped reading a connection because more than 8 MiB waited for a broker shard (read again once below 2 MiB)",
        frames_in: counter "frames_in" "Frames received",
        frames_out: counter "frames_out" "Frames sent",
        bytes_received: counter "bytes_received" "Bytes read from connections (after TLS: what the protocols read)",
        bytes_sent: counter "bytes_sent" "Bytes handed to connections to send (before TLS: what the protocols wrote), replies and pushes",
        requests: counter "requests" "Requests received",
        replies: counter "replies" "Requests answered",
        rejected: counter "rejections" "Requests refused by a full business queue",
        applied_service_us: micros "business_service_applied" "Business service time applied to answered requests (mean: divide by replies)",
        push_commands: counter "push_commands" "Push commands carried out by the workers (one per worker per publish)",
        push_delivered: counter "push_delivered" "Pushes written or queued to a connection",
        push_delivered_bytes: counter "push_delivered_bytes" "Payload bytes of the topic messages, broadcasts and unicasts written or queued to connections (framing not counted)",
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
pub(crate) struct ServerSnapshot {
    pub(crate) worker: usize,
    #[serde(flatten)]
    pub(crate) counters: ServerCounters,
    /// Whether this worker accepts from the shared listeners.
    pub(crate) accepting: bool,
    /// Connections this worker may hold before it leaves the group.
    pub(crate) budget: u64,
    /// Publish-to-write latency counts per bucket of
    /// `server::tables::topics::LATENCY_BUCKETS_MS` (+Inf last), and their sum (µs).
    pub(crate) push_latency_buckets: Vec<u64>,
    pub(crate) push_latency_sum_us: u64,
    /// Last snapshot before the worker exits.
    pub(crate) last: bool,
}

crate::counters_deref!(ServerSnapshot => ServerCounters);

impl ServerSnapshot {
    /// Count one answered request and the service time it actually got.
    pub(crate) fn count_reply(&mut self, applied: std::time::Duration) {
        self.replies += 1;
        self.frames_out += 1;
        self.applied_service_us += applied.as_micros() as u64;
    }
}
