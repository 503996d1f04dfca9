//! RDMAP control octet and headers (RFC 5040 §4): opcodes, the RDMA Read Request header
//! (§4.4) and the Terminate message body (§4.8).

use super::ddp::{Segment, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::terminate::{BitOrder, TermCause, TermControl, CONTROL_LEN};
use super::{be32, be64, Error, Result};
use crate::wire::txbuf::TxBuf;

/// RDMAP version this implementation speaks (RFC 5040 §4.1: RV = 01b).
pub const RDMAP_VERSION: u8 = 1;

/// RDMA message opcodes (RFC 5040 §4.1 Figure 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmapOpcode {
    /// 0000b RDMA Write (tagged).
    RdmaWrite = 0,
    /// 0001b RDMA Read Request (untagged, QN 1).
    ReadRequest = 1,
    /// 0010b RDMA Read Response (tagged).
    ReadResponse = 2,
    /// 0011b Send (QN 0).
    Send = 3,
    /// 0100b Send with Invalidate.
    SendInv = 4,
    /// 0101b Send with Solicited Event.
    SendSe = 5,
    /// 0110b Send with Solicited Event and Invalidate.
    SendSeInv = 6,
    /// 0111b Terminate (QN 2).
    Terminate = 7,
}

impl RdmapOpcode {
    /// The opcode for 4 bits, None for the reserved values 1000b-1111b.
    pub fn from_u8(v: u8) -> Option<RdmapOpcode> {
        Some(match v {
            0 => RdmapOpcode::RdmaWrite,
            1 => RdmapOpcode::ReadRequest,
            2 => RdmapOpcode::ReadResponse,
            3 => RdmapOpcode::Send,
            4 => RdmapOpcode::SendInv,
            5 => RdmapOpcode::SendSe,
            6 => RdmapOpcode::SendSeInv,
            7 => RdmapOpcode::Terminate,
            _ => return None,
        })
    }
    /// Whether the message uses the tagged buffer model (Figure 4 "Tagged Flag").
    pub fn is_tagged(self) -> bool {
        matches!(self, RdmapOpcode::RdmaWrite | RdmapOpcode::ReadResponse)
    }
    /// The DDP Queue Number of an untagged message (Figure 4), None for tagged ones.
    pub fn queue_number(self) -> Option<u32> {
        match self {
            RdmapOpcode::Send
            | RdmapOpcode::SendInv
            | RdmapOpcode::SendSe
            | RdmapOpcode::SendSeInv => Some(0),
            RdmapOpcode::ReadRequest => Some(1),
            RdmapOpcode::Terminate => Some(2),
            RdmapOpcode::RdmaWrite | RdmapOpcode::ReadResponse => None,
        }
    }
    /// The RDMAP control octet for this opcode with RV = 01b (RFC 5040 §4.1 Figure 3).
    pub fn control(self) -> u8 {
        (RDMAP_VERSION << 6) | self as u8
    }
}

/// RV field (2 most significant bits) of an RDMAP control octet.
pub fn control_version(ctrl: u8) -> u8 {
    ctrl >> 6
}

/// Opcode bits (4 least significant bits) of an RDMAP control octet.
pub fn control_opcode(ctrl: u8) -> u8 {
    ctrl & 0x0f
}

/// Length of the RDMA Read Request header (RFC 5040 §4.4).
pub const READ_REQUEST_LEN: usize = 28;

mod field {
    use core::ops::Range;
    pub const SINK_STAG: Range<usize> = 0..4;
    pub const SINK_TO: Range<usize> = 4..12;
    pub const SIZE: Range<usize> = 12..16;
    pub const SRC_STAG: Range<usize> = 16..20;
    pub const SRC_TO: Range<usize> = 20..28;
}

/// A view of an RDMA Read Request header (RFC 5040 §4.4).
#[derive(Debug, Clone)]
pub struct ReadRequest<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ReadRequest<T> {
    /// Wrap without checking.
    pub const fn new_unchecked(buffer: T) -> Self {
        ReadRequest { buffer }
    }
    /// Wrap after `check_len`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let r = Self::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }
    /// The 28 octets must be present.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < READ_REQUEST_LEN {
            return Err(Error::Truncated {
                need: READ_REQUEST_LEN,
                have,
            });
        }
        Ok(())
    }
    /// Data Sink STag.
    pub fn sink_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SINK_STAG])
    }
    /// Data Sink Tagged Offset.
    pub fn sink_to(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::SINK_TO])
    }
    /// RDMA Read Message Size.
    pub fn size(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SIZE])
    }
    /// Data Source STag.
    pub fn src_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SRC_STAG])
    }
    /// Data Source Tagged Offset.
    pub fn src_to(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::SRC_TO])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReadRequest<T> {
    /// Set the Data Sink STag.
    pub fn set_sink_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::SINK_STAG].copy_from_slice(&v.to_be_bytes())
    }
    /// Set the Data Sink TO.
    pub fn set_sink_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::SINK_TO].copy_from_slice(&v.to_be_bytes())
    }
    /// Set the RDMA Read Message Size.
    pub fn set_size(&mut self, v: u32) {
        self.buffer.as_mut()[field::SIZE].copy_from_slice(&v.to_be_bytes())
    }
    /// Set the Data Source STag.
    pub fn set_src_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::SRC_STAG].copy_from_slice(&v.to_be_bytes())
    }
    /// Set the Data Source TO.
    pub fn set_src_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::SRC_TO].copy_from_slice(&v.to_be_bytes())
    }
}

/// A parsed RDMA Read Request header (RFC 5040 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRequestRepr {
    /// Data Sink STag: the requester's buffer the Read Responses are placed into.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset: where in that buffer the data starts.
    pub sink_to: u64,
    /// RDMA Read Message Size in octets (0 is legal, e.g. a Read RTR).
    pub size: u32,
    /// Data Source STag: the responder's buffer to read from.
    pub src_stag: u32,
    /// Data Source Tagged Offset: where in that buffer the data starts.
    pub src_to: u64,
}

impl ReadRequestRepr {
    /// Parse from a view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(r: &ReadRequest<&T>) -> Result<Self> {
        let r = ReadRequest::new_checked(r.buffer.as_ref())?;
        Ok(ReadRequestRepr {
            sink_stag: r.sink_stag(),
            sink_to: r.sink_to(),
            size: r.size(),
            src_stag: r.src_stag(),
            src_to: r.src_to(),
        })
    }
    /// 28.
    pub fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }
    /// Write into the view (which must hold 28 octets).
    pub fn emit(&self, r: &mut ReadRequest<&mut [u8]>) {
        r.set_sink_stag(self.sink_stag);
        r.set_sink_to(self.sink_to);
        r.set_size(self.size);
        r.set_src_stag(self.src_stag);
        r.set_src_to(self.src_to);
    }
    /// Append the header to `out`.
    pub fn emit_to_vec(&self, out: &mut Vec<u8>) {
        self.emit_to(out);
    }

    /// Append the header to any [`TxBuf`].
    pub fn emit_to<B: TxBuf + ?Sized>(&self, out: &mut B) {
        let h = out.put_zeroed(READ_REQUEST_LEN);
        if h.len() == READ_REQUEST_LEN {
            self.emit(&mut ReadRequest::new_unchecked(h));
        }
    }
}

/// A parsed Terminate header (RFC 5040 §4.8 Figure 7): control, then when M or D is set the
/// DDP Segment Length, when D is set the terminated DDP header (14 or 18 octets by its T flag),
/// when R is set the terminated RDMA Read Request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminateRepr {
    /// Layer / EType / Code and the M/D/R bits.
    pub control: TermControl,
    /// DDP Segment Length of the offending segment (present when M or D).
    pub ddp_segment_len: Option<u16>,
    /// The offending segment's DDP header (with its RDMAP control octet), when D.
    pub ddp_header: Option<Vec<u8>>,
    /// The offending Read Request header, when R.
    pub rdma_header: Option<ReadRequestRepr>,
}

impl TerminateRepr {
    /// A Terminate for `cause` about an offending segment (`header` = its DDP header, `seg_len`
    /// its length), including what RFC 5040 §4.8 Figure 10 / §7.1 say to include: nothing for
    /// a local catastrophic error or when no segment is known; DDP header and length otherwise;
    /// the Read Request header for an error on a Read Request.
    pub fn for_cause(
        cause: TermCause,
        offending: Option<(&[u8], u16)>,
        read_request: Option<ReadRequestRepr>,
    ) -> TerminateRepr {
        let local_catastrophic = cause.etype == 0 && cause.layer != super::terminate::Layer::Llp;
        let hdr = if local_catastrophic { None } else { offending };
        let rdma_header = if hdr.is_some() { read_request } else { None };
        TerminateRepr {
            control: TermControl {
                cause,
                m: hdr.is_some(),
                d: hdr.is_some(),
                r: rdma_header.is_some(),
            },
            ddp_segment_len: hdr.map(|h| h.1),
            ddp_header: hdr.map(|h| h.0.to_vec()),
            rdma_header,
        }
    }

    /// Parse a Terminate header (the DDP payload of a Terminate message), tolerating siw's bit
    /// order. Returns the order the control field was found in.
    pub fn parse(b: &[u8]) -> Result<(TerminateRepr, BitOrder)> {
        let (control, order) = TermControl::parse(b)?;
        let mut off = CONTROL_LEN;
        let mut ddp_segment_len = None;
        let mut ddp_header = None;
        let mut rdma_header = None;
        let need = |n: usize| Error::Truncated {
            need: n,
            have: b.len(),
        };
        if control.m || control.d {
            let l = b.get(off..off + 2).ok_or(need(off + 2))?;
            ddp_segment_len = Some(u16::from_be_bytes([l[0], l[1]]));
            off += 2;
        }
        if control.d {
            let first = *b.get(off).ok_or(need(off + 1))?;
            let len = if first & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            let h = b.get(off..off + len).ok_or(need(off + len))?;
            Segment::new_checked(h)?;
            ddp_header = Some(h.to_vec());
            off += len;
        }
        if control.r {
            let h = b.get(off..).ok_or(need(off))?;
            rdma_header = Some(ReadRequestRepr::parse(&ReadRequest::new_unchecked(&h))?);
        }
        Ok((
            TerminateRepr {
                control,
                ddp_segment_len,
                ddp_header,
                rdma_header,
            },
            order,
        ))
    }

    /// Octets `emit_to_vec` appends.
    pub fn buffer_len(&self) -> usize {
        let mut n = CONTROL_LEN;
        if self.control.m || self.control.d {
            n += 2;
        }
        if self.control.d {
            n += self.ddp_header.as_ref().map_or(0, |h| h.len());
        }
        if self.control.r && self.rdma_header.is_some() {
            n += READ_REQUEST_LEN;
        }
        n
    }

    /// Append the Terminate header in RFC order.
    pub fn emit_to_vec(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.control.emit());
        if self.control.m || self.control.d {
            out.extend_from_slice(&self.ddp_segment_len.unwrap_or(0).to_be_bytes());
        }
        if self.control.d {
            if let Some(h) = &self.ddp_header {
                out.extend_from_slice(h);
            }
        }
        if self.control.r {
            if let Some(r) = &self.rdma_header {
                r.emit_to_vec(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ddp::HeaderRepr;
    use crate::wire::terminate::Layer;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Golden: siw's Read Request from rping (guest-loopback-rping-siw0-C3.pcap frame 9).
    #[test]
    fn rfc5040_s4_4_siw_read_request_golden() {
        let b = hex(concat!(
            "41410000000000000001000000010000000",
            "08d0a3500000055f5cd87fee000000040439b080000005608d201db70"
        ));
        let seg = Segment::new_checked(&b[..]).unwrap();
        assert_eq!((seg.qn(), seg.msn(), seg.mo()), (1, 1, 0));
        assert_eq!(
            RdmapOpcode::from_u8(control_opcode(seg.rdmap_control())),
            Some(RdmapOpcode::ReadRequest)
        );
        assert_eq!(control_version(seg.rdmap_control()), 1);
        let r = ReadRequestRepr::parse(&ReadRequest::new_unchecked(&seg.payload())).unwrap();
        assert_eq!(
            r,
            ReadRequestRepr {
                sink_stag: 0x8d0a_3500,
                sink_to: 0x0000_55f5_cd87_fee0,
                size: 0x40,
                src_stag: 0x439b_0800,
                src_to: 0x0000_5608_d201_db70,
            }
        );
        let mut out = Vec::new();
        r.emit_to_vec(&mut out);
        assert_eq!(&out[..], seg.payload());
    }

    /// Golden: siw's Read Response header (frame 10): tagged, L, opcode 0010b.
    #[test]
    fn rfc5040_s4_5_siw_read_response_golden() {
        let b = hex("c1428d0a3500000055f5cd87fee0");
        let h = HeaderRepr::parse(&Segment::new_unchecked(&b)).unwrap();
        assert_eq!(h.rdmap_control, RdmapOpcode::ReadResponse.control());
    }

    #[test]
    fn rfc5040_s4_1_opcode_table() {
        for v in 0..16u8 {
            let op = RdmapOpcode::from_u8(v);
            assert_eq!(op.is_some(), v < 8);
            if let Some(op) = op {
                assert_eq!(op.is_tagged(), op.queue_number().is_none());
                assert_eq!(op.control(), 0x40 | v);
            }
        }
        assert_eq!(RdmapOpcode::Terminate.queue_number(), Some(2));
    }

    #[test]
    fn rfc5040_s4_8_local_catastrophic_carries_no_headers() {
        let t = TerminateRepr::for_cause(
            TermCause::RDMAP_LOCAL_CATASTROPHIC,
            Some((&[0x41; 18], 18)),
            None,
        );
        assert!(!t.control.d && !t.control.m && t.ddp_header.is_none());
        let mut out = Vec::new();
        t.emit_to_vec(&mut out);
        assert_eq!(out, vec![0, 0, 0, 0]);
    }

    #[test]
    fn rfc5040_s4_8_terminate_with_read_request_header_round_trip() {
        let mut hdr = Vec::new();
        HeaderRepr {
            last: true,
            ddp_version: 1,
            rdmap_control: RdmapOpcode::ReadRequest.control(),
            buffer: crate::wire::ddp::BufferRepr::Untagged {
                inv_stag: 0,
                qn: 1,
                msn: 3,
                mo: 0,
            },
        }
        .emit_to_vec(&mut hdr);
        let rr = ReadRequestRepr {
            sink_stag: 5,
            sink_to: 6,
            size: 7,
            src_stag: 8,
            src_to: 9,
        };
        let t = TerminateRepr::for_cause(TermCause::RDMAP_INVALID_STAG, Some((&hdr, 46)), Some(rr));
        let mut out = Vec::new();
        t.emit_to_vec(&mut out);
        assert_eq!(out.len(), t.buffer_len());
        assert_eq!(&out[..4], &[0x01, 0x00, 0xe0, 0x00]);
        let (p, o) = TerminateRepr::parse(&out).unwrap();
        assert_eq!(o, BitOrder::Rfc);
        assert_eq!(p, t);
        assert_eq!(p.control.cause.layer, Layer::Rdmap);
    }

    proptest! {
        #[test]
        fn read_request_round_trip(a in any::<u32>(), b in any::<u64>(), c in any::<u32>(),
                                   d in any::<u32>(), e in any::<u64>()) {
            let r = ReadRequestRepr { sink_stag: a, sink_to: b, size: c, src_stag: d, src_to: e };
            let mut out = Vec::new();
            r.emit_to_vec(&mut out);
            prop_assert_eq!(out.len(), r.buffer_len());
            prop_assert_eq!(ReadRequestRepr::parse(&ReadRequest::new_unchecked(&out)).unwrap(), r);
        }

        #[test]
        fn terminate_round_trip(tagged in any::<bool>(), len in any::<u16>(), with_rr in any::<bool>(),
                                fill in any::<u8>()) {
            let mut hdr = vec![fill; if tagged { 14 } else { 18 }];
            hdr[0] = if tagged { 0xc1 } else { 0x41 };
            let rr = if with_rr { Some(ReadRequestRepr { size: 9, ..Default::default() }) } else { None };
            let t = TerminateRepr::for_cause(TermCause::DDP_UNTAGGED_INVALID_QN, Some((&hdr, len)), rr);
            let mut out = Vec::new();
            t.emit_to_vec(&mut out);
            prop_assert_eq!(out.len(), t.buffer_len());
            let (p, _) = TerminateRepr::parse(&out).unwrap();
            prop_assert_eq!(p, t);
        }

        #[test]
        fn terminate_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = TerminateRepr::parse(&b);
        }
    }
}
