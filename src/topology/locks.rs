//! Lock files of network namespaces and of their creation.
//!
//! Each namespace a bench makes has a lock file,
//! `/run/megaconn-netns/<name>.lock`, flocked by its owner from before the
//! namespace exists until it is removed: a namespace whose lock is not
//! held has no live owner (the kernel drops a flock however its holder
//! dies), whatever the owner's binary is called. The creation lock
//! (`/run/megaconn-netns.lock`) serialises creations and holds the host's
//! `tcp_child_ehash_entries` value while it is changed, so a creation cut
//! short by SIGKILL is undone by the next bench.

use super::{CHILD_EHASH, LOCK_DIR, PREFIX};
use std::fs::File;
use std::os::fd::AsRawFd;

/// Lock files of the namespaces this process made, held until removed.
pub(super) static OWNED: std::sync::Mutex<Vec<(String, File)>> = std::sync::Mutex::new(Vec::new());

/// The lock file of namespace `name` in `dir`.
pub(super) fn lock_path(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{name}.lock"))
}

/// Take the lock of namespace `name` (held while the returned file is
/// open; the file is not inherited by children).
pub(super) fn hold_lock(dir: &std::path::Path, name: &str) -> std::io::Result<File> {
    std::fs::create_dir_all(dir)?;
    let f = File::create(lock_path(dir, name))?;
    // SAFETY: flock on a file we just opened.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(f)
}

/// Whether namespace `name` (pid `pid` in its name) has no live owner:
/// its lock file is not held. Without a lock file (made by a megaconn
/// older than the lock files, or the file removed), it is stale when the
/// pid in its name is not alive, or is ours (we have made none yet).
pub(super) fn is_stale(dir: &std::path::Path, name: &str, pid: u32) -> bool {
    match File::open(lock_path(dir, name)) {
        Ok(f) => {
            // SAFETY: flock on a file we just opened; closing it drops
            // the lock we may have taken.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            r == 0
        }
        Err(_) => {
            // SAFETY: signal 0 only checks that the process exists.
            let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
            pid == std::process::id() || !alive
        }
    }
}

/// Namespaces in `netns_dir` named by a megaconn with no live owner.
pub(super) fn stale_in(netns_dir: &std::path::Path, lock_dir: &std::path::Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(netns_dir) else { return Vec::new() };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            let Some(pid) = n.strip_prefix(PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else { return false };
            is_stale(lock_dir, n, pid)
        })
        .collect();
    names.sort();
    names
}

/// Drop this process's lock of namespace `name` (it is gone).
pub(super) fn release_lock(name: &str) {
    if let Ok(mut owned) = OWNED.lock() {
        if let Some(i) = owned.iter().position(|(n, _)| n == name) {
            let _ = std::fs::remove_file(lock_path(std::path::Path::new(LOCK_DIR), name));
            owned.swap_remove(i);
        }
    }
}

/// The host's child-ehash value to put back while it is changed (for the
/// second-Ctrl-C hook, which cannot wait for the creation lock).
pub(super) static EHASH_RESTORE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Put the host's `tcp_child_ehash_entries` back if a namespace creation
/// was cut short (a second Ctrl-C exits without unwinding).
pub(super) fn restore_ehash() {
    if let Some(v) = EHASH_RESTORE.lock().ok().and_then(|mut r| r.take()) {
        let _ = std::fs::write(CHILD_EHASH, v.trim());
    }
}

/// The value a creation lock file says to restore ("tcp_child_ehash_entries=N").
pub(super) fn recorded_ehash(lock: &mut File) -> Option<String> {
    use std::io::{Read, Seek};
    let mut text = String::new();
    lock.seek(std::io::SeekFrom::Start(0)).ok()?;
    lock.read_to_string(&mut text).ok()?;
    let v = text.trim().strip_prefix("tcp_child_ehash_entries=")?;
    v.parse::<u64>().ok().map(|_| v.to_string())
}

/// Write (Some) or clear (None) the value to restore in the creation lock.
pub(super) fn record_ehash(lock: &mut File, v: Option<&str>) -> std::io::Result<()> {
    use std::io::{Seek, Write};
    lock.set_len(0)?;
    lock.seek(std::io::SeekFrom::Start(0))?;
    if let Some(v) = v {
        write!(lock, "tcp_child_ehash_entries={}", v.trim())?;
        lock.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_stale_exactly_when_its_lock_is_not_held() {
        let root = std::env::temp_dir().join(format!("megaconn-locks-{}", std::process::id()));
        let (netns, locks) = (root.join("netns"), root.join("locks"));
        std::fs::create_dir_all(&netns).unwrap();
        // Our own process is alive and not called "megaconn": a renamed
        // binary's live bench.
        let me = std::process::id();
        let (live, dead, old) = (format!("{PREFIX}{me}-srv"), format!("{PREFIX}{me}-cli"), format!("{PREFIX}{}-net", 0x7FFF_FFF0u32));
        for n in [&live, &dead, &old, &"other-ns".to_string()] {
            File::create(netns.join(n)).unwrap();
        }
        let held = hold_lock(&locks, &live).unwrap();
        let gone = hold_lock(&locks, &dead).unwrap();
        assert!(hold_lock(&locks, &live).is_err(), "a held lock cannot be taken twice");
        drop(gone);
        // The dead owner's lock is free; a name without a lock file and
        // with a pid that cannot exist is stale; the live one is not.
        let mut want = vec![dead.clone(), old.clone()];
        want.sort();
        assert_eq!(stale_in(&netns, &locks), want);
        drop(held);
        assert!(stale_in(&netns, &locks).contains(&live), "its owner let go");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_ehash_value_to_restore_survives_in_the_lock_file() {
        let path = std::env::temp_dir().join(format!("megaconn-create-lock-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        assert_eq!(recorded_ehash(&mut f), None);
        record_ehash(&mut f, Some("0\n")).unwrap();
        // A later bench opens the file its dead predecessor left.
        let mut again = File::options().read(true).write(true).open(&path).unwrap();
        assert_eq!(recorded_ehash(&mut again).as_deref(), Some("0"));
        record_ehash(&mut again, None).unwrap();
        assert_eq!(recorded_ehash(&mut f), None);
        std::fs::remove_file(&path).unwrap();
    }
}
