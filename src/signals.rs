//! Ctrl-C / SIGTERM in supervisors: set a flag the main loop checks, so
//! the supervisor can close its workers gracefully and still report. A
//! second Ctrl-C exits at once, after the cleanup registered with
//! [`on_hard_exit`] (what must not outlive us: network namespaces).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static HARD_EXIT: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

pub(crate) fn install() {
    // A second installation attempt (bench installs once) is harmless.
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            // Second Ctrl-C: the user means it. Workers die with us
            // (PR_SET_PDEATHSIG); what the kernel keeps goes first.
            let hooks = HARD_EXIT.lock().map(|h| h.clone()).unwrap_or_default();
            for hook in hooks {
                hook();
            }
            std::process::exit(130);
        }
    });
}

/// Run `f` before a second Ctrl-C exits without unwinding.
pub(crate) fn on_hard_exit(f: fn()) {
    if let Ok(mut h) = HARD_EXIT.lock() {
        if !h.contains(&f) {
            h.push(f);
        }
    }
}

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::SeqCst);
}

/// SIGHUP sets a flag (a server reloads its TLS certificate) instead of
/// killing the process.
pub(crate) fn watch_hangup() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGHUP, on_hangup as *const () as libc::sighandler_t);
    }
}

/// Whether SIGHUP arrived since the last call.
pub(crate) fn take_hangup() -> bool {
    HANGUP.swap(false, Ordering::SeqCst)
}
