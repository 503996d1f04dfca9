//! The NFS storage target as a library type: an export with its client list and handle key,
//! the NFSv3 program on an RPC-over-RDMA server that admits only the export's clients, and
//! MOUNT v3 and rpcbind v2 on kernel TCP. `dpwarp nfs-server` is this plus a configuration file;
//! a program of its own embeds it the same way:
//!
//! ```no_run
//! use dpwarp::cm::Net;
//! use dpwarp::nfs::export::HandleKey;
//! use dpwarp::nfs::exports::ClientList;
//! use dpwarp::nfs::target::{NfsTarget, TargetConfig};
//!
//! # fn main() -> Result<(), String> {
//! let target = NfsTarget::start(TargetConfig {
//!     clients: ClientList::parse(&["192.0.2.0/24(rw)"])?,
//!     key: HandleKey::load_or_create("/var/lib/myapp/nfs.state".as_ref())?,
//!     ..TargetConfig::new("/srv/export")
//! })?;
//! // NFS over RPC-over-RDMA on kernel TCP (or `Net::from` a DPDK dataplane endpoint).
//! let nfs = target
//!     .listen(&Net::kernel(), "0.0.0.0:20049".parse().unwrap())
//!     .map_err(|e| e.to_string())?;
//! // ... until the program stops:
//! nfs.stop();
//! target.stop();
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::export::{Export, HandleKey};
use super::exports::ClientList;
use super::{mount, procs};
use crate::cm::Net;
use crate::rpc::program::Registry;
use crate::rpc::server::{Admit, RdmaServer, ServerConfig, ServerHandle};
use crate::rpc::tcp::{self, TcpServerHandle};
use crate::rpc::RpcError;

/// What an [`NfsTarget`] serves and where.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// The host directory exported (not `/`, not a symlink).
    pub export: PathBuf,
    /// The path clients mount (MOUNT MNT); [`TargetConfig::new`] makes it the export's path.
    pub name: String,
    /// Who may use the export, and as whom ([`super::exports`]).
    pub clients: ClientList,
    /// The key of the file handles' MAC ([`HandleKey::load_or_create`] keeps it across
    /// restarts, so clients' handles survive them).
    pub key: HandleKey,
    /// MOUNT v3 over TCP.
    pub mount_listen: SocketAddr,
    /// rpcbind v2 over TCP (`None`: not served, e.g. next to a system rpcbind).
    pub rpcbind_listen: Option<SocketAddr>,
    /// The RPC-over-RDMA server's settings (credits, inline sizes, IRD/ORD, CRC, handler
    /// threads; from a configuration's `[rdma]`: [`crate::rpc::config::RdmaSection`]); its
    /// `admit` is set to the client list.
    pub server: ServerConfig,
}

impl TargetConfig {
    /// `export` under its own path, open to nobody until `clients` says otherwise, with a fresh
    /// random key (handles then die with the process: set `key` from a state file), MOUNT on
    /// port 20048 and rpcbind on 111 of every address, the RPC server's defaults.
    pub fn new(export: impl Into<PathBuf>) -> TargetConfig {
        let export = export.into();
        TargetConfig {
            name: export.to_string_lossy().into_owned(),
            export,
            clients: ClientList::default(),
            key: HandleKey::random(),
            mount_listen: SocketAddr::from(([0, 0, 0, 0], 20048)),
            rpcbind_listen: Some(SocketAddr::from(([0, 0, 0, 0], 111))),
            server: ServerConfig::default(),
        }
    }
}

/// A running NFS target: MOUNT and rpcbind listening, NFS ready to [`NfsTarget::listen`].
pub struct NfsTarget {
    /// The export (its client list, handles, file-system operations).
    pub export: Arc<Export>,
    /// The RPC-over-RDMA server carrying NFSv3; it admits only the export's clients.
    pub server: RdmaServer,
    /// MOUNT v3 over TCP.
    pub mount: TcpServerHandle,
    /// rpcbind v2 over TCP, if served.
    pub rpcbind: Option<TcpServerHandle>,
}

impl NfsTarget {
    /// Open the export and start MOUNT (and rpcbind). Fails with a message naming the problem:
    /// an empty client list, an export that is `/` or a symlink, a file system without usable
    /// handles, not root, a port in use.
    pub fn start(cfg: TargetConfig) -> Result<NfsTarget, String> {
        if cfg.clients.is_empty() {
            return Err("no clients: nobody could use the export (docs/nfs.md \"Exports\")".into());
        }
        let export = Arc::new(Export::new(&cfg.export, cfg.key, cfg.clients)?);
        let mut reg = Registry::new();
        procs::register(&mut reg, export.clone());
        let mut scfg = cfg.server;
        // An RDMA connection from a host the client list does not name is rejected in MPA.
        let ex = export.clone();
        scfg.admit = Some(Admit(Arc::new(move |peer| {
            ex.clients().rule_for(peer).is_some()
        })));
        let server = RdmaServer::new(reg, scfg);
        let mut mreg = Registry::new();
        mount::register_mount(&mut mreg, export.clone(), &cfg.name);
        let mount = tcp::serve(cfg.mount_listen, mreg)
            .map_err(|e| format!("mount listen {}: {e}", cfg.mount_listen))?;
        let rpcbind = match cfg.rpcbind_listen {
            Some(at) => {
                let mut preg = Registry::new();
                mount::register_pmap(&mut preg, mount::pmap_table(mount.addr.port(), at.port()));
                Some(tcp::serve(at, preg).map_err(|e| format!("rpcbind listen {at}: {e}"))?)
            }
            None => None,
        };
        Ok(NfsTarget {
            export,
            server,
            mount,
            rpcbind,
        })
    }

    /// Serve NFS over RPC-over-RDMA on `net` at `addr` (RFC 8267 §6.3's port is 20049) until
    /// the handle is stopped ([`RdmaServer::listen`]).
    pub fn listen(&self, net: &Net, addr: SocketAddr) -> Result<ServerHandle, RpcError> {
        self.server.listen(net, addr)
    }

    /// Stop MOUNT and rpcbind (stop the handles [`NfsTarget::listen`] gave first).
    pub fn stop(self) {
        self.mount.stop();
        if let Some(p) = self.rpcbind {
            p.stop();
        }
    }
}
