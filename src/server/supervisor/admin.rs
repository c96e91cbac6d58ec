//! The admin API's routing on the supervisor: each request the admin
//! HTTP server (`crate::admin`) parsed is answered here, at once from the
//! supervisor's own state (`/metrics`, `/stats`, `/healthz`, a topic's
//! history) or handed to the publisher or the cluster relay, which answer
//! once the workers (or other nodes) have carried it out (publishes,
//! connection listings, presence).

use super::fleet::ServerFleet;

impl ServerFleet {
    /// An admin API request: answered now (metrics, stats, health) or once
    /// the workers have carried it out (publish, listing).
    pub(super) fn on_admin(&mut self, req: crate::admin::Request) {
        use crate::admin::{Response, Route};
        use crate::stats::exposition::CONTENT_TYPE;
        let t = self.view.totals();
        let link = self.relay.as_ref().map(|r| r.status());
        let resp = match &req.route {
            Route::Metrics => {
                let admin = self.admin_stats.as_ref().map(|s| s.lock().expect("admin stats").clone());
                Response {
                    status: 200,
                    content_type: CONTENT_TYPE,
                    body: crate::server::supervisor::metrics::render(
                        &t,
                        &self.publisher,
                        crate::server::supervisor::metrics::Own {
                            config: &self.config_counters,
                            hook: self.hooks.auth.as_ref().map(|h| &h.counters),
                            authz: self.hooks.authz.as_ref().map(|h| &h.counters),
                        },
                        self.accept_queue,
                        link.as_ref(),
                        admin.as_ref(),
                        self.upstream.as_ref().map(|u| u.counters.lock().expect("upstream counters").clone()).as_ref(),
                    ),
                }
            }
            Route::Stats => {
                let mut v = serde_json::to_value(&t).unwrap_or_default();
                v["push_published"] = self.publisher.published.into();
                let (history, retained, broker, shared) = self.publisher.broker_counters();
                v["history"] = serde_json::to_value(&history).unwrap_or_default();
                v["mqtt_retained"] = serde_json::to_value(&retained).unwrap_or_default();
                v["broker"] = serde_json::to_value(&broker).unwrap_or_default();
                v["broker"]["shards"] = self.publisher.shards.len().into();
                v["top_topics"] = serde_json::to_value(&self.top_topics.list).unwrap_or_default();
                v["broker"]["untracked_topic_messages"] = self.top_topics.untracked.into();
                v["mqtt_sessions"] = serde_json::to_value(&self.publisher.sessions.counters).unwrap_or_default();
                v["mqtt_shared"] = serde_json::to_value(&shared).unwrap_or_default();
                if let Some(u) = &self.upstream {
                    v["upstream"] = serde_json::to_value(&*u.counters.lock().expect("upstream counters")).unwrap_or_default();
                }
                v["config"] = serde_json::to_value(&self.config_counters).unwrap_or_default();
                if let Some(h) = &self.hooks.auth {
                    v["mqtt_auth_http"] = serde_json::to_value(&h.counters).unwrap_or_default();
                }
                if let Some(h) = &self.hooks.authz {
                    v["mqtt_authz_http"] = serde_json::to_value(&h.counters).unwrap_or_default();
                }
                v["stalled_workers"] = self.stalled().into();
                v["accept_queue"] = self.accept_queue.into();
                if let Some(s) = &self.admin_stats {
                    v["admin"] = serde_json::to_value(&*s.lock().expect("admin stats")).unwrap_or_default();
                }
                if let Some(l) = &link {
                    v["cluster"] = serde_json::to_value(l).unwrap_or_default();
                }
                Response::json(200, &v)
            }
            Route::Healthz => match (&self.failure, &link) {
                _ if self.stopping => Response::json(503, &serde_json::json!({"status": "draining", "connections": t.active})),
                (Some(f), _) => Response::json(503, &serde_json::json!({"status": "failing", "reason": f})),
                (None, Some(l)) if !l.up => Response::json(
                    503,
                    &serde_json::json!({"status": "degraded", "reason": self.relay.as_ref().map(|r| r.link.down_reason()), "connections": t.active, "cluster": l}),
                ),
                (None, _) => Response::json(
                    200,
                    &serde_json::json!({"status": "ok", "workers": t.workers, "accepting": t.accepting, "connections": t.active, "cluster": link, "stalled_workers": self.stalled()}),
                ),
            },
            Route::History { topic, after, epoch, limit } => self.publisher.history_json(topic, *after, *epoch, *limit),
            Route::Publish(ms) if self.publisher.too_large(ms).is_some() => self.publisher.too_large(ms).expect("checked"),
            Route::Publish(ms) if self.relay.is_none() && ms.iter().any(|m| m.node.is_some()) => Response::error(
                400,
                "a NODE.ID connection id names a cluster node, but this server is not in a cluster (--cluster); use the bare ID from GET /connections",
            ),
            Route::Connections { .. } | Route::Presence { .. } | Route::Publish(_) => {
                // Starting workers too: one accepts from the moment it
                // says it is ready, which the supervisor may read after
                // this publish (its commands wait in its pipe meanwhile).
                let running = self.live();
                match (&mut self.relay, &req.route) {
                    (Some(r), Route::Publish(_)) => r.publish(req, &mut self.publisher, &running, &mut self.pool),
                    (Some(r), Route::Presence { topic, .. }) if r.link.up() => {
                        let topic = topic.clone();
                        if let Some(rid) = self.publisher.start_presence(req, &running, &mut self.pool) {
                            r.link.ask_presence(rid, &topic);
                        }
                    }
                    _ => self.publisher.start(req, &running, &mut self.pool),
                }
                return;
            }
        };
        let _ = req.reply.send(resp);
    }

    /// What MQTT clients published that the supervisor must carry: a
    /// cluster node's (to NATS first, `relay.rs`) and delayed wills. The
    /// rest never comes here: its worker hands it to its topic's shard.
    /// Nobody waits for the answer (the client had its PUBACK).
    pub(super) fn client_published(&mut self, messages: Vec<crate::server::broker::core::Message>) {
        if self.relay.is_none() {
            for m in messages {
                self.publisher.shards.publish(m);
            }
            return;
        }
        let messages: Vec<crate::admin::route::Message> = messages
            .into_iter()
            .map(|m| crate::admin::route::Message {
                qos: m.qos,
                retain: m.retain,
                mqtt: m.props,
                identity: m.identity,
                ..crate::admin::route::Message::topic(m.topic, m.data)
            })
            .collect();
        let running = self.live();
        let route = crate::admin::Route::Publish(messages);
        match &mut self.relay {
            Some(r) => r.publish_as(route, None, &mut self.publisher, &running, &mut self.pool),
            None => self.publisher.begin(route, crate::server::broker::publish::Answer::Quiet, None, Vec::new(), &running, &mut self.pool),
        }
    }
}
