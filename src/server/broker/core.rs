//! The broker core of one shard, sans I/O: the topics a shard owns (a
//! hash of the name picks the shard, `shard.rs`) with their history,
//! retained messages and interest, the MQTT shared subscription groups,
//! and what a message entering the topic space becomes: frames for the
//! workers with a matching subscriber ([`Output::Send`], encoded once
//! whatever their number) and, where the supervisor must see it, a word
//! for it ([`ToMain`]: an admin publish's answer, a kept session's
//! queue, the cluster). [`Core::handle`] takes one input and appends its
//! outputs; no socket, no clock of its own (`now_us` comes in), so every
//! journey is a unit test.
//!
//! **Interest** is per worker, not per connection: a worker says when its
//! first subscriber of a topic (or filter) comes and its last goes
//! (`bus::Frame::Interest`), so the shard's tables hold at most one entry
//! per (worker, topic) and a publish costs one lookup of its topic plus
//! one walk of the filter trie ([`FilterTrie`]) — never a pass over every
//! filter. The supervisor is one more interested party ([`MAIN`]) for the
//! filters of kept sessions.

use crate::proto::bus::{self, Frame};
use crate::proto::mqtt::forward::Forwarded;
use crate::proto::push::{Position, Stream, BROADCAST_TOPIC};
use crate::server::broker::history::{History, MAX_REPLY_BYTES};
use crate::server::broker::retained::{Kept, Retained};
use crate::server::broker::shared::SharedGroups;
use crate::server::commands::{split_id, SharedChange};
use crate::server::topic_index::FilterTrie;
use std::collections::{BTreeSet, HashMap};

/// The supervisor, as an interested party.
pub(crate) const MAIN: u32 = u32::MAX;

crate::counters! {
    /// What one shard routed (`/stats` "broker", summed over the shards).
    pub(crate) struct CoreCounters {
        messages: counter "broker_messages" "Messages that entered the topic space (client, admin and cluster publishes)",
        bytes: counter "broker_message_bytes" "Payload bytes of the messages that entered the topic space",
        frames_out: counter "broker_frames_out" "Frames the broker shards wrote to workers: one per message per worker with a matching subscriber",
        unrouted: counter "broker_unrouted" "Messages no worker had a subscriber for (still in the history and the retained set)",
        to_main: counter "broker_to_supervisor" "Messages the shards handed to the supervisor (kept sessions' queues, the cluster)",
        interest: gauge "broker_interest" "Topics and filters with a subscriber on some worker (one entry per topic or filter, whatever its workers)",
        retained_asked: counter "broker_retained_lookups" "Retained lookups answered (one per subscription that wanted them, per shard)",
        dropped: by("reason") "broker_dropped" "Deliveries a shard did not write to a worker, by reason (worker_full: more than 32 MiB waited for it)",
        refused: by("reason") "broker_refused" "Frames from a worker a shard could not read, by reason (its link then ends, the worker is replaced)",
    }
}

/// An owned message for the topic space, as the supervisor hands one
/// in (the admin API, the cluster) or a shard hands one out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub stream: Stream,
    pub topic: String,
    pub target: Option<u64>,
    pub user: Option<String>,
    pub close: bool,
    pub qos: u8,
    pub retain: bool,
    pub props: Option<Box<Forwarded>>,
    /// A client's retained publish: whom the topic is charged to.
    pub identity: Option<Box<str>>,
    /// Its place where another keeps it (the cluster's stream).
    pub at: Option<Position>,
    pub publish_us: u64,
    /// The admin publish it answers (0: nobody waits).
    pub publish_id: u64,
    /// In a cluster: the shared groups another node delivers.
    pub elsewhere: Vec<Box<str>>,
    pub data: Vec<u8>,
}

impl Message {
    /// A QoS 0 message of `topic` from the server itself, stamped now
    /// (the `$SYS` topics).
    pub(crate) fn topic(topic: String, data: Vec<u8>) -> Message {
        Message {
            stream: Stream::Topic,
            topic,
            target: None,
            user: None,
            close: false,
            qos: 0,
            retain: false,
            props: None,
            identity: None,
            at: None,
            publish_us: crate::proto::push::wall_us(),
            publish_id: 0,
            elsewhere: Vec::new(),
            data,
        }
    }

    /// A will the supervisor held for its delay, now into the topic space.
    pub(crate) fn will(w: crate::server::commands::ClientPublish) -> Message {
        Message {
            stream: Stream::Topic,
            topic: w.topic,
            target: None,
            user: None,
            close: false,
            qos: w.qos,
            retain: w.retain,
            props: w.mqtt,
            identity: w.identity.map(Into::into),
            at: None,
            publish_us: crate::proto::push::wall_us(),
            publish_id: 0,
            elsewhere: Vec::new(),
            data: w.data,
        }
    }

    /// A client's publish off the bus, owned.
    pub(crate) fn of(p: &bus::Publish<'_>) -> Message {
        View::of_publish(p).owned()
    }
}

/// A message as [`Core::route`] reads it, borrowed: from a worker's
/// frame (nothing copied on the way through) or from an owned
/// [`Message`] (the admin API, the cluster).
#[derive(Debug, Clone, Copy)]
struct View<'a> {
    stream: Stream,
    topic: &'a str,
    target: Option<u64>,
    user: Option<&'a str>,
    close: bool,
    qos: u8,
    retain: bool,
    props: Option<&'a Forwarded>,
    identity: Option<&'a str>,
    at: Option<Position>,
    publish_us: u64,
    publish_id: u64,
    elsewhere: &'a [Box<str>],
    data: &'a [u8],
}

impl<'a> View<'a> {
    fn of_message(m: &'a Message) -> View<'a> {
        View {
            stream: m.stream,
            topic: &m.topic,
            target: m.target,
            user: m.user.as_deref(),
            close: m.close,
            qos: m.qos,
            retain: m.retain,
            props: m.props.as_deref(),
            identity: m.identity.as_deref(),
            at: m.at,
            publish_us: m.publish_us,
            publish_id: m.publish_id,
            elsewhere: &m.elsewhere,
            data: &m.data,
        }
    }

    fn of_publish(p: &'a bus::Publish<'a>) -> View<'a> {
        View {
            stream: Stream::Topic,
            topic: p.topic,
            target: None,
            user: None,
            close: false,
            qos: p.qos,
            retain: p.retain,
            props: p.props.as_ref(),
            identity: (!p.identity.is_empty()).then_some(p.identity),
            at: None,
            publish_us: p.publish_us,
            publish_id: 0,
            elsewhere: &[],
            data: p.payload,
        }
    }

    /// Owned, for where it outlives the input (the supervisor's queues).
    fn owned(&self) -> Message {
        Message {
            stream: self.stream,
            topic: self.topic.to_string(),
            target: self.target,
            user: self.user.map(str::to_string),
            close: self.close,
            qos: self.qos,
            retain: self.retain,
            props: self.props.cloned().map(Box::new),
            identity: self.identity.map(Into::into),
            at: self.at,
            publish_us: self.publish_us,
            publish_id: self.publish_id,
            elsewhere: self.elsewhere.to_vec(),
            data: self.data.to_vec(),
        }
    }
}

/// What a shard is told.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// A frame worker `w` sent.
    Worker(u32, Frame<'a>),
    /// A message from the supervisor: the admin API, the cluster.
    Message(Message),
    /// A worker's bus is up (it gets broadcasts) or gone (its interest and
    /// shared members with it).
    WorkerUp(u32),
    WorkerGone(u32),
    /// The supervisor follows (or stops following) a filter: a kept
    /// session's subscription.
    Offline {
        add: bool,
        filter: Box<str>,
    },
    /// The cluster's stream filled a topic's history (each message with
    /// its place): merged, those past the head delivered, then each
    /// waiting worker answered.
    Merged {
        topic: String,
        messages: Vec<Message>,
        waiting: Vec<(u32, u64)>,
    },
    /// Answer worker `worker`'s recovery of `topic` from this history
    /// (the supervisor judged it covers it).
    History {
        worker: u32,
        topic: String,
        after: u64,
    },
    /// Another node's retained message or clear (empty data): `sync`, from
    /// a sync of the whole set (counted as such).
    RetainedEntry {
        topic: String,
        kept: Kept,
        sync: bool,
    },
    /// A tick: history and retained expiry.
    Tick,
}

/// What a shard does about an input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// These bytes (whole frames) to these workers.
    Send {
        to: Vec<u32>,
        bytes: Vec<u8>,
    },
    Main(ToMain),
}

/// What the supervisor is told.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ToMain {
    /// An admin publish was routed: its place and the workers whose
    /// counts its answer waits for.
    Routed { publish_id: u64, at: Position, workers: Vec<u32> },
    /// A message the kept sessions' filters match (QoS 1 or 2).
    Offline(Message),
    /// A cluster node's client publish: to NATS first (`relay.rs`), back
    /// here as a [`Input::Message`] with its place.
    Relay(Message),
    /// A recovery this history cannot answer: the cluster's stream may.
    Fetch { worker: u32, topic: String, after: u64 },
}

/// The shard's settings.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CoreConfig {
    /// A cluster node: client publishes go to the supervisor (NATS) first.
    pub relay: bool,
    /// A cluster node with the history in JetStream: recoveries this
    /// history cannot answer ask the stream.
    pub fetch: bool,
}

/// Who has a subscriber: workers, sorted, and maybe [`MAIN`].
type Dests = Vec<u32>;

fn add(d: &mut Dests, w: u32) {
    if let Err(i) = d.binary_search(&w) {
        d.insert(i, w);
    }
}

fn drop_one(d: &mut Dests, w: u32) {
    if let Ok(i) = d.binary_search(&w) {
        d.remove(i);
    }
}

/// One shard's topic space.
pub(crate) struct Core {
    pub history: History,
    pub retained: Retained,
    pub shared: SharedGroups,
    cfg: CoreConfig,
    exact: HashMap<Box<str>, Dests>,
    filters: FilterTrie<Dests>,
    /// Workers whose bus is up: a broadcast goes to each.
    workers: BTreeSet<u32>,
    pub counters: CoreCounters,
    /// Messages and bytes per topic since the supervisor last took them.
    pub top: super::top_topics::Counts,
}

impl Core {
    pub(crate) fn new(history: History, retained: Retained, cfg: CoreConfig) -> Core {
        Core {
            history,
            retained,
            shared: SharedGroups::default(),
            cfg,
            exact: HashMap::new(),
            filters: FilterTrie::default(),
            workers: BTreeSet::new(),
            counters: CoreCounters::default(),
            top: Default::default(),
        }
    }

    /// Take one input at wall-clock `now_us`; its outputs onto `out`.
    pub(crate) fn handle(&mut self, input: Input<'_>, now_us: u64, out: &mut Vec<Output>) {
        match input {
            Input::Worker(w, frame) => self.on_worker_frame(w, frame, now_us, out),
            Input::Message(m) => self.route(View::of_message(&m), out),
            Input::WorkerUp(w) => {
                self.workers.insert(w);
            }
            Input::WorkerGone(w) => self.worker_gone(w),
            Input::Offline { add: true, filter } => self.interest(MAIN, true, &filter),
            Input::Offline { add: false, filter } => self.interest(MAIN, false, &filter),
            Input::Merged { topic, messages, waiting } => self.merged(&topic, messages, &waiting, out),
            Input::History { worker, topic, after } => {
                let slice = self.history.since(&topic, after, usize::MAX, MAX_REPLY_BYTES);
                self.history.counters.served += 1;
                out.push(Output::Send { to: vec![worker], bytes: history_frame(&slice) });
            }
            Input::RetainedEntry { topic, kept, sync } => {
                if self.retained.newer(&topic, kept, None) && sync {
                    self.retained.counters.synced += 1;
                }
            }
            Input::Tick => self.history.expire(now_us),
        }
        self.counters.interest = (self.exact.len() + self.filters.len()) as u64;
    }

    fn on_worker_frame(&mut self, w: u32, frame: Frame<'_>, now_us: u64, out: &mut Vec<Output>) {
        match frame {
            Frame::Publish(p) => {
                if self.cfg.relay {
                    self.counters.to_main += 1;
                    out.push(Output::Main(ToMain::Relay(Message::of(&p))));
                } else {
                    self.route(View::of_publish(&p), out);
                }
            }
            Frame::Interest { add, name, .. } => self.interest(w, add, name),
            Frame::Share { join, conn, qos, name } => {
                self.shared.changed(vec![SharedChange { conn, name: name.to_string(), qos, join }]);
            }
            Frame::RetainedWant { conn, qos, sid, filter } => self.retained_answer(w, conn, qos, sid, filter, now_us, out),
            Frame::HistoryWant { topic, after } => self.history_answer(w, topic, after, out),
            // Shard-to-worker frames are not a worker's to send.
            Frame::Deliver(_) | Frame::Retained { .. } | Frame::History { .. } | Frame::Stamp { .. } => {}
        }
    }

    /// `who` gained (or lost) its first (last) subscriber of `name`.
    fn interest(&mut self, who: u32, add_it: bool, name: &str) {
        if crate::proto::mqtt::topic::is_filter(name) {
            match add_it {
                true => add(self.filters.entry(name, Vec::new), who),
                false => {
                    if let Some(d) = self.filters.get_mut(name) {
                        drop_one(d, who);
                        if d.is_empty() {
                            self.filters.remove(name);
                        }
                    }
                }
            }
            return;
        }
        match add_it {
            true => add(self.exact.entry(name.into()).or_default(), who),
            false => {
                if let Some(d) = self.exact.get_mut(name) {
                    drop_one(d, who);
                    if d.is_empty() {
                        self.exact.remove(name);
                    }
                }
            }
        }
    }

    fn worker_gone(&mut self, w: u32) {
        self.workers.remove(&w);
        self.exact.retain(|_, d| {
            drop_one(d, w);
            !d.is_empty()
        });
        self.filters.retain(|d| {
            drop_one(d, w);
            !d.is_empty()
        });
        self.shared.worker_gone(w as usize);
    }

    /// Who gets a message of `topic`: the workers with a subscriber of it
    /// or of a filter matching it, and [`MAIN`] when a kept session's does.
    fn audience(&self, topic: &str) -> Dests {
        let mut to = self.exact.get(topic).cloned().unwrap_or_default();
        self.filters.matching(topic, |d| {
            for w in d {
                add(&mut to, *w);
            }
        });
        to
    }

    /// A message into the topic space: retained, in the history, and to
    /// every worker it concerns, one frame for all of them.
    fn route(&mut self, m: View<'_>, out: &mut Vec<Output>) {
        self.counters.messages += 1;
        self.counters.bytes += m.data.len() as u64;
        // The broker's own `$SYS/` topics: retained, not in the history nor the top topics.
        let sys = m.stream == Stream::Topic && crate::server::broker::retained::is_sys(m.topic);
        if m.stream == Stream::Topic && !sys {
            self.top.note(m.topic, m.data.len());
        }
        let log = match m.stream {
            Stream::Broadcast => BROADCAST_TOPIC,
            _ => m.topic,
        };
        if m.retain && m.stream == Stream::Topic {
            // Over its bounds it is still delivered, just not kept.
            let k = Kept::new(m.data, m.qos).with(m.props, m.publish_us);
            match self.cfg.relay {
                true => _ = self.retained.newer(m.topic, k, m.identity),
                false => _ = self.retained.set(m.topic, k, m.identity),
            }
        }
        let at = match (m.stream, m.at) {
            (Stream::Unicast, _) => Position::default(),
            _ if sys => Position::default(),
            (_, None) => self.history.append(log, m.publish_us, m.data),
            (_, Some(at)) if self.history.put(log, at, m.publish_us, m.data) => at,
            // The cluster's stream gave it again: delivered once already.
            (_, Some(at)) => {
                if m.publish_id != 0 {
                    out.push(Output::Main(ToMain::Routed { publish_id: m.publish_id, at, workers: Vec::new() }));
                }
                return;
            }
        };
        let mut to: Dests = match m.stream {
            Stream::Broadcast => self.workers.iter().copied().collect(),
            Stream::Unicast if m.user.is_some() => self.workers.iter().copied().collect(),
            // A connection of a worker that is not up is nowhere.
            Stream::Unicast => m.target.map(|t| split_id(t).0 as u32).filter(|w| self.workers.contains(w)).into_iter().collect(),
            Stream::Topic => self.audience(m.topic),
        };
        let mut shared = Vec::new();
        if m.stream == Stream::Topic && m.target.is_none() && m.user.is_none() {
            shared = self.shared.pick(m.topic, m.elsewhere);
            for (conn, _) in &shared {
                add(&mut to, split_id(*conn).0 as u32);
            }
        }
        let main = to.last() == Some(&MAIN);
        if main {
            to.pop();
            if m.qos > 0 {
                self.counters.to_main += 1;
                out.push(Output::Main(ToMain::Offline(Message { at: Some(at), ..m.owned() })));
            }
        }
        if m.publish_id != 0 {
            out.push(Output::Main(ToMain::Routed { publish_id: m.publish_id, at, workers: to.clone() }));
        }
        if to.is_empty() {
            self.counters.unrouted += 1;
            return;
        }
        let mut bytes = Vec::with_capacity(64 + m.topic.len() + m.data.len());
        bus::encode(
            &mut bytes,
            &Frame::Deliver(bus::Deliver {
                publish_id: m.publish_id,
                stream: m.stream,
                topic: m.topic,
                seq: at.offset,
                epoch: at.epoch,
                publish_us: m.publish_us,
                qos: m.qos,
                retain: m.retain,
                target: m.target,
                user: m.user,
                close: m.close,
                shared,
                props: m.props.cloned(),
                payload: m.data,
            }),
        );
        self.counters.frames_out += to.len() as u64;
        out.push(Output::Send { to, bytes });
    }

    /// A subscription's retained messages, at most `retained::MAX_ANSWER_BYTES`.
    #[allow(clippy::too_many_arguments)]
    fn retained_answer(&mut self, w: u32, conn: u64, qos: u8, sid: u32, filter: &str, now_us: u64, out: &mut Vec<Output>) {
        self.counters.retained_asked += 1;
        // Answered even with nothing: the subscription waits for it
        // (`worker/bus/waits.rs`).
        let found = self.retained.matching(filter, now_us);
        let messages = found
            .iter()
            .map(|(topic, k)| bus::RetainedMessage { topic, qos: k.qos, props: k.forwarded(now_us).ok().flatten().map(|b| *b), payload: &k.data })
            .collect();
        let mut bytes = Vec::new();
        bus::encode(&mut bytes, &Frame::Retained { conn, qos, sid, messages });
        out.push(Output::Send { to: vec![w], bytes });
    }

    /// Subscribers in worker `w` recover `topic` after `after`: its
    /// history, after every message of it so far; in a cluster whose
    /// history is the stream's, one this history cannot answer asks it.
    fn history_answer(&mut self, w: u32, topic: &str, after: u64, out: &mut Vec<Output>) {
        if self.cfg.fetch {
            self.counters.to_main += 1;
            out.push(Output::Main(ToMain::Fetch { worker: w, topic: topic.to_string(), after }));
            return;
        }
        let slice = self.history.since(topic, after, usize::MAX, MAX_REPLY_BYTES);
        self.history.counters.served += 1;
        out.push(Output::Send { to: vec![w], bytes: history_frame(&slice) });
    }

    /// What the cluster's stream filled in: the new messages delivered as
    /// live ones, then each recovery that waited for them answered.
    fn merged(&mut self, topic: &str, messages: Vec<Message>, waiting: &[(u32, u64)], out: &mut Vec<Output>) {
        let got = messages
            .iter()
            .filter_map(|m| {
                let at = m.at?;
                Some((at, crate::server::broker::history::Message { offset: at.offset, publish_us: m.publish_us, data: m.data.clone() }))
            })
            .collect();
        let mut by_offset: HashMap<u64, Message> = messages.into_iter().filter_map(|m| Some((m.at?.offset, m))).collect();
        // Past this log's head: never seen here. Routed as a live cluster
        // message is, at its place: recorded in the history, delivered to
        // the workers with interest and the shared groups' picks, queued
        // for kept sessions (a live copy coming later is then a repeat).
        for (at, _) in self.history.merge(topic, got) {
            if let Some(m) = by_offset.remove(&at.offset) {
                self.route(View::of_message(&m), out);
            }
        }
        for (w, after) in waiting {
            let slice = self.history.since(topic, *after, usize::MAX, MAX_REPLY_BYTES);
            out.push(Output::Send { to: vec![*w], bytes: history_frame(&slice) });
        }
    }

    /// Interest entries held (topics, filters).
    #[cfg(test)]
    pub(crate) fn interest_len(&self) -> (usize, usize) {
        (self.exact.len(), self.filters.len())
    }
}

/// A history slice as its frame.
fn history_frame(s: &crate::server::broker::history::Slice) -> Vec<u8> {
    let messages = s.messages.iter().map(|m| bus::HistoryMessage { offset: m.offset, publish_us: m.publish_us, payload: &m.data }).collect();
    let mut bytes = Vec::new();
    bus::encode(&mut bytes, &Frame::History { topic: &s.topic, after: s.after, epoch: s.epoch, head: s.head, oldest: s.oldest, messages });
    bytes
}

#[cfg(test)]
mod tests;
