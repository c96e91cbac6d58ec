//! permessage-deflate with context takeover (RFC 7692 §7.1.1): the
//! optional mode for clients that want ratio over memory. A side that
//! keeps its LZ77 window between messages lets a message refer back to
//! the earlier ones, so pushes that repeat their shape (the same keys,
//! the same symbols) shrink to a few back-references after the first.
//! The price is state per connection, for as long as it lives: a
//! compressor for our side, a decompressor for the client's, each made
//! at its first message (the numbers are in docs/protocol.md).
//!
//! The negotiation here answers an offer as a server that allows takeover
//! wherever the offer does: a side whose `*_no_context_takeover` the
//! client asked for keeps the shared, reset-per-message form of
//! `deflate.rs`.

use super::{parse_offer, Offer, EXTENSION, MAX_OFFERS_LEN};
use flate2::Decompress;

/// Smallest window zlib's raw deflate can use (2^9 = 512 bytes; an
/// offer of 8 is answered with 9 by zlib itself, which RFC 7692 forbids
/// a server, so an offer under 9 for our side is declined).
pub(crate) const MIN_WINDOW_BITS: u8 = 9;

/// What a server accepted from one offer in takeover mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agreement {
    /// The `Sec-WebSocket-Extensions` value to answer.
    pub answer: String,
    /// Our messages keep context, with a window of 2^bits (None: the
    /// client asked for `server_no_context_takeover`).
    pub server_window: Option<u8>,
    /// The client's messages keep context, in a window of at most 2^bits
    /// (None: it offered `client_no_context_takeover`).
    pub client_window: Option<u8>,
}

impl Agreement {
    /// Whether either side keeps context (the connection needs state).
    pub(crate) fn takes_over(&self) -> bool {
        self.server_window.is_some() || self.client_window.is_some()
    }
}

/// The first `permessage-deflate` offer a server in takeover mode can
/// honour, answered: context takeover on each side the offer allows, our
/// window `bits` (9..=15) or the smaller `server_max_window_bits` the
/// client asked for, and the client's window limited to `bits` when the
/// offer says it can be (`client_max_window_bits`). None: no acceptable
/// offer.
pub(crate) fn accept(offers: &str, bits: u8) -> Option<Agreement> {
    if offers.len() > MAX_OFFERS_LEN {
        return None;
    }
    let bits = bits.clamp(MIN_WINDOW_BITS, 15);
    super::extensions(offers)?
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(EXTENSION))
        .filter_map(|(_, params)| parse_offer(params).ok())
        .find_map(|o| answer(&o, bits))
}

fn answer(o: &Offer, bits: u8) -> Option<Agreement> {
    let mut answer = String::from(EXTENSION);
    let server_window = if o.server_no_context_takeover {
        // Shared form for our side: one 2^15 compressor per worker.
        if o.server_max_window_bits.is_some_and(|b| b < super::WINDOW_BITS) {
            return None;
        }
        answer.push_str("; server_no_context_takeover");
        None
    } else {
        let w = o.server_max_window_bits.map_or(bits, |b| b.min(bits));
        if w < MIN_WINDOW_BITS {
            return None;
        }
        // Said whenever it is not the default (and always when asked:
        // §7.1.2.1 wants the accepted value back).
        if w < 15 || o.server_max_window_bits.is_some() {
            answer.push_str(&format!("; server_max_window_bits={w}"));
        }
        Some(w)
    };
    let client_window = if o.client_no_context_takeover {
        answer.push_str("; client_no_context_takeover");
        None
    } else {
        match o.client_max_window_bits {
            // It may be limited: to our window (or the client's own limit).
            Some(limit) => {
                let w = limit.map_or(bits, |l| l.min(bits)).max(MIN_WINDOW_BITS);
                answer.push_str(&format!("; client_max_window_bits={w}"));
                Some(w)
            }
            None => Some(15),
        }
    };
    Some(Agreement { answer, server_window, client_window })
}

/// A connection's decompressor for a client that keeps context: made at
/// its first compressed message (zlib state and a window of 2^`bits`),
/// lent to the worker's [`super::Inflater`] for each read.
#[derive(Default)]
pub(crate) struct InflateContext {
    pub(super) d: Option<Box<Decompress>>,
    pub(super) bits: u8,
}

impl InflateContext {
    /// For a client window of at most 2^`bits` (9..=15).
    pub(crate) fn new(bits: u8) -> InflateContext {
        InflateContext { d: None, bits: bits.clamp(MIN_WINDOW_BITS, 15) }
    }

    /// Whether its zlib state has been made (a compressed message came).
    #[cfg(test)]
    pub(crate) fn is_allocated(&self) -> bool {
        self.d.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agreed(offer: &str, bits: u8) -> Option<(String, Option<u8>, Option<u8>)> {
        accept(offer, bits).map(|a| (a.answer, a.server_window, a.client_window))
    }

    /// What Python websockets and Node ws offer by default, and what a
    /// browser does: context kept both ways, our window said when under
    /// 15, the client's limited to ours when it can be.
    #[test]
    fn default_offers_get_context_takeover_both_ways() {
        let ws = "permessage-deflate; client_max_window_bits";
        assert_eq!(agreed(ws, 12), Some(("permessage-deflate; server_max_window_bits=12; client_max_window_bits=12".into(), Some(12), Some(12))));
        assert_eq!(agreed(ws, 15), Some(("permessage-deflate; client_max_window_bits=15".into(), Some(15), Some(15))));
        assert_eq!(agreed("permessage-deflate", 15), Some(("permessage-deflate".into(), Some(15), Some(15))), "the client's window cannot be limited");
        assert!(accept("x-webkit-deflate-frame", 15).is_none());
    }

    /// A side the client wants without context keeps the shared form; a
    /// window the client asks for is honoured if zlib can do it.
    #[test]
    fn the_clients_limits_are_honoured() {
        let a = accept("permessage-deflate; server_no_context_takeover; client_no_context_takeover", 12).unwrap();
        assert_eq!(a.answer, "permessage-deflate; server_no_context_takeover; client_no_context_takeover");
        assert!(!a.takes_over());
        let a = accept("permessage-deflate; server_max_window_bits=10; client_max_window_bits=11", 12).unwrap();
        assert_eq!((a.server_window, a.client_window), (Some(10), Some(11)));
        assert_eq!(a.answer, "permessage-deflate; server_max_window_bits=10; client_max_window_bits=11");
        // 8 cannot be done by zlib: the next offer is taken.
        let a = accept("permessage-deflate; server_max_window_bits=8, permessage-deflate; server_max_window_bits=9", 15).unwrap();
        assert_eq!(a.server_window, Some(9));
        assert!(accept("permessage-deflate; server_max_window_bits=8", 15).is_none());
        let a = accept("permessage-deflate; server_no_context_takeover", 12).unwrap();
        assert_eq!((a.server_window, a.client_window), (None, Some(15)));
        assert!(a.takes_over(), "the client keeps its context: we inflate with it");
    }

    fn push(i: u32) -> Vec<u8> {
        format!(
            "{{\"stream\":\"topic\",\"topic\":\"prices\",\"seq\":{i},\"data\":{{\"symbol\":\"EURUSD\",\"bids\":[{}]}}}}",
            (0..40).map(|k| format!("[1.08{k:02},{}]", 1000 + k)).collect::<Vec<_>>().join(",")
        )
        .into_bytes()
    }

    /// With context kept (and a window longer than a push), a push
    /// repeating the last one's content costs a fraction of it; the client's side inflates them in order with its
    /// context lent to the worker's inflater, and a reset inflater could
    /// not (the later ones refer back).
    #[test]
    fn repeated_pushes_shrink_and_inflate_only_with_their_context() {
        for bits in [9, 12, 15] {
            let mut d = super::super::Deflater::with_context_takeover(bits);
            assert!(!d.is_allocated(), "nothing before the first message");
            let (mut ctx, mut inflater, mut fresh) = (InflateContext::new(bits), super::super::Inflater::default(), super::super::Inflater::default());
            let mut sizes = Vec::new();
            for i in 0..3 {
                let (msg, mut wire) = (push(i), Vec::new());
                d.compress(&msg, &mut wire);
                sizes.push(wire.len());
                inflater.lend(&mut ctx);
                let got = inflater.inflate(&wire, 1 << 20).map(<[u8]>::to_vec);
                inflater.give_back(&mut ctx);
                assert_eq!(got.as_deref(), Ok(&msg[..]), "bits {bits}, push {i}");
                if i > 0 {
                    assert!(fresh.inflate(&wire, 1 << 20).is_err_and(|e| e == super::super::InflateError::Corrupt), "bits {bits}: push {i} refers back");
                }
            }
            assert!(ctx.is_allocated() && d.is_allocated());
            // A window shorter than the push cannot reach back to its
            // predecessor (2^9 = 512 bytes here): context buys nothing.
            if 1 << bits > push(0).len() {
                assert!(sizes[1] * 3 < sizes[0] && sizes[2] * 3 < sizes[0], "bits {bits}: {sizes:?} for {} bytes each", push(0).len());
            } else {
                assert!(sizes[1] * 3 > sizes[0], "bits {bits}: {sizes:?}");
            }
            // The worker's own decompressor is back, reset per message.
            assert_eq!(inflater.inflate(&sizes_first(&push(7)), 1 << 20).map(<[u8]>::to_vec), Ok(push(7)));
        }
    }

    fn sizes_first(msg: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        super::super::Deflater::default().compress(msg, &mut out);
        out
    }

    /// What a connection in takeover mode holds once it has sent and
    /// received a message, as the allocator counts it, at the smallest,
    /// a middle and the largest window: the numbers docs/protocol.md
    /// gives. The shared mode holds none of it per connection.
    #[test]
    fn the_memory_a_connection_holds_in_takeover_mode() {
        let mut report = Vec::new();
        for bits in [9, 12, 15] {
            let msg = push(1);
            let (d, deflate) = crate::test_alloc::counted(|| {
                let mut d = super::super::Deflater::with_context_takeover(bits);
                d.compress(&msg, &mut Vec::new());
                d
            });
            let mut wire = Vec::new();
            super::super::Deflater::with_context_takeover(bits).compress(&msg, &mut wire);
            let mut inflater = super::super::Inflater::default();
            inflater.inflate(&wire, 1 << 20).expect("warm: the output vector is the worker's");
            let (ctx, inflate) = crate::test_alloc::counted(|| {
                let mut ctx = InflateContext::new(bits);
                inflater.lend(&mut ctx);
                inflater.inflate(&wire, 1 << 20).expect("inflates");
                inflater.give_back(&mut ctx);
                ctx
            });
            assert!(d.is_allocated() && ctx.is_allocated());
            report.push(format!("window 2^{bits}: compressor {deflate} B, decompressor {inflate} B"));
            // zlib's own formulas bound them: deflate ~ 2^(bits+2) + 2^(memLevel 8 + 9) and
            // more, inflate ~ 2^bits + 7 KB; a third of a megabyte is far above either.
            assert!(deflate > 1 << bits && deflate < 384 << 10, "{report:?}");
            assert!(inflate > 1 << bits && inflate < 64 << 10, "{report:?}");
        }
        eprintln!("{}", report.join("\n"));
    }
}
