//! FPDU framer (RFC 5044 §4, §5, App. A). CONTRACT (fixed by the integrator).

/// Builds FPDUs: ULPDU_Length, ULPDU, pad to 4, CRC32c (or zero), markers every 512 octets.
pub struct Framer {
    // implementation-defined
}

impl Framer {
    /// `crc`: compute CRC (else the field is zero). `markers`: insert markers; stream position 0
    /// is the first octet after the MPA Request/Reply frame this side sent (RFC 5044 §5).
    pub fn new(_crc: bool, _markers: bool) -> Self {
        todo!()
    }
    /// The largest ULPDU such that a whole FPDU (with markers if on) fits in `emss` bytes
    /// (RFC 5044 §4.2 MULPDU, App. A).
    pub fn mulpdu_for_emss(_emss: usize, _markers: bool) -> usize {
        todo!()
    }
    /// Append one FPDU carrying `header ++ payload` (<= 65535 bytes together) to `out`.
    pub fn emit(&mut self, _header: &[u8], _payload: &[u8], _out: &mut Vec<u8>) {
        todo!()
    }
}
