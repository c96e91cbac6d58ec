//! No flag value panics or hangs: random command lines either parse and
//! plan (what every command does before it starts anything) or are
//! refused with a usage error (exit 2) naming the flag.
use clap::Parser;
use megaconn::cli::{plan_only, Cli};
use proptest::prelude::*;

const FLAGS: &[&str] = &[
    "--connections",
    "--rate",
    "--hold",
    "--heartbeat",
    "--payload",
    "--request-rate",
    "--request-timeout",
    "--connect-timeout",
    "--stats-interval",
    "--ports",
    "--source-ips",
    "--workers",
    "--shard",
    "--business",
    "--service-time",
    "--queue",
    "--idle-timeout",
    "--duration",
    "--body-size",
    "--max-header-bytes",
    "--header-timeout",
    "--retire-after",
    "--server-workers",
    "--client-workers",
    "--scenario",
    "--protocol",
    "--close",
    "--target",
    "--listen",
    "--role",
    "--max-topics",
    "--max-connections-per-ip",
    "--stall-timeout",
    "--tcp-keepalive",
    "--tcp-user-timeout",
];

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
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        "\\PC{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn any_command_line_plans_or_is_refused(
        cmd in prop::sample::select(vec!["server", "client", "bench", "tune"]),
        args in prop::collection::vec((prop::sample::select(FLAGS), value()), 0..5),
    ) {
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
