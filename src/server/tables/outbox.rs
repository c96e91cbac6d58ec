//! A worker's side of `--upstream`: what its clients said, bounded. Each
//! message counts against the worker's budget until the supervisor says
//! the backend took it (or refused it for good); a message beyond the
//! budget is refused (the client is closed with 1013), never dropped
//! silently.
//!
//! The budget is counted in messages (`--upstream-queue`) *and* bytes (the
//! worker's share of `--upstream-queue-bytes`): a count alone let 64 KiB
//! messages pile up gigabytes in the supervisor, which holds every
//! worker's messages in one process whose death kills them all. Within
//! the worker's bytes:
//!
//! - one connection may hold at most [`CONN_PART`]⁻¹ of them, so a single
//!   chatty client on a slow backend is closed (`upstream_connection_full`)
//!   before it refuses everyone else on its worker;
//! - presence events (`join`/`leave`, `--presence-events`) have their own
//!   part ([`PRESENCE_PART`]⁻¹), so a storm of subscribe/unsubscribe never
//!   refuses a client's message, and client messages never starve presence.
//!
//! A message always fits a budget that holds nothing yet (the worker's,
//! the connection's), so the largest message `--max-message-bytes` allows
//! is never refused for good.
//!
//! Per-connection bytes need no field in the connection record (which
//! stays 48 bytes): the supervisor finishes a worker's messages strictly
//! in the order the worker handed them over, so `upstream_done N` frees
//! the oldest N of its in-flight list, each of which remembers its connection
//! and size (16 bytes per message in flight, bounded by the count).

use crate::server::close::Close;
use crate::server::commands::conn_id;
use crate::server::up_message::UpMessage;
use std::collections::{HashMap, VecDeque};

/// Presence events get 1/PRESENCE_PART of the worker's count and bytes,
/// carved out of the share so the supervisor's total still holds. A join
/// or leave is ~150 bytes: an eighth of even the smallest share (1 MiB)
/// holds ~800 of them in flight.
pub(crate) const PRESENCE_PART: u64 = 8;
/// One connection may hold 1/CONN_PART of its worker's message bytes:
/// at least this many connections must be chatty at once before the rest
/// of the worker's clients are refused.
pub(crate) const CONN_PART: u64 = 4;

/// What one worker may hand the backend before it has taken it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub count: u64,
    pub bytes: u64,
    /// Message bytes one connection may have in flight.
    pub conn_bytes: u64,
    pub presence_count: u64,
    pub presence_bytes: u64,
}

impl Limits {
    /// From `--upstream-queue` (messages) and the worker's share of
    /// `--upstream-queue-bytes`. Client messages keep the whole count
    /// (its meaning is unchanged); presence gets its own count beside it
    /// and its part of the bytes.
    pub(crate) fn new(count: u64, bytes: u64) -> Limits {
        let presence_bytes = bytes / PRESENCE_PART;
        let bytes = bytes - presence_bytes;
        Limits { count, bytes, conn_bytes: bytes / CONN_PART, presence_count: (count / PRESENCE_PART).max(1), presence_bytes }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub count: u64,
    pub bytes: u64,
}

/// One message handed over and not yet finished by the supervisor.
#[derive(Debug, Clone, Copy)]
struct Flight {
    conn: u64,
    bytes: u32,
    presence: bool,
}

pub(crate) struct Outbox {
    worker: usize,
    /// Handed over at the end of this loop iteration.
    pub out: Vec<UpMessage>,
    /// Every message not finished yet, oldest first.
    flight: VecDeque<Flight>,
    messages: Held,
    presence: Held,
    /// Message bytes in flight per connection id (only those with some).
    per_conn: HashMap<u64, u64>,
    limits: Limits,
}

impl Outbox {
    pub(crate) fn new(worker: usize, limits: Limits) -> Outbox {
        Outbox { worker, out: Vec::new(), flight: VecDeque::new(), messages: Held::default(), presence: Held::default(), per_conn: HashMap::new(), limits }
    }

    /// Queue what connection (`key`, `gen`) said or did. Err: [`Close::UpstreamFull`]
    /// (the worker's budget for this kind) or [`Close::UpstreamConnectionFull`] (this
    /// connection's part).
    pub(crate) fn offer(&mut self, (key, gen): (usize, u32), make: impl FnOnce(u64) -> UpMessage) -> Result<(), Close> {
        let conn = conn_id(self.worker, key, gen);
        let m = make(conn);
        let presence = m.is_presence();
        let bytes = m.bytes() as u64;
        let (held, count, cap) = match presence {
            true => (self.presence, self.limits.presence_count, self.limits.presence_bytes),
            false => (self.messages, self.limits.count, self.limits.bytes),
        };
        if held.count >= count || (held.bytes > 0 && held.bytes + bytes > cap) {
            return Err(Close::UpstreamFull);
        }
        if !presence {
            let mine = self.per_conn.get(&conn).copied().unwrap_or(0);
            if mine > 0 && mine + bytes > self.limits.conn_bytes {
                return Err(Close::UpstreamConnectionFull);
            }
            *self.per_conn.entry(conn).or_insert(0) += bytes;
        }
        let held = if presence { &mut self.presence } else { &mut self.messages };
        held.count += 1;
        held.bytes += bytes;
        self.flight.push_back(Flight { conn, bytes: bytes.min(u32::MAX as u64) as u32, presence });
        self.out.push(m);
        Ok(())
    }

    /// The backend took (or refused for good) the oldest `n`.
    pub(crate) fn done(&mut self, n: u64) {
        for _ in 0..n {
            let Some(f) = self.flight.pop_front() else { break };
            let bytes = f.bytes as u64;
            let held = if f.presence { &mut self.presence } else { &mut self.messages };
            held.count = held.count.saturating_sub(1);
            held.bytes = held.bytes.saturating_sub(bytes);
            if !f.presence {
                if let Some(mine) = self.per_conn.get_mut(&f.conn) {
                    *mine = mine.saturating_sub(bytes);
                    if *mine == 0 {
                        self.per_conn.remove(&f.conn);
                    }
                }
            }
        }
        if self.flight.is_empty() && self.flight.capacity() > FLIGHT_KEEP {
            self.flight = VecDeque::new();
            self.per_conn = HashMap::new();
        }
    }

    /// Messages and presence events the backend has not taken yet.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> u64 {
        self.messages.count + self.presence.count
    }

    /// What is in flight: (client messages, presence events).
    #[cfg(test)]
    pub(crate) fn held(&self) -> (Held, Held) {
        (self.messages, self.presence)
    }
}

/// Entries the in-flight list keeps allocated once it empties (16 bytes
/// each); a burst's larger allocation is given back.
const FLIGHT_KEEP: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(data: &'static [u8]) -> impl Fn(u64) -> UpMessage {
        move |conn| UpMessage::message(conn, None, None, true, data)
    }

    fn presence(conn: u64) -> UpMessage {
        UpMessage { kind: "join".into(), conn, user: Some("u".into()), topic: Some("t".into()), data: None, data_b64: None, ts: 0 }
    }

    #[test]
    fn bounded_until_the_backend_takes_them() {
        let mut o = Outbox::new(1, Limits::new(2, 1 << 20));
        let m = msg(b"x");
        assert!(o.offer((5, 9), &m).is_ok() && o.offer((6, 9), &m).is_ok());
        assert_eq!(o.offer((7, 9), &m), Err(Close::UpstreamFull));
        assert_eq!(o.out[0].conn, conn_id(1, 5, 9));
        o.done(1);
        assert!(o.offer((8, 1), &m).is_ok());
        assert_eq!((o.out.len(), o.in_flight()), (3, 2));
    }

    #[test]
    fn bytes_bound_a_worker_and_fall_when_taken() {
        static BIG: [u8; 1000] = [b'a'; 1000];
        let cost = UpMessage::message(0, None, None, true, &BIG).bytes() as u64;
        // Room for 5 such messages of client bytes after presence's part.
        let limits = Limits { count: 1000, bytes: 5 * cost + cost / 2, conn_bytes: u64::MAX, presence_count: 1, presence_bytes: 1 };
        let mut o = Outbox::new(0, limits);
        for k in 0..5 {
            assert_eq!(o.offer((k, 1), msg(&BIG)), Ok(()), "message {k}");
        }
        assert_eq!(o.offer((9, 1), msg(&BIG)), Err(Close::UpstreamFull), "bytes, not the count, refuse the sixth");
        assert_eq!(o.held().0, Held { count: 5, bytes: 5 * cost });
        o.done(2);
        assert_eq!(o.held().0, Held { count: 3, bytes: 3 * cost });
        assert!(o.offer((9, 1), msg(&BIG)).is_ok());
        o.done(4);
        assert_eq!((o.held().0, o.per_conn.len()), (Held::default(), 0));
    }

    #[test]
    fn one_connection_cannot_take_its_workers_budget() {
        static BIG: [u8; 1000] = [b'a'; 1000];
        let cost = UpMessage::message(0, None, None, true, &BIG).bytes() as u64;
        let mut o = Outbox::new(0, Limits::new(1000, 1 << 20));
        o.limits.conn_bytes = 2 * cost;
        assert!(o.offer((1, 1), msg(&BIG)).is_ok() && o.offer((1, 1), msg(&BIG)).is_ok());
        assert_eq!(o.offer((1, 1), msg(&BIG)), Err(Close::UpstreamConnectionFull));
        assert!(o.offer((2, 1), msg(&BIG)).is_ok(), "another connection still sends");
        o.done(1);
        assert!(o.offer((1, 1), msg(&BIG)).is_ok(), "its oldest was taken: room again");
    }

    #[test]
    fn an_empty_budget_takes_any_one_message() {
        static HUGE: [u8; 4096] = [b'a'; 4096];
        let mut o = Outbox::new(0, Limits::new(10, 1024));
        assert!(o.offer((1, 1), msg(&HUGE)).is_ok(), "larger than the whole budget, but alone");
        assert_eq!(o.offer((2, 1), msg(b"x")), Err(Close::UpstreamFull));
    }

    #[test]
    fn presence_is_carved_out_of_the_share() {
        let l = Limits::new(16, 8 << 20);
        assert_eq!((l.bytes + l.presence_bytes, l.presence_bytes, l.conn_bytes), (8 << 20, 1 << 20, (7 << 20) / CONN_PART));
        assert_eq!((l.count, l.presence_count), (16, 2));
    }

    #[test]
    fn presence_has_its_own_budget() {
        let mut o = Outbox::new(0, Limits::new(16, 1 << 20));
        assert_eq!(o.limits.presence_count, 2);
        assert!(o.offer((1, 1), presence).is_ok() && o.offer((1, 1), presence).is_ok());
        assert_eq!(o.offer((1, 1), presence), Err(Close::UpstreamFull), "presence full");
        assert!(o.offer((1, 1), msg(b"hello")).is_ok(), "a client's message is not refused by presence");
        assert_eq!(o.held().1.count, 2);
        // Finished in order: the two events, then the message.
        o.done(2);
        assert_eq!((o.held().0.count, o.held().1.count), (1, 0));
        o.done(1);
        assert_eq!(o.in_flight(), 0);
    }
}
