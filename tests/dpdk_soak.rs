//! Soak with packet faults (issue 13): two dpwarp stacks in one process on a net_ring pair,
//! every frame on both ports going through the seeded fault injector (1 % drop, 0.5 %
//! duplicate, 0.5 % reorder, 0.5 % corrupt) - received frames for the first half of the run,
//! sent frames for the second - IPv4/TCP checksums computed and verified in software, MPA CRC
//! on. A mix of Send, RDMA Write and RDMA Read on verbs QPs and
//! RPC-over-RDMA block WRITE/READ calls, every payload derived from its operation's sequence
//! number and verified, so a lost, duplicated or corrupted completion fails the test.
//!
//! Asserts: every operation completes exactly once with the right data; every corrupted frame
//! is accounted for (refused by the device's checks - Ethernet address/ethertype, IPv4 header
//! checksum, TCP checksum - or harmless because only octets nothing reads were flipped; none
//! undetected, which would have been the MPA CRC's to catch and would have terminated a
//! connection); resident memory flat (VmRSS at 10 % and at the end, growth < 32 MiB). Then one
//! checksum-neutral corruption on a fresh connection: the MPA CRC catches it (RFC 5044 §4.4),
//! the connection is terminated (RFC 5044 §8) and nothing corrupted completes.
//!
//! `DPWARP_SOAK_OPS` (default 20000, 5000 in a debug build) sets the operation count, `DPWARP_SOAK_SEED` the fault
//! seed. The long run (docs/testing.md "Soak"):
//! `DPWARP_SOAK_OPS=1000000 cargo test --release --test dpdk_soak -- --nocapture`.
//! One EAL per process: this file holds the only EAL test of its binary.

use dpwarp::verbs::smallvec;
use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::{ConnParam, Net};
use dpwarp::config::{DataplaneConfig, FaultConfig, FaultDirection};
use dpwarp::dataplane::fault::FaultStats;
use dpwarp::dataplane::Dataplane;
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::Registry;
use dpwarp::rpc::server::{RdmaServer, ServerConfig};
use dpwarp::verbs::{
    sge, Access, Cq, Device, Mr, Opcode, Qp, QpInitAttr, QpTerminate, RecvWr, SendWr, WcOpcode,
    WcStatus,
};
use dpwarp::wire::terminate::TermCause;

/// Verbs connections driven at once.
const CONNS: u64 = 4;
/// Largest payload of one operation.
const MAXSZ: usize = 4000;
/// Rounds (Write + Send + Read) in flight per connection: 8 RDMA Reads at most, below the
/// default ORD of 16.
const WINDOW: usize = 8;
/// Buffer slots per connection (a slot is reused only once its round has completed).
const SLOTS: usize = 32;
/// Receive buffers per server QP.
const RQ: usize = 64;
/// One operation in this many is an RPC call.
const RPC_SHARE: u64 = 10;
/// RPC clients (connections), each with its own 64 blocks of the store.
const RPC_CLIENTS: u64 = 4;
/// RPC calls in flight per client.
const RPC_BATCH: u64 = 16;
/// RPC block size.
const RPC_BLK: usize = 4096;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Abort the process if the test runs longer than `secs` (a hang must fail, not block CI).
fn watchdog(secs: u64) {
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(secs));
        eprintln!("dpdk_soak: still running after {secs} s; aborting");
        std::process::abort();
    });
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Payload length of round `r` of connection `c` (16..=MAXSZ).
fn len_of(c: u64, r: u64) -> usize {
    16 + (mix(c << 48 ^ r) % (MAXSZ as u64 - 15)) as usize
}

/// The payload of round `r` of connection `c`: `r`, `c`, then bytes derived from both.
fn payload(c: u64, r: u64) -> Vec<u8> {
    let len = len_of(c, r);
    let mut v = Vec::with_capacity(len + 8);
    v.extend_from_slice(&r.to_le_bytes());
    v.extend_from_slice(&c.to_le_bytes());
    let mut s = mix(r ^ (c << 40) ^ 0x5eed);
    while v.len() < len {
        s = mix(s);
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// RPC block `k`'s contents.
fn rpc_block(k: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(RPC_BLK);
    let mut s = mix(k ^ 0xb10c);
    while v.len() < RPC_BLK {
        s = mix(s);
        v.extend_from_slice(&s.to_le_bytes());
    }
    v
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn config(ring: &str, seed: u64) -> DataplaneConfig {
    let port = |side: &str, n: u8, seed: u64| {
        format!(
            "[[port]]\ndevice = \"ring:{ring}:{side}\"\nip = \"10.90.0.{n}/24\"\n\
             mac = \"02:00:00:90:00:0{n}\"\nmbufs = 16383\nchecksum = \"software\"\n\
             [port.faults]\nseed = {seed}\ndrop = 0.01\nduplicate = 0.005\nreorder = 0.005\n\
             corrupt = 0.005\ndirection = \"rx\"\n"
        )
    };
    let text = format!(
        "[eal]\nargs = [\"-l\", \"0\", \"--no-huge\", \"-m\", \"512\", \"--no-shconf\", \
         \"--no-pci\", \"--log-level=*:warning\"]\n{}{}\
         [worker]\nbatch = 32\nspin_us = 0\n[tcp]\nrx_buffer = 262144\ntx_buffer = 262144\n",
        port("a", 1, seed),
        port("b", 2, seed ^ 0xb)
    );
    DataplaneConfig::parse(&text).unwrap()
}

/// The soak's faults in `direction`.
fn faults(seed: u64, direction: FaultDirection) -> FaultConfig {
    FaultConfig {
        seed,
        drop: 0.01,
        duplicate: 0.005,
        reorder: 0.005,
        corrupt: 0.005,
        direction,
        ..FaultConfig::default()
    }
}

fn conn_param(private_data: Vec<u8>) -> ConnParam {
    ConnParam {
        private_data,
        timeout: Duration::from_secs(60),
        ..ConnParam::default()
    }
}

/// The server side of the verbs connections: receives every Send and checks that they come in
/// order, once each, with the right bytes; serves the Writes and Reads from `target`.
fn verbs_server(
    ep: dpwarp::dataplane::Endpoint,
    pd: dpwarp::verbs::Pd,
    rounds: u64,
    ready: Arc<AtomicBool>,
) -> u64 {
    let listener = ep.listen(4791).unwrap();
    ready.store(true, Ordering::Release);
    let cq = Cq::new(CONNS as usize * RQ * 2);
    let mut qps = Vec::new();
    let mut bufs = Vec::new();
    for _ in 0..CONNS {
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        let recv = pd.reg_mr(RQ * MAXSZ, Access::LOCAL_WRITE);
        let target = pd.reg_mr(
            SLOTS * MAXSZ,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        let req = listener.get_request(Duration::from_secs(60)).unwrap();
        // The client says which of its connections this is (first private data octet).
        let c = u64::from(req.peer.private_data[0]);
        for k in 0..RQ {
            qp.post_recv(RecvWr {
                wr_id: c << 32 | k as u64,
                sg_list: smallvec![sge(&recv, k * MAXSZ, MAXSZ)],
            })
            .unwrap();
        }
        let mut adv = target.addr().to_be_bytes().to_vec();
        adv.extend_from_slice(&target.stag().to_be_bytes());
        req.accept(&qp, &conn_param(adv)).unwrap();
        qps.push((c, qp));
        bufs.push((c, recv, target));
    }
    let recv_of = |c: u64| -> &Mr { &bufs.iter().find(|b| b.0 == c).unwrap().1 };
    let qp_of = |c: u64| -> &Qp { &qps.iter().find(|q| q.0 == c).unwrap().1 };
    let mut expect = vec![0u64; CONNS as usize];
    let mut got = 0u64;
    let mut buf = vec![0u8; MAXSZ];
    while got < rounds * CONNS {
        let wc = cq
            .wait(Duration::from_secs(120))
            .expect("server: no Send for 120 s");
        assert_eq!(wc.status, WcStatus::Success, "server: {wc:?}");
        assert_eq!(wc.opcode, WcOpcode::Recv);
        let (c, k) = (wc.wr_id >> 32, (wc.wr_id & 0xffff_ffff) as usize);
        let n = wc.byte_len as usize;
        assert!((16..=MAXSZ).contains(&n), "server: Send of {n} octets");
        recv_of(c).read_at(k * MAXSZ, &mut buf[..n]);
        let r = u64::from_le_bytes(buf[0..8].try_into().unwrap());
        assert_eq!(
            r, expect[c as usize],
            "connection {c}: Send {r} arrived when {} was due (lost, duplicated or reordered)",
            expect[c as usize]
        );
        assert_eq!(
            buf[..n],
            payload(c, r)[..],
            "connection {c}: Send {r} corrupted"
        );
        expect[c as usize] += 1;
        got += 1;
        qp_of(c)
            .post_recv(RecvWr {
                wr_id: wc.wr_id,
                sg_list: smallvec![sge(recv_of(c), k * MAXSZ, MAXSZ)],
            })
            .unwrap();
    }
    for (_, qp) in &qps {
        assert!(
            qp.wait_closed(Duration::from_secs(60)),
            "client did not disconnect"
        );
    }
    // Nothing completed after the last expected Send (a duplicate would show here).
    if let Some(wc) = cq.poll_one() {
        assert_ne!(
            wc.status,
            WcStatus::Success,
            "server: extra completion {wc:?}"
        );
    }
    got
}

/// One client connection's state.
struct ClientConn {
    c: u64,
    qp: Qp,
    src: Mr,
    dst: Mr,
    raddr: u64,
    rkey: u32,
    next: u64,
    done: u64,
    /// Rounds in flight: the kinds (bit 0 Write, 1 Send, 2 Read) not yet completed.
    pending: HashMap<u64, u8>,
    slot_busy: Vec<bool>,
}

impl ClientConn {
    fn post_round(&mut self) {
        let r = self.next;
        let s = (r % SLOTS as u64) as usize;
        assert!(!self.slot_busy[s]);
        self.slot_busy[s] = true;
        let p = payload(self.c, r);
        self.src.write_at(s * MAXSZ, &p);
        let id = |kind: u64| self.c << 56 | r << 2 | kind;
        let remote = self.raddr + (s * MAXSZ) as u64;
        for (kind, opcode, mr) in [
            (
                0,
                Opcode::Write {
                    remote_addr: remote,
                    rkey: self.rkey,
                },
                &self.src,
            ),
            (1, Opcode::Send, &self.src),
            (
                2,
                Opcode::Read {
                    remote_addr: remote,
                    rkey: self.rkey,
                },
                &self.dst,
            ),
        ] {
            self.qp
                .post_send(SendWr {
                    wr_id: id(kind),
                    opcode,
                    sg_list: smallvec![sge(mr, s * MAXSZ, p.len())],
                    signaled: true,
                })
                .unwrap();
        }
        self.pending.insert(r, 0b111);
        self.next += 1;
    }

    /// A completion of this connection: exactly once per work request, Reads verified.
    fn complete(&mut self, wr_id: u64, opcode: WcOpcode, buf: &mut [u8]) {
        let (r, kind) = ((wr_id >> 2) & ((1 << 54) - 1), wr_id & 3);
        let want = [WcOpcode::Write, WcOpcode::Send, WcOpcode::Read][kind as usize];
        assert_eq!(opcode, want, "connection {}: {wr_id:#x}", self.c);
        let mask = self.pending.get_mut(&r).unwrap_or_else(|| {
            panic!(
                "connection {}: completion for round {r} not in flight (duplicate?)",
                self.c
            )
        });
        assert!(
            *mask & (1 << kind) != 0,
            "connection {}: second completion of round {r} kind {kind}",
            self.c
        );
        *mask &= !(1 << kind);
        let s = (r % SLOTS as u64) as usize;
        if kind == 2 {
            // The Read brings back what this round's Write put there.
            let n = len_of(self.c, r);
            self.dst.read_at(s * MAXSZ, &mut buf[..n]);
            assert_eq!(
                buf[..n],
                payload(self.c, r)[..],
                "connection {}: RDMA Read of round {r} returned other data",
                self.c
            );
        }
        if *mask == 0 {
            self.pending.remove(&r);
            self.slot_busy[s] = false;
            self.done += 1;
        }
    }
}

/// RPC calls of client `id`: WRITE block k, READ it back into a write chunk, verify. Returns
/// calls made.
fn rpc_calls(ep: dpwarp::dataplane::Endpoint, remote: SocketAddrV4, id: u64, calls: u64) -> u64 {
    let cfg = ClientConfig {
        timeout: Duration::from_secs(120),
        conn: conn_param(Vec::new()),
        ..ClientConfig::default()
    };
    let mut cl = RdmaClient::connect(&Net::from(ep.clone()), SocketAddr::from(remote), cfg)
        .expect("RPC client connects");
    let opts = CallOpts {
        write_chunks: vec![RPC_BLK],
        reply_chunk: None,
        segments: 0,
    };
    // Pipelined in batches of RPC_BATCH: WRITE blocks k..k+RPC_BATCH, then READ them back.
    let mut made = 0;
    let mut k = 0u64;
    while made < calls {
        let batch = ((calls - made) / 2).clamp(1, RPC_BATCH);
        let mut xids = Vec::new();
        for j in k..k + batch {
            let x = cl
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_WRITE,
                    block::write_args((id * 64 + j % 64) * RPC_BLK as u64, rpc_block(id << 40 | j)),
                    &CallOpts::default(),
                )
                .expect("RPC WRITE");
            xids.push(x);
        }
        for x in xids.drain(..) {
            let rep = cl.wait(x).expect("RPC WRITE reply");
            assert_eq!(
                block::decode_write(&mut rep.results().unwrap()).unwrap(),
                Ok(RPC_BLK as u32)
            );
        }
        for j in k..k + batch {
            let x = cl
                .submit(
                    BLOCK_PROG,
                    BLOCK_VERS,
                    block::PROC_READ,
                    block::read_args((id * 64 + j % 64) * RPC_BLK as u64, RPC_BLK as u32),
                    &opts,
                )
                .expect("RPC READ");
            xids.push(x);
        }
        for (j, x) in (k..k + batch).zip(xids.drain(..)) {
            let rep = cl.wait(x).expect("RPC READ reply");
            assert_eq!(
                block::decode_read(&mut rep.results().unwrap()).unwrap(),
                Ok(rpc_block(id << 40 | j)),
                "RPC client {id}: READ of block {j} returned other data"
            );
        }
        made += 2 * batch;
        k += batch;
    }
    assert_eq!(cl.stats.over_grant, 0);
    made
}

fn fault_totals(dp: &Dataplane) -> (FaultStats, u64) {
    let mut f = FaultStats::default();
    let mut crc = 0;
    for s in dp.stats() {
        f.add(&s.device.faults);
        crc += s.mpa_crc_errors;
    }
    (f, crc)
}

#[test]
fn soak_with_packet_faults() {
    // The short run of the normal test suite: 20000 operations in a release build (about 3 s),
    // 5000 in a debug build (whose unoptimised CRC and smoltcp take about 1.5 ms of CPU per
    // operation).
    let short = if cfg!(debug_assertions) {
        5_000
    } else {
        20_000
    };
    let ops = env_u64("DPWARP_SOAK_OPS", short).max(100);
    let seed = env_u64("DPWARP_SOAK_SEED", 13);
    watchdog(env_u64("DPWARP_SOAK_TIMEOUT", 600 + ops / 50));
    let ring = format!("soak{}", std::process::id() % 100000);
    let cfg = config(&ring, seed);
    // The config keys say the same as the API's FaultConfig.
    assert_eq!(cfg.ports[0].faults, Some(faults(seed, FaultDirection::Rx)));
    let dp = Dataplane::start(&cfg).expect("dataplane");
    let server_ep = dp.endpoint(0).unwrap();
    let client_ep = dp.endpoint(1).unwrap();
    let dev = Device::open();
    let pd = dev.alloc_pd();

    // The operation budget: RPC calls and verbs rounds of three operations each.
    let rpc_ops = (ops / RPC_SHARE) & !1;
    let rounds = (ops - rpc_ops) / 3 / CONNS;
    let verbs_ops = rounds * 3 * CONNS;
    let total_ops = verbs_ops + rpc_ops;
    let t0 = Instant::now();

    // RPC-over-RDMA server on the server port, its client on the client port.
    let store = Arc::new(BlockStore::memory(RPC_CLIENTS as usize * 64 * RPC_BLK));
    let mut reg = Registry::new();
    block::register(&mut reg, store.clone());
    let srv = RdmaServer::new(reg, ServerConfig::default());
    let rpc_h = srv
        .listen(
            &Net::from(server_ep.clone()),
            SocketAddr::from((server_ep.ip(), 20049)),
        )
        .expect("RPC listen");
    let rpc_remote = SocketAddrV4::new(server_ep.ip(), 20049);
    let rpc: Vec<_> = (0..RPC_CLIENTS)
        .map(|id| {
            let ep = client_ep.clone();
            // WRITE + READ pairs: an even number per client, the rest to client 0.
            let pairs = rpc_ops / 2 / RPC_CLIENTS;
            let extra = if id == 0 {
                rpc_ops / 2 % RPC_CLIENTS
            } else {
                0
            };
            let calls = 2 * (pairs + extra);
            thread::spawn(move || rpc_calls(ep, rpc_remote, id, calls))
        })
        .collect();

    let ready = Arc::new(AtomicBool::new(false));
    let (sep, spd, sready) = (server_ep.clone(), pd.clone(), ready.clone());
    let server = thread::spawn(move || verbs_server(sep, spd, rounds, sready));
    while !ready.load(Ordering::Acquire) {
        thread::sleep(Duration::from_millis(5));
    }

    // Client connections.
    let cq = Cq::new(CONNS as usize * WINDOW * 3 * 2);
    let mut conns = Vec::new();
    for c in 0..CONNS {
        let qp = Qp::new(&pd, &QpInitAttr::new(&cq));
        let remote = SocketAddrV4::new(server_ep.ip(), 4791);
        let neg = client_ep
            .connect(remote, &qp, &conn_param(vec![c as u8]))
            .expect("connect");
        assert!(neg.crc_tx && neg.crc_rx, "MPA CRC on");
        let pdata = &neg.peer_private_data;
        conns.push(ClientConn {
            c,
            qp,
            src: pd.reg_mr(SLOTS * MAXSZ, Access::LOCAL_WRITE),
            dst: pd.reg_mr(SLOTS * MAXSZ, Access::LOCAL_WRITE),
            raddr: u64::from_be_bytes(pdata[0..8].try_into().unwrap()),
            rkey: u32::from_be_bytes(pdata[8..12].try_into().unwrap()),
            next: 0,
            done: 0,
            pending: HashMap::new(),
            slot_busy: vec![false; SLOTS],
        });
    }

    let mut ops_done = 0u64;
    let mut rss_10 = None;
    let mut rx_half = None;
    let mut buf = vec![0u8; MAXSZ];
    let mut last_report = Instant::now();
    while conns.iter().any(|k| k.done < rounds) {
        for k in conns.iter_mut() {
            while k.next < rounds
                && k.pending.len() < WINDOW
                && !k.slot_busy[(k.next % SLOTS as u64) as usize]
            {
                k.post_round();
            }
        }
        let Some(wc) = cq.wait(Duration::from_secs(120)) else {
            panic!(
                "no completion for 120 s; rounds done {:?}",
                conns.iter().map(|k| k.done).collect::<Vec<_>>()
            );
        };
        let c = wc.wr_id >> 56;
        assert_eq!(wc.status, WcStatus::Success, "connection {c}: {wc:?}");
        conns[c as usize].complete(wc.wr_id, wc.opcode, &mut buf);
        ops_done += 1;
        let n = ops_done;
        if rss_10.is_none() && n >= verbs_ops / 10 {
            rss_10 = Some(vm_rss_kib());
        }
        if rx_half.is_none() && n >= verbs_ops / 2 {
            // Halfway: faults move from received to sent frames. Both ports go through
            // fault-free injectors first (they still check every frame), so that no frame
            // corrupted on tx meets an rx fault (a drop would leave it uncounted).
            for ep in [&server_ep, &client_ep] {
                ep.set_faults(Some(FaultConfig::default())).unwrap();
            }
            rx_half = Some(fault_totals(&dp).0);
            server_ep
                .set_faults(Some(faults(seed ^ 0xa, FaultDirection::Tx)))
                .unwrap();
            client_ep
                .set_faults(Some(faults(seed ^ 0xb, FaultDirection::Tx)))
                .unwrap();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            eprintln!(
                "dpdk_soak: {n} of {verbs_ops} verbs operations after {:.0} s",
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let verbs_time = t0.elapsed();
    // Nothing more completes: no duplicate, nothing left over.
    thread::sleep(Duration::from_millis(50));
    assert!(cq.poll_one().is_none(), "extra client completion");
    for k in &conns {
        assert!(k.pending.is_empty());
        assert_eq!(k.done, rounds);
        k.qp.disconnect();
    }
    let received = server.join().expect("server verified every Send");
    assert_eq!(received, rounds * CONNS);
    let rpc_made: u64 = rpc
        .into_iter()
        .map(|t| t.join().expect("RPC calls verified"))
        .sum();
    let rpc_time = t0.elapsed();
    assert_eq!(rpc_made, rpc_ops);
    let elapsed = t0.elapsed();
    let rss_end = vm_rss_kib();
    let rss_10 = rss_10.expect("RSS sampled at 10 %");
    drop(conns);
    rpc_h.stop();

    let (f, crc) = fault_totals(&dp);
    let h = rx_half.expect("faults moved to tx halfway");
    let stats = dp.stats();
    println!(
        "dpdk_soak: {total_ops} operations ({} Send, {} RDMA Write, {} RDMA Read over {CONNS} \
         QPs, {rpc_ops} RPC calls on {RPC_CLIENTS} connections) in {:.1} s ({:.0} ops/s), seed {seed}",
        rounds * CONNS,
        rounds * CONNS,
        rounds * CONNS,
        elapsed.as_secs_f64(),
        total_ops as f64 / elapsed.as_secs_f64()
    );
    println!(
        "dpdk_soak: verbs operations done after {:.1} s, RPC calls after {:.1} s",
        verbs_time.as_secs_f64(),
        rpc_time.as_secs_f64()
    );
    // The second half's share: counters since the switch.
    let tx_half = [
        f.tx_frames - h.tx_frames,
        f.dropped - h.dropped,
        f.duplicated - h.duplicated,
        f.reordered - h.reordered,
        f.corrupted - h.corrupted,
    ];
    println!(
        "dpdk_soak: frames through the faults {} (rx half {}, tx half {}): dropped {} ({} on tx), \
         duplicated {} ({}), reordered {} ({}), corrupted {} ({})",
        f.rx_frames + f.tx_frames,
        f.rx_frames,
        f.tx_frames,
        f.dropped,
        tx_half[1],
        f.duplicated,
        tx_half[2],
        f.reordered,
        tx_half[3],
        f.corrupted,
        tx_half[4]
    );
    println!(
        "dpdk_soak: corrupted frames caught: Ethernet address/type {}, IPv4 header checksum {}, \
         TCP checksum {}; harmless (only octets nothing reads) {}; undetected {}; \
         MPA CRC errors {crc}; frames refused by the device checks {}",
        f.corrupt_caught_l2,
        f.corrupt_caught_ipv4,
        f.corrupt_caught_tcp,
        f.corrupt_harmless,
        f.corrupt_undetected,
        f.rx_rejected()
    );
    println!(
        "dpdk_soak: VmRSS {rss_10} KiB at 10 %, {rss_end} KiB at the end ({:+} KiB)",
        rss_end as i64 - rss_10 as i64
    );
    for s in &stats {
        let d = &s.device;
        println!(
            "dpdk_soak: worker rx {} tx {} tx_no_mbuf {} rx_dropped {} tcp segments {} \
             (retransmitted: fast {}, timeout {}; loss probes {}); tagged FPDUs placed \
             ahead of a hole {} ({} octets)",
            d.rx_packets,
            d.tx_packets,
            d.tx_no_mbuf,
            d.rx_dropped,
            d.tx_tcp_segments,
            s.tcp_fast_retransmits,
            s.tcp_timeout_retransmits,
            s.tcp_loss_probes,
            s.ooo_placed_fpdus,
            s.ooo_placed_octets
        );
    }
    // Out-of-order placement (on by default) ran under the faults, and every completion
    // above was still exact.
    assert!(
        stats.iter().map(|s| s.ooo_placed_fpdus).sum::<u64>() > 0,
        "no FPDU placed ahead of a hole"
    );

    // Faults of every kind happened in both halves (5000 operations make about 15000 frames).
    assert_eq!(h.tx_frames, 0);
    assert!(
        h.dropped > 0 && h.duplicated > 0 && h.reordered > 0 && h.corrupted > 0,
        "rx half: {h:?}"
    );
    assert!(tx_half.iter().all(|&k| k > 0), "tx half: {tx_half:?}");
    // Every corrupted frame accounted for: refused by a check, or harmless; none undetected
    // (single flipped octets cannot pass the Internet checksum, RFC 1071), so no MPA CRC error
    // and no connection lost. The receiving devices refused exactly the frames the injectors
    // corrupted and classified as caught (the ring itself corrupts nothing), so the checks in
    // the data path did the refusing.
    assert_eq!(
        f.corrupted,
        f.corrupt_caught() + f.corrupt_harmless + f.corrupt_undetected
    );
    assert_eq!((f.corrupt_undetected, crc), (0, 0), "{f:?}");
    assert_eq!(f.rx_rejected(), f.corrupt_caught(), "{f:?}");
    assert!(f.corrupt_caught() > 0);
    for s in &stats {
        assert_eq!((s.device.tx_no_mbuf, s.device.rx_dropped), (0, 0), "{s:?}");
    }
    // Resident memory flat.
    assert!(
        rss_end < rss_10 + 32 * 1024,
        "VmRSS grew from {rss_10} KiB to {rss_end} KiB"
    );

    // --- A checksum-neutral corruption: the MPA CRC catches it and the connection ends -------
    server_ep.set_faults(None).unwrap();
    client_ep.set_faults(None).unwrap();
    let listener = server_ep.listen(4792).unwrap();
    let scq = Cq::new(16);
    let sqp = Qp::new(&pd, &QpInitAttr::new(&scq));
    let srecv = pd.reg_mr(MAXSZ, Access::LOCAL_WRITE);
    sqp.post_recv(RecvWr {
        wr_id: 7,
        sg_list: smallvec![sge(&srecv, 0, MAXSZ)],
    })
    .unwrap();
    let acceptor = thread::spawn(move || {
        let req = listener.get_request(Duration::from_secs(30)).unwrap();
        req.accept(&sqp, &conn_param(Vec::new())).unwrap();
        sqp
    });
    let ccq = Cq::new(16);
    let cqp = Qp::new(&pd, &QpInitAttr::new(&ccq));
    client_ep
        .connect(
            SocketAddrV4::new(server_ep.ip(), 4792),
            &cqp,
            &conn_param(Vec::new()),
        )
        .unwrap();
    let sqp = acceptor.join().unwrap();
    let (before, crc_before) = fault_totals(&dp);
    server_ep
        .set_faults(Some(FaultConfig {
            seed,
            corrupt_neutral: 1.0,
            direction: FaultDirection::Rx,
            ..FaultConfig::default()
        }))
        .unwrap();
    let src = pd.reg_mr(MAXSZ, Access::LOCAL_WRITE);
    src.write_at(0, &payload(9, 1));
    cqp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, len_of(9, 1))],
        signaled: true,
    })
    .unwrap();
    assert!(
        sqp.wait_closed(Duration::from_secs(30)),
        "the server kept a connection whose FPDU failed its CRC"
    );
    assert_eq!(
        sqp.terminate_cause(),
        Some(QpTerminate::Sent(TermCause::MPA_CRC))
    );
    // The corrupted Send never completes successfully on the server.
    while let Some(wc) = scq.poll_one() {
        assert_ne!(
            wc.status,
            WcStatus::Success,
            "corrupted Send delivered: {wc:?}"
        );
    }
    assert!(cqp.wait_closed(Duration::from_secs(30)));
    assert_eq!(
        cqp.terminate_cause(),
        Some(QpTerminate::Received(TermCause::MPA_CRC))
    );
    server_ep.set_faults(None).unwrap();
    let (after, crc_after) = fault_totals(&dp);
    println!(
        "dpdk_soak: checksum-neutral corruption: {} frame(s) corrupted, MPA CRC errors {}",
        after.corrupted_neutral - before.corrupted_neutral,
        crc_after - crc_before
    );
    assert!(after.corrupted_neutral > before.corrupted_neutral);
    assert_eq!(crc_after - crc_before, 1);
    // Nothing the checksums refused: the neutral corruption passed them.
    assert_eq!(after.rx_rejected(), before.rx_rejected());
}
