//! The latency floor of a DPDK virtual device: a raw frame ping-pong with no protocol at all,
//! between two threads pinned to CPUs 0 and 1, each with its own port and mbuf pool. Each turn
//! is what any stack on that device must do at least: allocate an mbuf, write a frame, hand
//! it to the PMD; on the other side receive it, read it (its sequence number), free it.
//!
//! ```text
//! cargo bench --bench pmd_floor -- [--iters 200000] [--frame 142] [--stream-ms 1000] [--json FILE]
//!                                  [--gap-us 0]
//! cargo bench --bench pmd_floor -- --cacheline-only [--iters 20000]
//! ```
//!
//! `--gap-us N` paces the frame ping-pongs: the initiator sends a frame every N us (polling
//! its receive queue meanwhile) instead of at once, as `dpwarp dpperf --mps` paces a Send
//! ping-pong: the floor for sporadic requests.
//!
//! `--cacheline-only` times just the cache line (no EAL, well under a second) and prints its
//! one-way p50: scripts/bench's probe for this host's slow phases, before every round.
//!
//! Two devices: `net_memif` (a server and a client port in this process on one socket; the
//! PMD copies each frame into and out of the shared-memory ring, as between two processes)
//! and a `net_ring` pair (the ring passes mbuf pointers). The default frame is the size of
//! the frame that carries dpwarp's 64 B Send: Ethernet, IPv4 and TCP headers (54) and the FPDU
//! (2 length + 18 untagged DDP/RDMAP header + 64 + 0 pad + 4 CRC = 88, as dpperf's copy
//! counters show per segment; RFC 5044 §4, RFC 5041 §4.3). One-way = RTT / 2; p50 and p99
//! of per-turn samples. Beside them the same ping-pong of one cache line between the two CPUs
//! (a store and a spin on each side): what one cross-core transfer costs on this host.
//!
//! The bandwidth floor (a ceiling, really) of `net_memif` at MTU 1500 comes after: CPU 1 sends
//! full-size frames (1514 octets: an MTU 1500 TCP segment with its Ethernet header) in bursts
//! of 32 for `--stream-ms`, CPU 0 receives and frees them. Only the headers are written, as
//! a sender by reference does; the PMD copies each frame into the shared ring and out again.
//! Reported as frames per second and as TCP payload (1460 octets a frame) in Gbit/s: no
//! stack over this device can move more at this frame size.
//!
//! Last, the ceiling of any copying transport between these two CPUs: 64 KiB messages
//! copied by CPU 1 from its own buffer into a 2 MiB ring and by CPU 0 out of it into its own,
//! one copy per octet on each side (what kernel TCP over loopback does), no protocol, no
//! device. A 3x-the-kernel target above this figure is above what the host's caches move.
//!
//! `scripts/bench` runs it and puts the figures beside dpwarp's send_lat and the kernel's
//! ping-pong (docs/testing.md "The latency floor"), and beside write_bw at MTU 1500.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::dpdk::{Eal, Mempool, Port, PortConf, Queue};

struct Args {
    iters: usize,
    frame: usize,
    stream_ms: u64,
    json: Option<String>,
    cacheline_only: bool,
    gap: Duration,
}

fn args() -> Args {
    let mut a = Args {
        iters: 200_000,
        frame: 142,
        stream_ms: 1000,
        json: None,
        cacheline_only: false,
        gap: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--iters" => a.iters = v().parse().expect("--iters N"),
            "--frame" => a.frame = v().parse().expect("--frame OCTETS"),
            "--stream-ms" => a.stream_ms = v().parse().expect("--stream-ms MS"),
            "--json" => a.json = Some(v()),
            "--cacheline-only" => a.cacheline_only = true,
            "--gap-us" => a.gap = Duration::from_micros(v().parse().expect("--gap-us N")),
            // What cargo and test runners pass to a harness-less bench: `--bench` from `cargo
            // bench`; `--list` (and its `--format terse`) from `cargo nextest` listing tests:
            // this binary has none.
            "--bench" | "--exact" | "--ignored" | "--nocapture" => {}
            "--format" => {
                v();
            }
            "--list" => std::process::exit(0),
            other => {
                eprintln!("pmd_floor: unknown option {other} (see the module doc)");
                std::process::exit(2)
            }
        }
    }
    assert!((60..=1514).contains(&a.frame), "--frame 60..=1514");
    a
}

fn pin(cpu: usize) {
    dpwarp::affinity::set_thread_cpus(&[cpu]).expect("pin thread");
}

/// Configure and start ports `a` and `b`, each with a pool of `mbufs`, and wait for both links.
fn bring_up(
    eal: &'static Eal,
    name: &str,
    a: &Port,
    b: &Port,
    mbufs: u32,
) -> (&'static Mempool, &'static Mempool) {
    let conf = PortConf::default();
    let pa = Mempool::create(eal, &format!("{name}a"), mbufs, 256, 2176).expect("pool a");
    let pb = Mempool::create(eal, &format!("{name}b"), mbufs, 256, 2176).expect("pool b");
    a.configure(&conf, pa).expect("configure a");
    b.configure(&conf, pb).expect("configure b");
    a.start().expect("start a");
    b.start().expect("start b");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(a.link().map(|l| l.1).unwrap_or(false) && b.link().map(|l| l.1).unwrap_or(false)) {
        assert!(Instant::now() < deadline, "{name}: link did not come up");
        thread::sleep(Duration::from_millis(10));
    }
    (pa, pb)
}

/// One-way latency in µs (RTT / 2): p50 and p99 of the samples.
fn percentiles(mut rtts: Vec<Duration>) -> (f64, f64) {
    rtts.sort();
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6 / 2.0;
    (at(0.5), at(0.99))
}

/// Send frame `seq` (written into its first octets after the Ethernet header) on `q`.
fn send(
    q: &mut Queue,
    pool: &'static Mempool,
    out: &mut Vec<dpwarp::dpdk::Mbuf>,
    frame: usize,
    seq: u64,
) {
    let mut m = pool.alloc().expect("mbuf");
    let b = m.append(frame as u16).expect("room for the frame");
    b[..12].fill(0xff);
    b[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // IEEE local experimental ethertype
    b[14..22].copy_from_slice(&seq.to_le_bytes());
    out.push(m);
    while !out.is_empty() {
        q.tx_burst(out);
    }
}

/// Wait for the next frame on `q`; returns its sequence number.
fn recv(q: &mut Queue, inb: &mut Vec<dpwarp::dpdk::Mbuf>, stop: &AtomicU64) -> Option<u64> {
    loop {
        if inb.is_empty() {
            q.rx_burst(inb, 32);
        }
        if let Some(m) = inb.pop() {
            let d = m.data();
            let seq = d
                .get(14..22)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap()));
            return seq;
        }
        if stop.load(Ordering::Relaxed) != 0 {
            return None;
        }
    }
}

/// RTT samples of `iters` turns between (port a, CPU 0: the initiator) and (port b, CPU 1).
fn pingpong(
    eal: &'static Eal,
    name: &str,
    a: Port,
    b: Port,
    iters: usize,
    frame: usize,
    gap: Duration,
) -> Vec<Duration> {
    let (pa, pb) = bring_up(eal, name, &a, &b, 4095);
    let stop = Arc::new(AtomicU64::new(0));
    let mut qb = b.claim_queue(0).expect("queue b");
    let st = stop.clone();
    let echo = thread::spawn(move || {
        pin(1);
        dpwarp::dpdk::register_thread();
        let (mut inb, mut out) = (Vec::with_capacity(32), Vec::with_capacity(4));
        while let Some(seq) = recv(&mut qb, &mut inb, &st) {
            inb.clear();
            send(&mut qb, pb, &mut out, frame, seq);
        }
    });
    let mut qa = a.claim_queue(0).expect("queue a");
    pin(0);
    dpwarp::dpdk::register_thread();
    let (mut inb, mut out) = (Vec::with_capacity(32), Vec::with_capacity(4));
    let warm = iters / 10;
    let mut rtts = Vec::with_capacity(iters);
    for i in 0..(warm + iters) as u64 {
        let t = Instant::now();
        send(&mut qa, pa, &mut out, frame, i);
        let got = recv(&mut qa, &mut inb, &stop).expect("echo");
        inb.clear();
        assert_eq!(got, i, "{name}: frames out of order");
        if i as usize >= warm {
            rtts.push(t.elapsed());
        }
        // Paced: poll the (empty) receive queue until the next frame is due.
        while t.elapsed() < gap {
            qa.rx_burst(&mut inb, 32);
            inb.clear();
        }
    }
    stop.store(1, Ordering::Relaxed);
    echo.join().expect("echo thread");
    rtts
}

/// Full-size frames one way: the sender on CPU 1 (port `tx`) writes only the headers of each
/// frame; the receiver on CPU 0 (port `rx`) frees what arrives. Returns (frames received,
/// seconds) over the last `ms` milliseconds of the stream (after a warm-up of a tenth).
fn stream(eal: &'static Eal, name: &str, tx: Port, rx: Port, ms: u64) -> (u64, f64) {
    const FRAME: u16 = 1514;
    let (pt, _) = bring_up(eal, name, &tx, &rx, 8191);
    let stop = Arc::new(AtomicU64::new(0));
    let mut qt = tx.claim_queue(0).expect("queue tx");
    let st = stop.clone();
    let sender = thread::spawn(move || {
        pin(1);
        dpwarp::dpdk::register_thread();
        let mut out = Vec::with_capacity(32);
        while st.load(Ordering::Relaxed) == 0 {
            while out.len() < 32 {
                let Some(mut m) = pt.alloc() else { break };
                let b = m.append(FRAME).expect("room for the frame");
                b[..12].fill(0xff);
                b[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
                out.push(m);
            }
            qt.tx_burst(&mut out);
        }
    });
    let mut qr = rx.claim_queue(0).expect("queue rx");
    pin(0);
    dpwarp::dpdk::register_thread();
    let mut inb = Vec::with_capacity(32);
    let (warm, total) = (
        Duration::from_millis(ms / 10),
        Duration::from_millis(ms + ms / 10),
    );
    let t0 = Instant::now();
    let (mut n, mut start) = (0u64, None);
    loop {
        let now = Instant::now();
        if now - t0 >= total {
            break;
        }
        let got = qr.rx_burst(&mut inb, 32) as u64;
        for m in inb.drain(..) {
            debug_assert_eq!(m.pkt_len(), u32::from(FRAME));
        }
        match start {
            None if now - t0 >= warm => start = Some((now, n)),
            _ => {}
        }
        n += got;
    }
    stop.store(1, Ordering::Relaxed);
    sender.join().expect("sender thread");
    let (s, n0) = start.expect("stream ran past its warm-up");
    (n - n0, s.elapsed().as_secs_f64())
}

/// Octets of one message of the cross-core streams: the 64 KiB of the headline RDMA Write.
const XC_MSG: usize = 64 * 1024;
/// Messages in flight between the two CPUs (2 MiB: the ring stays in the caches).
const XC_SLOTS: usize = 32;

/// The most a transport that copies can stream from CPU 1 to CPU 0 on this host, with no
/// protocol and no device: CPU 1 copies a 64 KiB message from its own buffer into a ring
/// slot, CPU 0 takes the slot and copies it into its own buffer. One copy per octet on each
/// side is the least a transport between two processes' private memories does through shared
/// memory, and what kernel TCP over loopback does (`write` into the socket buffer, `read` out
/// of it); dpwarp does more (the MPA CRC on each side, and over memif the PMD's copies beside
/// its own). An RDMA Write has to land in the receiver's region, so the receiver writes
/// every octet. Returns Gbit/s over the last `ms` milliseconds (after a warm-up of a tenth).
fn cross_core(ms: u64) -> f64 {
    use std::sync::Mutex;
    // One lock per slot, taken once per 64 KiB: its cost is noise beside the copy, and the
    // slots stay plain memory without `unsafe`.
    let ring: Arc<Vec<Mutex<Box<[u8]>>>> = Arc::new(
        (0..XC_SLOTS)
            .map(|_| Mutex::new(vec![0u8; XC_MSG].into_boxed_slice()))
            .collect(),
    );
    let (made, taken) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicU64::new(0));
    let (r, m, t, st) = (ring.clone(), made.clone(), taken.clone(), stop.clone());
    let producer = thread::spawn(move || {
        pin(1);
        let src = vec![0x5au8; XC_MSG];
        let mut i = 0u64;
        while st.load(Ordering::Relaxed) == 0 {
            if i - t.load(Ordering::Acquire) >= XC_SLOTS as u64 {
                std::hint::spin_loop();
                continue;
            }
            r[i as usize % XC_SLOTS]
                .lock()
                .expect("slot")
                .copy_from_slice(&src);
            i += 1;
            m.store(i, Ordering::Release);
        }
    });
    pin(0);
    let mut dst = vec![0u8; XC_MSG];
    let (warm, total) = (
        Duration::from_millis(ms / 10),
        Duration::from_millis(ms + ms / 10),
    );
    let t0 = Instant::now();
    let (mut i, mut start) = (0u64, None);
    loop {
        if i & 15 == 0 {
            let now = Instant::now();
            if now - t0 >= total {
                break;
            }
            if start.is_none() && now - t0 >= warm {
                start = Some((now, i));
            }
        }
        if made.load(Ordering::Acquire) <= i {
            std::hint::spin_loop();
            continue;
        }
        dst.copy_from_slice(&ring[i as usize % XC_SLOTS].lock().expect("slot"));
        i += 1;
        taken.store(i, Ordering::Release);
    }
    stop.store(1, Ordering::Relaxed);
    producer.join().expect("producer thread");
    std::hint::black_box(&dst);
    let (s, i0) = start.expect("stream ran past its warm-up");
    (i - i0) as f64 * XC_MSG as f64 * 8.0 / s.elapsed().as_secs_f64() / 1e9
}

/// RTT samples of one cache line passed back and forth between CPUs 0 and 1.
fn cacheline(iters: usize) -> Vec<Duration> {
    #[repr(align(128))]
    struct Line(AtomicU64);
    let (ping, pong) = (
        Arc::new(Line(AtomicU64::new(0))),
        Arc::new(Line(AtomicU64::new(0))),
    );
    let (pi, po) = (ping.clone(), pong.clone());
    let n = iters as u64;
    let echo = thread::spawn(move || {
        pin(1);
        for i in 1..=n {
            while pi.0.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            po.0.store(i, Ordering::Release);
        }
    });
    pin(0);
    let mut rtts = Vec::with_capacity(iters);
    for i in 1..=n {
        let t = Instant::now();
        ping.0.store(i, Ordering::Release);
        while pong.0.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        rtts.push(t.elapsed());
    }
    echo.join().expect("echo thread");
    rtts
}

fn main() {
    let a = args();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if cpus < 2 {
        println!("pmd_floor: needs 2 CPUs, this host has {cpus}; nothing measured");
        return;
    }
    if a.cacheline_only {
        let (p50, p99) = percentiles(cacheline(a.iters));
        println!("pmd_floor: one cache line between CPU 0 and 1: one-way p50 {p50:.3} us, p99 {p99:.3} us");
        return;
    }
    let sock = format!("/tmp/dpwarp-pmd-floor-{}.sock", std::process::id());
    let _ = std::fs::remove_file(&sock);
    let eal_args = vec![
        "-l".to_string(),
        "0".into(),
        "--no-huge".into(),
        "-m".into(),
        "256".into(),
        "--no-shconf".into(),
        "--no-pci".into(),
        "--log-level=*:warning".into(),
        format!("--vdev=net_memif0,role=server,id=0,socket={sock},socket-abstract=no"),
        format!("--vdev=net_memif1,role=client,id=0,socket={sock},socket-abstract=no"),
        format!("--vdev=net_memif2,role=server,id=1,socket={sock},socket-abstract=no"),
        format!("--vdev=net_memif3,role=client,id=1,socket={sock},socket-abstract=no"),
    ];
    let eal = Eal::init(&eal_args).expect("EAL init");
    let mut doc = vec![
        format!("\"frame\":{}", a.frame),
        format!("\"iters\":{}", a.iters),
    ];

    let (p50, p99) = percentiles(cacheline(a.iters));
    println!(
        "pmd_floor: one cache line between CPU 0 and 1: one-way p50 {p50:.3} us, p99 {p99:.3} us"
    );
    doc.push(format!(
        "\"cacheline_p50_us\":{p50:.4},\"cacheline_p99_us\":{p99:.4}"
    ));

    let m0 = Port::by_name(eal, "net_memif0").expect("net_memif0");
    let m1 = Port::by_name(eal, "net_memif1").expect("net_memif1");
    let (p50, p99) = percentiles(pingpong(eal, "memif", m1, m0, a.iters, a.frame, a.gap));
    println!(
        "pmd_floor: net_memif, {} octet frames, no protocol: one-way p50 {p50:.3} us, p99 {p99:.3} us",
        a.frame
    );
    doc.push(format!(
        "\"memif_p50_us\":{p50:.4},\"memif_p99_us\":{p99:.4}"
    ));

    let (r0, r1) = Port::ring_pair(eal, "floor", 1, 1024).expect("net_ring pair");
    let (p50, p99) = percentiles(pingpong(eal, "ring", r0, r1, a.iters, a.frame, a.gap));
    println!(
        "pmd_floor: net_ring, {} octet frames, no protocol: one-way p50 {p50:.3} us, p99 {p99:.3} us",
        a.frame
    );
    doc.push(format!("\"ring_p50_us\":{p50:.4},\"ring_p99_us\":{p99:.4}"));

    let m2 = Port::by_name(eal, "net_memif2").expect("net_memif2");
    let m3 = Port::by_name(eal, "net_memif3").expect("net_memif3");
    let (frames, secs) = stream(eal, "mstream", m3, m2, a.stream_ms);
    let fps = frames as f64 / secs;
    let gbps = fps * 1460.0 * 8.0 / 1e9;
    println!(
        "pmd_floor: net_memif stream of 1514 octet frames, no protocol: {:.3} Mpps = {gbps:.2} \
         Gbit/s of TCP payload (1460 a frame)",
        fps / 1e6
    );
    doc.push(format!(
        "\"memif_stream_mpps\":{:.4},\"memif_stream_payload_gbps\":{gbps:.3}",
        fps / 1e6
    ));

    let copy = cross_core(a.stream_ms);
    println!(
        "pmd_floor: 64 KiB messages from CPU 1 to CPU 0 through the caches, copied once on \
         each side, no protocol, no device: {copy:.1} Gbit/s"
    );
    doc.push(format!("\"cross_core_copy_gbps\":{copy:.3}"));
    let _ = std::fs::remove_file(&sock);
    if let Some(path) = a.json {
        std::fs::write(&path, format!("{{{}}}\n", doc.join(","))).expect("write --json");
    }
}
