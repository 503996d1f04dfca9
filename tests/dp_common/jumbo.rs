//! The jumbo-frame scenario of tests/dpdk_jumbo.rs (MTU 9000) and tests/dpdk_jumbo_max.rs
//! (the largest MTU a port takes).

use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::smallvec;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

use super::{advertise, advertised, pattern, ring_config};

const N: usize = 1 << 20;

/// A net_ring pair with `mtu` on both ports (`mbufs` each, unique rings from `tag`): a 1 MiB
/// RDMA Write and a Read of it back, data verified, travel in segments of the EMSS (MTU - 40,
/// and MULPDU with it: RFC 5044 §4.2, App. A). Asserts the EMSS, that the 2 MiB of payload
/// took at most one data segment per half MTU (a segment carries more than half an MTU on
/// average), and that no frame was lost for want of an mbuf.
pub fn jumbo_write_read(tag: &str, mtu: u16, mbufs: u32, port: u16) {
    let cfg = ring_config(tag, |p| {
        p.mtu = mtu;
        p.mbufs = mbufs;
    });
    let dp = Dataplane::start(&cfg).expect("dataplane with a jumbo mtu");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    assert_eq!(server_ep.emss(), usize::from(mtu) - 40);
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(port).unwrap();

    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(16);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let recv_mr = spd.reg_mr(64, Access::LOCAL_WRITE);
        let target = spd.reg_mr(
            N,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&recv_mr, 0, 64)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        let adv = advertise(&target);
        req.accept(
            &qp,
            &ConnParam {
                private_data: adv,
                ..ConnParam::default()
            },
        )
        .unwrap();
        let wc = cq.wait(Duration::from_secs(20)).expect("the client's Send");
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(target.to_vec(), pattern(5, N));
        assert!(qp.wait_closed(Duration::from_secs(20)));
    });

    let cq = Cq::new(16);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr(N, Access::LOCAL_WRITE);
    let dst = pd.reg_mr(N, Access::LOCAL_WRITE);
    let neg = client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), port),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    let (raddr, rkey) = advertised(&neg.peer_private_data);
    src.write_at(0, &pattern(5, N));
    for (wr_id, opcode, mr) in [
        (
            1,
            Opcode::Write {
                remote_addr: raddr,
                rkey,
            },
            &src,
        ),
        (
            2,
            Opcode::Read {
                remote_addr: raddr,
                rkey,
            },
            &dst,
        ),
    ] {
        qp.post_send(SendWr {
            wr_id,
            opcode,
            sg_list: smallvec![sge(mr, 0, N)],
            signaled: true,
        })
        .unwrap();
        let wc = cq.wait(Duration::from_secs(20)).expect("completion");
        assert_eq!(wc.status, WcStatus::Success, "wr {wr_id}");
    }
    assert_eq!(dst.to_vec(), pattern(5, N), "the Read returned other data");
    qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 8)],
        signaled: true,
    })
    .unwrap();
    assert_eq!(
        cq.wait(Duration::from_secs(20)).expect("send").status,
        WcStatus::Success
    );
    thread::sleep(Duration::from_millis(100));
    qp.disconnect();
    server.join().unwrap();

    // 2 MiB of payload moved (Write + Read Response): at 9000 about 235 data segments, at
    // 65389 about 33; a 1500-octet MTU would need over 1436.
    let stats = dp.stats();
    let segments: u64 = stats.iter().map(|s| s.device.tx_tcp_segments).sum();
    assert!(
        segments <= (2 * N as u64) / (u64::from(mtu) / 2),
        "{segments} data segments for 2 MiB at mtu {mtu}: segments were not jumbo"
    );
    let lost: u64 = stats
        .iter()
        .map(|s| s.device.tx_no_mbuf + s.device.rx_dropped)
        .sum();
    assert_eq!(lost, 0, "{stats:?}");
}
