//! A worker's side of `--upstream`: what its clients said, bounded. Each
//! message counts against `--upstream-queue` until the supervisor says the
//! backend took it; a message beyond that is refused (the client is closed
//! with 1013), never dropped silently.

use super::push::conn_id;
use super::upstream::{UpMessage, FULL};

pub struct Outbox {
    worker: usize,
    /// Handed over at the end of this loop iteration.
    pub out: Vec<UpMessage>,
    /// Messages the backend has not taken yet.
    in_flight: u64,
    cap: u64,
}

impl Outbox {
    pub fn new(worker: usize, cap: usize) -> Outbox {
        Outbox { worker, out: Vec::new(), in_flight: 0, cap: cap as u64 }
    }

    /// Queue what connection (`key`, `gen`) said or did; Err when full.
    pub fn offer(&mut self, (key, gen): (usize, u32), make: impl FnOnce(u64) -> UpMessage) -> Result<(), &'static str> {
        if self.in_flight >= self.cap {
            return Err(FULL);
        }
        self.in_flight += 1;
        self.out.push(make(conn_id(self.worker, key, gen)));
        Ok(())
    }

    /// The backend took `n` more.
    pub fn done(&mut self, n: u64) {
        self.in_flight = self.in_flight.saturating_sub(n);
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_until_the_backend_takes_them() {
        let mut o = Outbox::new(1, 2);
        let m = |conn| UpMessage::message(conn, None, None, true, b"x");
        assert!(o.offer((5, 9), m).is_ok() && o.offer((5, 9), m).is_ok());
        assert_eq!(o.offer((5, 9), m), Err(FULL));
        assert_eq!(o.out[0].conn, conn_id(1, 5, 9));
        o.done(1);
        assert!(o.offer((6, 1), m).is_ok());
        assert_eq!((o.out.len(), o.in_flight()), (3, 2));
    }
}
