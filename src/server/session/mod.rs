//! One file per protocol a server connection speaks, in the worker: what
//! a client's bytes mean (requests, subscribes, closes) and what is
//! written back. Adding a protocol is a codec in `proto/` and a file here.
pub(crate) mod ext;
/// Also the fuzz targets' (`mqtt_ws/harness.rs`).
pub(crate) mod fixture;
pub(crate) mod framed;
pub(crate) mod http;
pub(crate) mod kind;
pub(crate) mod mqtt;
pub(crate) mod mqtt_ws;
pub(crate) mod requests;
pub(crate) mod sse;
pub(crate) mod ws;
pub(crate) mod ws_deflate;
