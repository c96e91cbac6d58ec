//! Shared subscriptions (`$share/{group}/{filter}`, §4.8.2) on a worker:
//! accepted from 5.0 and 3.1.1 clients alike (as mosquitto does), checked
//! like any filter (topic and token), granted in SUBACK and reported to
//! the supervisor as a member joining its group (`SharedChange`). The
//! supervisor picks the one member of a group each message goes to
//! (`broker/shared.rs` says why there); this side keeps only what the
//! connection subscribed (to leave on UNSUBSCRIBE and at its end) and
//! how many of this worker's connections share each name.
//!
//! No retained messages are sent on a shared subscription (§4.8.2), and
//! a kept session does not keep its shared subscriptions (a resumed one
//! subscribes again).
//!
//! Bounded: [`MAX_PER_CONN`] per connection and [`MAX_PER_WORKER`]
//! distinct names per worker, a quarter of them created by one identity
//! (`limits/identity.rs`); past any the SUBACK says 0x97 (3.1.1 0x80),
//! counted in `subscribe_refused`.

use super::{Ctx, MqttConn};
use crate::proto::mqtt::topic::Shared;
use crate::proto::mqtt::{QoS, Subscription};
use crate::server::commands::{conn_id, SharedChange};
use crate::server::limits::identity::Charges;
use std::collections::HashMap;
use std::rc::Rc;

/// Most shared subscriptions of one connection.
pub(crate) const MAX_PER_CONN: usize = 16;
/// Most distinct `$share/{group}/{filter}` names a worker's connections
/// hold at once (the supervisor's bound on groups is the node's).
pub(crate) const MAX_PER_WORKER: usize = 4096;

/// One shared subscription of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Share {
    /// `$share/{group}/{filter}` as subscribed.
    pub name: Box<str>,
    pub qos: QoS,
}

/// A worker's shared subscription names, how many of its connections
/// hold each, and whom each is charged to.
#[derive(Debug)]
pub(crate) struct Local {
    names: HashMap<Box<str>, (u32, Rc<str>)>,
    charges: Charges,
}

impl Default for Local {
    fn default() -> Local {
        Local { names: HashMap::new(), charges: Charges::of(MAX_PER_WORKER) }
    }
}

impl Local {
    /// One more connection (of identity `who()`) holds `name`; Err past
    /// [`MAX_PER_WORKER`], or past `who`'s share of them for a new one.
    fn join(&mut self, name: &str, who: impl FnOnce() -> String) -> Result<(), &'static str> {
        let full = self.names.len() >= MAX_PER_WORKER;
        match self.names.get_mut(name) {
            Some((n, _)) => *n += 1,
            None if full => return Err("mqtt_shared_worker_full"),
            None => {
                let creator = self.charges.charge(&who()).ok_or("identity_quota")?;
                self.names.insert(name.into(), (1, creator));
            }
        }
        Ok(())
    }

    /// One connection less holds `name`.
    pub(crate) fn leave(&mut self, name: &str) {
        if let Some((n, _)) = self.names.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                if let Some((_, creator)) = self.names.remove(name) {
                    self.charges.release(&creator);
                }
            }
        }
    }
}

/// A shared subscription's SUBSCRIBE: Ok(granted QoS), or the v5 SUBACK
/// code and the refusal's counter name.
pub(crate) fn subscribe(ctx: &mut Ctx<'_>, m: &mut MqttConn, sub: &Subscription<'_>, s: Shared<'_>) -> Result<u8, (u8, &'static str)> {
    let plain: String = s.filter.chars().filter(|c| !matches!(c, '+' | '#')).collect();
    if sub.filter.len() > crate::proto::push::MAX_TOPIC || plain.split('/').any(|l| !l.is_empty() && crate::proto::push::check_topic(l.as_bytes()).is_err()) {
        return Err((0x8F, "bad_topic"));
    }
    if ctx.topics.gate.permits(ctx.req.key, s.filter).is_err() {
        return Err((0x87, "not_permitted"));
    }
    let x = m.extra_mut();
    let full = x.shares.len() >= MAX_PER_CONN;
    let fresh = match x.shares.iter_mut().find(|h| *h.name == *sub.filter) {
        Some(h) => {
            h.qos = sub.qos;
            false
        }
        None if full => {
            m.tidy();
            return Err((0x97, "mqtt_shared_per_connection"));
        }
        None => true,
    };
    if fresh {
        let who = ctx.identity();
        if let Err(reason) = ctx.published.shared.join(sub.filter, || who) {
            m.tidy();
            return Err((0x97, reason));
        }
        m.extra_mut().shares.push(Share { name: sub.filter.into(), qos: sub.qos });
    }
    let conn = conn_id(ctx.worker, ctx.req.key, ctx.req.gen);
    ctx.published.shared_changes.push(SharedChange { conn, name: sub.filter.into(), qos: sub.qos as u8, join: true });
    Ok(sub.qos as u8)
}

/// A shared subscription's UNSUBSCRIBE: whether it was there.
pub(crate) fn unsubscribe(ctx: &mut Ctx<'_>, m: &mut MqttConn, name: &str) -> bool {
    let Some(x) = m.extra.as_deref_mut() else { return false };
    let Some(i) = x.shares.iter().position(|h| *h.name == *name) else { return false };
    x.shares.swap_remove(i);
    m.tidy();
    ctx.published.shared.leave(name);
    let conn = conn_id(ctx.worker, ctx.req.key, ctx.req.gen);
    ctx.published.shared_changes.push(SharedChange { conn, name: name.into(), qos: 0, join: false });
    true
}

/// A connection ends: the groups it leaves (taken from it).
pub(crate) fn leave_all(m: &mut MqttConn, local: &mut Local, conn: u64) -> Vec<SharedChange> {
    let Some(x) = m.extra.as_deref_mut() else { return Vec::new() };
    let shares = std::mem::take(&mut x.shares);
    m.tidy();
    shares
        .into_iter()
        .map(|h| {
            local.leave(&h.name);
            SharedChange { conn, name: h.name.into(), qos: 0, join: false }
        })
        .collect()
}
