//! `dpwarp nfs-bench`: a storage load against an NFSv3/RDMA server (dpwarp's `nfs-server`, or
//! Linux knfsd, or any other), over N RPC-over-RDMA connections at once, like a client mounted
//! with `nconnect=N` (each connection its own QP with `--credits` calls in flight, the
//! connections spread over `--threads` load threads, each driving its share round robin, as a
//! client's worker drives its QPs), beside `--idle-connections` that only hold their QP. The
//! operations are drawn from a weighted mix (`--mix read4k=8,read1m=1,write4k=1,getattr=1`,
//! `lookup`; a READ or WRITE without a size has `--size`) on one file the bench creates and
//! fills with a known pattern first; every reply is
//! checked (NFS3_OK; READ data against the pattern, GETATTR's file id, LOOKUP's handle).
//!
//! Without `--server` it starts dpwarp's NFS target in this process on a temporary export (root
//! needed), so one command measures: on the DPDK dataplane of `--config` (default
//! configs/net_ring.toml: the target on port 0, the bench on port 1, each port's worker driven
//! by its own thread) or over kernel TCP on loopback. Prints one JSON object (docs/nfs.md
//! "nfs-bench" lists its keys).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use dpwarp::cm::Net;
use dpwarp::latency::Recorder;
use dpwarp::nfs::xdr::{parse_post_op_attr, Fattr3, Sattr3, Wcc};
use dpwarp::nfs::{proc_ as proc3, NFS_PROG, NFS_V3};
use dpwarp::rpc::client::{CallOpts, RdmaClient, ReplyReader};
use dpwarp::rpc::program::Body;
use rustc_hash::FxHashMap;

use crate::cli::{NetArgs, TransportArg, Verbosity};
use crate::nfs_probe::{client_net, connect, mnt, mount_port};
#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::Dataplane;
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::Dataplane;

/// The file the bench works on, in the export's root.
const FILE: &str = "nfs-bench.dat";

#[derive(Parser, Debug)]
pub struct Args {
    /// The NFS server's address (default: an in-process dpwarp NFS target on a temporary
    /// export: on port 0 of the --config dataplane, or on loopback with --transport kernel).
    #[arg(long)]
    pub server: Option<IpAddr>,
    /// The export to mount (its path on the server).
    #[arg(long, default_value = "/export")]
    pub export: String,
    /// The server's NFS/RDMA port.
    #[arg(long, default_value_t = dpwarp::nfs::NFS_RDMA_PORT)]
    pub port: u16,
    /// The server's rpcbind port (TCP).
    #[arg(long, default_value_t = 111)]
    pub rpcbind_port: u16,
    /// MOUNT's TCP port, to skip rpcbind.
    #[arg(long)]
    pub mount_port: Option<u16>,
    /// Where rpcbind and MOUNT are, when not at --server.
    #[arg(long)]
    pub mountaddr: Option<IpAddr>,
    /// RPC-over-RDMA connections carrying the load (Linux `nconnect`).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Load threads; connection k is driven by thread k mod T, round robin (default: one per
    /// connection over kernel TCP, one on DPDK, where a thread drives the client port's worker).
    #[arg(long)]
    pub threads: Option<usize>,
    /// More connections that only hold their QP during the load (quiet clients beside busy
    /// ones); each must answer one GETATTR after it (`idle_served`).
    #[arg(long, default_value_t = 0)]
    pub idle_connections: usize,
    /// Calls in flight per connection (the server's credit grant may allow fewer).
    #[arg(long, default_value_t = 16)]
    pub credits: u32,
    /// The operation mix: `op=weight,...` of read, write, getattr, lookup; a READ or WRITE
    /// may carry its size (`read4k`, `write64k`, `read1m`, `read512`: octets, k = 1024,
    /// m = 1048576), else it has --size.
    #[arg(long, default_value = "read=1")]
    pub mix: String,
    /// Octets per READ and WRITE of the mix that name no size of their own (at most the
    /// server's rtmax / wtmax).
    #[arg(long, default_value_t = 4096)]
    pub size: u32,
    /// Size of the file the bench creates and reads (a multiple of --size).
    #[arg(long, default_value_t = 16 << 20)]
    pub file_size: u64,
    /// Seconds of load.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Ask for MPA CRC32c (the Linux NFS/RDMA client does not).
    #[arg(long)]
    pub crc: bool,
    /// After the load, the reference a READ load is compared to: verbs RDMA Writes of --size
    /// with --credits in flight for --seconds over the same transport and ports, to a peer in
    /// this process (JSON `verbs_write_gbps`, `gbps_vs_verbs_write`). In-process target only.
    #[arg(long)]
    pub verbs_reference: bool,
    /// With --verbs-reference: rounds of load and reference taking turns, --seconds split
    /// between them (JSON `rounds`; the figures are the medians of the rounds).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// The in-process target's attribute cache: milliseconds the attributes of a file
    /// answered at once may be used again while nothing changes through the export
    /// (nfs-server's `attr_cache_ms`; 0, the default: never).
    #[arg(long, default_value_t = 0)]
    pub attr_cache_ms: u64,
    /// Transport of the RDMA side (MOUNT and rpcbind always go over kernel TCP).
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub verbosity: Verbosity,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Getattr,
    Lookup,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Getattr => "getattr",
            Op::Lookup => "lookup",
        }
    }
}

/// One kind of call of the mix: the operation, its size (READ and WRITE; None: `--size`)
/// and its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MixEntry {
    op: Op,
    size: Option<u32>,
    weight: u32,
}

impl MixEntry {
    /// As the mix names it (`read4k`, `getattr`).
    fn name(&self) -> String {
        match self.size {
            None => self.op.name().to_string(),
            Some(n) if n % (1 << 20) == 0 => format!("{}{}m", self.op.name(), n >> 20),
            Some(n) if n % 1024 == 0 => format!("{}{}k", self.op.name(), n >> 10),
            Some(n) => format!("{}{n}", self.op.name()),
        }
    }
}

/// `4k`, `1m`, `512`: octets.
fn parse_size(s: &str) -> Option<u32> {
    let (num, unit) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1024),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u32>()
        .ok()?
        .checked_mul(unit)
        .filter(|&n| n > 0)
}

/// `read4k=8,write=1`: each kind of call with its weight (at least one positive).
fn parse_mix(s: &str) -> Result<Vec<MixEntry>, String> {
    let mut mix = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (name, w) = part.split_once('=').unwrap_or((part, "1"));
        let name = name.trim();
        let unknown = || {
            format!("--mix: unknown operation {name:?} (read, write, getattr, lookup; read4k, write1m: with a size)")
        };
        let (op, size) = match name {
            "getattr" => (Op::Getattr, None),
            "lookup" => (Op::Lookup, None),
            _ => {
                let (op, rest) = if let Some(r) = name.strip_prefix("read") {
                    (Op::Read, r)
                } else if let Some(r) = name.strip_prefix("write") {
                    (Op::Write, r)
                } else {
                    return Err(unknown());
                };
                let size = if rest.is_empty() {
                    None
                } else {
                    Some(parse_size(rest).ok_or_else(unknown)?)
                };
                (op, size)
            }
        };
        let weight: u32 = w
            .trim()
            .parse()
            .map_err(|_| format!("--mix: weight {w:?} of {name}"))?;
        if weight > 0 {
            mix.push(MixEntry { op, size, weight });
        }
    }
    if mix.is_empty() {
        return Err("--mix: no operation with a positive weight".into());
    }
    Ok(mix)
}

/// The pattern's period: a prime, so READs of `--size`-aligned ranges (`size` < the period)
/// see the same octets only `PERIOD x size` apart (4 GiB at 4 KiB), beyond any file the bench
/// makes in practice.
const PATTERN_PERIOD: u64 = 1_048_573;

/// The longest pattern run taken from the table; longer ones are computed.
const PATTERN_RUN: usize = 1 << 20;

/// The pattern octet at file offset `off`: any READ can be checked against it wherever it
/// lands, and WRITEs write it again (so reads stay checkable).
fn pattern_at(off: u64) -> u8 {
    let o = off % PATTERN_PERIOD;
    (o.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (o as u8)
}

/// The pattern for `[off, off + len)`: from a table computed once (a period and one run), so
/// that checking a READ or making a WRITE is a memcmp or memcpy, not a computation per octet
/// that would bound the bench's own rate.
fn pattern(off: u64, len: usize) -> std::borrow::Cow<'static, [u8]> {
    static TABLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    if len > PATTERN_RUN {
        return (0..len as u64).map(|i| pattern_at(off + i)).collect();
    }
    let t = TABLE.get_or_init(|| {
        (0..PATTERN_PERIOD + PATTERN_RUN as u64)
            .map(pattern_at)
            .collect()
    });
    let at = (off % PATTERN_PERIOD) as usize;
    std::borrow::Cow::Borrowed(&t[at..at + len])
}

/// Where the NFS server is: its RDMA address, MOUNT's TCP address; `_keep` holds an
/// in-process target and its export directory.
struct Target {
    nfs: SocketAddr,
    mount: SocketAddr,
    export: String,
    /// An in-process target's side of the transport and its address (for the verbs
    /// reference's peer).
    server_side: Option<(Net, IpAddr)>,
    _keep: Option<InProcess>,
}

struct InProcess {
    handle: Option<dpwarp::rpc::server::ServerHandle>,
    target: Option<dpwarp::nfs::target::NfsTarget>,
    dir: PathBuf,
}

impl InProcess {
    /// The in-process target's calls so far, and those answered at once on the connection's
    /// thread (the rest went to the handler pool).
    fn counts(&self) -> (u64, u64) {
        use dpwarp::rpc::server::ServerStats;
        let Some(t) = &self.target else {
            return (0, 0);
        };
        let st = t.server.stats();
        (
            ServerStats::get(&st.calls),
            ServerStats::get(&st.calls_nowait),
        )
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
        if let Some(t) = self.target.take() {
            t.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The verbs reference's port on an in-process DPDK target's address.
const VERBS_PORT: u16 = 20051;

/// The dataplane config an in-process DPDK run uses without `--config` (as `rpc-bench`).
#[cfg(feature = "dpdk")]
const DEFAULT_DP_CONFIG: &str = crate::rpc_bench::DEFAULT_DP_CONFIG;

/// The client's side (`net`, and the dataplane it runs on, kept running while it lives) and the
/// server: `--server`'s, or an in-process target on a temporary export, on DPDK port 0 of a
/// two-port config (the client on port 1, both ports' workers driven: the target's reactor
/// drives port 0's, the load threads port 1's) or over kernel TCP on loopback.
fn set_up(a: &Args) -> Result<(Target, Option<Dataplane>, Net), String> {
    if let Some(server) = a.server {
        let (dp, net) = client_net(&a.net)?;
        let mountaddr = a.mountaddr.unwrap_or(server);
        let mount_port = match a.mount_port {
            Some(p) => p,
            None => mount_port(SocketAddr::new(mountaddr, a.rpcbind_port))?,
        };
        let target = Target {
            nfs: SocketAddr::new(server, a.port),
            mount: SocketAddr::new(mountaddr, mount_port),
            export: a.export.clone(),
            server_side: None,
            _keep: None,
        };
        return Ok((target, dp, net));
    }
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let (dp, (server_net, listen_ip), (client_net, client_ip)) = match a.net.transport {
        TransportArg::Kernel => (None, (Net::kernel(), loopback), (Net::kernel(), loopback)),
        TransportArg::Dpdk => {
            let (dp, server, client) = in_process_dataplane(a)?;
            (Some(dp), server, client)
        }
    };
    use dpwarp::nfs::exports::ClientList;
    use dpwarp::nfs::target::{NfsTarget, TargetConfig};
    use dpwarp::rpc::server::ServerConfig;
    let dir = std::env::temp_dir().join(format!("dpwarp-nfs-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let d = ServerConfig::default();
    // Room in the credit pool for every connection's request and its DONE (RFC 8166 §4.3).
    let wanted = (a.connections + a.idle_connections) * (a.credits.max(1) as usize + 1);
    let mut target = NfsTarget::new(TargetConfig {
        // The RDMA side's address, and loopback, where MOUNT is asked.
        clients: ClientList::parse(&[
            &format!("{client_ip}(rw,no_root_squash,insecure)"),
            "127.0.0.1(rw,no_root_squash,insecure)",
        ])?,
        mount_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        rpcbind_listen: None,
        server: ServerConfig {
            credit_pool: d.credit_pool.max(u32::try_from(wanted).unwrap_or(u32::MAX)),
            ..d
        },
        attr_cache: Duration::from_millis(a.attr_cache_ms),
        ..TargetConfig::new(&dir)
    })?;
    let port = if dp.is_some() { a.port } else { 0 };
    let handle = target
        .listen(&server_net, SocketAddr::new(listen_ip, port))
        .map_err(|e| format!("listen: {e}"))?;
    target.announce()?;
    let target = Target {
        nfs: handle.addr,
        mount: target.mount_addr().ok_or("MOUNT not started")?,
        export: dir.to_string_lossy().into_owned(),
        server_side: Some((server_net, listen_ip)),
        _keep: Some(InProcess {
            handle: Some(handle),
            target: Some(target),
            dir,
        }),
    };
    Ok((target, dp, client_net))
}

/// One side of an in-process run: where it connects or listens from, and its address.
type Side = (Net, IpAddr);

/// A driven two-port dataplane from `--config` (default [`DEFAULT_DP_CONFIG`]): the server's
/// side (port 0) and the client's (port 1), each with its address.
#[cfg(feature = "dpdk")]
fn in_process_dataplane(a: &Args) -> Result<(Dataplane, Side, Side), String> {
    use dpwarp::config::DataplaneConfig;
    use dpwarp::dataplane::WorkerMode;
    let config = match &a.net.config {
        Some(c) => c.clone(),
        None => {
            let p = PathBuf::from(DEFAULT_DP_CONFIG);
            if !p.exists() {
                return Err(format!(
                    "an in-process target on DPDK needs a two-port dataplane config: \
                     {DEFAULT_DP_CONFIG} is not in the current directory; give --config FILE, \
                     --server ADDR, or --transport kernel"
                ));
            }
            p
        }
    };
    let cfg = DataplaneConfig::load(&config)?;
    if cfg.ports.len() < 2 {
        return Err(format!(
            "{}: an in-process target and client need two ports (e.g. {DEFAULT_DP_CONFIG}); \
             with a one-port config give --server ADDR",
            config.display()
        ));
    }
    let dp = Dataplane::start_with(&cfg, WorkerMode::Driven).map_err(|e| e.to_string())?;
    let (Some(server), Some(client)) = (dp.endpoint(0), dp.endpoint(1)) else {
        return Err(format!("{}: two ports expected", config.display()));
    };
    if !dp.wait_link_up(Duration::from_secs(10)) {
        return Err(format!(
            "{}: link did not come up within 10 s",
            config.display()
        ));
    }
    let (sip, cip) = (IpAddr::V4(server.ip()), IpAddr::V4(client.ip()));
    Ok((dp, (Net::from(server), sip), (Net::from(client), cip)))
}

#[cfg(not(feature = "dpdk"))]
fn in_process_dataplane(_a: &Args) -> Result<(Dataplane, Side, Side), String> {
    Err("this dpwarp was built without DPDK: use --transport kernel".into())
}

/// A call and its NFS status (NFS3_OK: the reader after it).
fn call_ok<'a>(rep: &'a dpwarp::rpc::client::Reply, what: &str) -> Result<ReplyReader<'a>, String> {
    let mut r = rep.results().map_err(|s| format!("{what}: {s:?}"))?;
    let st = r.xdr.get_u32().map_err(|e| e.to_string())?;
    if st != 0 {
        return Err(format!("{what}: nfsstat3 {st}"));
    }
    Ok(r)
}

/// CREATE (UNCHECKED) the bench file with its size, then WRITE the pattern through it
/// (FILE_SYNC): its handle and file id.
fn prepare(
    c: &mut RdmaClient,
    root: &[u8],
    a: &Args,
    wtmax: u32,
) -> Result<(Vec<u8>, u64), String> {
    let opts = CallOpts::default();
    let mut b = Body::new();
    b.xdr().put_opaque(root);
    b.xdr().put_opaque(FILE.as_bytes());
    b.xdr().put_u32(0); // UNCHECKED (RFC 1813 §3.3.8)
    Sattr3 {
        mode: Some(0o644),
        size: Some(a.file_size),
        ..Default::default()
    }
    .emit(b.xdr());
    let rep = c
        .call(NFS_PROG, NFS_V3, proc3::CREATE, b, &opts)
        .map_err(|e| format!("CREATE: {e}"))?;
    let mut r = call_ok(&rep, "CREATE")?;
    if !r.xdr.get_bool().map_err(|e| e.to_string())? {
        return Err("CREATE: no handle in the reply".into());
    }
    let fh = r.xdr.get_opaque(64).map_err(|e| e.to_string())?.to_vec();
    let attr = parse_post_op_attr(&mut r.xdr)
        .map_err(|e| e.to_string())?
        .ok_or("CREATE: no attributes")?;
    let chunk = u64::from(wtmax.clamp(4096, 1 << 20));
    let mut off = 0;
    while off < a.file_size {
        let n = chunk.min(a.file_size - off);
        let rep = c
            .call(
                NFS_PROG,
                NFS_V3,
                proc3::WRITE,
                write_args(&fh, off, n as u32, 2),
                &opts,
            )
            .map_err(|e| format!("WRITE at {off}: {e}"))?;
        let mut r = call_ok(&rep, "WRITE")?;
        Wcc::parse(&mut r.xdr).map_err(|e| e.to_string())?;
        let count = r.xdr.get_u32().map_err(|e| e.to_string())?;
        if u64::from(count) != n {
            return Err(format!("WRITE at {off}: {count} of {n} octets"));
        }
        off += n;
    }
    Ok((fh, attr.fileid))
}

/// WRITE3args with the pattern for `[off, off + n)` as a DDP-eligible opaque (RFC 8267 §4.2:
/// a read chunk when it does not fit inline).
fn write_args(fh: &[u8], off: u64, n: u32, stable: u32) -> Body {
    let mut b = Body::new();
    b.xdr().put_opaque(fh);
    b.xdr().put_u64(off);
    b.xdr().put_u32(n);
    b.xdr().put_u32(stable);
    b.put_bulk(pattern(off, n as usize).into_owned());
    b
}

/// What one connection did.
#[derive(Default)]
struct ConnResult {
    ops: [u64; 4],
    octets: u64,
    lat: Recorder,
    max_in_flight: u32,
    error: Option<String>,
}

impl ConnResult {
    /// Add a later round's results of the same connection.
    fn absorb(&mut self, r: ConnResult) {
        for (sum, n) in self.ops.iter_mut().zip(r.ops) {
            *sum += n;
        }
        self.octets += r.octets;
        self.lat.merge(&r.lat);
        self.max_in_flight = self.max_in_flight.max(r.max_in_flight);
        if self.error.is_none() {
            self.error = r.error;
        }
    }
}

/// Connection `k`'s seed for round `round` of its load (its mix and offsets): another
/// sequence each connection and round.
fn conn_seed(k: usize, round: u32) -> u64 {
    0x9e37_79b9_7f4a_7c15 ^ (k as u64 + 1) ^ (u64::from(round) << 48)
}

/// The fixed facts every connection's load checks against.
struct Work {
    root: Vec<u8>,
    fh: Vec<u8>,
    fileid: u64,
    /// `file_size`: READ and WRITE offsets are multiples of their size below it.
    file_size: u64,
    /// The mix, every size resolved (`--size` where it named none).
    mix: Vec<MixEntry>,
    credits: usize,
}

/// One connection's load: up to `credits` calls in flight (the server's grant may allow
/// fewer), each drawn from the mix, every reply checked.
struct ConnLoad {
    c: RdmaClient,
    /// Calls in flight: when sent, what, and the offset and size of a READ or WRITE.
    sent: FxHashMap<u32, (Instant, Op, u64, u32)>,
    rng: u64,
    res: ConnResult,
}

impl ConnLoad {
    fn new(c: RdmaClient, seed: u64) -> ConnLoad {
        ConnLoad {
            c,
            sent: FxHashMap::default(),
            rng: seed | 1,
            res: ConnResult::default(),
        }
    }

    /// xorshift64: the mix and offsets, cheap and repeatable per connection.
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Submit calls until `credits` (or the grant) are in flight. `opts[i]`: the call options
    /// of mix entry i (a READ's write chunk of its size).
    fn fill(&mut self, w: &Work, opts: &[CallOpts]) -> Result<(), String> {
        let plain = CallOpts::default();
        let total: u32 = w.mix.iter().map(|e| e.weight).sum();
        while (self.c.in_flight() as usize) < w.credits.min(self.c.grant() as usize) {
            let mut pick = (self.next() % u64::from(total)) as u32;
            let i = w
                .mix
                .iter()
                .position(|e| {
                    if pick < e.weight {
                        true
                    } else {
                        pick -= e.weight;
                        false
                    }
                })
                .unwrap_or(0);
            let (op, size) = (w.mix[i].op, w.mix[i].size.unwrap_or(1));
            let off = (self.next() % (w.file_size / u64::from(size)).max(1)) * u64::from(size);
            let (proc_, args, opts) = match op {
                Op::Read => {
                    let mut b = Body::new();
                    b.xdr().put_opaque(&w.fh);
                    b.xdr().put_u64(off);
                    b.xdr().put_u32(size);
                    (proc3::READ, b, &opts[i])
                }
                Op::Write => (proc3::WRITE, write_args(&w.fh, off, size, 0), &plain),
                Op::Getattr => {
                    let mut b = Body::new();
                    b.xdr().put_opaque(&w.fh);
                    (proc3::GETATTR, b, &plain)
                }
                Op::Lookup => {
                    let mut b = Body::new();
                    b.xdr().put_opaque(&w.root);
                    b.xdr().put_opaque(FILE.as_bytes());
                    (proc3::LOOKUP, b, &plain)
                }
            };
            let xid = self
                .c
                .submit(NFS_PROG, NFS_V3, proc_, args, opts)
                .map_err(|e| format!("{}: {e}", op.name()))?;
            self.sent.insert(xid, (Instant::now(), op, off, size));
        }
        Ok(())
    }

    /// Check every reply that has arrived (after `progress`).
    fn reap(&mut self, w: &Work) -> Result<(), String> {
        while let Some((xid, rep)) = self.c.take_reply() {
            let Some((t0, op, off, size)) = self.sent.remove(&xid) else {
                return Err(format!("a reply to no call (xid {xid:#x})"));
            };
            self.res.lat.record_ns(t0.elapsed().as_nanos() as u64);
            let octets = rep
                .map_err(|e| format!("{}: {e}", op.name()))
                .and_then(|rep| check(&rep, op, off, size, w))?;
            self.res.octets += octets;
            self.res.ops[op as usize] += 1;
        }
        Ok(())
    }
}

/// One load thread: its connections' calls until `stop`, round robin. Each round submits on
/// every connection, handles what arrived, then runs the transport once for all of them
/// (through the first connection: a driven worker's pass, not one per connection); a thread
/// with one connection waits for its next reply instead.
/// The connections come back open: the worker counters are read while they are still held.
fn group_load(
    conns: Vec<(RdmaClient, u64)>,
    w: &Work,
    stop: &AtomicBool,
) -> Vec<(ConnResult, RdmaClient)> {
    let opts: Vec<CallOpts> = w
        .mix
        .iter()
        .map(|e| match e.op {
            Op::Read => CallOpts {
                write_chunks: vec![e.size.unwrap_or(1) as usize],
                ..CallOpts::default()
            },
            _ => CallOpts::default(),
        })
        .collect();
    let mut ls: Vec<ConnLoad> = conns
        .into_iter()
        .map(|(c, seed)| ConnLoad::new(c, seed))
        .collect();
    let alone = ls.len() == 1;
    let mut failed: Option<(usize, String)> = None;
    'run: loop {
        let running = !stop.load(Ordering::Relaxed);
        let mut in_flight = 0;
        for (k, l) in ls.iter_mut().enumerate() {
            let step = (if running { l.fill(w, &opts) } else { Ok(()) })
                .and_then(|()| l.c.progress_arrived().map_err(|e| format!("wait: {e}")))
                .and_then(|()| l.reap(w));
            if let Err(e) = step {
                failed = Some((k, e));
                break 'run;
            }
            in_flight += l.c.in_flight();
        }
        if in_flight == 0 && !running {
            break;
        }
        if let Err(e) = ls[0].c.progress(alone && in_flight > 0) {
            failed = Some((0, format!("wait: {e}")));
            break;
        }
    }
    if let Some((k, e)) = failed {
        ls[k].res.error = Some(e);
    }
    ls.into_iter()
        .map(|mut l| {
            l.res.max_in_flight = l.c.stats.max_in_flight;
            (l.res, l.c)
        })
        .collect()
}

/// Check one reply: NFS3_OK and what it must say (a READ or WRITE of `size` at `off`). The
/// octets of data it moved.
fn check(
    rep: &dpwarp::rpc::client::Reply,
    op: Op,
    off: u64,
    size: u32,
    w: &Work,
) -> Result<u64, String> {
    let mut r = call_ok(rep, op.name())?;
    let e = |e: dpwarp::wire::Error| e.to_string();
    match op {
        Op::Read => {
            parse_post_op_attr(&mut r.xdr).map_err(e)?;
            let count = r.xdr.get_u32().map_err(e)?;
            let _eof = r.xdr.get_bool().map_err(e)?;
            let data = r.get_bulk(size as usize).map_err(e)?;
            if count != size || data.len() != size as usize {
                return Err(format!("READ at {off}: {count} octets, {size} asked"));
            }
            if data[..] != pattern(off, data.len())[..] {
                return Err(format!("READ at {off}: the data is not what was written"));
            }
            Ok(u64::from(count))
        }
        Op::Write => {
            Wcc::parse(&mut r.xdr).map_err(e)?;
            let count = r.xdr.get_u32().map_err(e)?;
            if count != size {
                return Err(format!("WRITE at {off}: {count} of {size} octets"));
            }
            Ok(u64::from(count))
        }
        Op::Getattr => {
            let a = Fattr3::parse(&mut r.xdr).map_err(e)?;
            if a.fileid != w.fileid {
                return Err(format!("GETATTR: file id {} for {}", a.fileid, w.fileid));
            }
            Ok(0)
        }
        Op::Lookup => {
            let fh = r.xdr.get_opaque(64).map_err(e)?;
            if fh != &w.fh[..] {
                return Err("LOOKUP: another handle than CREATE's".into());
            }
            Ok(0)
        }
    }
}

/// The CPUs each of this process's threads may run on and last ran on
/// (`/proc/self/task/*/status` Cpus_allowed_list, `stat` field 39), by thread name.
fn thread_placement() -> serde_json::Value {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return serde_json::Value::Null;
    };
    for t in tasks.flatten() {
        let p = t.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis; "processor" is field 39 overall.
        let last_cpu = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(36))
            .and_then(|c| c.parse::<u32>().ok());
        out.push(serde_json::json!({
            "name": comm.trim(), "cpus_allowed": allowed, "last_cpu": last_cpu,
        }));
    }
    serde_json::Value::Array(out)
}

pub fn run(a: Args) -> Result<(), String> {
    let mix = parse_mix(&a.mix)?;
    if a.connections == 0 {
        return Err("--connections: at least 1".into());
    }
    if a.verbs_reference && a.server.is_some() {
        return Err("--verbs-reference needs the in-process target (no --server)".into());
    }
    let (target, _dp, net) = set_up(&a)?;
    let (root, flavors) = mnt(target.mount, &target.export)?;
    // AUTH_SYS's flavor number (RFC 5531 App. A).
    let auth_sys = flavors.contains(&1);
    let driven = net.is_driven();
    if driven {
        // This thread drives the client port's worker while it connects and prepares.
        net.attach_worker(0);
    }
    let connect = |what: &str| {
        connect(&net, target.nfs, a.crc, auth_sys, a.credits).map_err(|e| format!("{what}: {e}"))
    };
    // The first connection: FSINFO for the transfer sizes, then the file.
    let mut first = connect("connection 0")?;
    // A siw responder leaves an FPDU right after its MPA Reply unprocessed until more data
    // comes (docs/interop.md): the first call waits a little, as the Linux client's does.
    thread::sleep(Duration::from_millis(100));
    let mut b = Body::new();
    b.xdr().put_opaque(&root);
    let rep = first
        .call(NFS_PROG, NFS_V3, proc3::FSINFO, b, &CallOpts::default())
        .map_err(|e| format!("FSINFO: {e}"))?;
    let mut r = call_ok(&rep, "FSINFO")?;
    parse_post_op_attr(&mut r.xdr).map_err(|e| e.to_string())?;
    let rtmax = r.xdr.get_u32().map_err(|e| e.to_string())?;
    let _ = r.xdr.get_u32().map_err(|e| e.to_string())?;
    let _ = r.xdr.get_u32().map_err(|e| e.to_string())?;
    let wtmax = r.xdr.get_u32().map_err(|e| e.to_string())?;
    drop(rep);
    let size = a.size.clamp(1, rtmax.min(wtmax).max(1));
    // Every READ and WRITE of the mix with its size: --size where it names none; a size of
    // its own must fit the server's rtmax / wtmax and the file.
    let mut mix = mix;
    for e in mix
        .iter_mut()
        .filter(|e| matches!(e.op, Op::Read | Op::Write))
    {
        let named = e.name();
        let n = *e.size.get_or_insert(size);
        let max = if e.op == Op::Read { rtmax } else { wtmax };
        if n > max {
            return Err(format!(
                "--mix {named}: {n} octets, more than the server's {} of {max}",
                if e.op == Op::Read { "rtmax" } else { "wtmax" }
            ));
        }
        if a.file_size < u64::from(n) {
            return Err(format!(
                "--file-size {} is less than one {named} of {n} octets",
                a.file_size
            ));
        }
    }
    let (fh, fileid) = prepare(&mut first, &root, &a, wtmax)?;
    let work = Arc::new(Work {
        root,
        fh,
        fileid,
        file_size: a.file_size,
        mix: mix.clone(),
        credits: a.credits.max(1) as usize,
    });
    let mut clients = vec![first];
    for i in 1..a.connections {
        clients.push(connect(&format!("connection {i}"))?);
    }
    let mut idle = Vec::with_capacity(a.idle_connections);
    for i in 0..a.idle_connections {
        if i % 256 == 0 {
            crate::cli::progress_phase(format!("nfs-bench: {i} idle connections open"));
        }
        idle.push(connect(&format!("idle connection {i}"))?);
    }
    let threads_n = a
        .threads
        .unwrap_or(if driven || net.name() == "dpdk" {
            1
        } else {
            a.connections
        })
        .clamp(1, a.connections);
    let mut groups: Vec<Vec<(RdmaClient, u64)>> = (0..threads_n).map(|_| Vec::new()).collect();
    for (i, c) in clients.into_iter().enumerate() {
        groups[i % threads_n].push((c, conn_seed(i, 0)));
    }
    // With the verbs reference, rounds of load and reference take turns (a host's slow phase
    // then meets both sides of a ratio); the figures are the medians over the rounds.
    let verbs_to = match (&target.server_side, a.verbs_reference) {
        (Some((snet, ip)), true) => Some((
            snet.clone(),
            SocketAddr::new(*ip, if snet.is_kernel() { 0 } else { VERBS_PORT }),
        )),
        _ => None,
    };
    let rounds = if verbs_to.is_some() {
        a.rounds.max(1)
    } else {
        1
    };
    let round_secs = a.seconds.max(0.01) / rounds as f64;
    let mut results: Vec<ConnResult> = (0..a.connections).map(|_| ConnResult::default()).collect();
    let mut per_round = Vec::new();
    let mut secs = 0.0;
    let mut placement = serde_json::Value::Null;
    let (mut stats_before, mut stats_after) = (Vec::new(), Vec::new());
    let server_before = target._keep.as_ref().map(InProcess::counts);
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let go = Arc::new(Barrier::new(threads_n + 1));
        let threads: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(t, group)| {
                let (work, stop, go, net) = (work.clone(), stop.clone(), go.clone(), net.clone());
                thread::Builder::new()
                    .name(format!("nfs-bench-{t}"))
                    .spawn(move || {
                        if driven {
                            net.attach_worker(0);
                        }
                        go.wait();
                        group_load(group, &work, &stop)
                    })
                    .expect("spawn a load thread")
            })
            .collect();
        if round == 0 {
            stats_before = _dp.as_ref().map(Dataplane::stats).unwrap_or_default();
        }
        go.wait();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs_f64(round_secs);
        crate::cli::progress_phase(if rounds > 1 {
            format!(
                "nfs-bench: {} connections, round {}/{rounds}",
                a.connections,
                round + 1
            )
        } else {
            format!("nfs-bench: {} connections", a.connections)
        });
        let total_ms = (round_secs * 1000.0) as u64;
        while Instant::now() < end {
            thread::sleep(
                Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())),
            );
            crate::cli::progress_tick(t0.elapsed().as_millis() as u64 / 100, total_ms / 100);
        }
        if round == 0 {
            placement = thread_placement();
        }
        stop.store(true, Ordering::Relaxed);
        // Results in connection order (connection k ran on thread k mod T, k / T-th there).
        let mut by_thread: Vec<std::vec::IntoIter<(ConnResult, RdmaClient)>> = threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default().into_iter())
            .collect();
        let taken = t0.elapsed().as_secs_f64();
        secs += taken;
        groups = (0..threads_n).map(|_| Vec::new()).collect();
        let mut round_octets = 0u64;
        let mut failed = false;
        for (k, total) in results.iter_mut().enumerate() {
            let Some((r, c)) = by_thread[k % threads_n].next() else {
                total
                    .error
                    .get_or_insert_with(|| "its load thread ended".into());
                failed = true;
                continue;
            };
            round_octets += r.octets;
            failed |= r.error.is_some();
            total.absorb(r);
            groups[k % threads_n].push((c, conn_seed(k, round + 1)));
        }
        if round == 0 {
            // The counters of the first round, once its load threads are done (with the
            // calls in flight at the stop), while the busy connections are still held.
            stats_after = _dp.as_ref().map(Dataplane::stats).unwrap_or_default();
        }
        let gbps = round_octets as f64 * 8.0 / taken / 1e9;
        let verbs = match &verbs_to {
            Some((snet, to)) if !failed => {
                crate::cli::progress_phase("nfs-bench: the verbs RDMA Write reference".into());
                crate::rpc_bench::bench_verbs_write(
                    &net,
                    Some((snet, *to)),
                    size as usize,
                    a.credits.max(1) as usize,
                    round_secs,
                )?
            }
            _ => None,
        };
        per_round.push(serde_json::json!({
            "seconds": taken,
            "gbps": gbps,
            "verbs_write_gbps": verbs,
            "gbps_vs_verbs_write": verbs.map(|v| gbps / v),
        }));
        if failed {
            break;
        }
    }
    let server_after = target._keep.as_ref().map(InProcess::counts);
    for (c, _) in groups.into_iter().flatten() {
        c.disconnect();
    }
    crate::cli::progress_clear();
    // Every idle connection must still be served: one GETATTR each.
    let mut idle_served = 0usize;
    let mut idle_errors = Vec::new();
    for (i, c) in idle.iter_mut().enumerate() {
        let mut b = Body::new();
        b.xdr().put_opaque(&work.fh);
        let ok = c
            .call(NFS_PROG, NFS_V3, proc3::GETATTR, b, &CallOpts::default())
            .map_err(|e| e.to_string())
            .and_then(|rep| check(&rep, Op::Getattr, 0, 0, &work));
        match ok {
            Ok(_) => idle_served += 1,
            Err(e) if idle_errors.len() < 8 => {
                idle_errors.push(format!("idle connection {i}: {e}"))
            }
            Err(_) => {}
        }
        c.disconnect();
    }
    let median = |key: &str| {
        let mut v: Vec<f64> = per_round.iter().filter_map(|r| r[key].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    let verbs = median("verbs_write_gbps");
    let verbs_ratio = median("gbps_vs_verbs_write");
    crate::cli::progress_clear();
    let mut errors: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.error.as_ref().map(|e| format!("connection {i}: {e}")))
        .collect();
    errors.extend(idle_errors);
    let mut lat = Recorder::new();
    let mut ops = [0u64; 4];
    let mut octets = 0u64;
    for r in &results {
        lat.merge(&r.lat);
        for (sum, n) in ops.iter_mut().zip(r.ops) {
            *sum += n;
        }
        octets += r.octets;
    }
    let per_conn: Vec<u64> = results.iter().map(|r| r.ops.iter().sum()).collect();
    let total: u64 = per_conn.iter().sum();
    let mean = total as f64 / per_conn.len() as f64;
    let share = |v: u64| if mean > 0.0 { v as f64 / mean } else { 0.0 };
    let out = serde_json::json!({
        "server": target.nfs.to_string(),
        "in_process_server": target._keep.is_some(),
        "transport": net.name(),
        "export": target.export,
        "connections": a.connections,
        "threads_driving": threads_n,
        "idle_connections": a.idle_connections,
        "idle_served": idle_served,
        "attr_cache_ms": target._keep.is_some().then_some(a.attr_cache_ms),
        "credits": a.credits,
        "mix": mix.iter().map(|e| format!("{}={}", e.name(), e.weight)).collect::<Vec<_>>().join(","),
        "size": size,
        "file_size": a.file_size,
        "seconds": secs,
        "ops": total,
        "ops_per_s": total as f64 / secs,
        "gbps": octets as f64 * 8.0 / secs / 1e9,
        "verbs_write_gbps": verbs,
        "gbps_vs_verbs_write": verbs_ratio,
        "rounds": per_round,
        "by_op": {
            "read": ops[Op::Read as usize], "write": ops[Op::Write as usize],
            "getattr": ops[Op::Getattr as usize], "lookup": ops[Op::Lookup as usize],
        },
        "p50_us": lat.quantile_us(0.5),
        "p99_us": lat.quantile_us(0.99),
        "p999_us": lat.quantile_us(0.999),
        "per_connection_ops": per_conn,
        "min_share": per_conn.iter().copied().min().map(share),
        "max_share": per_conn.iter().copied().max().map(share),
        "max_in_flight": results.iter().map(|r| r.max_in_flight).max(),
        "verified": errors.is_empty(),
        "errors": errors,
        "threads": placement,
        "workers": crate::rpc_bench::pass_costs(&stats_before, &stats_after),
        "server_calls": server_before.zip(server_after).map(|((c0, n0), (c1, n1))| {
            serde_json::json!({ "calls": c1 - c0, "answered_at_once": n1 - n0 })
        }),
        "ports": _dp.as_ref().map(crate::net::ports_json),
    });
    println!("{out}");
    if !errors.is_empty() {
        return Err(format!(
            "{} connection(s) failed: {}",
            errors.len(),
            errors[0]
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_parses_weights_and_sizes_and_refuses_nonsense() {
        let e = |op, size, weight| MixEntry { op, size, weight };
        assert_eq!(parse_mix("read").unwrap(), vec![e(Op::Read, None, 1)]);
        assert_eq!(
            parse_mix("read=8,write=1,getattr=0").unwrap(),
            vec![e(Op::Read, None, 8), e(Op::Write, None, 1)]
        );
        let m = parse_mix("read4k=8,read1m=1,write64K=2,write512,getattr=1,lookup=1").unwrap();
        assert_eq!(
            m,
            vec![
                e(Op::Read, Some(4096), 8),
                e(Op::Read, Some(1 << 20), 1),
                e(Op::Write, Some(65536), 2),
                e(Op::Write, Some(512), 1),
                e(Op::Getattr, None, 1),
                e(Op::Lookup, None, 1),
            ]
        );
        let names: Vec<String> = m.iter().map(MixEntry::name).collect();
        assert_eq!(
            names,
            ["read4k", "read1m", "write64k", "write512", "getattr", "lookup"]
        );
        assert!(parse_mix("read=0").is_err());
        assert!(parse_mix("fsync=1").is_err());
        assert!(parse_mix("read=x").is_err());
        for bad in [
            "read0k",
            "readk",
            "read4g",
            "write-1",
            "getattr4k",
            "read99999999m",
        ] {
            assert!(parse_mix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_pattern_is_a_function_of_the_offset() {
        assert_eq!(pattern(4096, 16), pattern(0, 4112)[4096..].to_vec());
        assert_ne!(pattern(0, 64), pattern(1, 64));
        // The table and the computation agree, across the period's end and past one run.
        let off = PATTERN_PERIOD - 100;
        let t = pattern(off, 4096);
        assert!(t
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern_at(off + i as u64)));
        let long = pattern(7, PATTERN_RUN + 1);
        assert_eq!(&long[..4096], &pattern(7, 4096)[..]);
    }
}
