//! megaconn: parse the command line, dispatch, turn errors into one line
//! and an exit code.

use megaconn::cli;

fn main() {
    // `server` options may also come from the environment and --config.
    let cli = cli::parse_args(std::env::args_os().collect());
    // A worker reports its own failure to its supervisor (Fatal message).
    let quiet = cli.is_worker();
    match cli::dispatch(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            if !quiet {
                eprintln!("megaconn: error: {e:#}");
            }
            std::process::exit(megaconn::exit_code(&e));
        }
    }
}
