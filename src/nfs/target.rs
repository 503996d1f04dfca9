//! The NFS storage target as a library type: an export with its client list and handle key,
//! the NFSv3 program on an RPC-over-RDMA server that admits only the export's clients, and
//! MOUNT v3 and rpcbind v2 on kernel TCP. `dpwarp nfs-server` is [`NfsServerConfig::load`],
//! [`NfsTarget::new`], [`NfsTarget::serve`] and [`NfsTarget::announce`]; a program of its own
//! embeds it the same way:
//!
//! ```no_run
//! use dpwarp::cm::Net;
//! use dpwarp::nfs::export::HandleKey;
//! use dpwarp::nfs::exports::ClientList;
//! use dpwarp::nfs::target::{NfsTarget, TargetConfig};
//!
//! # fn main() -> Result<(), String> {
//! let mut target = NfsTarget::new(TargetConfig {
//!     clients: ClientList::parse(&["192.0.2.0/24(rw)"])?,
//!     key: HandleKey::load_or_create("/var/lib/myapp/nfs.state".as_ref())?,
//!     ..TargetConfig::new("/srv/export")
//! })?;
//! // NFS over RPC-over-RDMA on kernel TCP (or `Net::from` a DPDK dataplane endpoint).
//! let nfs = target
//!     .listen(&Net::kernel(), "0.0.0.0:20049".parse().unwrap())
//!     .map_err(|e| e.to_string())?;
//! // Then MOUNT and rpcbind, where clients find it.
//! target.announce()?;
//! // ... until the program stops:
//! nfs.stop();
//! target.stop();
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::export::{Export, HandleKey};
use super::exports::ClientList;
use super::{mount, procs};
use crate::cm::Net;
use crate::rpc::config::RdmaSection;
use crate::rpc::listener::{RdmaListener, Transport};
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
    /// How long attributes of a file answered at once may be used again while nothing changes
    /// through the export ([`Export::set_attr_cache`]; zero, the default: never).
    pub attr_cache: std::time::Duration,
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
            attr_cache: std::time::Duration::ZERO,
        }
    }
}

/// An NFS target: its export and RPC-over-RDMA server, NFS ready to [`NfsTarget::listen`] or
/// [`NfsTarget::serve`], MOUNT and rpcbind once [`NfsTarget::announce`]d.
pub struct NfsTarget {
    /// The export (its client list, handles, file-system operations).
    pub export: Arc<Export>,
    /// The RPC-over-RDMA server carrying NFSv3; it admits only the export's clients.
    pub server: RdmaServer,
    /// MOUNT v3 over TCP, once announced.
    pub mount: Option<TcpServerHandle>,
    /// rpcbind v2 over TCP, once announced, if served.
    pub rpcbind: Option<TcpServerHandle>,
    name: String,
    mount_listen: SocketAddr,
    rpcbind_listen: Option<SocketAddr>,
}

impl NfsTarget {
    /// Open the export and build its RPC-over-RDMA server; nothing listens yet. Fails with a
    /// message naming the problem: an empty client list, an export that is `/` or a symlink, a
    /// file system without usable handles, not root.
    pub fn new(cfg: TargetConfig) -> Result<NfsTarget, String> {
        if cfg.clients.is_empty() {
            return Err("no clients: nobody could use the export (docs/nfs.md \"Exports\")".into());
        }
        let mut export = Export::new(&cfg.export, cfg.key, cfg.clients)?;
        export.set_attr_cache(cfg.attr_cache);
        let export = Arc::new(export);
        let mut reg = Registry::new();
        procs::register(&mut reg, export.clone());
        let mut scfg = cfg.server;
        // An RDMA connection from a host the client list does not name is rejected in MPA.
        let ex = export.clone();
        scfg.admit = Some(Admit(Arc::new(move |peer| {
            ex.clients().rule_for(peer).is_some()
        })));
        Ok(NfsTarget {
            export,
            server: RdmaServer::new(reg, scfg),
            mount: None,
            rpcbind: None,
            name: cfg.name,
            mount_listen: cfg.mount_listen,
            rpcbind_listen: cfg.rpcbind_listen,
        })
    }

    /// Start MOUNT (and rpcbind): call it once NFS listens. A client finds the target through
    /// them (rpcbind names MOUNT's port, MNT gives the root handle, then it connects to NFS),
    /// so a client that mounts while the target starts never meets a closed NFS port; knfsd
    /// likewise registers with rpcbind after its sockets are up. Fails on a port in use.
    pub fn announce(&mut self) -> Result<(), String> {
        if self.mount.is_some() {
            return Ok(());
        }
        let mut mreg = Registry::new();
        mount::register_mount(&mut mreg, self.export.clone(), &self.name);
        let m = tcp::serve(self.mount_listen, mreg)
            .map_err(|e| format!("mount listen {}: {e}", self.mount_listen))?;
        if let Some(at) = self.rpcbind_listen {
            let mut preg = Registry::new();
            mount::register_pmap(&mut preg, mount::pmap_table(m.addr.port(), at.port()));
            match tcp::serve(at, preg) {
                Ok(p) => self.rpcbind = Some(p),
                Err(e) => {
                    m.stop();
                    return Err(format!("rpcbind listen {at}: {e}"));
                }
            }
        }
        self.mount = Some(m);
        Ok(())
    }

    /// MOUNT's address, once announced.
    pub fn mount_addr(&self) -> Option<SocketAddr> {
        self.mount.as_ref().map(|m| m.addr)
    }

    /// Serve NFS over RPC-over-RDMA on `net` at `addr` (RFC 8267 §6.3's port is 20049) until
    /// the handle is stopped ([`RdmaServer::listen`]).
    pub fn listen(&self, net: &Net, addr: SocketAddr) -> Result<ServerHandle, RpcError> {
        self.server.listen(net, addr)
    }

    /// Serve NFS over RPC-over-RDMA at `addr` over `transport` (a DPDK dataplane is started
    /// and owned by the returned listener); build the target's `server` settings with
    /// [`Transport::server_config`] for the same transport.
    pub fn serve(&self, addr: SocketAddr, transport: Transport) -> Result<RdmaListener, String> {
        RdmaListener::start(&self.server, addr, transport)
    }

    /// Stop MOUNT and rpcbind (stop the handles [`NfsTarget::listen`] gave first).
    pub fn stop(self) {
        if let Some(p) = self.rpcbind {
            p.stop();
        }
        if let Some(m) = self.mount {
            m.stop();
        }
    }
}

/// An `nfs-server` configuration file (configs/nfs-server.toml; docs/nfs.md lists the keys).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct NfsServerConfig {
    /// The host directory to export.
    pub export: PathBuf,
    /// The path clients mount (`server:NAME`); default: the export's own path.
    #[serde(default)]
    pub name: Option<String>,
    /// Refuse every change (NFS3ERR_ROFS) whatever the client entries say.
    #[serde(default)]
    pub read_only: bool,
    /// Who may mount and use the export, as exports(5) writes it:
    /// `["192.0.2.0/24(rw,no_root_squash)", "*(ro)"]` ([`super::exports`]). Required.
    #[serde(default)]
    pub clients: Option<Vec<String>>,
    /// The state file holding the handle key (made 0600 on first start; docs/nfs.md).
    #[serde(default = "default_state_file")]
    pub state_file: PathBuf,
    /// Milliseconds the attributes of a file answered at once may be used again while
    /// nothing changes through the export (0, the default: never; docs/nfs.md).
    #[serde(default)]
    pub attr_cache_ms: u64,
    /// RPC-over-RDMA listen address (NFS; RFC 8267 §6.3: port 20049).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// "kernel" (default) or "dpdk" ([`Transport::from_config`]).
    #[serde(default = "default_transport")]
    pub transport: String,
    /// Dataplane config for transport "dpdk" (relative paths: from this file's directory).
    #[serde(default)]
    pub dataplane: Option<PathBuf>,
    /// Which port of the dataplane config serves NFS.
    #[serde(default)]
    pub dataplane_port: usize,
    /// MOUNT v3 over TCP.
    #[serde(default)]
    pub mount: MountSection,
    /// rpcbind v2 over TCP (`enabled = false` to run without it, e.g. next to a system rpcbind).
    #[serde(default)]
    pub rpcbind: RpcbindSection,
    /// RPC-over-RDMA settings (the keys of rpc-server's `[rdma]`: credits, inline sizes, ...).
    #[serde(default)]
    pub rdma: RdmaSection,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], super::NFS_RDMA_PORT))
}

fn default_state_file() -> PathBuf {
    PathBuf::from("/var/lib/dpwarp/nfs-server.state")
}

fn default_transport() -> String {
    "kernel".into()
}

/// `[mount]`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct MountSection {
    /// MOUNT v3's TCP listen address (default port 20048).
    pub listen: SocketAddr,
}

impl Default for MountSection {
    fn default() -> Self {
        MountSection {
            listen: SocketAddr::from(([0, 0, 0, 0], 20048)),
        }
    }
}

/// `[rpcbind]`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct RpcbindSection {
    /// Serve rpcbind v2 (default true).
    pub enabled: bool,
    /// Its TCP listen address (default port 111).
    pub listen: SocketAddr,
}

impl Default for RpcbindSection {
    fn default() -> Self {
        RpcbindSection {
            enabled: true,
            listen: SocketAddr::from(([0, 0, 0, 0], 111)),
        }
    }
}

impl NfsServerConfig {
    /// Read and check a configuration file.
    pub fn load(path: &Path) -> Result<NfsServerConfig, String> {
        crate::rpc::config::load_server_file(path, |c: &NfsServerConfig| &c.rdma)
    }

    /// The transport this file names, its `dataplane` resolved against `path` (the file's
    /// own path) unless `over` (a command line's) is given.
    pub fn transport(&self, path: &Path, over: Option<&Path>) -> Result<Transport, String> {
        Transport::from_config(
            &self.transport,
            path,
            over,
            self.dataplane.as_deref(),
            self.dataplane_port,
        )
    }

    /// The target this file describes for `transport` (`path`: the file's own path, against
    /// which a relative `state_file` is resolved): the client list parsed, the handle key
    /// loaded from the state file or created in it.
    pub fn target_config(
        &self,
        path: &Path,
        transport: &Transport,
    ) -> Result<TargetConfig, String> {
        let Some(entries) = &self.clients else {
            return Err(format!(
                "{}: no `clients`: say which hosts may use the export, as in exports(5), e.g. \
                 clients = [\"192.0.2.0/24(rw)\"] (docs/nfs.md \"Exports\")",
                path.display()
            ));
        };
        let mut clients =
            ClientList::parse(entries).map_err(|e| format!("{}: {e}", path.display()))?;
        if self.read_only {
            clients.set_read_only();
        }
        let state = if self.state_file.is_relative() {
            path.parent()
                .unwrap_or(Path::new("."))
                .join(&self.state_file)
        } else {
            self.state_file.clone()
        };
        Ok(TargetConfig {
            export: self.export.clone(),
            name: self
                .name
                .clone()
                .unwrap_or_else(|| self.export.to_string_lossy().into_owned()),
            clients,
            key: HandleKey::load_or_create(&state)?,
            mount_listen: self.mount.listen,
            rpcbind_listen: self.rpcbind.enabled.then_some(self.rpcbind.listen),
            server: transport.server_config(self.rdma.server_config()),
            attr_cache: std::time::Duration::from_millis(self.attr_cache_ms),
        })
    }
}
