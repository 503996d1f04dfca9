//! Streaming FPDU deframer (RFC 5044 §4, §5, §8): bytes in any segmentation in, verified
//! ULPDUs out in order (markers stripped, length and CRC checked); an error maps to its RFC 5044
//! §8 TERMINATE cause and stops the stream.

use std::collections::VecDeque;

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

/// Where an FPDU of a segment ahead of its turn lies in the stream
/// ([`Deframer::fpdus_ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduAt {
    /// Stream position of its ULPDU_Length field.
    pub pos: u64,
    /// Its length: header, ULPDU, pad and CRC.
    pub len: usize,
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
    /// FPDUs placed ahead of their turn, by stream position ([`Deframer::placed_ahead`]).
    placed: VecDeque<Placed>,
    /// Octets of the placed FPDU at the front of `placed` still to pass unread.
    skip_left: Option<usize>,
    /// Octets passed unread so far (placed ahead: never in the receive buffer).
    skipped: u64,
}

/// An FPDU placed ahead of its turn: where it lies, and what of its ULPDU the in-order
/// pass needs (the head: DDP and RDMAP headers; the payload's length).
#[derive(Debug, Clone, Copy)]
struct Placed {
    pos: u64,
    len: usize,
    head: [u8; MAX_PLACED_HEAD],
    head_len: usize,
    payload_len: usize,
}

/// The longest ULPDU head an FPDU placed ahead keeps ([`Deframer::placed_ahead`]).
pub const MAX_PLACED_HEAD: usize = 32;

/// FPDUs placed ahead of their turn and not reached yet that a deframer keeps: beyond it,
/// segments behind a hole wait for their turn (a bound on what a peer's reordering makes
/// the receiver keep).
pub const MAX_PLACED_AHEAD: usize = 256;

/// A ULPDU as [`Deframer::push_ulpdus`] delivers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ulpdu<'a> {
    /// A whole ULPDU, verified.
    Whole(&'a [u8]),
    /// An FPDU placed ahead of its turn ([`Deframer::placed_ahead`]) that the stream has now
    /// reached: the head of its ULPDU as kept then, and the length of the payload after it.
    Placed {
        /// The ULPDU's first octets (its DDP and RDMAP headers).
        head: &'a [u8],
        /// The octets of payload after the head.
        payload_len: usize,
    },
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
            placed: VecDeque::new(),
            skip_left: None,
            skipped: 0,
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
    /// nothing of the failing FPDU has been delivered. For a deframer with nothing placed
    /// ahead ([`Deframer::placed_ahead`]); [`Deframer::push_ulpdus`] tells those apart.
    pub fn push(
        &mut self,
        input: &[u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), DeframeError> {
        self.push_ulpdus(input, &mut |u| {
            if let Ulpdu::Whole(b) = u {
                deliver(b)
            }
        })
    }

    /// [`Deframer::push`], delivering also the FPDUs placed ahead of their turn
    /// ([`Deframer::placed_ahead`]) when the stream reaches them: their octets are skipped
    /// unread (the receive buffer never held them) and their ULPDU's head, kept when they
    /// were placed, is delivered in their place ([`Ulpdu::Placed`]).
    pub fn push_ulpdus(
        &mut self,
        mut input: &[u8],
        deliver: &mut impl FnMut(Ulpdu<'_>),
    ) -> Result<(), DeframeError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        while !input.is_empty() {
            if let Some(left) = self.skip_left {
                // An FPDU placed ahead: its octets pass unread.
                let n = left.min(input.len());
                self.pos = self.pos.wrapping_add(n as u64);
                input = &input[n..];
                self.skipped += n as u64;
                if n < left {
                    self.skip_left = Some(left - n);
                    break;
                }
                self.skip_left = None;
                if let Some(p) = self.placed.pop_front() {
                    deliver(Ulpdu::Placed {
                        head: &p.head[..p.head_len],
                        payload_len: p.payload_len,
                    });
                }
                continue;
            }
            if !self.placed.is_empty() && self.at_fpdu_start() && self.placed_due() {
                continue;
            }
            if self.at_fpdu_start() && !self.lead_marker {
                input = self.fast_path(input, deliver)?;
                if input.is_empty() {
                    break;
                }
                if self.placed.front().is_some_and(|p| p.pos <= self.pos) {
                    continue;
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
                        deliver(Ulpdu::Whole(&self.body[..self.ulpdu_len]));
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

    /// The whole FPDUs at the front of `seg`, a TCP segment's payload that arrived ahead of
    /// its turn (`ahead` octets past the next octet to be pushed): each with its offset in
    /// `seg`, where it lies in the stream and its ULPDU, for a receiver that places tagged
    /// data out of order (RFC 5044 Appendix A.3). A sender that aligns FPDUs with segments
    /// (App. A.1/A.2, as dpwarp does) starts every segment with an FPDU; nothing here
    /// assumes it. An FPDU is taken only if certainly one: CRCs are on (a CRC32c that
    /// matches over header and ULPDU is what tells an FPDU from payload that looks like one),
    /// markers are off (with markers a segment's start is known from them, which is not
    /// done here), its length is within the maximum and it lies wholly in `seg`; the scan
    /// stops at the first octets that fail any of these. Nothing changes here: an FPDU the
    /// receiver places and takes out of the stream is given to [`Deframer::placed_ahead`].
    pub fn fpdus_ahead<'s>(&self, seg: &'s [u8], ahead: u64) -> FpdusAhead<'s> {
        let usable = self.crc && !self.markers && self.failed.is_none();
        FpdusAhead {
            seg: if usable { seg } else { &[] },
            off: 0,
            pos: self.pos.wrapping_add(ahead),
            max_ulpdu: self.max_ulpdu,
        }
    }

    /// Whether [`Deframer::placed_ahead`] would keep an FPDU at `at` (nothing changes): not
    /// when [`MAX_PLACED_AHEAD`] are kept, when it overlaps one kept (a segment seen twice),
    /// or when it does not lie past the FPDU the stream is in. An FPDU boundary there is
    /// what the sender's alignment promises; a receiver that took octets the stream turns
    /// out to need finds the CRC of the FPDU around them failing (RFC 5044 §8: the stream
    /// ends with a TERMINATE).
    pub fn may_place_ahead(&self, at: FpduAt) -> bool {
        if self.placed.len() >= MAX_PLACED_AHEAD {
            return false;
        }
        // The end of the FPDU the stream is in, as far as it is known.
        let past = if self.phase != Phase::Len || self.hdr_have == HEADER_LEN {
            self.hdr_pos.wrapping_add(fpdu_len(self.ulpdu_len) as u64)
        } else {
            self.pos
        };
        if at.pos < past.max(self.pos) {
            return false;
        }
        let i = self.placed.partition_point(|p| p.pos < at.pos);
        let end = at.pos.saturating_add(at.len as u64);
        let before_ok = i == 0 || {
            let b = &self.placed[i - 1];
            b.pos.saturating_add(b.len as u64) <= at.pos
        };
        before_ok && self.placed.get(i).is_none_or(|a| end <= a.pos)
    }

    /// Remember an FPDU of [`Deframer::fpdus_ahead`] that the receiver placed ahead of its
    /// turn and took out of the stream (its octets will not be in what is pushed): when the
    /// stream reaches `at.pos` its `at.len` octets are passed unread and `head` (the ULPDU's
    /// first octets, at most [`MAX_PLACED_HEAD`]) with `payload_len` is delivered in its
    /// place. False, and nothing kept, unless [`Deframer::may_place_ahead`] (the receiver
    /// must not take the octets then).
    pub fn placed_ahead(&mut self, at: FpduAt, head: &[u8], payload_len: usize) -> bool {
        if !self.may_place_ahead(at) || head.len() > MAX_PLACED_HEAD {
            return false;
        }
        let i = self.placed.partition_point(|p| p.pos < at.pos);
        let mut h = [0u8; MAX_PLACED_HEAD];
        h[..head.len()].copy_from_slice(head);
        self.placed.insert(
            i,
            Placed {
                pos: at.pos,
                len: at.len,
                head: h,
                head_len: head.len(),
                payload_len,
            },
        );
        true
    }

    /// Whether FPDUs are kept as placed ahead, not reached yet.
    pub fn has_placed_ahead(&self) -> bool {
        !self.placed.is_empty()
    }

    /// Octets of FPDUs placed ahead that the stream passed unread.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// At an FPDU start: drop what the stream passed, and begin passing a placed FPDU over
    /// when the stream is at it (true).
    fn placed_due(&mut self) -> bool {
        while self.placed.front().is_some_and(|p| p.pos < self.pos) {
            // Taken out of the stream at what was no FPDU start in order: the octets the
            // FPDU around it needs were not buffered, and its CRC will fail.
            self.placed.pop_front();
        }
        match self.placed.front() {
            Some(p) if p.pos == self.pos => {
                self.skip_left = Some(p.len);
                true
            }
            _ => false,
        }
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
        deliver: &mut impl FnMut(Ulpdu<'_>),
    ) -> Result<&'a [u8], DeframeError> {
        while let Some(h) = input.get(..HEADER_LEN) {
            if self.placed.front().is_some_and(|p| p.pos <= self.pos) {
                break;
            }
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
            deliver(Ulpdu::Whole(&fpdu[HEADER_LEN..HEADER_LEN + len]));
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

/// The FPDUs of a segment ahead of its turn ([`Deframer::fpdus_ahead`]).
pub struct FpdusAhead<'s> {
    seg: &'s [u8],
    off: usize,
    pos: u64,
    max_ulpdu: usize,
}

impl<'s> Iterator for FpdusAhead<'s> {
    /// Where the FPDU lies and its ULPDU.
    type Item = (FpduAt, &'s [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.seg.get(self.off..)?;
        let h = rest.get(..HEADER_LEN)?;
        let len = usize::from(u16::from_be_bytes([h[0], h[1]]));
        if len > self.max_ulpdu {
            self.seg = &[];
            return None;
        }
        let total = fpdu_len(len);
        let Some(fpdu) = rest.get(..total) else {
            self.seg = &[];
            return None;
        };
        let crc_at = total - CRC_LEN;
        let c = &fpdu[crc_at..];
        let got = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if got != crc::crc32c(&fpdu[..crc_at]) {
            self.seg = &[];
            return None;
        }
        let at = FpduAt {
            pos: self.pos.wrapping_add(self.off as u64),
            len: total,
        };
        self.off += total;
        Some((at, &fpdu[HEADER_LEN..HEADER_LEN + len]))
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

    /// FPDUs found ahead of a hole and kept are passed over unread when the stream reaches
    /// them (their octets garbage here), at every split point, and their kept heads come out
    /// in their place, in order with the others; what overlaps a kept FPDU, lies inside the
    /// FPDU the stream is in or does not check out is refused.
    #[test]
    fn placed_ahead_fpdus_are_passed_over_unread_in_order() {
        let (s, ulpdus) = stream(true, false, &[40, 300, 20, 700, 30]);
        let ends: Vec<usize> = ulpdus
            .iter()
            .scan(0, |o, u| {
                *o += fpdu_len(u.len());
                Some(*o)
            })
            .collect();
        for split in (0..s.len()).step_by(7) {
            let mut d = Deframer::new(true, false, 4096);
            // FPDUs 1 and 3 arrive ahead (after FPDU 0 is lost).
            let mut garbled = s.clone();
            for i in [1, 3] {
                let seg = &s[ends[i - 1]..ends[i]];
                let (at, u) = d.fpdus_ahead(seg, ends[i - 1] as u64).next().unwrap();
                assert_eq!((at.pos, at.len), (ends[i - 1] as u64, seg.len()));
                assert_eq!(u, &ulpdus[i][..]);
                assert!(d.placed_ahead(at, &u[..4], u.len() - 4));
                assert!(!d.placed_ahead(at, &u[..4], u.len() - 4), "kept once");
                garbled[ends[i - 1]..ends[i]].fill(0xee);
            }
            let mut got = Vec::new();
            for part in [&garbled[..split], &garbled[split..]] {
                d.push_ulpdus(part, &mut |u| {
                    got.push(match u {
                        Ulpdu::Whole(b) => (false, b.to_vec(), 0),
                        Ulpdu::Placed { head, payload_len } => (true, head.to_vec(), payload_len),
                    })
                })
                .unwrap();
            }
            let want: Vec<_> = ulpdus
                .iter()
                .enumerate()
                .map(|(i, u)| match i {
                    1 | 3 => (true, u[..4].to_vec(), u.len() - 4),
                    _ => (false, u.clone(), 0),
                })
                .collect();
            assert_eq!(got, want, "split at {split}");
            assert_eq!(d.skipped(), (ends[1] - ends[0] + ends[3] - ends[2]) as u64);
            assert!(!d.has_placed_ahead());
        }
        // Refused: a bad CRC ends the scan; CRCs off or markers on find nothing.
        let mut bad = s[ends[0]..ends[1]].to_vec();
        bad[10] ^= 1;
        let d = Deframer::new(true, false, 4096);
        assert_eq!(d.fpdus_ahead(&bad, 100).count(), 0);
        assert_eq!(d.fpdus_ahead(&s, 0).count(), 5);
        assert_eq!(
            Deframer::new(false, false, 4096).fpdus_ahead(&s, 0).count(),
            0
        );
        assert_eq!(
            Deframer::new(true, true, 4096).fpdus_ahead(&s, 0).count(),
            0
        );
        // Inside the FPDU the stream is in: refused.
        let mut d = Deframer::new(true, false, 4096);
        d.push(&s[..ends[0] + 3], &mut |_| {}).unwrap();
        let inside = FpduAt {
            pos: ends[0] as u64 + 10,
            len: 20,
        };
        assert!(!d.may_place_ahead(inside));
        assert!(d.may_place_ahead(FpduAt {
            pos: ends[1] as u64,
            len: 20
        }));
    }

    /// Octets taken out of the stream where in order there is no FPDU start (a forged
    /// FPDU inside a real one): the real FPDU's CRC fails, nothing of it is delivered.
    #[test]
    fn a_placed_fpdu_that_is_no_fpdu_start_in_order_fails_the_crc() {
        let (s, _) = stream(true, false, &[40, 300]);
        let mut d = Deframer::new(true, false, 4096);
        let first = fpdu_len(40);
        let at = FpduAt {
            pos: first as u64 + 50,
            len: 24,
        };
        assert!(d.placed_ahead(at, &[1, 2, 3, 4], 10));
        let mut garbled = s.clone();
        garbled[first + 50..first + 74].fill(0xee);
        let mut n = 0;
        assert_eq!(
            d.push_ulpdus(&garbled, &mut |_| n += 1),
            Err(DeframeError::Crc)
        );
        assert_eq!(n, 1, "the first FPDU only");
    }

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
