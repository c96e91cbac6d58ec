//! The live dashboard on the admin port (issue 65): Debian's Chromium
//! opens `/ui` of a server holding MQTT clients, behind an admin token;
//! the page asks for the token, then shows what `/stats` says (the
//! numbers compared with a `/stats` this test asks itself), draws its
//! charts, loads nothing from another origin, runs under its
//! Content-Security-Policy, and is screenshotted. A load generator's
//! `--admin` serves the same page over its own `/stats`.
use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

#[test]
fn chromium_shows_what_stats_says_behind_the_token() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("megaconn-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, "dash-secret-7\n").unwrap();
    let serve = format!("mqtt={port}");
    let (mut s, _, ready) = server_ready(&["--serve", &serve, "--workers", "2", "--admin-token-file", token_file.to_str().unwrap()], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let token = Some("dash-secret-7");

    // The page needs no token; the data does.
    let (code, page) = http(&admin, "GET", "/ui", b"", None);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("/ui/dashboard.js"), "{page}");
    assert_eq!(http(&admin, "GET", "/stats", b"", None).0, 401);

    // Six MQTT clients held while the page watches.
    let clients: Vec<_> = (0..6).map(|i| crate::common::mqtt_raw::raw_client(port, 4, &format!("dash-{i}"), &[])).collect();
    let stats = |what: &str| -> Value {
        let (code, body) = http(&admin, "GET", "/stats", b"", token);
        assert_eq!(code, 200, "{what}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    wait_until("the six clients counted", Duration::from_secs(20), || stats("held")["active"] == 6);
    // Two of them publish while the page watches: tele/hot four times as
    // often as tele/cold (bounded: at most 60 s).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publishers: Vec<_> = [("tele/hot", 4u32), ("tele/cold", 1)]
        .into_iter()
        .map(|(topic, n)| {
            let mut c = crate::common::mqtt_raw::raw_client(port, 4, &format!("pub-{topic}"), &[]);
            let stop = stop.clone();
            std::thread::spawn(move || {
                let end = std::time::Instant::now() + Duration::from_secs(60);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && std::time::Instant::now() < end {
                    for _ in 0..n {
                        let p = crate::common::mqtt_raw::publish_body(false, topic, None, b"0123456789");
                        std::io::Write::write_all(&mut c, &crate::common::mqtt_raw::frame(0x30, &p)).unwrap();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                // Held open until the page's numbers are checked.
                c
            })
        })
        .collect();
    wait_until("both topics among the busiest", Duration::from_secs(20), || stats("publishing")["top_topics"].as_array().is_some_and(|t| t.len() == 2));

    let seen = open_page(&admin, "dash-secret-7", &dir);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _still_open: Vec<_> = publishers.into_iter().map(|p| p.join().unwrap()).collect();
    let now = stats("after the page");

    assert!(seen["asked"].as_str().unwrap_or("").contains("token"), "without the token the page asks for it: {seen}");
    assert!(seen["unauthorized"].as_u64().unwrap_or(0) >= 1, "its first /stats was refused: {seen}");
    assert_eq!(seen["login_hidden"], true, "{seen}");
    assert!(!seen["address"].as_str().unwrap_or("").contains("dash-secret"), "the token left the address bar: {seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "the page ran without an error (CSP included): {seen}");
    // What the page shows is what /stats says (the six held the whole time).
    let card = |k: &str| seen["cards"][k].as_str().and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("card {k}: {seen}"));
    assert_eq!(card("active"), 8.0, "{seen}");
    assert_eq!(card("active"), now["active"].as_f64().unwrap());
    // The busiest topics as the /stats it rendered says, hot first; the
    // message bytes flowing in.
    let top = seen["grid"].as_array().unwrap_or_else(|| panic!("the busiest topics: {seen}"));
    let rows: Vec<&str> = top.iter().filter_map(|r| r["row"].as_str()).collect();
    assert_eq!(rows, ["tele/hot", "tele/cold"], "{seen}");
    assert_eq!(top[0]["cells"]["messages /s"], seen["stats"]["top_topics"][0]["messages_per_s"], "{seen}");
    assert!(top[0]["cells"]["messages /s"].as_f64().is_some_and(|v| v > 0.0), "{seen}");
    let (b, m) = (top[0]["cells"]["bytes /s"].as_f64().unwrap(), top[0]["cells"]["messages /s"].as_f64().unwrap());
    assert!((b - 10.0 * m).abs() < 1e-6 * b, "ten bytes each: {seen}");
    assert!(card("bytes_in") > 0.0, "{seen}");
    assert_eq!(card("workers"), now["workers"].as_f64().unwrap());
    assert_eq!(card("closed"), now["closed"].as_f64().unwrap());
    assert_eq!(card("subscriptions"), now["subscriptions"].as_f64().unwrap());
    assert!(card("rss_bytes") > 1e6, "{seen}");
    assert_eq!(seen["tables"]["table-connections-by-protocol"]["mqtt"], 8, "{seen}");
    let by_worker: f64 = seen["tables"]["table-connections-by-worker"].as_object().unwrap().values().filter_map(Value::as_f64).sum();
    assert_eq!(by_worker, 8.0, "{seen}");
    assert_eq!(seen["stats"]["active_by_worker"], now["active_by_worker"], "{seen}");
    assert_drawn_here(&seen, &admin, &dir);
    drop(clients);
    assert!(s.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Chromium on `admin`'s `/ui` (`token`: `-` for none) until its third
/// render: what the page saw (see tests/peers/chromium_dashboard.js);
/// its screenshot goes to `dir`.
fn open_page(admin: &str, token: &str, dir: &std::path::Path) -> Value {
    let shot = dir.join("dashboard.png");
    let mut node = Command::new("node");
    node.args([&peer("chromium_dashboard.js"), admin, token, shot.to_str().unwrap()]);
    let mut browser = Peer::spawn("node chromium_dashboard.js (chromium)", node);
    let out = browser.finish_ok(Duration::from_secs(90));
    serde_json::from_str(out.last().unwrap_or_else(|| panic!("the page's result: {out:?}"))).unwrap()
}

/// The page drew its charts, asked nothing of another origin, ran under
/// its policy without an error, and its screenshot is a drawn page.
fn assert_drawn_here(seen: &Value, admin: &str, dir: &std::path::Path) {
    assert_eq!(seen["errors"], serde_json::json!([]), "the page ran without an error (CSP included): {seen}");
    assert!(seen["drawn"].as_u64().unwrap_or(0) > 500, "the first chart has pixels: {seen}");
    let origin = format!("http://{admin}/");
    let requests = seen["requests"].as_array().unwrap();
    assert!(requests.iter().filter_map(Value::as_str).all(|u| u.starts_with(&origin)), "every request to {origin}: {requests:?}");
    for must in ["/ui/dashboard.js", "/ui/dashboard.css", "/stats"] {
        assert!(requests.iter().filter_map(Value::as_str).any(|u| u.contains(must)), "asked {must}: {requests:?}");
    }
    let policy = seen["policy"].as_str().unwrap_or("");
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'") && policy.contains("frame-ancestors 'none'"), "{policy}");
    let png = std::fs::read(dir.join("dashboard.png")).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a screenshot of a drawn page: {} bytes", png.len());
}

/// `megaconn client --admin` serves the page too: its cards are the load
/// test's own `/stats` (the connections it holds open).
#[test]
fn a_load_generators_admin_serves_the_same_page() {
    let (port, admin_port) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("megaconn-dashboard-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut s, _, _) = server_ready(&["--ports", &port.to_string(), "--workers", "1"], None);
    let admin = format!("127.0.0.1:{admin_port}");
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "40", "--rate", "400/s", "--hold", "30s", "--admin", &admin, "--json"]);
    let mut client = Running::spawn(cmd);
    let stats = || load_generator_stats(&admin);
    wait_until("the client's 40 open", Duration::from_secs(30), || stats()["open"] == 40);
    let seen = open_page(&admin, "-", &dir);
    let now = stats();
    assert_eq!(seen["cards"]["open"].as_str(), Some("40"), "{seen}");
    assert_eq!(now["open"], 40, "{now}");
    assert_eq!(seen["cards"]["planned"].as_str().map(str::to_string), now["planned"].as_u64().map(|v| v.to_string()), "{seen}");
    assert_eq!(seen["cards"]["failed"].as_str(), Some("0"), "{seen}");
    // The phases so far with their latency percentiles, as the /stats the
    // page rendered says them: the ramp's 40 handshakes, the hold now.
    let phases = seen["grid"].as_array().unwrap_or_else(|| panic!("a table of phases: {seen}"));
    let names: Vec<&str> = phases.iter().filter_map(|p| p["row"].as_str()).collect();
    assert_eq!(names, ["ramp", "hold"], "{seen}");
    assert!(phases[1]["now"].as_bool().unwrap_or(false), "the hold is the phase now: {seen}");
    let ramp = &seen["stats"]["phases"][0];
    assert_eq!(ramp["handshake_ms"]["count"], 40, "{ramp}");
    assert_eq!(phases[0]["cells"]["established"], 40, "{seen}");
    assert_eq!(phases[0]["cells"]["handshake p99"], ramp["handshake_ms"]["p99_ms"], "{seen}");
    assert!(ramp["handshake_ms"]["p99_ms"].as_f64().is_some_and(|v| v > 0.0), "{ramp}");
    assert_drawn_here(&seen, &admin, &dir);
    client.terminate();
    assert!(s.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `megaconn bench --admin` serves its load generator's page, reached
/// from this machine's loopback even though the run itself is in its own
/// network namespace (the default topology as root): the admin API is
/// bound before the run enters it.
#[test]
fn a_bench_serves_its_load_generators_page_from_inside_its_namespace() {
    let admin = format!("127.0.0.1:{}", free_port());
    let dir = std::env::temp_dir().join(format!("megaconn-dashboard-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = megaconn();
    cmd.args(["bench", "--connections", "3000", "--rate", "3000", "--hold", "15s", "--heartbeat", "5s", "--admin", &admin, "--json"]);
    let bench = std::thread::spawn(move || run(cmd, Duration::from_secs(120)));
    let stats = || load_generator_stats(&admin);
    wait_until("the bench's 3000 open", Duration::from_secs(60), || stats()["open"] == 3000);
    let seen = open_page(&admin, "-", &dir);
    assert_eq!(seen["cards"]["open"].as_str(), Some("3000"), "{seen}");
    assert_eq!(seen["cards"]["planned"].as_str(), Some("3000"), "{seen}");
    assert_drawn_here(&seen, &admin, &dir);
    let (code, out, err) = bench.join().unwrap();
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc["held"], 3000, "{doc}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A load generator's `/stats` at `admin`; Null until its admin API
/// listens (it starts with the run) and answers.
fn load_generator_stats(admin: &str) -> Value {
    if std::net::TcpStream::connect(admin).is_err() {
        return Value::Null;
    }
    let (code, body) = http(admin, "GET", "/stats", b"", None);
    if code == 200 {
        serde_json::from_str(&body).unwrap()
    } else {
        Value::Null
    }
}
