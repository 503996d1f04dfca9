//! Transmit by reference is for long payloads only (`DpdkTxToken::consume_split`,
//! `TX_BY_REFERENCE_MIN`, docs/datapath.md "Copies"): over a net_ring pair with
//! `tx_zero_copy = "on"` on both ports, a ping-pong of 64-octet Sends (and the MPA startup
//! before it) goes out as one-segment frames, copied behind the headers, while a 64 KiB RDMA
//! Write that follows still goes by reference. Every message arrives intact.
//! One EAL per process: the only EAL test of this binary.

use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::cm::ConnParam;
use dpwarp::dataplane::device::TX_BY_REFERENCE_MIN;
use dpwarp::dataplane::{Dataplane, WorkerStats};
use dpwarp::verbs::{
    sge, smallvec, Access, Cq, Device, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcStatus,
};

mod dp_common;
use dp_common::{advertise, advertised, pattern, ring_config};

const SHORT: usize = 64;
const TURNS: u64 = 200;
const WRITE: usize = 65536;
// A 64-octet Send's FPDU (2 + 18 + 64 + 4 octets, RFC 5044 §4) counts as short.
const _: () = assert!(SHORT + 24 < TX_BY_REFERENCE_MIN);

/// (segments sent by reference, octets sent by reference, TCP segments sent) of one side.
fn by_reference(ws: &[WorkerStats]) -> (u64, u64, u64) {
    (
        ws.iter().map(|w| w.device.tx_zero_copy_segments).sum(),
        ws.iter().map(|w| w.device.tx_zero_copy).sum(),
        ws.iter().map(|w| w.device.tx_tcp_segments).sum(),
    )
}

#[test]
fn short_payloads_are_copied_long_ones_go_by_reference() {
    let cfg = ring_config("dpwsc", |p| p.tx_zero_copy = "on".into());
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let listener = server_ep.listen(4794).unwrap();

    // The server answers every Send with a Send of the same octets, then takes a Write.
    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(64);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let buf = spd.reg_mr(SHORT, Access::LOCAL_WRITE);
        let target = spd.reg_mr(WRITE, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        qp.post_recv(RecvWr {
            wr_id: 0,
            sg_list: smallvec![sge(&buf, 0, SHORT)],
        })
        .unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        let param = ConnParam {
            private_data: advertise(&target),
            ..ConnParam::default()
        };
        req.accept(&qp, &param).unwrap();
        let mut turns = 0;
        // One more Send than the ping-pong: the client's "Write done".
        while turns <= TURNS {
            let wc = cq.wait(Duration::from_secs(30)).expect("server completion");
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode != dpwarp::verbs::WcOpcode::Recv {
                continue;
            }
            turns += 1;
            if turns > TURNS {
                break;
            }
            let echo = buf.to_vec();
            qp.post_recv(RecvWr {
                wr_id: turns,
                sg_list: smallvec![sge(&buf, 0, SHORT)],
            })
            .unwrap();
            qp.post_send_inline(turns, Opcode::Send, &echo, true)
                .unwrap();
        }
        assert_eq!(target.to_vec(), pattern(0x5a, WRITE), "the Write's octets");
        assert!(
            qp.wait_closed(Duration::from_secs(30)),
            "client did not close"
        );
    });

    let cq = Cq::new(64);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let out = pd.reg_mr(WRITE, Access::LOCAL_WRITE);
    let back = pd.reg_mr(SHORT, Access::LOCAL_WRITE);
    let neg = client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), 4794),
            &qp,
            &ConnParam::default(),
        )
        .unwrap();
    let (raddr, rkey) = advertised(&neg.peer_private_data);
    let next = |what: &str| {
        let wc = cq.wait(Duration::from_secs(30)).expect(what);
        assert_eq!(wc.status, WcStatus::Success, "{what}: {wc:?}");
        wc
    };
    for turn in 1..=TURNS {
        let msg = pattern(turn as u8, SHORT);
        out.write_at(0, &msg);
        qp.post_recv(RecvWr {
            wr_id: turn,
            sg_list: smallvec![sge(&back, 0, SHORT)],
        })
        .unwrap();
        qp.post_send(SendWr {
            wr_id: turn,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&out, 0, SHORT)],
            signaled: true,
        })
        .unwrap();
        // The Send's completion and the echo, in either order.
        let mut echoed = false;
        let mut sent = false;
        while !(echoed && sent) {
            let wc = next("ping-pong");
            if wc.opcode == dpwarp::verbs::WcOpcode::Recv {
                echoed = true;
            } else {
                sent = true;
            }
        }
        assert_eq!(back.to_vec(), msg, "turn {turn}: the echo");
    }
    let (segs, octets, tcp_segs) = by_reference(&dp.stats()[1..]);
    eprintln!("client after {TURNS} short Sends: {segs} segments ({octets} octets) by reference of {tcp_segs}");
    assert!(tcp_segs >= TURNS, "the client sent {tcp_segs} TCP segments");
    assert_eq!(
        (segs, octets),
        (0, 0),
        "payloads shorter than {TX_BY_REFERENCE_MIN} octets went by reference"
    );

    out.write_at(0, &pattern(0x5a, WRITE));
    qp.post_send(SendWr {
        wr_id: 1000,
        opcode: Opcode::Write {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&out, 0, WRITE)],
        signaled: true,
    })
    .unwrap();
    next("write");
    qp.post_send(SendWr {
        wr_id: 1001,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&out, 0, 8)],
        signaled: true,
    })
    .unwrap();
    next("final send");
    let (segs, octets, _) = by_reference(&dp.stats()[1..]);
    eprintln!("client after the Write: {segs} segments ({octets} octets) by reference");
    // The Write's segments are full (MTU 1500): all but the last fragments go by reference.
    assert!(
        octets as usize >= WRITE * 9 / 10,
        "the 64 KiB Write sent only {octets} octets by reference"
    );
    qp.disconnect();
    server.join().unwrap();
}
