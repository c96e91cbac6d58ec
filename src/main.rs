//! megaconn: parse the command line, dispatch, turn errors into one line
//! and an exit code.

use clap::Parser;
use megaconn::cli::{self, Cli};

fn main() {
    let cli = Cli::parse();
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
