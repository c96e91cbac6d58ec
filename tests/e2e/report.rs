//! `--report DIR` and `megaconn report compare`, end to end: a real bench
//! over loopback writes the directory; its files are read back by parsers
//! nobody here wrote (serde_json, the png crate, headless Chromium).

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("megaconn-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Decode a PNG; returns (width, height, share of pixels that are not white).
fn png_stats(path: &Path) -> (u32, u32, f64) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let inked = pixels.chunks(px).filter(|p| p.iter().take(3).any(|c| *c < 230)).count();
    (info.width, info.height, inked as f64 / (pixels.len() / px) as f64)
}

fn bench_with_report(dir: &Path, connections: &str, ports: Ports) -> Value {
    let mut cmd = megaconn();
    cmd.args(["bench", "--connections", connections, "--ports", &ports.arg(), "--hold", "3s", "--heartbeat", "500ms", "--rate", "5000", "--json"]);
    cmd.arg("--report").arg(dir);
    let (code, out, err) = run(cmd, Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn a_bench_report_has_phases_series_page_and_charts_and_compares() {
    raise_fd_limit();
    let a = scratch("report-a");
    let v = bench_with_report(&a, "5000", free_ports(10));
    // Phases in the run's own --json too.
    let names: Vec<&str> = v["client"]["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ramp", "hold", "close"]);

    let r: Value = serde_json::from_str(&std::fs::read_to_string(a.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["kind"], "bench");
    assert_eq!(r["result"]["client"]["established"], 5000, "every number of the run is in the report");
    let phases = r["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    assert_eq!(phases[0]["established"], 5000, "{}", phases[0]);
    assert!(phases[0]["connect_rate_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(phases[1]["open_at_end"], 5000, "{}", phases[1]);
    assert!(phases[1]["heartbeat_rtt_ms"]["count"].as_u64().unwrap() >= 5000 * 4, "heartbeats every 500 ms over a 3 s hold: {}", phases[1]);
    assert_eq!(phases[2]["open_at_end"], 0, "{}", phases[2]);
    let series = r["series"].as_array().unwrap();
    assert!(series.len() >= 4, "{} samples", series.len());
    assert!(series.iter().any(|s| s["open"] == 5000), "a sample saw every connection open");
    assert!(series.iter().any(|s| s["server"]["active"] == 5000), "the server side is sampled too");
    assert!(r["distributions"]["heartbeat"].as_array().unwrap().len() > 3);
    assert!(r["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(r["machine"]["limits"]["nofile_hard"].as_u64().unwrap() > 0);

    for chart in ["connections", "connect-rate", "memory", "cpu", "latency-heartbeat", "latency-distribution"] {
        let svg = std::fs::read_to_string(a.join(format!("{chart}.svg"))).unwrap_or_else(|e| panic!("{chart}.svg: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "{chart}.svg draws a line");
        let (w, h, inked) = png_stats(&a.join(format!("{chart}.png")));
        assert_eq!((w, h), (900, 420), "{chart}.png");
        assert!(inked > 0.02, "{chart}.png has axes, text and lines: {inked}");
    }
    let html = std::fs::read_to_string(a.join("index.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("Phases") && html.contains("heartbeat p99 (hold)"));
    assert!(!html.contains("<script") && !html.contains("src=\"http") && !html.contains("href=\"http"), "self-contained");

    // Rendered by a browser with the network cut off.
    let shot = a.join("screenshot.png");
    let mut node = Command::new("node");
    node.arg(peer("screenshot.js")).arg(a.join("index.html")).arg(&shot);
    let mut browser = Peer::spawn("node screenshot.js (chromium)", node);
    let seen: Value = serde_json::from_str(&browser.finish_ok(Duration::from_secs(60)).join("\n")).unwrap();
    assert_eq!(seen["external_requests"], serde_json::json!([]), "{seen}");
    assert!(seen["svgs"].as_u64().unwrap() >= 6, "{seen}");
    let (w, _, inked) = png_stats(&shot);
    assert_eq!(w, 1000);
    assert!(inked > 0.02, "the page is not blank: {inked}");

    // A second run, smaller, then the two side by side.
    let b = scratch("report-b");
    bench_with_report(&b, "2000", free_ports(10));
    let mut cmd = megaconn();
    let page = b.join("compare.html");
    cmd.arg("report").arg("compare").arg(a.join("report.json")).arg(b.join("report.json")).arg("--html").arg(&page);
    let (code, out, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let row = out.lines().find(|l| l.starts_with("connections established")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("5,000") && row.contains("2,000") && row.contains("0.40x") && row.ends_with("worse"), "{row}");
    assert!(out.lines().any(|l| l.starts_with("heartbeat p99 (hold)") && l.contains('x')), "{out}");
    assert!(std::fs::read_to_string(&page).unwrap().matches("<svg").count() >= 3);

    let mut cmd = megaconn();
    cmd.arg("report").arg("compare").arg(a.join("report.json")).arg(b.join("nope.json"));
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nope.json"), "{err}");
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// `client --report` against a server started here: the same directory.
#[test]
fn a_client_report_against_a_server() {
    raise_fd_limit();
    let port = free_port().to_string();
    let (mut s, _) = server(&["--ports", &port, "--workers", "1"], None);
    let d = scratch("report-client");
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port, "--connections", "300", "--hold", "2s", "--request-rate", "10/s", "--heartbeat", "off", "--report"]).arg(&d);
    let (code, _, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(d.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["kind"], "client");
    let hold = &r["phases"][1];
    assert_eq!(hold["name"], "hold");
    assert!(hold["replies"].as_u64().unwrap() >= 300 * 10, "{hold}");
    assert!(hold["request_ms"]["count"].as_u64().unwrap() > 0, "{hold}");
    assert!(d.join("latency-request.png").exists() && d.join("index.html").exists());
    assert!(s.terminate().success());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_unwritable_report_directory_is_refused_before_the_run() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--connections", "10", "--report", "/proc/megaconn-report"]);
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--report /proc/megaconn-report") && err.contains("writ"), "{err}");
}

/// The push scenario writes its report too, with the push latency chart
/// and the rounds in report.json; the business table refuses one.
#[test]
fn a_push_bench_report_and_business_refusal() {
    raise_fd_limit();
    let d = scratch("report-push");
    let mut cmd = megaconn();
    cmd.args([
        "bench",
        "--scenario",
        "push",
        "--connections",
        "1000",
        "--broadcasts",
        "2",
        "--broadcast-interval",
        "300ms",
        "--hold",
        "3s",
        "--ports",
        &free_ports(2).arg(),
    ]);
    cmd.arg("--report").arg(&d);
    let (code, _, err) = run(cmd, Duration::from_secs(90));
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(d.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["result"]["push"]["deliveries"], 2000, "{}", r["result"]["push"]);
    // Every push is counted in one phase (most in the hold; on a busy
    // machine the first may land while the ramp is still being settled).
    let per_phase: u64 = r["phases"].as_array().unwrap().iter().map(|p| p["pushes_received"].as_u64().unwrap()).sum();
    assert_eq!(per_phase, 2000, "pushes counted over the phases: {}", r["phases"]);
    assert!(r["phases"][1]["pushes_received"].as_u64().unwrap() > 0, "pushes counted in the hold phase: {}", r["phases"][1]);
    let (w, h, inked) = png_stats(&d.join("latency-push.png"));
    assert_eq!((w, h), (900, 420));
    assert!(inked > 0.02);
    assert!(std::fs::read_to_string(d.join("index.html")).unwrap().contains("push delivery p99"));
    let _ = std::fs::remove_dir_all(&d);

    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "business", "--report"]).arg(scratch("report-business"));
    let (code, _, err) = run(cmd, Duration::from_secs(30));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--scenario business") && err.contains("client --report"), "{err}");
}
