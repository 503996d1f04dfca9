//! Posting through the QP's post rings (src/verbs): work posted before the connection exists
//! is checked at once, bounded by the QP's capacities, and delivered once connected; posting
//! after the connection ended fails at once.

mod common;

use dpwarp::verbs::smallvec;
use std::time::Duration;

use common::*;
use dpwarp::cm::ConnParam;
use dpwarp::transport::memlink::LinkFaults;
use dpwarp::verbs::{
    sge, Access, Cq, Opcode, PostError, Qp, QpCap, QpInitAttr, RecvWr, SendWr, Sge, WcOpcode,
};

fn small_qp(side: &mut Side, send: usize, recv: usize) {
    side.cq = Cq::new(64);
    let mut attr = QpInitAttr::new(&side.cq);
    attr.cap = QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
    };
    side.qp = Qp::new(&side.pd, &attr);
}

/// Connect `c` to `s` over the in-memory link, default parameters.
fn connect_mem(c: &mut Side, s: &mut Side) {
    connect_sides(
        Link::Mem(LinkFaults::default()),
        c,
        s,
        ConnParam::default(),
        ConnParam::default(),
    )
    .expect("connect");
}

#[test]
fn posts_before_connect_are_checked_bounded_and_delivered() {
    let mut c = Side::new();
    let mut s = Side::new();
    small_qp(&mut c, 2, 2);
    small_qp(&mut s, 2, 2);
    let src = c.pd.reg_mr(4096, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(4, 4096));
    let dst = s.pd.reg_mr(8192, Access::LOCAL_WRITE);

    // A bad local SGE is refused at post time: nothing is queued.
    let bad = SendWr {
        wr_id: 99,
        opcode: Opcode::Send,
        sg_list: smallvec![Sge {
            addr: src.addr(),
            length: 16,
            lkey: src.stag() ^ 0x100,
        }],
        signaled: true,
    };
    assert!(matches!(c.qp.post_send(bad), Err(PostError::Invalid(_))));
    // Receive buffers must be writable locally.
    let ro = s.pd.reg_mr(64, Access::REMOTE_READ);
    assert!(matches!(
        s.qp.post_recv(RecvWr {
            wr_id: 98,
            sg_list: smallvec![sge(&ro, 0, 64)],
        }),
        Err(PostError::Invalid(_))
    ));

    for i in 0..2u64 {
        s.qp.post_recv(RecvWr {
            wr_id: 10 + i,
            sg_list: smallvec![sge(&dst, 4096 * i as usize, 4096)],
        })
        .unwrap();
        c.qp.post_send(SendWr {
            wr_id: i,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&src, 0, 4096)],
            signaled: true,
        })
        .unwrap();
    }
    // max_send_wr / max_recv_wr are waiting already.
    let third = SendWr {
        wr_id: 2,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 64)],
        signaled: true,
    };
    assert_eq!(c.qp.post_send(third), Err(PostError::QueueFull));
    assert_eq!(
        s.qp.post_recv(RecvWr {
            wr_id: 12,
            sg_list: smallvec![sge(&dst, 0, 64)],
        }),
        Err(PostError::QueueFull)
    );

    connect_mem(&mut c, &mut s);
    for i in 0..2u64 {
        let wc = wc_ok(&c.cq);
        assert_eq!((wc.wr_id, wc.opcode), (i, WcOpcode::Send));
        let wc = wc_ok(&s.cq);
        assert_eq!((wc.wr_id, wc.byte_len), (10 + i, 4096));
    }
    assert_eq!(dst.to_vec(), [pattern(4, 4096), pattern(4, 4096)].concat());

    // After the connection ends, posting fails at once.
    c.qp.disconnect();
    assert!(c.qp.wait_closed(Duration::from_secs(10)));
    let late = SendWr {
        wr_id: 3,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 64)],
        signaled: true,
    };
    assert_eq!(c.qp.post_send(late), Err(PostError::BadState));
}

/// A WR is checked against the memory table when it is posted, not again when the driver
/// hands it to the connection: a region deregistered in between is caught where its bytes
/// would be gathered, and the WR completes in error (nothing of it reaches the peer).
#[test]
fn a_region_deregistered_after_the_post_fails_the_wr() {
    let mut c = Side::new();
    let mut s = Side::new();
    let src = c.pd.reg_mr(4096, Access::LOCAL_WRITE);
    src.write_at(0, &pattern(7, 4096));
    let dst = s.pd.reg_mr(4096, Access::LOCAL_WRITE);
    s.qp.post_recv(RecvWr {
        wr_id: 10,
        sg_list: smallvec![sge(&dst, 0, 4096)],
    })
    .unwrap();
    c.qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 4096)],
        signaled: true,
    })
    .unwrap();
    assert!(c.pd.dereg_mr(&src));
    connect_mem(&mut c, &mut s);
    let wc = c.cq.wait(Duration::from_secs(10)).expect("a completion");
    assert_eq!(wc.wr_id, 1);
    assert_ne!(wc.status, dpwarp::verbs::WcStatus::Success, "{wc:?}");
    if let Some(wc) = s.cq.wait(Duration::from_millis(200)) {
        assert_ne!(wc.status, dpwarp::verbs::WcStatus::Success, "{wc:?}");
    }
    assert!(dst.to_vec().iter().all(|&b| b == 0));
}

/// `post_send_inline` (IBV_SEND_INLINE): the payload is copied into the work request when
/// posted, so the caller's buffer is free at once and no local region is involved; Sends and
/// RDMA Writes arrive as posted, before and after the connection is established; an RDMA Read
/// or more than MAX_INLINE_DATA octets is refused at once.
#[test]
fn inline_sends_and_writes_carry_their_payload() {
    use dpwarp::verbs::MAX_INLINE_DATA;
    let mut c = Side::new();
    let mut s = Side::new();
    let dst = s.pd.reg_mr(8192, Access::LOCAL_WRITE);
    let sink =
        s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    for i in 0..3u64 {
        s.qp.post_recv(RecvWr {
            wr_id: 10 + i,
            sg_list: smallvec![sge(&dst, 1024 * i as usize, 1024)],
        })
        .unwrap();
    }
    // Before the connection exists: held with the WR, sent once established.
    let mut buf = pattern(1, 100);
    c.qp.post_send_inline(1, Opcode::Send, &buf, true).unwrap();
    buf.fill(0); // the payload was copied when posted
    assert!(matches!(
        c.qp.post_send_inline(
            9,
            Opcode::Read {
                remote_addr: sink.addr(),
                rkey: sink.stag()
            },
            &[],
            true
        ),
        Err(PostError::Invalid(_))
    ));
    assert!(matches!(
        c.qp.post_send_inline(9, Opcode::Send, &vec![0u8; MAX_INLINE_DATA + 1], true),
        Err(PostError::Invalid(_))
    ));
    connect_mem(&mut c, &mut s);
    let wc = wc_ok(&c.cq);
    assert_eq!((wc.wr_id, wc.opcode), (1, WcOpcode::Send));
    let wc = wc_ok(&s.cq);
    assert_eq!((wc.wr_id, wc.byte_len), (10, 100));

    // After: the largest inline Send, an unsignaled one, and an RDMA Write.
    let big = pattern(2, MAX_INLINE_DATA);
    c.qp.post_send_inline(2, Opcode::Send, &big, true).unwrap();
    c.qp.post_send_inline(3, Opcode::Send, &pattern(3, 7), false)
        .unwrap();
    c.qp.post_send_inline(
        4,
        Opcode::Write {
            remote_addr: sink.addr() + 100,
            rkey: sink.stag(),
        },
        &pattern(4, 300),
        true,
    )
    .unwrap();
    let wc = wc_ok(&c.cq);
    assert_eq!((wc.wr_id, wc.opcode), (2, WcOpcode::Send));
    // The unsignaled Send makes no completion: the Write's is next.
    let wc = wc_ok(&c.cq);
    assert_eq!((wc.wr_id, wc.opcode), (4, WcOpcode::Write));
    let wc = wc_ok(&s.cq);
    assert_eq!((wc.wr_id, wc.byte_len), (11, MAX_INLINE_DATA as u32));
    let wc = wc_ok(&s.cq);
    assert_eq!((wc.wr_id, wc.byte_len), (12, 7));
    let got = dst.to_vec();
    assert_eq!(&got[..100], &pattern(1, 100)[..]);
    assert_eq!(&got[1024..1024 + MAX_INLINE_DATA], &big[..]);
    assert_eq!(&got[2048..2055], &pattern(3, 7)[..]);
    // Placed in order before the Send that follows it (RFC 5040 §5.5), so it is there now.
    s.qp.post_recv(RecvWr {
        wr_id: 13,
        sg_list: smallvec![sge(&dst, 4096, 64)],
    })
    .unwrap();
    c.qp.post_send_inline(5, Opcode::Send, b"after", true)
        .unwrap();
    wc_ok(&c.cq);
    wc_ok(&s.cq);
    assert_eq!(&sink.to_vec()[100..400], &pattern(4, 300)[..]);
}

/// A QP takes no file descriptor until a driver that sleeps on one (the kernel-TCP thread)
/// starts: a DPDK worker holding tens of thousands of connections must not need a
/// descriptor for each (their QPs' eventfds once exhausted a 20,000-descriptor limit).
#[test]
fn a_qp_takes_no_descriptor_before_a_sleeping_driver_starts() {
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let dev = dpwarp::verbs::Device::open();
    let pd = dev.alloc_pd();
    let cq = dpwarp::verbs::Cq::new(4);
    let before = fds();
    let qps: Vec<_> = (0..1000)
        .map(|_| dpwarp::verbs::Qp::new(&pd, &dpwarp::verbs::QpInitAttr::new(&cq)))
        .collect();
    let after = fds();
    // Other tests of this binary may open a few meanwhile; 1000 QPs with a descriptor each
    // would add 1000.
    assert!(
        after < before + 100,
        "{} descriptors for 1000 QPs",
        after.saturating_sub(before)
    );
    drop(qps);
}
