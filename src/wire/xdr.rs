//! XDR (RFC 4506) primitives: a bounds-checked reader over a byte slice and an appending writer.
//!
//! XDR is a stream format, so instead of a fixed-offset view this module offers a cursor
//! ([`XdrReader`]) whose every getter checks the remaining length first and returns
//! [`Error::Truncated`] rather than indexing out of bounds, and a writer ([`XdrWriter`]) that
//! appends to a `Vec<u8>`. Variable-length items take a caller-given maximum so a hostile length
//! word never drives an allocation (RFC 4506 §4.10 lets the protocol bound them).
//!
//! The RPC-over-RDMA draft's RDMA_MSGP padding (draft-ietf-nfsv4-rpcrdma-01 §3.5) is an XDR-level
//! rule: opaque data of at least `thresh` bytes starts at an offset that is a multiple of `align`
//! counted from the start of the RDMA Send. Both the reader and the writer can be told the rule
//! and the stream's base offset; they then insert/skip the pad bytes after the length word.
//!
//! No maintained crate fit: `xdr-codec` is unmaintained since 2019 and serde-based crates cannot
//! express per-field bounds, MSGP padding or the chunk positions RPC-over-RDMA needs.

use super::{Error, Result};

/// Bytes of XDR padding after `len` bytes of opaque data (RFC 4506 §3: units of 4).
pub fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// `len` rounded up to a multiple of 4.
pub fn padded(len: usize) -> usize {
    len + pad_len(len)
}

/// RDMA_MSGP padding rule (draft §3.5): opaque data of `thresh` bytes or more is aligned to
/// `align` (a power of two >= 4) counted from the start of the Send message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padding {
    /// `rdma_align`: the alignment, in bytes, of qualifying opaque data (draft §3.5).
    pub align: u32,
    /// `rdma_thresh`: the smallest opaque length that gets padded (draft §3.5).
    pub thresh: u32,
}

impl Padding {
    /// Check the values a peer sent: `align` must be a power of two in 4..=65536.
    pub fn validate(self) -> Result<Self> {
        if !self.align.is_power_of_two() || !(4..=65536).contains(&self.align) {
            return Err(Error::Malformed(
                "RDMA_MSGP align not a power of two in 4..=65536",
            ));
        }
        Ok(self)
    }

    /// Pad bytes needed so that data at absolute offset `at` becomes aligned, if `len` qualifies.
    pub fn pad_before(self, at: usize, len: usize) -> usize {
        if (len as u64) < u64::from(self.thresh) || self.align < 4 {
            return 0;
        }
        let a = self.align as usize;
        (a - (at % a)) % a
    }
}

/// A bounds-checked XDR decoding cursor.
#[derive(Debug, Clone)]
pub struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Absolute offset of `buf[0]` in the message (for chunk positions and MSGP alignment).
    base: usize,
    padding: Option<Padding>,
    /// Added to `position()` for MSGP alignment (alignment counts from the Send's first byte).
    pad_offset: usize,
}

impl<'a> XdrReader<'a> {
    /// A reader over `buf`, whose first byte is at offset 0 of the message.
    pub fn new(buf: &'a [u8]) -> Self {
        XdrReader {
            buf,
            pos: 0,
            base: 0,
            padding: None,
            pad_offset: 0,
        }
    }

    /// A reader over `buf` whose first byte is at absolute offset `base` of the message.
    pub fn with_base(buf: &'a [u8], base: usize) -> Self {
        XdrReader {
            buf,
            pos: 0,
            base,
            padding: None,
            pad_offset: 0,
        }
    }

    /// Apply RDMA_MSGP padding when decoding opaque data; `pad_offset` is the Send offset of
    /// position 0 (the RPC-over-RDMA header length).
    pub fn set_padding(&mut self, p: Option<Padding>, pad_offset: usize) {
        self.padding = p;
        self.pad_offset = pad_offset;
    }

    /// Bytes consumed so far.
    pub fn consumed(&self) -> usize {
        self.pos
    }

    /// Absolute position (base + consumed): the XDR position RFC 8166 §3.4.5 read chunks name.
    pub fn position(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not yet consumed.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Truncated {
                need: self.pos.saturating_add(n),
                have: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// An unsigned 32-bit integer (RFC 4506 §4.2).
    pub fn get_u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A signed 32-bit integer (RFC 4506 §4.1).
    pub fn get_i32(&mut self) -> Result<i32> {
        self.get_u32().map(|v| v as i32)
    }

    /// An unsigned hyper (RFC 4506 §4.5).
    pub fn get_u64(&mut self) -> Result<u64> {
        let hi = self.get_u32()?;
        let lo = self.get_u32()?;
        Ok((u64::from(hi) << 32) | u64::from(lo))
    }

    /// A boolean (RFC 4506 §4.4): 0 or 1, anything else is malformed.
    pub fn get_bool(&mut self) -> Result<bool> {
        match self.get_u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Error::Malformed("XDR bool not 0 or 1")),
        }
    }

    /// Fixed-length opaque data of `n` bytes plus its padding (RFC 4506 §4.9).
    pub fn get_fixed(&mut self, n: usize) -> Result<&'a [u8]> {
        let d = self.take(n)?;
        self.take(pad_len(n))?;
        Ok(d)
    }

    /// The length word of variable-length opaque data, checked against `max` (RFC 4506 §4.10).
    pub fn get_len(&mut self, max: usize) -> Result<usize> {
        let n = self.get_u32()? as usize;
        if n > max {
            return Err(Error::Malformed("XDR opaque longer than its bound"));
        }
        Ok(n)
    }

    /// Skip RDMA_MSGP pad bytes before `len` bytes of opaque data, if the padding rule applies.
    pub fn skip_msgp_pad(&mut self, len: usize) -> Result<()> {
        if let Some(p) = self.padding {
            let n = p.pad_before(self.position() + self.pad_offset, len);
            self.take(n)?;
        }
        Ok(())
    }

    /// Variable-length opaque data of at most `max` bytes (RFC 4506 §4.10), honouring RDMA_MSGP
    /// padding when set.
    pub fn get_opaque(&mut self, max: usize) -> Result<&'a [u8]> {
        let n = self.get_len(max)?;
        self.skip_msgp_pad(n)?;
        self.get_fixed(n)
    }

    /// A string of at most `max` bytes (RFC 4506 §4.11); bytes are not required to be UTF-8.
    pub fn get_string(&mut self, max: usize) -> Result<&'a [u8]> {
        self.get_opaque(max)
    }
}

/// Bytes an empty [`XdrWriter`] allocates when it is first written to.
pub const FIRST_ROOM: usize = 128;

/// An appending XDR encoder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XdrWriter {
    buf: Vec<u8>,
    base: usize,
    padding: Option<Padding>,
    pad_offset: usize,
}

impl XdrWriter {
    /// An empty writer whose first byte lands at offset 0 of the message.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer with room for `cap` bytes before it reallocates (a message encoder that
    /// knows its usual size avoids growing the buffer step by step on every call).
    pub fn with_capacity(cap: usize) -> Self {
        XdrWriter {
            buf: Vec::with_capacity(cap),
            ..Self::default()
        }
    }

    /// An empty writer over `buf`'s allocation (cleared): an encoder that runs once per message
    /// hands its buffer back with [`XdrWriter::into_vec`] and reuses it for the next one.
    pub fn reusing(mut buf: Vec<u8>) -> Self {
        buf.clear();
        XdrWriter {
            buf,
            ..Self::default()
        }
    }

    /// An empty writer whose first byte lands at absolute offset `base` of the message.
    pub fn with_base(base: usize) -> Self {
        XdrWriter {
            buf: Vec::new(),
            base,
            padding: None,
            pad_offset: 0,
        }
    }

    /// Apply RDMA_MSGP padding when encoding opaque data; `pad_offset` is the Send offset of
    /// position 0 (the RPC-over-RDMA header length).
    pub fn set_padding(&mut self, p: Option<Padding>, pad_offset: usize) {
        self.padding = p;
        self.pad_offset = pad_offset;
    }

    /// Room for at least `n` more bytes without reallocating.
    pub fn reserve(&mut self, n: usize) {
        self.buf.reserve(n);
    }

    /// Absolute position of the next byte.
    pub fn position(&self) -> usize {
        self.base + self.buf.len()
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Nothing written yet.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The encoded bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// Take the encoded bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Room for `n` more bytes. An empty writer's first growth takes [`FIRST_ROOM`] at once:
    /// RPC arguments and results are mostly tens to a few hundred octets, and a `Vec` would
    /// otherwise reallocate its way up from 8 bytes, four or five times per message.
    #[inline]
    fn room(&mut self, n: usize) {
        if self.buf.capacity() - self.buf.len() < n {
            self.grow(n);
        }
    }

    #[cold]
    fn grow(&mut self, n: usize) {
        self.buf.reserve(n.max(FIRST_ROOM));
    }

    /// Append raw, already-encoded bytes.
    pub fn put_raw(&mut self, b: &[u8]) {
        self.room(b.len());
        self.buf.extend_from_slice(b);
    }

    /// An unsigned 32-bit integer, big-endian (RFC 4506 §4.2).
    pub fn put_u32(&mut self, v: u32) {
        self.room(4);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A signed 32-bit integer, two's complement (RFC 4506 §4.1).
    pub fn put_i32(&mut self, v: i32) {
        self.put_u32(v as u32)
    }

    /// An unsigned hyper, big-endian (RFC 4506 §4.5).
    pub fn put_u64(&mut self, v: u64) {
        self.room(8);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A boolean as the integer 0 or 1 (RFC 4506 §4.4).
    pub fn put_bool(&mut self, v: bool) {
        self.put_u32(u32::from(v))
    }

    /// Fixed-length opaque plus padding.
    pub fn put_fixed(&mut self, d: &[u8]) {
        self.room(d.len() + 3);
        self.buf.extend_from_slice(d);
        self.buf.resize(self.buf.len() + pad_len(d.len()), 0);
    }

    /// RDMA_MSGP pad bytes before `len` bytes of opaque data, if the rule applies.
    pub fn put_msgp_pad(&mut self, len: usize) {
        if let Some(p) = self.padding {
            let n = p.pad_before(self.position() + self.pad_offset, len);
            self.buf.resize(self.buf.len() + n, 0);
        }
    }

    /// Variable-length opaque: length, (MSGP pad), data, XDR pad.
    pub fn put_opaque(&mut self, d: &[u8]) {
        self.put_u32(d.len() as u32);
        self.put_msgp_pad(d.len());
        self.put_fixed(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut w = XdrWriter::new();
        w.put_u32(7);
        w.put_u64(0x0102_0304_0506_0708);
        w.put_bool(true);
        w.put_opaque(b"hello");
        w.put_i32(-2);
        assert_eq!(w.len(), 4 + 8 + 4 + 4 + 8 + 4);
        let b = w.into_vec();
        let mut r = XdrReader::new(&b);
        assert_eq!(r.get_u32().unwrap(), 7);
        assert_eq!(r.get_u64().unwrap(), 0x0102_0304_0506_0708);
        assert!(r.get_bool().unwrap());
        assert_eq!(r.get_opaque(16).unwrap(), b"hello");
        assert_eq!(r.get_i32().unwrap(), -2);
        assert_eq!(r.remaining(), 0);
        assert!(matches!(r.get_u32(), Err(Error::Truncated { .. })));
        let mut r = XdrReader::new(&b[16..]);
        assert!(matches!(r.get_opaque(4), Err(Error::Malformed(_))));
        let mut r = XdrReader::new(&[0, 0, 0, 2]);
        assert!(r.get_bool().is_err());
        // A huge length word is refused before anything is read.
        let mut r = XdrReader::new(&[0xff, 0xff, 0xff, 0xff, 1, 2]);
        assert!(r.get_opaque(usize::MAX).is_err());
    }

    #[test]
    fn msgp_padding_aligns_data() {
        let p = Padding {
            align: 64,
            thresh: 16,
        };
        let mut w = XdrWriter::new();
        w.set_padding(Some(p), 28);
        w.put_u32(1);
        w.put_opaque(&[9u8; 20]);
        w.put_opaque(&[7u8; 3]); // below the threshold: no pad
        let b = w.into_vec();
        // Data must start at an absolute offset that is a multiple of 64.
        let data_at = 28 + 4 + 4;
        let pad = (64 - data_at % 64) % 64;
        assert_eq!(b[8 + pad..8 + pad + 20], [9u8; 20]);
        let mut r = XdrReader::new(&b);
        r.set_padding(Some(p), 28);
        r.get_u32().unwrap();
        assert_eq!(r.get_opaque(100).unwrap(), &[9u8; 20]);
        assert_eq!(r.get_opaque(100).unwrap(), &[7u8; 3]);
        assert_eq!(r.remaining(), 0);
        assert!(Padding {
            align: 6,
            thresh: 0
        }
        .validate()
        .is_err());
    }
}
