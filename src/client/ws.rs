//! The client side of `--protocol ws`: the Upgrade request
//! and its check, masked pings (heartbeats) and binary requests carrying
//! their intended send time, and what comes back: pongs (round trips),
//! echoed requests (latency), pushes (JSON text or binary), the server's
//! pings (answered) and its close (answered, then counted by status code).
//!
//! `--ws-deflate`: permessage-deflate offered with no context takeover
//! either way and required of the server; one compressor and one
//! inflater per worker serve every connection (nothing per connection),
//! what comes compressed is inflated under [`MAX_MESSAGE`], requests and
//! `--message` go compressed, and wire and message bytes are counted.

use super::config::Traffic;
use super::replies::Replies;
use super::speak::{Due, Ear, Inflight, Speaker, Stop};
use super::ws_message::WsMessage;
use crate::proto::frame::stamp_of;
use crate::proto::push;
use crate::proto::ws::deflate::{Deflater, Inflater};
use crate::proto::ws::frame::{self, Event, Fragments, Opcode, Reader, Role};
use crate::proto::ws::handshake;

/// Largest message the client accepts from a server (all fragments).
pub(crate) const MAX_MESSAGE: usize = 1 << 20;

/// The request target of connection `g`, with its subscriptions.
pub(crate) fn target_with_topics(target: &str, topics: &[String]) -> String {
    if topics.is_empty() {
        return target.to_string();
    }
    let sep = if target.contains('?') { '&' } else { '?' };
    format!("{target}{sep}subscribe={}", topics.join(","))
}

/// A heartbeat: a masked ping carrying its intended send time (padded to
/// `size`, at most 125 bytes, the control-frame limit).
pub(crate) fn encode_ping(out: &mut Vec<u8>, stamp_us: u64, size: usize, mask: [u8; 4]) {
    frame::encode(out, true, Opcode::Ping, &stamped(stamp_us, size.clamp(8, frame::MAX_CONTROL)), Some(mask));
}

/// A request: a masked binary message carrying its intended send time.
pub(crate) fn encode_request(out: &mut Vec<u8>, stamp_us: u64, size: usize, mask: [u8; 4]) {
    frame::encode(out, true, Opcode::Binary, &stamped(stamp_us, size.max(8)), Some(mask));
}

fn stamped(stamp_us: u64, size: usize) -> Vec<u8> {
    let mut p = stamp_us.to_be_bytes().to_vec();
    p.resize(size, 0);
    p
}

pub(super) use super::push_json::account_text;

/// What one read of a WebSocket connection found besides the accounting.
#[derive(Default)]
pub(crate) struct ReadOutcome {
    /// The 101 arrived and checked out in this read.
    pub upgraded: bool,
    /// The server closed with this status code (0: none given).
    pub closed_with: Option<u16>,
    /// It closed with 1012 (Service Restart): come back after this many ms.
    pub goaway: Option<u32>,
}

/// Everything the read path of one WebSocket connection needs.
pub(crate) struct WsRead<'a> {
    /// Still waiting for the 101: the key the answer must match.
    pub key: Option<&'a str>,
    /// `--ws-subprotocol`: the 101 must pick one of these.
    pub subprotocols: &'a [String],
    /// `--message`: its echoes are recognised (and timed by their
    /// `{ts}`) as replies (with a request rate) or heartbeat answers.
    pub message: Option<(&'a super::ws_message::WsMessage, bool)>,
    pub frag: &'a mut Option<Box<Fragments>>,
    pub tmp: &'a mut Vec<u8>,
    /// Frames to send back (pongs, the close answer), each masked with
    /// a fresh key from `rng`.
    pub out: &'a mut Vec<u8>,
    pub rng: &'a mut rand::rngs::SmallRng,
    pub outcome: ReadOutcome,
    /// `--ws-deflate`: the worker's inflater (the offer went out and the
    /// server must have accepted it).
    pub inflate: Option<&'a mut Inflater>,
}

impl WsRead<'_> {
    /// Consume the handshake answer (if due) and whole frames from `buf`.
    pub(crate) fn consume(&mut self, buf: &[u8], replies: &mut Replies<'_>) -> Result<usize, &'static str> {
        let mut pos = 0;
        if let Some(key) = self.key {
            match handshake::parse_response_deflate(buf, key, self.subprotocols, self.inflate.is_some())? {
                None => return Ok(0),
                Some((_, false)) if self.inflate.is_some() => return Err("ws_deflate_declined"),
                Some((used, _)) => {
                    self.key = None;
                    self.outcome.upgraded = true;
                    pos = used;
                }
            }
        }
        let (out, rng, outcome, message) = (&mut *self.out, &mut *self.rng, &mut self.outcome, self.message);
        let mut mask = || Some(rand::Rng::gen::<[u8; 4]>(&mut *rng));
        let mut reader = Reader { role: Role::Client, max: MAX_MESSAGE, tmp: self.tmp, frag: self.frag, inflate: self.inflate.as_deref_mut() };
        let used = reader.consume(&buf[pos..], |ev| {
            match ev {
                Event::Pong(p) => replies.beat_answered(stamp_of(p)),
                Event::Ping(p) => frame::encode(out, true, Opcode::Pong, p, mask()),
                Event::Message { text, data } if message.is_some_and(|(m, _)| m.binary != text) && message.and_then(|(m, _)| m.echo_of(data)).is_some() => {
                    let (m, as_requests) = message.expect("checked");
                    replies.stats.raw_messages_in += 1;
                    let sent = m.echo_of(data).flatten();
                    if as_requests {
                        replies.reply(sent);
                    } else {
                        replies.beat_answered(sent);
                    }
                }
                // Binary pushes start with the push kind byte (8); an
                // echoed request starts with its stamp's top byte (0).
                Event::Message { text: false, data } if data.first() == Some(&8) => {
                    let p = push::decode(&data[1..])?;
                    super::pushes::account(replies.stats, replies.push, replies.seen, &p, push::wall_us());
                }
                Event::Message { text: false, data } => replies.reply(stamp_of(data)),
                Event::Message { text: true, data } => account_text(replies, data),
                Event::Close(code, reason) => {
                    if code == Some(crate::proto::goaway::WS_RESTART) {
                        outcome.goaway = Some(crate::proto::goaway::decode_json(reason).unwrap_or(0));
                    }
                    match code {
                        Some(c) => frame::encode_close(out, c, mask()),
                        None => frame::encode(out, true, Opcode::Close, &[], mask()),
                    }
                    outcome.closed_with = Some(code.unwrap_or(0));
                    return Err("ws_server_close");
                }
            }
            Ok(())
        });
        if let Some(i) = self.inflate.as_deref_mut() {
            let t = std::mem::take(&mut i.tally);
            replies.stats.ws_inflated += t.messages;
            replies.stats.ws_inflated_wire_bytes += t.wire_bytes;
            replies.stats.ws_inflated_message_bytes += t.message_bytes;
        }
        match used {
            Ok(n) => Ok(pos + n),
            Err(reason) => {
                if outcome.closed_with.is_none() {
                    // Our own verdict on a bad frame: tell the server why.
                    frame::encode_close(out, frame::close_code(reason), mask());
                }
                Err(reason)
            }
        }
    }
}

/// `--protocol ws` as a worker speaks it.
pub(crate) struct WsSpeaker {
    traffic: Traffic,
    host_header: String,
    header_lines: String,
    /// Handshake keys derive from this and the slot (`handshake::client_key`).
    seed: u64,
    rng: rand::rngs::SmallRng,
    /// `--message`: sent instead of pings (or of stamped requests), and
    /// how its echoes are recognised.
    message: Option<WsMessage>,
    shard: u64,
    /// Where payloads are unmasked.
    unmasked: Vec<u8>,
    /// `--jwt-secret-file`: a token per connection, as an Authorization header.
    tokens: Option<super::token::Minter>,
    /// `--ws-deflate`: the worker's codec and what it sent since the last
    /// read (moved into the counters there).
    deflate: Option<Box<ClientDeflate>>,
}

/// A client worker's permessage-deflate state, shared by its connections.
#[derive(Default)]
struct ClientDeflate {
    deflater: Deflater,
    inflater: Inflater,
    /// Messages, their bytes and their compressed bytes, sent since the
    /// last read.
    sent: (u64, u64, u64),
}

impl WsSpeaker {
    pub(crate) fn new(traffic: &Traffic, host_header: &str, shard: u64) -> WsSpeaker {
        use rand::SeedableRng;
        WsSpeaker {
            traffic: traffic.clone(),
            host_header: host_header.to_string(),
            header_lines: match traffic.ws_deflate {
                true => format!("{}Sec-WebSocket-Extensions: {}\r\n", traffic.header_lines(), crate::proto::ws::deflate::CLIENT_OFFER),
                false => traffic.header_lines(),
            },
            seed: rand::random(),
            rng: rand::rngs::SmallRng::from_entropy(),
            message: traffic.raw_message.as_ref().map(|m| WsMessage::new(m, traffic.ws_binary)),
            shard,
            unmasked: Vec::new(),
            tokens: traffic.jwt_secret.as_deref().map(super::token::Minter::new),
            deflate: traffic.ws_deflate.then(Default::default),
        }
    }

    /// One masked message: compressed with `--ws-deflate`.
    fn send(&mut self, out: &mut Vec<u8>, opcode: Opcode, body: &[u8]) {
        let mask = rand::Rng::gen(&mut self.rng);
        match self.deflate.as_deref_mut() {
            Some(d) => {
                let mut z = Vec::with_capacity(body.len() / 2 + 16);
                d.deflater.compress(body, &mut z);
                d.sent.0 += 1;
                d.sent.1 += body.len() as u64;
                d.sent.2 += z.len() as u64;
                frame::encode_compressed(out, opcode, &z, Some(mask));
            }
            None => frame::encode(out, true, opcode, body, Some(mask)),
        }
    }

    /// `--message` for this send: its n-th of the schedule, into a masked
    /// frame.
    fn message(&mut self, out: &mut Vec<u8>, due: &Due) {
        let Some(m) = &self.message else { return };
        let seq = due.intended.saturating_sub(due.start) / due.period_us.max(1);
        let mut body = Vec::new();
        m.render(&mut body, due.conn, self.shard, seq, due.intended);
        let op = if m.binary { Opcode::Binary } else { Opcode::Text };
        self.send(out, op, &body);
    }
}

impl Speaker for WsSpeaker {
    fn upgrades(&self) -> bool {
        true
    }

    /// The Upgrade; a `--reconnect` client adds `since=` resume tokens
    /// for every topic and the broadcasts (at first, bare names: their
    /// positions).
    fn open(&mut self, out: &mut Vec<u8>, slot: usize, conn: u64, seen: &super::pushes::PushSeen) {
        let topics = self.traffic.topics_of(conn);
        let mut target = target_with_topics(&self.traffic.ws_target, topics);
        if self.traffic.reconnect {
            let tokens: Vec<String> =
                self.traffic.streams_of(conn).map(|t| super::pushes::position(seen, t).map_or_else(|| t.to_string(), |at| push::resume_token(t, at))).collect();
            let sep = if target.contains('?') { '&' } else { '?' };
            target = format!("{target}{sep}since={}", tokens.join(","));
        }
        let key = handshake::client_key(self.seed, slot as u64);
        match &self.tokens {
            Some(m) => {
                let lines = format!("{}Authorization: Bearer {}\r\n", self.header_lines, m.mint(conn));
                handshake::write_request(out, &self.host_header, &target, &key, &lines);
            }
            None => handshake::write_request(out, &self.host_header, &target, &key, &self.header_lines),
        }
    }

    fn beats(&self) -> bool {
        true
    }

    /// Pings are always answered by a pong; a `--message` sent as the
    /// heartbeat may be echoed or not (the server decides): not judged.
    fn hears_beats(&self) -> bool {
        self.message.is_none() || self.traffic.request_rate.is_some()
    }

    fn beat(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) {
        // With a request rate the message goes as requests and
        // heartbeats stay pings.
        if self.message.is_some() && self.traffic.request_rate.is_none() {
            return self.message(out, due);
        }
        encode_ping(out, due.intended, self.traffic.payload, rand::Rng::gen(&mut self.rng));
    }

    fn request(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) -> bool {
        match self.message {
            Some(_) => self.message(out, due),
            None if self.deflate.is_some() => self.send(out, Opcode::Binary, &stamped(due.intended, self.traffic.payload.max(8))),
            None => encode_request(out, due.intended, self.traffic.payload, rand::Rng::gen(&mut self.rng)),
        }
        true
    }

    /// The 101 (while upgrading), then pongs, echoed requests, pushes,
    /// pings and the server's close.
    fn hear(&mut self, buf: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let key = ear.upgrading.then(|| handshake::client_key(self.seed, ear.slot as u64));
        let mut rd = WsRead {
            key: key.as_deref(),
            subprotocols: &self.traffic.subprotocols,
            message: self.message.as_ref().map(|m| (m, self.traffic.request_rate.is_some())),
            frag: ear.ws_frag,
            tmp: &mut self.unmasked,
            out: ear.answer,
            rng: &mut self.rng,
            outcome: Default::default(),
            inflate: self.deflate.as_deref_mut().map(|d| &mut d.inflater),
        };
        let used = rd.consume(buf, replies);
        let ReadOutcome { upgraded, closed_with, goaway } = rd.outcome;
        ear.upgrading &= !upgraded;
        ear.goaway = goaway.or(ear.goaway);
        match (used, closed_with) {
            (Err(_), Some(code)) => Err(format!("ws_close_{code}").into()),
            (used, _) => Ok(used?),
        }
    }

    /// What went out compressed since the last read, into the counters.
    fn heard(&mut self, replies: &mut Replies<'_>) {
        if let Some(d) = self.deflate.as_deref_mut() {
            let (n, before, after) = std::mem::take(&mut d.sent);
            replies.stats.ws_deflate_sent += n;
            replies.stats.ws_deflate_sent_message_bytes += before;
            replies.stats.ws_deflate_sent_wire_bytes += after;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_join_the_target() {
        assert_eq!(target_with_topics("/c?x=1", &["a".into(), "b".into()]), "/c?x=1&subscribe=a,b");
    }

    mod heard {
        use super::*;
        use crate::client::speak::hearing::{same_at_every_cut, Hearing, NOW};
        use crate::net::ReadEnd;
        use crate::proto::Protocol;

        /// A speaker whose handshake key for slot 0 is known (seed 7),
        /// still waiting for its 101.
        fn make() -> (Box<dyn Speaker>, Hearing) {
            let mut s = WsSpeaker::new(&Traffic { protocol: Protocol::Ws, ..Default::default() }, "h", 0);
            s.seed = 7;
            (Box::new(s), Hearing::new(true))
        }

        fn switching() -> Vec<u8> {
            let accept = handshake::accept_key(handshake::client_key(7, 0).as_bytes());
            format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n").into_bytes()
        }

        #[test]
        fn frames_cut_anywhere_are_accounted_as_whole() {
            let mut wire = switching();
            frame::encode(&mut wire, true, Opcode::Pong, &stamped(NOW - 100, 8), None);
            frame::encode(&mut wire, true, Opcode::Binary, &stamped(NOW - 200, 16), None);
            frame::encode(&mut wire, true, Opcode::Ping, b"p", None);
            let push = br#"{"stream":"topic","topic":"a","seq":1,"ts":1,"epoch":0}"#;
            frame::encode(&mut wire, false, Opcode::Text, &push[..10], None);
            frame::encode(&mut wire, true, Opcode::Continuation, &push[10..], None);
            let (end, _, h) = same_at_every_cut(&make, &wire);
            assert_eq!(end, ReadEnd::Open);
            assert!(!h.upgrading, "the 101 established the connection");
            assert_eq!((h.stats.heartbeats_answered, h.stats.replies, h.stats.push_received), (1, 1, 1));
            // The ping's pong: 2 header bytes, the mask, the payload.
            assert_eq!(h.answer.len(), 2 + 4 + 1);
            assert_eq!(h.answer[0], 0x80 | Opcode::Pong as u8);
            assert_eq!(h.kept(), 0);
        }

        #[test]
        fn refusals_and_closes_end_as_they_always_did() {
            let named = |s: &str| ReadEnd::Error(s.into());
            let after_101 = |f: &dyn Fn(&mut Vec<u8>)| {
                let mut wire = switching();
                f(&mut wire);
                same_at_every_cut(&make, &wire)
            };
            let (end, _, h) = after_101(&|w| frame::encode_close(w, 1008, None));
            assert_eq!(end, named("ws_close_1008"));
            assert_eq!(h.answer.len(), 2 + 4 + 2, "the close is answered with its code");
            let (end, _, h) = after_101(&|w| frame::encode(w, true, Opcode::Binary, b"12345678", Some([1, 2, 3, 4])));
            assert_eq!(end, named("ws_masked_frame"));
            assert_eq!(h.answer.len(), 2 + 4 + 2, "our verdict goes to the server as a close");
            let (end, _, h) = after_101(&|w| crate::proto::goaway::write_ws(w, 250));
            assert_eq!((end, h.goaway), (named("ws_close_1012"), Some(250)));
            let bad_accept = b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: nope\r\n\r\n";
            assert_eq!(same_at_every_cut(&make, bad_accept).0, named("ws_handshake_bad_accept"));
            assert_eq!(same_at_every_cut(&make, b"HTTP/1.1 404 Not Found\r\n\r\n").0, named("http_404"));
            assert_eq!(same_at_every_cut(&make, b"HTTP/1.1 101\r\nBad Header\r\n\r\n").0, named("ws_handshake_bad_response"));
        }
    }
}
