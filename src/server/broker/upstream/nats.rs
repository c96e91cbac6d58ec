//! `--upstream nats://HOST:PORT/PREFIX`: what clients said, into NATS
//! JetStream, where the application already reads its streams.
//!
//! Each message (an MQTT PUBLISH, a WebSocket or framed client message, a
//! presence join or leave) becomes one stream message:
//! - its **subject** is the prefix and its topic, a level a token
//!   (`tele/dev1/temp` under `megaconn.up` is `megaconn.up.tele.dev1.temp`),
//!   the characters a subject token cannot hold percent-encoded ([`subject`]);
//!   a message without a topic goes to the prefix itself;
//! - its **payload** is the client's bytes as sent (no JSON, no base64);
//! - its **headers** are the webhook's identity fields: `Megaconn-Type`
//!   (message, join, leave), `Megaconn-Conn` (answer with `POST /push/ID`),
//!   `Megaconn-User`, `Megaconn-Topic` (the topic as the client wrote it),
//!   `Megaconn-Ts` (µs since the epoch, when the server read it),
//!   `Megaconn-Node` in a cluster, and `Nats-Msg-Id`, unique per message,
//!   so a batch sent again after a lost acknowledgement is stored once
//!   (within the stream's duplicate window, two minutes by default).
//!
//! At least once: a message is finished (its worker's budget freed) only
//! when JetStream acknowledged it as stored. Messages go out in windows of
//! at most [`WINDOW`], their acknowledgements awaited together within
//! [`ACK_TIMEOUT`]; a window not wholly acknowledged is sent again after a
//! back-off (100 ms doubling to 5 s), nothing behind it overtaking it. A
//! message larger than the server's `max_payload` can never be stored: it
//! is refused for good, counted (`upstream_refused{status="max_payload"}`)
//! and the operator told. The bounds are the webhook's (`--upstream-queue`,
//! `--upstream-queue-bytes`): a full budget closes or refuses the client,
//! never drops silently.
//!
//! The stream: one whose subjects hold `PREFIX.>` is used as it is (the
//! operator's limits and retention); with none, one is made, named
//! `MEGACONN_` and the prefix (`MEGACONN_MEGACONN_UP`), file storage, the
//! server's default limits. Credentials: in the URL (`nats://USER:PASS@`,
//! `nats://TOKEN@`) or `--upstream-nats-creds FILE`.

use super::{Arrival, Retry, Sender, UpstreamEvent, FIRST_BACKOFF, MAX_BACKOFF};
use crate::server::up_message::UpMessage;
use async_nats::jetstream::{self, context::PublishErrorKind};
use bytes::Bytes;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// The subject prefix when the URL names none.
pub(crate) const DEFAULT_PREFIX: &str = "megaconn.up";
/// How long a window's acknowledgements are waited for.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages sent before their acknowledgements are awaited.
pub(crate) const WINDOW: usize = 1024;
/// The most bytes of payload in one window (one larger message goes alone).
const WINDOW_BYTES: usize = 8 << 20;

/// Where messages go: the NATS servers and the subject prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NatsTarget {
    /// The servers as given (credentials included; show [`NatsTarget::shown`]).
    pub url: String,
    pub prefix: String,
}

impl NatsTarget {
    /// The URL without credentials, and the prefix.
    pub(crate) fn shown(&self) -> String {
        format!("{}/{}", crate::cluster::auth::redact(&self.url), self.prefix)
    }

    /// The stream made when none holds the prefix's subjects.
    fn stream_name(&self) -> String {
        let name: String = self.prefix.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        format!("MEGACONN_{name}")
    }
}

/// Whether `--upstream URL` names NATS.
pub(crate) fn is_nats(url: &str) -> bool {
    ["nats://", "tls://", "nats+tls://"].iter().any(|s| url.starts_with(s))
}

/// Check `nats://[CREDENTIALS@]HOST:PORT[/PREFIX]` (tls:// or nats+tls://
/// for TLS; several servers separated by commas before the path).
pub(crate) fn parse(url: &str) -> Result<NatsTarget, String> {
    let url = match url.strip_prefix("nats+tls://") {
        Some(rest) => format!("tls://{rest}"),
        None => url.to_string(),
    };
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let (servers, prefix) = match url[scheme_end..].find('/') {
        Some(i) => (&url[..scheme_end + i], &url[scheme_end + i + 1..]),
        None => (url.as_str(), ""),
    };
    let shown = crate::cluster::auth::redact(&url);
    crate::cluster::check_url(servers).map_err(|e| e.replace("--cluster", "--upstream"))?;
    let prefix = if prefix.is_empty() { DEFAULT_PREFIX } else { prefix };
    check_prefix(prefix).map_err(|why| format!("--upstream {shown}: the subject prefix '{prefix}' {why}; give e.g. nats://127.0.0.1:4222/devices.in"))?;
    Ok(NatsTarget { url: servers.to_string(), prefix: prefix.to_string() })
}

/// A subject prefix: dot-separated tokens, none empty, no wildcard, no
/// white space.
fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    if prefix.split('.').any(str::is_empty) {
        return Err("has an empty token (two dots, or a dot at an end)");
    }
    if prefix.contains(['*', '>']) {
        return Err("holds a wildcard (* or >), which a published subject cannot");
    }
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("holds white space");
    }
    Ok(())
}

/// The subject of a message of `topic` under `prefix`: each topic level
/// one token, what a token cannot hold percent-encoded (`.` `%2E`, space
/// `%20`, `*` `%2A`, `>` `%3E`, `%` `%25`, control characters), an empty
/// level `%00` (no topic holds U+0000), so two topics never share a subject.
pub(crate) fn subject(prefix: &str, topic: Option<&str>) -> String {
    let Some(topic) = topic else { return prefix.to_string() };
    let mut s = String::with_capacity(prefix.len() + topic.len() + 8);
    s.push_str(prefix);
    for level in topic.split('/') {
        s.push('.');
        if level.is_empty() {
            s.push_str("%00");
        }
        for c in level.chars() {
            match c {
                '.' | '*' | '>' | '%' => s.push_str(&format!("%{:02X}", c as u32)),
                c if c.is_whitespace() || c.is_control() => {
                    let mut b = [0; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        s.push_str(&format!("%{byte:02X}"));
                    }
                }
                c => s.push(c),
            }
        }
    }
    s
}

/// One stream message, ready to send (again).
pub(crate) struct Outgoing {
    subject: String,
    headers: async_nats::HeaderMap,
    payload: Bytes,
}

impl Outgoing {
    /// Its payload's size.
    pub(crate) fn len(&self) -> usize {
        self.payload.len()
    }
}

/// Turns what a worker handed over into stream messages, each with its own id.
pub(crate) struct Shaper {
    prefix: String,
    node: Option<String>,
    /// This sender's start, so ids never repeat across restarts.
    boot: u64,
    seq: u64,
}

impl Shaper {
    pub(crate) fn new(t: &NatsTarget, node: Option<String>) -> Shaper {
        Shaper { prefix: t.prefix.clone(), node, boot: rand::random(), seq: 0 }
    }

    pub(crate) fn outgoing(&mut self, m: UpMessage) -> Outgoing {
        self.seq += 1;
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("{}-{:016x}-{}", self.node.as_deref().unwrap_or("megaconn"), self.boot, self.seq).as_str());
        h.insert("Megaconn-Type", m.kind.as_str());
        h.insert("Megaconn-Conn", m.conn.to_string().as_str());
        if let Some(u) = &m.user {
            h.insert("Megaconn-User", u.as_str());
        }
        if let Some(t) = &m.topic {
            h.insert("Megaconn-Topic", t.as_str());
        }
        h.insert("Megaconn-Ts", m.ts.to_string().as_str());
        if let Some(n) = &self.node {
            h.insert("Megaconn-Node", n.as_str());
        }
        let payload = match (m.data, m.data_b64) {
            (Some(text), _) => Bytes::from(text.into_bytes()),
            (None, Some(b64)) => {
                use base64::Engine;
                // The worker encoded it; it decodes.
                Bytes::from(base64::engine::general_purpose::STANDARD.decode(b64).unwrap_or_default())
            }
            (None, None) => Bytes::new(),
        };
        Outgoing { subject: subject(&self.prefix, m.topic.as_deref()), headers: h, payload }
    }
}

/// The connection to NATS and its JetStream context, made (again) as needed.
struct Link {
    js: jetstream::Context,
    max_payload: usize,
}

/// Connect and find (or make) the stream; Err: why not, said once per
/// change of reason.
async fn link(t: &NatsTarget, creds: Option<&str>) -> Result<Link, String> {
    let auth = crate::cluster::NatsAuth { creds: creds.map(str::to_string), ..Default::default() };
    let opts = async_nats::ConnectOptions::new()
        .name("megaconn-upstream")
        .connection_timeout(Duration::from_secs(2))
        .max_reconnects(None)
        .reconnect_delay_callback(|n| Duration::from_millis((100u64 << n.min(5)).min(2000)));
    let opts = auth.with_url_credentials(&t.url).apply(opts).map_err(|e| e.replace("--cluster-creds", "--upstream-nats-creds"))?;
    let servers = crate::cluster::check_url(&t.url).map_err(|e| e.replace("--cluster", "--upstream"))?;
    let client = opts.connect(servers).await.map_err(|e| format!("cannot connect to {}: {e}", crate::cluster::auth::redact(&t.url)))?;
    let max_payload = client.server_info().max_payload;
    let mut js = jetstream::new(client);
    js.set_timeout(ACK_TIMEOUT);
    let wanted = format!("{}.>", t.prefix);
    match js.stream_by_subject(wanted.as_str()).await {
        Ok(_) => {}
        Err(_) => {
            let config = jetstream::stream::Config { name: t.stream_name(), subjects: vec![t.prefix.clone(), wanted], ..Default::default() };
            js.get_or_create_stream(config).await.map_err(|e| match e.kind() {
                jetstream::context::CreateStreamErrorKind::JetStreamUnavailable => {
                    "the NATS server has no JetStream: start it with -js (nats-server -js -sd DIR), or make a stream holding the prefix's subjects".to_string()
                }
                _ => format!("no stream holds {}.> and making {} failed: {e}", t.prefix, t.stream_name()),
            })?;
        }
    }
    Ok(Link { js, max_payload })
}

/// How one window ended.
enum Sent {
    /// The window's first `n` messages stored (all of them, or those
    /// before one larger than `max_payload`), `duplicates` of them already
    /// stored before.
    Stored {
        n: usize,
        duplicates: u64,
    },
    /// The message at the front can never be stored (larger than `max_payload`).
    TooLarge,
    Retry(Retry, String),
}

/// Send the first `n` queued messages (up to one larger than the
/// server's `max_payload`) and wait for their acknowledgements.
async fn window(l: &Link, s: &Sender, n: usize) -> Sent {
    let mut acks = Vec::with_capacity(n);
    for e in s.queue.iter().take(n) {
        let super::Entry::Msg { wire: super::Wire::Nats(o), .. } = e else { continue };
        match l.js.publish_with_headers(o.subject.clone(), o.headers.clone(), o.payload.clone()).await {
            Ok(ack) => acks.push(ack),
            Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded && acks.is_empty() => return Sent::TooLarge,
            // The window ends before it: those before are stored, it
            // comes first next time round (and is refused then).
            Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => break,
            // Those before it are awaited next time round (sent again: stored once).
            Err(e) => return Sent::Retry(Retry::Io, e.to_string()),
        }
    }
    let (mut duplicates, n) = (0, acks.len());
    for ack in acks {
        match ack.await {
            Ok(a) => duplicates += a.duplicate as u64,
            Err(e) if e.kind() == PublishErrorKind::TimedOut => return Sent::Retry(Retry::Timeout, e.to_string()),
            Err(e) if e.kind() == PublishErrorKind::StreamNotFound => return Sent::Retry(Retry::NoStream, e.to_string()),
            Err(e) => return Sent::Retry(Retry::Io, e.to_string()),
        }
    }
    Sent::Stored { n, duplicates }
}

/// The sender's loop for NATS: windows in order, each acknowledged before
/// the next; a failure sends the same window again after a back-off.
pub(super) async fn run(t: NatsTarget, s: &mut Sender, rx: &mut UnboundedReceiver<Arrival>) {
    let mut backoff = FIRST_BACKOFF;
    let mut link_: Option<Link> = None;
    let mut said: Option<String> = None;
    loop {
        if !s.ready(rx).await {
            return;
        }
        let l = match &link_ {
            Some(l) => l,
            None => match link(&t, s.cfg.nats_creds.as_deref()).await {
                Ok(l) => {
                    said = None;
                    link_.insert(l)
                }
                Err(why) => {
                    crate::stats::counters::bump(&mut s.counters.lock().expect("counters").retries, Retry::Connect.label().as_str());
                    if said.as_ref() != Some(&why) {
                        let _ = (s.sink)(UpstreamEvent::Note(format!("upstream: {}: {why}; trying again", t.shown())));
                        said = Some(why);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
        };
        let n = super::batch_len(s.queue.iter().map_while(super::Entry::json_len), WINDOW, WINDOW_BYTES);
        match window(l, s, n).await {
            Sent::Stored { n, duplicates } => {
                backoff = FIRST_BACKOFF;
                s.counters.lock().expect("counters").duplicates += duplicates;
                if !s.taken(n) {
                    return;
                }
            }
            Sent::TooLarge => {
                *s.counters.lock().expect("counters").refused.entry("max_payload".into()).or_insert(0) += 1;
                let note = format!(
                    "upstream: {}: a message larger than the NATS server's max_payload ({} bytes) is not sent (counted as upstream_refused{{status=\"max_payload\"}}); raise max_payload or lower --max-message-bytes",
                    t.shown(),
                    l.max_payload
                );
                if !(s.sink)(UpstreamEvent::Note(note)) || !s.finish(1) {
                    return;
                }
            }
            Sent::Retry(reason, why) => {
                crate::stats::counters::bump(&mut s.counters.lock().expect("counters").retries, reason.label().as_str());
                if reason == Retry::NoStream {
                    // Made again (or found) before the next try.
                    link_ = None;
                }
                if said.as_ref() != Some(&why) {
                    let _ = (s.sink)(UpstreamEvent::Note(format!("upstream: {}: {why}; sending again", t.shown())));
                    said = Some(why);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_servers_and_a_prefix() {
        assert_eq!(parse("nats://127.0.0.1:4222").unwrap(), NatsTarget { url: "nats://127.0.0.1:4222".into(), prefix: DEFAULT_PREFIX.into() });
        assert_eq!(parse("nats://u:p@h:4222/devices.in").unwrap(), NatsTarget { url: "nats://u:p@h:4222".into(), prefix: "devices.in".into() });
        assert_eq!(parse("nats+tls://h:4222/x").unwrap().url, "tls://h:4222");
        assert!(parse("nats://h:4222/a..b").unwrap_err().contains("empty token"));
        assert!(parse("nats://h:4222/a.>").unwrap_err().contains("wildcard"));
        assert!(parse("nats://:4222").unwrap_err().contains("--upstream"));
        assert!(!parse("nats://u:secret@h:4222/x.y").unwrap().shown().contains("secret"));
        assert!(is_nats("tls://h:1") && !is_nats("http://h/"));
    }

    #[test]
    fn topics_become_subjects_one_token_a_level() {
        assert_eq!(subject("p", Some("tele/dev1/temp")), "p.tele.dev1.temp");
        assert_eq!(subject("p", None), "p");
        assert_eq!(subject("p", Some("a.b/c d")), "p.a%2Eb.c%20d");
        assert_eq!(subject("p", Some("/a//b/")), "p.%00.a.%00.b.%00");
        assert_eq!(subject("p", Some("x*>%")), "p.x%2A%3E%25");
        // Distinct topics, distinct subjects.
        assert_ne!(subject("p", Some("a.b")), subject("p", Some("a/b")));
        assert_ne!(subject("p", Some("a%2Eb")), subject("p", Some("a.b")));
    }

    #[test]
    fn a_message_keeps_its_bytes_and_identity() {
        let t = parse("nats://h:4222/up").unwrap();
        let mut shape = Shaper::new(&t, Some("n1".into()));
        let a = shape.outgoing(UpMessage::message(7, Some("alice"), Some("tele/d1"), false, &[0, 159, 146, 150]));
        let b = shape.outgoing(UpMessage::message(7, None, None, true, b"hi"));
        assert_eq!((a.subject.as_str(), &a.payload[..]), ("up.tele.d1", &[0u8, 159, 146, 150][..]));
        assert_eq!(a.headers.get("Megaconn-User").map(|v| v.as_str()), Some("alice"));
        assert_eq!(a.headers.get("Megaconn-Topic").map(|v| v.as_str()), Some("tele/d1"));
        assert_eq!(a.headers.get("Megaconn-Conn").map(|v| v.as_str()), Some("7"));
        assert_eq!(a.headers.get("Megaconn-Node").map(|v| v.as_str()), Some("n1"));
        assert_eq!((b.subject.as_str(), &b.payload[..]), ("up", &b"hi"[..]));
        assert!(b.headers.get("Megaconn-User").is_none());
        assert_ne!(a.headers.get("Nats-Msg-Id"), b.headers.get("Nats-Msg-Id"));
        assert_eq!(t.stream_name(), "MEGACONN_UP");
    }
}
