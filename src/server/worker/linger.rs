//! Lingering close (as nginx's `lingering_close`): after an error answer
//! (a refused HTTP request or WebSocket upgrade) the peer may still be
//! sending the request's body. Closing a socket with unread bytes, or
//! receiving bytes after the close, makes the kernel send a reset, and
//! the peer's write fails before it reads the answer (curl: "connection
//! reset"). So the answer is followed by a FIN (`shutdown(WR)`) and the
//! socket is kept, out of the connection table and of epoll, reading and
//! dropping what arrives on every tick until the peer closes or
//! [`LINGER`] passes.

use mio::net::TcpStream;
use std::io::Read;
use std::net::Shutdown;
use std::time::{Duration, Instant};

/// Longest a refused peer is read from after the answer.
pub(super) const LINGER: Duration = Duration::from_secs(5);
/// Most sockets lingering at once per worker; beyond it they close at once.
pub(super) const MAX_LINGERING: usize = 256;
/// How often lingering sockets are read.
pub(super) const LINGER_TICK: Duration = Duration::from_millis(100);
/// Most bytes dropped per socket per tick.
const READ_BUDGET: usize = 256 * 1024;

#[derive(Default)]
pub(super) struct Lingering {
    socks: Vec<(TcpStream, Instant)>,
    buf: Vec<u8>,
}

impl Lingering {
    /// Keep `stream` (already out of epoll, its answer fully written)
    /// until the peer is done sending. False when it was closed at once.
    pub(super) fn start(&mut self, mut stream: TcpStream) -> bool {
        if self.socks.len() >= MAX_LINGERING || !drop_input(&mut stream, &mut self.buf) {
            return false;
        }
        if stream.shutdown(Shutdown::Write).is_err() {
            return false;
        }
        self.socks.push((stream, Instant::now() + LINGER));
        true
    }

    /// Read from every lingering socket; close those the peer closed or
    /// whose time is up.
    pub(super) fn sweep(&mut self) {
        let now = Instant::now();
        let buf = &mut self.buf;
        self.socks.retain_mut(|(s, until)| now < *until && drop_input(s, buf));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.socks.len()
    }
}

/// Read and drop what arrived; false once the peer closed or failed.
fn drop_input(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.resize(16 * 1024, 0);
    let mut read = 0;
    while read < READ_BUDGET {
        match stream.read(buf) {
            Ok(0) => return false,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_lingering_socket_reads_until_the_peer_closes() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut lingering = Lingering::default();
        peer.write_all(&[7u8; 50_000]).unwrap();
        assert!(lingering.start(TcpStream::from_std(s)));
        // The FIN arrives after what we sent (nothing): the peer reads EOF
        // while it still may write.
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        assert!(got.is_empty());
        peer.write_all(&[7u8; 50_000]).unwrap();
        lingering.sweep();
        assert_eq!(lingering.len(), 1, "still open: the peer has not closed");
        drop(peer);
        std::thread::sleep(Duration::from_millis(50));
        lingering.sweep();
        assert!(lingering.is_empty(), "closed once the peer closed");
    }
}
