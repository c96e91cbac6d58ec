//! Server-Sent Events (WHATWG HTML, "Server-sent events"): the
//! `text/event-stream` format, no I/O. `write` is the server's side,
//! `parse` the client's.
pub(crate) mod parse;
pub(crate) mod write;
