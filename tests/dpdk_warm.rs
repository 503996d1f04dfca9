//! `[worker] warm_us`: while the application is quiet, a worker sends TCP keep-alives on the
//! connection that last sent data, and the peer answers them, so both ends run their packet
//! paths again before the next request (docs/workers.md "Keeping the path warm"). Over a
//! net_ring pair in one process (background workers): Send ping-pongs with 3 ms gaps between
//! them and an RDMA Write after a gap, every byte verified (the keep-alives' octet, the last
//! one already acknowledged, must never reach the MPA stream); frames go out during the gaps,
//! the workers count their keep-alives and the Sends through their private QPs
//! (`dataplane::rehearsal`), and a second after the last data both stop. One EAL
//! per process: the only EAL test of this binary.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::dataplane::{Dataplane, WARM_FOR};
use dpwarp::verbs::{
    sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

mod dp_common;
use dp_common::{accept_advertising_then, connect_to_advertiser, pattern, recv_wr, ring_config};

const PINGS: usize = 20;
const GAP: Duration = Duration::from_millis(3);
const N: usize = 256 * 1024;

fn next_wc(cq: &Cq) -> WorkCompletion {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(wc) = cq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            return wc;
        }
        assert!(Instant::now() < end, "no completion within 20 s");
        thread::yield_now();
    }
}

/// (keep-alives sent, frames sent, Sends through the private QPs) by worker `i` (0: the
/// server's port, 1: the client's).
fn counts(dp: &Dataplane, i: usize) -> (u64, u64, u64) {
    let s = &dp.stats()[i];
    (s.warm_frames, s.device.tx_packets, s.warm_rehearsals)
}

#[test]
fn quiet_connections_are_kept_warm_with_keep_alives_and_data_stays_intact() {
    let mut cfg = ring_config("dpwwarm", |_| {});
    cfg.worker.warm_us = 20;
    let dp = Dataplane::start(&cfg).expect("dataplane");
    assert_eq!(dp.stats().len(), 2, "one worker per port");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();

    let spd = pd.clone();
    let server_ip = server_ep.ip();
    // The client connects only once the server listens.
    let (listening_tx, listening_rx) = std::sync::mpsc::channel();
    let server = thread::spawn(move || {
        let cq = Cq::new(256);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let rbuf = spd.reg_mr(64, Access::LOCAL_WRITE);
        let sbuf = spd.reg_mr(64, Access::LOCAL_WRITE);
        let target = spd.reg_mr(N, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
        let _listener = accept_advertising_then(&server_ep, 4797, &qp, &target, || {
            listening_tx.send(()).unwrap();
        });
        // Echo every ping (64 octets of a pattern seeded by its number) after checking it.
        let mut got = 0;
        while got < PINGS {
            if next_wc(&cq).opcode != WcOpcode::Recv {
                continue;
            }
            let mut b = [0u8; 64];
            rbuf.read_at(0, &mut b);
            assert_eq!(b[..], pattern(got as u8, 64)[..], "ping {got}");
            sbuf.write_at(0, &b);
            got += 1;
            qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
            qp.post_send(SendWr {
                wr_id: 1,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&sbuf, 0, 64)],
                signaled: true,
            })
            .unwrap();
        }
        // The Write, then the Send that says it is done.
        while next_wc(&cq).opcode != WcOpcode::Recv {}
        assert!(*target.bytes() == pattern(99, N)[..], "Write placed intact");
        qp
    });

    let cq = Cq::new(256);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let rbuf = pd.reg_mr(64, Access::LOCAL_WRITE);
    let sbuf = pd.reg_mr(N, Access::LOCAL_WRITE);
    qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
    listening_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server listening");
    let (raddr, rkey) = connect_to_advertiser(&client_ep, SocketAddrV4::new(server_ip, 4797), &qp);
    // Frames the client's worker sent while this thread had nothing posted.
    let mut sent_in_gaps = 0;
    for i in 0..PINGS {
        let before = counts(&dp, 1).1;
        thread::sleep(GAP);
        sent_in_gaps += counts(&dp, 1).1 - before;
        sbuf.write_at(0, &pattern(i as u8, 64));
        qp.post_send(SendWr {
            wr_id: 2,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&sbuf, 0, 64)],
            signaled: true,
        })
        .unwrap();
        while next_wc(&cq).opcode != WcOpcode::Recv {}
        let mut b = [0u8; 64];
        rbuf.read_at(0, &mut b);
        assert_eq!(b[..], pattern(i as u8, 64)[..], "pong {i}");
        qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
    }
    let (client_warm, _, client_rehearsed) = counts(&dp, 1);
    assert!(
        client_warm > 0 && sent_in_gaps > 0,
        "the client's worker sent no keep-alive in {PINGS} gaps of {GAP:?} \
         ({client_warm} counted, {sent_in_gaps} frames in the gaps)"
    );
    // The server's replies wait for the client's ACK, which comes with the next ping or a
    // keep-alive: its engines are kept warm whether or not it may send a keep-alive.
    let server_rehearsed = counts(&dp, 0).2;
    assert!(
        client_rehearsed > 0 && server_rehearsed > 0,
        "no Send through the private QPs: client {client_rehearsed}, server \
         {server_rehearsed}"
    );

    thread::sleep(GAP);
    sbuf.write_at(0, &pattern(99, N));
    qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Write {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&sbuf, 0, N)],
        signaled: true,
    })
    .unwrap();
    qp.post_send(SendWr {
        wr_id: 4,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&sbuf, 0, 8)],
        signaled: true,
    })
    .unwrap();
    let mut done = 0;
    while done < 2 {
        if matches!(next_wc(&cq).opcode, WcOpcode::Write | WcOpcode::Send) {
            done += 1;
        }
    }
    let server_qp = server.join().expect("server checks");

    // WARM_FOR after the last data sent, the keep-alives stop.
    thread::sleep(WARM_FOR + Duration::from_millis(300));
    let quiet = |c: (u64, u64, u64)| (c.0, c.2);
    let a = (quiet(counts(&dp, 0)), quiet(counts(&dp, 1)));
    thread::sleep(Duration::from_millis(200));
    let b = (quiet(counts(&dp, 0)), quiet(counts(&dp, 1)));
    assert_eq!(a, b, "kept warm after {WARM_FOR:?} without data");
    eprintln!(
        "warm keep-alives, rehearsals: server {:?} client {:?}; client frames in the gaps \
         {sent_in_gaps}",
        b.0, b.1
    );
    assert!(
        !qp.is_closed() && !server_qp.is_closed(),
        "connection still up"
    );
}
