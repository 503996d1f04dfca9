//! `dpwarp nfs-server`: an NFSv3 target over RPC-over-RDMA serving a host directory, with
//! MOUNT v3 and the rpcbind v2 port mapper over ONC RPC/TCP (configs/nfs-server.toml,
//! docs/nfs.md). The RPC-over-RDMA transport (kernel TCP or the DPDK dataplane) is chosen by
//! [`crate::rpc_server::listen_rdma`], shared with `rpc-server`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::rpc_server::{check_transport, dataplane_path, listen_rdma, RdmaConfig};
use dpwarp::config::DataplaneConfig;
use dpwarp::nfs::export::HandleKey;
use dpwarp::nfs::exports::ClientList;
use dpwarp::nfs::target::{NfsTarget, TargetConfig};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// TOML configuration (see configs/nfs-server.toml).
    #[arg(long)]
    config: PathBuf,
    /// Override the exported host directory.
    #[arg(long)]
    export: Option<PathBuf>,
    /// Override the RPC-over-RDMA (NFS) listen address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Override the transport: dpdk (the DPDK dataplane) or kernel (iWARP over kernel TCP).
    #[arg(long, value_enum)]
    transport: Option<crate::cli::TransportArg>,
    /// Override the dataplane config (a configs/net_*.toml file) for transport dpdk.
    #[arg(long)]
    dataplane: Option<PathBuf>,
    /// Override the MOUNT listen address.
    #[arg(long)]
    mount_listen: Option<SocketAddr>,
    /// Override the rpcbind listen address.
    #[arg(long)]
    rpcbind_listen: Option<SocketAddr>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    duration: Option<u64>,
    #[command(flatten)]
    pub verbosity: crate::cli::Verbosity,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The host directory to export.
    pub export: PathBuf,
    /// The path clients mount (`server:NAME`); default: the export's own path.
    #[serde(default)]
    pub name: Option<String>,
    /// Refuse every change (NFS3ERR_ROFS) whatever the client entries say.
    #[serde(default)]
    pub read_only: bool,
    /// Who may mount and use the export, as exports(5) writes it:
    /// `["192.0.2.0/24(rw,no_root_squash)", "*(ro)"]` (dpwarp::nfs::exports). Required.
    #[serde(default)]
    pub clients: Option<Vec<String>>,
    /// The state file holding the handle key (made 0600 on first start; docs/nfs.md).
    #[serde(default = "default_state_file")]
    pub state_file: PathBuf,
    /// RPC-over-RDMA listen address (NFS; RFC 8267 §6.3: port 20049).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// "kernel" or "dpdk" (default "kernel").
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
    pub mount: MountConfig,
    /// rpcbind v2 over TCP (`enabled = false` to run without it, e.g. next to a system rpcbind).
    #[serde(default)]
    pub rpcbind: RpcbindConfig,
    /// RPC-over-RDMA settings (the keys of rpc-server's `[rdma]`: credits, inline sizes, ...).
    #[serde(default)]
    pub rdma: RdmaConfig,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], dpwarp::nfs::NFS_RDMA_PORT))
}

fn default_state_file() -> PathBuf {
    PathBuf::from("/var/lib/dpwarp/nfs-server.state")
}

fn default_transport() -> String {
    "kernel".into()
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct MountConfig {
    pub listen: SocketAddr,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 20048)),
        }
    }
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct RpcbindConfig {
    pub enabled: bool,
    pub listen: SocketAddr,
}

impl Default for RpcbindConfig {
    fn default() -> Self {
        RpcbindConfig {
            enabled: true,
            listen: SocketAddr::from(([0, 0, 0, 0], 111)),
        }
    }
}

pub fn load(path: &PathBuf) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(a: Args) -> Result<(), String> {
    let mut cfg = load(&a.config)?;
    if let Some(e) = &a.export {
        cfg.export = e.clone();
    }
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
    if let Some(t) = a.transport {
        cfg.transport = t.name().into();
    }
    if let Some(l) = a.mount_listen {
        cfg.mount.listen = l;
    }
    if let Some(l) = a.rpcbind_listen {
        cfg.rpcbind.listen = l;
    }
    check_transport(&cfg.transport)?;
    if cfg.transport == "kernel" && a.dataplane.is_some() {
        return Err("--dataplane is for transport dpdk".into());
    }
    let dpcfg = if cfg.transport == "dpdk" {
        let path = dataplane_path(&a.config, a.dataplane.as_ref(), cfg.dataplane.as_ref())?;
        let dc = DataplaneConfig::load(&path)?;
        Some((path, dc))
    } else {
        None
    };
    let Some(entries) = &cfg.clients else {
        return Err(format!(
            "{}: no `clients`: say which hosts may use the export, as in exports(5), e.g. \
             clients = [\"192.0.2.0/24(rw)\"] (docs/nfs.md \"Exports\")",
            a.config.display()
        ));
    };
    let mut clients =
        ClientList::parse(entries).map_err(|e| format!("{}: {e}", a.config.display()))?;
    if cfg.read_only {
        clients.set_read_only();
    }
    let state = if cfg.state_file.is_relative() {
        a.config
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join(&cfg.state_file)
    } else {
        cfg.state_file.clone()
    };
    let name = cfg
        .name
        .clone()
        .unwrap_or_else(|| cfg.export.to_string_lossy().into_owned());
    let target = NfsTarget::start(TargetConfig {
        export: cfg.export.clone(),
        name: name.clone(),
        clients,
        key: HandleKey::load_or_create(&state)?,
        mount_listen: cfg.mount.listen,
        rpcbind_listen: cfg.rpcbind.enabled.then_some(cfg.rpcbind.listen),
        server: cfg.rdma.server_config(),
    })
    .map_err(|e| format!("{}: {e}", a.config.display()))?;
    for r in target.export.clients().rules() {
        log::info!("nfs-server: client entry {}", r.text);
    }
    let server = &target.server;
    let l = listen_rdma(server, cfg.listen, dpcfg, cfg.dataplane_port)?;
    println!(
        "nfs-server: NFSv3 over RPC-over-RDMA ({}) on {}, export {} as {:?}{}",
        l.how,
        l.handle.addr,
        cfg.export.display(),
        name,
        if cfg.read_only { " (read-only)" } else { "" }
    );
    println!("nfs-server: MOUNT v3 over TCP on {}", target.mount.addr);
    if let Some(p) = &target.rpcbind {
        println!("nfs-server: rpcbind v2 over TCP on {}", p.addr);
    }
    if let Some(sig) = crate::rpc_server::serve_until(a.duration)? {
        println!("nfs-server: {sig}: stopping");
    }
    l.handle.stop();
    crate::rpc_server::log_server_stats("nfs-server", server);
    let dp = l._dp;
    target.stop();
    if let Some(dp) = &dp {
        crate::net::log_device_stats(dp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_parses() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs");
        let c = load(&root.join("nfs-server.toml")).unwrap();
        assert_eq!(c.listen.port(), 20049);
        assert_eq!(c.transport, "kernel");
        assert_eq!(c.rpcbind.listen.port(), 111);
        assert!(c.rpcbind.enabled);
        assert_eq!(c.rdma.server_config().max_credits, 128);
        assert!(toml::from_str::<FileConfig>("export = \"/x\"\nbogus = 1\n").is_err());
        let d = toml::from_str::<FileConfig>("export = \"/x\"\n").unwrap();
        assert_eq!((d.listen.port(), d.mount.listen.port()), (20049, 20048));
        // A section with only some keys takes the defaults for the rest.
        let p = toml::from_str::<FileConfig>(
            "export = \"/x\"\n[rpcbind]\nlisten = \"127.0.0.1:1111\"\n",
        )
        .unwrap();
        assert!(p.rpcbind.enabled);
        assert_eq!(p.rpcbind.listen.port(), 1111);
    }
}
