//! Wire formats, in smoltcp's style: a checked zero-copy view (`Packet<T: AsRef<[u8]>>`-like) with
//! field getters/setters over a `field` module of offsets, plus a plain `Repr` with `parse`/`emit`.
//!
//! Nothing in here allocates on parse (except where a `Repr` owns private data), and nothing panics
//! on any input: every view has `new_checked` that validates lengths before a getter can index.

pub mod ddp;
pub mod fpdu;
pub mod mpa;
pub mod oncrpc;
pub mod rdmap;
pub mod rpcrdma;
pub mod terminate;
pub mod txbuf;
pub mod xdr;

/// Why bytes could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header (or the length a header field announces).
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Octets required.
        need: usize,
        /// Octets available.
        have: usize,
    },
    /// A field holds a value the spec does not allow.
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

/// Result of wire parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// A big-endian u32 from the first 4 octets of `b` (callers have checked the length).
pub(crate) fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

/// A big-endian u64 from the first 8 octets of `b` (callers have checked the length).
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
