//! Connections that owe their first words by a deadline: a WebSocket's
//! Upgrade request, an MQTT CONNECT, a framed connection's token (`--auth jwt`). Each is
//! queued at accept with its deadline, in accept order, and the queue's
//! front is looked at on every loop iteration: a million held connections
//! cost nothing here, where a sweep over all of them every 100 ms cost a
//! 1M server seconds of CPU.

use super::Worker;
use crate::server::close::Close;
use crate::server::session::ext::{awaiting_auth, ws_handshaking};
use std::collections::VecDeque;
use std::time::Duration;

/// Queue capacity above which an emptied queue gives its memory back.
const SHRINK_ABOVE: usize = 1024;

impl Worker {
    /// Connection `key` must have spoken by `--header-timeout` from now.
    pub(super) fn head_due(&mut self, key: usize, gen: u32) {
        let due = self.now_ds() + (self.cfg.http.header_timeout_ms / 100).max(1) as u32;
        self.heads.push_back((due, key as u32, gen));
    }

    /// Close what is still silent at its deadline: `header_timeout` (no
    /// Upgrade request) or `auth_timeout` (no token).
    pub(super) fn expire_heads(&mut self) {
        if self.heads.front().is_none_or(|(due, ..)| *due > self.now_ds()) {
            return;
        }
        let now = self.now_ds();
        while let Some(&(due, key, gen)) = self.heads.front() {
            if due > now {
                break;
            }
            self.heads.pop_front();
            let key = key as usize;
            let Some(c) = self.conns.get(key).filter(|c| c.gen == gen) else { continue };
            if ws_handshaking(&c.ext) || crate::server::session::mqtt::connecting(self.mqtt.get(key)) {
                self.close(key, Close::HeaderTimeout);
            } else if awaiting_auth(&c.ext) {
                self.close(key, Close::AuthTimeout);
            }
        }
        // A ramp's worth of deadlines is gone: so is its memory.
        if self.heads.is_empty() && self.heads.capacity() > SHRINK_ABOVE {
            self.heads = VecDeque::new();
            self.trim.freed();
        }
    }

    /// How long until the next deadline, if any.
    pub(super) fn next_head_due(&self) -> Option<Duration> {
        let (due, ..) = self.heads.front()?;
        Some(Duration::from_millis(*due as u64 * 100).saturating_sub(self.started.elapsed()))
    }
}
