//! Ctrl-C / SIGTERM in supervisors: set a flag the main loop checks, so
//! the supervisor can close its workers gracefully and still report.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn install() {
    // A second installation attempt (bench installs once) is harmless.
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            // Second Ctrl-C: the user means it. Workers die with us.
            std::process::exit(130);
        }
    });
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
