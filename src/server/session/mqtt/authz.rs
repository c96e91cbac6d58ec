//! `--mqtt-authz-http` in the MQTT session: the questions a PUBLISH, a
//! SUBSCRIBE or a CONNECT's will put to the backend, decided from the
//! worker's answers (`auth/authz.rs`) or held until they come.

use super::Ctx;
pub(super) use crate::server::auth::authz::Item;
use crate::server::auth::authz::{Verdict, Who};

/// What the backend says of a packet's items.
pub(super) enum Decision {
    /// No backend: each goes on as far as the rest of the checks let it.
    Off,
    /// Every item decided: the places of those denied.
    Decided(Vec<usize>),
    /// Asked: the packet waits unread.
    Held,
}

/// Decide `items` for the reading connection, as `who` (user name,
/// client id; by default its CONNECT's).
pub(super) fn decide(ctx: &mut Ctx<'_>, items: &[Item<'_>], who: Option<(&str, &str)>) -> Decision {
    let (key, gen) = (ctx.req.key, ctx.req.gen);
    let Some(a) = ctx.topics.gate.authz.as_deref_mut() else { return Decision::Off };
    let w = match who {
        Some((u, c)) => Who { username: u.into(), clientid: c.into(), peerhost: crate::sys::peer_ip(ctx.peer_fd).into() },
        None => a.who(key).cloned().unwrap_or_default(),
    };
    match a.decide(key, gen, &w, items, std::time::Instant::now()) {
        Verdict::Decided(denied) => Decision::Decided(denied),
        Verdict::Wait => Decision::Held,
    }
}

/// Whether the reading connection has a packet waiting for the backend.
pub(super) fn waits(ctx: &Ctx<'_>) -> bool {
    ctx.topics.gate.authz.as_deref().is_some_and(|a| a.waits(ctx.req.key))
}

/// The connection logged in as `user` with `client_id`: its later questions name them.
pub(super) fn connected(ctx: &mut Ctx<'_>, user: &str, client_id: &str) {
    if let Some(a) = ctx.topics.gate.authz.as_deref_mut() {
        let who = Who { username: user.into(), clientid: client_id.into(), peerhost: crate::sys::peer_ip(ctx.peer_fd).into() };
        a.connected(ctx.req.key, ctx.req.gen, who);
    }
}
