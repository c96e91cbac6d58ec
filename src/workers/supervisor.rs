//! Spawning, watching and stopping worker processes.
//!
//! The supervisor re-executes its own binary (`megaconn __worker ROLE
//! CONFIG`) once per worker. Each worker:
//! - gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the supervisor even if
//!   the supervisor is killed with SIGKILL;
//! - runs in its own process group, so a terminal Ctrl-C reaches only the
//!   supervisor, which then closes the workers gracefully and still prints
//!   its summary;
//! - reports over its stdout pipe, read by one small thread per worker that
//!   forwards parsed messages into a single channel.
//!
//! Dropping a [`WorkerPool`] kills (by PID) and reaps every worker still
//! alive, so no error path leaves processes or sockets behind.

use super::control::WorkerMsg;
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

/// Which side a pool serves; also the hidden worker subcommand's argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// Something that happened to one worker.
#[derive(Debug)]
pub enum PoolEvent {
    Msg(WorkerMsg),
    /// The worker's stdout closed: it exited (or is exiting).
    Exited,
    /// The worker wrote a line that is not a message (a bug, reported).
    Garbled(String),
}

/// (role, worker index, event), as delivered on the shared channel.
pub type Delivery = (Role, usize, PoolEvent);

pub struct WorkerPool {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
}

/// A channel on which several pools can deliver their events.
pub fn channel() -> (Sender<Delivery>, Receiver<Delivery>) {
    std::sync::mpsc::channel()
}

impl WorkerPool {
    /// Start one worker per config (each a JSON document). `fd_limit`, when
    /// set, caps the workers' RLIMIT_NOFILE (rehearsing the fd wall small).
    pub fn spawn(role: Role, configs: &[String], fd_limit: Option<u64>, tx: &Sender<Delivery>) -> Result<WorkerPool> {
        let exe = std::env::current_exe().context("cannot locate the megaconn binary to start workers")?;
        let mut pool = WorkerPool { children: Vec::new(), stdins: Vec::new() };
        for (i, config) in configs.iter().enumerate() {
            let mut cmd = Command::new(&exe);
            cmd.arg("__worker")
                .arg(role.as_str())
                .arg(config)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .process_group(0);
            // SAFETY: only async-signal-safe calls (prctl, setrlimit) run
            // between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    crate::sys::die_with_parent()?;
                    if let Some(n) = fd_limit {
                        crate::sys::set_fd_limit(n, n)?;
                    }
                    Ok(())
                });
            }
            let mut child = cmd
                .spawn()
                .with_context(|| format!("cannot start {} worker {i} (fork/exec failed; check the pid limit, `ulimit -u`)", role.as_str()))?;
            let stdout = child.stdout.take().expect("piped stdout");
            pool.stdins.push(child.stdin.take());
            pool.children.push(child);
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(format!("{}-reader-{i}", role.as_str()))
                .stack_size(64 * 1024)
                .spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        let ev = match serde_json::from_str::<WorkerMsg>(&line) {
                            Ok(m) => PoolEvent::Msg(m),
                            Err(_) => PoolEvent::Garbled(line),
                        };
                        if tx.send((role, i, ev)).is_err() {
                            return;
                        }
                    }
                    let _ = tx.send((role, i, PoolEvent::Exited));
                })
                .context("cannot start a reader thread")?;
        }
        Ok(pool)
    }

    pub fn len(&self) -> usize {
        self.children.len()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    /// Send one command line to every worker still listening.
    pub fn broadcast(&mut self, cmd: &str) {
        for stdin in self.stdins.iter_mut() {
            if let Some(s) = stdin {
                if writeln!(s, "{cmd}").and_then(|_| s.flush()).is_err() {
                    *stdin = None;
                }
            }
        }
    }

    /// Ask every worker to stop, wait up to `grace`, then SIGKILL the rest
    /// (by PID) and reap them all.
    pub fn stop(&mut self, grace: Duration) {
        self.broadcast(super::control::CMD_STOP);
        self.stdins.clear();
        let deadline = Instant::now() + grace;
        for child in self.children.iter_mut() {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        self.children.clear();
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        for child in self.children.iter_mut() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}
