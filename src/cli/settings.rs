//! Every option of `megaconn server`, `client` and `bench` from four
//! places, in this order of precedence: its flag, its environment
//! variable, the `--config` file, its default. One definition: the clap
//! argument. Its long name gives the file key (`--max-connections`:
//! `max_connections`) and the variable (`MEGACONN_SERVER_MAX_CONNECTIONS`,
//! `MEGACONN_CLIENT_RATE`; the older `MEGACONN_ADMIN_TOKEN`, `MEGACONN_IO`
//! and `MEGACONN_CLIENT_IO` stay); its subcommand's [`Layout`] gives both
//! its section in the file and its heading in `--help`. A file's value
//! is given to clap as the option's variable when the environment does
//! not set it (a list, or a default's own value, as the option's
//! default), so clap itself puts a variable and a flag above it, counts
//! it as given for what other options require, and parses and checks it
//! as it does flags. SIGHUP reads a server's file again ([`rereader`]).
//!
//! `--print-config` writes the effective configuration as a commented TOML
//! file that `--config` reads back unchanged; `--check-config` runs the
//! checks `server` makes before it starts and prints its plan.

use super::sections::{layout, Layout};
use super::{Cli, Cmd};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};
use std::collections::BTreeMap;
use std::ffi::OsString;

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
fn decorate(sub: Command, layout: &Layout) -> Command {
    let name = sub.get_name().to_string();
    sub.mut_args(|a| match a.get_long().map(str::to_string) {
        Some(long) if !OWN.contains(&a.get_id().as_str()) => {
            let a = a.help_heading(layout.heading(&long));
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
            .help(format!("Read options from this TOML file (- for stdin): sections as in --print-config; a flag and a variable come first ({})", layout.doc)),
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
        (Some(ValueSource::EnvVariable), Some((_, line))) if file.as_variables.contains(id) => format!("{}:{line}", file.name),
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
    /// The ids whose values were given as their variables.
    as_variables: std::collections::BTreeSet<String>,
}

/// The line (from 1) a span of `text` starts on; 0 when unknown.
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    span.map_or(0, |r| text[..r.start.min(text.len())].matches('\n').count() + 1)
}

/// Read `path` (`-`: stdin) as a configuration of `sub`.
fn read_file(path: &str, sub: &Command, layout: &Layout) -> Result<FileValues, String> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| format!("--config -: cannot read stdin: {e}"))?
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("--config {path}: cannot read it: {e} (give a readable TOML file, or - for stdin)"))?
    };
    let doc = toml_edit::Document::parse(text.as_str()).map_err(|e| format!("{path}:{}: not TOML: {}", line_of(&text, e.span()), e.message()))?;
    let known = options(sub);
    let mut out = FileValues { name: path.to_string(), ..FileValues::default() };
    let mut take = |section: Option<&str>, key: &toml_edit::Key, item: &toml_edit::Item| -> Result<(), String> {
        let line = line_of(&text, key.span());
        let here = format!("{path}:{line}");
        let Some(arg) = known.get(key.get()) else {
            let near = known.keys().map(|k| (strsim::levenshtein(k, key.get()), k)).min().filter(|(d, _)| *d <= 3).map(|(_, k)| k);
            let hint = match near {
                Some(k) => format!("did you mean `{k}` (in [{}])?", (layout.section_of)(&k.replace('_', "-"))),
                None => format!("`megaconn {} --print-config` lists every key", sub.get_name()),
            };
            return Err(format!("{here}: unknown key `{}`{}; {hint}", key.get(), section.map(|s| format!(" in [{s}]")).unwrap_or_default()));
        };
        let (id, long) = (arg.get_id().to_string(), arg.get_long().unwrap_or_default());
        let belongs = (layout.section_of)(long);
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
                if !layout.has_section(k) {
                    let list: Vec<&str> = layout.sections.iter().map(|(s, _)| *s).collect();
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
    let Some(layout) = args.get(1).and_then(|s| layout(&s.to_string_lossy())) else {
        return <Cli as clap::Parser>::parse_from(args);
    };
    let sub_name = layout.sub;
    let mut cmd = Cli::command().mut_subcommand(sub_name, |s| decorate(s, layout));
    let file = match config_path(&args[2..]) {
        Some(path) => {
            let sub = cmd.find_subcommand(sub_name).expect("configured subcommands exist");
            read_file(&path, sub, layout).unwrap_or_else(|e| usage_exit(&e))
        }
        None => FileValues::default(),
    };
    // A file's value is given as the option's variable when the
    // environment does not set that variable: clap then puts the flag
    // above it, and counts it as given, so it meets what another option
    // requires (a --tls-cert variable beside the file's tls_key) or that
    // it be given at all (`client --connections`). A list (a variable
    // holds one value) becomes the option's default instead, as does a
    // default's own value (a printed configuration read back gives every
    // default, which must not count as given: `cluster_history` needs
    // `cluster` only when it is given).
    let mut file = file;
    for (id, (values, _)) in file.values.clone() {
        let sub = cmd.find_subcommand(sub_name).expect("configured subcommands exist");
        let arg = sub.get_arguments().find(|a| a.get_id() == id.as_str()).expect("the file's keys are the subcommand's arguments");
        let is_default = match arg.get_action() {
            // A switch's default ("false") is set only when clap builds it.
            ArgAction::SetTrue => values == ["false"],
            _ => arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).eq(values.iter().cloned()),
        };
        match arg.get_env().map(|v| v.to_os_string()) {
            Some(var) if !takes_many(arg) && !is_default => {
                if std::env::var_os(&var).is_none() {
                    // main's first step, before any thread is started.
                    std::env::set_var(&var, &values[0]);
                    // clap reads a variable when it is declared: again.
                    cmd = cmd.mut_subcommand(sub_name, |s| s.mut_arg(&id, |a| a.env(var)));
                    file.as_variables.insert(id);
                }
            }
            _ => {
                cmd = cmd.mut_subcommand(sub_name, |s| {
                    s.mut_arg(&id, |a| {
                        a.required(false)
                            .required_unless_present(clap::builder::Resettable::<clap::Id>::Reset)
                            .default_values(values.iter().map(|v| clap::builder::OsStr::from(v.clone())))
                    })
                })
            }
        }
    }
    let matches = cmd.clone().try_get_matches_from(&args).unwrap_or_else(|e| {
        if e.kind() == clap::error::ErrorKind::DisplayHelp && args.iter().any(|a| a == "-h") {
            let sub = cmd.find_subcommand_mut(sub_name).expect("configured subcommands exist");
            print!("{}", short_help(sub, layout));
            std::process::exit(0);
        }
        // A value from the file that clap refuses: name the file's line.
        if let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg) {
            let long = arg.trim_start_matches("--").split([' ', '=']).next().unwrap_or_default().to_string();
            let arg = cmd.find_subcommand(sub_name).and_then(|s| s.get_arguments().find(|a| a.get_long() == Some(long.as_str())));
            let from_env = arg.is_some_and(|a| a.get_env().is_some_and(|v| std::env::var_os(v).is_some()) && !file.as_variables.contains(a.get_id().as_str()));
            if let Some((_, line)) = arg.and_then(|a| file.values.get(a.get_id().as_str())).filter(|_| !from_env) {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
                usage_exit(&format!("{}:{line}: {} (the file's `{}`)", file.name, first, long.replace('-', "_")));
            }
        }
        e.exit()
    });
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let m = matches.subcommand_matches(sub_name).expect("the subcommand parsed");
    if let Cmd::Server(a) = &mut cli.command {
        a.config_file = rereader(&file, m);
    }
    if m.get_flag("print_config") {
        let sub = cmd.find_subcommand(sub_name).expect("configured subcommands exist");
        print!("{}", effective(sub, m, &file, layout));
        std::process::exit(0);
    }
    if m.get_flag("check_config") {
        std::process::exit(check(cli));
    }
    cli
}

/// What SIGHUP reads again: the server's file (not stdin), with the
/// values of its last reading and which options a flag or a variable set.
fn rereader(file: &FileValues, m: &ArgMatches) -> Option<crate::server::config::ConfigFile> {
    if file.name.is_empty() || file.name == "-" {
        return None;
    }
    let pinned: std::collections::BTreeSet<String> = m
        .ids()
        .filter(|id| match m.value_source(id.as_str()) {
            Some(ValueSource::CommandLine) => true,
            Some(ValueSource::EnvVariable) => !file.as_variables.contains(id.as_str()),
            _ => false,
        })
        .map(|id| id.to_string())
        .collect();
    let (path, mut last) = (file.name.clone(), file.values.clone());
    let read = move || -> Result<Vec<crate::server::config::ConfigChange>, String> {
        let layout = layout("server").expect("the server is configured");
        let cmd = Cli::command().mut_subcommand("server", |s| decorate(s, layout));
        let sub = cmd.find_subcommand("server").expect("server");
        let now = read_file(&path, sub, layout)?.values;
        let mut changes = Vec::new();
        for id in last.keys().chain(now.keys()).collect::<std::collections::BTreeSet<_>>() {
            let (old, new) = (last.get(id).map(|v| &v.0), now.get(id));
            if old == new.map(|v| &v.0) {
                continue;
            }
            let arg = sub.get_arguments().find(|a| a.get_id() == id.as_str()).expect("the file's keys are arguments");
            let long = arg.get_long().unwrap_or_default().to_string();
            let values = match new {
                Some((values, line)) => {
                    // The flag's own parser, alone (what it requires is
                    // the start's to check).
                    let alone = Command::new("server")
                        .no_binary_name(true)
                        .arg(clap::Arg::new("v").long(long.clone()).action(ArgAction::Set).value_parser(arg.get_value_parser().clone()));
                    for v in values {
                        alone.clone().try_get_matches_from([format!("--{long}"), v.clone()]).map_err(|e| {
                            let text = e.render().to_string();
                            format!(
                                "{path}:{line}: {} (the file's `{}`)",
                                text.lines().next().unwrap_or_default().trim_start_matches("error: "),
                                long.replace('-', "_")
                            )
                        })?;
                    }
                    values.clone()
                }
                None => arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect(),
            };
            changes.push(crate::server::config::ConfigChange { key: long.replace('-', "_"), long, values, pinned: pinned.contains(id) });
        }
        last = now;
        Ok(changes)
    };
    Some(crate::server::config::ConfigFile { path: file.name.clone(), read: std::sync::Arc::new(std::sync::Mutex::new(read)) })
}

/// `-h`: one screen, the options by name under their sections' headings;
/// `--help` stays the long form with every option's meaning.
fn short_help(sub: &mut Command, layout: &Layout) -> String {
    const WIDTH: usize = 100;
    let name = sub.get_name().to_string();
    let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
    sub.set_bin_name(format!("megaconn {name}"));
    let usage = sub.render_usage().to_string();
    let known = options(sub);
    let mut out = format!("{about}\n\n{usage}\n\n");
    let pad = layout.sections.iter().map(|(_, h)| h.len()).chain(["Configuration".len()]).max().unwrap_or(0) + 2;
    let mut line = |heading: &str, flags: Vec<String>| {
        let mut row = format!("{:<pad$}", format!("{heading}:"));
        for flag in flags {
            if row.len() + flag.len() + 1 > WIDTH && row.trim_end().len() > pad {
                out.push_str(row.trim_end());
                out.push('\n');
                row = " ".repeat(pad);
            }
            row.push_str(&flag);
            row.push(' ');
        }
        out.push_str(row.trim_end());
        out.push('\n');
    };
    for (section, heading) in layout.sections {
        let flags = known.values().filter(|a| (layout.section_of)(a.get_long().unwrap_or_default()) == *section);
        line(heading, flags.map(|a| format!("--{}", a.get_long().unwrap_or_default())).collect());
    }
    line("Configuration", vec!["--config".into(), "--print-config".into(), "--check-config".into()]);
    out.push_str(&format!(
        "\nEach option's meaning, values and default: megaconn {name} --help\n\
         Each also comes from ${} and from a --config file ({}).\n",
        env_name(&name, "<option>"),
        layout.doc
    ));
    out
}

/// `--check-config`: the configuration converted and planned as the
/// command would before starting anything; the exit code.
fn check(cli: Cli) -> i32 {
    let result = match cli.command {
        Cmd::Server(a) => crate::server::config::ServerConfig::try_from(a).map_err(anyhow::Error::from).and_then(|cfg| crate::server::check(&cfg)),
        _ => super::plan_only(cli).map(|()| "it plans on this machine (--dry-run shows the plan)".to_string()).map_err(|e| crate::UsageError(e).into()),
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
fn effective(sub: &Command, m: &ArgMatches, file: &FileValues, layout: &Layout) -> String {
    let name = sub.get_name();
    let mut out = format!(
        "# megaconn {name}: the effective configuration, every option with its value and where it came from\n\
         # (a flag comes before its variable, the variable before this file, the file before the default).\n\
         # Read it back with: megaconn {name} --config FILE\n"
    );
    let known = options(sub);
    for (section, heading) in layout.sections {
        let mut body = String::new();
        for (key, arg) in known.iter().filter(|(_, a)| (layout.section_of)(a.get_long().unwrap_or_default()) == *section) {
            let (id, long) = (arg.get_id().as_str(), arg.get_long().unwrap_or_default());
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let help = help.lines().next().unwrap_or_default();
            let env = arg.get_env().map(|e| e.to_string_lossy().to_string()).unwrap_or_default();
            body.push_str(&format!("\n# --{long}, ${env}: {help}\n"));
            let raw: Vec<String> = m.get_raw(id).map(|vs| vs.map(|v| v.to_string_lossy().to_string()).collect()).unwrap_or_default();
            if arg.is_hide_env_values_set() && !raw.is_empty() {
                body.push_str(&format!("# {key} = (set by {}, not shown: a secret; give it by ${env} or a file)\n", source_name(m, id, file)));
            } else if raw.is_empty() && takes_many(arg) {
                body.push_str(&format!("# {key} = [] (unset; a list)\n"));
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

    /// Every option of every configured subcommand lands in a section of
    /// its list, and no list has a section without an option.
    #[test]
    fn every_option_has_a_listed_section_and_every_section_options() {
        let cmd = Cli::command();
        for layout in super::super::sections::LAYOUTS {
            let sub = cmd.find_subcommand(layout.sub).expect("a configured subcommand");
            let used: std::collections::BTreeSet<&str> = options(sub).values().map(|a| (layout.section_of)(a.get_long().unwrap_or_default())).collect();
            for s in &used {
                assert!(layout.has_section(s), "{} {s} is not in its sections", layout.sub);
            }
            for (s, _) in layout.sections {
                assert!(used.contains(s), "{} [{s}] has no option", layout.sub);
            }
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
