//! The supervisor's side of the admin API: publishes handed to the broker
//! shard of their topic (`shard.rs`: it keeps the history and retained
//! message and routes to the workers with a subscriber), answers gathered
//! from the shard's word ([`Publisher::routed`]: its place, the workers it
//! went to) and those workers' acknowledgements, and connection listings.
//! In a cluster the same path delivers what other nodes published
//! (answered to the origin over NATS for a unicast, not at all for the
//! rest). The supervisor's thread sees a message only when someone waits
//! for its answer, a kept session's filter matches it, or the cluster
//! carries it: the rest goes worker to shard to worker.

use crate::admin::route::Request as Route;
use crate::admin::{Request, Response};
use crate::cluster::RemoteAnswer;
use crate::proto::push::{wall_us, Position, Stream};
use crate::server::broker::history::MAX_REPLY_BYTES;
use crate::server::broker::shard::{Cmd, Shards};
use crate::server::commands::{ConnInfo, ListCommand, PresenceCommand, CMD_LIST, CMD_PRESENCE};
use crate::supervise::pool::Sent;
use crate::supervise::Pool;
use base64::Engine;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Longest a publish or listing waits for its workers.
const PENDING_TIMEOUT: Duration = Duration::from_secs(60);

enum Gather {
    /// Per worker (queued, dropped); messages whose target does not exist.
    Publish {
        per_worker: BTreeMap<usize, (u64, u64)>,
        not_found: u64,
        /// Per message: its offset (set when its shard routed it), its stream.
        seqs: Vec<u64>,
        streams: Vec<Stream>,
        publish_us: u64,
        /// Unicasts other nodes carried out (cluster).
        remote: Vec<RemoteAnswer>,
        /// Sent to users' connections: none reached is a 404.
        users: bool,
        /// Those connections were closed (`/disconnect/user/SUB`).
        close: bool,
    },
    List {
        limit: usize,
        list: Vec<ConnInfo>,
        /// A worker's answer reached its byte budget.
        truncated: bool,
    },
    Presence {
        topic: String,
        limit: usize,
        /// user -> (connections, info)
        users: HashMap<String, (u64, Option<String>)>,
        anonymous: u64,
        /// Other nodes that answered (a cluster).
        nodes: Vec<String>,
    },
}

/// Who gets the answer of a publish or listing.
pub(crate) enum Answer {
    /// An admin API request waits for it.
    Admin(crate::admin::Reply),
    /// Another node's unicast: its NATS reply subject.
    Nats(String),
    /// A broadcast or topic message from another node: nobody.
    Quiet,
}

struct Pending {
    reply: Answer,
    /// Messages whose shard has not said yet where they went: publish id
    /// -> the message's index.
    routing: BTreeMap<u64, usize>,
    /// Acknowledgements still expected, per worker.
    waiting: BTreeMap<usize, u64>,
    /// Workers not waited for: stalled, or their command queue was full.
    stalled: BTreeSet<usize>,
    gather: Gather,
    started: Instant,
    /// Its pushes' publish ids (keys of `Publisher::owner`), removed with it.
    pids: Vec<u64>,
}

pub(crate) struct Publisher {
    next_id: u64,
    /// The broker shards: every topic's history, retained message and
    /// interest, and the routing of every message (`shard.rs`).
    pub shards: Shards,
    /// `--mqtt-retained`, `--mqtt-retained-bytes` (the node's, divided
    /// among the shards).
    pub retained_bounds: crate::server::broker::retained::RetainedConfig,
    /// `--max-push-bytes`.
    pub max_push: usize,
    /// MQTT client ids and kept sessions (`sessions.rs`): offline
    /// subscribers' messages are queued as their shard hands them here.
    pub sessions: crate::server::broker::sessions::Sessions,
    /// MQTT shared subscription groups as the cluster sees this node's
    /// (`shared.rs`): announced, and placed across nodes; each shard picks
    /// the member of its own copy.
    pub shared: crate::server::broker::shared::SharedGroups,
    /// Request id of each outstanding publish or listing.
    pending: HashMap<u64, Pending>,
    /// Which request a publish id belongs to.
    owner: HashMap<u64, u64>,
    /// Messages published so far.
    pub published: u64,
    /// This node's id in a cluster (listed ids become `NODE.ID`).
    pub node: Option<String>,
    /// Answers due to other nodes: (reply subject, body).
    pub nats_replies: Vec<(String, Vec<u8>)>,
    /// Workers that stopped reading or reporting: sent to, never waited for.
    stalled: BTreeSet<usize>,
    /// `--mqtt-retained-file` and `--mqtt-sessions-file`: the retained set
    /// and the kept sessions across restarts.
    retained_file: Option<crate::server::broker::retained_file::RetainedFile>,
    sessions_file: Option<crate::server::broker::sessions_file::SessionsFile>,
}

/// One user in a `/presence` answer.
#[derive(serde::Serialize)]
struct PresenceUser<'a> {
    user: &'a str,
    connections: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    info: Option<&'a serde_json::value::RawValue>,
}

/// Where a `/presence` answer comes from.
struct Where<'a> {
    node: Option<&'a str>,
    /// Other nodes that answered in time (a cluster).
    others: &'a [String],
    missing: &'a [usize],
    stalled: &'a BTreeSet<usize>,
}

/// The pseudo-worker a cluster's presence question waits on: the other
/// nodes' answers, all at once after `cluster::PRESENCE_WINDOW`.
pub(crate) const CLUSTER: usize = usize::MAX - 1;

/// `GET /presence`: users sorted by name, at most `limit` of them.
fn presence_body(topic: &str, limit: usize, users: &HashMap<String, (u64, Option<String>)>, anonymous: u64, w: &Where) -> String {
    #[derive(serde::Serialize)]
    struct Answer<'a> {
        topic: &'a str,
        connections: u64,
        users_total: usize,
        users: Vec<PresenceUser<'a>>,
        anonymous: u64,
        truncated: bool,
        missing_workers: &'a [usize],
        stalled_workers: &'a BTreeSet<usize>,
        node: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        other_nodes: Option<&'a [String]>,
    }
    let mut list: Vec<PresenceUser> = users
        .iter()
        .map(|(u, (n, info))| PresenceUser { user: u, connections: *n, info: info.as_deref().and_then(|i| serde_json::from_str(i).ok()) })
        .collect();
    list.sort_unstable_by(|a, b| a.user.cmp(b.user));
    list.truncate(limit);
    let a = Answer {
        topic,
        connections: anonymous + users.values().map(|(n, _)| n).sum::<u64>(),
        users_total: users.len(),
        truncated: users.len() > limit,
        users: list,
        anonymous,
        missing_workers: w.missing,
        stalled_workers: w.stalled,
        node: w.node,
        other_nodes: w.node.map(|_| w.others),
    };
    serde_json::to_string(&a).expect("serializes") + "\n"
}

impl Publisher {
    pub(crate) fn new(
        shards: Shards,
        max_push: usize,
        retained: crate::server::broker::retained::RetainedConfig,
        sessions: crate::server::broker::sessions::SessionsConfig,
    ) -> Publisher {
        Publisher {
            next_id: 0,
            shards,
            retained_bounds: retained,
            max_push,
            sessions: crate::server::broker::sessions::Sessions::new(sessions),
            shared: Default::default(),
            pending: HashMap::new(),
            owner: HashMap::new(),
            published: 0,
            node: None,
            nats_replies: Vec::new(),
            stalled: BTreeSet::new(),
            retained_file: None,
            sessions_file: None,
        }
    }

    /// A command to a worker's control lane refused (its queue full: a
    /// stopped worker), counted under `kind`.
    pub(crate) fn control_refused(&mut self, kind: &str) {
        crate::stats::counters::bump(&mut self.sessions.counters.control_full, kind);
    }

    /// `--mqtt-retained-file PATH`: the retained set read from it into
    /// the shards (how many messages), then written there. Err names the
    /// problem and the fix.
    pub(crate) fn open_retained_file(&mut self, path: &std::path::Path, every: Duration) -> Result<usize, String> {
        let (file, n) = crate::server::broker::retained_file::RetainedFile::open(path, every, &self.shards, self.max_push)?;
        self.retained_file = Some(file);
        Ok(n)
    }

    /// `--mqtt-sessions-file PATH`: the kept sessions read from it (how
    /// many), then written there. Err names the problem and the fix.
    pub(crate) fn open_sessions_file(&mut self, path: &std::path::Path, every: Duration) -> Result<usize, String> {
        let (file, n) = crate::server::broker::sessions_file::SessionsFile::open(path, every, &mut self.sessions)?;
        self.sessions_file = Some(file);
        Ok(n)
    }

    /// The state files' changed segments written, when their interval
    /// passed (`force`: at stop, whatever changed): what failed, each
    /// with the name of the operator's note it goes under.
    pub(crate) fn save_state(&mut self, force: bool) -> Vec<(&'static str, String)> {
        let mut failed = Vec::new();
        if let Some(file) = &mut self.retained_file {
            if let Err(e) = file.save(&self.shards, Instant::now(), force) {
                failed.push(("mqtt_retained_file", format!("{e}; tried again at the next --mqtt-retained-save-every")));
            }
        }
        if let Some(file) = &mut self.sessions_file {
            if let Err(e) = file.save(&mut self.sessions, Instant::now(), force) {
                failed.push(("mqtt_sessions_file", format!("{e}; tried again at the next --mqtt-sessions-save-every")));
            }
        }
        failed
    }

    /// One shard and nothing configured (unit tests).
    #[cfg(test)]
    pub(crate) fn for_test() -> Publisher {
        let shards = Shards::start(1, Default::default(), Default::default(), Default::default(), std::sync::Arc::new(|_| {})).expect("a shard");
        Publisher::new(shards, crate::proto::push::DEFAULT_MAX_PUSH, Default::default(), Default::default())
    }

    /// The broker's counters summed over its shards: the history, the
    /// retained set, the routing, and the shared groups (the members and
    /// groups as the supervisor counts them, the picks as the shards do).
    pub(crate) fn broker_counters(
        &self,
    ) -> (
        crate::server::broker::history::HistoryCounters,
        crate::server::broker::retained::RetainedCounters,
        crate::server::broker::core::CoreCounters,
        crate::server::broker::shared::SharedCounters,
    ) {
        let (mut h, mut r, mut c) = Default::default();
        let mut shared = self.shared.counters.clone();
        let (mut picked, mut elsewhere) = (0, 0);
        for i in 0..self.shards.len() {
            let core = self.shards.core(i);
            crate::server::broker::history::HistoryCounters::add(&mut h, &core.history.counters);
            crate::server::broker::retained::RetainedCounters::add(&mut r, &core.retained.counters);
            crate::server::broker::core::CoreCounters::add(&mut c, &core.counters);
            picked += core.shared.counters.picked;
            elsewhere += core.shared.counters.elsewhere;
        }
        shared.picked = picked;
        shared.elsewhere = elsewhere;
        (h, r, c, shared)
    }

    /// A message over `--max-push-bytes`: the answer that names the limit.
    /// Another node's retained message or clear, into its topic's shard
    /// (`sync`: from the answer to this node's sync).
    pub(crate) fn retained_from_node(&self, e: crate::cluster::retained::Entry, sync: bool) {
        let kept = crate::server::broker::retained::Kept::from_entry(&e);
        let i = self.shards.of(&e.topic);
        self.shards.send(i, Cmd::Retained { topic: e.topic, kept, sync });
    }

    /// `n` retained messages of other nodes' or for them left out, for
    /// `reason` (malformed, past the bounds, asks past the rate).
    pub(crate) fn retained_refused(&self, reason: &str, n: u64) {
        self.shards.retained_refused(reason, n);
    }

    /// This node's retained set and the clears it remembers, as another
    /// node's sync asks for them.
    pub(crate) fn retained_for_sync(&self) -> Vec<crate::server::broker::shard::RetainedCopy> {
        self.shards.retained_copy(crate::proto::push::wall_us(), true, |_| true)
    }

    /// Workers' recovery of `topic` after `after`, answered by its shard
    /// from this node's history (`worker` asked).
    pub(crate) fn answer_history(&self, worker: usize, topic: &str, after: u64) {
        self.shards.send_for(topic, Cmd::History { worker: worker as u32, topic: topic.to_string(), after });
    }

    /// What this node's history holds of `topic` for a recovery after
    /// `after`: whether it covers it (`followed`: the node follows the
    /// topic, so its history is up to date), and whether it has the
    /// topic's position (asked with `after` u64::MAX).
    pub(crate) fn history_here(&self, topic: &str, after: u64, followed: bool) -> (bool, bool) {
        let core = self.shards.core(self.shards.of(topic));
        let h = &core.history;
        let s = h.since(topic, after, 0, 0);
        let covered = followed && s.epoch != 0 && s.oldest <= after.saturating_add(1) && after <= s.head;
        (covered, after == u64::MAX && h.position(topic).epoch != 0)
    }

    /// The log's messages of `topic` into its shard's history, then the
    /// recoveries `waiting` for them answered.
    pub(crate) fn history_merged(&self, topic: String, messages: Vec<crate::server::broker::core::Message>, waiting: Vec<(u32, u64)>) {
        let i = self.shards.of(&topic);
        self.shards.send(i, Cmd::Merged { topic, messages, waiting });
    }

    /// `topic`'s history here forgotten, at once under its shard's lock
    /// (a recovery asked right after must not be answered from it).
    pub(crate) fn forget_history(&self, topic: &str) {
        self.shards.core(self.shards.of(topic)).history.forget(topic);
    }

    /// Which node delivers each shared group's copy of a message to `topic`.
    pub(crate) fn place_shared(&mut self, topic: &str, me: &str) -> crate::server::broker::shared::Placed {
        self.shared.place(topic, me)
    }

    /// Another node's shared groups heard.
    pub(crate) fn shared_heard(&mut self, node: &str, announce: crate::cluster::groups::Announce) {
        self.shared.heard(node, announce, std::time::Instant::now());
    }

    pub(crate) fn too_large(&self, messages: &[crate::admin::route::Message]) -> Option<Response> {
        let big = messages.iter().map(|m| m.data.len()).max().filter(|n| *n > self.max_push)?;
        Some(Response::error(413, format!("a message of {big} bytes; this server's --max-push-bytes is {} (at most 1MiB)", self.max_push)))
    }

    /// Start an admin API publish or listing; `live` are the workers that may answer.
    pub(crate) fn start(&mut self, req: Request, live: &[usize], pool: &mut Pool) {
        self.begin(req.route, Answer::Admin(req.reply), None, Vec::new(), live, pool);
    }

    /// Start a publish or listing: `publish_us` is the origin's stamp
    /// (now when None), `remote` what other nodes already answered.
    pub(crate) fn begin(&mut self, route: Route, reply: Answer, publish_us: Option<u64>, remote: Vec<RemoteAnswer>, live: &[usize], pool: &mut Pool) {
        self.next_id += 1;
        let rid = self.next_id;
        let mut waiting: BTreeMap<usize, u64> = BTreeMap::new();
        let mut stalled = BTreeSet::new();
        let mut pids = Vec::new();
        let known_stalled = self.stalled.clone();
        let quiet = matches!(reply, Answer::Quiet) && matches!(route, Route::Publish(_));
        // Send without waiting on a worker that stalled or could not take it.
        let mut send = |w: usize, line: &str, waiting: &mut BTreeMap<usize, u64>| match pool.send(w, line) {
            Sent::Queued if !known_stalled.contains(&w) => *waiting.entry(w).or_insert(0) += 1,
            Sent::Gone => {}
            _ => {
                stalled.insert(w);
            }
        };
        let gather = match route {
            Route::Connections { limit, topic, user } => {
                let cmd = serde_json::to_string(&ListCommand { request_id: rid, limit, topic, user }).expect("serializes");
                for &w in live {
                    send(w, &format!("{CMD_LIST} {cmd}"), &mut waiting);
                }
                Gather::List { limit, list: Vec::new(), truncated: false }
            }
            Route::Presence { topic, limit } => {
                let cmd = serde_json::to_string(&PresenceCommand { request_id: rid, topic: topic.clone() }).expect("serializes");
                for &w in live {
                    send(w, &format!("{CMD_PRESENCE} {cmd}"), &mut waiting);
                }
                Gather::Presence { topic, limit, users: HashMap::new(), anonymous: 0, nodes: Vec::new() }
            }
            Route::Publish(messages) => {
                let publish_us = publish_us.unwrap_or_else(wall_us);
                let users = messages.iter().any(|m| m.user.is_some());
                let close = messages.iter().any(|m| m.close);
                let streams: Vec<Stream> = messages.iter().map(|m| m.stream).collect();
                let mut routing = BTreeMap::new();
                for (index, m) in messages.into_iter().enumerate() {
                    // Nobody waits for a quiet publish's answer (another
                    // node's message): its pushes carry id 0, no worker
                    // answers them, and its shard says nothing.
                    let pid = if quiet {
                        0
                    } else {
                        self.next_id += 1;
                        self.owner.insert(self.next_id, rid);
                        pids.push(self.next_id);
                        routing.insert(self.next_id, index);
                        self.next_id
                    };
                    self.published += 1;
                    self.shards.publish(crate::server::broker::core::Message {
                        stream: m.stream,
                        topic: m.topic,
                        target: m.target,
                        user: m.user,
                        close: m.close,
                        qos: m.qos,
                        retain: m.retain,
                        props: m.mqtt,
                        identity: m.identity,
                        at: m.at,
                        publish_us,
                        publish_id: pid,
                        elsewhere: m.elsewhere,
                        data: m.data,
                    });
                }
                let n = streams.len();
                let gather = Gather::Publish { per_worker: BTreeMap::new(), not_found: 0, seqs: vec![0; n], streams, publish_us, remote, users, close };
                if quiet {
                    return;
                }
                let p = Pending { reply, routing, waiting, stalled, gather, started: Instant::now(), pids };
                // Nothing for this node (another node's unicast): its
                // answers are all in `remote` already.
                match p.routing.is_empty() {
                    true => self.finish(p, &[]),
                    false => _ = self.pending.insert(rid, p),
                }
                return;
            }
            other => {
                let p = Pending {
                    reply,
                    routing: BTreeMap::new(),
                    waiting,
                    stalled,
                    gather: Gather::List { limit: 0, list: Vec::new(), truncated: false },
                    started: Instant::now(),
                    pids,
                };
                self.answer(p, Response::error(500, format!("{other:?} is not a publish")));
                return;
            }
        };
        let p = Pending { reply, routing: BTreeMap::new(), waiting, stalled, gather, started: Instant::now(), pids };
        if p.waiting.is_empty() {
            self.finish(p, &[]);
        } else {
            self.pending.insert(rid, p);
        }
    }

    /// `GET /history`: a topic's messages after an offset, and whether a
    /// subscriber at (`epoch`, `after`) has every one it missed.
    pub(crate) fn history_json(&self, topic: &str, after: u64, epoch: Option<u32>, limit: usize) -> Response {
        let slice = self.shards.core(self.shards.of(topic)).history.since(topic, after, limit, MAX_REPLY_BYTES);
        let at = Position { epoch: epoch.unwrap_or(slice.epoch), offset: after };
        let recovered = slice.covers(at) == Some(true) && slice.messages.last().is_none_or(|m| m.offset == slice.head);
        let messages: Vec<serde_json::Value> = slice
            .messages
            .iter()
            .map(|m| {
                let mut v = json!({ "offset": m.offset, "publish_us": m.publish_us });
                match std::str::from_utf8(&m.data) {
                    Ok(s) => v["data"] = s.into(),
                    Err(_) => v["data_b64"] = base64::engine::general_purpose::STANDARD.encode(&m.data).into(),
                }
                v
            })
            .collect();
        let body = json!({ "topic": topic, "epoch": slice.epoch, "head": slice.head, "oldest": slice.oldest, "recovered": recovered, "messages": messages });
        Response::json(200, &body)
    }

    /// A shard routed admin publish `publish_id`: its place, and the
    /// workers whose counts its answer waits for (none for a unicast: its
    /// connection is nowhere).
    pub(crate) fn routed(&mut self, publish_id: u64, at: Position, workers: Vec<u32>) {
        let Some(&rid) = self.owner.get(&publish_id) else { return };
        let stalled = &self.stalled;
        let Some(p) = self.pending.get_mut(&rid) else { return };
        let Some(index) = p.routing.remove(&publish_id) else { return };
        if let Gather::Publish { seqs, streams, not_found, .. } = &mut p.gather {
            seqs[index] = at.offset;
            if workers.is_empty() && streams[index] == Stream::Unicast {
                *not_found += 1;
            }
        }
        for w in workers.into_iter().map(|w| w as usize) {
            match stalled.contains(&w) {
                true => _ = p.stalled.insert(w),
                false => *p.waiting.entry(w).or_insert(0) += 1,
            }
        }
        if p.routing.is_empty() && p.waiting.is_empty() {
            let p = self.take(rid);
            self.finish(p, &[]);
        }
    }

    /// A worker carried out push `publish_id`.
    pub(crate) fn pushed(&mut self, worker: usize, publish_id: u64, queued: u64, dropped: u64) {
        let Some(&rid) = self.owner.get(&publish_id) else { return };
        if let Some(p) = self.pending.get_mut(&rid) {
            if let Gather::Publish { per_worker, .. } = &mut p.gather {
                let e = per_worker.entry(worker).or_insert((0, 0));
                e.0 += queued;
                e.1 += dropped;
            }
            self.ack(rid, worker);
        }
    }

    /// `GET /presence` in a cluster: asked of the workers here and of the
    /// other nodes; returns the request id to give the cluster's answers.
    pub(crate) fn start_presence(&mut self, req: Request, live: &[usize], pool: &mut Pool) -> Option<u64> {
        self.begin(req.route, Answer::Admin(req.reply), None, Vec::new(), live, pool);
        let rid = self.next_id;
        let p = self.pending.get_mut(&rid)?;
        p.waiting.insert(CLUSTER, 1);
        Some(rid)
    }

    /// What the other nodes answered to presence question `request_id`.
    pub(crate) fn presence_of_nodes(&mut self, request_id: u64, answers: Vec<crate::cluster::NodePresence>) {
        if let Some(Gather::Presence { nodes, .. }) = self.pending.get_mut(&request_id).map(|p| &mut p.gather) {
            nodes.extend(answers.iter().map(|a| a.node.clone()));
        }
        let (mut users, mut anonymous) = (Vec::new(), 0);
        for a in answers {
            users.extend(a.users);
            anonymous += a.anonymous;
        }
        self.presence(CLUSTER, request_id, users, anonymous);
    }

    /// A worker answered presence question `request_id`.
    pub(crate) fn presence(&mut self, worker: usize, request_id: u64, users: Vec<(String, u64, Option<String>)>, anonymous: u64) {
        if let Some(p) = self.pending.get_mut(&request_id) {
            if let Gather::Presence { users: all, anonymous: a, .. } = &mut p.gather {
                *a += anonymous;
                for (u, n, info) in users {
                    let e = all.entry(u).or_insert((0, None));
                    e.0 += n;
                    if e.1.is_none() {
                        e.1 = info;
                    }
                }
            }
            self.ack(request_id, worker);
        }
    }

    /// A worker answered listing `request_id`.
    pub(crate) fn listed(&mut self, worker: usize, request_id: u64, list: Vec<ConnInfo>, cut: bool) {
        if let Some(p) = self.pending.get_mut(&request_id) {
            if let Gather::List { limit, list: all, truncated } = &mut p.gather {
                let room = limit.saturating_sub(all.len());
                *truncated |= cut;
                all.extend(list.into_iter().take(room));
            }
            self.ack(request_id, worker);
        }
    }

    fn ack(&mut self, rid: u64, worker: usize) {
        let Some(p) = self.pending.get_mut(&rid) else { return };
        if let Some(n) = p.waiting.get_mut(&worker) {
            *n -= 1;
            if *n == 0 {
                p.waiting.remove(&worker);
            }
        }
        if p.waiting.is_empty() && p.routing.is_empty() {
            let p = self.take(rid);
            self.finish(p, &[]);
        }
    }

    /// Remove a finished request and the publish ids that pointed to it.
    /// Its own publish ids only: a scan of every id in flight per finished
    /// request made the supervisor quadratic in its backlog (issue 44: the
    /// QoS 1 bench at 100,000 messages/s fell over once it lagged).
    fn take(&mut self, rid: u64) -> Pending {
        let p = self.pending.remove(&rid).expect("present");
        for pid in &p.pids {
            self.owner.remove(pid);
        }
        // A burst's capacity is not kept for ever (the map is scanned by
        // nothing now, but its memory stays).
        if self.owner.capacity() > 1024 && self.owner.len() < self.owner.capacity() / 8 {
            self.owner.shrink_to(self.owner.len() * 2);
        }
        p
    }

    /// A worker died: stop waiting for it.
    pub(crate) fn worker_gone(&mut self, worker: usize) {
        self.shared.worker_gone(worker);
        let done: Vec<u64> = self
            .pending
            .iter_mut()
            .filter_map(|(rid, p)| {
                p.waiting.remove(&worker);
                (p.waiting.is_empty() && p.routing.is_empty()).then_some(*rid)
            })
            .collect();
        for rid in done {
            let p = self.take(rid);
            self.finish(p, &[worker]);
        }
    }

    /// Whether a publish or listing waits on worker `w`.
    pub(crate) fn waits_on(&self, w: usize) -> bool {
        self.pending.values().any(|p| p.waiting.contains_key(&w))
    }

    /// These workers stalled (the fleet decides): answer what waits only
    /// on them, and stop waiting on them until they recover.
    pub(crate) fn set_stalled(&mut self, stalled: &BTreeSet<usize>) {
        self.stalled.clone_from(stalled);
        let done: Vec<u64> = self
            .pending
            .iter_mut()
            .filter_map(|(rid, p)| {
                let late: Vec<usize> = p.waiting.keys().filter(|w| stalled.contains(w)).copied().collect();
                for w in late {
                    p.waiting.remove(&w);
                    p.stalled.insert(w);
                }
                (p.waiting.is_empty() && p.routing.is_empty()).then_some(*rid)
            })
            .collect();
        for rid in done {
            let p = self.take(rid);
            self.finish(p, &[]);
        }
    }

    /// Answer what waited too long with what arrived.
    pub(crate) fn expire(&mut self) {
        let late: Vec<u64> = self.pending.iter().filter(|(_, p)| p.started.elapsed() > PENDING_TIMEOUT).map(|(r, _)| *r).collect();
        for rid in late {
            let p = self.take(rid);
            let missing: Vec<usize> = p.waiting.keys().copied().collect();
            self.finish(p, &missing);
        }
    }
    fn answer(&mut self, p: Pending, r: Response) {
        match p.reply {
            Answer::Admin(tx) => {
                let _ = tx.send(r);
            }
            Answer::Nats(subject) => self.nats_replies.push((subject, r.body.into_bytes())),
            Answer::Quiet => {}
        }
    }

    /// Answer a finished request; `missing` workers never answered.
    fn finish(&mut self, mut p: Pending, missing: &[usize]) {
        let elapsed_ms = p.started.elapsed().as_secs_f64() * 1000.0;
        let gather = std::mem::replace(&mut p.gather, Gather::List { limit: 0, list: Vec::new(), truncated: false });
        let body = match gather {
            Gather::List { list, truncated, .. } => {
                let mut v = json!({ "connections": list, "missing_workers": missing, "stalled_workers": p.stalled, "truncated": truncated });
                if let Some(node) = &self.node {
                    for c in v["connections"].as_array_mut().into_iter().flatten() {
                        let id = c["id"].as_u64().unwrap_or_default();
                        c["id"] = crate::cluster::global_id(node, id).into();
                        c["node"] = node.clone().into();
                    }
                }
                v
            }
            Gather::Presence { topic, limit, users, anonymous, nodes } => {
                // Serialized straight from the merged table: a 100,000-user
                // answer through serde_json::Value cost more than the rest.
                let missing: Vec<usize> = missing.iter().copied().filter(|w| *w != CLUSTER).collect();
                let where_ = Where { node: self.node.as_deref(), others: &nodes, missing: &missing, stalled: &p.stalled };
                let body = presence_body(&topic, limit, &users, anonymous, &where_);
                return self.answer(p, Response { status: 200, content_type: "application/json", body });
            }
            Gather::Publish { per_worker, mut not_found, seqs, publish_us, remote, users, close, .. } => {
                let queued: u64 = per_worker.values().map(|v| v.0).sum();
                // In a cluster other nodes deliver theirs on receipt: none
                // here is no 404 there.
                if users && queued == 0 && self.node.is_none() {
                    not_found = seqs.len() as u64;
                }
                let dropped: u64 = per_worker.values().map(|v| v.1).sum();
                let workers: BTreeMap<String, serde_json::Value> =
                    per_worker.iter().map(|(w, (q, d))| (w.to_string(), json!({"queued": q, "dropped": d}))).collect();
                let remote_count = |status: u16| remote.iter().filter(|r| r.status == status).count() as u64;
                let unanswered = remote.iter().filter(|r| r.status != 200 && r.status != 404).count() as u64;
                let mut v = json!({ "messages": seqs.len() + remote.len(), "seq": seqs, "publish_us": publish_us, "queued": queued, "dropped_slow_consumers": dropped,
                        "not_found": not_found + remote_count(404), "workers": workers, "missing_workers": missing, "stalled_workers": p.stalled, "elapsed_ms": elapsed_ms });
                if unanswered > 0 {
                    v["remote_failed"] = unanswered.into();
                }
                if close {
                    v["disconnected"] = queued.into();
                }
                if let Some(node) = &self.node {
                    v["node"] = node.clone().into();
                }
                if !remote.is_empty() {
                    v["remote"] = serde_json::to_value(&remote).unwrap_or_default();
                }
                v
            }
        };
        let all = |field: &str| body[field].as_u64().is_some_and(|n| n > 0 && Some(n) == body["messages"].as_u64());
        // Every message's fate is the same: say so in the status.
        let status = if all("not_found") {
            404
        } else if all("remote_failed") {
            body["remote"][0]["status"].as_u64().map_or(504, |s| s as u16)
        } else {
            200
        };
        self.answer(p, Response::json(status, &body));
    }
}
