//! Counting, merging and printing results.
pub mod counters;
pub(crate) mod exposition;
pub(crate) mod format;
pub(crate) mod histogram;
pub(crate) mod memory;
pub(crate) mod netstat;
pub(crate) mod progress;
