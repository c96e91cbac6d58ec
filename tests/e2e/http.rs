//! HTTP/1.1 server behaviour over raw sockets, and the HTTP load mode.
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

/// Read whole responses (head + Content-Length body) until `n` arrived or
/// the peer closed; returns (status, head text) per response.
fn read_responses(c: &mut TcpStream, n: usize) -> Vec<(u16, String)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    while out.len() < n {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(h)) = resp.parse(&buf) {
            let len: usize = resp
                .headers
                .iter()
                .find(|x| x.name.eq_ignore_ascii_case("content-length"))
                .map(|x| std::str::from_utf8(x.value).unwrap().parse().unwrap())
                .unwrap();
            if buf.len() >= h + len {
                out.push((resp.code.unwrap(), String::from_utf8_lossy(&buf[..h + len]).into_owned()));
                buf.drain(..h + len);
                continue;
            }
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    out
}

fn closed(c: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(c.read(&mut b), Ok(0))
}

#[test]
fn keep_alive_versions_and_close() {
    let port = free_port();
    let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "http"], None);
    // 100 requests on one HTTP/1.1 connection.
    let mut c = connect(port);
    for _ in 0..100 {
        c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let r = read_responses(&mut c, 1);
        assert_eq!(r[0].0, 200);
        assert!(r[0].1.ends_with("Hello world!") && r[0].1.contains("Content-Length: 12") && r[0].1.contains("Date: "), "{}", r[0].1);
    }
    // HTTP/1.0 with keep-alive (ab -k): echoed, connection stays.
    let mut c = connect(port);
    c.write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    let r = read_responses(&mut c, 1);
    assert!(r[0].1.contains("Connection: keep-alive"), "{}", r[0].1);
    c.write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert_eq!(read_responses(&mut c, 1)[0].0, 200);
    // HTTP/1.0 without keep-alive, and HTTP/1.1 Connection: close: answered, then closed.
    for req in [&b"GET / HTTP/1.0\r\n\r\n"[..], &b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"[..]] {
        let mut c = connect(port);
        c.write_all(req).unwrap();
        assert_eq!(read_responses(&mut c, 1)[0].0, 200);
        assert!(closed(&mut c));
    }
    assert!(srv.terminate().success());
}

#[test]
fn pipelining_in_one_write_and_split_at_every_byte() {
    let port = free_port();
    let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "http"], None);
    let one = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    let sixteen: Vec<u8> = one.iter().copied().cycle().take(one.len() * 16).collect();
    let mut c = connect(port);
    c.write_all(&sixteen).unwrap();
    assert_eq!(read_responses(&mut c, 16).len(), 16);
    // Every byte in its own write.
    let mut c = connect(port);
    c.set_nodelay(true).unwrap();
    for b in &sixteen[..one.len() * 2] {
        c.write_all(&[*b]).unwrap();
    }
    assert_eq!(read_responses(&mut c, 2).len(), 2);
    // Bodies: Content-Length and chunked are read and discarded.
    let mut c = connect(port);
    c.write_all(
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    )
    .unwrap();
    let r = read_responses(&mut c, 3);
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![200, 200, 200]);
    assert!(srv.terminate().success());
}

#[test]
fn hostile_requests_get_status_and_close() {
    let port = free_port();
    let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "http", "--header-timeout", "1s"], None);
    let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    for (req, status) in [
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc".to_vec(), 400),
        (big.into_bytes(), 431),
        (b"\x16\x03\x01garbage\r\n\r\n".to_vec(), 400),
        (b"DELETE / HTTP/1.1\r\n\r\n".to_vec(), 405),
    ] {
        let mut c = connect(port);
        c.write_all(&req).unwrap();
        let r = read_responses(&mut c, 1);
        assert_eq!(r.first().map(|x| x.0), Some(status), "{:?}", String::from_utf8_lossy(&req[..20]));
        assert!(closed(&mut c));
    }
    // curl PUTs a 2 MB body the server refuses: the server lingers (reads
    // and drops the body) so curl gets the 405, not a connection reset.
    let body = std::env::temp_dir().join(format!("megaconn-put-body-{}", std::process::id()));
    std::fs::write(&body, vec![b'x'; 2_000_000]).unwrap();
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20", "-X", "PUT", "--data-binary"])
        .arg(format!("@{}", body.display()))
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .expect("curl is installed (scripts/setup.sh)");
    let _ = std::fs::remove_file(&body);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "405", "curl: {}", String::from_utf8_lossy(&out.stderr));
    // Slowloris: a partial request that stalls is closed after the timeout.
    let mut c = connect(port);
    c.write_all(b"GET / HTTP/1.1\r\nHost: slow").unwrap();
    let t0 = Instant::now();
    assert!(closed(&mut c));
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(4), "closed after {waited:?}");
    let v = srv.wait_for(Duration::from_secs(10), "reasons counted", |v| v["event"] == "stats" && v["close_reasons"]["header_timeout"] == 1);
    assert_eq!(v["close_reasons"]["http_431_headers_too_large"], 1);
    assert!(srv.terminate().success());
}

#[test]
fn http_client_counts_status_classes() {
    let ports = free_ports(2);
    let (mut srv, _) = server(&["--ports", &ports.arg(), "--workers", "1", "--protocol", "http"], None);
    let mut cmd = megaconn();
    cmd.args([
        "client",
        "--ports",
        &ports.arg(),
        "--protocol",
        "http",
        "--connections",
        "100",
        "--rate",
        "1000",
        "--request-rate",
        "10/s",
        "--hold",
        "2s",
        "--json",
    ]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["summary"]["requests"];
    assert!(r["sent"].as_u64().unwrap() >= 100 * 10 * 2, "{r}");
    assert_eq!(r["replies"], r["sent"], "{r}");
    assert_eq!(r["http_status"]["2xx"], r["sent"], "{r}");
    assert_eq!(r["latency_ms"]["count"], r["sent"], "{r}");
    assert!(srv.terminate().success());
}

/// RFC 9110: HEAD answers with the Content-Length a GET would have and no
/// body; Python's http.client (which trusts that) reads both on one
/// keep-alive connection.
#[test]
fn head_has_the_get_length_and_no_body() {
    let port = free_port();
    let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "http"], None);
    let mut py = std::process::Command::new("python3");
    py.args([
        "-c",
        &format!(
            "import http.client\n\
             c = http.client.HTTPConnection('127.0.0.1', {port}, timeout=5)\n\
             c.request('HEAD', '/')\n\
             r = c.getresponse()\n\
             print(r.status, r.getheader('Content-Length'), len(r.read()))\n\
             c.request('GET', '/')\n\
             r = c.getresponse()\n\
             print(r.status, r.getheader('Content-Length'), r.read().decode())\n"
        ),
    ]);
    let (code, text, err) = run(py, Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert_eq!(text, "200 12 0\n200 12 Hello world!\n");
    assert!(srv.terminate().success());
}
