//! Reading an event stream as the WHATWG HTML standard's EventSource
//! reads it ("Interpreting an event stream"): lines end in LF, CRLF or a
//! lone CR; a line starting with `:` is a comment; `data` lines join with
//! LF; `event` names the type; an `id` holding NUL is ignored; a blank
//! line ends the event.
//!
//! Incremental without state of its own: [`Events`] reads the whole
//! events at the start of a buffer and says how many bytes they took
//! ([`Events::consumed`]); the caller keeps the rest (an event cut by
//! the network) and hands it back with more. So a connection holds no
//! parser, and how the network cuts a stream never changes what is read:
//! a CR that ends one read is already a line end, and an LF after it
//! makes only a blank line that ends no event.
//!
//! Bounded: a line over [`Limits::max_line`] bytes, or an event over
//! [`Limits::max_event`], is an error at the byte that crosses the bound,
//! whether or not the rest has arrived, so the caller never keeps more
//! than `max_event` bytes (plus a line end) of a stream.
//!
//! Where it departs from the standard, on purpose: a line that is not
//! UTF-8 is an error ([`ParseError::BadUtf8`]) rather than decoded with
//! replacement characters, since a server that sends one is broken; and
//! `retry` is not read (the caller decides when to reconnect).

use std::borrow::Cow;

/// How much of a stream one event may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Longest line, without its line end.
    pub max_line: usize,
    /// Longest event: from its first line to the end of its last
    /// (line ends within it counted, the blank line's not).
    pub max_event: usize,
}

/// Why a stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// A line over [`Limits::max_line`].
    LineTooLong,
    /// An event over [`Limits::max_event`].
    EventTooLarge,
    /// A line that is not UTF-8.
    BadUtf8,
}

impl ParseError {
    /// The error as a counter-style name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ParseError::LineTooLong => "sse_line_too_long",
            ParseError::EventTooLarge => "sse_event_too_large",
            ParseError::BadUtf8 => "sse_bad_utf8",
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for ParseError {}

/// One event, borrowed from the buffer where it can be: every event
/// with a field the caller may need, including one with no `data` (an
/// EventSource dispatches no message for it, but its `id` still becomes
/// the last event id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// `event`: the type (a message when absent).
    pub kind: Option<&'a str>,
    /// `id`: the last event id from now on.
    pub id: Option<&'a str>,
    /// The `data` lines joined by LF (copied only when there are
    /// several).
    pub data: Option<Cow<'a, str>>,
}

/// The whole events at the start of a buffer, in order; an error ends
/// them. The bytes they took are [`Events::consumed`].
pub(crate) struct Events<'a> {
    buf: &'a [u8],
    limits: Limits,
    /// Where the next line starts.
    pos: usize,
    /// The end of the last blank line that ended an event (or stood
    /// alone): everything before it is read and can be dropped.
    consumed: usize,
    failed: bool,
}

impl<'a> Events<'a> {
    pub(crate) fn new(buf: &'a [u8], limits: Limits) -> Events<'a> {
        Events { buf, limits, pos: 0, consumed: 0, failed: false }
    }

    /// Bytes of the buffer read so far; the rest (part of an event) is
    /// to be handed back with what follows it.
    pub(crate) fn consumed(&self) -> usize {
        self.consumed
    }

    /// The error, if the line from `start` to `content_end` (or the
    /// event from `event_start` to there) crosses a bound: the one
    /// crossed at the earlier byte.
    fn check_bounds(&self, start: usize, content_end: usize, event_start: usize) -> Result<(), ParseError> {
        let line_at = (content_end - start > self.limits.max_line).then_some(start + self.limits.max_line);
        let event_at = (content_end - event_start > self.limits.max_event).then_some(event_start + self.limits.max_event);
        match (line_at, event_at) {
            (Some(l), Some(e)) if l < e => Err(ParseError::LineTooLong),
            (_, Some(_)) => Err(ParseError::EventTooLarge),
            (Some(_), None) => Err(ParseError::LineTooLong),
            (None, None) => Ok(()),
        }
    }

    fn next_event(&mut self) -> Result<Option<Event<'a>>, ParseError> {
        let buf = self.buf;
        let mut event = Event::default();
        // Where this event's first line (field or comment) starts.
        let mut event_start = None;
        loop {
            let start = self.pos;
            let line_break = buf[start..].iter().position(|b| *b == b'\n' || *b == b'\r').map(|i| start + i);
            let content_end = line_break.unwrap_or(buf.len());
            let blank = content_end == start;
            if !blank {
                self.check_bounds(start, content_end, *event_start.get_or_insert(start))?;
            }
            let Some(at) = line_break else { return Ok(None) };
            self.pos = at + if buf[at] == b'\r' && buf.get(at + 1) == Some(&b'\n') { 2 } else { 1 };
            if blank {
                self.consumed = self.pos;
                if event_start.take().is_some() && event != Event::default() {
                    return Ok(Some(event));
                }
                continue;
            }
            let line = std::str::from_utf8(&buf[start..content_end]).map_err(|_| ParseError::BadUtf8)?;
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
            match field {
                "event" => event.kind = Some(value),
                "id" if !value.contains('\0') => event.id = Some(value),
                "data" => match &mut event.data {
                    Some(d) => {
                        let d = d.to_mut();
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => event.data = Some(Cow::Borrowed(value)),
                },
                _ => {}
            }
        }
    }
}

impl<'a> Iterator for Events<'a> {
    type Item = Result<Event<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = self.next_event();
        self.failed = r.is_err();
        r.transpose()
    }
}

/// What a reader gets when the stream comes in these `pieces`: each
/// appended to what was kept, whole events taken (as `f` makes them), the
/// rest kept, never more than one event's bound and a line end (asserted).
/// For the tests and the fuzz target, which read one stream cut
/// differently and compare.
#[doc(hidden)]
pub(crate) fn read_in_pieces<T>(pieces: &[&[u8]], limits: Limits, mut f: impl FnMut(Event<'_>) -> T) -> (Vec<T>, Option<ParseError>) {
    let (mut kept, mut got) = (Vec::new(), Vec::new());
    for p in pieces {
        kept.extend_from_slice(p);
        let mut events = Events::new(&kept, limits);
        for e in events.by_ref() {
            match e {
                Ok(e) => got.push(f(e)),
                Err(err) => return (got, Some(err)),
            }
        }
        let used = events.consumed();
        kept.drain(..used);
        assert!(kept.len() <= limits.max_event + 2, "kept {} bytes", kept.len());
    }
    (got, None)
}

#[cfg(test)]
mod tests;
