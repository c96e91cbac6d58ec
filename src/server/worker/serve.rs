//! The read path of a server worker: frames, echo8 units and HTTP
//! requests in, heartbeat acks, replies and subscriptions out, and the
//! business stage's finished jobs delivered in order.

use super::{io, Worker};
use crate::net::{self, Carried, ReadEnd};
use crate::proto::{Protocol, ECHO8_LEN};
use crate::server::close::Close;
use crate::server::session::ext::HttpExt;
use crate::server::session::requests::Requests;
use crate::server::session::{framed, http, kind, mqtt, mqtt_ws, ws};
use std::time::Instant;

type Wire<'a> = crate::tls::conn::Wire<'a, rustls::server::UnbufferedServerConnection>;

impl Worker {
    /// Readiness of a connection (epoll), or bytes its receive brought
    /// (`received`, io_uring, with whether more of what came with them
    /// may be in the next receive): read what is there, answer, flush.
    pub(super) fn on_conn_event(&mut self, key: usize, readable: bool, read_closed: bool, writable: bool, received: Option<(&[u8], bool)>) {
        let (received, cut) = (received.map(|(bytes, _)| bytes), received.is_some_and(|(_, cut)| cut));
        let Some(readable) = self.may_read(key, readable || received.is_some()) else { return };
        let now_s = self.now_s();
        let now_ds = self.now_ds();
        let reserve = self.mqtt_reserve();
        let Some(conn) = self.conns.get_mut(key) else { return };
        let mut end: Option<Close> = None;
        let mut rearm = false;
        if writable && conn.spills.has_backlog() && !conn.sending() {
            if let Err(e) = net::try_flush(&mut conn.stream, &mut conn.spills.backlog()) {
                end = Some(Close::send(e, Close::SlowReader));
            }
        }
        // Draining: in-flight answers go out, nothing new is read, except
        // on long-lived connections waiting for their turn to close.
        if readable && end.is_none() && (!self.draining || self.drain.is_some()) {
            conn.last_seen_s = now_s;
            self.out.clear();
            let gen = conn.gen;
            // permessage-deflate: the connection's flag, as its read may change it.
            let deflate = conn.ws_deflate();
            let mut negotiated = deflate;
            // The seam: whether its opening is still to be read, and whether
            // this read completed it.
            let unread = conn.unread();
            let mut opened = false;
            // The protocol of the port it came in on.
            let protocol = super::protocol_of(&self.cfg.services, conn);
            let mut req =
                Requests { out: &mut self.out, stats: &mut self.stats, stage: &mut self.stage, rng: &mut self.rng, service: &self.cfg.service_time, key, gen };
            let mut rx = net::Received(received.unwrap_or_default());
            // A connection of a TLS port reads through its TLS state (none
            // left: it is closing); one of a plain port, beside them, as is.
            let tls_port = self.cfg.services.get(conn.service()).is_some_and(|s| s.tls);
            let (tls, plaintext_reply) = match self.tls.as_mut().filter(|_| tls_port).map(|t| t.reading(key)) {
                Some(None) => return,
                // Cleartext HTTP is answered only on an HTTP or WebSocket port.
                Some(Some((tls, reply))) => (Some(tls), reply.filter(|_| kind::answers_cleartext(protocol))),
                None => (None, None),
            };
            // Whom an MQTT claim without an owner is charged to (its address).
            let fd = std::os::fd::AsRawFd::as_raw_fd(&conn.stream);
            let mut got = 0u64;
            let mut src = Counted { inner: Wire::of(&mut conn.stream, received.map(|_| &mut rx), tls, plaintext_reply), n: &mut got };
            let r = match protocol {
                Protocol::Framed => {
                    let mut ctx = framed::Ctx {
                        req,
                        topics: &mut self.topics,
                        subs: &mut conn.subs,
                        recoveries: &mut self.recoveries,
                        upstream: self.upstream.as_mut(),
                        opening: framed::Opening::default(),
                    };
                    let ext = &mut conn.ext;
                    let r = read(&mut src, &mut conn.spills.partial(), &mut self.scratch, read_closed, |buf| framed::consume(&mut ctx, ext, buf));
                    let framed::Opening { resumed, resumed_broadcasts, frames } = ctx.opening;
                    let req = ctx.req;
                    if resumed {
                        self.seam.resumed();
                    }
                    // The broadcasts held since its accept: a resume of them
                    // recovers them in order (or starts after them); anything
                    // else gets them now. Not before its whole opening was
                    // read: a receive may bring only part of it, and the
                    // broadcasts' resume may be in the next (see seam.rs).
                    // Never to one that has not shown its token (`--auth jwt`):
                    // what was held for it is dropped, as a live push skips it.
                    let first = super::seam::FirstRead {
                        resumed_broadcasts,
                        frames,
                        unfinished: conn.spills.has_partial() || r == ReadEnd::Budget || cut,
                        ended: matches!(r, ReadEnd::Eof | ReadEnd::Error(_)),
                    };
                    opened = unread && first.settles();
                    let held = if opened { self.seam.read(key, gen) } else { None };
                    if let Some(h) = held.filter(|_| !resumed_broadcasts && !crate::server::session::ext::awaiting_auth(ext)) {
                        for f in &h.frames {
                            req.out.extend_from_slice(f);
                        }
                        req.stats.frames_out += h.frames.len() as u64;
                        req.stats.push_delivered += h.frames.len() as u64;
                    }
                    r
                }
                Protocol::Http => {
                    let http = &mut conn.ext;
                    let mut ctx = http::Ctx {
                        req,
                        cfg: &self.cfg.http,
                        date: &self.date,
                        topics: &mut self.topics,
                        subs: &mut conn.subs,
                        recoveries: &mut self.recoveries,
                        now_s,
                        asks: self.cfg.mqtt.auth_hook.then_some(&mut self.upgrade_asks),
                    };
                    let r = read(&mut src, &mut conn.spills.partial(), &mut self.scratch, read_closed, |buf| http::consume(&mut ctx, http, buf));
                    http::track_partial(&mut conn.ext, conn.spills.has_partial(), now_ds);
                    super::upgrade::emit(self.cfg.worker, &mut self.upgrade_asks, || crate::sys::peer_ip(fd));
                    r
                }
                Protocol::Ws => {
                    let ws = ws::Ctx {
                        req,
                        cfg: &self.cfg.ws,
                        topics: &mut self.topics,
                        subs: &mut conn.subs,
                        recoveries: &mut self.recoveries,
                        now_s,
                        tmp: &mut self.unmasked,
                        upstream: self.upstream.as_mut(),
                        codec: self.ws_codec.as_deref_mut(),
                        deflate,
                        mqtt: false,
                        asks: self.cfg.mqtt.auth_hook.then_some(&mut self.upgrade_asks),
                    };
                    // MQTT over WebSocket is served on the same port.
                    let mut ctx = mqtt_ws::Ctx {
                        ws,
                        mqtt: &self.cfg.mqtt,
                        limits: &self.mqtt_limits,
                        published: &mut self.published,
                        worker: self.cfg.worker,
                        peer_fd: fd,
                    };
                    let ext = &mut conn.ext;
                    // Its MQTT state, if an Upgrade chose MQTT, out of the
                    // table for the read (a JSON WebSocket connection gets
                    // no entry there: the table's entries are 32 bytes).
                    let mut m = self.mqtt.take(key);
                    // What permessage-deflate inflated counts against the
                    // read budget, a scratch buffer's worth a read.
                    let (charged, unit) = (std::cell::Cell::new(0), self.scratch.len() as u64);
                    let consume = |buf: &[u8]| {
                        let before = ctx.ws.req.stats.ws_inflate_bytes_after;
                        let r = mqtt_ws::consume(&mut ctx, ext, &mut m, buf);
                        charged.set(charged.get() + ((ctx.ws.req.stats.ws_inflate_bytes_after - before) / unit) as usize);
                        r
                    };
                    let r = net::read_chunks_charged(&mut src, &mut conn.spills.partial(), &mut self.scratch, read_closed, consume, Close::io, &charged);
                    if m.is_some() {
                        *self.mqtt.entry(key, reserve) = m;
                    }
                    negotiated = ctx.ws.deflate;
                    super::mqtt_session::emit(self.cfg.worker, &mut self.published, &mut self.topics, &mut self.bus, &mut self.stats.mqtt_authz_asked, || {
                        crate::sys::peer_ip(fd)
                    });
                    super::upgrade::emit(self.cfg.worker, &mut self.upgrade_asks, || crate::sys::peer_ip(fd));
                    r
                }
                Protocol::Mqtt => {
                    let mut ctx = mqtt::Ctx {
                        req,
                        cfg: &self.cfg.mqtt,
                        limits: &self.mqtt_limits,
                        topics: &mut self.topics,
                        subs: &mut conn.subs,
                        published: &mut self.published,
                        worker: self.cfg.worker,
                        upstream: self.upstream.as_mut(),
                        peer_fd: fd,
                    };
                    // Made at its accept, gone only with the connection.
                    let mut m = self.mqtt.get_mut(key);
                    let r = read(&mut src, &mut conn.spills.partial(), &mut self.scratch, read_closed, |buf| match m.as_deref_mut() {
                        Some(m) => mqtt::consume(&mut ctx, m, buf),
                        None => Err(Close::MqttNoState),
                    });
                    // Into the topic space before the PUBACKs go out.
                    super::mqtt_session::emit(self.cfg.worker, &mut self.published, &mut self.topics, &mut self.bus, &mut self.stats.mqtt_authz_asked, || {
                        crate::sys::peer_ip(fd)
                    });
                    r
                }
                // Raw and sse are client protocols (refused by the server's plan).
                Protocol::Echo | Protocol::Discard | Protocol::Raw | Protocol::Sse => {
                    let echo = kind::echoes(protocol);
                    read(&mut src, &mut conn.spills.partial(), &mut self.scratch, read_closed, |buf| {
                        req.stats.frames_in += 1;
                        if echo {
                            req.out.extend_from_slice(buf);
                            req.stats.frames_out += 1;
                        }
                        Ok(buf.len())
                    })
                }
                Protocol::Echo8 => net::read_fixed_as(
                    &mut src,
                    &mut conn.spills.partial(),
                    &mut self.scratch,
                    read_closed,
                    ECHO8_LEN,
                    |u| {
                        req.handle(u.to_vec(), false);
                        Ok(())
                    },
                    Close::io,
                ),
            };
            self.stats.bytes_received += got;
            if opened {
                conn.set_read();
            }
            if negotiated != deflate {
                conn.set_ws_deflate(negotiated);
            }
            rearm = self.answer_read(key, r, &mut end);
        }
        if let Some(reason) = end {
            self.close(key, reason);
        } else if rearm {
            self.rearm(key);
        }
    }

    /// Whether connection `key`, `readable`, is to be read now: not
    /// while the bus to the shards is full and it may publish (TCP holds
    /// its client back until the bus drains), nor while a packet of it
    /// waits for `--mqtt-authz-http`; on the ring its receive is stopped
    /// then, and what the receive brought is still read (kept with the
    /// packet). None: the connection is gone.
    fn may_read(&mut self, key: usize, readable: bool) -> Option<bool> {
        if readable && self.bus.congested() && self.may_publish(key) {
            let gen = self.conns.get(key).map_or(0, |c| c.gen);
            self.stats.bus_paused += 1;
            self.bus.paused.push((key, gen));
            match (&mut self.ring, self.conns.get(key)) {
                (Some(r), Some(c)) => r.next.ops.push(crate::uring::Op::Cancel { tag: crate::uring::recv_tag(key, c.gen) }),
                _ => return None,
            }
        }
        let held = readable && self.topics.gate.authz.as_mut().is_some_and(|a| a.pause(key));
        Some(match (held, &mut self.ring, self.conns.get(key)) {
            (false, ..) => readable,
            (true, Some(r), Some(c)) => {
                r.next.ops.push(crate::uring::Op::Cancel { tag: crate::uring::recv_tag(key, c.gen) });
                true
            }
            (true, ..) => false,
        })
    }

    /// After a read of connection `key` that ended `r`: its TLS
    /// handshake's outcome counted, what it decoded answered (even when
    /// the stream then ended, behind the interest it gained), and why it
    /// ends into `end`. True: its read budget ran out, read it again.
    fn answer_read(&mut self, key: usize, r: ReadEnd<Close>, end: &mut Option<Close>) -> bool {
        match self.tls.as_mut().and_then(|t| t.get(key)).and_then(|t| t.take_finished()) {
            Some(Ok(resumed)) => {
                self.stats.tls_handshakes += 1;
                self.stats.tls_resumed += resumed as u64;
            }
            Some(Err(reason)) => *end = Some(Close::tls(reason)),
            None => {}
        }
        self.bus.before_reply(&mut self.topics);
        let Some(conn) = self.conns.get_mut(key) else { return false };
        if let Err(reason) = io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, self.reply_cap, Close::SlowReader) {
            end.get_or_insert(reason);
        }
        match r {
            ReadEnd::Open => false,
            ReadEnd::Budget => true,
            ReadEnd::Eof => {
                end.get_or_insert(Close::PeerClosed);
                false
            }
            ReadEnd::Error(reason) => {
                end.get_or_insert(reason);
                false
            }
        }
    }

    /// Whether reading connection `key` may publish into the topic space
    /// (an MQTT client, on an MQTT port or over WebSocket).
    fn may_publish(&self, key: usize) -> bool {
        self.mqtt.get(key).is_some()
    }

    /// Read a connection paused while the bus was full again: a new edge
    /// for what waits (epoll), a new receive (the ring).
    pub(super) fn resume_reading(&mut self, key: usize) {
        let Some(conn) = self.conns.get(key) else { return };
        match &mut self.ring {
            Some(r) => {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&conn.stream);
                r.next.ops.push(crate::uring::Op::Recv { fd, tag: crate::uring::recv_tag(key, conn.gen) });
            }
            None => self.rearm(key),
        }
    }

    /// A connection stopped at its read budget: ask epoll for a new edge
    /// (EPOLL_CTL_MOD reports data already waiting).
    fn rearm(&mut self, key: usize) {
        // On the ring a receive brings what came; there is nothing to rearm.
        let Some(conn) = self.conns.get_mut(key).filter(|c| c.watched() && self.ring.is_none()) else { return };
        if self.poll.registry().reregister(&mut conn.stream, mio::Token(key), mio::Interest::READABLE | mio::Interest::WRITABLE).is_err() {
            self.close(key, Close::RearmFailed);
        }
    }

    /// Send the replies of jobs the business stage finished since last time.
    pub(super) fn deliver_done(&mut self) {
        for done in self.stage.take_done(Instant::now()) {
            self.stats.count_reply(done.applied);
            let Some(conn) = self.conns.get_mut(done.job.key) else { continue };
            if conn.gen != done.job.gen {
                continue;
            }
            if let Err(reason) = io::send(self.tls.as_mut(), self.ring.as_mut(), done.job.key, conn, &done.job.reply, self.reply_cap, Close::SlowReader) {
                self.close(done.job.key, reason);
                continue;
            }
            if kind::pipelines(super::protocol_of(&self.cfg.services, conn)) {
                self.resume_http(done.job.key);
            }
        }
    }

    /// After an HTTP reply left the business stage: close if the request
    /// asked to, else parse what was pipelined behind it.
    pub(super) fn resume_http(&mut self, key: usize) {
        let (now_ds, now_s) = (self.now_ds(), self.now_s());
        let Some(conn) = self.conns.get_mut(key) else { return };
        let Some(h) = conn.ext.http_mut() else { return };
        h.awaiting = false;
        if h.close_after {
            return self.close(key, Close::HttpConnectionClose);
        }
        self.reread_http(key, now_ds, now_s);
    }

    /// Parse what waited in an HTTP connection's partial input (pipelined
    /// behind a reply, or an event-stream request held for the backend).
    pub(super) fn reread_http(&mut self, key: usize, now_ds: u32, now_s: u32) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        let Some(buf) = conn.spills.partial().take() else {
            http::track_partial(&mut conn.ext, false, now_ds);
            return;
        };
        self.out.clear();
        let req = Requests {
            out: &mut self.out,
            stats: &mut self.stats,
            stage: &mut self.stage,
            rng: &mut self.rng,
            service: &self.cfg.service_time,
            key,
            gen: conn.gen,
        };
        let mut ctx = http::Ctx {
            req,
            cfg: &self.cfg.http,
            date: &self.date,
            topics: &mut self.topics,
            subs: &mut conn.subs,
            recoveries: &mut self.recoveries,
            now_s,
            asks: self.cfg.mqtt.auth_hook.then_some(&mut self.upgrade_asks),
        };
        let r = http::consume(&mut ctx, &mut conn.ext, &buf);
        let mut end = r.as_ref().err().copied();
        if let Ok(used) = r {
            if used < buf.len() {
                conn.spills.partial().hold(buf[used..].to_vec());
            }
        }
        http::track_partial(&mut conn.ext, conn.spills.has_partial(), now_ds);
        self.bus.before_reply(&mut self.topics);
        if let Err(reason) = io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, self.reply_cap, Close::SlowReader) {
            end.get_or_insert(reason);
        }
        if let Some(reason) = end {
            self.close(key, reason);
        }
    }
}

/// Read what the socket has into `consume` (see [`net::read_chunks_as`]),
/// ending with the session's own reason or the socket's error.
/// A connection's bytes, counted as they are read (`bytes_received`).
struct Counted<'n, S> {
    inner: S,
    n: &'n mut u64,
}

impl<S: net::Source> net::Source for Counted<'_, S> {
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<(usize, bool)> {
        let r = self.inner.read_some(buf);
        if let Ok((n, _)) = r {
            *self.n += n as u64;
        }
        r
    }
}

fn read<S: net::Source>(
    src: &mut S,
    partial: &mut impl net::Carried,
    scratch: &mut [u8],
    read_closed: bool,
    consume: impl FnMut(&[u8]) -> Result<usize, Close>,
) -> ReadEnd<Close> {
    net::read_chunks_as(src, partial, scratch, read_closed, consume, Close::io)
}

impl Worker {
    /// What a read of held input wrote (`self.out`) goes out behind the
    /// interest it gained; the connection then closes with `end`, or with
    /// a send's failure (a claim answered, a held Upgrade decided).
    pub(super) fn reply_resumed(&mut self, key: usize, mut end: Option<Close>) {
        self.bus.before_reply(&mut self.topics);
        let Some(conn) = self.conns.get_mut(key) else { return };
        if let Err(reason) = io::send(self.tls.as_mut(), self.ring.as_mut(), key, conn, &self.out, self.reply_cap, Close::SlowReader) {
            end.get_or_insert(reason);
        }
        if let Some(reason) = end {
            self.close(key, reason);
        }
    }
}
