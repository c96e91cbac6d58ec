//! `megaconn server` configured as a service: `--config FILE` (TOML, in
//! sections), a variable for every option, a flag above both, the
//! effective configuration printed and read back, checked without
//! starting; bad files named by file, line and key.
use crate::common::{free_port, megaconn, run, Running};
use std::io::{Read, Write};
use std::time::Duration;

/// A file in a fresh temporary directory (removed with it).
struct Conf {
    dir: std::path::PathBuf,
    path: String,
}

impl Conf {
    fn new(name: &str, text: &str) -> Conf {
        let dir = std::env::temp_dir().join(format!("megaconn-settings-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.toml");
        std::fs::write(&path, text).unwrap();
        Conf { path: path.display().to_string(), dir }
    }
}

impl Drop for Conf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `megaconn server ARGS --print-config` with `env`: the printed file.
fn printed(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = megaconn();
    cmd.arg("server").args(args).arg("--print-config");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 0, "--print-config: {err}");
    out
}

/// The line of `key` in a printed configuration.
fn line<'a>(printed: &'a str, key: &str) -> &'a str {
    printed.lines().find(|l| l.starts_with(&format!("{key} = "))).unwrap_or_else(|| panic!("no `{key} = ` line in:\n{printed}"))
}

/// A flag comes before its variable, the variable before the file, the
/// file before the default, for options of every kind (a count, a
/// duration, a list, a switch, an enum); each printed with its source.
#[test]
fn a_flag_beats_its_variable_which_beats_the_file_which_beats_the_default() {
    let conf = Conf::new(
        "precedence",
        "[limits]\nmax_connections = 100\nmax_topics = 500\n\n[output]\nstats_interval = \"5s\"\njson = true\n\n[auth]\nadmin_topics = [\"ops/*\", \"sys/*\"]\n\n[websocket]\nws_deflate = \"off\"\n",
    );
    let only_file = printed(&["--config", &conf.path], &[]);
    assert_eq!(line(&only_file, "max_connections"), format!("max_connections = 100  # {}:2", conf.path));
    assert_eq!(line(&only_file, "stats_interval"), format!("stats_interval = \"5s\"  # {}:6", conf.path));
    assert_eq!(line(&only_file, "json"), format!("json = true  # {}:7", conf.path));
    assert_eq!(line(&only_file, "admin_topics"), format!("admin_topics = [\"ops/*\", \"sys/*\"]  # {}:10", conf.path));
    assert_eq!(line(&only_file, "ws_deflate"), format!("ws_deflate = \"off\"  # {}:13", conf.path));
    assert_eq!(line(&only_file, "history"), "history = 100  # default");
    let env = [("MEGACONN_SERVER_MAX_CONNECTIONS", "200"), ("MEGACONN_SERVER_STATS_INTERVAL", "7s"), ("MEGACONN_SERVER_WS_DEFLATE", "takeover")];
    let with_env = printed(&["--config", &conf.path], &env);
    assert_eq!(line(&with_env, "max_connections"), "max_connections = 200  # environment");
    assert_eq!(line(&with_env, "stats_interval"), "stats_interval = \"7s\"  # environment");
    assert_eq!(line(&with_env, "ws_deflate"), "ws_deflate = \"takeover\"  # environment");
    assert_eq!(line(&with_env, "max_topics"), format!("max_topics = 500  # {}:3", conf.path));
    let with_flag = printed(&["--config", &conf.path, "--max-connections", "300", "--admin-topics", "x/*"], &env);
    assert_eq!(line(&with_flag, "max_connections"), "max_connections = 300  # flag");
    assert_eq!(line(&with_flag, "admin_topics"), "admin_topics = [\"x/*\"]  # flag");
    assert_eq!(line(&with_flag, "stats_interval"), "stats_interval = \"7s\"  # environment");
}

/// What `--print-config` prints, `--config` reads back to the same
/// configuration (through stdin), and `--check-config` accepts it.
#[test]
fn the_printed_configuration_reads_back_unchanged_and_checks() {
    let first = printed(&["--protocol", "mqtt", "--ports", "18830", "--mqtt-queue", "50", "--history-ttl", "90s"], &[]);
    let values =
        |p: &str| p.lines().filter(|l| !l.starts_with('#') && l.contains(" = ")).map(|l| l.split("  # ").next().unwrap().to_string()).collect::<Vec<_>>();
    let read_back = |args: &[&str]| {
        let mut cmd = megaconn();
        cmd.arg("server")
            .args(args)
            .args(["--config", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(first.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, again, err) = read_back(&["--print-config"]);
    assert_eq!(code, 0, "{err}");
    assert!(values(&first).len() > 50, "every option with a value is printed: {first}");
    assert_eq!(values(&again), values(&first), "read back unchanged");
    assert!(line(&again, "mqtt_queue").contains("  # -:"), "{again}");
    let (code, out, err) = read_back(&["--check-config"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("the configuration is valid: mqtt 18830 on 127.0.0.1 (1 ports)"), "{out}");
}

/// A mistyped key, a key in another section, a list where one value
/// goes, a value out of range, an unknown section and a file that is not
/// TOML: each is a usage error (exit 2) naming the file, the line and the
/// key, with the fix.
#[test]
fn bad_files_are_refused_naming_file_line_and_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("typo", "[limits]\n\nmax_conections = 5\n", ":3: unknown key `max_conections` in [limits]; did you mean `max_connections` (in [limits])?"),
        ("section", "[tls]\nmax_connections = 5\n", ":2: `max_connections` belongs in [limits], not [tls]"),
        ("list", "[limits]\nmax_connections = [1, 2]\n", ":2: `max_connections` takes one value, not a list"),
        ("range", "[limits]\nmax_topics = 0\n", ":2: invalid value '0' for '--max-topics <MAX_TOPICS>'"),
        ("unknown_section", "[limit]\nmax_topics = 5\n", ":1: unknown section [limit]; the sections are listen, workers, limits"),
        ("not_toml", "[limits\nmax_topics = 5\n", ":1: not TOML"),
        ("type", "[output]\njson = \"maybe\"\n", ":2: invalid value 'maybe' for '--json'"),
    ];
    for (name, text, expected) in cases {
        let conf = Conf::new(name, text);
        let mut cmd = megaconn();
        cmd.args(["server", "--config", &conf.path, "--check-config"]);
        let (code, out, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(&format!("{}{expected}", conf.path)), "{name}: expected `{}{expected}` in: {err}", conf.path);
    }
    let mut cmd = megaconn();
    cmd.args(["server", "--config", "/nonexistent/server.toml"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--config /nonexistent/server.toml: cannot read it: No such file or directory"), "{err}");
}

/// `--check-config` runs the checks of a start: a plan that cannot work
/// is refused with its reason, before anything listens.
#[test]
fn check_config_refuses_what_the_server_would_refuse() {
    let conf = Conf::new("plan", "[limits]\nmax_pending_bytes = \"4KiB\"\nmax_push_bytes = \"64KiB\"\n");
    let mut cmd = megaconn();
    cmd.args(["server", "--config", &conf.path, "--check-config"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("--max-pending-bytes 4096 is below --max-push-bytes 65536"), "{err}");
}

/// A server started from a file alone serves as the file says: its
/// protocol on its port, echoing what it is sent.
#[test]
fn a_server_runs_from_its_file() {
    let port = free_port();
    let conf = Conf::new("run", &format!("[listen]\nprotocol = \"echo\"\nports = \"{port}\"\n\n[admin]\nadmin = \"127.0.0.1:0\"\n\n[output]\njson = true\nstats_interval = \"200ms\"\n\n[lifecycle]\nduration = \"60s\"\ndrain_period = \"0s\"\n"));
    let mut cmd = megaconn();
    cmd.args(["server", "--config", &conf.path]);
    let mut s = Running::spawn(cmd);
    s.wait_for(Duration::from_secs(20), "server ready", |v| v["event"] == "ready");
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"from the file").unwrap();
    let mut back = [0u8; 13];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"from the file");
    assert!(s.terminate().success());
}

/// `--help` groups the options under their sections' headings.
#[test]
fn help_groups_options_by_concern() {
    let mut cmd = megaconn();
    cmd.args(["server", "--help"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let headings: Vec<&str> = out.lines().filter(|l| l.ends_with(':') && !l.starts_with(' ')).collect();
    for h in ["Listen:", "Workers:", "Limits:", "TLS:", "Authentication:", "MQTT:", "Cluster:", "Configuration:"] {
        assert!(headings.contains(&h), "{h} in {headings:?}");
    }
    assert!(out.contains("[env: MEGACONN_SERVER_MAX_CONNECTIONS=]"), "every option names its variable");
}
