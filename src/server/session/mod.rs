//! One file per protocol a server connection speaks, in the worker: what
//! a client's bytes mean (requests, subscribes, closes) and what is
//! written back. Adding a protocol is a codec in `proto/` and a file here.
#[cfg(test)]
pub(crate) mod fixture;
pub mod framed;
pub mod http;
pub mod mqtt;
pub mod mqtt_ws;
pub mod requests;
pub mod sse;
pub mod ws;
pub mod ws_deflate;
