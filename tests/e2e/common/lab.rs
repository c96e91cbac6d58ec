//! Network namespaces for tests: a hub namespace holding a bridge, and
//! member namespaces on it at 10.<net>.0.<k+1>/24 (one "host" each).
//! Everything is removed when the lab drops, also when the test fails.
#![allow(dead_code)]

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

pub struct Lab {
    hub: String,
    members: Vec<String>,
    net: u8,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("no ip command: {e}"))?;
    if !out.status.success() {
        return Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

impl Lab {
    /// `members` hosts on subnet 10.`net`.0.0/24 (tests running at once
    /// use different `net`s). Err says why namespaces cannot be made here.
    pub fn make(tag: &str, net: u8, members: usize) -> Result<Lab, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let pid = std::process::id();
        let mut lab = Lab { hub: format!("mctest-{pid}-{tag}-hub"), members: Vec::new(), net };
        ip(&["netns", "add", &lab.hub])?;
        ip(&["-n", &lab.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &lab.hub, "link", "set", "br0", "up"])?;
        for k in 0..members {
            let name = format!("mctest-{pid}-{tag}-{k}");
            ip(&["netns", "add", &name])?;
            lab.members.push(name.clone());
            let (inside, port) = (format!("mt{pid}{tag}{k}"), format!("mt{pid}{tag}{k}p"));
            if port.len() > 15 {
                return Err(format!("interface name {port} is over 15 characters: use a shorter lab tag"));
            }
            ip(&["link", "add", &inside, "type", "veth", "peer", "name", &port])?;
            ip(&["link", "set", &inside, "netns", &name])?;
            ip(&["link", "set", &port, "netns", &lab.hub])?;
            ip(&["-n", &lab.hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &lab.hub, "link", "set", &port, "up"])?;
            ip(&["-n", &name, "addr", "add", &format!("{}/24", lab.addr(k)), "dev", &inside])?;
            ip(&["-n", &name, "link", "set", &inside, "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    /// Put IPv6 addresses (each in a /64) on member `k`'s loopback,
    /// usable at once (no duplicate address detection).
    pub fn add_ipv6(&self, k: usize, addrs: &[&str]) {
        for a in addrs {
            ip(&["-n", self.ns(k), "-6", "addr", "add", &format!("{a}/64"), "dev", "lo", "nodad"]).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    pub fn ns(&self, k: usize) -> &str {
        &self.members[k]
    }

    pub fn addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, 0, 1 + k as u8)
    }

    /// A command that runs `program` inside member `k`.
    pub fn command(&self, k: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(k), program]);
        cmd
    }

    /// Run `f` on a thread inside member `k`: sockets it makes live there.
    pub fn within<T: Send + 'static>(&self, k: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.ns(k));
        std::thread::spawn(move || {
            let fd = File::open(&path).expect("namespace exists");
            // SAFETY: setns on a namespace fd, for this thread only.
            assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}");
            f()
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in self.members.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}
