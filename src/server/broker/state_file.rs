//! A file the supervisor keeps some of its state in across restarts
//! (`--mqtt-retained-file`, `--mqtt-sessions-file`): written whenever
//! the state changed, at most every interval and once more at stop, to
//! `PATH.tmp` (mode 0600: it holds the clients' payloads), synced, then
//! renamed over PATH and the directory synced, so a crash leaves the last
//! whole copy, never half of one. A crash loses at most what changed
//! since the last write.

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
}

impl StateFile {
    pub(crate) fn new(path: &Path, every: Duration) -> StateFile {
        StateFile { path: path.to_path_buf(), every, saved: u64::MAX, last: Instant::now() }
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
    /// `generation`. Err: why not (tried again at the next interval).
    pub(crate) fn write(&mut self, lines: &[Vec<u8>], generation: u64, now: Instant) -> std::io::Result<()> {
        self.last = now;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        for l in lines {
            f.write_all(l)?;
            f.write_all(b"\n")?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()?;
        self.saved = generation;
        Ok(())
    }
}
