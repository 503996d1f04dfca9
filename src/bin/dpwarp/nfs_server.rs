//! `dpwarp nfs-server`: an NFSv3 target over RPC-over-RDMA serving a host directory, with
//! MOUNT v3 and the rpcbind v2 port mapper over ONC RPC/TCP (configs/nfs-server.toml,
//! docs/nfs.md): `dpwarp::nfs::target` configured from a file and the command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use dpwarp::nfs::target::{NfsServerConfig, NfsTarget};

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

pub fn run(a: Args) -> Result<(), String> {
    let mut cfg = NfsServerConfig::load(&a.config)?;
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
    let transport = cfg.transport(&a.config, a.dataplane.as_deref())?;
    let tc = cfg.target_config(&a.config, &transport)?;
    let name = tc.name.clone();
    let mut target = NfsTarget::new(tc).map_err(|e| format!("{}: {e}", a.config.display()))?;
    for r in target.export.clients().rules() {
        log::info!("nfs-server: client entry {}", r.text);
    }
    let mut l = target.serve(cfg.listen, transport)?;
    // MOUNT and rpcbind only once NFS listens: they are how a client finds it.
    target.announce()?;
    println!(
        "nfs-server: NFSv3 over RPC-over-RDMA ({}) on {}, export {} as {:?}{}",
        l.describe(),
        l.addr(),
        cfg.export.display(),
        name,
        if cfg.read_only { " (read-only)" } else { "" }
    );
    if let Some(m) = target.mount_addr() {
        println!("nfs-server: MOUNT v3 over TCP on {m}");
    }
    if let Some(p) = &target.rpcbind {
        println!("nfs-server: rpcbind v2 over TCP on {}", p.addr);
    }
    if let Some(sig) = crate::rpc_server::serve_until(a.duration)? {
        println!("nfs-server: {sig}: stopping");
    }
    l.stop();
    crate::rpc_server::log_server_stats("nfs-server", &target.server);
    target.stop();
    crate::rpc_server::log_listener_stats(&l);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_parses() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs");
        let c = NfsServerConfig::load(&root.join("nfs-server.toml")).unwrap();
        assert_eq!(c.listen.port(), 20049);
        assert_eq!(c.transport, "kernel");
        assert_eq!(c.rpcbind.listen.port(), 111);
        assert!(c.rpcbind.enabled);
        assert_eq!(c.rdma.server_config().max_credits, 128);
        assert!(toml::from_str::<NfsServerConfig>("export = \"/x\"\nbogus = 1\n").is_err());
        let d = toml::from_str::<NfsServerConfig>("export = \"/x\"\n").unwrap();
        assert_eq!((d.listen.port(), d.mount.listen.port()), (20049, 20048));
        assert_eq!(d.attr_cache_ms, 0, "no attribute cache unless asked");
        let t = toml::from_str::<NfsServerConfig>(
            "export = \"/x\"\nclients = [\"*\"]\nattr_cache_ms = 5\nstate_file = \"st\"\n",
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("dpwarp-nfs-acfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tc = t.target_config(
            &dir.join("x.toml"),
            &dpwarp::rpc::listener::Transport::Kernel,
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(tc.unwrap().attr_cache, std::time::Duration::from_millis(5));
        // A section with only some keys takes the defaults for the rest.
        let p = toml::from_str::<NfsServerConfig>(
            "export = \"/x\"\n[rpcbind]\nlisten = \"127.0.0.1:1111\"\n",
        )
        .unwrap();
        assert!(p.rpcbind.enabled);
        assert_eq!(p.rpcbind.listen.port(), 1111);
    }
}
