//! The negotiation against RFC 7692's grammar and examples, and the
//! codec's bounds.

use super::*;
use proptest::prelude::*;

fn offer(s: &str) -> Result<Offer, OfferError> {
    let exts = extensions(s).expect("a list");
    assert_eq!(exts.len(), 1, "{s}");
    parse_offer(exts.into_iter().next().expect("one").1)
}

#[test]
fn offers_parse_with_and_without_values() {
    assert_eq!(offer("permessage-deflate"), Ok(Offer::default()));
    let full = offer("permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits").unwrap();
    assert_eq!(
        full,
        Offer { server_no_context_takeover: true, client_no_context_takeover: true, server_max_window_bits: Some(10), client_max_window_bits: Some(None) }
    );
    assert_eq!(offer("permessage-deflate; client_max_window_bits=\"12\"").unwrap().client_max_window_bits, Some(Some(12)));
    assert_eq!(offer("permessage-deflate;Server_Max_Window_Bits = 15").unwrap().server_max_window_bits, Some(15));
}

#[test]
fn malformed_or_duplicate_parameters_refuse_the_offer() {
    for (s, e) in [
        ("permessage-deflate; server_no_context_takeover; server_no_context_takeover", OfferError::DuplicateParameter),
        ("permessage-deflate; client_max_window_bits; client_max_window_bits=9", OfferError::DuplicateParameter),
        ("permessage-deflate; server_max_window_bits", OfferError::BadValue),
        ("permessage-deflate; server_max_window_bits=7", OfferError::BadValue),
        ("permessage-deflate; server_max_window_bits=16", OfferError::BadValue),
        ("permessage-deflate; server_max_window_bits=08", OfferError::BadValue),
        ("permessage-deflate; client_max_window_bits=x", OfferError::BadValue),
        ("permessage-deflate; server_no_context_takeover=1", OfferError::BadValue),
        ("permessage-deflate; mystery", OfferError::UnknownParameter),
    ] {
        assert_eq!(offer(s), Err(e), "{s}");
    }
}

#[test]
fn the_first_offer_the_server_can_honour_wins() {
    let plain = Some((ANSWER.to_string(), None));
    // What browsers and Python websockets send.
    assert_eq!(accept("permessage-deflate; client_max_window_bits"), plain);
    // A bad first offer falls back to the next (RFC 7692 §5).
    assert_eq!(accept("permessage-deflate; server_max_window_bits=8, permessage-deflate"), plain);
    assert_eq!(accept("permessage-deflate; x=1, permessage-deflate; client_no_context_takeover"), plain);
    // A window asked for is said back (§7.1.2.1); under 2^15 it is the connection's own.
    assert_eq!(accept("permessage-deflate; server_max_window_bits=15"), Some((format!("{ANSWER}; server_max_window_bits=15"), None)));
    assert_eq!(accept("permessage-deflate; server_max_window_bits=9"), Some((format!("{ANSWER}; server_max_window_bits=9"), Some(9))));
    assert_eq!(
        accept("permessage-deflate; server_max_window_bits=14; client_max_window_bits"),
        Some((format!("{ANSWER}; server_max_window_bits=14"), Some(14)))
    );
    assert_eq!(accept("permessage-deflate; server_max_window_bits=8"), None, "zlib cannot make a 2^8 window");
    assert_eq!(accept("x-webkit-deflate-frame, foo; a=\"b, permessage-deflate\""), None);
    assert_eq!(accept("foo, permessage-deflate"), plain);
    assert_eq!(accept("permessage-deflate; a=\"unterminated"), None);
    assert_eq!(accept(&format!("permessage-deflate; {}", "client_max_window_bits,".repeat(400))), None);
    assert_eq!(accept(""), None);
}

#[test]
fn a_client_checks_the_answer_to_its_offer() {
    assert_eq!(check_answer(None), Ok(false));
    assert_eq!(check_answer(Some(ANSWER)), Ok(true));
    assert_eq!(check_answer(Some("permessage-deflate; server_no_context_takeover")), Ok(true));
    assert_eq!(check_answer(Some("permessage-deflate")), Err("ws_deflate_bad_answer"), "our messages need the server's to stand alone");
    assert_eq!(check_answer(Some("permessage-deflate; server_no_context_takeover; client_max_window_bits=10")), Err("ws_deflate_bad_answer"));
    assert_eq!(check_answer(Some("permessage-deflate; server_no_context_takeover, permessage-deflate")), Err("ws_deflate_bad_answer"));
    assert_eq!(check_answer(Some("x-other")), Err("ws_deflate_bad_answer"));
}

/// RFC 7692 §7.2.3.1: "Hello" compressed with no context takeover.
#[test]
fn the_rfc_example_inflates_and_our_compression_matches_it() {
    let mut i = Inflater::default();
    assert_eq!(i.inflate(&[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00], 100), Ok(&b"Hello"[..]));
    // §7.2.3.3: the same with a final (BFINAL) block.
    assert_eq!(i.inflate(&[0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00], 100), Ok(&b"Hello"[..]));
    let mut out = Vec::new();
    Deflater::default().compress(b"Hello", &mut out);
    assert_eq!(out, [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]);
    assert_eq!(i.tally, InflateTally { messages: 2, wire_bytes: 14, message_bytes: 10, too_big: 0, corrupt: 0 });
}

#[test]
fn each_message_stands_alone_and_compresses_to_the_same_bytes() {
    let mut d = Deflater::default();
    let msg = br#"{"stream":"topic","topic":"prices","seq":1,"data":"EURUSD 1.0843 EURUSD 1.0843"}"#;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    d.compress(msg, &mut a);
    d.compress(b"something in between", &mut Vec::new());
    d.compress(msg, &mut b);
    assert_eq!(a, b, "no context carried from one message to the next");
    assert!(a.len() < msg.len());
    let mut empty = Vec::new();
    d.compress(b"", &mut empty);
    assert_eq!(Inflater::default().inflate(&empty, 0), Ok(&b""[..]));
}

/// A compression bomb stops at the limit: ~16 KB of input that would
/// inflate to 16 MiB produces no more than the limit plus one byte.
#[test]
fn a_bomb_stops_at_the_limit() {
    let mut bomb = Vec::new();
    Deflater::default().compress(&vec![0u8; 16 << 20], &mut bomb);
    assert!(bomb.len() < 20_000, "{}", bomb.len());
    let mut i = Inflater::default();
    let max = 64 * 1024;
    assert_eq!(i.inflate(&bomb, max), Err(InflateError::TooBig));
    assert!(
        i.d.as_ref().expect("made at the first message").total_out() as usize <= max + 1,
        "inflated {} bytes",
        i.d.as_ref().expect("made at the first message").total_out()
    );
    assert_eq!(i.tally.too_big, 1);
    // Exactly the limit passes.
    let mut exact = Vec::new();
    Deflater::default().compress(&vec![7u8; max], &mut exact);
    assert_eq!(i.inflate(&exact, max).map(<[u8]>::len), Ok(max));
    assert_eq!(i.inflate(&exact, max - 1), Err(InflateError::TooBig));
}

#[test]
fn garbage_is_corrupt() {
    let mut i = Inflater::default();
    // BTYPE 11 is reserved.
    assert_eq!(i.inflate(&[0xff, 0xff, 0xff], 100), Err(InflateError::Corrupt));
    assert_eq!(i.tally.corrupt, 1);
    assert_eq!(InflateError::Corrupt.reason(), "ws_inflate_corrupt");
}

/// The frames of a connection that negotiated the extension, as a
/// server reads them: what was delivered, and how the read ended.
fn read_frames(buf: &[u8], inflater: Option<&mut Inflater>, max: usize) -> (Result<usize, &'static str>, Vec<Vec<u8>>) {
    use crate::proto::ws::frame::{Event, Reader, Role};
    let (mut tmp, mut frag) = (Vec::new(), None);
    let mut got = Vec::new();
    let r = Reader { role: Role::Server, max, tmp: &mut tmp, frag: &mut frag, inflate: inflater }.consume(buf, |e| {
        if let Event::Message { data, .. } = e {
            got.push(data.to_vec());
        }
        Ok(())
    });
    (r, got)
}

#[test]
fn rsv1_messages_inflate_whole_or_in_fragments_around_control_frames() {
    use crate::proto::ws::frame::{close_code, encode, encode_compressed, Opcode};
    let key = Some([9, 8, 7, 6]);
    let msg = br#"{"type":"publish","topic":"a","data":"hello hello hello hello hello"}"#;
    let mut z = Vec::new();
    Deflater::default().compress(msg, &mut z);
    let mut buf = Vec::new();
    encode_compressed(&mut buf, Opcode::Text, &z, key);
    encode(&mut buf, true, Opcode::Text, b"plain", key);
    // Fragmented: RSV1 on the first frame only, a ping in between.
    let first = buf.len();
    encode(&mut buf, false, Opcode::Text, &z[..4], key);
    buf[first] |= 0x40;
    encode(&mut buf, true, Opcode::Ping, b"p", key);
    encode(&mut buf, true, Opcode::Continuation, &z[4..], key);
    let mut inf = Inflater::default();
    let (r, got) = read_frames(&buf, Some(&mut inf), 1000);
    assert_eq!(r, Ok(buf.len()));
    assert_eq!(got, vec![msg.to_vec(), b"plain".to_vec(), msg.to_vec()]);
    assert_eq!(inf.tally.messages, 2);
    // Without the extension RSV1 is a reserved bit.
    assert_eq!(read_frames(&buf, None, 1000).0, Err("ws_reserved_bits"));
    // RSV1 on a control frame or a continuation: 1002.
    let mut ping = Vec::new();
    encode_compressed(&mut ping, Opcode::Ping, b"x", key);
    assert_eq!(read_frames(&ping, Some(&mut inf), 1000).0, Err("ws_rsv1_control"));
    let mut cont = Vec::new();
    encode(&mut cont, false, Opcode::Text, &z[..4], key);
    cont[0] |= 0x40;
    let at = cont.len();
    encode(&mut cont, true, Opcode::Continuation, &z[4..], key);
    cont[at] |= 0x40;
    assert_eq!(read_frames(&cont, Some(&mut inf), 1000).0, Err("ws_rsv1_continuation"));
    assert_eq!(close_code("ws_rsv1_control"), 1002);
    assert_eq!(close_code("ws_rsv1_continuation"), 1002);
    // RSV2 stays reserved.
    let mut rsv2 = Vec::new();
    encode(&mut rsv2, true, Opcode::Text, b"x", key);
    rsv2[0] |= 0x20;
    assert_eq!(read_frames(&rsv2, Some(&mut inf), 1000).0, Err("ws_reserved_bits"));
}

/// A small frame that inflates past the message cap closes with 1009,
/// whole or in fragments.
#[test]
fn a_bomb_in_frames_closes_with_1009() {
    use crate::proto::ws::frame::{close_code, encode, encode_compressed, Opcode};
    let mut bomb = Vec::new();
    Deflater::default().compress(&vec![b'a'; 1 << 20], &mut bomb);
    assert!(bomb.len() < 2000, "{}", bomb.len());
    let mut buf = Vec::new();
    encode_compressed(&mut buf, Opcode::Binary, &bomb, Some([1, 2, 3, 4]));
    let mut inf = Inflater::default();
    assert_eq!(read_frames(&buf, Some(&mut inf), 64 * 1024).0, Err("ws_inflate_too_big"));
    assert_eq!(close_code("ws_inflate_too_big"), 1009);
    let mut frags = Vec::new();
    encode(&mut frags, false, Opcode::Binary, &bomb[..100], Some([1, 2, 3, 4]));
    frags[0] |= 0x40;
    encode(&mut frags, true, Opcode::Continuation, &bomb[100..], Some([1, 2, 3, 4]));
    assert_eq!(read_frames(&frags, Some(&mut inf), 64 * 1024).0, Err("ws_inflate_too_big"));
    assert_eq!(inf.tally.too_big, 2);
    // Corrupt deflate data: 1007.
    let mut bad = Vec::new();
    encode_compressed(&mut bad, Opcode::Binary, &[0xff, 0xff], Some([1, 2, 3, 4]));
    assert_eq!(read_frames(&bad, Some(&mut inf), 100).0, Err("ws_inflate_corrupt"));
    assert_eq!(close_code("ws_inflate_corrupt"), 1007);
}

proptest! {
    #[test]
    fn compress_then_inflate_is_identity(data in proptest::collection::vec(any::<u8>(), 0..5000), repeat in 1usize..40) {
        let msg: Vec<u8> = data.iter().cycle().take(data.len() * repeat).copied().collect();
        let mut z = Vec::new();
        Deflater::default().compress(&msg, &mut z);
        let mut i = Inflater::default();
        prop_assert_eq!(i.inflate(&z, msg.len()).map(<[u8]>::to_vec), Ok(msg.clone()));
    }

    #[test]
    fn any_bytes_inflate_within_the_bound(data in proptest::collection::vec(any::<u8>(), 0..600), max in 0usize..70_000) {
        let mut i = Inflater::default();
        if let Ok(out) = i.inflate(&data, max) {
            prop_assert!(out.len() <= max);
        }
        prop_assert!(i.d.as_ref().expect("made at the first message").total_out() as usize <= max + 1);
    }
}
