//! Per-connection and per-worker bounds a server worker enforces beyond
//! its basic config: the topic cap, the stall timeout, TCP keepalive and
//! `TCP_USER_TIMEOUT`, and the per-source-address connection cap.
//! The fleet resolves them once ([`ConnLimits::of`]) into every worker's
//! config.
pub(crate) mod cap;
pub(crate) mod command_rate;
pub(crate) mod identity;
pub(crate) mod per_ip;

use serde::{Deserialize, Serialize};
#[cfg(test)]
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

/// Default `--stall-timeout`: a partial frame, WebSocket fragment or
/// unsent backlog that has not moved for this long is dropped with its
/// connection.
pub(crate) const DEFAULT_STALL: Duration = Duration::from_secs(30);
/// `--tcp-keepalive auto` off loopback: first probe after this much
/// silence (then every quarter of it, [`KEEPALIVE_PROBES`] times).
pub(crate) const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(60);
/// Unanswered keepalive probes before the kernel drops a connection.
pub(crate) const KEEPALIVE_PROBES: u32 = 4;
/// `--tcp-user-timeout auto` off loopback: sent data unacknowledged this
/// long drops the connection (a peer that vanished).
pub(crate) const DEFAULT_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// A socket timer flag: `auto` (on with its default unless the server
/// listens on loopback), `off`, or a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) enum SocketTimer {
    #[default]
    Auto,
    Off,
    On(Duration),
}

impl SocketTimer {
    /// What to set on an accepted socket of a server listening on `listen`.
    pub(crate) fn resolve(self, listen: std::net::IpAddr, default: Duration) -> Option<Duration> {
        match self {
            SocketTimer::Auto if listen.is_loopback() => None,
            SocketTimer::Auto => Some(default),
            SocketTimer::Off => None,
            SocketTimer::On(d) => Some(d),
        }
    }
}

impl FromStr for SocketTimer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(SocketTimer::Auto),
            "off" => Ok(SocketTimer::Off),
            t => match crate::values::duration(t) {
                Ok(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(24 * 3600) => Ok(SocketTimer::On(d)),
                Ok(_) => Err(format!("'{t}' is outside 1s..24h (or say auto or off)")),
                Err(e) => Err(format!("{e}; expected auto, off or a duration like 60s")),
            },
        }
    }
}

/// `--stall-timeout`: off, or 100ms..24h.
pub(crate) fn stall_timeout(s: &str) -> Result<Option<Duration>, String> {
    let t = s.trim();
    if t == "off" {
        return Ok(None);
    }
    match crate::values::duration(t) {
        Ok(d) if d >= Duration::from_millis(100) && d <= Duration::from_secs(24 * 3600) => Ok(Some(d)),
        Ok(_) => Err(format!("'{t}' is outside 100ms..24h (or say off)")),
        Err(e) => Err(e),
    }
}

fn default_commands() -> u32 {
    command_rate::DEFAULT_PER_SECOND
}

/// What a worker enforces per connection, resolved for its listen address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConnLimits {
    /// `--max-topics`: topics with subscribers per worker.
    pub max_topics: usize,
    /// `--max-commands-per-second`.
    #[serde(default = "default_commands")]
    pub max_commands_per_second: u32,
    /// `--stall-timeout` in ms; None: off.
    pub stall_timeout_ms: Option<u64>,
    /// TCP keepalive idle time in ms; None: no keepalive.
    pub keepalive_ms: Option<u64>,
    /// `TCP_USER_TIMEOUT` in ms; None: the kernel's default.
    pub user_timeout_ms: Option<u64>,
    /// `--max-connections-per-ip` and the shared table's memfd.
    pub per_ip: Option<(u32, i32)>,
}

impl Default for ConnLimits {
    fn default() -> ConnLimits {
        ConnLimits {
            max_topics: crate::server::tables::topics::DEFAULT_MAX_TOPICS,
            max_commands_per_second: command_rate::DEFAULT_PER_SECOND,
            stall_timeout_ms: Some(DEFAULT_STALL.as_millis() as u64),
            keepalive_ms: None,
            user_timeout_ms: None,
            per_ip: None,
        }
    }
}

impl ConnLimits {
    /// Supervisor: the bounds of `cfg`, creating the per-address table
    /// when capped.
    pub(crate) fn of(cfg: &crate::server::ServerConfig) -> std::io::Result<ConnLimits> {
        let per_ip = match cfg.max_connections_per_ip {
            Some(n) => Some((n, per_ip::PerIp::create()?)),
            None => None,
        };
        Ok(ConnLimits {
            max_topics: cfg.max_topics,
            max_commands_per_second: cfg.max_commands_per_second,
            stall_timeout_ms: cfg.stall_timeout.map(|d| d.as_millis().max(1) as u64),
            keepalive_ms: cfg.tcp_keepalive.resolve(cfg.listen, DEFAULT_KEEPALIVE).map(|d| d.as_millis() as u64),
            user_timeout_ms: cfg.tcp_user_timeout.resolve(cfg.listen, DEFAULT_USER_TIMEOUT).map(|d| d.as_millis() as u64),
            per_ip,
        })
    }

    /// Set keepalive and `TCP_USER_TIMEOUT` on an accepted socket.
    pub(crate) fn apply(&self, stream: &mio::net::TcpStream) {
        let sock = socket2::SockRef::from(stream);
        if let Some(ms) = self.keepalive_ms {
            let idle = Duration::from_millis(ms);
            let every = (idle / 4).max(Duration::from_secs(1));
            let ka = socket2::TcpKeepalive::new().with_time(idle).with_interval(every).with_retries(KEEPALIVE_PROBES);
            let _ = sock.set_tcp_keepalive(&ka);
        }
        if let Some(ms) = self.user_timeout_ms {
            let _ = sock.set_tcp_user_timeout(Some(Duration::from_millis(ms)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_timers_parse_and_resolve() {
        assert_eq!("auto".parse::<SocketTimer>(), Ok(SocketTimer::Auto));
        assert_eq!("off".parse::<SocketTimer>(), Ok(SocketTimer::Off));
        assert_eq!("90s".parse::<SocketTimer>(), Ok(SocketTimer::On(Duration::from_secs(90))));
        assert!("10ms".parse::<SocketTimer>().unwrap_err().contains("1s..24h"));
        assert!("soon".parse::<SocketTimer>().is_err());
        assert_eq!(stall_timeout("off"), Ok(None));
        assert_eq!(stall_timeout("2s"), Ok(Some(Duration::from_secs(2))));
        assert!(stall_timeout("0").is_err() && stall_timeout("1000000h").is_err());
        let d = Duration::from_secs(60);
        assert_eq!(SocketTimer::Auto.resolve(Ipv4Addr::LOCALHOST.into(), d), None);
        assert_eq!(SocketTimer::Auto.resolve(std::net::Ipv6Addr::LOCALHOST.into(), d), None);
        assert_eq!(SocketTimer::Auto.resolve(Ipv4Addr::UNSPECIFIED.into(), d), Some(d));
        assert_eq!(SocketTimer::Off.resolve(Ipv4Addr::UNSPECIFIED.into(), d), None);
    }
}
