//! Accounting for what the server sends back, whatever the protocol
//! (each protocol's reading is its `Speaker`): heartbeat answers, replies
//! (latency from the intended send time), rejections, pushes.

use super::snapshot::ClientSnapshot;
use crate::stats::histogram;
use hdrhistogram::Histogram;

/// What the read path needs to account for replies.
pub(crate) struct Replies<'a> {
    pub stats: &'a mut ClientSnapshot,
    pub rtt: &'a mut Histogram<u64>,
    pub latency: &'a mut Histogram<u64>,
    pub now: u64,
    pub timeout_us: u64,
    pub push: &'a mut Histogram<u64>,
    pub seen: &'a mut super::pushes::PushSeen,
    /// Heartbeats sent on this connection and not answered yet.
    pub beats_out: &'a mut u8,
    /// Requests sent on this connection and not answered or refused yet.
    pub requests_out: &'a mut u16,
}

/// Everything a connection can receive that shows the server speaks its
/// protocol: heartbeat answers, replies, rejections, pushes, raw bytes.
/// One definition for every protocol, so "lost before any answer" (the
/// protocol-mismatch verdict) means the same thing for each.
pub(crate) fn answers(s: &ClientSnapshot) -> u64 {
    s.heartbeats_answered + s.replies + s.rejected + s.push_received + s.raw_bytes_in
}

impl Replies<'_> {
    /// A heartbeat came back; `sent`: its intended send time, if it
    /// carried one.
    pub(crate) fn beat_answered(&mut self, sent: Option<u64>) {
        self.stats.heartbeats_answered += 1;
        *self.beats_out = self.beats_out.saturating_sub(1);
        if let Some(sent) = sent {
            let rtt = self.now.saturating_sub(sent);
            if rtt > self.timeout_us {
                // Answered, but past the bound: the verdict counts it.
                self.stats.heartbeats_unanswered += 1;
            }
            histogram::record(self.rtt, rtt);
        }
    }

    /// A request the server refused (its queue was full).
    pub(crate) fn rejected(&mut self) {
        self.stats.rejected += 1;
        *self.requests_out = self.requests_out.saturating_sub(1);
    }

    /// A reply to a request sent at intended time `sent` (µs, monotonic).
    pub(crate) fn reply(&mut self, sent: Option<u64>) {
        self.stats.replies += 1;
        *self.requests_out = self.requests_out.saturating_sub(1);
        let Some(sent) = sent else { return };
        if sent > self.now + 1_000_000 {
            // Not a time we could have sent: the echo was corrupted.
            self.stats.bad_echo += 1;
            return;
        }
        let latency = self.now.saturating_sub(sent);
        if latency > self.timeout_us {
            self.stats.late += 1;
        }
        histogram::record(self.latency, latency);
    }
}
