//! How a cluster node's publishes travel (`server --cluster`): what needs
//! other nodes goes to NATS first and is delivered here only once NATS
//! took it; what other nodes published arrives from the link and is
//! delivered like a local publish; a unicast for a connection of another
//! node is routed to its owner, who answers.

use crate::admin::route::{Message, Request as Route};
use crate::admin::{Request, Response};
use crate::cluster::link::Out;
use crate::cluster::{ClusterConfig, ClusterEvent, Inbound, Link, LinkStatus, PublishFailure, Sent};
use crate::proto::push::{wall_us, Position, Stream, BROADCAST_TOPIC};
use crate::server::broker::publish::{Answer, Publisher};
use crate::supervise::{Pool, Sink};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A publish waiting for NATS to take it: who asked, what this node
/// delivers once it has, and the origin's stamp.
struct Held {
    /// None: nobody waits for the answer (an MQTT client's publish).
    reply: Option<crate::admin::Reply>,
    local: Vec<Message>,
    /// Per local message: its place in what went to NATS (topic and
    /// broadcast messages), whose answer says its offset.
    sent_as: Vec<Option<usize>>,
    publish_us: u64,
}

/// Answer a publish someone waits for (an admin request); a quiet one
/// (an MQTT client's) has nobody to tell.
fn answer_if_asked(reply: Option<crate::admin::Reply>, r: Response) {
    if let Some(tx) = reply {
        let _ = tx.send(r);
    }
}

pub(crate) struct Relay {
    pub link: Link,
    held: HashMap<u64, Held>,
    /// When this node last answered for its retained set: at most
    /// `retained::MAX_ANSWERS` answers every `retained::ANSWER_EVERY`.
    answered: VecDeque<std::time::Instant>,
    next: u64,
    /// The link state last reported to the operator.
    reported_up: bool,
    /// Recoveries this node's history could not answer, waiting for the
    /// stream's: topic -> (worker, offset asked after).
    fetching: HashMap<String, Vec<(usize, u64)>>,
    /// Per topic: offsets the stream gave this node's publishes that have
    /// not answered yet -> (request, its place in what went out). They
    /// are delivered by their publish, in the stream's order.
    mine: HashMap<String, BTreeMap<u64, (u64, usize, Position)>>,
    /// Per topic: other nodes' messages after one of those, waiting for it.
    blocked: HashMap<String, VecDeque<Inbound>>,
}

impl Relay {
    pub(crate) fn start(cfg: ClusterConfig, tx: Sink<ClusterEvent>) -> Result<Relay> {
        Ok(Relay {
            link: Link::start(cfg, tx)?,
            held: HashMap::new(),
            answered: VecDeque::new(),
            next: 0,
            reported_up: false,
            fetching: HashMap::new(),
            mine: HashMap::new(),
            blocked: HashMap::new(),
        })
    }

    /// A line for the operator when the link came up or went down.
    pub(crate) fn link_change(&mut self) -> Option<(&'static str, String)> {
        let up = self.link.up();
        if up == self.reported_up {
            return None;
        }
        self.reported_up = up;
        let s = self.link.status();
        Some(if up {
            ("cluster_link_up", format!("cluster: node {} linked to {} (reconnects so far {})", s.node, s.url, s.reconnects))
        } else {
            (
                "cluster_link_down",
                format!(
                    "cluster: node {} lost its link to {}{}; publishes answer 503 and /healthz is degraded until it reconnects (automatic)",
                    s.node,
                    s.url,
                    s.last_error.map(|e| format!(" ({e})")).unwrap_or_default()
                ),
            )
        })
    }

    pub(crate) fn node(&self) -> &str {
        &self.link.cfg.node
    }

    pub(crate) fn status(&self) -> LinkStatus {
        self.link.status()
    }

    /// An admin publish on this node.
    pub(crate) fn publish(&mut self, req: Request, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        self.publish_as(req.route, Some(req.reply), publisher, live, pool)
    }

    /// A publish on this node; nobody waits for its answer when `reply`
    /// is None (what MQTT clients published: its pushes are quiet).
    pub(crate) fn publish_as(&mut self, route: Route, reply: Option<crate::admin::Reply>, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        let answer = |reply: Option<crate::admin::Reply>| reply.map_or(Answer::Quiet, Answer::Admin);
        let Route::Publish(messages) = route else { return publisher.begin(route, answer(reply), None, Vec::new(), live, pool) };
        let me = self.node().to_string();
        // A per-user push goes to every node (this one too).
        let is_local = |m: &Message| m.stream == Stream::Unicast && m.user.is_none() && m.node.as_deref().is_none_or(|n| n == me);
        if messages.iter().all(is_local) {
            return publisher.begin(Route::Publish(messages), answer(reply), None, Vec::new(), live, pool);
        }
        if let Some(m) = messages.iter().find(|m| m.stream == Stream::Topic && !crate::cluster::topic_fits_subject(&m.topic)) {
            let why = format!("topic '{}' cannot travel between nodes: in a cluster a topic is a NATS subject, with no empty part between dots", m.topic);
            return answer_if_asked(reply, Response::error(400, why));
        }
        if !self.link.up() {
            self.link.failed();
            return answer_if_asked(reply, Response::error(503, self.link.down_reason()));
        }
        let publish_us = wall_us();
        let (mut out, mut local, mut sent_as) = (Vec::new(), Vec::new(), Vec::new());
        for m in messages {
            // NATS does not echo a node's own publishes: it delivers here itself.
            let local_too = m.stream != Stream::Unicast || m.user.is_some();
            let (mut sent, mut elsewhere) = (None, Vec::new());
            if !is_local(&m) {
                let target = m.node.clone().zip(m.target);
                let user = m.user.clone().map(|u| (u, m.close));
                // A topic message carries what it has of MQTT's, and which
                // node delivers each shared subscription group's copy.
                let mut mqtt = (m.stream == Stream::Topic).then(|| crate::cluster::MqttMeta::of(m.qos, m.retain, m.mqtt.as_deref())).flatten();
                if m.stream == Stream::Topic && m.target.is_none() && m.user.is_none() {
                    let placed = publisher.place_shared(&m.topic, &me);
                    if !placed.picks.is_empty() {
                        mqtt.get_or_insert_with(Default::default).shared = placed.picks;
                        elsewhere = placed.elsewhere;
                    }
                }
                out.push(Out { stream: m.stream, topic: m.topic.clone(), target, user, publish_us, data: m.data.clone(), mqtt });
                sent = Some(out.len() - 1);
            }
            if local_too || is_local(&m) {
                local.push(Message { node: None, elsewhere, ..m });
                sent_as.push(sent);
            }
        }
        self.next += 1;
        self.held.insert(self.next, Held { reply, local, sent_as, publish_us });
        self.link.publish(self.next, out);
    }

    /// News from the link.
    pub(crate) fn on_event(&mut self, ev: ClusterEvent, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        match ev {
            ClusterEvent::Published { request, result } => self.published(request, result, publisher, live, pool),
            // The supervisor's own (fleet.rs): it stops, or takes over.
            ClusterEvent::Fatal(_)
            | ClusterEvent::ClientIds { .. }
            | ClusterEvent::SessionsAsked { .. }
            | ClusterEvent::SessionsHanded(_)
            | ClusterEvent::SessionsTaken { .. } => {}
            ClusterEvent::SharedGroups { node, announce } => publisher.shared_heard(&node, announce),
            ClusterEvent::Mine { request, index, topic, at } => {
                self.mine.entry(topic).or_default().insert(at.offset, (request, index, at));
            }
            ClusterEvent::Message(m) => {
                let topic = m.history_topic();
                let waits = m.at.is_some_and(|at| self.mine.get(&topic).and_then(|o| o.keys().next()).is_some_and(|first| *first < at.offset));
                if waits {
                    self.blocked.entry(topic).or_default().push_back(m);
                } else {
                    Self::deliver(m, self.link.cfg.node.as_str(), publisher, live, pool);
                }
            }
            ClusterEvent::Fetched { topic, result } => self.fetched(topic, result, publisher),
            ClusterEvent::PresenceAsked { topic, reply } => {
                let route = Route::Presence { topic, limit: crate::admin::route::MAX_PRESENCE };
                publisher.begin(route, Answer::Nats(reply), None, Vec::new(), live, pool);
            }
            ClusterEvent::Presence { request, answers } => publisher.presence_of_nodes(request, answers),
            ClusterEvent::RetainedSet(e) => publisher.retained_from_node(e, false),
            ClusterEvent::RetainedAsked { reply } => self.answer_retained(reply, publisher),
            ClusterEvent::Retained(answers) => {
                for e in answers.entries {
                    publisher.retained_from_node(e, true);
                }
                // Malformed, or past this node's bounds.
                publisher.retained_refused("cluster_sync", answers.dropped);
            }
            ClusterEvent::Notices(notices) => {
                pool.broadcast(&format!("{} {}", crate::server::commands::CMD_NOTICES, serde_json::to_string(&notices).expect("serializes")));
            }
        }
        self.flush_replies(publisher);
    }

    /// Another node asks for this node's retained set: its messages and
    /// the clears it remembers, within `retained::MAX_ANSWERS` answers
    /// every `retained::ANSWER_EVERY` (nodes that keep asking cost that
    /// much and no more; past it a question goes unanswered, counted).
    fn answer_retained(&mut self, reply: String, publisher: &mut Publisher) {
        use crate::cluster::retained::{ANSWER_EVERY, MAX_ANSWERS};
        let now = std::time::Instant::now();
        while self.answered.front().is_some_and(|t| now.duration_since(*t) >= ANSWER_EVERY) {
            self.answered.pop_front();
        }
        if self.answered.len() >= MAX_ANSWERS {
            publisher.retained_refused("sync_asks_unanswered", 1);
            return;
        }
        self.answered.push_back(now);
        // Every shard's part, its messages and the clears it remembers.
        let all = publisher.retained_for_sync();
        let (chunks, skipped) = crate::cluster::retained::chunks(all.iter().map(|(t, d, m, us)| (t.as_str(), d.as_slice(), m.clone(), *us)));
        for chunk in chunks {
            self.link.reply(reply.clone(), chunk);
        }
        publisher.retained_refused("cluster_sync", skipped);
    }

    /// The link came up (at start or after a reconnect): ask the other
    /// nodes for their retained sets, which this node may have missed.
    pub(crate) fn ask_retained(&self, publisher: &Publisher) {
        let b = publisher.retained_bounds;
        self.link.ask_retained(b.max_messages, b.max_bytes);
    }

    /// A message from another node, delivered like a local publish (to
    /// the shared subscription groups it names this node (`me`) for).
    fn deliver(m: Inbound, me: &str, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        let reply = match m.reply {
            Some(subject) => Answer::Nats(subject),
            None => Answer::Quiet,
        };
        let mqtt = m.mqtt.unwrap_or_default();
        let msg = Message {
            stream: m.stream,
            topic: m.topic,
            target: m.target,
            node: None,
            data: m.data,
            at: m.at,
            user: m.user,
            close: m.close,
            qos: mqtt.qos,
            retain: mqtt.retain,
            elsewhere: mqtt.elsewhere(me),
            mqtt: mqtt.props,
            identity: None,
        };
        publisher.begin(Route::Publish(vec![msg]), reply, Some(m.publish_us), Vec::new(), live, pool);
    }

    /// Publish `request` went out, or failed: answer it, deliver here
    /// what of it the stream stored, then what waited for that.
    fn published(&mut self, request: u64, result: Result<Sent, PublishFailure>, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        // What the stream stored of it, seen go by: out index -> offset.
        let mut seen: HashMap<usize, Position> = HashMap::new();
        let mut touched = Vec::new();
        for (topic, offsets) in self.mine.iter_mut() {
            let before = offsets.len();
            offsets.retain(|_, (r, index, at)| {
                if *r == request {
                    seen.insert(*index, *at);
                }
                *r != request
            });
            if offsets.len() != before {
                touched.push(topic.clone());
            }
        }
        if let Some(h) = self.held.remove(&request) {
            match result {
                Ok(sent) => {
                    // With JetStream each topic message has the cluster's
                    // offset, the same on every node.
                    let local = h
                        .local
                        .into_iter()
                        .zip(h.sent_as)
                        .map(|(m, i)| Message { at: i.and_then(|i| sent.positions.get(i).copied().flatten()), ..m })
                        .collect();
                    publisher.begin(Route::Publish(local), h.reply.map_or(Answer::Quiet, Answer::Admin), Some(h.publish_us), sent.remote, live, pool)
                }
                Err(e) => {
                    self.link.failed();
                    // Stored and seen, the rest of it failed: this node
                    // delivers what is in the stream, as the others do.
                    let stored: Vec<Message> =
                        h.local.into_iter().zip(h.sent_as).filter_map(|(m, i)| i.and_then(|i| seen.get(&i)).map(|at| Message { at: Some(*at), ..m })).collect();
                    let answer = if !e.maybe_sent {
                        Response::error(503, format!("{}: the publish was not sent to any node; retry", e.reason))
                    } else {
                        Response::error(
                            504,
                            format!(
                                "{}: other nodes may or may not have delivered it (at most once); this node delivered {} of its messages; a retry may deliver it twice elsewhere",
                                e.reason,
                                stored.len()
                            ),
                        )
                    };
                    answer_if_asked(h.reply, answer);
                    for m in stored {
                        publisher.begin(Route::Publish(vec![m]), Answer::Quiet, Some(h.publish_us), Vec::new(), live, pool);
                    }
                }
            }
        }
        // What waited for those goes now, up to the next one still pending.
        for topic in touched {
            let first = self.mine.get(&topic).and_then(|o| o.keys().next().copied());
            if first.is_none() {
                self.mine.remove(&topic);
            }
            let Some(queue) = self.blocked.get_mut(&topic) else { continue };
            while queue.front().is_some_and(|m| first.is_none_or(|f| m.at.is_none_or(|at| at.offset < f))) {
                let m = queue.pop_front().expect("checked");
                Self::deliver(m, self.link.cfg.node.as_str(), publisher, live, pool);
            }
            if queue.is_empty() {
                self.blocked.remove(&topic);
            }
        }
    }

    /// Workers' subscribers of `topic` recover after offset `after`
    /// (u64::MAX: they want only its position). With JetStream a
    /// recovery this node's history cannot answer reads the stream's
    /// (its latest 4 MiB); what the answer then cannot reach is lost for
    /// that subscriber, which does not ask again (`tables/recovery.rs`).
    pub(crate) fn history_wanted(&mut self, worker: usize, topic: &str, after: u64, publisher: &mut Publisher) {
        // Only a topic followed here has a history that is up to date. A
        // position only: this node's, unless it has none of the topic
        // (then the stream's last message says where the topic is).
        let (covered, position_here) = publisher.history_here(topic, after, self.link.follows(topic));
        if !self.link.logged() || position_here || covered {
            return publisher.answer_history(worker, topic, after);
        }
        let waiting = self.fetching.entry(topic.to_string()).or_default();
        if waiting.is_empty() {
            self.link.fetch(topic, Position { epoch: 0, offset: after });
        }
        waiting.push((worker, after));
    }

    /// The stream's messages of a topic came: into this node's history
    /// (those after its head delivered, in order), then the waiting
    /// recoveries are answered from it.
    fn fetched(&mut self, topic: String, result: Result<Vec<crate::cluster::Inbound>, crate::cluster::error::LogError>, publisher: &mut Publisher) {
        let waiting: Vec<(u32, u64)> = self.fetching.remove(&topic).unwrap_or_default().into_iter().map(|(w, a)| (w as u32, a)).collect();
        let mut messages = Vec::new();
        match result {
            // Merged by the topic's shard, with their MQTT metadata: what
            // was past its head is delivered, then the waiting answered.
            Ok(got) => {
                for m in got {
                    let Some(at) = m.at else { continue };
                    let mqtt = m.mqtt.clone().unwrap_or_default();
                    let (stream, name) = if topic == BROADCAST_TOPIC { (Stream::Broadcast, String::new()) } else { (Stream::Topic, topic.clone()) };
                    messages.push(crate::server::broker::core::Message {
                        stream,
                        topic: name,
                        target: None,
                        user: None,
                        close: false,
                        qos: mqtt.qos,
                        retain: mqtt.retain,
                        elsewhere: mqtt.elsewhere(&self.link.cfg.node),
                        props: mqtt.props,
                        identity: None,
                        at: Some(at),
                        publish_us: m.publish_us,
                        publish_id: 0,
                        data: m.data,
                    });
                }
            }
            Err(e) => self.link.note_error(format!("recovering {topic} from JetStream: {e}")),
        }
        publisher.history_merged(topic, messages, waiting);
    }

    /// A worker's topics changed: followed from now on, a topic's history
    /// here may be behind the cluster's, so it starts over from the stream.
    pub(crate) fn topics_changed(&mut self, worker: usize, changes: &[(String, bool)], publisher: &mut Publisher) {
        for topic in self.link.topics_changed(worker, changes) {
            if self.link.logged() {
                publisher.forget_history(&topic);
            }
        }
    }

    /// Send the answers owed to other nodes' unicasts.
    pub(crate) fn flush_replies(&mut self, publisher: &mut Publisher) {
        for (subject, body) in publisher.nats_replies.drain(..) {
            self.link.reply(subject, body);
        }
    }
}
