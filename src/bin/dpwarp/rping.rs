//! `dpwarp rping`: rdma-core's `rping` (librdmacm/examples) on dpwarp, wire- and
//! behaviour-compatible with it so either end can be the stock tool.
//!
//! The ping-pong, per iteration (what the stock tool does; the code here is our own):
//! 1. the client fills its *start* buffer with `rdma-ping-N: ` and a rotating run of ASCII letters
//!    (NUL-terminated) and advertises it in a Send of `struct rping_rdma_info` — 8-byte address,
//!    4-byte rkey (STag), 4-byte length, all big endian, 16 bytes;
//! 2. the server RDMA Reads that many bytes into its own buffer and Sends a 16-byte "go ahead";
//! 3. the client advertises its *rdma* (sink) buffer in another Send;
//! 4. the server RDMA Writes `strlen + 1` bytes of what it read back into that sink and Sends a
//!    "go ahead";
//! 5. the client checks (`-V`) that the sink equals the start buffer and prints it (`-v`).
//!
//! Connection setup: the stock tool passes no private data and asks for
//! `responder_resources = initiator_depth = 1`, which on iWARP become the RFC 6581 §9.1 IRD/ORD
//! of an enhanced MPA rev 2 request. Options beyond rping's (`--crc`, `--markers`, `--mpa-rev`,
//! `--p2p`) select the MPA parameters that rdma_cm hides in the kernel.
//!
//! `--transport dpdk` (the default) runs over the DPDK dataplane of `--config FILE` or
//! `$DPWARP_CONFIG` (smoltcp on a DPDK port, see docs/dataplane.md); `--transport kernel` runs
//! over kernel TCP: only the connect/listen step differs, the ping-pong below is the same code.

use dpwarp::verbs::smallvec;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use dpwarp::cm::{self, CmError, ConnParam, ConnRequest, Listener, Net};
use dpwarp::mpa::{Negotiated, RtrSet};
use dpwarp::transport::kernel::KernelTcp;
use dpwarp::transport::Transport;
use dpwarp::verbs::{
    sge, Access, Cq, Device, Mr, Opcode, Qp, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};

use crate::cli::NetArgs;
use crate::net::{backend, log_device_stats, start_dpdk, Backend};

/// `sizeof(struct rping_rdma_info)`: every rping Send carries exactly this many bytes.
const INFO_LEN: usize = 16;
/// rping's largest `-S` (`RPING_BUFSIZE - 1`).
const MAX_SIZE: usize = 64 * 1024 - 1;
/// rping's smallest `-S`: sizeof("INT_MAX") + sizeof("rdma-ping-%d: ") (its macro stringifies
/// the name, not the value; stock rping prints "valid range is 23 to 65536").
const MIN_SIZE: usize = 8 + 15;
/// rping's send queue depth; receive depth is 2.
const SQ_DEPTH: usize = 16;

/// rping options (same letters as rdma-core's rping) plus the MPA knobs rdma_cm keeps in the
/// kernel.
#[derive(clap::Args, Debug, Clone)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Server side (listen on -a/-p).
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client side (connect to -a/-p).
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server binds it, the client connects to it.
    #[arg(short = 'a')]
    addr: Option<String>,
    /// Client: source address to bind to.
    #[arg(short = 'I')]
    source: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping count (0 = forever; the server runs until the client disconnects).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping data size (23..=65535, as rping).
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Display ping data on stdout.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Validate ping data (client).
    #[arg(short = 'V', action = clap::ArgAction::Count)]
    validate: u8,
    /// Debug prints (on stdout, like rping's DEBUG_LOG).
    #[arg(short = 'd', action = clap::ArgAction::Count)]
    debug: u8,
    /// Persistent server: serve connections one after another, each on its own thread.
    #[arg(short = 'P')]
    persistent: bool,
    /// Accepted for rping compatibility (self-created QP); dpwarp QPs are always created here.
    #[arg(short = 'q')]
    self_create_qp: bool,
    /// The byte stream (with dpdk the client connects from the port's own address).
    #[command(flatten)]
    pub net: NetArgs,
    /// CRC32c on FPDUs: `on` asks for it (C=1), `off` prefers none (RFC 5044 §7.1: either end
    /// asking for CRC turns it on for both). Default: on for the client, off (follow the
    /// initiator) for the server.
    #[arg(long)]
    crc: Option<OnOff>,
    /// Ask the peer for markers on the FPDUs it sends us (RFC 5044 §4.3, M=1).
    #[arg(long)]
    markers: bool,
    /// MPA revision the client sends: 2 (RFC 6581 enhanced, with IRD/ORD) or 1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    mpa_rev: u8,
    /// RFC 5044 Appendix C permissive mode: interoperate with RDMA Consortium (MPA Rev 0)
    /// peers, which then get a Rev 0 Reply and DDP/RDMAP version 0 with markers and CRC both
    /// ways (server: take Rev 0 Requests; client with --mpa-rev 1: accept a Rev 0 Reply).
    /// Default off: a Rev 0 Request is closed without a reply (RFC 5044 §7.1.1).
    #[arg(long)]
    mpa_rev0_permissive: bool,
    /// Peer-to-peer mode (RFC 6581 §9.2) with these RTR kinds: client offers them, server
    /// supports them. Comma separated, e.g. write,read.
    #[arg(long, value_enum, value_delimiter = ',')]
    p2p: Option<Vec<Rtr>>,
    /// Seconds to wait for any single step (connection, completion) before giving up.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    #[command(flatten)]
    startup: crate::net::StartupOpts,
}

/// An RFC 6581 §9.2 ready-to-receive (RTR) message kind.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Rtr {
    /// A zero-length RDMA Write.
    Write,
    /// A zero-length RDMA Read.
    Read,
    /// A zero-length Send.
    Send,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum OnOff {
    On,
    Off,
}

#[derive(Clone)]
struct Ctx {
    verbose: bool,
    validate: bool,
    debug: bool,
    size: usize,
    count: u64,
    timeout: Duration,
}

macro_rules! debug_log {
    ($ctx:expr, $($t:tt)*) => {
        if $ctx.debug {
            println!($($t)*);
        }
    };
}

fn rtr_set(kinds: &[Rtr]) -> RtrSet {
    let mut set = RtrSet::default();
    for k in kinds {
        match k {
            Rtr::Write => set.write = true,
            Rtr::Read => set.read = true,
            Rtr::Send => set.send = true,
        }
    }
    set
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("getaddrinfo failed ({e}) - invalid hostname or IP address"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))
}

pub fn run(a: Args) -> Result<(), String> {
    if !a.server && !a.client {
        return Err("one of -s (server) or -c (client) is required".into());
    }
    let backend = backend(&a.net)?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&a.size) {
        return Err(format!(
            "Invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
            a.size
        ));
    }
    let p2p = a.p2p.as_deref().map(rtr_set);
    let ctx = Ctx {
        verbose: a.verbose > 0,
        validate: a.validate > 0,
        debug: a.debug > 0,
        size: a.size,
        count: a.count,
        timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let crc = a
        .crc
        .unwrap_or(if a.server { OnOff::Off } else { OnOff::On })
        == OnOff::On;
    // rping's rping_init_conn_param: responder_resources = initiator_depth = 1.
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        crc,
        markers: a.markers,
        revision: a.mpa_rev,
        enhanced: a.mpa_rev >= 2,
        p2p,
        timeout: ctx.timeout.min(Duration::from_secs(30)),
        mpa_rev0_permissive: a.mpa_rev0_permissive,
        ..ConnParam::default()
    };
    // Resolve the addresses before starting DPDK (a typo should not cost an EAL start).
    let (addr, source) = if a.server {
        let host = a.addr.as_deref().unwrap_or("0.0.0.0");
        (resolve(host, a.port)?, None)
    } else {
        let host = a.addr.as_deref().ok_or("client needs -a addr")?;
        let source = a.source.as_deref().map(|h| resolve(h, 0)).transpose()?;
        (resolve(host, a.port)?, source)
    };
    // `_dp` keeps the dataplane (EAL, ports, workers) running until rping ends.
    let (_dp, net) = if let Backend::Dpdk(config) = &backend {
        let (dp, ep) = start_dpdk(config, a.net.port_index)?;
        // The dataplane has one address per port: -a (server) and -I (client) may only name it.
        let own = if a.server { Some(addr) } else { source };
        if let Some(o) = own.filter(|o| !o.ip().is_unspecified()) {
            if o.ip() != IpAddr::V4(ep.ip()) {
                return Err(format!(
                    "{}: not the address of DPDK port {} ({})",
                    o.ip(),
                    a.net.port_index,
                    ep.ip()
                ));
            }
        }
        if addr.is_ipv6() {
            return Err(format!("{addr}: the DPDK dataplane is IPv4 only"));
        }
        if !a.server && !dp.wait_link_up(ctx.timeout) {
            return Err(format!(
                "DPDK port {}: link did not come up within {:?}",
                a.net.port_index, ctx.timeout
            ));
        }
        (Some(dp), Net::from(ep))
    } else {
        (None, Net::kernel())
    };
    let r = if a.server {
        run_server(&ctx, &net, addr, &param, a.persistent, &a.startup)
    } else {
        run_client(&ctx, &net, addr, source, &param)
    };
    if let Some(dp) = &_dp {
        log_device_stats(dp);
    }
    r
}

/// The buffers of one rping endpoint (rping_setup_buffers).
struct Bufs {
    recv: Mr,
    send: Mr,
    rdma: Mr,
    start: Option<Mr>,
}

fn setup(ctx: &Ctx, server: bool) -> (Cq, Qp, Bufs) {
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(SQ_DEPTH * 2 + 8);
    let qp = Qp::new(
        &pd,
        &QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCap {
                max_send_wr: SQ_DEPTH,
                max_recv_wr: 2,
            },
        },
    );
    let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let bufs = Bufs {
        recv: pd.reg_mr(INFO_LEN, Access::LOCAL_WRITE),
        send: pd.reg_mr(INFO_LEN, Access::default()),
        rdma: pd.reg_mr(ctx.size, rw),
        start: (!server).then(|| pd.reg_mr(ctx.size, rw)),
    };
    (cq, qp, bufs)
}

fn post_info_recv(qp: &Qp, b: &Bufs) -> Result<(), String> {
    qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: smallvec![sge(&b.recv, 0, INFO_LEN)],
    })
    .map_err(|e| format!("post recv error: {e}"))
}

/// `rping_format_send`: advertise `mr` (address, rkey, `size`) in the send buffer.
fn format_send(ctx: &Ctx, b: &Bufs, mr: &Mr) {
    let mut info = [0u8; INFO_LEN];
    info[0..8].copy_from_slice(&mr.addr().to_be_bytes());
    info[8..12].copy_from_slice(&mr.stag().to_be_bytes());
    info[12..16].copy_from_slice(&(ctx.size as u32).to_be_bytes());
    b.send.write_at(0, &info);
    debug_log!(
        ctx,
        "RDMA addr {:x} rkey {:x} len {}",
        mr.addr(),
        mr.stag(),
        ctx.size
    );
}

fn post_info_send(qp: &Qp, b: &Bufs) -> Result<(), String> {
    qp.post_send(SendWr {
        wr_id: 2,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&b.send, 0, INFO_LEN)],
        signaled: true,
    })
    .map_err(|e| format!("post send error {e}"))
}

/// What the completion loop saw (rping's cq thread turning completions into states).
enum Step {
    Recv,
    Read,
    Write,
    Disconnected,
}

/// Wait for the next completion that moves the ping-pong on (Send completions only confirm).
/// A receive is reposted at once, as rping's completion handler does.
fn next_step(ctx: &Ctx, cq: &Cq, qp: &Qp, b: &Bufs, who: &str) -> Result<Step, String> {
    let deadline = Instant::now() + ctx.timeout;
    loop {
        let wc: WorkCompletion = match cq.wait(Duration::from_millis(20)) {
            Some(wc) => wc,
            None => {
                if qp.is_closed() {
                    // rping prints this from its RDMA_CM_EVENT_DISCONNECTED handler.
                    eprintln!("{who} DISCONNECT EVENT...");
                    if let Some(t) = qp.terminate_cause() {
                        eprintln!("{who}: connection ended by TERMINATE: {t:?}");
                    }
                    return Ok(Step::Disconnected);
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "timed out after {:?} waiting for a completion",
                        ctx.timeout
                    ));
                }
                continue;
            }
        };
        if wc.status != WcStatus::Success {
            if wc.status == WcStatus::WrFlushErr {
                continue;
            }
            let cause = qp
                .terminate_cause()
                .map(|t| format!(" ({t:?})"))
                .unwrap_or_default();
            return Err(format!(
                "cq completion failed status {:?}{cause}",
                wc.status
            ));
        }
        match wc.opcode {
            WcOpcode::Send => debug_log!(ctx, "send completion"),
            WcOpcode::Read => {
                debug_log!(ctx, "rdma read completion");
                return Ok(Step::Read);
            }
            WcOpcode::Write => {
                debug_log!(ctx, "rdma write completion");
                return Ok(Step::Write);
            }
            WcOpcode::Recv => {
                debug_log!(ctx, "recv completion");
                if wc.byte_len as usize != INFO_LEN {
                    return Err(format!("Received bogus data, size {}", wc.byte_len));
                }
                post_info_recv(qp, b)?;
                return Ok(Step::Recv);
            }
        }
    }
}

fn expect(step: Step, want: &str, got_ok: bool) -> Result<bool, String> {
    match step {
        Step::Disconnected => Ok(false),
        _ if got_ok => Ok(true),
        _ => Err(format!("wait for {want} state: unexpected completion")),
    }
}

/// The bytes of a NUL-terminated string in `buf` (without the NUL), like `%s`.
fn c_str(buf: &[u8]) -> &[u8] {
    let n = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    &buf[..n]
}

fn describe(n: &Negotiated) -> String {
    format!(
        "MPA rev {}{} crc {}/{} markers {}/{} IRD {} ORD {}{}",
        n.revision,
        if n.enhanced { " enhanced" } else { "" },
        if n.crc_tx { "tx" } else { "-" },
        if n.crc_rx { "rx" } else { "-" },
        if n.markers_tx { "tx" } else { "-" },
        if n.markers_rx { "rx" } else { "-" },
        n.ird,
        n.ord,
        n.rtr.map(|r| format!(" p2p RTR {r:?}")).unwrap_or_default()
    )
}

/// Explain a connection error the way a user needs it (what the peer refused and why).
fn explain(e: &CmError, param: &ConnParam) -> String {
    match e {
        CmError::Rejected { .. } if param.markers => format!(
            "cma event RDMA_CM_EVENT_REJECTED: {e}; we asked for markers (MPA M=1) and the \
             peer refused them (most stacks, siw and RFC 6581 peers included, do not do markers)"
        ),
        CmError::Rejected { .. } => format!("cma event RDMA_CM_EVENT_REJECTED: {e}"),
        _ => format!("cma event RDMA_CM_EVENT_CONNECT_ERROR: {e}"),
    }
}

/// siw (Linux 6.1) can leave an FPDU that arrives right after its MPA Reply unprocessed until
/// more data comes (docs/interop.md, peer README defect 2); a short pause before the client's
/// first Send avoids it and costs nothing measurable to a ping tool.
const FIRST_SEND_DELAY: Duration = Duration::from_millis(100);

/// The client's kernel-TCP byte stream (`rdma_resolve_addr` with an optional source address).
/// The QP is then connected through [`cm::connect`], which takes any `Transport`.
fn open_stream(
    addr: SocketAddr,
    source: Option<SocketAddr>,
    timeout: Duration,
) -> Result<Box<dyn Transport>, String> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("socket: {e}"))?;
    if let Some(src) = source {
        sock.bind(&src.into())
            .map_err(|e| format!("rdma_resolve_addr: bind {src}: {e}"))?;
    }
    sock.connect_timeout(&addr.into(), timeout)
        .map_err(|e| format!("cma event RDMA_CM_EVENT_UNREACHABLE: {addr}: {e}"))?;
    let t = KernelTcp::from_stream(sock.into(), true).map_err(|e| format!("{addr}: {e}"))?;
    Ok(Box::new(t))
}

fn run_client(
    ctx: &Ctx,
    net: &Net,
    addr: SocketAddr,
    source: Option<SocketAddr>,
    param: &ConnParam,
) -> Result<(), String> {
    let (cq, qp, b) = setup(ctx, false);
    post_info_recv(&qp, &b)?;
    let n = if net.is_kernel() {
        let stream = open_stream(addr, source, ctx.timeout)?;
        cm::connect(stream, &qp, param)
    } else {
        // The dataplane's TCP connect is part of its connect (the source is the port's
        // address, checked in `run`).
        net.connect(addr, &qp, param)
    }
    .map_err(|e| explain(&e, param))?;
    debug_log!(ctx, "rdma_connect successful: {}", describe(&n));
    log::info!("rping: connected to {addr}: {}", describe(&n));
    std::thread::sleep(FIRST_SEND_DELAY);
    let start = b.start.as_ref().expect("client has a start buffer");
    let mut first: u8 = 65;
    let mut ping: u64 = 0;
    let res = (|| -> Result<(), String> {
        while ctx.count == 0 || ping < ctx.count {
            // The ASCII text: "rdma-ping-N: " then letters from `first` cycling 'A'..='z'.
            let mut text = format!("rdma-ping-{ping}: ").into_bytes();
            text.truncate(ctx.size - 1);
            let mut c = first;
            while text.len() < ctx.size {
                text.push(c);
                c = if c >= 122 { 65 } else { c + 1 };
            }
            first = if first >= 122 { 65 } else { first + 1 };
            text[ctx.size - 1] = 0;
            start.write_at(0, &text);

            format_send(ctx, &b, start);
            post_info_send(&qp, &b)?;
            let s = next_step(ctx, &cq, &qp, &b, "client")?;
            let ok = matches!(s, Step::Recv);
            if !expect(s, "RDMA_WRITE_ADV", ok)? {
                return Err("server disconnected".into());
            }

            format_send(ctx, &b, &b.rdma);
            post_info_send(&qp, &b)?;
            let s = next_step(ctx, &cq, &qp, &b, "client")?;
            let ok = matches!(s, Step::Recv);
            if !expect(s, "RDMA_WRITE_COMPLETE", ok)? {
                return Err("server disconnected".into());
            }

            let got = b.rdma.to_vec();
            if ctx.validate && got != text {
                return Err("data mismatch!".into());
            }
            if ctx.verbose {
                println!("ping data: {}", String::from_utf8_lossy(c_str(&got)));
            }
            ping += 1;
        }
        Ok(())
    })();
    qp.disconnect();
    qp.wait_closed(Duration::from_secs(2));
    res.map_err(|e| format!("rping client failed: {e}"))
}

fn run_server(
    ctx: &Ctx,
    net: &Net,
    addr: SocketAddr,
    param: &ConnParam,
    persistent: bool,
    startup: &crate::net::StartupOpts,
) -> Result<(), String> {
    let l = startup
        .listen_opts(net, addr, param.mpa_rev0_permissive)
        .map_err(|e| format!("rdma_bind_addr: {e}"))?;
    debug_log!(
        ctx,
        "rdma_listen on {}{}",
        l.local_addr().map_err(|e| e.to_string())?,
        if net.is_kernel() { "" } else { " (DPDK)" }
    );
    // Always on stderr (not a log line): scripts wait for it, and a DPDK listener is invisible
    // to `ss`.
    eprintln!("rping: listening on port {}", addr.port());
    loop {
        let req = wait_request(&l)?;
        if persistent {
            let c = ctx.clone();
            let p = param.clone();
            std::thread::spawn(move || {
                if let Err(e) = serve(&c, req, &p) {
                    eprintln!("rping server: {e}");
                }
            });
        } else {
            return serve(ctx, req, param);
        }
    }
}

/// rping's server waits for a connect request without a time limit.
fn wait_request(l: &Listener) -> Result<ConnRequest, String> {
    loop {
        match l.get_request(Duration::from_secs(3600)) {
            Ok(r) => return Ok(r),
            Err(CmError::Timeout) => continue,
            // A peer that connected but never completed MPA startup (or sent garbage) must not
            // take the server down: log it and keep listening.
            Err(e) => log::warn!("rping: connection request failed: {e}"),
        }
    }
}

fn serve(ctx: &Ctx, req: ConnRequest, param: &ConnParam) -> Result<(), String> {
    let peer = req.peer.clone();
    log::info!(
        "rping: MPA request rev {} enhanced {} crc {} markers {} IRD {:?} ORD {:?} p2p {:?}",
        peer.revision,
        peer.enhanced,
        peer.crc,
        peer.markers,
        peer.ird,
        peer.ord,
        peer.rtr
    );
    let (cq, qp, b) = setup(ctx, true);
    post_info_recv(&qp, &b)?;
    let n = req
        .accept(&qp, param)
        .map_err(|e| format!("connect error: {e}"))?;
    log::info!("rping: accepted: {}", describe(&n));
    let res = if n.ord == 0 {
        // RFC 6581 §9.1 / RFC 5040 §6.1: no more outstanding Reads than the ORD, and the
        // initiator's IRD 0 left us none; rping's server needs one RDMA Read per ping.
        Err(format!(
            "the peer's IRD is {} so the negotiated ORD is 0: rping's server needs RDMA Read; closing",
            n.peer_ird.map_or("unknown".to_string(), |i| i.to_string())
        ))
    } else {
        serve_loop(ctx, &cq, &qp, &b)
    };
    qp.disconnect();
    qp.wait_closed(Duration::from_secs(2));
    res.map_err(|e| format!("rping server failed: {e}"))
}

fn serve_loop(ctx: &Ctx, cq: &Cq, qp: &Qp, b: &Bufs) -> Result<(), String> {
    let mut remote = [0u8; INFO_LEN];
    loop {
        // Wait for the client's source advertisement.
        let s = next_step(ctx, cq, qp, b, "server")?;
        let ok = matches!(s, Step::Recv);
        if !expect(s, "RDMA_READ_ADV", ok)? {
            return Ok(());
        }
        b.recv.read_at(0, &mut remote);
        let (raddr, rkey, rlen) = decode_info(&remote);
        debug_log!(
            ctx,
            "Received rkey {rkey:x} addr {raddr:x} len {rlen} from peer"
        );
        // RDMA Read the ping data. Our buffer is our -S; a longer advertisement fails the local
        // protection check, as it does on an RNIC.
        qp.post_send(SendWr {
            wr_id: 3,
            opcode: Opcode::Read {
                remote_addr: raddr,
                rkey,
            },
            sg_list: smallvec![dpwarp::verbs::Sge {
                addr: b.rdma.addr(),
                length: rlen,
                lkey: b.rdma.stag(),
            }],
            signaled: true,
        })
        .map_err(|e| format!("post send error {e}"))?;
        let s = next_step(ctx, cq, qp, b, "server")?;
        let ok = matches!(s, Step::Read);
        if !expect(s, "RDMA_READ_COMPLETE", ok)? {
            return Ok(());
        }
        let data = b.rdma.to_vec();
        if ctx.verbose {
            println!(
                "server ping data: {}",
                String::from_utf8_lossy(c_str(&data))
            );
        }
        // Tell the client to continue.
        post_info_send(qp, b)?;

        // Wait for the client's sink advertisement.
        let s = next_step(ctx, cq, qp, b, "server")?;
        let ok = matches!(s, Step::Recv);
        if !expect(s, "RDMA_WRITE_ADV", ok)? {
            return Ok(());
        }
        b.recv.read_at(0, &mut remote);
        let (raddr, rkey, _) = decode_info(&remote);
        // Echo strlen + 1 bytes, as rping does.
        let len = (c_str(&data).len() + 1).min(data.len());
        debug_log!(ctx, "rdma write to rkey {rkey:x} addr {raddr:x} len {len}");
        qp.post_send(SendWr {
            wr_id: 4,
            opcode: Opcode::Write {
                remote_addr: raddr,
                rkey,
            },
            sg_list: smallvec![sge(&b.rdma, 0, len)],
            signaled: true,
        })
        .map_err(|e| format!("post send error {e}"))?;
        let s = next_step(ctx, cq, qp, b, "server")?;
        let ok = matches!(s, Step::Write);
        if !expect(s, "RDMA_WRITE_COMPLETE", ok)? {
            return Ok(());
        }
        // Tell the client to begin again.
        post_info_send(qp, b)?;
    }
}

fn decode_info(info: &[u8; INFO_LEN]) -> (u64, u32, u32) {
    let mut a = [0u8; 8];
    a.copy_from_slice(&info[0..8]);
    let mut k = [0u8; 4];
    k.copy_from_slice(&info[8..12]);
    let mut l = [0u8; 4];
    l.copy_from_slice(&info[12..16]);
    (
        u64::from_be_bytes(a),
        u32::from_be_bytes(k),
        u32::from_be_bytes(l),
    )
}
