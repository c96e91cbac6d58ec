//! What a client connection says and how it hears the answers: one type
//! per protocol behind one trait, so the worker (schedules, connects,
//! reads) names no protocol. Framed, echo8 and the server-only protocols
//! live here; http, ws, raw, sse and mqtt in their own modules.
//!
//! A speaker takes bytes, never a socket: the worker reads (through TLS
//! where there is TLS, keeping a cut message in the connection's spill)
//! and hands each chunk to [`Speaker::hear`], which says how much it
//! used. So every protocol's reading is unit-tested and fuzzed on bytes
//! alone, and the read loop is written once (`worker.rs`).

use super::config::Traffic;
use super::pushes::PushSeen;
use super::replies::Replies;
use crate::net;
use crate::proto::frame::{self, Kind};
use crate::proto::push;
use crate::proto::{Protocol, ECHO8_LEN};
use std::borrow::Cow;
use std::collections::VecDeque;

#[cfg(test)]
pub(crate) mod hearing;

/// Intended send times of requests awaiting responses (HTTP), in order.
/// Boxed: 8 bytes per idle connection instead of a 32-byte VecDeque.
#[allow(clippy::box_collection)]
pub(crate) type Inflight = Option<Box<VecDeque<u64>>>;

/// One send of a schedule: to which connection, when it was due, and
/// where in its schedule it falls.
pub(crate) struct Due {
    /// The connection's index in the plan.
    pub conn: u64,
    /// Intended send time (µs, monotonic).
    pub intended: u64,
    /// The schedule's period per connection and start (µs).
    pub period_us: u64,
    pub start: u64,
}

/// What a speaker hearing one connection's bytes needs of it, and what
/// it tells the worker back, for one readiness event (every chunk of it).
pub(crate) struct Ear<'a> {
    /// The connection's slot in its worker.
    pub slot: usize,
    /// Still waiting for the answer to its opening (a WebSocket Upgrade,
    /// an event stream's 200, an MQTT CONNACK). The speaker clears it
    /// when that answer came and checked out: the worker then counts
    /// the connection established.
    pub upgrading: bool,
    pub inflight: &'a mut Inflight,
    /// A WebSocket message still arriving in fragments.
    pub ws_frag: &'a mut Option<Box<crate::proto::ws::frame::Fragments>>,
    /// Bytes to send back (WebSocket pongs, the close answer, MQTT acks).
    pub answer: &'a mut Vec<u8>,
    /// Set with [`GOAWAY`]: the server is draining, reconnect elsewhere
    /// after this many ms.
    pub goaway: Option<u32>,
}

/// Loss reason of a connection a draining server closed with a hint.
pub(crate) const GOAWAY: &str = "server_goaway";

/// Why what a connection heard ends it, named like the loss counter
/// ("bad_frame_too_long", "ws_close_1008"): most are fixed names, a few
/// carry a code, so no allocation unless one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stop(pub(crate) Cow<'static, str>);

impl From<&'static str> for Stop {
    fn from(reason: &'static str) -> Stop {
        Stop(Cow::Borrowed(reason))
    }
}

impl From<String> for Stop {
    fn from(reason: String) -> Stop {
        Stop(Cow::Owned(reason))
    }
}

impl From<Stop> for String {
    fn from(stop: Stop) -> String {
        stop.0.into_owned()
    }
}

/// A protocol as the client speaks it.
pub(crate) trait Speaker {
    /// Whether what `open` writes must be answered before the connection
    /// is established (a WebSocket Upgrade): till then it stays
    /// "connecting", under the connect timeout, until a `hear` clears
    /// `Ear::upgrading`.
    fn upgrades(&self) -> bool {
        false
    }

    /// TCP (and TLS) is up: write into `out` what goes first
    /// (subscriptions, an Upgrade, a first message). `seen`: where the
    /// connection stopped in each stream before it was lost (a resume).
    fn open(&mut self, _out: &mut Vec<u8>, _slot: usize, _conn: u64, _seen: &PushSeen) {}

    /// Whether the protocol sends on the heartbeat schedule.
    fn beats(&self) -> bool;

    /// Whether every heartbeat's answer is recognised as one (a ping's
    /// pong, a stamped echo), so one not answered is the server's fault
    /// and counts against the run (`heartbeats_unanswered`). False where
    /// answers cannot be told apart (a raw message without a stamp).
    fn hears_beats(&self) -> bool {
        self.beats()
    }

    /// A heartbeat into `out`.
    fn beat(&mut self, _out: &mut Vec<u8>, _due: &Due, _inflight: &mut Inflight) {}

    /// A request into `out` (its intended time travels in it, or in
    /// `inflight`); false: this protocol sends no requests.
    ///
    /// (See also [`Speaker::acknowledges_requests`].)
    fn request(&mut self, out: &mut Vec<u8>, due: &Due, inflight: &mut Inflight) -> bool;

    /// Whether a request is answered at all. False (MQTT QoS 0): each is
    /// counted in `requests_unacknowledged`, not as a request awaiting
    /// a reply (which would count as a timeout).
    fn acknowledges_requests(&self) -> bool {
        true
    }

    /// A request this speaker wrote went out: count it where the
    /// protocol counts its own kinds (MQTT: `mqtt_published` per QoS),
    /// besides the worker's `requests_sent`.
    fn count_request(&self, _stats: &mut super::snapshot::ClientSnapshot) {}

    /// The bytes the connection has received so far and not used
    /// (what an earlier chunk left, then the new): account for every
    /// whole message in them and return how many bytes those took; the
    /// rest comes back, with more, in the next call. `Err`: the
    /// connection must be closed, for that reason.
    fn hear(&mut self, bytes: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop>;

    /// The worker read all it will for this readiness event: settle what
    /// is counted per read rather than per chunk.
    fn heard(&mut self, _replies: &mut Replies<'_>) {}
}

/// The speaker of a worker's protocol.
pub(crate) fn speaker(traffic: &Traffic, host_header: &str, shard: u64) -> Box<dyn Speaker> {
    match traffic.protocol {
        Protocol::Framed => {
            Box::new(Framed { traffic: traffic.clone(), assembling: Default::default(), tokens: traffic.jwt_secret.as_deref().map(super::token::Minter::new) })
        }
        Protocol::Echo8 => Box::new(Echo8 { wall_offset_us: crate::proto::push::wall_us() as i64 - crate::sys::mono_us() as i64 }),
        Protocol::Http => Box::new(super::http::Http::new(traffic, host_header)),
        Protocol::Ws => Box::new(super::ws::WsSpeaker::new(traffic, host_header, shard)),
        Protocol::Raw => Box::new(super::raw::RawSpeaker::new(traffic)),
        Protocol::Sse => Box::new(super::sse::SseSpeaker::new(traffic, host_header)),
        Protocol::Mqtt if traffic.mqtt_ws => Box::new(super::mqtt_ws::MqttWsSpeaker::new(traffic, host_header, shard)),
        Protocol::Mqtt => Box::new(super::mqtt::MqttSpeaker::new(traffic, shard)),
        // Server-only protocols (refused by the client's plan): drop.
        Protocol::Echo | Protocol::Discard => Box::new(Drain),
    }
}

/// megaconn frames: stamped heartbeats and requests, subscriptions, pushes.
struct Framed {
    traffic: Traffic,
    /// `--jwt-secret-file`: a token per connection, as an auth frame first.
    tokens: Option<super::token::Minter>,
    /// Pushes over one frame, by connection slot, until their last part.
    assembling: std::collections::HashMap<usize, push::Assembly>,
}

impl Speaker for Framed {
    /// Subscriptions; a `--reconnect` client resumes instead: every topic
    /// and the broadcasts, from where it stopped (at first, for their
    /// positions).
    fn open(&mut self, out: &mut Vec<u8>, _slot: usize, conn: u64, seen: &PushSeen) {
        if let Some(m) = &self.tokens {
            crate::proto::frame::encode(out, Kind::Auth, m.mint(conn).as_bytes());
        }
        if !self.traffic.reconnect {
            for t in self.traffic.topics_of(conn) {
                push::encode_subscription(out, Kind::Subscribe, t);
            }
            return;
        }
        for t in self.traffic.streams_of(conn) {
            push::encode_resume(out, t, super::pushes::position(seen, t));
        }
    }

    fn beats(&self) -> bool {
        true
    }

    fn beat(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) {
        frame::encode_stamped(out, Kind::Heartbeat, due.intended, self.traffic.payload);
    }

    fn request(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) -> bool {
        frame::encode_stamped(out, Kind::Request, due.intended, self.traffic.payload.max(8));
        true
    }

    fn hear(&mut self, bytes: &[u8], ear: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let (slot, assembling, goaway) = (ear.slot, &mut self.assembling, &mut ear.goaway);
        let used = net::decode_all(bytes, &mut |f| {
            match f.kind {
                Kind::HeartbeatAck => replies.beat_answered(frame::stamp_of(f.payload)),
                Kind::Reply => replies.reply(frame::stamp_of(f.payload)),
                Kind::Rejected => replies.rejected(),
                Kind::Push if push::is_continued(f.payload) => {
                    assembling.insert(slot, push::Assembly::start(f.payload));
                }
                Kind::Push => {
                    let p = push::decode(f.payload)?;
                    super::pushes::account(replies.stats, replies.push, replies.seen, &p, push::wall_us());
                }
                Kind::PushPart => {
                    let a = assembling.get_mut(&slot).ok_or("bad_frame_push_part")?;
                    if a.add(f.payload)? {
                        let a = assembling.remove(&slot).expect("present");
                        super::pushes::account(replies.stats, replies.push, replies.seen, &a.push()?, push::wall_us());
                    }
                }
                Kind::Subscribed => {
                    let (topic, recovered, at) = push::decode_subscribed(f.payload)?;
                    super::pushes::subscribed(replies.stats, replies.seen, topic, recovered, at);
                }
                Kind::Goaway => {
                    *goaway = Some(crate::proto::goaway::decode_framed(f.payload)?);
                    return Err(GOAWAY);
                }
                _ => return Err("bad_frame_unexpected_kind"),
            }
            Ok(())
        })?;
        Ok(used)
    }
}

/// echo8: 8-byte epoch-millisecond stamps, echoed.
struct Echo8 {
    /// Wall-clock minus monotonic µs, for the epoch-ms stamps.
    wall_offset_us: i64,
}

impl Speaker for Echo8 {
    fn beats(&self) -> bool {
        false
    }

    fn request(&mut self, out: &mut Vec<u8>, due: &Due, _: &mut Inflight) -> bool {
        let ms = (due.intended as i64 + self.wall_offset_us) / 1000;
        out.extend_from_slice(&(ms as u64).to_be_bytes());
        true
    }

    fn hear(&mut self, bytes: &[u8], _: &mut Ear<'_>, replies: &mut Replies<'_>) -> Result<usize, Stop> {
        let whole = bytes.len() / ECHO8_LEN * ECHO8_LEN;
        for u in bytes[..whole].chunks_exact(ECHO8_LEN) {
            // Back from epoch milliseconds to our monotonic µs.
            let ms = u64::from_be_bytes(u.try_into().expect("8 bytes"));
            replies.reply(Some((ms as i64 * 1000 - self.wall_offset_us).max(0) as u64));
        }
        Ok(whole)
    }
}

/// Server-only protocols (echo, discard; refused by the client's plan):
/// say nothing, drop what comes.
struct Drain;

impl Speaker for Drain {
    fn beats(&self) -> bool {
        false
    }

    fn request(&mut self, _: &mut Vec<u8>, _: &Due, _: &mut Inflight) -> bool {
        false
    }

    fn hear(&mut self, bytes: &[u8], _: &mut Ear<'_>, _: &mut Replies<'_>) -> Result<usize, Stop> {
        Ok(bytes.len())
    }
}
