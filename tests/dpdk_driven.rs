//! Run-to-completion workers (`WorkerMode::Driven`): no worker threads; the server and the
//! client each drive their own port's worker from their own thread, pinned to the worker's
//! core, interleaving `Driver::poll` with their own posts and CQ polls (no hand-off between an
//! application thread and a worker thread). A Send ping-pong and an RDMA Write are verified
//! byte for byte, and the counters show where the work ran. The client's QP rings its
//! worker's doorbell (`Qp::drive_with(Driver::poll_transmit)`): each ping leaves during its
//! `post_send`, before any poll, and so does the Write posted on an idle stream; the Send
//! posted right behind it, with the Write's octets still in flight, does not ring (it waits
//! for the next pass); the server's QP has no doorbell and its pongs go out on its next
//! poll. One EAL per process: the only EAL test of this binary.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::dataplane::{Dataplane, Driver, WorkerMode};
use dpwarp::verbs::{
    sge, Access, Cq, Device, Opcode, Qp, QpInitAttr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

mod dp_common;
use dp_common::{
    accept_advertising_then, connect_to_advertiser, pattern, recv_wr, shipped_config, unique,
};

const PINGS: usize = 500;
const N: usize = 128 * 1024;

/// Poll `cq`, driving the worker between polls, until a completion arrives.
fn next_wc(cq: &Cq, d: &Driver) -> WorkCompletion {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(wc) = cq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            return wc;
        }
        assert!(Instant::now() < end, "no completion within 20 s");
        d.poll();
    }
}

#[test]
fn driven_workers_ping_pong_and_write_with_no_worker_threads() {
    let ring = unique("dpwdrv");
    let cfg = shipped_config("net_ring.toml", &[("dpwring", &ring)]);
    let dp = Dataplane::start_with(&cfg, WorkerMode::Driven).expect("dataplane");
    // No worker threads in this mode.
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("dpwarp-w")),
        "worker threads in driven mode: {names:?}"
    );
    let server_drv = dp.port_drivers(0);
    let client_drv = dp.port_drivers(1);
    assert_eq!((server_drv.len(), client_drv.len()), (1, 1));
    let (sd, cd) = (server_drv[0].clone(), client_drv[0].clone());
    assert!(dp.driver(0).is_some() && dp.driver(2).is_none());
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    assert!(server_ep.is_driven());
    let dev = Device::open();
    let pd = dev.alloc_pd();

    let spd = pd.clone();
    let server_ip = server_ep.ip();
    // The client connects only once the server listens.
    let (listening_tx, listening_rx) = std::sync::mpsc::channel();
    let server = thread::spawn(move || {
        sd.attach();
        let cq = Cq::new(256);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let rbuf = spd.reg_mr(64, Access::LOCAL_WRITE);
        let sbuf = spd.reg_mr(64, Access::LOCAL_WRITE);
        let target = spd.reg_mr(N, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
        // listen/get_request/accept drive the worker while they wait.
        let _listener = accept_advertising_then(&server_ep, 4796, &qp, &target, || {
            listening_tx.send(()).unwrap();
        });
        // Echo every ping's payload back (its first 8 bytes carry the sequence number).
        let mut got = 0;
        while got < PINGS {
            let wc = next_wc(&cq, &sd);
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let mut b = [0u8; 64];
            rbuf.read_at(0, &mut b);
            assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), got as u64);
            sbuf.write_at(0, &b);
            got += 1;
            qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
            qp.post_send(SendWr {
                wr_id: 1,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&sbuf, 0, 64)],
                signaled: true,
            })
            .unwrap();
        }
        // The client's Write, then its closing Send: the Write is placed before that Send.
        loop {
            if next_wc(&cq, &sd).opcode == WcOpcode::Recv {
                break;
            }
        }
        assert!(*target.bytes() == pattern(4, N)[..], "Write placed");
        let end = Instant::now() + Duration::from_secs(10);
        while !qp.is_closed() && Instant::now() < end {
            sd.poll();
        }
        sd.stats()
    });

    cd.attach();
    if let Some(c) = cd.cpu() {
        assert_eq!(
            dpwarp::dpdk::thread_cpus(),
            vec![c],
            "driving thread pinned"
        );
    }
    let cq = Cq::new(256);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let doorbell = cd.clone();
    qp.drive_with(std::sync::Arc::new(move || doorbell.poll_transmit()));
    let rbuf = pd.reg_mr(64, Access::LOCAL_WRITE);
    let sbuf = pd.reg_mr(N, Access::LOCAL_WRITE);
    qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
    listening_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server listening");
    let (raddr, rkey) = connect_to_advertiser(&client_ep, SocketAddrV4::new(server_ip, 4796), &qp);
    for i in 0..PINGS {
        sbuf.write_at(0, &(i as u64).to_le_bytes());
        let sent = cd.stats().device.tx_packets;
        qp.post_send(SendWr {
            wr_id: 2,
            opcode: Opcode::Send,
            sg_list: smallvec![sge(&sbuf, 0, 64)],
            signaled: true,
        })
        .unwrap();
        assert!(
            cd.stats().device.tx_packets > sent,
            "ping {i} did not leave during post_send (the doorbell)"
        );
        loop {
            if next_wc(&cq, &cd).opcode == WcOpcode::Recv {
                break;
            }
        }
        let mut b = [0u8; 8];
        rbuf.read_at(0, &mut b);
        assert_eq!(u64::from_le_bytes(b), i as u64, "pong {i}");
        qp.post_recv(recv_wr(&rbuf, 64)).unwrap();
    }
    sbuf.write_at(0, &pattern(4, N));
    let before_write = cd.stats().device.tx_packets;
    qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Write {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&sbuf, 0, N)],
        signaled: true,
    })
    .unwrap();
    let after_write = cd.stats().device.tx_packets;
    assert!(
        after_write > before_write,
        "the Write did not leave during post_send"
    );
    qp.post_send(SendWr {
        wr_id: 4,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&sbuf, 0, 8)],
        signaled: true,
    })
    .unwrap();
    // The Write's octets are still unacknowledged (this thread has not polled since): the
    // doorbell stays silent and the Send waits for the next pass, batched with what else
    // is due, instead of a transmit pass of its own per post.
    assert_eq!(
        cd.stats().device.tx_packets,
        after_write,
        "the doorbell rang with data in flight"
    );
    let mut done = 0;
    while done < 2 {
        let wc = next_wc(&cq, &cd);
        if matches!(wc.opcode, WcOpcode::Write | WcOpcode::Send) {
            done += 1;
        }
    }
    // Let the server see the Send before we close.
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        cd.poll();
    }
    qp.disconnect();
    let end = Instant::now() + Duration::from_secs(10);
    while !qp.is_closed() && Instant::now() < end {
        cd.poll();
    }
    let ss = server.join().unwrap();
    let cs = cd.stats();
    // Each worker was run by the thread that drives it, pinned to the worker's core, with an
    // lcore id of its own.
    for s in [&ss, &cs] {
        assert!(s.loops > 0 && s.pinned && s.lcore.is_some(), "{s:?}");
    }
    // Run to completion: a pass whose segments completed a receive hands the completion to
    // the driving thread before its transmit phase (the answer then goes out with the ACK,
    // in one transmit phase). Not every one: a message that arrives in a sweep pass, or in
    // the pass that runs the transmit phase owed from the last hand-over (the server has no
    // doorbell, so its pong goes out in its next pass, and a loaded machine can deliver the
    // next ping to that same pass), takes the usual order. Without the hand-over: none.
    for (who, s) in [("server", &ss), ("client", &cs)] {
        assert!(
            s.transmit_deferred >= PINGS as u64 / 2,
            "{who}: {} of {PINGS} receive completions handed over before the transmit phase",
            s.transmit_deferred
        );
    }
    // The client's QP has a doorbell (`drive_with`), so its posts go straight into its
    // connection when nothing waits in its post rings: every ping's Send and every re-posted
    // receive (the post phase counts the passes that found such posts: at least one a ping).
    // The server's QP has none: its posts go through the rings. Without the direct post: 0.
    assert!(
        cs.posts_direct >= PINGS as u64,
        "client: posts straight into the connection seen {} times for {PINGS} pings",
        cs.posts_direct
    );
    assert_eq!(
        ss.posts_direct, 0,
        "server (no doorbell) posted through its rings"
    );
    // The receive side placed the Write from the frames: about one copy per payload octet.
    let rx = ss.copies.rx_per_byte().unwrap();
    assert!(
        rx < 1.2,
        "server copies per byte on receive: {rx} ({:?})",
        ss.copies
    );
    // Idle past `worker.driven_spin_us`, a driven worker's
    // passes yield the core now and then, so that a peer process sharing the core gets to
    // run (two driven memif processes on one core: 1 Gbit/s without, 10-13 with). Nothing
    // happens on the link now: 20 ms of idle passes must have yielded. Without: 0.
    // Unset in the config: 50 us for a worker alone on its CPU, 2 us where the two workers
    // share one (a machine with one CPU; tests/dpdk_shared_cpu.rs), or where the worker found
    // that its thread takes turns on its CPU with another (other tests running beside this
    // one; dataplane::contention).
    let spin = if ss.cpu == cs.cpu { 2 } else { 50 };
    for w in [&ss, &cs] {
        let found_shared = w.cpu_found_shared > 0 && w.driven_spin_us == 2;
        assert!(w.driven_spin_us == spin || found_shared, "{ss:?} {cs:?}");
    }
    let before = cd.stats().idle_yields;
    let end = Instant::now() + Duration::from_millis(20);
    while Instant::now() < end {
        cd.poll();
    }
    let yields = cd.stats().idle_yields - before;
    assert!(yields > 0, "20 ms of idle driven passes, {yields} yields");
}
