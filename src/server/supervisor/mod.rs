//! The server's supervisor process: the worker fleet it starts, grows,
//! replaces and drains, the admin API's routing, the listening sockets it
//! binds once for every worker (`server/listener.rs`), its picture of the workers' counters and
//! the `/metrics` it serves from them. Nothing here runs in a worker.
pub(crate) mod admin;
pub(crate) mod fleet;
pub(crate) mod hooks;
pub(crate) mod metrics;
pub(crate) mod reload;
pub(crate) mod sys_topics;
pub(crate) mod view;

/// What arrives on a server supervisor's channel.
#[derive(Debug)]
pub(crate) enum ServerEvent {
    Worker(usize, crate::supervise::PoolEvent<crate::server::commands::ServerMsg>),
    /// An admin API request.
    Admin(crate::admin::Request),
    /// News from the cluster link.
    Cluster(crate::cluster::ClusterEvent),
    /// News from the `--upstream` sender.
    Upstream(crate::server::broker::upstream::UpstreamEvent),
    /// The `--mqtt-auth-http` backend's answer.
    AuthHook(Vec<crate::server::broker::auth_hook::Decision>),
    /// `--mqtt-authz-http`'s decisions.
    AuthzHook(Vec<crate::server::broker::auth_hook::Decision>),
    /// What a broker shard says for the supervisor (`broker/shard.rs`).
    Broker(crate::server::broker::core::ToMain),
}
