//! Every input the fuzzers saved (crashes fixed since, and a small seed
//! corpus per target) replayed through the same entry points under
//! `cargo test`: a fixed crash stays fixed.
use std::path::Path;

#[test]
fn saved_fuzz_inputs_replay_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut replayed = 0;
    for (name, target) in megaconn::fuzz_targets::TARGETS {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else { panic!("no saved inputs for fuzz target {name} in {}", dir.display()) };
        for e in entries {
            let path = e.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            target(&data);
            replayed += 1;
        }
    }
    assert!(replayed >= megaconn::fuzz_targets::TARGETS.len(), "at least one input per target");
}
