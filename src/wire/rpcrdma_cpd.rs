//! RPC-over-RDMA version 1 connection private data (RFC 8797): eight octets a client and a
//! server put in the CM (here: MPA) private data to announce their inline thresholds and
//! remote-invalidation support. The Linux kernel's NFS/RDMA client sends it after the RFC 6581
//! IRD/ORD octets of its MPA Request (magic `f6ab0e18`, version 1, R set, 4 KiB both ways) and
//! knfsd answers in kind.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Format Identifier                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |  Reserved   |R|   Send Size   | Receive Size  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

/// The Format Identifier, network byte order (RFC 8797 §4).
pub const FORMAT_ID: u32 = 0xf6ab_0e18;
/// The only message format version defined (RFC 8797 §4).
pub const VERSION: u8 = 1;
/// Octets of a version 1 message.
pub const LEN: usize = 8;
/// RFC 8797 §4.2: sizes are encoded in units of 1024 octets, minus one, in 8 bits.
pub const MIN_SIZE: u32 = 1024;
/// The largest size the 8-bit field can encode: 256 KiB.
pub const MAX_SIZE: u32 = 256 * 1024;

/// A decoded connection private data message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpdRepr {
    /// R: the sender supports remote invalidation (RFC 8797 §4.1).
    pub remote_invalidate: bool,
    /// The largest RDMA Send the sender will transmit, in octets (a multiple of 1024).
    pub send_size: u32,
    /// The largest RDMA Receive the sender accepts, in octets (a multiple of 1024).
    pub recv_size: u32,
}

impl CpdRepr {
    /// RFC 8797 §5.1: what a peer that sent no private data is taken to have said.
    pub const DEFAULT: CpdRepr = CpdRepr {
        remote_invalidate: false,
        send_size: MIN_SIZE,
        recv_size: MIN_SIZE,
    };

    /// Search `private_data` for a version 1 message (RFC 8797 §5.2: the Format Identifier at
    /// any offset, no alignment). None when there is none (or only another version's): the
    /// peer then gets the RFC 8166 defaults ([`CpdRepr::DEFAULT`]).
    pub fn find(private_data: &[u8]) -> Option<CpdRepr> {
        let magic = FORMAT_ID.to_be_bytes();
        (0..private_data.len().saturating_sub(LEN - 1)).find_map(|i| {
            let m = &private_data[i..i + LEN];
            (m[..4] == magic && m[4] == VERSION).then(|| CpdRepr {
                remote_invalidate: m[5] & 1 != 0,
                send_size: decode(m[6]),
                recv_size: decode(m[7]),
            })
        })
    }

    /// The eight octets (sizes rounded down to a multiple of 1024 within 1 KiB..256 KiB).
    pub fn emit(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..4].copy_from_slice(&FORMAT_ID.to_be_bytes());
        b[4] = VERSION;
        b[5] = u8::from(self.remote_invalidate);
        b[6] = encode(self.send_size);
        b[7] = encode(self.recv_size);
        b
    }
}

fn decode(v: u8) -> u32 {
    (u32::from(v) + 1) * 1024
}

fn encode(size: u32) -> u8 {
    (size.clamp(MIN_SIZE, MAX_SIZE) / 1024 - 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Linux 6.1 NFS/RDMA client's MPA Request private data (captured over siw): RFC 6581
    /// IRD 128 / ORD 0, then RFC 8797 version 1, R set, 4 KiB send and receive.
    const LINUX_CLIENT: [u8; 12] = [
        0x00, 0x80, 0x00, 0x00, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03,
    ];

    #[test]
    fn rfc8797_linux_client_private_data_decodes() {
        let c = CpdRepr::find(&LINUX_CLIENT).unwrap();
        assert_eq!(
            c,
            CpdRepr {
                remote_invalidate: true,
                send_size: 4096,
                recv_size: 4096
            }
        );
        assert_eq!(c.emit(), LINUX_CLIENT[4..]);
    }

    #[test]
    fn rfc8797_s5_2_found_at_any_offset_and_only_version_1() {
        let mut pd = vec![9u8, 9, 9];
        pd.extend_from_slice(&LINUX_CLIENT[4..]);
        assert!(CpdRepr::find(&pd).is_some());
        pd[7] = 2; // version 2: not this format
        assert_eq!(CpdRepr::find(&pd), None);
        assert_eq!(CpdRepr::find(&LINUX_CLIENT[4..11]), None, "truncated");
        assert_eq!(CpdRepr::find(&[]), None);
    }

    #[test]
    fn rfc8797_s4_2_sizes_round_trip_and_clamp() {
        for (size, code) in [
            (1024, 0u8),
            (4096, 3),
            (262_144, 255),
            (100, 0),
            (1 << 20, 255),
        ] {
            let e = CpdRepr {
                remote_invalidate: false,
                send_size: size,
                recv_size: size,
            }
            .emit();
            assert_eq!((e[6], e[7]), (code, code), "{size}");
        }
        assert_eq!(decode(255), MAX_SIZE);
    }
}
