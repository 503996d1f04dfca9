//! `dpwarp nfs-probe`: dpwarp's RPC-over-RDMA client against an NFSv3 server that someone else
//! wrote (e.g. the Linux kernel's knfsd over siw): rpcbind GETPORT for MOUNT v3 over TCP (RFC
//! 1833), MNT of the export (RFC 1813 Appendix I) for the root file handle, then over RDMA
//! (port 20049, RFC 8267 §6.3 / the Linux default) NFS NULL, FSINFO and GETATTR on that handle
//! (RFC 1813 §3.3.19, §3.3.1). The MPA Request carries RFC 8797 connection private data as
//! the Linux client's does, and no CONFIG_RDMA is sent (RFC 8166 peers do not know it).
//! Prints one JSON object.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::Parser;
use dpwarp::cm::{ConnParam, Net};
use dpwarp::nfs::mount::{mproc, pproc};
use dpwarp::nfs::xdr::{parse_post_op_attr, Fattr3};
use dpwarp::nfs::{proc_ as proc3, MOUNT_PROG, MOUNT_V3, NFS_PROG, NFS_V3, PMAP_PROG, PMAP_V2};
use dpwarp::rpc::client::{CallOpts, ClientConfig, RdmaClient};
use dpwarp::rpc::program::Body;
use dpwarp::rpc::tcp::TcpClient;
use dpwarp::wire::rpcrdma_cpd::CpdRepr;

use crate::cli::{NetArgs, Verbosity};
use crate::net::{backend, start_dpdk, Backend};

/// IPPROTO_TCP in rpcbind's `prot` field (RFC 1833 §3.1).
const IPPROTO_TCP: u32 = 6;

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
    /// Ask for MPA CRC32c (the Linux NFS/RDMA client does not).
    #[arg(long)]
    pub crc: bool,
    /// Transport of the RDMA side (MOUNT and rpcbind always go over kernel TCP).
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub verbosity: Verbosity,
}

fn tcp_call(
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

pub fn run(a: Args) -> Result<(), String> {
    // rpcbind: where is MOUNT v3 over TCP?
    let pmap = SocketAddr::new(a.server, a.rpcbind_port);
    let mut b = Body::new();
    for v in [MOUNT_PROG, MOUNT_V3, IPPROTO_TCP, 0] {
        b.xdr().put_u32(v);
    }
    let res = tcp_call(pmap, PMAP_PROG, PMAP_V2, pproc::GETPORT, &b)?;
    let mut x = dpwarp::wire::xdr::XdrReader::new(&res);
    let mount_port = x.get_u32().map_err(|e| e.to_string())?;
    if mount_port == 0 || mount_port > 65535 {
        return Err(format!("rpcbind at {pmap}: MOUNT v3/TCP not registered"));
    }
    // MOUNT: MNT for the root handle.
    let mut b = Body::new();
    b.xdr().put_opaque(a.export.as_bytes());
    let res = tcp_call(
        SocketAddr::new(a.server, mount_port as u16),
        MOUNT_PROG,
        MOUNT_V3,
        mproc::MNT,
        &b,
    )?;
    let mut x = dpwarp::wire::xdr::XdrReader::new(&res);
    let st = x.get_u32().map_err(|e| e.to_string())?;
    if st != 0 {
        return Err(format!("MNT {}: mountstat3 {st}", a.export));
    }
    let fh = x.get_opaque(64).map_err(|e| e.to_string())?.to_vec();
    let n = x.get_u32().map_err(|e| e.to_string())?.min(16);
    let flavors: Vec<u32> = (0..n).filter_map(|_| x.get_u32().ok()).collect();

    // RPC-over-RDMA to the NFS port.
    let (_dp, net) = match backend(&a.net)? {
        Backend::Dpdk(config) => {
            let (dp, ep) = start_dpdk(&config, a.net.port_index)?;
            if !dp.wait_link_up(Duration::from_secs(10)) {
                return Err("DPDK port: link did not come up".into());
            }
            (Some(dp), Net::from(ep))
        }
        Backend::Kernel => (None, Net::kernel()),
    };
    let cpd = CpdRepr {
        remote_invalidate: false,
        send_size: 4096,
        recv_size: 4096,
    };
    let cfg = ClientConfig {
        configure: false,
        conn: ConnParam {
            private_data: cpd.emit().to_vec(),
            crc: a.crc,
            ..ConnParam::default()
        },
        ..ClientConfig::default()
    };
    let addr = SocketAddr::new(a.server, a.port);
    let mut c = RdmaClient::connect(&net, addr, cfg).map_err(|e| format!("connect {addr}: {e}"))?;
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
    c.disconnect();
    let out = serde_json::json!({
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
    println!("{out}");
    Ok(())
}
