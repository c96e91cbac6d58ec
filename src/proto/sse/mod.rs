//! Server-Sent Events (`text/event-stream`, WHATWG HTML §9.2): the wire format, read side in [`parse`].
pub mod parse;
