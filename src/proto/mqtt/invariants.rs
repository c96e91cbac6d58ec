//! What must hold for any bytes a peer sends, whichever side reads them:
//! no panic; the same packets and the same ending whether the bytes arrive
//! whole, cut in two or in small reads; the reader never holding more than
//! the packet limit; every decoded packet re-encoding to bytes that decode
//! back to it. The fuzz target `mqtt` (`src/fuzz_targets.rs`) and the
//! property tests run it; it lives here so the tests stay inside `proto`.

use crate::proto::fuzz_split as split;

/// MQTT 3.1.1 and 5.0 packets as a server reads them (CONNECT first) and
/// as a client of either version does. The first byte picks: bit 0 client,
/// bit 1 version 5 (client), the rest the packet size limit and a read
/// size. The rest is read whole, cut in two, and in small reads: the
/// packets decoded (re-encoded, as the canonical form) and the end must be
/// the same, what the reader holds never exceeds the packet size limit,
/// and every decoded packet encodes back to bytes that decode to it.
pub(crate) fn check(data: &[u8]) {
    use super::{decode, encode, Error, Limits, Packet, Reader, Role, Version};
    let Some((&mode, rest)) = data.split_first() else { return };
    let role = if mode & 1 == 0 { Role::Server } else { Role::Client };
    let client_version = if mode & 2 == 0 { Version::V311 } else { Version::V5 };
    let limits = Limits { max_packet_size: 64 + u32::from(mode >> 2) * 64, max_topic_levels: 8, max_filters: 8, max_properties: 16, ..Limits::default() };
    let run = |chunks: &[&[u8]]| {
        let mut reader = if role == Role::Server { Reader::server() } else { Reader::client(client_version) };
        let mut version = reader.version();
        let mut packets: Vec<Vec<u8>> = Vec::new();
        for chunk in chunks {
            let end = reader.consume(chunk, &limits, |p: Packet<'_>| {
                if let Packet::Connect(c) = &p {
                    version = Some(c.version);
                }
                let v = version.expect("a packet is decoded only once the version is known");
                let mut bytes = Vec::new();
                encode::packet(&p, v, &mut bytes).expect("a decoded packet encodes");
                let h = decode::fixed_header(&bytes, Some(v), u32::MAX).expect("its header decodes").expect("whole");
                assert_eq!(h.total(), bytes.len());
                let again = decode::packet(&h, &bytes[h.len..], role, v, &limits);
                assert_eq!(again.as_ref(), Ok(&p), "decode(encode(p)) == p");
                packets.push(bytes);
                Ok::<(), Error>(())
            });
            assert!(reader.buffered() <= limits.max_packet_size as usize, "the reader holds at most one packet");
            if end.is_err() {
                return (packets, end);
            }
        }
        (packets, Ok(()))
    };
    let whole = run(&[rest]);
    let (a, b) = split(rest);
    assert_eq!(run(&[a, b]), whole, "cut reads decode like one read");
    let step = usize::from(mode >> 5) + 1;
    let small: Vec<&[u8]> = rest.chunks(step).collect();
    assert_eq!(run(&small), whole, "small reads decode like one read");
}
