//! FPDU framer (RFC 5044 §4, §5, App. A): ULPDUs in, FPDUs out (length, pad, CRC32c or a zero
//! CRC field, markers when negotiated), sized so each FPDU fits one TCP segment.

use crate::crc;
use crate::wire::fpdu::{pad_len, CRC_LEN, MARKER_INTERVAL, MARKER_LEN, OVERHEAD};
use crate::wire::txbuf::TxBuf;

/// RFC 5044 §4.5: "the MPA on TCP sender MUST NOT shrink the MULPDU below 128 octets".
pub const MIN_MULPDU: usize = 128;

/// Largest ULPDU we frame when markers are on, so that every FPDUPTR (an offset inside the FPDU
/// including its markers) fits in 16 bits: 2 + 64512 + 3 + 127 markers * 4 < 65536.
pub const MAX_ULPDU_WITH_MARKERS: usize = 64512;

/// Builds FPDUs: ULPDU_Length, ULPDU, pad to 4, CRC32c (or zero), markers every 512 octets.
pub struct Framer {
    crc: bool,
    markers: bool,
    /// Stream position (octets since the end of the MPA Request/Reply this side sent) of the
    /// next octet `emit` appends; only its value modulo 512 matters (RFC 5044 §4.3).
    pos: u64,
}

impl Framer {
    /// `crc`: compute CRC (else the field is zero). `markers`: insert markers; stream position 0
    /// is the first octet after the MPA Request/Reply frame this side sent (RFC 5044 §5).
    pub fn new(crc: bool, markers: bool) -> Self {
        Framer {
            crc,
            markers,
            pos: 0,
        }
    }

    /// The largest ULPDU such that a whole FPDU (with markers if on) fits in `emss` bytes
    /// (RFC 5044 §4.2 MULPDU, App. A).
    ///
    /// RFC 5044 §4.5: `MULPDU = EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)` with markers,
    /// `EMSS - (6 + EMSS mod 4)` without; never below 128 octets; never above what ULPDU_Length
    /// (16 bits) can carry.
    pub fn mulpdu_for_emss(emss: usize, markers: bool) -> usize {
        let overhead = if markers {
            OVERHEAD + MARKER_LEN * emss.div_ceil(MARKER_INTERVAL) + emss % 4
        } else {
            OVERHEAD + emss % 4
        };
        let cap = if markers {
            MAX_ULPDU_WITH_MARKERS
        } else {
            usize::from(u16::MAX)
        };
        emss.saturating_sub(overhead).clamp(MIN_MULPDU, cap)
    }

    /// Whether CRCs are generated.
    pub fn crc_enabled(&self) -> bool {
        self.crc
    }

    /// Whether markers are inserted.
    pub fn markers_enabled(&self) -> bool {
        self.markers
    }

    /// Stream position of the next octet (octets emitted so far, markers included).
    pub fn stream_position(&self) -> u64 {
        self.pos
    }

    /// Append one FPDU carrying `ulpdu` to `out` (same as `emit(ulpdu, &[], out)`).
    pub fn emit_ulpdu(&mut self, ulpdu: &[u8], out: &mut Vec<u8>) {
        self.emit(ulpdu, &[], out)
    }

    /// Append one FPDU carrying `header ++ payload` (<= 65535 bytes together) to `out`.
    ///
    /// A ULPDU larger than ULPDU_Length can express (or, with markers, than
    /// [`MAX_ULPDU_WITH_MARKERS`]) is a caller bug: it is logged and nothing is emitted, rather
    /// than putting a lying length on the wire.
    pub fn emit(&mut self, header: &[u8], payload: &[u8], out: &mut Vec<u8>) {
        let len = header.len() + payload.len();
        let cap = if self.markers {
            MAX_ULPDU_WITH_MARKERS
        } else {
            usize::from(u16::MAX)
        };
        if len > cap {
            debug_assert!(len <= cap, "ULPDU of {len} octets exceeds {cap}");
            log::error!("mpa: ULPDU of {len} octets exceeds the FPDU limit {cap}; not framed");
            return;
        }
        let pad = [0u8; 3];
        let pad = &pad[..pad_len(len)];
        let len_field = (len as u16).to_be_bytes();
        let start = out.len();
        if !self.markers {
            out.reserve(len + pad.len() + OVERHEAD);
            out.extend_from_slice(&len_field);
            out.extend_from_slice(header);
            out.extend_from_slice(payload);
            out.extend_from_slice(pad);
        } else {
            let markers = (len + pad.len() + OVERHEAD).div_ceil(MARKER_INTERVAL) + 1;
            out.reserve(len + pad.len() + OVERHEAD + markers * MARKER_LEN);
            // RFC 5044 §4.3: a marker falling exactly between FPDUs belongs to the following
            // FPDU (FPDUPTR 0, included in its CRC): emit it first.
            if self.pos.is_multiple_of(MARKER_INTERVAL as u64) {
                self.put_marker(0, out);
            }
            let hdr_pos = self.pos;
            for chunk in [&len_field[..], header, payload, pad] {
                self.put_with_markers(chunk, hdr_pos, out);
            }
            // A marker right after the pad precedes the CRC field and is in this FPDU's CRC
            // (RFC 5044 §4.4 rule 1).
            if self.pos.is_multiple_of(MARKER_INTERVAL as u64) {
                self.put_marker(self.pos.wrapping_sub(hdr_pos) as u16, out);
            }
        }
        let c = if self.crc {
            crc::crc32c(&out[start..])
        } else {
            0
        };
        // RFC 5044 Figures 5/6, siw, Wireshark: least-significant octet first.
        out.extend_from_slice(&c.to_le_bytes());
        let written = out.len() - start;
        if !self.markers {
            self.pos = self.pos.wrapping_add(written as u64);
        } else {
            self.pos = self.pos.wrapping_add(CRC_LEN as u64);
        }
    }

    /// The largest ULPDU whose FPDU (markers off: length field, pad, CRC) fits in `room`
    /// octets, or `None` when not even an empty one does (RFC 5044 §4.1).
    pub fn max_ulpdu_for_room(room: usize) -> Option<usize> {
        // 2 + ULPDU + pad is a multiple of 4, then 4 octets of CRC.
        let body = room.checked_sub(CRC_LEN)? & !3;
        body.checked_sub(2).map(|u| u.min(usize::from(u16::MAX)))
    }

    /// Frame one FPDU (markers off) into any [`TxBuf`]: `ulpdu` appends the ULPDU (returning
    /// false when there is none), then the length field, pad and CRC are completed in place
    /// (RFC 5044 §4.1). The caller sizes the ULPDU by [`Framer::max_ulpdu_for_room`] so the
    /// FPDU fits; one that does not (a bug) is removed and logged, never sent truncated.
    /// Returns whether an FPDU was appended.
    // Inlined on purpose (see `QpEngine::complete_seq`): RPC NULL calls/s +3-5 %.
    #[inline]
    pub fn frame_into<B: TxBuf + ?Sized>(
        &mut self,
        out: &mut B,
        ulpdu: impl FnOnce(&mut B) -> bool,
    ) -> bool {
        debug_assert!(!self.markers, "frame_into is for markers off");
        let start = out.len();
        if out.room() < OVERHEAD {
            return false;
        }
        out.put(&[0, 0]);
        if !ulpdu(out) {
            out.truncate(start);
            return false;
        }
        let len = out.len() - start - 2;
        let pad = pad_len(len);
        if len > usize::from(u16::MAX) || out.room() < pad + CRC_LEN {
            log::error!("mpa: ULPDU of {len} octets does not fit its FPDU room; not framed");
            out.truncate(start);
            return false;
        }
        out.put(&[0u8; 3][..pad]);
        let fpdu = out.written_mut(start);
        fpdu[..2].copy_from_slice(&(len as u16).to_be_bytes());
        let c = if self.crc { crc::crc32c(fpdu) } else { 0 };
        out.put(&c.to_le_bytes());
        self.pos = self.pos.wrapping_add((out.len() - start) as u64);
        true
    }

    fn put_marker(&mut self, fpdu_ptr: u16, out: &mut Vec<u8>) {
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(fpdu_ptr & !3).to_be_bytes());
        self.pos = self.pos.wrapping_add(MARKER_LEN as u64);
    }

    /// Append `data`, inserting a marker wherever the stream position reaches a multiple of 512.
    fn put_with_markers(&mut self, mut data: &[u8], hdr_pos: u64, out: &mut Vec<u8>) {
        while !data.is_empty() {
            let off = (self.pos % MARKER_INTERVAL as u64) as usize;
            if off == 0 {
                self.put_marker(self.pos.wrapping_sub(hdr_pos) as u16, out);
                continue;
            }
            let n = (MARKER_INTERVAL - off).min(data.len());
            out.extend_from_slice(&data[..n]);
            self.pos = self.pos.wrapping_add(n as u64);
            data = &data[n..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc5044_s4_5_mulpdu_formulas() {
        assert_eq!(Framer::mulpdu_for_emss(1448, false), 1442);
        assert_eq!(Framer::mulpdu_for_emss(1447, false), 1447 - 6 - 3);
        assert_eq!(Framer::mulpdu_for_emss(1448, true), 1448 - (6 + 12));
        assert_eq!(Framer::mulpdu_for_emss(100, false), 128);
        assert_eq!(Framer::mulpdu_for_emss(1 << 20, false), 65535);
    }

    /// App. A: every FPDU of MULPDU octets, wherever it starts in the marker grid, fits EMSS.
    #[test]
    fn rfc5044_app_a_fpdu_fits_emss_at_every_stream_offset() {
        for emss in [536usize, 1000, 1447, 1448, 1460, 4096, 8960] {
            for markers in [false, true] {
                let m = Framer::mulpdu_for_emss(emss, markers);
                let ulpdu = vec![7u8; m];
                for start in (0..512).step_by(4) {
                    let mut f = Framer::new(true, markers);
                    f.pos = start as u64;
                    let mut out = Vec::new();
                    f.emit(&ulpdu, &[], &mut out);
                    assert!(
                        out.len() <= emss,
                        "emss {emss} markers {markers} start {start}"
                    );
                    assert_eq!(out.len() as u64, f.pos - start as u64);
                }
            }
        }
    }

    #[test]
    fn in_place_framing_equals_emit() {
        for crc in [false, true] {
            for len in [0usize, 1, 2, 3, 4, 5, 17, 1442, 65535] {
                let ulpdu: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
                let mut a = Framer::new(crc, false);
                let mut b = Framer::new(crc, false);
                let mut ea = vec![9u8; 5];
                a.emit(&ulpdu, &[], &mut ea);
                let mut eb = vec![9u8; 5];
                assert!(b.frame_into(&mut eb, |o| {
                    o.put(&ulpdu);
                    true
                }));
                assert_eq!(ea, eb, "crc {crc} len {len}");
                assert_eq!(a.stream_position(), b.stream_position());
            }
        }
        // Too long for ULPDU_Length: nothing framed, like emit.
        let mut f = Framer::new(true, false);
        let mut out = vec![1u8];
        assert!(!f.frame_into(&mut out, |o| {
            o.put_zeroed(65536);
            true
        }));
        assert_eq!(out, vec![1u8]);
        assert_eq!(f.stream_position(), 0);
    }

    #[test]
    fn frame_into_a_slice_equals_emit_and_fits_its_room() {
        use crate::wire::txbuf::SliceBuf;
        for crc in [false, true] {
            for room in [6usize, 7, 8, 9, 10, 11, 12, 13, 100, 1448, 1449, 1450, 1451] {
                let Some(max) = Framer::max_ulpdu_for_room(room) else {
                    assert!(room < 8);
                    continue;
                };
                let ulpdu: Vec<u8> = (0..max).map(|i| (i * 7 + 1) as u8).collect();
                let mut a = Framer::new(crc, false);
                let mut want = Vec::new();
                a.emit(&ulpdu, &[], &mut want);
                assert!(want.len() <= room, "room {room} max {max}");
                // One more octet would not fit.
                let mut big = Vec::new();
                Framer::new(crc, false).emit(&[0u8; 1].repeat(max + 1), &[], &mut big);
                assert!(
                    big.len() > room,
                    "room {room}: max {max} is not the largest"
                );
                let mut raw = vec![0u8; room];
                let mut sb = SliceBuf::new(&mut raw);
                let mut b = Framer::new(crc, false);
                assert!(b.frame_into(&mut sb, |o| {
                    o.put(&ulpdu);
                    true
                }));
                let n = sb.len();
                assert_eq!(&raw[..n], &want[..]);
                assert_eq!(a.stream_position(), b.stream_position());
            }
        }
        // A ULPDU larger than the room: nothing framed, nothing counted.
        let mut raw = vec![0u8; 20];
        let mut sb = SliceBuf::new(&mut raw);
        let mut f = Framer::new(true, false);
        assert!(!f.frame_into(&mut sb, |o| {
            o.put(&[1u8; 30]);
            true
        }));
        assert_eq!(sb.len(), 0);
        assert_eq!(f.stream_position(), 0);
    }

    #[test]
    fn crc_off_field_is_zero_and_present() {
        let mut f = Framer::new(false, false);
        let mut out = Vec::new();
        f.emit(&[1, 2], &[3], &mut out);
        assert_eq!(out, vec![0, 3, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0]);
    }
}
