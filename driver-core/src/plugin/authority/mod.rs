//! Makes the kubelet's plugin-registration client acceptable to tonic.
//!
//! The kubelet dials the registration socket with the socket path as the gRPC target, so
//! grpc-go sends that path as the HTTP/2 `:authority`. The h2 server under tonic rejects
//! an authority containing `/` with PROTOCOL_ERROR, and registration never happens. This
//! adapter sits on the accepted connection and rewrites, in the client's HEADERS frames,
//! every byte of an `:authority` value that an authority cannot hold into `-`. The rewrite
//! keeps every length (for a Huffman-coded value each symbol is replaced by one with a code
//! of the same length), so frame sizes and the HPACK dynamic table stay consistent with
//! what the client believes it sent. Nothing else is touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

/// A connection whose incoming HEADERS frames get their `:authority` made valid.
pub struct AuthorityFix<S> {
    inner: S,
    raw: Vec<u8>,
    ready: Vec<u8>,
    ready_pos: usize,
    preface_seen: bool,
    eof: bool,
    /// Within a header block that continues in CONTINUATION frames: whether its fragments
    /// so far ended on a field boundary, so that the next one can be read on its own.
    /// A fragment that starts inside a field is passed on untouched: read from its start
    /// it would be garbage, and rewriting it could change another header's value.
    block: Option<bool>,
}

impl<S> AuthorityFix<S> {
    /// Wraps the connection `inner`.
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            raw: Vec::new(),
            ready: Vec::new(),
            ready_pos: 0,
            preface_seen: false,
            eof: false,
            block: None,
        }
    }

    /// Moves every complete unit (preface, frame) from `raw` to `ready`.
    fn process(&mut self) {
        if !self.preface_seen {
            if self.raw.len() < PREFACE_LEN {
                return;
            }
            self.ready.extend(self.raw.drain(..PREFACE_LEN));
            self.preface_seen = true;
        }
        while self.raw.len() >= FRAME_HEADER_LEN {
            let len = (usize::from(self.raw[0]) << 16)
                | (usize::from(self.raw[1]) << 8)
                | usize::from(self.raw[2]);
            let total = FRAME_HEADER_LEN + len;
            if self.raw.len() < total {
                return;
            }
            let (kind, flags) = (self.raw[3], self.raw[4]);
            let readable = kind == HEADERS || (kind == CONTINUATION && self.block == Some(true));
            if kind == HEADERS || kind == CONTINUATION {
                let payload = &mut self.raw[FRAME_HEADER_LEN..total];
                let mut start = 0;
                let mut end = payload.len();
                if kind == HEADERS {
                    if flags & FLAG_PADDED != 0 && !payload.is_empty() {
                        end = end.saturating_sub(usize::from(payload[0]));
                        start += 1;
                    }
                    if flags & FLAG_PRIORITY != 0 {
                        start += 5;
                    }
                }
                let aligned =
                    readable && start <= end && fix_header_block(&mut payload[start..end]);
                self.block = (flags & FLAG_END_HEADERS == 0).then_some(aligned);
            }
            self.ready.extend(self.raw.drain(..total));
        }
    }
}

impl tonic::transport::server::Connected for AuthorityFix<tokio::net::UnixStream> {
    type ConnectInfo = <tokio::net::UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready_pos < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_pos);
                buf.put_slice(&this.ready[this.ready_pos..this.ready_pos + n]);
                this.ready_pos += n;
                if this.ready_pos == this.ready.len() {
                    this.ready.clear();
                    this.ready_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // Whatever is left is not a whole frame; h2 reports it.
                if this.raw.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.ready.append(&mut this.raw);
                continue;
            }
            let mut tmp = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut tmp);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    if rb.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.raw.extend_from_slice(rb.filled());
                        this.process();
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An HPACK integer with an `n`-bit prefix at `at`: (value, position after it).
fn hpack_int(b: &[u8], at: usize, n: u32) -> Option<(usize, usize)> {
    let max = (1usize << n) - 1;
    let mut v = usize::from(*b.get(at)?) & max;
    let mut i = at + 1;
    if v < max {
        return Some((v, i));
    }
    let mut shift = 0;
    loop {
        let byte = *b.get(i)?;
        i += 1;
        v = v.checked_add(usize::from(byte & 0x7f).checked_shl(shift)?)?;
        if byte & 0x80 == 0 {
            return Some((v, i));
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// An HPACK string literal at `at`: (start, end, huffman).
fn hpack_str(b: &[u8], at: usize) -> Option<(usize, usize, bool)> {
    let huffman = *b.get(at)? & 0x80 != 0;
    let (len, start) = hpack_int(b, at, 7)?;
    let end = start.checked_add(len)?;
    (end <= b.len()).then_some((start, end, huffman))
}

/// Walks one header block (or a fragment of one that starts on a field boundary) and fixes
/// `:authority` values in place. Returns whether it ended on a field boundary.
fn fix_header_block(b: &mut [u8]) -> bool {
    let mut i = 0;
    while i < b.len() {
        let first = b[i];
        if first & 0x80 != 0 {
            // Indexed field: nothing literal to fix.
            match hpack_int(b, i, 7) {
                Some((_, n)) => i = n,
                None => return false,
            }
            continue;
        }
        if first & 0xe0 == 0x20 {
            // Dynamic table size update.
            match hpack_int(b, i, 5) {
                Some((_, n)) => i = n,
                None => return false,
            }
            continue;
        }
        let prefix = if first & 0xc0 == 0x40 { 6 } else { 4 };
        let Some((index, mut n)) = hpack_int(b, i, prefix) else {
            return false;
        };
        // Static table entry 1 is `:authority`.
        let mut is_authority = index == 1;
        if index == 0 {
            let Some((s, e, huffman)) = hpack_str(b, n) else {
                return false;
            };
            is_authority = !huffman && &b[s..e] == b":authority";
            n = e;
        }
        let Some((s, e, huffman)) = hpack_str(b, n) else {
            return false;
        };
        if is_authority {
            if huffman {
                fix_huffman(&mut b[s..e]);
            } else {
                for c in &mut b[s..e] {
                    if !authority_byte(*c) {
                        *c = b'-';
                    }
                }
            }
        }
        i = e;
    }
    true
}

fn authority_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b':')
}

/// The HPACK Huffman codes (RFC 7541, Appendix B) of the characters a socket path is made
/// of: (character, code, bits). A value with any other character is left alone.
const CODES: &[(u8, u32, u32)] = &[
    (b'0', 0x0, 5),
    (b'1', 0x1, 5),
    (b'2', 0x2, 5),
    (b'a', 0x3, 5),
    (b'c', 0x4, 5),
    (b'e', 0x5, 5),
    (b'i', 0x6, 5),
    (b'o', 0x7, 5),
    (b's', 0x8, 5),
    (b't', 0x9, 5),
    (b' ', 0x14, 6),
    (b'%', 0x15, 6),
    (b'-', 0x16, 6),
    (b'.', 0x17, 6),
    (b'/', 0x18, 6),
    (b'3', 0x19, 6),
    (b'4', 0x1a, 6),
    (b'5', 0x1b, 6),
    (b'6', 0x1c, 6),
    (b'7', 0x1d, 6),
    (b'8', 0x1e, 6),
    (b'9', 0x1f, 6),
    (b'=', 0x20, 6),
    (b'A', 0x21, 6),
    (b'_', 0x22, 6),
    (b'b', 0x23, 6),
    (b'd', 0x24, 6),
    (b'f', 0x25, 6),
    (b'g', 0x26, 6),
    (b'h', 0x27, 6),
    (b'l', 0x28, 6),
    (b'm', 0x29, 6),
    (b'n', 0x2a, 6),
    (b'p', 0x2b, 6),
    (b'r', 0x2c, 6),
    (b'u', 0x2d, 6),
    (b':', 0x5c, 7),
    (b'B', 0x5d, 7),
    (b'C', 0x5e, 7),
    (b'D', 0x5f, 7),
    (b'E', 0x60, 7),
    (b'F', 0x61, 7),
    (b'G', 0x62, 7),
    (b'H', 0x63, 7),
    (b'I', 0x64, 7),
    (b'J', 0x65, 7),
    (b'K', 0x66, 7),
    (b'L', 0x67, 7),
    (b'M', 0x68, 7),
    (b'N', 0x69, 7),
    (b'O', 0x6a, 7),
    (b'P', 0x6b, 7),
    (b'Q', 0x6c, 7),
    (b'R', 0x6d, 7),
    (b'S', 0x6e, 7),
    (b'T', 0x6f, 7),
    (b'U', 0x70, 7),
    (b'V', 0x71, 7),
    (b'W', 0x72, 7),
    (b'Y', 0x73, 7),
    (b'j', 0x74, 7),
    (b'k', 0x75, 7),
    (b'q', 0x76, 7),
    (b'v', 0x77, 7),
    (b'w', 0x78, 7),
    (b'x', 0x79, 7),
    (b'y', 0x7a, 7),
    (b'z', 0x7b, 7),
    (b'X', 0xfc, 8),
    (b'Z', 0xfd, 8),
];

fn bits(b: &[u8], pos: usize, n: u32) -> Option<u32> {
    let mut v = 0u32;
    for k in 0..n as usize {
        let p = pos + k;
        let byte = *b.get(p / 8)?;
        v = (v << 1) | u32::from((byte >> (7 - p % 8)) & 1);
    }
    Some(v)
}

fn put_bits(b: &mut [u8], pos: usize, n: u32, v: u32) {
    for k in 0..n as usize {
        let p = pos + k;
        let bit = ((v >> (n as usize - 1 - k)) & 1) as u8;
        let mask = 1u8 << (7 - p % 8);
        if bit == 1 {
            b[p / 8] |= mask;
        } else {
            b[p / 8] &= !mask;
        }
    }
}

/// Decodes the value; if every symbol is known, replaces the ones an authority cannot hold
/// with `-` (same code length) or, failing that, another valid symbol of that length.
fn fix_huffman(b: &mut [u8]) {
    let total = b.len() * 8;
    let mut pos = 0;
    let mut edits = Vec::new();
    'symbols: while pos < total {
        for n in 5..=8 {
            let Some(code) = bits(b, pos, n) else { break };
            if let Some(&(c, _, _)) = CODES.iter().find(|(_, k, l)| *l == n && *k == code) {
                if !authority_byte(c) {
                    let replacement = CODES
                        .iter()
                        .find(|(r, _, l)| *l == n && authority_byte(*r) && *r == b'-')
                        .or_else(|| CODES.iter().find(|(r, _, l)| *l == n && authority_byte(*r)));
                    match replacement {
                        Some(&(_, k, _)) => edits.push((pos, n, k)),
                        None => return,
                    }
                }
                pos += n as usize;
                continue 'symbols;
            }
        }
        // Padding: fewer than 8 bits left, all ones.
        let rest = (total - pos) as u32;
        if rest < 8 && bits(b, pos, rest) == Some((1 << rest) - 1) {
            break;
        }
        return;
    }
    for (pos, n, code) in edits {
        put_bits(b, pos, n, code);
    }
}

#[cfg(test)]
mod tests;
