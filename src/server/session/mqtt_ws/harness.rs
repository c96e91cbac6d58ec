//! An MQTT-over-WebSocket connection driven by bytes alone (a WebSocket
//! port's read parts owned here): what the unit tests and the
//! `mqtt_ws` fuzz target feed.

use super::*;
use crate::server::session::fixture::Read;
use crate::server::session::ws::{PushFormat, WsConfig};
use crate::server::tables::recovery::Recoveries;

/// A WebSocket port's read parts, and the connection's own state.
pub(crate) struct Port {
    pub(crate) read: Read,
    recoveries: Recoveries,
    tmp: Vec<u8>,
    pub(crate) published: Published,
    ws: WsConfig,
    mqtt: MqttConfig,
    pub(crate) ext: Ext,
    /// Its MQTT state once the Upgrade chose MQTT (the worker's table entry).
    pub(crate) mqtt_state: Option<MqttConn>,
}

pub(crate) fn port() -> Port {
    Port {
        read: Read::new(),
        recoveries: Recoveries::default(),
        tmp: Vec::new(),
        published: Published::default(),
        ws: WsConfig { max_message: 64 * 1024, max_head: 8192, push_format: PushFormat::Text, deflate: Default::default() },
        mqtt: MqttConfig { max_push: 1024, flight: Default::default(), max_keep_alive: 0, auth_hook: false, authz_hook: None },
        ext: ws::fresh(1),
        mqtt_state: None,
    }
}

impl Port {
    /// Feed `buf`: (the bytes used or the close's name, what was written).
    pub(crate) fn feed(&mut self, buf: &[u8]) -> (Result<usize, &'static str>, Vec<u8>) {
        let limits = self.mqtt.limits();
        let (req, topics, subs) = self.read.split();
        let ws = ws::Ctx {
            req,
            cfg: &self.ws,
            topics,
            subs,
            recoveries: &mut self.recoveries,
            now_s: 0,
            tmp: &mut self.tmp,
            upstream: None,
            codec: None,
            deflate: false,
            mqtt: false,
            asks: None,
        };
        let mut ctx = Ctx { ws, mqtt: &self.mqtt, limits: &limits, published: &mut self.published, worker: 0, peer_fd: -1 };
        let r = consume(&mut ctx, &mut self.ext, &mut self.mqtt_state, buf).map_err(Close::as_str);
        (r, std::mem::take(&mut self.read.out))
    }
}

/// An Upgrade offering `protocols`.
pub(crate) fn upgrade(protocols: &str) -> Vec<u8> {
    format!(
        "GET /mqtt HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocols}\r\n\r\n"
    )
    .into_bytes()
}

/// A WebSocket port's connection that offered `mqtt`, fed the fuzzer's
/// bytes whole and cut in two reads (a read's unused rest comes back
/// with the next, as the worker keeps it): no panic, never more used than
/// given, and what waits between reads within a packet's bound.
pub(crate) fn fuzz(data: &[u8]) {
    let (a, b) = crate::proto::fuzz_split(data);
    for reads in [&[data][..], &[a, b][..]] {
        let mut p = port();
        let head = upgrade("mqtt");
        assert_eq!(p.feed(&head).0, Ok(head.len()), "the Upgrade is taken");
        let max = p.mqtt.limits().max_packet_size as usize;
        let mut unread: Vec<u8> = Vec::new();
        for read in reads {
            unread.extend_from_slice(read);
            match p.feed(&unread).0 {
                Ok(used) => {
                    assert!(used <= unread.len(), "used {used} of {}", unread.len());
                    unread.drain(..used);
                }
                Err(_) => break,
            }
            let held = p.mqtt_state.as_ref().and_then(|m| m.extra.as_deref()).map_or(0, |x| x.carry.held());
            assert!(held <= 2 * max + 64 * 1024, "{held} bytes carried");
        }
    }
}
