//! The reconnect hint a draining server sends before it closes a
//! long-lived connection (a rolling restart): where the protocol has a
//! way to say "come back, elsewhere, in this long", it is used, so a
//! client moves without a reconnect storm and resumes what it missed.
//!
//! - framed: a goaway frame (kind 12), payload the retry delay in ms (u32 BE);
//! - WebSocket: close 1012 (Service Restart) with the JSON reason
//!   `{"type":"goaway","retry_ms":N}`;
//! - Server-Sent Events: `retry: N` and a `goaway` event with the same JSON;
//! - MQTT 5.0: DISCONNECT 0x8B (Server shutting down) with the same JSON
//!   as its Reason String; 3.1.1 has no packet for it (a server only
//!   closes), so its hint is the close itself.

use crate::proto::frame::{self, Kind};
use crate::proto::ws::frame as ws;

/// WebSocket close code of a drain: 1012 Service Restart (IANA registry).
pub(crate) const WS_RESTART: u16 = 1012;
/// Longest retry delay a hint asks for; each connection gets a random one
/// up to it, so the ones closed in one tick do not come back together.
pub(crate) const MAX_RETRY_MS: u32 = 1000;

/// The JSON both WebSocket and SSE hints carry.
pub(crate) fn reason_json(retry_ms: u32) -> String {
    format!(r#"{{"type":"goaway","retry_ms":{retry_ms}}}"#)
}

pub(crate) fn write_framed(out: &mut Vec<u8>, retry_ms: u32) {
    frame::encode(out, Kind::Goaway, &retry_ms.to_be_bytes());
}

pub(crate) fn write_ws(out: &mut Vec<u8>, retry_ms: u32) {
    ws::encode_close_reason(out, WS_RESTART, reason_json(retry_ms).as_bytes(), None);
}

pub(crate) fn write_sse(out: &mut Vec<u8>, retry_ms: u32) {
    let data = reason_json(retry_ms);
    crate::proto::sse::write::Event { retry_ms: Some(retry_ms), event: Some("goaway"), data: &data, id: None }.write(out);
}

/// MQTT 5.0: Server shutting down (§3.14.2.1).
pub(crate) const MQTT_SHUTTING_DOWN: u8 = 0x8B;

/// The MQTT hint: nothing in 3.1.1. Within the client's Maximum Packet
/// Size `max` (§3.14.2.2.3): without the Reason String when it would not
/// fit, nothing when even that would not.
pub(crate) fn write_mqtt(out: &mut Vec<u8>, version: crate::proto::mqtt::Version, retry_ms: u32, max: u32) {
    if version == crate::proto::mqtt::Version::V5 {
        crate::proto::mqtt::encode::disconnect_within(out, MQTT_SHUTTING_DOWN, &reason_json(retry_ms), max);
    }
}

/// The retry delay in a goaway frame's payload.
pub(crate) fn decode_framed(payload: &[u8]) -> Result<u32, &'static str> {
    let b: [u8; 4] = payload.try_into().map_err(|_| "bad_frame_goaway_length")?;
    Ok(u32::from_be_bytes(b))
}

/// The retry delay in a close reason or SSE data line, if it is a hint.
pub(crate) fn decode_json(text: &[u8]) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct Hint {
        #[serde(rename = "type")]
        kind: String,
        retry_ms: u32,
    }
    let h: Hint = serde_json::from_slice(text).ok()?;
    (h.kind == "goaway").then_some(h.retry_ms.min(60_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hint_carries_its_delay_and_fits_a_close_frame() {
        let mut out = Vec::new();
        write_framed(&mut out, 750);
        assert_eq!(out, [0, 5, Kind::Goaway as u8, 0, 0, 2, 238]);
        assert_eq!(decode_framed(&out[3..]), Ok(750));
        assert!(decode_framed(&[1, 2]).is_err());
        // A close reason is at most 123 bytes.
        assert!(reason_json(u32::MAX).len() <= 123);
        assert_eq!(decode_json(reason_json(999).as_bytes()), Some(999));
        assert_eq!(decode_json(br#"{"type":"other","retry_ms":1}"#), None);
        let mut ws_out = Vec::new();
        write_ws(&mut ws_out, 10);
        assert_eq!(ws_out[0], 0x88, "a final close frame");
        assert_eq!(u16::from_be_bytes([ws_out[2], ws_out[3]]), WS_RESTART);
        assert_eq!(decode_json(&ws_out[4..]), Some(10));
        let mut sse = Vec::new();
        write_sse(&mut sse, 20);
        assert_eq!(String::from_utf8(sse).unwrap(), "retry: 20\nevent: goaway\ndata: {\"type\":\"goaway\",\"retry_ms\":20}\n\n");
    }

    /// MQTT 5: DISCONNECT 0x8B with the hint as Reason String, within the
    /// client's Maximum Packet Size (without the string, or nothing, when
    /// it is smaller); nothing in 3.1.1.
    #[test]
    fn the_mqtt_hint_fits_the_clients_maximum_packet_size() {
        use crate::proto::mqtt::Version;
        let hint = |version, max| {
            let mut out = vec![7];
            write_mqtt(&mut out, version, 30, max);
            out[1..].to_vec()
        };
        let whole = hint(Version::V5, u32::MAX);
        let reason = reason_json(30);
        assert_eq!(whole[..7], [0xE0, 5 + reason.len() as u8, MQTT_SHUTTING_DOWN, 3 + reason.len() as u8, 0x1F, 0, reason.len() as u8]);
        assert_eq!(decode_json(&whole[7..]), Some(30));
        assert_eq!(hint(Version::V5, whole.len() as u32), whole);
        assert_eq!(hint(Version::V5, whole.len() as u32 - 1), [0xE0, 1, MQTT_SHUTTING_DOWN], "without the Reason String (and its empty property block)");
        assert_eq!(hint(Version::V5, 2), [0u8; 0], "nothing fits");
        assert_eq!(hint(Version::V311, u32::MAX), [0u8; 0]);
    }
}
