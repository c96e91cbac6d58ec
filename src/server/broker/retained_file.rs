//! `--mqtt-retained-file PATH`: the retained set survives a restart. It
//! is read at start, and written whenever it changed, at most every
//! `--mqtt-retained-save-every` (10 s) and once more at stop, whole or
//! not at all (`state_file.rs`). A crash loses at most what changed since
//! the last write.
//!
//! The file holds the set as a cluster node's answer to a sync does (one
//! JSON array of at most 512 KiB per line, `cluster/retained.rs`),
//! and is read the same way: every message checked, the set's bounds
//! applied (past them messages are left out and counted), an expired one
//! dropped. A file that cannot be read refuses the start, naming the line
//! and the fix; a missing one is a first start, and the file is written
//! at once (an empty set too), so a path that cannot be written refuses
//! the start instead of failing at every save.

use super::retained::{Kept, Retained};
use super::state_file::StateFile;
use crate::cluster::retained::{chunks, decode_chunk};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) use super::state_file::DEFAULT_EVERY;

/// The file, and what of the set it holds.
#[derive(Debug)]
pub(crate) struct RetainedFile(StateFile);

impl RetainedFile {
    /// Read `path` into `set` (`max_push`: the largest message this
    /// server takes): how many messages it kept. Err names the problem
    /// and the fix.
    pub(crate) fn open(path: &Path, every: Duration, set: &mut Retained, max_push: usize) -> Result<(RetainedFile, usize), String> {
        let mut f = RetainedFile(StateFile::new(path, every));
        let text = f.0.read("--mqtt-retained-file")?;
        let (mut kept, mut dropped) = (0, 0);
        for (n, line) in text.split(|b| *b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
            let entries = decode_chunk(line, max_push, &mut dropped).map_err(|e| {
                format!(
                    "--mqtt-retained-file {}: line {} is not what megaconn writes ({e}); restore the file, or move it away to start with no retained messages",
                    path.display(),
                    n + 1
                )
            })?;
            let now = crate::proto::push::wall_us();
            for e in entries {
                let k = Kept::from_entry(&e);
                if k.forwarded(now).is_ok() {
                    kept += set.newer(&e.topic, k, None) as usize;
                }
            }
        }
        set.refused("file", dropped);
        f.save(set, Instant::now(), true).map_err(|e| format!("--mqtt-retained-file: {e}; give a path in a directory this user can write"))?;
        Ok((f, kept))
    }

    /// Write the set if it changed and the interval passed (`now`), or
    /// if it changed at all (`force`: the server stops). Err: why it
    /// could not be written (tried again at the next interval).
    pub(crate) fn save(&mut self, set: &mut Retained, now: Instant, force: bool) -> Result<bool, String> {
        let generation = set.generation();
        if !self.0.due(generation, now, force) {
            return Ok(false);
        }
        let (lines, skipped) = chunks(set.all(crate::proto::push::wall_us()));
        set.refused("file", skipped);
        self.0.write(&lines, generation, now).map_err(|e| format!("cannot write the retained messages to {}: {e}", self.0.path.display()))?;
        set.counters.saved += 1;
        Ok(true)
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

    /// Written only when changed (and the interval passed, unless
    /// forced), read back whole with properties and stamps; a missing
    /// file is a first start.
    #[test]
    fn the_set_is_written_when_it_changed_and_read_back_whole() {
        let d = dir("retained-file");
        let path = d.join("retained.json");
        let mut a = Retained::new(RetainedConfig::default());
        let (mut f, n) = RetainedFile::open(&path, Duration::from_secs(3600), &mut a, 1024).unwrap();
        assert_eq!(n, 0, "no file yet");
        assert!(!f.save(&mut a, Instant::now(), true).unwrap(), "nothing changed");
        let props = crate::proto::mqtt::forward::Forwarded { content_type: Some("text/plain".into()), ..Default::default() };
        a.set("a/b", Kept::new(b"1", 1).with(Some(&props), 7), None).unwrap();
        a.set("c", Kept::new(b"2", 0).with(None, 8), None).unwrap();
        assert!(!f.save(&mut a, Instant::now(), false).unwrap(), "the interval has not passed");
        assert!(f.save(&mut a, Instant::now(), true).unwrap());
        assert!(!d.join("retained.json.tmp").exists(), "renamed into place");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "the clients' payloads: the owner's only");
        let mut b = Retained::new(RetainedConfig::default());
        let (_, n) = RetainedFile::open(&path, DEFAULT_EVERY, &mut b, 1024).unwrap();
        assert_eq!(n, 2);
        let got = b.matching("a/b", 0)[0].1.clone();
        assert_eq!((got.data.as_ref(), got.qos, got.publish_us, got.mqtt.and_then(|m| m.content_type)), (&b"1"[..], 1, 7, Some("text/plain".into())));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A damaged file refuses the start, naming the line and the fix; an
    /// entry past this server's bounds is left out and counted.
    #[test]
    fn a_damaged_file_is_refused_with_the_fix_and_bounds_apply() {
        let d = dir("retained-bad");
        let path = d.join("r.json");
        let mut a = Retained::new(RetainedConfig::default());
        a.set("ok", Kept::new(b"small", 0), None).unwrap();
        a.set("big", Kept::new(&[7; 100], 0), None).unwrap();
        RetainedFile::open(&path, DEFAULT_EVERY, &mut Retained::new(RetainedConfig::default()), 1024).unwrap().0.save(&mut a, Instant::now(), true).unwrap();
        let mut b = Retained::new(RetainedConfig::default());
        let (_, n) = RetainedFile::open(&path, DEFAULT_EVERY, &mut b, 50).unwrap();
        assert_eq!((n, b.counters.refused.get("file").copied()), (1, Some(1)), "the 100-byte message is over this server's 50");
        std::fs::write(&path, b"[]\n{garbage\n").unwrap();
        let e = RetainedFile::open(&path, DEFAULT_EVERY, &mut b, 50).unwrap_err();
        assert!(e.contains("line 2") && e.contains("move it away"), "{e}");
        let e = RetainedFile::open(&d.join("no/such/dir/r.json"), DEFAULT_EVERY, &mut b, 50).unwrap_err();
        assert!(e.contains("no/such/dir") && e.contains("directory this user can write"), "a path that cannot be written refuses the start: {e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
