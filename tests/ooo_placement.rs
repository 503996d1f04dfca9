//! Out-of-order placement at the engine (RFC 5044 App. A.3, `Connection::place_ahead`): two
//! sans-IO connections, the stream between them cut into its FPDUs, and segments handed to
//! the receiver ahead of a hole as the DPDK worker hands them (the octets it takes are never
//! buffered: the in-order pass gets garbage in their place and must not read it). Honest
//! segments are placed at once and completed in order without a second copy; forged ones —
//! out of bounds, without the right, untagged, or a CRC-valid FPDU where the stream in order
//! has none — never reach memory outside what an STag allows and never complete a message.

use dpwarp::verbs::smallvec;
use std::time::Instant;

use dpwarp::conn::{ConnEvent, Connection};
use dpwarp::mpa::{Framer, MpaConfig};
use dpwarp::rdma::{Access, Mr, Opcode, SendWr, WcStatus};
use dpwarp::wire::fpdu::HEADER_LEN;
use dpwarp::wire::terminate::TermCause;

mod conn_pair;
use conn_pair::{sge, Pair};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Two connections in Full MPA operation, CRCs on, markers off.
fn pair() -> Pair {
    let mpa = MpaConfig::default();
    assert!(mpa.crc && !mpa.markers, "the defaults this test relies on");
    Pair::new(mpa)
}

/// Everything `c` has to send, cut into its FPDUs (each a segment of its own, as a sender
/// that aligns FPDUs with segments sends them, RFC 5044 App. A.1).
fn fpdus(c: &mut Connection) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
        c.poll_transmit_records(&mut bytes, &mut ends);
        if bytes.is_empty() {
            return out;
        }
        let mut start = 0;
        for e in ends {
            out.push(bytes[start..e].to_vec());
            start = e;
        }
        assert_eq!(start, bytes.len(), "whole FPDUs");
    }
}

/// B reads `len` octets of `pattern(len, seed)` from A (work request `wr_id`): the sink
/// region, and A's Read Response FPDUs, not yet delivered.
fn read_from_a(p: &mut Pair, len: usize, seed: u8, wr_id: u64, now: Instant) -> (Mr, Vec<Vec<u8>>) {
    let rsrc = p
        .mem_a
        .register(p.pd_a, len, Access::LOCAL_WRITE | Access::REMOTE_READ);
    rsrc.write_at(0, &pattern(len, seed));
    let rsink = p.mem_b.register(p.pd_b, len, Access::LOCAL_WRITE);
    p.b.post_send(SendWr {
        wr_id,
        opcode: Opcode::Read {
            remote_addr: rsrc.addr(),
            rkey: rsrc.stag(),
        },
        sg_list: smallvec![sge(&rsink, 0, len)],
        signaled: true,
    })
    .unwrap();
    for req in fpdus(&mut p.b) {
        p.a.on_bytes(&req, now);
    }
    (rsink, fpdus(&mut p.a))
}

/// An FPDU carrying `ulpdu`, CRC and all.
fn frame(ulpdu: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Framer::new(true, false).emit(ulpdu, &[], &mut out);
    out
}

/// The ULPDU an FPDU carries.
fn ulpdu_of(fpdu: &[u8]) -> Vec<u8> {
    let len = usize::from(u16::from_be_bytes([fpdu[0], fpdu[1]]));
    fpdu[HEADER_LEN..HEADER_LEN + len].to_vec()
}

/// A tagged ULPDU (RFC 5041 §4.2: control, STag, TO) re-aimed at `stag`/`to`.
fn retarget(ulpdu: &[u8], stag: u32, to: u64) -> Vec<u8> {
    let mut u = ulpdu.to_vec();
    u[2..6].copy_from_slice(&stag.to_be_bytes());
    u[6..14].copy_from_slice(&to.to_be_bytes());
    u
}

/// Feed `stream` to `c` with the octets in `taken` (ranges the worker took out of the
/// stream) replaced by garbage, in pieces of odd sizes.
fn feed_in_order(c: &mut Connection, stream: &[u8], taken: &[(usize, usize)], now: Instant) {
    let mut s = stream.to_vec();
    for &(from, to) in taken {
        s[from..to].fill(0xee);
    }
    for piece in s.chunks(777) {
        c.on_bytes(piece, now);
    }
}

fn terminated_with(c: &mut Connection) -> Option<TermCause> {
    while let Some(ev) = c.poll_event() {
        if let ConnEvent::TerminateSent(t) = ev {
            return Some(t);
        }
    }
    None
}

/// An RDMA Write whose middle FPDUs arrive behind a hole: they are placed at once, the
/// in-order pass finds them placed (their octets in the stream are garbage) and checks
/// them without copying, and the sink ends exact.
#[test]
fn write_segments_behind_a_hole_are_placed_at_once_and_checked_in_order() {
    let mut p = pair();
    let now = Instant::now();
    const LEN: usize = 20_000;
    let src = p.mem_a.register(p.pd_a, LEN, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(LEN, 3));
    let sink = p
        .mem_b
        .register(p.pd_b, LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.a.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Write {
            remote_addr: sink.addr(),
            rkey: sink.stag(),
        },
        sg_list: smallvec![sge(&src, 0, LEN)],
        signaled: true,
    })
    .unwrap();
    let f = fpdus(&mut p.a);
    assert!(f.len() > 10);
    let stream: Vec<u8> = f.concat();
    let offsets: Vec<usize> = f
        .iter()
        .scan(0, |o, x| {
            let at = *o;
            *o += x.len();
            Some(at)
        })
        .collect();
    // FPDU 0 is lost; 1, 2 and 5 arrive behind the hole (5 behind a second hole).
    let mut taken = Vec::new();
    for i in [1, 2, 5] {
        let placed = p.b.place_ahead(offsets[i] as u64, &f[i]);
        assert_eq!((placed.fpdus, placed.octets), (1, f[i].len()), "FPDU {i}");
        taken.push((offsets[i], offsets[i] + f[i].len()));
    }
    // Placed already, before the hole is filled.
    let payload_of = |i: usize| ulpdu_of(&f[i]).len() - 14;
    let placed_from: usize = payload_of(0);
    let placed = &sink.to_vec()[placed_from..placed_from + payload_of(1)];
    assert_eq!(
        placed,
        &pattern(LEN, 3)[placed_from..placed_from + payload_of(1)]
    );
    // A segment seen twice is taken once.
    assert_eq!(p.b.place_ahead(offsets[1] as u64, &f[1]).fpdus, 0);
    let counts = p.b.ahead_counts();
    assert_eq!(counts.fpdus, 3);
    feed_in_order(&mut p.b, &stream, &taken, now);
    assert_eq!(terminated_with(&mut p.b), None);
    assert_eq!(
        sink.to_vec(),
        pattern(LEN, 3),
        "every octet, in order or ahead"
    );
    let counts = p.b.ahead_counts();
    assert_eq!(
        counts.octets, counts.recognised,
        "each placed once, checked in order"
    );
}

/// A Read Response's last segment placed ahead does not complete the Read: the Read
/// completes when the stream reaches it in order, after everything before it.
#[test]
fn a_read_completes_in_order_not_when_its_last_segment_is_placed() {
    let mut p = pair();
    let now = Instant::now();
    const LEN: usize = 12_000;
    let (rsink, f) = read_from_a(&mut p, LEN, 7, 9, now);
    let last = f.len() - 1;
    let at: usize = f[..last].iter().map(|x| x.len()).sum();
    let placed = p.b.place_ahead(at as u64, &f[last]);
    assert_eq!(placed.fpdus, 1);
    assert!(
        p.b.poll_completion().is_none(),
        "not complete before its turn"
    );
    feed_in_order(&mut p.b, &f.concat(), &[(at, at + f[last].len())], now);
    let wc = p.b.poll_completion().expect("complete in order");
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success));
    assert_eq!(rsink.to_vec(), pattern(LEN, 7));
}

/// Forged segments ahead of a hole: a Write past its region's end, into a region without
/// remote write, to an unknown STag, a Read Response for no Read, and an untagged Send are
/// all left for their turn (nothing placed, nothing taken); the in-order pass then refuses
/// the bad ones with the TERMINATE their turn calls for. No octet outside what an STag
/// allows is ever written.
#[test]
fn forged_segments_ahead_are_never_placed_outside_what_an_stag_allows() {
    let mut p = pair();
    let now = Instant::now();
    let src = p.mem_a.register(p.pd_a, 4096, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(4096, 1));
    // Three regions side by side in one memory of b's: only the middle one is the target.
    let mem = dpwarp::rdma::SharedMem::new(3 * 1024);
    let left = p
        .mem_b
        .register_shared_range(p.pd_b, &mem, 0, 1024, Access::REMOTE_WRITE);
    let mid = p
        .mem_b
        .register_shared_range(p.pd_b, &mem, 1024, 1024, Access::REMOTE_WRITE);
    let right = p
        .mem_b
        .register_shared_range(p.pd_b, &mem, 2048, 1024, Access::REMOTE_WRITE);
    let read_only = p.mem_b.register(p.pd_b, 4096, Access::REMOTE_READ);
    let (_, _) = (&left, &right);
    p.a.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Write {
            remote_addr: mid.addr(),
            rkey: mid.stag(),
        },
        sg_list: smallvec![sge(&src, 0, 1000)],
        signaled: true,
    })
    .unwrap();
    let honest = fpdus(&mut p.a);
    assert_eq!(honest.len(), 1);
    let u = ulpdu_of(&honest[0]);
    let forged = [
        // 1000 octets from 100 before the middle region's end: out of bounds.
        frame(&retarget(&u, mid.stag(), mid.addr() + 1024 - 100)),
        // Below its base.
        frame(&retarget(&u, mid.stag(), mid.addr() - 8)),
        // No remote write.
        frame(&retarget(&u, read_only.stag(), read_only.addr())),
        // An STag b never registered (its key byte changed).
        frame(&retarget(&u, mid.stag() ^ 0x5a, mid.addr())),
    ];
    // A Read Response (RDMAP opcode 1) for no Read b asked for.
    let mut rresp = retarget(&u, mid.stag(), mid.addr());
    rresp[1] = (rresp[1] & 0xf0) | 0x01;
    // An untagged Send (b has no receive posted; in order that is an error of its own).
    let mut send_p = pair();
    let sbuf = send_p.mem_a.register(send_p.pd_a, 64, Access::LOCAL_WRITE);
    send_p
        .a
        .post_send(SendWr {
            wr_id: 2,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&sbuf, 0, 64)],
            signaled: true,
        })
        .unwrap();
    let send = fpdus(&mut send_p.a).concat();
    let before = mem.bytes().to_vec();
    for (i, seg) in forged
        .iter()
        .cloned()
        .chain([frame(&rresp), send])
        .enumerate()
    {
        let placed = p.b.place_ahead(100 + i as u64 * 2000, &seg);
        assert_eq!((placed.fpdus, placed.octets), (0, 0), "forged segment {i}");
    }
    assert_eq!(mem.bytes().to_vec(), before, "nothing placed");
    assert_eq!(p.b.ahead_counts().fpdus, 0);
    // In order, the first forged Write is refused as its turn demands.
    p.b.on_bytes(&forged[0], now);
    assert_eq!(
        terminated_with(&mut p.b),
        Some(TermCause::DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION)
    );
    assert_eq!(
        mem.bytes().to_vec(),
        before,
        "nothing written in order either"
    );
}

/// A CRC-valid FPDU forged where the stream in order has no FPDU start (inside a larger
/// FPDU): it may be placed (its STag allows it), but the octets it took out of the stream
/// belong to the real FPDU around it, whose CRC then fails in order: the stream ends with
/// the MPA CRC TERMINATE (RFC 5044 §8) and the Read that FPDU answered never completes
/// successfully.
#[test]
fn a_forged_fpdu_start_inside_a_real_fpdu_ends_the_stream_not_the_memory() {
    let mut p = pair();
    let now = Instant::now();
    const LEN: usize = 1200;
    let other = p.mem_b.register(p.pd_b, 64, Access::REMOTE_WRITE);
    let (_rsink, f) = read_from_a(&mut p, LEN, 5, 4, now);
    assert_eq!(
        f.len(),
        1,
        "one Read Response FPDU of {} octets",
        f[0].len()
    );
    // A 16-octet Write into `other`, framed, claimed to start 300 octets into the response.
    let mut w = vec![0u8; 14];
    w[0] = 0x80 | 0x40 | 0x01; // T, L, DDP version 1
    w[1] = 0x40; // RDMAP version 1, opcode 0 (RDMA Write)
    let mut w = retarget(&w, other.stag(), other.addr());
    w.extend_from_slice(&[0xab; 16]);
    let forged = frame(&w);
    let placed = p.b.place_ahead(300, &forged);
    assert_eq!(placed.fpdus, 1, "its STag allows it: placed");
    assert_eq!(&other.to_vec()[..16], &[0xab; 16]);
    // In order, the real response arrives; the forged octets' place is garbage.
    feed_in_order(&mut p.b, &f[0], &[(300, 300 + forged.len())], now);
    assert_eq!(terminated_with(&mut p.b), Some(TermCause::MPA_CRC));
    while let Some(wc) = p.b.poll_completion() {
        assert_ne!(wc.status, WcStatus::Success, "the Read never completes");
    }
    assert_eq!(
        &other.to_vec()[16..],
        &[0u8; 48],
        "nothing past what was allowed"
    );
}
