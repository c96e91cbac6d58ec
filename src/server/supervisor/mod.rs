//! The server's supervisor process: the worker fleet it starts, grows,
//! replaces and drains, the admin API's routing, the listening sockets it
//! binds once for every worker, its picture of the workers' counters and
//! the `/metrics` it serves from them. Nothing here runs in a worker.
pub(crate) mod admin;
pub(crate) mod fleet;
pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod view;
