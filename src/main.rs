//! megaconn: parse the command line, dispatch, turn errors into one line.

mod bench;
mod cli;
mod client;
mod net;
mod parse;
mod proto;
mod server;
mod signals;
mod stats;
mod sys;
mod timer;
mod tune;
mod workers;

use clap::Parser;
use cli::{Cli, Cmd};

/// An error in what the user asked for (exit code 2), as opposed to a
/// failure while doing it (exit code 1).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Server(a) => server::run(a),
        Cmd::Client(a) => client::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Tune(a) => tune::run(a),
        Cmd::Worker { role, config } => workers::run_worker(&role, &config).map(|_| 0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("megaconn: error: {e:#}");
            std::process::exit(if e.downcast_ref::<UsageError>().is_some() { 2 } else { 1 });
        }
    }
}
