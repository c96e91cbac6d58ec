//! Live progress on stderr: one refreshing line on a terminal, plain
//! timestamped lines otherwise (logs, CI, pipes). stdout stays free for
//! the summary and `--json`.

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub(crate) struct Progress {
    tty: bool,
    started: Instant,
    /// Whether a refreshing line is on screen and needs a newline first.
    dirty: bool,
    quiet: bool,
}

impl Progress {
    pub(crate) fn new(quiet: bool) -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), started: Instant::now(), dirty: false, quiet }
    }

    /// Show the current state (replaces the previous line on a terminal).
    pub(crate) fn update(&mut self, line: &str) {
        if self.quiet {
            return;
        }
        let t = self.started.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[K[{t:7.1}s] {line}");
            self.dirty = true;
        } else {
            let _ = writeln!(err, "[{t:7.1}s] {line}");
        }
        let _ = err.flush();
    }

    /// A line that stays (phase changes, warnings).
    pub(crate) fn note(&mut self, line: &str) {
        if self.quiet {
            return;
        }
        let t = self.started.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        if self.dirty {
            let _ = writeln!(err);
            self.dirty = false;
        }
        let _ = writeln!(err, "[{t:7.1}s] {line}");
    }

    pub(crate) fn finish(&mut self) {
        if self.dirty && !self.quiet {
            eprintln!();
            self.dirty = false;
        }
    }
}
