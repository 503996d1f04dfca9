//! Out-of-order placement on the DPDK dataplane (RFC 5044 App. A.3, `[tcp] ooo_placement`,
//! on by default): a net_ring pair whose server port drops and reorders received frames
//! (seeded), 64 KiB RDMA Writes each followed by a Send that names it. Segments that arrive
//! behind a lost one carry tagged FPDUs the worker places at once (`WorkerStats::
//! ooo_placed_fpdus` > 0), and every Write is exact when its Send arrives in order. Then both
//! ports' faults are turned on and off again, each time after a different number of the
//! workers' passes, and a Send (to the server) and an RDMA Read's response (to the client)
//! must arrive after each: a port whose faults were turned off must go on receiving.
//! One EAL per process: the only EAL test of this binary.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::thread;
use std::time::Duration;

use dpwarp::config::{FaultConfig, FaultDirection};
use dpwarp::dataplane::Dataplane;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Qp, QpCap, QpInitAttr, RecvWr, SendWr};
use dpwarp::verbs::{WcOpcode, WcStatus};

mod dp_common;
use dp_common::{accept_advertising_then, connect_to_advertiser, pattern, ring_config};

const WRITE: usize = 64 * 1024;
const SLOTS: usize = 16;
const ROUNDS: usize = 160;
/// Send and RDMA Read pairs after the Writes, each behind faults turned on and off again on
/// both ports.
const TOGGLES: usize = 32;

#[test]
fn writes_behind_lost_segments_are_placed_ahead_and_stay_exact() {
    let cfg = ring_config("dpwooo", |p| {
        p.checksum = "software".into();
        p.faults = Some(FaultConfig {
            seed: 0x00c0_ffee,
            drop: 0.01,
            reorder: 0.01,
            direction: FaultDirection::Rx,
            ..FaultConfig::default()
        });
    });
    assert!(cfg.tcp.ooo_placement, "on by default");
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    // Faults on the server's received frames only: the Writes meet them.
    client_ep.set_faults(None).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: ROUNDS + TOGGLES,
    };

    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let spd = pd.clone();
    let server = thread::spawn(move || {
        let cq = Cq::new(2 * (ROUNDS + TOGGLES));
        let qp = Qp::new(
            &spd,
            &QpInitAttr {
                cap,
                ..QpInitAttr::new(&cq)
            },
        );
        let target = spd.reg_mr(
            SLOTS * WRITE,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        let names = spd.reg_mr(8 * (ROUNDS + TOGGLES), Access::LOCAL_WRITE);
        for r in 0..ROUNDS + TOGGLES {
            qp.post_recv(RecvWr {
                wr_id: r as u64,
                sg_list: smallvec![sge(&names, 8 * r, 8)],
            })
            .unwrap();
        }
        let _l = accept_advertising_then(&server_ep, 4797, &qp, &target, || {
            ready_tx.send(()).unwrap()
        });
        for r in 0..ROUNDS + TOGGLES {
            let wc = cq.wait(Duration::from_secs(30)).expect("a Send per Write");
            assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
            let mut name = [0u8; 8];
            names.read_at(8 * wc.wr_id as usize, &mut name);
            let round = u64::from_be_bytes(name) as usize;
            assert_eq!(round, r, "Sends complete in order");
            if r < ROUNDS {
                let slot = round % SLOTS;
                let mut got = vec![0u8; WRITE];
                target.read_at(slot * WRITE, &mut got);
                assert!(
                    got == pattern(round as u8, WRITE),
                    "round {round}: the Write before its Send is exact"
                );
            }
            done_tx.send(r).unwrap();
        }
        qp.wait_closed(Duration::from_secs(10));
    });

    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let cq = Cq::new(4 * (ROUNDS + TOGGLES));
    let qp = Qp::new(
        &pd,
        &QpInitAttr {
            cap,
            ..QpInitAttr::new(&cq)
        },
    );
    let src = pd.reg_mr(SLOTS * WRITE, Access::LOCAL_WRITE);
    let names = pd.reg_mr(8 * (ROUNDS + TOGGLES), Access::LOCAL_WRITE);
    let (addr, rkey) =
        connect_to_advertiser(&client_ep, SocketAddrV4::new(server_ep_ip(&dp), 4797), &qp);
    // At most SLOTS / 2 rounds in flight, and a slot is written again only once the server's
    // thread has checked what the round before put there (a Send completed here says the
    // data arrived, not that the server's thread has read it yet).
    let mut in_flight = 0;
    let mut checked = 0;
    // The signaled Send that names round `r` to the server.
    let send_name = |r: usize| {
        names.write_at(8 * r, &(r as u64).to_be_bytes());
        qp.post_send(SendWr {
            wr_id: 2 * r as u64 + 1,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&names, 8 * r, 8)],
            signaled: true,
        })
        .unwrap();
    };
    for r in 0..ROUNDS {
        while in_flight >= SLOTS / 2 {
            let wc = cq.wait(Duration::from_secs(30)).expect("send completion");
            assert_eq!(wc.status, WcStatus::Success);
            if wc.opcode == WcOpcode::Send {
                in_flight -= 1;
            }
        }
        while checked + SLOTS <= r {
            let c = done_rx.recv_timeout(Duration::from_secs(30));
            assert_eq!(c, Ok(checked), "the server checks the rounds in order");
            checked += 1;
        }
        let slot = r % SLOTS;
        src.write_at(slot * WRITE, &pattern(r as u8, WRITE));
        qp.post_send(SendWr {
            wr_id: 2 * r as u64,
            opcode: Opcode::Write {
                remote_addr: addr + (slot * WRITE) as u64,
                rkey,
            },
            sg_list: smallvec![sge(&src, slot * WRITE, WRITE)],
            signaled: false,
        })
        .unwrap();
        send_name(r);
        in_flight += 1;
    }
    while in_flight > 0 {
        let wc = cq.wait(Duration::from_secs(30)).expect("send completion");
        assert_eq!(wc.status, WcStatus::Success);
        in_flight -= 1;
    }
    for r in checked..ROUNDS {
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(30)), Ok(r));
    }

    // Faults on and off again on both ports while the connection is quiet, each time after a
    // different number of worker passes; then a Send, which the server must receive, and an
    // RDMA Read, whose response the client must receive.
    let ports = [dp.endpoint(0).unwrap(), client_ep.clone()];
    let sink = pd.reg_mr(8, Access::LOCAL_WRITE);
    for t in 0..TOGGLES {
        for p in &ports {
            p.set_faults(Some(FaultConfig {
                seed: t as u64,
                ..FaultConfig::default()
            }))
            .unwrap();
        }
        thread::sleep(Duration::from_micros(373 * t as u64));
        for p in &ports {
            p.set_faults(None).unwrap();
        }
        let r = ROUNDS + t;
        send_name(r);
        qp.post_send(SendWr {
            wr_id: u64::MAX,
            opcode: Opcode::Read {
                remote_addr: addr,
                rkey,
            },
            sg_list: smallvec![sge(&sink, 0, 8)],
            signaled: true,
        })
        .unwrap();
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)),
            Ok(r),
            "the server received the Send after faults were turned off ({t})"
        );
        let mut read_done = false;
        for _ in 0..2 {
            let wc = cq.wait(Duration::from_secs(10)).unwrap_or_else(|| {
                panic!("the client received the Read Response after faults were turned off ({t})")
            });
            assert_eq!(wc.status, WcStatus::Success);
            read_done |= wc.opcode == WcOpcode::Read;
        }
        assert!(read_done);
        // Let the delayed ACKs go by before the next toggle: no frame meets the faults.
        thread::sleep(Duration::from_millis(20));
    }
    qp.disconnect();
    server.join().unwrap();

    let stats = dp.stats();
    let faults: u64 = stats.iter().map(|s| s.device.faults.dropped).sum();
    let fpdus: u64 = stats.iter().map(|s| s.ooo_placed_fpdus).sum();
    let octets: u64 = stats.iter().map(|s| s.ooo_placed_octets).sum();
    let crc: u64 = stats.iter().map(|s| s.mpa_crc_errors).sum();
    eprintln!(
        "dpdk_ooo_placement: {ROUNDS} x 64 KiB Writes, frames dropped {faults}, \
         FPDUs placed ahead {fpdus} ({octets} octets), MPA CRC errors {crc}"
    );
    assert!(faults > 0, "the faults dropped frames");
    assert!(fpdus > 0, "segments behind a hole were placed ahead");
    assert!(octets >= fpdus * 20, "each with its octets");
    assert_eq!(crc, 0);
}

fn server_ep_ip(dp: &Dataplane) -> std::net::Ipv4Addr {
    dp.endpoint(0).unwrap().ip()
}
