//! A framed connection's first broadcasts and its resume. Broadcasts
//! reach every connection from its accept on, while its resume (the
//! first frame its client sends) is read a moment later, or seconds later
//! on a loaded worker. A broadcast pushed in between would reach it live
//! before the recovery of what it missed earlier: out of order (a gap,
//! then a duplicate, as its client sees it).
//!
//! So the worker holds the broadcasts of a framed connection it has not
//! read yet (a bit in the connection, set at its accept): the first
//! broadcast that skips it notes it here, and the broadcasts pushed from
//! then on are kept (their frames). At the connection's first read, a
//! resume of the broadcasts recovers them in order with everything else
//! it missed; any other first read (a client that does not resume) gets
//! the held ones first. A connection silent for as long as a note lasts
//! gets them then. A WebSocket or event stream resumes at its Upgrade,
//! before any push.
//!
//! "First read" means the client's whole opening, not the first bytes
//! that came ([`FirstRead::settles`]): a receive on the io_uring reactor
//! takes what is left of a shared 4 KiB buffer, so an opening of N bytes
//! (17 for a resume of the broadcasts alone) is cut in two completions
//! about N times in 4,096. Letting go of the note at the first of them
//! sent the held broadcasts live, and the broadcasts' resume in the
//! second then replayed them (issue 42, finding 13: duplicates, and a
//! gap wherever the client had missed one before its accept). So a read
//! that decoded no frame, leaves a frame cut short, stops at its budget
//! or (io_uring) filled the rest of its buffer keeps the note (and its
//! broadcasts held), unless it resumed the broadcasts or ended the
//! connection. The last covers a cut that falls between two frames.
//!
//! Connections are held only while clients are resuming (a resume was
//! seen in the last [`FRESH`], by this worker or anywhere on the server:
//! the supervisor tells every worker), so a server nobody resumes on
//! delivers every broadcast live to every connection. Holding always (so
//! that a fresh server's very first resuming connection is covered too)
//! was tried: it delayed a silent client's first broadcasts by the
//! note's life (the push bench's clients send nothing before their
//! first heartbeat, and its first rounds came up to 3 s late), so the
//! window before a server's first resume stays open (a broadcast in the
//! moment between that connection's accept and its read; 0 in every
//! 200,000 and 1,000,000 rollout run). A note is made only when a
//! broadcast meets a connection not read yet (a bit in the connection),
//! so what is held costs nothing per idle connection (a connection never
//! read, accepted long before, is held too when a storm starts). A note
//! lasts [`FRESH`] while clients resume; once they stop, the notes still
//! alive last [`QUIET`] and hold at most [`QUIET_KEPT_BYTES`]. A resume
//! seen extends every note alive. TLS connections are not held (broadcasts skip them
//! until their handshake ends), nor connections that owe their token
//! (`--auth jwt`: they take no broadcast before it, so nothing held can
//! reach them after). What is kept is bounded in time (frames older than
//! the oldest note are dropped) and in bytes ([`MAX_KEPT_BYTES`], and
//! [`QUIET_KEPT_BYTES`] while nobody resumes: past it every noted
//! connection gets what was held for it at once).

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long after a resume clients count as resuming, and how long a
/// noted connection may then stay silent before it gets what was held for
/// it.
pub(crate) const FRESH: Duration = Duration::from_secs(30);
/// How long a note made while clients resumed lives on once they stop
/// (notes are made only while they resume; they expire on a 1 s tick).
pub(crate) const QUIET: Duration = Duration::from_secs(2);
/// Most bytes of pushed broadcasts kept. Past it the seam lets go: every
/// noted connection gets what was held for it at once (as if silent for
/// [`FRESH`]) and the kept frames are dropped, so a burst of large
/// broadcasts while clients resume costs at most this much per worker.
pub(crate) const MAX_KEPT_BYTES: usize = 16 << 20;
/// The same once clients stop resuming (for the notes still alive): a
/// few broadcasts, so a client that never speaks gets at most this much
/// at once when its note lets go,
/// which a `--max-pending-bytes` of 64 KiB takes (a burst of held
/// broadcasts must not close a reader as slow that would have kept up
/// with them live).
pub(crate) const QUIET_KEPT_BYTES: usize = 48 << 10;

#[derive(Default)]
pub(crate) struct Seam {
    /// Connections not read yet that a broadcast met: key -> (generation, noted at).
    fresh: HashMap<usize, (u32, Instant)>,
    /// The same, in the order noted (for expiry; entries read since are skipped).
    order: VecDeque<(Instant, usize, u32)>,
    /// Broadcasts pushed: (when, offset, frame), oldest first.
    pushed: VecDeque<(Instant, u64, Rc<[u8]>)>,
    /// Bytes of the frames in `pushed`.
    pushed_bytes: usize,
    /// Clients count as resuming until then (notes last [`FRESH`]).
    resuming_until: Option<Instant>,
}

/// What a noted connection missed live: the broadcasts pushed since it
/// was noted, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub frames: Vec<Rc<[u8]>>,
}

/// What a framed connection's read brought, as far as its note goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FirstRead {
    /// It resumed the broadcasts (`*`): what was held comes in its recovery.
    pub resumed_broadcasts: bool,
    /// Whole frames it decoded.
    pub frames: usize,
    /// Bytes left for a later read: a frame cut short, more past the read
    /// budget, or a receive that filled the rest of its buffer (what came
    /// with its bytes may be in the next). The rest of the opening may be
    /// there.
    pub unfinished: bool,
    /// The connection ends with this read (end of stream, an error, a
    /// refused frame).
    pub ended: bool,
}

impl FirstRead {
    /// Whether this read ends the connection's note ([`Seam::read`]): a
    /// resume of the broadcasts or the connection's end always does;
    /// anything else only once the read decoded a frame and left nothing
    /// unread behind it (the whole opening of a client that sends it in
    /// one write). Until then broadcasts stay held for it.
    pub(crate) fn settles(&self) -> bool {
        self.resumed_broadcasts || self.ended || (self.frames > 0 && !self.unfinished)
    }
}

impl Seam {
    /// A broadcast met connection `key` not read yet: it is held for it,
    /// and so is every broadcast after it until the connection's first
    /// read (a note made once per connection).
    pub(crate) fn note(&mut self, key: usize, gen: u32) {
        if self.fresh.get(&key).is_some_and(|(g, _)| *g == gen) {
            return;
        }
        let now = Instant::now();
        self.fresh.insert(key, (gen, now));
        self.order.push_back((now, key, gen));
    }

    /// A resume was read: clients are resuming, notes last [`FRESH`].
    pub(crate) fn resumed(&mut self) {
        self.resuming_until = Some(Instant::now() + FRESH);
    }

    /// Whether clients are resuming (a resume was seen in the last
    /// [`FRESH`]): only then is a connection not read yet held.
    pub(crate) fn resuming(&self) -> bool {
        self.resuming_until.is_some_and(|t| Instant::now() < t)
    }

    /// How long a note lasts at `now`: [`FRESH`] while clients resume,
    /// [`QUIET`] otherwise.
    fn lasts(&self, now: Instant) -> Duration {
        if self.resuming_until.is_some_and(|t| now < t) {
            FRESH
        } else {
            QUIET
        }
    }

    /// Whether connection `key` is noted.
    #[cfg(test)]
    pub(crate) fn holds(&self, key: usize, gen: u32) -> bool {
        self.fresh.get(&key).is_some_and(|(g, _)| *g == gen)
    }

    /// Whether any connection is noted.
    #[cfg(test)]
    pub(crate) fn noting(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// Whether any note waits for [`Seam::expire`].
    pub(crate) fn pending(&self) -> bool {
        !self.order.is_empty()
    }

    /// A broadcast at `offset` was pushed (as `frame`) to every connection
    /// not held or recovering.
    /// Over [`MAX_KEPT_BYTES`] ([`QUIET_KEPT_BYTES`] while nobody resumes) the caller releases everything at once
    /// ([`Seam::release_all`]): true.
    pub(crate) fn broadcast(&mut self, offset: u64, frame: &[u8]) -> bool {
        // Notes read since their accept leave `order` here; no note is
        // older than the oldest left: frames pushed before it are held
        // for nobody.
        while let Some(&(at, key, gen)) = self.order.front() {
            if self.fresh.get(&key).is_some_and(|(g, a)| *g == gen && *a == at) {
                break;
            }
            self.order.pop_front();
        }
        let oldest = self.order.front().map(|(at, _, _)| *at);
        while self.pushed.front().is_some_and(|(at, _, _)| oldest.is_none_or(|o| *at < o)) {
            if let Some((_, _, f)) = self.pushed.pop_front() {
                self.pushed_bytes -= f.len();
            }
        }
        let now = Instant::now();
        if !self.fresh.is_empty() {
            self.pushed.push_back((now, offset, frame.into()));
            self.pushed_bytes += frame.len();
        }
        self.pushed_bytes > if self.lasts(now) == FRESH { MAX_KEPT_BYTES } else { QUIET_KEPT_BYTES }
    }

    /// Let go of every note now: each noted connection with what was held
    /// for it, and no frame kept after.
    pub(crate) fn release_all(&mut self) -> Vec<(usize, u32, Held)> {
        let noted: Vec<(usize, u32)> = self.fresh.iter().map(|(k, (g, _))| (*k, *g)).collect();
        let out = noted.into_iter().filter_map(|(key, gen)| self.read(key, gen).map(|h| (key, gen, h))).collect();
        self.fresh = HashMap::new();
        self.order = VecDeque::new();
        self.pushed = VecDeque::new();
        self.pushed_bytes = 0;
        out
    }

    /// Connection `key` is read for the first time: what was held for it
    /// (None: it was not noted: no broadcast came since its accept).
    pub(crate) fn read(&mut self, key: usize, gen: u32) -> Option<Held> {
        if self.fresh.is_empty() {
            return None;
        }
        let (g, noted) = self.fresh.remove(&key)?;
        if g != gen {
            return None;
        }
        let frames: Vec<Rc<[u8]>> = self.pushed.iter().filter(|(at, _, _)| *at >= noted).map(|(_, _, f)| f.clone()).collect();
        Some(Held { frames })
    }

    /// Connections silent since their accept for as long as a note lasts
    /// ([`FRESH`] or [`QUIET`]): stop holding theirs; each with what was
    /// held for it.
    pub(crate) fn expire(&mut self) -> Vec<(usize, u32, Held)> {
        self.expire_at(Instant::now())
    }

    fn expire_at(&mut self, now: Instant) -> Vec<(usize, u32, Held)> {
        let lasts = self.lasts(now);
        let mut out = Vec::new();
        while let Some(&(at, key, gen)) = self.order.front() {
            if now.saturating_duration_since(at) < lasts {
                break;
            }
            self.order.pop_front();
            if self.fresh.get(&key).is_some_and(|(g, a)| *g == gen && *a == at) {
                if let Some(held) = self.read(key, gen) {
                    out.push((key, gen, held));
                }
                self.fresh.remove(&key);
            }
        }
        if self.fresh.is_empty() {
            // Held for nobody now.
            self.pushed.clear();
            self.pushed_bytes = 0;
            if self.order.capacity() > 1024 {
                // A ramp's notes are gone: give their memory back.
                self.order = VecDeque::new();
                self.fresh = HashMap::new();
                self.pushed = VecDeque::new();
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(h: Option<Held>) -> Vec<Vec<u8>> {
        h.map(|h| h.frames.iter().map(|f| f.to_vec()).collect()).unwrap_or_default()
    }

    #[test]
    fn a_connection_not_read_yet_gets_its_broadcasts_at_its_first_read_in_order() {
        let mut s = Seam::default();
        // A broadcast meets connections 1 and 2, not read yet.
        s.note(1, 7);
        s.note(2, 7);
        assert!(s.holds(1, 7) && s.holds(2, 7) && !s.holds(1, 8), "another connection on the same key is not held");
        s.broadcast(41, b"b41");
        s.note(1, 7);
        s.note(2, 7);
        s.broadcast(42, b"b42");
        assert_eq!(frames(s.read(1, 7)), vec![b"b41".to_vec(), b"b42".to_vec()], "a second note changes nothing");
        assert!(!s.holds(1, 7), "read: no longer held");
        s.note(2, 7);
        s.broadcast(43, b"b43");
        assert_eq!(frames(s.read(2, 7)), vec![b"b41".to_vec(), b"b42".to_vec(), b"b43".to_vec()], "everything since its note");
        assert_eq!(s.read(2, 7), None, "read once");
        s.note(3, 1);
        assert_eq!(s.read(3, 1), Some(Held::default()), "noted, nothing kept since");
        s.note(4, 1);
        s.broadcast(44, b"b44");
        assert_eq!(s.read(4, 2), None, "a later connection on the key of one never read");
        assert!(!s.holds(4, 1), "that one's note is gone with it");
    }

    #[test]
    fn a_note_ends_with_the_whole_opening_a_resume_of_the_broadcasts_or_the_end() {
        let read = |resumed_broadcasts, frames, unfinished, ended| FirstRead { resumed_broadcasts, frames, unfinished, ended }.settles();
        assert!(read(false, 1, false, false), "a whole opening that resumes nothing: gets what was held");
        assert!(read(true, 1, false, false) && read(true, 1, true, false), "the broadcasts' resume, whatever follows it");
        assert!(read(false, 0, true, true) && read(false, 2, true, true), "the connection ends");
        assert!(!read(false, 0, true, false), "a frame cut short, nothing decoded");
        assert!(!read(false, 1, true, false), "a topic's resume whole, the broadcasts' cut short");
        assert!(!read(false, 2, true, false), "stopped at its budget: more waits");
        assert!(!read(false, 0, false, false), "a receive that brought nothing");
    }

    /// Issue 42, finding 13: an io_uring receive takes what is left of a
    /// shared 4 KiB buffer, so a client's opening comes in two pieces now
    /// and then. Wherever it is cut, and whatever broadcast comes between
    /// the pieces, nothing held for the connection goes out live before
    /// the resume that recovers it (before, the note ended at the first
    /// piece, and what it held went live, then again in the recovery).
    #[test]
    fn an_opening_cut_anywhere_keeps_its_broadcasts_held_until_its_resume_is_read() {
        use crate::net::{read_frames, ReadEnd, Received, Spill};
        use crate::proto::frame::Kind;
        use crate::proto::push::{decode_resume, encode_resume, Position, BROADCAST_TOPIC};
        let mut opening = Vec::new();
        encode_resume(&mut opening, "room-7", Some(Position { epoch: 3, offset: 9 }));
        encode_resume(&mut opening, BROADCAST_TOPIC, Some(Position { epoch: 5, offset: 40 }));
        let mut scratch = vec![0u8; 4096];
        for cut in 1..=opening.len() {
            let mut s = Seam::default();
            s.resumed();
            s.note(1, 7);
            s.broadcast(41, b"b41");
            let (mut partial, mut live, mut recovered): (Spill, Vec<Vec<u8>>, Vec<Vec<u8>>) = (None, Vec::new(), Vec::new());
            // The first piece of a cut opening filled what was left of its buffer.
            let pieces = [(&opening[..cut], cut < opening.len()), (&opening[cut..], false)];
            for (i, (piece, filled)) in pieces.into_iter().enumerate().filter(|(_, (p, _))| !p.is_empty()) {
                if i == 1 {
                    // A broadcast between the two receives: live unless held.
                    if !s.holds(1, 7) {
                        live.push(b"b42".to_vec());
                    }
                    s.broadcast(42, b"b42");
                }
                let mut read = FirstRead { resumed_broadcasts: false, frames: 0, unfinished: false, ended: false };
                let end = read_frames(&mut Received(piece), &mut partial, &mut scratch, false, |f| {
                    read.frames += 1;
                    if f.kind == Kind::Resume {
                        read.resumed_broadcasts |= decode_resume(f.payload)?.0 == BROADCAST_TOPIC.as_bytes();
                    }
                    Ok(())
                });
                read.unfinished = partial.is_some() || end == ReadEnd::Budget || filled;
                read.ended = matches!(end, ReadEnd::Eof | ReadEnd::Error(_));
                if read.settles() {
                    let held = frames(s.read(1, 7));
                    if read.resumed_broadcasts {
                        recovered.extend(held);
                    } else {
                        live.extend(held);
                    }
                }
            }
            assert!(live.is_empty(), "cut at byte {cut}: {live:?} went out live before the broadcasts' resume");
            assert!(!recovered.is_empty() && !s.holds(1, 7), "cut at byte {cut}: the resume ends the note");
        }
    }

    #[test]
    fn a_note_lasts_quiet_while_nobody_resumes_and_fresh_once_someone_does() {
        let t0 = Instant::now();
        let mut s = Seam::default();
        s.note(1, 1);
        s.broadcast(1, b"x");
        assert!(s.expire_at(t0 + QUIET / 2).is_empty(), "not yet");
        let out = s.expire_at(t0 + QUIET + Duration::from_millis(10));
        assert_eq!(out.len(), 1, "silent for QUIET with nobody resuming: released");
        assert_eq!(out[0].2.frames.len(), 1);
        assert!(!s.noting() && !s.pending() && s.pushed.is_empty(), "nothing kept for nobody");

        let t1 = Instant::now();
        s.note(2, 1);
        s.resumed();
        s.broadcast(2, b"y");
        assert!(s.expire_at(t1 + QUIET + Duration::from_millis(10)).is_empty(), "a resume seen: the note lives on");
        assert!(s.holds(2, 1));
        assert_eq!(s.expire_at(t1 + FRESH + Duration::from_millis(10)).len(), 1, "past FRESH it goes too");
    }

    #[test]
    fn frames_are_kept_only_while_a_note_may_want_them() {
        let mut s = Seam::default();
        s.broadcast(1, b"nobody noted");
        assert!(s.pushed.is_empty(), "no note: nothing kept");
        s.note(1, 1);
        s.broadcast(2, b"for 1");
        assert_eq!(frames(s.read(1, 1)), vec![b"for 1".to_vec()]);
        s.note(2, 1);
        s.broadcast(3, b"for 2");
        assert_eq!(s.pushed.len(), 1, "what came before the oldest note's accept is gone");
        assert_eq!(s.pushed_bytes, 5);
    }

    #[test]
    fn while_nobody_resumes_a_few_broadcasts_are_held_at_most() {
        let mut s = Seam::default();
        s.note(1, 1);
        let frame = vec![1u8; 16 << 10];
        assert!(!s.broadcast(1, &frame) && !s.broadcast(2, &frame) && !s.broadcast(3, &frame), "48 KiB: held");
        assert!(s.broadcast(4, b"x"), "one byte more lets go");
        assert_eq!(s.release_all()[0].2.frames.len(), 4);
        s.resumed();
        s.note(2, 1);
        for i in 0..8 {
            assert!(!s.broadcast(i, &frame), "while clients resume the bound is MAX_KEPT_BYTES");
        }
    }

    #[test]
    fn nothing_expires_before_its_time() {
        let mut s = Seam::default();
        s.resumed();
        s.note(5, 1);
        s.broadcast(1, b"x");
        assert!(s.expire().is_empty());
        assert!(s.holds(5, 1));
    }

    #[test]
    fn past_its_byte_bound_the_seam_lets_go_of_everything() {
        let mut s = Seam::default();
        s.resumed();
        s.note(1, 1);
        let big = vec![7u8; MAX_KEPT_BYTES / 2];
        assert!(!s.broadcast(1, &big));
        assert!(!s.broadcast(2, &big), "exactly at the bound");
        assert!(s.broadcast(3, b"x"), "one byte more");
        let released = s.release_all();
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].2.frames.len(), 3, "what was held goes out, in order");
        assert!(!s.holds(1, 1) && !s.noting() && !s.pending());
        assert_eq!(s.pushed_bytes, 0);
    }
}
