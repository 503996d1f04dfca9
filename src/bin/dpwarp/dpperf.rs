//! `dpwarp dpperf`: dpwarp's own bench protocol, used by scripts/bench, the demo and the DPDK
//! tests: `write_bw` (RDMA Write bandwidth) and `send_lat` (Send ping-pong, one-way latency =
//! RTT/2 as perftest's t_typical) with the dataplane's copy and segment counts, plus the plain
//! kernel-TCP baselines `tcp_stream` and `tcp_pingpong` the bench compares against.
//!
//! It is not perftest's wire protocol (`dpwarp perf` is): one connection per test and size, no
//! control connection; the client names the test in its MPA Request's private data
//! (`'P'`, test, size, iterations), the server advertises its buffer (address, STag) in the
//! MPA Reply's, and a write_bw run ends with a Send the server answers. So one `--server`
//! serves every test and size in turn. The data loops are `perf`'s ([`crate::load`]).

use dpwarp::verbs::smallvec;
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::cli::{NetArgs, Verbosity};
use crate::load::{self, Wait};
use crate::net::{backend, log_device_stats, ports_json, start_dpdk_with, Backend, ModeArg};
#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::{CopyStats, Dataplane};
use crate::table;
use dpwarp::cm::{CmError, ConnParam, ConnRequest, Net};
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::{CopyStats, Dataplane};
use dpwarp::latency::Summary;
use dpwarp::verbs::{sge, Access, Cq, Device, Opcode, Pd, Qp, QpCap, QpInitAttr, RecvWr, SendWr};

/// `dpperf --test`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// RDMA Write bandwidth (a final Send/reply proves every byte arrived).
    #[value(name = "write_bw")]
    WriteBw,
    /// Send ping-pong latency (one-way = RTT/2).
    #[value(name = "send_lat")]
    SendLat,
}

impl Test {
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::SendLat => "send_lat",
        }
    }
    fn code(self) -> u8 {
        match self {
            Test::WriteBw => 1,
            Test::SendLat => 2,
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Default)]
pub struct PerfResult {
    pub test: String,
    pub size: usize,
    pub iters: usize,
    pub gbps: f64,
    pub mpps: f64,
    /// One-way latency in microseconds (send_lat, tcp_pingpong; all 0 for the others).
    pub lat: Summary,
    /// Latency tests: the round trips exchanged before the measured ones and left out.
    pub warmup: Option<usize>,
    /// send_lat with `--mps`: the pings sent per second (the latencies are then half of each
    /// ping's own round trip).
    pub pings_per_s: Option<u32>,
    /// send_lat: how long the ping-pong took, warm-up round trips included (seconds).
    pub run_s: Option<f64>,
    /// send_lat: whether this side's ping-pong ran on its QP's driver thread (the kernel-TCP
    /// transport: `load::send_pingpong_run_to_completion`) rather than on the calling thread.
    pub on_driver_thread: Option<bool>,
    /// DPDK only: octets copied inside dpwarp on this side during the test.
    pub copies: Option<CopyStats>,
    /// DPDK only: TCP segments with payload this side sent during the test.
    pub segments: Option<u64>,
    /// DPDK only: of `segments`, the frames the device cut from larger segments smoltcp built
    /// (segmentation offload, `[tcp] gso`; 0 where it does not apply).
    pub gso_frames: Option<u64>,
    /// DPDK only: the share of this side's worker time in passes that did work (near 1: this
    /// side is the bottleneck).
    pub worker_busy: Option<f64>,
    /// DPDK only: TCP segments this side retransmitted during the test and its tail loss
    /// probes (fast, timeout, probe; see `WorkerStats::tcp_fast_retransmits`).
    pub tcp_retransmits: Option<Retransmits>,
    /// RDMA tests: whether FPDUs carried a CRC32c on this connection (negotiated in MPA
    /// startup, RFC 5044 §7.1: both ends must ask for none, `--no-crc`).
    pub mpa_crc: Option<bool>,
    /// DPDK only: what each port's PMD granted ([`crate::net::ports_json`]).
    pub ports: Option<serde_json::Value>,
}

impl PerfResult {
    /// The `--json` line: `{"transport", "test", "size", "iters", "gbps", "mpps", "lat_us": {min,
    /// p50, p99, p999, max, avg, count}}`, for latency tests `warmup` and `on_driver_thread`,
    /// and, on DPDK, `copies`,
    /// `segments`, `segments_per_msg`, `gso_frames`, `worker_busy`, `tcp_retransmits`
    /// (`{fast, timeout, probe}`); for RDMA tests `mpa_crc`,
    /// and with CRC on `mpa_crc_impl` (the code that computed it, `dpwarp::crc::implementation()`:
    /// a build without SSE4.2 and PCLMULQDQ, e.g. with RUSTFLAGS set, runs the slower one);
    /// on DPDK last `ports`, what each port's PMD granted (`dataplane::PortReport`).
    pub fn json(&self, transport: &str) -> String {
        let v = ResultJson {
            transport,
            test: &self.test,
            size: self.size,
            iters: self.iters,
            gbps: self.gbps,
            mpps: self.mpps,
            lat_us: LatUs {
                min: self.lat.min_us,
                p50: self.lat.p50_us,
                p99: self.lat.p99_us,
                p999: self.lat.p999_us,
                max: self.lat.max_us,
                avg: self.lat.mean_us,
                count: self.lat.count,
            },
            warmup: self.warmup,
            pings_per_s: self.pings_per_s,
            run_s: self.run_s,
            on_driver_thread: self.on_driver_thread,
            copies: self.copies.as_ref().map(CopiesJson::from),
            segments: self.segments,
            segments_per_msg: self.segments.map(|n| n as f64 / self.iters.max(1) as f64),
            gso_frames: self.gso_frames,
            worker_busy: self.worker_busy,
            tcp_retransmits: self.tcp_retransmits.map(RetransmitsJson::from),
            mpa_crc: self.mpa_crc,
            mpa_crc_impl: (self.mpa_crc == Some(true)).then_some(dpwarp::crc::implementation()),
            ports: self.ports.as_ref(),
        };
        serde_json::to_string(&v).expect("plain numbers and strings serialize")
    }
}

/// [`PerfResult::json`]'s shape (scripts/bench reads it; keep the keys).
#[derive(serde::Serialize)]
struct ResultJson<'a> {
    transport: &'a str,
    test: &'a str,
    size: usize,
    iters: usize,
    gbps: f64,
    mpps: f64,
    lat_us: LatUs,
    #[serde(skip_serializing_if = "Option::is_none")]
    warmup: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pings_per_s: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_driver_thread: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copies: Option<CopiesJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments_per_msg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gso_frames: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_busy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_retransmits: Option<RetransmitsJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mpa_crc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mpa_crc_impl: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<&'a serde_json::Value>,
}

#[derive(serde::Serialize)]
struct LatUs {
    min: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    avg: f64,
    /// Samples behind the figures (the measured round trips).
    count: u64,
}

/// TCP (fast, timeout) retransmissions and tail loss probes.
pub type Retransmits = (u64, u64, u64);

/// What was counted between `before` and `now`.
fn retransmits_since(now: Retransmits, before: Retransmits) -> Retransmits {
    (
        now.0.saturating_sub(before.0),
        now.1.saturating_sub(before.1),
        now.2.saturating_sub(before.2),
    )
}

/// TCP retransmissions as JSON: `{"fast", "timeout", "probe"}` (tail loss probes, RFC 8985:
/// the last segment again, or one new segment).
#[derive(serde::Serialize)]
pub struct RetransmitsJson {
    fast: u64,
    timeout: u64,
    probe: u64,
}

impl From<Retransmits> for RetransmitsJson {
    fn from((fast, timeout, probe): Retransmits) -> RetransmitsJson {
        RetransmitsJson {
            fast,
            timeout,
            probe,
        }
    }
}

/// Copy counts as JSON: the raw octets and copies per payload octet each way.
#[derive(serde::Serialize)]
pub struct CopiesJson {
    tx_payload: u64,
    tx_copied: u64,
    rx_payload: u64,
    rx_copied: u64,
    /// null when nothing was sent / received.
    tx_per_byte: Option<f64>,
    rx_per_byte: Option<f64>,
}

impl From<&CopyStats> for CopiesJson {
    fn from(c: &CopyStats) -> CopiesJson {
        CopiesJson {
            tx_payload: c.tx_payload,
            tx_copied: c.tx_copied,
            rx_payload: c.rx_payload,
            rx_copied: c.rx_copied,
            tx_per_byte: c.tx_per_byte(),
            rx_per_byte: c.rx_per_byte(),
        }
    }
}

/// A `dpperf --server --json` line per connection served on DPDK: this side's copy counts.
/// `copies` comes first (scripts/bench once picked these lines by their start).
#[derive(serde::Serialize)]
struct ServerJson {
    copies: CopiesJson,
    /// The share of the server's worker time in passes that did work during the test.
    worker_busy: Option<f64>,
    /// TCP segments the server retransmitted during the test.
    tcp_retransmits: RetransmitsJson,
    role: &'static str,
    /// Always "dpdk" (scripts/bench retags it with the link it measured).
    transport: &'static str,
    size: usize,
    test: &'static str,
    /// What each port's PMD granted.
    ports: serde_json::Value,
}

/// What [`dp_counts`] returns: copy counts, (payload segments sent, of those the frames cut by
/// segmentation offload), (time in passes that did work, in the rest), (fast, timeout TCP
/// retransmissions, tail loss probes), each summed over the workers.
pub type DpCounts = (CopyStats, (u64, u64), (u64, u64), Retransmits);

/// The copy counts, the payload segments sent and of those the frames cut by segmentation
/// offload, summed over the workers of `dp`, their time in passes that did work and in the
/// rest (`WorkerStats::busy_ns`, `idle_ns`), and the TCP retransmissions.
pub fn dp_counts(dp: &Dataplane) -> DpCounts {
    let st = dp.stats();
    let retransmits = (
        st.iter().map(|w| w.tcp_fast_retransmits).sum(),
        st.iter().map(|w| w.tcp_timeout_retransmits).sum(),
        st.iter().map(|w| w.tcp_loss_probes).sum(),
    );
    let c = CopyStats::sum(st.iter().map(|w| &w.copies));
    let time = (
        st.iter().map(|w| w.busy_ns).sum(),
        st.iter().map(|w| w.idle_ns).sum(),
    );
    let segments = (
        st.iter().map(|w| w.device.tx_tcp_segments).sum(),
        st.iter().map(|w| w.device.tx_gso_frames).sum(),
    );
    (c, segments, time, retransmits)
}

/// The share of worker time in passes that did work between two [`dp_counts`] (None without
/// any time counted).
fn busy_share(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
    let (busy, idle) = (after.0 - before.0, after.1 - before.1);
    (busy + idle > 0).then(|| busy as f64 / (busy + idle) as f64)
}

/// Print perftest's table ([`crate::table`], as `dpwarp perf` prints it) for `results` of one
/// kind: bandwidth in Gb/sec (no peak is measured: 0.00, as perftest's send_bw) or latency.
pub fn print_table(title: &str, results: &[PerfResult]) {
    if results.is_empty() {
        return;
    }
    println!("{}", table::LINE);
    println!("                    {title}");
    println!("{}", table::LINE);
    if results[0].test.ends_with("lat") || results[0].test.ends_with("pingpong") {
        println!("{}", table::LAT_HEADER);
        for r in results {
            println!("{}", table::lat_row(r.size, &r.lat));
        }
    } else {
        println!("{}", table::bw_header("Gb/sec"));
        for r in results {
            println!(
                "{}",
                table::bw_row(r.size as u64, r.iters as u64, 0.0, r.gbps, r.mpps)
            );
        }
    }
    println!("{}", table::LINE);
}

fn encode_req(test: Test, size: usize, iters: usize) -> Vec<u8> {
    let mut v = vec![b'P', test.code()];
    v.extend_from_slice(&(size as u32).to_be_bytes());
    v.extend_from_slice(&(iters as u32).to_be_bytes());
    v
}

fn decode_req(pd: &[u8]) -> Option<(Test, usize, usize)> {
    if pd.len() < 10 || pd[0] != b'P' {
        return None;
    }
    let test = match pd[1] {
        1 => Test::WriteBw,
        2 => Test::SendLat,
        _ => return None,
    };
    let size = u32::from_be_bytes(pd[2..6].try_into().ok()?) as usize;
    let iters = u32::from_be_bytes(pd[6..10].try_into().ok()?) as usize;
    if size == 0 || size > 16 << 20 {
        return None;
    }
    Some((test, size, iters))
}

const DEPTH: usize = 128;

/// Default `--warmup` of send_lat and the kernel ping-pong: as many round trips as
/// benches/dp_ring runs before its measured ones.
pub const WARMUP: usize = 1000;

/// A CQ for one test connection; with driven dataplane workers, polling or waiting on it runs
/// them (`Cq::drive_with`).
fn new_cq(net: &Net) -> Cq {
    let cq = Cq::new(4 * DEPTH);
    if net.is_driven() {
        let n = net.clone();
        cq.drive_with(std::sync::Arc::new(move || n.poll()));
    }
    cq
}

/// A QP on `cq`; with driven dataplane workers, posting a send WR runs their transmit phases
/// (`Qp::drive_with`, the doorbell).
fn new_qp(pd: &Pd, net: &Net, cq: &Cq) -> Qp {
    let qp = Qp::new(pd, &attr(cq));
    if let Some(d) = net.qp_driver() {
        qp.drive_with(d);
    }
    qp
}

fn attr(cq: &Cq) -> QpInitAttr {
    let mut a = QpInitAttr::new(cq);
    a.cap = QpCap {
        max_send_wr: DEPTH * 2,
        max_recv_wr: DEPTH * 2,
    };
    a
}

/// `qp.wait_closed`, driving the worker meanwhile when it is driven.
fn wait_closed(qp: &Qp, net: &Net, timeout: Duration) -> bool {
    if !net.is_driven() {
        return qp.wait_closed(timeout);
    }
    let end = Instant::now() + timeout;
    while !qp.is_closed() && Instant::now() < end {
        if !net.poll() {
            std::thread::yield_now();
        }
    }
    qp.is_closed()
}

/// Serve one perf connection (the test is named by the client's private data); `crc`: the C
/// bit of the MPA Reply (false: no CRC unless the client asks for it, RFC 5044 §7.1).
pub fn serve_one(req: ConnRequest, pd: &Pd, net: &Net, crc: bool) -> Result<(Test, usize), String> {
    let (test, size, iters) =
        decode_req(req.private_data()).ok_or("not a dpwarp dpperf request")?;
    let cq = new_cq(net);
    let qp = new_qp(pd, net, &cq);
    let mr = pd.reg_mr(
        size.max(64),
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let rbuf = pd.reg_mr(size.max(64), Access::LOCAL_WRITE);
    let nrecv = if test == Test::SendLat { DEPTH } else { 1 };
    for i in 0..nrecv {
        qp.post_recv(RecvWr {
            wr_id: i as u64,
            sg_list: smallvec![sge(&rbuf, 0, size.max(64))],
        })
        .map_err(|e| e.to_string())?;
    }
    let mut adv = mr.addr().to_be_bytes().to_vec();
    adv.extend_from_slice(&mr.stag().to_be_bytes());
    req.accept(
        &qp,
        &ConnParam {
            private_data: adv,
            crc,
            ..ConnParam::default()
        },
    )
    .map_err(|e| format!("accept: {e}"))?;
    match test {
        Test::WriteBw => {
            // The client's final Send follows all its Writes on the stream: answer it.
            let _ = load::next_ok(&qp, &cq, Wait::Block, "the client's done Send")?;
            post(&qp, Opcode::Send, &rbuf, 4)?;
            let _ = load::next_ok(&qp, &cq, Wait::Block, "our reply Send")?;
        }
        Test::SendLat => {
            load::send_pingpong_run_to_completion(
                &qp,
                &cq,
                Wait::Spin,
                false,
                &rbuf,
                size,
                iters as u64,
                false,
                None,
            )?;
        }
    }
    wait_closed(&qp, net, Duration::from_secs(5));
    Ok((test, size))
}

fn post(qp: &Qp, opcode: Opcode, mr: &dpwarp::verbs::Mr, len: usize) -> Result<(), String> {
    qp.post_send(SendWr {
        wr_id: 0,
        opcode,
        sg_list: smallvec![sge(mr, 0, len)],
        signaled: true,
    })
    .map_err(|e| format!("post: {e}"))
}

/// How a client runs its test: `iters` measured iterations; send_lat runs `warmup` round trips
/// first and leaves them out of the figures (the server learns the total from the request);
/// `crc`: the C bit of the MPA Request (false asks for FPDUs without CRC32c).
#[derive(Debug, Clone, Copy)]
pub struct ClientOpts {
    pub iters: usize,
    pub warmup: usize,
    pub crc: bool,
    /// send_lat: pings per second instead of back to back (`--mps`).
    pub mps: Option<u32>,
}

/// Run one test as the client against `addr`.
pub fn run_client(
    net: &Net,
    addr: SocketAddr,
    pd: &Pd,
    test: Test,
    size: usize,
    o: ClientOpts,
) -> Result<PerfResult, String> {
    let ClientOpts {
        iters,
        warmup,
        crc,
        mps,
    } = o;
    let pace = mps.map(|n| Duration::from_secs(1) / n.max(1));
    let wire_iters = match test {
        Test::SendLat => iters + warmup,
        Test::WriteBw => iters,
    };
    let cq = new_cq(net);
    let qp = new_qp(pd, net, &cq);
    let src = pd.reg_mr(size.max(64), Access::LOCAL_WRITE);
    let rbuf = pd.reg_mr(size.max(64), Access::LOCAL_WRITE);
    let nrecv = if test == Test::SendLat { DEPTH } else { 1 };
    for i in 0..nrecv {
        qp.post_recv(RecvWr {
            wr_id: i as u64,
            sg_list: smallvec![sge(&rbuf, 0, size.max(64))],
        })
        .map_err(|e| e.to_string())?;
    }
    let p = ConnParam {
        private_data: encode_req(test, size, wire_iters),
        crc,
        ..ConnParam::default()
    };
    let n = net
        .connect(addr, &qp, &p)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let pdata = &n.peer_private_data;
    if pdata.len() < 12 {
        return Err("server advertisement missing".into());
    }
    let raddr = u64::from_be_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(pdata[8..12].try_into().unwrap());
    let mut r = PerfResult {
        size,
        iters,
        mpa_crc: Some(n.crc_tx),
        ..Default::default()
    };
    match test {
        Test::WriteBw => {
            r.test = "write_bw".into();
            let run = load::bw_window(
                &qp,
                &cq,
                Wait::Block,
                &load::Window {
                    opcode: Opcode::Write {
                        remote_addr: raddr,
                        rkey,
                    },
                    buf: &src,
                    size,
                    iters: iters as u64,
                    deadline: None,
                    depth: DEPTH,
                    track: 0,
                },
            )?;
            // A Write completes locally once handed to the stream; the server's reply to our
            // final Send proves every byte arrived.
            post(&qp, Opcode::Send, &src, 4)?;
            loop {
                let wc = load::next_ok(&qp, &cq, Wait::Block, "the server's reply")?;
                if wc.opcode == dpwarp::verbs::WcOpcode::Recv {
                    break;
                }
            }
            let secs = run.t0.elapsed().as_secs_f64();
            r.gbps = (size * iters) as f64 * 8.0 / secs / 1e9;
            r.mpps = iters as f64 / secs / 1e6;
        }
        Test::SendLat => {
            r.test = "send_lat".into();
            let t0 = Instant::now();
            let (lat, on_driver) = load::send_pingpong_run_to_completion(
                &qp,
                &cq,
                Wait::Spin,
                true,
                &rbuf,
                size,
                wire_iters as u64,
                true,
                pace,
            )?;
            let us: Vec<f64> = lat
                .iter()
                .skip(warmup)
                .map(|d| d.as_secs_f64() * 1e6)
                .collect();
            r.warmup = Some(warmup);
            r.pings_per_s = mps;
            r.run_s = Some(t0.elapsed().as_secs_f64());
            r.on_driver_thread = Some(on_driver);
            fill_lat(&mut r, &us);
        }
    }
    qp.disconnect();
    wait_closed(&qp, net, Duration::from_secs(5));
    Ok(r)
}

/// The latency summary of `lat` (one-way microseconds) from [`dpwarp::latency`], the one
/// percentile definition of every tool.
fn fill_lat(r: &mut PerfResult, lat: &[f64]) {
    let mut rec = dpwarp::latency::Recorder::new();
    for &v in lat {
        rec.record_us(v);
    }
    r.lat = rec.summary();
}

/// How the kernel baselines wait for their sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelWait {
    /// Blocking reads and writes (the kernel sleeps and wakes the thread).
    Blocking,
    /// Non-blocking sockets polled in a loop (as `sockperf --nonblocked`): no sleep/wake-up
    /// on the critical path, a whole core per side.
    Busy,
}

/// The two threads of a kernel baseline on their own CPUs (receiver/server on the first CPU
/// of the process, sender/client on the second) when the process has two or more.
fn pin_side(side: usize) {
    let cpus = dpwarp::affinity::thread_cpus();
    if cpus.len() >= 2 {
        let _ = dpwarp::affinity::set_thread_cpus(&[cpus[side % cpus.len()]]);
    }
}

fn read_some(s: &mut TcpStream, buf: &mut [u8], wait: KernelWait) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            // Busy: straight back into read(2), no `pause` (dpwarp's driven loops have none
            // either: load::Wait::Spin).
            Err(e) if wait == KernelWait::Busy && e.kind() == std::io::ErrorKind::WouldBlock => {}
            r => return r,
        }
    }
}

fn write_all(s: &mut TcpStream, mut buf: &[u8], wait: KernelWait) -> std::io::Result<()> {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if wait == KernelWait::Busy && e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_exact(s: &mut TcpStream, mut buf: &mut [u8], wait: KernelWait) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = read_some(s, buf, wait)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
    }
    Ok(())
}

/// Plain kernel TCP over loopback: stream bandwidth with `size`-byte writes (like iperf3 -l),
/// counted where the bytes arrive: the time runs until the receiver has every byte and said
/// so. Sender and receiver on their own CPUs. `nodelay` sets TCP_NODELAY on the sender.
///
/// The write size matters far more than one would think: on loopback (MTU 65536, MSS 65483) a
/// 64 KiB write is one full segment and a 53-octet tail, which Nagle holds until the ACK
/// (and which goes out as a segment of its own with TCP_NODELAY); 64 KiB writes ran at 11-23
/// Gbit/s here while 32 KiB writes with TCP_NODELAY ran at 36-52 (docs/testing.md
/// "Measurements"). So the bench takes the kernel's best over several write sizes.
pub fn tcp_stream(
    size: usize,
    total: usize,
    wait: KernelWait,
    nodelay: bool,
) -> Result<PerfResult, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let rx = std::thread::spawn(move || -> std::io::Result<usize> {
        pin_side(0);
        let (mut s, _) = l.accept()?;
        s.set_nonblocking(wait == KernelWait::Busy)?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0;
        loop {
            let k = read_some(&mut s, &mut buf, wait)?;
            if k == 0 {
                break;
            }
            n += k;
        }
        write_all(&mut s, b"k", wait)?;
        Ok(n)
    });
    let old = dpwarp::affinity::thread_cpus();
    pin_side(1);
    let res = (|| -> Result<(usize, f64), String> {
        let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        s.set_nonblocking(wait == KernelWait::Busy)
            .map_err(|e| e.to_string())?;
        s.set_nodelay(nodelay).map_err(|e| e.to_string())?;
        let buf = vec![7u8; size];
        let iters = total.div_ceil(size);
        let t0 = Instant::now();
        for _ in 0..iters {
            write_all(&mut s, &buf, wait).map_err(|e| e.to_string())?;
        }
        s.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        let mut k = [0u8; 1];
        read_exact(&mut s, &mut k, wait).map_err(|e| e.to_string())?;
        Ok((iters, t0.elapsed().as_secs_f64()))
    })();
    let _ = dpwarp::affinity::set_thread_cpus(&old);
    let (iters, secs) = res?;
    let got = rx
        .join()
        .map_err(|_| "rx panicked")?
        .map_err(|e| e.to_string())?;
    if got != iters * size {
        return Err(format!("tcp_stream: received {got} of {}", iters * size));
    }
    Ok(PerfResult {
        test: "tcp_stream".into(),
        size,
        iters,
        gbps: got as f64 * 8.0 / secs / 1e9,
        mpps: iters as f64 / secs / 1e6,
        ..Default::default()
    })
}

/// Plain kernel TCP over loopback: `size`-byte ping-pong with TCP_NODELAY; one-way = RTT/2.
/// Client and server on their own CPUs; `warmup` round trips first, not counted. With `mps`
/// the client starts a round trip every 1/`mps` s (spinning on the clock in between, as
/// sockperf's `under-load --mps` and dpperf's `--mps` do) instead of back to back; each
/// latency is still half of one round trip.
pub fn tcp_pingpong(
    size: usize,
    iters: usize,
    warmup: usize,
    wait: KernelWait,
    mps: Option<u32>,
) -> Result<PerfResult, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let srv = std::thread::spawn(move || -> std::io::Result<u64> {
        pin_side(0);
        let (mut s, _) = l.accept()?;
        echo(&mut s, &mut vec![0u8; size.max(1)], wait)
    });
    let old = dpwarp::affinity::thread_cpus();
    pin_side(1);
    let res = tcp_pingpong_client(addr, size, iters, warmup, wait, mps);
    let _ = dpwarp::affinity::set_thread_cpus(&old);
    let r = res?;
    let echoed = srv
        .join()
        .map_err(|_| "server panicked")?
        .map_err(|e| e.to_string())?;
    let want = ((iters + warmup) * size) as u64;
    if echoed != want {
        return Err(format!(
            "tcp_pingpong: the server echoed {echoed} of {want} bytes"
        ));
    }
    Ok(r)
}

/// Echo every byte the peer sends back to it (TCP_NODELAY) until it closes: the server half of
/// a ping-pong. Returns the bytes echoed.
fn echo(s: &mut TcpStream, buf: &mut [u8], wait: KernelWait) -> std::io::Result<u64> {
    s.set_nodelay(true)?;
    s.set_nonblocking(wait == KernelWait::Busy)?;
    let mut n = 0u64;
    loop {
        let k = read_some(s, buf, wait)?;
        if k == 0 {
            return Ok(n);
        }
        write_all(s, &buf[..k], wait)?;
        n += k as u64;
    }
}

/// The client half of [`tcp_pingpong`] against a server at `addr` (loopback, or a
/// `tcp-baseline --listen` across a link): `size`-byte round trips with TCP_NODELAY.
pub fn tcp_pingpong_client(
    addr: std::net::SocketAddr,
    size: usize,
    iters: usize,
    warmup: usize,
    wait: KernelWait,
    mps: Option<u32>,
) -> Result<PerfResult, String> {
    let pace = mps.map(|n| Duration::from_secs(1) / n.max(1));
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_nonblocking(wait == KernelWait::Busy)
        .map_err(|e| e.to_string())?;
    let mut buf = vec![1u8; size];
    let mut lat = Vec::with_capacity(iters);
    let mut next = Instant::now();
    for i in 0..iters + warmup {
        if let Some(p) = pace {
            while Instant::now() < next {
                std::hint::spin_loop();
            }
            next = (next + p).max(Instant::now());
        }
        let t = Instant::now();
        write_all(&mut s, &buf, wait).map_err(|e| e.to_string())?;
        read_exact(&mut s, &mut buf, wait).map_err(|e| e.to_string())?;
        if i >= warmup {
            lat.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    let mut r = PerfResult {
        test: "tcp_pingpong".into(),
        size,
        iters,
        warmup: Some(warmup),
        pings_per_s: mps,
        run_s: Some(t0.elapsed().as_secs_f64()),
        ..Default::default()
    };
    fill_lat(&mut r, &lat);
    Ok(r)
}

/// `tcp-baseline --listen`: echo every byte of each client back (TCP_NODELAY), one client
/// at a time, until killed; the server half of a ping-pong across a real link.
fn tcp_echo_server(addr: std::net::SocketAddr, wait: KernelWait) -> Result<(), String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("listen {addr}: {e}"))?;
    eprintln!("tcp-baseline: listening on {addr}");
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let (mut s, peer) = l.accept().map_err(|e| e.to_string())?;
        match echo(&mut s, &mut buf, wait) {
            Ok(n) => log::info!("tcp-baseline: {peer}: {n} bytes echoed"),
            Err(e) => log::warn!("tcp-baseline: {peer}: {e}"),
        }
    }
}

/// `dpwarp dpperf` options.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub net: NetArgs,
    /// Serve perf clients (forever, or --count connections).
    #[arg(long)]
    pub server: bool,
    /// Connections to serve before exiting (0 = forever).
    #[arg(long, default_value_t = 0)]
    pub count: usize,
    /// Server address to connect to (client), or to listen on (server; the IP is ignored for
    /// dpdk, which listens on the port's address).
    #[arg(long, default_value = "127.0.0.1:18515")]
    pub addr: SocketAddr,
    /// The test (client).
    #[arg(long, value_enum, default_value_t = Test::WriteBw)]
    pub test: Test,
    /// Message sizes, comma separated (client).
    #[arg(long, default_value = "65536", value_delimiter = ',')]
    pub size: Vec<usize>,
    /// Iterations per size (client).
    #[arg(long, default_value_t = 1000)]
    pub iters: usize,
    /// send_lat: round trips before the `--iters` measured ones, left out of the figures (the
    /// first round trips of a fresh connection run on cold caches and predictors and would
    /// inflate p99; sockperf warms up the same way). 0 measures from the first.
    #[arg(long, default_value_t = WARMUP)]
    pub warmup: usize,
    /// send_lat: send this many pings per second instead of back to back, as sockperf's
    /// `under-load --mps` does (client). Each latency is then half of one ping's round trip,
    /// and the dataplane sees the idle gaps between requests that a server sees.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub mps: Option<u32>,
    /// Print one JSON line per result (client; a server prints its copy counts per
    /// connection).
    #[arg(long)]
    pub json: bool,
    /// DPDK workers: `driven` (default: this tool's thread runs its worker, pinned to the
    /// worker's core; run to completion) or `background` (worker threads).
    #[arg(long, value_enum, default_value_t = ModeArg::Driven)]
    pub worker_mode: ModeArg,
    /// Ask for FPDUs without CRC32c (MPA C bit 0, RFC 5044 §7.1; a trusted link). CRC is
    /// off only when both the server and the client are given this: either end asking for it
    /// turns it on in both directions.
    #[arg(long)]
    pub no_crc: bool,
    #[command(flatten)]
    pub verbosity: Verbosity,
}

pub fn run(a: Args) -> Result<(), String> {
    let backend = backend(&a.net)?;
    let transport = match backend {
        Backend::Kernel => "kernel",
        Backend::Dpdk(_) => "dpdk",
    };
    let (_dp, net) = match &backend {
        Backend::Dpdk(config) => {
            let (dp, ep) = start_dpdk_with(config, a.net.port_index, a.worker_mode.into())?;
            (Some(dp), Net::from(ep))
        }
        Backend::Kernel => (None, Net::kernel()),
    };
    if let (Some(dp), false) = (&_dp, a.server) {
        if !dp.wait_link_up(Duration::from_secs(20)) {
            return Err("link did not come up within 20 s (is the server running?)".into());
        }
    }
    let dev = Device::open();
    let pd = dev.alloc_pd();
    if a.server {
        let l = net
            .listen(a.addr)
            .map_err(|e| format!("listen {}: {e}", a.addr))?;
        println!("perf server: listening on port {}", a.addr.port());
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let mut served = 0;
        loop {
            match l.get_request(Duration::from_secs(3600)) {
                Ok(req) => {
                    let before = _dp.as_ref().map(dp_counts);
                    match serve_one(req, &pd, &net, !a.no_crc) {
                        Err(e) => eprintln!("perf server: {e}"),
                        Ok((test, size)) => {
                            if let (true, Some(dp), Some((b, _, bt, br))) = (a.json, &_dp, before) {
                                let (c, _, t, r) = dp_counts(dp);
                                let v = ServerJson {
                                    copies: CopiesJson::from(&c.since(&b)),
                                    worker_busy: busy_share(bt, t),
                                    tcp_retransmits: retransmits_since(r, br).into(),
                                    transport: "dpdk",
                                    role: "server",
                                    size,
                                    test: test.name(),
                                    ports: ports_json(dp),
                                };
                                println!(
                                    "{}",
                                    serde_json::to_string(&v).map_err(|e| e.to_string())?
                                );
                                let _ = std::io::stdout().flush();
                            }
                        }
                    }
                    served += 1;
                    if a.count != 0 && served >= a.count {
                        if let Some(dp) = &_dp {
                            log_device_stats(dp);
                        }
                        return Ok(());
                    }
                }
                Err(CmError::Timeout) => {}
                Err(e) => eprintln!("perf server: {e}"),
            }
        }
    }
    let test = a.test;
    let mut results = Vec::new();
    for &size in &a.size {
        let before = _dp.as_ref().map(dp_counts);
        crate::cli::progress_phase(format!("dpperf: {} {size} B", test.name()));
        let o = ClientOpts {
            iters: a.iters,
            warmup: a.warmup,
            crc: !a.no_crc,
            mps: a.mps,
        };
        let mut r = run_client(&net, a.addr, &pd, test, size, o)?;
        crate::cli::progress_clear();
        if let (Some(dp), Some((bc, bs, bt, br))) = (&_dp, before) {
            let (c, (segs, gso), t, rt) = dp_counts(dp);
            r.tcp_retransmits = Some(retransmits_since(rt, br));
            r.copies = Some(c.since(&bc));
            r.segments = Some(segs - bs.0);
            r.gso_frames = Some(gso - bs.1);
            r.worker_busy = busy_share(bt, t);
            r.ports = Some(ports_json(dp));
        }
        if a.json {
            println!("{}", r.json(transport));
        }
        results.push(r);
    }
    if !a.json {
        print_table(&format!("{} over {transport}", a.test.name()), &results);
    }
    if let Some(dp) = &_dp {
        log_device_stats(dp);
    }
    Ok(())
}

/// A client and a server in this process over `net_s`/`net_c` (the demo's short perf run).
pub fn local_pair(
    net_s: Net,
    net_c: &Net,
    addr: SocketAddr,
    test: Test,
    sizes: &[usize],
    iters: usize,
    warmup: usize,
) -> Result<Vec<PerfResult>, String> {
    let l = net_s
        .listen(addr)
        .map_err(|e| format!("listen {addr}: {e}"))?;
    let dev = Device::open();
    let spd = dev.alloc_pd();
    let n = sizes.len();
    let srv = std::thread::spawn(move || -> Result<(), String> {
        for _ in 0..n {
            let req = l
                .get_request(Duration::from_secs(20))
                .map_err(|e| e.to_string())?;
            serve_one(req, &spd, &net_s, true)?;
        }
        Ok(())
    });
    let pd = dev.alloc_pd();
    let mut out = Vec::new();
    for &s in sizes {
        let o = ClientOpts {
            iters,
            warmup,
            crc: true,
            mps: None,
        };
        out.push(run_client(net_c, addr, &pd, test, s, o)?);
    }
    srv.join().map_err(|_| "perf server panicked")??;
    let _ = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    Ok(out)
}

/// `dpwarp tcp-baseline` options.
#[derive(clap::Args, Debug, Clone)]
pub struct TcpArgs {
    /// Message sizes, comma separated.
    #[arg(long, default_value = "64,65536", value_delimiter = ',')]
    pub size: Vec<usize>,
    /// Bytes per stream run.
    #[arg(long, default_value_t = 1 << 30)]
    pub total: usize,
    /// Ping-pong iterations.
    #[arg(long, default_value_t = 20000)]
    pub iters: usize,
    /// Ping-pong round trips before the measured ones, left out of the figures (as dpperf's
    /// `--warmup`).
    #[arg(long, default_value_t = WARMUP)]
    pub warmup: usize,
    /// Print one JSON line per result.
    #[arg(long)]
    pub json: bool,
    /// `blocking` sockets (transport `kernel_tcp` in JSON) or `busy`-polled non-blocking
    /// ones (`kernel_tcp_busy`, as sockperf --nonblocked); each side pinned to its own CPU.
    #[arg(long, value_enum, default_value_t = WaitArg::Blocking)]
    pub wait: WaitArg,
    /// TCP_NODELAY on the stream's sender (JSON transport `kernel_tcp_nodelay` /
    /// `kernel_tcp_busy_nodelay`); the ping-pong always sets it.
    #[arg(long)]
    pub nodelay: bool,
    /// Only the stream, no ping-pong.
    #[arg(long, conflicts_with = "pingpong_only")]
    pub stream_only: bool,
    /// Only the ping-pong, no stream.
    #[arg(long)]
    pub pingpong_only: bool,
    /// Ping-pong: start this many round trips per second instead of back to back (as dpperf
    /// `--mps` and sockperf's `under-load --mps`): the latency of requests with gaps between
    /// them. Each latency is still half of one round trip.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub mps: Option<u32>,
    /// Over a real link instead of loopback: serve the ping-pong on this address (echo every
    /// byte back, one client at a time, until killed) for a `--connect` client elsewhere.
    #[arg(long, conflicts_with = "connect")]
    pub listen: Option<std::net::SocketAddr>,
    /// Over a real link instead of loopback: run the ping-pong client against a `--listen`
    /// server at this address (implies --pingpong-only).
    #[arg(long)]
    pub connect: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub verbosity: Verbosity,
}

/// `tcp-baseline --wait`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitArg {
    /// Blocking sockets.
    Blocking,
    /// Non-blocking sockets polled in a loop.
    Busy,
}

pub fn run_tcp(a: TcpArgs) -> Result<(), String> {
    let (wait, transport) = match (a.wait, a.nodelay) {
        (WaitArg::Blocking, false) => (KernelWait::Blocking, "kernel_tcp"),
        (WaitArg::Busy, false) => (KernelWait::Busy, "kernel_tcp_busy"),
        (WaitArg::Blocking, true) => (KernelWait::Blocking, "kernel_tcp_nodelay"),
        (WaitArg::Busy, true) => (KernelWait::Busy, "kernel_tcp_busy_nodelay"),
    };
    if let Some(addr) = a.listen {
        return tcp_echo_server(addr, wait);
    }
    let link = if a.connect.is_some() {
        "over the link"
    } else {
        "loopback"
    };
    let mut bw = Vec::new();
    let mut lat = Vec::new();
    for &s in &a.size {
        if let Some(addr) = a.connect {
            lat.push(tcp_pingpong_client(
                addr, s, a.iters, a.warmup, wait, a.mps,
            )?);
            continue;
        }
        if !a.pingpong_only {
            // At most a million writes per size: small writes are syscall-bound and slow.
            bw.push(tcp_stream(
                s,
                a.total.min(s * 1_000_000).max(s),
                wait,
                a.nodelay,
            )?);
        }
        if !a.stream_only {
            lat.push(tcp_pingpong(s, a.iters, a.warmup, wait, a.mps)?);
        }
    }
    if a.json {
        for r in bw.iter().chain(lat.iter()) {
            println!("{}", r.json(transport));
        }
    } else {
        if !bw.is_empty() {
            print_table(&format!("{transport} stream ({link})"), &bw);
        }
        if !lat.is_empty() {
            print_table(
                &format!("{transport} ping-pong ({link}, one-way = RTT/2)"),
                &lat,
            );
        }
    }
    Ok(())
}
