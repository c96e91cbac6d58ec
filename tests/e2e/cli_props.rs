//! No flag value panics or hangs: random command lines either parse and
//! plan (what every command does before it starts anything) or are
//! refused with a usage error (exit 2) naming the flag. Every flag that
//! takes a value, of every subcommand, comes from clap's own definition
//! (`Cli::command()`), so a flag added later gets the same treatment.
use clap::{CommandFactory, Parser};
use megaconn::cli::{plan_only, Cli};
use proptest::prelude::*;

/// The subcommands whose command lines are planned here.
const COMMANDS: &[&str] = &["server", "client", "bench", "tune"];

/// Every flag of `cmd` that takes a value, as clap defines it.
fn flags_of(cmd: &str) -> Vec<String> {
    let cli = Cli::command();
    let sub = cli.find_subcommand(cmd).unwrap_or_else(|| panic!("no subcommand {cmd}"));
    sub.get_arguments().filter(|a| a.get_action().takes_values()).filter_map(|a| a.get_long().map(|l| format!("--{l}"))).collect()
}

#[test]
fn every_subcommand_has_its_flags_listed() {
    for cmd in COMMANDS {
        let flags = flags_of(cmd);
        assert!(flags.len() >= 5 && flags.contains(&"--ports".to_string()), "{cmd}: {flags:?}");
    }
    let server = flags_of("server");
    for f in ["--tls-cert", "--auth", "--cluster", "--upstream", "--history", "--io", "--max-commands-per-second"] {
        assert!(server.contains(&f.to_string()), "server lacks {f}: {server:?}");
    }
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1e20".to_string()),
        Just("-1".into()),
        Just("0".into()),
        Just("NaN".into()),
        Just("inf".into()),
        Just("18446744073709551616".into()),
        Just("0/0".into()),
        Just("3/4".into()),
        Just("4/4".into()),
        Just("auto".into()),
        Just("off".into()),
        Just("pool:0".into()),
        Just("pool:99999999".into()),
        Just("".into()),
        Just("1M".into()),
        Just("1/s".into()),
        Just("1e9/s".into()),
        Just("1ms:100%".into()),
        Just("1000000h".into()),
        Just("65535-1".into()),
        Just("127.0.0.0/8".into()),
        Just("0.0.0.0".into()),
        Just("--help".into()),
        // --serve entries: a valid one, one needing TLS files, every port.
        Just("mqtt=1883".into()),
        Just("ws+tls=8000-8099".into()),
        Just("framed=1-65535".into()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        "\\PC{0,12}",
    ]
}

/// A subcommand and up to four of its flags, each with a hostile value.
fn command_line() -> impl Strategy<Value = (String, Vec<(String, String)>)> {
    prop::sample::select(COMMANDS.to_vec())
        .prop_flat_map(|cmd| (Just(cmd.to_string()), prop::collection::vec((prop::sample::select(flags_of(cmd)), value()), 0..5)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn any_command_line_plans_or_is_refused((cmd, args) in command_line()) {
        let mut argv = vec!["megaconn".to_string(), cmd.to_string()];
        if cmd != "server" && !args.iter().any(|(f, _)| *f == "--connections") {
            argv.extend(["--connections".to_string(), "100".to_string()]);
        }
        for (f, v) in &args {
            argv.push(f.to_string());
            argv.push(v.clone());
        }
        match Cli::try_parse_from(&argv) {
            Ok(cli) => {
                // Ok or a refusal in words; a panic fails the property.
                if let Err(e) = plan_only(cli) {
                    prop_assert!(!e.is_empty());
                }
            }
            Err(e) => {
                // Exit 0 is for help and version, and only when a token
                // asked for them (clap reads "-h" as a flag, not a value).
                use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                let asked = argv.iter().any(|a| ["-h", "--help", "-V", "--version"].contains(&a.as_str()));
                match e.kind() {
                    DisplayHelp | DisplayVersion => prop_assert!(asked, "{argv:?}: help or version nobody asked for: {e}"),
                    _ => prop_assert_eq!(e.exit_code(), 2, "{:?}: {}", argv, e),
                }
            }
        }
    }
}
