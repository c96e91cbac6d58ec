//! The documentation's recipes, run as written.
//!
//! A runnable recipe ("journey") in any docs/*.md is ONE fenced code block
//! with info string `sh`, on the line right after `<!-- journey: NAME -->`;
//! after the block come zero or more `<!-- expect: TEXT -->` lines, and
//! every TEXT must appear in what the block prints (stdout and stderr
//! together). Each block runs as `bash -euo pipefail -c BLOCK` with the
//! megaconn under test first on PATH, in a fresh directory, in its own
//! process group, which is killed (by the PGID of the child started here)
//! after 90 s or when the block ends, whatever it left running. The
//! journeys of one document run one after another; documents run as
//! separate tests, side by side, so journeys of different documents never
//! share a port (23000-23999, which no other test uses): checked below.

use crate::common::proc::{exited, kill_group};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The journeys the README promises: deleting one fails this test.
const REQUIRED: [&str; 31] = [
    "gateway",
    "load-test",
    "cluster",
    "tls",
    "tls-load",
    "ipv6",
    "resume",
    "rollout",
    "auth",
    "upstream",
    "io",
    "mqtt",
    "mqtt-load",
    "mqtt-session",
    "mqtt-timed",
    "bench-mqtt-push",
    "mqtt-shared",
    "mqtt-ws",
    "mqtt-alias",
    "multiproto",
    "ws-deflate",
    "thresholds",
    "stages",
    "config",
    "client-config",
    "mqtt-auth-http",
    "mqtt-authz-http",
    "move-from-mosquitto",
    "sys-topics",
    "dashboard",
    "device-data-into-jetstream",
];
/// A recipe runs at most this long.
const JOURNEY_LIMIT: Duration = Duration::from_secs(90);
/// Output shown for a failed journey: its last 16 KB.
const SHOWN: usize = 16 * 1024;

#[derive(Debug, PartialEq)]
struct Journey {
    name: String,
    /// Where it is written: FILE:LINE of its marker.
    at: String,
    script: String,
    expect: Vec<String>,
}

/// `<!-- KEY: VALUE -->` on its own line: VALUE.
fn comment<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    Some(inner.strip_prefix(key)?.strip_prefix(':')?.trim())
}

/// Every journey of one document; Err names a recipe that breaks the
/// contract (so a typo cannot turn a recipe into prose nobody runs).
fn parse(file: &str, text: &str) -> Result<Vec<Journey>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Journey> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if comment(lines[i], "expect").is_some() {
            return Err(format!("{file}:{}: an expect line that follows no journey block", i + 1));
        }
        let Some(name) = comment(lines[i], "journey") else {
            i += 1;
            continue;
        };
        let at = format!("{file}:{}", i + 1);
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("{at}: a journey needs a one-word name, not {name:?}"));
        }
        if lines.get(i + 1).map(|l| l.trim_end()) != Some("```sh") {
            return Err(format!("{at}: journey {name} must be followed on the next line by a ```sh block"));
        }
        let body = i + 2;
        let close = (body..lines.len()).find(|k| lines[*k].trim_end() == "```").ok_or_else(|| format!("{at}: the block of journey {name} is never closed"))?;
        let script = lines[body..close].join("\n") + "\n";
        let mut expect = Vec::new();
        i = close + 1;
        while i < lines.len() {
            if let Some(text) = comment(lines[i], "expect") {
                if text.is_empty() {
                    return Err(format!("{file}:{}: an empty expect line", i + 1));
                }
                expect.push(text.to_string());
            } else if !lines[i].trim().is_empty() {
                break;
            }
            i += 1;
        }
        if out.iter().any(|j| j.name == name) {
            return Err(format!("{at}: a second journey named {name}"));
        }
        out.push(Journey { name: name.to_string(), at, script, expect });
    }
    Ok(out)
}

/// Every journey in docs/*.md of this checkout, and the file it is in
/// (the `docs/NAME.md` key of [`DOCUMENTS`]).
fn documented() -> Vec<(String, Journey)> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&docs)
        .unwrap_or_else(|e| panic!("{}: {e}", docs.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    let mut all: Vec<(String, Journey)> = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = format!("docs/{}", f.file_name().unwrap().to_string_lossy());
        for j in parse(&name, &text).unwrap_or_else(|e| panic!("{e}")) {
            if let Some((_, first)) = all.iter().find(|(_, o)| o.name == j.name) {
                panic!("journey {} is written twice: {} and {}", j.name, first.at, j.at);
            }
            all.push((name.clone(), j));
        }
    }
    all
}

/// Run one journey; Err says what went wrong, with the end of its output.
fn run_journey(j: &Journey) -> Result<Duration, String> {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("journeys");
    let dir = base.join(format!("{}-{}", j.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = base.join(format!("{}-{}.out", j.name, std::process::id()));
    let out = File::create(&log).unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_megaconn")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    // mqtt.js for the recipes that say "npm install mqtt": the test
    // peers' copy (scripts/setup.sh installs it).
    let node_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/node_modules");
    cmd.args(["-euo", "pipefail", "-c", &j.script]).current_dir(&dir).env("PATH", path).env("NODE_PATH", node_path).process_group(0);
    cmd.stdin(Stdio::null()).stdout(out.try_clone().unwrap()).stderr(out);
    let started = Instant::now();
    let mut child = cmd.spawn().expect("start bash");
    while !exited(&child) && started.elapsed() < JOURNEY_LIMIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    let timed_out = !exited(&child);
    // Ends it if it ran out of time, and whatever it left running anyway.
    let status = kill_group(&mut child);
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    let missing: Vec<&String> = j.expect.iter().filter(|e| !text.contains(e.as_str())).collect();
    let trouble = if timed_out {
        format!("did not finish within {JOURNEY_LIMIT:?} (killed)")
    } else if !status.success() {
        format!("exited with {status}")
    } else if !missing.is_empty() {
        format!("did not print {missing:?}")
    } else {
        let _ = std::fs::remove_file(&log);
        return Ok(took);
    };
    let cut = text.len().saturating_sub(SHOWN);
    let cut = (cut..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    Err(format!(
        "journey {} ({}) {trouble} after {took:.1?}; its output ({}){}:\n{}",
        j.name,
        j.at,
        log.display(),
        if cut > 0 { format!(", last {SHOWN} bytes") } else { String::new() },
        &text[cut..]
    ))
}

#[test]
fn the_promised_journeys_are_documented() {
    let names: Vec<String> = documented().into_iter().map(|(_, j)| j.name).collect();
    for want in REQUIRED {
        assert!(names.iter().any(|n| n == want), "no `<!-- journey: {want} -->` recipe in docs/*.md (found {names:?})");
    }
}

/// Run every journey of one document, one after another; fail with all
/// that failed.
fn run_document(file: &str) {
    let journeys: Vec<Journey> = documented().into_iter().filter(|(f, _)| f == file).map(|(_, j)| j).collect();
    assert!(!journeys.is_empty(), "no journey in {file}: remove it from DOCUMENTS in tests/e2e/journeys.rs");
    let mut failures = Vec::new();
    for j in &journeys {
        match run_journey(j) {
            Ok(took) => eprintln!("journey {} ({}) passed in {took:.1?}", j.name, j.at),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{} of {} journeys of {file} failed:\n\n{}", failures.len(), journeys.len(), failures.join("\n\n"));
}

/// One test per document with journeys, so documents run side by side
/// (a single test running 20 recipes in a row was the longest test of the
/// suite); `DOCUMENTS` lists them for the check that none is left out.
macro_rules! documents {
    ($($test:ident => $file:literal,)*) => {
        const DOCUMENTS: &[&str] = &[$($file),*];
        $(
            #[test]
            fn $test() {
                run_document($file);
            }
        )*
    };
}

documents! {
    journeys_auth => "docs/auth.md",
    journeys_bench => "docs/bench.md",
    journeys_client => "docs/client.md",
    journeys_history => "docs/history.md",
    journeys_io => "docs/io.md",
    journeys_cluster => "docs/journey-cluster.md",
    journeys_gateway => "docs/journey-gateway.md",
    journeys_load_test => "docs/journey-load-test.md",
    journeys_rollout => "docs/journey-rollout.md",
    journeys_server => "docs/server.md",
    journeys_mqtt => "docs/mqtt.md",
    journeys_mosquitto => "docs/mosquitto.md",
    journeys_protocol => "docs/protocol.md",
    journeys_push_api => "docs/push-api.md",
    journeys_tls => "docs/tls.md",
    journeys_upstream => "docs/upstream.md",
}

#[test]
fn every_document_with_journeys_is_run_and_none_shares_a_port_with_another() {
    let all = documented();
    for (file, j) in &all {
        assert!(DOCUMENTS.contains(&file.as_str()), "journey {} ({}) is never run: add {file} to documents! in tests/e2e/journeys.rs", j.name, j.at);
    }
    // Documents run at the same time: a port in 23000-23999 written in
    // two documents' recipes could meet itself.
    let mut owner: std::collections::BTreeMap<u32, (&str, &str)> = Default::default();
    for (file, j) in &all {
        for port in ports_in(&j.script) {
            if let Some((other_file, other)) = owner.insert(port, (file.as_str(), j.name.as_str())) {
                assert!(
                    other_file == file,
                    "port {port} is used by journey {other} ({other_file}) and {} ({}): documents run side by side; give one another port",
                    j.name,
                    j.at
                );
            }
        }
    }
    assert!(owner.len() >= 20, "the journeys' ports were not found: {owner:?}");
}

/// The numbers 23000-23999 written in a script (the journeys' ports).
fn ports_in(script: &str) -> Vec<u32> {
    script.split(|c: char| !c.is_ascii_digit()).filter(|w| w.len() == 5).filter_map(|w| w.parse().ok()).filter(|p| (23000..24000).contains(p)).collect()
}

#[test]
fn journey_blocks_are_read_as_the_contract_says() {
    let doc = "# Doc\n\n<!-- journey: one -->\n```sh\necho hi\necho there\n```\n<!-- expect: hi -->\n\n<!-- expect: there -->\nprose\n\n```sh\nnot a journey\n```\n<!-- journey: two -->\n```sh\ntrue\n```\n";
    let got = parse("d.md", doc).unwrap();
    assert_eq!(
        got,
        [
            Journey { name: "one".into(), at: "d.md:3".into(), script: "echo hi\necho there\n".into(), expect: vec!["hi".into(), "there".into()] },
            Journey { name: "two".into(), at: "d.md:16".into(), script: "true\n".into(), expect: vec![] },
        ]
    );
    for (bad, says) in [
        ("<!-- journey: x -->\n\n```sh\ntrue\n```\n", "must be followed on the next line by a ```sh block"),
        ("<!-- journey: x -->\n```bash\ntrue\n```\n", "must be followed on the next line by a ```sh block"),
        ("<!-- journey: x -->\n```sh\ntrue\n", "never closed"),
        ("text\n<!-- expect: y -->\n", "follows no journey block"),
        ("<!-- journey: x -->\n```sh\ntrue\n```\n<!-- journey: x -->\n```sh\ntrue\n```\n", "a second journey named x"),
        ("<!-- journey: two words -->\n```sh\ntrue\n```\n", "one-word name"),
    ] {
        let e = parse("d.md", bad).expect_err(bad);
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

#[test]
fn a_journey_fails_on_its_exit_status_and_on_missing_output() {
    let j = |script: &str, expect: &[&str]| Journey {
        name: "probe".into(),
        at: "test".into(),
        script: script.into(),
        expect: expect.iter().map(|e| e.to_string()).collect(),
    };
    // megaconn is on the PATH, and both streams count.
    assert!(run_journey(&j("megaconn --version\necho to-stderr >&2\n", &["megaconn", "to-stderr"])).is_ok());
    let e = run_journey(&j("echo one\nfalse\necho never\n", &["one"])).unwrap_err();
    assert!(e.contains("exited with exit status: 1") && e.contains("one"), "{e}");
    let e = run_journey(&j("echo one\n", &["two"])).unwrap_err();
    assert!(e.contains("did not print [\"two\"]"), "{e}");
    // pipefail: a failure inside a pipe is a failure.
    assert!(run_journey(&j("false | cat\n", &[])).is_err());
    // Whatever the recipe leaves running is killed with its group.
    let pidfile = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("journey-left-{}", std::process::id()));
    let script = format!("sleep 300 &\necho $! > {}\n", pidfile.display());
    assert!(run_journey(&j(&script, &[])).is_ok());
    let left: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let _ = std::fs::remove_file(&pidfile);
    // The sleep was a child of the recipe's bash; once killed it is reaped
    // by init, so its /proc entry goes (a zombie would say "Z").
    crate::common::wait_until("the recipe's background sleep killed", Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{left}/stat")).map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
    });
}
