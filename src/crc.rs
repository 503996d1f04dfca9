//! CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.4; RFC 3385 for the polynomial choice).
//!
//! The implementation is chosen by measurement (`benches/crc.rs`, results in `docs/crc.md`):
//! `crc-fast` folds 384-octet blocks with VPCLMULQDQ (or PCLMULQDQ, or the ARM equivalents) and
//! detects the CPU's features once at run time; it beats the SSE4.2 `crc32`-instruction loop of
//! the `crc32c` crate by several times from 512 bytes up, which is where FPDUs live. What is left
//! after its last whole block (up to 446 octets; about 290 of an FPDU at MTU 1500) crc-fast runs
//! as one serial `crc32` chain; x86-64 builds run it as three chains instead (module `tail`),
//! which do not wait for each other. That is on CPUs with AVX-512, where crc-fast folds 512
//! bits at a time. On x86-64 CPUs without it, crc-fast's 128-bit folding is slower than
//! `crc32` chains, so the whole input runs on three chains (chosen at run time; docs/crc.md "A
//! host without AVX-512").
//!
//! Both functions work on the *finished* CRC value (reflected, initial value and final XOR
//! 0xFFFFFFFF, RFC 3385); MPA puts that value on the wire least-significant byte first, as the
//! Linux siw peer does (see the peer notes), which is the framer's business, not this module's.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC32c of `data` (RFC 5044 §4.4; RFC 3385: the check value of "123456789" is 0xE3069283).
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// Continue a CRC32c over more bytes: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`, and
/// `crc32c_append(0, b) == crc32c(b)`.
///
/// The streaming deframer and the framer use this to cover an FPDU's header, payload and pad in
/// pieces without copying them together (RFC 5044 §4.4: the CRC covers the whole FPDU except the
/// CRC field itself, with markers included).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    // The finished CRC is the register XOR 0xFFFFFFFF; undo that to resume the register.
    !update(!crc, data)
}

/// Which code computes the CRC in this build on this CPU: [`FPDU_TAIL`] where crc-fast folds
/// with AVX-512, [`CHAINS`] on other x86-64 CPUs, "crc-fast" in builds without SSE4.2 and
/// PCLMULQDQ.
pub fn implementation() -> &'static str {
    if !tail::AVAILABLE {
        "crc-fast"
    } else if tail::wide_folding() {
        FPDU_TAIL
    } else {
        CHAINS
    }
}

/// crc-fast for whole 384-octet blocks, then the remainder on three interleaved `crc32` streams.
pub const FPDU_TAIL: &str = "crc-fast blocks + three-stream sse4.2 tail";

/// Three interleaved `crc32` streams over the whole input, in pieces (x86-64 without AVX-512,
/// where crc-fast's 128-bit folding is slower: docs/crc.md "A host without AVX-512").
pub const CHAINS: &str = "three-stream sse4.2 (no AVX-512)";

/// The CRC register (no initial or final XOR) after `data`, starting from `reg`.
///
/// crc-fast folds 384-octet blocks with VPCLMULQDQ (on CPUs that have it), but runs its 64-octet
/// alignment prefix and everything after the last whole block through the serial `crc32`
/// instruction, each waiting for the last: for an FPDU at MTU 1500 (1444 octets) that serial
/// tail is about 290 octets, most of the CRC's time (docs/crc.md). So crc-fast gets only whole
/// blocks, and the remainder runs on three independent `crc32` chains whose registers are
/// combined with carry-less multiplies ([`tail`]).
#[inline]
fn update(reg: u32, data: &[u8]) -> u32 {
    if !tail::AVAILABLE {
        return crc_fast_update(reg, data);
    }
    if !tail::wide_folding() {
        // Without AVX-512 crc-fast folds with 128-bit PCLMULQDQ, slower here than three
        // `crc32` chains over the whole input (docs/crc.md "A host without AVX-512").
        return tail::update_chained(reg, data);
    }
    // crc-fast aligns to 64 octets first, then folds while 384 octets remain.
    let prefix = data.as_ptr().align_offset(64).min(data.len());
    let blocks = (data.len() - prefix) / 384;
    if blocks == 0 {
        return tail::update(reg, data);
    }
    let (head, rest) = data.split_at(prefix + blocks * 384);
    if rest.len() < tail::THREE_STREAMS_FROM {
        // crc-fast's own serial tail is as fast here, without the split.
        return crc_fast_update(reg, data);
    }
    // Starting the remainder's chains from zero, before the blocks, and shifting the blocks'
    // register past them afterwards is no faster (`cargo bench --bench crc`).
    tail::update(crc_fast_update(reg, head), rest)
}

#[inline]
fn crc_fast_update(reg: u32, data: &[u8]) -> u32 {
    if reg == !0 {
        // A fresh CRC: crc-fast's one-shot entry, no Digest to build.
        return !crc_fast::crc32_iscsi(data) as u32;
    }
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(reg));
    d.update(data);
    !(d.finalize() as u32)
}

/// The remainder after crc-fast's blocks, with the `crc32` instruction (SSE4.2) and PCLMULQDQ.
///
/// Compiled when the build enables both target features (`.cargo/config.toml` does, for every
/// x86-64 CPU since 2010; DPDK itself needs SSE4.2), so there is no run-time dispatch and no
/// `unsafe` here: `safe_arch` offers the intrinsics as safe functions exactly when the build has
/// their features. Other builds use crc-fast alone, with the same results.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse4.2",
    target_feature = "pclmulqdq"
))]
mod tail {
    use safe_arch::{
        crc32_u64, crc32_u8, get_i64_from_m128i_s, mul_i64_carryless_m128i, set_i32_m128i_s,
    };

    pub const AVAILABLE: bool = true;

    /// Below this many octets one serial chain beats three chains plus the combining.
    pub const THREE_STREAMS_FROM: usize = 160;
    /// A remainder is under 384 + 63 octets (the blocks' size plus crc-fast's alignment).
    const MAX_REMAINDER: usize = 384 + 63;

    /// `SHIFT[n]` is `x^(8 n - 33) mod P`, in the reflected form the `crc32` instruction uses
    /// (bit 31 is `x^0`; P is the Castagnoli polynomial, 0x82F63B78 reflected, RFC 3385), for
    /// [`product`]: the carry-less product of two 32-bit reflected values is 63 bits long, and
    /// the `crc32` of it multiplies by `x^32` more, hence the 33 taken off. Defined from n = 5.
    const SHIFT: [u32; 16 * (MAX_REMAINDER / 24) + 1] = {
        let mut t = [0u32; 16 * (MAX_REMAINDER / 24) + 1];
        // x^7 (= x^(8*5 - 33)), then x^8 more per entry.
        let mut v: u32 = 0x8000_0000 >> 7;
        let mut n = 5;
        while n < t.len() {
            t[n] = v;
            let mut i = 0;
            while i < 8 {
                v = if v & 1 != 0 {
                    (v >> 1) ^ 0x82F6_3B78
                } else {
                    v >> 1
                };
                i += 1;
            }
            n += 1;
        }
        t
    };

    /// The carry-less product whose `crc32` is `reg` advanced over `n` zero octets,
    /// `reg * x^(8 n) mod P` (`5 <= n <= 288`); products XORed together reduce as one.
    #[inline]
    fn product(reg: u32, n: usize) -> u64 {
        let a = set_i32_m128i_s(reg as i32);
        let k = set_i32_m128i_s(SHIFT[n] as i32);
        get_i64_from_m128i_s(mul_i64_carryless_m128i::<0>(a, k)) as u64
    }

    #[inline]
    fn serial(mut reg: u32, data: &[u8]) -> u32 {
        let (qwords, bytes) = data.as_chunks::<8>();
        for q in qwords {
            reg = crc32_u64(u64::from(reg), u64::from_le_bytes(*q)) as u32;
        }
        for &b in bytes {
            reg = crc32_u8(reg, b);
        }
        reg
    }

    /// Whether crc-fast folds with 512-bit VPCLMULQDQ on this CPU (its AVX-512 kernels need
    /// AVX512F and AVX512VL, the wide one VPCLMULQDQ too); the check is std's cached one.
    #[inline]
    pub fn wide_folding() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    }

    /// [`update`] over inputs of any length: pieces of at most [`MAX_REMAINDER`] octets (the
    /// longest the shift table serves), as even as whole 24-octet rows allow, so that every
    /// piece runs on three chains.
    pub fn update_chained(mut reg: u32, mut data: &[u8]) -> u32 {
        if data.len() <= MAX_REMAINDER {
            return update(reg, data);
        }
        let pieces = data.len().div_ceil(MAX_REMAINDER);
        let piece = data.len() / pieces / 24 * 24;
        while data.len() > MAX_REMAINDER {
            let (a, rest) = data.split_at(piece);
            reg = update(reg, a);
            data = rest;
        }
        update(reg, data)
    }

    /// Three chains over thirds of `data` (whole qwords each), combined with
    /// `update(r, A B C) = shift(update(r, A), |B C|) ^ shift(update(0, B), |C|) ^ update(0, C)`
    /// (the CRC register is linear in register and data), then the last few octets serially.
    pub fn update(reg: u32, data: &[u8]) -> u32 {
        if data.len() < THREE_STREAMS_FROM {
            return serial(reg, data);
        }
        let q = data.len().min(MAX_REMAINDER) / 24;
        let (a, rest) = data.split_at(8 * q);
        let (b, rest) = rest.split_at(8 * q);
        let (c, rest) = rest.split_at(8 * q);
        let (mut ra, mut rb, mut rc) = (reg, 0u32, 0u32);
        // Whole qwords as arrays, so the loop indexes three slices of one length.
        let (a, b, c) = (
            a.as_chunks::<8>().0,
            b.as_chunks::<8>().0,
            c.as_chunks::<8>().0,
        );
        for ((x, y), z) in a.iter().zip(b).zip(c) {
            ra = crc32_u64(u64::from(ra), u64::from_le_bytes(*x)) as u32;
            rb = crc32_u64(u64::from(rb), u64::from_le_bytes(*y)) as u32;
            rc = crc32_u64(u64::from(rc), u64::from_le_bytes(*z)) as u32;
        }
        // crc32(0, v) is linear in v, so one `crc32` finishes both shifts (see SHIFT).
        let v = product(ra, 16 * q) ^ product(rb, 8 * q);
        serial(rc ^ crc32_u64(0, v) as u32, rest)
    }
}

#[cfg(not(all(
    target_arch = "x86_64",
    target_feature = "sse4.2",
    target_feature = "pclmulqdq"
)))]
mod tail {
    pub const AVAILABLE: bool = false;
    pub const THREE_STREAMS_FROM: usize = 0;

    pub fn wide_folding() -> bool {
        true
    }

    pub fn update_chained(reg: u32, data: &[u8]) -> u32 {
        super::crc_fast_update(reg, data)
    }

    pub fn update(reg: u32, data: &[u8]) -> u32 {
        super::crc_fast_update(reg, data)
    }
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

    /// The split CRC is what x86-64 builds run (`.cargo/config.toml` enables its features); a
    /// build that lost them would quietly fall back to crc-fast's serial tail.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_builds_use_the_three_stream_tail() {
        // Which of the two x86-64 choices runs depends on the CPU (AVX-512 or not).
        assert!(
            matches!(implementation(), FPDU_TAIL | CHAINS),
            "built without SSE4.2 and PCLMULQDQ: RUSTFLAGS replaces .cargo/config.toml's \
             target features; add `-C target-feature=+sse4.2,+pclmulqdq` to it"
        );
    }

    /// Every length to past two 384-octet blocks plus the alignment prefix, at every start
    /// offset in a cache line: the block/remainder split moves with both, and the remainder's
    /// three streams and their shift constants are used at every remainder length from
    /// `tail::THREE_STREAMS_FROM` (160) octets.
    #[test]
    fn every_length_and_alignment_agrees_with_the_crc32c_crate() {
        let data: Vec<u8> = (0..1024 + 64u32)
            .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(7) as u8)
            .collect();
        for off in 0..64 {
            for n in 0..=1024 {
                let d = &data[off..off + n];
                assert_eq!(crc32c(d), crc32c::crc32c(d), "offset {off} len {n}");
            }
        }
        let big: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for n in [1444, 1448, 8948, 9000, 65_536, 70_000] {
            for off in [0, 1, 13, 63] {
                let d = &big[off..n.min(big.len() - off) + off];
                assert_eq!(crc32c(d), crc32c::crc32c(d), "offset {off} len {}", d.len());
            }
        }
    }

    /// The whole-input chains that CPUs without AVX-512 run, on every CPU: every length to
    /// past three pieces (each at most 447 octets, cut in whole 24-octet rows) and some large
    /// ones, from a finished CRC (the register not all ones) as well as a fresh one.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_whole_input_chains_agree_with_the_crc32c_crate() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(11) as u8)
            .collect();
        let lengths = (0..=1500).chain([1444, 1448, 4096, 8948, 9000, 65_536, 69_000]);
        for n in lengths {
            for off in [0, 5] {
                let d = &data[off..off + n];
                assert_eq!(!tail::update_chained(!0, d), crc32c::crc32c(d), "len {n}");
                let seed = crc32c::crc32c(b"seed");
                assert_eq!(
                    !tail::update_chained(!seed, d),
                    crc32c::crc32c_append(seed, d),
                    "len {n}, appended"
                );
            }
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
