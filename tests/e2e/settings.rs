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

/// `megaconn SUB ARGS --print-config` with only `env` of megaconn's
/// variables (none inherited from the test's own environment): its exit
/// code, the printed file and stderr.
fn print_config(sub: &str, args: &[String], env: &[(String, String)]) -> (i32, String, String) {
    let mut cmd = megaconn();
    cmd.arg(sub).args(args).arg("--print-config");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("MEGACONN_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    run(cmd, Duration::from_secs(20))
}

/// One option as `--print-config` shows it.
struct Printed {
    section: String,
    key: String,
    long: String,
    var: String,
    /// Its value as TOML, if it has one.
    value: Option<String>,
    /// It takes a list.
    list: bool,
}

/// Every option of a printed configuration, in order.
fn options_of(printed: &str) -> Vec<Printed> {
    let (mut section, mut var, mut long, mut out) = (String::new(), String::new(), String::new(), Vec::new());
    for l in printed.lines() {
        if let Some(s) = l.strip_prefix('[') {
            section = s.split(']').next().unwrap().to_string();
        } else if let Some(help) = l.strip_prefix("# --") {
            let (flag, rest) = help.split_once(", $").unwrap_or_else(|| panic!("no variable named in `{l}`"));
            long = flag.to_string();
            var = rest.split(':').next().unwrap().to_string();
        } else if let Some((key, value)) = l.split_once(" = ").filter(|_| !l.starts_with('#')) {
            let value = value.rsplit_once("  # ").unwrap().0.to_string();
            let list = value.starts_with('[');
            out.push(Printed { section: section.clone(), key: key.into(), long: long.clone(), var: var.clone(), value: Some(value), list });
        } else if let Some(key) = l.strip_prefix("# ").and_then(|r| r.strip_suffix(" = (unset)")) {
            out.push(Printed { section: section.clone(), key: key.into(), long: long.clone(), var: var.clone(), value: None, list: false });
        } else if let Some(key) = l.strip_prefix("# ").and_then(|r| r.strip_suffix(" = [] (unset; a list)")) {
            out.push(Printed { section: section.clone(), key: key.into(), long: long.clone(), var: var.clone(), value: None, list: true });
        }
    }
    out
}

/// A printed TOML value as text (a number prints bare, a string quoted).
fn plain(v: &str) -> String {
    if v.starts_with('"') {
        serde_json::from_str(v).unwrap()
    } else {
        v.to_string()
    }
}

/// Files the options that read theirs at parse time accept.
struct Material {
    dir: std::path::PathBuf,
}

impl Material {
    fn new() -> Material {
        let dir = std::env::temp_dir().join(format!("megaconn-settings-{}-material", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut py = std::process::Command::new("python3");
        py.arg(crate::common::peer("jwt_keys.py")).arg("keys").arg(&dir);
        crate::common::Peer::spawn("jwt_keys.py", py).finish_ok(Duration::from_secs(60));
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        std::fs::write(dir.join("nkey"), format!("{seed}\n")).unwrap();
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        std::fs::write(dir.join("creds"), creds).unwrap();
        std::fs::write(dir.join("cluster.key"), [7u8; 32]).unwrap();
        std::fs::write(dir.join("token"), "an-admin-token-of-some-length-123\n").unwrap();
        Material { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Material {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The flags an option with a default needs beside it when given (its
/// variable counts as given, whatever its value).
fn needs(sub: &str, key: &str, m: &Material) -> Vec<String> {
    match (sub, key) {
        ("server", k) if k.starts_with("cluster_") => vec!["--cluster".into(), "nats://127.0.0.1:4222".into()],
        ("server", "mqtt_allow_anonymous") => vec!["--mqtt-password-file".into(), m.path("state")],
        ("server", "presence_events") => vec!["--upstream".into(), "http://127.0.0.1:9/up".into()],
        ("server", "mqtt_auth_http_fail_open") => vec!["--mqtt-auth-http".into(), "http://127.0.0.1:9/auth".into()],
        _ => vec![],
    }
}

/// For an option with no default: a value its flag accepts, and the
/// flags it needs beside it (what it `requires`). An option added later
/// without a default fails the test until it has a line here.
fn sample(sub: &str, key: &str, m: &Material) -> (String, Vec<String>) {
    let file = |n: &str| m.path(n);
    let cluster = || vec!["--cluster".to_string(), "nats://127.0.0.1:4222".into()];
    let (value, with): (String, Vec<String>) = match (sub, key) {
        (_, "ports") => ("23990".into(), vec![]),
        ("server", "protocol") => ("ws".into(), vec![]),
        ("server", "serve") => ("ws=23991".into(), vec![]),
        (_, "connections" | "max_connections" | "max_connections_per_ip") => ("100".into(), vec![]),
        ("server", "tls_cert") => (file("ec.pem"), vec!["--tls-key".into(), file("ec.pem")]),
        ("server", "tls_key") => (file("ec.pem"), vec!["--tls-cert".into(), file("ec.pem")]),
        ("server", "admin_topics") => ("ops/*".into(), vec![]),
        ("server", "jwt_audience" | "jwt_issuer") => ("megaconn".into(), vec!["--auth".into(), "jwt".into(), "--jwt-secret-file".into(), file("secret")]),
        ("server", "jwt_jwks_file") => (file("jwks.json"), vec!["--auth".into(), "jwt".into()]),
        ("server", "jwt_public_key_file") => (file("ec.pub.pem"), vec!["--auth".into(), "jwt".into()]),
        ("server", "jwt_secret_file") => (file("secret"), vec!["--auth".into(), "jwt".into()]),
        ("server", "mqtt_acl_file" | "mqtt_password_file" | "mqtt_retained_file" | "mqtt_sessions_file") => (file("state"), vec![]),
        ("server", "cluster") => ("nats://127.0.0.1:4222".into(), vec![]),
        ("server", "cluster_creds") => (file("creds"), cluster()),
        ("server", "cluster_key_file") => (file("cluster.key"), cluster()),
        ("server", "cluster_nkey_file") => (file("nkey"), cluster()),
        ("server", "cluster_password_file") => (file("secret"), [cluster(), vec!["--cluster-user".into(), "u".into()]].concat()),
        ("server", "cluster_user") => ("u".into(), [cluster(), vec!["--cluster-password-file".into(), file("secret")]].concat()),
        ("server", "cluster_tls_ca") => (file("ec.pem"), cluster()),
        ("server", "cluster_tls_cert") => (file("ec.pem"), [cluster(), vec!["--cluster-tls-key".into(), file("ec.pem")]].concat()),
        ("server", "cluster_tls_key") => (file("ec.pem"), [cluster(), vec!["--cluster-tls-cert".into(), file("ec.pem")]].concat()),
        ("server", "cluster_token_file") => (file("secret"), cluster()),
        ("server", "node_id") => ("n1".into(), cluster()),
        ("server", "admin_token") => ("an-admin-token-of-some-length-123".into(), vec![]),
        ("server", "admin_token_file") => (file("token"), vec![]),
        ("server", "upstream") => ("http://127.0.0.1:9/up".into(), vec![]),
        ("server", "mqtt_auth_http") => ("http://127.0.0.1:9/auth".into(), vec![]),
        ("server", "mqtt_authz_http") => ("http://127.0.0.1:9/authz".into(), vec![]),
        ("server", "upstream_secret_file") => (file("secret"), vec!["--upstream".into(), "http://127.0.0.1:9/up".into()]),
        ("server", "upstream_nats_creds") => (file("creds"), vec!["--upstream".into(), "nats://127.0.0.1:9/up".into()]),
        ("client", "header") => ("X-Test: 1".into(), vec!["--protocol".into(), "ws".into()]),
        ("client", "jwt_secret_file") => (file("secret"), vec![]),
        ("client", "origin") => ("http://example.test".into(), vec![]),
        (_, "source_ips") => ("127.0.0.2-127.0.0.9".into(), vec![]),
        ("client", "url") => ("ws://127.0.0.1:23990/".into(), vec![]),
        (_, "hold") => ("5s".into(), vec![]),
        (_, "rate") => ("1000/s".into(), vec![]),
        ("client", "reconnect_to") => ("127.0.0.2".into(), vec!["--reconnect".into()]),
        ("client", "requests_per_connection") => ("10".into(), vec!["--request-rate".into(), "1/s".into()]),
        (_, "stages") => ("1s:10,1s:0".into(), vec![]),
        ("client", "until_pushes") => ("10".into(), vec![]),
        ("client", "codec") => ("len:4".into(), vec!["--protocol".into(), "raw".into(), "--message".into(), "x".into()]),
        ("client", "first_message") => ("hello".into(), vec!["--protocol".into(), "raw".into(), "--message".into(), "x".into()]),
        ("client", "message") => ("hello".into(), vec!["--protocol".into(), "raw".into()]),
        ("client", "subscribe") => ("news".into(), vec![]),
        ("client", "ws_subprotocol") => ("mqtt".into(), vec!["--protocol".into(), "ws".into()]),
        ("client", "mqtt_password") => ("pw".into(), vec!["--protocol".into(), "mqtt".into()]),
        ("client", "mqtt_subscribe") => ("a/#".into(), vec!["--protocol".into(), "mqtt".into()]),
        ("client", "mqtt_topic_alias_maximum") => ("8".into(), vec!["--protocol".into(), "mqtt".into()]),
        ("client", "mqtt_username") => ("user".into(), vec!["--protocol".into(), "mqtt".into()]),
        ("client", "tls_ca") => (file("ec.pem"), vec![]),
        ("client", "tls_resume") => ("never".into(), vec![]),
        ("client", "tls_server_name") => ("example.test".into(), vec![]),
        ("client", "tls_versions") => ("1.3".into(), vec![]),
        ("client", "shard") => ("0/2".into(), vec![]),
        ("client", "start_at") => ("2030-01-01T00:00:00Z".into(), vec![]),
        (_, "junit") => (file("junit.xml"), vec![]),
        (_, "threshold") => ("handshake.p99<1000".into(), vec![]),
        (_, "threshold_abort") => ("handshake.p99<1000".into(), vec![]),
        (_, "hdr_log" | "report" | "summary_json") => (file("out"), vec![]),
        ("bench", "broadcast_interval") => ("1s".into(), vec!["--scenario".into(), "push".into()]),
        ("bench", "broadcasts") => ("5".into(), vec!["--scenario".into(), "push".into()]),
        ("bench", "workers") => ("2".into(), vec![]),
        ("bench", "cluster") => ("nats".into(), vec![]),
        _ => panic!("`megaconn {sub}`'s `{key}` has no default: give it a sample value here"),
    };
    (value, with)
}

/// Every option of `server`, `client` and `bench`, taken from what
/// `--print-config` lists (clap's own definitions), is set once by its key
/// in a file and once by its variable, each in a process of its own:
/// printed back with that value and that source. An option with a default
/// is given its default, one without a value its flag accepts.
#[test]
fn every_option_is_set_by_its_file_key_and_by_its_variable() {
    let m = Material::new();
    for sub in ["server", "client", "bench"] {
        // The client needs a count of connections unless the option is one
        // that stands instead of it.
        let base = |key: &str| -> Vec<String> {
            if sub == "client" && !["connections", "stages"].contains(&key) {
                vec!["--connections".into(), "5".into()]
            } else {
                vec![]
            }
        };
        let (code, defaults, err) = print_config(sub, &base(""), &[]);
        assert_eq!(code, 0, "{sub}: {err}");
        let options = options_of(&defaults);
        assert!(options.len() > 30, "{sub}: {} options in {defaults}", options.len());
        let mut checked = 0;
        for o in &options {
            if sub == "client" && o.key == "connections" {
                continue; // Given by the base arguments: covered by the server's and bench's.
            }
            let (toml, raw, with) = match &o.value {
                // A switch is turned on (off, it is what it is unset).
                Some(v) if v == "false" => ("true".to_string(), "true".to_string(), needs(sub, &o.key, &m)),
                Some(v) => {
                    let raw = if v.starts_with('"') { serde_json::from_str::<String>(v).unwrap() } else { v.clone() };
                    (v.clone(), raw, needs(sub, &o.key, &m))
                }
                None => {
                    let (value, with) = sample(sub, &o.key, &m);
                    (serde_json::to_string(&value).unwrap(), value, with)
                }
            };
            // A list's value (lists print as lists) is one string here.
            let toml = if o.list && !toml.starts_with('[') { format!("[{toml}]") } else { toml };
            let raw = if let Some(list) = raw.strip_prefix('[') {
                serde_json::from_str::<Vec<String>>(&format!("[{list}")).map(|l| l.join(",")).unwrap_or(raw)
            } else {
                raw
            };
            let args = [base(&o.key), with].concat();
            let conf = Conf::new(&format!("{sub}-{}", o.key), &format!("[{}]\n{} = {toml}\n", o.section, o.key));
            let (code, by_file, err) = print_config(sub, &[args.clone(), vec!["--config".into(), conf.path.clone()]].concat(), &[]);
            assert_eq!(code, 0, "{sub} {} = {toml} by file: {err}", o.key);
            let (code, by_var, err) = print_config(sub, &args, &[(o.var.clone(), raw.clone())]);
            assert_eq!(code, 0, "{sub} ${}={raw}: {err}", o.var);
            let secret = |p: &str, source: &str| p.contains(&format!("# {} = (set by {source}, not shown", o.key));
            if !secret(&by_file, &format!("{}:2", conf.path)) {
                let shown = line(&by_file, &o.key).strip_prefix(&format!("{} = ", o.key)).unwrap();
                let (value, source) = shown.rsplit_once("  # ").unwrap();
                assert_eq!((plain(value), source), (plain(&toml), format!("{}:2", conf.path).as_str()), "{sub} --{} by file", o.long);
            }
            if !secret(&by_var, "environment") {
                let shown = line(&by_var, &o.key);
                assert!(shown.ends_with("  # environment"), "{sub} --{} by ${}: {shown}", o.long, o.var);
            }
            checked += 1;
        }
        assert!(checked + 1 >= options.len(), "{sub}: {checked} of {}", options.len());
    }
}

/// `client` and `bench` take a file and variables as `server` does, and
/// a value the file gives counts as given: the client's required count of
/// connections, and (server) a certificate by variable beside its key
/// in the file.
#[test]
fn client_and_bench_read_files_and_a_files_value_counts_as_given() {
    let conf = Conf::new("client", "[load]\nconnections = 7\nrate = \"100/s\"\n\n[target]\nports = \"23995\"\n");
    let (code, out, err) = print_config("client", &["--config".into(), conf.path.clone()], &[("MEGACONN_CLIENT_RATE".into(), "200/s".into())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "connections"), format!("connections = 7  # {}:2", conf.path));
    assert_eq!(line(&out, "rate"), "rate = \"200/s\"  # environment");
    let (code, out, err) =
        print_config("client", &["--config".into(), conf.path.clone(), "--rate".into(), "300/s".into()], &[("MEGACONN_CLIENT_RATE".into(), "200/s".into())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "rate"), "rate = \"300/s\"  # flag");
    let bench = Conf::new("bench", "[load]\nconnections = 2000\nhold = \"3s\"\n\n[protocol]\nprotocol = \"ws\"\n");
    let mut cmd = megaconn();
    cmd.args(["bench", "--config", &bench.path, "--check-config"]);
    let (code, out, err) = run(cmd, Duration::from_secs(20));
    assert_eq!((code, out.trim()), (0, "the configuration is valid: it plans on this machine (--dry-run shows the plan)"), "{err}");
    let bad = Conf::new("bench-bad", "[load]\nconections = 5\n");
    let mut cmd = megaconn();
    cmd.args(["bench", "--config", &bad.path]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{}:2: unknown key `conections` in [load]; did you mean `connections` (in [load])?", bad.path)), "{err}");
    let tls = Conf::new("tls", "[tls]\ntls_key = \"/etc/megaconn/key.pem\"\n");
    let (code, out, err) =
        print_config("server", &["--config".into(), tls.path.clone()], &[("MEGACONN_SERVER_TLS_CERT".into(), "/etc/megaconn/cert.pem".into())]);
    assert_eq!(code, 0, "a variable's certificate beside the file's key: {err}");
    assert_eq!(line(&out, "tls_cert"), "tls_cert = \"/etc/megaconn/cert.pem\"  # environment");
}

/// `-h` is one screen: every option by name under its section, the
/// long form one `--help` away.
#[test]
fn short_help_fits_a_screen_and_names_every_option() {
    for sub in ["server", "client", "bench"] {
        let mut cmd = megaconn();
        cmd.args([sub, "-h"]);
        let (code, out, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 0, "{err}");
        assert!(out.lines().count() <= 45, "{sub} -h is {} lines:\n{out}", out.lines().count());
        assert!(out.contains(&format!("megaconn {sub} --help")), "{out}");
        let (_, printed, _) = print_config(sub, &["--connections".into(), "5".into()], &[]);
        for o in options_of(&printed) {
            assert!(out.split_whitespace().any(|w| w == format!("--{}", o.long)), "{sub} -h lacks --{}:\n{out}", o.long);
        }
    }
}
