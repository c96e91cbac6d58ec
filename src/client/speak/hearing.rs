//! Test harness: a speaker fed bytes the way the worker feeds it (the
//! one read loop, `net::read_chunks_named`, with a spill for what it has
//! not used), with no socket; and the check every speaker must pass: a
//! stream cut anywhere is heard as it is heard whole.

use super::{Ear, Inflight, Speaker};
use crate::client::pushes::PushSeen;
use crate::client::replies::Replies;
use crate::client::snapshot::ClientSnapshot;
use crate::net::{self, ReadEnd, Spill};
use crate::proto::ws::frame::Fragments;
use crate::stats::histogram;
use hdrhistogram::Histogram;

/// The monotonic "now" of every read (µs): stamps below it time well.
pub(crate) const NOW: u64 = 10_000_000;

/// One connection's side of the worker: what a speaker reads into and
/// what it says back, across reads.
pub(crate) struct Hearing {
    pub stats: ClientSnapshot,
    rtt: Histogram<u64>,
    latency: Histogram<u64>,
    push: Histogram<u64>,
    seen: PushSeen,
    beats_out: u8,
    requests_out: u16,
    pub inflight: Inflight,
    ws_frag: Option<Box<Fragments>>,
    partial: Spill,
    /// Every answer written so far, in order.
    pub answer: Vec<u8>,
    pub upgrading: bool,
    pub goaway: Option<u32>,
}

impl Hearing {
    pub(crate) fn new(upgrading: bool) -> Hearing {
        Hearing {
            stats: ClientSnapshot::default(),
            rtt: histogram::new(),
            latency: histogram::new(),
            push: histogram::new(),
            seen: None,
            beats_out: 0,
            requests_out: 0,
            inflight: None,
            ws_frag: None,
            partial: None,
            answer: Vec::new(),
            upgrading,
            goaway: None,
        }
    }

    /// One readiness event that brings `bytes` (read in one piece).
    pub(crate) fn read(&mut self, speaker: &mut dyn Speaker, bytes: &[u8]) -> ReadEnd {
        let mut replies = Replies {
            stats: &mut self.stats,
            rtt: &mut self.rtt,
            latency: &mut self.latency,
            now: NOW,
            timeout_us: 1_000_000,
            push: &mut self.push,
            seen: &mut self.seen,
            beats_out: &mut self.beats_out,
            requests_out: &mut self.requests_out,
        };
        let mut answer = Vec::new();
        let mut ear = Ear { slot: 0, upgrading: self.upgrading, inflight: &mut self.inflight, ws_frag: &mut self.ws_frag, answer: &mut answer, goaway: None };
        let mut scratch = vec![0; bytes.len().max(1)];
        let end = net::read_chunks_named(&mut net::Received(bytes), &mut self.partial, &mut scratch, false, |buf| speaker.hear(buf, &mut ear, &mut replies));
        speaker.heard(&mut replies);
        (self.upgrading, self.goaway) = (ear.upgrading, ear.goaway.or(self.goaway));
        self.answer.extend_from_slice(&answer);
        end
    }

    /// Reads of `pieces` in turn, up to the first that ends the
    /// connection; how the last ended.
    pub(crate) fn read_all(&mut self, speaker: &mut dyn Speaker, pieces: &[&[u8]]) -> ReadEnd {
        let mut end = ReadEnd::Open;
        for p in pieces {
            end = self.read(speaker, p);
            if !matches!(end, ReadEnd::Open | ReadEnd::Budget) {
                break;
            }
        }
        end
    }

    /// Everything heard, to compare: the counters, what each histogram
    /// holds, the answers' size (their masks are random) and the state
    /// handed back.
    pub(crate) fn summary(&self) -> String {
        let counters = serde_json::to_string(&self.stats.counters).expect("counters serialise");
        let hists = (self.rtt.len(), self.latency.len(), self.push.len());
        let inflight = self.inflight.as_ref().map_or(0, |q| q.len());
        format!("{counters} hists={hists:?} answer={} upgrading={} goaway={:?} inflight={inflight}", self.answer.len(), self.upgrading, self.goaway)
    }

    /// Bytes received and not used yet (kept for the next read).
    pub(crate) fn kept(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.len())
    }
}

/// `wire` heard whole by a fresh speaker and connection (from `make`),
/// then in two reads cut at every byte boundary, and one byte per read:
/// every way ends the same and accounts the same. Returns the end, the
/// speaker and the connection of the whole read, for the caller's own
/// checks.
pub(crate) fn same_at_every_cut(make: &dyn Fn() -> (Box<dyn Speaker>, Hearing), wire: &[u8]) -> (ReadEnd, Box<dyn Speaker>, Hearing) {
    let (mut speaker, mut whole) = make();
    let end = whole.read_all(&mut *speaker, &[wire]);
    let expected = whole.summary();
    for cut in 0..=wire.len() {
        let (mut s, mut h) = make();
        let (a, b) = wire.split_at(cut);
        assert_eq!(h.read_all(&mut *s, &[a, b]), end, "cut at {cut}");
        assert_eq!(h.summary(), expected, "cut at {cut}");
        if end == ReadEnd::Open {
            assert_eq!(h.kept(), whole.kept(), "cut at {cut}");
        }
    }
    let (mut s, mut h) = make();
    let bytes: Vec<&[u8]> = wire.chunks(1).collect();
    assert_eq!(h.read_all(&mut *s, &bytes), end, "a byte per read");
    assert_eq!(h.summary(), expected, "a byte per read");
    (end, speaker, whole)
}
