//! Bytes the real peer sent, replayed through dpwarp's parsers: Linux siw (6.1) as the stock
//! rping client talking to `dpwarp rping -s`, captured by `scripts/interop` on the VM's tap and
//! reassembled per direction (tests/fixtures/README.md says how). These pin the wire format to
//! an independent implementation, not to our own emitter.

use dpwarp::mpa::Deframer;
use dpwarp::wire::ddp::{BufferRepr, HeaderRepr, Segment};
use dpwarp::wire::mpa::{Frame, FrameKind, FrameRepr};
use dpwarp::wire::rdmap::{ReadRequest, ReadRequestRepr};

/// A fixture: hex digits, whitespace and `#` comments ignored.
fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let digits: Vec<u8> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.bytes().filter(|b| b.is_ascii_hexdigit()))
        .collect();
    assert!(
        digits.len().is_multiple_of(2),
        "{name}: odd number of hex digits"
    );
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Split a stream into its MPA frame and what follows.
fn mpa_frame(stream: &[u8]) -> (FrameRepr, &[u8]) {
    let f = Frame::new_checked(stream).expect("an MPA frame starts the stream");
    let n = f.total_len();
    (
        FrameRepr::parse(&f).expect("siw's MPA frame parses"),
        &stream[n..],
    )
}

/// Deframe every FPDU after the MPA frame (CRC checked when `crc`) into ULPDUs.
fn ulpdus(rest: &[u8], crc: bool) -> Vec<Vec<u8>> {
    let mut d = Deframer::new(crc, false, 65535);
    let mut out = Vec::new();
    d.push(rest, &mut |u: &[u8]| out.push(u.to_vec()))
        .expect("siw's FPDUs deframe without error");
    assert!(d.error().is_none());
    out
}

fn header(u: &[u8]) -> HeaderRepr {
    HeaderRepr::parse(&Segment::new_checked(u).expect("DDP segment")).expect("DDP header")
}

/// siw's rping client stream (CRC negotiated by dpwarp's Reply): the enhanced Request siw sends
/// as initiator, then 2 Sends per ping and the Read Responses to dpwarp's Read Requests.
#[test]
fn siw_rping_client_stream_crc_on_deframes_and_parses() {
    let stream = fixture("siw-rping-client-crcon-S64.hex");
    let (req, rest) = mpa_frame(&stream);
    assert_eq!(req.kind, FrameKind::Request);
    assert_eq!(req.rev, 2);
    assert!(!req.crc, "siw's default build does not ask for CRC");
    assert!(!req.markers);
    let e = req.enhanced.expect("siw sends RFC 6581 enhanced data");
    assert_eq!((e.ird, e.ord, e.p2p), (1, 1, false));
    assert!(req.private_data.is_empty(), "rping passes no private data");

    let us = ulpdus(rest, true);
    let mut sends = 0;
    let mut read_responses = 0;
    let mut last_msn = 0;
    for u in &us {
        let h = header(u);
        assert_eq!(h.ddp_version, 1);
        assert_eq!(h.rdmap_control >> 6, 1, "RDMAP version 1");
        match (h.rdmap_control & 0x0f, h.buffer) {
            // Send: untagged QN 0, MSN counting up from 1, one 16-byte rping_rdma_info.
            (
                0x3,
                BufferRepr::Untagged {
                    qn: 0, msn, mo: 0, ..
                },
            ) => {
                assert_eq!(msn, last_msn + 1);
                last_msn = msn;
                assert_eq!(u.len(), 18 + 16);
                sends += 1;
            }
            // Read Response: tagged, the ping text dpwarp's server read.
            (0x2, BufferRepr::Tagged { .. }) => {
                assert!(u[14..].starts_with(b"rdma-ping-"));
                read_responses += 1;
            }
            (op, b) => panic!("unexpected ULPDU opcode {op:#x} {b:?}"),
        }
    }
    // 10 pings: 2 advertisements each; one Read Response each (64 bytes fit one FPDU).
    assert_eq!(sends, 20);
    assert_eq!(read_responses, 10);
}

/// siw's peer-to-peer build as initiator: Request `A=1` offering Write and Read RTR, and (dpwarp
/// answering with Read RTR only) a zero-length Read Request on QN1 with MSN 1 as the first FPDU.
#[test]
fn siw_p2p_initiator_read_rtr() {
    let stream = fixture("siw-rping-client-p2p-read-rtr.hex");
    let (req, rest) = mpa_frame(&stream);
    let e = req.enhanced.expect("enhanced");
    assert!(e.p2p && e.rtr_write && e.rtr_read && !e.rtr_send);
    let us = ulpdus(rest, true);
    let h = header(&us[0]);
    assert_eq!(h.rdmap_control & 0x0f, 0x1, "Read Request");
    assert!(matches!(
        h.buffer,
        BufferRepr::Untagged {
            qn: 1,
            msn: 1,
            mo: 0,
            ..
        }
    ));
    let rr = ReadRequestRepr::parse(&ReadRequest::new_checked(&us[0][18..]).unwrap()).unwrap();
    assert_eq!(rr.size, 0, "the RTR reads nothing");
    // siw's rping is the client: after the RTR it only Sends advertisements and answers
    // dpwarp's Reads, so everything else is a Send or a Read Response.
    assert!(us[1..]
        .iter()
        .all(|u| matches!(header(u).rdmap_control & 0x0f, 0x2 | 0x3)));
}

/// Same build, dpwarp answering with Write RTR: a zero-length tagged RDMA Write (14-byte ULPDU)
/// comes first.
#[test]
fn siw_p2p_initiator_write_rtr() {
    let stream = fixture("siw-rping-client-p2p-write-rtr.hex");
    let (_, rest) = mpa_frame(&stream);
    let us = ulpdus(rest, true);
    assert_eq!(us[0].len(), 14);
    let h = header(&us[0]);
    assert_eq!(h.rdmap_control & 0x0f, 0x0, "RDMA Write");
    assert!(h.last);
    assert!(matches!(h.buffer, BufferRepr::Tagged { .. }));
}
