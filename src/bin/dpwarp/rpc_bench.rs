//! `dpwarp rpc-bench`: NULL and READ/WRITE calls with N credits over RPC-over-RDMA or ONC RPC
//! on kernel TCP; prints calls/s, latency percentiles and bandwidth. `--compare` runs both
//! protocols (and a raw verbs RDMA Write reference over the same transport as the RDMA side) in
//! one invocation; `--json` prints JSON.
//!
//! The RDMA side runs over the DPDK dataplane by default (`--transport dpdk`): without
//! `--server` both the server and the client run in this process on the two ports of
//! `--config` (default `configs/net_ring.toml`, a net_ring pair: no hugepages, no kernel setup);
//! with `--server ADDR` the client uses port `--port-index` of `--config` (e.g.
//! `configs/net_memif_client.toml` against `dpwarp rpc-server` on the memif server side).
//! `--transport kernel` runs iWARP over kernel TCP instead. The ONC RPC/TCP baseline always runs
//! on the kernel TCP stack (in-process on loopback unless `--tcp-server` names one), its
//! threads blocking or busy-polling (`--tcp-poll`); `--compare` measures it both ways and takes
//! the better figure as the baseline, as scripts/bench does for the kernel's streams.

use dpwarp::verbs::smallvec;
use rustc_hash::FxHashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::{Progress, TransportArg};
#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::{Dataplane, WorkerMode, WorkerStats};
use dpwarp::cm::{self, ConnParam};
use dpwarp::config::DataplaneConfig;
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::{Dataplane, WorkerMode, WorkerStats};
use dpwarp::latency::Recorder;
use dpwarp::rpc::block::{self, BlockStore, BLOCK_PROG, BLOCK_VERS};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient, ReplyReader};
use dpwarp::rpc::program::{Body, Registry};
use dpwarp::rpc::server::{RdmaServer, ServerConfig};
use dpwarp::rpc::tcp::{self, TcpClient, TcpPoll};
use dpwarp::rpc::RpcError;
use dpwarp::verbs::{
    sge, Access, Cq, Device, Opcode, Qp, QpCap, QpInitAttr, SendWr, SharedMem, WcStatus,
};

/// The dataplane config used when `--transport dpdk` runs both ends in this process and no
/// `--config` is given (as `dpwarp demo` does).
pub const DEFAULT_DP_CONFIG: &str = "configs/net_ring.toml";

/// The port of the in-process RPC-over-RDMA server on the dataplane (the NFS/RDMA port).
const DP_RPC_PORT: u16 = 20049;
/// The port of the in-process verbs RDMA Write reference on the dataplane.
const DP_VERBS_PORT: u16 = 20051;

/// `--proto`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// RPC-over-RDMA (RFC 8166).
    Rdma,
    /// ONC RPC over kernel TCP (record marking).
    Tcp,
}

/// `--tcp-poll`: how the ONC RPC/TCP baseline's threads wait on their sockets.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpPollArg {
    /// Blocking reads (the thread sleeps in the kernel until bytes arrive).
    Blocking,
    /// Non-blocking sockets, spinning: the kernel's busy-polled baseline.
    Busy,
}

impl From<TcpPollArg> for TcpPoll {
    fn from(a: TcpPollArg) -> TcpPoll {
        match a {
            TcpPollArg::Blocking => TcpPoll::Blocking,
            TcpPollArg::Busy => TcpPoll::Busy,
        }
    }
}

/// `--op`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The NULL procedure.
    Null,
    /// READ of --size bytes (the reply's data through a write chunk on RPC-over-RDMA).
    Read,
    /// WRITE of --size bytes.
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Null => "null",
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The RDMA side's byte stream: dpdk (the DPDK dataplane of --config) or kernel (iWARP over
    /// kernel TCP).
    #[arg(long, value_enum, default_value_t = TransportArg::Dpdk)]
    transport: TransportArg,
    /// Dataplane config for --transport dpdk. Without --server: two ports, the server on the
    /// first, the client on the second (default configs/net_ring.toml). With --server: the
    /// client's port is --port-index.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The client's port in --config when --server names a remote server.
    #[arg(long, default_value_t = 0)]
    port_index: usize,
    /// The protocol measured (without --compare).
    #[arg(long, value_enum, default_value_t = Proto::Rdma)]
    proto: Proto,
    /// The call measured (without --compare).
    #[arg(long, value_enum, default_value_t = Op::Null)]
    op: Op,
    /// Bytes per READ/WRITE.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Credits (calls in flight).
    #[arg(long, default_value_t = 32)]
    credits: u32,
    /// Octets of the store the READs and WRITEs are spread over, in ranges of --size taken in
    /// turn (default: --credits x --size, a range of its own for each call in flight; at most
    /// what the store holds, from GETATTR). --span equal to --size sends every call to the
    /// store's first --size octets, which then stay in the server's caches.
    #[arg(long)]
    span: Option<u64>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// An RPC-over-RDMA server to use instead of an in-process one (on the dataplane with
    /// --transport dpdk: its address there).
    #[arg(long)]
    server: Option<SocketAddr>,
    /// An ONC RPC/TCP server to use instead of the in-process ones.
    #[arg(long)]
    tcp_server: Option<SocketAddr>,
    /// How the ONC RPC/TCP client and in-process server wait on their sockets (without
    /// --compare, which measures both).
    #[arg(long, value_enum, default_value_t = TcpPollArg::Blocking)]
    tcp_poll: TcpPollArg,
    /// Run NULL and 1 MiB READ over both protocols (and a verbs RDMA Write reference); the
    /// TCP baseline blocking and busy-polled, the better of the two taken for the ratios.
    #[arg(long)]
    compare: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// RPC-over-RDMA connections at once (without --compare), each with --credits calls in
    /// flight, all driven by this thread (as one client's worker drives its QPs); the JSON
    /// then has each connection's calls and the slowest one's share of the mean (min_share).
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Connections opened before the measurement and held through it without a call (RDMA,
    /// without --compare): what quiet connections cost the busy ones.
    #[arg(long, default_value_t = 0)]
    idle_connections: usize,
    /// Busy-poll receive CQs this many microseconds before sleeping (client and in-process server).
    #[arg(long, default_value_t = dpwarp::rpc::server::POLL_SPIN_US)]
    poll_spin_us: u64,
    #[command(flatten)]
    pub verbosity: crate::cli::Verbosity,
}

#[derive(Debug, Clone, Default)]
struct Stats {
    calls: u64,
    secs: f64,
    bytes: u64,
    /// Call latencies (submit to reply), summarised by [`dpwarp::latency`].
    lat: Recorder,
    /// Store ranges the calls were spread over ([`Workload`]).
    ranges: usize,
}

impl Stats {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }
    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs / 1e9
    }
    /// The p-quantile of the call latency in microseconds ([`dpwarp::latency`]'s definition).
    fn pct(&self, p: f64) -> f64 {
        self.lat.quantile_us(p)
    }
    fn line(&self, what: &str) -> String {
        let (p50, p99, p999) = (self.pct(0.5), self.pct(0.99), self.pct(0.999));
        format!(
            "{what}: {} calls in {:.2} s = {:.0} calls/s, latency p50 {:.1} us p99 {:.1} us \
             p99.9 {:.1} us, {:.3} Gbit/s",
            self.calls,
            self.secs,
            self.rate(),
            p50,
            p99,
            p999,
            self.gbps()
        )
    }
}

/// Where the RDMA side (RPC-over-RDMA and the verbs reference) runs: both ends through `cm`'s
/// one connection API.
struct Net {
    /// Where the client connects from.
    client: cm::Net,
    /// Where the in-process server listens, and its IP (None: a one-port DPDK config with
    /// --server).
    server: Option<(cm::Net, std::net::IpAddr)>,
    /// The dataplane config (DPDK).
    config: Option<PathBuf>,
    /// Keeps the EAL, ports and workers running (DPDK); dropped last.
    dp: Option<Dataplane>,
}

impl Net {
    fn start(a: &Args) -> Result<Net, String> {
        match a.transport {
            TransportArg::Kernel => {
                if a.config.is_some() {
                    return Err("--config is for --transport dpdk".into());
                }
                Ok(Net {
                    client: cm::Net::kernel(),
                    server: Some((cm::Net::kernel(), [127, 0, 0, 1].into())),
                    config: None,
                    dp: None,
                })
            }
            TransportArg::Dpdk => {
                let config = match (&a.config, a.server) {
                    (Some(c), _) => c.clone(),
                    (None, None) => {
                        let p = PathBuf::from(DEFAULT_DP_CONFIG);
                        if !p.exists() {
                            return Err(format!(
                                "--transport dpdk (the default) needs a dataplane config:                                  {DEFAULT_DP_CONFIG} is not in the current directory; give                                  --config FILE (see configs/ in the dpwarp source tree) or use                                  --transport kernel"
                            ));
                        }
                        p
                    }
                    (None, Some(s)) => {
                        return Err(format!(
                            "--server {s} with --transport dpdk (the default) needs --config                              FILE: the dataplane port that reaches it (e.g.                              configs/net_memif_client.toml); or use --transport kernel"
                        ))
                    }
                };
                let cfg = DataplaneConfig::load(&config)?;
                let two = cfg.ports.len() >= 2;
                if a.server.is_none() && !two {
                    return Err(format!(
                        "{}: an in-process server and client need two ports (e.g.                          {DEFAULT_DP_CONFIG}); with a one-port config give --server ADDR",
                        config.display()
                    ));
                }
                if a.server.is_some_and(|s| s.is_ipv6()) {
                    return Err("the DPDK dataplane is IPv4 only".into());
                }
                // Run to completion: the in-process server's reactor drives port 0's worker,
                // this thread (the client) drives the client port's worker.
                let dp =
                    Dataplane::start_with(&cfg, WorkerMode::Driven).map_err(|e| e.to_string())?;
                let (server, client) = if a.server.is_none() {
                    (dp.endpoint(0), dp.endpoint(1).expect("two ports"))
                } else {
                    let c = dp
                        .endpoint(a.port_index)
                        .ok_or_else(|| format!("{}: no port {}", config.display(), a.port_index))?;
                    (None, c)
                };
                if !dp.wait_link_up(Duration::from_secs(10)) {
                    return Err(format!(
                        "{}: link did not come up within 10 s (is the peer process running?)",
                        config.display()
                    ));
                }
                let client = cm::Net::from(client);
                client.attach_worker(0);
                Ok(Net {
                    client,
                    server: server.map(|e| {
                        let ip = std::net::IpAddr::V4(e.ip());
                        (cm::Net::from(e), ip)
                    }),
                    config: Some(config),
                    dp: Some(dp),
                })
            }
        }
    }

    fn connect(&self, addr: SocketAddr, cfg: ClientConfig) -> Result<RdmaClient, RpcError> {
        RdmaClient::connect(&self.client, addr, cfg)
    }

    /// Where an in-process server listens: any free port on kernel TCP, `dp_port` on DPDK.
    fn server_addr(&self, dp_port: u16) -> Option<(&cm::Net, SocketAddr)> {
        let (n, ip) = self.server.as_ref()?;
        let port = if n.is_kernel() { 0 } else { dp_port };
        Some((n, SocketAddr::new(*ip, port)))
    }

    /// How the RDMA side ran, for the output.
    fn describe(&self, remote: Option<SocketAddr>) -> String {
        match (&self.config, remote) {
            (None, None) => "iWARP over kernel TCP, in-process server on loopback".into(),
            (None, Some(s)) => format!("iWARP over kernel TCP to {s}"),
            (Some(config), None) => format!(
                "DPDK dataplane ({}): in-process server on port 0, client on port 1",
                config.display()
            ),
            (Some(config), Some(s)) => {
                format!("DPDK dataplane ({}) to {s}", config.display())
            }
        }
    }

    /// The CPU the in-process server's worker (and its reactor) runs on.
    fn server_cpu(&self) -> Option<usize> {
        self.server.as_ref().and_then(|(n, _)| n.worker_cpu(0))
    }

    /// Each dataplane worker's counters (empty over kernel TCP).
    fn worker_stats(&self) -> Vec<WorkerStats> {
        self.dp.as_ref().map(Dataplane::stats).unwrap_or_default()
    }

    /// What each DPDK port's PMD granted (the `--json` output's `"ports"`; None on kernel TCP).
    fn ports(&self) -> Option<serde_json::Value> {
        self.dp.as_ref().map(crate::net::ports_json)
    }

    fn dataplane_stats(&self) -> Option<String> {
        self.dp.as_ref().map(|dp| format!("{:?}", dp.stats()))
    }
}

struct Servers {
    rdma: SocketAddr,
    /// The ONC RPC/TCP servers: blocking, busy-polled (the same address with --tcp-server).
    tcp: SocketAddr,
    tcp_busy: SocketAddr,
    _keep: Vec<Box<dyn std::any::Any>>,
}

impl Servers {
    /// The ONC RPC/TCP server whose threads wait as `poll` says.
    fn tcp_for(&self, poll: TcpPoll) -> SocketAddr {
        match poll {
            TcpPoll::Blocking => self.tcp,
            TcpPoll::Busy => self.tcp_busy,
        }
    }
}

/// The in-process servers (unless --server / --tcp-server name remote ones), over a memory store
/// of `store_size` octets (each measurement writes the patterns its READs are checked against).
fn start_servers(a: &Args, net: Option<&Net>, store_size: usize) -> Result<Servers, String> {
    let store = Arc::new(BlockStore::memory(store_size.max(1 << 21)));
    let mut reg = Registry::new();
    block::register(&mut reg, store);
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let d = ServerConfig::default();
    // Room in the in-process server's credit pool for every connection the bench opens.
    let wanted = a.connections * (a.credits as usize + 1) + a.idle_connections * 2;
    let scfg = ServerConfig {
        poll_spin: Duration::from_micros(a.poll_spin_us),
        credit_pool: d.credit_pool.max(u32::try_from(wanted).unwrap_or(u32::MAX)),
        ..d
    };
    let rdma = match (a.server, net) {
        (Some(s), _) => s,
        (None, None) => SocketAddr::from(([127, 0, 0, 1], 0)),
        (None, Some(net)) => {
            let (snet, addr) = net.server_addr(DP_RPC_PORT).ok_or("no server port")?;
            let h = RdmaServer::new(reg.clone(), scfg)
                .listen(snet, addr)
                .map_err(|e| format!("listen {addr}: {e}"))?;
            let addr = h.addr;
            keep.push(Box::new(h));
            addr
        }
    };
    let mut tcp_server = |poll: TcpPoll| -> Result<SocketAddr, String> {
        match a.tcp_server {
            Some(s) => Ok(s),
            None => {
                // The same CPUs as the RDMA side: the TCP server's threads where the RDMA
                // server's reactor runs, the TCP client on this thread (where the RDMA client
                // runs).
                let cpu = net.and_then(Net::server_cpu);
                let reg = reg.clone();
                let h = on_cpu(cpu, move || {
                    tcp::serve_with(SocketAddr::from(([127, 0, 0, 1], 0)), reg, poll)
                })
                .map_err(|e| e.to_string())?;
                let addr = h.addr;
                keep.push(Box::new(h));
                Ok(addr)
            }
        }
    };
    let tcp = tcp_server(TcpPoll::Blocking)?;
    let tcp_busy = tcp_server(TcpPoll::Busy)?;
    Ok(Servers {
        rdma,
        tcp,
        tcp_busy,
        _keep: keep,
    })
}

/// This process's resident memory (`VmRSS`, KiB).
fn rss_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Each worker's passes between two snapshots of its counters: how many, the nanoseconds one
/// took on average (busy and idle time over passes), the share of that time in passes that
/// moved something (near 1: this worker is the bottleneck), the frames it received and sent,
/// its TCP retransmissions, the sweeps among them, the copies it made per payload octet sent
/// and received (`CopyStats`: what explains the seconds of a bulk load), and the
/// connections it held at the end (docs/workers.md "A pass costs what the busy connections
/// need").
pub(crate) fn pass_costs(before: &[WorkerStats], after: &[WorkerStats]) -> Vec<serde_json::Value> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            let passes = a.loops.saturating_sub(b.loops);
            let ns = (a.busy_ns + a.idle_ns).saturating_sub(b.busy_ns + b.idle_ns);
            let busy = a.busy_ns.saturating_sub(b.busy_ns);
            let copies = a.copies.since(&b.copies);
            serde_json::json!({
                "cpu": a.cpu,
                "connections": a.connections,
                "passes": passes,
                "ns_per_pass": (passes > 0).then(|| ns as f64 / passes as f64),
                "busy_share": (ns > 0).then(|| busy as f64 / ns as f64),
                "rx_frames": a.device.rx_packets.saturating_sub(b.device.rx_packets),
                "tx_frames": a.device.tx_packets.saturating_sub(b.device.tx_packets),
                "tcp_retransmits": (a.tcp_fast_retransmits + a.tcp_timeout_retransmits)
                    .saturating_sub(b.tcp_fast_retransmits + b.tcp_timeout_retransmits),
                "sweeps": a.sweeps.saturating_sub(b.sweeps),
                "timer_sweeps": a.timer_sweeps.saturating_sub(b.timer_sweeps),
                "tx_copies_per_octet": copies.tx_per_byte(),
                "rx_copies_per_octet": copies.rx_per_byte(),
            })
        })
        .collect()
}

/// Run `f` on a thread pinned to `cpu` (threads it starts inherit the placement), or here.
fn on_cpu<T: Send + 'static>(cpu: Option<usize>, f: impl FnOnce() -> T + Send + 'static) -> T {
    let Some(c) = cpu else {
        return f();
    };
    thread::spawn(move || {
        if let Err(e) = dpwarp::affinity::set_thread_cpus(&[c]) {
            log::warn!("rpc-bench: could not pin to CPU {c}: {e}");
        }
        f()
    })
    .join()
    .expect("the placing thread does not panic")
}

/// What a READ of store range `range` returns: a pattern of period 251 rotated by the range's
/// number, so that a reply carrying another range's octets (for the first 251 ranges) fails
/// the check. The bench WRITEs it first, so a remote server's store works too.
fn range_pattern(size: usize, range: usize) -> Vec<u8> {
    (0..size).map(|i| ((i + range) % 251) as u8).collect()
}

/// Two periods of the READ pattern (`range_pattern`'s octets, unrotated): any range's period
/// is a window of it.
const TWO_PERIODS: [u8; 502] = {
    let mut a = [0u8; 502];
    let mut i = 0;
    while i < 502 {
        a[i] = (i % 251) as u8;
        i += 1;
    }
    a
};

/// The calls of one measurement, made in turn. READs and WRITEs go to `ranges` ranges of
/// `size` octets of the store, one after the other (range `k` at offset `k * size`), and a
/// WRITE sends from one of `windows` windows of a memory filled once, one a call in flight.
/// The default spreads the calls as they are spread in flight: each call in flight has its own
/// store range on the server and its own buffer on the client (its window, or for a READ the
/// write chunk the client lends), so the READs' and the WRITEs' octets come from and go to
/// the same amount of memory on both sides. With every call on the store's first `size`
/// octets, a READ's source and a WRITE's destination would stay in the server's caches while
/// the WRITEs' client windows did not, and WRITE would look slower than READ by the sender's
/// cache misses alone (docs/rpc.md "READ and WRITE over the same memory").
/// A storage client writes from memory it already holds (its page cache, its buffers), so the
/// windows are registered memory ([`dpwarp::rpc::program::Body::put_bulk_region`]): over
/// RPC-over-RDMA the server RDMA-Reads each window in place; over TCP it is copied into the
/// record as it is sent.
struct Workload {
    op: &'static str,
    size: usize,
    ranges: usize,
    windows: SharedMem,
    next: usize,
}

/// A call of a [`Workload`]: procedure, arguments, chunks offered, the store range it names.
struct Call {
    proc_: u32,
    body: Body,
    opts: CallOpts,
    range: usize,
}

impl Workload {
    /// `credits` calls in flight spread over `span` octets of the store (see [`Workload`]).
    fn new(op: &'static str, size: usize, credits: u32, span: u64) -> Workload {
        let windows = if op == "write" {
            size * credits.max(1) as usize
        } else {
            0
        };
        Workload {
            op,
            size,
            ranges: ranges_in(span, size),
            windows: SharedMem::from_vec(vec![0x5a; windows]),
            next: 0,
        }
    }

    fn offset(&self, range: usize) -> u64 {
        (range * self.size) as u64
    }

    /// No more ranges than a store of `store` octets holds (at least one).
    fn fit(&mut self, store: u64) {
        let fits = ranges_in(store, self.size);
        if fits < self.ranges {
            log::warn!(
                "rpc-bench: the store holds {store} octets: {fits} ranges of {} octets, not {}",
                self.size,
                self.ranges
            );
            self.ranges = fits;
        }
    }

    fn next(&mut self) -> Call {
        let n = self.next;
        self.next = self.next.wrapping_add(1);
        let range = n % self.ranges;
        let off = self.offset(range);
        match self.op {
            "read" => Call {
                proc_: block::PROC_READ,
                body: block::read_args(off, self.size as u32),
                opts: CallOpts {
                    write_chunks: vec![self.size],
                    reply_chunk: None,
                    segments: 0,
                },
                range,
            },
            "write" => {
                let windows = (self.windows.len() / self.size.max(1)).max(1);
                let w = n % windows;
                Call {
                    proc_: block::PROC_WRITE,
                    body: block::write_args_region(off, &self.windows, w * self.size, self.size),
                    opts: CallOpts::default(),
                    range,
                }
            }
            _ => Call {
                proc_: block::PROC_NULL,
                body: Body::new(),
                opts: CallOpts::default(),
                range: 0,
            },
        }
    }

    /// Before the timed loop: the store's size (GETATTR) bounds the ranges, and a READ load
    /// first WRITEs each range's pattern. `call` makes one call and hands its results to the
    /// closure it is given.
    fn prepare(&mut self, call: &mut CallFn<'_>) -> Result<(), String> {
        if self.op == "null" {
            return Ok(());
        }
        let mut store = 0u64;
        call(block::PROC_GETATTR, Body::new(), &mut |r| {
            let a = block::decode_getattr(r)
                .map_err(|e| e.to_string())?
                .map_err(|s| format!("GETATTR status {s}"))?;
            store = a.size;
            Ok(())
        })
        .map_err(|e| format!("GETATTR: {e}"))?;
        self.fit(store);
        if self.op == "read" {
            for k in 0..self.ranges {
                let args = block::write_args(self.offset(k), range_pattern(self.size, k));
                let size = self.size;
                call(block::PROC_WRITE, args, &mut |r| {
                    check_reply("write", size, 0, Check::Full, r)
                })
                .map_err(|e| format!("WRITE of the READ pattern: {e}"))?;
            }
        }
        Ok(())
    }
}

/// Ranges of `size` octets in `span` octets (at least one).
fn ranges_in(span: u64, size: usize) -> usize {
    usize::try_from(span / size.max(1) as u64)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// One call made outside the timed loop: procedure, arguments, what to do with the results.
type CallFn<'a> = dyn FnMut(
        u32,
        Body,
        &mut dyn FnMut(&mut ReplyReader<'_>) -> Result<(), String>,
    ) -> Result<(), String>
    + 'a;

/// How much of a READ's data [`check_reply`] compares with the pattern.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    /// Every octet: the READ after the timed loop (both sides).
    Full,
    /// The status, the length and the first and last pattern periods: every READ in the timed
    /// loop. A full compare there is a pass over every octet that the verbs Write reference
    /// does not make, on the thread that also places them (docs/rpc.md "Measurements").
    Spot,
}

fn check_reply(
    op: &str,
    size: usize,
    range: usize,
    check: Check,
    r: &mut ReplyReader<'_>,
) -> Result<(), String> {
    match op {
        "read" => {
            // Decoded in place (no copy of the data): the status, then the bulk item, checked.
            let st = r.xdr.get_u32().map_err(|e| e.to_string())?;
            if st != block::BLK_OK {
                return Err(format!("READ status {st}"));
            }
            let d = r.get_bulk(block::MAX_IO).map_err(|e| e.to_string())?;
            // The range's pattern repeats every 251 bytes, compared a period at a time
            // against a window of two periods (no allocation a reply).
            let period = &TWO_PERIODS[range % 251..][..251];
            let same = |c: &[u8]| c == &period[..c.len()];
            let ok = d.len() == size
                && match check {
                    Check::Full => d.chunks(251).all(same),
                    Check::Spot => {
                        let last = d.len() / 251 * 251;
                        same(&d[..d.len().min(251)]) && same(&d[last..])
                    }
                };
            if !ok {
                return Err("READ returned the wrong data".into());
            }
        }
        "write" => {
            let n = block::decode_write(r)
                .map_err(|e| e.to_string())?
                .map_err(|s| format!("WRITE status {s}"))?;
            if n as usize != size {
                return Err("WRITE count wrong".into());
            }
        }
        _ => {}
    }
    Ok(())
}

/// What one measurement does: `op` calls of `size` octets, `credits` in flight, spread over
/// `span` octets of the store ([`Workload`]), for `secs` seconds.
#[derive(Clone, Copy)]
struct Load {
    op: &'static str,
    size: usize,
    credits: u32,
    span: u64,
    secs: f64,
}

impl Load {
    fn workload(&self) -> Workload {
        Workload::new(self.op, self.size, self.credits, self.span)
    }
}

fn bench_rdma(net: &Net, addr: SocketAddr, load: Load, spin_us: u64) -> Result<Stats, String> {
    let Load {
        op,
        size,
        credits,
        secs,
        ..
    } = load;
    let mut c = net
        .connect(
            addr,
            ClientConfig {
                credits,
                poll_spin: Duration::from_micros(spin_us),
                ..ClientConfig::default()
            },
        )
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut w = load.workload();
    w.prepare(&mut |p, body, f| {
        let rep = c
            .call(BLOCK_PROG, BLOCK_VERS, p, body, &CallOpts::default())
            .map_err(|e| e.to_string())?;
        let mut rr = rep.results().map_err(|s| format!("failed: {s:?}"))?;
        f(&mut rr)
    })?;
    let mut st = Stats::default();
    let mut started: FxHashMap<u32, (Instant, usize)> = FxHashMap::default();
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    // The deadline is looked at every 64 replies (a clock read per reply is a cost the
    // measured calls do not have; the TCP side does the same), each call's start per call.
    let mut running = true;
    let mut turns = 0u32;
    loop {
        if turns.is_multiple_of(64) {
            running = t0.elapsed() < dur;
        }
        turns = turns.wrapping_add(1);
        while running && c.in_flight() < c.grant().min(credits) {
            let call = w.next();
            let x = c
                .submit(BLOCK_PROG, BLOCK_VERS, call.proc_, call.body, &call.opts)
                .map_err(|e| e.to_string())?;
            started.insert(x, (Instant::now(), call.range));
        }
        if c.in_flight() == 0 && !running {
            break;
        }
        let (x, r) = c.wait_any().map_err(|e| e.to_string())?;
        let rep = r.map_err(|e| e.to_string())?;
        let mut rr = rep.results().map_err(|s| format!("call failed: {s:?}"))?;
        let (t, range) = started.remove(&x).ok_or("a reply to no call of the loop")?;
        check_reply(op, size, range, Check::Spot, &mut rr)?;
        st.lat.record(t.elapsed());
        st.calls += 1;
        if op != "null" {
            st.bytes += size as u64;
        }
    }
    st.secs = t0.elapsed().as_secs_f64();
    if op == "read" {
        // Every octet of one more READ, outside the timed loop (as on the TCP side).
        let call = w.next();
        let rep = c
            .call(BLOCK_PROG, BLOCK_VERS, call.proc_, call.body, &call.opts)
            .map_err(|e| format!("the verified READ: {e}"))?;
        let mut rr = rep.results().map_err(|s| format!("READ failed: {s:?}"))?;
        check_reply(op, size, call.range, Check::Full, &mut rr)?;
    }
    st.ranges = w.ranges;
    Ok(st)
}

/// [`bench_rdma`] over `conns` connections at once, driven round-robin by this thread:
/// each keeps `credits` calls in flight; every reply is checked. Returns the merged figures
/// and each connection's calls.
fn bench_rdma_many(
    net: &Net,
    addr: SocketAddr,
    load: Load,
    spin_us: u64,
    conns: usize,
) -> Result<(Stats, Vec<u64>), String> {
    let Load {
        op,
        size,
        credits,
        secs,
        ..
    } = load;
    let cfg = ClientConfig {
        credits,
        poll_spin: Duration::from_micros(spin_us),
        ..ClientConfig::default()
    };
    let mut cs = Vec::with_capacity(conns);
    for i in 0..conns {
        let c = net
            .connect(addr, cfg.clone())
            .map_err(|e| format!("connection {i}: connect {addr}: {e}"))?;
        cs.push(c);
    }
    // One preparation (the store's size, a READ load's pattern) for all: every connection
    // spreads its calls over the same ranges.
    let mut w0 = load.workload();
    {
        let c = &mut cs[0];
        w0.prepare(&mut |p, body, f| {
            let rep = c
                .call(BLOCK_PROG, BLOCK_VERS, p, body, &CallOpts::default())
                .map_err(|e| e.to_string())?;
            let mut rr = rep.results().map_err(|s| format!("failed: {s:?}"))?;
            f(&mut rr)
        })?;
    }
    let mut ws: Vec<Workload> = (0..conns)
        .map(|k| {
            let mut w = load.workload();
            w.ranges = w0.ranges;
            // Each connection starts at another range.
            w.next = k;
            w
        })
        .collect();
    let mut st = Stats::default();
    let mut per_conn = vec![0u64; conns];
    let mut started: Vec<FxHashMap<u32, (Instant, usize)>> = vec![FxHashMap::default(); conns];
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let mut running = true;
    let mut turns = 0u32;
    loop {
        if turns.is_multiple_of(16) {
            running = t0.elapsed() < dur;
        }
        turns = turns.wrapping_add(1);
        let mut in_flight = 0;
        for (k, c) in cs.iter_mut().enumerate() {
            while running && c.in_flight() < c.grant().min(credits) {
                let call = ws[k].next();
                let x = c
                    .submit(BLOCK_PROG, BLOCK_VERS, call.proc_, call.body, &call.opts)
                    .map_err(|e| format!("connection {k}: {e}"))?;
                started[k].insert(x, (Instant::now(), call.range));
            }
            c.progress_arrived()
                .map_err(|e| format!("connection {k}: {e}"))?;
            while let Some((x, r)) = c.take_reply() {
                let rep = r.map_err(|e| format!("connection {k}: {e}"))?;
                let mut rr = rep
                    .results()
                    .map_err(|s| format!("connection {k}: call failed: {s:?}"))?;
                let (t, range) = started[k]
                    .remove(&x)
                    .ok_or("a reply to no call of the loop")?;
                check_reply(op, size, range, Check::Spot, &mut rr)?;
                st.lat.record(t.elapsed());
                st.calls += 1;
                per_conn[k] += 1;
                if op != "null" {
                    st.bytes += size as u64;
                }
            }
            in_flight += c.in_flight();
        }
        if in_flight == 0 && !running {
            break;
        }
        // The worker runs once a round, after every connection's calls were posted (through
        // the first connection's CQ, which runs it when polled empty), not once per
        // connection: a round over N connections costs one pass, not N.
        cs[0]
            .progress(false)
            .map_err(|e| format!("connection 0: {e}"))?;
    }
    st.secs = t0.elapsed().as_secs_f64();
    st.ranges = w0.ranges;
    for c in &cs {
        c.disconnect();
    }
    Ok((st, per_conn))
}

fn bench_tcp(addr: SocketAddr, poll: TcpPoll, load: Load) -> Result<Stats, String> {
    let Load {
        op,
        size,
        credits,
        secs,
        ..
    } = load;
    let mut c = TcpClient::connect_with(addr, credits as usize, poll)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut w = load.workload();
    w.prepare(&mut |p, body, f| {
        let rep = c
            .call(BLOCK_PROG, BLOCK_VERS, p, &body)
            .map_err(|e| e.to_string())?;
        let mut rr = rep.results().map_err(|s| format!("failed: {s:?}"))?;
        f(&mut rr)
    })?;
    let mut st = Stats::default();
    let mut started = std::collections::VecDeque::new();
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let account = |st: &mut Stats, (t, range): (Instant, usize), rep: tcp::TcpReply| {
        let mut rr = rep.results().map_err(|s| format!("call failed: {s:?}"))?;
        check_reply(op, size, range, Check::Spot, &mut rr)?;
        st.lat.record(t.elapsed());
        st.calls += 1;
        if op != "null" {
            st.bytes += size as u64;
        }
        Ok::<(), String>(())
    };
    let mut turns = 0u32;
    while !turns.is_multiple_of(64) || t0.elapsed() < dur {
        turns = turns.wrapping_add(1);
        let call = w.next();
        let (_, earlier) = c
            .submit(BLOCK_PROG, BLOCK_VERS, call.proc_, &call.body)
            .map_err(|e| e.to_string())?;
        started.push_back((Instant::now(), call.range));
        if let Some(rep) = earlier {
            let t = started.pop_front().expect("started");
            account(&mut st, t, rep)?;
        }
    }
    while c.in_flight() > 0 {
        let rep = c.wait_next().map_err(|e| e.to_string())?;
        let t = started.pop_front().expect("started");
        account(&mut st, t, rep)?;
    }
    st.secs = t0.elapsed().as_secs_f64();
    if op == "read" {
        // Every octet of one more READ, outside the timed loop (as on the RDMA side).
        let call = w.next();
        let rep = c
            .call(BLOCK_PROG, BLOCK_VERS, call.proc_, &call.body)
            .map_err(|e| format!("the verified READ: {e}"))?;
        let mut rr = rep.results().map_err(|s| format!("READ failed: {s:?}"))?;
        check_reply(op, size, call.range, Check::Full, &mut rr)?;
    }
    st.ranges = w.ranges;
    Ok(st)
}

/// Reference: raw verbs RDMA Write of `size` bytes with `depth` outstanding from `client` to a
/// peer listening on `server` (where: a free port on kernel TCP, the given one on DPDK), over
/// the same transport as the RDMA side (what a READ through write chunks is compared
/// against; also `nfs-bench --verbs-reference`). None without a server side (the RDMA side
/// talks to a remote server over the dataplane: no in-process peer to write to).
pub(crate) fn bench_verbs_write(
    client: &cm::Net,
    server: Option<(&cm::Net, SocketAddr)>,
    size: usize,
    depth: usize,
    secs: f64,
) -> Result<Option<f64>, String> {
    let sdev = Device::open();
    let spd = sdev.alloc_pd();
    // One target region per Write in flight, written in turn, as the READs in flight each
    // have their own write chunk: the receiver places into as much memory (the same cache
    // misses) as the client of the READs does.
    let targets: Vec<_> = (0..depth.max(1))
        .map(|_| spd.reg_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE))
        .collect();
    let sinks: Vec<(u64, u32)> = targets.iter().map(|t| (t.addr(), t.stag())).collect();
    let scq = Cq::new(16);
    let sqp = Qp::new(&spd, &QpInitAttr::new(&scq));
    let wait = Duration::from_secs_f64(secs + 30.0);
    let dev = Device::open();
    let pd = dev.alloc_pd();
    let cq = Cq::new(4096);
    if let Some(d) = client.cq_driver() {
        cq.drive_with(d);
    }
    let attr = QpInitAttr {
        cap: QpCap {
            max_send_wr: 1024,
            max_recv_wr: 16,
        },
        ..QpInitAttr::new(&cq)
    };
    let qp = Qp::new(&pd, &attr);
    let Some((snet, saddr)) = server else {
        return Ok(None);
    };
    let l = snet.listen(saddr).map_err(|e| e.to_string())?;
    let saddr = l.local_addr().map_err(|e| e.to_string())?;
    let server = thread::spawn(move || -> Result<(), String> {
        let req = l
            .get_request(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        req.accept(&sqp, &ConnParam::default())
            .map_err(|e| e.to_string())?;
        sqp.wait_closed(wait);
        Ok(())
    });
    client
        .connect(saddr, &qp, &ConnParam::default())
        .map_err(|e| e.to_string())?;
    // And one source a Write in flight, taken in turn, as each READ in flight has its own store
    // range on the server (`Workload`): the sender gathers from as much memory. Filled, so
    // that they are memory of their own (never written, fresh pages all read as the kernel's
    // one zero page, which stays in every cache).
    let srcs: Vec<_> = (0..depth.max(1))
        .map(|_| {
            let m = pd.reg_mr(size, Access::LOCAL_WRITE);
            m.write_at(0, &range_pattern(size, 0));
            m
        })
        .collect();
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let mut inflight = 0usize;
    let mut done = 0u64;
    let mut id = 0u64;
    while t0.elapsed() < dur || inflight > 0 {
        while t0.elapsed() < dur && inflight < depth {
            let (remote_addr, rkey) = sinks[id as usize % sinks.len()];
            let src = &srcs[id as usize % srcs.len()];
            id += 1;
            qp.post_send(SendWr {
                wr_id: id,
                opcode: Opcode::Write { remote_addr, rkey },
                sg_list: smallvec![sge(src, 0, size)],
                signaled: true,
            })
            .map_err(|e| e.to_string())?;
            inflight += 1;
        }
        let wc = cq
            .wait(Duration::from_secs(10))
            .ok_or("RDMA Write completion timed out")?;
        if wc.status != WcStatus::Success {
            return Err(format!("RDMA Write failed: {:?}", wc.status));
        }
        inflight -= 1;
        done += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    qp.disconnect();
    // A driven client worker sends the FIN only when polled: drive it until the server side
    // has seen the close.
    let end = Instant::now() + Duration::from_secs(10);
    while !server.is_finished() && Instant::now() < end {
        if !client.poll() {
            thread::sleep(Duration::from_micros(100));
        }
    }
    let _ = server.join();
    Ok(Some(done as f64 * size as f64 * 8.0 / secs / 1e9))
}

pub fn run(a: Args) -> Result<(), String> {
    // The RDMA side's transport (the EAL starts here with --transport dpdk); not needed for a
    // TCP-only run.
    let net = if a.compare || a.proto == Proto::Rdma {
        Some(Net::start(&a)?)
    } else {
        None
    };
    let mib = 1 << 20;
    let size = if a.compare { mib } else { a.size };
    // One store range per call in flight unless --span says otherwise; an in-process store
    // holds them all.
    let span = a
        .span
        .unwrap_or(size as u64 * u64::from(a.credits.max(1)))
        .max(size as u64);
    let servers = start_servers(
        &a,
        net.as_ref(),
        usize::try_from(span).unwrap_or(usize::MAX),
    )?;
    let load = |op: &'static str, size: usize, credits: u32| Load {
        op,
        size,
        credits,
        span,
        secs: a.seconds,
    };
    if a.connections == 0 {
        return Err("--connections: at least 1".into());
    }
    if a.compare && a.connections > 1 {
        return Err("--connections is for one measurement (without --compare)".into());
    }
    if a.proto == Proto::Tcp && a.connections > 1 {
        return Err("--connections is for the RDMA side (--proto rdma)".into());
    }
    if a.compare {
        let net = net.as_ref().expect("started for --compare");
        let s = &servers;
        let secs = a.seconds;
        // Ten measurements of --seconds each: one progress line per phase on stderr.
        let mut progress = Progress::new(Duration::ZERO);
        let mut p = |i: u32, what: &str| {
            progress.phase(format!("rpc-bench: {i}/10 {what} ({secs} s)"));
        };
        // Each TCP figure blocking and busy-polled (`POLLS`), one right after the other.
        const POLLS: [TcpPoll; 2] = [TcpPoll::Blocking, TcpPoll::Busy];
        let tcp_pair = |p: &mut dyn FnMut(u32, &str), i: u32, what: &str, l: Load| {
            p(i, &format!("{what} over ONC RPC/TCP, blocking"));
            let blocking = bench_tcp(s.tcp_for(POLLS[0]), POLLS[0], l)?;
            p(i + 1, &format!("{what} over ONC RPC/TCP, busy-polled"));
            let busy = bench_tcp(s.tcp_for(POLLS[1]), POLLS[1], l)?;
            Ok::<_, String>([blocking, busy])
        };
        p(1, "NULL over RPC-over-RDMA");
        let nr = bench_rdma(net, s.rdma, load("null", 0, a.credits), a.poll_spin_us)?;
        let nts = tcp_pair(&mut p, 2, "NULL", load("null", 0, a.credits))?;
        p(4, "READ 1 MiB over RPC-over-RDMA");
        let rr = bench_rdma(net, s.rdma, load("read", mib, a.credits), a.poll_spin_us)?;
        let rts = tcp_pair(&mut p, 5, "READ 1 MiB", load("read", mib, a.credits))?;
        p(7, "verbs RDMA Write 1 MiB reference");
        let wv = bench_verbs_write(
            &net.client,
            net.server_addr(DP_VERBS_PORT),
            mib,
            a.credits as usize,
            secs,
        )?;
        // Latency without queueing: one call in flight.
        p(8, "NULL over RPC-over-RDMA, 1 credit");
        let nr1 = bench_rdma(net, s.rdma, load("null", 0, 1), a.poll_spin_us)?;
        let nt1s = tcp_pair(&mut p, 9, "NULL, 1 call in flight,", load("null", 0, 1))?;
        progress.clear();
        // The baseline is the better TCP run of each pair (the brief's "best the kernel can
        // do"): more calls, more bandwidth, or the lower median with one call in flight.
        let better = |pair: &[Stats; 2], key: fn(&Stats) -> f64| -> usize {
            usize::from(key(&pair[1]) > key(&pair[0]))
        };
        let (ni, ri) = (better(&nts, Stats::rate), better(&rts, Stats::gbps));
        let n1i = better(&nt1s, |st| -st.pct(0.5));
        let (nt, rt, nt1) = (&nts[ni], &rts[ri], &nt1s[n1i]);
        let mode = |i: usize| POLLS[i].name();
        let rdma_setup = net.describe(a.server);
        if a.json {
            let j = serde_json::json!({
                "transport": a.transport.name(),
                "rdma_transport": a.transport.name(),
                "rdma_setup": rdma_setup,
                "tcp_transport": "ONC RPC over kernel TCP (record marking)",
                "tcp_baseline": {
                    "what": "each TCP figure measured blocking and busy-polled; the *_tcp keys and the ratios take the better run (more calls/s, more Gbit/s, the lower p50 with one call in flight)",
                    "null": mode(ni),
                    "read_1m": mode(ri),
                    "null_1credit": mode(n1i),
                },
                "credits": a.credits,
                "span": span,
                "store_ranges": rr.ranges,
                "seconds_per_run": secs,
                "null_calls_per_s_rdma": nr.rate(),
                "null_calls_per_s_tcp": nt.rate(),
                "null_calls_per_s_tcp_blocking": nts[0].rate(),
                "null_calls_per_s_tcp_busy": nts[1].rate(),
                "null_calls_ratio": nr.rate() / nt.rate(),
                "read_1m_gbps_rdma": rr.gbps(),
                "read_1m_gbps_tcp": rt.gbps(),
                "read_1m_gbps_tcp_blocking": rts[0].gbps(),
                "read_1m_gbps_tcp_busy": rts[1].gbps(),
                "read_1m_ratio": rr.gbps() / rt.gbps(),
                "write_1m_gbps_verbs": wv,
                "read_1m_vs_verbs_write_ratio": wv.map(|w| rr.gbps() / w),
                "null_p50_us_rdma": nr.pct(0.5),
                "null_p99_us_rdma": nr.pct(0.99),
                "null_p50_us_tcp": nt.pct(0.5),
                "null_p99_us_tcp": nt.pct(0.99),
                "null_p50_us_rdma_1credit": nr1.pct(0.5),
                "null_p99_us_rdma_1credit": nr1.pct(0.99),
                "null_p50_us_tcp_1credit": nt1.pct(0.5),
                "null_p50_us_tcp_1credit_blocking": nt1s[0].pct(0.5),
                "null_p50_us_tcp_1credit_busy": nt1s[1].pct(0.5),
                "null_p50_1credit_ratio": nr1.pct(0.5) / nt1.pct(0.5),
                "null_p99_us_tcp_1credit": nt1.pct(0.99),
                "placement": {
                    "server_cpu": net.server_cpu(),
                    "client_cpus": dpwarp::affinity::thread_cpus(),
                    "rdma": if net.server_cpu().is_some() {
                        "server: a reactor thread drives the server port's worker and serves the connections on it; client: this thread drives the client port's worker"
                    } else {
                        "kernel TCP: each server connection served on its QP's driver thread, the client waits on its CQ in this thread; unpinned"
                    },
                    "tcp": "server threads on server_cpu, client on client_cpus (as the RDMA side); busy-polled: non-blocking sockets, each end spinning",
                },
                "ports": net.ports(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?
            );
        } else {
            println!("RDMA side: {rdma_setup}");
            println!("{}", nr.line("rdma NULL"));
            println!("{}", nts[0].line("tcp  NULL, blocking"));
            println!("{}", nts[1].line("tcp  NULL, busy-polled"));
            println!("{}", nr1.line("rdma NULL, 1 credit"));
            println!("{}", nt1s[0].line("tcp  NULL, 1 in flight, blocking"));
            println!("{}", nt1s[1].line("tcp  NULL, 1 in flight, busy-polled"));
            println!("{}", rr.line("rdma READ 1 MiB (write chunks)"));
            println!("{}", rts[0].line("tcp  READ 1 MiB, blocking"));
            println!("{}", rts[1].line("tcp  READ 1 MiB, busy-polled"));
            println!(
                "against the better TCP run: NULL {:.2}x ({}), READ 1 MiB {:.2}x ({}), NULL \
                 p50 with 1 in flight {:.2}x ({})",
                nr.rate() / nt.rate(),
                mode(ni),
                rr.gbps() / rt.gbps(),
                mode(ri),
                nr1.pct(0.5) / nt1.pct(0.5),
                mode(n1i)
            );
            match wv {
                Some(wv) => {
                    println!("verbs RDMA Write 1 MiB x{}: {wv:.3} Gbit/s", a.credits);
                    println!(
                        "NULL ratio rdma/tcp {:.2}; READ 1 MiB / verbs Write {:.2}",
                        nr.rate() / nt.rate(),
                        rr.gbps() / wv
                    );
                }
                None => println!(
                    "verbs RDMA Write reference: not run (remote server); NULL ratio rdma/tcp {:.2}",
                    nr.rate() / nt.rate()
                ),
            }
        }
        if let Some(d) = net.dataplane_stats() {
            log::info!("dataplane workers: {d}");
        }
        return Ok(());
    }
    let op = a.op.name();
    let l = load(op, a.size, a.credits);
    let mut per_conn = None;
    let mut idle = Vec::with_capacity(a.idle_connections);
    let rss_before_idle = rss_kib();
    if a.idle_connections > 0 {
        let Some(net) = net
            .as_ref()
            .filter(|_| a.proto == Proto::Rdma && !a.compare)
        else {
            return Err("--idle-connections is for the RDMA side without --compare".into());
        };
        let cfg = ClientConfig {
            credits: 1,
            ..ClientConfig::default()
        };
        for i in 0..a.idle_connections {
            idle.push(
                net.connect(servers.rdma, cfg.clone())
                    .map_err(|e| format!("idle connection {i}: {e}"))?,
            );
        }
    }
    let rss_with_idle = rss_kib();
    let workers_before = net.as_ref().map(Net::worker_stats).unwrap_or_default();
    let st = match (a.proto, net.as_ref()) {
        (Proto::Rdma, Some(net)) if a.connections > 1 => {
            let (st, pc) = bench_rdma_many(net, servers.rdma, l, a.poll_spin_us, a.connections)?;
            per_conn = Some(pc);
            st
        }
        (Proto::Rdma, Some(net)) => bench_rdma(net, servers.rdma, l, a.poll_spin_us)?,
        _ => {
            let poll = TcpPoll::from(a.tcp_poll);
            bench_tcp(servers.tcp_for(poll), poll, l)?
        }
    };
    // The slowest and the busiest connection's calls as a share of the mean.
    let shares = per_conn.as_ref().map(|pc| {
        let mean = pc.iter().sum::<u64>() as f64 / pc.len().max(1) as f64;
        let share = |v: u64| if mean > 0.0 { v as f64 / mean } else { 0.0 };
        (
            share(pc.iter().copied().min().unwrap_or(0)),
            share(pc.iter().copied().max().unwrap_or(0)),
        )
    });
    // What each worker's passes cost during the measurement (with the idle connections held).
    let workers = net
        .as_ref()
        .map(|n| pass_costs(&workers_before, &n.worker_stats()))
        .unwrap_or_default();
    // Every idle connection is still served: one NULL call on each, after the measurement.
    let mut idle_served = 0usize;
    for c in &mut idle {
        if c.call(
            BLOCK_PROG,
            BLOCK_VERS,
            block::PROC_NULL,
            Body::new(),
            &CallOpts::default(),
        )
        .is_ok()
        {
            idle_served += 1;
        }
    }
    if idle_served < idle.len() {
        log::warn!(
            "rpc-bench: {} of {} idle connections did not answer a NULL call after the measurement",
            idle.len() - idle_served,
            idle.len()
        );
    }
    // Resident memory per idle connection, both ends (client and in-process server) counted.
    let bytes_per_idle = match (rss_before_idle, rss_with_idle) {
        (Some(b), Some(w)) if !idle.is_empty() => {
            Some(w.saturating_sub(b) as f64 * 1024.0 / idle.len() as f64)
        }
        _ => None,
    };
    if let Some(d) = net.as_ref().and_then(Net::dataplane_stats) {
        log::info!("dataplane workers: {d}");
    }
    if a.json {
        let (proto, transport) = match a.proto {
            Proto::Rdma => ("rdma", a.transport.name()),
            Proto::Tcp => ("tcp", "kernel"),
        };
        let j = serde_json::json!({
            "proto": proto, "transport": transport, "op": op, "size": a.size,
            "tcp_poll": (a.proto == Proto::Tcp).then(|| TcpPoll::from(a.tcp_poll).name()),
            "credits": a.credits, "span": span, "store_ranges": st.ranges,
            "calls": st.calls, "seconds": st.secs,
            "calls_per_s": st.rate(), "p50_us": st.pct(0.5), "p99_us": st.pct(0.99),
            "p999_us": st.pct(0.999), "gbps": st.gbps(),
            "connections": per_conn.as_ref().map_or(1, Vec::len),
            "idle_connections": idle.len(),
            "idle_served": idle_served,
            "rss_kib_before_idle": rss_before_idle,
            "rss_kib_with_idle": rss_with_idle,
            "bytes_per_idle_connection": bytes_per_idle,
            "workers": workers,
            "per_connection_calls": per_conn,
            "min_share": shares.map(|s| s.0),
            "max_share": shares.map(|s| s.1),
            "ports": net.as_ref().and_then(Net::ports),
        });
        println!("{j}");
    } else {
        let what = format!(
            "{} {} {}",
            if a.proto == Proto::Rdma {
                format!("rdma ({})", a.transport.name())
            } else {
                format!("tcp ({})", TcpPoll::from(a.tcp_poll).name())
            },
            op,
            if a.op == Op::Null {
                String::new()
            } else {
                format!("{} B", a.size)
            }
        );
        println!("{}", st.line(&what));
        if let Some(b) = bytes_per_idle {
            println!(
                "{} idle connections: {b:.0} resident bytes each (both ends), {idle_served} answered a NULL call afterwards",
                idle.len()
            );
        }
        if let (Some(pc), Some((min, max))) = (&per_conn, shares) {
            println!(
                "{} connections: the slowest {min:.2}, the busiest {max:.2} of the mean share",
                pc.len()
            );
        }
    }
    Ok(())
}
