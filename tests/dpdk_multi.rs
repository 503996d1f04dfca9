//! Many connections per worker and one queue per worker: a net_ring pair whose ports have two
//! queues each (`cores = [0, 1]`, so two workers per port). Eight clients connect at once, each
//! on its own QP; every connection carries a Send, an RDMA Write and an RDMA Read with its own
//! data pattern, verified on both sides, while the others run. Then every worker of both ports
//! must have carried frames and held connections. One EAL per process: the only EAL test here.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus};

mod dp_common;
use dp_common::{advertise, advertised, pattern, shipped_config, unique};

const CONNS: usize = 8;
const N: usize = 128 * 1024;

#[test]
fn eight_connections_over_two_queues_per_port() {
    let cfg = shipped_config(
        "net_ring.toml",
        &[
            ("dpwring", &unique("dpwm")),
            ("mbufs = 16383", "mbufs = 16383\ncores = [0, 1]"),
        ],
    );
    assert!(cfg.ports.iter().all(|p| p.cores.len() == 2));

    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(4794).unwrap();

    // Server: accept every connection, then serve each on its own thread.
    let spd = pd.clone();
    let server = thread::spawn(move || {
        let mut served = Vec::new();
        for _ in 0..CONNS {
            let cq = Cq::new(16);
            let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
            let recv_mr = spd.reg_mr(N, Access::LOCAL_WRITE);
            let target = spd.reg_mr(
                N,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            );
            qp.post_recv(RecvWr {
                wr_id: 1,
                sg_list: smallvec![sge(&recv_mr, 0, N)],
            })
            .unwrap();
            let req = listener.get_request(Duration::from_secs(20)).unwrap();
            let adv = advertise(&target);
            req.accept(
                &qp,
                &ConnParam {
                    private_data: adv,
                    ..ConnParam::default()
                },
            )
            .unwrap();
            served.push(thread::spawn(move || {
                let wc = cq.wait(Duration::from_secs(30)).expect("the client's Send");
                assert_eq!(wc.status, WcStatus::Success);
                let data = recv_mr.to_vec();
                // The first byte names the client; the whole buffer must be its pattern.
                let seed = data[0];
                assert_eq!(data, pattern(seed, N), "Send payload of client {seed}");
                assert!(qp.wait_closed(Duration::from_secs(30)));
                // The client wrote pattern(seed + 100) and read it back before closing.
                assert_eq!(target.to_vec(), pattern(seed.wrapping_add(100), N));
                seed
            }));
        }
        let mut seeds: Vec<u8> = served.into_iter().map(|h| h.join().unwrap()).collect();
        seeds.sort_unstable();
        seeds
    });

    let start = Arc::new(Barrier::new(CONNS));
    let clients: Vec<_> = (0..CONNS)
        .map(|k| {
            let pd = pd.clone();
            let ep = client_ep.clone();
            let start = start.clone();
            let server_ip = server_ep.ip();
            thread::spawn(move || {
                let seed = k as u8;
                let cq = Cq::new(16);
                let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
                let src = pd.reg_mr(N, Access::LOCAL_WRITE);
                let dst = pd.reg_mr(N, Access::LOCAL_WRITE);
                start.wait();
                let neg = ep
                    .connect(
                        SocketAddrV4::new(server_ip, 4794),
                        &qp,
                        &ConnParam::default(),
                    )
                    .unwrap();
                let (raddr, rkey) = advertised(&neg.peer_private_data);
                let post = |wr_id, opcode, mr: &dpwarp::verbs::Mr| {
                    qp.post_send(SendWr {
                        wr_id,
                        opcode,
                        sg_list: smallvec![sge(mr, 0, N)],
                        signaled: true,
                    })
                    .unwrap();
                    let wc = cq.wait(Duration::from_secs(30)).expect("completion");
                    assert_eq!(wc.status, WcStatus::Success, "client {k} wr {wr_id}");
                };
                src.write_at(0, &pattern(seed, N));
                post(1, Opcode::Send, &src);
                src.write_at(0, &pattern(seed.wrapping_add(100), N));
                post(
                    2,
                    Opcode::Write {
                        remote_addr: raddr,
                        rkey,
                    },
                    &src,
                );
                post(
                    3,
                    Opcode::Read {
                        remote_addr: raddr,
                        rkey,
                    },
                    &dst,
                );
                assert_eq!(dst.to_vec(), pattern(seed.wrapping_add(100), N));
                qp.disconnect();
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(server.join().unwrap(), (0..CONNS as u8).collect::<Vec<_>>());

    // Four workers (two per port), each with its own queue: all carried traffic.
    let stats = dp.stats();
    assert_eq!(stats.len(), 4, "{stats:?}");
    for (i, s) in stats.iter().enumerate() {
        assert!(
            s.device.tx_packets > 0 && s.device.rx_packets > 0,
            "worker {i} moved nothing: {stats:?}"
        );
    }
    let lost: u64 = stats
        .iter()
        .map(|s| s.device.tx_no_mbuf + s.device.rx_dropped)
        .sum();
    assert_eq!(lost, 0, "{stats:?}");
    // Flow steering (src/dataplane/steer.rs): each worker opened its connections from local
    // ports its queue owns, and the owner of a 4-tuple is the same seen from either end, so
    // over paired queues every frame arrived at its owner and none was handed over. Only
    // ARP frames were copied to the port's other worker.
    for (i, s) in stats.iter().enumerate() {
        assert_eq!(
            (s.device.rx_steered_out, s.device.rx_steer_dropped),
            (0, 0),
            "worker {i} handed TCP frames over: {:?}",
            s.device
        );
    }
}
