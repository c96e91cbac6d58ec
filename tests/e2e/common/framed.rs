//! The framed protocol as a test speaks it: frames written by hand and
//! read back one by one (pushes with their offset and epoch, subscribe
//! answers, the parts of a large push).
use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u16).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// A resume frame (9): replay flag, epoch, offset, topic.
pub fn resume(topic: &str, at: Option<(u32, u64)>) -> Vec<u8> {
    let (e, o) = at.unwrap_or((0, 0));
    let mut p = vec![at.is_some() as u8];
    p.extend_from_slice(&e.to_be_bytes());
    p.extend_from_slice(&o.to_be_bytes());
    p.extend_from_slice(topic.as_bytes());
    frame(9, &p)
}

#[derive(Debug, PartialEq)]
pub enum In {
    /// offset, epoch, data
    Push(u64, u32, String),
    /// recovered, epoch, offset
    Subscribed(bool, u32, u64),
    /// last, data
    Part(bool, Vec<u8>),
}

/// Frames as they arrive on one socket.
pub struct Reader {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    pub fn connect(port: u16) -> Reader {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Reader { s, buf: Vec::new() }
    }

    pub fn next(&mut self) -> In {
        loop {
            if self.buf.len() >= 2 {
                let len = u16::from_be_bytes([self.buf[0], self.buf[1]]) as usize;
                if self.buf.len() >= 2 + len {
                    let f: Vec<u8> = self.buf.drain(..2 + len).collect();
                    let (kind, p) = (f[2], &f[3..]);
                    return match kind {
                        8 if p[0] & 0x80 != 0 => {
                            // Continued: read the parts to the last one.
                            let t = 2 + p[1] as usize;
                            let offset = u64::from_be_bytes(p[t..t + 8].try_into().unwrap());
                            let epoch = u32::from_be_bytes(p[t + 16..t + 20].try_into().unwrap());
                            let mut data = p[t + 20..].to_vec();
                            loop {
                                match self.next() {
                                    In::Part(last, more) => {
                                        data.extend_from_slice(&more);
                                        if last {
                                            break;
                                        }
                                    }
                                    other => panic!("a part expected, got {other:?}"),
                                }
                            }
                            In::Push(offset, epoch, String::from_utf8(data).expect("the test sends text"))
                        }
                        8 => {
                            let t = 2 + p[1] as usize;
                            let offset = u64::from_be_bytes(p[t..t + 8].try_into().unwrap());
                            let epoch = u32::from_be_bytes(p[t + 16..t + 20].try_into().unwrap());
                            In::Push(offset, epoch, String::from_utf8_lossy(&p[t + 20..]).into())
                        }
                        10 => In::Subscribed(p[0] == 1, u32::from_be_bytes(p[1..5].try_into().unwrap()), u64::from_be_bytes(p[5..13].try_into().unwrap())),
                        // The rest of a push over one frame: `last | data`.
                        11 => In::Part(p[0] == 1, p[1..].to_vec()),
                        k => panic!("unexpected frame kind {k}"),
                    };
                }
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).expect("a frame within 10 s");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Frames up to and including the next subscribed answer.
    pub fn until_subscribed(&mut self) -> Vec<In> {
        let mut got = vec![self.next()];
        while !matches!(got.last(), Some(In::Subscribed(..))) {
            got.push(self.next());
        }
        got
    }
}
