//! `--max-connections-per-ip N`: connections per source address, counted
//! across every worker process of the server, so the cap is exact however
//! the kernel spreads the accepts.
//!
//! The supervisor creates a memfd (inherited across exec like the
//! `--max-connections` count) holding one lock word and an open-addressed
//! table of (address, worker pid) -> connections, hashed by address
//! alone so one probe run sees every worker's share of an address. Every
//! accept and close takes the lock for a few probes (a spin lock: held for
//! well under a microsecond). Why the pid in the key: a worker that dies
//! (its sockets closed by the kernel) leaves its counts behind, and no
//! supervisor hook is needed to take them back: when an address reaches
//! its cap, the entries of pids that no longer exist are dropped and the
//! address is counted again. A lock held by a dead process is taken over.
//!
//! The memfd is sparse: only the pages of the table that hold entries are
//! ever backed by memory.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

/// What a peer is counted under: its IPv4 address (IPv4-mapped IPv6
/// too), or for an IPv6 peer its /64 (one host's or one site's prefix, as
/// IPv6 limits usually count) folded into 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Source(u32);

impl Source {
    pub(crate) fn of(peer: SocketAddr) -> Source {
        match peer {
            SocketAddr::V4(a) => Source::from(*a.ip()),
            SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
                Some(v4) => Source::from(v4),
                None => {
                    let prefix = (u128::from(*a.ip()) >> 64) as u64;
                    Source((prefix.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32)
                }
            },
        }
    }
}

impl From<Ipv4Addr> for Source {
    fn from(a: Ipv4Addr) -> Source {
        Source(u32::from(a))
    }
}
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Table slots (a power of two): distinct (address, worker) pairs the
/// server can hold at once. 16 bytes each, 16 MiB of address space.
const SLOTS: usize = 1 << 20;
/// The lock word, then the slots (two words each).
const WORDS: usize = 2 + 2 * SLOTS;
const BYTES: usize = WORDS * 8;
/// Spins on a held lock before checking whether its holder is alive.
const SPINS_BEFORE_CHECK: u32 = 10_000;

/// Why an accept was refused by the per-address table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The address holds its `--max-connections-per-ip`.
    OverCap,
    /// Every slot of the table is taken (more distinct addresses than
    /// the table holds).
    TableFull,
}

impl Refusal {
    /// The reason the refusal is counted under.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::OverCap => "max_connections_per_ip",
            Refusal::TableFull => "per_ip_table_full",
        }
    }
}

/// The shared table, mapped into this process.
pub(crate) struct PerIp {
    words: *const AtomicU64,
    pid: u32,
    cap: u32,
}

// SAFETY: the mapping is only touched through atomics and lives as long
// as the value (unmapped on drop).
unsafe impl Send for PerIp {}

impl PerIp {
    /// Supervisor: a new, empty table; returns its fd (inherited by the
    /// workers, never closed: it lives as long as the server).
    pub(crate) fn create() -> io::Result<RawFd> {
        crate::sys::inheritable_memfd(c"megaconn-per-ip", BYTES)
    }

    /// Worker: map the table, to admit at most `cap` per address.
    pub(crate) fn open(fd: RawFd, cap: u32) -> io::Result<PerIp> {
        Ok(PerIp { words: crate::sys::map_shared_words(fd, BYTES)?, pid: std::process::id(), cap })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < WORDS);
        // SAFETY: i is within the mapping, which is 8-byte aligned.
        unsafe { &*self.words.add(i) }
    }

    fn lock_word(&self) -> &AtomicU32 {
        // SAFETY: word 0 is 8 bytes, 8-byte aligned; its low half is a
        // valid, aligned AtomicU32 used for nothing else.
        unsafe { &*(self.words as *const AtomicU32) }
    }

    /// (key, count) of slot `i`; key 0 is an empty slot.
    fn key(&self, i: usize) -> u64 {
        self.word(2 + 2 * i).load(Ordering::Relaxed)
    }

    fn count(&self, i: usize) -> &AtomicU64 {
        self.word(3 + 2 * i)
    }

    fn set(&self, i: usize, key: u64, count: u64) {
        self.word(2 + 2 * i).store(key, Ordering::Relaxed);
        self.count(i).store(count, Ordering::Relaxed);
    }

    fn home(ip: u32) -> usize {
        (ip.wrapping_mul(0x9E37_79B1) >> (32 - SLOTS.trailing_zeros())) as usize
    }

    fn lock(&self) -> Guard<'_> {
        let w = self.lock_word();
        let mut spins = 0u32;
        loop {
            match w.compare_exchange_weak(0, self.pid, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Guard(self),
                Err(holder) => {
                    spins += 1;
                    if spins >= SPINS_BEFORE_CHECK {
                        spins = 0;
                        // A holder that died with the lock: take it over.
                        if holder != 0 && !alive(holder) && w.compare_exchange(holder, self.pid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                            return Guard(self);
                        }
                        std::thread::yield_now();
                    }
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Take a place for a connection from `ip`, if it is below the cap.
    pub(crate) fn acquire(&self, ip: Source) -> Result<(), Refusal> {
        let _g = self.lock();
        let ip = ip.0;
        loop {
            let (held, mine, free) = self.scan(ip);
            if held >= self.cap as u64 {
                // Only at the cap: are all those places really held?
                match self.dead_entry(ip) {
                    Some(i) => {
                        self.delete(i);
                        continue;
                    }
                    None => return Err(Refusal::OverCap),
                }
            }
            match (mine, free) {
                (Some(i), _) => {
                    self.count(i).fetch_add(1, Ordering::Relaxed);
                }
                (None, Some(i)) => self.set(i, key_of(ip, self.pid), 1),
                (None, None) => return Err(Refusal::TableFull),
            }
            return Ok(());
        }
    }

    /// Give back the place of a closed connection from `ip`.
    pub(crate) fn release(&self, ip: Source) {
        let _g = self.lock();
        if let (_, Some(i), _) = self.scan(ip.0) {
            if self.count(i).fetch_sub(1, Ordering::Relaxed) <= 1 {
                self.delete(i);
            }
        }
    }

    /// Connections from `ip` held server-wide (every worker's share).
    #[cfg(test)]
    pub(crate) fn held(&self, ip: Source) -> u64 {
        let _g = self.lock();
        self.scan(ip.0).0
    }

    /// The probe run of `ip`: (connections it holds, this worker's slot,
    /// the empty slot ending the run). Called with the lock held.
    fn scan(&self, ip: u32) -> (u64, Option<usize>, Option<usize>) {
        let (mut held, mut mine) = (0, None);
        let mut i = Self::home(ip);
        for _ in 0..SLOTS {
            let key = self.key(i);
            if key == 0 {
                return (held, mine, Some(i));
            }
            if (key >> 32) as u32 == ip {
                held += self.count(i).load(Ordering::Relaxed);
                if key as u32 == self.pid {
                    mine = Some(i);
                }
            }
            i = (i + 1) & (SLOTS - 1);
        }
        (held, mine, None)
    }

    /// A slot of `ip`'s run counted by a worker that no longer exists
    /// (one kill(pid, 0) per other worker's slot). Lock held.
    fn dead_entry(&self, ip: u32) -> Option<usize> {
        let mut i = Self::home(ip);
        for _ in 0..SLOTS {
            let key = self.key(i);
            if key == 0 {
                return None;
            }
            if (key >> 32) as u32 == ip && key as u32 != self.pid && !alive(key as u32) {
                return Some(i);
            }
            i = (i + 1) & (SLOTS - 1);
        }
        None
    }

    /// Empty slot `hole`, shifting later entries of its run back so that
    /// every entry stays reachable from its home (no tombstones).
    fn delete(&self, mut hole: usize) {
        self.set(hole, 0, 0);
        let mut j = hole;
        loop {
            j = (j + 1) & (SLOTS - 1);
            let key = self.key(j);
            if key == 0 {
                return;
            }
            let home = Self::home((key >> 32) as u32);
            // The entry at j may move to the hole unless its home lies
            // cyclically in (hole, j].
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                let count = self.count(j).load(Ordering::Relaxed);
                self.set(hole, key, count);
                self.set(j, 0, 0);
                hole = j;
            }
        }
    }
}

struct Guard<'a>(&'a PerIp);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.lock_word().store(0, Ordering::Release);
    }
}

impl Drop for PerIp {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe { libc::munmap(self.words as *mut libc::c_void, BYTES) };
    }
}

fn key_of(ip: u32, pid: u32) -> u64 {
    ((ip as u64) << 32) | pid as u64
}

/// Whether process `pid` exists (a worker that died no longer does).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_per_address_and_places_come_back() {
        let fd = PerIp::create().unwrap();
        let a = PerIp::open(fd, 3).unwrap();
        let b = PerIp::open(fd, 3).unwrap();
        let (x, y) = (Source::from(Ipv4Addr::new(10, 0, 0, 1)), Source::from(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!((a.acquire(x), a.acquire(x), b.acquire(x)), (Ok(()), Ok(()), Ok(())));
        assert_eq!(b.acquire(x), Err(Refusal::OverCap));
        assert_eq!(a.acquire(y), Ok(()), "another address has its own places");
        a.release(x);
        assert_eq!(b.acquire(x), Ok(()));
        assert_eq!(a.held(x), 3);
        for _ in 0..3 {
            a.release(x);
        }
        assert_eq!(a.held(x), 0);
    }

    #[test]
    fn ipv6_peers_count_per_64_and_mapped_ones_as_ipv4() {
        let v6 = |s: &str| Source::of(SocketAddr::new(s.parse().unwrap(), 1));
        assert_eq!(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:ffff::9"), "one /64, one count");
        assert_ne!(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"));
        assert_eq!(v6("::ffff:10.0.0.1"), Source::from(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn a_dead_workers_places_are_taken_back_at_the_cap() {
        let fd = PerIp::create().unwrap();
        let mut ghost = PerIp::open(fd, 2).unwrap();
        // A pid that cannot exist (above pid_max's largest value).
        ghost.pid = 0x7FFF_FFF0;
        let x = Source::from(Ipv4Addr::new(192, 0, 2, 7));
        assert_eq!((ghost.acquire(x), ghost.acquire(x)), (Ok(()), Ok(())));
        let live = PerIp::open(fd, 2).unwrap();
        assert_eq!(live.acquire(x), Ok(()), "the dead worker's places came back");
        assert_eq!(live.held(x), 1);
    }

    #[test]
    fn deletion_keeps_every_entry_of_a_crowded_run_reachable() {
        let fd = PerIp::create().unwrap();
        let t = PerIp::open(fd, 1).unwrap();
        // Addresses whose homes all fall in 32 slots: one long run that
        // wraps past the end of the table.
        let ips: Vec<Source> = (0..u32::MAX).filter(|ip| (PerIp::home(*ip) + 16) % SLOTS < 32).take(200).map(Source).collect();
        for ip in &ips {
            assert_eq!(t.acquire(*ip), Ok(()));
        }
        for ip in ips.iter().step_by(2) {
            t.release(*ip);
        }
        for (k, ip) in ips.iter().enumerate() {
            assert_eq!(t.held(*ip), (k % 2) as u64, "{ip:?}");
        }
    }
}
