//! DDP segment headers (RFC 5041 §4): the tagged (14-octet) and untagged (18-octet) buffer model
//! headers, each carrying the RDMAP control octet (RFC 5040 §4.1) in the first ULP-reserved octet.
//!
//! The view never judges field values (DDP version, QN, opcode): the QP engine must answer a bad
//! value with the specific TERMINATE code RFC 5041 §7.2 / RFC 5040 §7 assign, so parsing only
//! fails on truncation.

use super::{be32, be64, Error, Result};
use crate::wire::txbuf::TxBuf;

/// Length of a tagged DDP header including the RDMAP control octet (RFC 5041 §4.2).
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged DDP header including the RDMAP control octet and the 4 further
/// ULP-reserved octets (Invalidate STag, RFC 5041 §4.3, RFC 5040 §4.1).
pub const UNTAGGED_HEADER_LEN: usize = 18;
/// DDP version this implementation speaks (RFC 5041 §4.1: DV = 01b).
pub const DDP_VERSION: u8 = 1;

/// Queue Number of Send-type messages (RFC 5040 §4.1 Figure 4).
pub const QN_SEND: u32 = 0;
/// Queue Number of RDMA Read Requests.
pub const QN_READ_REQUEST: u32 = 1;
/// Queue Number of Terminate messages.
pub const QN_TERMINATE: u32 = 2;

mod field {
    use core::ops::Range;
    /// DDP control: T(1) L(1) Rsvd(4) DV(2) (RFC 5041 §4.1).
    pub const CTRL: usize = 0;
    /// RDMAP control octet (first octet of RsvdULP).
    pub const RDMAP: usize = 1;
    pub const T_STAG: Range<usize> = 2..6;
    pub const T_TO: Range<usize> = 6..14;
    pub const U_RSVD_ULP: Range<usize> = 2..6;
    pub const U_QN: Range<usize> = 6..10;
    pub const U_MSN: Range<usize> = 10..14;
    pub const U_MO: Range<usize> = 14..18;
    pub const FLAG_T: u8 = 0x80;
    pub const FLAG_L: u8 = 0x40;
    pub const DV_MASK: u8 = 0x03;
}

/// A read/write view of one DDP segment: header and payload (RFC 5041 §4.4).
#[derive(Debug, Clone)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wrap without checking the length (getters may panic on a short buffer).
    pub const fn new_unchecked(buffer: T) -> Segment<T> {
        Segment { buffer }
    }

    /// Wrap and validate that the whole header (tagged or untagged per the T flag) is present.
    pub fn new_checked(buffer: T) -> Result<Segment<T>> {
        let s = Self::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Check that the buffer holds the complete header the T flag announces.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let Some(&ctrl) = b.first() else {
            return Err(Error::Truncated { need: 2, have: 0 });
        };
        let need = if ctrl & field::FLAG_T != 0 {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        if b.len() < need {
            return Err(Error::Truncated {
                need,
                have: b.len(),
            });
        }
        Ok(())
    }

    /// Consume the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// T flag: tagged buffer model (RFC 5041 §4.1).
    pub fn tagged(&self) -> bool {
        self.buffer.as_ref()[field::CTRL] & field::FLAG_T != 0
    }
    /// L flag: last segment of the DDP message (RFC 5041 §4.1).
    pub fn last(&self) -> bool {
        self.buffer.as_ref()[field::CTRL] & field::FLAG_L != 0
    }
    /// DDP version (DV, RFC 5041 §4.1).
    pub fn ddp_version(&self) -> u8 {
        self.buffer.as_ref()[field::CTRL] & field::DV_MASK
    }
    /// The RDMAP control octet (RFC 5040 §4.1).
    pub fn rdmap_control(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP]
    }
    /// Tagged: the Data Sink STag (RFC 5041 §4.2).
    pub fn stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::T_STAG])
    }
    /// Tagged: the Tagged Offset (RFC 5041 §4.2).
    pub fn to(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::T_TO])
    }
    /// Untagged: the 4 ULP-reserved octets after the RDMAP control octet; RDMAP's Invalidate
    /// STag for Send with Invalidate (RFC 5040 §4.1).
    pub fn inv_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::U_RSVD_ULP])
    }
    /// Untagged: Queue Number (RFC 5041 §4.3).
    pub fn qn(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::U_QN])
    }
    /// Untagged: Message Sequence Number (RFC 5041 §4.3).
    pub fn msn(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::U_MSN])
    }
    /// Untagged: Message Offset (RFC 5041 §4.3).
    pub fn mo(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::U_MO])
    }
    /// Header length per the T flag.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }
    /// The header octets.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }
    /// The DDP segment payload (ULP data, or an RDMAP header for Read Request / Terminate).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Segment<T> {
    fn ctrl_bit(&mut self, bit: u8, v: bool) {
        let b = &mut self.buffer.as_mut()[field::CTRL];
        *b = if v { *b | bit } else { *b & !bit };
    }
    /// Set the T flag.
    pub fn set_tagged(&mut self, v: bool) {
        self.ctrl_bit(field::FLAG_T, v)
    }
    /// Set the L flag.
    pub fn set_last(&mut self, v: bool) {
        self.ctrl_bit(field::FLAG_L, v)
    }
    /// Set DV (reserved bits are cleared, RFC 5041 §4.1: Rsvd MUST be zero).
    pub fn set_ddp_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::CTRL];
        *b = (*b & (field::FLAG_T | field::FLAG_L)) | (v & field::DV_MASK);
    }
    /// Set the RDMAP control octet.
    pub fn set_rdmap_control(&mut self, v: u8) {
        self.buffer.as_mut()[field::RDMAP] = v;
    }
    /// Set the tagged STag.
    pub fn set_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::T_STAG].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the Tagged Offset.
    pub fn set_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::T_TO].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the Invalidate STag / ULP-reserved octets.
    pub fn set_inv_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::U_RSVD_ULP].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the Queue Number.
    pub fn set_qn(&mut self, v: u32) {
        self.buffer.as_mut()[field::U_QN].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the MSN.
    pub fn set_msn(&mut self, v: u32) {
        self.buffer.as_mut()[field::U_MSN].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the MO.
    pub fn set_mo(&mut self, v: u32) {
        self.buffer.as_mut()[field::U_MO].copy_from_slice(&v.to_be_bytes());
    }
}

/// The buffer-model specific part of a DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferRepr {
    /// Tagged buffer model: STag and TO (RFC 5041 §4.2).
    Tagged {
        /// STag of the Data Sink's tagged buffer.
        stag: u32,
        /// Tagged Offset: where in that buffer this segment's payload goes.
        to: u64,
    },
    /// Untagged buffer model: RsvdULP (RDMAP Invalidate STag), QN, MSN, MO (RFC 5041 §4.3).
    Untagged {
        /// `RsvdULP[8:39]`: RDMAP's Invalidate STag (RFC 5040 §4.1); 0 unless Send with Invalidate.
        inv_stag: u32,
        /// Queue Number: which untagged buffer queue of the Data Sink (RDMAP: 0 Send, 1 Read
        /// Request, 2 Terminate; RFC 5040 §3.1).
        qn: u32,
        /// Message Sequence Number: per-QN message count, starting at 1, modulo 2^32.
        msn: u32,
        /// Message Offset: octet offset of this segment's payload within the DDP message.
        mo: u32,
    },
}

/// A parsed DDP header (RFC 5041 §4), with the raw RDMAP control octet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    /// L flag.
    pub last: bool,
    /// DV field (2 bits) as received; the engine validates it (RFC 5041 §7.2).
    pub ddp_version: u8,
    /// RDMAP control octet (RFC 5040 §4.1).
    pub rdmap_control: u8,
    /// Tagged or untagged fields.
    pub buffer: BufferRepr,
}

impl HeaderRepr {
    /// Parse the header of a checked segment.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &Segment<&T>) -> Result<HeaderRepr> {
        let seg = Segment::new_checked(seg.buffer.as_ref())?;
        let buffer = if seg.tagged() {
            BufferRepr::Tagged {
                stag: seg.stag(),
                to: seg.to(),
            }
        } else {
            BufferRepr::Untagged {
                inv_stag: seg.inv_stag(),
                qn: seg.qn(),
                msn: seg.msn(),
                mo: seg.mo(),
            }
        };
        Ok(HeaderRepr {
            last: seg.last(),
            ddp_version: seg.ddp_version(),
            rdmap_control: seg.rdmap_control(),
            buffer,
        })
    }

    /// Header length on the wire.
    pub fn buffer_len(&self) -> usize {
        match self.buffer {
            BufferRepr::Tagged { .. } => TAGGED_HEADER_LEN,
            BufferRepr::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// Write the header into the first `buffer_len()` octets of `seg`.
    pub fn emit(&self, seg: &mut Segment<&mut [u8]>) {
        let b = &mut seg.buffer[..self.buffer_len()];
        b[field::CTRL] = 0;
        let mut s = Segment::new_unchecked(b);
        s.set_ddp_version(self.ddp_version);
        s.set_last(self.last);
        s.set_rdmap_control(self.rdmap_control);
        match self.buffer {
            BufferRepr::Tagged { stag, to } => {
                s.set_tagged(true);
                s.set_stag(stag);
                s.set_to(to);
            }
            BufferRepr::Untagged {
                inv_stag,
                qn,
                msn,
                mo,
            } => {
                s.set_tagged(false);
                s.set_inv_stag(inv_stag);
                s.set_qn(qn);
                s.set_msn(msn);
                s.set_mo(mo);
            }
        }
    }

    /// Append the emitted header to `out` (convenience for engines building ULPDUs).
    pub fn emit_to_vec(&self, out: &mut Vec<u8>) {
        self.emit_to(out);
    }

    /// Append the emitted header to any [`TxBuf`] (a `Vec` or the TCP transmit ring).
    pub fn emit_to<B: TxBuf + ?Sized>(&self, out: &mut B) {
        let h = out.put_zeroed(self.buffer_len());
        if h.len() == self.buffer_len() {
            self.emit(&mut Segment::new_unchecked(h));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Golden bytes: rping's first Send from siw (guest-loopback-rping-siw0-C3.pcap frame 8).
    #[test]
    fn rfc5041_s4_3_siw_send_header_golden() {
        let b = hex("41430000000000000000000000010000000000005608d201db70439b080000000040");
        let seg = Segment::new_checked(&b[..]).unwrap();
        let h = HeaderRepr::parse(&Segment::new_unchecked(&b)).unwrap();
        assert_eq!(
            h,
            HeaderRepr {
                last: true,
                ddp_version: 1,
                rdmap_control: 0x43,
                buffer: BufferRepr::Untagged {
                    inv_stag: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0
                }
            }
        );
        assert_eq!(seg.payload().len(), 16);
        let mut out = Vec::new();
        h.emit_to_vec(&mut out);
        assert_eq!(&out[..], &b[..18]);
    }

    /// Golden bytes: a tagged RDMA Write from siw (rping frame 13).
    #[test]
    fn rfc5041_s4_2_siw_tagged_write_header_golden() {
        let b = hex("c140e77cdc0000005608d2019ee072646d61");
        let h = HeaderRepr::parse(&Segment::new_unchecked(&b)).unwrap();
        assert_eq!(
            h.buffer,
            BufferRepr::Tagged {
                stag: 0xe77c_dc00,
                to: 0x0000_5608_d201_9ee0
            }
        );
        assert!(h.last);
        assert_eq!(h.rdmap_control, 0x40);
        let mut out = Vec::new();
        h.emit_to_vec(&mut out);
        assert_eq!(&out[..], &b[..14]);
    }

    #[test]
    fn rfc5041_s4_truncated_headers_are_rejected() {
        assert!(Segment::new_checked(&[][..]).is_err());
        assert!(Segment::new_checked(&[0xc1u8; 13][..]).is_err());
        assert!(Segment::new_checked(&[0x41u8; 17][..]).is_err());
        assert!(Segment::new_checked(&[0x41u8; 18][..]).is_ok());
    }

    proptest! {
        #[test]
        fn header_round_trip(tagged in any::<bool>(), last in any::<bool>(), dv in 0u8..4,
                             rc in any::<u8>(), a in any::<u32>(), b in any::<u64>(),
                             c in any::<u32>(), d in any::<u32>()) {
            let buffer = if tagged {
                BufferRepr::Tagged { stag: a, to: b }
            } else {
                BufferRepr::Untagged { inv_stag: a, qn: b as u32, msn: c, mo: d }
            };
            let h = HeaderRepr { last, ddp_version: dv, rdmap_control: rc, buffer };
            let mut out = Vec::new();
            h.emit_to_vec(&mut out);
            prop_assert_eq!(out.len(), h.buffer_len());
            let p = HeaderRepr::parse(&Segment::new_unchecked(&out)).unwrap();
            prop_assert_eq!(p, h);
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = HeaderRepr::parse(&Segment::new_unchecked(&b));
        }
    }
}
