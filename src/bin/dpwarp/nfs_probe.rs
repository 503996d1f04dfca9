//! `dpwarp nfs-probe`: dpwarp's RPC-over-RDMA client against an NFSv3 server that someone else
//! wrote (e.g. the Linux kernel's knfsd over siw): rpcbind GETPORT for MOUNT v3 over TCP (RFC
//! 1833), MNT of the export (RFC 1813 Appendix I) for the root file handle, then over RDMA
//! (port 20049, RFC 8267 §6.3 / the Linux default) NFS NULL, FSINFO and GETATTR on that handle
//! (RFC 1813 §3.3.19, §3.3.1). The MPA Request carries RFC 8797 connection private data as
//! the Linux client's does, and no CONFIG_RDMA is sent (RFC 8166 peers do not know it).
//! With `--read NAME` it then READs that file as a load (READs/s, Gbit/s, latency), with
//! `--getattr NAME` GETATTRs it (`--lookup NAME`: LOOKUPs its name) as a load (calls/s,
//! latency), against dpwarp's `nfs-server`
//! or any other NFS/RDMA server. Prints one JSON object.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use clap::Parser;
use dpwarp::cm::{ConnParam, Net};
use dpwarp::nfs::mount::{mproc, pproc};
use dpwarp::nfs::xdr::{parse_post_op_attr, Fattr3};
use dpwarp::nfs::{proc_ as proc3, MOUNT_PROG, MOUNT_V3, NFS_PROG, NFS_V3, PMAP_PROG, PMAP_V2};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient, ReplyReader};
use dpwarp::rpc::program::Body;
use dpwarp::rpc::tcp::TcpClient;
use dpwarp::wire::oncrpc::{Auth, AuthSys};
use dpwarp::wire::rpcrdma_cpd::CpdRepr;

use crate::cli::{NetArgs, Verbosity};
use crate::net::{backend, start_dpdk, Backend};
#[cfg(not(feature = "dpdk"))]
use crate::nodpdk::Dataplane;
#[cfg(feature = "dpdk")]
use dpwarp::dataplane::Dataplane;

/// IPPROTO_TCP in rpcbind's `prot` field (RFC 1833 §3.1).
const IPPROTO_TCP: u32 = 6;

/// AUTH_SYS's flavor number (RFC 5531 App. A).
const AUTH_SYS: u32 = 1;

#[derive(Parser, Debug)]
pub struct Args {
    /// The NFS server's address.
    #[arg(long)]
    pub server: IpAddr,
    /// The export to mount (its path on the server).
    #[arg(long, default_value = "/export")]
    pub export: String,
    /// The server's NFS/RDMA port.
    #[arg(long, default_value_t = dpwarp::nfs::NFS_RDMA_PORT)]
    pub port: u16,
    /// The server's rpcbind port (TCP).
    #[arg(long, default_value_t = 111)]
    pub rpcbind_port: u16,
    /// Where rpcbind and MOUNT are, when not at --server (the Linux mount option of that
    /// name): e.g. an NFS server on a DPDK port whose MOUNT is on the kernel stack.
    #[arg(long)]
    pub mountaddr: Option<IpAddr>,
    /// Ask for MPA CRC32c (the Linux NFS/RDMA client does not).
    #[arg(long)]
    pub crc: bool,
    /// Then READ this file of the export's root (LOOKUP by name) for --seconds, --credits
    /// READs of --size octets in flight, each into a write chunk, from offset 0 through the
    /// file and around again: READs/s, Gbit/s (octets that arrived) and the READ's latency.
    #[arg(long, value_name = "NAME")]
    pub read: Option<String>,
    /// Then GETATTR this file of the export's root (LOOKUP by name) for --seconds, --credits
    /// calls in flight: GETATTRs/s and their latency (the metadata calls a client makes
    /// before it opens and reads a file).
    #[arg(long, value_name = "NAME", conflicts_with = "read")]
    pub getattr: Option<String>,
    /// Then LOOKUP this name in the export's root for --seconds, --credits calls in flight:
    /// LOOKUPs/s and their latency (what a client does for each path component it has not
    /// cached).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["read", "getattr"])]
    pub lookup: Option<String>,
    /// Octets per READ (--read), at most the server's rtmax.
    #[arg(long, default_value_t = 1 << 20)]
    pub size: u32,
    /// Calls in flight (--read, --getattr, --lookup; the server's credit grant may allow
    /// fewer).
    #[arg(long, default_value_t = 32)]
    pub credits: u32,
    /// Seconds of the load (--read, --getattr, --lookup).
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Transport of the RDMA side (MOUNT and rpcbind always go over kernel TCP).
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub verbosity: Verbosity,
}

pub(crate) fn tcp_call(
    addr: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &Body,
) -> Result<Vec<u8>, String> {
    let mut c = TcpClient::connect(addr, 1).map_err(|e| format!("connect {addr}: {e}"))?;
    let r = c
        .call(prog, vers, proc_, args)
        .map_err(|e| format!("{addr}: program {prog} v{vers} proc {proc_}: {e}"))?;
    let mut rr = r
        .results()
        .map_err(|s| format!("{addr}: program {prog} v{vers} proc {proc_}: {s:?}"))?;
    Ok(rr.xdr.get_fixed(rr.xdr.remaining()).unwrap_or(&[]).to_vec())
}

/// The client's side of RPC-over-RDMA as `--transport` says: kernel TCP, or port
/// `--port-index` of a DPDK dataplane started here (kept running while the returned handle
/// lives), its link up within 10 s.
pub(crate) fn client_net(n: &NetArgs) -> Result<(Option<Dataplane>, Net), String> {
    match backend(n)? {
        Backend::Dpdk(config) => {
            let (dp, ep) = start_dpdk(&config, n.port_index)?;
            if !dp.wait_link_up(Duration::from_secs(10)) {
                return Err("DPDK port: link did not come up".into());
            }
            Ok((Some(dp), Net::from(ep)))
        }
        Backend::Kernel => Ok((None, Net::kernel())),
    }
}

/// rpcbind GETPORT (RFC 1833 §3.1) at `pmap`: MOUNT v3's TCP port.
pub(crate) fn mount_port(pmap: SocketAddr) -> Result<u16, String> {
    let mut b = Body::new();
    for v in [MOUNT_PROG, MOUNT_V3, IPPROTO_TCP, 0] {
        b.xdr().put_u32(v);
    }
    let res = tcp_call(pmap, PMAP_PROG, PMAP_V2, pproc::GETPORT, &b)?;
    let mut x = dpwarp::wire::xdr::XdrReader::new(&res);
    let port = x.get_u32().map_err(|e| e.to_string())?;
    if port == 0 || port > 65535 {
        return Err(format!("rpcbind at {pmap}: MOUNT v3/TCP not registered"));
    }
    Ok(port as u16)
}

/// MOUNT MNT of `export` at `mount` (RFC 1813 Appendix I): the root handle and the auth
/// flavors the export offers.
pub(crate) fn mnt(mount: SocketAddr, export: &str) -> Result<(Vec<u8>, Vec<u32>), String> {
    let mut b = Body::new();
    b.xdr().put_opaque(export.as_bytes());
    let res = tcp_call(mount, MOUNT_PROG, MOUNT_V3, mproc::MNT, &b)?;
    let mut x = dpwarp::wire::xdr::XdrReader::new(&res);
    let st = x.get_u32().map_err(|e| e.to_string())?;
    if st != 0 {
        return Err(format!("MNT {export}: mountstat3 {st}"));
    }
    let fh = x.get_opaque(64).map_err(|e| e.to_string())?.to_vec();
    let n = x.get_u32().map_err(|e| e.to_string())?.min(16);
    let flavors: Vec<u32> = (0..n).filter_map(|_| x.get_u32().ok()).collect();
    Ok((fh, flavors))
}

/// An RPC-over-RDMA connection to the NFS server at `addr` as the Linux client makes it: RFC
/// 8797 private data in the MPA Request, no CONFIG_RDMA (RFC 8166 peers do not know it), and
/// with `auth_sys` (the export offers it, RFC 1813 App. I) AUTH_SYS as the caller: knfsd
/// answers LOOKUP and READ by AUTH_NONE with NFS3ERR_ACCES.
pub(crate) fn connect(
    net: &Net,
    addr: SocketAddr,
    crc: bool,
    auth_sys: bool,
    credits: u32,
) -> Result<RdmaClient, String> {
    let cpd = CpdRepr {
        remote_invalidate: false,
        send_size: 4096,
        recv_size: 4096,
    };
    let cfg = ClientConfig {
        configure: false,
        conn: ConnParam {
            private_data: cpd.emit().to_vec(),
            crc,
            ..ConnParam::default()
        },
        credits: credits.max(1),
        ..ClientConfig::default()
    };
    let mut c = RdmaClient::connect(net, addr, cfg).map_err(|e| format!("connect {addr}: {e}"))?;
    if auth_sys {
        c.cred = Auth::Sys(AuthSys {
            stamp: std::process::id(),
            machinename: rustix::system::uname()
                .nodename()
                .to_bytes()
                .iter()
                .take(dpwarp::wire::oncrpc::MAX_MACHINE_NAME)
                .copied()
                .collect(),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            gids: Default::default(),
        });
    }
    Ok(c)
}

pub fn run(a: Args) -> Result<(), String> {
    // rpcbind: where is MOUNT v3 over TCP? Then MNT for the root handle.
    let mountaddr = a.mountaddr.unwrap_or(a.server);
    let mount_port = mount_port(SocketAddr::new(mountaddr, a.rpcbind_port))?;
    let (fh, flavors) = mnt(SocketAddr::new(mountaddr, mount_port), &a.export)?;

    // RPC-over-RDMA to the NFS port.
    let (_dp, net) = client_net(&a.net)?;
    let addr = SocketAddr::new(a.server, a.port);
    let mut c = connect(&net, addr, a.crc, flavors.contains(&AUTH_SYS), a.credits)?;
    let server_cpd = CpdRepr::find(&c.server_private_data);
    // A siw responder leaves an FPDU that arrives right after its MPA Reply unprocessed until
    // more data comes (docs/interop.md, siw defect 2): a NULL sent at once then goes
    // unanswered. The Linux client's first call comes tens of milliseconds after the Reply;
    // wait as dpwarp's rping client does.
    std::thread::sleep(Duration::from_millis(100));
    let opts = CallOpts::default();
    c.call(NFS_PROG, NFS_V3, proc3::NULL, Body::new(), &opts)
        .map_err(|e| format!("NFS NULL: {e}"))?
        .results()
        .map_err(|s| format!("NFS NULL: {s:?}"))?;
    let fh_args = || {
        let mut b = Body::new();
        b.xdr().put_opaque(&fh);
        b
    };
    // FSINFO3res (RFC 1813 §3.3.19).
    let rep = c
        .call(NFS_PROG, NFS_V3, proc3::FSINFO, fh_args(), &opts)
        .map_err(|e| format!("FSINFO: {e}"))?;
    let mut r = rep.results().map_err(|s| format!("FSINFO: {s:?}"))?;
    let x = &mut r.xdr;
    let st = x.get_u32().map_err(|e| e.to_string())?;
    if st != 0 {
        return Err(format!("FSINFO: nfsstat3 {st}"));
    }
    let root_attr = parse_post_op_attr(x).map_err(|e| e.to_string())?;
    let mut f = [0u32; 7];
    for v in f.iter_mut() {
        *v = x.get_u32().map_err(|e| e.to_string())?;
    }
    let maxfilesize = x.get_u64().map_err(|e| e.to_string())?;
    // GETATTR3res.
    let rep = c
        .call(NFS_PROG, NFS_V3, proc3::GETATTR, fh_args(), &opts)
        .map_err(|e| format!("GETATTR: {e}"))?;
    let mut r = rep.results().map_err(|s| format!("GETATTR: {s:?}"))?;
    let st = r.xdr.get_u32().map_err(|e| e.to_string())?;
    if st != 0 {
        return Err(format!("GETATTR: nfsstat3 {st}"));
    }
    let attr = Fattr3::parse(&mut r.xdr).map_err(|e| e.to_string())?;
    let read = match &a.read {
        Some(name) => Some(read_load(&mut c, &fh, name, &a, f[0])?),
        None => None,
    };
    let getattr_load = match &a.getattr {
        Some(name) => Some(meta_load(&mut c, &fh, name, &a, Meta::Getattr)?),
        None => None,
    };
    let lookup_load = match &a.lookup {
        Some(name) => Some(meta_load(&mut c, &fh, name, &a, Meta::Lookup)?),
        None => None,
    };
    c.disconnect();
    let mut out = serde_json::json!({
        "server": a.server.to_string(),
        "export": a.export,
        "transport": net.name(),
        "mount_port": mount_port,
        "auth_flavors": flavors,
        "root_fh_len": fh.len(),
        "server_rfc8797": server_cpd.map(|c| serde_json::json!({
            "remote_invalidate": c.remote_invalidate,
            "send_size": c.send_size,
            "recv_size": c.recv_size,
        })),
        "null": "ok",
        "fsinfo": {
            "rtmax": f[0], "rtpref": f[1], "rtmult": f[2],
            "wtmax": f[3], "wtpref": f[4], "wtmult": f[5],
            "dtpref": f[6], "maxfilesize": maxfilesize,
            "root_attr": root_attr.is_some(),
        },
        "getattr": {"type": attr.ftype, "mode": attr.mode, "nlink": attr.nlink},
    });
    if let Some(r) = read {
        out["read"] = r;
    }
    if let Some(g) = getattr_load {
        out["getattr_load"] = g;
    }
    if let Some(l) = lookup_load {
        out["lookup_load"] = l;
    }
    println!("{out}");
    Ok(())
}

/// LOOKUP `name` in the directory `dir`: its handle and attributes.
fn lookup(c: &mut RdmaClient, dir: &[u8], name: &str) -> Result<(Vec<u8>, Fattr3), String> {
    let mut b = Body::new();
    b.xdr().put_opaque(dir);
    b.xdr().put_opaque(name.as_bytes());
    let rep = c
        .call(NFS_PROG, NFS_V3, proc3::LOOKUP, b, &CallOpts::default())
        .map_err(|e| format!("LOOKUP {name}: {e}"))?;
    let mut r = rep.results().map_err(|s| format!("LOOKUP {name}: {s:?}"))?;
    let st = r.xdr.get_u32().map_err(|e| e.to_string())?;
    if st != 0 {
        return Err(format!("LOOKUP {name}: nfsstat3 {st}"));
    }
    let fh = r.xdr.get_opaque(64).map_err(|e| e.to_string())?.to_vec();
    let attr = parse_post_op_attr(&mut r.xdr)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("LOOKUP {name}: no attributes"))?;
    Ok((fh, attr))
}

/// What a load of pipelined calls did ([`run_load`]).
struct Load {
    calls: u64,
    /// Octets of bulk data that arrived (READ).
    octets: u64,
    seconds: f64,
    lat: dpwarp::latency::Recorder,
}

/// Keep `a.credits` calls of procedure `proc_` in flight for `a.seconds`, each with the
/// arguments `args` makes for it, and check every reply with `check` (its results after
/// NFS3_OK; it returns the octets of data the reply carried).
fn run_load(
    c: &mut RdmaClient,
    a: &Args,
    proc_: u32,
    what: &str,
    opts: &CallOpts,
    mut args: impl FnMut() -> Body,
    mut check: impl FnMut(&mut ReplyReader<'_>) -> Result<u64, String>,
) -> Result<Load, String> {
    let mut sent = std::collections::HashMap::new();
    let mut lat = dpwarp::latency::Recorder::new();
    let (mut calls, mut octets) = (0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.seconds.max(0.01));
    loop {
        while sent.len() < a.credits.max(1) as usize && Instant::now() < end {
            let xid = c
                .submit(NFS_PROG, NFS_V3, proc_, args(), opts)
                .map_err(|e| format!("{what}: {e}"))?;
            sent.insert(xid, Instant::now());
        }
        if sent.is_empty() {
            break;
        }
        let (xid, rep) = c.wait_any().map_err(|e| format!("{what}: {e}"))?;
        let t0 = sent.remove(&xid).ok_or("a reply to no call")?;
        lat.record_ns(t0.elapsed().as_nanos() as u64);
        let rep = rep.map_err(|e| format!("{what}: {e}"))?;
        let mut r = rep.results().map_err(|s| format!("{what}: {s:?}"))?;
        let st = r.xdr.get_u32().map_err(|e| e.to_string())?;
        if st != 0 {
            return Err(format!("{what}: nfsstat3 {st}"));
        }
        octets += check(&mut r)?;
        calls += 1;
    }
    Ok(Load {
        calls,
        octets,
        seconds: start.elapsed().as_secs_f64(),
        lat,
    })
}

/// The metadata call of a load: GETATTR of the file, or LOOKUP of its name.
#[derive(Clone, Copy, PartialEq)]
enum Meta {
    Getattr,
    Lookup,
}

/// `--getattr NAME` / `--lookup NAME`: LOOKUP `name` in the root `dir`, then GETATTRs of it
/// (or LOOKUPs of the name) with `a.credits` in flight for `a.seconds`. Every reply is checked:
/// NFS3_OK and the file's inode number (GETATTR) or handle (LOOKUP).
fn meta_load(
    c: &mut RdmaClient,
    dir: &[u8],
    name: &str,
    a: &Args,
    op: Meta,
) -> Result<serde_json::Value, String> {
    let (fh, attr) = lookup(c, dir, name)?;
    let (proc_, what) = match op {
        Meta::Getattr => (proc3::GETATTR, "GETATTR"),
        Meta::Lookup => (proc3::LOOKUP, "LOOKUP"),
    };
    let args = || {
        let mut b = Body::new();
        match op {
            Meta::Getattr => b.xdr().put_opaque(&fh),
            Meta::Lookup => {
                b.xdr().put_opaque(dir);
                b.xdr().put_opaque(name.as_bytes());
            }
        }
        b
    };
    let check = |r: &mut ReplyReader<'_>| {
        match op {
            Meta::Getattr => {
                let got = Fattr3::parse(&mut r.xdr).map_err(|e| e.to_string())?;
                if got.fileid != attr.fileid {
                    return Err(format!(
                        "GETATTR: fileid {} for {}",
                        got.fileid, attr.fileid
                    ));
                }
            }
            Meta::Lookup => {
                let got = r.xdr.get_opaque(64).map_err(|e| e.to_string())?;
                if got != &fh[..] {
                    return Err("LOOKUP: another handle than the first LOOKUP's".into());
                }
            }
        }
        Ok(0)
    };
    let l = run_load(c, a, proc_, what, &CallOpts::default(), args, check)?;
    Ok(serde_json::json!({
        "file": name,
        "credits": a.credits,
        "max_in_flight": c.stats.max_in_flight,
        "calls": l.calls,
        "seconds": l.seconds,
        "calls_per_s": l.calls as f64 / l.seconds,
        "p50_us": l.lat.quantile_us(0.5),
        "p99_us": l.lat.quantile_us(0.99),
    }))
}

/// `--read NAME`: LOOKUP `name` in the root `dir`, then READs of `a.size` octets (at most
/// `rtmax`) with `a.credits` in flight for `a.seconds`, sequentially through the file and around
/// again, each into a write chunk (RFC 8267 §4.1: READ data is DDP-eligible). Every reply is
/// checked: NFS3_OK and the count the offset asks for.
fn read_load(
    c: &mut RdmaClient,
    dir: &[u8],
    name: &str,
    a: &Args,
    rtmax: u32,
) -> Result<serde_json::Value, String> {
    let (fh, attr) = lookup(c, dir, name)?;
    let file_size = attr.size;
    let size = a.size.min(rtmax.max(1)).max(1);
    if file_size < u64::from(size) {
        return Err(format!(
            "--read {name}: the file has {file_size} octets, fewer than one READ of {size}"
        ));
    }
    // Whole READs only: the last offset that still has `size` octets before the end.
    let slots = file_size / u64::from(size);
    let opts = CallOpts {
        write_chunks: vec![size as usize],
        ..CallOpts::default()
    };
    let mut next = 0u64;
    let args = || {
        let off = (next % slots) * u64::from(size);
        next += 1;
        let mut b = Body::new();
        b.xdr().put_opaque(&fh);
        b.xdr().put_u64(off);
        b.xdr().put_u32(size);
        b
    };
    let check = |r: &mut ReplyReader<'_>| {
        parse_post_op_attr(&mut r.xdr).map_err(|e| e.to_string())?;
        let count = r.xdr.get_u32().map_err(|e| e.to_string())?;
        let _eof = r.xdr.get_bool().map_err(|e| e.to_string())?;
        let data = r.get_bulk(size as usize).map_err(|e| e.to_string())?;
        if count != size || data.len() != size as usize {
            return Err(format!(
                "READ: {count} octets (data {}), {size} asked",
                data.len()
            ));
        }
        Ok(u64::from(count))
    };
    let l = run_load(c, a, proc3::READ, "READ", &opts, args, check)?;
    Ok(serde_json::json!({
        "file": name,
        "file_size": file_size,
        "size": size,
        "credits": a.credits,
        "max_in_flight": c.stats.max_in_flight,
        "reads": l.calls,
        "seconds": l.seconds,
        "reads_per_s": l.calls as f64 / l.seconds,
        "gbps": l.octets as f64 * 8.0 / l.seconds / 1e9,
        "p50_us": l.lat.quantile_us(0.5),
        "p99_us": l.lat.quantile_us(0.99),
    }))
}
