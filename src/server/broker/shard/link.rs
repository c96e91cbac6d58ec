//! One worker's socket, as a shard holds it: the frames read from it
//! (with the stamp of the run they are in, `proto/bus.rs`) and the frames
//! waiting to be written to it, both bounded.

use super::{IOVECS, MAX_QUEUED, READ_BUDGET};
use crate::proto::bus::FrameBuf;
use mio::net::UnixStream;
use mio::{Interest, Token};
use std::collections::VecDeque;
use std::io::{IoSlice, Read, Write};

pub(super) struct Link {
    pub(super) w: u32,
    pub(super) stream: UnixStream,
    pub(super) inbuf: FrameBuf,
    /// The stamp of the run `inbuf`'s next frames are in (0: before any).
    pub(super) stamp: u64,
    /// Its last read stopped at [`READ_BUDGET`]: more waits in the socket.
    pub(super) cut: bool,
    /// Frames waiting to be written, the first one `head` bytes in.
    pub(super) out: VecDeque<std::sync::Arc<[u8]>>,
    head: usize,
    queued: usize,
    /// Its worker closed it (or sent what cannot be read).
    pub(super) closed: bool,
}

impl Link {
    pub(super) fn new(w: u32, stream: UnixStream) -> Link {
        Link { w, stream, inbuf: FrameBuf::default(), stamp: 0, cut: false, out: VecDeque::new(), head: 0, queued: 0, closed: false }
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

    pub(super) fn queue(&mut self, bytes: &std::sync::Arc<[u8]>, dropped: &mut crate::stats::counters::Kinds) {
        if self.queued + bytes.len() > MAX_QUEUED {
            crate::stats::counters::bump(dropped, "worker_full");
            return;
        }
        self.queued += bytes.len();
        self.out.push_back(bytes.clone());
    }

    /// Write what waits, until the socket takes no more. Err: the worker is gone.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        while !self.out.is_empty() {
            let slices: Vec<IoSlice<'_>> =
                self.out.iter().take(IOVECS).enumerate().map(|(i, b)| IoSlice::new(if i == 0 { &b[self.head..] } else { b })).collect();
            let n = match self.stream.write_vectored(&slices) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.queued -= n;
            let mut n = n + self.head;
            self.head = 0;
            while let Some(front) = self.out.front() {
                if n < front.len() {
                    self.head = n;
                    break;
                }
                n -= front.len();
                self.out.pop_front();
            }
        }
        if self.out.capacity() > 1024 {
            self.out.shrink_to_fit();
        }
        Ok(())
    }
}
