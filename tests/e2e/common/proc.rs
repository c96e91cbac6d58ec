//! Processes a test starts and what they print.
//!
//! A green run is quiet: whatever a peer (a Python or Node script, a
//! server nobody here wrote) or a megaconn process writes to stderr goes
//! to a per-test log file under the cargo target's tmp directory, printed
//! only when the test fails. A peer runs in its own process group, and the
//! whole group (the PGID of the child we started, never a name) is killed
//! when its guard drops, also when the test fails.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The running test's name (libtest names each test's thread after it).
pub fn test_name() -> String {
    std::thread::current().name().unwrap_or("unnamed").replace("::", "-")
}

/// Most of a log printed on failure: its end, where the failure is.
const LOG_SHOWN_BYTES: usize = 64 * 1024;

/// A log file for one process of one test. Kept and printed (its last
/// 64 KB) if the test panics while it is alive, removed otherwise.
pub struct TestLog {
    path: PathBuf,
    what: String,
}

impl TestLog {
    pub fn new(what: &str) -> TestLog {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-logs");
        std::fs::create_dir_all(&dir).expect("create the test log directory");
        let clean: String = what.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).take(40).collect();
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let path = dir.join(format!("{}-{}-{seq}-{clean}.log", test_name(), std::process::id()));
        File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TestLog { path, what: what.to_string() }
    }

    /// A handle that appends to the log: give it to a child as stdout or stderr.
    pub fn stdio(&self) -> Stdio {
        Stdio::from(self.file())
    }

    pub fn file(&self) -> File {
        OpenOptions::new().append(true).open(&self.path).unwrap_or_else(|e| panic!("open {}: {e}", self.path.display()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.path).unwrap_or_default()).into_owned()
    }
}

impl Drop for TestLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = self.text();
            let cut = text.len().saturating_sub(LOG_SHOWN_BYTES);
            let cut = (cut..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
            let skipped = if cut > 0 { format!("[first {cut} bytes not shown]\n") } else { String::new() };
            // eprintln!: libtest shows it with the failure.
            eprintln!("----- {} ({}) -----\n{skipped}{}\n----- end of {} -----", self.what, self.path.display(), &text[cut..], self.what);
        } else {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether a child has exited, without reaping it: while it is a zombie
/// its PID (and so its process group's ID) cannot be reused, so killing
/// the group afterwards still only reaches what we started.
pub fn exited(child: &Child) -> bool {
    // SAFETY: waitid on our own child with WNOWAIT fills a zeroed siginfo_t.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(libc::P_PID, child.id(), &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        r == 0 && info.si_pid() != 0
    }
}

/// SIGKILL the process group whose leader is `child` (started with
/// `process_group(0)`), then reap the leader.
pub fn kill_group(child: &mut Child) -> ExitStatus {
    // SAFETY: signalling the process group of a child we started and
    // have not reaped yet (its PGID is its PID).
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    child.wait().expect("reap our child")
}

/// A peer: a process the test talks to (a Python or Node script, nats,
/// a browser...). It runs in its own process group with its stderr in a
/// [`TestLog`]; its stdout lines are read by [`Peer::line`] and copied to
/// the log. Dropping it kills the whole group.
pub struct Peer {
    pub child: Child,
    pub log: TestLog,
    lines: Option<Receiver<String>>,
    what: String,
    /// Set once the leader is reaped: its PGID may be reused after that.
    reaped: bool,
}

impl Peer {
    /// Start `cmd` (its stdout is read line by line).
    pub fn spawn(what: &str, mut cmd: Command) -> Peer {
        let log = TestLog::new(what);
        cmd.process_group(0).stdout(Stdio::piped()).stderr(log.stdio());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {what} ({:?}): {e}", cmd.get_program()));
        let out = child.stdout.take().unwrap();
        let mut copy = log.file();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(copy, "[stdout] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer { child, log, lines: Some(rx), what: what.to_string(), reaped: false }
    }

    /// The peer's stdin (the command must have been given `Stdio::piped()`).
    pub fn stdin(&mut self) -> ChildStdin {
        self.child.stdin.take().unwrap_or_else(|| panic!("{}: stdin was not piped", self.what))
    }

    /// The next line the peer prints; panics (naming `what`) after `timeout`
    /// or if the peer closes its stdout first.
    pub fn line(&mut self, timeout: Duration, what: &str) -> String {
        let got = self.lines.as_ref().expect("stdout lines").recv_timeout(timeout);
        match got {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => panic!("{}: no line ({what}) within {timeout:?}", self.what),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.wait_exit(Duration::from_secs(5));
                panic!("{}: ended before printing a line ({what}); exit {status:?}", self.what)
            }
        }
    }

    /// Wait (at most `timeout`) until the peer exits; returns its status
    /// and every stdout line it printed that [`Peer::line`] did not take.
    /// Leftovers of its process group are killed.
    pub fn finish(&mut self, timeout: Duration) -> (ExitStatus, Vec<String>) {
        let status = self.wait_exit(timeout).unwrap_or_else(|| panic!("{} did not exit within {timeout:?}", self.what));
        let rest = self.lines.take().map(|rx| rx.iter().collect()).unwrap_or_default();
        (status, rest)
    }

    /// [`Peer::finish`] and assert the peer exited 0; returns its remaining lines.
    pub fn finish_ok(&mut self, timeout: Duration) -> Vec<String> {
        let (status, rest) = self.finish(timeout);
        assert!(status.success(), "{} failed ({status}): its log follows; lines: {rest:?}", self.what);
        rest
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while !exited(&self.child) {
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.reaped = true;
        Some(kill_group(&mut self.child))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if !self.reaped {
            kill_group(&mut self.child);
        }
    }
}

/// Read all of a child's pipe into a string (for small outputs).
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}

/// Why network namespaces (with veth links) cannot be made here, if not.
fn netns_unavailable() -> &'static Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("not root (creating network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN)".into());
        }
        let name = format!("mctest-probe-{}", std::process::id());
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip").args(args).output().map_err(|e| format!("no ip command (iproute2): {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
            }
        };
        let made = ip(&["netns", "add", &name]);
        let veth = made.clone().and_then(|_| ip(&["-n", &name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"]));
        if made.is_ok() {
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
        }
        veth.err()
    })
}

/// For a test that needs network namespaces: true if it can go on. Where
/// namespaces cannot be made it fails with the reason, unless
/// MEGACONN_SKIP_NETNS=1 is set: then it prints `SKIPPED: <test>: <reason>`
/// on the real stderr (scripts/test.sh counts those lines) and returns
/// false, and the test returns.
#[must_use]
pub fn needs_netns() -> bool {
    let Some(why) = netns_unavailable() else { return true };
    let test = test_name();
    if std::env::var("MEGACONN_SKIP_NETNS").as_deref() == Ok("1") {
        // Not eprintln!: libtest would swallow it for a passing test.
        let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
        return false;
    }
    panic!("{test} needs network namespaces, which cannot be made here: {why}. Run as root, or set MEGACONN_SKIP_NETNS=1 to skip such tests (scripts/test.sh reports how many were skipped).");
}
