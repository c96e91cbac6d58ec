//! Counting TCP sockets that touch a set of ports, from /proc/net/tcp, so
//! a bench can prove it left nothing behind.

/// Sockets (any state) whose local or remote port is in `ports`.
pub(crate) fn sockets_on_ports(ports: &[u16]) -> usize {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    count_in(&text, ports)
}

fn count_in(text: &str, ports: &[u16]) -> usize {
    let port_of = |field: &str| field.rsplit(':').next().and_then(|h| u16::from_str_radix(h, 16).ok());
    text.lines()
        .skip(1)
        .filter(|line| {
            let mut f = line.split_whitespace().skip(1);
            let (Some(local), Some(remote)) = (f.next(), f.next()) else { return false };
            [local, remote].iter().filter_map(|x| port_of(x)).any(|p| ports.binary_search(&p).is_ok())
        })
        .count()
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_matching_ports() {
        let t = "  sl  local_address rem_address   st\n   0: 0100007F:1F40 00000000:0000 0A\n   1: 0200007F:8000 0100007F:1F41 01\n   2: 0100007F:0016 00000000:0000 0A\n";
        assert_eq!(super::count_in(t, &[8000, 8001]), 2);
    }
}
