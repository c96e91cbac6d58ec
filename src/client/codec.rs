//! `--codec len:2|len:4[,magic=HEX]`: the length-prefixed framing most
//! home-grown TCP protocols use (game, IoT and IM gateways). Each message
//! goes out as `magic | length (big-endian, of the message alone) |
//! message`, and what comes back is cut at the same boundaries.

/// Largest frame accepted back (a corrupt length would otherwise make the
/// client buffer without bound).
pub(crate) const MAX_FRAME: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Codec {
    /// Bytes of the length field: 2 or 4.
    pub len_bytes: usize,
    pub magic: Vec<u8>,
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "len:{}", self.len_bytes)?;
        if !self.magic.is_empty() {
            write!(f, ",magic=")?;
            for b in &self.magic {
                write!(f, "{b:02x}")?;
            }
        }
        Ok(())
    }
}

/// Parse `--codec`.
pub(crate) fn parse(s: &str) -> Result<Codec, String> {
    let mut parts = s.split(',');
    let len_bytes = match parts.next() {
        Some("len:2") => 2,
        Some("len:4") => 4,
        other => return Err(format!("unknown codec {:?}: use len:2 or len:4, optionally with ,magic=HEX (e.g. len:2,magic=cafe)", other.unwrap_or(""))),
    };
    let mut magic = Vec::new();
    for p in parts {
        let hex = p.strip_prefix("magic=").ok_or_else(|| format!("unknown codec option {p:?}: the only option is magic=HEX"))?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("magic={hex} is not hex (e.g. magic=cafe)"));
        }
        if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 16 {
            return Err(format!("magic={hex}: give 1 to 8 bytes as an even number of hex digits"));
        }
        magic = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("magic={hex} is not hex"))?;
    }
    Ok(Codec { len_bytes, magic })
}

impl Codec {
    /// Largest message the length field can carry.
    pub(crate) fn max_message(&self) -> usize {
        if self.len_bytes == 2 {
            u16::MAX as usize
        } else {
            MAX_FRAME
        }
    }

    /// The header for a message of `len` bytes.
    pub(crate) fn header(&self, out: &mut Vec<u8>, len: usize) {
        out.extend_from_slice(&self.magic);
        match self.len_bytes {
            2 => out.extend_from_slice(&(len as u16).to_be_bytes()),
            _ => out.extend_from_slice(&(len as u32).to_be_bytes()),
        }
    }

    /// The next whole frame at the start of `buf`: (message, bytes used),
    /// `Ok(None)` until it is all here.
    pub(crate) fn next<'a>(&self, buf: &'a [u8]) -> Result<Option<(&'a [u8], usize)>, &'static str> {
        let head = self.magic.len() + self.len_bytes;
        if buf.len() < head {
            // Check what magic there is already: a mismatch is known early.
            let n = buf.len().min(self.magic.len());
            return if buf[..n] == self.magic[..n] { Ok(None) } else { Err("codec_bad_magic") };
        }
        if buf[..self.magic.len()] != self.magic[..] {
            return Err("codec_bad_magic");
        }
        let l = &buf[self.magic.len()..head];
        let len = l.iter().fold(0usize, |acc, b| acc << 8 | *b as usize);
        if len > MAX_FRAME {
            return Err("codec_frame_too_long");
        }
        Ok(buf.get(head..head + len).map(|m| (m, head + len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn codecs_parse_or_say_why_not() {
        assert_eq!(parse("len:2").unwrap(), Codec { len_bytes: 2, magic: vec![] });
        assert_eq!(parse("len:4,magic=CAFE").unwrap(), Codec { len_bytes: 4, magic: vec![0xca, 0xfe] });
        assert_eq!(parse("len:4,magic=CAFE").unwrap().to_string(), "len:4,magic=cafe");
        assert!(parse("len:3").unwrap_err().contains("len:2 or len:4"));
        assert!(parse("len:2,magic=abc").unwrap_err().contains("even"));
        assert!(parse("len:2,magic=zz").unwrap_err().contains("not hex"));
        assert!(parse("len:2,crc").unwrap_err().contains("magic=HEX"));
        // Found by fuzz/run.sh (cli_values): a multi-byte character
        // used to be sliced through and panic.
        assert!(parse("len:4,magic=caI\u{FFFD}GP").unwrap_err().contains("not hex"));
    }

    #[test]
    fn bad_magic_and_huge_lengths_are_refused() {
        let c = parse("len:4,magic=beef").unwrap();
        assert_eq!(c.next(&[0xbe]), Ok(None));
        assert_eq!(c.next(&[0xbe, 0x00]), Err("codec_bad_magic"));
        assert_eq!(c.next(&[0xbe, 0xef, 0xff, 0xff, 0xff, 0xff]), Err("codec_frame_too_long"));
    }

    proptest! {
        #[test]
        fn frames_roundtrip(msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 1..5), four: bool, magic in proptest::collection::vec(any::<u8>(), 0..4)) {
            let c = Codec { len_bytes: if four { 4 } else { 2 }, magic };
            let mut buf = Vec::new();
            for m in &msgs {
                c.header(&mut buf, m.len());
                buf.extend_from_slice(m);
            }
            let mut pos = 0;
            let mut got = Vec::new();
            while let Some((m, used)) = c.next(&buf[pos..]).unwrap() {
                got.push(m.to_vec());
                pos += used;
            }
            prop_assert_eq!(pos, buf.len());
            prop_assert_eq!(got, msgs);
        }
    }
}
