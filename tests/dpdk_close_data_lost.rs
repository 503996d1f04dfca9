//! What was sent before a close still arrives when the link loses it for longer than the
//! FIN's linger: over a net_ring pair every frame the client sends is dropped (fault
//! injection) from just before its last Send until 4 s after its disconnect, then the link
//! heals. The closing socket keeps retransmitting data the peer has not acknowledged
//! (`CLOSE_DATA_LINGER`, 60 s) instead of being aborted after `CLOSE_LINGER` (2 s, which
//! now counts only once all data is acknowledged): the server receives the Send, then the
//! close. Before, the socket was aborted 2 s after the close and the Send was lost (a flaky
//! failure of tests/dpdk_zero_copy.rs under load: the server's final receive flushed).
//! One EAL per process: the only EAL test of this binary.

use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::config::{FaultConfig, FaultDirection};
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
};

mod dp_common;
use dp_common::{pattern, ring_config};

#[test]
fn data_sent_before_a_close_survives_a_long_outage() {
    // Fault injection needs software checksums.
    let cfg = ring_config("dpwcdl", |p| p.checksum = "software".into());
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(4795).unwrap();

    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(16);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let buf = spd.reg_mr(64, Access::LOCAL_WRITE);
        qp.post_recv(RecvWr {
            wr_id: 7,
            sg_list: smallvec![sge(&buf, 0, 64)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&qp, &ConnParam::default()).unwrap();
        let wc = cq.wait(Duration::from_secs(60)).expect("the client's Send");
        assert_eq!(
            (wc.opcode, wc.status, wc.wr_id),
            (WcOpcode::Recv, WcStatus::Success, 7),
            "the Send sent before the close: {wc:?}"
        );
        assert_eq!(buf.to_vec(), pattern(9, 64), "the Send's payload");
        assert!(
            qp.wait_closed(Duration::from_secs(60)),
            "the client's close did not arrive"
        );
    });

    let cq = Cq::new(16);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let out = pd.reg_mr(64, Access::LOCAL_WRITE);
    out.write_at(0, &pattern(9, 64));
    client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), 4795),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    client_ep
        .set_faults(Some(FaultConfig {
            drop: 1.0,
            direction: FaultDirection::Tx,
            ..FaultConfig::default()
        }))
        .unwrap();
    qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&out, 0, 64)],
        signaled: true,
    })
    .unwrap();
    // A Send completes once it is handed to the stream (RFC 5040 §5.3; no acknowledgement).
    let wc = cq.wait(Duration::from_secs(10)).expect("send completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    qp.disconnect();
    assert!(
        qp.wait_closed(Duration::from_secs(10)),
        "the QP did not close"
    );
    // Longer than CLOSE_LINGER: the old rule aborted the socket meanwhile.
    thread::sleep(Duration::from_secs(4));
    let dropped = dp
        .stats()
        .iter()
        .map(|w| w.device.faults.dropped)
        .sum::<u64>();
    assert!(dropped > 0, "nothing was dropped: the test did not test");
    client_ep.set_faults(None).unwrap();
    server.join().unwrap();
}
