//! Two sans-IO [`Connection`]s wired back to back by the test: corruption of every bit of an FPDU
//! is caught (nothing placed, TERMINATE sent), and every invalid remote access is refused with a
//! TERMINATE while the target memory stays byte-identical.

use dpwarp::verbs::smallvec;
use std::time::Instant;

use dpwarp::conn::ConnEvent;
use dpwarp::mpa::MpaConfig;
use dpwarp::rdma::{Access, Mr, Opcode, RecvWr, SendWr, WcStatus};
use dpwarp::wire::terminate::TermCause;

mod conn_pair;
use conn_pair::{events, sge, Pair};

fn sent_terminate(ev: &[ConnEvent]) -> Option<TermCause> {
    ev.iter().find_map(|e| match e {
        ConnEvent::TerminateSent(c) => Some(*c),
        _ => None,
    })
}

fn received_terminate(ev: &[ConnEvent]) -> Option<TermCause> {
    ev.iter().find_map(|e| match e {
        ConnEvent::TerminateReceived(c) => Some(*c),
        _ => None,
    })
}

/// RFC 5044 §4.4 / §8: every single-bit flip anywhere in an FPDU (header, ULPDU, pad, CRC) is
/// caught: nothing of it is placed, a TERMINATE (LLP layer, MPA, CRC error) goes out and the
/// connection closes. A filler RDMA Write follows so that a flip that enlarges ULPDU_Length
/// still gets enough bytes to be checked.
#[test]
fn rfc5044_s4_4_every_bit_flip_in_an_fpdu_is_caught() {
    let msg = 101usize; // odd: the FPDU has a pad
    let mut flips = 0;
    // Learn the FPDU's extent from a clean run.
    let fpdu_len = {
        let mut p = Pair::new(MpaConfig::default());
        let src = p.mem_a.register(p.pd_a, msg, Access::LOCAL_WRITE);
        p.a.post_send(SendWr {
            wr_id: 1,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&src, 0, msg)],
            signaled: true,
        })
        .unwrap();
        p.take_a().len()
    };
    assert_eq!(fpdu_len, (2 + 18 + msg).div_ceil(4) * 4 + 4);
    for bit in 0..fpdu_len * 8 {
        let mut p = Pair::new(MpaConfig::default());
        let src = p.mem_a.register(p.pd_a, 70_000, Access::LOCAL_WRITE);
        src.write_at(0, &vec![0xA5; 70_000]);
        let rbuf = p.mem_b.register(p.pd_b, msg, Access::LOCAL_WRITE);
        let filler = p
            .mem_b
            .register(p.pd_b, 70_000, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        p.b.post_recv(RecvWr {
            wr_id: 7,
            sg_list: smallvec![sge(&rbuf, 0, msg)],
        })
        .unwrap();
        p.a.post_send(SendWr {
            wr_id: 1,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&src, 0, msg)],
            signaled: true,
        })
        .unwrap();
        p.a.post_send(SendWr {
            wr_id: 2,
            opcode: Opcode::Write {
                remote_addr: filler.addr(),
                rkey: filler.stag(),
            },
            sg_list: smallvec![sge(&src, 0, 70_000)],
            signaled: true,
        })
        .unwrap();
        let mut bytes = p.take_a();
        assert!(bytes.len() > fpdu_len + 65_536);
        bytes[bit / 8] ^= 1 << (bit % 8);
        p.b.on_bytes(&bytes, Instant::now());
        let ev = events(&mut p.b);
        assert_eq!(
            sent_terminate(&ev),
            Some(TermCause::MPA_CRC),
            "bit {bit}: {ev:?}"
        );
        assert!(p.b.should_close());
        assert!(rbuf.to_vec().iter().all(|&x| x == 0), "bit {bit}: placed");
        assert!(filler.to_vec().iter().all(|&x| x == 0), "bit {bit}: placed");
        while let Some(wc) = p.b.poll_completion() {
            assert_ne!(wc.status, WcStatus::Success, "bit {bit}: {wc:?}");
        }
        // The TERMINATE reaches A.
        let mut ba = Vec::new();
        p.b.poll_transmit(&mut ba);
        p.a.on_bytes(&ba, Instant::now());
        let ev = events(&mut p.a);
        assert_eq!(
            received_terminate(&ev),
            Some(TermCause::MPA_CRC),
            "bit {bit}"
        );
        flips += 1;
    }
    assert_eq!(flips, fpdu_len * 8);
}

/// One invalid remote access: `op` against B's region `target` must be refused with a TERMINATE
/// that A receives, and `target` stays byte-identical.
fn refused(setup: impl FnOnce(&mut Pair) -> (Mr, Opcode, usize)) -> TermCause {
    let mut p = Pair::new(MpaConfig::default());
    let (target, op, len) = setup(&mut p);
    let before = target.to_vec();
    let local = p.mem_a.register(p.pd_a, len.max(1), Access::LOCAL_WRITE);
    local.write_at(0, &vec![0x77; len.max(1)]);
    p.a.post_send(SendWr {
        wr_id: 9,
        opcode: op,
        sg_list: smallvec![sge(&local, 0, len)],
        signaled: true,
    })
    .unwrap();
    p.pump();
    let eb = events(&mut p.b);
    let ea = events(&mut p.a);
    let sent = sent_terminate(&eb).unwrap_or_else(|| panic!("B sent no TERMINATE: {eb:?}"));
    assert_eq!(received_terminate(&ea), Some(sent), "{ea:?}");
    assert_eq!(target.to_vec(), before, "target memory changed");
    let wc = p.a.poll_completion().expect("requester completion");
    assert_ne!(wc.status, WcStatus::Success);
    assert!(p.a.should_close() && p.b.should_close());
    sent
}

fn rw(p: &mut Pair, access: Access) -> Mr {
    let mr = p.mem_b.register(p.pd_b, 4096, access);
    mr.write_at(0, &[0x11; 4096]);
    mr
}

const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

#[test]
fn rfc5040_s7_write_invalid_stag_refused() {
    let c = refused(|p| {
        let mr = rw(p, RW);
        let op = Opcode::Write {
            remote_addr: mr.addr(),
            rkey: mr.stag() ^ 0x100, // another index
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::DDP_TAGGED_INVALID_STAG);
}

#[test]
fn rfc5040_s7_write_wrong_key_refused() {
    let c = refused(|p| {
        let mr = rw(p, RW);
        let op = Opcode::Write {
            remote_addr: mr.addr(),
            rkey: mr.stag() ^ 0x01, // same index, other key byte
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::DDP_TAGGED_INVALID_STAG);
}

#[test]
fn rfc5040_s7_write_past_bounds_refused() {
    let c = refused(|p| {
        let mr = rw(p, RW);
        let op = Opcode::Write {
            remote_addr: mr.addr() + 4096 - 10,
            rkey: mr.stag(),
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION);
}

#[test]
fn rfc5040_s7_write_below_base_refused() {
    let c = refused(|p| {
        let mr = rw(p, RW);
        let op = Opcode::Write {
            remote_addr: mr.addr() - 1,
            rkey: mr.stag(),
        };
        (mr, op, 8)
    });
    assert_eq!(c, TermCause::DDP_TAGGED_BASE_OR_BOUNDS_VIOLATION);
}

#[test]
fn rfc5040_s7_write_without_remote_write_right_refused() {
    let c = refused(|p| {
        let mr = rw(p, Access::LOCAL_WRITE | Access::REMOTE_READ);
        let op = Opcode::Write {
            remote_addr: mr.addr(),
            rkey: mr.stag(),
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION);
}

#[test]
fn rfc5040_s7_read_without_remote_read_right_refused() {
    let c = refused(|p| {
        let mr = rw(p, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let op = Opcode::Read {
            remote_addr: mr.addr(),
            rkey: mr.stag(),
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::RDMAP_ACCESS_RIGHTS_VIOLATION);
}

#[test]
fn rfc5040_s7_read_past_bounds_refused() {
    let c = refused(|p| {
        let mr = rw(p, RW);
        let op = Opcode::Read {
            remote_addr: mr.addr() + 100,
            rkey: mr.stag(),
        };
        (mr, op, 4096)
    });
    assert_eq!(c, TermCause::RDMAP_BASE_OR_BOUNDS_VIOLATION);
}

#[test]
fn rfc5040_s7_write_to_other_pd_region_refused() {
    let c = refused(|p| {
        let other_pd = p.mem_b.alloc_pd();
        let mr = p.mem_b.register(other_pd, 4096, RW);
        let op = Opcode::Write {
            remote_addr: mr.addr(),
            rkey: mr.stag(),
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::DDP_TAGGED_STAG_NOT_ASSOCIATED);
}

#[test]
fn rfc5040_s7_write_to_invalidated_stag_refused() {
    let c = refused(|p| {
        let mr = rw(p, RW);
        p.mem_b.invalidate(mr.stag(), p.pd_b).unwrap();
        let op = Opcode::Write {
            remote_addr: mr.addr(),
            rkey: mr.stag(),
        };
        (mr, op, 64)
    });
    assert_eq!(c, TermCause::DDP_TAGGED_INVALID_STAG);
}

#[test]
fn rfc5040_s7_send_invalidate_of_foreign_stag_refused() {
    // Send with Invalidate naming a region of another PD: unable to invalidate; the receive
    // buffer gets nothing and the region stays valid.
    let mut p = Pair::new(MpaConfig::default());
    let other_pd = p.mem_b.alloc_pd();
    let foreign = p.mem_b.register(other_pd, 64, RW);
    let rbuf = p.mem_b.register(p.pd_b, 64, Access::LOCAL_WRITE);
    p.b.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![sge(&rbuf, 0, 64)],
    })
    .unwrap();
    let src = p.mem_a.register(p.pd_a, 64, Access::LOCAL_WRITE);
    src.write_at(0, &[9; 64]);
    p.a.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::SendInv {
            inv_stag: foreign.stag(),
        },
        sg_list: smallvec![sge(&src, 0, 64)],
        signaled: true,
    })
    .unwrap();
    p.pump();
    assert_eq!(
        sent_terminate(&events(&mut p.b)),
        Some(TermCause::RDMAP_PROT_STAG_CANNOT_BE_INVALIDATED)
    );
    assert!(
        rbuf.to_vec().iter().all(|&x| x == 0),
        "receive buffer written"
    );
    assert!(p
        .mem_b
        .check(foreign.stag(), other_pd, foreign.addr(), 64, RW)
        .is_ok());
}

/// A peer's Read Request may name as much as a registered region holds; the responder produces
/// the Read Response as the transport drains it: no poll_transmit call appends more than
/// TX_BUDGET plus one FPDU, and the whole 8 MiB arrives intact over repeated calls.
#[test]
fn read_response_is_produced_in_bounded_batches() {
    const LEN: usize = 8 << 20;
    let mut p = Pair::new(MpaConfig::default());
    let target = p.mem_b.register(p.pd_b, LEN, RW);
    let data: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_mul(7) ^ 0x5a).collect();
    target.write_at(0, &data);
    let local = p.mem_a.register(p.pd_a, LEN, Access::LOCAL_WRITE);
    p.a.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Read {
            remote_addr: target.addr(),
            rkey: target.stag(),
        },
        sg_list: smallvec![sge(&local, 0, LEN)],
        signaled: true,
    })
    .unwrap();
    let now = Instant::now();
    let mut calls = 0;
    for _ in 0..10_000 {
        let mut ab = Vec::new();
        p.a.poll_transmit(&mut ab);
        let mut ba = Vec::new();
        p.b.poll_transmit(&mut ba);
        assert!(
            ba.len() <= dpwarp::conn::TX_BUDGET + 65536,
            "{} octets in one call",
            ba.len()
        );
        if ab.is_empty() && ba.is_empty() {
            break;
        }
        calls += 1;
        p.b.on_bytes(&ab, now);
        p.a.on_bytes(&ba, now);
    }
    assert!(calls >= LEN / dpwarp::conn::TX_BUDGET, "{calls} calls");
    let wc = p.a.poll_completion().expect("read completion");
    assert_eq!(wc.status, WcStatus::Success);
    assert!(local.to_vec() == data, "the Read returned other data");
}
