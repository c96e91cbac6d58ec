//! `--stall-timeout`: a connection whose partial input (half a frame, a
//! WebSocket message still in fragments, half an MQTT packet in a
//! WebSocket message) or unsent output has not moved
//! for that long is closed, so no peer keeps memory of ours by sending
//! half a frame, or by not reading, and then doing nothing.
//!
//! Why a sweep and no per-connection timer: the connection record stays
//! at 48 bytes. Every quarter of the timeout the worker looks at the
//! connections that hold such state and remembers, for each, what it
//! holds (lengths and the first bytes of the backlog, which change when
//! the socket takes some). A connection seen holding exactly the same
//! state for the whole timeout is stalled. The map holds only the
//! connections with something waiting, and is rebuilt at every sweep.

use super::Worker;
use crate::server::close::Close;
use crate::server::session::ext::ConnExt;
use crate::server::session::mqtt::MqttConn;
use crate::server::worker::conn::Conn;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Shortest time between two sweeps.
const MIN_SWEEP: Duration = Duration::from_millis(50);

/// What a connection held when a sweep saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    gen: u32,
    partial: usize,
    fragments: usize,
    backlog: usize,
    backlog_head: u64,
}

impl Held {
    /// `mqtt`: its MQTT state, if it speaks MQTT.
    fn of(c: &Conn, mqtt: Option<&MqttConn>) -> Option<Held> {
        let (fragments, carried) = match (c.ext.as_deref(), mqtt) {
            (Some(ConnExt::Ws(w)), _) => (w.frag.as_ref().map_or(0, |f| f.len()), 0),
            // MQTT over WebSocket: a packet cut by a message's end (and
            // fragments) is partial input too.
            (_, Some(m)) => (0, m.extra.as_ref().map_or(0, |x| x.carry.held())),
            _ => (0, 0),
        };
        let partial = c.spills.held_partial().map_or(0, Vec::len) + carried;
        let (backlog, backlog_head) = c.spills.held_backlog().map_or((0, 0), |b| {
            let mut head = [0u8; 8];
            let n = b.len().min(8);
            head[..n].copy_from_slice(&b[..n]);
            (b.len(), u64::from_le_bytes(head))
        });
        (partial + fragments + backlog > 0).then_some(Held { gen: c.gen, partial, fragments, backlog, backlog_head })
    }

    /// What had not moved, as the counter names it.
    fn what(&self) -> &'static str {
        if self.backlog > 0 {
            "backlog"
        } else if self.fragments > 0 {
            "ws_fragment"
        } else {
            "partial_input"
        }
    }
}

pub(super) struct Stalls {
    timeout: Option<Duration>,
    next: Instant,
    /// Slab key -> what it held and since when unchanged.
    seen: HashMap<usize, (Held, Instant)>,
}

impl Stalls {
    pub(super) fn new(timeout_ms: Option<u64>) -> Stalls {
        let timeout = timeout_ms.map(Duration::from_millis);
        Stalls { timeout, next: Instant::now() + timeout.map_or(MIN_SWEEP, sweep_every), seen: HashMap::new() }
    }

    pub(super) fn due(&self, now: Instant) -> bool {
        self.timeout.is_some() && now >= self.next
    }

    pub(super) fn next_sweep(&self) -> Option<Instant> {
        self.timeout.map(|_| self.next)
    }
}

fn sweep_every(timeout: Duration) -> Duration {
    (timeout / 4).max(MIN_SWEEP)
}

impl Worker {
    /// Close the connections whose waiting state has not moved for the
    /// stall timeout.
    pub(super) fn sweep_stalls(&mut self, now: Instant) {
        let Some(timeout) = self.stalls.timeout else { return };
        self.stalls.next = now + sweep_every(timeout);
        let mut seen = HashMap::with_capacity(self.stalls.seen.len());
        let mut stalled = Vec::new();
        for (key, c) in self.conns.iter() {
            let Some(held) = Held::of(c, self.mqtt.get(key)) else { continue };
            let since = match self.stalls.seen.get(&key) {
                Some((before, since)) if *before == held => *since,
                _ => now,
            };
            if now.duration_since(since) >= timeout {
                stalled.push((key, held.what()));
            } else {
                seen.insert(key, (held, since));
            }
        }
        self.stalls.seen = seen;
        for (key, what) in stalled {
            crate::stats::counters::bump(&mut self.stats.stalled, what);
            self.close(key, Close::StallTimeout);
        }
    }
}
