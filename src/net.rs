//! Connection I/O shared by server and client reactors.
//!
//! An idle connection owns no buffer: reads land in the reactor's scratch
//! buffer, and only a frame cut in half by the network (rare) or output the
//! socket would not take (rarer) gets a small heap buffer, freed as soon as
//! it empties. This is what keeps user memory per connection in the tens of
//! bytes.

use crate::proto::frame::{self, Frame};
use std::io::{self, Read, Write};

/// Bytes kept between readiness events; `None` for every healthy idle
/// connection.
pub(crate) type Spill = Option<Box<Vec<u8>>>;

/// Where a connection keeps the bytes it carries between events (the
/// start of a cut frame, output the socket did not take): a [`Spill`] of
/// its own, or one half of the server record's shared box
/// (`server::worker::spills::Spills`). What is held is never empty: a slot
/// that holds nothing says `None`, and frees what it can.
pub(crate) trait Carried {
    /// The bytes held, if any.
    fn held(&self) -> Option<&Vec<u8>>;
    fn held_mut(&mut self) -> Option<&mut Vec<u8>>;
    /// Hold `bytes` (not empty) in place of whatever was held.
    fn hold(&mut self, bytes: Vec<u8>);
    /// What was held, the slot left empty.
    fn take(&mut self) -> Option<Vec<u8>>;

    fn is_held(&self) -> bool {
        self.held().is_some()
    }

    /// Bytes held (0 for none).
    fn held_len(&self) -> usize {
        self.held().map_or(0, Vec::len)
    }

    /// Drop the first `n` bytes held, the slot emptied when none is left.
    fn consume(&mut self, n: usize) {
        let Some(buf) = self.held_mut() else { return };
        buf.drain(..n);
        if buf.is_empty() {
            self.take();
        }
    }
}

impl Carried for Spill {
    fn held(&self) -> Option<&Vec<u8>> {
        self.as_deref()
    }

    fn held_mut(&mut self) -> Option<&mut Vec<u8>> {
        self.as_deref_mut()
    }

    fn hold(&mut self, bytes: Vec<u8>) {
        debug_assert!(!bytes.is_empty());
        *self = Some(Box::new(bytes));
    }

    fn take(&mut self) -> Option<Vec<u8>> {
        Option::take(self).map(|b| *b)
    }
}

/// Most bytes a connection may leave unsent before it is closed as a slow
/// reader, when its protocol's replies are small; bounds memory per
/// connection whatever the peer does. A protocol that may answer with more
/// (a WebSocket echo of `--max-message-bytes`) is bounded by [`reply_cap`].
pub(crate) const MAX_BACKLOG: usize = 256 * 1024;

/// Room kept behind the largest reply a protocol may give, for the small
/// answers that can queue behind it while it drains: a pong, a close, a
/// command's answer, what a TLS handshake still has to say, an HTTP head.
pub(crate) const REPLY_SLACK: usize = 64 * 1024;

/// The bound on one connection's unsent replies when a single reply may
/// be `largest` bytes on the wire: [`MAX_BACKLOG`], or that whole reply
/// and [`REPLY_SLACK`] behind it when that is more.
///
/// Why not [`MAX_BACKLOG`] alone: a server that accepts a 16 MiB message
/// must be able to answer it, and a reply larger than what the socket
/// takes at once spills whole into the backlog however fast the peer
/// reads. The size of what waits says nothing about a peer that reads;
/// whether it drains is judged by progress: `--stall-timeout` closes a
/// backlog that does not move. This bound only keeps memory finite, at
/// the same order as the message the peer was allowed to send.
pub(crate) const fn reply_cap(largest: usize) -> usize {
    let with_slack = largest.saturating_add(REPLY_SLACK);
    if with_slack > MAX_BACKLOG {
        with_slack
    } else {
        MAX_BACKLOG
    }
}

/// Full reads of one socket per readiness event: a peer that floods is
/// served a bounded slice at a time (fairness), and what its requests
/// produce is sent before more is read (bounded output per event).
pub(crate) const READ_BUDGET: usize = 16;

/// Where a connection's bytes come from: a socket, or a TLS connection
/// decrypting one. `read_some` returns the bytes read and whether more may
/// be waiting (for a socket: the read filled the buffer); `Ok((0, false))`
/// is the end of the stream, `Ok((0, true))` a full read that brought
/// nothing to hand on (TLS records with no plaintext, such as key
/// updates), which counts against [`READ_BUDGET`] like any other read;
/// `WouldBlock` nothing for now.
pub(crate) trait Source {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<(usize, bool)>;
}

impl<T: Read> Source for T {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        let n = self.read(buf)?;
        Ok((n, n > 0 && n == buf.len()))
    }
}

/// Bytes already received (an io_uring completion), read like a socket:
/// then `WouldBlock`, never the end of the stream.
pub(crate) struct Received<'a>(pub &'a [u8]);

impl Read for Received<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.0.len().min(buf.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Why reading stopped. `E` names an error: a `String` by default
/// ("ECONNRESET", "bad_frame_too_long"), or the caller's own type
/// ([`read_chunks_as`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadEnd<E = String> {
    /// Drained for now; wait for the next readiness event.
    Open,
    /// Stopped after [`READ_BUDGET`] full reads with more possibly
    /// waiting: the caller re-arms the socket (edge-triggered epoll sends
    /// no new event for data already there) and serves others first.
    Budget,
    /// The peer closed its side (read returned 0).
    Eof,
    /// An error, named like "ECONNRESET" or "bad_frame_too_long".
    Error(E),
}

/// Read everything the socket has, decode whole frames and hand each to
/// `on_frame`. A partial frame is kept in `partial`. `read_closed` is the
/// readiness hint that the peer's FIN is already queued, in which case we
/// read on to see it even after a short read.
pub(crate) fn read_frames<S: Source>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    mut on_frame: impl FnMut(Frame<'_>) -> Result<(), &'static str>,
) -> ReadEnd {
    read_chunks(stream, partial, scratch, read_closed, |buf| decode_all(buf, &mut on_frame))
}

/// Read everything the socket has and cut it into fixed-size units (the
/// echo8 protocol: 8-byte timestamps with no framing).
pub(crate) fn read_fixed<S: Source>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    unit: usize,
    mut on_unit: impl FnMut(&[u8]) -> Result<(), &'static str>,
) -> ReadEnd {
    read_fixed_as(stream, partial, scratch, read_closed, unit, |u| on_unit(u).map_err(str::to_string), crate::sys::error_kind_name)
}

/// [`read_fixed`] with errors of the caller's type (see [`read_chunks_as`]).
pub(crate) fn read_fixed_as<S: Source, E>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    unit: usize,
    mut on_unit: impl FnMut(&[u8]) -> Result<(), E>,
    io_error: impl Fn(&io::Error) -> E,
) -> ReadEnd<E> {
    read_chunks_as(
        stream,
        partial,
        scratch,
        read_closed,
        |buf| {
            let whole = buf.len() / unit * unit;
            for u in buf[..whole].chunks_exact(unit) {
                on_unit(u)?;
            }
            Ok(whole)
        },
        io_error,
    )
}

/// The read loop every protocol shares: `consume` takes the bytes so far
/// and returns how many it used; the rest waits in `partial`. Its error
/// names why the connection must close.
pub(crate) fn read_chunks<S: Source>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    consume: impl FnMut(&[u8]) -> Result<usize, &'static str>,
) -> ReadEnd {
    read_chunks_named(stream, partial, scratch, read_closed, consume)
}

/// [`read_chunks`] for a `consume` whose error is any name that becomes
/// a `String` (one carrying a code, like a client's "ws_close_1008").
pub(crate) fn read_chunks_named<S: Source, E: Into<String>>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    mut consume: impl FnMut(&[u8]) -> Result<usize, E>,
) -> ReadEnd {
    read_chunks_as(stream, partial, scratch, read_closed, |b| consume(b).map_err(Into::into), crate::sys::error_kind_name)
}

/// [`read_chunks`] with errors of the caller's type: `consume`'s own, and
/// `io_error`'s name for a failed read. Nothing is allocated to end.
pub(crate) fn read_chunks_as<S: Source, E>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    consume: impl FnMut(&[u8]) -> Result<usize, E>,
    io_error: impl Fn(&io::Error) -> E,
) -> ReadEnd<E> {
    read_chunks_charged(stream, partial, scratch, read_closed, consume, io_error, &std::cell::Cell::new(0))
}

/// [`read_chunks_as`], where `consume` may charge the budget more than
/// one read for a read that made it do more work (`charged`: reads' worth
/// added since it was last taken, as a permessage-deflate connection
/// charges what it inflated): a peer whose few bytes turn into much
/// work is served the same bounded slice as one that sends much.
pub(crate) fn read_chunks_charged<S: Source, E>(
    stream: &mut S,
    partial: &mut impl Carried,
    scratch: &mut [u8],
    read_closed: bool,
    mut consume: impl FnMut(&[u8]) -> Result<usize, E>,
    io_error: impl Fn(&io::Error) -> E,
    charged: &std::cell::Cell<usize>,
) -> ReadEnd<E> {
    let mut reads = 0;
    loop {
        let (n, more) = match stream.read_some(scratch) {
            Ok((0, false)) => return ReadEnd::Eof,
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadEnd::Open,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return ReadEnd::Error(io_error(&e)),
        };
        let result = match partial.held_mut() {
            // Nothing new (records with no plaintext): nothing to consume,
            // but the read still counts against the budget below.
            _ if n == 0 => Ok(0),
            Some(buf) => {
                buf.extend_from_slice(&scratch[..n]);
                let r = consume(buf);
                partial.consume(*r.as_ref().unwrap_or(&0));
                r
            }
            None => {
                let r = consume(&scratch[..n]);
                if let Ok(used) = r {
                    if used < n {
                        partial.hold(scratch[used..n].to_vec());
                    }
                }
                r
            }
        };
        if let Err(e) = result {
            return ReadEnd::Error(e);
        }
        // A short read means the socket is empty right now; any later data
        // raises a new edge-triggered event.
        if !more && !read_closed {
            return ReadEnd::Open;
        }
        reads += 1 + charged.take();
        if reads >= READ_BUDGET {
            return ReadEnd::Budget;
        }
    }
}

/// Every whole frame at the start of `buf`, in order, to `on_frame`;
/// returns the bytes they took (a frame cut short waits for more).
pub(crate) fn decode_all<E: From<frame::FrameError>>(buf: &[u8], on_frame: &mut impl FnMut(Frame<'_>) -> Result<(), E>) -> Result<usize, E> {
    let mut used = 0;
    loop {
        match frame::decode(&buf[used..]) {
            Ok(Some((f, n))) => {
                on_frame(f)?;
                used += n;
            }
            Ok(None) => return Ok(used),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Why a send must end the connection.
#[derive(Debug)]
pub(crate) enum SendError {
    /// What waits unsent would pass the send's bound.
    Full,
    /// A write took no byte.
    WriteZero,
    /// The socket failed.
    Io(io::Error),
}

impl SendError {
    /// Its name: `full` past the bound, "write_zero", or the errno's name.
    pub(crate) fn name(self, full: &str) -> String {
        match self {
            SendError::Full => full.into(),
            SendError::WriteZero => "write_zero".into(),
            SendError::Io(e) => crate::sys::error_kind_name(&e),
        }
    }
}

/// Write `data`, keeping what the socket does not take in `backlog`.
/// Errors name the reason the connection must be closed.
#[cfg(test)]
pub(crate) fn send<S: Write>(stream: &mut S, backlog: &mut impl Carried, data: &[u8]) -> Result<(), String> {
    send_capped(stream, backlog, data, MAX_BACKLOG, "slow_reader")
}

/// Write `data`, keeping what the socket does not take in `backlog` up
/// to `cap` bytes: beyond, the connection must be closed, named `reason`.
pub(crate) fn send_capped<S: Write>(stream: &mut S, backlog: &mut impl Carried, data: &[u8], cap: usize, reason: &str) -> Result<(), String> {
    try_send_capped(stream, backlog, data, cap).map_err(|e| e.name(reason))
}

/// [`send_capped`] with a typed error: nothing is allocated to fail.
pub(crate) fn try_send_capped<S: Write>(stream: &mut S, backlog: &mut impl Carried, data: &[u8], cap: usize) -> Result<(), SendError> {
    if data.is_empty() {
        return Ok(());
    }
    if backlog.is_held() {
        try_queue_capped(backlog, data, cap)?;
        return try_flush(stream, backlog);
    }
    let mut written = 0;
    while written < data.len() {
        match stream.write(&data[written..]) {
            Ok(0) => return Err(SendError::WriteZero),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(SendError::Io(e)),
        }
    }
    if written < data.len() {
        // The first spill is bounded like every later one.
        if data.len() - written > cap {
            return Err(SendError::Full);
        }
        backlog.hold(data[written..].to_vec());
    }
    Ok(())
}

/// Add `data` behind what waits in `backlog`, within `cap` bytes (else
/// [`SendError::Full`]: the connection must be closed).
pub(crate) fn try_queue_capped(backlog: &mut impl Carried, data: &[u8], cap: usize) -> Result<(), SendError> {
    if backlog.held_len() + data.len() > cap {
        return Err(SendError::Full);
    }
    match backlog.held_mut() {
        Some(buf) => buf.extend_from_slice(data),
        None if data.is_empty() => {}
        None => backlog.hold(data.to_vec()),
    }
    Ok(())
}

/// Push out as much of `backlog` as the socket takes now.
pub(crate) fn flush<S: Write>(stream: &mut S, backlog: &mut impl Carried) -> Result<(), String> {
    try_flush(stream, backlog).map_err(|e| e.name(""))
}

/// [`flush`] with a typed error.
pub(crate) fn try_flush<S: Write>(stream: &mut S, backlog: &mut impl Carried) -> Result<(), SendError> {
    let Some(buf) = backlog.held() else { return Ok(()) };
    let mut written = 0;
    while written < buf.len() {
        match stream.write(&buf[written..]) {
            Ok(0) => return Err(SendError::WriteZero),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(SendError::Io(e)),
        }
    }
    backlog.consume(written);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::frame::{encode_stamped, Kind};

    /// A reader that hands out its bytes in fixed-size pieces, then
    /// reports WouldBlock, like a non-blocking socket.
    struct Chunks(Vec<u8>, usize);
    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    #[test]
    fn partial_frames_survive_between_reads() {
        let mut bytes = Vec::new();
        for i in 0..5 {
            encode_stamped(&mut bytes, Kind::Heartbeat, i, 64);
        }
        let (first, rest) = bytes.split_at(100);
        let mut partial = None;
        let mut scratch = [0u8; 1000];
        let mut stamps = Vec::new();
        let mut s = Chunks(first.to_vec(), 1000);
        let end = read_frames(&mut s, &mut partial, &mut scratch, false, |f| {
            stamps.push(frame::stamp_of(f.payload).unwrap());
            Ok(())
        });
        assert_eq!(end, ReadEnd::Open);
        assert!(partial.is_some());
        let mut s = Chunks(rest.to_vec(), 7);
        // Full 7-byte reads stop at the read budget; the caller comes back.
        let mut calls = 0;
        while read_frames(&mut s, &mut partial, &mut scratch[..7], false, |f| {
            stamps.push(frame::stamp_of(f.payload).unwrap());
            Ok(())
        }) == ReadEnd::Budget
        {
            calls += 1;
        }
        assert!(calls > 0, "{} bytes in 7-byte reads pass the budget of {READ_BUDGET}", rest.len());
        assert_eq!(stamps, vec![0, 1, 2, 3, 4]);
        assert!(partial.is_none());
    }

    /// Issue 62, finding 8: a read whose bytes made much work (inflated
    /// permessage-deflate) is charged as many reads, so the budget ends
    /// sooner than for plain bytes.
    #[test]
    fn work_charged_by_the_consumer_ends_the_budget_sooner() {
        let run = |charge: usize| {
            let charged = std::cell::Cell::new(0);
            let mut s = Chunks(vec![1u8; 8 * 64], 8);
            let mut reads = 0;
            let end = read_chunks_charged(
                &mut s,
                &mut None::<Box<Vec<u8>>>,
                &mut [0u8; 8],
                false,
                |b: &[u8]| {
                    reads += 1;
                    charged.set(charged.get() + charge);
                    Ok::<usize, String>(b.len())
                },
                |e| e.to_string(),
                &charged,
            );
            (end, reads)
        };
        assert_eq!(run(0), (ReadEnd::Budget, READ_BUDGET));
        assert_eq!(run(7), (ReadEnd::Budget, READ_BUDGET / 8));
    }

    #[test]
    fn fixed_units_reassemble_across_reads() {
        let bytes: Vec<u8> = (0u64..5).flat_map(|i| i.to_be_bytes()).collect();
        let mut s = Chunks(bytes, 3);
        let mut partial = None;
        let mut got = Vec::new();
        let end = read_fixed(&mut s, &mut partial, &mut [0u8; 3], false, 8, |u| {
            got.push(u64::from_be_bytes(u.try_into().unwrap()));
            Ok(())
        });
        assert_eq!(end, ReadEnd::Open);
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert!(partial.is_none());
    }

    /// A socket that takes `n` more bytes, then would block.
    struct Takes(usize);
    impl Write for Takes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.0.min(buf.len());
            self.0 -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_first_spill_is_capped_like_the_rest() {
        let mut backlog = None;
        let big = vec![7u8; MAX_BACKLOG + 2];
        assert_eq!(send(&mut Takes(1), &mut backlog, &big), Err("slow_reader".to_string()));
        assert!(backlog.is_none());
        assert_eq!(send(&mut Takes(2), &mut backlog, &big), Ok(()));
        assert_eq!(backlog.as_ref().map(|b| b.len()), Some(MAX_BACKLOG));
        assert_eq!(send_capped(&mut Takes(0), &mut None, &[1; 100], 99, "slow_consumer"), Err("slow_consumer".to_string()));
    }

    #[test]
    fn small_replies_keep_the_backlog_bound_and_large_ones_fit_whole() {
        // framed (3 + 4,096) and a WebSocket echo at the 64 KiB default
        assert_eq!(reply_cap(0), MAX_BACKLOG);
        assert_eq!(reply_cap(4099), MAX_BACKLOG);
        assert_eq!(reply_cap(64 * 1024 + 10), MAX_BACKLOG);
        assert_eq!(reply_cap(MAX_BACKLOG), MAX_BACKLOG + REPLY_SLACK);
        assert_eq!(reply_cap(16 << 20), (16 << 20) + REPLY_SLACK);
        assert_eq!(reply_cap(usize::MAX), usize::MAX);
    }

    /// Finding 15 of issue 42: a 16 MiB echo to a peer that reads it was
    /// closed `slow_reader` at its first spill. Under [`reply_cap`] it is
    /// kept whole while the peer drains it, with pongs queued behind it;
    /// a second one queued before the peer read the first is a slow
    /// reader.
    #[test]
    fn a_reply_as_large_as_the_protocol_allows_is_kept_while_the_peer_drains_it() {
        const LARGEST: usize = 16 << 20;
        /// What the peer reads between two of our turns.
        const READ: usize = 256 * 1024;
        /// A pong: 2 bytes of header and a 4-byte payload.
        const PONG: [u8; 6] = [0x8a, 4, 1, 2, 3, 4];
        let cap = reply_cap(LARGEST);
        let reply = vec![7u8; LARGEST];
        let mut backlog = None;
        assert_eq!(send(&mut Takes(READ), &mut backlog, &reply), Err("slow_reader".to_string()), "the old bound: closed at the first spill");
        assert_eq!(send_capped(&mut Takes(READ), &mut backlog, &reply, cap, "slow_reader"), Ok(()));
        assert_eq!(backlog.as_ref().map(|b| b.len()), Some(LARGEST - READ));
        let mut turns = 0;
        while backlog.is_some() {
            assert_eq!(send_capped(&mut Takes(READ), &mut backlog, &PONG, cap, "slow_reader"), Ok(()), "turn {turns}");
            turns += 1;
        }
        assert_eq!(turns, LARGEST / READ);
        assert_eq!(send_capped(&mut Takes(0), &mut backlog, &reply, cap, "slow_reader"), Ok(()), "one reply, nothing read yet");
        assert_eq!(send_capped(&mut Takes(0), &mut backlog, &PONG, cap, "slow_reader"), Ok(()));
        assert_eq!(send_capped(&mut Takes(0), &mut backlog, &reply, cap, "slow_reader"), Err("slow_reader".to_string()));
    }

    #[test]
    fn bad_frame_is_an_error_not_a_panic() {
        let mut s = Chunks(vec![0, 0, 1, 2, 3], 100);
        let mut partial = None;
        let end = read_frames(&mut s, &mut partial, &mut [0u8; 64], false, |_| Ok(()));
        assert_eq!(end, ReadEnd::Error("bad_frame_zero_length".into()));
    }
}
