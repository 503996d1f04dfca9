//! Streaming FPDU deframer (RFC 5044 §4, §5, §8). CONTRACT (fixed by the integrator).

use crate::crc;
use crate::wire::fpdu::{fpdu_len, pad_len, CRC_LEN, HEADER_LEN, MARKER_INTERVAL, MARKER_LEN};
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
        }
    }

    /// The error the stream failed with, if any.
    pub fn error(&self) -> Option<DeframeError> {
        self.failed
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
            if self.markers && self.marker_have.is_none() && self.pos % MARKER_INTERVAL as u64 == 0
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
                        self.running_crc = crc::crc32c_append(self.running_crc, &self.hdr);
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
                    self.running_crc = crc::crc32c_append(self.running_crc, chunk);
                    self.body.extend_from_slice(chunk);
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
        self.running_crc = crc::crc32c_append(self.running_crc, &self.marker);
        Ok(())
    }
}
