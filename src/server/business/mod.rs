//! The business stage every request passes through on the server.
//!
//! - `inline`: the handler blocks the event loop for the service time —
//!   the classic mistake, reproduced on purpose: every connection of the
//!   worker waits behind every request.
//! - `pool:N`: N OS threads for blocking work behind a bounded queue
//!   (`--queue`); a full queue rejects the request at once with an explicit
//!   error reply instead of growing without bound. Finished jobs come back
//!   to the event loop through its `Wake` (the worker's mio `Waker`).
//! - `async`: a timer heap on the event loop itself, no threads.
//!
//! Each job records the service time it actually got (a 1 ms sleep takes
//! longer than 1 ms), so reports can separate the floor (the service time)
//! from what the system adds.
pub(crate) mod service_time;

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest `pool:N` accepted as syntax; whether the machine can run that
/// many threads is checked against its task limits at start.
pub(crate) const MAX_POOL_THREADS: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum BusinessMode {
    Inline,
    Pool(usize),
    Async,
}

impl FromStr for BusinessMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        const EX: &str = "expected inline, async or pool:N (e.g. pool:1000)";
        match s.trim() {
            "inline" => Ok(BusinessMode::Inline),
            "async" => Ok(BusinessMode::Async),
            other => {
                let n = other.strip_prefix("pool:").ok_or_else(|| format!("'{other}' is not a business mode; {EX}"))?;
                match n.parse::<usize>() {
                    Ok(n) if (1..=MAX_POOL_THREADS).contains(&n) => Ok(BusinessMode::Pool(n)),
                    _ => Err(format!("'{n}' is not a pool size from 1 to {MAX_POOL_THREADS}; {EX}")),
                }
            }
        }
    }
}

impl std::fmt::Display for BusinessMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusinessMode::Inline => write!(f, "inline"),
            BusinessMode::Pool(n) => write!(f, "pool:{n}"),
            BusinessMode::Async => write!(f, "async"),
        }
    }
}

/// A request waiting for its business call.
pub(crate) struct Job {
    /// Connection slab key and generation (keys are reused; generations
    /// tell a reply for a closed connection from one for its successor).
    pub key: usize,
    pub gen: u32,
    pub service: Duration,
    /// The bytes to send when the job is done.
    pub reply: Vec<u8>,
    /// When the timer was armed (async only).
    armed: Option<Instant>,
}

impl Job {
    pub(crate) fn new(key: usize, gen: u32, service: Duration, reply: Vec<u8>) -> Job {
        Job { key, gen, service, reply, armed: None }
    }
}

/// A finished job and the service time it actually got.
pub(crate) struct Done {
    pub job: Job,
    pub applied: Duration,
}

pub(crate) enum Outcome {
    /// Done already (inline, or no wait): reply now.
    Now(Done),
    /// Queued; it comes back from `take_done`.
    Later,
    /// The pool's queue is full: answer with an error now.
    Rejected(Job),
}

struct Timed {
    due: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

struct Pool {
    tx: Sender<Job>,
    done: Arc<Mutex<Vec<Done>>>,
    /// Jobs accepted and not finished (running + queued). Admission checks
    /// it against threads + queue depth, so the bound is exact even when a
    /// burst arrives before idle threads have woken up.
    in_system: Arc<AtomicUsize>,
    capacity: usize,
}

pub(crate) struct Stage {
    mode: BusinessMode,
    /// Async mode: most requests waiting on their timers (`--queue`), so
    /// a peer flooding requests with a long service time is refused
    /// instead of growing the timer heap without bound.
    async_cap: usize,
    timers: BinaryHeap<Reverse<Timed>>,
    seq: u64,
    pool: Option<Pool>,
}

/// What a pool thread calls when it finished a job.
pub(crate) type Wake = Arc<dyn Fn() + Send + Sync>;

impl Stage {
    /// `wake` is called whenever a pool thread finishes a job (the
    /// worker's event loop waker; the stage names no event loop).
    pub(crate) fn new(mode: BusinessMode, queue: usize, wake: Wake) -> std::io::Result<Stage> {
        let pool = match mode {
            BusinessMode::Pool(n) => {
                let (tx, rx) = channel::<Job>();
                let rx = Arc::new(Mutex::new(rx));
                let done = Arc::new(Mutex::new(Vec::new()));
                let in_system = Arc::new(AtomicUsize::new(0));
                for i in 0..n {
                    let (rx, done, wake, in_system) = (rx.clone(), done.clone(), wake.clone(), in_system.clone());
                    std::thread::Builder::new().name(format!("business-{i}")).stack_size(64 * 1024).spawn(move || work(rx, done, wake, in_system))?;
                }
                Some(Pool { tx, done, in_system, capacity: n + queue })
            }
            _ => None,
        };
        Ok(Stage { mode, async_cap: queue, timers: BinaryHeap::new(), seq: 0, pool })
    }

    pub(crate) fn submit(&mut self, mut job: Job) -> Outcome {
        match self.mode {
            BusinessMode::Inline => {
                let t0 = Instant::now();
                if !job.service.is_zero() {
                    std::thread::sleep(job.service);
                }
                Outcome::Now(Done { applied: t0.elapsed(), job })
            }
            BusinessMode::Async => {
                if job.service.is_zero() {
                    return Outcome::Now(Done { applied: Duration::ZERO, job });
                }
                if self.timers.len() >= self.async_cap {
                    return Outcome::Rejected(job);
                }
                let now = Instant::now();
                job.armed = Some(now);
                self.seq += 1;
                self.timers.push(Reverse(Timed { due: now + job.service, seq: self.seq, job }));
                Outcome::Later
            }
            BusinessMode::Pool(_) => {
                let pool = self.pool.as_ref().expect("pool mode has a pool");
                if pool.in_system.load(Ordering::Acquire) >= pool.capacity {
                    return Outcome::Rejected(job);
                }
                pool.in_system.fetch_add(1, Ordering::AcqRel);
                match pool.tx.send(job) {
                    Ok(()) => Outcome::Later,
                    Err(e) => {
                        pool.in_system.fetch_sub(1, Ordering::AcqRel);
                        Outcome::Rejected(e.0)
                    }
                }
            }
        }
    }

    /// Jobs submitted and not yet taken back (timers, queued, running,
    /// finished but not delivered).
    pub(crate) fn in_flight(&self) -> usize {
        self.timers.len() + self.pool.as_ref().map_or(0, |p| p.in_system.load(Ordering::Acquire) + p.done.lock().map(|d| d.len()).unwrap_or(0))
    }

    /// When the event loop must wake for the next timer.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.timers.peek().map(|t| t.0.due)
    }

    /// Jobs finished by now: expired timers and pool completions.
    pub(crate) fn take_done(&mut self, now: Instant) -> Vec<Done> {
        let mut out = Vec::new();
        while self.timers.peek().is_some_and(|t| t.0.due <= now) {
            let Reverse(t) = self.timers.pop().expect("peeked");
            let applied = t.job.armed.map(|a| now - a).unwrap_or_default();
            out.push(Done { job: t.job, applied });
        }
        if let Some(p) = &self.pool {
            out.append(&mut p.done.lock().expect("pool lock"));
        }
        out
    }
}

fn work(rx: Arc<Mutex<Receiver<Job>>>, done: Arc<Mutex<Vec<Done>>>, wake: Wake, in_system: Arc<AtomicUsize>) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let t0 = Instant::now();
        if !job.service.is_zero() {
            std::thread::sleep(job.service);
        }
        let applied = t0.elapsed();
        done.lock().expect("pool lock").push(Done { job, applied });
        in_system.fetch_sub(1, Ordering::AcqRel);
        wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("pool:20".parse::<BusinessMode>().unwrap(), BusinessMode::Pool(20));
        assert_eq!("async".parse::<BusinessMode>().unwrap(), BusinessMode::Async);
        assert!("pool:0".parse::<BusinessMode>().is_err());
        assert!("threads".parse::<BusinessMode>().unwrap_err().contains("pool:N"));
    }
}
