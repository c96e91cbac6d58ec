//! `--mqtt-retained-file PATH`: the retained set survives a restart. It
//! is read at start, and written whenever it changed, at most every
//! `--mqtt-retained-save-every` (10 s) and once more at stop: only the
//! segments whose topics changed (a 64th of the topics each, by a hash of
//! the topic; `state_file.rs`), each whole or not at all. A crash loses
//! at most what changed since the last write. `$SYS/` topics are left
//! out (`--sys-interval` publishes them again at start).
//!
//! Each segment holds its topics as a cluster node's answer to a sync
//! does (one JSON array of at most 512 KiB per line, `cluster/retained.rs`),
//! and is read the same way: every message checked, the set's bounds
//! applied (past them messages are left out and counted), an expired one
//! dropped. A file that cannot be read refuses the start, naming the line
//! and the fix; a missing one is a first start, and the file is written
//! at once (an empty set too), so a path that cannot be written refuses
//! the start instead of failing at every save.

use super::retained::Kept;
use super::shard::{shard_of, RetainedCopy, Shards};
use super::state_file::{segment_of, Dirty, StateFile, SEGMENTS};
use crate::cluster::retained::{chunks, decode_chunk};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) use super::state_file::DEFAULT_EVERY;

/// The file, and what of the set it holds.
#[derive(Debug)]
pub(crate) struct RetainedFile(StateFile);

impl RetainedFile {
    /// Read `path` into the shards' retained sets, each message to its
    /// topic's (`max_push`: the largest message this server takes): how
    /// many messages they kept. Err names the problem and the fix.
    pub(crate) fn open(path: &Path, every: Duration, shards: &Shards, max_push: usize) -> Result<(RetainedFile, usize), String> {
        let n = shards.len();
        (0..n).for_each(|i| shards.core(i).retained.track_changes());
        let mut kept = 0;
        let f = Self::read_into(
            path,
            every,
            max_push,
            |topic, k| kept += shards.core(shard_of(topic, n)).retained.newer(topic, k, None) as usize,
            |dropped| shards.core(0).retained.refused("file", dropped),
        )?;
        let mut f = f;
        f.save(shards, Instant::now(), true).map_err(|e| format!("--mqtt-retained-file: {e}; give a path in a directory this user can write"))?;
        Ok((f, kept))
    }

    /// Read `path`, each message it holds (not expired) to `keep`, the
    /// count of those it left out to `dropped`.
    fn read_into(
        path: &Path,
        every: Duration,
        max_push: usize,
        mut keep: impl FnMut(&str, Kept),
        dropped_to: impl FnOnce(u64),
    ) -> Result<RetainedFile, String> {
        let f = RetainedFile(StateFile::new(path, every));
        let mut dropped = 0;
        for (part, text) in f.0.read("--mqtt-retained-file")? {
            for (n, line) in text.split(|b| *b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
                let entries = decode_chunk(line, max_push, &mut dropped).map_err(|e| {
                    format!(
                        "--mqtt-retained-file {part}: line {} is not what megaconn writes ({e}); restore the file, or move it away to start with no retained messages",
                        n + 1
                    )
                })?;
                let now = crate::proto::push::wall_us();
                for e in entries {
                    let k = Kept::from_entry(&e);
                    if k.forwarded(now).is_ok() {
                        keep(&e.topic, k);
                    }
                }
            }
        }
        dropped_to(dropped);
        Ok(f)
    }

    /// Write the set's segments that changed, if the interval passed
    /// (`now`), or at all (`force`: the server stops). Err: why they
    /// could not be written (the next write is whole).
    pub(crate) fn save(&mut self, shards: &Shards, now: Instant, force: bool) -> Result<bool, String> {
        let generation: u64 = (0..shards.len()).map(|i| shards.core(i).retained.generation()).sum();
        let reaped = self.0.reap(false);
        self.count(shards);
        reaped.map_err(|e| format!("cannot write the retained messages to {}: {e}", self.0.path.display()))?;
        if !self.0.due(generation, now, force) {
            return Ok(false);
        }
        let changed = (0..shards.len()).fold(Dirty::default(), |d, i| d.union(shards.core(i).retained.take_changes()));
        let wanted = self.0.wanted(changed);
        // A copy of the segments' messages, taken a shard at a time.
        let mut parts: Vec<Vec<RetainedCopy>> = (0..SEGMENTS).map(|_| Vec::new()).collect();
        let copy = shards.retained_copy(crate::proto::push::wall_us(), false, |t| !super::retained::is_sys(t) && wanted.has(segment_of(t)));
        for m in copy {
            parts[segment_of(&m.0)].push(m);
        }
        let mut skipped = 0;
        let segments = (0..SEGMENTS)
            .filter(|s| wanted.has(*s))
            .map(|s| {
                let part = &mut parts[s];
                part.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                let (lines, dropped) = chunks(part.iter().map(|(t, d, m, us)| (t.as_str(), d.as_slice(), m.clone(), *us)));
                skipped += dropped;
                (s, lines)
            })
            .collect();
        shards.retained_refused("file", skipped);
        let wrote = self.0.write(segments, generation, now, force);
        self.count(shards);
        wrote.map_err(|e| format!("cannot write the retained messages to {}: {e}", self.0.path.display()))?;
        Ok(true)
    }

    fn count(&self, shards: &Shards) {
        let mut core = shards.core(0);
        core.retained.counters.saved = self.0.written;
        core.retained.counters.saved_segments = self.0.segments_written;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::broker::retained::RetainedConfig;
    use std::path::PathBuf;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("megaconn-unit-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Two shards, as a server starts them.
    fn shards(retained: RetainedConfig) -> Shards {
        Shards::start(2, Default::default(), retained, Default::default(), std::sync::Arc::new(|_| {})).unwrap()
    }

    /// A scratch directory, its file's path, two shards and the file
    /// opened on them (written at once, an hour between writes).
    fn opened(tag: &str) -> (PathBuf, PathBuf, Shards, RetainedFile) {
        let d = dir(tag);
        let path = d.join("retained.json");
        let a = shards(RetainedConfig::default());
        let (f, n) = RetainedFile::open(&path, Duration::from_secs(3600), &a, 1024).unwrap();
        assert_eq!(n, 0, "no file yet");
        (d, path, a, f)
    }

    fn set(s: &Shards, topic: &str, k: Kept) {
        s.core(shard_of(topic, s.len())).retained.set(topic, k, None).unwrap();
    }

    /// Written only when changed (and the interval passed, unless
    /// forced), read back whole with properties and stamps, each message
    /// into its topic's shard; a missing file is a first start.
    #[test]
    fn the_set_is_written_when_it_changed_and_read_back_whole() {
        let (d, path, a, mut f) = opened("retained-file");
        assert!(!f.save(&a, Instant::now(), true).unwrap(), "nothing changed");
        let props = crate::proto::mqtt::forward::Forwarded { content_type: Some("text/plain".into()), ..Default::default() };
        set(&a, "a/b", Kept::new(b"1", 1).with(Some(&props), 7));
        set(&a, "c", Kept::new(b"2", 0).with(None, 8));
        assert!(!f.save(&a, Instant::now(), false).unwrap(), "the interval has not passed");
        assert!(f.save(&a, Instant::now(), true).unwrap());
        assert!(!d.join("retained.json.tmp").exists(), "renamed into place");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "the clients' payloads: the owner's only");
        let b = shards(RetainedConfig::default());
        let (_, n) = RetainedFile::open(&path, DEFAULT_EVERY, &b, 1024).unwrap();
        assert_eq!(n, 2);
        let mut core = b.core(shard_of("a/b", 2));
        let got = core.retained.matching("a/b", 0)[0].1.clone();
        assert_eq!((got.data.as_ref(), got.qos, got.publish_us, got.mqtt.and_then(|m| m.content_type)), (&b"1"[..], 1, 7, Some("text/plain".into())));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// One topic changed among 1,000 rewrites its segment only; a clear
    /// and an expiry do too; the file reads back as the set.
    #[test]
    fn a_change_rewrites_only_its_topics_segment() {
        let (d, path, a, mut f) = opened("retained-segments");
        for i in 0..1000 {
            set(&a, &format!("t/{i}"), Kept::new(format!("{i}").as_bytes(), 0));
        }
        f.save(&a, Instant::now(), true).unwrap();
        let segments = |s: &Shards| s.core(0).retained.counters.saved_segments;
        assert_eq!(segments(&a), 128, "whole at start, then every segment held some of the 1,000");
        set(&a, "t/7", Kept::new(b"seven", 0));
        f.save(&a, Instant::now(), true).unwrap();
        assert_eq!(segments(&a), 129, "one topic: one segment");
        set(&a, "t/8", Kept::new(b"", 0));
        let short = crate::proto::mqtt::forward::Forwarded { message_expiry: Some(1), ..Default::default() };
        set(&a, "t/9", Kept::new(b"nine", 0).with(Some(&short), crate::proto::push::wall_us() - 2_000_000));
        f.save(&a, Instant::now(), true).unwrap();
        assert!(segments(&a) <= 131, "a clear and a set: at most two segments ({})", segments(&a));
        let b = shards(RetainedConfig::default());
        let (_, n) = RetainedFile::open(&path, DEFAULT_EVERY, &b, 1024).unwrap();
        assert_eq!(n, 998, "t/8 cleared, t/9 expired");
        let got = b.core(shard_of("t/7", 2)).retained.matching("t/7", 0)[0].1.data.clone();
        assert_eq!(&got[..], b"seven");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The broker's own `$SYS` topics change every `--sys-interval`:
    /// they neither cause a write nor go into the file.
    #[test]
    fn sys_topics_are_not_written() {
        let (d, path, a, mut f) = opened("retained-sys");
        set(&a, "$SYS/broker/uptime", Kept::new(b"10 seconds", 0));
        assert!(!f.save(&a, Instant::now(), true).unwrap(), "a $SYS change alone is not written");
        set(&a, "a", Kept::new(b"1", 0));
        assert!(f.save(&a, Instant::now(), true).unwrap());
        let b = shards(RetainedConfig::default());
        let (_, n) = RetainedFile::open(&path, DEFAULT_EVERY, &b, 1024).unwrap();
        assert_eq!(n, 1, "only the application's message");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A damaged file refuses the start, naming the line and the fix; an
    /// entry past this server's bounds is left out and counted.
    #[test]
    fn a_damaged_file_is_refused_with_the_fix_and_bounds_apply() {
        let d = dir("retained-bad");
        let path = d.join("r.json");
        let a = shards(RetainedConfig::default());
        let (mut f, _) = RetainedFile::open(&path, DEFAULT_EVERY, &a, 1024).unwrap();
        set(&a, "ok", Kept::new(b"small", 0));
        set(&a, "big", Kept::new(&[7; 100], 0));
        f.save(&a, Instant::now(), true).unwrap();
        let b = shards(RetainedConfig::default());
        let (_, n) = RetainedFile::open(&path, DEFAULT_EVERY, &b, 50).unwrap();
        assert_eq!((n, b.core(0).retained.counters.refused.get("file").copied()), (1, Some(1)), "the 100-byte message is over this server's 50");
        std::fs::write(&path, b"[]\n{garbage\n").unwrap();
        let e = RetainedFile::open(&path, DEFAULT_EVERY, &b, 50).unwrap_err();
        assert!(e.contains("line 2") && e.contains("move it away"), "{e}");
        let e = RetainedFile::open(&d.join("no/such/dir/r.json"), DEFAULT_EVERY, &b, 50).unwrap_err();
        assert!(e.contains("no/such/dir") && e.contains("directory this user can write"), "a path that cannot be written refuses the start: {e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
