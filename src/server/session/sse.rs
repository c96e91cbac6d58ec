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
//! a stream); the connection owns no buffer. Heartbeats are comments. The
//! bytes are written by `proto::sse::write`; a push's are built once per
//! worker and shared ([`SharedPush`]).

use crate::proto::push::{self, Position, Push, Stream, BROADCAST_TOPIC};
use crate::proto::sse::write::{self, Event};
use crate::proto::ws::handshake;
use crate::server::close::{self, Close};
use crate::server::session::ext::{ConnExt, Ext};
use crate::server::session::requests::Requests;
use crate::server::snapshot::ServerSnapshot;
use crate::server::tables::recovery::{self, Recoveries};
use crate::server::tables::topics::{Subs, Topics};
use std::fmt::Write as _;
use std::rc::Rc;

/// A new WebSocket or event stream taking up what its request asks for.
pub(crate) struct Follow<'r, 'a> {
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
    pub(crate) fn start(&mut self, target: &str, events: Option<&str>) -> Result<(), Close> {
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
pub(crate) fn open(out: &mut Vec<u8>, stats: &mut ServerSnapshot, now_s: u32) -> Ext {
    write_head(out);
    stats.sse_streams += 1;
    Some(Box::new(ConnExt::Sse(SseConn { positions: Box::default(), last_write_s: now_s })))
}

/// The position list's key for the broadcasts.
pub(crate) const BROADCASTS: u32 = u32::MAX;
/// A comment line this often keeps proxies from closing an idle stream.
pub(crate) const HEARTBEAT_S: u32 = 15;
/// What a browser waits before reconnecting (ms), said at the start.
pub(crate) const RETRY_MS: u32 = 2000;

/// Where a stream is in one topic's history (16 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Followed {
    /// The topic's id in the worker, or [`BROADCASTS`].
    topic: u32,
    epoch: u32,
    offset: u64,
}

/// An SSE connection's state: where it is in each stream it follows.
#[derive(Debug, Default)]
pub(crate) struct SseConn {
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

    /// The resume token of every stream followed, the event id, into
    /// `out` (emptied first; no allocation once it has grown).
    fn write_id(&self, topics: &Topics, out: &mut String) {
        out.clear();
        for f in self.positions.iter() {
            let Some(name) = (if f.topic == BROADCASTS { Some(BROADCAST_TOPIC) } else { topics.name(f.topic) }) else { continue };
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write!(out, "{name}:{}:{}", f.epoch, f.offset);
        }
    }
}

/// The answer that opens the stream: the head, how long a browser is to
/// wait before it reconnects, and a comment.
pub(crate) fn write_head(out: &mut Vec<u8>) {
    out.extend_from_slice(write::HEAD);
    write::retry(out, RETRY_MS);
    write::comment(out, "megaconn event stream");
    write::end(out);
}

/// The positions a `Last-Event-ID` (or `?since=`) names: tokens as the
/// server wrote them; a bare topic asks for its position only.
#[cfg(test)]
pub(crate) fn parse_last_event_id(v: &str) -> Result<Vec<(&str, Option<Position>)>, String> {
    v.split(',').map(str::trim).filter(|t| !t.is_empty()).map(push::parse_resume_token).collect()
}

/// One push as this connection's event (its position moves on).
pub(crate) fn write_push(out: &mut Vec<u8>, conn: &mut SseConn, topics: &Topics, p: &Push<'_>, now_s: u32, stats: &mut ServerSnapshot) {
    SharedPush::encode(p, topics, stats).write(out, conn, topics, now_s);
}

/// A push as every event stream of a worker writes it. Its `data` (the
/// JSON envelope) is the same for all of them and is encoded once per
/// push per worker (counted in `sse_encodes`). Its `id` cannot be: it is
/// the connection's resume token, the position of every stream it
/// follows, and streams that follow other topics, or joined at another
/// time, are at other places. So an event is the connection's `id:` line
/// before the shared `data:` bytes, and connections whose id is the same
/// as the one before (those following the same streams from the same
/// positions: all the streams that follow only the broadcasts) share the
/// whole event, one buffer, as a WebSocket push is shared.
pub(crate) struct SharedPush {
    /// `data: JSON` and the blank line that ends the event.
    body: Vec<u8>,
    /// The stream this push moves on: its key in [`SseConn::positions`]
    /// (None: a unicast, or a topic gone) and its new position.
    moves: Option<(u32, Position)>,
    /// The id of the last event built, and that event.
    last: Option<(String, Rc<[u8]>)>,
    /// The current connection's id, written here.
    id: String,
}

impl SharedPush {
    /// Encode the push's data, once.
    pub(crate) fn encode(p: &Push<'_>, topics: &Topics, stats: &mut ServerSnapshot) -> SharedPush {
        stats.sse_encodes += 1;
        let mut body = Vec::with_capacity(64 + p.data.len());
        write::data(&mut body, &crate::server::session::ws::push_json(p).to_string());
        write::end(&mut body);
        let key = match p.stream {
            Stream::Unicast => None,
            Stream::Broadcast => Some(BROADCASTS),
            Stream::Topic => std::str::from_utf8(p.topic).ok().and_then(|t| topics.id(t)),
        };
        SharedPush { body, moves: key.map(|k| (k, Position { epoch: p.epoch, offset: p.seq })), last: None, id: String::new() }
    }

    /// The connection's event: the previous connection's buffer when its
    /// id was the same, else a new one (kept for the next).
    pub(crate) fn event(&mut self, conn: &mut SseConn, topics: &Topics, now_s: u32) -> Rc<[u8]> {
        self.advance(conn, topics, now_s);
        if let Some((id, event)) = &self.last {
            if *id == self.id {
                return event.clone();
            }
        }
        let mut bytes = Vec::with_capacity(self.id.len() + 5 + self.body.len());
        write::id_field(&mut bytes, &self.id);
        bytes.extend_from_slice(&self.body);
        let event: Rc<[u8]> = bytes.into();
        let id = match self.last.take() {
            Some((mut id, _)) => {
                std::mem::swap(&mut id, &mut self.id);
                id
            }
            None => std::mem::take(&mut self.id),
        };
        self.last = Some((id, event.clone()));
        event
    }

    /// The connection's event, appended to `out`.
    pub(crate) fn write(&mut self, out: &mut Vec<u8>, conn: &mut SseConn, topics: &Topics, now_s: u32) {
        self.advance(conn, topics, now_s);
        write::id_field(out, &self.id);
        out.extend_from_slice(&self.body);
    }

    /// The connection's position moves on; its id is written.
    fn advance(&mut self, conn: &mut SseConn, topics: &Topics, now_s: u32) {
        if let Some((key, at)) = self.moves {
            conn.set(key, at);
        }
        conn.last_write_s = now_s;
        conn.write_id(topics, &mut self.id);
    }
}

/// The answer to a resume, as an event named `subscribed`.
pub(crate) fn write_subscribed(out: &mut Vec<u8>, conn: &mut SseConn, topics: &Topics, topic: &str, recovered: bool, at: Position, now_s: u32) {
    let key = if topic == BROADCAST_TOPIC { Some(BROADCASTS) } else { topics.id(topic) };
    if let Some(key) = key {
        conn.set(key, at);
    }
    conn.last_write_s = now_s;
    let data = serde_json::json!({ "type": "subscribed", "topic": topic, "epoch": at.epoch, "offset": at.offset, "recovered": recovered });
    let mut id = String::new();
    conn.write_id(topics, &mut id);
    Event { id: Some(&id), event: Some("subscribed"), data: &data.to_string(), retry_ms: None }.write(out);
}

/// A heartbeat comment, when the stream was quiet for [`HEARTBEAT_S`].
pub(crate) fn heartbeat_due(conn: &SseConn, now_s: u32) -> bool {
    now_s.saturating_sub(conn.last_write_s) >= HEARTBEAT_S
}

/// The heartbeat: a comment alone.
pub(crate) const HEARTBEAT: &[u8] = write::HEARTBEAT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_every_stream_and_parse_back() {
        let mut topics = Topics::default();
        let mut subs = Subs::new();
        topics.subscribe(&mut subs, 1, b"a").unwrap();
        topics.subscribe(&mut subs, 1, b"b:c").unwrap();
        let mut conn = SseConn::default();
        let mut out = Vec::new();
        write_subscribed(&mut out, &mut conn, &topics, "a", true, Position { epoch: 7, offset: 3 }, 0);
        write_subscribed(&mut out, &mut conn, &topics, "*", true, Position { epoch: 9, offset: 0 }, 0);
        out.clear();
        let p = Push { stream: Stream::Topic, topic: b"b:c", seq: 5, publish_us: 1, epoch: 8, data: b"hi\nthere" };
        write_push(&mut out, &mut conn, &topics, &p, 0, &mut ServerSnapshot::default());
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

    /// A `subscribed` event: its name, the id with every position so far
    /// (the new one added, a known one moved on), the answer as JSON data.
    #[test]
    fn the_subscribed_event_names_every_position() {
        let mut topics = Topics::default();
        topics.subscribe(&mut Subs::new(), 1, b"news").unwrap();
        let mut conn = SseConn::default();
        let mut out = Vec::new();
        write_subscribed(&mut out, &mut conn, &topics, "news", false, Position { epoch: 3, offset: 7 }, 11);
        let text = String::from_utf8(std::mem::take(&mut out)).unwrap();
        let data = text.strip_prefix("event: subscribed\nid: news:3:7\ndata: ").and_then(|r| r.strip_suffix("\n\n")).expect(&text);
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(v, serde_json::json!({"type": "subscribed", "topic": "news", "epoch": 3, "offset": 7, "recovered": false}));
        assert_eq!(conn.last_write_s, 11);

        write_subscribed(&mut out, &mut conn, &topics, "*", true, Position { epoch: 1, offset: 0 }, 12);
        write_subscribed(&mut out, &mut conn, &topics, "news", true, Position { epoch: 3, offset: 9 }, 12);
        let text = String::from_utf8(std::mem::take(&mut out)).unwrap();
        let ids: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
        assert_eq!(ids, ["news:3:7,*:1:0", "news:3:9,*:1:0"], "moved in place, not repeated");
        assert_eq!(conn.positions.len(), 2);

        // A topic the worker does not hold adds no position to the id.
        write_subscribed(&mut out, &mut conn, &topics, "gone", true, Position { epoch: 5, offset: 5 }, 13);
        assert!(String::from_utf8(out).unwrap().contains("id: news:3:9,*:1:0\n"));
        assert_eq!(conn.positions.len(), 2);
    }

    /// A unicast push, or one of a topic the worker no longer holds,
    /// moves no position: the event's id stays what it was.
    #[test]
    fn pushes_without_a_stream_move_no_position() {
        let mut topics = Topics::default();
        topics.subscribe(&mut Subs::new(), 1, b"news").unwrap();
        let mut conn = SseConn::default();
        write_subscribed(&mut Vec::new(), &mut conn, &topics, "news", true, Position { epoch: 2, offset: 1 }, 0);
        let mut stats = ServerSnapshot::default();
        for p in [
            Push { stream: Stream::Unicast, topic: b"", seq: 40, publish_us: 1, epoch: 9, data: b"to you" },
            Push { stream: Stream::Topic, topic: b"elsewhere", seq: 40, publish_us: 1, epoch: 9, data: b"x" },
        ] {
            let mut out = Vec::new();
            write_push(&mut out, &mut conn, &topics, &p, 3, &mut stats);
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with("id: news:2:1\ndata: {"), "{text}");
        }
        let mut out = Vec::new();
        write_push(&mut out, &mut conn, &topics, &Push { stream: Stream::Topic, topic: b"news", seq: 2, publish_us: 1, epoch: 2, data: b"y" }, 4, &mut stats);
        assert!(out.starts_with(b"id: news:2:2\n"));
        assert_eq!((conn.last_write_s, stats.sse_encodes), (4, 3));
    }

    /// Last-Event-ID lists: spaces and empty entries skipped, a bare topic
    /// asks for its position, a topic may hold `:`; numbers past their
    /// width or a bad topic refuse the whole list.
    #[test]
    fn last_event_id_lists_parse_by_their_rules() {
        let at = |epoch, offset| Some(Position { epoch, offset });
        assert_eq!(parse_last_event_id("").unwrap(), vec![]);
        assert_eq!(parse_last_event_id(" , ,").unwrap(), vec![]);
        assert_eq!(parse_last_event_id(" news:1:2 ,, *:0:0,bare ").unwrap(), vec![("news", at(1, 2)), ("*", at(0, 0)), ("bare", None)]);
        assert_eq!(parse_last_event_id("a:b:4294967295:18446744073709551615").unwrap(), vec![("a:b", at(u32::MAX, u64::MAX))]);
        assert_eq!(parse_last_event_id("x:1").unwrap(), vec![("x:1", None)], "two parts: a topic named x:1");
        for bad in ["news:4294967296:1", "news:1:18446744073709551616", "news::5", "news:1:", "bad topic:1:2", "a,b c", "*x:1:2"] {
            assert!(parse_last_event_id(bad).is_err(), "{bad}");
        }
    }

    /// An event stream's start subscribes its `?subscribe=` topics and
    /// resumes the broadcasts and every stream its Last-Event-ID does not
    /// name from their positions; a WebSocket's (no Last-Event-ID)
    /// resumes only its `?since=` tokens. Too many topics is a 503.
    #[test]
    fn follow_resumes_what_the_request_names() {
        let mut read = crate::server::session::fixture::Read::new();
        let mut recoveries = Recoveries::default();
        let (mut req, topics, subs) = read.split();
        let mut f = Follow { req: &mut req, topics, subs, recoveries: &mut recoveries };
        f.start("/ws?subscribe=a,b&since=b:4:4", None).unwrap();
        assert!(f.req.out.is_empty());
        let mut wanted = f.recoveries.take_wanted();
        wanted.sort();
        assert_eq!(wanted, [("b".to_string(), 4)], "a WebSocket resumes only what it names");
        assert_eq!(f.topics.names_of(f.subs), ["a", "b"]);

        f.start("/events?subscribe=c", Some("")).unwrap();
        let mut wanted = f.recoveries.take_wanted();
        wanted.sort();
        assert_eq!(wanted, [("*".to_string(), u64::MAX), ("c".to_string(), u64::MAX)], "an event stream learns every position");

        let mut read = crate::server::session::fixture::Read::new();
        read.topics = Topics::new(false, 1, 200);
        let mut recoveries = Recoveries::default();
        let (mut req, topics, subs) = read.split();
        let mut f = Follow { req: &mut req, topics, subs, recoveries: &mut recoveries };
        assert_eq!(f.start("/events?subscribe=one,two", Some("")), Err(Close::TooManyTopics));
        assert!(String::from_utf8_lossy(f.req.out).starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(recoveries.is_empty(), "nothing resumed after the refusal");
        assert_eq!(read.stats.subscribe_refused.get("too_many_topics"), Some(&1));
    }

    /// A heartbeat is due after `HEARTBEAT_S` quiet seconds, not before;
    /// a clock behind the last write never makes one due.
    #[test]
    fn heartbeats_are_due_after_a_quiet_interval() {
        let conn = SseConn { positions: Box::default(), last_write_s: 100 };
        assert!(!heartbeat_due(&conn, 100 + HEARTBEAT_S - 1));
        assert!(heartbeat_due(&conn, 100 + HEARTBEAT_S));
        assert!(!heartbeat_due(&conn, 50));
        assert_eq!(HEARTBEAT, b": ping\n\n");
    }

    /// A broadcast to four streams is encoded once; the three that follow
    /// only the broadcasts from the same place share one buffer, and the
    /// one that also follows a topic gets its own id before the same data.
    #[test]
    fn a_push_is_encoded_once_and_shared_where_ids_agree() {
        let mut topics = Topics::default();
        topics.subscribe(&mut Subs::new(), 4, b"news").unwrap();
        let mut conns: Vec<SseConn> = (0..4).map(|_| SseConn::default()).collect();
        for c in conns.iter_mut() {
            write_subscribed(&mut Vec::new(), c, &topics, "*", true, Position { epoch: 2, offset: 9 }, 0);
        }
        write_subscribed(&mut Vec::new(), &mut conns[3], &topics, "news", true, Position { epoch: 1, offset: 4 }, 0);
        let mut stats = ServerSnapshot::default();
        let p = Push { stream: Stream::Broadcast, topic: b"", seq: 10, publish_us: 1, epoch: 2, data: b"hello" };
        let mut shared = SharedPush::encode(&p, &topics, &mut stats);
        let events: Vec<Rc<[u8]>> = conns.iter_mut().map(|c| shared.event(c, &topics, 5)).collect();
        assert_eq!(stats.sse_encodes, 1);
        assert!(Rc::ptr_eq(&events[0], &events[1]) && Rc::ptr_eq(&events[1], &events[2]), "same id, one buffer");
        let text: Vec<&str> = events.iter().map(|e| std::str::from_utf8(e).unwrap()).collect();
        assert!(text[0].starts_with("id: *:2:10\ndata: {") && text[0].ends_with("}\n\n"), "{}", text[0]);
        assert!(text[3].starts_with("id: *:2:10,news:1:4\ndata: {"), "{}", text[3]);
        assert_eq!(text[0].split_once('\n').unwrap().1, text[3].split_once('\n').unwrap().1, "the same data after each id");
        assert!(conns.iter().all(|c| c.last_write_s == 5));
        // Written out (a history replay), the bytes are the same.
        let mut out = Vec::new();
        let mut again = SseConn::default();
        write_subscribed(&mut Vec::new(), &mut again, &topics, "*", true, Position { epoch: 2, offset: 9 }, 0);
        write_push(&mut out, &mut again, &topics, &p, 5, &mut stats);
        assert_eq!(out, &*events[0]);
        assert_eq!(stats.sse_encodes, 2);
    }
}

#[cfg(test)]
mod size {
    use super::*;
    use crate::server::session::ext::ConnExt;

    /// An idle event stream following a topic and the broadcasts owns
    /// no buffer: its state is its positions, within 100 B of heap.
    #[test]
    fn an_idle_stream_stays_small() {
        let topics = {
            let mut t = Topics::default();
            t.subscribe(&mut Subs::new(), 1, b"news").unwrap();
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
