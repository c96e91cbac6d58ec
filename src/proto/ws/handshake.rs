//! The WebSocket opening handshake (RFC 6455 §4) on `httparse`: the
//! server's check of an Upgrade request and its 101 (or the status that
//! says what was wrong), and the client's request and check of the 101.
//! The one extension is permessage-deflate (`deflate.rs` chooses among
//! the offers, which are handed over here as one string); the one subprotocol is `megaconn`, offered by
//! browsers beside `bearer.TOKEN` to carry a token (a browser cannot set
//! an Authorization header on a WebSocket). MQTT over WebSocket is the
//! other: a client offering `mqtt` (or the older `mqttv3.1`) is told which
//! one it got in [`Upgrade::mqtt`] (MQTT 5.0 §6, 3.1.1 §6).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use sha1::{Digest, Sha1};

const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Most header lines in an Upgrade request (its answer is bounded by
/// `http::MAX_RESPONSE_HEADERS`, the same number).
const MAX_HEADERS: usize = 64;
/// Longest answer to our Upgrade: a 101 is a few hundred bytes.
const MAX_RESPONSE_HEAD: usize = 16 * 1024;

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(key);
    h.update(GUID);
    B64.encode(h.finalize())
}

/// A valid Upgrade request, or a request for an event stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Upgrade {
    /// Request target, e.g. `/chat?subscribe=a,b`.
    pub target: String,
    pub accept: String,
    /// Not an upgrade but `Accept: text/event-stream` (Server-Sent
    /// Events): its `Last-Event-ID` ("" when none).
    pub events: Option<String>,
    /// The bearer token: `Authorization: Bearer T`, a `bearer.T`
    /// subprotocol, or `?token=T`, in that order.
    pub token: Option<String>,
    /// The subprotocol to answer with (`megaconn`, or the `bearer.T` the
    /// client offered alone), if the client offered any of those.
    pub protocol: Option<String>,
    /// Every `Sec-WebSocket-Extensions` line, joined with ", " (offers).
    pub extensions: Option<String>,
    /// The MQTT subprotocol the client offered (`mqtt` when it offered
    /// it, else `mqttv3.1`): the connection will carry MQTT packets.
    pub mqtt: Option<&'static str>,
}

/// The subprotocols that say a WebSocket carries MQTT, preferred first:
/// `mqtt` is the registered name (MQTT 3.1.1 and 5.0 §6), `mqttv3.1` what
/// clients of MQTT 3.1 offered and some still offer beside it.
pub(crate) const MQTT_SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];

/// The MQTT subprotocol to answer an offer with, if it holds one.
pub(crate) fn mqtt_offered(protocols: Option<&[u8]>) -> Option<&'static str> {
    let offered = protocols.and_then(|v| std::str::from_utf8(v).ok())?;
    MQTT_SUBPROTOCOLS.into_iter().find(|p| offered.split(',').any(|o| o.trim().eq_ignore_ascii_case(p)))
}

/// The subprotocol a client offers to say it speaks megaconn's commands.
pub(crate) const SUBPROTOCOL: &str = "megaconn";
/// Prefix of the subprotocol that carries a bearer token.
pub(crate) const BEARER_PROTOCOL: &str = "bearer.";

/// The token and the subprotocol to answer, from a request's headers
/// (an event stream on an HTTP port takes its token the same ways).
pub(crate) fn credentials(authorization: Option<&[u8]>, protocols: Option<&[u8]>, target: &str) -> (Option<String>, Option<String>) {
    let offered: Vec<&str> = protocols.and_then(|v| std::str::from_utf8(v).ok()).map(|v| v.split(',').map(str::trim).collect()).unwrap_or_default();
    let bearer = offered.iter().find_map(|p| p.strip_prefix(BEARER_PROTOCOL));
    let header = authorization.and_then(|v| std::str::from_utf8(v).ok()).and_then(|v| {
        let (scheme, t) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| t.trim())
    });
    let query = query_list(target, "token").next();
    let token = header.or(bearer).or(query).map(str::to_string);
    let protocol = if offered.contains(&SUBPROTOCOL) {
        Some(SUBPROTOCOL.to_string())
    } else {
        offered.iter().find(|p| p.starts_with(BEARER_PROTOCOL)).map(|p| p.to_string())
    };
    (token, protocol)
}

/// An Upgrade request that must be refused: the status, the counter name
/// and the text of the answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: u16,
    pub reason: &'static str,
    pub text: &'static str,
}

fn refuse(status: u16, reason: &'static str, text: &'static str) -> Refusal {
    Refusal { status, reason, text }
}

fn has_token(value: &[u8], token: &str) -> bool {
    std::str::from_utf8(value).is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// Whether a request head's Accept asks for an event stream (Server-Sent
/// Events, served on the WebSocket ports).
pub(crate) fn wants_events(accept: Option<&[u8]>) -> bool {
    accept.and_then(|v| std::str::from_utf8(v).ok()).is_some_and(|v| v.split(',').any(|t| t.trim().starts_with("text/event-stream")))
}

/// Parse an Upgrade request at the start of `buf`: `Ok(None)` until the
/// head is complete; then the upgrade and the bytes it used.
pub(crate) fn parse_request(buf: &[u8], max_head: usize) -> Result<Option<(Upgrade, usize)>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Ok(None),
        Ok(_) => return Err(refuse(431, "ws_handshake_too_large", "request head too large")),
        Err(httparse::Error::TooManyHeaders) => return Err(refuse(431, "ws_handshake_too_large", "too many headers")),
        Err(_) => return Err(refuse(400, "ws_handshake_malformed", "malformed HTTP request")),
    };
    if req.method != Some("GET") {
        return Err(refuse(405, "ws_handshake_method", "a WebSocket upgrade is a GET"));
    }
    if req.version != Some(1) {
        return Err(refuse(400, "ws_handshake_version", "a WebSocket upgrade needs HTTP/1.1"));
    }
    let get = |name: &str| req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
    let target = req.path.unwrap_or("/").to_string();
    let (token, protocol) = credentials(get("authorization"), get("sec-websocket-protocol"), &target);
    if !get("upgrade").is_some_and(|v| has_token(v, "websocket")) {
        if wants_events(get("accept")) {
            let last = get("last-event-id").map(|v| String::from_utf8_lossy(v).trim().to_string()).unwrap_or_default();
            return Ok(Some((Upgrade { target, accept: String::new(), events: Some(last), token, protocol: None, extensions: None, mqtt: None }, used)));
        }
        return Err(refuse(
            426,
            "ws_handshake_not_upgrade",
            "this server speaks WebSocket (send Upgrade: websocket) and Server-Sent Events (send Accept: text/event-stream)",
        ));
    }
    if !get("connection").is_some_and(|v| has_token(v, "upgrade")) {
        return Err(refuse(400, "ws_handshake_connection", "Connection: Upgrade is missing"));
    }
    if get("sec-websocket-version").map(|v| v.trim_ascii()) != Some(b"13") {
        return Err(refuse(426, "ws_handshake_version", "Sec-WebSocket-Version must be 13"));
    }
    let Some(key) = get("sec-websocket-key").map(|v| v.trim_ascii()) else {
        return Err(refuse(400, "ws_handshake_key", "Sec-WebSocket-Key is missing"));
    };
    if B64.decode(key).map(|k| k.len()) != Ok(16) {
        return Err(refuse(400, "ws_handshake_key", "Sec-WebSocket-Key must be 16 bytes in base64"));
    }
    let mut offers = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-extensions")).map(|h| String::from_utf8_lossy(h.value));
    let extensions = offers.next().map(|first| offers.fold(first.into_owned(), |all, v| all + ", " + &v));
    let mqtt = mqtt_offered(get("sec-websocket-protocol"));
    Ok(Some((Upgrade { target, accept: accept_key(key), events: None, token, protocol, extensions, mqtt }, used)))
}

/// The 101 answer (with the chosen subprotocol and extension, if any).
pub(crate) fn write_accept(out: &mut Vec<u8>, accept: &str, protocol: Option<&str>, extension: Option<&str>) {
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ");
    out.extend_from_slice(accept.as_bytes());
    if let Some(p) = protocol {
        out.extend_from_slice(b"\r\nSec-WebSocket-Protocol: ");
        out.extend_from_slice(p.as_bytes());
    }
    if let Some(e) = extension {
        out.extend_from_slice(b"\r\nSec-WebSocket-Extensions: ");
        out.extend_from_slice(e.as_bytes());
    }
    out.extend_from_slice(b"\r\n\r\n");
}

/// The answer to a refused upgrade (the connection closes after it).
pub(crate) fn write_refusal(out: &mut Vec<u8>, r: &Refusal) {
    let name = match r.status {
        401 => "Unauthorized",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Bad Request",
    };
    let extra = match r.status {
        426 => "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n".to_string(),
        // RFC 6750 §3: the reason in the challenge.
        401 => format!("WWW-Authenticate: Bearer realm=\"megaconn\", error=\"invalid_token\", error_description=\"{}\"\r\n", r.reason),
        _ => String::new(),
    };
    let body = format!("{}\n", r.text);
    let head = format!("HTTP/1.1 {} {name}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", r.status, body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body.as_bytes());
}

/// The topics a `?subscribe=a,b` query asks for.
pub(crate) fn subscriptions(target: &str) -> impl Iterator<Item = &str> {
    query_list(target, "subscribe")
}

/// The comma-separated values of `key` in the target's query.
pub(crate) fn query_list<'a>(target: &'a str, key: &'a str) -> impl Iterator<Item = &'a str> {
    target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or("")
        .split('&')
        .filter_map(move |kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .flat_map(|v| v.split(',').filter(|t| !t.is_empty()))
}

/// A client's Upgrade request with this key (base64 of 16 bytes).
pub(crate) fn write_request(out: &mut Vec<u8>, host: &str, target: &str, key: &str, extra_headers: &str) {
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra_headers}\r\n"
    );
    out.extend_from_slice(req.as_bytes());
}

/// A client's key, derived from a per-worker seed and the connection
/// index so it need not be stored: the answer is checked by recomputing.
pub(crate) fn client_key(seed: u64, index: u64) -> String {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&seed.to_le_bytes());
    k[8..].copy_from_slice(&index.to_le_bytes());
    B64.encode(k)
}

/// Check the server's answer at the start of `buf`: `Ok(None)` until
/// complete; then the bytes used. Err: the counter name (by status).
pub(crate) fn parse_response(buf: &[u8], key: &str, subprotocols: &[String]) -> Result<Option<usize>, &'static str> {
    Ok(parse_response_deflate(buf, key, subprotocols, false)?.map(|(used, _)| used))
}

/// [`parse_response`] for a client that may have offered
/// permessage-deflate ([`super::deflate::CLIENT_OFFER`]): also whether the
/// server accepted it. An extension answered to a client that offered
/// none, or an answer the offer did not allow, fails the handshake.
pub(crate) fn parse_response_deflate(buf: &[u8], key: &str, subprotocols: &[String], offered: bool) -> Result<Option<(usize, bool)>, &'static str> {
    let head = match crate::proto::http::parse_response_head(buf, MAX_RESPONSE_HEAD) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(crate::proto::http::HeadError::TooLarge) => return Err("ws_handshake_response_too_large"),
        Err(_) => return Err("ws_handshake_bad_response"),
    };
    if head.status != 101 {
        return Err(status_name(head.status));
    }
    if head.ws_accept != Some(accept_key(key.as_bytes()).as_bytes()) {
        return Err("ws_handshake_bad_accept");
    }
    let answer = head.ws_extensions.map(|v| std::str::from_utf8(v).map_err(|_| "ws_deflate_bad_answer")).transpose()?;
    if answer.is_some() && (!offered || head.ws_extensions_repeated) {
        // We offered none (or one); an extension we cannot decode would
        // garble every frame.
        return Err("ws_handshake_unrequested_extension");
    }
    let deflate = super::deflate::check_answer(answer)?;
    match head.ws_protocol {
        None if subprotocols.is_empty() => {}
        None => return Err("ws_handshake_no_subprotocol"),
        Some(p) if subprotocols.iter().any(|s| s.as_bytes() == p) => {}
        Some(_) => return Err("ws_handshake_unrequested_subprotocol"),
    }
    let used = head.len;
    Ok(Some((used, deflate)))
}

/// Counter name of a refused handshake, by HTTP status.
fn status_name(code: u16) -> &'static str {
    const KNOWN: [(u16, &str); 12] = [
        (200, "http_200_not_upgraded"),
        (400, "http_400"),
        (401, "http_401"),
        (403, "http_403"),
        (404, "http_404"),
        (405, "http_405"),
        (426, "http_426"),
        (429, "http_429"),
        (431, "http_431"),
        (500, "http_500"),
        (502, "http_502"),
        (503, "http_503"),
    ];
    if let Some((_, name)) = KNOWN.iter().find(|(c, _)| *c == code) {
        return name;
    }
    match code {
        300..=399 => "http_3xx_redirect",
        400..=499 => "http_4xx_other",
        500..=599 => "http_5xx_other",
        _ => "http_other_status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mqtt` wins over `mqttv3.1` whatever the order, names are matched
    /// whole and without case, and an offer without either is no MQTT.
    #[test]
    fn an_mqtt_offer_is_found_among_the_others() {
        assert_eq!(mqtt_offered(Some(b"mqtt")), Some("mqtt"));
        assert_eq!(mqtt_offered(Some(b"mqttv3.1, mqtt")), Some("mqtt"));
        assert_eq!(mqtt_offered(Some(b"megaconn,MQTTv3.1")), Some("mqttv3.1"));
        assert_eq!(mqtt_offered(Some(b"mqtt5, xmqtt, megaconn")), None);
        assert_eq!(mqtt_offered(Some(b"\xff")), None);
        assert_eq!(mqtt_offered(None), None);
        let req = b"GET /mqtt HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n";
        let (up, used) = parse_request(req, 8192).unwrap().unwrap();
        assert_eq!((up.mqtt, up.protocol, used), (Some("mqtt"), None, req.len()));
    }

    #[test]
    fn rfc_example_key() {
        // RFC 6455 §1.3.
        assert_eq!(accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn client_request_is_accepted_and_answer_checks() {
        let key = client_key(7, 42);
        let mut req = Vec::new();
        write_request(&mut req, "127.0.0.1:8000", "/chat?subscribe=a,b&x=1", &key, "Origin: https://a.example\r\n");
        let (up, used) = parse_request(&req, 8192).unwrap().unwrap();
        assert_eq!(used, req.len());
        assert_eq!(subscriptions(&up.target).collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(parse_request(&req[..req.len() - 1], 8192), Ok(None));
        let mut resp = Vec::new();
        write_accept(&mut resp, &up.accept, None, None);
        resp.extend_from_slice(&[0x81, 0]);
        assert_eq!(parse_response(&resp, &key, &[]), Ok(Some(resp.len() - 2)));
        assert_eq!(parse_response(&resp, &client_key(7, 43), &[]), Err("ws_handshake_bad_accept"));
        assert_eq!(parse_response(b"HTTP/1.1 404 Not Found\r\n\r\n", &key, &[]), Err("http_404"));
        // A subprotocol offered must be answered with one of those offered.
        let chat = ["chat.v2".to_string()];
        assert_eq!(parse_response(&resp, &key, &chat), Err("ws_handshake_no_subprotocol"));
        let picked = String::from_utf8_lossy(&resp[..resp.len() - 2]).into_owned().replacen("\r\n\r\n", "\r\nSec-WebSocket-Protocol: chat.v2\r\n\r\n", 1);
        assert_eq!(parse_response(picked.as_bytes(), &key, &chat), Ok(Some(picked.len())));
        assert_eq!(parse_response(picked.as_bytes(), &key, &[]), Err("ws_handshake_unrequested_subprotocol"));
    }

    #[test]
    fn bad_upgrades_get_their_status() {
        let ok = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
        assert!(parse_request(ok.as_bytes(), 8192).unwrap().is_some());
        let status = |s: &str| parse_request(s.as_bytes(), 8192).unwrap_err().status;
        assert_eq!(status(&ok.replace("GET", "POST")), 405);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 426);
        assert_eq!(status(&ok.replace("Version: 13", "Version: 8")), 426);
        assert_eq!(status(&ok.replace("dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ=")), 400);
        assert_eq!(status(&ok.replace("keep-alive, Upgrade", "keep-alive")), 400);
        assert_eq!(status("\x00\x01garbage\r\n\r\n"), 400);
        assert_eq!(parse_request(&vec![b'a'; 9000], 8192).unwrap_err().status, 431);
        let mut out = Vec::new();
        write_refusal(&mut out, &parse_request(b"GET / HTTP/1.1\r\n\r\n", 8192).unwrap_err());
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 426 Upgrade Required\r\n"));
    }

    #[test]
    fn tokens_come_in_three_ways() {
        let head = |extra: &str, target: &str| {
            let mut req = Vec::new();
            write_request(&mut req, "h", target, &client_key(1, 1), extra);
            parse_request(&req, 8192).unwrap().unwrap().0
        };
        let up = head("Authorization: Bearer h.p.s\r\n", "/?token=q.q.q");
        assert_eq!((up.token.as_deref(), up.protocol), (Some("h.p.s"), None), "the header wins");
        let up = head("Sec-WebSocket-Protocol: megaconn, bearer.a.b.c\r\n", "/");
        assert_eq!((up.token.as_deref(), up.protocol.as_deref()), (Some("a.b.c"), Some(SUBPROTOCOL)));
        let up = head("Sec-WebSocket-Protocol: bearer.a.b.c\r\n", "/");
        assert_eq!(up.protocol.as_deref(), Some("bearer.a.b.c"), "a browser needs one of its offers back");
        let up = head("", "/x?subscribe=a&token=q.q.q");
        assert_eq!((up.token.as_deref(), up.protocol), (Some("q.q.q"), None));
        assert_eq!(head("Authorization: Basic eDp5\r\n", "/").token, None);
        let mut out = Vec::new();
        write_refusal(&mut out, &Refusal { status: 401, reason: "auth_expired", text: "t" });
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("WWW-Authenticate: Bearer realm=\"megaconn\", error=\"invalid_token\", error_description=\"auth_expired\""));
    }

    #[test]
    fn an_event_stream_request_is_told_apart() {
        assert!(wants_events(Some(b"text/html, text/event-stream;q=0.9")) && !wants_events(Some(b"*/*")) && !wants_events(None));
        let req = b"GET /events?subscribe=a HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\nLast-Event-ID: a:1:2\r\n\r\n";
        let (up, used) = parse_request(req, 8192).unwrap().unwrap();
        assert_eq!((up.target.as_str(), up.events.as_deref(), used), ("/events?subscribe=a", Some("a:1:2"), req.len()));
    }
}
