//! Two `QpEngine`s back to back (ULPDUs moved by the test): every operation with its data
//! verified, every RFC 5040 / RFC 5041 error path answered by the right TERMINATE with the target
//! memory untouched, siw-order TERMINATE decoding, and RFC 6581 RTR variants.

use dpwarp::rdma::{
    Access, MemoryTable, Mr, Opcode, PdId, QpConfig, QpEngine, QpEvent, QpState, RecvWr, RtrKind,
    RtrRole, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use dpwarp::verbs::smallvec;
use dpwarp::wire::ddp::{BufferRepr, HeaderRepr};
use dpwarp::wire::rdmap::{RdmapOpcode, ReadRequestRepr};
use dpwarp::wire::terminate::{Layer, TermCause};

const RW: Access = Access(7);

struct Side {
    qp: QpEngine,
    mem: MemoryTable,
    pd: PdId,
}

struct Pair {
    a: Side,
    b: Side,
    /// Every ULPDU A sent, in order.
    a_sent: Vec<Vec<u8>>,
}

fn side(mulpdu: usize, ird: u32, ord: u32, rtr: Option<RtrRole>) -> Side {
    let mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let qp = QpEngine::new(
        QpConfig {
            mulpdu,
            pd,
            ird,
            ord,
            sq_depth: 64,
            rq_depth: 64,
            rtr,
        },
        mem.clone(),
    );
    Side { qp, mem, pd }
}

impl Pair {
    fn new() -> Pair {
        Pair::with(1024, 4, 4, None, None)
    }
    fn with(mulpdu: usize, ird: u32, ord: u32, ra: Option<RtrRole>, rb: Option<RtrRole>) -> Pair {
        Pair {
            a: side(mulpdu, ird, ord, ra),
            b: side(mulpdu, ird, ord, rb),
            a_sent: Vec::new(),
        }
    }
    fn pump(&mut self) {
        for _ in 0..100_000 {
            let mut moved = false;
            let mut u = Vec::new();
            // `has_ulpdu` false must mean nothing to send: the dataplane skips offering
            // transmit room on that answer (`Connection::has_tx_work`).
            let has_a = self.a.qp.has_ulpdu();
            if self.a.qp.poll_ulpdu(&mut u) {
                assert!(has_a, "A wrote a ULPDU after has_ulpdu said none: {u:02x?}");
                assert!(u.len() <= 1024);
                self.b.qp.on_ulpdu(&u);
                self.a_sent.push(u);
                moved = true;
            }
            let mut u = Vec::new();
            let has_b = self.b.qp.has_ulpdu();
            if self.b.qp.poll_ulpdu(&mut u) {
                assert!(has_b, "B wrote a ULPDU after has_ulpdu said none: {u:02x?}");
                self.a.qp.on_ulpdu(&u);
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("pump did not settle");
    }
}

fn sge(mr: &Mr, off: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr() + off as u64,
        length: len as u32,
        lkey: mr.stag(),
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn wcs(qp: &mut QpEngine) -> Vec<WorkCompletion> {
    std::iter::from_fn(|| qp.poll_completion()).collect()
}

fn evs(qp: &mut QpEngine) -> Vec<QpEvent> {
    std::iter::from_fn(|| qp.poll_event()).collect()
}

fn send(p: &mut Pair, id: u64, op: Opcode, sges: Vec<Sge>) {
    p.a.qp
        .post_send(SendWr {
            wr_id: id,
            opcode: op,
            sg_list: sges.into(),
            signaled: true,
        })
        .unwrap();
}

fn sent_term(e: &[QpEvent]) -> Option<TermCause> {
    e.iter().find_map(|e| match e {
        QpEvent::TerminateSent(c) => Some(*c),
        _ => None,
    })
}

fn recv_term(e: &[QpEvent]) -> Option<TermCause> {
    e.iter().find_map(|e| match e {
        QpEvent::TerminateReceived(c) => Some(*c),
        _ => None,
    })
}

#[test]
fn rfc5040_s5_3_send_variants_gather_and_scatter() {
    let mut p = Pair::new();
    let src = p.a.mem.register(p.a.pd, 10_000, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(1, 10_000));
    // Each receive scatters over its own two regions, so no later Send overwrites what an
    // earlier one placed before it is checked.
    let bufs: Vec<(Mr, Mr)> = (0..4)
        .map(|_| {
            (
                p.b.mem.register(p.b.pd, 3000, Access::LOCAL_WRITE),
                p.b.mem.register(p.b.pd, 6000, Access::LOCAL_WRITE),
            )
        })
        .collect();
    let inv = p.b.mem.register(p.b.pd, 64, RW);
    for (id, (r1, r2)) in bufs.iter().enumerate() {
        p.b.qp
            .post_recv(RecvWr {
                wr_id: id as u64,
                sg_list: smallvec![sge(r1, 0, 1000), sge(r2, 0, 6000)],
            })
            .unwrap();
    }
    send(
        &mut p,
        10,
        Opcode::Send,
        vec![sge(&src, 0, 100), sge(&src, 5000, 4000)],
    );
    send(&mut p, 11, Opcode::SendSe, vec![]);
    send(
        &mut p,
        12,
        Opcode::SendInv {
            inv_stag: inv.stag(),
        },
        vec![sge(&src, 0, 10)],
    );
    // The 4th names the STag the 3rd invalidates: refused with a TERMINATE (checked below).
    send(
        &mut p,
        13,
        Opcode::SendSeInv {
            inv_stag: inv.stag(),
        },
        vec![],
    );
    p.pump();
    let a = wcs(&mut p.a.qp);
    assert_eq!(
        a.iter().map(|w| w.wr_id).collect::<Vec<_>>()[..3],
        [10, 11, 12]
    );
    let b = wcs(&mut p.b.qp);
    assert_eq!(
        (b[0].wr_id, b[0].byte_len, b[0].solicited),
        (0, 4100, false)
    );
    assert_eq!((b[1].byte_len, b[1].solicited), (0, true));
    assert_eq!(b[2].invalidated_rkey, Some(inv.stag()));
    assert!(inv.is_invalidated());
    // Gathered from two SGEs, scattered over the first receive's two regions (1000 + 3100).
    let mut expect = pattern(1, 100);
    expect.extend_from_slice(&pattern(1, 10_000)[5000..9000]);
    let (r1, r2) = &bufs[0];
    let mut got = r1.to_vec()[..1000].to_vec();
    got.extend_from_slice(&r2.to_vec()[..3100]);
    assert_eq!(got, expect);
    // The Send with Invalidate placed its 10 bytes in the third receive's first region.
    assert_eq!(b[2].byte_len, 10);
    assert_eq!(bufs[2].0.to_vec()[..10], pattern(1, 10)[..]);
    // Send with SE and Invalidate of the already invalidated STag: TERMINATE.
    assert_eq!(
        sent_term(&evs(&mut p.b.qp)),
        Some(TermCause::RDMAP_INVALID_STAG)
    );
}

#[test]
fn rfc5041_s5_large_messages_are_segmented_within_mulpdu() {
    let mut p = Pair::new();
    let n = 100_000;
    let src = p.a.mem.register(p.a.pd, n, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(7, n));
    let dst =
        p.b.mem
            .register(p.b.pd, n, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rb = p.b.mem.register(p.b.pd, n, Access::LOCAL_WRITE);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&rb, 0, n)],
        })
        .unwrap();
    send(
        &mut p,
        1,
        Opcode::Write {
            remote_addr: dst.addr(),
            rkey: dst.stag(),
        },
        vec![sge(&src, 0, n)],
    );
    send(&mut p, 2, Opcode::Send, vec![sge(&src, 0, n)]);
    p.pump();
    assert_eq!(dst.to_vec(), pattern(7, n));
    assert_eq!(rb.to_vec(), pattern(7, n));
    assert!(p.a_sent.len() >= 2 * n / 1024);
    assert_eq!(
        p.a_sent.iter().filter(|u| u[0] & 0x40 != 0).count(),
        2,
        "one L per message"
    );
    let a = wcs(&mut p.a.qp);
    assert_eq!(
        a.iter().map(|w| w.opcode).collect::<Vec<_>>(),
        [WcOpcode::Write, WcOpcode::Send]
    );
    assert_eq!(wcs(&mut p.b.qp)[0].byte_len, n as u32);
}

#[test]
fn rfc5040_s5_5_reads_with_ord_1_complete_in_order() {
    let mut p = Pair::with(1024, 1, 1, None, None);
    let n = 5000;
    let srcb = p.b.mem.register(p.b.pd, n, RW);
    srcb.write_at(0, &pattern(3, n));
    let sink = p.a.mem.register(p.a.pd, 10 * n, Access::LOCAL_WRITE);
    for i in 0..10u64 {
        send(
            &mut p,
            i,
            Opcode::Read {
                remote_addr: srcb.addr() + i,
                rkey: srcb.stag(),
            },
            vec![
                sge(&sink, i as usize * n, 10),
                sge(&sink, i as usize * n + 10, n - 10 - i as usize),
            ],
        );
    }
    p.pump();
    let a = wcs(&mut p.a.qp);
    assert_eq!(a.len(), 10);
    for (i, w) in a.iter().enumerate() {
        assert_eq!(
            (w.wr_id, w.status, w.opcode),
            (i as u64, WcStatus::Success, WcOpcode::Read)
        );
        let got = &sink.to_vec()[i * n..i * n + n - i];
        assert_eq!(got, &pattern(3, n)[i..]);
    }
    assert!(evs(&mut p.b.qp).is_empty(), "ORD 1 never exceeds IRD 1");
}

/// Run `op` from A against B's memory and require a TERMINATE with `want`; `target` unchanged.
fn refused(p: &mut Pair, target: &Mr, op: Opcode, len: usize, want: TermCause) {
    let before = target.to_vec();
    let src = p.a.mem.register(p.a.pd, len.max(1), Access::LOCAL_WRITE);
    src.write_at(0, &vec![0x77; len.max(1)]);
    send(p, 99, op, vec![sge(&src, 0, len)]);
    p.pump();
    assert_eq!(sent_term(&evs(&mut p.b.qp)), Some(want));
    assert_eq!(recv_term(&evs(&mut p.a.qp)), Some(want));
    assert_eq!(target.to_vec(), before, "target memory changed");
    let wc = p.a.qp.poll_completion().expect("completion");
    assert_ne!(wc.status, WcStatus::Success);
    assert_eq!(p.a.qp.state(), QpState::Terminated);
    assert_eq!(p.b.qp.state(), QpState::Terminated);
}

fn target(p: &mut Pair, access: Access) -> Mr {
    let mr = p.b.mem.register(p.b.pd, 4096, access);
    mr.write_at(0, &[0x11; 4096]);
    mr
}

#[test]
fn rfc5041_s7_1_write_invalid_stag() {
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag() ^ 0x100,
        },
        64,
        TermCause::DDP_TAGGED_INVALID_STAG,
    );
}

#[test]
fn rfc5041_s7_1_write_wrong_key() {
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag() ^ 1,
        },
        64,
        TermCause::DDP_TAGGED_INVALID_STAG,
    );
}

#[test]
fn rfc5041_s7_1_write_invalidated_stag() {
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    p.b.mem.invalidate(t.stag(), p.b.pd).unwrap();
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag(),
        },
        64,
        TermCause::DDP_TAGGED_INVALID_STAG,
    );
}

#[test]
fn rfc5041_s7_1_write_past_bounds_and_below_base() {
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr() + 4090,
            rkey: t.stag(),
        },
        64,
        TermCause::DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION,
    );
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr() - 1,
            rkey: t.stag(),
        },
        8,
        TermCause::DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION,
    );
}

#[test]
fn rfc5040_s7_write_without_remote_write_right() {
    let mut p = Pair::new();
    let t = target(&mut p, Access::LOCAL_WRITE | Access::REMOTE_READ);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag(),
        },
        64,
        TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION,
    );
}

#[test]
fn rfc5041_s7_1_write_pd_mismatch() {
    let mut p = Pair::new();
    let other = p.b.mem.alloc_pd();
    let t = p.b.mem.register(other, 4096, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag(),
        },
        64,
        TermCause::DDP_TAGGED_STAG_NOT_ASSOCIATED,
    );
}

#[test]
fn rfc5040_s7_2_read_request_checks() {
    let mut p = Pair::new();
    let t = target(&mut p, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Read {
            remote_addr: t.addr(),
            rkey: t.stag(),
        },
        64,
        TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION,
    );
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Read {
            remote_addr: t.addr() + 100,
            rkey: t.stag(),
        },
        4096,
        TermCause::RDMAP_BASE_OR_BOUNDS_VIOLATION,
    );
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    refused(
        &mut p,
        &t.clone(),
        Opcode::Read {
            remote_addr: t.addr(),
            rkey: t.stag() ^ 0x55,
        },
        64,
        TermCause::RDMAP_INVALID_STAG,
    );
    // The requester's completion is attributed: remote access error.
}

#[test]
fn rfc5040_s7_refused_write_completes_with_rem_access_err() {
    let mut p = Pair::new();
    let t = target(&mut p, Access::LOCAL_WRITE);
    let src = p.a.mem.register(p.a.pd, 64, Access::LOCAL_WRITE);
    send(
        &mut p,
        5,
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag(),
        },
        vec![sge(&src, 0, 64)],
    );
    send(&mut p, 6, Opcode::Send, vec![sge(&src, 0, 64)]);
    p.pump();
    let a = wcs(&mut p.a.qp);
    assert_eq!(a[0].status, WcStatus::RemAccessErr, "{a:?}");
}

/// Deliver a hand-made ULPDU to B and return the TERMINATE cause it sent.
fn inject(p: &mut Pair, ulpdu: &[u8]) -> Option<TermCause> {
    p.b.qp.on_ulpdu(ulpdu);
    sent_term(&evs(&mut p.b.qp))
}

fn untagged(ctrl: u8, qn: u32, msn: u32, mo: u32, last: bool, dv: u8, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    HeaderRepr {
        last,
        ddp_version: dv,
        rdmap_control: ctrl,
        buffer: BufferRepr::Untagged {
            inv_stag: 0,
            qn,
            msn,
            mo,
        },
    }
    .emit_to_vec(&mut u);
    u.extend_from_slice(payload);
    u
}

fn with_buffer(len: usize) -> (Pair, Mr) {
    let mut p = Pair::new();
    let rb = p.b.mem.register(p.b.pd, len, Access::LOCAL_WRITE);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&rb, 0, len)],
        })
        .unwrap();
    (p, rb)
}

#[test]
fn rfc5041_s7_2_untagged_errors() {
    let send = RdmapOpcode::Send.control();
    let cases: Vec<(Vec<u8>, TermCause)> = vec![
        (
            untagged(send, 0, 1, 0, true, 1, &[1; 65]),
            TermCause::DDP_UNTAGGED_MESSAGE_TOO_LONG,
        ),
        (
            untagged(send, 0, 1, 65, true, 1, &[1; 1]),
            TermCause::DDP_UNTAGGED_INVALID_MO,
        ),
        (
            untagged(send, 0, 2, 0, true, 1, &[1; 4]),
            TermCause::DDP_UNTAGGED_INVALID_MSN_RANGE,
        ),
        (
            untagged(send, 0, 0, 0, true, 1, &[1; 4]),
            TermCause::DDP_UNTAGGED_INVALID_MSN_RANGE,
        ),
        (
            untagged(send, 5, 1, 0, true, 1, &[1; 4]),
            TermCause::DDP_UNTAGGED_INVALID_QN,
        ),
        (
            untagged(send, 0, 1, 0, true, 2, &[1; 4]),
            TermCause::DDP_UNTAGGED_INVALID_DDP_VERSION,
        ),
        (
            untagged(0x83, 0, 1, 0, true, 1, &[1; 4]),
            TermCause::RDMAP_INVALID_RDMAP_VERSION,
        ),
        (
            untagged(0x4f, 0, 1, 0, true, 1, &[1; 4]),
            TermCause::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            untagged(0x40, 0, 1, 0, true, 1, &[1; 4]),
            TermCause::RDMAP_UNEXPECTED_OPCODE,
        ),
    ];
    for (u, want) in cases {
        let (mut p, rb) = with_buffer(64);
        assert_eq!(inject(&mut p, &u), Some(want), "{u:02x?}");
        assert_eq!(rb.to_vec(), vec![0; 64], "placed");
        let w = wcs(&mut p.b.qp);
        assert_eq!(w.len(), 1);
        assert_ne!(w[0].status, WcStatus::Success);
        // the TERMINATE quotes the offending DDP header (RFC 5040 §7.1 case 2)
        let mut t = Vec::new();
        assert!(p.b.qp.poll_ulpdu(&mut t));
        assert_eq!(&t[18 + 6..18 + 6 + 18], &u[..18]);
        p.a.qp.on_ulpdu(&t);
        assert_eq!(recv_term(&evs(&mut p.a.qp)), Some(want));
    }
}

#[test]
fn rfc5041_s7_1_send_without_receive_buffer() {
    let mut p = Pair::new();
    let u = untagged(RdmapOpcode::Send.control(), 0, 1, 0, true, 1, &[1; 4]);
    assert_eq!(
        inject(&mut p, &u),
        Some(TermCause::DDP_UNTAGGED_INVALID_MSN_NO_BUFFER)
    );
}

/// A receive buffer whose region was deregistered after the post: the Send is placed nowhere,
/// the receive completes with a local protection error, and the peer gets a TERMINATE (local
/// catastrophic error, RFC 5040 §7.4). With one SGE the copy's own check finds it (nothing is
/// checked before the copy); with two, where the second is the bad one, nothing is placed in
/// the good first one either.
#[test]
fn rfc5040_s7_receive_sge_deregistered_after_post() {
    for pieces in [1usize, 2] {
        let mut p = Pair::new();
        let good = p.b.mem.register(p.b.pd, 64, Access::LOCAL_WRITE);
        let bad = p.b.mem.register(p.b.pd, 64, Access::LOCAL_WRITE);
        let sg_list = if pieces == 1 {
            smallvec![sge(&bad, 0, 64)]
        } else {
            smallvec![sge(&good, 0, 32), sge(&bad, 0, 32)]
        };
        p.b.qp.post_recv(RecvWr { wr_id: 9, sg_list }).unwrap();
        assert!(p.b.mem.deregister(bad.stag()));
        let u = untagged(RdmapOpcode::Send.control(), 0, 1, 0, true, 1, &[0xab; 64]);
        assert_eq!(
            inject(&mut p, &u),
            Some(TermCause::RDMAP_LOCAL_CATASTROPHIC),
            "{pieces} SGE(s)"
        );
        assert_eq!(good.to_vec(), vec![0; 64], "{pieces} SGE(s): placed");
        assert_eq!(bad.to_vec(), vec![0; 64], "{pieces} SGE(s): placed");
        let w = wcs(&mut p.b.qp);
        assert_eq!(w.len(), 1, "{pieces} SGE(s): {w:?}");
        assert_eq!((w[0].wr_id, w[0].status), (9, WcStatus::LocProtErr));
        assert_eq!(p.b.qp.rx_placed(), 0, "{pieces} SGE(s)");
    }
}

/// A multi-segment RDMA Write whose target is deregistered (or invalidated) between two of its
/// segments: the engine looks the region up once a message (it holds it from the first
/// segment to the last), yet every segment is checked, so the next segment is refused with
/// the TERMINATE of an invalid STag (RFC 5041 §7.1, §7.2) and nothing of it or after it is
/// placed. A Write that completes leaves no hold behind: the region's bytes can be taken.
#[test]
fn rfc5041_s7_1_target_gone_between_two_segments_of_a_write() {
    // A posts a 4 KiB RDMA Write of `pattern(seed)` into `dst` (4 segments of at most 1 KiB).
    fn post_write(p: &mut Pair, dst: &Mr, seed: u8) {
        let src = p.a.mem.register(p.a.pd, 4096, Access::LOCAL_WRITE);
        src.write_at(0, &pattern(seed, 4096));
        let op = Opcode::Write {
            remote_addr: dst.addr(),
            rkey: dst.stag(),
        };
        send(p, 1, op, vec![sge(&src, 0, 4096)]);
    }
    for deregister in [false, true] {
        let mut p = Pair::new();
        let dst = target(&mut p, RW);
        post_write(&mut p, &dst, 5);
        // The first two segments only.
        let mut placed = 0;
        for _ in 0..2 {
            let mut u = Vec::new();
            assert!(p.a.qp.poll_ulpdu(&mut u));
            placed += u.len() - 14;
            assert_eq!(inject(&mut p, &u), None);
        }
        if deregister {
            assert!(p.b.mem.deregister(dst.stag()));
        } else {
            p.b.mem.invalidate(dst.stag(), p.b.pd).unwrap();
        }
        let mut u = Vec::new();
        assert!(p.a.qp.poll_ulpdu(&mut u));
        // An invalidated STag is reported as an invalid one on the wire.
        assert_eq!(
            inject(&mut p, &u),
            Some(TermCause::DDP_TAGGED_INVALID_STAG),
            "deregister {deregister}"
        );
        let got = dst.to_vec();
        assert_eq!(&got[..placed], &pattern(5, 4096)[..placed]);
        assert!(
            got[placed..].iter().all(|&b| b == 0x11),
            "placed after the refusal"
        );
    }

    // Completed: nothing holds the target.
    let mut p = Pair::new();
    let dst =
        p.b.mem
            .register(p.b.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    post_write(&mut p, &dst, 6);
    p.pump();
    assert!(p.a_sent.len() >= 4, "several segments: {}", p.a_sent.len());
    assert!(p.b.mem.deregister(dst.stag()));
    let v = dst
        .into_bytes()
        .expect("no hold left after the Write's last segment");
    assert_eq!(v, pattern(6, 4096));
}

#[test]
fn rfc5041_s7_1_tagged_bad_ddp_version() {
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    let mut u = Vec::new();
    HeaderRepr {
        last: true,
        ddp_version: 0,
        rdmap_control: RdmapOpcode::RdmaWrite.control(),
        buffer: BufferRepr::Tagged {
            stag: t.stag(),
            to: t.addr(),
        },
    }
    .emit_to_vec(&mut u);
    u.extend_from_slice(&[9; 8]);
    assert_eq!(
        inject(&mut p, &u),
        Some(TermCause::DDP_TAGGED_INVALID_DDP_VERSION)
    );
    assert_eq!(t.to_vec(), vec![0x11; 4096]);
}

#[test]
fn rfc5040_s6_5_ird_exceeded() {
    let mut p = Pair::with(1024, 1, 4, None, None);
    let t = target(&mut p, RW);
    let mut body = Vec::new();
    ReadRequestRepr {
        sink_stag: 1,
        sink_to: 0,
        size: 8,
        src_stag: t.stag(),
        src_to: t.addr(),
    }
    .emit_to_vec(&mut body);
    let c = RdmapOpcode::ReadRequest.control();
    p.b.qp.on_ulpdu(&untagged(c, 1, 1, 0, true, 1, &body));
    assert_eq!(
        inject(&mut p, &untagged(c, 1, 2, 0, true, 1, &body)),
        Some(TermCause::DDP_UNTAGGED_INVALID_MSN_NO_BUFFER)
    );
}

#[test]
/// RFC 5040 §5.3: "STag Cannot be Invalidated" when the STag is not associated with the stream.
fn rfc5040_s7_2_send_invalidate_of_foreign_stag() {
    let (mut p, rb) = with_buffer(64);
    let other = p.b.mem.alloc_pd();
    let foreign = p.b.mem.register(other, 64, RW);
    let src = p.a.mem.register(p.a.pd, 64, Access::LOCAL_WRITE);
    src.write_at(0, &[9; 64]);
    send(
        &mut p,
        2,
        Opcode::SendInv {
            inv_stag: foreign.stag(),
        },
        vec![sge(&src, 0, 64)],
    );
    p.pump();
    assert_eq!(
        sent_term(&evs(&mut p.b.qp)),
        Some(TermCause::RDMAP_PROT_STAG_CANNOT_BE_INVALIDATED)
    );
    assert_eq!(rb.to_vec(), vec![0; 64]);
    assert!(!foreign.is_invalidated());
}

#[test]
fn rfc5040_s4_8_siw_order_terminate_is_decoded() {
    let mut p = Pair::new();
    let src = p.a.mem.register(p.a.pd, 8, Access::LOCAL_WRITE);
    send(&mut p, 1, Opcode::Send, vec![sge(&src, 0, 8)]);
    // siw's CRC-error TERMINATE: `02 02 00 00`.
    let u = untagged(
        RdmapOpcode::Terminate.control(),
        2,
        1,
        0,
        true,
        1,
        &[2, 2, 0, 0],
    );
    p.a.qp.on_ulpdu(&u);
    assert_eq!(recv_term(&evs(&mut p.a.qp)), Some(TermCause::MPA_CRC));
    assert_eq!(wcs(&mut p.a.qp)[0].status, WcStatus::WrFlushErr);
    assert_eq!(p.a.qp.state(), QpState::Terminated);
    let mut out = Vec::new();
    assert!(
        !p.a.qp.poll_ulpdu(&mut out),
        "no TERMINATE answers a TERMINATE"
    );
}

#[test]
fn rfc5040_s4_8_terminate_goes_out_in_rfc_order() {
    let mut p = Pair::new();
    p.a.qp.terminate(TermCause::MPA_CRC);
    let mut out = Vec::new();
    assert!(p.a.qp.poll_ulpdu(&mut out));
    assert_eq!(&out[..2], &[0x41, 0x47]);
    assert_eq!(&out[6..18], &[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(&out[18..22], &[0x20, 0x02, 0x00, 0x00]);
    assert_eq!(sent_term(&evs(&mut p.a.qp)), Some(TermCause::MPA_CRC));
    assert!(!p.a.qp.poll_ulpdu(&mut out));
}

fn rtr_pair(k: RtrKind) -> Pair {
    let mut p = Pair::with(
        1024,
        2,
        2,
        Some(RtrRole::Initiator(k)),
        Some(RtrRole::Responder(k)),
    );
    assert_eq!(p.b.qp.state(), QpState::AwaitRtr);
    // B's own traffic is fenced until the RTR arrives.
    let rb = p.b.mem.register(p.b.pd, 16, Access::LOCAL_WRITE);
    let ra = p.a.mem.register(p.a.pd, 16, Access::LOCAL_WRITE);
    p.a.qp
        .post_recv(RecvWr {
            wr_id: 7,
            sg_list: smallvec![sge(&ra, 0, 16)],
        })
        .unwrap();
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 8,
            sg_list: smallvec![sge(&rb, 0, 16)],
        })
        .unwrap();
    p.b.qp
        .post_send(SendWr {
            wr_id: 1,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&rb, 0, 4)],
            signaled: true,
        })
        .unwrap();
    let mut out = Vec::new();
    assert!(!p.b.qp.poll_ulpdu(&mut out));
    p.pump();
    assert!(evs(&mut p.a.qp).contains(&QpEvent::RtrComplete));
    assert!(evs(&mut p.b.qp).contains(&QpEvent::RtrComplete));
    assert_eq!(
        wcs(&mut p.a.qp)[0].wr_id,
        7,
        "B's held Send arrived after the RTR"
    );
    p
}

#[test]
fn rfc6581_s9_2_send_rtr_then_first_send_uses_msn_2() {
    let mut p = rtr_pair(RtrKind::Send);
    assert_eq!(&p.a_sent[0][..2], &[0x41, 0x43]);
    let src = p.a.mem.register(p.a.pd, 4, Access::LOCAL_WRITE);
    send(&mut p, 3, Opcode::Send, vec![sge(&src, 0, 4)]);
    p.pump();
    assert_eq!(&p.a_sent[1][10..14], &[0, 0, 0, 2]);
    assert_eq!(
        wcs(&mut p.b.qp)
            .iter()
            .find(|w| w.opcode == WcOpcode::Recv)
            .unwrap()
            .wr_id,
        8
    );
}

#[test]
fn rfc6581_s9_2_write_rtr_like_siw() {
    let p = rtr_pair(RtrKind::Write);
    assert_eq!(
        p.a_sent[0],
        vec![0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn rfc6581_s9_2_read_rtr_then_first_read_uses_msn_2() {
    let mut p = rtr_pair(RtrKind::Read);
    assert_eq!(p.a_sent[0].len(), 18 + 28);
    let t = p.b.mem.register(p.b.pd, 8, RW);
    t.write_at(0, b"abcdefgh");
    let sink = p.a.mem.register(p.a.pd, 8, Access::LOCAL_WRITE);
    send(
        &mut p,
        4,
        Opcode::Read {
            remote_addr: t.addr(),
            rkey: t.stag(),
        },
        vec![sge(&sink, 0, 8)],
    );
    p.pump();
    assert_eq!(&p.a_sent[1][10..14], &[0, 0, 0, 2]);
    assert_eq!(sink.to_vec(), b"abcdefgh");
}

#[test]
fn rfc6581_s9_2_wrong_first_message_gets_no_matching_rtr() {
    let mut p = Pair::with(
        1024,
        2,
        2,
        Some(RtrRole::Initiator(RtrKind::Send)),
        Some(RtrRole::Responder(RtrKind::Write)),
    );
    p.pump();
    assert_eq!(
        recv_term(&evs(&mut p.a.qp)),
        Some(TermCause::MPA_NO_MATCHING_RTR)
    );
    assert_eq!(TermCause::MPA_NO_MATCHING_RTR.layer, Layer::Llp);
}

#[test]
fn rfc5041_s7_1_hostile_ulpdus_never_panic() {
    let mut p = Pair::new();
    for len in 0..60 {
        for b0 in [0x00u8, 0x41, 0xc1, 0xff] {
            let mut u = vec![0xffu8; len];
            if let Some(x) = u.first_mut() {
                *x = b0;
            }
            let mut q = side(1024, 2, 2, None);
            q.qp.on_ulpdu(&u);
        }
    }
    p.b.qp.on_ulpdu(&[]);
    assert_eq!(p.b.qp.state(), QpState::Terminated);
}

/// The dataplane reads `has_ulpdu` after the engine's events were taken (the connection turns
/// them into its own events as it goes): a TERMINATE queued for the peer must still count
/// then (RFC 5040 §7.1: it MUST be sent), or the worker would never offer room for it.
#[test]
fn has_ulpdu_counts_a_queued_terminate_after_its_event_was_taken() {
    let mut p = Pair::new();
    let t = target(&mut p, RW);
    let src = p.a.mem.register(p.a.pd, 64, RW);
    send(
        &mut p,
        1,
        Opcode::Write {
            remote_addr: t.addr(),
            rkey: t.stag() ^ 0x100,
        },
        vec![sge(&src, 0, 64)],
    );
    let mut u = Vec::new();
    assert!(p.a.qp.poll_ulpdu(&mut u), "the Write's ULPDU");
    p.b.qp.on_ulpdu(&u);
    let events = evs(&mut p.b.qp);
    assert_eq!(sent_term(&events), Some(TermCause::DDP_TAGGED_INVALID_STAG));
    assert!(p.b.qp.has_ulpdu(), "the queued TERMINATE is not counted");
    let mut term = Vec::new();
    assert!(p.b.qp.poll_ulpdu(&mut term), "the TERMINATE");
    assert!(!p.b.qp.has_ulpdu(), "nothing is left after the TERMINATE");
}
