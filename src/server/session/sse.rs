//! Server-Sent Events on the WebSocket and HTTP ports, for browsers and proxies
//! that cannot use WebSocket: `GET /events?subscribe=a,b` with
//! `Accept: text/event-stream` is answered `200 text/event-stream`, and
//! every push is an event whose `data` is the same JSON envelope a
//! WebSocket text push carries.
//!
//! Each event's `id` is the connection's resume token: the position of
//! every stream it follows (`a:EPOCH:OFFSET,b:EPOCH:OFFSET,*:EPOCH:OFFSET`),
//! so the `Last-Event-ID` a browser sends when it reconnects resumes all of
//! them at once. The server keeps those positions per connection (12 bytes
//! a stream); the connection owns no buffer. Heartbeats are comments.

use crate::proto::push::{self, Position, Push, Stream, BROADCAST_TOPIC};
use crate::proto::ws::handshake;
use crate::server::close::{self, Close};
use crate::server::session::requests::Requests;
use crate::server::snapshot::ServerSnapshot;
use crate::server::worker::conn::{ConnExt, Ext};
use crate::server::worker::recovery::{self, Recoveries};
use crate::server::worker::topics::{Subs, Topics};

/// A new WebSocket or event stream taking up what its request asks for.
pub struct Follow<'r, 'a> {
    pub req: &'r mut Requests<'a>,
    pub topics: &'r mut Topics,
    pub subs: &'r mut Subs,
    pub recoveries: &'r mut Recoveries,
}

impl Follow<'_, '_> {
    /// Subscribe to the target's `?subscribe=` topics and resume its
    /// `?since=` tokens, and an event stream's (`events`: its
    /// Last-Event-ID, maybe empty) every stream. Err: the refusal is in
    /// the output.
    pub fn start(&mut self, target: &str, events: Option<&str>) -> Result<(), Close> {
        let (key, gen) = (self.req.key, self.req.gen);
        for topic in handshake::subscriptions(target) {
            if let Err(reason) = self.topics.subscribe(self.subs, key, topic.as_bytes()) {
                close::count(&mut self.req.stats.subscribe_refused, reason);
                let r = match reason {
                    Close::NotPermitted => handshake::Refusal {
                        status: 403,
                        reason: reason.as_str(),
                        text: "a ?subscribe= topic this connection's token does not allow (its topics claim), or one of --admin-topics",
                    },
                    Close::TooManyTopics => handshake::Refusal {
                        status: 503,
                        reason: reason.as_str(),
                        text: "this server holds its --max-topics topics; subscribe to an existing topic or try later",
                    },
                    _ => handshake::Refusal { status: 400, reason: reason.as_str(), text: "bad ?subscribe= topic (1-255 of [A-Za-z0-9._:/$-], at most 64)" },
                };
                handshake::write_refusal(self.req.out, &r);
                return Err(reason);
            }
        }
        // Resume tokens: `?since=`, and an event stream's Last-Event-ID.
        let mut tokens: Vec<&str> = handshake::query_list(target, "since").collect();
        tokens.extend(events.unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty()));
        if events.is_some() {
            // An event stream learns every position, so its ids resume all.
            let named: Vec<&str> = tokens.iter().filter_map(|t| push::parse_resume_token(t).ok().map(|(n, _)| n)).collect();
            let mut all: Vec<&str> = handshake::subscriptions(target).chain([BROADCAST_TOPIC]).filter(|t| !named.contains(t)).collect();
            all.extend(tokens);
            tokens = all;
        }
        for token in tokens {
            let resumed = push::parse_resume_token(token)
                .map_err(|_| Close::BadTopic)
                .and_then(|(topic, at)| recovery::resume(self.topics, self.subs, self.recoveries, (key, gen), topic.as_bytes(), at));
            if let Err(reason) = resumed {
                close::count(&mut self.req.stats.subscribe_refused, reason);
                let r = handshake::Refusal {
                    status: 400,
                    reason: reason.as_str(),
                    text: "bad ?since= token: give TOPIC:EPOCH:OFFSET as the server sent it, or a bare TOPIC for its position",
                };
                handshake::write_refusal(self.req.out, &r);
                return Err(reason);
            }
        }
        Ok(())
    }
}

/// Answer an event stream's request and make the connection one.
pub fn open(out: &mut Vec<u8>, stats: &mut ServerSnapshot, now_s: u32) -> Ext {
    write_head(out);
    stats.sse_streams += 1;
    Some(Box::new(ConnExt::Sse(SseConn { positions: Box::default(), last_write_s: now_s })))
}

/// The position list's key for the broadcasts.
pub const BROADCASTS: u32 = u32::MAX;
/// A comment line this often keeps proxies from closing an idle stream.
pub const HEARTBEAT_S: u32 = 15;
/// What a browser waits before reconnecting (ms), said at the start.
pub const RETRY_MS: u32 = 2000;

/// Where a stream is in one topic's history (16 bytes).
#[derive(Debug, Clone, Copy)]
pub struct Followed {
    /// The topic's id in the worker, or [`BROADCASTS`].
    topic: u32,
    epoch: u32,
    offset: u64,
}

/// An SSE connection's state: where it is in each stream it follows.
#[derive(Debug, Default)]
pub struct SseConn {
    /// Exactly as long as the streams followed (grown one at a time).
    pub positions: Box<[Followed]>,
    /// Worker-relative second of the last thing written (heartbeats).
    pub last_write_s: u32,
}

impl SseConn {
    fn set(&mut self, topic: u32, at: Position) {
        let f = Followed { topic, epoch: at.epoch, offset: at.offset };
        match self.positions.iter_mut().find(|p| p.topic == topic) {
            Some(p) => *p = f,
            None => self.positions = self.positions.iter().copied().chain([f]).collect(),
        }
    }

    /// The resume token of every stream followed: the event id.
    fn id(&self, topics: &Topics) -> String {
        let names = self.positions.iter().filter_map(|f| {
            let name = if f.topic == BROADCASTS { Some(BROADCAST_TOPIC) } else { topics.name(f.topic) };
            name.map(|n| push::resume_token(n, Position { epoch: f.epoch, offset: f.offset }))
        });
        names.collect::<Vec<_>>().join(",")
    }
}

/// The answer that opens the stream.
pub fn write_head(out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nX-Accel-Buffering: no\r\nAccess-Control-Allow-Origin: *\r\n\r\n");
    out.extend_from_slice(format!("retry: {RETRY_MS}\n: megaconn event stream\n\n").as_bytes());
}

/// The positions a `Last-Event-ID` (or `?since=`) names: tokens as the
/// server wrote them; a bare topic asks for its position only.
pub fn parse_last_event_id(v: &str) -> Result<Vec<(&str, Option<Position>)>, String> {
    v.split(',').map(str::trim).filter(|t| !t.is_empty()).map(push::parse_resume_token).collect()
}

fn event(out: &mut Vec<u8>, kind: Option<&str>, id: &str, data: &str) {
    if let Some(k) = kind {
        out.extend_from_slice(format!("event: {k}\n").as_bytes());
    }
    out.extend_from_slice(format!("id: {id}\ndata: {data}\n\n").as_bytes());
}

/// One push as this connection's event (its position moves on).
pub fn write_push(out: &mut Vec<u8>, conn: &mut SseConn, topics: &Topics, p: &Push<'_>, now_s: u32) {
    if p.stream != Stream::Unicast {
        let key = if p.stream == Stream::Broadcast { Some(BROADCASTS) } else { std::str::from_utf8(p.topic).ok().and_then(|t| topics.id(t)) };
        if let Some(key) = key {
            conn.set(key, Position { epoch: p.epoch, offset: p.seq });
        }
    }
    conn.last_write_s = now_s;
    event(out, None, &conn.id(topics), &crate::server::session::ws::push_json(p).to_string());
}

/// The answer to a resume, as an event named `subscribed`.
pub fn write_subscribed(out: &mut Vec<u8>, conn: &mut SseConn, topics: &Topics, topic: &str, recovered: bool, at: Position, now_s: u32) {
    let key = if topic == BROADCAST_TOPIC { Some(BROADCASTS) } else { topics.id(topic) };
    if let Some(key) = key {
        conn.set(key, at);
    }
    conn.last_write_s = now_s;
    let data = serde_json::json!({ "type": "subscribed", "topic": topic, "epoch": at.epoch, "offset": at.offset, "recovered": recovered });
    event(out, Some("subscribed"), &conn.id(topics), &data.to_string());
}

/// A heartbeat comment, when the stream was quiet for [`HEARTBEAT_S`].
pub fn heartbeat_due(conn: &SseConn, now_s: u32) -> bool {
    now_s.saturating_sub(conn.last_write_s) >= HEARTBEAT_S
}

pub const HEARTBEAT: &[u8] = b": ping\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_every_stream_and_parse_back() {
        let mut topics = Topics::default();
        let mut subs = None;
        topics.subscribe(&mut subs, 1, b"a").unwrap();
        topics.subscribe(&mut subs, 1, b"b:c").unwrap();
        let mut conn = SseConn::default();
        let mut out = Vec::new();
        write_subscribed(&mut out, &mut conn, &topics, "a", true, Position { epoch: 7, offset: 3 }, 0);
        write_subscribed(&mut out, &mut conn, &topics, "*", true, Position { epoch: 9, offset: 0 }, 0);
        out.clear();
        let p = Push { stream: Stream::Topic, topic: b"b:c", seq: 5, publish_us: 1, epoch: 8, data: b"hi\nthere" };
        write_push(&mut out, &mut conn, &topics, &p, 0);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("id: a:7:3,*:9:0,b:c:8:5\ndata: {"), "{text}");
        assert!(text.ends_with("}\n\n") && text.matches('\n').count() == 3, "a newline in the data stays escaped in the JSON: {text}");
        let id = text.lines().next().unwrap().strip_prefix("id: ").unwrap();
        assert_eq!(
            parse_last_event_id(id).unwrap(),
            vec![("a", Some(Position { epoch: 7, offset: 3 })), ("*", Some(Position { epoch: 9, offset: 0 })), ("b:c", Some(Position { epoch: 8, offset: 5 }))]
        );
        assert!(parse_last_event_id("a:1:2,bad topic").is_err());
    }
}

#[cfg(test)]
mod size {
    use super::*;
    use crate::server::worker::conn::ConnExt;

    /// An idle event stream following a topic and the broadcasts owns
    /// no buffer: its state is its positions, within 100 B of heap.
    #[test]
    fn an_idle_stream_stays_small() {
        let topics = {
            let mut t = Topics::default();
            t.subscribe(&mut None, 1, b"news").unwrap();
            t
        };
        let (ext, held) = crate::test_alloc::held(|| {
            let mut ext = Box::new(ConnExt::Sse(SseConn::default()));
            let ConnExt::Sse(s) = &mut *ext else { unreachable!() };
            let mut out = Vec::new();
            write_subscribed(&mut out, s, &topics, "news", true, Position { epoch: 1, offset: 1 }, 0);
            write_subscribed(&mut out, s, &topics, "*", true, Position { epoch: 2, offset: 1 }, 0);
            ext
        });
        assert!(matches!(&*ext, ConnExt::Sse(s) if s.positions.len() == 2));
        assert!(held <= 100, "an idle event stream holds {held} B of heap");
    }
}
