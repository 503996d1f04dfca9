//! A close whose FINs are all lost still ends the peer's connection: over a net_ring pair the
//! client's sent frames that carry FIN are dropped (fault injection, `drop_fin`), so its
//! socket lingers unacknowledged; when the worker gives up on it (`CLOSE_LINGER`) it aborts
//! the socket, and the RST smoltcp sends for an aborted socket must go out before the socket
//! is removed. Before, the socket was removed in the same pass, nothing was sent, and the
//! server's connection stayed open for good. One EAL per process: the only EAL test here.

use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::config::{FaultConfig, FaultDirection};
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{Cq, Device, Qp, QpInitAttr};

mod dp_common;
use dp_common::ring_config;

#[test]
fn a_close_whose_fins_are_lost_ends_with_a_rst() {
    let cfg = ring_config("dpwfin", |p| p.checksum = "software".into());
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(4794).unwrap();

    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(16);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&qp, &ConnParam::default()).unwrap();
        // The client's FIN never arrives; its RST (after CLOSE_LINGER, 2 s) must.
        qp.wait_closed(Duration::from_secs(30))
    });

    let cq = Cq::new(16);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), 4794),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    client_ep
        .set_faults(Some(FaultConfig {
            drop_fin: 1.0,
            direction: FaultDirection::Tx,
            ..FaultConfig::default()
        }))
        .unwrap();
    qp.disconnect();
    assert!(
        server.join().unwrap(),
        "the server's connection stayed open after the client's lost FINs"
    );
    let faults = dp
        .stats()
        .iter()
        .map(|w| w.device.faults.dropped)
        .sum::<u64>();
    assert!(faults > 0, "no FIN was dropped: the test did not test");
}
