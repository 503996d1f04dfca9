//! The DPDK path's work per message, counted in instructions and atomic read-modify-writes
//! (scripts/instructions runs this under callgrind): both ends of a net_ring pair in
//! one process, both workers driven in turn from one thread (`WorkerMode::Driven`), so that
//! under callgrind the same code gives the same count whatever else the machine runs. Wall
//! clock figures on these shared hosts swing by more than most changes to the path are worth
//! (docs/testing.md "Measurements"); an instruction count does not, and it says where the
//! work goes (which phase, which function) with `callgrind_annotate`.
//!
//! ```text
//! scripts/instructions                      # builds this, runs it under callgrind, prints
//! cargo bench --bench path_instructions -- [--test send|write] [--iters N] [--mtu M] [--no-crc]
//! ```
//!
//! - `--test send`: `--iters` (default 2000) 64 B Send ping-pongs, each Send's receive posted
//!   before it, no signaled Sends (as dpperf's send_lat). What a round trip costs: two
//!   messages, each through the sender's post, framing, smoltcp egress and tx burst and the
//!   receiver's rx burst, smoltcp ingress, deframing, placement and completion, plus the
//!   passes that find nothing in between (the bench prints the passes per message). Each
//!   end's loop polls its CQ, which in the driven mode runs a pass of its worker when empty.
//! - `--test idle`: `--iters` (default 10000) passes of each worker that find nothing (the
//!   connection open, nothing posted): what a pass costs by itself.
//! - `--test write`: `--iters` (default 64) RDMA Writes of 64 KiB, 32 in flight, signaled,
//!   then a Send the receiver waits for: per Write and per TCP segment, both ends. The
//!   receiver is polled until it finds nothing after each pass of the sender (it keeps up).
//! - `--test nfs_read`, `--test nfs_getattr`: `--iters` (default 2000) NFSv3 calls over
//!   RPC-over-RDMA, [`NFS_WINDOW`] in flight, from dpwarp's RPC client to the NFS target
//!   (`nfs::procs` on an `Export` of a temporary directory, the connection served on the
//!   server worker's driver, `RdmaServer::serve_request`): 4 KiB READs of a file in the page
//!   cache (the reply's data RDMA-Written into the call's write chunk) or GETATTRs, each
//!   answered at once on the driver (docs/nfs.md "Calls answered at once"). Per call, both
//!   ends: the client's call and reply handling, both workers' passes, the server's RPC and
//!   NFS work. User-space instructions only: the kernel's part of the target's `preadv2` and
//!   `fstat` is not counted (callgrind sees no kernel code). The caller is root (the file's
//!   owner, as nfs-bench's), or `--uid N`.
//!
//! The work measured runs inside `measured_send` / `measured_write` only (after a warm-up
//! outside them: the first connection's ARP, slow start, lazy initialisation); the script
//! gives callgrind `--toggle-collect` on them and divides by the messages. Run alone (no
//! callgrind) it prints the same counters and the wall time, which on one thread driving
//! both ends is not a latency figure.
//!
//! Needs root (DPDK, `--no-huge`), like benches/dp_ring.

use dpwarp::verbs::smallvec;
use std::net::SocketAddrV4;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::{ConnParam, Net};
use dpwarp::config::DataplaneConfig;
use dpwarp::dataplane::{Dataplane, Driver, WorkerMode, WorkerStats};
use dpwarp::nfs::export::{Export, HandleKey};
use dpwarp::nfs::exports::ClientList;
use dpwarp::nfs::xdr::parse_post_op_attr;
use dpwarp::nfs::{proc_, procs, NFS_PROG, NFS_V3};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig, ServerStats, SteppedReactor};
use dpwarp::verbs::{
    sge, Access, Cq, Device, Mr, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
};
use dpwarp::wire::oncrpc::{Auth, AuthSys};
use std::sync::{Arc, Mutex};

const PING: usize = 64;
const WRITE: usize = 65536;
const WINDOW: usize = 32;

struct Args {
    test: String,
    iters: Option<usize>,
    mtu: u16,
    crc: bool,
    /// The NFS caller's AUTH_SYS uid and gid (`nfs_*`; the file is root's, mode 0644).
    uid: u32,
}

fn args() -> Args {
    let mut a = Args {
        test: "send".into(),
        iters: None,
        mtu: 1500,
        crc: true,
        uid: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().expect("a value after the option");
        match k.as_str() {
            "--test" => a.test = v(),
            "--iters" => a.iters = Some(v().parse().expect("--iters N")),
            "--mtu" => a.mtu = v().parse().expect("--mtu N"),
            "--no-crc" => a.crc = false,
            "--uid" => a.uid = v().parse().expect("--uid N"),
            // What cargo and test runners pass to a harness-less bench (benches/dp_ring).
            "--bench" | "--exact" | "--ignored" | "--nocapture" => {}
            "--format" => {
                v();
            }
            "--list" => std::process::exit(0),
            other => {
                eprintln!("path_instructions: unknown option {other} (see the module doc)");
                std::process::exit(2)
            }
        }
    }
    if !["send", "write", "idle", "nfs_read", "nfs_getattr"].contains(&a.test.as_str()) {
        eprintln!("path_instructions: --test send|write|idle|nfs_read|nfs_getattr");
        std::process::exit(2)
    }
    a
}

fn config(mtu: u16) -> DataplaneConfig {
    let ring = format!("dpwinstr{}", std::process::id() % 100000);
    let path = format!("{}/configs/net_ring.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("configs/net_ring.toml");
    let mut cfg = DataplaneConfig::parse(&text.replace("dpwring", &ring)).expect("net_ring config");
    for p in cfg.ports.iter_mut() {
        // One thread drives both workers: no worker is pinned anywhere.
        p.cores = vec![];
        p.mtu = mtu;
    }
    cfg.tcp.rx_buffer = 2 << 20;
    cfg.tcp.tx_buffer = 2 << 20;
    cfg
}

/// One end of the connection, as the measured loops use it.
struct End {
    driver: Driver,
    qp: Qp,
    cq: Cq,
    buf: Mr,
}

/// A connection between the two ports: the server's end accepted on a thread of its own (a
/// blocking accept polls only its own worker), then handed over, so that from here one thread
/// drives both. Returns (server, client, the server's Write target (addr, stag)).
fn connect(dp: &Dataplane, crc: bool) -> (End, End, (u64, u32)) {
    let (sd, cd) = (dp.port_drivers(0)[0].clone(), dp.port_drivers(1)[0].clone());
    let (server_ep, client_ep) = (dp.endpoint(0).unwrap(), dp.endpoint(1).unwrap());
    let server_ip = server_ep.ip();
    let param = ConnParam {
        crc,
        ..ConnParam::default()
    };
    let sparam = param.clone();
    let dev = Device::open();
    let spd = dev.alloc_pd();
    let pd = dev.alloc_pd();
    let (ready_tx, ready_rx) = mpsc::channel();
    let sd2 = sd.clone();
    let server = thread::spawn(move || {
        let (cq, qp) = driven_cq_qp(&spd, &sd2);
        let buf = spd.reg_mr(WRITE, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        // The server keeps one receive posted from here on: each test posts the next as it
        // takes one.
        qp.post_recv(RecvWr {
            wr_id: 0,
            sg_list: smallvec![sge(&buf, 0, PING)],
        })
        .unwrap();
        let listener = server_ep.listen(7100).unwrap();
        ready_tx.send(()).unwrap();
        let req = listener.get_request(Duration::from_secs(10)).unwrap();
        req.accept(&qp, &sparam).unwrap();
        let target = (buf.addr(), buf.stag());
        (
            End {
                driver: sd,
                qp,
                cq,
                buf,
            },
            target,
        )
    });
    let (cq, qp) = driven_cq_qp(&pd, &cd);
    let buf = pd.reg_mr(WRITE, Access::LOCAL_WRITE);
    buf.write_at(0, &vec![0x5a; WRITE]);
    ready_rx.recv().unwrap();
    let neg = client_ep
        .connect(SocketAddrV4::new(server_ip, 7100), &qp, &param)
        .expect("connect");
    assert_eq!(neg.crc_tx, crc, "MPA CRC as asked");
    let (s, target) = server.join().unwrap();
    let c = End {
        driver: cd,
        qp,
        cq,
        buf,
    };
    (s, c, target)
}

/// A CQ and a QP driven as dpperf drives them: polling the CQ while it is empty runs a pass
/// of the worker (`Cq::drive_with`), posting a send WR rings the doorbell, the worker's
/// transmit phases (`Qp::drive_with`).
fn driven_cq_qp(pd: &dpwarp::verbs::Pd, d: &Driver) -> (Cq, Qp) {
    let cq = Cq::new(256);
    let (d1, d2) = (d.clone(), d.clone());
    cq.drive_with(std::sync::Arc::new(move || d1.poll()));
    let qp = Qp::new(pd, &QpInitAttr::new(&cq));
    qp.drive_with(std::sync::Arc::new(move || d2.poll_transmit()));
    (cq, qp)
}

fn post_recv(e: &End, len: usize) {
    e.qp.post_recv(RecvWr {
        wr_id: 0,
        sg_list: smallvec![sge(&e.buf, 0, len)],
    })
    .unwrap();
}

fn post_send(e: &End, len: usize, signaled: bool) {
    e.qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&e.buf, 0, len)],
        signaled,
    })
    .unwrap();
}

/// A receive completed on `e`'s CQ now? Any other completion is taken too; every one must be
/// a success.
fn took_recv(e: &End) -> bool {
    while let Some(wc) = e.cq.poll_one() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        if wc.opcode == WcOpcode::Recv {
            return true;
        }
    }
    false
}

/// `n` 64 B Send round trips. Each end's CQ poll drives its worker when it finds nothing
/// (`Cq::poll_one` in the driven mode): one pass of each worker per turn of the loop, as an
/// application's own polling loop makes them.
fn send_round_trips(s: &End, c: &End, n: usize) {
    for _ in 0..n {
        post_recv(c, PING);
        post_send(c, PING, false);
        loop {
            if took_recv(s) {
                post_recv(s, PING);
                post_send(s, PING, false);
            }
            if took_recv(c) {
                break;
            }
        }
    }
}

/// `n` 64 KiB RDMA Writes (`WINDOW` in flight), then a Send the server waits for. The server
/// is polled until it finds nothing after each pass of the client: a receiver that keeps up,
/// as on two cores, so that frames do not pile up unreceived (each would hold its pin on the
/// sender's ring: `TxPins`).
fn writes(s: &End, c: &End, (raddr, rkey): (u64, u32), n: usize) {
    let (mut posted, mut done) = (0usize, 0usize);
    let mut sent = false;
    loop {
        while posted < n && posted - done < WINDOW {
            c.qp.post_send(SendWr {
                wr_id: posted as u64,
                opcode: Opcode::Write {
                    remote_addr: raddr,
                    rkey,
                },
                sg_list: smallvec![sge(&c.buf, 0, WRITE)],
                signaled: true,
            })
            .unwrap();
            posted += 1;
        }
        // Drives the client's worker when nothing is queued.
        while let Some(wc) = c.cq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Write {
                done += 1;
            }
        }
        if done == n && !sent {
            post_send(c, 8, false);
            sent = true;
        }
        for _ in 0..64 {
            if !s.driver.poll() {
                break;
            }
        }
        if sent && took_recv(s) {
            post_recv(s, PING);
            return;
        }
    }
}

/// The measured 64 B Sends (callgrind collects inside this function only).
#[inline(never)]
fn measured_send(s: &End, c: &End, n: usize) {
    send_round_trips(s, c, n)
}

/// The measured 64 KiB Writes (callgrind collects inside this function only).
#[inline(never)]
fn measured_write(s: &End, c: &End, target: (u64, u32), n: usize) {
    writes(s, c, target, n)
}

/// `n` passes of each worker with nothing to do: what a pass costs when it finds nothing, the
/// floor under every message's passes (callgrind collects inside this function only).
#[inline(never)]
fn measured_idle(s: &End, c: &End, n: usize) {
    for _ in 0..n {
        c.driver.poll();
        s.driver.poll();
    }
}

/// NFS calls in flight at once in the `nfs_*` tests.
const NFS_WINDOW: u32 = 8;
/// The READ size of `nfs_read`, and the file's: 16 such blocks.
const NFS_READ: u32 = 4096;
const NFS_FILE: usize = 16 * NFS_READ as usize;

/// An NFS client and target over the pair, the server's connection run on its worker's driver.
struct NfsPair {
    client: RdmaClient,
    fh: Vec<u8>,
    file: Vec<u8>,
    /// The target's reactor on the server's worker, run after a pass of the client's worker
    /// in every wait of the client.
    reactor: Arc<Mutex<SteppedReactor>>,
    server: Driver,
    dir: std::path::PathBuf,
    _target: RdmaServer,
}

impl Drop for NfsPair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nfs_pair(dp: &Dataplane, crc: bool, uid: u32) -> NfsPair {
    let dir = std::env::temp_dir().join(format!("dpwarp-instr-nfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary export");
    let file: Vec<u8> = (0..NFS_FILE).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(dir.join("f"), &file).expect("the file read");
    let export = Arc::new(
        Export::new(
            &dir,
            HandleKey::random(),
            ClientList::parse(&["*(rw,no_root_squash,insecure)"]).expect("client list"),
        )
        .expect("export (root)"),
    );
    let root = export.root_handle().expect("root handle");
    let mut reg = Registry::new();
    procs::register(&mut reg, export);
    let conn = ConnParam {
        crc,
        ..ConnParam::default()
    };
    let target = RdmaServer::new(
        reg,
        ServerConfig {
            conn: conn.clone(),
            ..ServerConfig::default()
        },
    );
    let (sd, cd) = (dp.port_drivers(0)[0].clone(), dp.port_drivers(1)[0].clone());
    let (server_ep, client_ep) = (dp.endpoint(0).unwrap(), dp.endpoint(1).unwrap());
    let addr = std::net::SocketAddr::from((server_ep.ip(), dpwarp::nfs::NFS_RDMA_PORT));
    let snet = Net::from(server_ep);
    let listener = snet.listen(addr).expect("listen");
    let reactor = Arc::new(Mutex::new(
        target.stepped_reactor(&snet, 0).expect("a reactor"),
    ));
    let door = reactor.lock().unwrap().door();
    // A blocking accept drives the server's worker on that thread meanwhile.
    let accepted = thread::spawn(move || {
        let req = listener
            .get_request(Duration::from_secs(10))
            .expect("a connection request");
        door.serve(req).expect("served")
    });
    let (c2, r2) = (cd.clone(), reactor.clone());
    let mut client = RdmaClient::connect_polling(
        &Net::from(client_ep),
        addr,
        ClientConfig {
            conn,
            ..ClientConfig::default()
        },
        Arc::new(move || c2.poll() | r2.lock().unwrap().pass()),
    )
    .expect("connect");
    accepted.join().unwrap();
    // By default as nfs-bench calls: root, not squashed (`no_root_squash`), the file's owner,
    // so a READ's permission is decided without taking on other credentials; `--uid` calls as
    // another user, whom the kernel is asked about (docs/nfs.md "Calls answered at once").
    client.cred = Auth::Sys(AuthSys {
        stamp: 1,
        machinename: b"path-instructions"[..].into(),
        uid,
        gid: uid,
        gids: Default::default(),
    });
    let mut p = NfsPair {
        client,
        fh: Vec::new(),
        file,
        reactor,
        server: sd,
        dir,
        _target: target,
    };
    let mut b = Body::new();
    b.xdr().put_opaque(&root);
    b.xdr().put_opaque(b"f");
    let r = p
        .client
        .call(NFS_PROG, NFS_V3, proc_::LOOKUP, b, &CallOpts::default())
        .expect("LOOKUP");
    let mut x = r.results().expect("LOOKUP accepted").xdr;
    assert_eq!(x.get_u32().unwrap(), 0, "LOOKUP f: NFS3_OK");
    p.fh = x.get_opaque(64).unwrap().to_vec();
    p
}

/// `n` NFS calls of `proc3` (READ or GETATTR), `NFS_WINDOW` in flight; with `verify` each
/// READ's bytes are compared with the file's (the warm-up), else only the status and count.
fn nfs_calls(p: &mut NfsPair, proc3: u32, n: usize, verify: bool) {
    let chunk = CallOpts {
        write_chunks: vec![NFS_READ as usize],
        ..CallOpts::default()
    };
    let plain = CallOpts::default();
    let (mut sent, mut done) = (0usize, 0usize);
    let mut offsets = std::collections::HashMap::new();
    while done < n {
        while sent < n && p.client.in_flight() < NFS_WINDOW.min(p.client.grant()) {
            let off = (sent % (NFS_FILE / NFS_READ as usize)) as u64 * u64::from(NFS_READ);
            let mut b = Body::new();
            b.xdr().put_opaque(&p.fh);
            let opts = if proc3 == proc_::READ {
                b.xdr().put_u64(off);
                b.xdr().put_u32(NFS_READ);
                &chunk
            } else {
                &plain
            };
            let xid = p.client.submit(NFS_PROG, NFS_V3, proc3, b, opts).unwrap();
            offsets.insert(xid, off as usize);
            sent += 1;
        }
        p.client.progress(true).expect("replies");
        while let Some((xid, r)) = p.client.take_reply() {
            let r = r.expect("a reply");
            let mut rr = r.results().expect("accepted");
            assert_eq!(rr.xdr.get_u32().unwrap(), 0, "NFS3_OK");
            if proc3 == proc_::READ {
                parse_post_op_attr(&mut rr.xdr).unwrap();
                assert_eq!(rr.xdr.get_u32().unwrap(), NFS_READ, "count");
                rr.xdr.get_bool().unwrap();
                let data = rr.get_bulk(NFS_READ as usize).unwrap();
                assert_eq!(data.len(), NFS_READ as usize);
                if verify {
                    let off = offsets[&xid];
                    assert!(
                        data[..] == p.file[off..off + NFS_READ as usize],
                        "the READ's bytes"
                    );
                }
            }
            offsets.remove(&xid);
            done += 1;
        }
    }
}

/// The measured NFS calls (callgrind collects inside these functions only).
#[inline(never)]
fn measured_nfs_read(p: &mut NfsPair, n: usize) {
    nfs_calls(p, proc_::READ, n, false)
}

#[inline(never)]
fn measured_nfs_getattr(p: &mut NfsPair, n: usize) {
    nfs_calls(p, proc_::GETATTR, n, false)
}

/// The `nfs_*` tests (see the module doc).
fn nfs_main(dp: &Dataplane, a: &Args) {
    let mut p = nfs_pair(dp, a.crc, a.uid);
    let n = a.iters.unwrap_or(2000);
    let proc3 = if a.test == "nfs_read" {
        proc_::READ
    } else {
        proc_::GETATTR
    };
    // Warm-up: the file opened for reading and kept, its handle's MAC checked once, the
    // connection's result buffers made, slow start.
    nfs_calls(&mut p, proc3, 400, true);
    let (sb, cb) = (p.server.stats(), dp.port_drivers(1)[0].stats());
    let target = p._target.clone();
    let at_once = || ServerStats::get(&target.stats().calls_nowait);
    let k = at_once();
    let t = Instant::now();
    if proc3 == proc_::READ {
        measured_nfs_read(&mut p, n);
    } else {
        measured_nfs_getattr(&mut p, n);
    }
    let secs = t.elapsed().as_secs_f64();
    let (sa, ca) = (p.server.stats(), dp.port_drivers(1)[0].stats());
    let at_once = at_once() - k;
    // The handler pool's hand-off would be counted here, not on the pool's thread: the count
    // means what it says only when every call was answered on the driver.
    assert_eq!(at_once, n as u64, "every call answered at once");
    let what = format!(
        "NFS {}s ({at_once} answered at once), {NFS_WINDOW} in flight",
        if proc3 == proc_::READ {
            "4 KiB READ"
        } else {
            "GETATTR"
        }
    );
    print_per_one(&what, n, (&cb, &ca), (&sb, &sa), secs);
    // The disconnect's FIN and its answer.
    p.client.disconnect();
    for _ in 0..1000 {
        dp.port_drivers(1)[0].poll();
        p.reactor.lock().unwrap().pass();
    }
}

/// The bench's own line (scripts/instructions reads it): each end's passes, TCP segments and
/// frames per message over the `n` measured, from the workers' counters before and after.
fn print_per_one(
    what: &str,
    n: usize,
    (cb, ca): (&WorkerStats, &WorkerStats),
    (sb, sa): (&WorkerStats, &WorkerStats),
    secs: f64,
) {
    let per = |x: u64| x as f64 / n as f64;
    println!(
        "path_instructions: {n} {what}; per one: client passes {:.2}, TCP segments {:.2}, frames {:.2}; server passes {:.2}, TCP segments {:.2}, frames {:.2}; {:.3} us on one thread driving both ends (not a latency figure)",
        per(ca.loops - cb.loops),
        per(ca.device.tx_tcp_segments - cb.device.tx_tcp_segments),
        per(ca.device.tx_packets - cb.device.tx_packets),
        per(sa.loops - sb.loops),
        per(sa.device.tx_tcp_segments - sb.device.tx_tcp_segments),
        per(sa.device.tx_packets - sb.device.tx_packets),
        secs * 1e6 / n as f64
    );
}

/// Drive both ends until both QPs read closed (at most 10 s).
fn close(s: &End, c: &End) {
    c.qp.disconnect();
    let end = Instant::now() + Duration::from_secs(10);
    while !(s.qp.is_closed() && c.qp.is_closed()) && Instant::now() < end {
        c.driver.poll();
        s.driver.poll();
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!(
            "path_instructions: a benchmark: cargo bench --bench path_instructions -- [options]"
        );
        return;
    }
    let a = args();
    let dp =
        Dataplane::start_with(&config(a.mtu), WorkerMode::Driven).expect("dataplane (root, DPDK)");
    // The measuring thread gets an lcore id (mempool cache), as a driving thread does.
    dp.port_drivers(0)[0].attach();
    if a.test.starts_with("nfs_") {
        return nfs_main(&dp, &a);
    }
    let (s, c, target) = connect(&dp, a.crc);
    let n = a.iters.unwrap_or(match a.test.as_str() {
        "send" => 2000,
        "write" => 64,
        _ => 10000,
    });
    // Warm-up outside the measured function: the first messages' lazy work, slow start, the
    // startup's delayed ACKs and timers.
    match a.test.as_str() {
        "send" => send_round_trips(&s, &c, 200),
        "write" => writes(&s, &c, target, 64),
        _ => measured_idle(&s, &c, 1000),
    }
    let (sb, cb) = (s.driver.stats(), c.driver.stats());
    let t = Instant::now();
    let what = match a.test.as_str() {
        "send" => {
            measured_send(&s, &c, n);
            "64 B Send round trips"
        }
        "write" => {
            measured_write(&s, &c, target, n);
            "64 KiB RDMA Writes"
        }
        _ => {
            measured_idle(&s, &c, n);
            "turns of two idle passes"
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let (sa, ca) = (s.driver.stats(), c.driver.stats());
    print_per_one(what, n, (&cb, &ca), (&sb, &sa), secs);
    close(&s, &c);
}
