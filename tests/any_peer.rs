//! `--protocol echo|discard`: any TCP client can hold connections against
//! megaconn. The peer here is a plain Python socket client.
mod common;
use common::*;
use std::time::Duration;

fn python(script: &str) -> (bool, String) {
    let out = std::process::Command::new("python3").args(["-c", script]).output().expect("python3");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn echo_returns_every_byte_and_discard_keeps_the_connection() {
    let (mut echo, _) = server(&["--ports", "21700", "--workers", "1", "--protocol", "echo"], None);
    let (ok, out) = python(
        "import socket, os\n\
         conns = [socket.create_connection(('127.0.0.1', 21700)) for _ in range(50)]\n\
         for i, s in enumerate(conns):\n\
         \x20   data = os.urandom(1000 + i * 997)\n\
         \x20   s.sendall(data)\n\
         \x20   got = b''\n\
         \x20   s.settimeout(5)\n\
         \x20   while len(got) < len(data):\n\
         \x20       chunk = s.recv(65536)\n\
         \x20       assert chunk, 'closed early'\n\
         \x20       got += chunk\n\
         \x20   assert got == data, (i, len(got), len(data))\n\
         print('echoed', len(conns))\n",
    );
    assert!(ok && out.contains("echoed 50"), "{out}");
    assert!(echo.terminate().success());

    let (mut discard, _) = server(&["--ports", "21701", "--workers", "1", "--protocol", "discard"], None);
    let (ok, out) = python(
        "import socket\n\
         s = socket.create_connection(('127.0.0.1', 21701))\n\
         s.sendall(b'x' * 1000000)\n\
         s.settimeout(0.5)\n\
         try:\n\
         \x20   got = s.recv(10)\n\
         \x20   print('unexpected', got)\n\
         except socket.timeout:\n\
         \x20   print('silent and open')\n",
    );
    assert!(ok && out.contains("silent and open"), "{out}");
    let v = discard.wait_for(Duration::from_secs(10), "discard counted reads", |v| v["event"] == "stats" && v["frames_in"].as_u64() > Some(0));
    assert_eq!(v["frames_out"], 0, "{v}");
    assert!(discard.terminate().success());
}

#[test]
fn the_client_refuses_server_only_protocols() {
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--ports", "21702", "--protocol", "echo"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("server protocol"), "{err}");
}
