//! Counting, merging and printing results.
pub mod histogram;
pub mod memory;
pub mod progress;
pub mod format;
