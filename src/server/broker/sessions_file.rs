//! `--mqtt-sessions-file PATH`: the sessions kept for clients gone
//! survive a restart, as mosquitto's `persistence true` keeps them. The
//! file is read at start and written whenever the kept sessions changed,
//! at most every `--mqtt-sessions-save-every` (10 s) and once more at
//! stop, whole or not at all (`state_file.rs`). At a SIGTERM the drain
//! first closes every connection, so the sessions of the clients
//! connected then are kept and in the file too; a client that comes back
//! to the restarted server resumes (session present 1) and gets what was
//! queued for it. A crash loses what changed since the last write.
//!
//! One JSON line per session (`sessions/saved.rs`), oldest first, read
//! back within this server's bounds (`--mqtt-sessions`,
//! `--mqtt-sessions-bytes`, the queue bounds: past them as at a
//! connection's end), with a v5 will waiting for its delay. A line
//! that is not what megaconn writes refuses the start, naming the line and
//! the fix; a missing file is a first start, and the file is written at
//! once, so a path that cannot be written refuses the start.

use super::sessions::saved::SavedSession;
use super::sessions::Sessions;
use super::state_file::StateFile;
use std::path::Path;
use std::time::{Duration, Instant};

const FLAG: &str = "--mqtt-sessions-file";

#[derive(Debug)]
pub(crate) struct SessionsFile(StateFile);

impl SessionsFile {
    /// Read `path` into `sessions`: how many it kept. Err names the
    /// problem and the fix.
    pub(crate) fn open(path: &Path, every: Duration, sessions: &mut Sessions) -> Result<(SessionsFile, usize), String> {
        sessions.keep_names();
        let mut f = SessionsFile(StateFile::new(path, every));
        let text = f.0.read(FLAG)?;
        let (now, wall) = (Instant::now(), crate::proto::push::wall_us());
        let mut kept = 0;
        for (n, line) in text.split(|b| *b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
            let s = SavedSession::parse(line).map_err(|e| {
                format!(
                    "{FLAG} {}: line {} is not what megaconn writes ({e}); restore the file, or move it away to start with no kept sessions",
                    path.display(),
                    n + 1
                )
            })?;
            kept += sessions.restore(s, now, wall) as usize;
        }
        f.save(sessions, now, true).map_err(|e| format!("{FLAG}: {e}; give a path in a directory this user can write"))?;
        Ok((f, kept))
    }

    /// Write the kept sessions if they changed and the interval passed
    /// (`now`), or if they changed at all (`force`: the server stops).
    pub(crate) fn save(&mut self, sessions: &mut Sessions, now: Instant, force: bool) -> Result<bool, String> {
        let generation = sessions.generation();
        let reaped = self.0.reap(false);
        sessions.counters.saved = self.0.written;
        reaped.map_err(|e| format!("cannot write the kept sessions to {}: {e}", self.0.path.display()))?;
        if !self.0.due(generation, now, force) {
            return Ok(false);
        }
        let lines: Vec<Vec<u8>> = sessions.saved(now, crate::proto::push::wall_us()).iter().map(|s| serde_json::to_vec(s).expect("serializes")).collect();
        let wrote = self.0.write(lines, generation, now, force);
        sessions.counters.saved = self.0.written;
        wrote.map_err(|e| format!("cannot write the kept sessions to {}: {e}", self.0.path.display()))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::broker::sessions::{Action, SessionsConfig};
    use crate::server::commands::DelayedWill;
    use crate::server::commands::{ClientPublish, KeptSub, SessionClaim, SessionEnd, SessionMessage, SessionState};

    fn message(topic: &str, data: &str) -> SessionMessage {
        SessionMessage { topic: topic.into(), data: data.into(), qos: 1, retain: false, id: 0, released: false, mqtt: None, publish_us: 7 }
    }

    /// A scratch directory, its file, and a registry reading it.
    fn opened(tag: &str) -> (std::path::PathBuf, std::path::PathBuf, Sessions, SessionsFile) {
        let d = std::env::temp_dir().join(format!("megaconn-unit-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("sessions.json");
        let mut s = Sessions::new(SessionsConfig::default());
        let (f, n) = SessionsFile::open(&path, Duration::from_secs(3600), &mut s).unwrap();
        assert_eq!(n, 0, "no file yet");
        (d, path, s, f)
    }

    /// A v5 CONNECT of `id` with a persistent session, as a worker claims it.
    fn claim(conn: u64, id: &str) -> SessionClaim {
        SessionClaim {
            conn,
            client_id: id.into(),
            clean: false,
            expiry_s: 3600,
            v5: true,
            owner: None,
            identity: String::new(),
            login: None,
            assigned: false,
            grant: None,
        }
    }

    /// `id` connected (as connection `conn`): its registry key.
    fn admitted(s: &mut Sessions, conn: u64, id: &str, now: Instant) -> crate::server::commands::IdKey {
        match s.claim(0, claim(conn, id), now).remove(0) {
            Action::Answer(_, ans) => ans.key,
            other => panic!("{other:?}"),
        }
    }

    /// A client's session, kept at its end, is written with its id and
    /// read back by a new registry (new keys): the client resumes it with
    /// its subscription and queued message. A session whose expiry passed
    /// is not kept; a damaged line refuses the start with the fix.
    #[test]
    fn kept_sessions_are_written_and_resumed_after_a_restart() {
        let (d, path, mut a, mut f) = opened("sessions-file");
        let now = Instant::now();
        let key = admitted(&mut a, 1, "dev-1", now);
        let state = SessionState { subs: vec![KeptSub::new("t/+", 1)], messages: vec![message("t/a", "aGk=")], rel: vec![] };
        a.ended(SessionEnd { conn: 1, key, expiry_s: 3600, state: Some(state), ..SessionEnd::default() }, now);
        assert!(!f.save(&mut a, now, false).unwrap(), "the interval has not passed");
        assert!(f.save(&mut a, now, true).unwrap());
        assert!(!f.save(&mut a, now, true).unwrap(), "nothing changed since");

        let mut b = Sessions::new(SessionsConfig::default());
        let (mut fb, n) = SessionsFile::open(&path, Duration::from_secs(3600), &mut b).unwrap();
        assert_eq!((n, b.counters.kept, b.counters.loaded), (1, 1, 1));
        let answer = b.claim(0, claim(2, "dev-1"), now);
        let Action::Answer(_, ans) = &answer[0] else { panic!("{answer:?}") };
        assert!(ans.present, "resumed");
        assert_eq!((ans.subs[0].filter.as_str(), &ans.messages[0].data[..]), ("t/+", &b"aGk="[..]));
        assert!(fb.save(&mut b, now, true).unwrap(), "a resume changes what the file holds");
        assert_eq!(std::fs::read(&path).unwrap(), b"", "no session kept now");

        let line = |expires_us: u64| {
            serde_json::to_string(&SavedSession {
                id: "old".into(),
                expires_us: Some(expires_us),
                subs: vec![],
                messages: vec![],
                rel: vec![],
                owner: None,
                identity: String::new(),
                will: None,
            })
            .unwrap()
        };
        std::fs::write(&path, format!("{}\n", line(1))).unwrap();
        let mut c = Sessions::new(SessionsConfig::default());
        assert_eq!(SessionsFile::open(&path, Duration::from_secs(1), &mut c).unwrap().1, 0, "expired while stopped");
        assert_eq!(c.counters.expired.get("expiry"), Some(&1));
        std::fs::write(&path, format!("{}\n{{\"id\":\"\",\"subs\":[],\"messages\":[]}}\n", line(u64::MAX))).unwrap();
        let e = SessionsFile::open(&path, Duration::from_secs(1), &mut Sessions::new(SessionsConfig::default())).unwrap_err();
        assert!(e.contains("line 2") && e.contains("move it away"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A v5 will waiting for its delay goes into the file with its
    /// session and is published after the restart when its time comes,
    /// not before.
    #[test]
    fn a_delayed_will_outlives_a_restart_and_is_published_when_due() {
        let (d, path, mut a, mut f) = opened("sessions-will");
        let now = Instant::now();
        let key = admitted(&mut a, 1, "dev-w", now);
        let will = ClientPublish { topic: "status/dev-w".into(), data: b"b2ZmbGluZQ==".to_vec(), qos: 1, retain: true, mqtt: None, identity: None };
        let state = SessionState { subs: vec![KeptSub::new("cmd/dev-w", 1)], messages: vec![], rel: vec![] };
        let end = SessionEnd {
            conn: 1,
            key,
            expiry_s: 3600,
            state: Some(state),
            owner: None,
            identity: String::new(),
            will: Some(DelayedWill { will: will.clone(), delay_s: 30 }),
        };
        assert!(a.ended(end, now).is_empty(), "it waits");
        assert!(f.save(&mut a, now, true).unwrap());

        let mut b = Sessions::new(SessionsConfig::default());
        SessionsFile::open(&path, Duration::from_secs(3600), &mut b).unwrap();
        assert_eq!(b.counters.wills_waiting, 1);
        assert!(b.expire(now + Duration::from_secs(20), false).is_empty(), "not due yet");
        assert!(b.expire(now + Duration::from_secs(31), true).is_empty(), "held while a cluster link is down");
        assert_eq!(b.expire(now + Duration::from_secs(31), false), vec![Action::Will(will)]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
