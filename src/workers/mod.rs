//! The process model: a supervisor re-executes its own binary as worker
//! processes and talks to them over pipes.
pub mod control;
pub mod plan;
pub mod supervisor;

/// Entry point of a worker process (`megaconn __worker ROLE CONFIG`).
pub fn run_worker(role: &str, config: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    match role {
        "server" => crate::server::worker::run(serde_json::from_str(config).context("bad server worker config")?),
        "client" => crate::client::worker::run(serde_json::from_str(config).context("bad client worker config")?),
        other => anyhow::bail!("unknown worker role {other}"),
    }
}
