//! The demo: a server and a client in one process, connected over kernel TCP loopback or the
//! in-memory link, doing Send, RDMA Write and RDMA Read with CRC on and every byte verified.

use dpwarp::verbs::smallvec;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use dpwarp::cm::{self, ConnParam, ConnRequest, Net};

use crate::dpperf as perf;
#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::Dataplane;
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::Dataplane;
use dpwarp::mpa::Negotiated;
use dpwarp::transport::memlink;
use dpwarp::verbs::{
    sge, Access, Cq, Device, Mr, Opcode, Qp, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
};

/// Waits for the server side's connection request.
type ServerSide = Box<dyn FnOnce() -> Result<ConnRequest, String> + Send>;
/// Connects the client's QP.
type ClientSide = Box<dyn FnOnce(&ConnParam, &Qp) -> Result<Negotiated, String>>;

/// `demo --transport`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoTransport {
    /// smoltcp on the two DPDK ports of --config.
    Dpdk,
    /// Kernel TCP over loopback.
    Kernel,
    /// The in-memory link (no TCP at all).
    Mem,
}

/// Demo options.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Where the two endpoints connect.
    #[arg(long, value_enum, env = "DPWARP_TRANSPORT", default_value_t = DemoTransport::Dpdk)]
    transport: DemoTransport,
    /// Server port for the kernel transport (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Bytes per operation.
    #[arg(long, default_value_t = 65536)]
    size: usize,
    /// Disable CRC32c (RFC 5044 §4.4 "prefer no CRC").
    #[arg(long)]
    no_crc: bool,
    /// Request markers (RFC 5044 §4.3).
    #[arg(long)]
    markers: bool,
    /// Dataplane config for --transport dpdk (two ports: server on the first, client on the
    /// second).
    #[arg(long, default_value = "configs/net_ring.toml")]
    config: std::path::PathBuf,
    /// Skip the short bandwidth/latency run after the functional demo.
    #[arg(long)]
    no_perf: bool,
    #[command(flatten)]
    pub verbosity: crate::cli::Verbosity,
}

/// The server's advertisement in the MPA Reply private data: addr (8), rkey (4), len (4), big endian,
/// like rping's `struct rping_rdma_info`.
fn encode_adv(mr: &Mr) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&mr.addr().to_be_bytes());
    v.extend_from_slice(&mr.stag().to_be_bytes());
    v.extend_from_slice(&(mr.len() as u32).to_be_bytes());
    v
}

fn decode_adv(pd: &[u8]) -> Result<(u64, u32, u32), String> {
    if pd.len() < 16 {
        return Err(format!(
            "server advertisement too short: {} bytes",
            pd.len()
        ));
    }
    let addr = u64::from_be_bytes(pd[0..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(pd[8..12].try_into().unwrap());
    let len = u32::from_be_bytes(pd[12..16].try_into().unwrap());
    Ok((addr, rkey, len))
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn wait_wc(cq: &Cq, what: &str) -> Result<dpwarp::verbs::WorkCompletion, String> {
    let wc = cq
        .wait(Duration::from_secs(10))
        .ok_or_else(|| format!("timed out waiting for the {what} completion"))?;
    if wc.status != WcStatus::Success {
        return Err(format!("{what} completed with {:?}", wc.status));
    }
    Ok(wc)
}

pub fn run(a: Args) -> Result<(), String> {
    let transport = match a.transport {
        DemoTransport::Dpdk => "dpdk",
        DemoTransport::Kernel => "kernel",
        DemoTransport::Mem => "mem",
    };
    let size = a.size.max(16);
    let param = ConnParam {
        crc: !a.no_crc,
        markers: a.markers,
        ..ConnParam::default()
    };
    println!(
        "dpwarp demo: transport={transport} size={size} crc={} markers={}",
        param.crc, param.markers
    );

    // The dataplane (kept running until the end) and, for the perf run, where to connect.
    let mut dp: Option<Dataplane> = None;
    let mut perf_nets: Option<(Net, Net, SocketAddr)> = None;
    let (server_side, client_transport): (ServerSide, ClientSide) = match a.transport {
        DemoTransport::Kernel => {
            let addr: SocketAddr = ([127, 0, 0, 1], a.port).into();
            let net = Net::kernel();
            let l = net
                .listen(addr)
                .map_err(|e| format!("listen {addr}: {e}"))?;
            let addr = l.local_addr().map_err(|e| e.to_string())?;
            println!("server listening on {addr} (kernel TCP)");
            (
                Box::new(move || {
                    l.get_request(Duration::from_secs(10))
                        .map_err(|e| format!("server: {e}"))
                }),
                Box::new(move |p: &ConnParam, qp: &Qp| {
                    net.connect(addr, qp, p)
                        .map_err(|e| format!("connect: {e}"))
                }),
            )
        }
        DemoTransport::Mem => {
            let (c, s) = memlink::pair(memlink::LinkFaults::default());
            println!("in-memory link");
            (
                Box::new(move || {
                    ConnRequest::read(Box::new(s), Duration::from_secs(10))
                        .map_err(|e| format!("server: {e}"))
                }),
                Box::new(move |p: &ConnParam, qp: &Qp| {
                    cm::connect(Box::new(c), qp, p).map_err(|e| format!("connect: {e}"))
                }),
            )
        }
        DemoTransport::Dpdk => {
            let cfg = dpwarp::config::DataplaneConfig::load(&a.config)?;
            let d = Dataplane::start(&cfg).map_err(|e| e.to_string())?;
            let (sep, cep) = match (d.endpoint(0), d.endpoint(1)) {
                (Some(s), Some(c)) => (s, c),
                _ => return Err(format!("{}: the demo needs two ports", a.config.display())),
            };
            let port = if a.port == 0 { 4791 } else { a.port };
            let addr = SocketAddr::from((sep.ip(), port));
            let (sn, cn) = (Net::from(sep), Net::from(cep.clone()));
            let l = sn.listen(addr).map_err(|e| format!("listen {addr}: {e}"))?;
            println!(
                "server listening on {addr} (DPDK {}, smoltcp; client {})",
                cfg.ports[0].device,
                cep.ip()
            );
            dp = Some(d);
            perf_nets = Some((sn, cn.clone(), addr));
            (
                Box::new(move || {
                    l.get_request(Duration::from_secs(10))
                        .map_err(|e| format!("server: {e}"))
                }),
                Box::new(move |p: &ConnParam, qp: &Qp| {
                    cn.connect(addr, qp, p).map_err(|e| format!("connect: {e}"))
                }),
            )
        }
    };

    let dev = Device::open();
    // Server: one region the client writes into and reads from, one receive buffer.
    let server_param = param.clone();
    let sdev = dev.clone();
    let server = thread::spawn(move || -> Result<(), String> {
        let pd = sdev.alloc_pd();
        let cq = Cq::new(64);
        let attr = QpInitAttr::new(&cq);
        let target = pd.reg_mr(
            2 * size,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        // The second half holds data for the client's RDMA Read.
        target.write_at(size, &pattern(0x5a, size));
        // One buffer per receive: the client's "done" Send may land while this thread is still
        // checking the first Send's payload, so the two must not share memory.
        let rbuf = pd.reg_mr(size, Access::LOCAL_WRITE);
        let done_buf = pd.reg_mr(size, Access::LOCAL_WRITE);
        // Receive buffers go up before accepting, so the client's first Send finds one.
        let qp = Qp::new(&pd, &attr);
        for (id, buf) in [(0u64, &rbuf), (1, &done_buf)] {
            qp.post_recv(RecvWr {
                wr_id: id,
                sg_list: smallvec![sge(buf, 0, size)],
            })
            .map_err(|e| format!("server post_recv: {e}"))?;
        }
        let req = server_side()?;
        println!(
            "server: MPA request rev {} enhanced={} crc={} markers={} ird={:?} ord={:?}",
            req.peer.revision,
            req.peer.enhanced,
            req.peer.crc,
            req.peer.markers,
            req.peer.ird,
            req.peer.ord
        );
        req.accept(
            &qp,
            &ConnParam {
                private_data: encode_adv(&target),
                ..server_param
            },
        )
        .map_err(|e| format!("server accept: {e}"))?;
        // 1. The client's Send.
        let wc = wait_wc(&cq, "server receive of the Send")?;
        if wc.wr_id != 0 {
            return Err(format!(
                "server: Send completed receive {} (expected 0)",
                wc.wr_id
            ));
        }
        let mut got = vec![0u8; wc.byte_len as usize];
        rbuf.read_at(0, &mut got);
        if got != pattern(0x11, size) {
            return Err("server: Send payload differs".into());
        }
        println!("server: received Send of {} bytes, verified", wc.byte_len);
        // 2. The client's "done" Send after its Write and Read: verify the Write landed.
        let wc = wait_wc(&cq, "server receive of the done message")?;
        let mut done = vec![0u8; wc.byte_len as usize];
        done_buf.read_at(0, &mut done);
        if done != b"done" {
            return Err(format!("server: unexpected final message {done:?}"));
        }
        let mut written = vec![0u8; size];
        target.read_at(0, &mut written);
        if written != pattern(0x22, size) {
            return Err("server: RDMA Write data differs".into());
        }
        println!("server: RDMA Write of {size} bytes landed, verified");
        Ok(())
    });

    let pd = dev.alloc_pd();
    let cq = Cq::new(64);
    let attr = QpInitAttr::new(&cq);
    let src = pd.reg_mr(size, Access::LOCAL_WRITE);
    let sink = pd.reg_mr(size, Access::LOCAL_WRITE);
    let t0 = Instant::now();
    let qp = Qp::new(&pd, &attr);
    let n = &client_transport(&param, &qp)?;
    println!(
        "client: connected in {:?}: MPA rev {} enhanced={} crc tx/rx={}/{} markers tx/rx={}/{} ird={} ord={} peer ird/ord={:?}/{:?}",
        t0.elapsed(),
        n.revision,
        n.enhanced,
        n.crc_tx,
        n.crc_rx,
        n.markers_tx,
        n.markers_rx,
        n.ird,
        n.ord,
        n.peer_ird,
        n.peer_ord
    );
    let (raddr, rkey, rlen) = decode_adv(&n.peer_private_data)?;
    println!("client: server advertised addr {raddr:#x} rkey {rkey:#010x} len {rlen}");
    if (rlen as usize) < 2 * size {
        return Err("server region too small".into());
    }

    // Send.
    src.write_at(0, &pattern(0x11, size));
    qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, size)],
        signaled: true,
    })
    .map_err(|e| format!("post Send: {e}"))?;
    let wc = wait_wc(&cq, "Send")?;
    assert_eq!(wc.opcode, WcOpcode::Send);
    println!("client: Send of {size} bytes completed");

    // RDMA Write into the first half of the server's region.
    src.write_at(0, &pattern(0x22, size));
    let t = Instant::now();
    qp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Write {
            remote_addr: raddr,
            rkey,
        },
        sg_list: smallvec![sge(&src, 0, size)],
        signaled: true,
    })
    .map_err(|e| format!("post Write: {e}"))?;
    wait_wc(&cq, "RDMA Write")?;
    println!(
        "client: RDMA Write of {size} bytes completed in {:?}",
        t.elapsed()
    );

    // RDMA Read of the second half.
    let t = Instant::now();
    qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Read {
            remote_addr: raddr + size as u64,
            rkey,
        },
        sg_list: smallvec![sge(&sink, 0, size)],
        signaled: true,
    })
    .map_err(|e| format!("post Read: {e}"))?;
    let wc = wait_wc(&cq, "RDMA Read")?;
    if sink.to_vec() != pattern(0x5a, size) {
        return Err("client: RDMA Read data differs".into());
    }
    println!(
        "client: RDMA Read of {} bytes completed in {:?}, verified",
        wc.byte_len,
        t.elapsed()
    );

    // Tell the server we are done (it then checks the Write).
    src.write_at(0, b"done");
    qp.post_send(SendWr {
        wr_id: 4,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 4)],
        signaled: true,
    })
    .map_err(|e| format!("post Send: {e}"))?;
    wait_wc(&cq, "final Send")?;
    let sres = server
        .join()
        .map_err(|_| "server thread panicked".to_string())?;
    qp.disconnect();
    qp.wait_closed(Duration::from_secs(5));
    sres?;
    println!("demo OK: Send, RDMA Write and RDMA Read verified ({size} bytes each)");

    if a.transport == DemoTransport::Kernel && perf_nets.is_none() {
        let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
        let l = Net::kernel().listen(addr).map_err(|e| e.to_string())?;
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        drop(l);
        perf_nets = Some((Net::kernel(), Net::kernel(), addr));
    }
    if let (false, Some((ns, nc, addr))) = (a.no_perf, perf_nets) {
        // A short perftest-style run on the same transport (one connection per size).
        let bw = perf::local_pair(
            ns.clone(),
            &nc,
            addr,
            perf::Test::WriteBw,
            &[4096, 65536],
            2000,
            0,
        )?;
        perf::print_table(&format!("RDMA Write BW ({transport})"), &bw);
        // 200 round trips of warm-up ahead of the 2000 shown, as in `dpwarp dpperf`.
        let lat = perf::local_pair(ns, &nc, addr, perf::Test::SendLat, &[64, 4096], 2000, 200)?;
        perf::print_table(
            &format!("Send latency ({transport}, one-way = RTT/2)"),
            &lat,
        );
    }
    drop(dp);
    Ok(())
}
