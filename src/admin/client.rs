//! The smallest HTTP/1.1 client that talks to an admin API: one request
//! per connection, Content-Length bodies (what our server sends). The
//! bench publishes through it so pushes go the way an operator's would.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Longest response head accepted from an admin API (ours sends a few
/// hundred bytes).
const MAX_HEAD: usize = 64 * 1024;

/// Send one request; (status, body).
pub(crate) fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8], token: Option<&str>) -> Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("cannot reach the admin API at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let _ = s.set_nodelay(true);
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    // A POST says what it carries: a loopback admin without a token
    // refuses the content types a web page could send cross-site.
    let kind = if method == "POST" { "Content-Type: application/octet-stream\r\n" } else { "" };
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}{kind}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let head = match crate::proto::http::parse_response_head(&out, MAX_HEAD).map_err(|e| anyhow!("bad admin response: {e}"))? {
        Some(h) => h,
        None => bail!("truncated admin response"),
    };
    Ok((head.status, String::from_utf8_lossy(&out[head.len..]).to_string()))
}
