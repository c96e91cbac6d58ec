//! A worker's tables that its sessions change: the topics and filters its
//! connections follow (`topics.rs`, `wildcards.rs`), the recoveries
//! waiting for history (`recovery.rs`) and the messages waiting for the
//! `--upstream` backend (`outbox.rs`). The worker owns them and lends them
//! to a session while it consumes bytes; they name neither room, so
//! session/ sits below worker/ (`tests/e2e/layers.rs` holds the rooms of
//! server/ to that).
pub(crate) mod outbox;
pub(crate) mod recovery;
pub(crate) mod topics;
pub(crate) mod wildcards;
