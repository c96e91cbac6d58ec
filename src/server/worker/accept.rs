//! Accepting a connection: the caps it must pass (`--max-connections-per-ip`,
//! `--max-connections`), the socket options it gets, its slab entry.
//!
//! `--max-connections-per-ip` inside a worker is the shared table (see
//! `server::limits::per_ip`) and the source address of every connection this
//! worker counted in it, so its place is given back when it closes (the
//! peer address of a reset socket can no longer be read by then). Only
//! a capped server pays for the map.

use super::{Worker, ACCEPT_BACKOFF};
use crate::reactor::Handler;
use crate::server::limits::per_ip::Source;
use crate::server::limits::per_ip::{PerIp, Refusal};
use crate::server::session::kind;
use crate::server::worker::conn::Conn;
use mio::{Interest, Token};
use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

pub(super) struct PerIpCount {
    table: PerIp,
    /// Slab key -> source address, for every connection counted.
    ips: HashMap<usize, Source>,
}

impl PerIpCount {
    /// Map the table the supervisor created (`cap` places per address).
    pub(super) fn open(fd: i32, cap: u32) -> std::io::Result<PerIpCount> {
        Ok(PerIpCount { table: PerIp::open(fd, cap)?, ips: HashMap::new() })
    }

    /// Take a place for a connection from `ip`.
    pub(super) fn admit(&self, ip: Source) -> Result<(), Refusal> {
        self.table.acquire(ip)
    }

    /// A place taken by `admit` whose connection did not come to be.
    pub(super) fn undo(&self, ip: Source) {
        self.table.release(ip);
    }

    /// The admitted connection from `ip` now lives at slab key `key`.
    pub(super) fn hold(&mut self, key: usize, ip: Source) {
        self.ips.insert(key, ip);
    }

    /// The connection at `key` closed.
    pub(super) fn closed(&mut self, key: usize) {
        if let Some(ip) = self.ips.remove(&key) {
            self.table.release(ip);
        }
    }

    /// Every connection closed at once (the worker stops).
    pub(super) fn release_all(&mut self) {
        for (_, ip) in self.ips.drain() {
            self.table.release(ip);
        }
        self.ips = HashMap::new();
    }

    /// No connection left: give the map's memory back.
    pub(super) fn shrink(&mut self) {
        self.ips.shrink_to_fit();
    }
}

impl Worker {
    /// Stop being woken by the listeners for [`ACCEPT_BACKOFF`].
    fn pause_accepting(&mut self) {
        self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
        self.group.suspend(self.poll.as_raw_fd());
    }

    /// Accept one connection from listener `i`; false when there is none
    /// (or accepting must pause).
    pub(super) fn accept_one(&mut self, i: usize) -> bool {
        if self.next_gen == u32::MAX {
            // Every generation is used: a new connection would reuse an
            // id an application may still hold. Accept no more, as a full
            // worker (an elastic server starts a successor).
            crate::stats::counters::bump(&mut self.stats.accept_paused, "generations_used");
            self.fd_ceiling = 0;
        }
        if self.stats.active >= self.fd_ceiling {
            // A full worker keeps accepting until the supervisor sees a
            // sibling with room; past its descriptors it cannot. Pause as
            // EMFILE would, without making the kernel fail an accept: the
            // queue waits for the successor.
            crate::stats::counters::bump(&mut self.stats.accept_paused, "fd_ceiling");
            self.pause_accepting();
            return false;
        }
        let Some(listener) = self.group.listeners.get(i) else { return false };
        match listener.accept() {
            Ok((mut stream, peer)) => {
                let ip = Source::of(peer);
                if let Some(p) = &self.per_ip {
                    if let Err(refusal) = p.admit(ip) {
                        let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                        crate::stats::counters::bump(&mut self.stats.refused_per_ip, refusal.reason());
                        return true;
                    }
                }
                if self.cap.as_ref().is_some_and(|c| !c.try_acquire(self.cfg.worker)) {
                    if let Some(p) = &self.per_ip {
                        p.undo(ip);
                    }
                    // At the cap: close at once, with a reset (no
                    // TIME_WAIT left here by a flood of refusals).
                    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                    self.stats.refused_over_cap += 1;
                    return true;
                }
                // Replies are small writes; Nagle would hold one back
                // behind an unacknowledged one (up to a delayed-ACK
                // timeout, ~40 ms).
                let _ = stream.set_nodelay(true);
                self.limits.apply(&stream);
                let now_ds = self.now_ds();
                let reserve = self.mqtt_reserve();
                let entry = self.conns.vacant_entry();
                let key = entry.key();
                // On the ring, epoll only says when a backlog can move:
                // the socket joins it once it has one (ring.rs).
                let on_ring = self.ring.is_some();
                if !on_ring && self.poll.registry().register(&mut stream, Token(key), Interest::READABLE | Interest::WRITABLE).is_err() {
                    crate::stats::counters::bump(&mut self.stats.accept_errors, "register_failed");
                    if let Some(c) = &self.cap {
                        c.release(self.cfg.worker, 1);
                    }
                    if let Some(p) = &self.per_ip {
                        p.undo(ip);
                    }
                    return true;
                }
                if let Some(p) = &mut self.per_ip {
                    p.hold(key, ip);
                }
                self.next_gen += 1;
                let mut conn = Conn::new(stream, self.started.elapsed().as_secs() as u32, self.next_gen);
                if !on_ring {
                    conn.set_watched();
                }
                // The listener's entry: the connection's protocol and TLS.
                let service = self.listener_service.get(i).copied().unwrap_or(0) as usize;
                conn.set_service(service);
                let (protocol, tls) = crate::server::services::entry(&self.cfg.services, service);
                let opening = kind::opening(protocol, self.topics.gate.required(), tls, now_ds);
                conn.ext = opening.ext;
                if opening.mqtt.is_some() {
                    *self.mqtt.entry(key, reserve) = opening.mqtt;
                }
                if let Some(r) = &mut self.ring {
                    r.next.ops.push(crate::uring::Op::Recv { fd: conn.stream.as_raw_fd(), tag: crate::uring::recv_tag(key, self.next_gen) });
                }
                if opening.waits_first_read {
                    conn.set_unread();
                }
                entry.insert(conn);
                if opening.owes_head {
                    self.head_due(key, self.next_gen);
                }
                self.stats.accepted += 1;
                self.stats.active += 1;
                if let Some(n) = self.open_by_service.get_mut(service) {
                    *n += 1;
                }
                if let Some(t) = self.tls.as_mut().filter(|_| tls) {
                    if let Err(reason) = t.open(key, self.next_gen, now_ds) {
                        self.close(key, reason);
                        return true;
                    }
                }
                if self.cfg.elastic && (self.stats.active == self.prespawn_at || self.stats.active == self.cfg.budget) {
                    // Tell the supervisor now, not at the next stats tick:
                    // a successor must be listening before this one is
                    // full, and a full one waits for its word to leave.
                    self.report(false);
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) => {
                let name = crate::sys::error_kind_name(&e);
                *self.stats.accept_errors.entry(name).or_insert(0) += 1;
                match e.raw_os_error() {
                    // Out of descriptors: retrying now would spin at
                    // 100% CPU on the same full queue. Back off.
                    Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                        self.pause_accepting();
                        false
                    }
                    // The peer gave up before we accepted: next one.
                    _ => true,
                }
            }
        }
    }
}
