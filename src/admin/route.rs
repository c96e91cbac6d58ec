//! Admin requests as values: method, path and body checked, or a 4xx
//! with a one-line reason. Pure, so every rejection is unit-tested.

use super::Response;
use crate::proto::push::{check_topic, Stream, MAX_PUSH};

/// Longest `/connections` listing (each worker also stops at 2 MiB).
pub(crate) const MAX_LIST: usize = 10_000;
/// Most users one `/presence` answer lists (their connections are all counted).
pub(crate) const MAX_PRESENCE: usize = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    Metrics,
    Stats,
    Healthz,
    Connections {
        limit: usize,
        topic: Option<String>,
        /// Only this user's connections (`--auth jwt`).
        user: Option<String>,
    },
    /// Who is subscribed to a topic: users (with connection counts and
    /// `info`) and connections without a user.
    Presence {
        topic: String,
        limit: usize,
    },
    /// A topic's history after an offset (`*`: the broadcasts).
    History {
        topic: String,
        after: u64,
        epoch: Option<u32>,
        limit: usize,
    },
    /// Broadcast, topic or unicast messages: (stream, topic, target, data).
    Publish(Vec<Message>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub stream: Stream,
    pub topic: String,
    /// Unicast: the connection's id on its node.
    pub target: Option<u64>,
    /// Unicast in a cluster: the node that owns the connection (`NODE.ID`);
    /// None for a bare id (this node).
    pub node: Option<String>,
    pub data: Vec<u8>,
    /// Its place in the cluster's history (JetStream), once stored there.
    pub at: Option<crate::proto::push::Position>,
    /// Unicast to every connection of this user (`--auth jwt`'s `sub`).
    pub user: Option<String>,
    /// Close those connections instead (`POST /disconnect/user/SUB`).
    pub close: bool,
    /// MQTT QoS it was published with (0 for the admin API): what an
    /// MQTT subscription granted more may be delivered with.
    pub qos: u8,
    /// MQTT retain: the topic's retained message is set (an empty one cleared).
    pub retain: bool,
    /// An MQTT client's publish: its connection and v5 properties.
    pub mqtt: Option<Box<crate::proto::mqtt::forward::Forwarded>>,
    /// In a cluster: the MQTT shared subscription groups another node
    /// delivers this message to (`server/broker/shared.rs`).
    pub elsewhere: Vec<Box<str>>,
    /// A client's retained publish: whom its retained topic is charged
    /// to (`broker/retained.rs`, per-identity quota).
    pub identity: Option<Box<str>>,
}

impl Message {
    /// A message to every subscriber of `topic` (an MQTT client's publish).
    pub(crate) fn topic(topic: String, data: Vec<u8>) -> Message {
        Message {
            stream: Stream::Topic,
            topic,
            target: None,
            node: None,
            data,
            at: None,
            user: None,
            close: false,
            qos: 0,
            retain: false,
            mqtt: None,
            elsewhere: Vec::new(),
            identity: None,
        }
    }

    fn unicast(node: Option<String>, id: u64, data: Vec<u8>) -> Message {
        Message { stream: Stream::Unicast, target: Some(id), node, ..Message::topic(String::new(), data) }
    }

    /// To every connection of `user` (or closing them).
    fn to_user(user: &str, data: Vec<u8>, close: bool) -> Result<Message, Response> {
        let user = percent_decode(user);
        if user.is_empty() || user.len() > 255 {
            return Err(Response::error(400, "a user is the sub claim of its tokens: 1-255 bytes, percent-encoded in the path"));
        }
        Ok(Message { stream: Stream::Unicast, user: Some(user), close, ..Message::topic(String::new(), data) })
    }
}

/// `%XX` escapes of a path segment decoded (a user id may hold any byte).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).and_then(|c| hex(*c)), b.get(i + 2).and_then(|c| hex(*c))) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

/// The hard cap; the server's `--max-push-bytes` is checked by the supervisor.
fn data_fits(_topic: &str, data: &[u8]) -> Result<(), Response> {
    if data.len() > MAX_PUSH {
        return Err(Response::error(413, format!("a message of {} bytes; a push carries at most 1MiB (--max-push-bytes)", data.len())));
    }
    Ok(())
}

/// A connection id: `ID`, or `NODE.ID` in a cluster.
fn parse_id(s: &str) -> Result<(Option<String>, u64), Response> {
    crate::cluster::parse_id(s.trim()).ok_or_else(|| Response::error(400, format!("'{}' is not a connection id (see GET /connections)", s.trim())))
}

/// Check one request.
pub(crate) fn parse(method: &str, url: &str, body: Vec<u8>) -> Result<Request, Response> {
    let path = url.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Ok(Request::Metrics),
        ("GET", "/stats") => Ok(Request::Stats),
        ("GET", "/healthz") => Ok(Request::Healthz),
        ("GET", "/connections") => {
            let limit = match query(url, "limit") {
                None => 100,
                Some(v) => v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIST).contains(n))
                    .ok_or_else(|| Response::error(400, format!("limit must be 1 to {MAX_LIST}, not '{v}'")))?,
            };
            let topic = query(url, "topic").map(str::to_string);
            if let Some(t) = &topic {
                check_topic(t.as_bytes()).map_err(|e| Response::error(400, e))?;
            }
            let user = query(url, "user").map(percent_decode);
            Ok(Request::Connections { limit, topic, user })
        }
        ("GET", "/presence") => {
            let topic = query(url, "topic").ok_or_else(|| Response::error(400, "GET /presence needs ?topic=NAME (and optionally &limit=USERS)"))?;
            check_topic(topic.as_bytes()).map_err(|e| Response::error(400, e))?;
            let limit = match query(url, "limit") {
                None => MAX_PRESENCE,
                Some(v) => v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PRESENCE).contains(n))
                    .ok_or_else(|| Response::error(400, format!("limit must be 1 to {MAX_PRESENCE} users, not '{v}'")))?,
            };
            Ok(Request::Presence { topic: topic.into(), limit })
        }
        ("GET", "/history") => {
            let topic = query(url, "topic")
                .ok_or_else(|| Response::error(400, "GET /history needs ?topic=NAME (* for broadcasts), and optionally &since=OFFSET&epoch=EPOCH&limit=N"))?;
            crate::proto::push::check_resumable(topic.as_bytes()).map_err(|e| Response::error(400, e))?;
            let number = |key: &str, max: u64| -> Result<Option<u64>, Response> {
                query(url, key)
                    .map(|v| {
                        v.parse::<u64>()
                            .ok()
                            .filter(|n| *n <= max)
                            .ok_or_else(|| Response::error(400, format!("{key} must be a whole number up to {max}, not '{v}'")))
                    })
                    .transpose()
            };
            let after = number("since", u64::MAX)?.unwrap_or(0);
            let epoch = number("epoch", u32::MAX as u64)?.map(|e| e as u32);
            let limit = number("limit", MAX_LIST as u64)?.unwrap_or(100).max(1) as usize;
            Ok(Request::History { topic: topic.into(), after, epoch, limit })
        }
        ("POST", "/broadcast") => {
            data_fits("", &body)?;
            Ok(Request::Publish(vec![Message { stream: Stream::Broadcast, ..Message::topic(String::new(), body) }]))
        }
        ("POST", "/publish") => {
            let topic = query(url, "topic").ok_or_else(|| Response::error(400, "POST /publish needs ?topic=NAME"))?;
            check_topic(topic.as_bytes()).map_err(|e| Response::error(400, e))?;
            data_fits(topic, &body)?;
            // `&retain=1`: also the topic's MQTT retained message (empty: cleared).
            let retain = match query(url, "retain") {
                None | Some("0" | "false") => false,
                Some("1" | "true") => true,
                Some(v) => return Err(Response::error(400, format!("retain={v}: give retain=1 (or 0)"))),
            };
            // `&qos=1` (or 2): what MQTT subscriptions granted that much get
            // it with (0 by default, as before).
            let qos = match query(url, "qos") {
                None | Some("0") => 0,
                Some("1") => 1,
                Some("2") => 2,
                Some(v) => return Err(Response::error(400, format!("qos={v}: give qos=0, 1 or 2 (the MQTT QoS subscribers may get it with)"))),
            };
            Ok(Request::Publish(vec![Message { retain, qos, ..Message::topic(topic.into(), body) }]))
        }
        ("POST", "/push") => {
            let text = String::from_utf8(body).map_err(|_| Response::error(400, "a /push batch is text: one 'ID PAYLOAD' per line"))?;
            let mut out = Vec::new();
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let (id, data) = line.split_once(' ').unwrap_or((line, ""));
                let (node, target) = parse_id(id).map_err(|_| Response::error(400, format!("line {}: '{id}' is not a connection id", n + 1)))?;
                data_fits("", data.as_bytes())?;
                out.push(Message::unicast(node, target, data.as_bytes().to_vec()));
            }
            if out.is_empty() {
                return Err(Response::error(400, "empty /push batch; send one 'ID PAYLOAD' per line"));
            }
            Ok(Request::Publish(out))
        }
        ("POST", p) if p.starts_with("/push/user/") => {
            data_fits("", &body)?;
            Ok(Request::Publish(vec![Message::to_user(&p["/push/user/".len()..], body, false)?]))
        }
        ("POST", p) if p.starts_with("/disconnect/user/") => Ok(Request::Publish(vec![Message::to_user(&p["/disconnect/user/".len()..], Vec::new(), true)?])),
        ("POST", p) if p.starts_with("/push/") => {
            let (node, target) = parse_id(&p["/push/".len()..])?;
            data_fits("", &body)?;
            Ok(Request::Publish(vec![Message::unicast(node, target, body)]))
        }
        (_, "/metrics" | "/stats" | "/healthz" | "/connections" | "/presence" | "/history" | "/broadcast" | "/publish" | "/push") => {
            Err(Response::error(405, format!("{method} is not allowed on {path}")))
        }
        _ => Err(Response::error(
            404,
            format!("no {path}; try /ui, /metrics, /stats, /healthz, /connections, /presence?topic=T, /history?topic=T, POST /publish?topic=T, /broadcast, /push/ID, /push/user/SUB, /disconnect/user/SUB"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_rejections() {
        assert_eq!(parse("GET", "/metrics", vec![]), Ok(Request::Metrics));
        assert_eq!(parse("GET", "/connections?limit=5&topic=a", vec![]), Ok(Request::Connections { limit: 5, topic: Some("a".into()), user: None }));
        let Ok(Request::Publish(m)) = parse("POST", "/push/user/al%20ice", b"hi".to_vec()) else { panic!() };
        assert_eq!((m[0].user.as_deref(), m[0].target, m[0].close), (Some("al ice"), None, false));
        let Ok(Request::Publish(m)) = parse("POST", "/disconnect/user/bob", vec![]) else { panic!() };
        assert_eq!((m[0].user.as_deref(), m[0].close), (Some("bob"), true));
        assert_eq!(parse("POST", "/push/user/", vec![]).unwrap_err().status, 400);
        assert_eq!(parse("GET", "/connections?limit=0", vec![]).unwrap_err().status, 400);
        assert_eq!(parse("POST", "/publish?topic=bad%20topic", vec![]).unwrap_err().status, 400);
        assert_eq!(parse("POST", "/publish", vec![]).unwrap_err().status, 400);
        let retained = |q: &str| parse("POST", &format!("/publish?topic=a{q}"), vec![]).map(|r| matches!(r, Request::Publish(m) if m[0].retain));
        assert_eq!((retained(""), retained("&retain=1"), retained("&retain=0")), (Ok(false), Ok(true), Ok(false)));
        assert_eq!(retained("&retain=yes").unwrap_err().status, 400);
        let qos = |q: &str| parse("POST", &format!("/publish?topic=a{q}"), vec![]).map(|r| if let Request::Publish(m) = r { m[0].qos } else { 9 });
        assert_eq!((qos(""), qos("&qos=1"), qos("&retain=1&qos=2"), qos("&qos=0")), (Ok(0), Ok(1), Ok(2), Ok(0)));
        assert_eq!(qos("&qos=3").unwrap_err().status, 400);
        assert_eq!(parse("POST", "/push/abc", vec![]).unwrap_err().status, 400);
        assert_eq!(parse("POST", "/broadcast", vec![0; MAX_PUSH + 1]).unwrap_err().status, 413);
        assert!(parse("POST", "/broadcast", vec![0; MAX_PUSH]).is_ok());
        assert_eq!(parse("DELETE", "/broadcast", vec![]).unwrap_err().status, 405);
        assert_eq!(parse("GET", "/nope", vec![]).unwrap_err().status, 404);
        let Ok(Request::Publish(m)) = parse("POST", "/push", b"1 hello\n2 world\n".to_vec()) else { panic!() };
        assert_eq!((m.len(), m[1].target, m[1].data.as_slice()), (2, Some(2), &b"world"[..]));
        assert!(parse("POST", "/push", b"x hello".to_vec()).unwrap_err().body.contains("line 1"));
        assert_eq!(parse("GET", "/history?topic=*&since=5&epoch=9", vec![]), Ok(Request::History { topic: "*".into(), after: 5, epoch: Some(9), limit: 100 }));
        assert!(parse("GET", "/history?topic=a&epoch=99999999999", vec![]).unwrap_err().body.contains("epoch must be"));
        assert!(parse("GET", "/history", vec![]).unwrap_err().body.contains("needs ?topic="));
        let Ok(Request::Publish(m)) = parse("POST", "/push/B.7", vec![]) else { panic!() };
        assert_eq!((m[0].node.as_deref(), m[0].target), (Some("B"), Some(7)));
    }
}
