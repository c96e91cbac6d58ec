//! Threads are planned like processes: every thread is a task that counts
//! against kernel.pid_max, kernel.threads-max, the cgroup's pids.max and
//! RLIMIT_NPROC. A server that starts 56 workers x 1000 pool threads must
//! be refused up front with the limit named, never fail with an
//! unexplained EAGAIN from clone().

use super::limits::Limits;

/// Tasks left free for everything else on the machine.
const SPARE_TASKS: u64 = 200;

/// Check that `new_tasks` more tasks fit; Err names the limit and the fix.
pub(crate) fn check(l: &Limits, new_tasks: u64, what: &str) -> Result<(), String> {
    let now = l.tasks_now.unwrap_or(0);
    let caps = [
        ("kernel.pid_max", l.pid_max, "sysctl -w kernel.pid_max=4194304"),
        ("kernel.threads-max", l.threads_max, "sysctl -w kernel.threads-max=<more>"),
        ("the cgroup's pids.max", l.cgroup_pids_max, "raise pids.max (TasksMax= in systemd, --pids-limit in docker)"),
        ("RLIMIT_NPROC (ulimit -u)", l.max_processes, "ulimit -u <more> or LimitNPROC="),
    ];
    for (name, cap, fix) in caps {
        let Some(cap) = cap.filter(|c| *c != u64::MAX) else { continue };
        let free = cap.saturating_sub(now).saturating_sub(SPARE_TASKS);
        if new_tasks > free {
            return Err(format!(
                "{what} needs {new_tasks} threads and processes, but {name} is {cap} with {now} tasks running ({free} free after {SPARE_TASKS} spare); \
                 use fewer threads (e.g. --business pool:N with a smaller N, or --business async) or fewer workers, or: {fix}"
            ));
        }
    }
    Ok(())
}

/// Tasks free under the tightest limit (for sizing elastic growth).
pub(crate) fn free(l: &Limits) -> u64 {
    let now = l.tasks_now.unwrap_or(0);
    [l.pid_max, l.threads_max, l.cgroup_pids_max, l.max_processes]
        .into_iter()
        .flatten()
        .filter(|c| *c != u64::MAX)
        .map(|c| c.saturating_sub(now).saturating_sub(SPARE_TASKS))
        .min()
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_binding_task_limit() {
        let l = Limits { pid_max: Some(32768), threads_max: Some(200_000), tasks_now: Some(300), ..Default::default() };
        let e = check(&l, 56 * 1001, "--business pool:1000 on 56 workers").unwrap_err();
        assert!(e.contains("kernel.pid_max") && e.contains("32768") && e.contains("pool:N"), "{e}");
        assert!(check(&l, 1008, "pool").is_ok());
        assert_eq!(free(&l), 32768 - 300 - SPARE_TASKS);
        assert_eq!(free(&Limits::default()), u64::MAX);
    }
}
