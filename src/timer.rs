//! Microsecond-precise waiting for the reactors.
//!
//! epoll_wait's timeout has millisecond resolution (mio rounds up), which
//! adds up to 1 ms to every scheduled send and every async business timer.
//! Instead we wait on the epoll descriptor itself with ppoll (nanosecond
//! timeout): it returns when events are pending or at the deadline, and
//! mio then collects the events without blocking.

use std::os::fd::AsRawFd;
use std::time::Duration;

/// Block until `poll` has events or `timeout` passes, with µs precision.
pub(crate) fn wait(poll: &mio::Poll, timeout: Duration) {
    if timeout.is_zero() {
        return;
    }
    let mut pfd = libc::pollfd { fd: poll.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
    unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
}
