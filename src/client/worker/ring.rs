//! A client worker on the io_uring reactor (`--io uring`): once a
//! connection's TCP handshake is done it gets one multishot receive, and
//! what the server sends (handshake flights, answers, heartbeats' echoes,
//! pushes) arrives as completions into the worker's shared buffer ring,
//! read by the same code as on epoll (`hear`), with no `read()` and no
//! readiness event per message. Connects, their deadlines and what the
//! client sends stay on epoll and `write()`: in ring mode a socket is in
//! the epoll for writability only (the connect's completion, a backlog).

use super::Worker;
use crate::uring::{recv_key, recv_tag, Op, Pending, Received, RingHandler};
use std::os::fd::AsRawFd;

impl Worker {
    /// The receive tag of slot k's current connection (its connect time
    /// tells one connection of the slot from the next).
    fn tag(&self, k: usize) -> u64 {
        recv_tag(k, self.slots[k].started_us)
    }

    /// Slot k's TCP handshake is done: its bytes come from the ring from
    /// now on.
    pub(super) fn arm(&mut self, k: usize) {
        let tag = self.tag(k);
        let slot = &mut self.slots[k];
        let (Some(ring), Some(stream)) = (self.ring.as_mut(), slot.stream.as_ref()) else { return };
        ring.ops.push(Op::Recv { fd: stream.as_raw_fd(), tag });
        slot.armed = true;
    }

    /// Drop slot k's socket: at once, or, when its receive is armed,
    /// after the cancellation goes in with the next submit.
    pub(super) fn put_down(&mut self, k: usize) {
        let tag = self.tag(k);
        let slot = &mut self.slots[k];
        let armed = std::mem::take(&mut slot.armed);
        let Some(stream) = slot.stream.take() else { return };
        match self.ring.as_mut() {
            Some(ring) if armed => ring.cancel_and_close(tag, stream),
            _ => drop(stream),
        }
    }
}

impl RingHandler for Worker {
    fn on_received(&mut self, tag: u64, r: Received<'_>) {
        let k = recv_key(tag);
        if !self.slots.get(k).is_some_and(|s| s.armed && s.stream.is_some()) || self.tag(k) != tag {
            return;
        }
        match r {
            Received::Data(bytes, _) => self.hear(k, crate::sys::mono_us(), false, Some(bytes)),
            Received::Stopped => {
                let fd = self.slots[k].stream.as_ref().map(|s| s.as_raw_fd());
                if let (Some(ring), Some(fd)) = (self.ring.as_mut(), fd) {
                    ring.ops.push(Op::Recv { fd, tag });
                }
            }
            Received::Eof => self.lose(k, "peer_closed".into()),
            Received::Error(errno) => self.lose(k, crate::sys::error_kind_name(&std::io::Error::from_raw_os_error(errno))),
        }
    }

    /// The client sends with `write()`: no sends on the ring.
    fn on_sent(&mut self, _tag: u64, _res: i32) {}

    fn pending(&mut self) -> &mut Pending {
        self.ring.get_or_insert_with(Default::default)
    }

    fn sends_in_flight(&self) -> usize {
        0
    }
}
