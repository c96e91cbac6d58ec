//! `--url`: the server to load, as a user copies it from their app:
//! `ws://`, `wss://`, `http://` or `https://`, a host name or address, a
//! port (default 80 or 443), a path and query.

use std::net::{IpAddr, ToSocketAddrs};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    /// WebSocket (ws, wss) or HTTP (http, https).
    pub websocket: bool,
    /// wss:// or https://.
    pub tls: bool,
    /// The host as written (the Host header and the TLS server name).
    pub host: String,
    pub port: u16,
    /// Path and query, e.g. `/chat?room=1`.
    pub target: String,
    /// The host's addresses (the connections spread over them), of one
    /// family; empty until resolved (see [`url_arg`]).
    pub addrs: Vec<IpAddr>,
}

impl Url {
    /// The Host header: the host, and the port unless it is the scheme's.
    pub(crate) fn authority(&self) -> String {
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
pub(crate) fn parse_url(s: &str) -> Result<Url, String> {
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
    let addrs = host.parse::<IpAddr>().map(|a| vec![a]).unwrap_or_default();
    Ok(Url { websocket, tls, host: host.to_string(), port, target, addrs })
}

/// Parse `--url` and resolve its host: every address it has (see
/// [`one_family`]).
pub(crate) fn url_arg(s: &str) -> Result<Url, String> {
    let mut u = parse_url(s)?;
    if u.addrs.is_empty() {
        u.addrs = resolve(&u.host, u.port)?;
    }
    Ok(u)
}

/// Keep the addresses of one family: that of `--source-ips` when given
/// (and the host has such addresses; if not, the plan refuses the mix),
/// else of the resolver's first choice.
pub(crate) fn one_family(addrs: &mut Vec<IpAddr>, sources_v6: Option<bool>) {
    let Some(v6) = sources_v6.filter(|v6| addrs.iter().any(|a| a.is_ipv6() == *v6)).or_else(|| addrs.first().map(IpAddr::is_ipv6)) else { return };
    addrs.retain(|a| a.is_ipv6() == v6);
}

fn resolve(host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    let found = (host, port).to_socket_addrs().map_err(|e| format!("cannot resolve {host:?}: {e}"))?;
    let mut addrs: Vec<IpAddr> = Vec::new();
    for a in found {
        if !addrs.contains(&a.ip()) {
            addrs.push(a.ip());
        }
    }
    if addrs.is_empty() {
        return Err(format!("{host:?} resolved to no address"));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why_not() {
        let u = parse_url("ws://127.0.0.1:8000/chat?x=1").unwrap();
        assert_eq!((u.addrs[0], u.port, u.target.as_str(), u.tls, u.websocket), (IpAddr::from([127, 0, 0, 1]), 8000, "/chat?x=1", false, true));
        assert_eq!(u.authority(), "127.0.0.1:8000");
        let u = parse_url("wss://example.com").unwrap();
        assert_eq!((u.port, u.tls, u.target.as_str(), u.addrs.len(), u.authority()), (443, true, "/", 0, "example.com".to_string()));
        let u = parse_url("https://h:8443/a").unwrap();
        assert_eq!((u.port, u.websocket, u.authority()), (8443, false, "h:8443".to_string()));
        assert_eq!(parse_url("http://127.0.0.2?a=b").unwrap().target, "/?a=b");
        assert_eq!(parse_url("ws://127.0.0.2").unwrap().port, 80);
        let u = parse_url("ws://[::1]:9/").unwrap();
        assert_eq!((u.host.as_str(), u.addrs.clone(), u.authority()), ("::1", vec!["::1".parse::<IpAddr>().unwrap()], "[::1]:9".to_string()));
        assert!(parse_url("ftp://h/").unwrap_err().contains("not a ws://"));
        assert!(parse_url("ws://127.0.0.1:0/").unwrap_err().contains("bad port"));
        assert!(parse_url("ws://127.0.0.1/a b").unwrap_err().contains("percent-encode"));
        assert!(parse_url("ws://u:p@h/").unwrap_err().contains("Authorization"));
        assert!(parse_url("ws:///x").unwrap_err().contains("bad host"));
    }

    #[test]
    fn names_resolve_to_their_addresses_of_one_family() {
        assert!(url_arg("ws://localhost:9/").unwrap().addrs.contains(&IpAddr::from([127, 0, 0, 1])));
        assert!(url_arg("ws://no-such-host.invalid/").unwrap_err().contains("cannot resolve"));
        let both: Vec<IpAddr> = vec!["::1".parse().unwrap(), "127.0.0.1".parse().unwrap(), "fd00::2".parse().unwrap()];
        let mut a = both.clone();
        one_family(&mut a, None);
        assert_eq!(a, vec![both[0], both[2]]);
        let mut a = both.clone();
        one_family(&mut a, Some(false));
        assert_eq!(a, vec![both[1]]);
        let mut a = vec![both[1]];
        one_family(&mut a, Some(true));
        assert_eq!(a, vec![both[1]], "nothing of the sources' family: kept for the plan to refuse, naming both");
    }
}
