//! Joins and leaves of connections with a user, where they are asked for:
//! to the application through the upstream (`--presence-events`), and to
//! the topic's WebSocket subscribers everywhere (`--presence-notices`,
//! through the supervisor to every worker and, in a cluster, every node).

use super::Worker;
use crate::proto::push::Notice;
use crate::server::close::Close;
use crate::server::commands::ServerMsg;
use crate::server::session::kind;
use crate::server::up_message::UpMessage;
use crate::supervise::control;

impl Worker {
    /// The joins and leaves of the last second, netted per connection and
    /// topic, on their way (called once a second). Over their own part of
    /// the worker's upstream budget (never shared with client messages:
    /// `outbox::PRESENCE_PART`) they are counted, not sent upstream.
    pub(super) fn presence_out(&mut self) {
        let Some(events) = self.topics.gate.events.as_mut().filter(|e| !e.is_empty()) else { return };
        let events = events.take();
        let mut notices = Vec::new();
        for e in events {
            if self.cfg.presence_notices {
                notices.push(Notice { topic: e.topic.to_string(), user: e.user.to_string(), join: e.join });
            }
            let Some(up) = self.upstream.as_mut().filter(|_| self.cfg.presence_events) else { continue };
            let made = up.offer((e.key, e.gen), |conn| UpMessage {
                kind: if e.join { "join" } else { "leave" }.into(),
                conn,
                user: Some(e.user.to_string()),
                topic: Some(e.topic.to_string()),
                data: None,
                data_b64: None,
                ts: crate::proto::push::wall_us(),
            });
            match made {
                Ok(()) => self.stats.upstream_sent += 1,
                Err(_) => self.stats.presence_events_dropped += 1,
            }
        }
        if !notices.is_empty() {
            control::emit(&ServerMsg::Notices { worker: self.cfg.worker, notices });
        }
    }

    /// Tell each topic's WebSocket subscribers here who joined or left:
    /// `{"type":"join"|"leave","topic":..,"user":..}`.
    pub(super) fn notify(&mut self, notices: &[Notice]) {
        if !self.needs.ws_pushes {
            return;
        }
        let mut slow = Vec::new();
        let mut frame = Vec::new();
        for n in notices {
            frame.clear();
            let v = serde_json::json!({ "type": if n.join { "join" } else { "leave" }, "topic": n.topic, "user": n.user });
            crate::proto::ws::frame::encode(&mut frame, true, crate::proto::ws::frame::Opcode::Text, v.to_string().as_bytes(), None);
            for key in self.topics.subscribers(&n.topic) {
                let services = &self.cfg.services;
                // JSON WebSocket clients only: not MQTT over WebSocket, not event streams.
                let mqtt = self.mqtt.get(key);
                let ws = |c: &&mut crate::server::worker::conn::Conn| {
                    let protocol = super::protocol_of(services, c);
                    kind::push_form(protocol, &c.ext, mqtt.is_some()) == kind::PushForm::Ws && kind::takes_pushes(protocol, &c.ext, mqtt)
                };
                let Some(conn) = self.conns.get_mut(key).filter(ws) else { continue };
                match super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &frame, self.cfg.max_pending_bytes, Close::SlowConsumer) {
                    Ok(()) => self.stats.presence_notices += 1,
                    Err(reason) => slow.push((key, reason)),
                }
            }
        }
        for (key, reason) in slow {
            self.stats.push_dropped += 1;
            self.close(key, reason);
        }
    }
}
