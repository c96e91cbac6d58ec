//! A rolling restart's drain (SIGTERM with `--drain-period`): the worker
//! stops accepting and closes its long-lived connections (framed,
//! WebSocket, MQTT, event streams) evenly over the period, each after a
//! reconnect hint ([`crate::proto::goaway`]) carrying a random delay,
//! so clients move to another node at connections ÷ period per second
//! instead of all at once. Until its turn a connection is served as
//! before: it reads, answers heartbeats and gets pushes, so nothing
//! published meanwhile is missed by a client that resumes.

use super::Worker;
use crate::proto::goaway;
use crate::server::close::Close;
use crate::server::session::kind;
use rand::Rng;
use std::time::{Duration, Instant};

/// How often a drain closes its next share.
pub(super) const DRAIN_TICK: Duration = Duration::from_millis(10);

pub(super) struct Drain {
    started: Instant,
    period: Duration,
    /// The connections held when the drain began (none is accepted after),
    /// with their generations, in the order they close.
    keys: Vec<(usize, u32)>,
    done: usize,
}

impl Drain {
    /// Whether every connection has had its turn.
    pub(super) fn finished(&self) -> bool {
        self.done >= self.keys.len()
    }

    /// How many should have closed by `now`.
    fn due(&self, now: Instant) -> usize {
        let n = self.keys.len();
        if self.period.is_zero() {
            return n;
        }
        let share = now.saturating_duration_since(self.started).as_secs_f64() / self.period.as_secs_f64();
        ((share * n as f64).ceil() as usize).min(n)
    }
}

impl Worker {
    /// Start the drain of every long-lived connection held now. On an
    /// HTTP port those are its event streams, hinted at once (its
    /// requests drain as before, within --drain-timeout).
    pub(super) fn begin_drain(&mut self) {
        // Spread over --drain-period: framed and ws connections, and the
        // event streams of HTTP ports (those hinted at once when the
        // worker serves HTTP alone).
        let services = &self.cfg.services;
        let keys: Vec<(usize, u32)> =
            self.conns.iter().filter(|(_, c)| kind::drains_in_turn(super::protocol_of(services, c), &c.ext)).map(|(k, c)| (k, c.gen)).collect();
        if keys.is_empty() {
            return;
        }
        let spread = self.cfg.services.iter().any(|s| kind::spreads(s.protocol));
        let period = if spread { Duration::from_millis(self.cfg.drain_period_ms) } else { Duration::ZERO };
        self.drain = Some(Drain { started: Instant::now(), period, keys, done: 0 });
    }

    /// Close the connections whose turn has come, each with its hint.
    pub(super) fn drain_step(&mut self) {
        let Some(d) = &mut self.drain else { return };
        let due = d.due(Instant::now());
        let turn: Vec<(usize, u32)> = d.keys[d.done..due].to_vec();
        d.done = due;
        for (key, gen) in turn {
            if self.conns.get(key).is_some_and(|c| c.gen == gen) {
                self.say_goaway(key);
            }
        }
    }

    /// Write the hint and close (the peer's reply, if any, is read and
    /// dropped while the socket lingers, so the hint is not cut by a reset).
    fn say_goaway(&mut self, key: usize) {
        let retry_ms = self.rng.gen_range(0..=goaway::MAX_RETRY_MS);
        let Some(conn) = self.conns.get_mut(key) else { return };
        let protocol = super::protocol_of(&self.cfg.services, conn);
        self.out.clear();
        kind::goaway(&mut self.out, protocol, &conn.ext, self.mqtt.get(key), retry_ms);
        if !self.out.is_empty() {
            match super::io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, self.reply_cap, Close::SlowReader) {
                Ok(()) => self.stats.goaways += 1,
                Err(reason) => return self.close(key, reason),
            }
        }
        self.close(key, Close::ServerDrain);
    }
}
