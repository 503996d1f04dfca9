//! CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.4; RFC 3385 for the polynomial choice).
//!
//! (infra helper: pick the implementation by measurement, see benches/crc.rs)

/// CRC32c of `data` (RFC 3385: check value of "123456789" is 0xE3069283).
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Continue a CRC32c over more bytes: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}
