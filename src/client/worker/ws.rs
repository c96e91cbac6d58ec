//! A client worker's WebSocket connections: the Upgrade request once TCP
//! is up, and every read after it (the 101, then frames).

use super::{replies, wire, Stage, State, Worker};
use crate::client::ws::{target_with_topics, WsRead};
use crate::net::{self, ReadEnd};
use crate::proto::ws::handshake;
use rand::Rng;

impl Worker {
    /// TCP is up: send the Upgrade request and wait for the 101 (the
    /// connection stays "connecting", under the connect timeout).
    pub(super) fn upgrade(&mut self, k: usize, now: u64) -> bool {
        self.slots[k].stage_us = now as u32;
        self.slots[k].state = State::Upgrading;
        let g = self.cfg.first + k as u64;
        let topics: Vec<String> = match (self.cfg.traffic.subscribe.len(), self.cfg.traffic.subscribe_spread) {
            (0, _) => Vec::new(),
            (n, true) => vec![self.cfg.traffic.subscribe[(g % n as u64) as usize].clone()],
            (_, false) => self.cfg.traffic.subscribe.clone(),
        };
        self.out.clear();
        let target = target_with_topics(&self.cfg.traffic.ws_target, &topics);
        handshake::write_request(&mut self.out, &self.host_header, &target, &handshake::client_key(self.ws_seed, k as u64), &self.extra_headers);
        self.write_slot(k)
    }

    /// Read what a WebSocket connection has: the 101 (while upgrading),
    /// then pongs, echoed requests, pushes, pings and the server's close.
    pub(super) fn read_ws(&mut self, k: usize, now: u64, read_closed: bool) {
        let mask = self.rng.gen();
        let slot = &mut self.slots[k];
        let Some(stream) = slot.stream.as_mut() else { return };
        let key = (slot.state == State::Upgrading).then(|| handshake::client_key(self.ws_seed, k as u64));
        let mut replies = replies::Replies {
            stats: &mut self.stats,
            rtt: &mut self.rtt_hist,
            latency: &mut self.request_hist,
            now,
            timeout_us: self.cfg.traffic.request_timeout_us(),
            push: &mut self.push_hist,
            seen: &mut slot.seen,
            raw: None,
            beats_out: &mut slot.beats_out,
        };
        let before = replies::answers(replies.stats);
        self.ws_out.clear();
        let mut rd = WsRead {
            key: key.as_deref(),
            subprotocols: &self.cfg.traffic.subprotocols,
            message: self.ws_message.as_ref().map(|m| (m, self.cfg.traffic.request_us().is_some())),
            frag: &mut slot.ws_frag,
            tmp: &mut self.unmasked,
            out: &mut self.ws_out,
            mask,
            outcome: Default::default(),
        };
        let mut src = wire(stream, slot.tls.as_deref_mut(), &mut self.tls_bufs);
        let r = net::read_chunks(&mut src, &mut slot.partial, &mut self.scratch, read_closed, |buf| rd.consume(buf, &mut replies));
        let outcome = rd.outcome;
        if replies::answers(replies.stats) > before {
            slot.answered = true;
        }
        let sent =
            crate::tls::conn::send(slot.tls.as_deref_mut(), &mut self.tls_bufs.wire, stream, &mut slot.backlog, &self.ws_out, net::MAX_BACKLOG, "slow_reader");
        if !self.after_tls_read(k, now) {
            return;
        }
        if outcome.upgraded {
            self.stage_done(k, Stage::Upgrade, now);
            self.established(k, now);
        }
        let end = match (r, sent) {
            (ReadEnd::Error(_), _) if outcome.closed_with.is_some() => Some(format!("ws_close_{}", outcome.closed_with.unwrap_or(0))),
            (ReadEnd::Error(reason), _) => Some(reason),
            (ReadEnd::Eof, _) => Some("peer_closed".to_string()),
            (ReadEnd::Open | ReadEnd::Budget, Err(reason)) => Some(reason),
            (ReadEnd::Open, Ok(())) => None,
            (ReadEnd::Budget, Ok(())) => return self.rearm(k),
        };
        if let Some(reason) = end {
            self.lose(k, reason);
        }
    }
}
