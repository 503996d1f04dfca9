//! Transmit by reference (`tx_zero_copy`, docs/datapath.md "Copies") over a net_ring pair:
//! the client's port sends each segment as a header mbuf chained to an external mbuf over the
//! socket's transmit ring, the server's port (`tx_zero_copy = "off"`) copies. The client's
//! sent frames go through a fault injector (drops, duplicates, reordering, no corruption), so
//! retransmissions are sent by reference from ring octets that earlier frames still pin.
//! Software IPv4/TCP checksums on both ports (faults need them), so the split transmit and
//! receive paths compute and verify the TCP checksum over the payload where it lies.
//!
//! Asserts: every Write lands with the right data (the target region, read back by an RDMA
//! Read whose response the server sends by copy); the client sent its payload by reference
//! (about 1 copy per payload octet on transmit, the server 2) and the server placed it from
//! the frames' two parts (about 1 on receive, no linearize copy); once the connection is over
//! no frame references a transmit ring (no ring kept) and every mbuf is back in its pool.
//! One EAL per process: the only EAL test of this binary.

use std::net::SocketAddrV4;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::ConnParam;
use dpwarp::config::FaultConfig;
use dpwarp::dataplane::{Dataplane, WorkerStats};
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus,
};

mod dp_common;
use dp_common::{advertise, advertised, pattern, ring_config};

const REGION: usize = 1 << 20;
const SIZES: [usize; 3] = [65536, 10000, 33333];
const WRITES: usize = 120;

fn sum(ws: &[WorkerStats]) -> (u64, u64, f64, f64, usize, usize) {
    let c = dpwarp::dataplane::CopyStats::sum(ws.iter().map(|w| &w.copies));
    (
        ws.iter().map(|w| w.device.tx_zero_copy).sum(),
        ws.iter().map(|w| w.device.rx_linearized).sum(),
        c.tx_per_byte().unwrap_or(0.0),
        c.rx_per_byte().unwrap_or(0.0),
        ws.iter().map(|w| w.tx_refs).sum(),
        ws.iter().map(|w| w.tx_rings_kept).sum(),
    )
}

#[test]
fn payload_sent_by_reference_survives_loss_and_is_released() {
    let mut cfg = ring_config("dpwzc", |p| p.checksum = "software".into());
    cfg.ports[0].tx_zero_copy = "off".into(); // server
    cfg.ports[1].tx_zero_copy = "on".into(); // client
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    client_ep
        .set_faults(Some(FaultConfig {
            seed: 7,
            drop: 0.02,
            duplicate: 0.01,
            reorder: 0.01,
            direction: dpwarp::config::FaultDirection::Tx,
            ..FaultConfig::default()
        }))
        .unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(4793).unwrap();

    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(64);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let recv_mr = spd.reg_mr(64, Access::LOCAL_WRITE);
        let target = spd.reg_mr(
            REGION,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: smallvec![sge(&recv_mr, 0, 64)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        let param = ConnParam {
            private_data: advertise(&target),
            ..ConnParam::default()
        };
        req.accept(&qp, &param).unwrap();
        // The final Send comes after every Write and the Read: 0.5-2 s alone here (2 % of the
        // client's frames dropped, recovered by fast retransmits; 16-24 s while most losses
        // cost a retransmission timeout, third_party/smoltcp/DPWARP.md "Loss recovery"). The
        // test asserts what arrives, not how fast.
        let wc = cq.wait(Duration::from_secs(300)).expect("final send");
        assert_eq!(wc.status, WcStatus::Success);
        // The close goes through the same 2 % loss; after a run of losses smoltcp's
        // retransmission timeout can have grown to seconds (up to 10 s each), and a loaded
        // host inflates the RTT samples it grows from.
        assert!(
            qp.wait_closed(Duration::from_secs(120)),
            "client did not disconnect"
        );
    });

    let cq = Cq::new(256);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr(REGION, Access::LOCAL_WRITE);
    let back = pd.reg_mr(REGION, Access::LOCAL_WRITE);
    let neg = client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), 4793),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    let (raddr, rkey) = advertised(&neg.peer_private_data);

    let mut expect = vec![0u8; REGION];
    let (mut off, mut posted, mut done) = (0, 0, 0);
    let wait = |what: &str| {
        let wc = cq.wait(Duration::from_secs(120)).expect(what);
        assert_eq!(wc.status, WcStatus::Success, "{what}");
    };
    for i in 0..WRITES {
        let n = SIZES[i % SIZES.len()];
        if off + n > REGION {
            off = 0;
        }
        while posted - done >= 8 {
            wait("write completion");
            done += 1;
        }
        let sbase = (i % 8) * (REGION / 8);
        let data = pattern(i as u8, n);
        src.write_at(sbase, &data);
        expect[off..off + n].copy_from_slice(&data);
        qp.post_send(SendWr {
            wr_id: i as u64,
            opcode: Opcode::Write {
                remote_addr: raddr + off as u64,
                rkey,
            },
            sg_list: smallvec![sge(&src, sbase, n)],
            signaled: true,
        })
        .unwrap();
        posted += 1;
        off += n;
    }
    while done < posted {
        wait("write completion");
        done += 1;
    }
    // Read the whole region back: the server's port sends the Read Response by copy.
    qp.post_send(SendWr {
        wr_id: 500,
        opcode: Opcode::Read {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&back, 0, REGION)],
        signaled: true,
    })
    .unwrap();
    wait("read completion");
    let got = back.to_vec();
    if let Some(i) = (0..REGION).find(|&i| got[i] != expect[i]) {
        panic!(
            "the target region differs from the Writes at {i}: got {:?} expected {:?}",
            &got[i..(i + 16).min(REGION)],
            &expect[i..(i + 16).min(REGION)]
        );
    }
    qp.post_send(SendWr {
        wr_id: 999,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 8)],
        signaled: true,
    })
    .unwrap();
    wait("send completion");
    thread::sleep(Duration::from_millis(200));
    qp.disconnect();
    server.join().unwrap();

    let stats = dp.stats();
    let faults: u64 = stats
        .iter()
        .map(|w| w.device.faults.dropped + w.device.faults.duplicated)
        .sum();
    assert!(faults > 0, "no fault was injected: {stats:?}");
    // Worker 0 serves the server's port, worker 1 the client's.
    let (s_zc, s_lin, s_tx, s_rx, _, _) = sum(&stats[..1]);
    let (c_zc, c_lin, c_tx, c_rx, _, _) = sum(&stats[1..]);
    let (fast, timeouts) = (
        stats[1].tcp_fast_retransmits,
        stats[1].tcp_timeout_retransmits,
    );
    eprintln!(
        "server: by reference {s_zc} octets, tx {s_tx:.3} rx {s_rx:.3} copies/octet, linearized \
         {s_lin}; client: by reference {c_zc}, tx {c_tx:.3} rx {c_rx:.3}, linearized {c_lin}; \
         client retransmits: fast {fast} timeout {timeouts}; server retransmits: fast {} \
         timeout {}",
        stats[0].tcp_fast_retransmits, stats[0].tcp_timeout_retransmits
    );
    assert!(
        c_zc as usize >= WRITES * 10000,
        "client sent {c_zc} octets by reference"
    );
    assert!(c_tx < 1.1, "client copies per octet on transmit {c_tx}");
    assert_eq!(s_zc, 0, "server port has tx_zero_copy off");
    assert!(s_tx > 1.9, "server copies per octet on transmit {s_tx}");
    assert_eq!(s_lin, 0, "the server made chained frames one buffer");
    // What arrives behind a hole (a dropped or reordered frame) waits in the receive buffer
    // until the hole is filled: a second copy. Under 2 % loss that is most of it (1.92-1.97
    // here), since the receiver keeps what lies past up to 128 holes (it used to refuse what
    // lay past the fourth, which then came again in order: under 1.6). The bound leaves room
    // for FPDUs reassembled from segments a retransmission cut differently.
    assert!(s_rx < 2.2, "server copies per octet on receive {s_rx}");
    // The losses were repaired by fast retransmits (duplicate ACKs, partial ACKs, SACK
    // blocks), not only by retransmission timeouts.
    assert!(fast > 0, "no fast retransmit under 2 % loss: {stats:?}");

    // Nothing references a transmit ring once the frames are consumed, and every mbuf is
    // back in its pool (net_ring holds none of its own) or in its queue's transmit stash (one
    // queue per port here).
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = dp.stats();
        let (_, _, _, _, refs, kept) = sum(&stats);
        let free: Vec<u32> = stats
            .iter()
            .map(|w| w.device.pool_free + w.device.tx_stashed)
            .collect();
        let sizes: Vec<u32> = cfg.ports.iter().map(|p| p.mbufs).collect();
        if refs == 0 && kept == 0 && free == sizes {
            break;
        }
        assert!(
            Instant::now() < end,
            "{refs} frames still reference transmit rings, {kept} rings kept; pools free \
             {free:?} of {sizes:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}
