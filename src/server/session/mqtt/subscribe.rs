//! SUBSCRIBE and UNSUBSCRIBE: each filter into the worker's topics (exact
//! ones in `topics.rs`, `+`/`#` ones in `wildcards.rs`) or, for
//! `$share/...`, into a shared group (`shared.rs`); the v5 options kept
//! (`extra.rs`); the retained messages asked for; SUBACK / UNSUBACK.

use super::{extra, send, shared, Ctx, MqttConn};
use crate::proto::mqtt::{Packet, Properties, SubAck, Version};
use crate::server::close::Close;
use crate::server::commands::RetainedWant;
use crate::server::tables::wildcards;

/// SUBSCRIBE: each filter into the worker's topics, its code in SUBACK;
/// its options kept when not plain QoS 0, its retained messages asked
/// for (v5 Retain Handling 0 always, 1 when it is new, 2 never).
/// `denied`: the places of the filters `--mqtt-authz-http`'s backend refused.
pub(super) fn subscribe(ctx: &mut Ctx<'_>, m: &mut MqttConn, v: Version, s: crate::proto::mqtt::Subscribe<'_>, denied: &[usize]) -> Result<(), Close> {
    // Each filter is a command: a SUBSCRIBE of many costs as many.
    for _ in 0..s.subscriptions.len().max(1) {
        ctx.topics.rate.charge(ctx.req.key)?;
    }
    // The codec allows one identifier in a SUBSCRIBE, not 0.
    let sid = s.properties.subscription_ids.first().copied().unwrap_or(0);
    let mut codes = Vec::with_capacity(s.subscriptions.len());
    for (i, sub) in s.subscriptions.iter().enumerate() {
        if denied.contains(&i) {
            crate::stats::counters::bump(&mut ctx.req.stats.subscribe_refused, Close::MqttAuthzHttpDenied.as_str());
            codes.push(if v == Version::V5 { 0x87 } else { 0x80 });
            continue;
        }
        let existed = ctx.topics.has(ctx.subs, sub.filter);
        if let Some(share) = crate::proto::mqtt::topic::shared(sub.filter) {
            let code = shared::subscribe(ctx, m, sub, share).unwrap_or_else(|(code, reason)| {
                crate::stats::counters::bump(&mut ctx.req.stats.subscribe_refused, reason);
                if v == Version::V5 {
                    code
                } else {
                    0x80
                }
            });
            codes.push(code);
            continue;
        }
        let r = if wildcards::is_filter(sub.filter) {
            let who = ctx.identity();
            ctx.topics.subscribe_filter(ctx.subs, ctx.req.key, sub.filter, || who).map_err(|r| (subscribe_code(r), r.as_str()))
        } else {
            ctx.topics.subscribe(ctx.subs, ctx.req.key, sub.filter.as_bytes()).map_err(|r| (subscribe_code(r), r.as_str()))
        };
        codes.push(match r {
            Ok(()) => {
                let v5 = v == Version::V5;
                if let Some(id) = ctx.topics.sub_id(sub.filter) {
                    m.set_sub(extra::SubOpts { id, qos: sub.qos, rap: v5 && sub.retain_as_published, no_local: v5 && sub.no_local, sid });
                }
                let wanted = match (v, sub.retain_handling) {
                    (Version::V311, _) | (_, 0) => true,
                    (_, 1) => !existed,
                    _ => false,
                };
                if wanted {
                    let conn = crate::server::commands::conn_id(ctx.worker, ctx.req.key, ctx.req.gen);
                    // A filter repeated in one packet replaces its first
                    // (MQTT 3.8.4): one lookup, with the last options.
                    match ctx.published.wants.iter_mut().find(|w| w.conn == conn && w.filter == sub.filter) {
                        Some(w) => (w.qos, w.sid) = (sub.qos as u8, sid),
                        None => ctx.published.wants.push(RetainedWant { conn, filter: sub.filter.into(), qos: sub.qos as u8, sid }),
                    }
                }
                sub.qos as u8
            }
            Err((code, reason)) => {
                crate::stats::counters::bump(&mut ctx.req.stats.subscribe_refused, reason);
                if v == Version::V5 {
                    code
                } else {
                    0x80
                }
            }
        });
    }
    send(ctx, v, &Packet::SubAck(SubAck { packet_id: s.packet_id, properties: Properties::default(), codes }));
    Ok(())
}

/// The v5 SUBACK code for a refusal of the worker's topics.
fn subscribe_code(reason: Close) -> u8 {
    match reason {
        Close::NotPermitted => 0x87,
        Close::TooManyTopics | Close::TooManySubscriptions | Close::IdentityQuota => 0x97,
        _ => 0x8F,
    }
}

/// UNSUBSCRIBE: each filter dropped (and its options); v5 says which
/// were not there (0x11).
pub(super) fn unsubscribe(ctx: &mut Ctx<'_>, m: &mut MqttConn, v: Version, u: crate::proto::mqtt::Unsubscribe<'_>) -> Result<(), Close> {
    ctx.topics.rate.charge(ctx.req.key)?;
    let mut codes = Vec::new();
    for f in &u.filters {
        if crate::proto::mqtt::topic::shared(f).is_some() {
            let had = shared::unsubscribe(ctx, m, f);
            if v == Version::V5 {
                codes.push(if had { 0x00 } else { 0x11 });
            }
            continue;
        }
        let had = ctx.topics.has(ctx.subs, f);
        if let Some(id) = ctx.topics.sub_id(f).filter(|_| had) {
            m.set_sub(extra::SubOpts { id, ..Default::default() });
        }
        ctx.topics.unsubscribe(ctx.subs, ctx.req.key, f.as_bytes());
        if v == Version::V5 {
            codes.push(if had { 0x00 } else { 0x11 });
        }
    }
    send(ctx, v, &Packet::UnsubAck(SubAck { packet_id: u.packet_id, properties: Properties::default(), codes }));
    Ok(())
}
