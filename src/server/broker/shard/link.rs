//! One worker's socket, as a shard holds it: the frames read from it
//! (with the stamp of the run they are in, `proto/bus.rs`) and the frames
//! waiting to be written to it, both bounded.

use super::{MAX_QUEUED, READ_BUDGET};
use crate::proto::bus::FrameBuf;
use mio::net::UnixStream;
use mio::{Interest, Token};
use std::io::{Read, Write};

/// An emptied output buffer above this capacity gives its memory back.
const SHRINK_ABOVE: usize = 1 << 20;

pub(super) struct Link {
    pub(super) w: u32,
    pub(super) stream: UnixStream,
    pub(super) inbuf: FrameBuf,
    /// The stamp of the run `inbuf`'s next frames are in (0: before any).
    pub(super) stamp: u64,
    /// Its last read stopped at [`READ_BUDGET`]: more waits in the socket.
    pub(super) cut: bool,
    /// Frames waiting to be written, one after another (copied in: a
    /// delivery is small, and one `write` takes many), `sent` bytes of
    /// them written already.
    pub(super) out: Vec<u8>,
    sent: usize,
    /// Its worker closed it (or sent what cannot be read).
    pub(super) closed: bool,
}

impl Link {
    pub(super) fn new(w: u32, stream: UnixStream) -> Link {
        Link { w, stream, inbuf: FrameBuf::default(), stamp: 0, cut: false, out: Vec::new(), sent: 0, closed: false }
    }

    /// Read what the worker sent, up to [`READ_BUDGET`] (past it a new
    /// edge is asked for: more may wait).
    pub(super) fn take(&mut self, scratch: &mut [u8], registry: &mio::Registry, token: Token) {
        let mut read = 0;
        while read < READ_BUDGET && !self.closed {
            match self.stream.read(scratch) {
                Ok(0) => self.closed = true,
                Ok(n) => {
                    read += n;
                    self.inbuf.extend(&scratch[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.cut = false;
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => self.closed = true,
            }
        }
        self.cut = !self.closed;
        if self.cut {
            let _ = registry.reregister(&mut self.stream, token, Interest::READABLE | Interest::WRITABLE);
        }
    }

    /// What it sent cannot be read: the rest is dropped, the link ends.
    pub(super) fn fail(&mut self) {
        (self.inbuf, self.closed, self.cut) = (FrameBuf::default(), true, false);
    }

    /// Whether it is done: closed, and every whole frame it sent taken.
    pub(super) fn gone(&self) -> bool {
        self.closed && !self.inbuf.whole()
    }

    /// Bytes waiting to be written.
    pub(super) fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Whole frames for the worker; past [`MAX_QUEUED`] waiting they are
    /// dropped and counted (`worker_full`).
    pub(super) fn queue(&mut self, bytes: &[u8], dropped: &mut crate::stats::counters::Kinds) {
        if self.pending() + bytes.len() > MAX_QUEUED {
            crate::stats::counters::bump(dropped, "worker_full");
            return;
        }
        self.out.extend_from_slice(bytes);
    }

    /// Write what waits, until the socket takes no more. Err: the worker is gone.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // What was written goes, once it is most of the buffer:
                    // a worker that always lags a little never lets it grow.
                    if self.sent > self.out.len() / 2 {
                        self.out.drain(..self.sent);
                        self.sent = 0;
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        (self.sent, _) = (0, self.out.clear());
        if self.out.capacity() > SHRINK_ABOVE {
            self.out = Vec::new();
        }
        Ok(())
    }
}
