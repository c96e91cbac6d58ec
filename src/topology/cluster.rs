//! The namespaces of a cluster bench (`bench --nodes N --cluster nats`):
//! one per server node, one for the broker, and a hub holding the Linux
//! bridge that joins them (an L2 segment 10.201.0.0/16, a rack's switch).
//! Each node's clients run in the node's namespace and reach it over its
//! loopback, as the single-node bench does (`--topology netns`), so the
//! two compare on the same path and only the broker hop differs; each
//! node's established hash is sized to its share (both ends). The bench's
//! main thread enters the hub (address 10.201.0.200) to publish through
//! node 0's admin API.

use super::{create, ehash_for, enter, ip, may_create, remove_stale, Net, Sysctls, Topology, PREFIX};
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Most server nodes a bench runs (addresses 10.201.0.1 on).
pub(crate) const MAX_NODES: usize = 16;
pub(crate) const BROKER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 250);
/// The bench process's own address on the bridge.
const HUB_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 200);
const BRIDGE: &str = "br0";

pub(crate) fn node_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 201, 0, 1 + k as u8)
}

/// Namespace of node `k` (or the broker's, `k` = None) of bench `pid`.
pub(crate) fn ns_name(pid: u32, k: Option<usize>) -> String {
    match k {
        Some(k) => format!("{PREFIX}{pid}-n{k}"),
        None => format!("{PREFIX}{pid}-broker"),
    }
}

/// Make the namespaces and the bridge for `nodes` nodes holding
/// `connections` in all.
pub(crate) fn place(nodes: usize, connections: u64, ports: &str) -> Result<Net> {
    if let Err(why) = may_create() {
        bail!("--nodes {nodes}: each node runs in its own network namespace, and {why}");
    }
    if !(1..=MAX_NODES).contains(&nodes) {
        bail!("--nodes {nodes}: 1 to {MAX_NODES} nodes");
    }
    let mut net = Net::new(Topology::Netns, format!("--nodes {nodes}: a namespace per node (with its clients) and one for the broker, on a bridge"));
    net.notes = remove_stale();
    build(&mut net, nodes, connections, ports).context("--nodes: the namespaces could not be set up")?;
    Ok(net)
}

fn build(net: &mut Net, nodes: usize, connections: u64, ports: &str) -> Result<()> {
    let pid = std::process::id();
    let sysctls = Sysctls::for_ports(ports);
    let hub = format!("{PREFIX}{pid}-hub");
    net.placement.namespaces.push(hub.clone());
    create(&hub, 1024, &[], &mut net.notes)?;
    ip(&["-n", &hub, "link", "add", BRIDGE, "type", "bridge"])?;
    ip(&["-n", &hub, "link", "set", BRIDGE, "up"])?;
    ip(&["-n", &hub, "addr", "add", &format!("{HUB_ADDR}/16"), "dev", BRIDGE])?;
    // Both ends of a node's connections are in its table.
    let per_node = ehash_for(2 * connections.div_ceil(nodes as u64) + 1024);
    let both: Vec<(&str, String)> = sysctls.queues.iter().chain(&sysctls.ports).cloned().collect();
    // (namespace, address, hash buckets, sysctls) of every bridge member.
    type Member<'a> = (String, Ipv4Addr, u64, Vec<(&'a str, String)>);
    let members: Vec<Member> = (0..nodes)
        .map(|k| (ns_name(pid, Some(k)), node_addr(k), per_node, both.clone()))
        .chain([(ns_name(pid, None), BROKER_ADDR, 1024, Vec::new())])
        .collect();
    for (k, (name, addr, ehash, set)) in members.iter().enumerate() {
        net.placement.namespaces.push(name.clone());
        create(name, *ehash, set, &mut net.notes)?;
        let (inside, port) = (format!("mc{pid}m{k}"), format!("mc{pid}b{k}"));
        net.veths.push(inside.clone());
        ip(&["link", "add", &inside, "type", "veth", "peer", "name", &port])?;
        ip(&["link", "set", &inside, "netns", name])?;
        ip(&["link", "set", &port, "netns", &hub])?;
        ip(&["-n", &hub, "link", "set", &port, "master", BRIDGE])?;
        ip(&["-n", &hub, "link", "set", &port, "up"])?;
        ip(&["-n", name, "addr", "add", &format!("{addr}/16"), "dev", &inside])?;
        ip(&["-n", name, "link", "set", &inside, "up"])?;
    }
    net.notes.push(format!(
        "bridge {BRIDGE} in {hub}: nodes {} (each with its clients on its loopback, hash {} buckets), broker {BROKER_ADDR}",
        (0..nodes).map(|k| node_addr(k).to_string()).collect::<Vec<_>>().join(", "),
        crate::stats::format::count(per_node),
    ));
    net.placement.ehash_planned = Some(per_node);
    net.placement.server_address = node_addr(0);
    net.placement.nodes = (0..nodes).map(node_addr).collect();
    enter(&hub)?;
    net.placement.ehash_entries = super::ehash_here();
    Ok(())
}

/// Make `cmd` start inside namespace `name` and die with this process.
pub(crate) fn inside(cmd: &mut Command, name: &str) -> Result<File> {
    let ns = File::open(format!("/run/netns/{name}")).with_context(|| format!("opening namespace {name}"))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ns);
    // SAFETY: setns and prctl are plain syscalls, async-signal-safe; the
    // namespace fd stays open in the parent until the child has exec'd.
    unsafe {
        cmd.pre_exec(move || {
            super::setns_in_child(fd)?;
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(ns)
}
