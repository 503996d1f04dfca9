//! CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.4; RFC 3385 for the polynomial choice).
//!
//! The implementation is chosen by measurement (`benches/crc.rs`, results in `docs/crc.md`):
//! `crc-fast` folds 64 bytes per step with VPCLMULQDQ (or PCLMULQDQ, or the ARM equivalents) and
//! detects the CPU's features once at run time, so the same binary is fast everywhere; on the
//! development machines it beats the SSE4.2 `crc32`-instruction loop of the `crc32c` crate by
//! several times from 512 bytes up, which is where FPDUs live.
//!
//! Both functions work on the *finished* CRC value (reflected, initial value and final XOR
//! 0xFFFFFFFF, RFC 3385); MPA puts that value on the wire least-significant byte first, as the
//! Linux siw peer does (see the peer notes), which is the framer's business, not this module's.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC32c of `data` (RFC 5044 §4.4; RFC 3385: the check value of "123456789" is 0xE3069283).
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// Continue a CRC32c over more bytes: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`, and
/// `crc32c_append(0, b) == crc32c(b)`.
///
/// The streaming deframer and the framer use this to cover an FPDU's header, payload and pad in
/// pieces without copying them together (RFC 5044 §4.4: the CRC covers the whole FPDU except the
/// CRC field itself, with markers included).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    if crc == 0 {
        // The common first call: skip building a Digest.
        return crc32c(data);
    }
    // The finished CRC is the register XOR 0xFFFFFFFF; undo that to resume the register.
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc3385_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn empty_input_is_zero_and_append_of_nothing_is_identity() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c_append(0xE306_9283, b""), 0xE306_9283);
    }

    /// RFC 3720 (iSCSI) Appendix B.4 test vectors, which use the same CRC32c.
    #[test]
    fn rfc3720_b4_vectors() {
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        let dec: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(crc32c(&dec), 0x113F_DB5C);
    }

    #[test]
    fn agrees_with_the_crc32c_crate_across_simd_block_boundaries() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) as u8)
            .collect();
        for n in [
            0, 1, 7, 8, 15, 16, 31, 63, 64, 65, 127, 128, 255, 256, 511, 4096, 70_000,
        ] {
            assert_eq!(crc32c(&data[..n]), crc32c::crc32c(&data[..n]), "len {n}");
        }
    }

    proptest! {
        #[test]
        fn append_equals_whole(a in proptest::collection::vec(any::<u8>(), 0..2048),
                               b in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            prop_assert_eq!(crc32c_append(crc32c(&a), &b), crc32c(&whole));
            prop_assert_eq!(crc32c(&whole), crc32c::crc32c(&whole));
        }

        #[test]
        fn append_in_many_pieces(data in proptest::collection::vec(any::<u8>(), 0..4096),
                                 cuts in proptest::collection::vec(0usize..4096, 0..8)) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut crc = 0;
            let mut at = 0;
            for c in cuts.into_iter().chain(std::iter::once(data.len())) {
                crc = crc32c_append(crc, &data[at..c]);
                at = c;
            }
            prop_assert_eq!(crc, crc32c(&data));
        }
    }
}
