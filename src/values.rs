//! Values that come as text (flags, service-time specs) and their
//! parsers. Each returns an error sentence that names what is wrong and
//! shows a valid example; clap prefixes it with the flag and exits with
//! code 2. No value parses to something that panics later: durations are
//! capped, counts are positive, rates finite.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;

pub(crate) use crate::proto::frame::MAX_PAYLOAD;
/// Longest duration any flag accepts: every load loop is bounded in time,
/// and larger values overflow time arithmetic.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most source addresses one client accepts (a /16).
pub(crate) const MAX_SOURCE_IPS: usize = 65_536;

/// A list of TCP ports: "8000-8099", "8000,8005,9000-9009".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PortList(pub Vec<u16>);

impl FromStr for PortList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        const EX: &str = "expected ports like 8000-8099 or 8000,8001,9000-9009";
        let s = s.trim();
        if s.is_empty() {
            return Err(format!("empty port list; {EX}"));
        }
        let mut ports = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (parse_port(a)?, parse_port(b)?),
                None => {
                    let p = parse_port(part)?;
                    (p, p)
                }
            };
            if a > b {
                return Err(format!("port range {part} is reversed; write {b}-{a}"));
            }
            ports.extend(a..=b);
        }
        ports.sort_unstable();
        ports.dedup();
        Ok(PortList(ports))
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    let s = s.trim();
    let v: u64 = s.parse().map_err(|_| format!("'{s}' is not a port number; expected ports like 8000-8099"))?;
    if v == 0 || v > 65535 {
        return Err(format!("port {v} is out of range 1-65535; expected ports like 8000-8099"));
    }
    Ok(v as u16)
}

/// An address as a number of its family, so ranges and blocks of IPv4
/// and IPv6 addresses are one arithmetic.
pub(crate) fn ip_number(ip: IpAddr) -> (bool, u128) {
    match ip {
        IpAddr::V4(a) => (false, u32::from(a) as u128),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

/// The address `n` of a family (`v6`), the inverse of [`ip_number`].
pub(crate) fn ip_of(v6: bool, n: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(n))
    } else {
        IpAddr::V4(Ipv4Addr::from(n as u32))
    }
}

/// A set of IPv4 or IPv6 addresses: "127.0.0.2-127.0.0.65",
/// "127.0.1.0/24", "127.0.0.2,127.0.0.3", "fd00::1-fd00::40",
/// "fd00::/120". Every address in a CIDR block is used (on loopback every
/// 127.x.y.z is a valid source).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct IpList(pub Vec<IpAddr>);

impl FromStr for IpList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        const EX: &str = "expected addresses like 127.0.0.2-127.0.0.65, 127.0.1.0/24, 127.0.0.2,127.0.0.3 or fd00::1-fd00::40";
        let s = s.trim();
        if s.is_empty() {
            return Err(format!("empty address list; {EX}"));
        }
        let mut ips = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (lo, hi) = if let Some((a, b)) = part.split_once('-') {
                (parse_ip(a, EX)?, parse_ip(b, EX)?)
            } else if let Some((a, bits)) = part.split_once('/') {
                let (v6, base) = ip_number(parse_ip(a, EX)?);
                let width = if v6 { 128 } else { 32 };
                let bits: u32 = bits.parse().ok().filter(|b| *b <= width).ok_or_else(|| format!("'{part}' has a bad prefix length; {EX}"))?;
                let host = if bits == width { 0 } else { (u128::MAX >> (128 - width)) >> bits };
                (ip_of(v6, base & !host), ip_of(v6, (base & !host) | host))
            } else {
                let ip = parse_ip(part, EX)?;
                (ip, ip)
            };
            if lo.is_ipv6() != hi.is_ipv6() {
                return Err(format!("address range {part} mixes IPv4 and IPv6; {EX}"));
            }
            let ((v6, lo), (_, hi)) = (ip_number(lo), ip_number(hi));
            if lo > hi {
                return Err(format!("address range {part} is reversed; {EX}"));
            }
            if hi - lo >= (MAX_SOURCE_IPS - ips.len()) as u128 {
                return Err(format!("more than {MAX_SOURCE_IPS} addresses in '{s}'; use a smaller range"));
            }
            ips.extend((lo..=hi).map(|n| ip_of(v6, n)));
        }
        if ips.iter().any(IpAddr::is_ipv6) && ips.iter().any(IpAddr::is_ipv4) {
            return Err(format!("'{s}' mixes IPv4 and IPv6 addresses; a connection's source is of its target's family"));
        }
        ips.sort_unstable();
        ips.dedup();
        Ok(IpList(ips))
    }
}

fn parse_ip(s: &str, example: &str) -> Result<IpAddr, String> {
    s.trim().parse().map_err(|_| format!("'{}' is not an IP address; {example}", s.trim()))
}

/// A duration: "30s", "500ms", "2m", or a bare number of seconds.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let too_long = || format!("'{s}' is longer than the cap of 30 days; expected e.g. 30s, 500ms, 2m");
    if let Ok(secs) = s.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(format!("'{s}' is not a duration; expected e.g. 30s, 500ms, 2m"));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(too_long());
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration ({e}); expected e.g. 30s, 500ms, 2m"))?;
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
}

/// A duration above zero (timeouts, intervals).
pub(crate) fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err(format!("'{}' must be longer than 0; expected e.g. 10s or 500ms", s.trim()));
    }
    Ok(d)
}

/// A duration that may be switched off with "off" or "0".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OptDuration(pub Option<Duration>);

impl FromStr for OptDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "off" {
            return Ok(OptDuration(None));
        }
        let d = duration(s)?;
        Ok(OptDuration(if d.is_zero() { None } else { Some(d) }))
    }
}

/// A socket address or "off" (the admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OptAddr(pub Option<std::net::SocketAddr>);

impl FromStr for OptAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t == "off" {
            return Ok(OptAddr(None));
        }
        t.parse().map(|a| OptAddr(Some(a))).map_err(|_| format!("'{t}' is not an address like 127.0.0.1:9100 (or off)"))
    }
}

/// A positive count ("1000000", "1_000_000", "1M", "200k").
/// A wall-clock instant: RFC 3339 ("2026-11-22T20:30:00Z") or "@UNIX"
/// seconds. Checked against now where it is used.
pub(crate) fn wall_time(s: &str) -> Result<std::time::SystemTime, String> {
    let bad = || format!("'{s}' is not a time; use RFC 3339 like 2026-11-22T20:30:00Z, or @UNIX-SECONDS like @1795000000");
    if let Some(secs) = s.strip_prefix('@') {
        let v: f64 = secs.parse().map_err(|_| bad())?;
        if !(0.0..1e11).contains(&v) {
            return Err(bad());
        }
        return Ok(std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(v));
    }
    humantime::parse_rfc3339_weak(s).map_err(|_| bad())
}

pub(crate) fn positive_count(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let (num, mult) = match t.chars().last() {
        Some('k') | Some('K') => (&t[..t.len() - 1], 1_000),
        Some('m') | Some('M') => (&t[..t.len() - 1], 1_000_000),
        _ => (&t[..], 1),
    };
    let v: u64 = num.parse().map_err(|_| format!("'{s}' is not a positive whole number; expected e.g. 1000, 200k or 1M"))?;
    if v == 0 {
        return Err(format!("'{s}' must be greater than 0; expected e.g. 1000, 200k or 1M"));
    }
    v.checked_mul(mult).ok_or_else(|| format!("'{s}' is too large"))
}

/// A size in bytes: "65536", "64KiB", "256MiB", "1GiB" (also KB/MB/GB,
/// read as powers of 1024 like the rest of megaconn's sizes).
pub(crate) fn byte_size(s: &str) -> Result<u64, String> {
    const EX: &str = "expected a size like 65536, 64KiB, 256MiB or 1GiB";
    let t = s.trim().replace('_', "");
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        u => return Err(format!("'{s}': unknown unit '{u}'; {EX}")),
    };
    let v: u64 = num.parse().map_err(|_| format!("'{s}' is not a size; {EX}"))?;
    v.checked_mul(mult).ok_or_else(|| format!("'{s}' is too large; {EX}"))
}

/// A count per second: "50000/s", "50k/s" or a bare "50000" (per second).
pub(crate) fn per_second_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let n = t.strip_suffix("/s").unwrap_or(t);
    if n.contains('/') {
        return Err(format!("'{s}': give a rate per second, e.g. 50000/s"));
    }
    positive_count(n).map_err(|e| format!("{e} (a rate per second, e.g. 50000/s)"))
}

/// Bytes of data in a published push: at most what one framed push frame
/// carries for a short topic.
pub(crate) fn push_bytes(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|_| format!("'{s}' is not a byte count; expected e.g. 64"))?;
    let cap = crate::proto::push::max_data(16);
    if v > cap {
        return Err(format!("--push-bytes {v} exceeds the {cap} bytes a framed push carries; use e.g. 64"));
    }
    Ok(v)
}

/// A per-connection rate: "1/s", "0.5/s", "300/m", "5" (per second), or
/// "off". Returns requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PerSecond(pub Option<f64>);

impl FromStr for PerSecond {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        const EX: &str = "expected a rate like 1/s, 0.5/s, 300/m or off";
        let t = s.trim();
        if t == "off" || t == "0" {
            return Ok(PerSecond(None));
        }
        let (num, per) = match t.split_once('/') {
            Some((n, "s")) => (n, 1.0),
            Some((n, "m")) => (n, 60.0),
            Some((_, u)) => return Err(format!("unknown unit '/{u}'; {EX}")),
            None => (t, 1.0),
        };
        let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a rate; {EX}"))?;
        if !(v.is_finite() && v > 0.0) || v / per > 100_000.0 {
            return Err(format!("'{s}' must be above 0 and at most 100000/s per connection; {EX}"));
        }
        Ok(PerSecond(Some(v / per)))
    }
}

/// Heartbeat/request payload size in bytes, capped at [`MAX_PAYLOAD`].
pub(crate) fn payload(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|_| format!("'{s}' is not a byte count; expected e.g. 64"))?;
    if v > MAX_PAYLOAD {
        return Err(format!("payload {v} exceeds the cap of {MAX_PAYLOAD} bytes; use e.g. 64"));
    }
    Ok(v)
}

/// `-H 'Name: value'`: an HTTP header line (no CR or LF).
pub(crate) fn header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s.split_once(':').ok_or_else(|| format!("{s:?} is not a header: write 'Name: value'"))?;
    let name = token(name.trim())?;
    let value = value.trim();
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("the value of header {name:?} has a line break or NUL; a header is one line"));
    }
    Ok((name, value.to_string()))
}

/// An HTTP token (a header name, a subprotocol): letters, digits and
/// ``!#$%&'*+-.^_`|~``.
pub(crate) fn token(s: &str) -> Result<String, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
        return Err(format!("{s:?} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~ only)"));
    }
    Ok(s.to_string())
}

/// The bytes of a secret file given to `flag` (`path`), without a
/// trailing newline (editors and `base64` add one), at least `min` of
/// them; `make` says how to create one. Used by every shared-secret flag.
pub(crate) fn secret_file(flag: &str, path: &str, min: usize, make: &str) -> Result<Vec<u8>, String> {
    let mut bytes = std::fs::read(path).map_err(|e| format!("{flag} {path}: cannot read it ({e})"))?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.len() < min {
        return Err(format!("{flag} {path}: the secret is {} bytes; at least {min} are needed (e.g. `{make}`)", bytes.len()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_take_per_second_or_bare_numbers() {
        assert_eq!(per_second_count("50000/s"), Ok(50_000));
        assert_eq!(per_second_count("50k/s"), Ok(50_000));
        assert_eq!(per_second_count("2000"), Ok(2_000));
        assert!(per_second_count("10/m").unwrap_err().contains("per second"));
        assert!(per_second_count("0/s").unwrap_err().contains("greater than 0"));
    }

    #[test]
    fn ports_parse_ranges_and_lists() {
        assert_eq!("8000-8002".parse::<PortList>().unwrap().0, vec![8000, 8001, 8002]);
        assert_eq!("9,7-8".parse::<PortList>().unwrap().0, vec![7, 8, 9]);
        assert!("8099-8000".parse::<PortList>().unwrap_err().contains("reversed"));
        assert!("".parse::<PortList>().unwrap_err().contains("empty"));
        assert!("8000-70000".parse::<PortList>().unwrap_err().contains("out of range"));
        assert!("0".parse::<PortList>().is_err());
    }

    #[test]
    fn ips_parse_ranges_cidr_lists() {
        assert_eq!("127.0.0.2-127.0.0.5".parse::<IpList>().unwrap().0.len(), 4);
        assert_eq!("127.0.1.0/24".parse::<IpList>().unwrap().0.len(), 256);
        assert_eq!("127.0.0.2,127.0.0.9".parse::<IpList>().unwrap().0.len(), 2);
        assert!("127.0.0.9-127.0.0.2".parse::<IpList>().unwrap_err().contains("reversed"));
        assert!("127.0.0/33".parse::<IpList>().is_err());
        assert!("10.0.0.0/8".parse::<IpList>().unwrap_err().contains("more than"));
        assert!("banana".parse::<IpList>().is_err());
        assert_eq!("fd00::1-fd00::40".parse::<IpList>().unwrap().0.len(), 64);
        assert_eq!("fd00::/120".parse::<IpList>().unwrap().0.len(), 256);
        assert_eq!("::1".parse::<IpList>().unwrap().0, vec!["::1".parse::<std::net::IpAddr>().unwrap()]);
        assert!("fd00::/64".parse::<IpList>().unwrap_err().contains("more than"));
        assert!("127.0.0.2-fd00::1".parse::<IpList>().unwrap_err().contains("mixes"));
        assert!("127.0.0.2,fd00::1".parse::<IpList>().unwrap_err().contains("mixes"));
    }

    #[test]
    fn counts_durations_shards() {
        assert_eq!(positive_count("1M").unwrap(), 1_000_000);
        assert_eq!(positive_count("200k").unwrap(), 200_000);
        assert!(positive_count("0").is_err());
        assert!(positive_count("-5").is_err());
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("2").unwrap(), Duration::from_secs(2));
        assert!(duration("1e20").unwrap_err().contains("30 days"));
        assert!(duration("NaN").is_err());
        assert!(duration("100000000000000h").is_err());
        assert!(positive_duration("0").is_err());
        assert_eq!("off".parse::<OptDuration>().unwrap().0, None);
        assert!(payload("5000").is_err());
        assert_eq!("5/s".parse::<PerSecond>().unwrap().0, Some(5.0));
        assert_eq!("120/m".parse::<PerSecond>().unwrap().0, Some(2.0));
        assert_eq!("off".parse::<PerSecond>().unwrap().0, None);
        assert!("-1/s".parse::<PerSecond>().is_err());
        assert!("1/h".parse::<PerSecond>().is_err());
    }

    #[test]
    fn headers_and_tokens_parse_or_say_why_not() {
        assert_eq!(header("X-Api-Key:  abc ").unwrap(), ("X-Api-Key".to_string(), "abc".to_string()));
        assert!(header("no colon").unwrap_err().contains("Name: value"));
        assert!(header("Bad Name: x").unwrap_err().contains("token"));
        assert!(header("X: a\r\nInjected: 1").unwrap_err().contains("line break"));
        assert_eq!(token("chat.v2").unwrap(), "chat.v2");
        assert!(token("a,b").is_err());
    }
}
