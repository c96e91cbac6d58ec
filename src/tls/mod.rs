//! TLS for every protocol, on rustls's unbuffered API.
//!
//! Why unbuffered: rustls's buffered connection keeps ~20 KB of buffers
//! per idle connection; the unbuffered one works on buffers the caller
//! lends it, so a worker lends the same two to every connection and an
//! idle TLS connection keeps only its cipher state (and, rarely, a partial
//! record: a spill, like a partial frame).
//!
//! - [`files`]: certificates and keys from PEM files, the rustls configs;
//! - [`tickets`]: session tickets every worker process can open (a client
//!   resumes on whichever worker the kernel gives it);
//! - [`server`]: one server connection's TLS state and its read/write path;
//! - [`failure`]: why a handshake failed, as a counter label.

pub(crate) mod client;
pub(crate) mod conn;
pub(crate) mod failure;
pub(crate) mod files;
pub(crate) mod records;
pub(crate) mod server;
pub(crate) mod throwaway;
pub(crate) mod tickets;

pub(crate) use failure::reason_of;
