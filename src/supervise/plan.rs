//! How many worker processes a target needs.
//!
//! The per-process open-file limit (RLIMIT_NOFILE, after raising the soft
//! limit to the hard one) caps the sockets one process can hold. `auto`
//! picks enough processes that none is asked to hold more than 90% of that
//! limit (headroom for the accepts a full worker takes before it stops watching), and at
//! least one per core so every core runs an event loop.

use serde::Serialize;
use std::str::FromStr;

/// How many worker processes: "auto" or a positive number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workers {
    Auto,
    Fixed(usize),
}

impl FromStr for Workers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "auto" {
            return Ok(Workers::Auto);
        }
        match s.trim().parse::<usize>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(Workers::Fixed(n)),
            _ => Err(format!("'{s}' is not a worker count; expected auto or a number from 1 to 4096")),
        }
    }
}

/// Share of the fd limit `auto` plans to use per process.
pub(crate) const FD_HEADROOM: f64 = 0.90;
/// Descriptors a worker needs besides sockets (stdio, epoll, /proc reads).
pub(crate) const BASE_FDS: u64 = 16;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct WorkerPlan {
    pub workers: usize,
    /// Connections each worker is planned to hold at most.
    pub per_worker: u64,
    /// The RLIMIT_NOFILE hard limit each worker runs with.
    pub fd_limit: u64,
    /// Descriptors per worker not available for connections.
    pub reserved_fds: u64,
    /// Connections one worker should hold at most: 90% of the fd limit
    /// minus the reserved descriptors (an elastic server worker leaves the
    /// accept group there).
    pub budget: u64,
}

/// Plan `connections` over worker processes whose fd limit is `fd_limit`,
/// which each spend `reserved_fds` on other things (listeners...) and can
/// tell at most `max_per_worker` connections apart (a server worker's
/// connection ids hold 16 bits of key; a client worker has no such cap:
/// `u64::MAX`).
pub(crate) fn plan_workers(
    connections: u64,
    workers: Workers,
    fd_limit: u64,
    reserved_fds: u64,
    max_per_worker: u64,
    cores: usize,
) -> Result<WorkerPlan, String> {
    let reserved = reserved_fds + BASE_FDS;
    let hard_room = fd_limit.saturating_sub(reserved).min(max_per_worker);
    let planned_room = ((fd_limit as f64 * FD_HEADROOM) as u64).saturating_sub(reserved).min(max_per_worker);
    if planned_room == 0 {
        return Err(format!(
            "RLIMIT_NOFILE is {fd_limit}, which leaves no descriptors for connections after {reserved} reserved ones; \
             raise the hard limit (`ulimit -Hn`, LimitNOFILE=, /etc/security/limits.conf) or use fewer ports"
        ));
    }
    let needed = connections.div_ceil(planned_room).max(1) as usize;
    let plan = |w: usize| WorkerPlan { workers: w, per_worker: connections.div_ceil(w as u64), fd_limit, reserved_fds: reserved, budget: planned_room };
    match workers {
        Workers::Auto => Ok(plan(needed.max(cores))),
        Workers::Fixed(w) => {
            let per = connections.div_ceil(w as u64);
            if per > hard_room && hard_room == max_per_worker {
                let min = connections.div_ceil(hard_room) as usize;
                return Err(format!(
                    "--workers {w} puts {per} connections in each process, but one worker tells at most {max_per_worker} connections apart \
                     (its connection ids hold that many keys), whatever its file limit ({fd_limit}); use --workers auto or --workers {} or more",
                    min.max(needed)
                ));
            }
            if per > hard_room {
                let min = connections.div_ceil(hard_room) as usize;
                return Err(format!(
                    "--workers {w} puts {per} connections in each process, but a process may open only {fd_limit} files \
                     (RLIMIT_NOFILE hard limit, {hard_room} left for sockets); use --workers auto or --workers {} or more",
                    min.max(needed)
                ));
            }
            Ok(plan(w))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_spreads_over_the_fd_wall() {
        let p = plan_workers(1_000_000, Workers::Auto, 20_000, 100, u64::MAX, 2).unwrap();
        assert_eq!(p.workers, 56);
        assert!(p.per_worker <= 18_000);
        let p = plan_workers(3_000, Workers::Auto, 1_000, 3, u64::MAX, 2).unwrap();
        assert!(p.workers >= 4, "{p:?}");
        assert_eq!(plan_workers(10, Workers::Auto, 20_000, 0, u64::MAX, 2).unwrap().workers, 2);
    }

    #[test]
    fn fixed_workers_that_cannot_fit_are_refused() {
        let e = plan_workers(100_000, Workers::Fixed(2), 20_000, 0, u64::MAX, 2).unwrap_err();
        assert!(e.contains("--workers 2") && e.contains("RLIMIT_NOFILE"), "{e}");
        assert!(plan_workers(30_000, Workers::Fixed(2), 20_000, 0, u64::MAX, 2).is_ok());
        assert!(plan_workers(10, Workers::Auto, 10, 0, u64::MAX, 2).unwrap_err().contains("no descriptors"));
    }

    /// A server worker tells at most 65,536 connections apart: where the
    /// file limit is higher, the budget stops there, `auto` plans more
    /// workers, and a fixed count that cannot fit is refused naming it.
    #[test]
    fn a_per_worker_cap_below_the_file_limit_bounds_the_budget() {
        const KEYS: u64 = 1 << 16;
        let p = plan_workers(1_000_000, Workers::Auto, 1_048_576, 4, KEYS, 2).unwrap();
        assert_eq!(p.budget, KEYS, "{p:?}");
        assert_eq!(p.workers, 16, "{p:?}");
        let e = plan_workers(1_000_000, Workers::Fixed(2), 1_048_576, 4, KEYS, 2).unwrap_err();
        assert!(e.contains("65536 connections apart") && e.contains("--workers 16"), "{e}");
        assert_eq!(plan_workers(1_000_000, Workers::Auto, 20_000, 4, KEYS, 2).unwrap().budget, 17_980, "the file limit binds first here");
    }
}
