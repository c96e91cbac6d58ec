//! CONNECT: what is not supported refused with its code, the token
//! checked (`--auth jwt`: the password is the token), the will kept, the
//! inflight window set from the client's Receive Maximum, and the CONNACK
//! with what this server offers (v5 properties): at once for an empty
//! client id, else once the supervisor answered the id's claim.

use super::{extra, refuse_connect, send, Claim, Ctx, MqttConn, RECEIVE_MAXIMUM};
use crate::proto::mqtt::{ConnAck, Connect, Packet, Properties, Version};
use crate::server::broker::sessions::NEVER;
use crate::server::close::{self, Close};
use crate::server::commands::SessionClaim;

/// CONNECT: refuse what is not supported, check the token, answer.
pub(crate) fn connect(ctx: &mut Ctx<'_>, m: &mut MqttConn, c: Connect<'_>) -> Result<(), Close> {
    let v = c.version;
    if c.properties.auth_method.is_some() {
        return Err(refuse_connect(ctx, v, 0x8C, None, Close::MqttAuthMethodUnsupported));
    }
    if ctx.topics.gate.files().is_some() {
        // mosquitto's files: user name and password, refused as mosquitto
        // refuses (not authorized, whatever the reason).
        let client_id = match (c.client_id, v) {
            ("", Version::V5) => assigned_id(ctx),
            (id, _) => id.to_string(),
        };
        if let Err(reason) = ctx.topics.gate.login(ctx.req.key, ctx.req.gen, c.username, c.password, &client_id) {
            close::count(&mut ctx.req.stats.auth_refused, reason);
            return Err(refuse_connect(ctx, v, 0x87, Some(0x05), reason));
        }
    } else if ctx.topics.gate.required() {
        // The password is the token; the user name is not looked at.
        let token = c.password.map(|p| std::str::from_utf8(p).unwrap_or("\u{0}"));
        match ctx.topics.gate.verify(token) {
            Ok(claims) => ctx.topics.gate.admit(ctx.req.key, ctx.req.gen, claims),
            Err(reason) => {
                close::count(&mut ctx.req.stats.auth_refused, reason);
                // No password: bad user name or password; one refused: not authorized.
                let (v5, v3) = if token.is_none_or(str::is_empty) { (0x86, 0x04) } else { (0x87, 0x05) };
                return Err(refuse_connect(ctx, v, v5, Some(v3), reason));
            }
        }
    }
    // Past `--mqtt-max-keep-alive` (or none at all, which would be
    // forever): v5 is given the server's own, 3.1.1 refused as mosquitto
    // refuses it.
    let max = ctx.cfg.max_keep_alive;
    let keep_alive = match c.keep_alive {
        k if max == 0 || (k > 0 && k <= max) => k,
        _ if v == Version::V5 => max,
        _ => return Err(refuse_connect(ctx, v, 0, Some(0x02), Close::MqttKeepAliveRefused)),
    };
    let will = match &c.will {
        // mosquitto's ACL: a will its client may not write is never sent
        // (mosquitto drops it when it would send it); the CONNECT stands.
        Some(w) if ctx.topics.gate.files().is_some() && ctx.topics.gate.may_publish(ctx.req.key, w.topic).is_err() => {
            close::count(&mut ctx.req.stats.mqtt_publish_refused, Close::MqttAclDenied);
            None
        }
        Some(w) => Some(will(ctx, v, w)?),
        None => None,
    };
    m.version = Some(v);
    m.keep_alive_s = keep_alive;
    m.set_receive_max(c.properties.receive_maximum, ctx.cfg.flight.inflight);
    m.set_alias_maximum(v, c.properties.topic_alias_maximum);
    if will.is_some() {
        m.extra_mut().will = will;
    }
    crate::stats::counters::bump(&mut ctx.req.stats.mqtt_connects, if v == Version::V5 { "5.0" } else { "3.1.1" });
    // `--mqtt-auth-http`: the login goes with the claim; a CONNECT
    // without a client id claims the one it is assigned, so it waits for
    // the backend too.
    let login = ctx.cfg.auth_hook.then(|| crate::server::commands::Login {
        username: c.username.unwrap_or_default().to_string(),
        password: String::from_utf8_lossy(c.password.unwrap_or_default()).into_owned(),
        peerhost: crate::sys::peer_ip(ctx.peer_fd),
    });
    let assigned = login.is_some() && c.client_id.is_empty();
    let client_id = if assigned { assigned_id(ctx) } else { c.client_id.to_string() };
    if !client_id.is_empty() {
        // The supervisor's answer brings the CONNACK (`worker/mqtt_session.rs`).
        let expiry_s = match v {
            Version::V311 if c.clean_start => 0,
            Version::V311 => NEVER,
            Version::V5 => c.properties.session_expiry.unwrap_or(0),
        };
        m.set_limits(c.properties.maximum_packet_size, expiry_s);
        m.claim = Claim::Waiting;
        let conn = crate::server::commands::conn_id(ctx.worker, ctx.req.key, ctx.req.gen);
        // The id and its session are the identity's; without `--auth`
        // the worker fills in the peer's address as whom bounds charge.
        let owner = ctx.topics.gate.user_of(ctx.req.key).map(str::to_string);
        let identity = owner.clone().unwrap_or_default();
        let (clean, expiry_s) = if assigned { (true, 0) } else { (c.clean_start, expiry_s) };
        let claim = SessionClaim {
            conn,
            client_id,
            clean,
            expiry_s,
            v5: v == Version::V5,
            owner,
            identity,
            login,
            assigned: assigned && v == Version::V5,
            grant: None,
        };
        ctx.published.claims.push(claim);
        return Ok(());
    }
    m.set_limits(c.properties.maximum_packet_size, 0);
    // An empty id: v5 assigns one, unique by construction; its session
    // ends with the connection (v5 says so with Session Expiry 0).
    let assigned = (v == Version::V5).then(|| assigned_id(ctx));
    let expiry = c.properties.session_expiry.filter(|s| *s > 0).map(|_| 0);
    let mut properties = connack_properties(v, ctx.limits.max_packet_size, assigned.as_deref(), expiry);
    properties.server_keep_alive = server_keep_alive(v, m, max);
    send(ctx, v, &Packet::ConnAck(ConnAck { session_present: false, code: 0, properties }));
    Ok(())
}

/// The client id a v5 CONNECT without one is given: unique by
/// construction (worker, slot, generation).
pub(super) fn assigned_id(ctx: &Ctx<'_>) -> String {
    format!("megaconn-{}-{}-{}", ctx.worker, ctx.req.key, ctx.req.gen)
}

/// The Server Keep Alive a v5 CONNACK tells (§3.2.2.3.14): the server's
/// `--mqtt-max-keep-alive` when the connection runs on it.
fn server_keep_alive(v: Version, m: &MqttConn, max: u16) -> Option<u16> {
    (v == Version::V5 && max > 0 && m.keep_alive_s == max).then_some(max)
}

/// The supervisor accepted the claim of the connection's client id: its
/// CONNACK (session present or not) onto `out`; the connection is
/// registered (its end is reported).
pub(crate) fn claimed(out: &mut Vec<u8>, m: &mut MqttConn, (max_packet_size, max_keep_alive): (u32, u16), present: bool, assigned: Option<&str>) {
    let v = m.version.unwrap_or(Version::V311);
    m.claim = Claim::Registered;
    let mut properties = connack_properties(v, max_packet_size, assigned, None);
    properties.server_keep_alive = server_keep_alive(v, m, max_keep_alive);
    // Fields within the codec's limits: it encodes.
    let _ = crate::proto::mqtt::encode::packet(&Packet::ConnAck(ConnAck { session_present: present, code: 0, properties }), v, out);
}

/// The CONNACK properties of an accepted CONNECT: what this server offers (v5).
pub(crate) fn connack_properties(v: Version, max_packet_size: u32, assigned: Option<&str>, session_expiry: Option<u32>) -> Properties<'_> {
    match v {
        Version::V311 => Properties::default(),
        Version::V5 => Properties {
            receive_maximum: Some(RECEIVE_MAXIMUM),
            // Absent: QoS 2 and retained messages are available.
            maximum_qos: None,
            retain_available: None,
            wildcard_sub_available: Some(true),
            sub_id_available: Some(true),
            shared_sub_available: Some(true),
            topic_alias_maximum: Some(super::alias::TOPIC_ALIAS_MAXIMUM),
            maximum_packet_size: Some(max_packet_size),
            assigned_client_id: assigned,
            session_expiry,
            ..Properties::default()
        },
    }
}

/// A CONNECT's will, checked as a publish of its topic would be: the
/// topic a megaconn topic the token permits, the payload within
/// `--max-push-bytes`, its properties within what a publish may forward.
/// It keeps those properties. Err refuses the CONNECT (the reason).
fn will(ctx: &mut Ctx<'_>, v: Version, w: &crate::proto::mqtt::Will<'_>) -> Result<extra::OwnedWill, Close> {
    if crate::proto::push::check_topic(w.topic.as_bytes()).is_err() {
        return Err(refuse_connect(ctx, v, 0x90, None, Close::MqttWillBadTopic));
    }
    if super::is_sys(w.topic) || ctx.topics.gate.permits(ctx.req.key, w.topic).is_err() {
        return Err(refuse_connect(ctx, v, 0x87, Some(0x05), Close::MqttWillNotPermitted));
    }
    if w.payload.len() > ctx.cfg.max_push {
        return Err(refuse_connect(ctx, v, 0x95, None, Close::MqttWillTooLarge));
    }
    let delay_s = w.properties.will_delay.unwrap_or(0);
    let Ok(fwd) = crate::proto::mqtt::forward::Forwarded::from_publish(&w.properties, None) else {
        return Err(refuse_connect(ctx, v, 0x95, None, Close::MqttWillTooLarge));
    };
    let mqtt = crate::proto::mqtt::forward::Forwarded::stored(Some(&fwd));
    Ok(extra::OwnedWill { topic: w.topic.into(), payload: w.payload.into(), qos: w.qos, retain: w.retain, delay_s, mqtt })
}
