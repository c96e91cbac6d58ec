//! `--url`: the server to load, as a user copies it from their app:
//! `ws://`, `wss://`, `http://` or `https://`, a host name or address, a
//! port (default 80 or 443), a path and query.

use std::net::{Ipv4Addr, ToSocketAddrs};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// WebSocket (ws, wss) or HTTP (http, https).
    pub websocket: bool,
    /// wss:// or https://.
    pub tls: bool,
    /// The host as written (the Host header and the TLS server name).
    pub host: String,
    pub port: u16,
    /// Path and query, e.g. `/chat?room=1`.
    pub target: String,
    /// The host's IPv4 addresses (the connections spread over them);
    /// empty until resolved (see [`url_arg`]).
    pub addrs: Vec<Ipv4Addr>,
}

impl Url {
    /// The Host header: the host, and the port unless it is the scheme's.
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Parse `--url` (no name lookup: see [`url_arg`]).
pub fn parse_url(s: &str) -> Result<Url, String> {
    let (websocket, tls, rest) = if let Some(r) = s.strip_prefix("ws://") {
        (true, false, r)
    } else if let Some(r) = s.strip_prefix("wss://") {
        (true, true, r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (false, false, r)
    } else if let Some(r) = s.strip_prefix("https://") {
        (false, true, r)
    } else {
        return Err(format!("{s:?} is not a ws://, wss://, http:// or https:// URL (e.g. ws://127.0.0.1:8000/chat)"));
    };
    let (authority, target) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'?' => (&rest[..i], format!("/{}", &rest[i..])),
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return Err(format!("{s:?} has credentials in it; send them with -H 'Authorization: ...'"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(|| format!("unclosed '[' in {s:?}"))?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| format!("bad port {p:?} in {s:?}"))?,
        None if tls => 443,
        None => 80,
    };
    if host.is_empty() || host.bytes().any(|b| !(b.is_ascii_alphanumeric() || b"-._:".contains(&b))) {
        return Err(format!("bad host {host:?} in {s:?}"));
    }
    if target.bytes().any(|b| b <= b' ' || b == 0x7F) {
        return Err(format!("the path in {s:?} has spaces or control characters; percent-encode them"));
    }
    let addrs = host.parse::<Ipv4Addr>().map(|a| vec![a]).unwrap_or_default();
    Ok(Url { websocket, tls, host: host.to_string(), port, target, addrs })
}

/// Parse `--url` and resolve its host: every IPv4 address it has.
pub fn url_arg(s: &str) -> Result<Url, String> {
    let mut u = parse_url(s)?;
    if u.addrs.is_empty() {
        u.addrs = resolve(&u.host, u.port)?;
    }
    Ok(u)
}

fn resolve(host: &str, port: u16) -> Result<Vec<Ipv4Addr>, String> {
    let found: Vec<std::net::SocketAddr> = (host, port).to_socket_addrs().map_err(|e| format!("cannot resolve {host:?}: {e}"))?.collect();
    let mut v4: Vec<Ipv4Addr> = found
        .iter()
        .filter_map(|a| match a.ip() {
            std::net::IpAddr::V4(ip) => Some(ip),
            std::net::IpAddr::V6(_) => None,
        })
        .collect();
    v4.dedup();
    if v4.is_empty() {
        return Err(format!(
            "{host:?} has only IPv6 addresses ({}); the client connects over IPv4: give an IPv4 address or a name with an A record",
            found.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(v4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why_not() {
        let u = parse_url("ws://127.0.0.1:8000/chat?x=1").unwrap();
        assert_eq!((u.addrs[0], u.port, u.target.as_str(), u.tls, u.websocket), (Ipv4Addr::LOCALHOST, 8000, "/chat?x=1", false, true));
        assert_eq!(u.authority(), "127.0.0.1:8000");
        let u = parse_url("wss://example.com").unwrap();
        assert_eq!((u.port, u.tls, u.target.as_str(), u.addrs.len(), u.authority()), (443, true, "/", 0, "example.com".to_string()));
        let u = parse_url("https://h:8443/a").unwrap();
        assert_eq!((u.port, u.websocket, u.authority()), (8443, false, "h:8443".to_string()));
        assert_eq!(parse_url("http://127.0.0.2?a=b").unwrap().target, "/?a=b");
        assert_eq!(parse_url("ws://127.0.0.2").unwrap().port, 80);
        assert_eq!(parse_url("ws://[::1]:9/").unwrap().host, "::1");
        assert!(parse_url("ftp://h/").unwrap_err().contains("not a ws://"));
        assert!(parse_url("ws://127.0.0.1:0/").unwrap_err().contains("bad port"));
        assert!(parse_url("ws://127.0.0.1/a b").unwrap_err().contains("percent-encode"));
        assert!(parse_url("ws://u:p@h/").unwrap_err().contains("Authorization"));
        assert!(parse_url("ws:///x").unwrap_err().contains("bad host"));
    }

    #[test]
    fn names_resolve_to_their_ipv4_addresses() {
        assert_eq!(url_arg("ws://localhost:9/").unwrap().addrs, vec![Ipv4Addr::LOCALHOST]);
        assert!(url_arg("ws://no-such-host.invalid/").unwrap_err().contains("cannot resolve"));
    }
}
