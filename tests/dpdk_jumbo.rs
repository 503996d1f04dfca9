//! Jumbo frames on the dataplane: a net_ring pair with `mtu = 9000` on both ports. TCP's EMSS
//! and with it MULPDU follow the MTU (RFC 5044 §4.2, App. A), so a 1 MiB RDMA Write and Read
//! (data verified) travel in ~8960-octet segments: far fewer frames than a 1500-octet MTU needs.
//! One EAL per process: the only EAL test of this binary.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

mod dp_common;
use dp_common::{advertise, advertised, pattern, shipped_config, unique};

const N: usize = 1 << 20;

#[test]
fn mtu_9000_jumbo_segments_carry_write_and_read() {
    let cfg = shipped_config(
        "net_ring.toml",
        &[
            ("dpwring", &unique("dpwj")),
            ("mbufs = 16383", "mbufs = 4095\nmtu = 9000"),
        ],
    );
    assert!(cfg.ports.iter().all(|p| p.mtu == 9000));

    let dp = Dataplane::start(&cfg).expect("dataplane with mtu 9000");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    assert_eq!(server_ep.emss(), 9000 - 40);
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(4793).unwrap();

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
            SocketAddrV4::new(server_ep.ip(), 4793),
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

    // 2 MiB of payload moved (Write + Read Response). With a 1500-octet MTU that is >= 1436
    // data frames; at 9000 about 235, plus ACKs.
    let stats = dp.stats();
    let frames: u64 = stats.iter().map(|s| s.device.tx_packets).sum();
    assert!(
        frames < (2 * N as u64) / 1460,
        "{frames} frames: segments were not jumbo"
    );
    let lost: u64 = stats
        .iter()
        .map(|s| s.device.tx_no_mbuf + s.device.rx_dropped)
        .sum();
    assert_eq!(lost, 0, "{stats:?}");
}
