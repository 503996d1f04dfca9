//! Where an RPC-over-RDMA server listens: iWARP over kernel TCP, or over a DPDK dataplane this
//! listener starts and owns (its workers then serve each connection to completion, blocking
//! procedures going to the server's handler pool). The one place both servers (`rpc-server`,
//! `nfs-server`, or a program embedding [`super::target::RpcTarget`] or
//! [`crate::nfs::target::NfsTarget`]) pick a transport.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::server::{RdmaServer, ServerConfig, ServerHandle};
use crate::cm::Net;
use crate::config::{parse_cidr, DataplaneConfig};
#[cfg(feature = "dpdk")]
use crate::dataplane::{Dataplane, WorkerMode};

/// The transport of an RPC-over-RDMA listener.
#[derive(Debug, Clone)]
pub enum Transport {
    /// iWARP over the kernel's TCP.
    Kernel,
    /// iWARP over a DPDK dataplane the listener starts.
    Dpdk {
        /// The dataplane's configuration.
        dataplane: Box<DataplaneConfig>,
        /// Which of its `[[port]]`s (the listener takes its address).
        port: usize,
        /// Where the configuration was read from (named in messages).
        source: PathBuf,
    },
}

impl Transport {
    /// The transport a server configuration file names: `kind` ("dpdk" or "kernel"), for
    /// "dpdk" the dataplane config `over` (a command line's, as given) or else `file` (the
    /// configuration's `dataplane`, relative to the directory of `config`), loaded and checked
    /// here so a typo is reported before anything starts.
    pub fn from_config(
        kind: &str,
        config: &Path,
        over: Option<&Path>,
        file: Option<&Path>,
        port: usize,
    ) -> Result<Transport, String> {
        match kind {
            "kernel" if over.is_some() => Err("--dataplane is for transport dpdk".into()),
            "kernel" => Ok(Transport::Kernel),
            "dpdk" => {
                let source = match (over, file) {
                    (Some(p), _) => p.to_path_buf(),
                    (None, Some(p)) if p.is_relative() => config
                        .parent()
                        .map(|d| d.join(p))
                        .unwrap_or_else(|| p.to_path_buf()),
                    (None, Some(p)) => p.to_path_buf(),
                    (None, None) => {
                        return Err(format!(
                            "{}: transport \"dpdk\" (the default) needs a dataplane config: set \
                             `dataplane = \"FILE\"` (e.g. net_memif_server.toml, see \
                             configs/rpc-dpdk-memif-server.toml) or pass --dataplane FILE; or \
                             use transport = \"kernel\" / --transport kernel for iWARP over \
                             kernel TCP",
                            config.display()
                        ))
                    }
                };
                let dataplane = Box::new(DataplaneConfig::load(&source)?);
                if port >= dataplane.ports.len() {
                    return Err(format!("{}: no port {port}", source.display()));
                }
                Ok(Transport::Dpdk {
                    dataplane,
                    port,
                    source,
                })
            }
            t => Err(format!("transport {t:?}: expected \"dpdk\" or \"kernel\"")),
        }
    }

    /// `server` adjusted to this transport: over DPDK the dataplane config's `[tcp]`
    /// `mpa_timeout_ms` / `max_startups` apply, unless the server takes MPA Rev 0 Requests
    /// (RFC 5044 App. C), which only its own listen settings can say.
    pub fn server_config(&self, mut server: ServerConfig) -> ServerConfig {
        if matches!(self, Transport::Dpdk { .. })
            && !server
                .listen
                .as_ref()
                .is_some_and(|l| l.mpa_rev0_permissive)
        {
            server.listen = None;
        }
        server
    }
}

/// A running RPC-over-RDMA listener; dropping it stops the dataplane it started, if any.
pub struct RdmaListener {
    handle: Option<ServerHandle>,
    addr: SocketAddr,
    how: String,
    #[cfg(feature = "dpdk")]
    dataplane: Option<Dataplane>,
}

impl RdmaListener {
    /// Start `server` listening on `listen` over `transport`. Over DPDK, `listen` must be the
    /// address of the dataplane's port (or unspecified, meaning that address).
    pub fn start(
        server: &RdmaServer,
        listen: SocketAddr,
        transport: Transport,
    ) -> Result<RdmaListener, String> {
        match transport {
            Transport::Kernel => {
                let handle = server
                    .listen(&Net::kernel(), listen)
                    .map_err(|e| format!("listen {listen}: {e}"))?;
                Ok(RdmaListener {
                    addr: handle.addr,
                    handle: Some(handle),
                    how: "iWARP over kernel TCP".to_string(),
                    #[cfg(feature = "dpdk")]
                    dataplane: None,
                })
            }
            Transport::Dpdk {
                dataplane,
                port,
                source,
            } => {
                let pc = dataplane
                    .ports
                    .get(port)
                    .ok_or_else(|| format!("{}: no port {port}", source.display()))?;
                let (ip, _) =
                    parse_cidr(&pc.ip).map_err(|e| format!("{}: {e}", source.display()))?;
                match listen {
                    SocketAddr::V4(v4) if v4.ip().is_unspecified() || *v4.ip() == ip => {}
                    l => {
                        return Err(format!(
                            "listen {l}: not the address of dataplane port {port} ({ip}) in {}",
                            source.display()
                        ))
                    }
                }
                Self::start_dpdk(server, listen, &dataplane, port, &source, &pc.device)
            }
        }
    }

    #[cfg(feature = "dpdk")]
    fn start_dpdk(
        server: &RdmaServer,
        listen: SocketAddr,
        dataplane: &DataplaneConfig,
        port: usize,
        source: &Path,
        device: &str,
    ) -> Result<RdmaListener, String> {
        // Run to completion: the server's reactors drive the port's workers and serve each
        // connection on its worker's thread (blocking procedures go to the handler pool).
        let dp = Dataplane::start_with(dataplane, WorkerMode::Driven)
            .map_err(|e| format!("{}: {e}", source.display()))?;
        let ep = dp
            .endpoint(port)
            .ok_or_else(|| format!("{}: no port {port}", source.display()))?;
        let addr = SocketAddr::from((ep.ip(), listen.port()));
        let handle = server
            .listen(&Net::from(ep), addr)
            .map_err(|e| format!("listen {listen} on the dataplane: {e}"))?;
        Ok(RdmaListener {
            addr: handle.addr,
            handle: Some(handle),
            how: format!(
                "iWARP over the DPDK dataplane, {device} of {}, served to completion on its workers",
                source.display()
            ),
            dataplane: Some(dp),
        })
    }

    #[cfg(not(feature = "dpdk"))]
    fn start_dpdk(
        _server: &RdmaServer,
        _listen: SocketAddr,
        _dataplane: &DataplaneConfig,
        _port: usize,
        _source: &Path,
        _device: &str,
    ) -> Result<RdmaListener, String> {
        Err(
            "transport dpdk: this dpwarp was built without the dpdk feature (rebuild with \
             default features and libdpdk installed), or use transport kernel"
                .into(),
        )
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How it listens, for a start-up line ("iWARP over kernel TCP", ...).
    pub fn describe(&self) -> &str {
        &self.how
    }

    /// The dataplane it started (transport DPDK), for its counters.
    #[cfg(feature = "dpdk")]
    pub fn dataplane(&self) -> Option<&Dataplane> {
        self.dataplane.as_ref()
    }

    /// Stop accepting and close the listener's connections ([`ServerHandle::stop`]); the
    /// dataplane, if any, stays up until the listener is dropped (its counters stay readable).
    pub fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}
