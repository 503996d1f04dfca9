//! Streaming FPDU deframer (RFC 5044 §4, §5, §8): bytes in any segmentation in, verified
//! ULPDUs out in order (markers stripped, length and CRC checked); an error maps to its RFC 5044
//! §8 TERMINATE cause and stops the stream.

use crate::crc;
use crate::wire::fpdu::{fpdu_len, pad_len, CRC_LEN, HEADER_LEN, MARKER_INTERVAL, MARKER_LEN};
use crate::wire::terminate::TermCause;

/// Why the stream is broken. After an error the deframer delivers nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeframeError {
    /// The received CRC does not match the one computed over the FPDU (RFC 5044 §8 code 2).
    #[error("FPDU CRC error")]
    Crc,
    /// A marker's FPDUPTR does not point at the start of the FPDU the ULPDU_Length fields locate
    /// (RFC 5044 §4.3, §8 code 3).
    #[error("marker error")]
    Marker,
    /// An FPDU's ULPDU_Length exceeds the largest ULPDU this receiver accepts (RFC 5044 §4.1);
    /// reported as TERMINATE code 0x01 ([`TermCause::MPA_BAD_LEN`]).
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

/// Where inside the current FPDU the next (non-marker) octet belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Collecting the 2-octet ULPDU_Length (`hdr_have` octets so far).
    Len,
    /// Collecting ULPDU and pad (`body_need` octets in total).
    Body,
    /// Collecting the 4-octet CRC field.
    Crc,
}

/// Reassembles FPDUs from arbitrarily segmented stream bytes, strips markers, checks CRC.
///
/// Buffering is bounded: at most `max_ulpdu + 3` octets of ULPDU and pad, plus a few header,
/// marker and CRC octets in fixed arrays. Whole FPDUs that arrive contiguously in one `push`
/// (and contain no marker) are verified and delivered as slices of the input, without a copy.
pub struct Deframer {
    crc: bool,
    markers: bool,
    max_ulpdu: usize,
    failed: Option<DeframeError>,
    /// Stream position of the next input octet (RFC 5044 §4.3: markers at multiples of 512).
    pos: u64,
    phase: Phase,
    hdr: [u8; HEADER_LEN],
    hdr_have: usize,
    /// Stream position of the current FPDU's ULPDU_Length field.
    hdr_pos: u64,
    /// ULPDU length of the current FPDU.
    ulpdu_len: usize,
    /// ULPDU + pad octets of the current FPDU.
    body_need: usize,
    body: Vec<u8>,
    crc_field: [u8; CRC_LEN],
    crc_have: usize,
    /// CRC32c so far over everything from the FPDU's first octet (or its leading marker).
    running_crc: u32,
    marker: [u8; MARKER_LEN],
    /// `Some(n)`: inside a marker, `n` octets collected.
    marker_have: Option<usize>,
    /// The current FPDU began with a marker (already in `running_crc`): no fast path for it.
    lead_marker: bool,
    /// Octets copied into `body` (FPDUs split across pushes, or carrying markers); whole
    /// FPDUs on the fast path are delivered from the input without a copy.
    reassembled: u64,
}

impl Deframer {
    /// `max_ulpdu` bounds buffering (a larger ULPDU_Length is `BadLength`); stream position 0 is the
    /// first octet after the peer's MPA Request/Reply frame.
    pub fn new(crc: bool, markers: bool, max_ulpdu: usize) -> Self {
        Deframer {
            crc,
            markers,
            max_ulpdu: max_ulpdu.min(usize::from(u16::MAX)),
            failed: None,
            pos: 0,
            phase: Phase::Len,
            hdr: [0; HEADER_LEN],
            hdr_have: 0,
            hdr_pos: 0,
            ulpdu_len: 0,
            body_need: 0,
            body: Vec::new(),
            crc_field: [0; CRC_LEN],
            crc_have: 0,
            running_crc: 0,
            marker: [0; MARKER_LEN],
            marker_have: None,
            lead_marker: false,
            reassembled: 0,
        }
    }

    /// The error the stream failed with, if any.
    pub fn error(&self) -> Option<DeframeError> {
        self.failed
    }

    /// Octets copied into the reassembly buffer so far (copies per byte on receive).
    pub fn reassembled(&self) -> u64 {
        self.reassembled
    }

    /// Stream position of the next octet to be pushed (markers included).
    pub fn stream_position(&self) -> u64 {
        self.pos
    }

    /// Feed bytes; `deliver` is called with each complete, verified ULPDU in stream order. On error
    /// nothing of the failing FPDU has been delivered.
    pub fn push(
        &mut self,
        mut input: &[u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), DeframeError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        while !input.is_empty() {
            if self.at_fpdu_start() && !self.lead_marker {
                input = self.fast_path(input, deliver)?;
                if input.is_empty() {
                    break;
                }
            }
            if self.markers
                && self.marker_have.is_none()
                && self.pos.is_multiple_of(MARKER_INTERVAL as u64)
            {
                self.marker_have = Some(0);
            }
            if let Some(have) = self.marker_have {
                let n = (MARKER_LEN - have).min(input.len());
                self.marker[have..have + n].copy_from_slice(&input[..n]);
                self.pos = self.pos.wrapping_add(n as u64);
                input = &input[n..];
                if have + n == MARKER_LEN {
                    self.marker_have = None;
                    self.check_marker()?;
                } else {
                    self.marker_have = Some(have + n);
                }
                continue;
            }
            // Octets until the next marker position.
            let room = if self.markers {
                MARKER_INTERVAL - (self.pos % MARKER_INTERVAL as u64) as usize
            } else {
                usize::MAX
            };
            let avail = room.min(input.len());
            let used = match self.phase {
                Phase::Len => {
                    if self.hdr_have == 0 {
                        self.hdr_pos = self.pos;
                    }
                    let n = (HEADER_LEN - self.hdr_have).min(avail);
                    self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&input[..n]);
                    self.hdr_have += n;
                    if self.hdr_have == HEADER_LEN {
                        let len = usize::from(u16::from_be_bytes(self.hdr));
                        self.check_len(len)?;
                        if self.crc {
                            self.running_crc = crc::crc32c_append(self.running_crc, &self.hdr);
                        }
                        self.ulpdu_len = len;
                        self.body_need = len + pad_len(len);
                        self.body.clear();
                        self.phase = if self.body_need == 0 {
                            Phase::Crc
                        } else {
                            Phase::Body
                        };
                    }
                    n
                }
                Phase::Body => {
                    let n = (self.body_need - self.body.len()).min(avail);
                    let chunk = &input[..n];
                    if self.crc {
                        self.running_crc = crc::crc32c_append(self.running_crc, chunk);
                    }
                    self.body.extend_from_slice(chunk);
                    self.reassembled += n as u64;
                    if self.body.len() == self.body_need {
                        self.phase = Phase::Crc;
                    }
                    n
                }
                Phase::Crc => {
                    let n = (CRC_LEN - self.crc_have).min(avail);
                    self.crc_field[self.crc_have..self.crc_have + n].copy_from_slice(&input[..n]);
                    self.crc_have += n;
                    if self.crc_have == CRC_LEN {
                        self.pos = self.pos.wrapping_add(n as u64);
                        let got = u32::from_le_bytes(self.crc_field);
                        if self.crc && got != self.running_crc {
                            return self.fail_crc(got, self.running_crc);
                        }
                        deliver(&self.body[..self.ulpdu_len]);
                        self.reset_fpdu();
                        input = &input[n..];
                        continue;
                    }
                    n
                }
            };
            self.pos = self.pos.wrapping_add(used as u64);
            input = &input[used..];
        }
        Ok(())
    }

    fn at_fpdu_start(&self) -> bool {
        self.phase == Phase::Len && self.hdr_have == 0 && self.marker_have.is_none()
    }

    fn reset_fpdu(&mut self) {
        self.phase = Phase::Len;
        self.hdr_have = 0;
        self.crc_have = 0;
        self.running_crc = 0;
        self.lead_marker = false;
        self.body.clear();
    }

    /// Deliver every whole, marker-free FPDU at the front of `input` straight from `input`.
    fn fast_path<'a>(
        &mut self,
        mut input: &'a [u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<&'a [u8], DeframeError> {
        while let Some(h) = input.get(..HEADER_LEN) {
            let len = usize::from(u16::from_be_bytes([h[0], h[1]]));
            self.check_len(len)?;
            let total = fpdu_len(len);
            let Some(fpdu) = input.get(..total) else {
                break;
            };
            if self.markers {
                let off = (self.pos % MARKER_INTERVAL as u64) as usize;
                // A marker before the header, or one falling inside this FPDU: slow path.
                if off == 0 || off + total > MARKER_INTERVAL {
                    break;
                }
            }
            let crc_at = total - CRC_LEN;
            if self.crc {
                let c = &fpdu[crc_at..];
                let got = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let want = crc::crc32c(&fpdu[..crc_at]);
                if got != want {
                    self.fail_crc(got, want)?;
                }
            }
            deliver(&fpdu[HEADER_LEN..HEADER_LEN + len]);
            self.pos = self.pos.wrapping_add(total as u64);
            input = &input[total..];
        }
        Ok(input)
    }

    fn check_len(&mut self, len: usize) -> Result<(), DeframeError> {
        if len > self.max_ulpdu {
            log::warn!(
                "mpa: FPDU ULPDU_Length {len} exceeds the maximum {} (stream offset {})",
                self.max_ulpdu,
                self.pos
            );
            self.failed = Some(DeframeError::BadLength);
            return Err(DeframeError::BadLength);
        }
        Ok(())
    }

    fn fail_crc(&mut self, got: u32, want: u32) -> Result<(), DeframeError> {
        log::warn!(
            "mpa: FPDU CRC mismatch: received {got:#010x}, computed {want:#010x} (stream offset {})",
            self.pos
        );
        self.failed = Some(DeframeError::Crc);
        Err(DeframeError::Crc)
    }

    /// Validate a complete marker (RFC 5044 §4.3) and add it to the CRC of the FPDU containing it.
    fn check_marker(&mut self) -> Result<(), DeframeError> {
        let marker_pos = self.pos.wrapping_sub(MARKER_LEN as u64);
        let expect: u16 = if self.at_fpdu_start() {
            self.lead_marker = true;
            0
        } else {
            (marker_pos.wrapping_sub(self.hdr_pos) as u16) & !3
        };
        let got = u16::from_be_bytes([self.marker[2], self.marker[3]]) & !3;
        if got != expect {
            log::warn!(
                "mpa: marker at stream offset {marker_pos} has FPDUPTR {got:#06x}, expected {expect:#06x}"
            );
            self.failed = Some(DeframeError::Marker);
            return Err(DeframeError::Marker);
        }
        if self.crc {
            self.running_crc = crc::crc32c_append(self.running_crc, &self.marker);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::Framer;
    use proptest::prelude::*;

    fn stream(crc: bool, markers: bool, sizes: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut f = Framer::new(crc, markers);
        let mut out = Vec::new();
        let mut ulpdus = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let u: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            f.emit(&u, &[], &mut out);
            ulpdus.push(u);
        }
        (out, ulpdus)
    }

    fn run(d: &mut Deframer, parts: &[&[u8]]) -> (Vec<Vec<u8>>, Result<(), DeframeError>) {
        let mut got = Vec::new();
        for p in parts {
            if let Err(e) = d.push(p, &mut |u| got.push(u.to_vec())) {
                return (got, Err(e));
            }
        }
        (got, Ok(()))
    }

    const SIZES: &[usize] = &[0, 1, 5, 300, 700, 2, 1100, 3, 4];

    #[test]
    fn every_split_point_and_byte_by_byte() {
        for crc in [false, true] {
            for markers in [false, true] {
                let (s, want) = stream(crc, markers, SIZES);
                for cut in 0..=s.len() {
                    let mut d = Deframer::new(crc, markers, 2000);
                    let (got, r) = run(&mut d, &[&s[..cut], &s[cut..]]);
                    assert_eq!(r, Ok(()));
                    assert_eq!(got, want, "crc {crc} markers {markers} cut {cut}");
                }
                let mut d = Deframer::new(crc, markers, 2000);
                let parts: Vec<&[u8]> = s.chunks(1).collect();
                assert_eq!(run(&mut d, &parts), (want.clone(), Ok(())));
            }
        }
    }

    #[test]
    fn every_single_bit_flip_is_caught_with_crc() {
        for markers in [false, true] {
            let (s, want) = stream(true, markers, &[10, 3, 600]);
            for bit in 0..s.len() * 8 {
                let mut b = s.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                let mut d = Deframer::new(true, markers, 2000);
                let mut got = Vec::new();
                let r = d.push(&b, &mut |u| got.push(u.to_vec()));
                // Never a corrupted ULPDU: what was delivered is an intact prefix, and the
                // stream is either failed or (a longer ULPDU_Length) still waiting.
                assert!(got.len() < 3, "bit {bit} markers {markers} not caught");
                assert_eq!(&want[..got.len()], &got[..]);
                if r.is_err() {
                    let mut m = 0;
                    assert_eq!(d.push(&s, &mut |_| m += 1), r);
                    assert_eq!(m, 0);
                } else {
                    // Only a length flip can hide; with the rest of the stream it must fail.
                    let more = vec![0u8; 70000];
                    let mut m = 0;
                    let r2 = d.push(&more, &mut |_| m += 1);
                    assert!(r2.is_err() && m == 0, "bit {bit} markers {markers}");
                }
            }
        }
    }

    #[test]
    fn fast_path_delivers_slices_of_the_input() {
        let (s, _) = stream(true, false, &[8, 8]);
        let base = s.as_ptr() as usize;
        let mut d = Deframer::new(true, false, 100);
        let mut offs = Vec::new();
        d.push(&s, &mut |u| offs.push(u.as_ptr() as usize - base))
            .unwrap();
        assert_eq!(offs, vec![2, 18]);
        assert!(d.body.capacity() == 0, "nothing was buffered");
    }

    #[test]
    fn bad_length_before_body_arrives() {
        let mut d = Deframer::new(false, false, 16);
        assert_eq!(d.push(&[0], &mut |_| ()), Ok(()));
        assert_eq!(d.push(&[17], &mut |_| ()), Err(DeframeError::BadLength));
        assert_eq!(d.error(), Some(DeframeError::BadLength));
    }

    proptest! {
        #[test]
        fn random_segmentation_round_trips(
            sizes in proptest::collection::vec(0usize..1500, 1..8),
            crc in any::<bool>(),
            markers in any::<bool>(),
            cuts in proptest::collection::vec(1usize..700, 1..20),
        ) {
            let (s, want) = stream(crc, markers, &sizes);
            let mut d = Deframer::new(crc, markers, 1500);
            let mut got = Vec::new();
            let mut rest = &s[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = cuts[i % cuts.len()].min(rest.len());
                d.push(&rest[..n], &mut |u| got.push(u.to_vec())).unwrap();
                rest = &rest[n..];
                i += 1;
            }
            prop_assert_eq!(got, want);
        }

        #[test]
        fn garbage_never_panics_and_stays_bounded(
            b in proptest::collection::vec(any::<u8>(), 0..3000),
            crc in any::<bool>(),
            markers in any::<bool>(),
        ) {
            let mut d = Deframer::new(crc, markers, 200);
            let mut failed = false;
            for chunk in b.chunks(37) {
                let mut n = 0;
                let r = d.push(chunk, &mut |u| { assert!(u.len() <= 200); n += 1; });
                if failed { prop_assert!(r.is_err() && n == 0); }
                failed |= r.is_err();
                prop_assert!(d.body.capacity() <= 4096);
            }
        }
    }
}
