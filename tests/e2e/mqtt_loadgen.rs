//! bench/mqtt_vs_loadgen.sh, run end to end at its smallest (10
//! publishers x 100 messages, one subscriber, QoS 0 and 1, against
//! megaconn's MQTT server and Debian's mosquitto), so the comparison of
//! megaconn's MQTT load generator with mqtt_paho_load (Eclipse paho's Go
//! client; scripts/setup.sh builds it, pinned) cannot rot: every row of
//! its JSON must hold both tools' numbers, and at QoS 1, where nothing may
//! be lost, exactly the load asked for: 1,000 published, 1,000
//! acknowledged, 1,000 received.
use crate::common::proc::{exited, kill_group};
use crate::common::*;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The script's small mode takes ~30 s here (8 runs, each a fresh broker
/// and one second of publishing); this is its bound.
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

#[test]
fn the_small_comparison_runs_and_both_tools_numbers_are_parsed() {
    let ports = free_ports(3);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mqtt-loadgen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let results = dir.join("results.json");
    let log = TestLog::new("mqtt_vs_loadgen");
    let mut script = Command::new("bash")
        .arg(root.join("bench/mqtt_vs_loadgen.sh"))
        .arg("small")
        .env("MEGACONN", env!("CARGO_BIN_EXE_megaconn"))
        .env("PORT", ports.first.to_string())
        .env("RUN_DIR", dir.join("run"))
        .env("RESULTS", &results)
        .stdout(log.stdio())
        .stderr(log.stdio())
        .process_group(0)
        .spawn()
        .expect("bash");
    let started = Instant::now();
    while !exited(&script) && started.elapsed() < SCRIPT_LIMIT {
        std::thread::sleep(Duration::from_millis(200));
    }
    let timed_out = !exited(&script);
    let status = kill_group(&mut script);
    assert!(!timed_out, "bench/mqtt_vs_loadgen.sh small ran past {SCRIPT_LIMIT:?} (its output is below)");
    assert!(status.success(), "bench/mqtt_vs_loadgen.sh small: {status} (its output is below)");

    let rows: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let mut seen = Vec::new();
    for r in &rows {
        let what = format!("{} against {} at QoS {}: {r}", r["tool"], r["broker"], r["qos"]);
        let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {what}"));
        assert_eq!(n("expected_published"), 1000, "{what}");
        assert!(n("published") > 0 && n("received") > 0, "{what}");
        assert!(r["msgs_per_s"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        assert!(r["tool_cpu_s"].as_f64().is_some_and(|v| v >= 0.0), "{what}");
        assert!(r["delivery_p99_ms"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        if n("qos") == 1 {
            assert_eq!(n("published"), 1000, "{what}");
            assert_eq!(n("acknowledged"), 1000, "{what}");
            assert_eq!(n("received"), 1000, "{what}");
            assert!(r["publish_p99_ms"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        }
        seen.push(format!("{}/{}/{}", r["broker"].as_str().unwrap(), r["tool"].as_str().unwrap(), n("qos")));
    }
    seen.sort();
    let want = ["megaconn/megaconn/0", "megaconn/megaconn/1", "megaconn/paho/0", "megaconn/paho/1"]
        .iter()
        .chain(&["mosquitto/megaconn/0", "mosquitto/megaconn/1", "mosquitto/paho/0", "mosquitto/paho/1"])
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    assert_eq!(seen, want, "one row per broker, tool and QoS");
    let _ = std::fs::remove_dir_all(&dir);
}
