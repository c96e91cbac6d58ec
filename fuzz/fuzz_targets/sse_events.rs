#![no_main]
// Drives megaconn::fuzz_targets::sse_events (see src/fuzz_targets.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| megaconn::fuzz_targets::sse_events(data));
