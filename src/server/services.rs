//! What one server process serves: each protocol on its own ports, in
//! plain TCP or TLS (`--serve mqtt=1883 --serve mqtt+tls=8883 --serve
//! ws=8080-8089`; `--protocol P --ports R` is the one-entry shorthand).
//!
//! Why `PROTO[+tls]=PORTS`, repeated: one entry reads as what a port
//! speaks, in the order an operator thinks of it (protocol, then where),
//! the `+tls` suffix is the URL-scheme habit (`mqtt+tls`, as `mqtts`
//! clients write it) and keeps the certificate flags themselves shared by
//! every TLS entry; the port syntax is `--ports`'s. Every listening socket
//! the supervisor binds belongs to exactly one entry, so each accepted
//! connection knows its protocol and whether it speaks TLS; every worker
//! serves every entry, and all of them share one topic space.

use crate::proto::Protocol;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Most entries one server serves: a connection record keeps the index of
/// its entry in 3 spare bits (`worker::conn`), so it costs no byte.
pub(crate) const MAX_SERVICES: usize = 8;

/// The protocols a server speaks (raw and sse are client-only: SSE is
/// served on ws and http ports).
pub(crate) const SERVER_PROTOCOLS: &[&str] = &["framed", "ws", "http", "mqtt", "echo8", "echo", "discard"];

/// A valid entry, for error messages.
const EXAMPLE: &str = "e.g. --serve mqtt=1883 --serve mqtt+tls=8883 --serve ws=8080-8089";

/// One protocol on its ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Service {
    pub protocol: Protocol,
    /// These ports speak TLS with `--tls-cert`/`--tls-key`.
    pub tls: bool,
    /// Sorted, without repeats.
    pub ports: Vec<u16>,
}

/// The protocol of entry `i` and whether it speaks TLS (one out of
/// range, which no listener has, reads and drops).
pub(crate) fn entry(services: &[Service], i: usize) -> (Protocol, bool) {
    services.get(i).map_or((Protocol::Discard, false), |s| (s.protocol, s.tls))
}

/// Counts per `--serve` entry (`open[i]` of `services[i]`) summed by
/// protocol name, `+tls` for TLS ports; a protocol with none is there at
/// 0 (a gauge series that stays, not one that vanishes).
pub(crate) fn by_protocol(services: &[Service], open: &[u64]) -> crate::stats::counters::Kinds {
    let mut out = crate::stats::counters::Kinds::new();
    for (s, n) in services.iter().zip(open) {
        let name = clap::ValueEnum::to_possible_value(&s.protocol).map_or_else(|| format!("{:?}", s.protocol), |v| v.get_name().to_string());
        *out.entry(if s.tls { format!("{name}+tls") } else { name }).or_insert(0) += n;
    }
    out
}

impl Service {
    /// Plain TCP `protocol` on `ports` (the shorthand, the benches).
    pub(crate) fn plain(protocol: Protocol, ports: Vec<u16>) -> Service {
        Service { protocol, tls: false, ports }
    }

    /// The entry's name as `--serve` writes it: `mqtt`, `mqtt+tls`.
    pub(crate) fn label(&self) -> String {
        let name = format!("{:?}", self.protocol).to_lowercase();
        if self.tls {
            format!("{name}+tls")
        } else {
            name
        }
    }
}

impl FromStr for Service {
    type Err = String;
    /// `PROTO[+tls]=PORTS`, PORTS as `--ports` takes them.
    fn from_str(s: &str) -> Result<Service, String> {
        let Some((name, ports)) = s.split_once('=') else {
            return Err(format!("'{s}' is not PROTOCOL=PORTS; {EXAMPLE}"));
        };
        let (name, tls) = match name.trim().strip_suffix("+tls") {
            Some(n) => (n, true),
            None => (name.trim(), false),
        };
        if !SERVER_PROTOCOLS.contains(&name) {
            return Err(format!("unknown protocol '{name}' in --serve; a server speaks {} (with +tls for TLS); {EXAMPLE}", SERVER_PROTOCOLS.join(", ")));
        }
        let protocol = <Protocol as clap::ValueEnum>::from_str(name, false).map_err(|e| format!("{e}; {EXAMPLE}"))?;
        let ports = ports.parse::<crate::values::PortList>()?.0;
        Ok(Service { protocol, tls, ports })
    }
}

/// Every port of every entry, in entry order (the listeners' order).
pub(crate) fn all_ports(services: &[Service]) -> Vec<u16> {
    services.iter().flat_map(|s| s.ports.iter().copied()).collect()
}

/// `mqtt 1883, mqtt+tls 8883, ws 8080-8089`: the plan line's list.
pub(crate) fn describe(services: &[Service]) -> String {
    services.iter().map(|s| format!("{} {}", s.label(), ranges(&s.ports))).collect::<Vec<_>>().join(", ")
}

/// Sorted ports as ranges: `8000-8009,9000`.
fn ranges(ports: &[u16]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ports.len() {
        let mut j = i;
        while j + 1 < ports.len() && ports[j + 1] == ports[j] + 1 {
            j += 1;
        }
        out.push(if i == j { ports[i].to_string() } else { format!("{}-{}", ports[i], ports[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The checks a set of entries must pass before anything is bound; Err
/// names the problem and the fix. `tls_files`: `--tls-cert`/`--tls-key` given.
pub(crate) fn check(services: &[Service], tls_files: bool) -> Result<(), String> {
    if services.is_empty() {
        return Err(format!("nothing to serve; {EXAMPLE}"));
    }
    if services.len() > MAX_SERVICES {
        return Err(format!("{} --serve entries; at most {MAX_SERVICES}: put ports of one protocol in one entry (ws=8080-8089,9000)", services.len()));
    }
    let mut owner: std::collections::HashMap<u16, &Service> = std::collections::HashMap::new();
    for s in services {
        if let Some(p) = s.ports.iter().find(|p| owner.contains_key(p)) {
            let first = owner[p];
            return Err(format!(
                "port {p} is in both --serve {}={} and --serve {}={}: a port speaks one protocol; give it to one entry",
                first.label(),
                ranges(&first.ports),
                s.label(),
                ranges(&s.ports)
            ));
        }
        for p in &s.ports {
            owner.insert(*p, s);
        }
        if s.tls && !tls_files {
            return Err(format!("--serve {}={} needs --tls-cert FILE --tls-key FILE (the certificate every +tls entry serves)", s.label(), ranges(&s.ports)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Service {
        v.parse().unwrap()
    }

    /// Open connections per entry come out by protocol, as `--serve`
    /// names it (`+tls` for TLS), summed; one with none at 0.
    #[test]
    fn open_connections_are_named_by_protocol() {
        let services = [s("mqtt=1883"), s("mqtt+tls=8883"), s("ws=8080"), s("mqtt=1884")];
        let got = by_protocol(&services, &[3, 2, 0, 4]);
        let want = [("mqtt", 7), ("mqtt+tls", 2), ("ws", 0)].map(|(k, n)| (k.to_string(), n));
        assert_eq!(got, crate::stats::counters::Kinds::from(want));
    }

    #[test]
    fn entries_parse_with_tls_and_port_lists() {
        assert_eq!(s("mqtt=1883"), Service::plain(Protocol::Mqtt, vec![1883]));
        assert_eq!(s("mqtt+tls=8883"), Service { protocol: Protocol::Mqtt, tls: true, ports: vec![8883] });
        assert_eq!(s("ws=8080-8082,9000").ports, vec![8080, 8081, 8082, 9000]);
        assert!("sse=80".parse::<Service>().unwrap_err().contains("unknown protocol 'sse'"));
        assert!("gopher=70".parse::<Service>().unwrap_err().contains("unknown protocol"));
        assert!("mqtt".parse::<Service>().unwrap_err().contains("PROTOCOL=PORTS"));
        assert!("mqtt=0".parse::<Service>().unwrap_err().contains("out of range"));
        assert!("mqtt+tsl=1".parse::<Service>().is_err());
    }

    #[test]
    fn overlapping_ports_and_tls_without_files_are_refused() {
        let e = check(&[s("ws=8080-8089"), s("mqtt=8085")], false).unwrap_err();
        assert!(e.contains("port 8085 is in both --serve ws=8080-8089 and --serve mqtt=8085"), "{e}");
        let e = check(&[s("mqtt=1883"), s("mqtt+tls=8883")], false).unwrap_err();
        assert!(e.contains("mqtt+tls=8883 needs --tls-cert"), "{e}");
        assert!(check(&[s("mqtt=1883"), s("mqtt+tls=8883")], true).is_ok());
        assert!(check(&[], false).is_err());
        let many: Vec<Service> = (1..=9).map(|p| Service::plain(Protocol::Framed, vec![p])).collect();
        assert!(check(&many, false).unwrap_err().contains("at most 8"));
    }

    #[test]
    fn the_plan_line_lists_each_entry_with_its_ranges() {
        let all = [s("mqtt=1883"), s("mqtt+tls=8883"), s("ws=8080-8089,9000")];
        assert_eq!(describe(&all), "mqtt 1883, mqtt+tls 8883, ws 8080-8089,9000");
        assert_eq!(all_ports(&all).len(), 13);
    }
}
