//! Opening connections: the paced ramp, the handshake deadline, failures,
//! losses, and (with `--reconnect`) opening lost connections again.
//!
//! Reconnects share the ramp's pace (tokens at the worker's connection
//! rate) and its cap on handshakes in flight, so a server that drops
//! 10,000 connections at once is not answered with a SYN flood; each
//! slot backs off exponentially with full jitter between failed attempts.

use super::{State, Worker, MAX_INFLIGHT, MIN_INFLIGHT};
use rand::Rng;
use socket2::{Domain, Socket, Type};
use std::cmp::Reverse;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// First reconnect back-off; doubled per failed attempt up to the cap.
const RECONNECT_BASE_US: u64 = 100_000;
const RECONNECT_CAP_US: u64 = 5_000_000;
/// Most reconnect tokens saved up (a burst after a quiet period).
const RECONNECT_BURST: f64 = 1_000.0;
/// Why a planned connection was not attempted: the ramp's deadline
/// passed before its turn came (the offered rate was not reached).
pub(super) const RAMP_DEADLINE: &str = "ramp_deadline";
/// ... or the run closed (hold over, Ctrl-C, the worker's own deadline)
/// before its turn came.
pub(super) const RUN_CLOSED: &str = "run_closed";

/// When the ramp's connection number `created` is due: `start + created /
/// rate`, saturated (a rate of 1e-30/s puts the second connection past
/// the clock's end: never, not a sum that wraps into the past and makes
/// the loop's wait 0).
pub(super) fn ramp_due_at(start: u64, created: u64, rate: f64) -> u64 {
    // A float-to-int `as` saturates (infinity: u64::MAX; NaN, 0 / 0: 0).
    start.saturating_add((created as f64 * 1e6 / rate) as u64)
}

impl Worker {
    /// Open every connection whose ramp time has come.
    pub(super) fn ramp(&mut self, now: u64) {
        if self.created >= self.cfg.count || now < self.cfg.start_at_us {
            return;
        }
        if now >= self.cfg.ramp_deadline_us {
            // Past the deadline nothing new opens: the ramp is over.
            self.give_up_queued(RAMP_DEADLINE);
            return self.resolved(now);
        }
        let due = ((((now - self.cfg.start_at_us) as f64) * self.cfg.rate / 1e6) as u64 + 1).min(self.cfg.count);
        // Never offer handshakes faster than this process completes them:
        // beyond the cap the CPU would go to connect() while finished
        // handshakes wait unprocessed (and falsely time out).
        let cap = self.inflight_cap();
        while self.created < due && self.stats.connecting < cap {
            let k = self.created as usize;
            self.created += 1;
            // A replacement's share: what its predecessor gave up stays shut.
            if self.slots[k].state != State::Done {
                if self.slots[k].retries == 0 {
                    self.stats.queued = self.stats.queued.saturating_sub(1);
                }
                self.open(k, now);
            }
        }
    }

    /// The planned connections whose turn has not come will not be
    /// attempted, for `reason`: counted apart (requested = established +
    /// failed + not attempted, always).
    pub(super) fn give_up_queued(&mut self, reason: &str) {
        // With --stages, the slots above the target are spare capacity,
        // not planned connections waiting their turn.
        let planned = self.cfg.stages.is_none();
        for k in self.created as usize..self.slots.len() {
            let slot = &mut self.slots[k];
            if slot.state == State::Idle && slot.retries == 0 && planned {
                crate::stats::counters::bump(&mut self.stats.not_attempted_by, reason);
            }
            if slot.state == State::Idle {
                slot.state = State::Done;
            }
        }
        self.created = self.cfg.count;
        self.stats.queued = 0;
    }

    pub(super) fn inflight_cap(&self) -> u64 {
        (self.cfg.rate / 10.0).clamp(MIN_INFLIGHT, MAX_INFLIGHT) as u64
    }

    /// Open lost connections whose back-off has passed, at the ramp's pace.
    pub(super) fn reopen(&mut self, now: u64) {
        if self.reconnects.is_empty() {
            self.reconnect_tokens_at = now;
            return;
        }
        let dt = now.saturating_sub(self.reconnect_tokens_at) as f64 / 1e6;
        self.reconnect_tokens = (self.reconnect_tokens + dt * self.cfg.rate).min(RECONNECT_BURST.max(self.cfg.rate / 10.0));
        self.reconnect_tokens_at = now;
        let cap = self.inflight_cap();
        while let Some(&Reverse((due, k))) = self.reconnects.peek() {
            if due > now || self.reconnect_tokens < 1.0 || self.stats.connecting >= cap {
                break;
            }
            self.reconnects.pop();
            self.reconnect_tokens -= 1.0;
            if self.slots[k as usize].state == State::Waiting {
                self.open(k as usize, now);
            }
        }
    }

    /// `--churn`: once the ramp is done, close one established connection
    /// and open it again every `churn_us` (open loop: cycles that fall
    /// due while the process was busy all run; connections not up are
    /// skipped).
    pub(super) fn churn(&mut self, now: u64) {
        let Some(period) = self.cfg.churn_us.filter(|p| *p > 0) else { return };
        let Some(done) = self.stats.ramp_done_at_us else { return };
        let start = *self.churn_start_us.get_or_insert(done.max(now));
        let due = (now.saturating_sub(start) / period + 1).min(self.churn_cursor + self.cfg.count.max(1));
        while self.churn_cursor < due {
            let k = (self.churn_cursor % self.cfg.count) as usize;
            self.churn_cursor += 1;
            if self.slots[k].state != State::Established {
                continue;
            }
            if let Some(stream) = self.slots[k].stream.as_ref() {
                if self.cfg.traffic.close == super::super::config::CloseMode::Reset {
                    let _ = socket2::SockRef::from(stream).set_linger(Some(std::time::Duration::ZERO));
                }
            }
            self.put_down(k);
            let slot = &mut self.slots[k];
            slot.tls = None;
            slot.partial = None;
            slot.backlog = None;
            slot.inflight = None;
            slot.ws_frag = None;
            slot.churned = true;
            self.stats.heartbeats_abandoned += std::mem::take(&mut slot.beats_out) as u64;
            self.stats.requests_abandoned += std::mem::take(&mut slot.requests_out) as u64;
            self.stats.open -= 1;
            self.stats.churn_closed += 1;
            self.open(k, now);
        }
    }

    /// Queue slot k for another attempt after a jittered back-off (at the
    /// next address, when there are several).
    fn schedule_reconnect(&mut self, k: usize, now: u64) {
        self.next_home(k);
        let slot = &mut self.slots[k];
        slot.state = State::Waiting;
        slot.retries = slot.retries.saturating_add(1);
        let ceiling = (RECONNECT_BASE_US << (slot.retries.min(16) - 1)).min(RECONNECT_CAP_US);
        let wait = self.rng.gen_range(ceiling / 2..=ceiling);
        self.reconnects.push(Reverse((now + wait, k as u32)));
    }

    fn next_home(&mut self, k: usize) {
        if !self.cfg.elsewhere.is_empty() {
            let slot = &mut self.slots[k];
            slot.home = ((slot.home as usize + 1) % (1 + self.cfg.elsewhere.len()).min(256)) as u8;
        }
    }

    /// A draining server closed connection k with a reconnect hint: with
    /// `--reconnect` it moves to the next address after the hinted delay
    /// (a goaway, not a loss; its subscriptions resume there); without,
    /// it is lost.
    pub(super) fn moved(&mut self, k: usize, retry_ms: u32, now: u64) {
        if !self.cfg.traffic.reconnect || self.phase != super::Phase::Running || self.slots[k].state != State::Established {
            return self.lose(k, super::super::speak::GOAWAY.into());
        }
        self.stats.goaways += 1;
        self.release(k);
        self.next_home(k);
        let slot = &mut self.slots[k];
        slot.state = State::Waiting;
        slot.retries = 1;
        self.moved_at.insert(k as u32, now);
        self.reconnects.push(Reverse((now + retry_ms as u64 * 1000, k as u32)));
    }

    pub(super) fn open(&mut self, k: usize, now: u64) {
        let (mut src, port) = super::super::plan::address_of(self.cfg.first + k as u64, &self.sources, &self.cfg.ports);
        let home = self.slots[k].home as usize;
        let ip = if home == 0 { self.cfg.target } else { self.cfg.elsewhere[home - 1] };
        if home != 0 && ip.is_loopback() != self.cfg.target.is_loopback() {
            // The worker's source addresses are for its own target.
            src = std::net::Ipv4Addr::UNSPECIFIED.into();
        }
        let dst = SocketAddr::from((ip, port));
        self.stats.attempted += 1;
        match connect(src, dst) {
            Ok(mut stream) => {
                let token = mio::Token(k);
                // On the ring the socket's bytes come from a receive: the
                // epoll hears of its connect and its writability only.
                let interest = if self.ring.is_some() { mio::Interest::WRITABLE } else { mio::Interest::READABLE | mio::Interest::WRITABLE };
                if let Err(e) = self.poll.registry().register(&mut stream, token, interest) {
                    self.fail(k, crate::sys::error_kind_name(&e), now);
                    return;
                }
                let slot = &mut self.slots[k];
                slot.stream = Some(stream);
                slot.state = State::Connecting;
                slot.started_us = now as u32;
                slot.stage_us = now as u32;
                self.stats.connecting += 1;
                self.pending.push_back(k as u32);
            }
            Err(e) => self.fail(k, crate::sys::error_kind_name(&e), now),
        }
    }

    /// A connection attempt failed: counted as a failure of the plan, or,
    /// for a reconnect, counted apart and retried.
    pub(super) fn fail(&mut self, k: usize, kind: String, now: u64) {
        self.put_down(k);
        let slot = &mut self.slots[k];
        if slot.state.connecting() {
            self.stats.connecting -= 1;
        }
        slot.tls = None;
        slot.partial = None;
        slot.backlog = None;
        if slot.churned {
            slot.churned = false;
            slot.state = State::Done;
            *self.stats.churn_failed.entry(kind).or_insert(0) += 1;
            return;
        }
        if slot.retries > 0 {
            *self.stats.reconnect_failed.entry(kind).or_insert(0) += 1;
            if self.phase == super::Phase::Running {
                self.schedule_reconnect(k, now);
            } else {
                self.slots[k].state = State::Done;
            }
            return;
        }
        slot.state = State::Done;
        *self.stats.failed.entry(kind).or_insert(0) += 1;
        self.resolved(now);
    }

    pub(super) fn resolved(&mut self, now: u64) {
        self.last_resolved_us = now;
        let s = &self.stats;
        if self.created == self.cfg.count && s.connecting == 0 && s.ramp_done_at_us.is_none() {
            self.stats.ramp_done_at_us = Some(now);
        }
    }

    /// Fail handshakes older than the connect timeout.
    pub(super) fn expire_connects(&mut self, now: u64) {
        let timeout = self.cfg.traffic.connect_timeout_ms() * 1000;
        while let Some(&k) = self.pending.front() {
            let slot = &self.slots[k as usize];
            if !slot.state.connecting() {
                self.pending.pop_front();
                continue;
            }
            if ((now as u32).wrapping_sub(slot.started_us) as u64) < timeout {
                break;
            }
            self.pending.pop_front();
            self.fail(k as usize, "timeout".into(), now);
        }
    }

    /// An established connection ended before we closed it.
    pub(super) fn lose(&mut self, k: usize, reason: String) {
        match self.slots[k].state {
            // Never established: a failed handshake (e.g. "http_404").
            State::Upgrading => return self.fail(k, reason, crate::sys::mono_us()),
            State::TlsHandshaking if reason == "peer_closed" => return self.fail(k, crate::tls::failure::EOF.into(), crate::sys::mono_us()),
            State::TlsHandshaking => return self.fail(k, reason, crate::sys::mono_us()),
            _ => {}
        }
        if !self.slots[k].answered {
            self.stats.lost_unanswered += 1;
        }
        self.release(k);
        self.slots[k].state = State::Done;
        *self.stats.lost.entry(reason).or_insert(0) += 1;
        if self.cfg.traffic.reconnect && self.phase == super::Phase::Running {
            self.schedule_reconnect(k, crate::sys::mono_us());
        }
    }
}

impl Worker {
    /// Drop an established connection's socket and state.
    pub(super) fn release(&mut self, k: usize) {
        self.put_down(k);
        let slot = &mut self.slots[k];
        if slot.state == State::Established {
            self.stats.open -= 1;
        }
        slot.tls = None;
        slot.partial = None;
        slot.backlog = None;
        slot.inflight = None;
        self.stats.heartbeats_abandoned += std::mem::take(&mut slot.beats_out) as u64;
        self.stats.requests_abandoned += std::mem::take(&mut slot.requests_out) as u64;
        slot.answered = false;
        slot.ws_frag = None;
    }
}

/// Start a non-blocking connect from `src` (unspecified: the kernel's
/// choice) to `dst`.
fn connect(src: std::net::IpAddr, dst: SocketAddr) -> io::Result<mio::net::TcpStream> {
    let s = Socket::new(Domain::for_address(dst), Type::STREAM.nonblocking(), None)?;
    if !src.is_unspecified() {
        // Defer the source port choice to connect(), where the kernel
        // only needs the full 4-tuple to be unique.
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on a socket we own with an int option.
        let rc = unsafe { libc::setsockopt(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, (&one as *const libc::c_int).cast(), 4) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        s.bind(&SocketAddr::from((src, 0)).into())?;
    }
    s.set_nodelay(true)?;
    match s.connect(&dst.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(mio::net::TcpStream::from_std(std::net::TcpStream::from(s)))
}

#[cfg(test)]
mod tests {
    use super::ramp_due_at;

    /// A monotonic clock reading well into a run (µs).
    const START: u64 = 5_000_000_000;

    /// The ramp's due times never wrap into the past, whatever the rate:
    /// a wait computed from one is never 0 for a connection not yet due.
    #[test]
    fn ramp_due_times_saturate_at_extreme_rates() {
        for rate in [1e-30, 1e-300, f64::MIN_POSITIVE, 0.0] {
            assert_eq!(ramp_due_at(START, 0, rate), START, "rate {rate}: the first connection is due at the start");
            assert_eq!(ramp_due_at(START, 1, rate), u64::MAX, "rate {rate}: the second is never due");
        }
        assert_eq!(ramp_due_at(START, 3, 1_000.0), START + 3_000);
        assert_eq!(ramp_due_at(START, u64::MAX, 1e300), START, "an extreme fast rate: everything due at once");
    }
}
