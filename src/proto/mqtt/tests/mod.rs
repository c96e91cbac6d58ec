//! Tests of the codec as a whole: every packet type round-tripped in both
//! versions with every property (`roundtrip`), byte vectors written by hand
//! from the standards (`vectors`), every refusal (`errors`), and random
//! packets and random bytes (`prop`), forwarded PUBLISH properties
//! (`forward`).

use super::*;

mod errors;
mod forward;
mod prop;
mod roundtrip;
mod vectors;

/// Decode exactly one whole packet from `buf`, as `role` on a connection
/// of `version`.
fn one<'a>(buf: &'a [u8], role: Role, version: Version, limits: &Limits) -> Result<Packet<'a>, Error> {
    let h = decode::fixed_header(buf, Some(version), limits.max_packet_size)?.ok_or(Error::Truncated)?;
    assert_eq!(h.total(), buf.len(), "one packet, whole");
    decode::packet(&h, &buf[h.len..], role, version, limits)
}

/// Encode one packet.
fn enc(p: &Packet<'_>, version: Version) -> Vec<u8> {
    let mut out = Vec::new();
    encode::packet(p, version, &mut out).unwrap();
    out
}

/// Feed `chunks` to `reader` in turn; every packet it yields (as Debug
/// text) and how it ended. Checks the reader's bound after every read.
fn read_all(reader: &mut Reader, chunks: &[&[u8]], limits: &Limits) -> (Vec<String>, Result<(), Error>) {
    let mut got = Vec::new();
    for c in chunks {
        let r = reader.consume(c, limits, |p| {
            got.push(format!("{p:?}"));
            Ok::<(), Error>(())
        });
        assert!(reader.buffered() <= limits.max_packet_size as usize);
        if r.is_err() {
            return (got, r);
        }
    }
    (got, Ok(()))
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}
