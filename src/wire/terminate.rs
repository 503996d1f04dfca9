//! RDMAP TERMINATE message (RFC 5040 §4.8) and its error codes (RFC 5040 §7, RFC 5041 §7,
//! RFC 5044 §8 / RFC 6580, RFC 6581 §8).
//!
//! CONTRACT (fixed by the integrator; the RDMA helper implements, may add items).

/// Layer that detected the error (RFC 5040 §4.8, 4 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Rdmap = 0,
    Ddp = 1,
    Llp = 2,
}

/// Layer + Error Type + Error Code: what a TERMINATE reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermCause {
    pub layer: Layer,
    /// Error Type (4 bits).
    pub etype: u8,
    /// Error Code (8 bits).
    pub code: u8,
}

impl TermCause {
    /// LLP layer, MPA error type, CRC error (RFC 5044 §8 code 0x02).
    pub const MPA_CRC: TermCause = TermCause { layer: Layer::Llp, etype: 0, code: 0x02 };
    /// LLP / MPA / marker error (RFC 5044 §8 code 0x03).
    pub const MPA_MARKER: TermCause = TermCause { layer: Layer::Llp, etype: 0, code: 0x03 };
    /// LLP / MPA / invalid ULPDU length (RFC 5044 §8 code 0x01).
    pub const MPA_BAD_LEN: TermCause = TermCause { layer: Layer::Llp, etype: 0, code: 0x01 };
    /// RFC 6581 §8 code 0x05: local catastrophic.
    pub const MPA_LOCAL_CATASTROPHIC: TermCause = TermCause { layer: Layer::Llp, etype: 0, code: 0x05 };
    /// RFC 6581 §8 code 0x06: insufficient IRD resources.
    pub const MPA_INSUFFICIENT_IRD: TermCause = TermCause { layer: Layer::Llp, etype: 0, code: 0x06 };
    /// RFC 6581 §8 code 0x07: no matching RTR option.
    pub const MPA_NO_MATCHING_RTR: TermCause = TermCause { layer: Layer::Llp, etype: 0, code: 0x07 };
}
