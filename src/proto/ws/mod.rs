//! WebSocket (RFC 6455), both ends: the opening handshake and frames.
//! Written for megaconn's reactors rather than taken from a crate: the
//! maintained crates (tungstenite, fastwebsockets) own a read and a write
//! buffer per connection, which at a million idle connections is the
//! difference between ~100 MB and several GB of user memory.
pub(crate) mod deflate;
pub(crate) mod frame;
pub(crate) mod handshake;
