//! A file the supervisor keeps some of its state in across restarts
//! (`--mqtt-retained-file`, `--mqtt-sessions-file`): written whenever
//! the state changed, at most every interval and once more at stop, to
//! `PATH.tmp` (mode 0600: it holds the clients' payloads), synced, then
//! renamed over PATH and the directory synced, so a crash leaves the last
//! whole copy, never half of one. A crash loses at most what changed
//! since the last write.
//!
//! **Off the supervisor's thread.** The state is copied on the
//! supervisor's thread (a snapshot of its lines), then written, synced
//! and renamed by a thread of its own: a slow disk delays the next copy,
//! never an admin answer, a session claim or a shard. While one write is
//! under way the next interval's is skipped (tried again at the one
//! after); the last write at stop is waited for (`force`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default `--mqtt-retained-save-every` and `--mqtt-sessions-save-every`.
pub(crate) const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// Where the state goes, and which of its generations is there.
#[derive(Debug)]
pub(crate) struct StateFile {
    pub(crate) path: PathBuf,
    every: Duration,
    /// The state's generation last written (`u64::MAX`: none yet).
    saved: u64,
    last: Instant,
    /// The write under way: its generation and its thread.
    writing: Option<(u64, std::thread::JoinHandle<std::io::Result<()>>)>,
    /// Writes completed (synced and renamed).
    pub(crate) written: u64,
}

impl StateFile {
    pub(crate) fn new(path: &Path, every: Duration) -> StateFile {
        StateFile { path: path.to_path_buf(), every, saved: u64::MAX, last: Instant::now(), writing: None, written: 0 }
    }

    /// The file's bytes; empty when there is none yet (a first start).
    /// Err names the flag, the problem and the fix.
    pub(crate) fn read(&self, flag: &str) -> Result<Vec<u8>, String> {
        match std::fs::read(&self.path) {
            Ok(t) => Ok(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("{flag} {}: cannot read it ({e}); give a file this user can read and write", self.path.display())),
        }
    }

    /// Whether the state, now at `generation`, is to be written: it
    /// changed, and the interval passed or `force` (the server stops).
    pub(crate) fn due(&self, generation: u64, now: Instant, force: bool) -> bool {
        generation != self.saved && (force || now.duration_since(self.last) >= self.every)
    }

    /// Write `lines` (each followed by a newline) as generation
    /// `generation`: on a thread of its own, or here and now when `force`
    /// (the server stops; a write under way is waited for first). Err:
    /// why this write, or the one before it, failed (tried again at the
    /// next interval).
    pub(crate) fn write(&mut self, lines: Vec<Vec<u8>>, generation: u64, now: Instant, force: bool) -> std::io::Result<()> {
        self.last = now;
        self.reap(force)?;
        if force {
            write_file(&self.path, &lines)?;
            (self.saved, self.written) = (generation, self.written + 1);
            return Ok(());
        }
        if self.writing.is_some() {
            // The last one is still being written: this one waits for the next interval.
            return Ok(());
        }
        let path = self.path.clone();
        self.writing = Some((generation, std::thread::Builder::new().name("state-file".into()).spawn(move || write_file(&path, &lines))?));
        Ok(())
    }

    /// The write under way, if it finished (or, `wait`, once it does):
    /// Err: why it failed.
    pub(crate) fn reap(&mut self, wait: bool) -> std::io::Result<()> {
        match &self.writing {
            Some((_, h)) if wait || h.is_finished() => {}
            _ => return Ok(()),
        }
        let (generation, h) = self.writing.take().expect("checked above");
        h.join().unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")))?;
        (self.saved, self.written) = (generation, self.written + 1);
        Ok(())
    }
}

/// `lines` into `path` by way of `path.tmp`, synced, renamed, the
/// directory synced.
fn write_file(path: &Path, lines: &[Vec<u8>]) -> std::io::Result<()> {
    let mut tmp = path.to_path_buf().into_os_string();
    tmp.push(".tmp");
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    let mut w = std::io::BufWriter::new(f);
    for l in lines {
        w.write_all(l)?;
        w.write_all(b"\n")?;
    }
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}
