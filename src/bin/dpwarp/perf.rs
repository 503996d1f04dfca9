//! `dpwarp perf`: perftest's `ib_{write,read,send}_{bw,lat} -R` (rdma_cm) on dpwarp,
//! wire-compatible with the stock tools so either end can be perftest (docs/interop.md).
//!
//! perftest -R runs two rdma_cm connections to the same port: a control ("comm") connection and
//! the data connection. On the control connection every step is a lock-step exchange of one Send
//! each way (the client sends first, the server receives first); the sequence, as perftest 6.06
//! does it and as captured siw<->siw, is:
//! version (16 bytes, "6.06"), cycle buffer (4, big endian), cache line size (4), MTU as a
//! 2-byte decimal string, a zeroed `struct pingpong_dest` (56 bytes), [data connection], a zeroed
//! dest, our dest three times (four for send_bw and the latency tests: QPN, PSN, rkey, buffer
//! address, GID; big endian), [the test], then for write/read_bw a dest (sync), the client's
//! bandwidth report as five 8-byte fields (size, iterations, peak, average, message rate; big
//! endian, the last three IEEE doubles) and a final dest; send_bw, read_lat and send_lat one
//! dest; write_lat nothing.
//!
//! `--transport dpdk` (the default) runs both connections over the DPDK dataplane of `--config
//! FILE` or `$DPWARP_CONFIG` (smoltcp on a DPDK port, docs/dataplane.md); `--transport kernel`
//! runs both over kernel TCP.
//! Only connect/listen/accept differ ([`Net`]); the perftest exchanges below are the same code.

use dpwarp::verbs::smallvec;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use dpwarp::cm::{self, ConnParam, Listener, Net};
use dpwarp::verbs::{
    sge, Access, Cq, Device, Mr, Opcode, Pd, Qp, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode,
    WcStatus,
};

use crate::cli::{progress_clear, progress_tick, NetArgs, Verbosity};
use crate::load::{self, Wait};
use crate::net::{backend, log_device_stats, start_dpdk_with, Backend};
use crate::table::{self, LINE};

/// perftest's protocol version we speak (sent in the version exchange).
const PERFTEST_VERSION: &str = "6.06";
/// `sizeof(struct pingpong_dest)`.
const DEST_LEN: usize = 56;
/// Control-connection receive buffers (every control message fits).
const CTRL_BUF: usize = 256;
const CTRL_RECVS: usize = 8;
/// perftest's default send queue depth for bandwidth tests.
const TX_DEPTH: usize = 128;
/// Outstanding RDMA Reads we ask for in read_bw (the MPA IRD/ORD; siw's maximum is 128).
const READ_DEPTH: u16 = 16;
/// Page size and cache line the other side is told about (`check_sys_data`).
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// IBV_MTU_1024, what siw reports, as `check_mtu` sends it.
const MTU_STR: &[u8; 2] = b"3\0";

/// perftest's tests (`ib_<test>`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfTest {
    /// RDMA Write bandwidth.
    #[value(name = "write_bw")]
    WriteBw,
    /// RDMA Read bandwidth.
    #[value(name = "read_bw")]
    ReadBw,
    /// Send bandwidth (credit-paced, as perftest on iWARP).
    #[value(name = "send_bw")]
    SendBw,
    /// RDMA Write ping-pong latency.
    #[value(name = "write_lat")]
    WriteLat,
    /// RDMA Read latency.
    #[value(name = "read_lat")]
    ReadLat,
    /// Send ping-pong latency.
    #[value(name = "send_lat")]
    SendLat,
}

impl PerfTest {
    /// The name on the command line and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            PerfTest::WriteBw => "write_bw",
            PerfTest::ReadBw => "read_bw",
            PerfTest::SendBw => "send_bw",
            PerfTest::WriteLat => "write_lat",
            PerfTest::ReadLat => "read_lat",
            PerfTest::SendLat => "send_lat",
        }
    }
    fn is_lat(self) -> bool {
        matches!(
            self,
            PerfTest::WriteLat | PerfTest::ReadLat | PerfTest::SendLat
        )
    }
}

/// `--crc`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    /// Ask for CRC32c on FPDUs.
    On,
    /// Follow the peer.
    Off,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The test.
    #[arg(value_enum)]
    test: PerfTest,
    /// Server address: given = client, absent = server (as perftest).
    server: Option<String>,
    /// Port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    size: usize,
    /// Iterations.
    #[arg(short = 'n', long = "iters", default_value_t = 5000)]
    iters: u64,
    /// Run for this many seconds instead of -n iterations (write_bw, read_bw).
    #[arg(short = 'D', long = "duration")]
    duration: Option<u64>,
    /// All sizes 2..2^23 (client and server must both give it).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Use rdma_cm (the only connection method dpwarp has; accepted for perftest command lines).
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
    /// Report in Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Also print the results as one JSON object per size on stdout.
    #[arg(long)]
    json: bool,
    /// CRC32c on FPDUs (on: ask for it; off: follow the peer).
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    crc: OnOff,
    /// Both rdma_cm connections' byte stream.
    #[command(flatten)]
    pub net: NetArgs,
    /// DPDK workers: `driven` (this tool's thread runs its worker whenever it polls a CQ,
    /// pinned to the worker's core: run to completion) or `background` (worker threads).
    /// Default: driven for the latency tests, background for the bandwidth tests.
    #[arg(long, value_enum)]
    worker_mode: Option<crate::net::ModeArg>,
    #[command(flatten)]
    pub verbosity: Verbosity,
    #[command(flatten)]
    startup: crate::net::StartupOpts,
}

/// Driven DPDK workers: every CQ the tool makes runs this when polled empty.
static CQ_DRIVER: std::sync::OnceLock<dpwarp::verbs::CqDriver> = std::sync::OnceLock::new();
/// With driven workers, what a QP's `post_send` runs (`Qp::drive_with`, the doorbell).
static QP_DRIVER: std::sync::OnceLock<dpwarp::verbs::CqDriver> = std::sync::OnceLock::new();

/// On DPDK: what each port's PMD granted, as the `--json` lines' `"ports"` (read when a line
/// is printed: the link may have come up since the start).
type PortsJson = Box<dyn Fn() -> serde_json::Value + Send + Sync>;
static PORTS: std::sync::OnceLock<PortsJson> = std::sync::OnceLock::new();

/// The `"ports"` of a `--json` line (None over kernel TCP).
fn ports_json() -> Option<serde_json::Value> {
    PORTS.get().map(|f| f())
}

/// A new progress phase: one size of the test.
fn progress_phase(a: &Args, size: usize) {
    crate::cli::progress_phase(format!("perf: {} {size} B", a.test.name()));
}

/// The client's report (`struct bw_report_data` fields exchanged by `xchg_bw_reports`).
#[derive(Debug, Clone, Copy, Default)]
struct Report {
    size: u64,
    iters: u64,
    bw_peak: f64,
    bw_avg: f64,
    msg_rate: f64,
}

pub fn run(a: Args) -> Result<(), String> {
    let backend = backend(&a.net)?;
    let read = matches!(a.test, PerfTest::ReadBw | PerfTest::ReadLat);
    let crc = a.crc == OnOff::On;
    let sizes: Vec<usize> = if a.all {
        (1..=23).map(|e| 1usize << e).collect()
    } else {
        vec![a.size]
    };
    if sizes.iter().any(|&s| s == 0 || s > 1 << 23) {
        return Err("size must be 1..=8388608".into());
    }
    // Refused rather than ignored: a run of -n iterations reported as a run of -D seconds would
    // be read as what was asked for. (perftest refuses -D where it does not run it, too.)
    if a.duration.is_some() && !matches!(a.test, PerfTest::WriteBw | PerfTest::ReadBw) {
        return Err(format!(
            "-D (duration) is supported for write_bw and read_bw; {} runs -n iterations",
            a.test.name()
        ));
    }
    // perftest -R write_bw asks for responder_resources = initiator_depth = 0 (MPA IRD/ORD 0);
    // read_bw needs outstanding Reads: ask for READ_DEPTH both ways.
    let depth = if read { READ_DEPTH } else { 0 };
    let param = ConnParam {
        responder_resources: depth,
        initiator_depth: depth,
        crc,
        timeout: Duration::from_secs(10),
        ..ConnParam::default()
    };
    // Resolve the server address before starting DPDK (a typo should not cost an EAL start).
    let addr = a
        .server
        .as_deref()
        .map(|h| resolve(h, a.port))
        .transpose()?;
    // `_dp` keeps the dataplane (EAL, ports, workers) running until the test ends.
    let (_dp, net) = if let Backend::Dpdk(config) = &backend {
        if addr.is_some_and(|s| s.is_ipv6()) {
            return Err("the DPDK dataplane is IPv4 only".into());
        }
        let mode = a.worker_mode.unwrap_or(if a.test.is_lat() {
            crate::net::ModeArg::Driven
        } else {
            crate::net::ModeArg::Background
        });
        let (dp, ep) = start_dpdk_with(config, a.net.port_index, mode.into())?;
        let reporter = dp.port_reporter();
        let _ = PORTS.set(Box::new(move || {
            serde_json::to_value(reporter.reports()).unwrap_or_default()
        }));
        if ep.is_driven() {
            let e = ep.clone();
            let _ = CQ_DRIVER.set(std::sync::Arc::new(move || e.poll()));
            let e = ep.clone();
            let _ = QP_DRIVER.set(std::sync::Arc::new(move || e.poll_transmit()));
        }
        // perftest's client starts connecting at once; on DPDK the port's link must be up first.
        let up = Duration::from_secs(30);
        if addr.is_some() && !dp.wait_link_up(up) {
            return Err(format!(
                "DPDK port {}: link did not come up within {up:?}",
                a.net.port_index
            ));
        }
        (Some(dp), Net::from(ep))
    } else {
        (None, Net::kernel())
    };
    let net = &net;
    let r = if a.test.is_lat() {
        lat(&a, net, addr, &param, &sizes)
    } else {
        match (addr, a.test == PerfTest::SendBw) {
            (Some(addr), false) => client(&a, net, addr, &param, &sizes),
            (Some(addr), true) => send_client(&a, net, addr, &param, &sizes),
            (None, false) => server(&a, net, &param, &sizes),
            (None, true) => send_server(&a, net, &param, &sizes),
        }
    };
    if let Some(dp) = &_dp {
        log_device_stats(dp);
    }
    r
}

/// The server's listener for both connections: all addresses on kernel TCP (as perftest's
/// server without a bind address), the port's own address on DPDK.
fn listen(a: &Args, net: &Net) -> Result<Listener, String> {
    let l = a
        .startup
        .listen(net, SocketAddr::from(([0, 0, 0, 0], a.port)))?;
    // Always on stderr (not a log line): scripts wait for it, and a DPDK listener is invisible
    // to `ss`.
    eprintln!("perf: listening on port {}", a.port);
    Ok(l)
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))
}

/// One side's endpoint: PD, CQ, QP.
struct Ep {
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn endpoint(dev: &Device, recvs: usize) -> Ep {
    let pd = dev.alloc_pd();
    let cq = Cq::new(4096);
    if let Some(d) = CQ_DRIVER.get() {
        cq.drive_with(d.clone());
    }
    let qp = Qp::new(
        &pd,
        &QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCap {
                max_send_wr: TX_DEPTH.max(16),
                max_recv_wr: recvs.max(1),
            },
        },
    );
    if let Some(d) = QP_DRIVER.get() {
        qp.drive_with(d.clone());
    }
    Ep { pd, cq, qp }
}

/// The control connection: lock-step exchanges of one Send each way.
struct Ctrl {
    ep: Ep,
    client: bool,
    send: Mr,
    recv: Mr,
}

impl Ctrl {
    fn new(dev: &Device, client: bool) -> Result<Ctrl, String> {
        let ep = endpoint(dev, CTRL_RECVS);
        let send = ep.pd.reg_mr(CTRL_BUF, Access::LOCAL_WRITE);
        let recv = ep.pd.reg_mr(CTRL_BUF * CTRL_RECVS, Access::LOCAL_WRITE);
        let c = Ctrl {
            ep,
            client,
            send,
            recv,
        };
        for i in 0..CTRL_RECVS {
            c.post_recv(i)?;
        }
        Ok(c)
    }

    fn post_recv(&self, i: usize) -> Result<(), String> {
        self.ep
            .qp
            .post_recv(RecvWr {
                wr_id: i as u64,
                sg_list: smallvec![sge(&self.recv, i * CTRL_BUF, CTRL_BUF)],
            })
            .map_err(|e| format!("control: post recv: {e}"))
    }

    fn send(&self, data: &[u8]) -> Result<(), String> {
        self.send.write_at(0, data);
        self.ep
            .qp
            .post_send(SendWr {
                wr_id: 1 << 32,
                opcode: Opcode::Send,
                sg_list: smallvec![sge(&self.send, 0, data.len())],
                signaled: true,
            })
            .map_err(|e| format!("control: post send: {e}"))?;
        // Wait for the send completion so the buffer can be reused (as rdma_write_data does).
        self.wait(WcOpcode::Send).map(|_| ())
    }

    fn recv(&self) -> Result<Vec<u8>, String> {
        let wc = self.wait(WcOpcode::Recv)?;
        let i = wc.wr_id as usize;
        let mut v = vec![0u8; (wc.byte_len as usize).min(CTRL_BUF)];
        self.recv.read_at(i * CTRL_BUF, &mut v);
        // The message is ours whatever follows. A stock perftest server closes the control
        // connection right after its last Send, so that close can land between this receive
        // and its re-post; then the re-post fails (the QP is closed) but the exchange did
        // not. The next receive, if any, reports the close.
        match self.post_recv(i) {
            Err(e) if self.ep.qp.is_closed() => {
                log::debug!("perf: control: not re-posting receive {i}, the peer closed: {e}")
            }
            r => r?,
        }
        Ok(v)
    }

    fn wait(&self, want: WcOpcode) -> Result<dpwarp::verbs::WorkCompletion, String> {
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            match self.ep.cq.wait(Duration::from_millis(50)) {
                Some(wc) if wc.status != WcStatus::Success => {
                    return Err(format!("control: completion failed: {:?}", wc.status))
                }
                Some(wc) if wc.opcode == want => return Ok(wc),
                Some(wc) => return Err(format!("control: unexpected completion {wc:?}")),
                None if self.ep.qp.is_closed() => {
                    return Err("control connection closed by the peer".into())
                }
                None if Instant::now() > end => return Err("control: timed out".into()),
                None => {}
            }
        }
    }

    /// `ctx_xchg_data`: the client sends then receives, the server receives then sends.
    fn xchg(&self, mine: &[u8]) -> Result<Vec<u8>, String> {
        if self.client {
            self.send(mine)?;
            self.recv()
        } else {
            let r = self.recv()?;
            self.send(mine)?;
            Ok(r)
        }
    }
}

/// `struct pingpong_dest` in the byte order `rdma_write_keys` sends it (fields big endian).
fn dest(qpn: u32, rkey: u32, vaddr: u64) -> [u8; DEST_LEN] {
    let mut d = [0u8; DEST_LEN];
    // lid 0, out_reads 0; qpn; psn (any; iWARP has none); rkey; 4 bytes padding; vaddr;
    // gid (zero: iWARP addresses by IP); srqn 0; gid_index 0.
    d[8..12].copy_from_slice(&qpn.to_be_bytes());
    d[12..16].copy_from_slice(&(qpn.wrapping_mul(0x9e37) & 0xff_ffff).to_be_bytes());
    d[16..20].copy_from_slice(&rkey.to_be_bytes());
    d[24..32].copy_from_slice(&vaddr.to_be_bytes());
    d
}

fn parse_dest(d: &[u8]) -> Result<(u32, u64), String> {
    if d.len() < 32 {
        return Err(format!("peer's pingpong_dest too short: {} bytes", d.len()));
    }
    let rkey = u32::from_be_bytes([d[16], d[17], d[18], d[19]]);
    let mut v = [0u8; 8];
    v.copy_from_slice(&d[24..32]);
    Ok((rkey, u64::from_be_bytes(v)))
}

fn version_bytes() -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..PERFTEST_VERSION.len()].copy_from_slice(PERFTEST_VERSION.as_bytes());
    v
}

/// Client: open the control connection and run the preamble on it.
fn connect_control(
    dev: &Device,
    net: &Net,
    addr: SocketAddr,
    param: &ConnParam,
) -> Result<Ctrl, String> {
    let ctrl = Ctrl::new(dev, true)?;
    net.connect(addr, &ctrl.ep.qp, param)
        .map_err(|e| format!("control connection: {e}"))?;
    std::thread::sleep(FIRST_SEND_DELAY);
    preamble(&ctrl)?;
    Ok(ctrl)
}

/// The control steps before the data connection (version, system data, MTU, GID check).
fn preamble(ctrl: &Ctrl) -> Result<(), String> {
    let rv = ctrl.xchg(&version_bytes())?;
    let rv = String::from_utf8_lossy(&rv[..rv.iter().position(|&c| c == 0).unwrap_or(rv.len())])
        .into_owned();
    log::info!("perf: peer perftest version {rv:?}");
    ctrl.xchg(&CYCLE_BUFFER.to_be_bytes())?;
    ctrl.xchg(&CACHE_LINE.to_be_bytes())?;
    ctrl.xchg(MTU_STR)?;
    ctrl.xchg(&[0u8; DEST_LEN])?;
    Ok(())
}

const DISCONNECT_DELAY_MS: u64 = 500;

/// Client end of every test: the table footer, then both connections closed.
fn client_teardown(ctrl: &Ctrl, data: &Ep) {
    print_footer();
    // Let the server's last Send complete before our FIN reaches it (siw completes a Send only
    // once it is on the wire; a QP torn down before that fails it).
    std::thread::sleep(Duration::from_millis(DISCONNECT_DELAY_MS));
    data.qp.disconnect();
    ctrl.ep.qp.disconnect();
    data.qp.wait_closed(Duration::from_secs(2));
    ctrl.ep.qp.wait_closed(Duration::from_secs(2));
}

/// siw can leave an FPDU arriving right after its MPA Reply unprocessed (peer README defect 2).
const FIRST_SEND_DELAY: Duration = Duration::from_millis(100);

fn client(
    a: &Args,
    net: &Net,
    addr: SocketAddr,
    param: &ConnParam,
    sizes: &[usize],
) -> Result<(), String> {
    let dev = Device::open();
    let ctrl = connect_control(&dev, net, addr, param)?;
    let max = *sizes.iter().max().unwrap_or(&a.size);
    // The server listens for the data connection only after the preamble: like perftest's
    // retry_rdma_connect, try up to 10 times 100 ms apart (a QP connects once: new one each time).
    let mut attempt = 0;
    let (data, buf, ord) = loop {
        let data = endpoint(&dev, 1);
        let buf = data
            .pd
            .reg_mr(max.max(CYCLE_BUFFER as usize) * 2, Access::LOCAL_WRITE);
        match net.connect(addr, &data.qp, param) {
            Ok(n) => break (data, buf, n.ord),
            Err(e) if attempt < 10 => {
                log::debug!("perf: data connection attempt {attempt}: {e}");
                attempt += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(format!("data connection: {e}")),
        }
    };
    std::thread::sleep(FIRST_SEND_DELAY);
    ctrl.xchg(&[0u8; DEST_LEN])?;
    let my = dest(1, buf.stag(), buf.addr());
    let mut remote = (0, 0);
    for _ in 0..3 {
        remote = parse_dest(&ctrl.xchg(&my)?)?;
    }
    let (rkey, raddr) = remote;
    print_header(a, title(a), max);
    // Reads in flight are bounded by the negotiated ORD (RFC 6581 §9.1), Writes by the SQ depth.
    if a.test == PerfTest::ReadBw && ord == 0 {
        data.qp.disconnect();
        ctrl.ep.qp.disconnect();
        return Err(
            "the data connection negotiated ORD 0 (the server's IRD is 0): no RDMA Read \
                    may be outstanding (RFC 6581 §9.1), so read_bw cannot run"
                .into(),
        );
    }
    let depth = if a.test == PerfTest::ReadBw {
        usize::from(ord).clamp(1, TX_DEPTH)
    } else {
        TX_DEPTH
    };
    for &size in sizes {
        let r = bw_loop(a, &data, &buf, size, rkey, raddr, depth)?;
        ctrl.xchg(&my)?;
        ctrl.xchg(&r.size.to_be_bytes())?;
        ctrl.xchg(&r.iters.to_be_bytes())?;
        ctrl.xchg(&r.bw_peak.to_bits().to_be_bytes())?;
        ctrl.xchg(&r.bw_avg.to_bits().to_be_bytes())?;
        ctrl.xchg(&r.msg_rate.to_bits().to_be_bytes())?;
        ctrl.xchg(&my)?;
        print_row(a, &r);
    }
    client_teardown(&ctrl, &data);
    Ok(())
}

/// WRs whose post and completion times feed the BW peak (perftest keeps all of them; the
/// exact search below is quadratic, so beyond this the peak covers the first PEAK_SAMPLES).
const PEAK_SAMPLES: usize = 20_000;

/// perftest's BW peak (`print_report_bw`): the shortest time per message over any run of
/// consecutive WRs i..=j, measured from the post of i to the completion of j, i.e.
/// min over i <= j of (completed[j] - posted[i]) / (j - i + 1), in seconds. Completions that
/// arrive in a burst do not make a short window look infinitely fast, because each window
/// starts at a post, not at a completion.
fn best_time_per_message(posted: &[Instant], completed: &[Instant]) -> Option<f64> {
    let n = posted.len().min(completed.len());
    let mut best: Option<f64> = None;
    for (i, p) in posted[..n].iter().enumerate() {
        for (k, c) in completed[i..n].iter().enumerate() {
            let t = c.saturating_duration_since(*p).as_secs_f64() / (k + 1) as f64;
            if best.is_none_or(|b| t < b) {
                best = Some(t);
            }
        }
    }
    best
}

/// Post `iters` (or `-D` seconds of) RDMA Writes (write_bw) or RDMA Reads (read_bw) with at
/// most `depth` outstanding ([`load::bw_window`]), and measure from the first post to the last
/// completion.
fn bw_loop(
    a: &Args,
    ep: &Ep,
    buf: &Mr,
    size: usize,
    rkey: u32,
    raddr: u64,
    depth: usize,
) -> Result<Report, String> {
    let opcode = if a.test == PerfTest::ReadBw {
        Opcode::Read {
            remote_addr: raddr,
            rkey,
        }
    } else {
        Opcode::Write {
            remote_addr: raddr,
            rkey,
        }
    };
    let deadline = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
    progress_phase(a, size);
    // For perftest's BW peak: when each WR was posted and when it completed (iterations mode
    // only, like perftest's -D runs that report no peak; bounded by PEAK_SAMPLES).
    let run = load::bw_window(
        &ep.qp,
        &ep.cq,
        Wait::Block,
        &load::Window {
            opcode,
            buf,
            size,
            iters: if deadline.is_some() {
                u64::MAX
            } else {
                a.iters
            },
            deadline,
            depth,
            track: if deadline.is_none() {
                (a.iters as usize).min(PEAK_SAMPLES)
            } else {
                0
            },
        },
    )?;
    let done = run.done;
    let secs = run.t0.elapsed().as_secs_f64().max(1e-9);
    let bytes = (done * size as u64) as f64;
    let bw_avg = bytes / secs / (1024.0 * 1024.0);
    let bw_peak = match best_time_per_message(&run.posted, &run.completed) {
        Some(t) => size as f64 / t.max(1e-12) / (1024.0 * 1024.0),
        None => bw_avg,
    };
    Ok(Report {
        size: size as u64,
        iters: done,
        bw_peak,
        bw_avg,
        msg_rate: done as f64 / secs / 1e6,
    })
}

fn server(a: &Args, net: &Net, param: &ConnParam, sizes: &[usize]) -> Result<(), String> {
    let l = listen(a, net)?;
    let dev = Device::open();
    let ctrl = Ctrl::new(&dev, false)?;
    accept(&l, &ctrl.ep.qp, param, "control")?;
    preamble(&ctrl)?;
    let data = endpoint(&dev, 1);
    let max = *sizes.iter().max().unwrap_or(&a.size);
    let buf = data.pd.reg_mr(
        max.max(CYCLE_BUFFER as usize) * 2,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    accept(&l, &data.qp, param, "data")?;
    ctrl.xchg(&[0u8; DEST_LEN])?;
    let my = dest(1, buf.stag(), buf.addr());
    for _ in 0..3 {
        ctrl.xchg(&my)?;
    }
    print_header(a, title(a), max);
    for _ in sizes {
        // The client writes; the server waits for its report.
        ctrl.xchg(&my)?;
        let mut f = [0u64; 5];
        for v in f.iter_mut() {
            let r = ctrl.xchg(&[0u8; 8])?;
            if r.len() < 8 {
                return Err(format!("report field of {} bytes", r.len()));
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[..8]);
            *v = u64::from_be_bytes(b);
        }
        ctrl.xchg(&my)?;
        let r = Report {
            size: f[0],
            iters: f[1],
            bw_peak: f64::from_bits(f[2]),
            bw_avg: f64::from_bits(f[3]),
            msg_rate: f64::from_bits(f[4]),
        };
        print_row(a, &r);
    }
    print_footer();
    // The client disconnects; give it the chance, then close our side.
    data.qp.wait_closed(Duration::from_secs(5));
    ctrl.ep.qp.wait_closed(Duration::from_secs(5));
    data.qp.disconnect();
    ctrl.ep.qp.disconnect();
    Ok(())
}

fn accept(l: &Listener, qp: &Qp, param: &ConnParam, what: &str) -> Result<(), String> {
    let req = loop {
        match l.get_request(Duration::from_secs(3600)) {
            Ok(r) => break r,
            Err(cm::CmError::Timeout) => continue,
            Err(e) => log::warn!("perf: {what} connection request failed: {e}"),
        }
    };
    req.accept(qp, param)
        .map(|_| ())
        .map_err(|e| format!("{what} connection: {e}"))
}

fn title(a: &Args) -> &'static str {
    match a.test {
        PerfTest::WriteBw => "RDMA_Write BW Test",
        PerfTest::ReadBw => "RDMA_Read BW Test",
        PerfTest::SendBw => "Send BW Test",
        PerfTest::WriteLat => "RDMA_Write Latency Test",
        PerfTest::ReadLat => "RDMA_Read Latency Test",
        PerfTest::SendLat => "Send Latency Test",
    }
}

fn print_header(a: &Args, title: &str, size: usize) {
    print_header_lines(a, title, size);
    let unit = if a.report_gbits { "Gb/sec" } else { "MB/sec" };
    println!("{}", table::bw_header(unit));
}

fn print_header_lines(a: &Args, title: &str, size: usize) {
    println!("{LINE}");
    println!("                    {title}");
    println!(" Connection type : RC        Using SRQ      : OFF");
    println!(" TX depth        : {TX_DEPTH}");
    println!(" Mtu             : 1024[B]");
    println!(
        " Link type       : Ethernet (iWARP, dpwarp over {})",
        a.net.transport.name()
    );
    println!(" Max msg size    : {size}");
    println!(" Data ex. method : rdma_cm");
    println!("{LINE}");
}

fn print_row(a: &Args, r: &Report) {
    progress_clear();
    // MB/sec is MiB/s in perftest; Gb/sec is 10^9 bits.
    let conv = |mb: f64| {
        if a.report_gbits {
            mb * 1024.0 * 1024.0 * 8.0 / 1e9
        } else {
            mb
        }
    };
    println!(
        "{}",
        table::bw_row(r.size, r.iters, conv(r.bw_peak), conv(r.bw_avg), r.msg_rate)
    );
    if a.json {
        let unit = if a.report_gbits { "Gb/sec" } else { "MB/sec" };
        // Printing to stdout cannot fail in a way worth stopping the test for.
        let _ = print_json(&BwJson {
            test: a.test.name(),
            bytes: r.size,
            iterations: r.iters,
            bw_peak: conv(r.bw_peak),
            bw_average: conv(r.bw_avg),
            unit,
            msg_rate_mpps: r.msg_rate,
            ports: ports_json(),
        });
    }
}

fn print_footer() {
    println!("{LINE}");
}

/// perftest's receive depth for send_bw: 512, or the iteration count when smaller.
fn rx_depth(a: &Args) -> usize {
    (a.iters.min(512) as usize).max(1)
}

/// Connect the data QP with perftest's retries (the server listens for it only after the
/// control preamble). `recvs` receive buffers of `buf` are posted before connecting.
fn connect_data(
    dev: &Device,
    net: &Net,
    addr: SocketAddr,
    param: &ConnParam,
    len: usize,
) -> Result<(Ep, Mr), String> {
    connect_data_recvs(dev, net, addr, param, len, 0)
}

/// [`connect_data`] with `recvs` receives of `len` bytes (into the returned buffer) posted
/// before the connection exists, so the peer's first Send finds one.
fn connect_data_recvs(
    dev: &Device,
    net: &Net,
    addr: SocketAddr,
    param: &ConnParam,
    len: usize,
    recvs: usize,
) -> Result<(Ep, Mr), String> {
    let mut attempt = 0;
    loop {
        let data = endpoint(dev, recvs.max(1));
        let buf = data.pd.reg_mr(len, Access::LOCAL_WRITE);
        for i in 0..recvs {
            data.qp
                .post_recv(RecvWr {
                    wr_id: i as u64,
                    sg_list: smallvec![sge(&buf, 0, len)],
                })
                .map_err(|e| format!("post recv: {e}"))?;
        }
        match net.connect(addr, &data.qp, param) {
            Ok(_) => return Ok((data, buf)),
            Err(e) if attempt < 10 => {
                log::debug!("perf: data connection attempt {attempt}: {e}");
                attempt += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(format!("data connection: {e}")),
        }
    }
}

/// send_bw client. iWARP has no receiver-not-ready retry, so perftest paces Sends with credits:
/// the server RDMA Writes the running count of messages it has received (u32, host order, i.e.
/// little endian on x86) into a buffer the client advertised in its dest record; the client
/// keeps at most `rx_depth` Sends beyond that count in flight.
fn send_client(
    a: &Args,
    net: &Net,
    addr: SocketAddr,
    param: &ConnParam,
    sizes: &[usize],
) -> Result<(), String> {
    let dev = Device::open();
    let ctrl = connect_control(&dev, net, addr, param)?;
    let max = *sizes.iter().max().unwrap_or(&a.size);
    let (data, buf) = connect_data(&dev, net, addr, param, max)?;
    let credit = data
        .pd
        .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    std::thread::sleep(FIRST_SEND_DELAY);
    ctrl.xchg(&[0u8; DEST_LEN])?;
    let my = dest(1, credit.stag(), credit.addr());
    for _ in 0..4 {
        ctrl.xchg(&my)?;
    }
    print_header(a, title(a), max);
    let depth = rx_depth(a) as u64;
    for &size in sizes {
        credit.write_at(0, &[0; 4]);
        progress_phase(a, size);
        let t0 = Instant::now();
        let (mut posted, mut done) = (0u64, 0u64);
        let mut last = Instant::now();
        while done < a.iters {
            let mut c = [0u8; 4];
            credit.read_at(0, &mut c);
            let credits = u64::from(u32::from_le_bytes(c));
            while posted < a.iters && posted < credits + depth && posted - done < TX_DEPTH as u64 {
                data.qp
                    .post_send(SendWr {
                        wr_id: posted,
                        opcode: Opcode::Send,
                        sg_list: smallvec![sge(&buf, 0, size)],
                        signaled: true,
                    })
                    .map_err(|e| format!("post send: {e}"))?;
                posted += 1;
            }
            match data.cq.wait(Duration::from_millis(1)) {
                Some(wc) if wc.status != WcStatus::Success => {
                    return Err(format!("completion failed: {:?}", wc.status))
                }
                Some(_) => {
                    done += 1;
                    last = Instant::now();
                    if done % 256 == 0 {
                        progress_tick(done, a.iters);
                    }
                }
                None if data.qp.is_closed() => return Err("data connection closed".into()),
                None if last.elapsed() > Duration::from_secs(60) => {
                    return Err("no completion or credit for 60 s".into())
                }
                None => {}
            }
        }
        let r = report(size, done, t0.elapsed());
        ctrl.xchg(&my)?;
        print_row(a, &r);
    }
    client_teardown(&ctrl, &data);
    Ok(())
}

fn report(size: usize, done: u64, elapsed: Duration) -> Report {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let bw = (done * size as u64) as f64 / secs / (1024.0 * 1024.0);
    Report {
        size: size as u64,
        iters: done,
        // perftest does not measure a peak for send_bw; neither do we (0.00, as it prints).
        bw_peak: 0.0,
        bw_avg: bw,
        msg_rate: done as f64 / secs / 1e6,
    }
}

/// send_bw server: `rx_depth` receives posted before accepting, each reposted as it completes;
/// every `rx_depth / 3` messages the running count goes to the client's credit buffer.
fn send_server(a: &Args, net: &Net, param: &ConnParam, sizes: &[usize]) -> Result<(), String> {
    let l = listen(a, net)?;
    let dev = Device::open();
    let ctrl = Ctrl::new(&dev, false)?;
    accept(&l, &ctrl.ep.qp, param, "control")?;
    preamble(&ctrl)?;
    let depth = rx_depth(a);
    let data = endpoint(&dev, depth);
    let max = *sizes.iter().max().unwrap_or(&a.size);
    let buf = data.pd.reg_mr(max, Access::LOCAL_WRITE);
    let cnt = data.pd.reg_mr(4, Access::LOCAL_WRITE);
    let post = |i: u64| {
        data.qp
            .post_recv(RecvWr {
                wr_id: i,
                sg_list: smallvec![sge(&buf, 0, max)],
            })
            .map_err(|e| format!("post recv: {e}"))
    };
    for i in 0..depth {
        post(i as u64)?;
    }
    accept(&l, &data.qp, param, "data")?;
    ctrl.xchg(&[0u8; DEST_LEN])?;
    let my = dest(1, buf.stag(), buf.addr());
    let mut peer = (0, 0);
    for _ in 0..4 {
        peer = parse_dest(&ctrl.xchg(&my)?)?;
    }
    let (crkey, caddr) = peer;
    let batch = (depth / 3).max(1) as u64;
    print_header(a, title(a), max);
    for &size in sizes {
        progress_phase(a, size);
        let mut got = 0u64;
        let mut t0 = None;
        let mut last = Instant::now();
        while got < a.iters {
            match data.cq.wait(Duration::from_millis(20)) {
                Some(wc) if wc.status != WcStatus::Success => {
                    return Err(format!("completion failed: {:?} ({wc:?})", wc.status))
                }
                Some(wc) if wc.opcode == WcOpcode::Recv => {
                    t0.get_or_insert_with(Instant::now);
                    got += 1;
                    last = Instant::now();
                    if got.is_multiple_of(256) {
                        progress_tick(got, a.iters);
                    }
                    post(got)?;
                    if got.is_multiple_of(batch) || got == a.iters {
                        cnt.write_at(0, &(got as u32).to_le_bytes());
                        data.qp
                            .post_send(SendWr {
                                wr_id: got,
                                opcode: Opcode::Write {
                                    remote_addr: caddr,
                                    rkey: crkey,
                                },
                                sg_list: smallvec![sge(&cnt, 0, 4)],
                                signaled: false,
                            })
                            .map_err(|e| format!("post credit write: {e}"))?;
                    }
                }
                Some(_) => {}
                None if data.qp.is_closed() => return Err("data connection closed".into()),
                None if last.elapsed() > Duration::from_secs(60) => {
                    return Err(format!("only {got} of {} messages arrived", a.iters))
                }
                None => {}
            }
        }
        let r = report(size, got, t0.map_or(Duration::ZERO, |t| t.elapsed()));
        ctrl.xchg(&my)?;
        print_row(a, &r);
    }
    print_footer();
    data.qp.wait_closed(Duration::from_secs(5));
    ctrl.ep.qp.wait_closed(Duration::from_secs(5));
    data.qp.disconnect();
    ctrl.ep.qp.disconnect();
    Ok(())
}

/// write_lat / read_lat, both roles. After the shared preamble and four dest exchanges:
/// - write_lat: ping-pong of RDMA Writes of `size` bytes into the peer's advertised buffer; the
///   last byte carries the iteration number (mod 256) and each side spins on the last byte of
///   its own buffer. The server writes first (as perftest's run_iter_lat_write). Latency =
///   half the round trip. No control exchange afterwards.
/// - read_lat: the client RDMA Reads `size` bytes `iters` times, one at a time; latency = the
///   Read's completion time. One dest exchange afterwards (the server just waits for it).
/// - send_lat: the Send ping-pong of [`load::send_pingpong_run_to_completion`].
///
/// Each runs on the data QP's driver thread where it has one (kernel TCP), else here
/// ([`run_lat`]); `--json` says which (`on_driver_thread`).
fn lat(
    a: &Args,
    net: &Net,
    addr: Option<SocketAddr>,
    param: &ConnParam,
    sizes: &[usize],
) -> Result<(), String> {
    let client = addr.is_some();
    let read = a.test == PerfTest::ReadLat;
    let send = a.test == PerfTest::SendLat;
    // send_lat: receives for the peer's Sends exist before the data connection does.
    let recvs = if send { LAT_RECVS } else { 0 };
    let dev = Device::open();
    let ctrl = Ctrl::new(&dev, client)?;
    let max = *sizes.iter().max().unwrap_or(&a.size);
    let listener;
    let (data, local) = if let Some(addr) = addr {
        net.connect(addr, &ctrl.ep.qp, param)
            .map_err(|e| format!("control connection: {e}"))?;
        std::thread::sleep(FIRST_SEND_DELAY);
        preamble(&ctrl)?;
        let r = connect_data_recvs(&dev, net, addr, param, max, recvs)?;
        std::thread::sleep(FIRST_SEND_DELAY);
        r
    } else {
        listener = listen(a, net)?;
        accept(&listener, &ctrl.ep.qp, param, "control")?;
        preamble(&ctrl)?;
        let data = endpoint(&dev, recvs.max(1));
        let local = data.pd.reg_mr(max, Access::LOCAL_WRITE);
        for i in 0..recvs {
            data.qp
                .post_recv(RecvWr {
                    wr_id: i as u64,
                    sg_list: smallvec![sge(&local, 0, max)],
                })
                .map_err(|e| format!("post recv: {e}"))?;
        }
        accept(&listener, &data.qp, param, "data")?;
        (data, local)
    };
    // The buffer the peer writes into (write_lat) or reads from (read_lat).
    let target = data.pd.reg_mr(
        max,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    ctrl.xchg(&[0u8; DEST_LEN])?;
    let my = dest(1, target.stag(), target.addr());
    let mut peer = (0, 0);
    for _ in 0..4 {
        peer = parse_dest(&ctrl.xchg(&my)?)?;
    }
    let (rkey, raddr) = peer;
    print_lat_header(a, title(a), max);
    for &size in sizes {
        progress_phase(a, size);
        let (samples, on_driver_thread) = if send {
            // Over kernel TCP the ping-pong runs on the QP's driver thread (no hand-off to
            // this thread and back per message); over DPDK on this thread, which drives the
            // worker.
            load::send_pingpong_run_to_completion(
                &data.qp,
                &data.cq,
                Wait::Block,
                client,
                &local,
                size,
                a.iters,
                false,
                None,
            )
            .map(|(l, on_driver)| (l, Some(on_driver)))?
        } else if read {
            if client {
                let test = ReadLat {
                    qp: data.qp.clone(),
                    cq: data.cq.clone(),
                    local: local.clone(),
                    size,
                    iters: a.iters,
                    rkey,
                    raddr,
                    posted: None,
                    samples: Vec::with_capacity(a.iters as usize),
                    progress: false,
                    stall: Stall::new(),
                };
                run_lat(&data.qp, test).map(|(l, on_driver)| (l, Some(on_driver)))?
            } else {
                (Vec::new(), None)
            }
        } else {
            let test = WriteLat {
                qp: data.qp.clone(),
                cq: data.cq.clone(),
                local: local.clone(),
                target: target.clone(),
                client,
                size,
                iters: a.iters,
                rkey,
                raddr,
                scnt: 0,
                rcnt: 0,
                peer_seen: false,
                in_flight: false,
                posted_at: Vec::with_capacity(a.iters as usize),
                progress: false,
                stall: Stall::new(),
            };
            run_lat(&data.qp, test).map(|(l, on_driver)| (l, Some(on_driver)))?
        };
        if read || send {
            ctrl.xchg(&my)?;
        }
        if !samples.is_empty() {
            print_lat_row(a, size, &samples, on_driver_thread)?;
        }
    }
    client_teardown(&ctrl, &data);
    Ok(())
}

/// Receives kept posted in send_lat.
const LAT_RECVS: usize = 16;

/// Run a latency test to completion: on the data QP's driver thread where it has one (the
/// kernel-TCP transport; [`load::run_on_driver_thread`]), else here, running the DPDK worker
/// between steps that found nothing (driven mode) or giving the CPU away (the machine is
/// shared and the peer may be a VM). Returns the samples and whether they were taken on the
/// driver thread.
fn run_lat<T: load::Stepped>(qp: &Qp, test: T) -> Result<(Vec<Duration>, bool), String> {
    let mut test = match load::run_on_driver_thread(qp, test) {
        Ok(r) => return r,
        Err(t) => t,
    };
    test.show_progress();
    while !test.is_done() {
        if !test.step()? {
            match CQ_DRIVER.get() {
                Some(d) => {
                    d();
                }
                None => std::thread::yield_now(),
            }
        }
    }
    Ok((test.samples(), false))
}

/// read_lat (client): RDMA Reads of `size` octets, one at a time; the latency of each is
/// the time from its post to its completion.
struct ReadLat {
    qp: Qp,
    cq: Cq,
    local: Mr,
    size: usize,
    iters: u64,
    rkey: u32,
    raddr: u64,
    /// When the Read in flight was posted.
    posted: Option<Instant>,
    samples: Vec<Duration>,
    /// Tick this thread's progress line (not from the driver thread).
    progress: bool,
    stall: Stall,
}

impl ReadLat {
    fn post(&mut self) -> Result<(), String> {
        let i = self.samples.len() as u64;
        if self.progress && i % 1024 == 1023 {
            progress_tick(i + 1, self.iters);
        }
        self.posted = Some(Instant::now());
        self.qp
            .post_send(SendWr {
                wr_id: i,
                opcode: Opcode::Read {
                    remote_addr: self.raddr,
                    rkey: self.rkey,
                },
                sg_list: smallvec![sge(&self.local, 0, self.size)],
                signaled: true,
            })
            .map_err(|e| format!("post send: {e}"))
    }
}

impl load::Stepped for ReadLat {
    fn step(&mut self) -> Result<bool, String> {
        let mut moved = false;
        while let Some(wc) = self.cq.try_poll_one() {
            if wc.status != WcStatus::Success {
                return Err(format!("read_lat: completion failed: {:?}", wc.status));
            }
            if let Some(t) = self.posted.take() {
                self.samples.push(t.elapsed());
            }
            moved = true;
        }
        if self.posted.is_none() && (self.samples.len() as u64) < self.iters {
            self.post()?;
            moved = true;
        }
        self.stall.check("read_lat", &self.qp, moved)?;
        Ok(moved)
    }
    fn is_done(&self) -> bool {
        self.posted.is_none() && self.samples.len() as u64 >= self.iters
    }
    fn samples(&self) -> Vec<Duration> {
        self.samples.clone()
    }
    fn cq(&self) -> &Cq {
        &self.cq
    }
    fn name(&self) -> &'static str {
        "read_lat"
    }
    fn show_progress(&mut self) {
        self.progress = true;
    }
}

/// Fails a latency test once its QP has closed or nothing moved for [`load::STALLED`]. Looked
/// at every 256th step that found nothing, so the clock is not read on the latency path.
struct Stall {
    idle: u32,
    since: Instant,
}

impl Stall {
    fn new() -> Stall {
        Stall {
            idle: 0,
            since: Instant::now(),
        }
    }

    fn check(&mut self, what: &str, qp: &Qp, moved: bool) -> Result<(), String> {
        if moved {
            self.idle = 0;
            return Ok(());
        }
        self.idle = self.idle.wrapping_add(1);
        if self.idle % 256 != 1 {
            return Ok(());
        }
        if self.idle == 1 {
            self.since = Instant::now();
        } else if self.since.elapsed() > load::STALLED {
            return Err(format!("{what}: no progress for {:?}", load::STALLED));
        }
        if qp.is_closed() {
            return Err(format!("{what}: data connection closed"));
        }
        Ok(())
    }
}

/// write_lat, both roles: a ping-pong of RDMA Writes of `size` octets into the peer's
/// advertised buffer; the last octet carries the iteration number (mod 256) and each side
/// watches the last octet of its own buffer. The server writes first (perftest's
/// run_iter_lat_write); everyone else waits for the peer's Write before writing, and each
/// Write completes before the next wait. Latency = half the time between one's own Writes.
struct WriteLat {
    qp: Qp,
    cq: Cq,
    local: Mr,
    target: Mr,
    client: bool,
    size: usize,
    iters: u64,
    rkey: u32,
    raddr: u64,
    scnt: u64,
    rcnt: u64,
    /// The peer's Write of this round has landed (or none is awaited): ours goes next.
    peer_seen: bool,
    /// Our Write is posted and not completed yet.
    in_flight: bool,
    posted_at: Vec<Instant>,
    progress: bool,
    stall: Stall,
}

impl load::Stepped for WriteLat {
    fn step(&mut self) -> Result<bool, String> {
        let mut moved = false;
        while let Some(wc) = self.cq.try_poll_one() {
            if wc.status != WcStatus::Success {
                return Err(format!("write_lat: completion failed: {:?}", wc.status));
            }
            self.in_flight = false;
            moved = true;
        }
        while !self.in_flight && !self.is_done() {
            // Everyone waits for the peer's Write before writing, except the server's first.
            if !self.peer_seen {
                if self.rcnt < self.iters && (self.client || self.scnt >= 1) {
                    // No reset of `target`: the region is registered zeroed, and with sizes
                    // in increasing order (-a) the flag octet of each size is beyond every
                    // earlier Write.
                    let mut b = [0u8; 1];
                    self.target.read_at(self.size - 1, &mut b);
                    if b[0] != (self.rcnt + 1) as u8 {
                        break;
                    }
                    self.rcnt += 1;
                    moved = true;
                }
                self.peer_seen = true;
            }
            if self.scnt < self.iters {
                self.posted_at.push(Instant::now());
                self.scnt += 1;
                if self.progress && self.scnt.is_multiple_of(1024) {
                    progress_tick(self.scnt, self.iters);
                }
                self.local.write_at(self.size - 1, &[self.scnt as u8]);
                self.qp
                    .post_send(SendWr {
                        wr_id: self.scnt,
                        opcode: Opcode::Write {
                            remote_addr: self.raddr,
                            rkey: self.rkey,
                        },
                        sg_list: smallvec![sge(&self.local, 0, self.size)],
                        signaled: true,
                    })
                    .map_err(|e| format!("post send: {e}"))?;
                self.in_flight = true;
                moved = true;
            }
            self.peer_seen = false;
        }
        self.stall.check("write_lat", &self.qp, moved)?;
        Ok(moved)
    }
    fn is_done(&self) -> bool {
        self.scnt >= self.iters && self.rcnt >= self.iters && !self.in_flight
    }
    fn samples(&self) -> Vec<Duration> {
        load::half_round_trips(&self.posted_at)
    }
    fn cq(&self) -> &Cq {
        &self.cq
    }
    fn name(&self) -> &'static str {
        "write_lat"
    }
    fn show_progress(&mut self) {
        self.progress = true;
    }
}

fn print_lat_header(a: &Args, title: &str, size: usize) {
    print_header_lines(a, title, size);
    println!("{}", table::LAT_HEADER);
}

/// One latency row: t_typical is the median. Every figure comes from [`dpwarp::latency`] (one
/// percentile definition for every tool; see there).
fn print_lat_row(
    a: &Args,
    size: usize,
    samples: &[Duration],
    on_driver_thread: Option<bool>,
) -> Result<(), String> {
    progress_clear();
    let s = dpwarp::latency::Summary::of(samples.iter().copied());
    println!("{}", table::lat_row(size, &s));
    if a.json {
        print_json(&LatJson {
            test: a.test.name(),
            bytes: size,
            iterations: s.count,
            t_min_us: s.min_us,
            t_max_us: s.max_us,
            p50_us: s.p50_us,
            t_avg_us: s.mean_us,
            t_stdev_us: s.stdev_us,
            p99_us: s.p99_us,
            p99_9_us: s.p999_us,
            on_driver_thread,
            ports: ports_json(),
        })?;
    }
    Ok(())
}

/// `--json` line of a latency test (microseconds; p50 is perftest's t_typical).
#[derive(serde::Serialize)]
struct LatJson {
    test: &'static str,
    bytes: usize,
    iterations: u64,
    t_min_us: f64,
    t_max_us: f64,
    p50_us: f64,
    t_avg_us: f64,
    t_stdev_us: f64,
    p99_us: f64,
    p99_9_us: f64,
    /// send_lat: whether the ping-pong ran on the QP's driver thread (the kernel-TCP
    /// transport) rather than the application thread (DPDK: the thread driving the worker).
    #[serde(skip_serializing_if = "Option::is_none")]
    on_driver_thread: Option<bool>,
    /// DPDK: what each port's PMD granted (`dataplane::PortReport`).
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<serde_json::Value>,
}

/// `--json` line of a bandwidth test (`unit`: MB/sec = MiB/s as perftest, or Gb/sec).
#[derive(serde::Serialize)]
struct BwJson {
    test: &'static str,
    bytes: u64,
    iterations: u64,
    bw_peak: f64,
    bw_average: f64,
    unit: &'static str,
    msg_rate_mpps: f64,
    /// DPDK: what each port's PMD granted (`dataplane::PortReport`).
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<serde_json::Value>,
}

/// One JSON object on one line of stdout.
fn print_json<T: serde::Serialize>(v: &T) -> Result<(), String> {
    println!("{}", serde_json::to_string(v).map_err(|e| e.to_string())?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer's last control message followed at once by its close (what a stock perftest
    /// server does at the end of write_bw): the message is still received, and only the next
    /// receive fails.
    #[test]
    fn control_message_then_peer_close_is_received() {
        let net = Net::kernel();
        let l = net
            .listen("127.0.0.1:0".parse().unwrap())
            .expect("listen on loopback");
        let addr = l.local_addr().unwrap();
        let dev = Device::open();
        let peer = std::thread::spawn(move || {
            let dev = Device::open();
            let ctrl = Ctrl::new(&dev, false).unwrap();
            accept(&l, &ctrl.ep.qp, &ConnParam::default(), "control").unwrap();
            ctrl.send(b"last").unwrap();
            ctrl.ep.qp.disconnect();
            ctrl.ep.qp.wait_closed(Duration::from_secs(5));
        });
        let ctrl = Ctrl::new(&dev, true).unwrap();
        Net::kernel()
            .connect(addr, &ctrl.ep.qp, &ConnParam::default())
            .unwrap();
        // Receive only after the close has reached us: the re-post must then fail.
        assert!(
            ctrl.ep.qp.wait_closed(Duration::from_secs(10)),
            "peer close"
        );
        peer.join().unwrap();
        assert_eq!(ctrl.recv().unwrap(), b"last");
        // The receives still posted were flushed by the close.
        let e = ctrl.recv().unwrap_err();
        assert!(e.contains("WrFlushErr") || e.contains("closed"), "{e}");
    }

    /// Four WRs posted at t=0 whose completions arrive together at t=10 ms: the best window is
    /// all four, 2.5 ms per message. (Timing completion bursts alone would call it infinitely
    /// fast.)
    #[test]
    fn bw_peak_is_perftests_best_post_to_completion_window() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let posted = [ms(0); 4];
        let completed = [ms(10); 4];
        let t = best_time_per_message(&posted, &completed).unwrap();
        assert!((t - 0.0025).abs() < 1e-9, "{t}");
        // A steady stream with one slow completion: the window avoiding it wins.
        let posted = [ms(0), ms(1), ms(2), ms(3)];
        let completed = [ms(2), ms(3), ms(40), ms(41)];
        let t = best_time_per_message(&posted, &completed).unwrap();
        assert!((t - 0.0015).abs() < 1e-9, "{t}"); // WRs 0..=1: (3 - 0) / 2 ms
        assert!(best_time_per_message(&[], &[]).is_none());
    }
}
