//! megaconn: hold millions of concurrent long-lived TCP connections on one
//! Linux machine, prove it with its own load generator, and name the limit
//! that stops them.
//!
//! Everything lives in this library; `main.rs` only parses and
//! dispatches, so tests can run a server or a client in-process.
//!
//! Layers, top to bottom; a module imports only from its own layer or
//! below (`tests/e2e/layers.rs` fails the test run on an import cycle
//! between top-level modules):
//!
//! ```text
//! cli                  flags -> domain configs, dispatch (workers too), exit codes
//! bench, report        scenarios (and `megaconn client` alone), reports, charts, merge
//! server, client       the two roles: configs, counters, snapshots, events, workers, /metrics
//! admin, cluster, tune the admin HTTP plane and the NATS link (handed a Sink, never reaching
//!                      up); the limits and the arithmetic on them
//! supervise, reactor   a process pool and one event loop that name no role
//! proto, net, topology wire formats, buffer-less I/O, namespaces
//! stats, sys, values   counters!, histograms, OpenMetrics pieces, /proc, flag value parsers
//! ```
pub(crate) mod admin;
pub(crate) mod bench;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod fuzz_targets;
pub(crate) mod net;
pub(crate) mod proto;
pub(crate) mod reactor;
pub(crate) mod report;
pub mod server;
pub(crate) mod signals;
pub mod stats;
pub(crate) mod supervise;
pub(crate) mod sys;
pub(crate) mod timer;
pub(crate) mod tls;
pub(crate) mod topology;
pub(crate) mod tune;
pub(crate) mod uring;
pub(crate) mod values;

#[cfg(test)]
pub(crate) mod test_alloc;

/// `crate::counters!` and `crate::counters_deref!`, declared in
/// [`stats::counters`], for every role's counters.
pub(crate) use stats::counters::{counters, counters_deref};

/// An error in what the user asked for (exit code 2), as opposed to a
/// failure while doing it (exit code 1).
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Exit code for an error returned by [`cli::dispatch`].
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<UsageError>().is_some() {
        2
    } else {
        1
    }
}
