//! Giving malloc's free memory back once a burst of connections settles.
//!
//! A ramp of thousands of connections allocates and frees as it goes
//! (handshake and CONNECT state, claims, deadline queues, tables that
//! grow); what is freed in the middle of malloc's heap stays resident,
//! since glibc returns only the heap's top by itself. Measured on a
//! worker holding 18,000 MQTT clients after their ramp: 130-456 KiB of
//! its ~3.2 MiB anonymous memory was free chunks, 7-25 bytes per
//! connection that no connection used. `malloc_trim(0)` hands whole free
//! pages back to the kernel (`MADV_DONTNEED`); it walks malloc's free
//! lists, so it runs once per settled burst, not on every tick: when at
//! least [`TRIM_AFTER`] connections came or went since the last trim, or
//! the worker gave back a burst's own memory since (a ramp's deadline
//! queue, a broadcast's sends in flight: [`Trim::freed`]), and no
//! connection has come or gone for [`QUIET`]. Measured at 1,000,000 MQTT
//! clients: the deadline queue, emptied ~10 s after the ramp, left
//! 300-440 KiB free in a worker's heap after the ramp's trim.

use std::time::{Duration, Instant};

/// Connections accepted and closed since the last trim that make one
/// worth it (a few KiB of free chunks are not).
pub(crate) const TRIM_AFTER: u64 = 1024;
/// How long the count must stand still: the burst is over.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(crate) struct Trim {
    /// Accepted + closed at the last trim.
    at_trim: u64,
    /// Accepted + closed when last seen, and since when it stands still.
    seen: u64,
    still_since: Option<Instant>,
    /// The worker freed a burst's memory since the last trim.
    owed: bool,
}

impl Trim {
    /// `churn`: connections accepted and closed so far. True when a trim
    /// is due now (and counted as done).
    pub(crate) fn due(&mut self, churn: u64, now: Instant) -> bool {
        if churn != self.seen || self.still_since.is_none() {
            self.seen = churn;
            self.still_since = Some(now);
            return false;
        }
        let settled = self.still_since.is_some_and(|t| now.duration_since(t) >= QUIET);
        if settled && (self.owed || churn.saturating_sub(self.at_trim) >= TRIM_AFTER) {
            self.at_trim = churn;
            self.owed = false;
            return true;
        }
        false
    }

    /// The worker gave back a large allocation of a burst's (a deadline
    /// queue, sends in flight): trim once settled, whatever the churn.
    pub(crate) fn freed(&mut self) {
        self.owed = true;
    }
}

/// Hand malloc's free pages back to the kernel.
pub(crate) fn trim() {
    // SAFETY: glibc's malloc_trim only releases memory malloc holds free;
    // it takes malloc's own lock and touches no live allocation.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_comes_once_a_burst_has_settled_and_not_for_a_trickle() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = Trim::default();
        // A ramp: the count moves every tick.
        for (i, churn) in [500, 2_000, 5_000, 9_000].into_iter().enumerate() {
            assert!(!t.due(churn, at(i as u64 * 100)), "during the burst");
        }
        assert!(!t.due(9_000, at(900)), "still for 0.6 s only");
        assert!(t.due(9_000, at(1_400)), "still for a second: trim");
        assert!(!t.due(9_000, at(2_400)), "once per burst");
        // A trickle below TRIM_AFTER never trims.
        assert!(!t.due(9_010, at(2_500)));
        assert!(!t.due(9_010, at(4_000)));
        // The next burst does, once it settles.
        assert!(!t.due(9_000 + TRIM_AFTER, at(4_100)));
        assert!(t.due(9_000 + TRIM_AFTER, at(5_200)));
        // Memory a burst held, freed later (the ramp's deadlines): a trim
        // at the next settled tick, though no connection came or went.
        t.freed();
        assert!(t.due(9_000 + TRIM_AFTER, at(5_300)));
        assert!(!t.due(9_000 + TRIM_AFTER, at(6_300)), "owed once");
    }
}
