//! The per-connection decoder state: the version once known, and a packet
//! cut by the network.
//!
//! Sixteen bytes per connection: whole packets are decoded in place from
//! the caller's read buffer; only the tail of a read that ends inside a
//! packet is copied into `partial`, which exists only until that packet is
//! complete. `partial` holds at most the packet's fixed header (5 bytes)
//! before its size is known, and after that at most the packet, whose size
//! the header check held to `Limits::max_packet_size`; it grows only as
//! bytes arrive, so a header announcing a large packet costs nothing until
//! its bytes do. The [`Limits`] are passed to each call rather than kept,
//! since every connection of a listener shares them.

use super::decode::{self, FixedHeader};
use super::{kind, Error, Limits, Packet, Role, Version};

/// Decodes a stream of packets from one peer.
#[derive(Debug)]
pub(crate) struct Reader {
    role: Role,
    /// Set from the first CONNECT (server) or by the caller (client).
    version: Option<Version>,
    /// The start of a packet not yet whole; see the module doc.
    partial: Option<Box<Partial>>,
}

/// A packet not yet whole, boxed so an idle reader is one pointer.
#[derive(Debug)]
struct Partial {
    bytes: Vec<u8>,
}

impl Reader {
    /// A server's reader: CONNECT first, which sets the version.
    pub(crate) fn server() -> Reader {
        Reader { role: Role::Server, version: None, partial: None }
    }

    /// A client's reader, for the version its CONNECT asked for.
    pub(crate) fn client(version: Version) -> Reader {
        Reader { role: Role::Client, version: Some(version), partial: None }
    }

    /// The connection's version: known from the CONNECT's protocol level
    /// on, even when the rest of that CONNECT was refused, so the refusal
    /// can be sent in the client's version.
    pub(crate) fn version(&self) -> Option<Version> {
        self.version
    }

    /// Bytes held for a packet cut by the network (0 between packets).
    pub(crate) fn buffered(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.bytes.len())
    }

    /// Decode every whole packet of what has arrived (what was held, then
    /// `input`) and hand each to `on`, in order; keep the rest. Err: a
    /// violation (after which the connection must end; see [`Error`]) or
    /// the callback's own error, which stops the reading (the callback ends
    /// it after a DISCONNECT, for instance).
    pub(crate) fn consume<E: From<Error>>(&mut self, mut input: &[u8], limits: &Limits, mut on: impl FnMut(Packet<'_>) -> Result<(), E>) -> Result<(), E> {
        if let Some(mut partial) = self.partial.take() {
            let held = &mut partial.bytes;
            // Complete the header a byte at a time (at most 4 more), then
            // take exactly the rest of the packet.
            let h = loop {
                if let Some(h) = self.header(held, limits)? {
                    break h;
                }
                let Some((&b, rest)) = input.split_first() else {
                    self.partial = Some(partial);
                    return Ok(());
                };
                held.push(b);
                input = rest;
            };
            let take = (h.total() - held.len()).min(input.len());
            held.extend_from_slice(&input[..take]);
            input = &input[take..];
            if held.len() < h.total() {
                self.partial = Some(partial);
                return Ok(());
            }
            self.decode(&h, &held[h.len..], limits, &mut on)?;
        }
        let mut pos = 0;
        while let Some(h) = self.header(&input[pos..], limits)? {
            if input.len() - pos < h.total() {
                break;
            }
            self.decode(&h, &input[pos + h.len..pos + h.total()], limits, &mut on)?;
            pos += h.total();
        }
        if pos < input.len() {
            self.partial = Some(Box::new(Partial { bytes: input[pos..].to_vec() }));
        }
        Ok(())
    }

    /// The fixed header, with the sequence checked: a server reads CONNECT
    /// first and only once.
    fn header(&self, buf: &[u8], limits: &Limits) -> Result<Option<FixedHeader>, Error> {
        let Some(h) = decode::fixed_header(buf, self.version, limits.max_packet_size)? else { return Ok(None) };
        if self.role == Role::Server && (h.kind == kind::CONNECT) == self.version.is_some() {
            return Err(Error::UnexpectedPacket);
        }
        Ok(Some(h))
    }

    fn decode<E: From<Error>>(&mut self, h: &FixedHeader, body: &[u8], limits: &Limits, on: &mut impl FnMut(Packet<'_>) -> Result<(), E>) -> Result<(), E> {
        if h.kind == kind::CONNECT {
            self.version = Some(decode::connect_version(body)?);
        }
        let Some(version) = self.version else { return Err(Error::UnexpectedPacket.into()) };
        on(decode::packet(h, body, self.role, version, limits)?)
    }
}
