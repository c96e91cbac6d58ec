//! Payloads as base64 strings where a payload crosses JSON: the state
//! files (kept sessions, wills), the cluster's session moves and the
//! admin API. Inside the server a payload is its bytes; this is the edge.
//! Use as `#[serde(with = "crate::proto::b64")]` on a `Vec<u8>`.
use base64::Engine;
use serde::{Deserialize, Deserializer, Serializer};

pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = std::borrow::Cow::<str>::deserialize(d)?;
    base64::engine::general_purpose::STANDARD.decode(s.as_bytes()).map_err(serde::de::Error::custom)
}
