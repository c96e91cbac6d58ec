//! Who may make the admin API act. With a token: the bearer token,
//! compared in constant time. On a loopback admin without a token: the
//! checks that keep a web page the operator happens to open from acting
//! through the browser — a cross-site request (it carries `Origin`, and a
//! "simple" one can only have a text/form content type) and DNS
//! rebinding (its `Host` names the attacker's domain, not loopback).
//! Pure functions of the request head, so every refusal is unit-tested.

use super::Response;
use hyper::header::{HeaderMap, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use hyper::Method;
use subtle::ConstantTimeEq;

/// The admin bearer token: never printed, compared in constant time.
#[derive(Clone)]
pub(crate) struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// A token as given (flag or environment): printable ASCII, no spaces.
    pub(crate) fn new(s: &str) -> Result<Token, String> {
        if s.is_empty() {
            return Err("the admin token is empty; make one with `head -c 24 /dev/urandom | base64`".into());
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the admin token must be printable ASCII without spaces (it travels in an HTTP header); e.g. `head -c 24 /dev/urandom | base64`".into());
        }
        Ok(Token(s.to_string()))
    }

    /// The token in a file (its first line; a trailing newline is fine).
    pub(crate) fn from_file(path: &std::path::Path) -> Result<Token, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--admin-token-file {}: {e}; give a readable file holding the token", path.display()))?;
        Token::new(text.trim_end_matches(['\n', '\r'])).map_err(|e| format!("--admin-token-file {}: {e}", path.display()))
    }

    /// Whether an `Authorization` header value carries this token.
    pub(crate) fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let Some(v) = authorization.and_then(|v| v.strip_prefix(b"Bearer ")) else { return false };
        v.ct_eq(self.0.as_bytes()).into()
    }
}

/// Whether a request head declares a body.
pub(crate) fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(TRANSFER_ENCODING) || headers.get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0")
}

/// The content types a web page may send cross-site without asking
/// (CORS "simple" requests).
fn is_simple_type(v: &[u8]) -> bool {
    let essence = v.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"].iter().any(|t| essence.eq_ignore_ascii_case(t.as_bytes()))
}

/// Whether a `Host` header names a loopback address (`127.0.0.1:9100`,
/// `[::1]:9100`, `localhost:9100`).
fn is_loopback_host(v: &[u8]) -> bool {
    let Ok(h) = std::str::from_utf8(v) else { return false };
    let host = if let Some(rest) = h.strip_prefix('[') { rest.split(']').next().unwrap_or("") } else { h.rsplit_once(':').map_or(h, |(host, _)| host) };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Check a request head before anything is read or routed: Ok, or the
/// answer (400, 401 or 403 with its reason).
pub(crate) fn check(method: &Method, path: &str, headers: &HeaderMap, token: Option<&Token>) -> Result<(), Response> {
    if (method == Method::GET || method == Method::HEAD) && has_body(headers) {
        return Err(Response::error(400, format!("a {method} request carries no body (Content-Length 0, no Transfer-Encoding)")));
    }
    // GET /healthz answers without the token: orchestrators' probes
    // (Kubernetes httpGet) cannot carry a secret, and it tells only
    // whether the node serves and why not.
    if method == Method::GET && path == "/healthz" {
        return Ok(());
    }
    // The dashboard's files hold no data (a browser's navigation cannot
    // carry a token); what the page asks for is checked as any request.
    if (method == Method::GET || method == Method::HEAD) && super::ui::is_asset(path) {
        return Ok(());
    }
    if let Some(t) = token {
        return match t.allows(headers.get(AUTHORIZATION).map(|v| v.as_bytes())) {
            true => Ok(()),
            false => Err(Response::error(401, "missing or wrong 'Authorization: Bearer <token>' (see --admin-token-file)")),
        };
    }
    if let Some(h) = headers.get(HOST).filter(|h| !is_loopback_host(h.as_bytes())) {
        return Err(Response::error(
            403,
            format!(
                "Host '{}' is not a loopback address: refused (DNS rebinding); ask http://127.0.0.1:PORT, or give the admin API a token",
                String::from_utf8_lossy(h.as_bytes())
            ),
        ));
    }
    if let Some(o) = headers.get(ORIGIN) {
        return Err(Response::error(
            403,
            format!(
                "a request from a web page (Origin '{}') is refused on an admin API without a token: cross-site request forgery",
                String::from_utf8_lossy(o.as_bytes())
            ),
        ));
    }
    if method == Method::POST && headers.get(CONTENT_TYPE).is_none_or(|v| is_simple_type(v.as_bytes())) {
        return Err(Response::error(
            403,
            "a POST to an admin API without a token needs a Content-Type a web page cannot send cross-site, \
             e.g. -H 'Content-Type: application/octet-stream' (text/plain and form types are refused)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn head(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn token_is_checked_and_never_printed() {
        let t = Token::new("s3cret").unwrap();
        assert!(t.allows(Some(b"Bearer s3cret")));
        assert!(!t.allows(Some(b"Bearer s3cre")) && !t.allows(Some(b"Bearer s3cretx")) && !t.allows(Some(b"s3cret")) && !t.allows(None));
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(Token::new("").is_err() && Token::new("a b").is_err());
        let ok = head(&[("authorization", "Bearer s3cret"), ("origin", "http://evil.example"), ("host", "evil.example")]);
        assert_eq!(check(&Method::POST, "/broadcast", &ok, Some(&t)), Ok(()));
        assert_eq!(check(&Method::GET, "/stats", &head(&[]), Some(&t)).unwrap_err().status, 401);
        assert_eq!(check(&Method::GET, "/healthz", &head(&[]), Some(&t)), Ok(()));
    }

    #[test]
    fn cross_site_and_rebinding_refused_without_a_token() {
        let post = |h: &[(&'static str, &'static str)]| check(&Method::POST, "/broadcast", &head(h), None).map_err(|r| r.status);
        assert_eq!(post(&[("host", "127.0.0.1:9100"), ("content-type", "application/octet-stream")]), Ok(()));
        assert_eq!(post(&[("host", "[::1]:9100"), ("content-type", "application/json")]), Ok(()));
        assert_eq!(post(&[("host", "localhost"), ("content-type", "application/json")]), Ok(()));
        // A no-cors fetch: text/plain, or no content type at all (a Blob).
        assert_eq!(post(&[("host", "127.0.0.1:9100"), ("content-type", "text/plain;charset=UTF-8")]), Err(403));
        assert_eq!(post(&[("host", "127.0.0.1:9100")]), Err(403));
        assert_eq!(post(&[("host", "127.0.0.1:9100"), ("content-type", " Application/X-WWW-Form-Urlencoded")]), Err(403));
        assert_eq!(post(&[("host", "127.0.0.1:9100"), ("content-type", "application/json"), ("origin", "http://evil.example")]), Err(403));
        // DNS rebinding: the page's own origin, the attacker's host name.
        assert_eq!(post(&[("host", "evil.example:9100"), ("content-type", "application/json")]), Err(403));
        assert_eq!(check(&Method::GET, "/connections", &head(&[("host", "evil.example:9100")]), None).unwrap_err().status, 403);
        assert_eq!(check(&Method::GET, "/stats", &head(&[("host", "127.0.0.1:9100")]), None), Ok(()));
    }

    #[test]
    fn get_bodies_refused() {
        assert_eq!(check(&Method::GET, "/healthz", &head(&[("content-length", "1000000")]), None).unwrap_err().status, 400);
        assert_eq!(check(&Method::GET, "/healthz", &head(&[("transfer-encoding", "chunked")]), None).unwrap_err().status, 400);
        assert_eq!(check(&Method::GET, "/healthz", &head(&[("content-length", "0")]), None), Ok(()));
    }
}
