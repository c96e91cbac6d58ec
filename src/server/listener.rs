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
