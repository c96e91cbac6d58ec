#![no_main]
// Drives megaconn::fuzz_targets::mqtt_ws (see src/fuzz_targets.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| megaconn::fuzz_targets::mqtt_ws(data));
