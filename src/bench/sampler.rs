//! The server's side of each time-series sample of a bench: connections,
//! CPU in cores, and memory per connection against the start.

use crate::report::series::ServerSample;
use crate::server::fleet::ServerFleet;
use crate::stats::memory;
use crate::sys::mono_us;

pub struct ServerSampler {
    /// Anonymous PSS of one idle worker (elastic servers add workers).
    anon_per_worker: u64,
    slab_before: u64,
    prev_cpu: f64,
    prev_us: u64,
}

fn slab_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    memory::meminfo_kib(&meminfo, "Slab:").unwrap_or(0) * 1024
}

impl ServerSampler {
    /// `anon_baseline`: anonymous PSS of the `workers` started before any
    /// connection.
    pub fn new(anon_baseline: u64, workers: usize) -> ServerSampler {
        ServerSampler { anon_per_worker: anon_baseline / workers.max(1) as u64, slab_before: slab_bytes(), prev_cpu: 0.0, prev_us: mono_us() }
    }

    pub fn sample(&mut self, fleet: &ServerFleet) -> ServerSample {
        let t = fleet.view.totals();
        let pids = fleet.pids();
        let now = mono_us();
        let dt = now.saturating_sub(self.prev_us) as f64 / 1e6;
        let cpu_cores = if dt > 0.0 { (t.cpu_seconds - self.prev_cpu).max(0.0) / dt } else { 0.0 };
        (self.prev_cpu, self.prev_us) = (t.cpu_seconds, now);
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
