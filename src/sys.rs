//! Thin, safe wrappers over the few Linux facts every process needs: its
//! open-file limit, its own memory and CPU use, a clock shared by all
//! processes, and how to name an errno the way operators search for it.

use std::io;

/// The RLIMIT_NOFILE pair of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Descriptors this process has open now (0 when /proc cannot be read).
pub(crate) fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0)
}

pub(crate) fn fd_limit() -> FdLimit {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    FdLimit { soft: r.rlim_cur, hard: r.rlim_max }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (any process may) and
/// return (before, after). This is the fix for the classic "stuck at ~870
/// connections" wall, applied to ourselves and to every worker we spawn.
pub(crate) fn raise_fd_limit() -> (FdLimit, FdLimit) {
    let before = fd_limit();
    if before.soft < before.hard {
        let r = libc::rlimit { rlim_cur: before.hard as libc::rlim_t, rlim_max: before.hard as libc::rlim_t };
        // SAFETY: plain syscall with a valid struct.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    }
    (before, fd_limit())
}

/// Microseconds on CLOCK_MONOTONIC. The clock is system-wide, so a
/// supervisor can hand its workers an absolute start instant.
pub(crate) fn mono_us() -> u64 {
    mono_ns() / 1_000
}

/// Nanoseconds on CLOCK_MONOTONIC: one clock for every process and
/// thread of the machine (the bus orders frames by it, `proto/bus.rs`).
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Resident set size of this process in bytes (from /proc/self/statm).
pub(crate) fn self_rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * page_size()
}

/// Threads in this process (from /proc/self/status).
pub(crate) fn self_threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()).unwrap_or(1)
}

pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// User + system CPU time of this process, in microseconds.
pub(crate) fn self_cpu_us() -> u64 {
    // SAFETY: rusage is plain old data: all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own and borrow mutably.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Let a closed stdout end this process as it ends `cat` (SIGPIPE), not
/// as a panic in `println!` (`megaconn tune ... | head`). Only for
/// commands with no worker pipes: a supervisor must survive writing to a
/// dead worker's stdin.
pub(crate) fn end_on_broken_stdout() {
    // SAFETY: restoring the default disposition of one signal; no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Ask the kernel to SIGKILL this process when its parent dies, so no
/// worker outlives its supervisor. Called between fork and exec.
pub(crate) fn die_with_parent() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Set RLIMIT_NOFILE (soft and hard) for this process; used by tests and
/// by `--fd-limit` to rehearse the fd wall on a small scale.
pub(crate) fn set_fd_limit(soft: u64, hard: u64) -> io::Result<()> {
    let r = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
    // SAFETY: plain syscall with a valid struct.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The address of the peer of connected socket `fd`, as text ("" when
/// it has none: closed meanwhile).
pub(crate) fn peer_ip(fd: std::os::fd::RawFd) -> String {
    if fd < 0 {
        return String::new();
    }
    // SAFETY: the caller's socket is open for this call's length; the
    // borrow ends with it and the fd is never closed here.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).peer_addr().ok().and_then(|a| a.as_socket()).map(|a| a.ip().to_string()).unwrap_or_default()
}

pub(crate) fn online_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Name an I/O error the way operators grep for it: "ECONNREFUSED",
/// "EADDRNOTAVAIL", "EMFILE", ... and "timeout" for our own deadlines.
pub(crate) fn error_kind_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => errno_name(code),
        None if e.kind() == io::ErrorKind::TimedOut => "timeout".into(),
        // Errors we make ourselves carry their name (TLS: "tls_alert_...").
        None if e.kind() == io::ErrorKind::Other && e.get_ref().is_some() => e.to_string(),
        None => format!("{:?}", e.kind()),
    }
}

pub(crate) fn errno_name(code: i32) -> String {
    match errno_static(code) {
        Some(name) => name.to_string(),
        None => format!("errno_{code}"),
    }
}

/// The name of an errno operators know, without allocating; `None` for
/// the rest ([`errno_name`] calls them "errno_N").
pub(crate) fn errno_static(code: i32) -> Option<&'static str> {
    Some(match code {
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNRESET => "ECONNRESET",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EPIPE => "EPIPE",
        libc::EAGAIN => "EAGAIN",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        _ => return None,
    })
}

/// Name a signal the way `kill -l` does ("SIGKILL", "SIGSEGV", ...).
pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGHUP => "SIGHUP",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// A zero-filled memfd of `bytes` that exec'd children inherit (no
/// MFD_CLOEXEC): how the supervisor shares a table with its workers.
pub(crate) fn inheritable_memfd(name: &std::ffi::CStr, bytes: usize) -> io::Result<std::os::fd::RawFd> {
    memfd(name, bytes, true).map(std::os::fd::IntoRawFd::into_raw_fd)
}

/// A zero-filled memfd of `bytes`; `inherited`: every exec'd child gets
/// it, else only a child that clears close-on-exec (`Pool::set_inherit`).
pub(crate) fn memfd(name: &std::ffi::CStr, bytes: usize, inherited: bool) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), if inherited { 0 } else { libc::MFD_CLOEXEC }) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is ours (closed on drop).
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: fd is ours.
    if unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), bytes as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Map `bytes` of a memfd made by [`inheritable_memfd`], shared and
/// writable, as 8-byte words (the mapping is page-aligned).
pub(crate) fn map_shared_words(fd: std::os::fd::RawFd, bytes: usize) -> io::Result<*const std::sync::atomic::AtomicU64> {
    // SAFETY: mapping `bytes` of a memfd sized to at least `bytes`, shared.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *const std::sync::atomic::AtomicU64)
}
