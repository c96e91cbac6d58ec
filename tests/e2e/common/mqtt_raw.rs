//! Hand-written MQTT for what a library will not do (resend a QoS 2
//! publish after a reconnect, repeat a filter 32 times, stop reading):
//! packets built byte by byte and read whole, over a blocking socket.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Read one packet: (first byte, body).
pub fn packet(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("a packet");
    let first = b[0];
    let (mut len, mut shift) = (0usize, 0);
    loop {
        s.read_exact(&mut b).expect("its length");
        len |= ((b[0] & 0x7F) as usize) << shift;
        shift += 7;
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).expect("its body");
    (first, body)
}

/// A whole packet: first byte, the remaining length as MQTT's variable
/// byte integer, body.
pub fn frame(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut n = body.len();
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        out.push(b);
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(body);
    out
}

/// A PUBLISH body: topic, packet id (QoS > 0), v5 properties (empty), payload.
pub fn publish_body(v5: bool, topic: &str, id: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let mut b = (topic.len() as u16).to_be_bytes().to_vec();
    b.extend_from_slice(topic.as_bytes());
    if let Some(id) = id {
        b.extend_from_slice(&id.to_be_bytes());
    }
    if v5 {
        b.push(0);
    }
    b.extend_from_slice(payload);
    b
}

/// A SUBSCRIBE (id `id`) to each (filter, QoS) of `filters`.
pub fn subscribe_packet(v5: bool, id: u16, filters: &[(&str, u8)]) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    if v5 {
        b.push(0);
    }
    for (filter, qos) in filters {
        b.extend_from_slice(&(filter.len() as u16).to_be_bytes());
        b.extend_from_slice(filter.as_bytes());
        b.push(*qos);
    }
    frame(0x82, &b)
}

/// SUBSCRIBE (id 1) to `filter` at `qos` and read its SUBACK.
pub fn subscribe(s: &mut TcpStream, v5: bool, filter: &str, qos: u8) {
    s.write_all(&subscribe_packet(v5, 1, &[(filter, qos)])).unwrap();
    assert_eq!(packet(s).0, 0x90, "SUBACK");
}

/// A CONNECT: `level` 4 (3.1.1) or 5, Clean Session / Start `clean`,
/// keep-alive 60 s, v5 CONNECT properties `props`.
pub fn connect_packet(level: u8, id: &str, clean: bool, props: &[u8]) -> Vec<u8> {
    let mut body = b"\x00\x04MQTT".to_vec();
    body.extend_from_slice(&[level, if clean { 0x02 } else { 0 }, 0, 60]);
    if level == 5 {
        body.push(props.len() as u8);
        body.extend_from_slice(props);
    }
    body.extend_from_slice(&(id.len() as u16).to_be_bytes());
    body.extend_from_slice(id.as_bytes());
    frame(0x10, &body)
}

/// A clean CONNECT (`level` 4 or 5, keep-alive 60 s, no properties)
/// with this client id, a will to `will` (payload "gone"; 3.1.1's form
/// only) and a user name and password.
pub fn login_packet(level: u8, id: &str, login: Option<(&str, &str)>, will: Option<&str>) -> Vec<u8> {
    let flags = 0x02 | if login.is_some() { 0xc0 } else { 0 } | if will.is_some() { 0x04 } else { 0 };
    let mut body = b"\x00\x04MQTT".to_vec();
    body.extend_from_slice(&[level, flags, 0, 60]);
    if level == 5 {
        body.push(0);
    }
    let mut field = |f: &[u8]| {
        body.extend_from_slice(&(f.len() as u16).to_be_bytes());
        body.extend_from_slice(f);
    };
    field(id.as_bytes());
    if let Some(w) = will {
        assert_eq!(level, 4, "wills are written here in 3.1.1's form (no properties)");
        field(w.as_bytes());
        field(b"gone");
    }
    if let Some((user, password)) = login {
        field(user.as_bytes());
        field(password.as_bytes());
    }
    frame(0x10, &body)
}

/// Connect a raw client (clean) and read its CONNACK.
pub fn raw_client(port: u16, level: u8, id: &str, props: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&connect_packet(level, id, true, props)).unwrap();
    assert_eq!(packet(&mut s).0, 0x20, "CONNACK");
    s
}
