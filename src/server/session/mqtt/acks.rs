//! The client's acknowledgements: PUBACK, PUBREC and PUBCOMP of the
//! server's QoS 1 and 2 deliveries (each one that closes a delivery lets
//! the oldest held one go out, in the same reply), and PUBREL of the
//! client's own QoS 2 publishes (answered PUBCOMP). An id the server does
//! not know is counted (`mqtt_unknown_packet_ids`) and answered as the
//! standard says: v5 PUBREL / PUBCOMP with 0x92 (Packet Identifier not
//! found) for PUBREC / PUBREL, nothing for PUBACK / PUBCOMP; 3.1.1 has no
//! such code, so its PUBREL gets a plain PUBCOMP.

use super::flight::{Acked, Stage};
use super::{send, Ctx, MqttConn};
use crate::proto::mqtt::{Ack, Packet, Properties, Version};
use crate::stats::counters::bump;

/// v5: Packet Identifier not found (§2.4).
const NOT_FOUND: u8 = 0x92;

fn ack(packet_id: u16, reason: u8) -> Ack<'static> {
    Ack { packet_id, reason, properties: Properties::default() }
}

/// PUBACK, PUBREC or PUBCOMP (`stage`) for one of the server's deliveries.
pub(super) fn outbound(ctx: &mut Ctx<'_>, m: &mut MqttConn, v: Version, stage: Stage, a: &Ack<'_>) {
    let kind = match stage {
        Stage::Ack => "puback",
        Stage::Rec => "pubrec",
        Stage::Comp => "pubcomp",
    };
    bump(&mut ctx.req.stats.mqtt_acks_in, kind);
    let window = m.window(ctx.cfg.flight.inflight);
    let acked = match m.extra.as_deref_mut() {
        Some(x) => x.flight.acked(stage, a.packet_id, a.reason >= 0x80),
        None => Acked::Unknown,
    };
    match acked {
        Acked::Done => {
            let mut sent = Vec::new();
            if let Some(x) = m.extra.as_deref_mut().filter(|x| x.flight.counts().1 > 0) {
                // Held ones past their Message Expiry Interval are dropped here.
                ctx.req.stats.mqtt_expired_dropped += x.flight.release(window, crate::proto::push::wall_us(), &mut sent);
            }
            let v5 = m.version == Some(crate::proto::mqtt::Version::V5);
            for (bytes, qos) in sent {
                ctx.req.stats.mqtt_publish_bytes_out += crate::proto::mqtt::forward::own_payload(&bytes, v5).map_or(0, <[u8]>::len) as u64;
                let bytes = super::alias::outgoing(m, &bytes, &mut ctx.req.stats.mqtt_topic_aliases_out).unwrap_or(bytes);
                ctx.req.out.extend_from_slice(&bytes);
                ctx.req.stats.frames_out += 1;
                bump(&mut ctx.req.stats.mqtt_publishes_out, qos.label());
            }
            m.tidy();
        }
        Acked::Release => send(ctx, v, &Packet::PubRel(ack(a.packet_id, 0))),
        Acked::Unknown => {
            bump(&mut ctx.req.stats.mqtt_unknown_packet_ids, kind);
            if stage == Stage::Rec && v == Version::V5 {
                send(ctx, v, &Packet::PubRel(ack(a.packet_id, NOT_FOUND)));
            }
        }
    }
}

/// PUBREL for one of the client's QoS 2 publishes: PUBCOMP.
pub(super) fn pubrel(ctx: &mut Ctx<'_>, m: &mut MqttConn, v: Version, a: &Ack<'_>) {
    bump(&mut ctx.req.stats.mqtt_acks_in, "pubrel");
    let known = m.extra.as_deref_mut().is_some_and(|x| x.flight.released(a.packet_id));
    m.tidy();
    if !known {
        bump(&mut ctx.req.stats.mqtt_unknown_packet_ids, "pubrel");
    }
    let reason = if known || v == Version::V311 { 0 } else { NOT_FOUND };
    send(ctx, v, &Packet::PubComp(ack(a.packet_id, reason)));
}
