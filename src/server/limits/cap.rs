//! `--max-connections N`: one count shared by every worker process, so
//! the cap is exact however the kernel spreads the accepts.
//!
//! The supervisor creates a memfd of a few pages and every worker maps it
//! (the fd is inherited across exec; its number travels in the worker's
//! config). Slot 0 is the server-wide count, raised by compare-and-swap
//! only while below the cap; every worker also counts its own share in a
//! slot of its own, so when a worker dies (its sockets closed by the
//! kernel) the supervisor takes exactly that many back.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// Per-worker slots (worker index modulo this; far more than can be
/// alive at once).
const SLOTS: usize = 4096;
const BYTES: usize = (2 + SLOTS) * 8;

/// The shared count, mapped into this process.
pub(crate) struct SharedCap {
    words: *const AtomicU64,
    fd: RawFd,
}

// SAFETY: the mapping is only touched through atomics and lives as long
// as the value (unmapped on drop).
unsafe impl Send for SharedCap {}

impl SharedCap {
    /// Supervisor: a new count with this cap, inherited by workers.
    pub(crate) fn create(cap: u64) -> io::Result<SharedCap> {
        let fd = crate::sys::inheritable_memfd(c"megaconn-max-connections", BYTES)?;
        let c = SharedCap::open(fd)?;
        c.word(1).store(cap, Ordering::SeqCst);
        Ok(c)
    }

    /// Worker: map the count the supervisor created.
    pub(crate) fn open(fd: RawFd) -> io::Result<SharedCap> {
        Ok(SharedCap { words: crate::sys::map_shared_words(fd, BYTES)?, fd })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < 2 + SLOTS);
        // SAFETY: i is within the mapping, which is 8-byte aligned.
        unsafe { &*self.words.add(i) }
    }

    fn slot(&self, worker: usize) -> &AtomicU64 {
        self.word(2 + worker % SLOTS)
    }

    pub(crate) fn cap(&self) -> u64 {
        self.word(1).load(Ordering::Relaxed)
    }

    /// Supervisor: a new cap (SIGHUP), in force for every worker's next
    /// accept; connections over a lowered one stay.
    pub(crate) fn set_cap(&self, cap: u64) {
        self.word(1).store(cap, Ordering::SeqCst);
    }

    /// Connections held server-wide.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.word(0).load(Ordering::Relaxed)
    }

    /// Take one place if the server is below its cap.
    pub(crate) fn try_acquire(&self, worker: usize) -> bool {
        let cap = self.cap();
        let total = self.word(0);
        let mut n = total.load(Ordering::Relaxed);
        loop {
            if n >= cap {
                return false;
            }
            match total.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        self.slot(worker).fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Give back `n` places (connections closed).
    pub(crate) fn release(&self, worker: usize, n: u64) {
        if n > 0 {
            self.slot(worker).fetch_sub(n, Ordering::Relaxed);
            self.word(0).fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Supervisor: a worker is gone; its places are free again.
    pub(crate) fn forget(&self, worker: usize) -> u64 {
        let n = self.slot(worker).swap(0, Ordering::AcqRel);
        self.word(0).fetch_sub(n, Ordering::AcqRel);
        n
    }
}

impl Drop for SharedCap {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe { libc::munmap(self.words as *mut libc::c_void, BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_exact_and_a_dead_workers_places_come_back() {
        let sup = SharedCap::create(5).unwrap();
        let w1 = SharedCap::open(sup.fd()).unwrap();
        let w2 = SharedCap::open(sup.fd()).unwrap();
        let taken = (0..4).filter(|_| w1.try_acquire(1)).count() + (0..4).filter(|_| w2.try_acquire(2)).count();
        assert_eq!(taken, 5);
        assert_eq!(sup.count(), 5);
        w2.release(2, 1);
        assert!(w1.try_acquire(1));
        assert!(!w2.try_acquire(2));
        assert_eq!(sup.forget(1), 5);
        assert_eq!(sup.count(), 0);
        assert!(w2.try_acquire(2));
    }
}
