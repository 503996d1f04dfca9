//! DPDK net_ring loopback: EAL, ports, mbufs, then an iWARP client and server in one process
//! connected through a pair of rte_ring ports, with Send, RDMA Write and RDMA Read verified.
//! One EAL per process: this file holds the only EAL test of its binary (cargo test runs the
//! tests of one binary as threads of one process, so everything is in one #[test]).

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::dpdk::{Eal, Port, PortConf};
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

mod dp_common;
use dp_common::{advertise, advertised, pattern, shipped_config};

#[test]
fn ring_loopback_eal_ports_mbufs_and_iwarp() {
    let cfg = shipped_config("net_ring.toml", &[]);
    let eal = Eal::init(&cfg.eal.args).expect("EAL init");
    // A second init with other arguments is refused (one EAL per process).
    assert!(Eal::init(&["-l", "1"]).is_err());

    // --- raw ports and mbufs: a frame sent on one ring port arrives on the other -------------
    let pool = dpwarp::dpdk::Mempool::create(eal, "t_pool", 1023, 0, 2176).unwrap();
    let (a, b) = Port::ring_pair(eal, "traw", 1, 256).unwrap();
    for p in [a, b] {
        p.configure(&PortConf::default(), pool).unwrap();
        p.start().unwrap();
    }
    assert_eq!(a.info().unwrap().driver, "net_ring");
    let before = pool.available();
    let mut tx = Vec::with_capacity(8);
    for i in 0..4u8 {
        let mut m = pool.alloc().unwrap();
        m.append(60).unwrap().fill(i);
        tx.push(m);
    }
    // Bursts go through the queue's one handle (not Copy/Clone/Sync; a second claim fails).
    let (mut qa, mut qb) = (a.claim_queue(0).unwrap(), b.claim_queue(0).unwrap());
    assert!(a.claim_queue(0).is_err());
    assert_eq!(qa.tx_burst(&mut tx), 4);
    assert!(tx.is_empty());
    let mut rx = Vec::with_capacity(8);
    assert_eq!(qb.rx_burst(&mut rx, 8), 4);
    drop((qa, qb));
    for (i, m) in rx.iter().enumerate() {
        assert_eq!(m.data().len(), 60);
        assert!(m.data().iter().all(|&x| x == i as u8));
    }
    drop(rx);
    // Every mbuf went back to the pool (RAII).
    assert_eq!(pool.available(), before);
    assert_eq!(a.stats().unwrap().opackets, 4);
    assert_eq!(b.stats().unwrap().ipackets, 4);

    // --- iWARP over smoltcp over the ring pair -------------------------------------------------
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    const N: usize = 256 * 1024;
    let listener = server_ep.listen(4791).unwrap();

    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(64);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let recv_mr = spd.reg_mr(N, Access::LOCAL_WRITE);
        let target = spd.reg_mr(
            N,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        target.write_at(0, &pattern(3, N));
        qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&recv_mr, 0, N)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        let adv = advertise(&target);
        let param = ConnParam {
            private_data: adv,
            ..ConnParam::default()
        };
        req.accept(&qp, &param).unwrap();
        let wc = cq.wait(Duration::from_secs(10)).expect("recv completion");
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.byte_len as usize, N);
        assert_eq!(recv_mr.to_vec(), pattern(1, N));
        // Wait for the client's Write and Read to finish, then check the Write landed.
        assert!(
            qp.wait_closed(Duration::from_secs(20)),
            "client did not disconnect"
        );
        assert_eq!(target.to_vec()[..N / 2], pattern(2, N / 2)[..]);
    });

    let cq = Cq::new(64);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr(N, Access::LOCAL_WRITE);
    let dst = pd.reg_mr(N, Access::LOCAL_WRITE);
    let remote = SocketAddrV4::new(server_ep.ip(), 4791);
    let neg = client_ep
        .connect(remote, &qp, &ConnParam::default())
        .unwrap();
    assert!(neg.crc_tx && neg.crc_rx);
    let pdata = neg.peer_private_data.clone();
    let (raddr, rkey) = advertised(&pdata);

    src.write_at(0, &pattern(1, N));
    qp.post_send(SendWr {
        wr_id: 10,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, N)],
        signaled: true,
    })
    .unwrap();
    let wc = cq.wait(Duration::from_secs(10)).expect("send completion");
    assert_eq!(wc.status, WcStatus::Success);

    src.write_at(0, &pattern(2, N / 2));
    qp.post_send(SendWr {
        wr_id: 11,
        opcode: Opcode::Write {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&src, 0, N / 2)],
        signaled: true,
    })
    .unwrap();
    let wc = cq.wait(Duration::from_secs(10)).expect("write completion");
    assert_eq!(wc.status, WcStatus::Success);

    qp.post_send(SendWr {
        wr_id: 12,
        opcode: Opcode::Read {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&dst, 0, N)],
        signaled: true,
    })
    .unwrap();
    let wc = cq.wait(Duration::from_secs(10)).expect("read completion");
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.opcode, dpwarp::verbs::WcOpcode::Read);
    let got = dst.to_vec();
    // The Read returns the target: first half is our Write, second half the server's pattern.
    assert_eq!(got[..N / 2], pattern(2, N / 2)[..]);
    assert_eq!(got[N / 2..], pattern(3, N)[N / 2..]);
    qp.disconnect();
    server.join().unwrap();

    let stats = dp.stats();
    let pkts: u64 = stats.iter().map(|s| s.device.tx_packets).sum();
    assert!(
        pkts > 2 * (N as u64) / 1460,
        "only {pkts} packets went over the rings"
    );
    let lost: u64 = stats
        .iter()
        .map(|s| s.device.tx_no_mbuf + s.device.rx_dropped)
        .sum();
    assert_eq!(lost, 0, "frames lost: {stats:?}");
}
