//! The connection plan: which (source address, destination port) pair
//! every connection uses, and whether N connections fit at all.
//!
//! A TCP connection is the 4-tuple (src ip, src port, dst ip, dst port).
//! With IP_BIND_ADDRESS_NO_PORT the kernel picks the source port per
//! 4-tuple at connect time, so each (source address, destination port)
//! pair offers one ephemeral port range (~28K by default, ~64K after
//! `ip_local_port_range 1024 65535`). Connection g uses destination port
//! `ports[g % P]` and source `sources[(g / P) % S]`, spreading connections
//! evenly over all S x P pairs.

use crate::values::{ip_number, ip_of};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A shard of a distributed load: "i/n" with 0 <= i < n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Shard {
    pub index: u64,
    pub count: u64,
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a shard; expected i/n with 0 <= i < n, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u64, u64) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// The half-open range of global connection indices this shard owns.
    pub(crate) fn range(&self, total: u64) -> (u64, u64) {
        let lo = (total as u128 * self.index as u128 / self.count as u128) as u64;
        let hi = (total as u128 * (self.index + 1) as u128 / self.count as u128) as u64;
        (lo, hi)
    }
}

/// Above this share of a pair's ports the kernel's port search slows
/// down sharply; the plan warns.
pub(crate) const CROWDED_SHARE: f64 = 0.8;
/// `auto` sources keep every pair at most half full.
const AUTO_SHARE: f64 = 0.5;
/// Fewest source addresses `auto` hands out (ports search fast with 16+).
const AUTO_MIN_SOURCES: u64 = 16;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConnectionPlan {
    pub target: IpAddr,
    pub ports: Vec<u16>,
    /// Source addresses as inclusive ranges (kept compact: a /16 is one
    /// pair), of the target's family.
    pub source_ranges: Vec<(IpAddr, IpAddr)>,
    pub source_count: u64,
    /// Connections in the whole plan (all shards).
    pub total: u64,
    /// The global indices this process opens: [first, first + count).
    pub first: u64,
    /// Which shard of the plan this is (`--shard i/n`: i; else 0).
    pub shard_index: u64,
    pub count: u64,
    /// net.ipv4.ip_local_port_range, inclusive.
    pub port_range: (u16, u16),
    /// Most connections one (source, destination port) pair receives.
    pub per_pair: u64,
    /// Ports available per pair.
    pub per_pair_capacity: u64,
    pub warnings: Vec<String>,
    /// The workers' reactor (`--io` resolved), and why `auto` fell back.
    pub io: crate::uring::Io,
    pub io_fallback: Option<String>,
    /// `--stages` as this process follows them: its shard's share of
    /// every stage (all of them without `--shard`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stages: Option<super::stages::Stages>,
}

pub(crate) fn local_port_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().filter_map(|v| v.parse::<u16>().ok());
            Some((it.next()?, it.next()?))
        })
        .unwrap_or((32768, 60999))
}

impl ConnectionPlan {
    /// Build and check the plan. `sources` None means: on IPv4 loopback,
    /// enough 127.0.0.x addresses (from 127.0.0.2) for the target;
    /// elsewhere (IPv6's loopback is one address) the kernel's choice of
    /// one address.
    pub(crate) fn build(
        target: IpAddr,
        ports: &[u16],
        sources: Option<&[IpAddr]>,
        total: u64,
        shard: (u64, u64),
        port_range: (u16, u16),
    ) -> Result<ConnectionPlan, String> {
        let p = ports.len() as u64;
        let per_pair_capacity = (port_range.1 as u64).saturating_sub(port_range.0 as u64) + 1;
        let loopback4 = target.is_ipv4() && target.is_loopback();
        let sources: Vec<IpAddr> = match sources {
            Some(s) => {
                if let Some(other) = s.iter().find(|a| a.is_ipv6() != target.is_ipv6()) {
                    return Err(format!(
                        "source address {other} and target {target} are of different families: give --source-ips of the target's family (IPv4 or IPv6)"
                    ));
                }
                s.to_vec()
            }
            None if loopback4 => {
                let want = ((total as f64 / (p as f64 * per_pair_capacity as f64 * AUTO_SHARE)).ceil() as u64).max(AUTO_MIN_SOURCES);
                let want = want.min(crate::values::MAX_SOURCE_IPS as u64) as u32;
                let base = u32::from(Ipv4Addr::new(127, 0, 0, 2));
                (0..want).map(|i| IpAddr::V4(Ipv4Addr::from(base + i))).collect()
            }
            None if target.is_ipv6() => vec![IpAddr::V6(Ipv6Addr::UNSPECIFIED)],
            None => vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)],
        };
        let s = sources.len() as u64;
        let per_pair = total.div_ceil(s * p);
        if per_pair > per_pair_capacity {
            let need_sources = total.div_ceil(p * per_pair_capacity);
            let suggestion = if loopback4 {
                let last = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 0, 0, 2)) + need_sources as u32 - 1);
                format!("--source-ips 127.0.0.2-{last}")
            } else {
                format!("--source-ips with {need_sources} addresses")
            };
            return Err(format!(
                "{total} connections cannot fit: {s} source address(es) x {p} destination port(s) x {per_pair_capacity} ephemeral ports \
                 (net.ipv4.ip_local_port_range {} {}) = {} 4-tuples. Use {suggestion}, more --ports, or widen the port range \
                 (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\", see `megaconn tune`)",
                port_range.0,
                port_range.1,
                s * p * per_pair_capacity
            ));
        }
        let mut warnings = Vec::new();
        if per_pair as f64 > per_pair_capacity as f64 * CROWDED_SHARE {
            warnings.push(format!(
                "each (source, port) pair gets {per_pair} of its {per_pair_capacity} ephemeral ports; the kernel's port search slows \
                 down when pairs are this full — add source addresses"
            ));
        }
        Ok(ConnectionPlan {
            target,
            ports: ports.to_vec(),
            source_ranges: compress(&sources),
            source_count: s,
            total,
            first: shard.0,
            shard_index: 0,
            count: shard.1 - shard.0,
            port_range,
            per_pair,
            per_pair_capacity,
            warnings,
            io: crate::uring::Io::Epoll,
            io_fallback: None,
            stages: None,
        })
    }
}

/// Sorted addresses to inclusive ranges (one family per range).
pub(crate) fn compress(ips: &[IpAddr]) -> Vec<(IpAddr, IpAddr)> {
    let mut v: Vec<(bool, u128)> = ips.iter().map(|i| ip_number(*i)).collect();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<(bool, u128, u128)> = Vec::new();
    for (v6, x) in v {
        match out.last_mut() {
            Some((f, _, hi)) if *f == v6 && hi.checked_add(1) == Some(x) => *hi = x,
            _ => out.push((v6, x, x)),
        }
    }
    out.into_iter().map(|(v6, a, b)| (ip_of(v6, a), ip_of(v6, b))).collect()
}

pub(crate) fn expand(ranges: &[(IpAddr, IpAddr)]) -> Vec<IpAddr> {
    ranges
        .iter()
        .flat_map(|(a, b)| {
            let ((v6, a), (_, b)) = (ip_number(*a), ip_number(*b));
            (a..=b).map(move |n| ip_of(v6, n))
        })
        .collect()
}

/// The (source, destination port) of global connection `g`.
pub(crate) fn address_of(g: u64, sources: &[IpAddr], ports: &[u16]) -> (IpAddr, u16) {
    let p = ports.len() as u64;
    (sources[((g / p) % sources.len() as u64) as usize], ports[(g % p) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_plan() {
        let s: Shard = "1/4".parse().unwrap();
        assert_eq!(s.range(100), (25, 50));
        assert!("4/4".parse::<Shard>().is_err());
        assert_eq!("0/4".parse::<Shard>().unwrap().range(3), (0, 0));
    }
    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn impossible_target_names_the_fix() {
        let one = [IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))];
        let e = ConnectionPlan::build(LO, &[8000], Some(&one), 70_000, (0, 70_000), (1024, 65535)).unwrap_err();
        assert!(e.contains("cannot fit") && e.contains("--source-ips 127.0.0.2-127.0.0.3"), "{e}");
    }

    #[test]
    fn auto_sources_scale_with_target() {
        let ports: Vec<u16> = (8000..8100).collect();
        let p = ConnectionPlan::build(LO, &ports, None, 1_000_000, (0, 1_000_000), (1024, 65535)).unwrap();
        assert_eq!(p.source_count, 16);
        assert!(p.per_pair <= 1000);
        let p = ConnectionPlan::build(LO, &[8000], None, 2_000_000, (0, 2_000_000), (32768, 60999)).unwrap();
        assert!(p.per_pair as f64 <= 28232.0 * 0.5 + 1.0, "{}", p.per_pair);
    }

    #[test]
    fn addresses_spread_and_ranges_roundtrip() {
        let src = expand(&[(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5)))]);
        assert_eq!(src.len(), 4);
        assert_eq!(compress(&src).len(), 1);
        let ports = [1, 2, 3];
        assert_eq!(address_of(0, &src, &ports), (src[0], 1));
        assert_eq!(address_of(4, &src, &ports), (src[1], 2));
        let mut seen = std::collections::HashSet::new();
        for g in 0..12 {
            seen.insert(address_of(g, &src, &ports));
        }
        assert_eq!(seen.len(), 12);
    }

    #[test]
    fn ipv6_targets_plan_with_their_own_family() {
        let v6: IpAddr = "::1".parse().unwrap();
        let p = ConnectionPlan::build(v6, &[8000], None, 1000, (0, 1000), (1024, 65535)).unwrap();
        assert_eq!(expand(&p.source_ranges), vec![IpAddr::V6(Ipv6Addr::UNSPECIFIED)]);
        let src: Vec<IpAddr> = "fd00::1-fd00::4".parse::<crate::values::IpList>().unwrap().0;
        let p = ConnectionPlan::build("fd00::ff".parse().unwrap(), &[8000], Some(&src), 1000, (0, 1000), (1024, 65535)).unwrap();
        assert_eq!(p.source_ranges.len(), 1);
        assert_eq!(expand(&p.source_ranges), src);
        let e = ConnectionPlan::build(LO, &[8000], Some(&src), 10, (0, 10), (1024, 65535)).unwrap_err();
        assert!(e.contains("different families"), "{e}");
    }
}
