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
//! One JSON line per session (`sessions/saved.rs`), in the segment of
//! its client id (`state_file.rs`: `PATH.d/00` to `63`, PATH naming
//! them), so a change rewrites a 64th of the sessions; read back oldest
//! first across the segments, within this server's bounds
//! (`--mqtt-sessions`, `--mqtt-sessions-bytes`, the queue bounds: past
//! them as at a connection's end), with a v5 will waiting for its delay.
//! A line that is not what megaconn writes refuses the start, naming the
//! file, the line and the fix; a missing file is a first start, and the
//! file is written at once, so a path that cannot be written refuses
//! the start. A file of the format before segments (every session in
//! PATH) is read and replaced.

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
        let mut all = Vec::new();
        for (part, text) in f.0.read(FLAG)? {
            for (n, line) in text.split(|b| *b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
                all.push(SavedSession::parse(line).map_err(|e| {
                    format!("{FLAG} {part}: line {} is not what megaconn writes ({e}); restore the file, or move it away to start with no kept sessions", n + 1)
                })?);
            }
        }
        all.sort_by_key(|s| s.age);
        let (now, wall) = (Instant::now(), crate::proto::push::wall_us());
        let kept = all.into_iter().map(|s| sessions.restore(s, now, wall) as usize).sum();
        f.save(sessions, now, true).map_err(|e| format!("{FLAG}: {e}; give a path in a directory this user can write"))?;
        Ok((f, kept))
    }

    /// Write the kept sessions' segments that changed, if the interval
    /// passed (`now`), or at all (`force`: the server stops).
    pub(crate) fn save(&mut self, sessions: &mut Sessions, now: Instant, force: bool) -> Result<bool, String> {
        let generation = sessions.generation();
        let reaped = self.0.reap(false);
        self.count(sessions);
        reaped.map_err(|e| format!("cannot write the kept sessions to {}: {e}", self.0.path.display()))?;
        if !self.0.due(generation, now, force) {
            return Ok(false);
        }
        let wanted = self.0.wanted(sessions.dirty.take());
        let segments = sessions
            .saved(now, crate::proto::push::wall_us(), wanted)
            .into_iter()
            .map(|(i, part)| (i, part.iter().map(|s| serde_json::to_vec(s).expect("serializes")).collect()))
            .collect();
        let wrote = self.0.write(segments, generation, now, force);
        self.count(sessions);
        wrote.map_err(|e| format!("cannot write the kept sessions to {}: {e}", self.0.path.display()))?;
        Ok(true)
    }

    fn count(&self, sessions: &mut Sessions) {
        sessions.counters.saved = self.0.written;
        sessions.counters.saved_segments = self.0.segments_written;
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
        SessionClaim::v5(conn, id, false, 3600)
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
        assert!(StateFile::new(&path, every()).read(FLAG).unwrap().iter().all(|(_, t)| t.is_empty()), "no session kept now");

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
                age: 0,
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

    fn every() -> Duration {
        Duration::from_secs(3600)
    }

    /// The file as read back: each session's id, subscriptions and
    /// queued payloads, by id.
    fn in_file(path: &Path) -> Vec<(String, Vec<String>, Vec<Vec<u8>>)> {
        let parts = StateFile::new(path, every()).read(FLAG).unwrap();
        let lines = parts.iter().flat_map(|(_, t)| t.split(|b| *b == b'\n').filter(|l| !l.is_empty()));
        let mut all: Vec<_> = lines
            .map(|l| SavedSession::parse(l).unwrap())
            .map(|s| (s.id, s.subs.into_iter().map(|s| s.filter).collect(), s.messages.into_iter().map(|m| m.data).collect()))
            .collect();
        all.sort();
        all
    }

    /// Sessions kept, queued to and resumed at random, with a write after
    /// every ten changes: each write rewrites only the segments of the ids
    /// that changed (the first is whole), and the file always reads back
    /// as the registry holds the sessions.
    #[test]
    fn only_the_changed_segments_are_written_and_the_file_matches_the_registry() {
        let (d, path, mut a, mut f) = opened("sessions-segments");
        assert_eq!(a.counters.saved_segments, 64, "the first write is whole");
        let now = Instant::now();
        let (mut rng, mut conn) = (0x9e37_79b9_7f4a_7c15_u64, 10);
        let mut changed = std::collections::BTreeSet::new();
        for round in 0..30 {
            for _ in 0..10 {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let id = format!("dev-{}", (rng >> 33) % 200);
                conn += 1;
                match (rng >> 20) % 3 {
                    // Kept with a subscription (or resumed and kept again).
                    0 => {
                        let key = admitted(&mut a, conn, &id, now);
                        let state = SessionState { subs: vec![KeptSub::new(&format!("t/{id}"), 1)], messages: vec![], rel: vec![] };
                        a.ended(SessionEnd { conn, key, expiry_s: 3600, state: Some(state), ..SessionEnd::default() }, now);
                    }
                    // A message queued for it, if it is kept.
                    1 => a.offline(&format!("t/{id}"), format!("m{conn}").as_bytes(), 1, false, None, 0),
                    // Resumed, then gone for good.
                    _ => {
                        let key = admitted(&mut a, conn, &id, now);
                        a.ended(SessionEnd { conn, key, ..SessionEnd::default() }, now);
                    }
                }
                changed.insert(crate::server::broker::state_file::segment_of(&id));
            }
            let before = a.counters.saved_segments;
            f.save(&mut a, now, true).unwrap();
            let wrote = a.counters.saved_segments - before;
            assert!(wrote <= changed.len() as u64, "round {round}: {wrote} segments written for {} changed", changed.len());
            changed.clear();
            let mut held: Vec<_> = a
                .saved(now, 0, crate::server::broker::state_file::Dirty::ALL)
                .into_iter()
                .flat_map(|(_, p)| p)
                .map(|s| (s.id, s.subs.into_iter().map(|s| s.filter).collect(), s.messages.into_iter().map(|m| m.data).collect()))
                .collect();
            held.sort();
            assert!(!held.is_empty() || round < 2, "round {round}: sessions are kept");
            assert_eq!(in_file(&path), held, "round {round}");
        }
        assert!(a.counters.saved_segments < 64 + 30 * 10, "{}", a.counters.saved_segments);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A file written before segments (every session in PATH) is read,
    /// then replaced by the segments.
    #[test]
    fn a_file_of_the_format_before_segments_is_read_and_replaced() {
        let d = std::env::temp_dir().join(format!("megaconn-unit-{}-sessions-legacy", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("sessions.json");
        let old = r#"{"id":"a","subs":[{"filter":"x","qos":1}],"messages":[]}"#.to_string() + "\n" + r#"{"id":"b","subs":[],"messages":[]}"#;
        std::fs::write(&path, old).unwrap();
        let mut s = Sessions::new(SessionsConfig::default());
        assert_eq!(SessionsFile::open(&path, every(), &mut s).unwrap().1, 2);
        assert_eq!(in_file(&path).iter().map(|(id, ..)| id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("{\"megaconn_segments\":64}"));
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
