//! Two endpoints through the verbs/CM API over the in-memory link (plain and resegmented) and
//! kernel TCP loopback, doing every operation with the data verified.

mod common;

use common::*;
use dpwarp::cm::ConnParam;
use dpwarp::transport::memlink::LinkFaults;
use dpwarp::verbs::smallvec;
use dpwarp::verbs::{sge, Access, Opcode, QpTerminate, RecvWr, SendWr, WcOpcode};
use dpwarp::wire::terminate::TermCause;

fn exercise(link: Link, param: ConnParam) {
    let mut c = Side::new();
    let mut s = Side::new();

    let big = 200_000usize;
    // Server: receive buffers (one scattered over two regions) and a remote-accessible region.
    let r1 = s.pd.reg_mr(big, Access::LOCAL_WRITE);
    let r2a = s.pd.reg_mr(1000, Access::LOCAL_WRITE);
    let r2b = s.pd.reg_mr(big, Access::LOCAL_WRITE);
    let target = s.pd.reg_mr(
        2 * big,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let inv =
        s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    target.write_at(big, &pattern(9, big));
    let sqp = &s.qp.clone();
    sqp.post_recv(RecvWr {
        wr_id: 10,
        sg_list: smallvec![sge(&r1, 0, big)],
    })
    .unwrap();
    sqp.post_recv(RecvWr {
        wr_id: 11,
        sg_list: smallvec![sge(&r2a, 0, 1000), sge(&r2b, 0, big)],
    })
    .unwrap();
    sqp.post_recv(RecvWr {
        wr_id: 12,
        sg_list: smallvec![sge(&r1, 0, 64)],
    })
    .unwrap();

    connect_sides(link, &mut c, &mut s, param.clone(), param).expect("connect");
    let n = c.negotiated();
    assert_eq!(n.crc_tx, n.crc_rx);
    assert_eq!(n.crc_tx, s.negotiated().crc_rx);

    let src = c.pd.reg_mr(2 * big, Access::LOCAL_WRITE);
    let sink = c.pd.reg_mr(2 * big, Access::LOCAL_WRITE);
    let cqp = &c.qp.clone();

    // 1. Send of a multi-segment message.
    src.write_at(0, &pattern(1, big));
    cqp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, big)],
        signaled: true,
    })
    .unwrap();
    assert_eq!(wc_ok(&c.cq).opcode, WcOpcode::Send);
    let wc = wc_ok(&s.cq);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (10, WcOpcode::Recv, big as u32)
    );
    assert!(!wc.solicited);
    assert_eq!(r1.to_vec(), pattern(1, big));

    // 2. Send with Solicited Event, gathered from two SGEs, scattered into two regions.
    src.write_at(0, &pattern(2, 1500));
    src.write_at(big, &pattern(3, 1500));
    cqp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::SendSe,
        sg_list: smallvec![sge(&src, 0, 1500), sge(&src, big, 1500)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&c.cq);
    let wc = wc_ok(&s.cq);
    assert_eq!((wc.wr_id, wc.byte_len, wc.solicited), (11, 3000, true));
    let mut expect = pattern(2, 1500);
    expect.extend(pattern(3, 1500));
    let mut got = r2a.to_vec();
    got.extend_from_slice(&r2b.to_vec()[..2000]);
    assert_eq!(got, expect);

    // 3. RDMA Write from an SGE list.
    src.write_at(0, &pattern(4, big));
    cqp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Write {
            remote_addr: target.addr() + 7,
            rkey: target.stag(),
        },
        sg_list: smallvec![sge(&src, 0, 100), sge(&src, 100, big - 100)],
        signaled: true,
    })
    .unwrap();
    assert_eq!(wc_ok(&c.cq).opcode, WcOpcode::Write);
    // 4. RDMA Read after the Write: completes after the Write is placed (RFC 5040 §5.5 ordering).
    cqp.post_send(SendWr {
        wr_id: 4,
        opcode: Opcode::Read {
            remote_addr: target.addr() + big as u64,
            rkey: target.stag(),
        },
        sg_list: smallvec![sge(&sink, 0, 10), sge(&sink, 10, big - 10)],
        signaled: true,
    })
    .unwrap();
    let wc = wc_ok(&c.cq);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (4, WcOpcode::Read, big as u32)
    );
    // The Write covered target[7..big + 7], so the Read (ordered after it) sees the Write's last
    // 7 bytes at the start of target[big..].
    let mut expect_read = pattern(4, big)[big - 7..].to_vec();
    expect_read.extend_from_slice(&pattern(9, big)[7..]);
    assert_eq!(&sink.to_vec()[..big], &expect_read[..]);
    assert_eq!(&target.to_vec()[7..7 + big], &pattern(4, big)[..]);

    // 5. Send with Invalidate: the server's `inv` region is invalidated on delivery.
    src.write_at(0, b"inv!");
    cqp.post_send(SendWr {
        wr_id: 5,
        opcode: Opcode::SendInv {
            inv_stag: inv.stag(),
        },
        sg_list: smallvec![sge(&src, 0, 4)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&c.cq);
    let wc = wc_ok(&s.cq);
    assert_eq!(wc.invalidated_rkey, Some(inv.stag()));
    assert_eq!(&r1.to_vec()[..4], b"inv!");

    // 6. An RDMA Write to the invalidated STag is refused by the server: TERMINATE, nothing
    // placed. iWARP has no acknowledgements, so the Write may already have completed locally
    // (RFC 5041 §5.4); the refusal reaches the client as the peer's TERMINATE.
    let before = inv.to_vec();
    cqp.post_send(SendWr {
        wr_id: 6,
        opcode: Opcode::Write {
            remote_addr: inv.addr(),
            rkey: inv.stag(),
        },
        sg_list: smallvec![sge(&src, 0, 64)],
        signaled: true,
    })
    .unwrap();
    assert_eq!(wc_any(&c.cq).wr_id, 6);
    assert!(cqp.wait_closed(std::time::Duration::from_secs(5)));
    assert!(sqp.wait_closed(std::time::Duration::from_secs(5)));
    let cause = TermCause::DDP_TAGGED_INVALID_STAG;
    assert_eq!(sqp.terminate_cause(), Some(QpTerminate::Sent(cause)));
    assert_eq!(cqp.terminate_cause(), Some(QpTerminate::Received(cause)));
    assert_eq!(inv.to_vec(), before);
}

#[test]
fn mem_link_all_operations_crc_on() {
    exercise(Link::Mem(LinkFaults::default()), ConnParam::default());
}

#[test]
fn mem_link_all_operations_crc_off() {
    exercise(
        Link::Mem(LinkFaults::default()),
        ConnParam {
            crc: false,
            ..ConnParam::default()
        },
    );
}

#[test]
fn mem_link_resegmented_with_markers() {
    let f = LinkFaults {
        resegment: Some((1, 700)),
        seed: 7,
        ..LinkFaults::default()
    };
    exercise(
        Link::Mem(f),
        ConnParam {
            markers: true,
            ..ConnParam::default()
        },
    );
}

#[test]
fn mem_link_rev1_unenhanced() {
    exercise(
        Link::Mem(LinkFaults::default()),
        ConnParam {
            revision: 1,
            enhanced: false,
            ..ConnParam::default()
        },
    );
}

#[test]
fn kernel_tcp_all_operations_crc_on() {
    exercise(Link::Kernel, ConnParam::default());
}

#[test]
fn kernel_tcp_all_operations_markers_no_crc() {
    exercise(
        Link::Kernel,
        ConnParam {
            crc: false,
            markers: true,
            ..ConnParam::default()
        },
    );
}
