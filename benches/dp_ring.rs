//! RDMA Write bandwidth on the DPDK dataplane with no PMD copy: a net_ring pair in one process
//! (the rings pass mbuf pointers), each side one thread driving its own worker on its own core
//! (`WorkerMode::Driven`; server CPU 0, client CPU 1), against a kernel TCP loopback stream
//! between two threads pinned the same way (blocking, and busy-polled with MSG_DONTWAIT), in
//! interleaved rounds, medians reported. The kernel stream is written in several sizes
//! (`KERNEL_WRITES` and `--size`) and the best median is the baseline: on loopback 64 KiB
//! writes are the kernel's worst case (docs/testing.md "Measurements"). Bytes are counted
//! where they arrive: a round ends when the receiver has them (the RDMA side: the Send posted
//! after the last Write has arrived, RDMA Writes being placed in order before it, RFC 5040
//! §5.5).
//!
//! ```text
//! cargo bench --bench dp_ring -- [--mtu 1500|9000|576..=65389] [--rounds 3] [--size 65536] [--mib 1024]
//!     [--tx-zero-copy auto|off] [--idle N] [--kernel-writes 16384,32768,...] [--no-crc]
//!     [--sweep-us N] [--drop P] [--ooo-placement on|off] [--rdma-only] [--json FILE]
//! ```
//!
//! `--drop P` drops each frame the server port receives with probability P (a seeded fault
//! injector; the ports then compute and verify checksums in software), `--ooo-placement`
//! sets `[tcp] ooo_placement` (default on: RFC 5044 App. A.3, docs/datapath.md "Out-of-order
//! placement"), `--rdma-only` runs only the RDMA Write rounds and writes their figures, the
//! copies per byte and what was placed out of order (`scripts/ooo-bench` compares them).
//!
//! `--sweep-us N`: the workers' `[worker] sweep_us` (default that of configs/net_ring.toml:
//! 1000), how often a pass visits every connection; with `--idle` it is what the quiet
//! connections cost.
//!
//! `--no-crc`: the Write connection negotiates FPDUs without CRC32c (MPA C bit 0 on both
//! ends, RFC 5044 §7.1): what the CRC costs where no PMD copies (JSON `mpa_crc`).
//!
//! `--kernel-writes` sets the kernel stream's write sizes (default `KERNEL_WRITES`; `--size`
//! is always among them); scripts/bench gives its quiet-connection run (`--idle`), whose
//! kernel figures it does not use, just one.
//!
//! `--idle N` first opens N more connections between the two ports that then carry nothing
//! (a storage target's quiet clients) and keeps them open through the rounds: the measured
//! connection shares each worker with them.
//!
//! `--tx-zero-copy off` sends every segment's payload copied into its mbuf (the ports'
//! `tx_zero_copy`; default auto: by reference, docs/datapath.md "Copies"). The receiving
//! side then makes each chained frame one buffer, a copy counted on receive.
//!
//! net_memif (scripts/bench) adds the PMD's two copies per byte (mbuf -> shared memory ->
//! mbuf); this is what the same code does without them (docs/testing.md "Measurements").
//!
//! Each round also runs a 64 B Send ping-pong (`--lat-iters`, default 20000; one-way = RTT/2,
//! p50) over the same pair, and the kernel TCP ping-pong busy-polled (MSG_DONTWAIT, TCP_NODELAY)
//! between two threads pinned the same way: dpwarp's latency without memif's hop.

use dpwarp::verbs::smallvec;
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::ConnParam;
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::{CopyStats, Dataplane, Driver, Endpoint, WorkerMode};
use dpwarp::verbs::{
    sge, Access, Cq, Device, Mr, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
};

struct Args {
    mtu: u16,
    rounds: usize,
    size: usize,
    mib: usize,
    json: Option<String>,
    zero_copy: String,
    lat_iters: usize,
    idle: usize,
    kernel_writes: Vec<usize>,
    crc: bool,
    sweep_us: Option<u64>,
    drop: f64,
    ooo: bool,
    rdma_only: bool,
}

fn args() -> Args {
    let mut a = Args {
        mtu: 1500,
        rounds: 3,
        size: 65536,
        mib: 1024,
        json: None,
        lat_iters: 20000,
        zero_copy: "auto".into(),
        idle: 0,
        kernel_writes: KERNEL_WRITES.to_vec(),
        crc: true,
        sweep_us: None,
        drop: 0.0,
        ooo: true,
        rdma_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().expect("a value after the option");
        match k.as_str() {
            "--mtu" => a.mtu = v().parse().expect("--mtu N"),
            "--rounds" => a.rounds = v().parse().expect("--rounds N"),
            "--size" => a.size = v().parse().expect("--size N"),
            "--mib" => a.mib = v().parse().expect("--mib N"),
            "--json" => a.json = Some(v()),
            "--tx-zero-copy" => a.zero_copy = v(),
            "--lat-iters" => a.lat_iters = v().parse().expect("--lat-iters N"),
            "--idle" => a.idle = v().parse().expect("--idle N"),
            "--no-crc" => a.crc = false,
            "--sweep-us" => a.sweep_us = Some(v().parse().expect("--sweep-us N")),
            "--drop" => a.drop = v().parse().expect("--drop P"),
            "--ooo-placement" => {
                a.ooo = match v().as_str() {
                    "on" => true,
                    "off" => false,
                    o => panic!("--ooo-placement on|off, not {o}"),
                }
            }
            "--rdma-only" => a.rdma_only = true,
            "--kernel-writes" => {
                a.kernel_writes = v()
                    .split(',')
                    .map(|w| w.parse().expect("--kernel-writes N,N,..."))
                    .collect()
            }
            // What cargo and test runners pass to a harness-less bench: `--bench` from `cargo
            // bench`; `--list` (and its `--format terse`) from `cargo nextest` listing tests:
            // this binary has none.
            "--bench" | "--exact" | "--ignored" | "--nocapture" => {}
            "--format" => {
                v();
            }
            "--list" => std::process::exit(0),
            other => {
                eprintln!("dp_ring: unknown option {other} (see the module doc)");
                std::process::exit(2)
            }
        }
    }
    a
}

fn config(mtu: u16, zero_copy: &str) -> DataplaneConfig {
    let ring = format!("dpwbench{}", std::process::id() % 100000);
    let path = format!("{}/configs/net_ring.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("configs/net_ring.toml");
    let mut cfg = DataplaneConfig::parse(&text.replace("dpwring", &ring)).expect("net_ring config");
    for (i, p) in cfg.ports.iter_mut().enumerate() {
        p.cores = vec![i];
        p.mtu = mtu;
        if mtu > 9000 {
            // The net_ring config's 16383 mbufs of up to 64 KiB would not fit its `-m 512`.
            p.mbufs = 2047;
        }
        p.tx_zero_copy = zero_copy.into();
    }
    cfg.tcp.rx_buffer = 2 << 20;
    cfg.tcp.tx_buffer = 2 << 20;
    cfg
}

fn pin(cpu: usize) {
    dpwarp::affinity::set_thread_cpus(&[cpu]).expect("pin thread");
}

/// Port `p`'s worker driver and endpoint (port 0 the server side, port 1 the client side).
fn side(dp: &Dataplane, p: usize) -> (Driver, Endpoint) {
    (dp.port_drivers(p)[0].clone(), dp.endpoint(p).unwrap())
}

/// Drive `d` until `qp` has closed (at most 5 s): a driven worker sends the FIN, and sees the
/// peer's, only when polled.
fn drive_until_closed(d: &Driver, qp: &Qp) {
    let end = Instant::now() + Duration::from_secs(5);
    while !qp.is_closed() && Instant::now() < end {
        d.poll();
    }
}

/// Wait for the next receive completion on `cq`, driving `d` meanwhile; every completion must
/// be a success.
fn next_recv(d: &Driver, cq: &Cq) {
    loop {
        match cq.poll_one() {
            Some(wc) => {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                if wc.opcode == WcOpcode::Recv {
                    return;
                }
            }
            None => {
                d.poll();
            }
        }
    }
}

/// One RDMA Write stream of `total` bytes in `size`-byte Writes (32 in flight), then a Send.
/// Returns (Gbit/s at the receiver, client copy stats, server copy stats, segments sent).
fn rdma_round(
    dp: &Dataplane,
    port: u16,
    size: usize,
    total: usize,
    crc: bool,
) -> (f64, CopyStats, CopyStats, u64) {
    let param = ConnParam {
        crc,
        ..ConnParam::default()
    };
    let sparam = param.clone();
    let ((sd, server_ep), (cd, client_ep)) = (side(dp, 0), side(dp, 1));
    let server_ip = server_ep.ip();
    let dev = Device::open();
    let spd = dev.alloc_pd();
    let (adv_tx, adv_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        sd.attach();
        let before = sd.stats().copies;
        let cq = Cq::new(64);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let target = spd.reg_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let rbuf = spd.reg_mr(64, Access::LOCAL_WRITE);
        qp.post_recv(RecvWr {
            wr_id: 0,
            sg_list: smallvec![sge(&rbuf, 0, 64)],
        })
        .unwrap();
        let listener = server_ep.listen(port).unwrap();
        adv_tx.send((target.addr(), target.stag())).unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&qp, &sparam).unwrap();
        next_recv(&sd, &cq);
        let t_end = Instant::now();
        done_tx.send(t_end).unwrap();
        drive_until_closed(&sd, &qp);
        sd.stats().copies.since(&before)
    });

    cd.attach();
    let before = cd.stats();
    let pd = dev.alloc_pd();
    let cq = Cq::new(256);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let src = pd.reg_mr(size, Access::LOCAL_WRITE);
    src.write_at(0, &vec![0x5a; size]);
    let (raddr, rkey) = adv_rx.recv().unwrap();
    let neg = client_ep
        .connect(SocketAddrV4::new(server_ip, port), &qp, &param)
        .expect("connect");
    assert_eq!(neg.crc_tx, crc, "MPA CRC as asked on both ends");
    let n = total / size;
    let window = 32;
    let t0 = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    while done < n {
        while posted < n && posted - done < window {
            qp.post_send(SendWr {
                wr_id: posted as u64,
                opcode: Opcode::Write {
                    remote_addr: raddr,
                    rkey,
                },
                sg_list: smallvec![sge(&src, 0, size)],
                signaled: true,
            })
            .unwrap();
            posted += 1;
        }
        match cq.poll_one() {
            Some(wc) => {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                done += 1;
            }
            None => {
                cd.poll();
            }
        }
    }
    qp.post_send(SendWr {
        wr_id: u64::MAX,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 8)],
        signaled: true,
    })
    .unwrap();
    let t_end = loop {
        if let Ok(t) = done_rx.try_recv() {
            break t;
        }
        cd.poll();
        while cq.poll_one().is_some() {}
    };
    qp.disconnect();
    drive_until_closed(&cd, &qp);
    let after = cd.stats();
    let server_copies = server.join().unwrap();
    let secs = t_end.duration_since(t0).as_secs_f64();
    (
        (n * size) as f64 * 8.0 / secs / 1e9,
        after.copies.since(&before.copies),
        server_copies,
        after.device.tx_tcp_segments - before.device.tx_tcp_segments,
    )
}

/// 64 B Send ping-pong over the pair, `iters` round trips after 1000 warm-up ones; returns the
/// one-way p50 (RTT/2) in microseconds. Each side is one thread driving its own worker.
fn lat_round(dp: &Dataplane, port: u16, iters: usize) -> f64 {
    const SIZE: usize = 64;
    const WARM: usize = 1000;
    let ((sd, server_ep), (cd, client_ep)) = (side(dp, 0), side(dp, 1));
    let server_ip = server_ep.ip();
    let dev = Device::open();
    let spd = dev.alloc_pd();
    let (ready_tx, ready_rx) = mpsc::channel();
    let total = WARM + iters;
    let server = thread::spawn(move || {
        sd.attach();
        let cq = Cq::new(64);
        let qp = Qp::new(&spd, &QpInitAttr::new(&cq));
        let buf = spd.reg_mr(SIZE, Access::LOCAL_WRITE);
        post_ping_recv(&qp, &buf);
        let listener = server_ep.listen(port).unwrap();
        ready_tx.send(()).unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&qp, &ConnParam::default()).unwrap();
        for _ in 0..total {
            next_recv(&sd, &cq);
            post_ping_recv(&qp, &buf);
            post_ping_send(&qp, &buf);
        }
        drive_until_closed(&sd, &qp);
    });
    cd.attach();
    let cdev = Device::open();
    let pd = cdev.alloc_pd();
    let cq = Cq::new(64);
    let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
    let buf = pd.reg_mr(SIZE, Access::LOCAL_WRITE);
    ready_rx.recv().unwrap();
    client_ep
        .connect(
            SocketAddrV4::new(server_ip, port),
            &qp,
            &ConnParam::default(),
        )
        .expect("connect");
    let mut lat = Vec::with_capacity(iters);
    for i in 0..total {
        post_ping_recv(&qp, &buf);
        let t = Instant::now();
        post_ping_send(&qp, &buf);
        next_recv(&cd, &cq);
        if i >= WARM {
            lat.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    qp.disconnect();
    drive_until_closed(&cd, &qp);
    server.join().unwrap();
    median(&lat)
}

/// The ping-pong's receive buffer: all of `buf` (its size is the message size).
fn post_ping_recv(qp: &Qp, buf: &Mr) {
    qp.post_recv(RecvWr {
        wr_id: 0,
        sg_list: smallvec![sge(buf, 0, buf.len())],
    })
    .unwrap();
}

/// The ping-pong's message: all of `buf`, unsignaled (the peer's answer is the completion).
fn post_ping_send(qp: &Qp, buf: &Mr) {
    qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(buf, 0, buf.len())],
        signaled: false,
    })
    .unwrap();
}

/// Kernel TCP loopback 64 B ping-pong, busy-polled (MSG_DONTWAIT) with TCP_NODELAY, server on
/// CPU 0, client on CPU 1; one-way p50 (RTT/2) in microseconds.
fn kernel_pingpong(iters: usize) -> f64 {
    const SIZE: usize = 64;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    fn read_full(s: &mut TcpStream, mut b: &mut [u8]) {
        while !b.is_empty() {
            match s.read(b) {
                Ok(0) => panic!("eof"),
                Ok(k) => b = &mut b[k..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("{e}"),
            }
        }
    }
    fn write_full(s: &mut TcpStream, mut b: &[u8]) {
        while !b.is_empty() {
            match s.write(b) {
                Ok(k) => b = &b[k..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("{e}"),
            }
        }
    }
    let total = 1000 + iters;
    let srv = thread::spawn(move || {
        pin(0);
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; SIZE];
        for _ in 0..total {
            read_full(&mut s, &mut b);
            write_full(&mut s, &b);
        }
    });
    pin(1);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut b = [1u8; SIZE];
    let mut lat = Vec::with_capacity(iters);
    for i in 0..total {
        let t = Instant::now();
        write_full(&mut s, &b);
        read_full(&mut s, &mut b);
        if i >= 1000 {
            lat.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    srv.join().unwrap();
    median(&lat)
}

/// The write sizes the kernel stream is measured in (plus `--size`): the baseline is the best.
/// Loopback's MSS is 65483, so a 64 KiB write leaves a 53-octet tail segment behind every full
/// one; other sizes avoid that and ran up to 3-4 times faster here.
const KERNEL_WRITES: [usize; 5] = [16384, 32768, 65536, 262144, 1 << 20];

/// Kernel TCP loopback: `total` bytes in `size`-byte writes, receiver on CPU 0, sender on CPU 1.
/// `busy`: the receiver spins on MSG_DONTWAIT reads instead of blocking.
fn kernel_round(size: usize, total: usize, busy: bool) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let rx = thread::spawn(move || {
        pin(0);
        let (mut s, _) = l.accept().unwrap();
        s.set_nonblocking(busy).unwrap();
        let mut buf = vec![0u8; size.max(1 << 16)];
        let mut got = 0usize;
        let t0 = Instant::now();
        while got < total {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("{e}"),
            }
        }
        (t0, Instant::now(), got)
    });
    pin(1);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let data = vec![0x5au8; size];
    let t_start = Instant::now();
    for _ in 0..total / size {
        s.write_all(&data).unwrap();
    }
    let (_, t_end, got) = rx.join().unwrap();
    assert_eq!(got, total / size * size);
    got as f64 * 8.0 / t_end.duration_since(t_start).as_secs_f64() / 1e9
}

/// `n` established connections between the two ports that carry nothing (a storage target's
/// other clients, quiet for now): every measured segment shares its worker with them. Returns
/// both ends' QPs; drop them to close.
fn idle_connections(dp: &Dataplane, n: usize) -> (Vec<Qp>, Vec<Qp>) {
    let ((sd, server_ep), (cd, client_ep)) = (side(dp, 0), side(dp, 1));
    let server_ip = server_ep.ip();
    let dev = Device::open();
    let spd = dev.alloc_pd();
    let listener = server_ep.listen(6900).unwrap();
    let server = thread::spawn(move || {
        sd.attach();
        let mut qps = Vec::with_capacity(n);
        for _ in 0..n {
            let qp = Qp::new(&spd, &QpInitAttr::new(&Cq::new(4)));
            let req = listener.get_request(Duration::from_secs(10)).unwrap();
            req.accept(&qp, &ConnParam::default()).unwrap();
            qps.push(qp);
        }
        qps
    });
    cd.attach();
    let pd = dev.alloc_pd();
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        let qp = Qp::new(&pd, &QpInitAttr::new(&Cq::new(4)));
        client_ep
            .connect(
                SocketAddrV4::new(server_ip, 6900),
                &qp,
                &ConnParam::default(),
            )
            .expect("connect an idle connection");
        qps.push(qp);
    }
    let sq = server.join().unwrap();
    (sq, qps)
}

/// Close the idle connections, driving both workers until every QP reads closed (at most
/// 10 s): dropping a QP whose connection is open waits for its close, which a driven worker
/// only makes when polled.
fn close_idle(dp: &Dataplane, (sq, cq): (Vec<Qp>, Vec<Qp>)) {
    let drivers = [side(dp, 0).0, side(dp, 1).0];
    for qp in sq.iter().chain(&cq) {
        qp.disconnect();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while sq.iter().chain(&cq).any(|q| !q.is_closed()) && Instant::now() < end {
        for d in &drivers {
            d.poll();
        }
    }
}

/// The median of `v`, which keeps its order (the JSON reports the rounds as they ran).
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs bench binaries without
    // it: nothing to test here, and a benchmark must not run as a test.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("dp_ring: a benchmark: cargo bench --bench dp_ring -- [options]");
        return;
    }
    let a = args();
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(ncpu >= 2, "needs two CPUs (server CPU 0, client CPU 1)");
    let mut cfg = config(a.mtu, &a.zero_copy);
    if let Some(us) = a.sweep_us {
        cfg.worker.sweep_us = us;
    }
    cfg.tcp.ooo_placement = a.ooo;
    if a.drop > 0.0 {
        // Loss on the server's received frames (the Writes' direction), seeded; a fault port
        // computes and verifies checksums in software.
        for p in cfg.ports.iter_mut() {
            p.checksum = "software".into();
        }
        cfg.ports[0].faults = Some(dpwarp::config::FaultConfig {
            seed: 0x5eed,
            drop: a.drop,
            direction: dpwarp::config::FaultDirection::Rx,
            ..Default::default()
        });
    }
    let dp = Dataplane::start_with(&cfg, WorkerMode::Driven).expect("dataplane (root, DPDK)");
    let idle = idle_connections(&dp, a.idle);
    if a.idle > 0 {
        eprintln!(
            "dp_ring: {} idle connections beside the measured one",
            a.idle
        );
    }
    let total = a.mib << 20;
    let (mut d, mut kb, mut kp) = (vec![], vec![], vec![]);
    let mut writes = a.kernel_writes.clone();
    if !writes.contains(&a.size) {
        writes.push(a.size);
    }
    // Per round, per write size: kb[i] / kp[i] are the blocking / busy runs of writes[i].
    kb.resize(writes.len(), vec![]);
    kp.resize(writes.len(), vec![]);
    let (mut dl, mut kl) = (vec![], vec![]);
    let (mut ctx, mut srx, mut segs) = (CopyStats::default(), CopyStats::default(), 0u64);
    for r in 0..a.rounds {
        // Rotate the order so no side always runs first (caches, frequency).
        for k in 0..5 {
            let slot = (r + k) % 5;
            if a.rdma_only && slot != 0 {
                continue;
            }
            match slot {
                3 => {
                    let l = lat_round(&dp, 5900 + r as u16, a.lat_iters);
                    eprintln!("dp_ring: round {r}: dpwarp net_ring send_lat 64 B p50 {l:.2} us");
                    dl.push(l);
                }
                4 => {
                    let l = kernel_pingpong(a.lat_iters);
                    eprintln!("dp_ring: round {r}: kernel TCP busy ping-pong 64 B p50 {l:.2} us");
                    kl.push(l);
                }
                0 => {
                    let (g, c, s, n) = rdma_round(&dp, 4900 + r as u16, a.size, total, a.crc);
                    eprintln!(
                        "dp_ring: round {r}: dpwarp net_ring mtu {}{} {g:.2} Gbit/s",
                        a.mtu,
                        if a.crc { "" } else { ", MPA CRC off," }
                    );
                    d.push(g);
                    ctx = CopyStats::sum([&ctx, &c]);
                    srx = CopyStats::sum([&srx, &s]);
                    segs += n;
                }
                slot => {
                    // 1: blocking, 2: busy-polled; every write size.
                    let busy = slot == 2;
                    let (runs, how) = if busy {
                        (&mut kp, "busy-polled")
                    } else {
                        (&mut kb, "blocking")
                    };
                    for (i, &w) in writes.iter().enumerate() {
                        let g = kernel_round(w, total, busy);
                        eprintln!(
                            "dp_ring: round {r}: kernel TCP {how}, {w} B writes {g:.2} Gbit/s"
                        );
                        runs[i].push(g);
                    }
                }
            }
        }
    }
    // How far apart the rounds are: a slow phase of the host inside one round shows as a
    // spread no probe around the whole run sees (scripts/bench reruns a run spread over 1.4x
    // and flags it).
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        if lo > 0.0 {
            hi / lo
        } else {
            f64::NAN
        }
    };
    if a.rdma_only {
        let st = dp.stats();
        let out = serde_json::json!({
            "bench": "dp_ring",
            "mtu": a.mtu,
            "size": a.size,
            "bytes_per_round": total,
            "rounds": a.rounds,
            "drop": a.drop,
            "ooo_placement": a.ooo,
            "write_bw_gbps_dpdk_ring": median(&d),
            "write_bw_gbps_dpdk_ring_rounds": d,
            "copies_per_byte": {"tx": ctx.tx_per_byte(), "rx": srx.rx_per_byte()},
            "ooo_placed_fpdus": st.iter().map(|s| s.ooo_placed_fpdus).sum::<u64>(),
            "ooo_placed_octets": st.iter().map(|s| s.ooo_placed_octets).sum::<u64>(),
            "frames_dropped": st.iter().map(|s| s.device.faults.dropped).sum::<u64>(),
            "cpus": {"server": 0, "client": 1},
        });
        close_idle(&dp, idle);
        println!("{out}");
        if let Some(f) = a.json {
            std::fs::write(&f, format!("{out}\n")).expect("write --json file");
        }
        return;
    }
    let dm = median(&d);
    let kbw: Vec<f64> = kb.iter().map(|v| median(v)).collect();
    let kpw: Vec<f64> = kp.iter().map(|v| median(v)).collect();
    let (dlm, klm) = (median(&dl), median(&kl));
    let at_size = writes.iter().position(|&w| w == a.size).unwrap();
    let (kbm, kpm) = (kbw[at_size], kpw[at_size]);
    // The best kernel stream: any write size, blocking or busy.
    let (best, best_write, best_busy) = writes
        .iter()
        .enumerate()
        .flat_map(|(i, &w)| [(kbw[i], w, false), (kpw[i], w, true)])
        .fold((0.0, 0, false), |b, c| if c.0 > b.0 { c } else { b });
    let best_at = writes
        .iter()
        .position(|&w| w == best_write)
        .unwrap_or(at_size);
    let kernel_best_rounds = if best_busy {
        &kp[best_at]
    } else {
        &kb[best_at]
    };
    let by_write: Vec<_> = writes
        .iter()
        .enumerate()
        .map(|(i, &w)| serde_json::json!({"write": w, "blocking": kbw[i], "busy": kpw[i]}))
        .collect();
    let msgs = (a.rounds * (total / a.size)) as f64;
    let out = serde_json::json!({
        "bench": "dp_ring",
        "mtu": a.mtu,
        "mpa_crc": a.crc,
        "sweep_us": cfg.worker.sweep_us,
        "size": a.size,
        "bytes_per_round": total,
        "rounds": a.rounds,
        "write_bw_gbps_dpdk_ring": dm,
        "write_bw_gbps_dpdk_ring_rounds": d,
        "write_bw_spread_dpdk_ring": spread(&d),
        "send_lat_p50_us_dpdk_ring_rounds": dl,
        "send_lat_spread_dpdk_ring": spread(&dl),
        "stream_gbps_kernel_best_rounds": kernel_best_rounds,
        "stream_spread_kernel_best": spread(kernel_best_rounds),
        "stream_gbps_kernel_blocking": kbm,
        "stream_gbps_kernel_busy": kpm,
        "stream_gbps_kernel_best": best,
        "stream_kernel_best": {"write": best_write, "busy": best_busy},
        "stream_gbps_kernel_by_write": by_write,
        "kernel_writes": writes,
        "ratio_vs_better_kernel": dm / best,
        "ratio_vs_better_kernel_same_writes": dm / kbm.max(kpm),
        "tx_zero_copy": a.zero_copy,
        "copies_per_byte": {
            "tx": ctx.tx_per_byte(),
            "rx": srx.rx_per_byte(),
        },
        "segments_per_msg": segs as f64 / msgs,
        "send_lat_p50_us_dpdk_ring": dlm,
        "pingpong_p50_us_kernel_busy": klm,
        "send_lat_ratio_vs_kernel_busy": dlm / klm,
        "cpus": {"server": 0, "client": 1},
        "idle_connections": a.idle,
    });
    close_idle(&dp, idle);
    println!("{out}");
    if let Some(f) = a.json {
        std::fs::write(&f, format!("{out}\n")).expect("write --json file");
    }
}
