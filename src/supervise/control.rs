//! Messages between workers and their supervisor.
//!
//! Workers write one JSON object per line to their stdout (a pipe the
//! supervisor reads) and never print anything else there; the supervisor
//! writes one command per line to the worker's stdin. Counters in a
//! snapshot are cumulative totals, so the supervisor only keeps the latest
//! snapshot per worker; histograms are per-interval deltas to be merged.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;

/// Worker -> supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerMsg {
    /// The worker is set up (listening, or ready to connect).
    Ready {
        worker: usize,
        pid: u32,
        fd_limit: u64,
    },
    Server(Box<ServerSnapshot>),
    Client(Box<ClientSnapshot>),
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
    /// Answer to a `list` command.
    Connections {
        worker: usize,
        request_id: u64,
        list: Vec<ConnInfo>,
    },
}

/// One connection as `GET /connections` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnInfo {
    pub id: u64,
    pub worker: usize,
    pub peer: String,
    pub age_s: u64,
    pub topics: Vec<String>,
}

/// Arguments of a `list` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCommand {
    pub request_id: u64,
    pub limit: usize,
    pub topic: Option<String>,
}

/// Supervisor -> worker commands, one per line on the worker's stdin.
pub const CMD_CLOSE: &str = "close";
pub const CMD_STOP: &str = "stop";
/// Elastic server worker: leave the accept group (a sibling has room).
pub const CMD_LEAVE: &str = "leave";
/// `push {json}`: deliver a message (server workers).
pub const CMD_PUSH: &str = "push";
/// `list {json}`: report some connections (server workers).
pub const CMD_LIST: &str = "list";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerSnapshot {
    pub worker: usize,
    /// Connections open right now.
    pub active: u64,
    pub accepted: u64,
    pub closed: u64,
    /// Why connections ended: "peer_closed", "ECONNRESET", "idle_timeout",
    /// "bad_frame_too_long", ...
    pub close_reasons: BTreeMap<String, u64>,
    /// accept() failures by errno ("EMFILE", "ENFILE", ...).
    pub accept_errors: BTreeMap<String, u64>,
    pub frames_in: u64,
    pub frames_out: u64,
    /// Requests received, answered, and refused by a full pool queue.
    pub requests: u64,
    pub replies: u64,
    pub rejected: u64,
    /// Sum of the business service time actually applied to answered
    /// requests (µs): mean = applied_service_us / replies.
    pub applied_service_us: u64,
    pub threads: u64,
    pub rss_bytes: u64,
    pub cpu_us: u64,
    /// Whether this worker accepts from the shared listeners.
    pub accepting: bool,
    /// Connections this worker may hold before it leaves the group.
    pub budget: u64,
    /// Last snapshot before the worker exits.
    /// Push commands received, connections written or queued to, and
    /// connections closed as slow consumers.
    pub push_commands: u64,
    /// Connections closed at accept because the server was at
    /// --max-connections.
    pub refused_over_cap: u64,
    /// WebSocket handshakes completed.
    pub ws_upgrades: u64,
    pub push_delivered: u64,
    pub push_dropped: u64,
    /// Topics with subscribers, and subscriptions, right now.
    pub topics: u64,
    pub subscriptions: u64,
    /// Publish-to-write latency counts per bucket of
    /// `server::push::LATENCY_BUCKETS_MS` (+Inf last), and their sum (µs).
    pub push_latency_buckets: Vec<u64>,
    pub push_latency_sum_us: u64,
    /// Last snapshot before the worker exits.
    pub last: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientSnapshot {
    pub worker: usize,
    /// Connections this worker is responsible for.
    pub planned: u64,
    /// connect() calls made so far.
    pub attempted: u64,
    /// Connections open right now.
    pub established: u64,
    /// Connections that ever completed the handshake.
    pub established_total: u64,
    /// Handshakes in flight.
    pub connecting: u64,
    /// Failed connection attempts by kind ("ECONNREFUSED", "timeout", ...).
    pub failed: BTreeMap<String, u64>,
    /// Established connections the server (or network) ended, by reason.
    pub lost: BTreeMap<String, u64>,
    /// Lost connections that never received a single answer (a protocol
    /// mismatch looks like this).
    pub lost_unanswered: u64,
    /// Lost connections opened again (`--reconnect`).
    pub reconnects: u64,
    /// Heartbeats whose connection closed before they were answered.
    pub heartbeats_abandoned: u64,
    /// `--churn`: connections closed on purpose, reopened, and reopen
    /// attempts that failed (by kind).
    pub churn_closed: u64,
    pub churn_reopened: u64,
    pub churn_failed: BTreeMap<String, u64>,
    /// Failed reconnect attempts by kind (retried with back-off).
    pub reconnect_failed: BTreeMap<String, u64>,
    pub heartbeats_sent: u64,
    pub heartbeats_answered: u64,
    /// `--protocol raw`: bytes received.
    pub raw_bytes_in: u64,
    /// `--protocol raw`: whole messages received (echoed units or codec frames).
    pub raw_messages_in: u64,
    pub requests_sent: u64,
    /// Replies received (any latency).
    pub replies: u64,
    /// Requests the server refused (its pool queue was full).
    pub rejected: u64,
    /// Replies that came later than --request-timeout.
    pub late: u64,
    /// Replies whose echoed timestamp was not one we sent.
    pub bad_echo: u64,
    /// HTTP responses by status class ("2xx", "4xx", ...).
    pub http_status: BTreeMap<String, u64>,
    /// Interval histogram of request latency from the intended send time
    /// (µs), base64 HdrHistogram V2.
    pub request_hist: String,
    /// CLOCK_MONOTONIC µs when the last planned connection resolved.
    pub ramp_done_at_us: Option<u64>,
    /// Interval histogram of handshake times (µs), base64 HdrHistogram V2.
    pub connect_hist: String,
    /// Interval histogram of heartbeat round trips from the intended send
    /// time (µs), base64 HdrHistogram V2.
    pub rtt_hist: String,
    pub rss_bytes: u64,
    pub cpu_us: u64,
    /// Pushes received, duplicates, and sequence numbers skipped.
    pub push_received: u64,
    pub push_duplicates: u64,
    pub push_gaps: u64,
    /// Pushes per topic ("*" for broadcasts), capped in number.
    pub push_topics: BTreeMap<String, u64>,
    /// Per sequence number: (arrivals, latest arrival CLOCK_REALTIME µs).
    /// Sent as a list: integer map keys do not survive serde's internally
    /// tagged enums.
    #[serde(with = "seq_map")]
    pub push_by_seq: BTreeMap<u64, (u64, u64)>,
    /// Interval histogram of push delivery latency (µs), base64 HdrHistogram V2.
    pub push_hist: String,
    /// CLOCK_MONOTONIC µs when this snapshot was taken (exact rates).
    pub at_us: u64,
    pub last: bool,
}

impl ServerSnapshot {
    /// Count one answered request and the service time it actually got.
    pub fn count_reply(&mut self, applied: std::time::Duration) {
        self.replies += 1;
        self.frames_out += 1;
        self.applied_service_us += applied.as_micros() as u64;
    }
}

/// Read the worker's config: the first line of its stdin, written by the
/// supervisor before anything else. Read byte by byte so nothing after
/// the line (commands) is consumed here.
pub fn read_config() -> std::io::Result<String> {
    let mut line = Vec::with_capacity(4096);
    let mut b = [0u8; 1];
    loop {
        // SAFETY: read into a one-byte stack buffer we own.
        let n = unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
        match n {
            1 if b[0] == b'\n' => break,
            1 => line.push(b[0]),
            0 => break,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Send one message to the supervisor. A broken pipe means the supervisor
/// is gone; the worker then has no reason to live.
pub fn emit(msg: &WorkerMsg) {
    let mut line = serde_json::to_vec(msg).expect("worker messages serialize");
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    if out.write_all(&line).and_then(|_| out.flush()).is_err() {
        std::process::exit(3);
    }
}

/// Merge the per-kind counters of many workers.
pub fn merge_counts<'a>(maps: impl Iterator<Item = &'a BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in maps {
        for (k, v) in m {
            *out.entry(k.clone()).or_insert(0) += v;
        }
    }
    out
}

/// What a worker hears from its supervisor.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// Finish gracefully: drain, close connections, send the last snapshot.
    Close,
    /// Stop now (also sent when stdin reaches EOF: the supervisor is gone).
    Stop,
    /// Leave the accept group (server workers at their budget).
    Leave,
    Push(crate::server::push::PushCommand),
    List(ListCommand),
}

/// Non-blocking reader of the worker's stdin, registered with the
/// worker's reactor so commands arrive as readiness events.
pub struct CommandReader {
    buf: Vec<u8>,
}

impl CommandReader {
    pub fn register(registry: &mio::Registry, token: mio::Token) -> std::io::Result<CommandReader> {
        // SAFETY: fcntl on our own stdin descriptor.
        unsafe {
            let flags = libc::fcntl(0, libc::F_GETFL);
            libc::fcntl(0, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        registry.register(&mut mio::unix::SourceFd(&0), token, mio::Interest::READABLE)?;
        Ok(CommandReader { buf: Vec::new() })
    }

    /// Read what is there; return the commands received.
    pub fn poll(&mut self) -> Vec<Command> {
        let mut cmds = Vec::new();
        let mut chunk = [0u8; 256];
        loop {
            // SAFETY: read into a stack buffer we own.
            let n = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n == 0 {
                cmds.push(Command::Stop);
                break;
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    cmds.push(Command::Stop);
                }
                break;
            }
            self.buf.extend_from_slice(&chunk[..n as usize]);
        }
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = std::str::from_utf8(&line).unwrap_or("").trim();
            let (word, arg) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                CMD_CLOSE => cmds.push(Command::Close),
                CMD_STOP => cmds.push(Command::Stop),
                CMD_LEAVE => cmds.push(Command::Leave),
                CMD_PUSH => cmds.extend(serde_json::from_str(arg).ok().map(Command::Push)),
                CMD_LIST => cmds.extend(serde_json::from_str(arg).ok().map(Command::List)),
                _ => {}
            }
        }
        cmds
    }
}

/// A `BTreeMap<u64, (u64, u64)>` as a list of `[key, a, b]`.
mod seq_map {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer>(m: &BTreeMap<u64, (u64, u64)>, s: S) -> Result<S::Ok, S::Error> {
        m.iter().map(|(k, (a, b))| (*k, *a, *b)).collect::<Vec<_>>().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, (u64, u64)>, D::Error> {
        Ok(Vec::<(u64, u64, u64)>::deserialize(d)?.into_iter().map(|(k, a, b)| (k, (a, b))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_survive_the_pipe() {
        let mut s = ClientSnapshot { worker: 3, push_received: 2, ..Default::default() };
        s.push_by_seq.insert(7, (2, 99));
        s.push_topics.insert("*".into(), 2);
        let line = serde_json::to_string(&WorkerMsg::Client(Box::new(s))).unwrap();
        let WorkerMsg::Client(back) = serde_json::from_str::<WorkerMsg>(&line).unwrap() else { panic!("{line}") };
        assert_eq!((back.worker, back.push_by_seq[&7], back.push_topics["*"]), (3, (2, 99), 2));
    }
}
