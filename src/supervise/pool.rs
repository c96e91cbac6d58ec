//! Spawning, watching, reaping and stopping worker processes.
//!
//! The supervisor re-executes its own binary (`megaconn __worker ROLE`)
//! once per worker and writes the worker's config as the first line of its
//! stdin (argv is capped near 128 KiB and visible in `ps`; a pipe is
//! neither). Each worker:
//! - gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the supervisor even if
//!   the supervisor is killed with SIGKILL;
//! - runs in its own process group, so a terminal Ctrl-C reaches only the
//!   supervisor, which then closes the workers gracefully and still prints
//!   its summary;
//! - reports over its stdout pipe, read by one small thread per worker that
//!   forwards parsed messages into a single channel and, when the pipe
//!   closes, reaps the process and delivers its exit status.
//!
//! Commands go down each worker's stdin without ever blocking the
//! supervisor: the pipe is non-blocking (and enlarged to 1 MiB), what it
//! cannot take waits in a per-worker queue of at most [`MAX_QUEUED`]
//! bytes, written out on the next [`Pool::flush`]; beyond that a command
//! is refused ([`Sent::Full`]). A worker that stopped reading (SIGSTOP, a
//! long inline stage) shows as [`Pool::blocked_for`], one that stopped
//! reporting as [`Pool::silent_for`], one stopped by a signal as
//! [`Pool::is_stopped`]: its role decides what that means.
//!
//! Workers are identified by an index that is never reused: a replacement
//! gets a new index, so a late message from a dead worker can never be
//! mistaken for its successor's. Killing is by PID under the same lock the
//! reaper takes, so a signal can never reach a recycled PID. Dropping a
//! [`Pool`] kills and reaps every worker still alive.

use super::Sink;
use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Most command bytes waiting for one worker's pipe; more are refused.
pub(crate) const MAX_QUEUED: usize = 8 << 20;
/// Most bytes waiting for one worker's pipe when the command is control
/// traffic ([`Pool::send_control`]).
pub(crate) const MAX_CONTROL_QUEUED: usize = 64 << 20;
/// What a worker's stdin pipe is enlarged to (Linux's default cap for
/// an unprivileged pipe is 1 MiB; 64 KiB without asking).
const PIPE_BYTES: i32 = 1 << 20;

/// What became of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// In the pipe, or queued behind what the pipe could not take yet.
    Queued,
    /// The worker's queue is full: refused.
    Full,
    /// The worker is gone (its pipe closed).
    Gone,
}

/// Milliseconds since the first call: a clock reader threads can store
/// in an atomic.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// How a worker process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitInfo {
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    fn from_status(pid: u32, st: ExitStatus) -> ExitInfo {
        ExitInfo { pid, code: st.code(), signal: st.signal() }
    }
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "pid {} exited with status {c}", self.pid),
            (_, Some(s)) => {
                let hint = if s == libc::SIGKILL { ", e.g. kill -9 or the OOM killer (see dmesg)" } else { "" };
                write!(f, "pid {} killed by signal {s} ({}{hint})", self.pid, crate::sys::signal_name(s))
            }
            _ => write!(f, "pid {} ended", self.pid),
        }
    }
}

/// Something that happened to one worker of a pool whose workers speak
/// messages of type `M` (the role's own enum).
#[derive(Debug)]
pub(crate) enum PoolEvent<M> {
    Msg(M),
    /// The worker's stdout closed and the process was reaped.
    Exited(ExitInfo),
    /// The worker wrote a line that is not a message (a bug, reported).
    Garbled(String),
}

/// What a reader thread hands on: a line or the exit, tagged with the
/// worker's index. The role's parser (typed when the pool was made) runs
/// on the reader thread, so the supervisor loop only gets parsed messages.
enum Raw {
    Line(String),
    Exited(ExitInfo),
}

type Forward = Arc<dyn Fn(usize, Raw) -> bool + Send + Sync>;

struct Handle {
    pid: u32,
    child: Arc<Mutex<Child>>,
    stdin: Option<ChildStdin>,
    /// Command bytes; those from `head` on the pipe has not taken yet.
    queue: Vec<u8>,
    /// How much of `queue` was written: a write moves this, not the bytes
    /// behind it (a drain per write moved megabytes per 64 KB taken when
    /// a worker fell behind).
    head: usize,
    /// Since when the pipe has been full with bytes still queued.
    blocked_since: Option<Instant>,
    /// When the worker last wrote a line ([`now_ms`]).
    heard: Arc<AtomicU64>,
    /// Set when the Exited event was taken by the supervisor.
    exited: bool,
}

impl Handle {
    /// Write what the pipe takes; false when the pipe is gone.
    fn flush(&mut self) -> bool {
        let Some(s) = self.stdin.as_mut() else { return false };
        while self.head < self.queue.len() {
            match s.write(&self.queue[self.head..]) {
                Ok(n) => self.head += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.blocked_since.get_or_insert_with(Instant::now);
                    // What was written goes once it is over half the
                    // queue: each byte is moved at most once on average.
                    if self.head > self.queue.len() / 2 {
                        self.queue.drain(..self.head);
                        self.head = 0;
                    }
                    return true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.stdin = None;
                    self.queue = Vec::new();
                    self.head = 0;
                    self.blocked_since = None;
                    return false;
                }
            }
        }
        self.queue.clear();
        self.head = 0;
        self.blocked_since = None;
        if self.queue.capacity() > 64 * 1024 {
            self.queue = Vec::new();
        }
        true
    }

    /// Bytes queued and not yet written.
    fn queued(&self) -> usize {
        self.queue.len() - self.head
    }
}

/// The worker processes of one role.
pub(crate) struct Pool {
    /// The worker subcommand's argument (`megaconn __worker KIND`).
    kind: &'static str,
    exe: std::path::PathBuf,
    /// Caps the workers' RLIMIT_NOFILE (rehearsing the fd wall small).
    fd_limit: Option<u64>,
    /// Scheduling niceness of the workers (0: as the supervisor).
    nice: i32,
    /// Network namespace the workers enter (an fd this process keeps).
    netns: Option<i32>,
    /// Descriptors the workers inherit (the server's listeners).
    inherit: Vec<i32>,
    forward: Forward,
    workers: Vec<Option<Handle>>,
}

impl Pool {
    /// A pool of `megaconn __worker KIND` processes whose stdout lines
    /// are messages `M`, handed to `sink` with the worker's index.
    pub(crate) fn new<M: DeserializeOwned + Send + 'static>(kind: &'static str, fd_limit: Option<u64>, sink: Sink<(usize, PoolEvent<M>)>) -> Result<Pool> {
        let exe = std::env::current_exe().context("cannot locate the megaconn binary to start workers")?;
        let forward: Forward = Arc::new(move |i, raw| {
            let ev = match raw {
                Raw::Line(line) => match serde_json::from_str::<M>(&line) {
                    Ok(m) => PoolEvent::Msg(m),
                    Err(_) => PoolEvent::Garbled(line),
                },
                Raw::Exited(info) => PoolEvent::Exited(info),
            };
            sink((i, ev))
        });
        Ok(Pool { kind, exe, fd_limit, nice: 0, netns: None, inherit: Vec::new(), forward, workers: Vec::new() })
    }

    /// Start later workers at this niceness (a load generator sharing the
    /// machine with the server it measures yields CPU to it).
    pub(crate) fn set_nice(&mut self, nice: i32) {
        self.nice = nice;
    }

    /// Start later workers in this network namespace (`bench --topology
    /// veth` puts the client on its own host).
    pub(crate) fn set_netns(&mut self, fd: Option<i32>) {
        self.netns = fd;
    }

    /// Let later workers inherit these descriptors (close-on-exec is
    /// cleared in the child only: other pools never see them).
    pub(crate) fn set_inherit(&mut self, fds: Vec<i32>) {
        self.inherit = fds;
    }

    /// Index the next spawned worker will get.
    pub(crate) fn next_index(&self) -> usize {
        self.workers.len()
    }

    /// Start one worker with this config (one JSON document); returns its
    /// index.
    pub(crate) fn spawn(&mut self, config: &str) -> Result<usize> {
        self.spawn_with(config, &[])
    }

    /// [`Pool::spawn`], the worker inheriting `own` too (descriptors made
    /// for it alone, on top of those every worker inherits).
    pub(crate) fn spawn_with(&mut self, config: &str, own: &[i32]) -> Result<usize> {
        let i = self.workers.len();
        let role = self.kind;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("__worker").arg(role).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0);
        let (fd_limit, nice, netns) = (self.fd_limit, self.nice, self.netns);
        let inherit: Vec<i32> = self.inherit.iter().chain(own).copied().collect();
        // SAFETY: only async-signal-safe calls (prctl, setrlimit,
        // setpriority, setns) run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                crate::sys::die_with_parent()?;
                if let Some(n) = fd_limit {
                    crate::sys::set_fd_limit(n, n)?;
                }
                if nice != 0 && libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = netns {
                    crate::topology::setns_in_child(fd)?;
                }
                for fd in &inherit {
                    if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().with_context(|| {
            format!("cannot start {role} worker {i} (fork/exec failed: check the process limits with `megaconn tune`: ulimit -u, pids.max, kernel.pid_max)")
        })?;
        let pid = child.id();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let config_sent = writeln!(stdin, "{config}").and_then(|_| stdin.flush());
        // Commands from now on never block the supervisor.
        // SAFETY: fcntl on the pipe descriptor we own.
        unsafe {
            let fd = stdin.as_raw_fd();
            libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES);
            libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
        }
        let child = Arc::new(Mutex::new(child));
        let heard = Arc::new(AtomicU64::new(now_ms()));
        self.workers.push(Some(Handle {
            pid,
            child: child.clone(),
            stdin: Some(stdin),
            queue: Vec::new(),
            head: 0,
            blocked_since: None,
            heard: heard.clone(),
            exited: false,
        }));
        if let Err(e) = config_sent {
            // The reader thread below still reaps it and reports the exit.
            eprintln!("megaconn: {role} worker {i} (pid {pid}) did not take its config: {e}");
        }
        let forward = self.forward.clone();
        std::thread::Builder::new()
            .name(format!("{role}-reader-{i}"))
            .stack_size(64 * 1024)
            .spawn(move || watch(i, pid, stdout, child, heard, forward))
            .context("cannot start a reader thread")?;
        Ok(i)
    }

    /// PIDs of the workers still running.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.workers.iter().flatten().filter(|h| !h.exited).map(|h| h.pid).collect()
    }

    /// Workers started and not yet reported exited.
    pub(crate) fn alive(&self) -> usize {
        self.workers.iter().flatten().filter(|h| !h.exited).count()
    }

    /// Record that worker `i`'s exit was delivered.
    pub(crate) fn mark_exited(&mut self, i: usize) {
        if let Some(Some(h)) = self.workers.get_mut(i) {
            h.exited = true;
            h.stdin = None;
            h.queue = Vec::new();
            h.head = 0;
        }
    }

    /// Send one command line to worker `i`, without blocking.
    pub(crate) fn send(&mut self, i: usize, cmd: &str) -> Sent {
        self.send_on(i, cmd, MAX_QUEUED)
    }

    /// Send a command that must never be dropped (a session answer, a
    /// takeover): past [`MAX_QUEUED`] it still waits, up to
    /// [`MAX_CONTROL_QUEUED`] (bounded by the client ids that can wait
    /// on one worker), and a worker that leaves that much unread is
    /// replaced by its role's watchdog, which answers for it.
    pub(crate) fn send_control(&mut self, i: usize, cmd: &str) -> Sent {
        self.send_on(i, cmd, MAX_CONTROL_QUEUED)
    }

    fn send_on(&mut self, i: usize, cmd: &str, max: usize) -> Sent {
        let Some(Some(h)) = self.workers.get_mut(i) else { return Sent::Gone };
        if h.stdin.is_none() {
            return Sent::Gone;
        }
        if h.queued() + cmd.len() + 1 > max {
            return Sent::Full;
        }
        h.queue.extend_from_slice(cmd.as_bytes());
        h.queue.push(b'\n');
        match h.flush() {
            true => Sent::Queued,
            false => Sent::Gone,
        }
    }

    /// Write out what waits for the workers' pipes (every supervisor tick).
    pub(crate) fn flush(&mut self) {
        for h in self.workers.iter_mut().flatten().filter(|h| h.queued() > 0) {
            h.flush();
        }
    }

    /// How long worker `i` has left commands unread with its pipe full.
    pub(crate) fn blocked_for(&self, i: usize) -> Duration {
        self.handle(i).and_then(|h| h.blocked_since).map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// How long since worker `i` last wrote a message.
    pub(crate) fn silent_for(&self, i: usize) -> Duration {
        self.handle(i).map_or(Duration::ZERO, |h| Duration::from_millis(now_ms().saturating_sub(h.heard.load(Ordering::Relaxed))))
    }

    /// Whether worker `i` is stopped by a signal (SIGSTOP, SIGTSTP) or a
    /// tracer: state T or t in /proc/PID/stat.
    pub(crate) fn is_stopped(&self, i: usize) -> bool {
        let Some(h) = self.handle(i) else { return false };
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", h.pid)).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).is_some_and(|c| c == 'T' || c == 't')
    }

    fn handle(&self, i: usize) -> Option<&Handle> {
        self.workers.get(i).and_then(|h| h.as_ref()).filter(|h| !h.exited)
    }

    /// Send one command line to every worker still listening.
    pub(crate) fn broadcast(&mut self, cmd: &str) {
        for i in 0..self.workers.len() {
            let _ = self.send(i, cmd);
        }
    }

    /// Ask every worker to stop, wait up to `grace`, then SIGKILL the rest
    /// (by PID) and reap them all.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.broadcast(super::control::CMD_STOP);
        let deadline = Instant::now() + grace;
        for h in self.workers.iter_mut().flatten() {
            h.stdin = None;
            loop {
                let mut c = h.child.lock().expect("child lock");
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => {
                        drop(c);
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }
}

/// The reader thread of one worker: forward its messages, then reap it.
fn watch(i: usize, pid: u32, stdout: std::process::ChildStdout, child: Arc<Mutex<Child>>, heard: Arc<AtomicU64>, forward: Forward) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        heard.store(now_ms(), Ordering::Relaxed);
        if !forward(i, Raw::Line(line)) {
            return;
        }
    }
    // stdout closed: the worker is exiting. Reap it without holding the
    // lock across a blocking wait, so stop() can still signal it.
    let status = loop {
        let mut c = child.lock().expect("child lock");
        match c.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(_) => break None,
        }
        drop(c);
        std::thread::sleep(Duration::from_millis(5));
    };
    let info = status.map(|st| ExitInfo::from_status(pid, st)).unwrap_or(ExitInfo { pid, code: None, signal: None });
    forward(i, Raw::Exited(info));
}

impl Drop for Pool {
    fn drop(&mut self) {
        for h in self.workers.iter_mut().flatten() {
            h.stdin = None;
            let mut c = h.child.lock().expect("child lock");
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}
