//! The block-storage RPC server as a library type: the block program ([`super::block`]) on an
//! RPC-over-RDMA server listening over kernel TCP or a DPDK dataplane ([`RdmaListener`]), and
//! optionally the same program over ONC RPC on kernel TCP (record marking, the baseline).
//! `dpwarp rpc-server` is [`RpcServerConfig::load`] and [`RpcTarget::start`]; a program of its
//! own builds an [`RpcServerConfig`] (or reads one) the same way:
//!
//! ```no_run
//! use dpwarp::rpc::listener::Transport;
//! use dpwarp::rpc::target::{RpcServerConfig, RpcTarget};
//!
//! # fn main() -> Result<(), String> {
//! let cfg: RpcServerConfig = toml::from_str(
//!     "listen = \"0.0.0.0:20049\"\ntransport = \"kernel\"\n[store]\nkind = \"memory\"\nsize = 1048576\n",
//! )
//! .map_err(|e| e.to_string())?;
//! let mut target = RpcTarget::start(&cfg, Transport::Kernel)?;
//! // ... until the program stops:
//! target.stop();
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::block::{self, BlockStore};
use super::config::RdmaSection;
use super::listener::{RdmaListener, Transport};
use super::program::Registry;
use super::server::RdmaServer;
use super::tcp::{self, TcpPoll, TcpServerHandle};

/// An `rpc-server` configuration file (configs/rpc-*.toml; configs/README.md lists the keys).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RpcServerConfig {
    /// RPC-over-RDMA listen address.
    pub listen: SocketAddr,
    /// "dpdk" (default) or "kernel" ([`Transport::from_config`]).
    #[serde(default = "default_transport")]
    pub transport: String,
    /// Dataplane config for transport "dpdk" (relative paths: from this file's directory).
    #[serde(default)]
    pub dataplane: Option<PathBuf>,
    /// Which port of the dataplane config serves RPC-over-RDMA.
    #[serde(default)]
    pub dataplane_port: usize,
    /// The block store.
    pub store: StoreSection,
    /// The RPC-over-RDMA server's settings.
    #[serde(default)]
    pub rdma: RdmaSection,
    /// Also serve the program over ONC RPC / kernel TCP (the baseline).
    #[serde(default)]
    pub tcp: Option<TcpSection>,
}

/// The transport servers use when their configuration does not say.
pub fn default_transport() -> String {
    "dpdk".into()
}

/// `[store]`: the block store.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// "memory" or "file".
    pub kind: String,
    /// Bytes.
    pub size: u64,
    /// Backing file for kind = "file".
    pub path: Option<PathBuf>,
}

impl StoreSection {
    /// The store this section describes (a file store's file created or extended to `size`).
    pub fn open(&self) -> Result<Arc<BlockStore>, String> {
        match self.kind.as_str() {
            "memory" => Ok(Arc::new(BlockStore::memory(self.size as usize))),
            "file" => {
                let p = self
                    .path
                    .as_ref()
                    .ok_or("store.kind = \"file\" needs store.path")?;
                BlockStore::file(p, self.size)
                    .map(Arc::new)
                    .map_err(|e| format!("{}: {e}", p.display()))
            }
            k => Err(format!("store.kind {k:?}: expected \"memory\" or \"file\"")),
        }
    }
}

/// `[tcp]`: the program over ONC RPC on kernel TCP as well.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TcpSection {
    /// Its listen address.
    pub listen: SocketAddr,
    /// How each connection's thread waits on its socket: "blocking" (default) or "busy"
    /// (spinning on a non-blocking socket, a core per connection: the busy-polled baseline).
    #[serde(default)]
    pub poll: TcpPoll,
}

impl RpcServerConfig {
    /// Read and check a configuration file.
    pub fn load(path: &Path) -> Result<RpcServerConfig, String> {
        crate::rpc::config::load_server_file(path, |c: &RpcServerConfig| &c.rdma)
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
}

/// A running block-storage RPC server.
pub struct RpcTarget {
    /// The block store served.
    pub store: Arc<BlockStore>,
    /// The RPC-over-RDMA server (its counters: [`RdmaServer::stats`]).
    pub server: RdmaServer,
    /// Its listener.
    pub listener: RdmaListener,
    /// The ONC RPC / TCP server, if configured.
    pub tcp: Option<TcpServerHandle>,
}

impl RpcTarget {
    /// Open the store, register the block program and listen as `cfg` says, over `transport`.
    pub fn start(cfg: &RpcServerConfig, transport: Transport) -> Result<RpcTarget, String> {
        let store = cfg.store.open()?;
        let mut reg = Registry::new();
        block::register(&mut reg, store.clone());
        let server = RdmaServer::new(
            reg.clone(),
            transport.server_config(cfg.rdma.server_config()),
        );
        let listener = RdmaListener::start(&server, cfg.listen, transport)?;
        let tcp = match &cfg.tcp {
            Some(t) => Some(
                tcp::serve_with(t.listen, reg, t.poll)
                    .map_err(|e| format!("listen {}: {e}", t.listen))?,
            ),
            None => None,
        };
        Ok(RpcTarget {
            store,
            server,
            listener,
            tcp,
        })
    }

    /// Stop both listeners (the dataplane, if any, stays up until the target is dropped).
    pub fn stop(&mut self) {
        self.listener.stop();
        if let Some(t) = self.tcp.take() {
            t.stop();
        }
    }
}
