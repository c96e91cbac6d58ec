#![no_main]
// Drives megaconn::fuzz_targets::bus (see src/fuzz_targets.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| megaconn::fuzz_targets::bus(data));
