//! Messages between workers and their supervisor.
//!
//! Workers write one JSON object per line to their stdout (a pipe the
//! supervisor reads) and never print anything else there; the supervisor
//! writes one command per line to the worker's stdin. Counters in a
//! snapshot are cumulative totals, so the supervisor only keeps the latest
//! snapshot per worker; histograms are per-interval deltas to be merged.

use serde::Serialize;
use std::io::Write;

/// Supervisor -> worker commands every worker understands, one per line
/// on the worker's stdin. A role adds its own words (see [`Command::Role`]).
pub(crate) const CMD_CLOSE: &str = "close";
pub(crate) const CMD_STOP: &str = "stop";
/// Elastic server worker: leave the accept group (a sibling has room).
pub(crate) const CMD_LEAVE: &str = "leave";

/// Read the worker's config: the first line of its stdin, written by the
/// supervisor before anything else. Read byte by byte so nothing after
/// the line (commands) is consumed here.
pub(crate) fn read_config() -> std::io::Result<String> {
    let mut line = Vec::with_capacity(4096);
    let mut b = [0u8; 1];
    loop {
        // SAFETY: read into a one-byte stack buffer we own.
        let n = unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
        match n {
            1 if b[0] == b'\n' => break,
            1 => line.push(b[0]),
            0 => break,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Send one message to the supervisor now (after what [`emit_batched`]
/// holds, so the order is kept). A broken pipe means the supervisor is
/// gone; the worker then has no reason to live.
pub(crate) fn emit(msg: &impl Serialize) {
    BATCH.with_borrow_mut(|b| {
        append(b, msg);
        write_out(b);
    });
}

/// Batched messages are written once they pass this many bytes, if no
/// flush came first.
const BATCH_BYTES: usize = 64 << 10;

thread_local! {
    /// Messages [`emit_batched`] holds until the next [`flush`] or [`emit`].
    static BATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Queue a message for the supervisor: written with the next [`emit`],
/// at the reactor's [`flush`] before it waits, or once [`BATCH_BYTES`]
/// are held. For the acknowledgements a busy worker sends by the
/// thousand: a write (and the supervisor's wake-up) each was a syscall
/// per push per worker (issue 44's QoS 1 bench, 100,000 a second).
pub(crate) fn emit_batched(msg: &impl Serialize) {
    BATCH.with_borrow_mut(|b| {
        append(b, msg);
        if b.len() >= BATCH_BYTES {
            write_out(b);
        }
    });
}

/// Write what [`emit_batched`] holds. Every reactor calls it before it
/// waits, so nothing batched waits for more than one loop turn.
pub(crate) fn flush() {
    BATCH.with_borrow_mut(|b| {
        if !b.is_empty() {
            write_out(b);
        }
    });
}

/// One message as its line.
fn append(b: &mut Vec<u8>, msg: &impl Serialize) {
    serde_json::to_writer(&mut *b, msg).expect("worker messages serialize");
    b.push(b'\n');
}

fn write_out(b: &mut Vec<u8>) {
    let mut out = std::io::stdout().lock();
    if out.write_all(b).and_then(|_| out.flush()).is_err() {
        std::process::exit(3);
    }
    b.clear();
    if b.capacity() > 4 * BATCH_BYTES {
        b.shrink_to(BATCH_BYTES);
    }
}

/// Tell the supervisor the worker cannot start or go on (`worker`
/// `usize::MAX`: before it knew its index). Every role's message enum has
/// this `fatal` event.
pub(crate) fn emit_fatal(message: &str) {
    emit(&serde_json::json!({"event": "fatal", "worker": usize::MAX, "message": message}));
}

/// What a worker hears from its supervisor.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Finish gracefully: drain, close connections, send the last snapshot.
    Close,
    /// Stop now (also sent when stdin reaches EOF: the supervisor is gone).
    Stop,
    /// Leave the accept group (server workers at their budget).
    Leave,
    /// A role's own command: its word and the rest of the line.
    Role(String, String),
}

/// Non-blocking reader of the worker's stdin, registered with the
/// worker's reactor so commands arrive as readiness events.
pub(crate) struct CommandReader {
    buf: Vec<u8>,
}

impl CommandReader {
    pub(crate) fn register(registry: &mio::Registry, token: mio::Token) -> std::io::Result<CommandReader> {
        // SAFETY: fcntl on our own stdin descriptor.
        unsafe {
            let flags = libc::fcntl(0, libc::F_GETFL);
            libc::fcntl(0, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        registry.register(&mut mio::unix::SourceFd(&0), token, mio::Interest::READABLE)?;
        Ok(CommandReader { buf: Vec::new() })
    }

    /// Read what is there; return the commands received.
    pub(crate) fn poll(&mut self) -> Vec<Command> {
        let mut cmds = Vec::new();
        // Small: every worker touches it, and a large push line is rare.
        let mut chunk = [0u8; 4096];
        loop {
            // SAFETY: read into a stack buffer we own.
            let n = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n == 0 {
                cmds.push(Command::Stop);
                break;
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    cmds.push(Command::Stop);
                }
                break;
            }
            self.buf.extend_from_slice(&chunk[..n as usize]);
        }
        cmds.extend(take_lines(&mut self.buf));
        cmds
    }
}

/// The commands in `buf`'s whole lines, taken off its front (a partial
/// last line stays for the next read).
fn take_lines(buf: &mut Vec<u8>) -> Vec<Command> {
    let mut cmds = Vec::new();
    // Every whole line, then what they took off the front at once: a
    // drain per line moved the rest of the buffer each time, and a
    // busy supervisor (a publish per line, 50,000 a second) leaves
    // hundreds of KB here, so its worker spent ~40% of its CPU moving
    // them (found with perf in bench/mqtt_vs_mosquitto.sh qos1).
    let mut start = 0;
    while let Some(pos) = buf[start..].iter().position(|b| *b == b'\n') {
        let line = std::str::from_utf8(&buf[start..start + pos]).unwrap_or("").trim();
        start += pos + 1;
        let (word, arg) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            CMD_CLOSE => cmds.push(Command::Close),
            CMD_STOP => cmds.push(Command::Stop),
            CMD_LEAVE => cmds.push(Command::Leave),
            "" => {}
            _ => cmds.push(Command::Role(word.to_string(), arg.to_string())),
        }
    }
    buf.drain(..start);
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_become_commands_and_a_partial_one_waits() {
        let mut buf = b"close\npublish {\"a\":1}\n\nstop\nleav".to_vec();
        let cmds = take_lines(&mut buf);
        assert!(matches!(&cmds[..], [Command::Close, Command::Role(w, a), Command::Stop] if w == "publish" && a == "{\"a\":1}"), "{cmds:?}");
        assert_eq!(buf, b"leav");
        buf.extend_from_slice(b"e\n");
        assert!(matches!(&take_lines(&mut buf)[..], [Command::Leave]));
        assert!(buf.is_empty());
    }

    /// 200,000 lines in one buffer (a busy supervisor's): taken in one
    /// pass (a drain per line moved the rest each time: 200,000 x 4 MB).
    #[test]
    fn a_full_buffer_is_taken_in_one_pass() {
        let mut buf: Vec<u8> = (0..200_000).flat_map(|i| format!("publish {i:012}\n").into_bytes()).collect();
        let cmds = take_lines(&mut buf);
        assert_eq!(cmds.len(), 200_000);
        assert!(matches!(&cmds[199_999], Command::Role(w, a) if w == "publish" && a == "000000199999"));
        assert!(buf.is_empty());
    }
}
