use super::*;
use proptest::prelude::*;

const WIDE: Limits = Limits { max_line: 1 << 20, max_event: 1 << 20 };

/// An event as owned strings, to compare across buffers.
type Owned = (Option<String>, Option<String>, Option<String>);

fn owned(e: Event<'_>) -> Owned {
    (e.kind.map(Into::into), e.id.map(Into::into), e.data.map(Cow::into_owned))
}

fn feed(pieces: &[&[u8]], limits: Limits) -> (Vec<Owned>, Option<ParseError>) {
    read_in_pieces(pieces, limits, owned)
}

fn ev(kind: Option<&str>, id: Option<&str>, data: Option<&str>) -> Owned {
    (kind.map(Into::into), id.map(Into::into), data.map(Into::into))
}

#[test]
fn fields_comments_and_every_line_end() {
    let wire = b"retry: 2000\n: comment\n\nevent: subscribed\r\nid: a:1:2\r\ndata: {\"x\":\r\ndata:1}\r\n\r\nid: b\rdata\rdata:  two\r\rid: \0x\nfoo: bar\nnocolon\ndata: z\n\nid: tail\ndata: half";
    let (got, err) = feed(&[wire], WIDE);
    assert_eq!(err, None);
    assert_eq!(
        got,
        vec![
            ev(Some("subscribed"), Some("a:1:2"), Some("{\"x\":\n1}")),
            // A bare `data` is an empty line of data; one space is stripped.
            ev(None, Some("b"), Some("\n two")),
            // An id with NUL is ignored; unknown fields too.
            ev(None, None, Some("z")),
        ]
    );
}

#[test]
fn a_partial_event_waits_and_is_not_consumed() {
    let wire = b"data: one\n\nid: 2\ndata: half";
    let mut events = Events::new(wire, WIDE);
    assert_eq!(events.next(), Some(Ok(Event { kind: None, id: None, data: Some(Cow::Borrowed("one")) })));
    assert_eq!(events.next(), None);
    assert_eq!(&wire[events.consumed()..], b"id: 2\ndata: half");
    // A comment-only block and lone blank lines are read and dropped.
    let blanks = b": ping\n\n\r\n\n";
    let mut events = Events::new(blanks, WIDE);
    assert_eq!(events.next(), None);
    assert_eq!(events.consumed(), blanks.len());
}

#[test]
fn split_at_every_byte_reads_the_same_events() {
    let wire: &[u8] = b"event: a\r\ndata: 1\r\n\r\ndata: 2\rdata: 3\r\r: c\n\nid: 9\n\ndata: x\n\r\n";
    let whole = feed(&[wire], WIDE);
    assert_eq!(whole.0.len(), 4);
    for cut in 0..=wire.len() {
        let (a, b) = wire.split_at(cut);
        assert_eq!(feed(&[a, b], WIDE), whole, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = wire.chunks(1).collect();
    assert_eq!(feed(&bytes, WIDE), whole);
}

#[test]
fn bounds_and_bad_bytes_are_typed_errors() {
    let small = Limits { max_line: 8, max_event: 20 };
    assert_eq!(feed(&[b"data: 12345\n\n"], small).1, Some(ParseError::LineTooLong));
    // Refused before the line ends: nothing unbounded is kept.
    assert_eq!(feed(&[b"data: 123"], small).1, Some(ParseError::LineTooLong));
    assert_eq!(feed(&[b"data: 1\ndata: 2\ndata: 3\n\n"], small).1, Some(ParseError::EventTooLarge));
    assert_eq!(feed(&[b"data: \xff\n\n"], small).1, Some(ParseError::BadUtf8));
    // Events before the bad one are still read.
    let (got, err) = feed(&[b"data: ok\n\ndata: \xff\n\n"], small);
    assert_eq!((got, err), (vec![ev(None, None, Some("ok"))], Some(ParseError::BadUtf8)));
    // Within bounds exactly: fine.
    assert_eq!(feed(&[b"data: 12\n\n"], small), (vec![ev(None, None, Some("12"))], None));
}

/// Lines a stream is made of: fields, comments, blanks, odd bytes.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let parts: [&[u8]; 14] = [
        b"data: a",
        b"data:bb",
        b"data",
        b"data: ccccccccc",
        b"id: 1",
        b"id: \0",
        b"event: goaway",
        b": c",
        b"retry: 5",
        b"x",
        b"",
        b"",
        b"\xff",
        b"data: \xce",
    ];
    let ends: [&[u8]; 3] = [b"\n", b"\r\n", b"\r"];
    (prop::sample::select(parts.to_vec()), prop::sample::select(ends.to_vec())).prop_map(|(l, e)| [l, e].concat())
}

proptest! {
    #[test]
    fn arbitrary_splits_read_the_same_events(lines in prop::collection::vec(line(), 0..40), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
        let wire = lines.concat();
        for limits in [WIDE, Limits { max_line: 12, max_event: 40 }] {
            let whole = feed(&[&wire], limits);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
            at.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for a in at {
                pieces.push(&wire[from..a]);
                from = a;
            }
            pieces.push(&wire[from..]);
            prop_assert_eq!(feed(&pieces, limits), whole);
        }
    }
}
