//! Listening sockets shared by every server worker through SO_REUSEPORT:
//! each worker binds every port itself and the kernel spreads incoming
//! connections across the workers' accept queues.

use anyhow::{anyhow, Result};
use socket2::{Domain, Socket, Type};
use std::net::{Ipv4Addr, SocketAddr};

/// Backlog requested from listen(); the kernel caps it at
/// net.core.somaxconn, which `megaconn tune` checks.
pub const BACKLOG: i32 = 65_535;

pub fn bind(addr: Ipv4Addr, port: u16) -> Result<mio::net::TcpListener> {
    let sa = SocketAddr::from((addr, port));
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).map_err(|e| anyhow!("cannot create a socket: {e}"))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&sa.into()).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EADDRINUSE) => "another program holds it without SO_REUSEPORT; choose free ports with --ports",
            Some(libc::EADDRNOTAVAIL) => "that address is not on this machine; use --listen 127.0.0.1",
            Some(libc::EACCES) => "ports below 1024 need root",
            _ => "check --listen and --ports",
        };
        anyhow!("cannot listen on {sa}: {} ({hint})", crate::sys::error_kind_name(&e))
    })?;
    socket.listen(BACKLOG)?;
    Ok(mio::net::TcpListener::from_std(socket.into()))
}

/// Listener tokens count down from here; connection tokens are slab keys.
pub const LISTENER_BASE: usize = usize::MAX / 2;

/// A worker's membership in the SO_REUSEPORT accept group: one listener
/// per port while it accepts, none while it is full. Leaving closes the
/// listeners, so the kernel hashes new connections over the other
/// workers only; handshakes still queued on a closed listener move to a
/// sibling when `net.ipv4.tcp_migrate_req` is 1 and are reset otherwise,
/// which is why the worker accepts its queue before it leaves.
pub struct AcceptGroup {
    addr: Ipv4Addr,
    ports: Vec<u16>,
    pub listeners: Vec<mio::net::TcpListener>,
}

impl AcceptGroup {
    pub fn new(addr: Ipv4Addr, ports: Vec<u16>) -> AcceptGroup {
        AcceptGroup { addr, ports, listeners: Vec::new() }
    }

    pub fn accepting(&self) -> bool {
        !self.listeners.is_empty()
    }

    /// Bind every port and register the listeners.
    pub fn join(&mut self, registry: &mio::Registry) -> Result<()> {
        if self.accepting() {
            return Ok(());
        }
        let mut ls = self.ports.iter().map(|p| bind(self.addr, *p)).collect::<Result<Vec<_>>>()?;
        for (i, l) in ls.iter_mut().enumerate() {
            registry.register(l, mio::Token(LISTENER_BASE + i), mio::Interest::READABLE)?;
        }
        self.listeners = ls;
        Ok(())
    }

    /// Close every listener (the caller has accepted what was queued).
    pub fn leave(&mut self, registry: &mio::Registry) {
        for mut l in self.listeners.drain(..) {
            let _ = registry.deregister(&mut l);
        }
    }
}
