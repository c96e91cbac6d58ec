//! Messages on their way between the server and the world, in the
//! supervisor's process: the broker shards (`shard`, one thread per core,
//! each running the sans-I/O `core` over the topics it owns) route every
//! message between the workers; the supervisor's thread keeps the admin
//! API's publishes and their answers (`publish`), what
//! was published kept for subscribers that come back (`history`), the
//! cluster link's side of a publish (`relay`), MQTT's retained messages
//! (`retained`, kept across restarts by `retained_file`), client ids and
//! kept sessions (`sessions`, kept across restarts by `sessions_file`;
//! both files written by `state_file`), shared
//! subscription groups (`shared`) and what clients said, sent
//! on to the application (`upstream`).
pub(crate) mod auth_hook;
pub(crate) mod core;
pub(crate) mod history;
pub(crate) mod publish;
pub(crate) mod relay;
pub(crate) mod retained;
pub(crate) mod retained_file;
pub(crate) mod sessions;
pub(crate) mod sessions_file;
pub(crate) mod shard;
pub(crate) mod shared;
pub(crate) mod state_file;
pub(crate) mod top_topics;
pub(crate) mod upstream;
