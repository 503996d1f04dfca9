//! MOUNT version 3 (RFC 1813 App. I) and the rpcbind version 2 port mapper (RFC 1833 §3), both
//! served over record-marked ONC RPC on kernel TCP ([`crate::rpc::tcp::serve`]).
//!
//! MOUNT answers MNT for the export's name with the root file handle and the flavors AUTH_SYS
//! and AUTH_NONE, to the clients the export's client list allows (MNT3ERR_ACCES otherwise,
//! [`super::exports`]); DUMP is an empty list (no mount list is kept), UMNT/UMNTALL do nothing,
//! EXPORT lists the one export with its client entries as groups. The port mapper answers GETPORT from a fixed table
//! (MOUNT v3 over TCP at the mount port); SET/UNSET are refused (false), DUMP lists the table.
//! Programs neither registry serves (NFSACL 100227, NLM 100021, ...) are PROG_UNAVAIL by the
//! RPC dispatcher.

use std::sync::Arc;

use super::export::Export;
use super::{MOUNT_PROG, MOUNT_V3, PMAP_PROG, PMAP_V2};
use crate::rpc::program::{garbage, Body, Registry};
use crate::wire::oncrpc::{AUTH_NONE, AUTH_SYS};

/// MOUNT procedures (RFC 1813 App. I §5.2).
#[allow(missing_docs)]
pub mod mproc {
    pub const NULL: u32 = 0;
    pub const MNT: u32 = 1;
    pub const DUMP: u32 = 2;
    pub const UMNT: u32 = 3;
    pub const UMNTALL: u32 = 4;
    pub const EXPORT: u32 = 5;
}

/// `mountstat3` MNT3_OK.
pub const MNT3_OK: u32 = 0;
/// `mountstat3` MNT3ERR_NOENT: no such export.
pub const MNT3ERR_NOENT: u32 = 2;
/// `mountstat3` MNT3ERR_ACCES: the client may not mount the export.
pub const MNT3ERR_ACCES: u32 = 13;
/// `mountstat3` MNT3ERR_SERVERFAULT.
pub const MNT3ERR_SERVERFAULT: u32 = 10006;
/// `MNTPATHLEN` (RFC 1813 App. I §5.1.1).
pub const MNTPATHLEN: usize = 1024;

/// Port mapper procedures (RFC 1833 §3.2).
#[allow(missing_docs)]
pub mod pproc {
    pub const NULL: u32 = 0;
    pub const SET: u32 = 1;
    pub const UNSET: u32 = 2;
    pub const GETPORT: u32 = 3;
    pub const DUMP: u32 = 4;
}

/// `IPPROTO_TCP` in a port-mapper mapping (RFC 1833 §3.1).
pub const IPPROTO_TCP: u32 = 6;
/// `IPPROTO_UDP`.
pub const IPPROTO_UDP: u32 = 17;

/// One port-mapper mapping (RFC 1833 §3.1 `mapping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// IPPROTO_TCP or IPPROTO_UDP.
    pub prot: u32,
    /// Port.
    pub port: u32,
}

/// Normalise an export name: no trailing slashes except the root itself.
fn norm(p: &[u8]) -> &[u8] {
    let mut p = p;
    while p.len() > 1 && p.ends_with(b"/") {
        p = &p[..p.len() - 1];
    }
    p
}

/// Register MOUNT v3 serving `export` under the name `name` (the path clients mount, e.g.
/// `/export`).
pub fn register_mount(reg: &mut Registry, export: Arc<Export>, name: &str) {
    let name: Arc<Vec<u8>> = Arc::new(norm(name.as_bytes()).to_vec());
    reg.register(MOUNT_PROG, MOUNT_V3, mproc::NULL, |_, _| Ok(Body::new()));
    let (e, n) = (export.clone(), name.clone());
    reg.register(MOUNT_PROG, MOUNT_V3, mproc::MNT, move |_, a| {
        let path = a.xdr.get_string(MNTPATHLEN).map_err(garbage)?;
        let mut b = Body::new();
        let shown = String::from_utf8_lossy(path);
        let who = a
            .peer
            .map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
        if norm(path) != n.as_slice() {
            log::info!("mountd: MNT {shown:?} from {who}: not exported");
            b.xdr().put_u32(MNT3ERR_NOENT);
            return Ok(b);
        }
        // The export's client list (exports(5)): a client it does not name, or one whose
        // entry is `secure` calling from a port of 1024 or above, may not mount.
        let refused = match e.clients().rule_for(a.peer) {
            None => Some("not among the export's clients".to_string()),
            Some(r) if r.options.secure && a.peer.is_some_and(|p| p.port() >= 1024) => {
                Some(format!(
                    "port {} is not reserved (its entry {:?} is `secure`; `insecure` allows it)",
                    a.peer.map_or(0, |p| p.port()),
                    r.text
                ))
            }
            Some(_) => None,
        };
        if let Some(why) = refused {
            log::warn!("mountd: MNT {shown:?} from {who} refused: {why}");
            b.xdr().put_u32(MNT3ERR_ACCES);
            return Ok(b);
        }
        match e.root_handle() {
            Ok(fh) => {
                b.xdr().put_u32(MNT3_OK);
                b.xdr().put_opaque(&fh);
                b.xdr().put_u32(2);
                b.xdr().put_u32(AUTH_SYS);
                b.xdr().put_u32(AUTH_NONE);
            }
            Err(_) => b.xdr().put_u32(MNT3ERR_SERVERFAULT),
        }
        Ok(b)
    });
    reg.register(MOUNT_PROG, MOUNT_V3, mproc::DUMP, |_, _| {
        let mut b = Body::new();
        b.xdr().put_bool(false);
        Ok(b)
    });
    reg.register(MOUNT_PROG, MOUNT_V3, mproc::UMNT, |_, a| {
        a.xdr.get_string(MNTPATHLEN).map_err(garbage)?;
        Ok(Body::new())
    });
    reg.register(MOUNT_PROG, MOUNT_V3, mproc::UMNTALL, |_, _| Ok(Body::new()));
    let n = name;
    let groups: Vec<String> = export
        .clients()
        .rules()
        .iter()
        .map(|r| r.text.split('(').next().unwrap_or("").trim().to_string())
        .collect();
    reg.register(MOUNT_PROG, MOUNT_V3, mproc::EXPORT, move |_, _| {
        // exportnode (RFC 1813 App. I §5.2.5): the export and its client entries as groups.
        let mut b = Body::new();
        b.xdr().put_bool(true);
        b.xdr().put_opaque(&n);
        for g in &groups {
            b.xdr().put_bool(true);
            b.xdr().put_opaque(g.as_bytes());
        }
        b.xdr().put_bool(false);
        b.xdr().put_bool(false);
        Ok(b)
    });
}

/// Register the port mapper v2 answering from `table`.
pub fn register_pmap(reg: &mut Registry, table: Vec<Mapping>) {
    let table = Arc::new(table);
    reg.register(PMAP_PROG, PMAP_V2, pproc::NULL, |_, _| Ok(Body::new()));
    for p in [pproc::SET, pproc::UNSET] {
        reg.register(PMAP_PROG, PMAP_V2, p, |_, a| {
            for _ in 0..4 {
                a.xdr.get_u32().map_err(garbage)?;
            }
            let mut b = Body::new();
            b.xdr().put_bool(false);
            Ok(b)
        });
    }
    let t = table.clone();
    reg.register(PMAP_PROG, PMAP_V2, pproc::GETPORT, move |_, a| {
        let prog = a.xdr.get_u32().map_err(garbage)?;
        let vers = a.xdr.get_u32().map_err(garbage)?;
        let prot = a.xdr.get_u32().map_err(garbage)?;
        let _port = a.xdr.get_u32().map_err(garbage)?;
        let port = t
            .iter()
            .find(|m| m.prog == prog && m.vers == vers && m.prot == prot)
            .map_or(0, |m| m.port);
        let mut b = Body::new();
        b.xdr().put_u32(port);
        Ok(b)
    });
    let t = table;
    reg.register(PMAP_PROG, PMAP_V2, pproc::DUMP, move |_, _| {
        let mut b = Body::new();
        for m in t.iter() {
            b.xdr().put_bool(true);
            b.xdr().put_u32(m.prog);
            b.xdr().put_u32(m.vers);
            b.xdr().put_u32(m.prot);
            b.xdr().put_u32(m.port);
        }
        b.xdr().put_bool(false);
        Ok(b)
    });
}

/// The port-mapper table of a dpwarp NFS server: MOUNT v3 over TCP at `mount_port`, and the
/// port mapper itself. NFS is not listed: it is served over RPC-over-RDMA only, which port
/// mapper v2 cannot name (a `proto=rdma` mount does not ask for it, RFC 8267 §6.3).
pub fn pmap_table(mount_port: u16, pmap_port: u16) -> Vec<Mapping> {
    vec![
        Mapping {
            prog: PMAP_PROG,
            vers: PMAP_V2,
            prot: IPPROTO_TCP,
            port: u32::from(pmap_port),
        },
        Mapping {
            prog: MOUNT_PROG,
            vers: MOUNT_V3,
            prot: IPPROTO_TCP,
            port: u32::from(mount_port),
        },
    ]
}
