//! Whole ttrpc messages on one logical connection's byte stream.
//!
//! The multiplexer carries bytes, but an [`Intercept`](super::Intercept) answers whole
//! requests outside ttrpc, so on the connection it watches the multiplexer has to know where
//! messages begin and end: to hand the intercept whole requests, and to put its answers
//! between ttrpc's own messages, never inside one (ttrpc writes a large message as several
//! frames). A ttrpc message is a 10-byte header (payload length u32, stream id u32, type u8,
//! flags u8; big-endian) and the payload.

use std::mem;

use ttrpc::proto::{MESSAGE_HEADER_LENGTH, MESSAGE_LENGTH_MAX};

/// The runtime reads the start of every message through a 4096-byte bufio buffer, so the
/// first frame of a message must fit it (see the module note of [`super`]).
const FIRST_FRAME_MAX: usize = 4096;

fn payload_len(header: &[u8]) -> usize {
    u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize
}

/// Part of the incoming byte stream, as [`Incoming::push`] cuts it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// One whole message, header included: the intercept may take it.
    Message(Vec<u8>),
    /// Bytes of a message too large for ttrpc, passed on as they come so that ttrpc refuses
    /// it as it does any such message, without the multiplexer holding it.
    Bytes(Vec<u8>),
}

/// Cuts an incoming byte stream into whole messages.
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    /// Bytes of a message not yet whole.
    buf: Vec<u8>,
    /// Bytes of an oversized message still to pass through.
    pass: usize,
}

impl Incoming {
    /// Adds one frame's bytes; appends to `out` what is now whole. A frame holding exactly
    /// one message, as the runtime sends every message of up to 4086 bytes, is not copied.
    pub(crate) fn push(&mut self, mut frame: Vec<u8>, out: &mut Vec<Piece>) {
        if self.pass > 0 {
            let n = self.pass.min(frame.len());
            self.pass -= n;
            let rest = frame.split_off(n);
            out.push(Piece::Bytes(frame));
            frame = rest;
            if frame.is_empty() {
                return;
            }
        }
        if self.buf.is_empty() {
            self.buf = frame;
        } else {
            self.buf.extend_from_slice(&frame);
        }
        while self.buf.len() >= MESSAGE_HEADER_LENGTH {
            let len = payload_len(&self.buf);
            let have = self.buf.len() - MESSAGE_HEADER_LENGTH;
            if len > MESSAGE_LENGTH_MAX {
                let take = have.min(len);
                self.pass = len - take;
                let rest = self.buf.split_off(MESSAGE_HEADER_LENGTH + take);
                out.push(Piece::Bytes(mem::replace(&mut self.buf, rest)));
                continue;
            }
            if have < len {
                return;
            }
            let rest = self.buf.split_off(MESSAGE_HEADER_LENGTH + len);
            out.push(Piece::Message(mem::replace(&mut self.buf, rest)));
        }
    }
}

/// Where an outgoing byte stream stands: inside a message or between two.
#[derive(Debug, Default)]
pub(crate) struct Boundary {
    header: [u8; MESSAGE_HEADER_LENGTH],
    have: usize,
    body_left: usize,
}

impl Boundary {
    /// Follows `data`, written after what was fed before.
    pub(crate) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (MESSAGE_HEADER_LENGTH - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == MESSAGE_HEADER_LENGTH {
                self.have = 0;
                self.body_left = payload_len(&self.header);
            }
        }
    }

    /// Whether every message begun so far is whole.
    pub(crate) fn between(&self) -> bool {
        self.have == 0 && self.body_left == 0
    }
}

/// The frame payloads `message` goes out as, cut the way ttrpc writes: the header and the
/// first bytes in a frame the runtime's buffer holds, then the rest.
pub(crate) fn frame_payloads(message: &[u8]) -> impl Iterator<Item = &[u8]> {
    let first = message.len().min(FIRST_FRAME_MAX);
    let (head, rest) = message.split_at(first);
    std::iter::once(head)
        .chain(rest.chunks(super::MAX_PAYLOAD))
        .filter(|p| !p.is_empty())
}
