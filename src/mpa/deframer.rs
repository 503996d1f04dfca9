//! Streaming FPDU deframer (RFC 5044 §4, §5, §8). CONTRACT (fixed by the integrator).

use crate::wire::terminate::TermCause;

/// Why the stream is broken. After an error the deframer delivers nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeframeError {
    #[error("FPDU CRC error")]
    Crc,
    #[error("marker error")]
    Marker,
    #[error("invalid ULPDU length")]
    BadLength,
}

impl DeframeError {
    /// The TERMINATE cause RFC 5044 §8 assigns.
    pub fn cause(&self) -> TermCause {
        match self {
            DeframeError::Crc => TermCause::MPA_CRC,
            DeframeError::Marker => TermCause::MPA_MARKER,
            DeframeError::BadLength => TermCause::MPA_BAD_LEN,
        }
    }
}

/// Reassembles FPDUs from arbitrarily segmented stream bytes, strips markers, checks CRC.
pub struct Deframer {
    // implementation-defined
}

impl Deframer {
    /// `max_ulpdu` bounds buffering (a larger ULPDU_Length is `BadLength`); stream position 0 is the
    /// first octet after the peer's MPA Request/Reply frame.
    pub fn new(_crc: bool, _markers: bool, _max_ulpdu: usize) -> Self {
        todo!()
    }
    /// Feed bytes; `deliver` is called with each complete, verified ULPDU in stream order. On error
    /// nothing of the failing FPDU has been delivered.
    pub fn push(
        &mut self,
        _input: &[u8],
        _deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), DeframeError> {
        todo!()
    }
}
