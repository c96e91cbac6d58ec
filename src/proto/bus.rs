//! The bus between a server's workers and its broker shards: typed binary
//! frames on a Unix socket pair per (worker, shard), the payload carried
//! raw. No JSON and no base64 between two sockets: a client's PUBLISH is
//! read by its worker, framed once here, routed by the shard that owns
//! its topic (`server/broker/shard.rs`), framed once more for the workers
//! with subscribers, and written to each of those sockets from one buffer.
//!
//! A frame is `len: u32` (the bytes after it), `tag: u8`, then the fields
//! of its kind, little-endian: integers fixed-width, strings and byte runs
//! behind their length (`u16` for names, `u32` for payloads). A reader
//! fed bytes yields whole frames or says it needs more; every length is
//! checked against what is left and against [`MAX_FRAME`], and a frame it
//! cannot parse is an error naming the field ([`BusError`]), which the
//! side that read it counts and logs, never skips silently.
//!
//! **Order across workers.** A shard reads many workers' sockets, and
//! what one worker sent may have caused what another sent (a client is
//! told it is subscribed, then its peer publishes on another worker).
//! So every run of frames a worker writes opens with a [`Frame::Stamp`]:
//! the machine's monotonic clock, read when the run is written (after
//! every frame of it was made, before any of it left or was acknowledged
//! to a client). What caused a frame was written before that frame was
//! made, so it carries a smaller stamp, and a shard that applies runs in
//! stamp order (`broker/shard.rs`) applies cause before effect.

use crate::proto::mqtt::forward::Forwarded;
use crate::proto::push::Stream;

/// Largest frame: a history or retained answer of at most 4 MiB of
/// payload (`MAX_REPLY_BYTES`, `retained::MAX_ANSWER_BYTES`) with its
/// records, or one message of at most 1 MiB.
pub(crate) const MAX_FRAME: usize = 6 << 20;

/// Longest a frame waits for others to share its write, on either side
/// (a worker's frames to its shards, a shard's to its workers): at a low
/// rate a write per frame would wake the other side once per message.
pub(crate) const COALESCE: std::time::Duration = std::time::Duration::from_micros(500);
/// Bytes framed since the last write past which they go without waiting.
pub(crate) const COALESCE_BYTES: usize = 64 << 10;

mod tag {
    pub(super) const PUBLISH: u8 = 1;
    pub(super) const INTEREST: u8 = 2;
    pub(super) const SHARE: u8 = 3;
    pub(super) const RETAINED_WANT: u8 = 4;
    pub(super) const HISTORY_WANT: u8 = 5;
    pub(super) const STAMP: u8 = 6;
    pub(super) const DELIVER: u8 = 10;
    pub(super) const RETAINED: u8 = 11;
    pub(super) const HISTORY: u8 = 12;
}

/// A message entering the topic space: a client's PUBLISH (or will).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Publish<'a> {
    /// The publishing connection (`commands::conn_id`), for No Local.
    pub origin: u64,
    pub qos: u8,
    pub retain: bool,
    pub publish_us: u64,
    pub topic: &'a str,
    /// v5 properties forwarded to subscribers (without the origin).
    pub props: Option<Forwarded>,
    /// A retained one: whom its retained topic is charged to ("": none).
    pub identity: &'a str,
    pub payload: &'a [u8],
}

/// A message for a worker's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deliver<'a> {
    /// The admin publish waiting for this worker's count (0: nobody).
    pub publish_id: u64,
    pub stream: Stream,
    pub topic: &'a str,
    /// Its place in the topic's (or the broadcasts') history.
    pub seq: u64,
    pub epoch: u32,
    pub publish_us: u64,
    pub qos: u8,
    pub retain: bool,
    /// Unicast: one connection, or every connection of a user.
    pub target: Option<u64>,
    pub user: Option<&'a str>,
    /// Close the targets instead.
    pub close: bool,
    /// MQTT shared subscriptions: the member of each group picked here
    /// (connection id, granted QoS).
    pub shared: Vec<(u64, u8)>,
    /// Its publisher (No Local) and v5 properties.
    pub props: Option<Forwarded>,
    pub payload: &'a [u8],
}

/// One retained message of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetainedMessage<'a> {
    pub topic: &'a str,
    pub qos: u8,
    pub props: Option<Forwarded>,
    pub payload: &'a [u8],
}

/// One message of a history answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HistoryMessage<'a> {
    pub offset: u64,
    pub publish_us: u64,
    pub payload: &'a [u8],
}

/// Every kind of frame, both ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// Worker to shard: a message into the topic space.
    Publish(Publish<'a>),
    /// Worker to shard: the worker's first subscriber of `name` came
    /// (`add`) or its last left; `filter`: an MQTT `+`/`#` filter.
    Interest { add: bool, filter: bool, name: &'a str },
    /// Worker to shard: a connection joined or left a shared subscription
    /// (`$share/{group}/{filter}`) at QoS `qos`.
    Share { join: bool, conn: u64, qos: u8, name: &'a str },
    /// Worker to shard: a new subscription wants the retained messages
    /// its filter matches (answered by [`Frame::Retained`]).
    RetainedWant { conn: u64, qos: u8, sid: u32, filter: &'a str },
    /// Worker to shard: subscribers recover `topic` after offset `after`.
    HistoryWant { topic: &'a str, after: u64 },
    /// Worker to shard: the frames after this one (up to the next) were
    /// written at `at` ns on the monotonic clock (`sys::mono_ns`).
    Stamp { at: u64 },
    /// Shard to worker: a message for its connections.
    Deliver(Deliver<'a>),
    /// Shard to worker: the retained messages a subscription wanted.
    Retained { conn: u64, qos: u8, sid: u32, messages: Vec<RetainedMessage<'a>> },
    /// Shard to worker: a topic's history after an offset (`Slice`).
    History { topic: &'a str, after: u64, epoch: u32, head: u64, oldest: u64, messages: Vec<HistoryMessage<'a>> },
}

/// Why a frame could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BusError {
    #[error("a frame of {0} bytes, over the bus's {MAX_FRAME}")]
    TooLarge(usize),
    #[error("an unknown frame tag {0}")]
    UnknownTag(u8),
    #[error("a frame whose {0} runs past its end")]
    Short(&'static str),
    #[error("a frame whose {0} is not UTF-8")]
    NotText(&'static str),
    #[error("a frame with {0} bytes left over")]
    Trailing(usize),
    #[error("a frame whose {0} is out of range")]
    Range(&'static str),
}

impl BusError {
    /// Its counter label.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            BusError::TooLarge(_) => "too_large",
            BusError::UnknownTag(_) => "unknown_tag",
            BusError::Short(_) => "short",
            BusError::NotText(_) => "not_text",
            BusError::Trailing(_) => "trailing",
            BusError::Range(_) => "range",
        }
    }
}

/// Append one frame to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, f: &Frame<'_>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut w = Writer(out);
    match f {
        Frame::Publish(p) => {
            w.u8(tag::PUBLISH);
            w.u64(p.origin);
            w.u8(p.qos | (p.retain as u8) << 7);
            w.u64(p.publish_us);
            w.str(p.topic);
            w.props(p.props.as_ref());
            w.str(p.identity);
            w.bytes(p.payload);
        }
        Frame::Interest { add, filter, name } => {
            w.u8(tag::INTEREST);
            w.u8(*add as u8 | (*filter as u8) << 1);
            w.str(name);
        }
        Frame::Share { join, conn, qos, name } => {
            w.u8(tag::SHARE);
            w.u8(*join as u8);
            w.u64(*conn);
            w.u8(*qos);
            w.str(name);
        }
        Frame::RetainedWant { conn, qos, sid, filter } => {
            w.u8(tag::RETAINED_WANT);
            w.u64(*conn);
            w.u8(*qos);
            w.u32(*sid);
            w.str(filter);
        }
        Frame::HistoryWant { topic, after } => {
            w.u8(tag::HISTORY_WANT);
            w.str(topic);
            w.u64(*after);
        }
        Frame::Stamp { at } => {
            w.u8(tag::STAMP);
            w.u64(*at);
        }
        Frame::Deliver(d) => {
            w.u8(tag::DELIVER);
            w.u64(d.publish_id);
            w.u8(stream_code(d.stream) | (d.retain as u8) << 3 | (d.close as u8) << 4 | d.qos << 5);
            w.str(d.topic);
            w.u64(d.seq);
            w.u32(d.epoch);
            w.u64(d.publish_us);
            w.opt_u64(d.target);
            w.opt_str(d.user);
            w.u32(d.shared.len() as u32);
            for (conn, qos) in &d.shared {
                w.u64(*conn);
                w.u8(*qos);
            }
            w.props(d.props.as_ref());
            w.bytes(d.payload);
        }
        Frame::Retained { conn, qos, sid, messages } => {
            w.u8(tag::RETAINED);
            w.u64(*conn);
            w.u8(*qos);
            w.u32(*sid);
            w.u32(messages.len() as u32);
            for m in messages {
                w.str(m.topic);
                w.u8(m.qos);
                w.props(m.props.as_ref());
                w.bytes(m.payload);
            }
        }
        Frame::History { topic, after, epoch, head, oldest, messages } => {
            w.u8(tag::HISTORY);
            w.str(topic);
            w.u64(*after);
            w.u32(*epoch);
            w.u64(*head);
            w.u64(*oldest);
            w.u32(messages.len() as u32);
            for m in messages {
                w.u64(m.offset);
                w.u64(m.publish_us);
                w.bytes(m.payload);
            }
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Bytes of a [`Frame::Stamp`].
pub(crate) const STAMP_LEN: usize = 13;

/// Open a run of frames on `out`: a [`Frame::Stamp`] to be filled in by
/// [`seal`] when the run is written. Returns where it is.
pub(crate) fn open_run(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    encode(out, &Frame::Stamp { at: 0 });
    at
}

/// Fill in the stamp [`open_run`] left at `run` with `now` (ns).
pub(crate) fn seal(out: &mut [u8], run: usize, now: u64) {
    debug_assert_eq!(out[run + 4], tag::STAMP);
    out[run + 5..run + STAMP_LEN].copy_from_slice(&now.to_le_bytes());
}

/// The first whole frame of `buf` and the bytes it took; None: it needs
/// more bytes.
pub(crate) fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, BusError> {
    let Some(head) = buf.get(..4) else { return Ok(None) };
    let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME {
        return Err(BusError::TooLarge(len));
    }
    let Some(body) = buf.get(4..4 + len) else { return Ok(None) };
    let mut r = Reader(body);
    let f = match r.u8("tag")? {
        tag::PUBLISH => {
            let origin = r.u64("origin")?;
            let flags = r.u8("flags")?;
            Frame::Publish(Publish {
                origin,
                qos: qos(flags & 0x7F)?,
                retain: flags & 0x80 != 0,
                publish_us: r.u64("publish time")?,
                topic: r.str("topic")?,
                props: r.props()?,
                identity: r.str("identity")?,
                payload: r.bytes("payload")?,
            })
        }
        tag::INTEREST => {
            let flags = r.u8("flags")?;
            Frame::Interest { add: flags & 1 != 0, filter: flags & 2 != 0, name: r.str("name")? }
        }
        tag::SHARE => Frame::Share { join: r.u8("join")? != 0, conn: r.u64("connection")?, qos: qos(r.u8("qos")?)?, name: r.str("name")? },
        tag::RETAINED_WANT => Frame::RetainedWant { conn: r.u64("connection")?, qos: qos(r.u8("qos")?)?, sid: r.u32("identifier")?, filter: r.str("filter")? },
        tag::HISTORY_WANT => Frame::HistoryWant { topic: r.str("topic")?, after: r.u64("offset")? },
        tag::STAMP => Frame::Stamp { at: r.u64("stamp")? },
        tag::DELIVER => {
            let publish_id = r.u64("publish id")?;
            let flags = r.u8("flags")?;
            let topic = r.str("topic")?;
            let (seq, epoch, publish_us) = (r.u64("offset")?, r.u32("epoch")?, r.u64("publish time")?);
            let target = r.opt_u64("target")?;
            let user = r.opt_str("user")?;
            let n = r.count("shared picks", 9)?;
            let shared = (0..n).map(|_| Ok((r.u64("pick")?, qos(r.u8("pick's qos")?)?))).collect::<Result<_, BusError>>()?;
            Frame::Deliver(Deliver {
                publish_id,
                stream: stream_of(flags & 0x07)?,
                topic,
                seq,
                epoch,
                publish_us,
                qos: qos(flags >> 5)?,
                retain: flags & 0x08 != 0,
                target,
                user,
                close: flags & 0x10 != 0,
                shared,
                props: r.props()?,
                payload: r.bytes("payload")?,
            })
        }
        tag::RETAINED => {
            let (conn, q, sid) = (r.u64("connection")?, qos(r.u8("qos")?)?, r.u32("identifier")?);
            let n = r.count("retained messages", 8)?;
            let messages = (0..n)
                .map(|_| Ok(RetainedMessage { topic: r.str("topic")?, qos: qos(r.u8("qos")?)?, props: r.props()?, payload: r.bytes("payload")? }))
                .collect::<Result<_, BusError>>()?;
            Frame::Retained { conn, qos: q, sid, messages }
        }
        tag::HISTORY => {
            let topic = r.str("topic")?;
            let (after, epoch, head, oldest) = (r.u64("offset")?, r.u32("epoch")?, r.u64("head")?, r.u64("oldest")?);
            let n = r.count("history messages", 20)?;
            let messages = (0..n)
                .map(|_| Ok(HistoryMessage { offset: r.u64("offset")?, publish_us: r.u64("publish time")?, payload: r.bytes("payload")? }))
                .collect::<Result<_, BusError>>()?;
            Frame::History { topic, after, epoch, head, oldest, messages }
        }
        other => return Err(BusError::UnknownTag(other)),
    };
    if !r.0.is_empty() {
        return Err(BusError::Trailing(r.0.len()));
    }
    Ok(Some((f, 4 + len)))
}

fn qos(q: u8) -> Result<u8, BusError> {
    if q <= 2 {
        Ok(q)
    } else {
        Err(BusError::Range("qos"))
    }
}

fn stream_code(s: Stream) -> u8 {
    match s {
        Stream::Topic => 0,
        Stream::Broadcast => 1,
        Stream::Unicast => 2,
    }
}

fn stream_of(c: u8) -> Result<Stream, BusError> {
    match c {
        0 => Ok(Stream::Topic),
        1 => Ok(Stream::Broadcast),
        2 => Ok(Stream::Unicast),
        _ => Err(BusError::Range("stream")),
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A name: at most 64 KiB (topics are 255 bytes, properties 8 KiB).
    fn str(&mut self, s: &str) {
        let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        self.0.extend_from_slice(&(s.len() as u16).to_le_bytes());
        self.0.extend_from_slice(s);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
            None => self.u8(0),
        }
    }
    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.str(v);
            }
            None => self.u8(0),
        }
    }
    /// v5 properties: a byte saying which are there, then those.
    fn props(&mut self, p: Option<&Forwarded>) {
        let Some(p) = p else { return self.u8(0) };
        let has = 1
            | (p.origin.is_some() as u8) << 1
            | (p.payload_is_utf8.is_some() as u8) << 2
            | (p.message_expiry.is_some() as u8) << 3
            | (p.content_type.is_some() as u8) << 4
            | (p.response_topic.is_some() as u8) << 5
            | (p.correlation_data.is_some() as u8) << 6
            | (!p.user_properties.is_empty() as u8) << 7;
        self.u8(has);
        if let Some(o) = p.origin {
            self.u64(o);
        }
        if let Some(u) = p.payload_is_utf8 {
            self.u8(u as u8);
        }
        if let Some(e) = p.message_expiry {
            self.u32(e);
        }
        if let Some(c) = &p.content_type {
            self.str(c);
        }
        if let Some(t) = &p.response_topic {
            self.str(t);
        }
        if let Some(d) = &p.correlation_data {
            self.bytes(d);
        }
        if !p.user_properties.is_empty() {
            self.u32(p.user_properties.len() as u32);
            for (k, v) in &p.user_properties {
                self.str(k);
                self.str(v);
            }
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], BusError> {
        if self.0.len() < n {
            return Err(BusError::Short(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, BusError> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, BusError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, BusError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    fn str(&mut self, what: &'static str) -> Result<&'a str, BusError> {
        let n = u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")) as usize;
        std::str::from_utf8(self.take(n, what)?).map_err(|_| BusError::NotText(what))
    }
    fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], BusError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    /// A count of records each at least `least` bytes: no more than the
    /// frame can hold, so a forged count allocates nothing.
    fn count(&mut self, what: &'static str, least: usize) -> Result<usize, BusError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(least) > self.0.len() {
            return Err(BusError::Short(what));
        }
        Ok(n)
    }
    fn opt_u64(&mut self, what: &'static str) -> Result<Option<u64>, BusError> {
        Ok(match self.u8(what)? {
            0 => None,
            _ => Some(self.u64(what)?),
        })
    }
    fn opt_str(&mut self, what: &'static str) -> Result<Option<&'a str>, BusError> {
        Ok(match self.u8(what)? {
            0 => None,
            _ => Some(self.str(what)?),
        })
    }
    fn props(&mut self) -> Result<Option<Forwarded>, BusError> {
        let has = self.u8("properties")?;
        if has == 0 {
            return Ok(None);
        }
        let bit = |b: u8| has & (1 << b) != 0;
        let mut p = Forwarded::default();
        if bit(1) {
            p.origin = Some(self.u64("origin")?);
        }
        if bit(2) {
            p.payload_is_utf8 = Some(self.u8("payload format")? != 0);
        }
        if bit(3) {
            p.message_expiry = Some(self.u32("message expiry")?);
        }
        if bit(4) {
            p.content_type = Some(self.str("content type")?.to_string());
        }
        if bit(5) {
            p.response_topic = Some(self.str("response topic")?.to_string());
        }
        if bit(6) {
            p.correlation_data = Some(self.bytes("correlation data")?.to_vec());
        }
        if bit(7) {
            let n = self.count("user properties", 4)?;
            p.user_properties =
                (0..n).map(|_| Ok((self.str("user property")?.to_string(), self.str("user property")?.to_string()))).collect::<Result<_, BusError>>()?;
        }
        if p.cost() > crate::proto::mqtt::forward::MAX_FORWARDED_BYTES {
            return Err(BusError::Range("properties"));
        }
        Ok(Some(p))
    }
}

/// Frames read off a stream of bytes: what a socket brought is appended
/// with [`FrameBuf::extend`], then whole frames taken with
/// [`FrameBuf::next`]; the bytes of frames taken are dropped in one move
/// when the buffer is next extended. Bounded: at most one frame beyond
/// what is taken ([`MAX_FRAME`]).
#[derive(Debug, Default)]
pub(crate) struct FrameBuf {
    buf: Vec<u8>,
    at: usize,
}

impl FrameBuf {
    /// Room for `n` more bytes at the end (the frames taken dropped first).
    pub(crate) fn spare(&mut self, n: usize) -> &mut [u8] {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + n, 0);
        &mut self.buf[len..]
    }

    /// Append bytes read elsewhere.
    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        let room = self.spare(bytes.len());
        room.copy_from_slice(bytes);
    }

    /// The next whole frame, if any.
    pub(crate) fn next(&mut self) -> Result<Option<Frame<'_>>, BusError> {
        match decode(&self.buf[self.at..])? {
            Some((f, used)) => {
                self.at += used;
                Ok(Some(f))
            }
            None => Ok(None),
        }
    }

    /// Whether a whole frame waits.
    pub(crate) fn whole(&self) -> bool {
        match self.buf.get(self.at..self.at + 4) {
            Some(head) => {
                let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
                len > MAX_FRAME || self.buf.len() >= self.at + 4 + len
            }
            None => false,
        }
    }

    /// Take the next frame if it is a whole [`Frame::Stamp`]: its time.
    pub(crate) fn take_stamp(&mut self) -> Option<u64> {
        let rest = &self.buf[self.at..];
        if rest.len() < STAMP_LEN || rest[..5] != [STAMP_LEN as u8 - 4, 0, 0, 0, tag::STAMP] {
            return None;
        }
        self.at += STAMP_LEN;
        Some(u64::from_le_bytes(rest[5..STAMP_LEN].try_into().expect("8 bytes")))
    }

    /// Bytes held that no frame took yet.
    pub(crate) fn pending(&self) -> usize {
        self.buf.len() - self.at
    }

    /// Give the memory back once empty.
    pub(crate) fn tidy(&mut self) {
        if self.pending() == 0 && self.buf.capacity() > 64 << 10 {
            self.buf = Vec::new();
            self.at = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round(f: &Frame<'_>) {
        let mut out = Vec::new();
        encode(&mut out, f);
        let (back, used) = decode(&out).unwrap().unwrap();
        assert_eq!((&back, used), (f, out.len()));
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]).unwrap(), None, "a cut frame needs more: {cut} of {}", out.len());
        }
    }

    fn props() -> Forwarded {
        Forwarded {
            origin: Some(7),
            payload_is_utf8: Some(true),
            message_expiry: Some(60),
            content_type: Some("text/plain".into()),
            response_topic: Some("r/t".into()),
            correlation_data: Some(vec![1, 2, 3]),
            user_properties: vec![("k".into(), "v".into()), ("a".into(), "".into())],
        }
    }

    #[test]
    fn every_kind_goes_round() {
        round(&Frame::Publish(Publish {
            origin: 9,
            qos: 2,
            retain: true,
            publish_us: 5,
            topic: "a/b",
            props: Some(props()),
            identity: "alice",
            payload: b"x",
        }));
        round(&Frame::Publish(Publish { origin: 0, qos: 0, retain: false, publish_us: 0, topic: "t", props: None, identity: "", payload: b"" }));
        round(&Frame::Interest { add: true, filter: true, name: "a/#" });
        round(&Frame::Interest { add: false, filter: false, name: "a" });
        round(&Frame::Share { join: true, conn: 3, qos: 1, name: "$share/g/a/#" });
        round(&Frame::RetainedWant { conn: 4, qos: 2, sid: 9, filter: "#" });
        round(&Frame::HistoryWant { topic: "*", after: 42 });
        round(&Frame::Stamp { at: u64::MAX });
        round(&Frame::Deliver(Deliver {
            publish_id: 1,
            stream: Stream::Unicast,
            topic: "",
            seq: 0,
            epoch: 0,
            publish_us: 3,
            qos: 1,
            retain: true,
            target: Some(77),
            user: Some("bob"),
            close: true,
            shared: vec![(1, 2), (3, 0)],
            props: Some(Forwarded { origin: Some(1), ..Forwarded::default() }),
            payload: &[0, 255, 10],
        }));
        let rm = RetainedMessage { topic: "r/a", qos: 1, props: Some(props()), payload: b"A" };
        round(&Frame::Retained { conn: 5, qos: 1, sid: 0, messages: vec![rm.clone(), RetainedMessage { props: None, ..rm }] });
        let hm = HistoryMessage { offset: 3, publish_us: 9, payload: b"h" };
        round(&Frame::History { topic: "t", after: 2, epoch: 11, head: 3, oldest: 1, messages: vec![hm, hm] });
    }

    #[test]
    fn bad_frames_are_named_errors_never_panics() {
        assert_eq!(decode(&((MAX_FRAME + 1) as u32).to_le_bytes()), Err(BusError::TooLarge(MAX_FRAME + 1)));
        assert_eq!(decode(&[1, 0, 0, 0, 99]), Err(BusError::UnknownTag(99)));
        assert_eq!(decode(&[2, 0, 0, 0, tag::INTEREST, 0]), Err(BusError::Short("name")));
        let mut out = Vec::new();
        encode(&mut out, &Frame::HistoryWant { topic: "t", after: 1 });
        out.push(0);
        out[0] += 1;
        assert_eq!(decode(&out), Err(BusError::Trailing(1)));
        // A count far beyond the frame allocates nothing.
        let mut forged = vec![0, 0, 0, 0, tag::HISTORY, 1, 0, b't'];
        forged.extend_from_slice(&[0; 28]);
        forged.extend_from_slice(&u32::MAX.to_le_bytes());
        let n = (forged.len() - 4) as u32;
        forged[..4].copy_from_slice(&n.to_le_bytes());
        assert_eq!(decode(&forged), Err(BusError::Short("history messages")));
        let mut q3 = Vec::new();
        encode(&mut q3, &Frame::RetainedWant { conn: 1, qos: 1, sid: 0, filter: "a" });
        q3[13] = 3;
        assert_eq!(decode(&q3), Err(BusError::Range("qos")));
    }

    #[test]
    fn a_frame_buffer_takes_frames_across_reads() {
        let mut bytes = Vec::new();
        for i in 0..50u64 {
            encode(&mut bytes, &Frame::HistoryWant { topic: "topic/x", after: i });
        }
        let mut fb = FrameBuf::default();
        let mut got = Vec::new();
        for chunk in bytes.chunks(7) {
            fb.extend(chunk);
            while let Some(Frame::HistoryWant { after, .. }) = fb.next().unwrap() {
                got.push(after);
            }
        }
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        assert_eq!(fb.pending(), 0);
    }

    #[test]
    fn a_run_opens_with_a_stamp_sealed_when_written() {
        let mut out = Vec::new();
        let run = open_run(&mut out);
        encode(&mut out, &Frame::HistoryWant { topic: "a", after: 1 });
        seal(&mut out, run, 42);
        let next = open_run(&mut out);
        encode(&mut out, &Frame::Interest { add: true, filter: false, name: "a" });
        seal(&mut out, next, 43);
        let mut fb = FrameBuf::default();
        fb.extend(&out[..out.len() - 1]);
        assert!(fb.whole());
        assert_eq!(fb.take_stamp(), Some(42));
        assert_eq!(fb.take_stamp(), None, "one stamp per run");
        assert!(matches!(fb.next().unwrap(), Some(Frame::HistoryWant { after: 1, .. })));
        assert_eq!(fb.take_stamp(), Some(43));
        assert!(!fb.whole(), "the cut last frame waits");
        assert_eq!(fb.take_stamp(), None);
        fb.extend(&out[out.len() - 1..]);
        assert!(fb.whole());
        assert!(matches!(fb.next().unwrap(), Some(Frame::Interest { add: true, .. })));
        let mut fb = FrameBuf::default();
        fb.extend(&out[..STAMP_LEN - 1]);
        assert_eq!(fb.take_stamp(), None, "a cut stamp is not taken");
        assert_eq!(fb.pending(), STAMP_LEN - 1);
    }

    proptest! {
        #[test]
        fn publishes_and_deliveries_round_trip(
            topic in "[a-z/]{0,40}", payload in proptest::collection::vec(any::<u8>(), 0..300),
            origin in any::<u64>(), qos in 0u8..3, retain in any::<bool>(), us in any::<u64>(),
            seq in any::<u64>(), epoch in any::<u32>(), target in proptest::option::of(any::<u64>()),
            user in proptest::option::of("[a-z]{1,10}"), picks in proptest::collection::vec((any::<u64>(), 0u8..3), 0..4),
            expiry in proptest::option::of(any::<u32>()), corr in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
        ) {
            let props = (expiry.is_some() || corr.is_some()).then(|| Forwarded { message_expiry: expiry, correlation_data: corr, ..Forwarded::default() });
            round(&Frame::Publish(Publish { origin, qos, retain, publish_us: us, topic: &topic, props: props.clone(), identity: &topic, payload: &payload }));
            round(&Frame::Deliver(Deliver {
                publish_id: origin, stream: Stream::Topic, topic: &topic, seq, epoch, publish_us: us, qos, retain,
                target, user: user.as_deref(), close: retain, shared: picks, props, payload: &payload,
            }));
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut framed = ((bytes.len()) as u32).to_le_bytes().to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
            let _ = decode(&bytes);
        }
    }
}
