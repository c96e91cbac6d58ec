//! What a node sends through NATS: each message signed, and confirmed
//! routed (core NATS) or stored (JetStream) before the supervisor is told.

use super::*;
use crate::cluster::error::{LogError, PublishError, Unconfirmed};

/// Send every message; have NATS confirm it routed them (core) or the
/// stream that it stored them (topics and broadcasts with JetStream).
pub(super) async fn publish(
    client: &async_nats::Client,
    me: &Me,
    request: u64,
    out: Vec<Out>,
    shared: &Shared,
    log: Option<&Log>,
) -> Result<Sent, PublishFailure> {
    if client.connection_state() != async_nats::connection::State::Connected {
        return Err(PublishFailure { maybe_sent: false, reason: PublishError::Down });
    }
    // A reconnect discards what was still in the write buffer: if one
    // happens before the confirm, the outcome is unknown.
    let connects = client.statistics().connects.load(Ordering::SeqCst);
    let mut maybe_sent = false;
    let mut core_sent = false;
    let fail = |maybe_sent: bool, reason: PublishError| PublishFailure { maybe_sent, reason };
    let mut sent = Sent::default();
    for (index, o) in out.into_iter().enumerate() {
        let publish_us = o.publish_us.to_string();
        let mqtt = o.mqtt.as_ref().map(crate::cluster::MqttMeta::header).unwrap_or_default();
        let sent_before = std::mem::replace(&mut maybe_sent, true);
        let mut at = None;
        if let Some((user, close)) = &o.user {
            // Every node takes it; not kept (a per-user push has no offset).
            let target = format!("{}{user}", if *close { USER_CLOSE } else { USER_PUSH });
            let h = me.headers(crate::cluster::USERS, &target, &publish_us, "", &o.data);
            client.publish_with_headers(crate::cluster::USERS, h, o.data.into()).await.map_err(|e| fail(sent_before, PublishError::NotTaken(e)))?;
            core_sent = true;
            sent.positions.push(None);
            shared.messages_out.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match &o.target {
            Some((owner, id)) => {
                let answer = unicast(client, me, shared, owner, *id, &publish_us, o.data).await.map_err(|e| fail(true, e))?;
                sent.remote.push(answer);
            }
            None => {
                // A retained publish (or clear) also goes to every node's
                // retained set, followed there or not: once it went out.
                let retained_copy = (o.stream == Stream::Topic && o.mqtt.as_ref().is_some_and(|m| m.retain))
                    .then(|| (o.topic.clone(), me.signed_headers(RETAINED, &o.topic, &publish_us, ("", ""), &mqtt, &o.data), o.data.clone()));
                let subject = if o.stream == Stream::Topic { crate::cluster::topic_subject(&o.topic) } else { BROADCAST.to_string() };
                match log {
                    Some(log) => {
                        let stored = store(log, me, shared, (&subject, &publish_us, &mqtt), &o.data, (request, index)).await;
                        at = Some(stored.map_err(|f| fail(sent_before || f.maybe, f.reason.into()))?);
                    }
                    None => {
                        let h = me.topic_headers(&subject, &publish_us, &mqtt, &o.data);
                        client.publish_with_headers(subject, h, o.data.into()).await.map_err(|e| fail(sent_before, PublishError::NotTaken(e)))?;
                        core_sent = true;
                    }
                }
                if let Some((topic, h, data)) = retained_copy {
                    if let Err(e) = client.publish_with_headers(RETAINED, h, data.into()).await {
                        shared.error(format!("cannot send the retained message of {topic} to the other nodes: {e}"));
                    }
                    core_sent = true;
                }
            }
        }
        sent.positions.push(at);
        shared.messages_out.fetch_add(1, Ordering::Relaxed);
    }
    if !core_sent {
        // Unicasts were answered and the stream acknowledged what it stored.
        return Ok(sent);
    }
    // Every message above routed to its subscribers ([`confirmed`]).
    let confirmed = confirmed(client, CONFIRM_TIMEOUT).await;
    let reconnected = client.statistics().connects.load(Ordering::SeqCst) != connects;
    match confirmed {
        Ok(()) if !reconnected => Ok(sent),
        Ok(()) => Err(fail(maybe_sent, PublishError::Reconnected)),
        Err(e) => Err(fail(maybe_sent, e.into())),
    }
}

/// A message to connection `id` of node `owner`, asked of that node:
/// its answer (200 delivered, 404 no such node or connection, 400
/// refused, 504 no answer or one not signed by it). Err: NATS refused.
async fn unicast(
    client: &async_nats::Client,
    me: &Me,
    shared: &Shared,
    owner: &str,
    id: u64,
    publish_us: &str,
    data: Vec<u8>,
) -> Result<RemoteAnswer, PublishError> {
    let subject = crate::cluster::node_subject(owner);
    let h = me.headers(&subject, &id.to_string(), publish_us, "", &data);
    let gid = crate::cluster::global_id(owner, id);
    let answer = |status: u16, detail: serde_json::Value| RemoteAnswer { node: owner.to_string(), id: gid.clone(), status, detail };
    Ok(match client.request_with_headers(subject, h, data.into()).await {
        Ok(reply) if !me.check(&reply).is_ok_and(|origin| origin == owner) => {
            let (r, why) = me.check(&reply).err().unwrap_or((Refusal::Forged, "signed by another node".to_string()));
            shared.refuse(r, format!("dropped an answer from {owner} not signed by it: {why}"));
            answer(
                504,
                serde_json::json!({"error": format!("the answer for node '{owner}' was not signed by it ({why}); the message may or may not have been delivered")}),
            )
        }
        Ok(reply) => {
            let detail: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap_or_default();
            let status = if detail.get("error").is_some() {
                400
            } else if detail["not_found"].as_u64() == Some(0) {
                200
            } else {
                404
            };
            answer(status, detail)
        }
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => answer(
            404,
            serde_json::json!({"error": format!("no node '{owner}' in the cluster (nobody subscribes to {})", crate::cluster::node_subject(owner))}),
        ),
        Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => answer(
            504,
            serde_json::json!({"error": format!("node '{owner}' did not answer within {} s; the message may or may not have been delivered", CONFIRM_TIMEOUT.as_secs())}),
        ),
        Err(source) => return Err(PublishError::Unicast { gid: gid.to_string(), source }),
    })
}

/// A topic message or broadcast stored in the JetStream log (`subject`,
/// its publish stamp and MQTT header): its position. When this node
/// follows the subject, the stream's copy is waited for too, so every
/// message before it reached the supervisor first and this one is next
/// there (message `index` of publish `request`).
async fn store(
    log: &Log,
    me: &Me,
    shared: &Shared,
    (subject, publish_us, mqtt): (&str, &str, &str),
    data: &[u8],
    (request, index): (u64, usize),
) -> Result<Position, jslog::Failed> {
    let check = |s: &Stored| me.place(s, shared);
    let sign = |at: Position, follows: u64| me.stored_headers(subject, publish_us, at, follows, mqtt, data);
    let msg_id = me.msg_id();
    let seen = shared.await_copy(&jslog::live_subject(subject), &msg_id, request, index);
    let stored = log.publish(subject, &msg_id, data.to_vec().into(), sign, &check).await;
    match (stored, seen) {
        (r, None) => r,
        (Ok(at), Some(seen)) => {
            // The follower may be filling a gap from the stream first (at
            // most FETCH_TIMEOUT).
            let waited = tokio::time::timeout(CONFIRM_TIMEOUT + jslog::FETCH_TIMEOUT, seen).await;
            let taken = shared.own.lock().expect("own").remove(&msg_id).is_none();
            match waited {
                Ok(Ok(at)) => Ok(at),
                _ if taken => Ok(at),
                // Not seen: delivering it now could put it before messages
                // still on their way here; it is delivered when its copy arrives.
                _ => Err(jslog::Failed {
                    maybe: true,
                    reason: LogError::NotSeen { at: jslog::position_value(at), within: CONFIRM_TIMEOUT + jslog::FETCH_TIMEOUT },
                }),
            }
        }
        (Err(failed), Some(seen)) => {
            // The stream's copy went by: it was stored (and is this node's to deliver).
            let taken = shared.own.lock().expect("own").remove(&msg_id).is_none();
            match (taken, seen.await) {
                (true, Ok(at)) => Ok(at),
                _ => Err(failed),
            }
        }
    }
}

/// Whether NATS has handled everything this client sent before the call.
/// flush() only means "written to our socket"; NATS handles a
/// connection's commands in order, so its answer to a request nobody
/// listens to ("no responders") proves it has taken every subscription
/// and routed every message sent before it.
pub(super) async fn confirmed(client: &async_nats::Client, within: Duration) -> Result<(), Unconfirmed> {
    match tokio::time::timeout(within, client.request(CONFIRM, Default::default())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
        Ok(Err(e)) => Err(Unconfirmed::Refused(e)),
        Err(_) => Err(Unconfirmed::Slow(within)),
    }
}
