//! MQTT keep-alive (§3.1.2.10): a client silent for one and a half times
//! the keep-alive its CONNECT asked for is closed
//! (`mqtt_keepalive_timeout`). Checked by the worker's once-a-second idle
//! sweep over its connections, against the last-seen second every
//! connection already keeps, so it costs no timer and no byte per
//! connection beyond the keep-alive in its MQTT state.

use super::Worker;
use crate::server::close::Close;

/// Whether a client last heard at `last_seen_s` is past its keep-alive at
/// `now_s` (whole seconds, so strictly more than 1.5x: never early).
pub(super) fn expired(keep_alive_s: u16, last_seen_s: u32, now_s: u32) -> bool {
    keep_alive_s > 0 && u64::from(now_s.saturating_sub(last_seen_s)) * 2 > u64::from(keep_alive_s) * 3
}

impl Worker {
    /// Close the MQTT clients past their keep-alive.
    pub(super) fn sweep_keepalive(&mut self) {
        let now = self.now_s();
        let silent: Vec<usize> =
            self.conns.iter().filter(|(k, c)| self.mqtt.get(*k).is_some_and(|m| expired(m.keep_alive_s, c.last_seen_s, now))).map(|(k, _)| k).collect();
        for key in silent {
            self.close(key, Close::MqttKeepalive);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::expired;

    /// 0 turns it off; otherwise closed only past one and a half times.
    #[test]
    fn silence_past_one_and_a_half_keep_alives_expires() {
        assert!(!expired(0, 0, 1_000_000));
        assert!(!expired(2, 10, 13), "3 s of silence is 1.5 x 2 s, not past it");
        assert!(expired(2, 10, 14));
        assert!(!expired(60, 0, 90));
        assert!(expired(60, 0, 91));
        // The largest keep-alive, and the longest silence, without overflow.
        assert!(!expired(u16::MAX, 0, 98_302));
        assert!(expired(u16::MAX, 0, 98_303));
        assert!(expired(1, 0, u32::MAX));
    }
}
