//! Every option of `megaconn server` from four places, in this order of
//! precedence: its flag, its environment variable, the `--config` file,
//! its default. One definition: the clap argument. Its long name gives
//! the file key (`--max-connections`: `max_connections`) and the variable
//! (`MEGACONN_SERVER_MAX_CONNECTIONS`; the two older ones,
//! `MEGACONN_ADMIN_TOKEN` and `MEGACONN_IO`, stay); [`section_of`] gives
//! both its section in the file and its heading in `--help`. A file's
//! values become the arguments' defaults, so clap itself puts a variable
//! and a flag above them, and parses and checks them as it does flags.
//!
//! `--print-config` writes the effective configuration as a commented TOML
//! file that `--config` reads back unchanged; `--check-config` runs the
//! checks `server` makes before it starts and prints its plan.

use super::{Cli, Cmd};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};
use std::collections::BTreeMap;
use std::ffi::OsString;

/// The subcommands whose options a file and the environment may give.
const CONFIGURED: &[&str] = &["server"];

/// The file's sections in the order `--help` and `--print-config` show
/// them, with their `--help` headings.
const SECTIONS: &[(&str, &str)] = &[
    ("listen", "Listen"),
    ("workers", "Workers"),
    ("limits", "Limits"),
    ("tls", "TLS"),
    ("auth", "Authentication"),
    ("mqtt", "MQTT"),
    ("websocket", "WebSocket"),
    ("history", "History"),
    ("business", "Business stage"),
    ("cluster", "Cluster"),
    ("admin", "Admin API"),
    ("upstream", "Upstream"),
    ("lifecycle", "Drain and lifetime"),
    ("output", "Output"),
];

/// The section of the option `--long`: the one place that groups options.
pub(crate) fn section_of(long: &str) -> &'static str {
    let is = |names: &[&str]| names.contains(&long);
    let starts = |prefix: &str| long.starts_with(prefix);
    if is(&["listen", "ports", "serve", "protocol"]) {
        "listen"
    } else if is(&["workers", "connections", "retire-after", "broker-shards", "io", "io-batch-wait"]) {
        "workers"
    } else if starts("tls-") || long == "handshake-timeout" {
        "tls"
    } else if is(&["auth", "admin-topics"]) || starts("jwt-") {
        "auth"
    } else if starts("mqtt-") || long == "sys-interval" {
        "mqtt"
    } else if starts("ws-") || long == "push-format" {
        "websocket"
    } else if starts("history") {
        "history"
    } else if is(&["business", "queue", "service-time", "body-size"]) {
        "business"
    } else if starts("cluster") || long == "node-id" {
        "cluster"
    } else if starts("admin") {
        "admin"
    } else if starts("upstream") || starts("presence-") {
        "upstream"
    } else if is(&["drain-timeout", "drain-period", "duration"]) {
        "lifecycle"
    } else if is(&["stats-interval", "json"]) {
        "output"
    } else {
        "limits"
    }
}

/// The environment variable of `--long` in `sub`.
pub(crate) fn env_name(sub: &str, long: &str) -> String {
    format!("MEGACONN_{}_{}", sub.to_uppercase(), long.to_uppercase().replace('-', "_"))
}

/// Ids of the arguments this module adds, and of clap's own.
const OWN: &[&str] = &["config", "print_config", "check_config", "help", "version"];

/// A subcommand's options as the file knows them, by key.
fn options(sub: &Command) -> BTreeMap<String, &clap::Arg> {
    sub.get_arguments().filter(|a| !OWN.contains(&a.get_id().as_str())).filter_map(|a| a.get_long().map(|l| (l.replace('-', "_"), a))).collect()
}

/// Whether an option takes several values (given more than once, or
/// split at a delimiter): a list in the file.
fn takes_many(arg: &clap::Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append) || arg.get_value_delimiter().is_some()
}

/// `sub` with every option's variable and heading, and the three
/// options of this module.
fn decorate(sub: Command) -> Command {
    let name = sub.get_name().to_string();
    let heading = |long: &str| SECTIONS.iter().find(|(s, _)| *s == section_of(long)).map_or("Options", |(_, h)| *h);
    sub.mut_args(|a| match a.get_long().map(str::to_string) {
        Some(long) if !OWN.contains(&a.get_id().as_str()) => {
            let a = a.help_heading(heading(&long));
            if a.get_env().is_some() {
                a
            } else {
                a.env(env_name(&name, &long))
            }
        }
        _ => a,
    })
    .next_help_heading("Configuration")
    .arg(
        clap::Arg::new("config")
            .long("config")
            .value_name("FILE")
            .help("Read options from this TOML file (- for stdin): sections as in --print-config; a flag and a variable come first (docs/server.md)"),
    )
    .arg(
        clap::Arg::new("print_config")
            .long("print-config")
            .action(ArgAction::SetTrue)
            .help("Print the effective configuration as a TOML file (every option, its value and where it came from) and exit"),
    )
    .arg(
        clap::Arg::new("check_config")
            .long("check-config")
            .action(ArgAction::SetTrue)
            .conflicts_with("print_config")
            .help("Check the configuration and the plan it gives without starting; exit 0 if it would start, 2 if not"),
    )
}

/// Where a value came from, as `--print-config` says.
fn source_name(m: &ArgMatches, id: &str, file: &FileValues) -> String {
    match (m.value_source(id), file.values.get(id)) {
        (Some(ValueSource::CommandLine), _) => "flag".into(),
        (Some(ValueSource::EnvVariable), _) => "environment".into(),
        (Some(ValueSource::DefaultValue), Some((_, line))) => format!("{}:{line}", file.name),
        _ => "default".into(),
    }
}

/// The values a file gives, by arg id, with the line each is on.
#[derive(Default)]
struct FileValues {
    name: String,
    values: BTreeMap<String, (Vec<String>, usize)>,
}

/// The line (from 1) a span of `text` starts on; 0 when unknown.
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    span.map_or(0, |r| text[..r.start.min(text.len())].matches('\n').count() + 1)
}

/// Read `path` (`-`: stdin) as a configuration of `sub`.
fn read_file(path: &str, sub: &Command) -> Result<FileValues, String> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| format!("--config -: cannot read stdin: {e}"))?
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("--config {path}: cannot read it: {e} (give a readable TOML file, or - for stdin)"))?
    };
    let doc = toml_edit::Document::parse(text.as_str()).map_err(|e| format!("{path}:{}: not TOML: {}", line_of(&text, e.span()), e.message()))?;
    let known = options(sub);
    let mut out = FileValues { name: path.to_string(), values: BTreeMap::new() };
    let mut take = |section: Option<&str>, key: &toml_edit::Key, item: &toml_edit::Item| -> Result<(), String> {
        let line = line_of(&text, key.span());
        let here = format!("{path}:{line}");
        let Some(arg) = known.get(key.get()) else {
            let near = known.keys().map(|k| (strsim::levenshtein(k, key.get()), k)).min().filter(|(d, _)| *d <= 3).map(|(_, k)| k);
            let hint = match near {
                Some(k) => format!("did you mean `{k}` (in [{}])?", section_of(&k.replace('_', "-"))),
                None => format!("`megaconn {} --print-config` lists every key", sub.get_name()),
            };
            return Err(format!("{here}: unknown key `{}`{}; {hint}", key.get(), section.map(|s| format!(" in [{s}]")).unwrap_or_default()));
        };
        let (id, long) = (arg.get_id().to_string(), arg.get_long().unwrap_or_default());
        let belongs = section_of(long);
        if section.is_some_and(|s| s != belongs) {
            return Err(format!("{here}: `{}` belongs in [{belongs}], not [{}]", key.get(), section.unwrap_or_default()));
        }
        let many = takes_many(arg);
        let scalar = |v: &toml_edit::Value| -> Result<String, String> {
            match v {
                toml_edit::Value::String(s) => Ok(s.value().clone()),
                toml_edit::Value::Integer(i) => Ok(i.value().to_string()),
                toml_edit::Value::Float(f) => Ok(f.value().to_string()),
                toml_edit::Value::Boolean(b) => Ok(b.value().to_string()),
                _ => Err(format!("{here}: `{}` takes a string, a number or true/false (as --{long} does)", key.get())),
            }
        };
        let values = match item.as_value() {
            Some(toml_edit::Value::Array(a)) if many => a.iter().map(scalar).collect::<Result<Vec<_>, _>>()?,
            Some(toml_edit::Value::Array(_)) => return Err(format!("{here}: `{}` takes one value, not a list (--{long} is given once)", key.get())),
            Some(v) => vec![scalar(v)?],
            None => return Err(format!("{here}: `{}` takes a value, not a table", key.get())),
        };
        out.values.insert(id, (values, line));
        Ok(())
    };
    for (k, item) in doc.iter() {
        let (key, _) = doc.get_key_value(k).expect("iterated");
        match item {
            toml_edit::Item::Table(t) => {
                let here = format!("{path}:{}", line_of(&text, key.span()));
                if !SECTIONS.iter().any(|(s, _)| *s == k) {
                    let list: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
                    return Err(format!("{here}: unknown section [{k}]; the sections are {}", list.join(", ")));
                }
                for (k2, item2) in t.iter() {
                    let (key2, _) = t.get_key_value(k2).expect("iterated");
                    take(Some(k), key2, item2)?;
                }
            }
            _ => take(None, key, item)?,
        }
    }
    Ok(out)
}

/// The value after `--config` in `args`, if any.
fn config_path(args: &[OsString]) -> Option<String> {
    let mut it = args.iter().map(|a| a.to_string_lossy());
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(v.to_string());
        }
        if a == "--config" {
            return it.next().map(|v| v.to_string());
        }
    }
    None
}

/// Fail the way clap fails on a usage error: the message, exit 2.
fn usage_exit(message: &str) -> ! {
    eprintln!("megaconn: error: {message}");
    std::process::exit(2)
}

/// The command line, with `--config` and the environment for the
/// configured subcommands. `--print-config` and `--check-config` end the
/// process here.
pub fn parse_args(args: Vec<OsString>) -> Cli {
    let Some(sub_name) = args.get(1).map(|s| s.to_string_lossy().to_string()).filter(|s| CONFIGURED.contains(&s.as_str())) else {
        return <Cli as clap::Parser>::parse_from(args);
    };
    let mut cmd = Cli::command().mut_subcommand(&sub_name, decorate);
    let file = match config_path(&args[2..]) {
        Some(path) => {
            let sub = cmd.find_subcommand(&sub_name).expect("configured subcommands exist");
            read_file(&path, sub).unwrap_or_else(|e| usage_exit(&e))
        }
        None => FileValues::default(),
    };
    for (id, (values, _)) in &file.values {
        cmd = cmd.mut_subcommand(&sub_name, |s| s.mut_arg(id, |a| a.default_values(values.iter().map(|v| clap::builder::OsStr::from(v.clone())))));
    }
    let matches = cmd.clone().try_get_matches_from(&args).unwrap_or_else(|e| {
        // A value from the file that clap refuses: name the file's line.
        if let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg) {
            let long = arg.trim_start_matches("--").split([' ', '=']).next().unwrap_or_default().to_string();
            let arg = cmd.find_subcommand(&sub_name).and_then(|s| s.get_arguments().find(|a| a.get_long() == Some(long.as_str())));
            let from_env = arg.and_then(|a| a.get_env()).is_some_and(|v| std::env::var_os(v).is_some());
            if let Some((_, line)) = arg.and_then(|a| file.values.get(a.get_id().as_str())).filter(|_| !from_env) {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
                usage_exit(&format!("{}:{line}: {} (the file's `{}`)", file.name, first, long.replace('-', "_")));
            }
        }
        e.exit()
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let m = matches.subcommand_matches(&sub_name).expect("the subcommand parsed");
    if m.get_flag("print_config") {
        let sub = cmd.find_subcommand(&sub_name).expect("configured subcommands exist");
        print!("{}", effective(sub, m, &file));
        std::process::exit(0);
    }
    if m.get_flag("check_config") {
        std::process::exit(check(cli));
    }
    cli
}

/// `--check-config`: the configuration converted and planned as `server`
/// would before starting anything; the exit code.
fn check(cli: Cli) -> i32 {
    let result = match cli.command {
        Cmd::Server(a) => crate::server::config::ServerConfig::try_from(a).map_err(anyhow::Error::from).and_then(|cfg| crate::server::check(&cfg)),
        _ => unreachable!("only configured subcommands get here"),
    };
    match result {
        Ok(plan) => {
            println!("the configuration is valid: {plan}");
            0
        }
        Err(e) => {
            eprintln!("megaconn: error: {e:#}");
            crate::exit_code(&e)
        }
    }
}

/// `v` as a TOML basic string (a JSON string is one: the same escapes).
fn quoted(v: &str) -> String {
    serde_json::to_string(v).expect("a string serializes")
}

/// A value as TOML: a number or a boolean bare, anything else quoted.
fn toml_value(v: &str) -> String {
    if v == "true" || v == "false" || (v.parse::<i64>().is_ok() && !v.starts_with('+') && (v == "0" || !v.starts_with('0'))) {
        v.to_string()
    } else {
        quoted(v)
    }
}

/// The effective configuration of `sub` as a TOML file, commented.
fn effective(sub: &Command, m: &ArgMatches, file: &FileValues) -> String {
    let name = sub.get_name();
    let mut out = format!(
        "# megaconn {name}: the effective configuration, every option with its value and where it came from\n\
         # (a flag comes before its variable, the variable before this file, the file before the default).\n\
         # Read it back with: megaconn {name} --config FILE\n"
    );
    let known = options(sub);
    for (section, heading) in SECTIONS {
        let mut body = String::new();
        for (key, arg) in known.iter().filter(|(_, a)| section_of(a.get_long().unwrap_or_default()) == *section) {
            let (id, long) = (arg.get_id().as_str(), arg.get_long().unwrap_or_default());
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let help = help.lines().next().unwrap_or_default();
            let env = arg.get_env().map(|e| e.to_string_lossy().to_string()).unwrap_or_default();
            body.push_str(&format!("\n# --{long}, ${env}: {help}\n"));
            let raw: Vec<String> = m.get_raw(id).map(|vs| vs.map(|v| v.to_string_lossy().to_string()).collect()).unwrap_or_default();
            if arg.is_hide_env_values_set() && !raw.is_empty() {
                body.push_str(&format!("# {key} = (set by {}, not shown: a secret; give it by ${env} or a file)\n", source_name(m, id, file)));
            } else if raw.is_empty() {
                body.push_str(&format!("# {key} = (unset)\n"));
            } else {
                let value = if takes_many(arg) { format!("[{}]", raw.iter().map(|v| quoted(v)).collect::<Vec<_>>().join(", ")) } else { toml_value(&raw[0]) };
                body.push_str(&format!("{key} = {value}  # {}\n", source_name(m, id, file)));
            }
        }
        if !body.is_empty() {
            out.push_str(&format!("\n[{section}]  # {heading}\n{body}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every server option lands in a section of the list, and the list
    /// has no section without an option.
    #[test]
    fn every_option_has_a_listed_section_and_every_section_options() {
        let cmd = Cli::command();
        let sub = cmd.find_subcommand("server").expect("server");
        let used: std::collections::BTreeSet<&str> = options(sub).values().map(|a| section_of(a.get_long().unwrap_or_default())).collect();
        for s in &used {
            assert!(SECTIONS.iter().any(|(n, _)| n == s), "{s} is not in SECTIONS");
        }
        for (s, _) in SECTIONS {
            assert!(used.contains(s), "[{s}] has no option");
        }
    }

    #[test]
    fn variables_follow_the_long_name() {
        assert_eq!(env_name("server", "max-connections"), "MEGACONN_SERVER_MAX_CONNECTIONS");
    }

    #[test]
    fn values_print_as_toml_reads_them() {
        assert_eq!(toml_value("100"), "100");
        assert_eq!(toml_value("true"), "true");
        assert_eq!(toml_value("30s"), "\"30s\"");
        assert_eq!(toml_value("0755"), "\"0755\"");
        assert_eq!(toml_value("a\"b"), "\"a\\\"b\"");
    }
}
