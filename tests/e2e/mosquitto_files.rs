//! mosquitto's own files, unchanged (issue 65): a password file made by
//! Debian's `mosquitto_passwd` (`$7$` and `$6$` hashes) and an ACL file
//! with anonymous rules, user blocks, deny rules and `%u`/`%c` patterns.
//! Debian's mosquitto and megaconn run on the same two files and the same
//! paho-mqtt probe (tests/peers/mosquitto_files.py) must see the same
//! logins, the same deliveries and the same refusals from both — and
//! what the files say, written out here by hand. Then what mosquitto has
//! no word for here: SIGHUP reads the files again (a removed user's
//! connection closed, a broken file refused and the old one kept), and a
//! bad file stops the start, naming its line.
use crate::common::*;
use crate::mqtt::{count, mqtt_server, stats_when};
use crate::mqtt_client::Mosquitto;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The ACL of the comparison: what anonymous clients, alice and bob may
/// do, root everything, and patterns for a client's own topics.
const ACL: &str = "# anonymous clients
topic read public/#
topic write anon/in

user root
topic readwrite #

user alice
topic readwrite home/#
topic deny home/secret
topic write alerts

user bob
topic read home/kitchen

pattern readwrite sync/%c
pattern read devices/%c/cmd
pattern write devices/%c/state
pattern readwrite users/%u/#
";

/// A fresh directory with `passwd` (made by Debian's mosquitto_passwd:
/// PBKDF2 for alice, bob and root, SHA-512 for legacy) and `acl`.
fn files(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("megaconn-mosquitto-files-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let passwd = dir.join("passwd");
    for (i, (user, pw, hash)) in
        [("alice", "apw", "sha512-pbkdf2"), ("bob", "bpw", "sha512-pbkdf2"), ("root", "rpw", "sha512-pbkdf2"), ("legacy", "lpw", "sha512")]
            .into_iter()
            .enumerate()
    {
        let mut cmd = Command::new("mosquitto_passwd");
        cmd.args(["-H", hash]);
        if i == 0 {
            cmd.arg("-c");
        }
        cmd.arg("-b").arg(&passwd).args([user, pw]);
        Peer::spawn("mosquitto_passwd", cmd).finish_ok(Duration::from_secs(30));
    }
    let text = std::fs::read_to_string(&passwd).unwrap();
    assert!(text.contains("alice:$7$") && text.contains("legacy:$6$"), "mosquitto_passwd wrote both kinds: {text}");
    let acl = dir.join("acl");
    std::fs::write(&acl, ACL).unwrap();
    (dir, passwd, acl)
}

/// What tests/peers/mosquitto_files.py saw on the broker at `port`.
fn probe(port: u16) -> Value {
    let mut py = Command::new("python3");
    py.arg(peer("mosquitto_files.py")).arg(port.to_string());
    let out = Peer::spawn("mosquitto_files.py", py).finish_ok(Duration::from_secs(120));
    serde_json::from_str(out.last().expect("one JSON line")).expect("the probe prints JSON")
}

/// What the files say, by hand: logins (not authorized for a wrong
/// password and an unknown user: 5.0 0x87, and 3.1.1's code 5, which
/// paho reports as the same 135), and
/// what each subscriber of '#' hears ('topic<-publisher').
fn expected() -> Value {
    let root_all: Vec<String> = [
        "alerts",
        "anon/in",
        "devices/a1/cmd",
        "devices/a1/state",
        "devices/b1/cmd",
        "devices/n1/cmd",
        "home/kitchen",
        "home/secret",
        "other",
        "public/news",
        "users/alice/x",
        "users/bob/x",
    ]
    .iter()
    .map(|t| format!("{t}<-root"))
    .collect();
    // What root hears: everything anybody may write.
    let mut root = root_all;
    root.extend(
        ["alerts<-alice", "devices/a1/state<-alice", "home/kitchen<-alice", "users/alice/x<-alice", "users/bob/x<-bob", "anon/in<-anon"].map(String::from),
    );
    root.sort();
    json!({
        "logins": {
            "alice 3.1.1": 0, "alice 5.0": 0,
            "alice-wrong 3.1.1": 135, "alice-wrong 5.0": 135,
            "carol 3.1.1": 135, "carol 5.0": 135,
            "legacy 3.1.1": 0, "legacy 5.0": 0,
            "anonymous 3.1.1": 0, "anonymous 5.0": 0,
        },
        "heard": {
            "root": root,
            "alice": ["devices/a1/cmd<-root", "home/kitchen<-alice", "home/kitchen<-root", "users/alice/x<-alice", "users/alice/x<-root"],
            "bob": ["devices/b1/cmd<-root", "home/kitchen<-alice", "home/kitchen<-root", "users/bob/x<-bob", "users/bob/x<-root"],
            "anon": ["devices/n1/cmd<-root", "public/news<-root"],
        },
        "v5_denied": 135,
    })
}

fn arg(p: &Path) -> String {
    p.display().to_string()
}

/// The same files, the same probe: mosquitto and megaconn agree, and
/// both say what the files say. megaconn counts each refusal.
#[test]
fn megaconn_decides_as_mosquitto_does_on_the_same_files() {
    let (dir, passwd, acl) = files("same");
    let mosquitto = Mosquitto::start_with(&format!("password_file {}\nacl_file {}\n", passwd.display(), acl.display()));
    let theirs = probe(mosquitto.port);
    drop(mosquitto);
    // One worker and one shard: the probe's marker comes after what was
    // published before it (as on mosquitto's one thread).
    let (p, a) = (arg(&passwd), arg(&acl));
    let (mut s, admin, port) = mqtt_server(&["--broker-shards", "1", "--mqtt-password-file", &p, "--mqtt-acl-file", &a, "--mqtt-allow-anonymous"]);
    let ours = probe(port);
    assert_eq!(theirs, expected(), "mosquitto on these files");
    assert_eq!(ours, theirs, "megaconn on the same files");
    // Counted by the worker, in its next report: the 2 wrong passwords
    // and 2 unknown users of the logins, the publishes the ACL dropped
    // (every one the probe's clients may not write: 3 x 12 less the 6
    // allowed to alice, bob and the anonymous client, and bob's 5.0
    // one), the deliveries it kept from the subscribers of '#'.
    stats_when(&admin, "the refusals counted", |v| {
        count(v, "auth_refused", "mqtt_bad_password") == 2
            && count(v, "auth_refused", "mqtt_unknown_user") == 2
            && count(v, "mqtt_publish_refused", "mqtt_acl_denied") == 31
            && v["mqtt_acl_read_denied"].as_u64().unwrap_or(0) > 0
    });
    s.terminate();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without `--mqtt-allow-anonymous` (mosquitto 2.0's default) a CONNECT
/// without a user name is refused; SIGHUP reads the files again: a user
/// taken out of the password file is closed (5.0: DISCONNECT 0x98), a
/// new rule holds for the next publish, a broken file is refused and
/// counted, the files before it stay in force.
#[test]
fn sighup_reads_the_files_again_and_a_broken_one_is_refused() {
    let (dir, passwd, acl) = files("reload");
    let (p, a) = (arg(&passwd), arg(&acl));
    let (mut s, admin, port) = mqtt_server(&["--mqtt-password-file", &p, "--mqtt-acl-file", &a]);
    s.wait_for(Duration::from_secs(10), "the files in the log", |v| v["event"] == "mqtt_files");
    let mut py = Command::new("python3");
    py.arg(peer("mosquitto_reload.py")).arg(port.to_string()).arg(&passwd).arg(&acl).stdin(std::process::Stdio::piped());
    let mut reload = Peer::spawn("mosquitto_reload.py", py);
    let mut tell = reload.stdin();
    // The probe says when to send SIGHUP (after each change of the files).
    for step in ["bob removed", "bob back, alice may write other", "broken"] {
        assert_eq!(reload.line(Duration::from_secs(60), step), format!("HUP {step}"));
        // SAFETY: signalling our own child (the server) by PID.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
        let event = if step == "broken" { "mqtt_files_reload_failed" } else { "mqtt_files_reloaded" };
        let v = s.wait_for(Duration::from_secs(10), step, |v| v["event"] == event);
        if step == "broken" {
            assert!(v["message"].as_str().unwrap().contains("line 1"), "{v}");
        }
        use std::io::Write;
        writeln!(tell, "done").unwrap();
    }
    assert_eq!(reload.finish_ok(Duration::from_secs(60)), ["OK"]);
    // The supervisor counts the reloads, the worker its closes and
    // refusals (its next report).
    stats_when(&admin, "the reloads, the close and the refusal counted", |v| {
        v["mqtt_sessions"]["files_reloaded"] == 2
            && v["mqtt_sessions"]["files_refused"] == 1
            && count(v, "close_reasons", "mqtt_user_removed") == 1
            && count(v, "auth_refused", "mqtt_anonymous_refused") >= 1
    });
    s.terminate();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A password file with a plain password and an ACL file with an unknown
/// word stop the start (exit 2), naming the flag, the file, the line and
/// the fix; the files with --auth jwt are refused too.
#[test]
fn a_bad_file_stops_the_start_naming_its_line() {
    let (dir, passwd, acl) = files("bad");
    std::fs::write(&passwd, "alice:apw\n").unwrap();
    let port = free_port().to_string();
    let (code, _, err) = run_server(&["--protocol", "mqtt", "--ports", &port, "--mqtt-password-file", &arg(&passwd)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mqtt-password-file") && err.contains("line 1 (user 'alice')") && err.contains("mosquitto_passwd"), "{err}");
    std::fs::write(&acl, "user alice\ntopic maybe home/#\n").unwrap();
    let (code, _, err) = run_server(&["--protocol", "mqtt", "--ports", &port, "--mqtt-acl-file", &arg(&acl)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mqtt-acl-file") && err.contains("line 2: 'maybe' is not read, write, readwrite or deny"), "{err}");
    let (code, _, err) = run_server(&["--protocol", "ws", "--ports", &port, "--mqtt-acl-file", &arg(&passwd)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mqtt-acl-file"), "{err}");
    let (code, _, err) = run_server(&["--protocol", "framed", "--ports", &port, "--mqtt-acl-file", &arg(&acl)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("serves none"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `megaconn server ARGS --check-config`: its exit code and output.
fn run_server(args: &[&str]) -> (i32, String, String) {
    let mut cmd = megaconn();
    cmd.arg("server").args(args).arg("--check-config");
    run(cmd, Duration::from_secs(30))
}

/// An anonymous MQTT 3.1.1 CONNECT's return code.
fn anonymous_connack(port: u16, id: &str) -> u8 {
    use std::io::Write;
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(&crate::common::mqtt_raw::connect_packet(4, id, true, &[])).unwrap();
    let (kind, body) = crate::common::mqtt_raw::packet(&mut c);
    assert_eq!((kind, body.len()), (0x20, 2), "a CONNACK");
    body[1]
}

/// SIGHUP reads `--config` again: a run-time option (here
/// mqtt_allow_anonymous) takes the file's new value, a limit that only a
/// start sets (max_topics) is named as needing a restart, an option a flag sets keeps the flag's value; a
/// broken file is refused naming its line, the configuration in force
/// stays; each counted in /stats and /metrics.
#[test]
fn sighup_reads_the_config_file_again_and_a_broken_one_is_refused() {
    let (dir, passwd, _) = files("config");
    let conf = dir.join("server.toml");
    let write = |anonymous: bool, max: u32, idle: &str| {
        let text = format!(
            "[limits]\nmax_topics = {max}\nidle_timeout = \"{idle}\"\n\n[mqtt]\nmqtt_password_file = \"{}\"\nmqtt_allow_anonymous = {anonymous}\n",
            passwd.display()
        );
        std::fs::write(&conf, text).unwrap();
    };
    write(false, 100, "120s");
    let (mut s, admin, port) = mqtt_server(&["--config", &arg(&conf), "--idle-timeout", "300s"]);
    assert_eq!(anonymous_connack(port, "anon-1"), 5, "anonymous refused (not authorized)");
    let hup = |s: &Running| {
        // SAFETY: signalling our own child (the server) by PID.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
    };
    write(true, 200, "60s");
    hup(&s);
    let v = s.wait_for(Duration::from_secs(10), "the file read again", |v| v["event"] == "config_reloaded");
    let said = format!(
        "config: {} read again (SIGHUP): applied: mqtt_allow_anonymous; need a restart: max_topics; set by a flag or a variable (kept): idle_timeout",
        conf.display()
    );
    assert_eq!(v["message"], said.as_str(), "{v}");
    s.wait_for(Duration::from_secs(10), "the files taken", |v| v["event"] == "mqtt_files_reloaded");
    assert_eq!(anonymous_connack(port, "anon-2"), 0, "anonymous let in");
    std::fs::write(&conf, "[limits]\nmax_conections = 5\n").unwrap();
    hup(&s);
    let v = s.wait_for(Duration::from_secs(10), "the broken file refused", |v| v["event"] == "config_reload_failed");
    let message = v["message"].as_str().unwrap();
    assert!(message.contains(&format!("{}:2: unknown key `max_conections`", conf.display())) && message.contains("stays"), "{v}");
    assert_eq!(anonymous_connack(port, "anon-3"), 0, "the configuration in force stays");
    stats_when(&admin, "the readings counted", |v| {
        v["config"]["reloaded"] == 1 && v["config"]["refused"] == 1 && v["config"]["applied"] == 1 && v["config"]["need_restart"] == 1
    });
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert!(metrics.contains("megaconn_config_reload_refused_total 1"), "{metrics}");
    s.terminate();
    std::fs::remove_dir_all(&dir).unwrap();
}
