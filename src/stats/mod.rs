//! Counting, merging and printing results.
pub mod counters;
pub mod exposition;
pub mod format;
pub mod histogram;
pub mod memory;
pub mod netstat;
pub mod progress;
