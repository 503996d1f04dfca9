//! Where an outgoing FPDU is built: a growable `Vec<u8>` (the staging path) or a fixed slice —
//! the free space of the TCP transmit ring, so that an FPDU is gathered from registered memory
//! once, straight to where TCP sends (and retransmits) it from (docs/datapath.md "Copies").
//!
//! A [`SliceBuf`] never grows: callers size what they append by [`TxBuf::room`]. Appending more
//! than fits is a caller bug; the excess is dropped and [`SliceBuf::overflowed`] reports it, so
//! the framer discards the FPDU instead of putting a truncated one on the wire.

/// An append-only byte buffer for building FPDUs.
pub trait TxBuf {
    /// Octets written so far.
    fn len(&self) -> usize;
    /// True when nothing is written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Octets that can still be appended (`usize::MAX` for a `Vec`).
    fn room(&self) -> usize;
    /// Append `b`.
    fn put(&mut self, b: &[u8]);
    /// Append `n` zero octets and return them for the caller to fill.
    fn put_zeroed(&mut self, n: usize) -> &mut [u8];
    /// Drop everything after the first `n` octets.
    fn truncate(&mut self, n: usize);
    /// The octets written from `start` on.
    fn written_mut(&mut self, start: usize) -> &mut [u8];
}

impl TxBuf for Vec<u8> {
    #[inline]
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline]
    fn room(&self) -> usize {
        usize::MAX
    }
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    #[inline]
    fn put_zeroed(&mut self, n: usize) -> &mut [u8] {
        let start = Vec::len(self);
        self.resize(start + n, 0);
        &mut self[start..]
    }
    #[inline]
    fn truncate(&mut self, n: usize) {
        Vec::truncate(self, n);
    }
    #[inline]
    fn written_mut(&mut self, start: usize) -> &mut [u8] {
        &mut self[start..]
    }
}

/// A [`TxBuf`] over a caller's slice (e.g. the contiguous free part of a TCP transmit ring).
pub struct SliceBuf<'a> {
    buf: &'a mut [u8],
    len: usize,
    overflowed: bool,
}

impl<'a> SliceBuf<'a> {
    /// An empty buffer over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceBuf {
            buf,
            len: 0,
            overflowed: false,
        }
    }

    /// Whether an append did not fit (and was cut).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Forget an overflow (after the caller truncated the damaged part).
    pub fn clear_overflow(&mut self) {
        self.overflowed = false;
    }
}

impl TxBuf for SliceBuf<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn room(&self) -> usize {
        self.buf.len() - self.len
    }
    #[inline]
    fn put(&mut self, b: &[u8]) {
        let n = b.len().min(self.room());
        if n < b.len() {
            self.overflowed = true;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }
    #[inline]
    fn put_zeroed(&mut self, n: usize) -> &mut [u8] {
        let m = n.min(self.room());
        if m < n {
            self.overflowed = true;
        }
        let start = self.len;
        self.len += m;
        let s = &mut self.buf[start..self.len];
        s.fill(0);
        s
    }
    #[inline]
    fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }
    #[inline]
    fn written_mut(&mut self, start: usize) -> &mut [u8] {
        &mut self.buf[start.min(self.len)..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_buf_cuts_and_reports_overflow() {
        let mut raw = [9u8; 8];
        let mut b = SliceBuf::new(&mut raw);
        b.put(&[1, 2, 3]);
        assert_eq!(b.room(), 5);
        b.put_zeroed(2)[1] = 7;
        assert!(!b.overflowed());
        b.put(&[4, 5, 6, 8]);
        assert!(b.overflowed());
        assert_eq!(b.len(), 8);
        b.truncate(5);
        assert_eq!(b.written_mut(3), &[0, 7]);
        assert_eq!(raw, [1, 2, 3, 0, 7, 4, 5, 6]);
    }

    #[test]
    fn vec_and_slice_agree() {
        let mut v = Vec::new();
        let mut raw = [0u8; 16];
        let mut s = SliceBuf::new(&mut raw);
        for b in [&mut v as &mut dyn TxBuf, &mut s] {
            b.put(&[1, 2]);
            b.put_zeroed(3)[0] = 5;
            b.truncate(4);
            b.put(&[6]);
        }
        let n = s.len();
        assert_eq!(v, raw[..n].to_vec());
    }
}
