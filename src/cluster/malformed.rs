//! Why a signed message from another node cannot be acted on: one
//! variant per check of the inbound data path (`link.rs` `decode`, the
//! retained sets, the MQTT metadata, the client id lists). Counted as
//! `cluster_refused{reason="malformed"}` and logged with its Display,
//! which names the header or the bound at fault.

use super::log::H_POSITION;
use super::{H_MQTT, H_PUBLISH_US, H_TARGET};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    #[error("not a megaconn subject")]
    Subject,
    #[error("no {0} header (not from a megaconn node)")]
    NoHeader(&'static str),
    /// A topic `proto::push::check_topic` refuses (its words).
    #[error("{0}")]
    Topic(String),
    #[error("'{0}' is not a topic a message is retained under")]
    RetainedTopic(String),
    #[error("{len} bytes of data, more than a push carries here (--max-push-bytes {max})")]
    TooLarge { len: usize, max: usize },
    #[error("{H_TARGET} '{0}' names no user")]
    NoUser(String),
    #[error("{H_TARGET} '{0}' is not a connection id")]
    Target(String),
    #[error("{H_POSITION} '{0}' is not EPOCH:OFFSET")]
    Position(String),
    #[error("{H_PUBLISH_US} '{0}' is not a number")]
    Stamp(String),
    #[error("{H_MQTT} is not MQTT metadata: {0}")]
    MqttJson(String),
    #[error("{H_MQTT} has QoS {0}")]
    Qos(u8),
    #[error("{H_MQTT} carries {cost} bytes of properties (at most {max}) or a publisher")]
    Properties { cost: usize, max: usize },
    #[error("{H_MQTT} names more than {0} shared subscription groups, or one that is not $share/GROUP/FILTER or a node id that is not one")]
    Shared(usize),
    #[error("a retained message without the retain flag")]
    NotRetained,
    #[error("not a retained set: {0}")]
    RetainedJson(String),
    #[error("retained data is not base64: {0}")]
    Base64(String),
    #[error("not a list of client ids: {0}")]
    IdsJson(String),
    #[error("more than {max} client ids, or one longer than {bytes} bytes")]
    TooManyIds { max: usize, bytes: usize },
    #[error("{owners} owners for {ids} client ids, or one longer than {bytes} bytes")]
    Owners { owners: usize, ids: usize, bytes: usize },
    #[error("an announcement of {0} bytes (at most {max})", max = super::groups::MAX_BODY)]
    AnnounceTooLarge(usize),
    #[error("not a list of shared subscription groups: {0}")]
    GroupsJson(String),
    #[error("{count} shared subscription groups (at most {max})")]
    TooManyGroups { count: usize, max: usize },
    #[error("'{0}' is not a shared subscription ($share/GROUP/FILTER)")]
    NotShared(String),
    #[error("not a confirmation of a session: {0}")]
    TakenJson(String),
    #[error("a confirmation of lend {lend} to a node name of {bytes} bytes")]
    Taken { lend: u64, bytes: usize },
}
