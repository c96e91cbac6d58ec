//! Why the cluster's data path failed, typed: the JetStream log
//! (`log.rs`), NATS's confirmation (`link/publish.rs`) and a publish as a
//! whole. The link matches on them (a lost stream, a slow one, a
//! reconnect); their text is what the admin API answers and the node's
//! notes say. Start-up checks (flags, files, `--cluster-history` without
//! JetStream) stay sentences: a person reads them, nothing matches them.

use super::log::{FETCH_TIMEOUT, STREAM};
use async_nats::jetstream::{context, stream};
use std::time::Duration;

/// The cluster's stream could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogError {
    #[error("the cluster's history is not in JetStream (--cluster-history off)")]
    Off,
    #[error("cannot open the JetStream stream {STREAM}: {0}")]
    Open(#[source] context::GetStreamError),
    #[error("cannot read {subject} from JetStream: {source}")]
    Read {
        subject: String,
        #[source]
        source: stream::DirectGetError,
    },
    #[error("reading {subject} from JetStream took over {} s", FETCH_TIMEOUT.as_secs())]
    Slow { subject: String },
    #[error("JetStream did not store the publish: {0}")]
    NotStored(#[source] context::PublishError),
    #[error("JetStream did not store the publish after {tries} tries (last: {last})")]
    Tries { tries: usize, last: String },
    /// The stream is gone and could not be made again (the sentence
    /// `Log::ensure` gives, with its fix).
    #[error("{0}")]
    Unavailable(String),
    #[error("stored in the cluster's history at {at}, but this node's link did not see it come back within {} s (it delivers it here when it does)", .within.as_secs())]
    NotSeen { at: String, within: Duration },
}

/// NATS did not confirm it handled what this node sent before
/// (`link/publish.rs confirmed`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unconfirmed {
    #[error("NATS did not confirm what this node sent: {0}")]
    Refused(#[source] async_nats::RequestError),
    #[error("NATS did not confirm what this node sent within {} s", .0.as_secs())]
    Slow(Duration),
}

/// A publish that did not reach the cluster (the admin API answers 503,
/// or 504 when part of it may have).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    #[error("the cluster link is down")]
    Down,
    #[error("NATS did not take the publish: {0}")]
    NotTaken(#[source] async_nats::PublishError),
    #[error("unicast to {gid}: {source}")]
    Unicast {
        gid: String,
        #[source]
        source: async_nats::RequestError,
    },
    #[error(transparent)]
    Stream(#[from] LogError),
    #[error(transparent)]
    Unconfirmed(#[from] Unconfirmed),
    #[error("the cluster link reconnected while the publish was in flight, so part of it may be lost")]
    Reconnected,
}
