//! MPA Request / Reply / Reject frames (RFC 5044 §7.1.1) with the RFC 6581 enhanced connection
//! setup extensions (RFC 6581 §6 frame layout, §9 enhanced RDMA connection establishment data).
//!
//! ```text
//!  0  Key (16 octets: "MPA ID Req Frame" or "MPA ID Rep Frame")
//! 16  |M|C|R|S| Res |  Rev (8)  |  PD_Length (16)  |
//! 20  Private Data (PD_Length octets, at most 512); when S=1 it begins with
//!     |A|B| IRD (14) |C|D| ORD (14) |   (network byte order, RFC 6581 §9)
//! ```

use super::{Error, Result};

/// "MPA ID Req Frame": the key an initiator sends (RFC 5044 §7.1.1).
pub const REQ_KEY: [u8; 16] = *b"MPA ID Req Frame";
/// "MPA ID Rep Frame": the key a responder sends (RFC 5044 §7.1.1).
pub const REP_KEY: [u8; 16] = *b"MPA ID Rep Frame";
/// Length of the fixed part of a Request/Reply frame (key + flags/Rev/PD_Length).
pub const HEADER_LEN: usize = 20;
/// Largest Private Data field (RFC 5044 §7.1.1 "PD_Length"; RFC 6581 §7 includes enhanced data).
pub const MAX_PRIVATE_DATA: usize = 512;
/// Length of the RFC 6581 §9 enhanced connection establishment data.
pub const ENHANCED_DATA_LEN: usize = 4;
/// Largest ULP private data in an enhanced frame (RFC 6581 §9: "reduced by 4 bytes").
pub const MAX_ENHANCED_ULP_PRIVATE_DATA: usize = MAX_PRIVATE_DATA - ENHANCED_DATA_LEN;
/// The IRD/ORD value meaning "no automatic negotiation, the ULP handles it" (RFC 6581 §9.1).
pub const IRD_ORD_ULP: u16 = 0x3FFF;
/// Mask of the 14-bit IRD and ORD fields (RFC 6581 §9).
pub const IRD_ORD_MASK: u16 = 0x3FFF;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const KEY: Range<usize> = 0..16;
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LENGTH: Range<usize> = 18..20;
    pub const PRIVATE_DATA: RangeFrom<usize> = 20..;

    pub const FLAG_M: u8 = 0x80;
    pub const FLAG_C: u8 = 0x40;
    pub const FLAG_R: u8 = 0x20;
    pub const FLAG_S: u8 = 0x10;
    pub const RES_MASK: u8 = 0x0F;

    // Enhanced data (RFC 6581 §9), offsets within the private data.
    pub const IRD_WORD: Range<usize> = 0..2;
    pub const ORD_WORD: Range<usize> = 2..4;
    pub const FLAG_A_OR_C: u16 = 0x8000;
    pub const FLAG_B_OR_D: u16 = 0x4000;
}

/// Which startup frame the key names (RFC 5044 §7.1.1 "Key").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// "MPA ID Req Frame": sent by the initiator.
    Request,
    /// "MPA ID Rep Frame": sent by the responder (accept or, with R=1, reject).
    Reply,
}

impl FrameKind {
    /// The 16-octet key for this kind of frame.
    pub fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => &REQ_KEY,
            FrameKind::Reply => &REP_KEY,
        }
    }
}

/// A zero-copy view of an MPA Request/Reply frame (RFC 5044 §7.1.1, RFC 6581 §6).
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap a buffer without checking its length; getters may panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wrap a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Check that the fixed header and the announced private data are present and that
    /// PD_Length is at most 512 (RFC 5044 §7.1.1 "PD_Length": more is improperly formatted).
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated {
                need: HEADER_LEN,
                have,
            });
        }
        let pd = usize::from(self.pd_length());
        if pd > MAX_PRIVATE_DATA {
            return Err(Error::Malformed("MPA PD_Length exceeds 512"));
        }
        if have < HEADER_LEN + pd {
            return Err(Error::Truncated {
                need: HEADER_LEN + pd,
                have,
            });
        }
        Ok(())
    }

    /// Consume the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-octet key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The frame kind the key names, or `None` for any other key (RFC 5044 §7.1.2 rule 5).
    pub fn kind(&self) -> Option<FrameKind> {
        match self.key() {
            k if k == REQ_KEY => Some(FrameKind::Request),
            k if k == REP_KEY => Some(FrameKind::Reply),
            _ => None,
        }
    }

    fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// M: the sender requires markers on the FPDUs it receives (RFC 5044 §7.1.1).
    pub fn markers(&self) -> bool {
        self.flags() & field::FLAG_M != 0
    }

    /// C: the sender prefers CRCs (RFC 5044 §7.1.1).
    pub fn crc(&self) -> bool {
        self.flags() & field::FLAG_C != 0
    }

    /// R: rejected connection (Reply only; zero and unchecked in a Request, RFC 5044 §7.1.1).
    pub fn rejected(&self) -> bool {
        self.flags() & field::FLAG_R != 0
    }

    /// S: the private data begins with enhanced connection data (RFC 6581 §6).
    pub fn enhanced(&self) -> bool {
        self.flags() & field::FLAG_S != 0
    }

    /// Res: reserved bits (RFC 6581 §6: zero on send, not checked on receive).
    pub fn res(&self) -> u8 {
        self.flags() & field::RES_MASK
    }

    /// Rev: the MPA revision (RFC 5044 §7.1.1, RFC 6581 §6).
    pub fn rev(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length: octets of private data that follow.
    pub fn pd_length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PD_LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The whole private data field (including any enhanced data).
    pub fn private_data(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.pd_length());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }

    /// Total frame length: header plus private data.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_length())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the 16-octet key.
    pub fn set_key(&mut self, key: &[u8; 16]) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(key);
    }

    /// Set M, C, R, S; Res is written as zero (RFC 5044 §7.1.1).
    pub fn set_flags(&mut self, m: bool, c: bool, r: bool, s: bool) {
        let mut f = 0;
        if m {
            f |= field::FLAG_M;
        }
        if c {
            f |= field::FLAG_C;
        }
        if r {
            f |= field::FLAG_R;
        }
        if s {
            f |= field::FLAG_S;
        }
        self.buffer.as_mut()[field::FLAGS] = f;
    }

    /// Set Rev.
    pub fn set_rev(&mut self, rev: u8) {
        self.buffer.as_mut()[field::REV] = rev;
    }

    /// Set PD_Length.
    pub fn set_pd_length(&mut self, len: u16) {
        self.buffer.as_mut()[field::PD_LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// The private data area after the header (as long as the buffer allows).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// RFC 6581 §9 enhanced RDMA connection establishment data: `A|B|IRD(14)|C|D|ORD(14)`.
///
/// Flags are kept as received: RFC 6581 §9.2 says B, C and D are ignored when A=0, which is the
/// engine's decision, not the parser's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EnhancedData {
    /// A: peer-to-peer connection model.
    pub p2p: bool,
    /// B: zero-length FULPDU (Send) RTR.
    pub rtr_send: bool,
    /// C: zero-length RDMA Write RTR.
    pub rtr_write: bool,
    /// D: zero-length RDMA Read RTR.
    pub rtr_read: bool,
    /// IRD (14 bits; 0x3FFF = the ULP negotiates, RFC 6581 §9.1).
    pub ird: u16,
    /// ORD (14 bits; 0x3FFF = the ULP negotiates).
    pub ord: u16,
}

impl EnhancedData {
    /// Parse the first four octets of the private data (RFC 6581 §9, network byte order).
    pub fn parse(data: &[u8]) -> Result<Self> {
        let (Some(i), Some(o)) = (data.get(field::IRD_WORD), data.get(field::ORD_WORD)) else {
            return Err(Error::Truncated {
                need: ENHANCED_DATA_LEN,
                have: data.len(),
            });
        };
        let iw = u16::from_be_bytes([i[0], i[1]]);
        let ow = u16::from_be_bytes([o[0], o[1]]);
        Ok(EnhancedData {
            p2p: iw & field::FLAG_A_OR_C != 0,
            rtr_send: iw & field::FLAG_B_OR_D != 0,
            rtr_write: ow & field::FLAG_A_OR_C != 0,
            rtr_read: ow & field::FLAG_B_OR_D != 0,
            ird: iw & IRD_ORD_MASK,
            ord: ow & IRD_ORD_MASK,
        })
    }

    /// Write the four octets into `out[..4]` (IRD/ORD masked to 14 bits).
    pub fn emit(&self, out: &mut [u8]) {
        let mut iw = self.ird & IRD_ORD_MASK;
        let mut ow = self.ord & IRD_ORD_MASK;
        if self.p2p {
            iw |= field::FLAG_A_OR_C;
        }
        if self.rtr_send {
            iw |= field::FLAG_B_OR_D;
        }
        if self.rtr_write {
            ow |= field::FLAG_A_OR_C;
        }
        if self.rtr_read {
            ow |= field::FLAG_B_OR_D;
        }
        out[field::IRD_WORD].copy_from_slice(&iw.to_be_bytes());
        out[field::ORD_WORD].copy_from_slice(&ow.to_be_bytes());
    }
}

/// A parsed MPA Request/Reply frame (RFC 5044 §7.1.1, RFC 6581 §6, §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRepr {
    /// Request or Reply (from the key).
    pub kind: FrameKind,
    /// M bit.
    pub markers: bool,
    /// C bit.
    pub crc: bool,
    /// R bit (meaningful in a Reply only).
    pub rejected: bool,
    /// Rev, as received (the engine decides which it accepts).
    pub rev: u8,
    /// Enhanced data when S=1 (RFC 6581 §9); `None` when S=0.
    pub enhanced: Option<EnhancedData>,
    /// ULP private data (after the enhanced data when S=1).
    pub private_data: Vec<u8>,
}

impl FrameRepr {
    /// Parse a frame. Errors: unknown key, S=1 with fewer than 4 octets of private data
    /// (RFC 6581 §6: "Private Data MUST begin with enhanced ... data"); length errors come from
    /// `check_len`. Reserved bits are ignored (RFC 5044 §7.1.1 "Res").
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Self> {
        frame.check_len()?;
        let kind = frame
            .kind()
            .ok_or(Error::Malformed("MPA key is neither Request nor Reply"))?;
        let pd = frame.private_data();
        let (enhanced, ulp) = if frame.enhanced() {
            let e = EnhancedData::parse(pd)
                .map_err(|_| Error::Malformed("MPA S=1 with less than 4 octets of private data"))?;
            (Some(e), pd.get(ENHANCED_DATA_LEN..).unwrap_or(&[]))
        } else {
            (None, pd)
        };
        Ok(FrameRepr {
            kind,
            markers: frame.markers(),
            crc: frame.crc(),
            rejected: frame.rejected(),
            rev: frame.rev(),
            enhanced,
            private_data: ulp.to_vec(),
        })
    }

    /// PD_Length this frame will carry (enhanced data included).
    pub fn pd_length(&self) -> usize {
        self.private_data.len() + self.enhanced.map_or(0, |_| ENHANCED_DATA_LEN)
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Whether the private data fits the 512-octet limit (RFC 5044 §7.1.1, RFC 6581 §7).
    pub fn is_valid_length(&self) -> bool {
        self.pd_length() <= MAX_PRIVATE_DATA
    }

    /// Write the frame into `frame` (whose buffer holds at least `buffer_len()` octets).
    /// The caller ensures `is_valid_length()`; a longer PD_Length is written truncated to 16
    /// bits only in debug-unchecked misuse.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        debug_assert!(self.is_valid_length());
        frame.set_key(self.kind.key());
        frame.set_flags(
            self.markers,
            self.crc,
            self.rejected,
            self.enhanced.is_some(),
        );
        frame.set_rev(self.rev);
        frame.set_pd_length(self.pd_length() as u16);
        let pd = frame.private_data_mut();
        let mut at = 0;
        if let Some(e) = &self.enhanced {
            e.emit(&mut pd[..ENHANCED_DATA_LEN]);
            at = ENHANCED_DATA_LEN;
        }
        pd[at..at + self.private_data.len()].copy_from_slice(&self.private_data);
    }

    /// Append the emitted frame to `out`.
    pub fn emit_to_vec(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.buffer_len(), 0);
        self.emit(&mut Frame::new_unchecked(&mut out[start..]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// siw's enhanced request (peer/README.md): `10 02 0004 0001 0001`.
    #[test]
    fn parses_siw_enhanced_request() {
        let mut b = REQ_KEY.to_vec();
        b.extend_from_slice(&[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]);
        let r = FrameRepr::parse(&Frame::new_checked(&b).unwrap()).unwrap();
        assert_eq!(r.kind, FrameKind::Request);
        assert!(!r.crc && !r.markers && !r.rejected);
        assert_eq!(r.rev, 2);
        let e = r.enhanced.unwrap();
        assert_eq!((e.ird, e.ord, e.p2p), (1, 1, false));
        assert!(r.private_data.is_empty());
        let mut out = Vec::new();
        r.emit_to_vec(&mut out);
        assert_eq!(out, b);
    }

    /// siw's peer-to-peer request: `50 02 0004 8001 c001` (C, S, A, C(write), D(read)).
    #[test]
    fn parses_siw_p2p_request() {
        let mut b = REQ_KEY.to_vec();
        b.extend_from_slice(&[0x50, 0x02, 0x00, 0x04, 0x80, 0x01, 0xc0, 0x01]);
        let r = FrameRepr::parse(&Frame::new_checked(&b).unwrap()).unwrap();
        assert!(r.crc);
        let e = r.enhanced.unwrap();
        assert!(e.p2p && !e.rtr_send && e.rtr_write && e.rtr_read);
        assert_eq!((e.ird, e.ord), (1, 1));
        let mut out = Vec::new();
        r.emit_to_vec(&mut out);
        assert_eq!(out, b);
    }

    #[test]
    fn rfc5044_s7_1_1_pd_length_over_512_is_malformed() {
        let mut b = REQ_KEY.to_vec();
        b.extend_from_slice(&[0x00, 0x01, 0x02, 0x01]);
        b.resize(20 + 513, 0);
        assert_eq!(
            Frame::new_checked(&b).unwrap_err(),
            Error::Malformed("MPA PD_Length exceeds 512")
        );
    }

    #[test]
    fn reserved_bits_ignored_on_receive_and_zero_on_send() {
        let mut b = REP_KEY.to_vec();
        b.extend_from_slice(&[0x4F, 0x01, 0x00, 0x00]);
        let r = FrameRepr::parse(&Frame::new_checked(&b).unwrap()).unwrap();
        assert!(r.crc && r.enhanced.is_none());
        let mut out = Vec::new();
        r.emit_to_vec(&mut out);
        assert_eq!(out[16], 0x40);
    }

    #[test]
    fn truncated_and_bad_key_and_short_enhanced() {
        assert!(matches!(
            Frame::new_checked(&REQ_KEY[..]),
            Err(Error::Truncated { .. })
        ));
        let mut b = b"MPA ID Xyz Frame".to_vec();
        b.extend_from_slice(&[0, 1, 0, 0]);
        assert!(FrameRepr::parse(&Frame::new_checked(&b).unwrap()).is_err());
        let mut b = REQ_KEY.to_vec();
        b.extend_from_slice(&[0x10, 2, 0, 3, 0, 0, 0]);
        assert!(matches!(
            FrameRepr::parse(&Frame::new_checked(&b).unwrap()),
            Err(Error::Malformed(_))
        ));
    }

    fn arb_repr() -> impl Strategy<Value = FrameRepr> {
        (
            any::<bool>(),
            any::<(bool, bool, bool, u8)>(),
            proptest::option::of(any::<(bool, bool, bool, bool, u16, u16)>()),
            proptest::collection::vec(any::<u8>(), 0..=508),
        )
            .prop_map(|(req, (m, c, r, rev), e, pd)| FrameRepr {
                kind: if req {
                    FrameKind::Request
                } else {
                    FrameKind::Reply
                },
                markers: m,
                crc: c,
                rejected: r,
                rev,
                enhanced: e.map(|(a, b, c, d, i, o)| EnhancedData {
                    p2p: a,
                    rtr_send: b,
                    rtr_write: c,
                    rtr_read: d,
                    ird: i & IRD_ORD_MASK,
                    ord: o & IRD_ORD_MASK,
                }),
                private_data: pd,
            })
    }

    proptest! {
        #[test]
        fn frame_repr_round_trip(r in arb_repr()) {
            let mut out = Vec::new();
            r.emit_to_vec(&mut out);
            prop_assert_eq!(out.len(), r.buffer_len());
            let back = FrameRepr::parse(&Frame::new_checked(&out).unwrap()).unwrap();
            prop_assert_eq!(back, r);
        }

        #[test]
        fn frame_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(f) = Frame::new_checked(&b) {
                let _ = FrameRepr::parse(&f);
            }
        }
    }
}
