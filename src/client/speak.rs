//! What a client connection says and how it hears the answers: one type
//! per protocol behind one trait, so the worker (schedules, connects,
//! reads) names no protocol. Framed, echo8 and the server-only protocols
//! live here; http, ws and raw in their own modules.

use super::config::Traffic;
use super::pushes::PushSeen;
use super::replies::Replies;
use crate::net::{self, ReadEnd, Spill};
use crate::proto::frame::{self, Kind};
use crate::proto::push;
use crate::proto::{Protocol, ECHO8_LEN};
use std::collections::VecDeque;

/// A connection's bytes, through TLS when it has TLS.
pub type ClientWire<'a> = crate::tls::conn::Wire<'a, rustls::client::UnbufferedClientConnection>;

/// Intended send times of requests awaiting responses (HTTP), in order.
/// Boxed: 8 bytes per idle connection instead of a 32-byte VecDeque.
#[allow(clippy::box_collection)]
pub type Inflight = Option<Box<VecDeque<u64>>>;

/// One send of a schedule: to which connection, when it was due, and
/// where in its schedule it falls.
pub struct Due {
    /// The connection's slot in its worker, and its index in the plan.
    pub slot: usize,
    pub conn: u64,
    /// Intended send time (µs, monotonic).
    pub intended: u64,
    /// The schedule's period per connection and start (µs).
    pub period_us: u64,
    pub start: u64,
}

/// What one read of a connection needs of it.
pub struct Ear<'a> {
    pub wire: ClientWire<'a>,
    pub partial: &'a mut Spill,
    pub scratch: &'a mut [u8],
    pub read_closed: bool,
    /// The connection's slot, and whether it still waits for the answer
    /// to its opening (a WebSocket Upgrade).
    pub slot: usize,
    pub upgrading: bool,
    pub inflight: &'a mut Inflight,
    /// A WebSocket message still arriving in fragments.
    pub ws_frag: &'a mut Option<Box<crate::proto::ws::frame::Fragments>>,
    /// Bytes to send back (WebSocket pongs, the close answer).
    pub answer: &'a mut Vec<u8>,
}

/// What a read found besides the accounting in [`Replies`].
/// Loss reason of a connection a draining server closed with a hint.
pub const GOAWAY: &str = "server_goaway";

pub struct Heard {
    pub end: ReadEnd,
    /// The opening (Upgrade) was answered and checked in this read.
    pub upgraded: bool,
    /// The server is draining: reconnect elsewhere after this many ms.
    pub goaway: Option<u32>,
}

impl From<ReadEnd> for Heard {
    fn from(end: ReadEnd) -> Heard {
        Heard { end, upgraded: false, goaway: None }
    }
}

/// A protocol as the client speaks it.
pub trait Speaker {
    /// Whether what `open` writes must be answered before the connection
    /// is established (a WebSocket Upgrade): till then it stays
    /// "connecting", under the connect timeout, until `Heard::upgraded`.
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

    /// Read everything the connection has and account for it.
    fn read(&mut self, ear: Ear<'_>, replies: &mut Replies<'_>) -> Heard;
}

/// The speaker of a worker's protocol.
pub fn speaker(traffic: &Traffic, host_header: &str, shard: u64) -> Box<dyn Speaker> {
    match traffic.protocol {
        Protocol::Framed => {
            Box::new(Framed { traffic: traffic.clone(), assembling: Default::default(), tokens: traffic.jwt_secret.as_deref().map(super::token::Minter::new) })
        }
        Protocol::Echo8 => Box::new(Echo8 { wall_offset_us: crate::proto::push::wall_us() as i64 - crate::sys::mono_us() as i64 }),
        Protocol::Http => Box::new(super::http::Http::new(traffic, host_header)),
        Protocol::Ws => Box::new(super::ws::WsSpeaker::new(traffic, host_header, shard)),
        Protocol::Raw => Box::new(super::raw::RawSpeaker::new(traffic)),
        Protocol::Sse => Box::new(super::sse::SseSpeaker::new(traffic, host_header)),
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

    fn read(&mut self, ear: Ear<'_>, replies: &mut Replies<'_>) -> Heard {
        let (slot, assembling) = (ear.slot, &mut self.assembling);
        let mut wire = ear.wire;
        let mut goaway = None;
        let end = net::read_frames(&mut wire, ear.partial, ear.scratch, ear.read_closed, |f| {
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
                    goaway = Some(crate::proto::goaway::decode_framed(f.payload)?);
                    return Err(GOAWAY);
                }
                _ => return Err("bad_frame_unexpected_kind"),
            }
            Ok(())
        });
        Heard { end, upgraded: false, goaway }
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

    fn read(&mut self, ear: Ear<'_>, replies: &mut Replies<'_>) -> Heard {
        let offset = self.wall_offset_us;
        let mut wire = ear.wire;
        net::read_fixed(&mut wire, ear.partial, ear.scratch, ear.read_closed, ECHO8_LEN, |u| {
            // Back from epoch milliseconds to our monotonic µs.
            let ms = u64::from_be_bytes(u.try_into().expect("8 bytes"));
            replies.reply(Some((ms as i64 * 1000 - offset).max(0) as u64));
            Ok(())
        })
        .into()
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

    fn read(&mut self, ear: Ear<'_>, _: &mut Replies<'_>) -> Heard {
        let mut wire = ear.wire;
        net::read_chunks(&mut wire, ear.partial, ear.scratch, ear.read_closed, |buf| Ok(buf.len())).into()
    }
}
