//! The one source of loopback ports for end-to-end tests.
//!
//! Tests in one file run in parallel, files may run at the same time (two
//! checkouts testing at once), and a fixed port in two files collided
//! before (21600 in http.rs and push.rs). So every port a test listens on
//! comes from [`free_ports`]: `n` consecutive ports, each proven free by
//! binding it on 127.0.0.1 and on the wildcard address without
//! SO_REUSEADDR (so a listener, a connection or a TIME_WAIT left on it
//! counts as taken), and reserved with an advisory lock file held until
//! this test process exits, so another test process using this allocator
//! skips it. Each test binary starts its cursor at its own place in the
//! pool (a hash of its name), so files rarely even meet.
//!
//! The pool is 20000-22999: below the kernel's default ephemeral ports
//! (32768-60999), and clear of 23000-23999, which the documentation
//! journeys use (tests/journeys.rs runs them), and of the bench scripts'
//! 24000+. Where the ephemeral range was widened to 1024-65535 (the bench
//! recipe), scripts/test.sh reserves 20000-23999 for the run
//! (ip_local_reserved_ports), so no outgoing connection lands on them.

use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// First port of the pool.
const POOL_FIRST: u16 = 20_000;
/// Ports in the pool (20000-22999).
const POOL_LEN: usize = 3_000;
/// Where each binary's cursor may start: multiples of this within the pool.
const START_STEP: usize = 100;

/// A block of consecutive ports, all free when handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    pub first: u16,
    pub last: u16,
}

impl Ports {
    /// As `--ports` takes it: "P" or "FIRST-LAST".
    pub fn arg(&self) -> String {
        if self.first == self.last {
            self.first.to_string()
        } else {
            format!("{}-{}", self.first, self.last)
        }
    }

    /// 127.0.0.1:FIRST.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.first)
    }

    /// The `i`-th port of the block.
    pub fn nth(&self, i: u16) -> u16 {
        assert!(self.first + i <= self.last, "port {i} of {self:?}");
        self.first + i
    }

    pub fn len(&self) -> u16 {
        self.last - self.first + 1
    }
}

/// One free port.
pub fn free_port() -> u16 {
    free_ports(1).first
}

/// `n` consecutive free loopback ports (see the module doc).
pub fn free_ports(n: u16) -> Ports {
    assert!(n >= 1 && (n as usize) <= START_STEP, "ask for 1..={START_STEP} ports, not {n}");
    static CURSOR: AtomicUsize = AtomicUsize::new(0);
    let start = *binary_start();
    let mut scanned = 0;
    while scanned < POOL_LEN {
        let at = CURSOR.fetch_add(n as usize, Ordering::SeqCst);
        scanned += n as usize;
        let offset = (start + at) % POOL_LEN;
        if offset + n as usize > POOL_LEN {
            continue; // the block would run past the pool's end
        }
        let first = POOL_FIRST + offset as u16;
        let block = Ports { first, last: first + n - 1 };
        if reserve(block) {
            return block;
        }
    }
    panic!("no {n} consecutive free ports in {POOL_FIRST}-{}: is something holding the test pool?", POOL_FIRST as usize + POOL_LEN - 1)
}

/// This binary's place in the pool: a hash of its name without cargo's
/// `-<hash>` suffix, so it stays put from build to build.
fn binary_start() -> &'static usize {
    static START: OnceLock<usize> = OnceLock::new();
    START.get_or_init(|| {
        let exe = std::env::current_exe().ok().and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned())).unwrap_or_default();
        let name = exe.rsplit_once('-').map_or(exe.as_str(), |(n, _)| n);
        // FNV-1a: any stable hash will do.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
        (hash as usize % (POOL_LEN / START_STEP)) * START_STEP
    })
}

/// Lock files this process holds: a lock lasts until the process exits.
fn held() -> &'static Mutex<Vec<File>> {
    static HELD: OnceLock<Mutex<Vec<File>>> = OnceLock::new();
    HELD.get_or_init(|| Mutex::new(Vec::new()))
}

/// Take every port of `block`, or none.
fn reserve(block: Ports) -> bool {
    let mut locks = Vec::new();
    for port in block.first..=block.last {
        match lock(port) {
            Some(f) if bindable(port) => locks.push(f),
            _ => return false, // dropping `locks` releases what we took
        }
    }
    held().lock().unwrap().extend(locks);
    true
}

/// An exclusive advisory lock on /tmp/megaconn-test-ports/PORT.
fn lock(port: u16) -> Option<File> {
    let dir = std::env::temp_dir().join("megaconn-test-ports");
    std::fs::create_dir_all(&dir).ok()?;
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(port.to_string())).ok()?;
    // SAFETY: flock on a file descriptor we own.
    (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some(f)
}

/// Whether nothing holds `port`: a plain bind (no SO_REUSEADDR) succeeds
/// on 127.0.0.1 and on 0.0.0.0.
fn bindable(port: u16) -> bool {
    [Ipv4Addr::LOCALHOST, Ipv4Addr::UNSPECIFIED].iter().all(|ip| {
        let Ok(s) = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None) else { return false };
        s.bind(&SocketAddrV4::new(*ip, port).into()).is_ok()
    })
}
