//! The listening sockets: bound once by the server's supervisor, one per
//! port, and inherited by every worker. A worker accepts while the
//! listeners are in its epoll set; a full worker takes them out, a
//! drained one puts them back.
//!
//! They are registered level-triggered and a worker accepts one
//! connection per wake-up, then goes back to its event loop: every
//! accepting worker sees the queue while it is not empty, so a burst is
//! spread over them (edge-triggered, the first worker awake took a burst of
//! 10 keep-alive connections whole, 83 of 100: HTTP throughput -12%
//! against nginx). Every accepting worker is woken per connection (no
//! EPOLLEXCLUSIVE); they are few: workers with room (one per core plus
//! growing ones) and a full one only until the supervisor tells it to
//! leave.
//!
//! Why not SO_REUSEPORT with a listener per worker: a full worker then had
//! to close its listeners to leave the group, and a handshake in flight on
//! a closing listener is sometimes reset even with `tcp_migrate_req` —
//! measured: 1-3 ECONNRESET per 1M-2M connections with elastic workers
//! leaving, 0 in two 1M runs with 56 fixed workers that never leave. With
//! shared listeners nothing closes while the server runs, a crashed
//! worker takes no listener with it, and a port that is taken fails at
//! start with the reason.

use anyhow::{anyhow, Result};
use socket2::{Domain, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// Backlog requested from listen(); the kernel caps it at
/// net.core.somaxconn, which `megaconn tune` checks.
pub(crate) const BACKLOG: i32 = 65_535;

pub(crate) fn bind(addr: IpAddr, port: u16) -> Result<std::net::TcpListener> {
    let sa = SocketAddr::from((addr, port));
    let socket = Socket::new(Domain::for_address(sa), Type::STREAM, None).map_err(|e| anyhow!("cannot create a socket: {e}"))?;
    if addr.is_ipv6() && addr.is_unspecified() {
        // `--listen ::` takes IPv4 peers too (as IPv4-mapped addresses),
        // whatever net.ipv6.bindv6only says.
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&sa.into()).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EADDRINUSE) => "another program listens there; choose free ports with --ports",
            Some(libc::EADDRNOTAVAIL) => "that address is not on this machine; use --listen 127.0.0.1",
            Some(libc::EACCES) => "ports below 1024 need root",
            _ => "check --listen and --ports",
        };
        anyhow!("cannot listen on {sa}: {} ({hint})", crate::sys::error_kind_name(&e))
    })?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Connections the kernel completed on this listener that no worker has
/// accepted yet (TCP_INFO on a listening socket: `tcpi_unacked` is its
/// accept queue).
pub(crate) fn queued(l: &std::net::TcpListener) -> u64 {
    // SAFETY: tcp_info is plain data; zeroed is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt into a buffer of `len` bytes we own.
    let rc = unsafe { libc::getsockopt(l.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len) };
    if rc == 0 {
        info.tcpi_unacked as u64
    } else {
        0
    }
}

/// Bind every port (the supervisor does this once).
pub(crate) fn bind_all(addr: IpAddr, ports: &[u16]) -> Result<Vec<std::net::TcpListener>> {
    ports.iter().map(|p| bind(addr, *p)).collect()
}

/// Listener i has token LISTENER_BASE + i; connection tokens are slab keys.
pub(crate) const LISTENER_BASE: usize = usize::MAX / 2;

/// A worker's inherited listeners and whether it accepts from them.
pub(crate) struct AcceptGroup {
    pub listeners: Vec<mio::net::TcpListener>,
    accepting: bool,
    /// Out of the epoll set for a while (out of fds), still accepting.
    suspended: bool,
}

fn epoll(epfd: RawFd, op: libc::c_int, fd: RawFd, token: usize) -> std::io::Result<()> {
    // Level-triggered (no EPOLLET): mio reads the token back from u64.
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token as u64 };
    // SAFETY: epoll_ctl on the worker's own epoll fd with a valid event.
    if unsafe { libc::epoll_ctl(epfd, op, fd, &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl AcceptGroup {
    /// Take ownership of the listener fds the supervisor passed down.
    pub(crate) fn inherit(fds: &[RawFd]) -> AcceptGroup {
        // SAFETY: the supervisor passed these open listening sockets to
        // this process (and to no other owner in it).
        let listeners = fds.iter().map(|fd| mio::net::TcpListener::from_std(unsafe { std::net::TcpListener::from_raw_fd(*fd) })).collect();
        AcceptGroup { listeners, accepting: false, suspended: false }
    }

    /// Accepting now (not left, not suspended for lack of fds).
    pub(crate) fn accepting(&self) -> bool {
        self.accepting && !self.suspended
    }

    /// Told to accept (even while suspended).
    pub(crate) fn joined(&self) -> bool {
        self.accepting
    }

    /// All listeners in the epoll set, or none (a failed add is rolled
    /// back, so a retry starts clean).
    fn watch(&self, epfd: RawFd) -> Result<()> {
        for (i, l) in self.listeners.iter().enumerate() {
            match epoll(epfd, libc::EPOLL_CTL_ADD, l.as_raw_fd(), LISTENER_BASE + i) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => {
                    for l in &self.listeners[..i] {
                        let _ = epoll(epfd, libc::EPOLL_CTL_DEL, l.as_raw_fd(), 0);
                    }
                    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
                    return Err(anyhow!("cannot watch the listener on port {port}: {e} (ENOSPC: raise fs.epoll.max_user_watches; ENOMEM: memory is short)"));
                }
            }
        }
        Ok(())
    }

    fn unwatch(&self, epfd: RawFd) {
        for l in &self.listeners {
            let _ = epoll(epfd, libc::EPOLL_CTL_DEL, l.as_raw_fd(), 0);
        }
    }

    /// Start accepting: put every listener in the epoll set.
    pub(crate) fn join(&mut self, epfd: RawFd) -> Result<()> {
        if !self.accepting {
            self.watch(epfd)?;
            self.accepting = true;
            self.suspended = false;
        }
        Ok(())
    }

    /// Stop accepting; the listeners stay open (nothing in flight on them
    /// is lost: other workers take it).
    pub(crate) fn leave(&mut self, epfd: RawFd) {
        if self.accepting && !self.suspended {
            self.unwatch(epfd);
        }
        self.accepting = false;
        self.suspended = false;
    }

    /// Out of descriptors: stop being woken (level-triggered, a queue we
    /// cannot take would wake us at once, forever) until [`resume`].
    pub(crate) fn suspend(&mut self, epfd: RawFd) {
        if self.accepting && !self.suspended {
            self.unwatch(epfd);
            self.suspended = true;
        }
    }

    /// Back in the epoll set after a suspension; Err: still out (the
    /// caller backs off again).
    pub(crate) fn resume(&mut self, epfd: RawFd) -> Result<()> {
        if self.suspended {
            self.watch(epfd)?;
            self.suspended = false;
        }
        Ok(())
    }

    /// Shutting down: stop accepting and close this worker's copies (the
    /// socket closes once the supervisor and every worker closed theirs).
    pub(crate) fn close(&mut self, epfd: RawFd) {
        self.leave(epfd);
        self.listeners.clear();
    }
}
