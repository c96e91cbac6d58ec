//! The publish stamp: what a payload carries so that whoever receives it
//! can time it and tell a lost or repeated message, when the protocol
//! itself carries neither (an MQTT PUBLISH has no publish time and no
//! sequence; megaconn's own pushes carry both in their envelope, see
//! [`super::push`]).
//!
//! Layout, at the start of the payload (28 bytes, big-endian; whatever
//! follows is the publisher's padding or data):
//!
//! ```text
//! "mcS1" | publisher u64 | seq u64 | sent_us u64
//! ```
//!
//! `publisher` names the sending stream (a client's connection index, or
//! [`BENCH_PUBLISHER`] for a bench's admin publishes), `seq` counts its
//! messages from 1 on one topic, `sent_us` is the **intended** send time
//! in CLOCK_REALTIME µs (so a late send does not hide its own delay, and
//! receivers on other hosts with synchronised clocks can time it). A
//! payload that does not begin with the magic is unstamped: counted,
//! never timed.

/// The four bytes a stamped payload begins with.
pub(crate) const MAGIC: [u8; 4] = *b"mcS1";
/// Bytes of a stamp (the smallest stamped payload).
pub(crate) const STAMP_LEN: usize = 28;
/// The publisher of a bench's admin-API publishes (no client connection
/// has this index).
pub(crate) const BENCH_PUBLISHER: u64 = u64::MAX;

/// Who sent a payload, which of its messages it is and when it was meant
/// to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub publisher: u64,
    pub seq: u64,
    /// Intended send time, CLOCK_REALTIME µs.
    pub sent_us: u64,
}

impl Stamp {
    /// The stamp, then `fill` up to `size` bytes in all (the stamp alone
    /// when `size` is smaller: it is never cut).
    pub(crate) fn encode(&self, out: &mut Vec<u8>, size: usize, fill: &[u8]) {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        for v in [self.publisher, self.seq, self.sent_us] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        let want = start + size.max(STAMP_LEN);
        let more = want - out.len();
        out.extend_from_slice(&fill[..more.min(fill.len())]);
        out.resize(want, 0);
    }

    /// The stamp a payload begins with, if it has one.
    pub(crate) fn decode(payload: &[u8]) -> Option<Stamp> {
        let s = payload.get(..STAMP_LEN)?;
        if s[..4] != MAGIC {
            return None;
        }
        let n = |i: usize| u64::from_be_bytes(s[i..i + 8].try_into().expect("8 bytes"));
        Some(Stamp { publisher: n(4), seq: n(12), sent_us: n(20) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_and_pad() {
        let s = Stamp { publisher: 7, seq: 42, sent_us: 1_700_000_000_000_000 };
        let mut out = b"x".to_vec();
        s.encode(&mut out, 40, b"abc");
        assert_eq!(out.len(), 41);
        assert_eq!(&out[29..32], b"abc");
        assert!(out[32..].iter().all(|b| *b == 0));
        assert_eq!(Stamp::decode(&out[1..]), Some(s));
        let mut short = Vec::new();
        s.encode(&mut short, 3, b"");
        assert_eq!((short.len(), Stamp::decode(&short)), (STAMP_LEN, Some(s)), "never cut");
        assert_eq!(Stamp::decode(&short[..STAMP_LEN - 1]), None);
        assert_eq!(Stamp::decode(b"{\"device\":1,\"seq\":2,\"padding\":\"...\"}"), None);
    }
}
