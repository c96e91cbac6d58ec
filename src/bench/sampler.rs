//! The server's side of each time-series sample of a bench: connections,
//! CPU in cores, and memory per connection against the start.

use crate::client::series::ServerSample;
use crate::server::supervisor::fleet::ServerFleet;
use crate::stats::memory;
use crate::sys::mono_us;

pub(crate) struct ServerSampler {
    /// Anonymous PSS of one idle worker (elastic servers add workers).
    anon_per_worker: u64,
    slab_before: u64,
    /// (µs, CPU seconds) of the last two samples: CPU is priced over ~1 s
    /// so a worker report landing in one half-second does not zig-zag.
    window: std::collections::VecDeque<(u64, f64)>,
}

fn slab_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    memory::meminfo_kib(&meminfo, "Slab:").unwrap_or(0) * 1024
}

impl ServerSampler {
    /// `anon_baseline`: anonymous PSS of the `workers` started before any
    /// connection.
    pub(crate) fn new(fleet: &ServerFleet, anon_baseline: u64, workers: usize) -> ServerSampler {
        ServerSampler {
            anon_per_worker: anon_baseline / workers.max(1) as u64,
            slab_before: slab_bytes(),
            window: [(mono_us(), fleet.view.totals().cpu_seconds)].into(),
        }
    }

    pub(crate) fn sample(&mut self, fleet: &ServerFleet) -> ServerSample {
        let t = fleet.view.totals();
        let pids = fleet.pids();
        let now = mono_us();
        let (base_us, base_cpu) = self.window.front().copied().unwrap_or((now, t.cpu_seconds));
        let dt = now.saturating_sub(base_us) as f64 / 1e6;
        let cpu_cores = if dt > 0.0 { (t.cpu_seconds - base_cpu).max(0.0) / dt } else { 0.0 };
        self.window.push_back((now, t.cpu_seconds));
        if self.window.len() > 2 {
            self.window.pop_front();
        }
        let active = t.active.max(1) as f64;
        let anon = memory::pss_of(&pids).anon;
        ServerSample {
            active: t.active,
            workers: pids.len(),
            cpu_cores,
            user_bytes_per_conn: anon.saturating_sub(self.anon_per_worker * pids.len() as u64) as f64 / active,
            kernel_bytes_per_conn: slab_bytes().saturating_sub(self.slab_before) as f64 / active,
        }
    }
}
