//! Where each connection of a client worker stands, kept outside the
//! worker so that a replacement goes on from there (`--reconnect`): per
//! connection, whether it was ever established (opening it again is a
//! reconnect), or is finished (failed or lost for good: not reopened),
//! and its position in each stream it follows (its topics, then the
//! broadcasts).
//!
//! The supervisor makes one memfd per worker share; the worker maps it
//! and, before each snapshot it sends, writes every connection's state
//! into one of two buffers (checkpoint n into buffer n % 2) and then
//! stamps that buffer with n; the snapshot carries n. A replacement is
//! told the last snapshot the supervisor received and reads that
//! buffer: the positions agree with the counters already reported, so a
//! message the dead worker received after its last snapshot comes again
//! and is counted once, and none is skipped.

use crate::proto::push::Position;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// A worker's checkpoint, as its config names it.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct CheckpointRef {
    /// The memfd, inherited.
    pub fd: RawFd,
    /// Streams per connection (its topics, then the broadcasts).
    pub streams: usize,
    /// A replacement: the checkpoint of the last snapshot its supervisor
    /// heard from the dead worker (0: none came).
    pub replacing: Option<u64>,
}

/// A connection's state, as kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Never established (yet).
    New = 0,
    /// Established at least once: opening it again is a reconnect.
    Joined = 1,
    /// Failed or lost for good: not opened again.
    Done = 2,
}

/// Words per connection: its status, then (offset, present | epoch) per stream.
fn per_slot(streams: usize) -> usize {
    1 + 2 * streams
}

const PRESENT: u64 = 1 << 32;

/// Bytes of a checkpoint for `count` connections following `streams` streams each.
pub(crate) fn bytes(count: u64, streams: usize) -> usize {
    8 * (2 + 2 * count as usize * per_slot(streams))
}

/// Supervisor: a zero-filled memfd for one worker share (close-on-exec:
/// the pool lets only that worker inherit it).
pub(crate) fn create(count: u64, streams: usize) -> io::Result<std::os::fd::OwnedFd> {
    crate::sys::memfd(c"megaconn-client-checkpoint", bytes(count, streams), false)
}

/// A worker's mapping of its share's checkpoint.
pub(crate) struct Checkpoint {
    words: *const AtomicU64,
    count: usize,
    streams: usize,
    /// The number the next write gets.
    pub next: u64,
}

impl Checkpoint {
    /// Map the checkpoint at `fd` (inherited) for `count` connections.
    pub(crate) fn open(fd: RawFd, count: u64, streams: usize, after: u64) -> io::Result<Checkpoint> {
        let words = crate::sys::map_shared_words(fd, bytes(count, streams))?;
        Ok(Checkpoint { words, count: count as usize, streams, next: after + 1 })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < bytes(self.count as u64, self.streams) / 8);
        // SAFETY: i is within the mapping (checked in debug builds),
        // which is page-aligned; only atomics touch it.
        unsafe { &*self.words.add(i) }
    }

    fn base(&self, n: u64, k: usize) -> usize {
        2 + ((n % 2) as usize * self.count + k) * per_slot(self.streams)
    }

    /// Write checkpoint `self.next`: `slot(k)` gives connection k's status
    /// and its position per stream. Returns the number written.
    pub(crate) fn write(&mut self, mut slot: impl FnMut(usize, &mut [Option<Position>]) -> Status) -> u64 {
        let n = self.next;
        self.next += 1;
        let stamp = self.word((n % 2) as usize);
        stamp.store(0, Ordering::Release);
        let mut at = vec![None; self.streams];
        for k in 0..self.count {
            at.iter_mut().for_each(|p| *p = None);
            let status = slot(k, &mut at);
            let b = self.base(n, k);
            self.word(b).store(status as u64, Ordering::Relaxed);
            for (s, p) in at.iter().enumerate() {
                let (offset, tag) = p.map_or((0, 0), |p| (p.offset, PRESENT | p.epoch as u64));
                self.word(b + 1 + 2 * s).store(offset, Ordering::Relaxed);
                self.word(b + 2 + 2 * s).store(tag, Ordering::Relaxed);
            }
        }
        self.word((n % 2) as usize).store(n, Ordering::Release);
        n
    }

    /// Connection k as checkpoint `n` left it, if that checkpoint is whole.
    pub(crate) fn read(&self, n: u64, k: usize, at: &mut [Option<Position>]) -> Option<Status> {
        if n == 0 || self.word((n % 2) as usize).load(Ordering::Acquire) != n || k >= self.count {
            return None;
        }
        let b = self.base(n, k);
        for (s, p) in at.iter_mut().enumerate().take(self.streams) {
            let tag = self.word(b + 2 + 2 * s).load(Ordering::Relaxed);
            *p = (tag & PRESENT != 0).then(|| Position { epoch: tag as u32, offset: self.word(b + 1 + 2 * s).load(Ordering::Relaxed) });
        }
        Some(match self.word(b).load(Ordering::Relaxed) {
            1 => Status::Joined,
            2 => Status::Done,
            _ => Status::New,
        })
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what open() mapped.
        unsafe { libc::munmap(self.words as *mut libc::c_void, bytes(self.count as u64, self.streams)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_replacement_reads_the_checkpoint_the_supervisor_last_heard_of() {
        let fd = create(3, 2).unwrap();
        let mut w = Checkpoint::open(fd.as_raw_fd(), 3, 2, 0).unwrap();
        let pos = |o| Some(Position { epoch: 7, offset: o });
        assert_eq!(
            w.write(|k, at| {
                at[0] = pos(k as u64 + 10);
                if k == 2 {
                    Status::Done
                } else {
                    Status::Joined
                }
            }),
            1
        );
        // Checkpoint 2 is written (the worker then dies before its snapshot).
        assert_eq!(
            w.write(|_, at| {
                at[0] = pos(99);
                at[1] = pos(5);
                Status::Joined
            }),
            2
        );
        drop(w);
        let r = Checkpoint::open(fd.as_raw_fd(), 3, 2, 1).unwrap();
        let mut at = [None; 2];
        assert_eq!(r.read(1, 1, &mut at), Some(Status::Joined));
        assert_eq!(at, [pos(11), None], "checkpoint 1, not the later 2");
        assert_eq!(r.read(1, 2, &mut at), Some(Status::Done));
        assert_eq!(r.read(2, 0, &mut at), Some(Status::Joined));
        assert_eq!(at, [pos(99), pos(5)]);
        assert_eq!(r.read(3, 0, &mut at), None, "never written");
        assert_eq!(r.next, 2);
    }

    #[test]
    fn a_checkpoint_cut_short_is_not_read() {
        let fd = create(1, 1).unwrap();
        let mut w = Checkpoint::open(fd.as_raw_fd(), 1, 1, 0).unwrap();
        w.write(|_, _| Status::Joined);
        w.write(|_, _| Status::Joined);
        // Checkpoint 3 begins in buffer 1 (clearing 1's stamp) and the worker dies.
        w.word(1).store(0, Ordering::Release);
        assert_eq!(w.read(1, 0, &mut [None]), None);
        assert_eq!(w.read(2, 0, &mut [None]), Some(Status::Joined));
    }
}
