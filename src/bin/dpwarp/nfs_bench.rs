//! `dpwarp nfs-bench`: a storage load against an NFSv3/RDMA server (dpwarp's `nfs-server`, or
//! Linux knfsd, or any other), over N RPC-over-RDMA connections at once, like a client mounted
//! with `nconnect=N` (each connection its own thread and QP, `--credits` calls in flight on
//! each). The operations are drawn from a weighted mix (`--mix read=8,write=1,getattr=1`,
//! `lookup`) on one file the bench creates and fills with a known pattern first; every reply is
//! checked (NFS3_OK; READ data against the pattern, GETATTR's file id, LOOKUP's handle).
//!
//! Without `--server` it starts dpwarp's NFS target in this process on a temporary export over
//! kernel TCP on loopback (root needed), so one command measures. Prints one JSON object
//! (docs/nfs.md "nfs-bench" lists its keys).

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

use crate::cli::{NetArgs, TransportArg, Verbosity};
use crate::nfs_probe::{client_net, connect, mnt, mount_port};

/// The file the bench works on, in the export's root.
const FILE: &str = "nfs-bench.dat";

#[derive(Parser, Debug)]
pub struct Args {
    /// The NFS server's address (default: an in-process dpwarp NFS target on loopback over
    /// kernel TCP, on a temporary export).
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
    /// RPC-over-RDMA connections, each on a thread of its own (Linux `nconnect`).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Calls in flight per connection (the server's credit grant may allow fewer).
    #[arg(long, default_value_t = 16)]
    pub credits: u32,
    /// The operation mix: `op=weight,...` of read, write, getattr, lookup.
    #[arg(long, default_value = "read=1")]
    pub mix: String,
    /// Octets per READ and WRITE (at most the server's rtmax / wtmax).
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

/// `read=8,write=1`: each op with its weight (at least one positive).
fn parse_mix(s: &str) -> Result<Vec<(Op, u32)>, String> {
    let mut mix = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (op, w) = part.split_once('=').unwrap_or((part, "1"));
        let op = match op.trim() {
            "read" => Op::Read,
            "write" => Op::Write,
            "getattr" => Op::Getattr,
            "lookup" => Op::Lookup,
            o => {
                return Err(format!(
                    "--mix: unknown operation {o:?} (read, write, getattr, lookup)"
                ))
            }
        };
        let w: u32 = w
            .trim()
            .parse()
            .map_err(|_| format!("--mix: weight {w:?} of {}", op.name()))?;
        if w > 0 {
            mix.push((op, w));
        }
    }
    if mix.is_empty() {
        return Err("--mix: no operation with a positive weight".into());
    }
    Ok(mix)
}

/// The pattern octet at file offset `off`: any READ can be checked against it wherever it
/// lands, and WRITEs write it again (so reads stay checkable).
fn pattern_at(off: u64) -> u8 {
    (off.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (off as u8)
}

fn pattern(off: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_at(off + i)).collect()
}

/// Where the NFS server is: its RDMA address, MOUNT's TCP address; `_keep` holds an
/// in-process target and its export directory.
struct Target {
    nfs: SocketAddr,
    mount: SocketAddr,
    export: String,
    _keep: Option<InProcess>,
}

struct InProcess {
    handle: Option<dpwarp::rpc::server::ServerHandle>,
    target: Option<dpwarp::nfs::target::NfsTarget>,
    dir: PathBuf,
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

fn find_target(a: &Args) -> Result<Target, String> {
    let Some(server) = a.server else {
        if a.net.transport != TransportArg::Kernel {
            return Err(
                "nfs-bench without --server runs an in-process target over kernel TCP: pass \
                 --transport kernel, or --server ADDR (an nfs-server on a DPDK port) with \
                 --config"
                    .into(),
            );
        }
        use dpwarp::nfs::exports::ClientList;
        use dpwarp::nfs::target::{NfsTarget, TargetConfig};
        let dir = std::env::temp_dir().join(format!("dpwarp-nfs-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let target = NfsTarget::start(TargetConfig {
            clients: ClientList::parse(&["127.0.0.1(rw,no_root_squash,insecure)"])?,
            mount_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            rpcbind_listen: None,
            ..TargetConfig::new(&dir)
        })?;
        let handle = target
            .listen(&Net::kernel(), SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(|e| format!("listen: {e}"))?;
        return Ok(Target {
            nfs: handle.addr,
            mount: target.mount.addr,
            export: dir.to_string_lossy().into_owned(),
            _keep: Some(InProcess {
                handle: Some(handle),
                target: Some(target),
                dir,
            }),
        });
    };
    let mountaddr = a.mountaddr.unwrap_or(server);
    let mount_port = match a.mount_port {
        Some(p) => p,
        None => mount_port(SocketAddr::new(mountaddr, a.rpcbind_port))?,
    };
    Ok(Target {
        nfs: SocketAddr::new(server, a.port),
        mount: SocketAddr::new(mountaddr, mount_port),
        export: a.export.clone(),
        _keep: None,
    })
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
    b.put_bulk(pattern(off, n as usize));
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

/// The fixed facts every connection's load checks against.
struct Work {
    root: Vec<u8>,
    fh: Vec<u8>,
    fileid: u64,
    size: u32,
    slots: u64,
    mix: Vec<(Op, u32)>,
    credits: usize,
}

/// One connection's load: `credits` calls in flight until `stop`, each drawn from the mix.
fn conn_load(c: &mut RdmaClient, w: &Work, seed: u64, stop: &AtomicBool) -> ConnResult {
    let mut res = ConnResult::default();
    let total: u32 = w.mix.iter().map(|(_, k)| k).sum();
    let mut rng = seed | 1;
    let mut next = || {
        // xorshift64: the mix and offsets, cheap and repeatable per connection.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut sent: std::collections::HashMap<u32, (Instant, Op, u64)> = Default::default();
    let read_opts = CallOpts {
        write_chunks: vec![w.size as usize],
        ..CallOpts::default()
    };
    let plain = CallOpts::default();
    loop {
        while sent.len() < w.credits && !stop.load(Ordering::Relaxed) {
            let r = next();
            let mut pick = (r % u64::from(total)) as u32;
            let op = w
                .mix
                .iter()
                .find(|(_, k)| {
                    if pick < *k {
                        true
                    } else {
                        pick -= k;
                        false
                    }
                })
                .map(|(o, _)| *o)
                .unwrap_or(Op::Read);
            let off = (next() % w.slots) * u64::from(w.size);
            let (args, opts) = match op {
                Op::Read => {
                    let mut b = Body::new();
                    b.xdr().put_opaque(&w.fh);
                    b.xdr().put_u64(off);
                    b.xdr().put_u32(w.size);
                    (b, &read_opts)
                }
                Op::Write => (write_args(&w.fh, off, w.size, 0), &plain),
                Op::Getattr => {
                    let mut b = Body::new();
                    b.xdr().put_opaque(&w.fh);
                    (b, &plain)
                }
                Op::Lookup => {
                    let mut b = Body::new();
                    b.xdr().put_opaque(&w.root);
                    b.xdr().put_opaque(FILE.as_bytes());
                    (b, &plain)
                }
            };
            let proc_ = match op {
                Op::Read => proc3::READ,
                Op::Write => proc3::WRITE,
                Op::Getattr => proc3::GETATTR,
                Op::Lookup => proc3::LOOKUP,
            };
            match c.submit(NFS_PROG, NFS_V3, proc_, args, opts) {
                Ok(xid) => {
                    sent.insert(xid, (Instant::now(), op, off));
                }
                Err(e) => {
                    res.error = Some(format!("{}: {e}", op.name()));
                    return res;
                }
            }
        }
        if sent.is_empty() {
            break;
        }
        let (xid, rep) = match c.wait_any() {
            Ok(x) => x,
            Err(e) => {
                res.error = Some(format!("wait: {e}"));
                return res;
            }
        };
        let Some((t0, op, off)) = sent.remove(&xid) else {
            res.error = Some(format!("a reply to no call (xid {xid:#x})"));
            return res;
        };
        res.lat.record_ns(t0.elapsed().as_nanos() as u64);
        let checked = rep
            .map_err(|e| format!("{}: {e}", op.name()))
            .and_then(|rep| check(&rep, op, off, w));
        match checked {
            Ok(octets) => {
                res.octets += octets;
                res.ops[op as usize] += 1;
            }
            Err(e) => {
                res.error = Some(e);
                return res;
            }
        }
    }
    res.max_in_flight = c.stats.max_in_flight;
    res
}

/// Check one reply: NFS3_OK and what it must say. The octets of data it moved.
fn check(rep: &dpwarp::rpc::client::Reply, op: Op, off: u64, w: &Work) -> Result<u64, String> {
    let mut r = call_ok(rep, op.name())?;
    let e = |e: dpwarp::wire::Error| e.to_string();
    match op {
        Op::Read => {
            parse_post_op_attr(&mut r.xdr).map_err(e)?;
            let count = r.xdr.get_u32().map_err(e)?;
            let _eof = r.xdr.get_bool().map_err(e)?;
            let data = r.get_bulk(w.size as usize).map_err(e)?;
            if count != w.size || data.len() != w.size as usize {
                return Err(format!("READ at {off}: {count} octets, {} asked", w.size));
            }
            if data[..] != pattern(off, data.len())[..] {
                return Err(format!("READ at {off}: the data is not what was written"));
            }
            Ok(u64::from(count))
        }
        Op::Write => {
            Wcc::parse(&mut r.xdr).map_err(e)?;
            let count = r.xdr.get_u32().map_err(e)?;
            if count != w.size {
                return Err(format!("WRITE at {off}: {count} of {} octets", w.size));
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
    let target = find_target(&a)?;
    let (root, flavors) = mnt(target.mount, &target.export)?;
    // AUTH_SYS's flavor number (RFC 5531 App. A).
    let auth_sys = flavors.contains(&1);
    let (_dp, net) = client_net(&a.net)?;
    // The first connection: FSINFO for the transfer sizes, then the file.
    let mut first = connect(&net, target.nfs, a.crc, auth_sys)?;
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
    if a.file_size < u64::from(size) {
        return Err(format!(
            "--file-size {} is less than one --size {size}",
            a.file_size
        ));
    }
    let (fh, fileid) = prepare(&mut first, &root, &a, wtmax)?;
    let work = Arc::new(Work {
        root,
        fh,
        fileid,
        size,
        slots: a.file_size / u64::from(size),
        mix: mix.clone(),
        credits: a.credits.max(1) as usize,
    });
    let mut clients = vec![first];
    for _ in 1..a.connections {
        clients.push(connect(&net, target.nfs, a.crc, auth_sys)?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(a.connections + 1));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let (work, stop, go) = (work.clone(), stop.clone(), go.clone());
            thread::Builder::new()
                .name(format!("nfs-bench-{i}"))
                .spawn(move || {
                    go.wait();
                    let r = conn_load(&mut c, &work, 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1), &stop);
                    c.disconnect();
                    r
                })
                .expect("spawn a connection's thread")
        })
        .collect();
    go.wait();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(a.seconds.max(0.01));
    crate::cli::progress_phase(format!("nfs-bench: {} connections", a.connections));
    let total_ms = (a.seconds.max(0.01) * 1000.0) as u64;
    while Instant::now() < end {
        thread::sleep(
            Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())),
        );
        crate::cli::progress_tick(t0.elapsed().as_millis() as u64 / 100, total_ms / 100);
    }
    let placement = thread_placement();
    stop.store(true, Ordering::Relaxed);
    let results: Vec<ConnResult> = threads
        .into_iter()
        .map(|t| t.join().unwrap_or_default())
        .collect();
    let secs = t0.elapsed().as_secs_f64();
    crate::cli::progress_clear();
    let errors: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.error.as_ref().map(|e| format!("connection {i}: {e}")))
        .collect();
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
        "credits": a.credits,
        "mix": mix.iter().map(|(o, w)| format!("{}={w}", o.name())).collect::<Vec<_>>().join(","),
        "size": size,
        "file_size": a.file_size,
        "seconds": secs,
        "ops": total,
        "ops_per_s": total as f64 / secs,
        "gbps": octets as f64 * 8.0 / secs / 1e9,
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
    fn mix_parses_weights_and_refuses_nonsense() {
        assert_eq!(parse_mix("read").unwrap(), vec![(Op::Read, 1)]);
        assert_eq!(
            parse_mix("read=8,write=1,getattr=0").unwrap(),
            vec![(Op::Read, 8), (Op::Write, 1)]
        );
        assert!(parse_mix("read=0").is_err());
        assert!(parse_mix("fsync=1").is_err());
        assert!(parse_mix("read=x").is_err());
    }

    #[test]
    fn the_pattern_is_a_function_of_the_offset() {
        assert_eq!(pattern(4096, 16), pattern(0, 4112)[4096..].to_vec());
        assert_ne!(pattern(0, 64), pattern(1, 64));
    }
}
