//! A file the supervisor keeps some of its state in across restarts
//! (`--mqtt-retained-file`, `--mqtt-sessions-file`), **by segments**: the
//! state is split into [`SEGMENTS`] parts by a hash of each item's key
//! (a client id, a topic; [`segment_of`]), each part a file of its own in
//! `PATH.d/` (`00` to `63`), and PATH names them (one line, [`Manifest`]).
//! The owner marks the segment of every item it changes ([`Dirty`]), so
//! an interval in which one session or one topic changed copies and
//! writes a 64th of the state, not the whole of it.
//!
//! **What a crash leaves.** A segment is written to `NN.tmp` (mode 0600:
//! it holds the clients' payloads), synced, renamed over `NN`; after the
//! segments of one write the directory is synced. So each segment is its
//! last whole copy, never half of one, and a crash loses at most what
//! changed since its last write. An item lives in one segment only (its
//! key's), so segments written at different times never hold it twice.
//!
//! **Off the supervisor's thread.** The changed segments are copied on the
//! supervisor's thread, then written, synced and renamed by a thread of
//! their own: a slow disk delays the next copy, never an admin answer, a
//! session claim or a shard. While one write is under way the next
//! interval's is not due (its changes stay marked for the one after);
//! the last write at stop is waited for (`force`). A write that failed
//! makes the next one whole.
//!
//! **At start** the whole state is written once: a path that cannot be
//! written refuses the start instead of failing at every save, and a file
//! in the format before segments (one file, the whole state) is read and
//! replaced by the segments, the manifest last.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default `--mqtt-retained-save-every` and `--mqtt-sessions-save-every`.
pub(crate) const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// Parts a state is written in.
pub(crate) const SEGMENTS: usize = 64;

/// The segment an item of `key` (a client id, a topic) is written in:
/// FNV-1a of its bytes, the same on every start.
pub(crate) fn segment_of(key: &str) -> usize {
    super::shard::shard_of(key, SEGMENTS)
}

/// The segments changed since the last write.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dirty(u64);

const _: () = assert!(SEGMENTS == 64, "Dirty holds one bit per segment");

impl Dirty {
    /// Every segment (a whole write).
    pub(crate) const ALL: Dirty = Dirty(u64::MAX);

    /// The item of `key` changed.
    pub(crate) fn mark(&mut self, key: &str) {
        self.0 |= 1 << segment_of(key);
    }

    /// The marks so far, cleared here.
    pub(crate) fn take(&mut self) -> Dirty {
        std::mem::take(self)
    }

    pub(crate) fn has(self, segment: usize) -> bool {
        self.0 & (1 << segment) != 0
    }

    pub(crate) fn union(self, other: Dirty) -> Dirty {
        Dirty(self.0 | other.0)
    }

    #[cfg(test)]
    pub(crate) fn count(self) -> u32 {
        self.0.count_ones()
    }
}

/// PATH's one line: the segments' count (their directory is `PATH.d`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    megaconn_segments: usize,
}

/// Where the state goes, and which of its generations is there.
#[derive(Debug)]
pub(crate) struct StateFile {
    pub(crate) path: PathBuf,
    every: Duration,
    /// The state's generation last written (`u64::MAX`: none yet).
    saved: u64,
    last: Instant,
    /// The next write is of every segment (the first, or one after a
    /// write failed).
    whole: bool,
    /// The write under way: its generation, its segments' count and its thread.
    writing: Option<(u64, usize, std::thread::JoinHandle<std::io::Result<()>>)>,
    /// Writes completed (synced and renamed).
    pub(crate) written: u64,
    /// Segments written (synced and renamed), all writes together.
    pub(crate) segments_written: u64,
}

/// What a file held: each part's name (for errors) and bytes.
pub(crate) type Read = Vec<(String, Vec<u8>)>;

impl StateFile {
    pub(crate) fn new(path: &Path, every: Duration) -> StateFile {
        StateFile { path: path.to_path_buf(), every, saved: u64::MAX, last: Instant::now(), whole: true, writing: None, written: 0, segments_written: 0 }
    }

    /// The segments' directory.
    fn dir(&self) -> PathBuf {
        let mut d = self.path.clone().into_os_string();
        d.push(".d");
        PathBuf::from(d)
    }

    /// What the file holds, part by part: its segments, or (a file of
    /// the format before segments) its one part; nothing on a first
    /// start. Err names the flag, the problem and the fix.
    pub(crate) fn read(&self, flag: &str) -> Result<Read, String> {
        let cannot = |p: &Path, e: std::io::Error| format!("{flag} {}: cannot read it ({e}); give a file this user can read and write", p.display());
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(cannot(&self.path, e)),
        };
        let first = text.split(|b| *b == b'\n').next().unwrap_or_default();
        let Ok(m) = serde_json::from_slice::<Manifest>(first) else {
            return Ok(vec![(self.path.display().to_string(), text)]);
        };
        let dir = self.dir();
        (0..m.megaconn_segments)
            .map(|i| {
                let p = dir.join(format!("{i:02}"));
                match std::fs::read(&p) {
                    Ok(t) => Ok((p.display().to_string(), t)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((p.display().to_string(), Vec::new())),
                    Err(e) => Err(cannot(&p, e)),
                }
            })
            .collect()
    }

    /// Whether the state, now at `generation`, is to be written: it
    /// changed, and the interval passed with no write under way, or
    /// `force` (the server stops).
    pub(crate) fn due(&self, generation: u64, now: Instant, force: bool) -> bool {
        generation != self.saved && (force || (self.writing.is_none() && now.duration_since(self.last) >= self.every))
    }

    /// The segments a write that is due takes, of those `changed`: all
    /// when it is whole.
    pub(crate) fn wanted(&self, changed: Dirty) -> Dirty {
        if self.whole {
            Dirty::ALL
        } else {
            changed
        }
    }

    /// Write `segments` (each its index and its lines, each line followed
    /// by a newline; every segment when [`wanted`](Self::wanted) said
    /// all) as generation `generation`: on a thread of its own, or here
    /// and now when `force` (the server stops; a write under way is
    /// waited for first). Err: why this write, or the one before it,
    /// failed (the next one is whole).
    pub(crate) fn write(&mut self, segments: Vec<(usize, Vec<Vec<u8>>)>, generation: u64, now: Instant, force: bool) -> std::io::Result<()> {
        self.last = now;
        self.reap(force)?;
        let (path, dir, manifest, n) = (self.path.clone(), self.dir(), std::mem::take(&mut self.whole), segments.len());
        let job = move || write_segments(&path, &dir, &segments, manifest);
        if force {
            let r = job();
            self.done(generation, n, r)
        } else {
            self.writing = Some((generation, n, std::thread::Builder::new().name("state-file".into()).spawn(job)?));
            Ok(())
        }
    }

    /// The write under way, if it finished (or, `wait`, once it does):
    /// Err: why it failed.
    pub(crate) fn reap(&mut self, wait: bool) -> std::io::Result<()> {
        match &self.writing {
            Some((.., h)) if wait || h.is_finished() => {}
            _ => return Ok(()),
        }
        let (generation, n, h) = self.writing.take().expect("checked above");
        let r = h.join().unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")));
        self.done(generation, n, r)
    }

    /// Write `generation` of `n` segments ended with `r`.
    fn done(&mut self, generation: u64, n: usize, r: std::io::Result<()>) -> std::io::Result<()> {
        match r {
            Ok(()) => (self.saved, self.written, self.segments_written) = (generation, self.written + 1, self.segments_written + n as u64),
            Err(_) => self.whole = true,
        }
        r
    }
}

/// Each of `segments` into `dir/NN` by way of `NN.tmp`, synced, renamed,
/// the directory synced; then, `manifest`, PATH naming them the same way.
fn write_segments(path: &Path, dir: &Path, segments: &[(usize, Vec<Vec<u8>>)], manifest: bool) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // Not its parents: a path in a directory that is not there is a mistake to report.
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    for (i, lines) in segments {
        replace(&dir.join(format!("{i:02}")), lines)?;
    }
    std::fs::File::open(dir)?.sync_all()?;
    if manifest {
        let line = serde_json::to_vec(&Manifest { megaconn_segments: SEGMENTS }).expect("serializes");
        replace(path, std::slice::from_ref(&line))?;
        let parent = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// `lines` into `path` by way of `path.tmp` (mode 0600), synced, renamed.
fn replace(path: &Path, lines: &[Vec<u8>]) -> std::io::Result<()> {
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
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("megaconn-unit-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn lines(of: &[&str]) -> Vec<Vec<u8>> {
        of.iter().map(|l| l.as_bytes().to_vec()).collect()
    }

    /// The first write is whole (every segment, then the manifest); a
    /// later one writes only the segments given and leaves the others as
    /// they were; a file of the format before segments is read as one
    /// part.
    #[test]
    fn the_first_write_is_whole_and_later_ones_only_the_changed_segments() {
        let d = dir("state-segments");
        let path = d.join("s.json");
        let mut f = StateFile::new(&path, Duration::from_secs(3600));
        assert!(f.read("--x").unwrap().is_empty(), "a first start");
        let now = Instant::now();
        assert!(f.due(1, now, true) && !f.due(1, now, false), "changed, but the interval has not passed");
        assert_eq!(f.wanted(Dirty::default()), Dirty::ALL);
        let all: Vec<_> = (0..SEGMENTS).map(|i| (i, if i == 3 { lines(&["a", "b"]) } else { vec![] })).collect();
        f.write(all, 1, now, true).unwrap();
        assert_eq!((f.written, f.segments_written), (1, 64));
        let mut changed = Dirty::default();
        changed.mark("some/topic");
        let seg = segment_of("some/topic");
        assert_eq!((f.wanted(changed), changed.count()), (changed, 1), "whole no more");
        f.write(vec![(seg, lines(&["c"]))], 2, now, true).unwrap();
        assert!(!f.due(2, now, true), "written");
        let read = StateFile::new(&path, DEFAULT_EVERY).read("--x").unwrap();
        assert_eq!(read.len(), SEGMENTS);
        assert_eq!(read[3].1, b"a\nb\n", "left as it was");
        assert_eq!(read[seg].1, b"c\n");
        assert!(read[seg].0.ends_with(&format!("s.json.d/{seg:02}")), "{}", read[seg].0);
        use std::os::unix::fs::PermissionsExt;
        for p in [path.clone(), d.join(format!("s.json.d/{seg:02}"))] {
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "{}: the owner's only", p.display());
        }
        assert!(std::fs::read_dir(d.join("s.json.d")).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));

        std::fs::write(&path, b"{\"id\":\"old format\"}\n").unwrap();
        let read = StateFile::new(&path, DEFAULT_EVERY).read("--x").unwrap();
        assert_eq!(read, vec![(path.display().to_string(), b"{\"id\":\"old format\"}\n".to_vec())]);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A write that fails (the directory gone read-only: a file where
    /// the segments' directory goes) is reported, and the next one is
    /// whole; a write under way makes the next interval's not due.
    #[test]
    fn a_failed_write_makes_the_next_one_whole() {
        let d = dir("state-fail");
        let path = d.join("s.json");
        let mut f = StateFile::new(&path, Duration::ZERO);
        std::fs::write(d.join("s.json.d"), b"not a directory").unwrap();
        let now = Instant::now();
        assert!(f.write(vec![(0, lines(&["x"]))], 1, now, true).is_err());
        assert_eq!(f.wanted(Dirty::default()), Dirty::ALL, "whole after a failure");
        std::fs::remove_file(d.join("s.json.d")).unwrap();
        f.write((0..SEGMENTS).map(|i| (i, vec![])).collect(), 2, now, false).unwrap();
        assert!(!f.due(3, now, false), "one write at a time");
        f.reap(true).unwrap();
        assert!(f.due(3, now, false) && f.written == 1);
        assert_eq!(f.wanted(Dirty::default()), Dirty::default());
        let _ = std::fs::remove_dir_all(&d);
    }
}
