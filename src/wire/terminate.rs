//! RDMAP TERMINATE message (RFC 5040 §4.8) and its error codes (RFC 5040 §7, RFC 5041 §7,
//! RFC 5044 §8 / RFC 6580, RFC 6581 §8).
//!
//! The first four octets of a TERMINATE header are the Terminate Control field (Layer, EType,
//! Error Code, HdrCt M/D/R) and 13 reserved bits. [`TermControl`] encodes them in RFC order and
//! decodes tolerantly: Linux siw emits them as little-endian bitfields (nibbles of the first octet
//! swapped, M/D/R in the low bits of the third octet), so a CRC error from siw reads `02 02 00 00`
//! where RFC 5040 order is `20 02 00 00`.

use super::{Error, Result};

/// Layer that detected the error (RFC 5040 §4.8, 4 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// 0x0: RDMAP detected the error (RFC 5040 §7.2 codes).
    Rdmap = 0,
    /// 0x1: DDP detected the error (RFC 5041 §7.2 codes).
    Ddp = 1,
    /// 0x2: the LLP (here MPA) detected the error (RFC 5044 §8, RFC 6581 §8 codes).
    Llp = 2,
}

impl Layer {
    /// The layer for a 4-bit value, if defined (RFC 5040 §4.8 Figure 9).
    pub fn from_u8(v: u8) -> Option<Layer> {
        match v {
            0 => Some(Layer::Rdmap),
            1 => Some(Layer::Ddp),
            2 => Some(Layer::Llp),
            _ => None,
        }
    }
}

/// Layer + Error Type + Error Code: what a TERMINATE reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermCause {
    /// Layer that detected the error (4 bits).
    pub layer: Layer,
    /// Error Type (4 bits).
    pub etype: u8,
    /// Error Code (8 bits).
    pub code: u8,
}

const fn tc(layer: Layer, etype: u8, code: u8) -> TermCause {
    TermCause { layer, etype, code }
}

impl TermCause {
    /// LLP layer, MPA error type, CRC error (RFC 5044 §8 code 0x02).
    pub const MPA_CRC: TermCause = TermCause {
        layer: Layer::Llp,
        etype: 0,
        code: 0x02,
    };
    /// LLP / MPA / marker error (RFC 5044 §8 code 0x03).
    pub const MPA_MARKER: TermCause = TermCause {
        layer: Layer::Llp,
        etype: 0,
        code: 0x03,
    };
    /// LLP / MPA / invalid ULPDU length (RFC 5044 §8 code 0x01).
    pub const MPA_BAD_LEN: TermCause = TermCause {
        layer: Layer::Llp,
        etype: 0,
        code: 0x01,
    };
    /// RFC 6581 §8 code 0x05: local catastrophic.
    pub const MPA_LOCAL_CATASTROPHIC: TermCause = TermCause {
        layer: Layer::Llp,
        etype: 0,
        code: 0x05,
    };
    /// RFC 6581 §8 code 0x06: insufficient IRD resources.
    pub const MPA_INSUFFICIENT_IRD: TermCause = TermCause {
        layer: Layer::Llp,
        etype: 0,
        code: 0x06,
    };
    /// RFC 6581 §8 code 0x07: no matching RTR option.
    pub const MPA_NO_MATCHING_RTR: TermCause = TermCause {
        layer: Layer::Llp,
        etype: 0,
        code: 0x07,
    };

    // ---- MPA (RFC 5044 §8 as registered by RFC 6580 §3.3) ----
    /// 0x2/0x0/0x01: TCP connection closed, terminated, or lost (same value as `MPA_BAD_LEN`,
    /// which the deframer uses for an unusable ULPDU_Length).
    pub const MPA_TCP_CONNECTION_LOST: TermCause = tc(Layer::Llp, 0, 0x01);
    /// 0x2/0x0/0x04: Invalid MPA Request Frame or MPA Response Frame.
    pub const MPA_INVALID_REQUEST_OR_REPLY: TermCause = tc(Layer::Llp, 0, 0x04);

    // ---- RDMAP (RFC 5040 §4.8 Figure 9) ----
    /// RDMAP error type: Local Catastrophic Error (no error code).
    pub const RDMAP_ETYPE_LOCAL_CATASTROPHIC: u8 = 0;
    /// RDMAP error type: Remote Protection Error.
    pub const RDMAP_ETYPE_REMOTE_PROTECTION: u8 = 1;
    /// RDMAP error type: Remote Operation Error.
    pub const RDMAP_ETYPE_REMOTE_OPERATION: u8 = 2;
    /// 0x0/0x0: Local Catastrophic Error.
    pub const RDMAP_LOCAL_CATASTROPHIC: TermCause = tc(Layer::Rdmap, 0, 0x00);
    /// 0x0/0x1/0x00: Remote Protection Error / Invalid STag.
    pub const RDMAP_INVALID_STAG: TermCause = tc(Layer::Rdmap, 1, 0x00);
    /// 0x0/0x1/0x01: Remote Protection Error / Base or bounds violation.
    pub const RDMAP_BASE_OR_BOUNDS_VIOLATION: TermCause = tc(Layer::Rdmap, 1, 0x01);
    /// 0x0/0x1/0x02: Remote Protection Error / Access rights violation.
    pub const RDMAP_ACCESS_RIGHTS_VIOLATION: TermCause = tc(Layer::Rdmap, 1, 0x02);
    /// 0x0/0x1/0x03: Remote Protection Error / STag not associated with RDMAP Stream.
    pub const RDMAP_STAG_NOT_ASSOCIATED: TermCause = tc(Layer::Rdmap, 1, 0x03);
    /// 0x0/0x1/0x04: Remote Protection Error / TO wrap.
    pub const RDMAP_TO_WRAP: TermCause = tc(Layer::Rdmap, 1, 0x04);
    /// 0x0/0x1/0x09: Remote Protection Error / STag cannot be Invalidated.
    pub const RDMAP_PROT_STAG_CANNOT_BE_INVALIDATED: TermCause = tc(Layer::Rdmap, 1, 0x09);
    /// 0x0/0x1/0xFF: Remote Protection Error / Unspecified Error.
    pub const RDMAP_PROT_UNSPECIFIED: TermCause = tc(Layer::Rdmap, 1, 0xff);
    /// 0x0/0x2/0x05: Remote Operation Error / Invalid RDMAP version.
    pub const RDMAP_INVALID_RDMAP_VERSION: TermCause = tc(Layer::Rdmap, 2, 0x05);
    /// 0x0/0x2/0x06: Remote Operation Error / Unexpected OpCode.
    pub const RDMAP_UNEXPECTED_OPCODE: TermCause = tc(Layer::Rdmap, 2, 0x06);
    /// 0x0/0x2/0x07: Remote Operation Error / Catastrophic error, localized to RDMAP Stream.
    pub const RDMAP_CATASTROPHIC_LOCALIZED: TermCause = tc(Layer::Rdmap, 2, 0x07);
    /// 0x0/0x2/0x08: Remote Operation Error / Catastrophic error, global.
    pub const RDMAP_CATASTROPHIC_GLOBAL: TermCause = tc(Layer::Rdmap, 2, 0x08);
    /// 0x0/0x2/0x09: Remote Operation Error / STag cannot be Invalidated.
    pub const RDMAP_OP_STAG_CANNOT_BE_INVALIDATED: TermCause = tc(Layer::Rdmap, 2, 0x09);
    /// 0x0/0x2/0xFF: Remote Operation Error / Unspecified Error.
    pub const RDMAP_OP_UNSPECIFIED: TermCause = tc(Layer::Rdmap, 2, 0xff);

    // ---- DDP (RFC 5041 §7.2) ----
    /// DDP error type: Local Catastrophic.
    pub const DDP_ETYPE_LOCAL_CATASTROPHIC: u8 = 0;
    /// DDP error type: Tagged Buffer Error.
    pub const DDP_ETYPE_TAGGED: u8 = 1;
    /// DDP error type: Untagged Buffer Error.
    pub const DDP_ETYPE_UNTAGGED: u8 = 2;
    /// 0x1/0x0/0x00: Local Catastrophic.
    pub const DDP_LOCAL_CATASTROPHIC: TermCause = tc(Layer::Ddp, 0, 0x00);
    /// 0x1/0x1/0x00: Tagged Buffer Error / Invalid STag.
    pub const DDP_TAGGED_INVALID_STAG: TermCause = tc(Layer::Ddp, 1, 0x00);
    /// 0x1/0x1/0x01: Tagged Buffer Error / Base or bounds violation.
    pub const DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION: TermCause = tc(Layer::Ddp, 1, 0x01);
    /// 0x1/0x1/0x02: Tagged Buffer Error / STag not associated with DDP Stream.
    pub const DDP_TAGGED_STAG_NOT_ASSOCIATED: TermCause = tc(Layer::Ddp, 1, 0x02);
    /// 0x1/0x1/0x03: Tagged Buffer Error / TO wrap.
    pub const DDP_TAGGED_TO_WRAP: TermCause = tc(Layer::Ddp, 1, 0x03);
    /// 0x1/0x1/0x04: Tagged Buffer Error / Invalid DDP version.
    pub const DDP_TAGGED_INVALID_DDP_VERSION: TermCause = tc(Layer::Ddp, 1, 0x04);
    /// 0x1/0x2/0x01: Untagged Buffer Error / Invalid QN.
    pub const DDP_UNTAGGED_INVALID_QN: TermCause = tc(Layer::Ddp, 2, 0x01);
    /// 0x1/0x2/0x02: Untagged Buffer Error / Invalid MSN - no buffer available.
    pub const DDP_UNTAGGED_INVALID_MSN_NO_BUFFER: TermCause = tc(Layer::Ddp, 2, 0x02);
    /// 0x1/0x2/0x03: Untagged Buffer Error / Invalid MSN - MSN range is not valid.
    pub const DDP_UNTAGGED_INVALID_MSN_RANGE: TermCause = tc(Layer::Ddp, 2, 0x03);
    /// 0x1/0x2/0x04: Untagged Buffer Error / Invalid MO.
    pub const DDP_UNTAGGED_INVALID_MO: TermCause = tc(Layer::Ddp, 2, 0x04);
    /// 0x1/0x2/0x05: Untagged Buffer Error / DDP Message too long for available buffer.
    pub const DDP_UNTAGGED_MESSAGE_TOO_LONG: TermCause = tc(Layer::Ddp, 2, 0x05);
    /// 0x1/0x2/0x06: Untagged Buffer Error / Invalid DDP version.
    pub const DDP_UNTAGGED_INVALID_DDP_VERSION: TermCause = tc(Layer::Ddp, 2, 0x06);

    /// Whether (layer, etype, code) is a registered combination (RFC 6580 §3). Local
    /// catastrophic types carry no code, so any code is accepted for them.
    pub fn is_registered(&self) -> bool {
        match (self.layer, self.etype) {
            (Layer::Rdmap, 0) | (Layer::Ddp, 0) => true,
            (Layer::Rdmap, 1) => matches!(self.code, 0x00..=0x04 | 0x09 | 0xff),
            (Layer::Rdmap, 2) => matches!(self.code, 0x05..=0x09 | 0xff),
            (Layer::Ddp, 1) => self.code <= 0x04,
            (Layer::Ddp, 2) => (0x01..=0x06).contains(&self.code),
            (Layer::Ddp, 3) => true,
            (Layer::Llp, 0) => (0x01..=0x07).contains(&self.code),
            _ => false,
        }
    }

    /// A remote protection / tagged-buffer error: the peer refused access to memory
    /// (maps to `RemAccessErr` at the requester).
    pub fn is_access_error(&self) -> bool {
        matches!(
            (self.layer, self.etype),
            (Layer::Rdmap, 1) | (Layer::Ddp, 1)
        )
    }
}

/// Octet order in which a Terminate Control field was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOrder {
    /// RFC 5040 §4.8 Figure 8 order (what we send).
    Rfc,
    /// Linux siw's little-endian bitfield order (Layer/EType nibbles swapped, M/D/R at 0x01,
    /// 0x02, 0x04 of the third octet).
    Siw,
}

/// Length of the Terminate Control field plus reserved bits.
pub const CONTROL_LEN: usize = 4;

/// The Terminate Control field (RFC 5040 §4.8 Figure 8): cause plus HdrCt bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermControl {
    /// Layer / EType / Error Code.
    pub cause: TermCause,
    /// M: DDP Segment Length valid.
    pub m: bool,
    /// D: DDP Header included.
    pub d: bool,
    /// R: RDMAP (Read Request) Header included.
    pub r: bool,
}

mod field {
    pub const HDRCT: usize = 2;
    pub const RFC_M: u8 = 0x80;
    pub const RFC_D: u8 = 0x40;
    pub const RFC_R: u8 = 0x20;
    pub const SIW_M: u8 = 0x01;
    pub const SIW_D: u8 = 0x02;
    pub const SIW_R: u8 = 0x04;
}

impl TermControl {
    /// Emit the 4 octets in RFC order (reserved bits zero).
    pub fn emit(&self) -> [u8; CONTROL_LEN] {
        let mut b = [0u8; CONTROL_LEN];
        b[0] = ((self.cause.layer as u8) << 4) | (self.cause.etype & 0x0f);
        b[1] = self.cause.code;
        b[field::HDRCT] = if self.m { field::RFC_M } else { 0 }
            | if self.d { field::RFC_D } else { 0 }
            | if self.r { field::RFC_R } else { 0 };
        b
    }

    fn read(b: &[u8], order: BitOrder) -> Option<TermControl> {
        let (layer, etype, m, d, r) = match order {
            BitOrder::Rfc => (
                b[0] >> 4,
                b[0] & 0x0f,
                field::RFC_M,
                field::RFC_D,
                field::RFC_R,
            ),
            BitOrder::Siw => (
                b[0] & 0x0f,
                b[0] >> 4,
                field::SIW_M,
                field::SIW_D,
                field::SIW_R,
            ),
        };
        let h = b[field::HDRCT];
        Some(TermControl {
            cause: TermCause {
                layer: Layer::from_u8(layer)?,
                etype,
                code: b[1],
            },
            m: h & m != 0,
            d: h & d != 0,
            r: h & r != 0,
        })
    }

    /// Decode tolerantly (RFC order preferred). A reading is trusted when its cause is a
    /// registered code (RFC 6580) and the bits that are reserved in that order are clear; the
    /// siw reading is taken only when the RFC reading is not plausible and the siw one is.
    pub fn parse(b: &[u8]) -> Result<(TermControl, BitOrder)> {
        if b.len() < CONTROL_LEN {
            return Err(Error::Truncated {
                need: CONTROL_LEN,
                have: b.len(),
            });
        }
        let h = b[field::HDRCT];
        let rfc = Self::read(b, BitOrder::Rfc);
        let siw = Self::read(b, BitOrder::Siw);
        let plausible = |c: &Option<TermControl>, reserved_clear: bool| {
            c.is_some_and(|c| c.cause.is_registered()) && reserved_clear
        };
        let rfc_ok = plausible(&rfc, h & 0x1f == 0);
        let siw_ok = plausible(&siw, h & 0xf8 == 0);
        match (rfc, siw) {
            (Some(c), _) if rfc_ok => Ok((c, BitOrder::Rfc)),
            (_, Some(c)) if siw_ok => Ok((c, BitOrder::Siw)),
            (Some(c), _) => Ok((c, BitOrder::Rfc)),
            (None, Some(c)) => Ok((c, BitOrder::Siw)),
            (None, None) => Err(Error::Malformed("TERMINATE layer is not RDMAP, DDP or LLP")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc5040_s4_8_mpa_crc_error_in_rfc_order() {
        let c = TermControl {
            cause: TermCause::MPA_CRC,
            m: false,
            d: false,
            r: false,
        };
        assert_eq!(c.emit(), [0x20, 0x02, 0x00, 0x00]);
        assert_eq!(TermControl::parse(&c.emit()).unwrap(), (c, BitOrder::Rfc));
    }

    /// siw sends a CRC error as `02 02 00 00` (docs/interop.md, "What siw 6.1 does on the wire").
    #[test]
    fn rfc5040_s4_8_siw_order_crc_error_is_decoded() {
        let (c, o) = TermControl::parse(&[0x02, 0x02, 0x00, 0x00]).unwrap();
        assert_eq!(o, BitOrder::Siw);
        assert_eq!(c.cause, TermCause::MPA_CRC);
    }

    #[test]
    fn rfc5040_s4_8_siw_order_hdrct_bits_are_decoded() {
        // siw: DDP (1) tagged (1) invalid STag (0) with M and D: 0x11 0x00 0x03.
        let (c, o) = TermControl::parse(&[0x11, 0x00, 0x03, 0x00]).unwrap();
        assert_eq!(o, BitOrder::Siw);
        assert_eq!(c.cause, TermCause::DDP_TAGGED_INVALID_STAG);
        assert!(c.m && c.d && !c.r);
        // RDMAP remote protection access rights with D and R: 0x10 0x02 0x06.
        let (c, o) = TermControl::parse(&[0x10, 0x02, 0x06, 0x00]).unwrap();
        assert_eq!(o, BitOrder::Siw);
        assert_eq!(c.cause, TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION);
        assert!(!c.m && c.d && c.r);
    }

    #[test]
    fn rfc5040_s4_8_unknown_layer_is_malformed() {
        assert!(TermControl::parse(&[0xff, 0, 0, 0]).is_err());
        assert!(TermControl::parse(&[0x20, 0x02]).is_err());
    }

    proptest! {
        #[test]
        fn registered_causes_round_trip(layer in 0u8..3, etype in 0u8..4, code in prop_oneof![0u8..10, Just(0xffu8)],
                                        m in any::<bool>(), d in any::<bool>(), r in any::<bool>()) {
            let cause = TermCause { layer: Layer::from_u8(layer).unwrap(), etype, code };
            prop_assume!(cause.is_registered());
            let c = TermControl { cause, m, d, r };
            let (p, o) = TermControl::parse(&c.emit()).unwrap();
            prop_assert_eq!(p, c);
            prop_assert_eq!(o, BitOrder::Rfc);
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = TermControl::parse(&b);
        }
    }
}
