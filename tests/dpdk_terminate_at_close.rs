//! A TERMINATE is never lost at close over the DPDK dataplane (RFC 5040 §7.1): the server's
//! TERMINATE is provoked while its RDMA Writes fill a smoltcp socket whose peer has stopped
//! reading, and the server application closes at once; the worker must send the TERMINATE
//! before its FIN (it used to close as soon as the bytes it had staged were in the socket).
//! DPDK net_tap inside a network namespace this test makes (and deletes); the peer is a raw
//! initiator on a kernel socket in it. Needs root. One EAL per process, so one test.

mod common;
mod terminate_common;

use dpwarp::verbs::smallvec;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::Side;
use dpwarp::cm::ConnParam;
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{sge, Access, Opcode, SendWr};
use terminate_common::{assert_terminated, peer, LEN};

mod netns_common;
use netns_common::{ip, Netns};

#[test]
fn rfc5040_s7_1_dpdk_terminate_queued_behind_a_full_socket_still_goes_out() {
    let pid = std::process::id();
    let ns = Netns::new("dpwtc");
    ns.enter();
    let tap = format!("dpwt{pid}");
    let cfg = DataplaneConfig::parse(&format!(
        r#"
[eal]
args = ["-l", "0", "--no-huge", "-m", "256", "--no-shconf", "--no-pci", "--log-level=*:warning",
        "--vdev=net_tap0,iface={tap}"]
[[port]]
device = "net_tap0"
ip = "10.99.0.2/24"
mac = "02:00:00:99:00:02"
mbufs = 8191
[worker]
spin_us = 5
[tcp]
rx_buffer = 65536
tx_buffer = 65536
"#
    ))
    .unwrap();
    let dp = Dataplane::start(&cfg).expect("dataplane on net_tap");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    ip(&["-n", &ns.0, "addr", "add", "10.99.0.1/24", "dev", &tap]);
    ip(&["-n", &ns.0, "link", "set", &tap, "up"]);
    let ep = dp.endpoint(0).unwrap();
    for round in 0..3 {
        let l = ep.listen(7300 + round).unwrap();
        let server = std::thread::spawn(move || {
            let req = l.get_request(Duration::from_secs(20)).expect("request");
            let pd = &req.peer.private_data;
            let sink_addr = u64::from_be_bytes(pd[..8].try_into().unwrap());
            let sink_stag = u32::from_be_bytes(pd[8..12].try_into().unwrap());
            let s = Side::new();
            let src = s.pd.reg_mr(LEN, Access::LOCAL_WRITE);
            req.accept(&s.qp, &ConnParam::default()).expect("accept");
            let chunk = LEN / 8;
            for i in 0..8u64 {
                s.qp.post_send(SendWr {
                    wr_id: i,
                    opcode: Opcode::Write {
                        remote_addr: sink_addr + i * chunk as u64,
                        rkey: sink_stag,
                    },
                    sg_list: smallvec![sge(&src, i as usize * chunk, chunk)],
                    signaled: true,
                })
                .unwrap();
            }
            let end = Instant::now() + Duration::from_secs(20);
            while s.qp.terminate_cause().is_none() && !s.qp.is_closed() && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(100));
            }
            // The application closes at once.
            drop(s);
            drop(l);
        });
        let addr = SocketAddr::from(([10, 99, 0, 2], 7300 + round));
        let events = peer(addr);
        assert_terminated(&events, &format!("round {round}"));
        server.join().unwrap();
    }
    drop(dp);
}
