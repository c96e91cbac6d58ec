//! How a cluster node's publishes travel (`server --cluster`): what needs
//! other nodes goes to NATS first and is delivered here only once NATS
//! took it; what other nodes published arrives from the link and is
//! delivered like a local publish; a unicast for a connection of another
//! node is routed to its owner, who answers.

use super::publish::{Answer, Publisher};
use crate::admin::route::{Message, Request as Route};
use crate::admin::{Request, Response};
use crate::cluster::link::Out;
use crate::cluster::{ClusterConfig, ClusterEvent, Link, LinkStatus};
use crate::proto::push::{wall_us, Stream};
use crate::supervise::{Pool, Sink};
use anyhow::Result;
use std::collections::HashMap;

/// A publish waiting for NATS to take it: who asked, what this node
/// delivers once it has, and the origin's stamp.
struct Held {
    reply: crate::admin::Reply,
    local: Vec<Message>,
    publish_us: u64,
}

pub struct Relay {
    pub link: Link,
    held: HashMap<u64, Held>,
    next: u64,
    /// The link state last reported to the operator.
    reported_up: bool,
}

impl Relay {
    pub fn start(cfg: ClusterConfig, tx: Sink<ClusterEvent>) -> Result<Relay> {
        Ok(Relay { link: Link::start(cfg, tx)?, held: HashMap::new(), next: 0, reported_up: false })
    }

    /// A line for the operator when the link came up or went down.
    pub fn link_change(&mut self) -> Option<(&'static str, String)> {
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

    pub fn node(&self) -> &str {
        &self.link.cfg.node
    }

    pub fn status(&self) -> LinkStatus {
        self.link.status()
    }

    /// An admin publish on this node.
    pub fn publish(&mut self, req: Request, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        let Route::Publish(messages) = req.route else { return publisher.start(req, live, pool) };
        let me = self.node().to_string();
        let is_local = |m: &Message| m.stream == Stream::Unicast && m.node.as_deref().is_none_or(|n| n == me);
        if messages.iter().all(is_local) {
            return publisher.start(Request { route: Route::Publish(messages), reply: req.reply }, live, pool);
        }
        if let Some(m) = messages.iter().find(|m| m.stream == Stream::Topic && !crate::cluster::topic_fits_subject(&m.topic)) {
            let _ = req.reply.send(Response::error(
                400,
                format!("topic '{}' cannot travel between nodes: in a cluster a topic is a NATS subject, with no empty part between dots", m.topic),
            ));
            return;
        }
        if !self.link.up() {
            self.link.failed();
            let _ = req.reply.send(Response::error(503, self.link.down_reason()));
            return;
        }
        let publish_us = wall_us();
        let (mut out, mut local) = (Vec::new(), Vec::new());
        for m in messages {
            let local_too = m.stream != Stream::Unicast;
            if !is_local(&m) {
                let target = m.node.clone().zip(m.target);
                out.push(Out { stream: m.stream, topic: m.topic.clone(), target, publish_us, data: m.data.clone() });
            }
            if local_too || is_local(&m) {
                local.push(Message { node: None, ..m });
            }
        }
        self.next += 1;
        self.held.insert(self.next, Held { reply: req.reply, local, publish_us });
        self.link.publish(self.next, out);
    }

    /// News from the link.
    pub fn on_event(&mut self, ev: ClusterEvent, publisher: &mut Publisher, live: &[usize], pool: &mut Pool) {
        match ev {
            ClusterEvent::Published { request, result } => {
                let Some(h) = self.held.remove(&request) else { return };
                match result {
                    Ok(remote) => publisher.begin(Route::Publish(h.local), Answer::Admin(h.reply), Some(h.publish_us), remote, live, pool),
                    Err(e) if !e.maybe_sent => {
                        self.link.failed();
                        let _ = h.reply.send(Response::error(503, format!("{}: the publish was not sent to any node; retry", e.reason)));
                    }
                    Err(e) => {
                        self.link.failed();
                        let _ = h.reply.send(Response::error(
                            504,
                            format!(
                                "{}: other nodes may or may not have delivered it (at most once); this node did not deliver it; a retry may deliver it twice elsewhere",
                                e.reason
                            ),
                        ));
                    }
                }
            }
            ClusterEvent::Fatal(_) => {}
            ClusterEvent::Message(m) => {
                let reply = match m.reply {
                    Some(subject) => Answer::Nats(subject),
                    None => Answer::Quiet,
                };
                let msg = Message { stream: m.stream, topic: m.topic, target: m.target, node: None, data: m.data };
                publisher.begin(Route::Publish(vec![msg]), reply, Some(m.publish_us), Vec::new(), live, pool);
            }
        }
        self.flush_replies(publisher);
    }

    /// Send the answers owed to other nodes' unicasts.
    pub fn flush_replies(&mut self, publisher: &mut Publisher) {
        for (subject, body) in publisher.nats_replies.drain(..) {
            self.link.reply(subject, body);
        }
    }
}
